//! Which Services the controller acts on and when: upstream's
//! `wantsLoadBalancer`, `needsCleanup` and `needsUpdate`
//! (k8s.io/cloud-provider `controllers/service/controller.go`), plus the
//! informer handlers' enqueue rules built from them.
//!
//! One deliberate difference: upstream's `wantsLoadBalancer` means "type
//! LoadBalancer and *no* `loadBalancerClass`" (the default cloud load
//! balancer). This controller is not the default cloud controller: it wants
//! the Services of *its* class ([`ClassSelector`]), and Services without a
//! class only when told to (clusters with no cloud provider). Everything
//! else, `needsCleanup` included, is upstream's.

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use protection_core::finalizer::has_finalizer;

/// `spec.type` of a Service that asks for an external load balancer.
pub const TYPE_LOAD_BALANCER: &str = "LoadBalancer";

/// Which `type: LoadBalancer` Services are ours.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassSelector {
    /// Services whose `spec.loadBalancerClass` equals this are ours.
    pub class: String,
    /// Also take Services with no `spec.loadBalancerClass` (only where no
    /// cloud provider handles them: kind, bare metal).
    pub include_unclassed: bool,
}

impl ClassSelector {
    /// Whether a Service's class is ours.
    pub fn matches(&self, class: Option<&str>) -> bool {
        match class {
            Some(c) => c == self.class,
            None => self.include_unclassed,
        }
    }
}

fn spec(svc: &Service) -> Option<&ServiceSpec> {
    svc.spec.as_ref()
}

fn type_of(svc: &Service) -> &str {
    spec(svc).and_then(|s| s.type_.as_deref()).unwrap_or("")
}

/// Upstream `wantsLoadBalancer`, with our class rule: `type: LoadBalancer`
/// and a `loadBalancerClass` that [`ClassSelector::matches`].
pub fn wants_load_balancer(svc: &Service, classes: &ClassSelector) -> bool {
    type_of(svc) == TYPE_LOAD_BALANCER
        && classes.matches(spec(svc).and_then(|s| s.load_balancer_class.as_deref()))
}

/// Upstream `needsCleanup`: the finalizer is present and the Service is
/// being deleted or is no longer `type: LoadBalancer`. Like upstream it looks
/// at the type only, never at the class.
pub fn needs_cleanup(svc: &Service, finalizer: &str) -> bool {
    if !has_finalizer(&svc.metadata, finalizer) {
        return false;
    }
    svc.metadata.deletion_timestamp.is_some() || type_of(svc) != TYPE_LOAD_BALANCER
}

// Go compares plain fields by value, so an absent field equals its zero value.
fn s(v: &Option<String>) -> &str {
    v.as_deref().unwrap_or("")
}

fn target_port_eq(a: &Option<IntOrString>, b: &Option<IntOrString>) -> bool {
    // intstr.IntOrString{} (Type Int, IntVal 0) is Go's zero value.
    let zero = IntOrString::Int(0);
    a.as_ref().unwrap_or(&zero) == b.as_ref().unwrap_or(&zero)
}

/// Upstream `portEqualForLB`.
fn port_equal_for_lb(x: &ServicePort, y: &ServicePort) -> bool {
    s(&x.name) == s(&y.name)
        && s(&x.protocol) == s(&y.protocol)
        && x.port == y.port
        && x.node_port.unwrap_or(0) == y.node_port.unwrap_or(0)
        && target_port_eq(&x.target_port, &y.target_port)
        // A *string compared with reflect.DeepEqual: nil differs from "".
        && x.app_protocol == y.app_protocol
}

/// Upstream `portsEqualForLB` (order matters).
fn ports_equal_for_lb(x: &ServiceSpec, y: &ServiceSpec) -> bool {
    let xs = x.ports.as_deref().unwrap_or_default();
    let ys = y.ports.as_deref().unwrap_or_default();
    xs.len() == ys.len() && xs.iter().zip(ys).all(|(a, b)| port_equal_for_lb(a, b))
}

