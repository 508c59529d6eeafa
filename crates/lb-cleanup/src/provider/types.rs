//! What a provider is told about a Service and answers about its load
//! balancer.

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{LoadBalancerIngress, LoadBalancerStatus, Service};
use serde::Serialize;
use thiserror::Error;

/// A Service lacks what a load balancer needs.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
#[error("Service {service}: {reason}")]
pub struct SpecError {
    /// `namespace/name` of the Service.
    pub service: String,
    pub reason: String,
}

fn service_key(svc: &Service) -> String {
    format!(
        "{}/{}",
        svc.metadata.namespace.as_deref().unwrap_or(""),
        svc.metadata.name.as_deref().unwrap_or("")
    )
}

/// Upstream `cloudprovider.DefaultLoadBalancerName`: `"a"` + the UID without
/// dashes, cut to 32 bytes (GCE wants a leading letter, AWS at most 32 bytes).
pub fn default_load_balancer_name(uid: &str) -> String {
    let mut name: String = std::iter::once('a')
        .chain(uid.chars().filter(|c| *c != '-'))
        .collect();
    if name.len() > 32 {
        let mut cut = 32;
        while !name.is_char_boundary(cut) {
            cut -= 1;
        }
        name.truncate(cut);
    }
    name
}

/// Which load balancer: the Service it belongs to and the name derived from
/// its UID. Providers key load balancers by `uid`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LbRef {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// [`default_load_balancer_name`] of the UID.
    pub lb_name: String,
}

impl LbRef {
    pub fn new(
        namespace: impl Into<String>,
        name: impl Into<String>,
        uid: impl Into<String>,
    ) -> Self {
        let uid = uid.into();
        Self {
            namespace: namespace.into(),
            name: name.into(),
            lb_name: default_load_balancer_name(&uid),
            uid,
        }
    }

    /// The reference of a Service read from the API (namespace, name and UID
    /// must be set).
    pub fn from_service(svc: &Service) -> Result<Self, SpecError> {
        let err = |reason: &str| SpecError {
            service: service_key(svc),
            reason: reason.to_owned(),
        };
        let m = &svc.metadata;
        let namespace = m
            .namespace
            .as_deref()
            .filter(|s| !s.is_empty())
            .ok_or_else(|| err("has no metadata.namespace"))?;
        let name = m
            .name
            .as_deref()
            .filter(|s| !s.is_empty())
            .ok_or_else(|| err("has no metadata.name"))?;
        let uid = m
            .uid
            .as_deref()
            .filter(|s| !s.is_empty())
            .ok_or_else(|| err("has no metadata.uid"))?;
        Ok(Self::new(namespace, name, uid))
    }

    /// `namespace/name`, for logs.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// One Service port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LbPort {
    /// Empty when the Service port has no name.
    pub name: String,
    /// `TCP`, `UDP` or `SCTP` (`TCP` when the Service leaves it unset).
    pub protocol: String,
    pub port: i32,
    /// Absent when `allocateLoadBalancerNodePorts` is false.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_port: Option<i32>,
}

/// What a load balancer needs from its Service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LbSpec {
    pub ports: Vec<LbPort>,
    /// The requested address (`spec.loadBalancerIP`), if any.
    #[serde(rename = "loadBalancerIP", skip_serializing_if = "Option::is_none")]
    pub load_balancer_ip: Option<IpAddr>,
    pub load_balancer_source_ranges: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_affinity: Option<String>,
    /// `sessionAffinityConfig.clientIP.timeoutSeconds`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_affinity_timeout_seconds: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub external_traffic_policy: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health_check_node_port: Option<i32>,
    pub ip_families: Vec<String>,
    pub annotations: BTreeMap<String, String>,
}