/// Upstream `needsUpdate(old, new)`: whether a change between two versions of
/// a Service matters to its load balancer. Status, finalizer and label
/// changes do not.
pub fn needs_update(old: &Service, new: &Service, classes: &ClassSelector) -> bool {
    let old_wants = wants_load_balancer(old, classes);
    let new_wants = wants_load_balancer(new, classes);
    if !old_wants && !new_wants {
        return false;
    }
    if old_wants != new_wants {
        return true;
    }
    let default = ServiceSpec::default();
    let o = spec(old).unwrap_or(&default);
    let n = spec(new).unwrap_or(&default);
    // reflect.DeepEqual on the slices: nil and empty differ (the API server
    // never sends an empty list, so this cannot flap).
    if new_wants && o.load_balancer_source_ranges != n.load_balancer_source_ranges {
        return true;
    }
    if !ports_equal_for_lb(o, n) || s(&o.session_affinity) != s(&n.session_affinity) {
        return true;
    }
    if o.session_affinity_config != n.session_affinity_config {
        return true;
    }
    if s(&o.load_balancer_ip) != s(&n.load_balancer_ip) {
        return true;
    }
    let oe = o.external_ips.as_deref().unwrap_or_default();
    let ne = n.external_ips.as_deref().unwrap_or_default();
    if oe != ne {
        return true;
    }
    // reflect.DeepEqual on the maps: nil and empty differ, as upstream.
    if old.metadata.annotations != new.metadata.annotations {
        return true;
    }
    if s(&old.metadata.uid) != s(&new.metadata.uid) {
        return true;
    }
    if s(&o.external_traffic_policy) != s(&n.external_traffic_policy) {
        return true;
    }
    if o.health_check_node_port.unwrap_or(0) != n.health_check_node_port.unwrap_or(0) {
        return true;
    }
    // Only the count: families can be added or removed, never swapped.
    o.ip_families.as_ref().map_or(0, Vec::len) != n.ip_families.as_ref().map_or(0, Vec::len)
}

/// The upstream informer handlers: a Service seen for the first time
/// (`old == None`: Add) is synced if it wants a load balancer or needs
/// cleanup; an update is synced if [`needs_update`] or [`needs_cleanup`].
/// A resync (same object twice) therefore only re-drives pending cleanups.
pub fn should_sync(
    old: Option<&Service>,
    new: &Service,
    classes: &ClassSelector,
    finalizer: &str,
) -> bool {
    let changed = match old {
        None => wants_load_balancer(new, classes),
        Some(old) => needs_update(old, new, classes),
    };
    changed || needs_cleanup(new, finalizer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ClientIPConfig, SessionAffinityConfig};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    const F: &str = "service.kubernetes.io/load-balancer-cleanup";
    const CLASS: &str = "protection-manager.io/load-balancer";

    fn ours() -> ClassSelector {
        ClassSelector {
            class: CLASS.into(),
            include_unclassed: false,
        }
    }

    fn upstream_like() -> ClassSelector {
        // Upstream wants Services *without* a class.
        ClassSelector {
            class: CLASS.into(),
            include_unclassed: true,
        }
    }

    /// Upstream's `newService(name, type)` helper: one TCP port 80.
    fn svc(type_: &str) -> Service {
        Service {
            metadata: ObjectMeta {
                name: Some("external-balancer".into()),
                namespace: Some("default".into()),
                ..ObjectMeta::default()
            },
            spec: Some(ServiceSpec {
                type_: Some(type_.into()),
                ports: Some(vec![ServicePort {
                    port: 80,
                    protocol: Some("TCP".into()),
                    ..ServicePort::default()
                }]),
                ..ServiceSpec::default()
            }),
            status: None,
        }
    }

    fn with(mut s: Service, f: impl FnOnce(&mut ServiceSpec)) -> Service {
        if let Some(spec) = s.spec.as_mut() {
            f(spec);
        }
        s
    }

    fn classed(s: Service, class: Option<&str>) -> Service {
        with(s, |sp| sp.load_balancer_class = class.map(str::to_owned))
    }

    #[test]
    fn wants_load_balancer_follows_type_and_class() {
        let cases = [
            // (type, class, include_unclassed, wants)
            ("LoadBalancer", Some(CLASS), false, true),
            ("LoadBalancer", Some(CLASS), true, true),
            ("LoadBalancer", None, false, false),
            ("LoadBalancer", None, true, true),
            ("LoadBalancer", Some("cloud.example.com/nlb"), true, false),
            ("LoadBalancer", Some("cloud.example.com/nlb"), false, false),
            ("ClusterIP", Some(CLASS), true, false),
            ("NodePort", None, true, false),
            ("ExternalName", None, true, false),
        ];
        for (type_, class, include_unclassed, want) in cases {
            let sel = ClassSelector {
                class: CLASS.into(),
                include_unclassed,
            };
            assert_eq!(
                wants_load_balancer(&classed(svc(type_), class), &sel),
                want,
                "{type_} {class:?} include_unclassed={include_unclassed}"
            );
        }
        let mut no_spec = svc("LoadBalancer");
        no_spec.spec = None;
        assert!(!wants_load_balancer(&no_spec, &upstream_like()));
    }

    /// Port of upstream `TestNeedsCleanup` and the truth table in its comment:
    ///
    /// | finalizer | timestamp | wantLB | clean-up |
    /// |---|---|---|---|
    /// | 0 | * | * | false |
    /// | 1 | 0 | 0 | true |
    /// | 1 | 0 | 1 | false |
    /// | 1 | 1 | * | true |
    #[test]
    fn needs_cleanup_truth_table() {
        for finalizer in [false, true] {
            for deleting in [false, true] {
                for type_ in ["LoadBalancer", "NodePort", "ClusterIP", ""] {
                    let mut s = svc(type_);
                    if type_.is_empty() {
                        // upstream "service with finalizer with timestamp": &v1.Service{} + meta.
                        s.spec = None;
                    }
                    if finalizer {
                        s.metadata.finalizers = Some(vec![F.into()]);
                    }
                    if deleting {
                        s.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
                    }
                    let want = finalizer && (deleting || type_ != "LoadBalancer");
                    assert_eq!(
                        needs_cleanup(&s, F),
                        want,
                        "finalizer={finalizer} deleting={deleting} type={type_:?}"
                    );
                }
            }
        }
        // Another finalizer does not count.
        let mut s = svc("ClusterIP");
        s.metadata.finalizers = Some(vec!["example.com/other".into()]);
        assert!(!needs_cleanup(&s, F));
    }

    #[test]
    fn needs_cleanup_ignores_the_class_like_upstream() {
        let mut s = classed(svc("LoadBalancer"), Some("cloud.example.com/nlb"));
        s.metadata.finalizers = Some(vec![F.into()]);
        assert!(!needs_cleanup(&s, F));
        s.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
        assert!(needs_cleanup(&s, F));
    }

    /// Port of upstream `TestNeedsUpdate` (cloud-provider
    /// controllers/service/controller_test.go), every row, on Services of our
    /// class; plus the fields upstream compares but does not test.
    #[test]
    fn needs_update_table() {
        let lb = || classed(svc("LoadBalancer"), Some(CLASS));
        let port = |p: i32| ServicePort {
            port: p,
            ..ServicePort::default()
        };
        let tcp_target = |t: IntOrString| {
            with(lb(), |s| {
                s.ports = Some(vec![ServicePort {
                    port: 80,
                    protocol: Some("TCP".into()),
                    target_port: Some(t),
                    ..ServicePort::default()
                }])
            })
        };
        let app_proto = |a: &str| {
            with(lb(), |s| {
                if let Some(p) = s.ports.as_mut().and_then(|p| p.first_mut()) {
                    p.app_protocol = Some(a.into());
                }
            })
        };
        let families = |f: &[&str]| {
            with(lb(), |s| {
                s.ip_families = Some(f.iter().map(|x| x.to_string()).collect())
            })
        };
        let uid = |u: &str| {
            let mut s = lb();
            s.metadata.uid = Some(u.into());
            s
        };
        type Case = (&'static str, Service, Service, bool);
        let cases: Vec<Case> = vec![
            (
                "If the service type is changed from LoadBalancer to ClusterIP",
                lb(),
                with(lb(), |s| s.type_ = Some("ClusterIP".into())),
                true,
            ),
            (
                "If the Ports are different",
                with(lb(), |s| {
                    s.ports = Some(vec![port(8000), port(9000), port(10000)])
                }),
                with(lb(), |s| {
                    s.ports = Some(vec![port(8001), port(9001), port(10001)])
                }),
                true,
            ),
            (
                "If external ip counts are different",
                with(lb(), |s| s.external_ips = Some(vec!["old.IP.1".into()])),
                with(lb(), |s| {
                    s.external_ips = Some(vec!["new.IP.1".into(), "new.IP.2".into()])
                }),
                true,
            ),
            (
                "If external ips are different",
                with(lb(), |s| {
                    s.external_ips = Some(vec!["old.IP.1".into(), "old.IP.2".into()])
                }),
                with(lb(), |s| {
                    s.external_ips = Some(vec!["new.IP.1".into(), "new.IP.2".into()])
                }),
                true,
            ),
            ("If UID is different", uid("UID old"), uid("UID new"), true),
            (
                "If ExternalTrafficPolicy is different",
                lb(),
                with(lb(), |s| s.external_traffic_policy = Some("Local".into())),
                true,
            ),
            (
                "If HealthCheckNodePort is different",
                lb(),
                with(lb(), |s| s.health_check_node_port = Some(30123)),
                true,
            ),
            (
                "If TargetGroup is different 1",
                tcp_target(IntOrString::Int(20)),
                tcp_target(IntOrString::Int(21)),
                true,
            ),
            (
                "If TargetGroup is different 2",
                tcp_target(IntOrString::Int(22)),
                tcp_target(IntOrString::String("dns".into())),
                true,
            ),
            ("If appProtocol is the same", lb(), lb(), false),
            (
                "If service IPFamilies from single stack to dual stack",
                families(&["IPv4"]),
                families(&["IPv4", "IPv6"]),
                true,
            ),
            (
                "If service IPFamilies from dual stack to single stack",
                families(&["IPv4", "IPv6"]),
                families(&["IPv4"]),
                true,
            ),
            (
                "If service IPFamilies not change",
                families(&["IPv4"]),
                families(&["IPv4"]),
                false,
            ),
            (
                "If appProtocol is set when previously unset",
                lb(),
                app_proto("http"),
                true,
            ),
            (
                "If appProtocol is set to a different value",
                app_proto("http"),
                app_proto("tcp"),
                true,
            ),
            // Fields upstream compares without a test row.
            (
                "source ranges changed",
                lb(),
                with(lb(), |s| {
                    s.load_balancer_source_ranges = Some(vec!["10.0.0.0/8".into()])
                }),
                true,
            ),
            (
                "session affinity changed",
                lb(),
                with(lb(), |s| s.session_affinity = Some("ClientIP".into())),
                true,
            ),
            (
                "session affinity config changed",
                lb(),
                with(lb(), |s| {
                    s.session_affinity_config = Some(SessionAffinityConfig {
                        client_ip: Some(ClientIPConfig {
                            timeout_seconds: Some(60),
                        }),
                    })
                }),
                true,
            ),
            (
                "loadBalancerIP changed",
                lb(),
                with(lb(), |s| s.load_balancer_ip = Some("198.51.100.7".into())),
                true,
            ),
            (
                "annotations changed",
                lb(),
                {
                    let mut s = lb();
                    s.metadata.annotations = Some([("a".to_owned(), "b".to_owned())].into());
                    s
                },
                true,
            ),
            (
                "node port allocated",
                lb(),
                with(lb(), |s| {
                    if let Some(p) = s.ports.as_mut().and_then(|p| p.first_mut()) {
                        p.node_port = Some(30080);
                    }
                }),
                true,
            ),
            // What must not trigger a sync.
            (
                "labels, finalizers and status only",
                lb(),
                {
                    let mut s = lb();
                    s.metadata.labels = Some([("a".to_owned(), "b".to_owned())].into());
                    s.metadata.finalizers = Some(vec![F.into()]);
                    s.metadata.resource_version = Some("42".into());
                    s.status = Some(Default::default());
                    s
                },
                false,
            ),
            (
                "an unset field equals its zero value (Go)",
                with(lb(), |s| {
                    s.session_affinity = Some(String::new());
                    s.load_balancer_ip = Some(String::new());
                    s.health_check_node_port = Some(0);
                    s.external_ips = Some(vec![]);
                }),
                lb(),
                false,
            ),
            (
                "neither wants a load balancer",
                svc("ClusterIP"),
                with(svc("NodePort"), |s| {
                    s.session_affinity = Some("ClientIP".into())
                }),
                false,
            ),
            (
                "class no longer ours is a type change",
                lb(),
                classed(svc("LoadBalancer"), Some("other.example.com/lb")),
                true,
            ),
            (
                "ClusterIP to our LoadBalancer",
                svc("ClusterIP"),
                lb(),
                true,
            ),
        ];
        for (name, old, new, want) in cases {
            assert_eq!(needs_update(&old, &new, &ours()), want, "{name}");
        }
    }

    #[test]
    fn should_sync_reproduces_the_informer_handlers() {
        let lb = classed(svc("LoadBalancer"), Some(CLASS));
        let mut lb_fin = lb.clone();
        lb_fin.metadata.finalizers = Some(vec![F.into()]);
        let mut cip_fin = svc("ClusterIP");
        cip_fin.metadata.finalizers = Some(vec![F.into()]);
        let foreign = classed(svc("LoadBalancer"), Some("other.example.com/lb"));
        let sel = ours();
        // Add: wants || needsCleanup.
        assert!(should_sync(None, &lb, &sel, F));
        assert!(should_sync(None, &cip_fin, &sel, F));
        assert!(!should_sync(None, &svc("ClusterIP"), &sel, F));
        assert!(!should_sync(None, &foreign, &sel, F));
        // Resync (old == new): only pending cleanups.
        assert!(!should_sync(Some(&lb), &lb, &sel, F));
        assert!(!should_sync(Some(&lb_fin), &lb_fin, &sel, F));
        assert!(should_sync(Some(&cip_fin), &cip_fin, &sel, F));
        // Our own finalizer write does not re-trigger.
        assert!(!should_sync(Some(&lb), &lb_fin, &sel, F));
        // Deletion of a Service holding the finalizer does.
        let mut deleting = lb_fin.clone();
        deleting.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
        assert!(should_sync(Some(&lb_fin), &deleting, &sel, F));
        // A type change away from LoadBalancer does, finalizer or not.
        assert!(should_sync(Some(&lb), &svc("ClusterIP"), &sel, F));
    }
}