impl LbSpec {
    /// Takes what a load balancer needs from a Service: at least one port,
    /// each with a port number from 1 to 65535, and, when set, a
    /// `loadBalancerIP` that is an IP address.
    pub fn from_service(svc: &Service) -> Result<Self, SpecError> {
        let err = |reason: String| SpecError {
            service: service_key(svc),
            reason,
        };
        let spec = svc
            .spec
            .as_ref()
            .ok_or_else(|| err("has no spec".to_owned()))?;
        let ports = spec.ports.as_deref().unwrap_or_default();
        if ports.is_empty() {
            return Err(err(
                "has no ports; a load balancer needs at least one".to_owned()
            ));
        }
        let ports = ports
            .iter()
            .enumerate()
            .map(|(i, p)| {
                if !(1..=65535).contains(&p.port) {
                    return Err(err(format!(
                        "spec.ports[{i}].port is {}; expected 1-65535",
                        p.port
                    )));
                }
                Ok(LbPort {
                    name: p.name.clone().unwrap_or_default(),
                    protocol: p.protocol.clone().unwrap_or_else(|| "TCP".to_owned()),
                    port: p.port,
                    node_port: p.node_port.filter(|n| *n != 0),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let load_balancer_ip = match spec.load_balancer_ip.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(s) => Some(
                s.parse::<IpAddr>()
                    .map_err(|_| err(format!("spec.loadBalancerIP {s:?} is not an IP address")))?,
            ),
        };
        Ok(Self {
            ports,
            load_balancer_ip,
            load_balancer_source_ranges: spec
                .load_balancer_source_ranges
                .iter()
                .flatten()
                .map(|r| r.trim().to_owned())
                .collect(),
            session_affinity: spec.session_affinity.clone(),
            session_affinity_timeout_seconds: spec
                .session_affinity_config
                .as_ref()
                .and_then(|c| c.client_ip.as_ref())
                .and_then(|c| c.timeout_seconds),
            external_traffic_policy: spec.external_traffic_policy.clone(),
            health_check_node_port: spec.health_check_node_port.filter(|p| *p != 0),
            ip_families: spec.ip_families.clone().unwrap_or_default(),
            annotations: svc.metadata.annotations.clone().unwrap_or_default(),
        })
    }
}

/// One externally visible address of a load balancer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LbIngress {
    pub ip: Option<IpAddr>,
    pub hostname: Option<String>,
    /// `VIP` or `Proxy` (only with `ip`).
    pub ip_mode: Option<String>,
}

/// What a provider reports about a load balancer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LbStatus {
    pub ingress: Vec<LbIngress>,
}

impl LbStatus {
    /// The Service `status.loadBalancer` to write (no `ingress` at all when
    /// empty, as upstream writes a cleared status).
    pub fn to_k8s(&self) -> LoadBalancerStatus {
        LoadBalancerStatus {
            ingress: (!self.ingress.is_empty()).then(|| {
                self.ingress
                    .iter()
                    .map(|i| LoadBalancerIngress {
                        ip: i.ip.map(|ip| ip.to_string()),
                        hostname: i.hostname.clone(),
                        ip_mode: i.ip_mode.clone(),
                        ports: None,
                    })
                    .collect()
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ClientIPConfig, ServicePort, ServiceSpec, SessionAffinityConfig,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn svc(spec: Option<ServiceSpec>) -> Service {
        Service {
            metadata: ObjectMeta {
                namespace: Some("shop".into()),
                name: Some("web".into()),
                uid: Some("6f1c9a2e-1b7d-4c4e-9a55-0d2c1e7f3b21".into()),
                annotations: Some([("team".to_owned(), "blue".to_owned())].into()),
                ..ObjectMeta::default()
            },
            spec,
            status: None,
        }
    }

    fn port(
        name: Option<&str>,
        protocol: Option<&str>,
        port: i32,
        node_port: Option<i32>,
    ) -> ServicePort {
        ServicePort {
            name: name.map(str::to_owned),
            protocol: protocol.map(str::to_owned),
            port,
            node_port,
            ..ServicePort::default()
        }
    }

    #[test]
    fn load_balancer_name_follows_upstream() {
        assert_eq!(
            default_load_balancer_name("6f1c9a2e-1b7d-4c4e-9a55-0d2c1e7f3b21"),
            "a6f1c9a2e1b7d4c4e9a550d2c1e7f3b2"
        );
        assert_eq!(
            default_load_balancer_name("6f1c9a2e-1b7d-4c4e-9a55-0d2c1e7f3b21").len(),
            32
        );
        assert_eq!(default_load_balancer_name("short-uid"), "ashortuid");
        // Never cuts inside a character.
        let n = default_load_balancer_name(&"é".repeat(20));
        assert!(n.len() <= 32 && n.starts_with('a'), "{n}");
    }

    #[test]
    fn lb_ref_from_service() {
        let r = LbRef::from_service(&svc(None)).unwrap();
        assert_eq!(r.key(), "shop/web");
        assert_eq!(r.lb_name, "a6f1c9a2e1b7d4c4e9a550d2c1e7f3b2");
        let mut s = svc(None);
        s.metadata.uid = None;
        let e = LbRef::from_service(&s).unwrap_err().to_string();
        assert_eq!(e, "Service shop/web: has no metadata.uid");
    }

    #[test]
    fn spec_from_a_full_service() {
        let s = svc(Some(ServiceSpec {
            type_: Some("LoadBalancer".into()),
            ports: Some(vec![
                port(Some("http"), Some("TCP"), 80, Some(30080)),
                port(None, None, 53, None),
                port(Some("dns"), Some("UDP"), 53, Some(0)),
            ]),
            load_balancer_ip: Some("198.51.100.7".into()),
            load_balancer_source_ranges: Some(vec![" 10.0.0.0/8".into()]),
            session_affinity: Some("ClientIP".into()),
            session_affinity_config: Some(SessionAffinityConfig {
                client_ip: Some(ClientIPConfig {
                    timeout_seconds: Some(600),
                }),
            }),
            external_traffic_policy: Some("Local".into()),
            health_check_node_port: Some(32000),
            ip_families: Some(vec!["IPv4".into(), "IPv6".into()]),
            ..ServiceSpec::default()
        }));
        let spec = LbSpec::from_service(&s).unwrap();
        assert_eq!(
            spec.ports,
            [
                LbPort {
                    name: "http".into(),
                    protocol: "TCP".into(),
                    port: 80,
                    node_port: Some(30080)
                },
                LbPort {
                    name: "".into(),
                    protocol: "TCP".into(),
                    port: 53,
                    node_port: None
                },
                LbPort {
                    name: "dns".into(),
                    protocol: "UDP".into(),
                    port: 53,
                    node_port: None
                },
            ]
        );
        assert_eq!(spec.load_balancer_ip, Some("198.51.100.7".parse().unwrap()));
        assert_eq!(spec.load_balancer_source_ranges, ["10.0.0.0/8"]);
        assert_eq!(spec.session_affinity.as_deref(), Some("ClientIP"));
        assert_eq!(spec.session_affinity_timeout_seconds, Some(600));
        assert_eq!(spec.external_traffic_policy.as_deref(), Some("Local"));
        assert_eq!(spec.health_check_node_port, Some(32000));
        assert_eq!(spec.ip_families, ["IPv4", "IPv6"]);
        assert_eq!(spec.annotations["team"], "blue");

        // The wire form uses the contract's field names.
        let wire = serde_json::to_value(&spec).unwrap();
        assert_eq!(wire["loadBalancerIP"], "198.51.100.7");
        assert_eq!(wire["ports"][0]["nodePort"], 30080);
        assert!(wire["ports"][1].get("nodePort").is_none());
        assert_eq!(wire["sessionAffinityTimeoutSeconds"], 600);
        assert_eq!(wire["loadBalancerSourceRanges"][0], "10.0.0.0/8");
    }

    #[test]
    fn spec_defaults_for_a_minimal_service() {
        let s = svc(Some(ServiceSpec {
            ports: Some(vec![port(None, None, 443, None)]),
            load_balancer_ip: Some(String::new()),
            ..ServiceSpec::default()
        }));
        let spec = LbSpec::from_service(&s).unwrap();
        assert_eq!(spec.load_balancer_ip, None);
        assert!(spec.load_balancer_source_ranges.is_empty());
        assert_eq!(spec.session_affinity, None);
        assert!(spec.ip_families.is_empty());
    }

    #[test]
    fn services_lacking_what_is_needed_are_explained() {
        let cases = [
            (None, "Service shop/web: has no spec"),
            (
                Some(ServiceSpec::default()),
                "Service shop/web: has no ports; a load balancer needs at least one",
            ),
            (
                Some(ServiceSpec {
                    ports: Some(vec![port(None, None, 0, None)]),
                    ..ServiceSpec::default()
                }),
                "Service shop/web: spec.ports[0].port is 0; expected 1-65535",
            ),
            (
                Some(ServiceSpec {
                    ports: Some(vec![port(None, None, 80, None)]),
                    load_balancer_ip: Some("not-an-ip".into()),
                    ..ServiceSpec::default()
                }),
                "Service shop/web: spec.loadBalancerIP \"not-an-ip\" is not an IP address",
            ),
        ];
        for (spec, want) in cases {
            assert_eq!(
                LbSpec::from_service(&svc(spec)).unwrap_err().to_string(),
                want
            );
        }
    }

    #[test]
    fn status_to_k8s() {
        assert_eq!(
            LbStatus::default().to_k8s(),
            LoadBalancerStatus { ingress: None }
        );
        let st = LbStatus {
            ingress: vec![
                LbIngress {
                    ip: Some("192.0.2.1".parse().unwrap()),
                    hostname: None,
                    ip_mode: Some("VIP".into()),
                },
                LbIngress {
                    ip: None,
                    hostname: Some("lb.example.com".into()),
                    ip_mode: None,
                },
            ],
        };
        let k = st.to_k8s().ingress.unwrap();
        assert_eq!(k[0].ip.as_deref(), Some("192.0.2.1"));
        assert_eq!(k[0].ip_mode.as_deref(), Some("VIP"));
        assert_eq!(k[1].hostname.as_deref(), Some("lb.example.com"));
    }
}
