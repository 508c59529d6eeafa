//! Differential conformance: each scenario runs against kube-sim and against
//! the real kube-apiserver 1.36 (see `common/differential.rs`) and their
//! answers must be the same. The scenarios also assert the behaviour users
//! rely on, on both servers.

mod common;

use common::differential::{
    Ctx, Transcript, call, delete, differential, get, patch, post, same_service_range,
};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::networking::v1::IPAddress;
use kube::api::{Api, WatchEvent, WatchParams};
use serde_json::{Value, json};

const NET: &str = "/apis/networking.k8s.io/v1";

fn svc(name: &str, cluster_ip: Option<&str>) -> Value {
    let mut s = json!({"metadata": {"name": name}, "spec": {"ports": [{"port": 80}]}});
    if let Some(ip) = cluster_ip {
        s["spec"]["clusterIP"] = json!(ip);
    }
    s
}

fn service_cidr(name: &str, cidrs: &[&str]) -> Value {
    json!({"apiVersion": "networking.k8s.io/v1", "kind": "ServiceCIDR",
        "metadata": {"name": name}, "spec": {"cidrs": cidrs}})
}

/// `GET` as a `meta.k8s.io/v1` Table, as `kubectl get` asks.
async fn table(ctx: &Ctx, path: &str) -> Value {
    let req = http::Request::builder()
        .method("GET")
        .uri(path)
        .header(
            http::header::ACCEPT,
            "application/json;as=Table;v=v1;g=meta.k8s.io",
        )
        .body(kube::client::Body::empty())
        .expect("request");
    let resp = ctx.client.send(req).await.expect("table request");
    let bytes = resp.into_body().collect_bytes().await.expect("table body");
    serde_json::from_slice(&bytes).expect("a Table")
}

/// The columns and the rows of `names` of a Table, ages masked (the last
/// cell too: upstream's IPAddress printer adds an age without a column).
fn rows_named(t: &Value, names: &[&str]) -> Value {
    let rows: Vec<Value> = t["rows"]
        .as_array()
        .map(|rs| {
            rs.iter()
                .filter(|r| names.iter().any(|n| r["cells"][0] == json!(n)))
                .map(|r| {
                    let mut cells = r["cells"].as_array().cloned().unwrap_or_default();
                    if let Some(age) = cells.last_mut() {
                        *age = json!("<age>");
                    }
                    Value::Array(cells)
                })
                .collect()
        })
        .unwrap_or_default();
    json!({"columns": t["columnDefinitions"], "rows": rows})
}

/// The default ServiceCIDR (from the service range, Ready as the
/// apiserver's controller applies it) and ServiceCIDR validation, status
/// wiping, status-subresource rules and printing.
#[tokio::test]
async fn service_cidrs_default_validation_status_and_table() {
    differential("scidr", same_service_range, |ctx| async move {
        let c = &ctx.client;
        let mut t = Transcript::new();
        let def = get(c, &format!("{NET}/servicecidrs/kubernetes")).await;
        assert_eq!(def.code, 200, "{:?}", def.body);
        assert_eq!(def.body["status"]["conditions"][0]["status"], "True");
        t.reply("default ServiceCIDR", &def);

        let name = ctx.unique("extra");
        let bad = [
            vec!["10.200.0.1/24", "10.1.0.0/16", "x"],
            vec!["10.200.0.1/24", "10.1.0.0/016"],
            vec![],
            vec!["10.200.0.0/24", "fd00::1/64"],
            vec!["2001:DB8::/64"],
            vec!["10.200.0.0"],
        ];
        for cidrs in &bad {
            let r = post(c, &format!("{NET}/servicecidrs"), &service_cidr(&name, cidrs)).await;
            assert_eq!(r.code, 422, "{cidrs:?}: {:?}", r.body);
            t.reply(&format!("invalid {cidrs:?}"), &r);
        }
        // A new ServiceCIDR's status is wiped (ServiceCIDRStatusFieldWiping).
        let mut body = service_cidr(&name, &["10.231.0.0/24"]);
        body["status"] = json!({"conditions": [{"type": "Ready", "status": "False", "reason": "X",
            "message": "m", "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
        let r = post(c, &format!("{NET}/servicecidrs"), &body).await;
        assert_eq!(r.code, 201, "{:?}", r.body);
        t.reply("created", &r);
        let path = format!("{NET}/servicecidrs/{name}");
        for (label, p) in [
            ("change the CIDR", json!({"spec": {"cidrs": ["10.232.0.0/24"]}})),
            ("three CIDRs", json!({"spec": {"cidrs": ["10.231.0.0/24", "fd00::/64", "10.1.0.0/24"]}})),
            ("dual-stack, first changed", json!({"spec": {"cidrs": ["10.232.0.0/24", "fd00::/64"]}})),
            ("dual-stack, bad second", json!({"spec": {"cidrs": ["10.231.0.0/24", "fd00::1/64"]}})),
            ("status through the main resource", json!({"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "R", "message": "m", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})),
        ] {
            let r = patch(c, &path, "merge", &p.to_string()).await;
            t.reply(label, &r);
        }
        // The status subresource keeps spec and metadata.
        let r = patch(
            c,
            &format!("{path}/status"),
            "merge",
            &json!({"metadata": {"labels": {"a": "b"}, "finalizers": ["example.com/x"]},
                "spec": {"cidrs": ["1.0.0.0/8"]},
                "status": {"conditions": [{"type": "Ready", "status": "False", "reason": "R",
                    "message": "m", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})
            .to_string(),
        )
        .await;
        assert_eq!(r.code, 200, "{:?}", r.body);
        assert_eq!(r.body["metadata"]["labels"], Value::Null);
        assert_eq!(r.body["spec"]["cidrs"], json!(["10.231.0.0/24"]));
        t.reply("status write", &r);
        // A condition applied without a reason is stored with reason "".
        let r = patch(
            c,
            &format!("{path}/status?fieldManager=diff&force=true"),
            "apply",
            &json!({"apiVersion": "networking.k8s.io/v1", "kind": "ServiceCIDR",
                "metadata": {"name": name},
                "status": {"conditions": [{"type": "Ready", "status": "True",
                    "lastTransitionTime": "2026-01-01T00:00:00Z", "message": "ok"}]}})
            .to_string(),
        )
        .await;
        assert_eq!(r.code, 200, "{:?}", r.body);
        t.reply("status apply", &r);
        // A controller's finalizer, by JSON patch on the main resource.
        let r = patch(
            c,
            &path,
            "json",
            r#"[{"op":"test","path":"/metadata/finalizers","value":null},{"op":"add","path":"/metadata/finalizers","value":["example.com/protect"]}]"#,
        )
        .await;
        t.reply("finalizer added", &r);
        let tab = table(&ctx, &format!("{NET}/servicecidrs")).await;
        t.note("table", rows_named(&tab, &["kubernetes", &name]));
        let r = delete(c, &path).await;
        t.reply("delete with a finalizer", &r);
        let r = patch(c, &path, "merge", r#"{"metadata":{"finalizers":null}}"#).await;
        t.reply("finalizer removed", &r);
        t.reply("gone", &get(c, &path).await);
        t
    })
    .await;
}

/// A /24 of 10.200.0.0-10.249.255.0 picked by the run, so that runs
/// sharing a real server (and what a failed run left behind) do not meet.
fn run_net(ctx: &Ctx) -> String {
    let h = ctx
        .run
        .bytes()
        .fold(0u32, |a, b| a.wrapping_mul(31).wrapping_add(u32::from(b)));
    format!("10.{}.{}", 200 + h % 50, (h / 50) % 256)
}

/// Waits for the next watch event of `kind` ("ADDED", "DELETED") about `name`.
async fn watched(
    events: &mut (impl futures::Stream<Item = kube::Result<WatchEvent<IPAddress>>> + Unpin),
    kind: &str,
    name: &str,
) -> Value {
    loop {
        let ev = events.try_next().await.expect("watch").expect("an event");
        let (k, o) = match ev {
            WatchEvent::Added(o) => ("ADDED", o),
            WatchEvent::Deleted(o) => ("DELETED", o),
            WatchEvent::Modified(o) => ("MODIFIED", o),
            _ => continue,
        };
        if k == kind && o.metadata.name.as_deref() == Some(name) {
            return serde_json::to_value(&o).expect("json");
        }
    }
}

/// ClusterIP allocation from the ServiceCIDRs (MultiCIDRServiceAllocator):
/// an IPAddress per allocated IP with upstream's labels and parentRef,
/// refusals with upstream's messages, release on type change and delete,
/// no allocation from a ServiceCIDR that is not Ready, watch events.
#[tokio::test]
async fn cluster_ips_come_from_service_cidrs_as_ip_addresses() {
    differential("alloc", same_service_range, |ctx| async move {
        let c = &ctx.client;
        let ns = &ctx.ns;
        let net = run_net(&ctx);
        let ip = |host: &str| format!("{net}.{host}");
        let mut t = Transcript::new();
        let cidr = ctx.unique("alloc");
        let r = post(c, &format!("{NET}/servicecidrs"), &service_cidr(&cidr, &[&ip("0/24")])).await;
        assert_eq!(r.code, 201, "{:?}", r.body);
        let svcs = format!("/api/v1/namespaces/{ns}/services");
        let ips: Api<IPAddress> = Api::all(c.clone());
        let list = ips.list(&Default::default()).await.expect("list IPAddresses");
        let rv = list.metadata.resource_version.unwrap_or_default();
        let params = WatchParams::default().labels("ipaddress.kubernetes.io/managed-by=ipallocator.k8s.io");
        let mut events = ips.watch(&params, &rv).await.expect("watch IPAddresses").boxed();

        let r = post(c, &svcs, &svc("fixed", Some(&ip("10")))).await;
        assert_eq!(r.code, 201, "{:?}", r.body);
        t.reply("static", &r);
        let held = get(c, &format!("{NET}/ipaddresses/{}", ip("10"))).await;
        assert_eq!(held.body["spec"]["parentRef"]["name"], "fixed");
        assert_eq!(
            held.body["metadata"]["labels"]["ipaddress.kubernetes.io/managed-by"],
            "ipallocator.k8s.io"
        );
        t.reply("its IPAddress", &held);
        t.note("watched", watched(&mut events, "ADDED", &ip("10")).await);

        for (label, addr) in [
            ("taken", ip("10")),
            ("network address", ip("0")),
            ("broadcast address", ip("255")),
            ("outside every range", "192.0.2.10".to_string()),
            ("leading zeros", ip("011")),
            ("not an IP", "ten".to_string()),
        ] {
            let r = post(c, &svcs, &svc("refused", Some(&addr))).await;
            assert_eq!(r.code, 422, "{label}: {:?}", r.body);
            t.reply(label, &r);
        }
        // A dynamic allocation (from any ready range).
        let r = post(c, &svcs, &svc("dynamic", None)).await;
        assert_eq!(r.code, 201, "{:?}", r.body);
        let dyn_ip = r.body["spec"]["clusterIP"].as_str().unwrap_or_default().to_string();
        t.volatile(&dyn_ip, "<dynamic-ip>");
        t.reply("dynamic", &r);
        t.reply("its IPAddress", &get(c, &format!("{NET}/ipaddresses/{dyn_ip}")).await);
        // Dry run: no IPAddress; the dry-run allocator answers a network address.
        let r = post(c, &format!("{svcs}?dryRun=All"), &svc("dry", None)).await;
        let dry_ip = r.body["spec"]["clusterIP"].as_str().unwrap_or_default().to_string();
        let none = get(c, &format!("{NET}/ipaddresses/{dry_ip}")).await;
        // (Which range's network address is random upstream: record no name.)
        t.note("dry run", json!({"code": r.code, "network address": dry_ip.ends_with(".0"),
            "no IPAddress": none.code}));
        // ExternalName gives the address back; ClusterIP again takes one.
        let r = patch(c, &format!("{svcs}/fixed"), "merge",
            r#"{"spec":{"type":"ExternalName","externalName":"x.example.com"}}"#).await;
        t.reply("to ExternalName", &r);
        t.reply("released", &get(c, &format!("{NET}/ipaddresses/{}", ip("10"))).await);
        let back = json!({"spec": {"type": "ClusterIP", "externalName": null, "clusterIP": ip("11")}});
        let r = patch(c, &format!("{svcs}/fixed"), "merge", &back.to_string()).await;
        t.reply("back to ClusterIP", &r);
        t.reply("allocated", &get(c, &format!("{NET}/ipaddresses/{}", ip("11"))).await);
        let tab = table(&ctx, &format!("{NET}/ipaddresses")).await;
        t.note("table", rows_named(&tab, &[&ip("11")]));
        let r = delete(c, &format!("{svcs}/fixed")).await;
        t.reply("service deleted", &r);
        t.reply("its IPAddress went with it", &get(c, &format!("{NET}/ipaddresses/{}", ip("11"))).await);
        t.note("watched deletion", watched(&mut events, "DELETED", &ip("11")).await);
        // A range that is not Ready allocates nothing (the real allocator
        // learns it from its informer: ask until it has).
        let r = patch(c, &format!("{NET}/servicecidrs/{cidr}/status"), "merge",
            &json!({"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "Terminating",
                "message": "m", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}).to_string()).await;
        assert_eq!(r.code, 200, "{:?}", r.body);
        let refused = common::eventually("the range is no longer used", async || {
            let r = post(c, &svcs, &svc("notready", Some(&ip("12")))).await;
            if r.code == 201 {
                let _ = delete(c, &format!("{svcs}/notready")).await;
                return None;
            }
            Some(r)
        })
        .await;
        assert_eq!(refused.code, 422, "{:?}", refused.body);
        t.reply("range not ready", &refused);
        let _ = delete(c, &format!("{svcs}/dynamic")).await;
        let r = delete(c, &format!("{NET}/servicecidrs/{cidr}")).await;
        t.note("range deleted", json!(r.code));
        t
    })
    .await;
}

/// IPAddress validation (the name is an IP in canonical form, parentRef
/// required and immutable) and its name generator (generateName is the name).
#[tokio::test]
async fn ip_address_validation_and_names() {
    differential("ipaddr", same_service_range, |ctx| async move {
        let c = &ctx.client;
        let mut t = Transcript::new();
        let ips = format!("{NET}/ipaddresses");
        let parent = json!({"resource": "services", "namespace": ctx.ns, "name": "x"});
        for (label, body) in [
            ("leading zeros, no parentRef", json!({"metadata": {"name": "10.96.0.010"}, "spec": {}})),
            ("not canonical, bad parentRef", json!({"metadata": {"name": "2001:DB8::1"},
                "spec": {"parentRef": {"group": "Bad_Group", "resource": "a/b", "name": "%x", "namespace": ".."}}})),
            ("IPv4-mapped", json!({"metadata": {"name": "::ffff:1.2.3.4"}, "spec": {"parentRef": parent}})),
            ("generateName", json!({"metadata": {"generateName": "10.1."}, "spec": {"parentRef": parent}})),
            ("missing resource and name", json!({"metadata": {"name": "192.0.2.77"}, "spec": {"parentRef": {"group": "example.com"}}})),
        ] {
            let r = post(c, &ips, &body).await;
            assert_eq!(r.code, 422, "{label}: {:?}", r.body);
            t.reply(label, &r);
        }
        let name = "192.0.2.78";
        let r = post(c, &ips, &json!({"metadata": {"name": name}, "spec": {"parentRef": parent}})).await;
        assert_eq!(r.code, 201, "{:?}", r.body);
        t.reply("created", &r);
        let r = patch(c, &format!("{ips}/{name}"), "merge", r#"{"spec":{"parentRef":{"name":"y"}}}"#).await;
        assert_eq!(r.code, 422, "{:?}", r.body);
        t.reply("parentRef is immutable", &r);
        let r = post(c, &ips, &json!({"metadata": {"name": name}, "spec": {"parentRef": parent}})).await;
        t.reply("already exists", &r);
        let r = post(c, &ips, &json!({"metadata": {"generateName": name}, "spec": {"parentRef": parent}})).await;
        t.reply("generateName of an existing one", &r);
        t.reply("deleted", &delete(c, &format!("{ips}/{name}")).await);
        t
    })
    .await;
}

/// Lease int32 fields beyond int32 (issue 27 bug 8): a create or update
/// body is a 400 decode error, a JSON or merge patch a 422 naming `patch`,
/// while strategic merge patch and server-side apply convert with Go's
/// truncation (so that is what a real server stores).
#[tokio::test]
async fn lease_int32_fields_as_the_decoder_takes_them() {
    differential("lease", |_| async { kube_sim::SimConfig::default() }, |ctx| async move {
        let c = &ctx.client;
        let mut t = Transcript::new();
        let leases = format!("/apis/coordination.k8s.io/v1/namespaces/{}/leases", ctx.ns);
        for (label, spec) in [
            ("duration beyond int32", json!({"leaseDurationSeconds": 2147483648_u64})),
            ("transitions beyond int32", json!({"holderIdentity": "a", "leaseTransitions": 4294967296_u64})),
            ("a fraction", json!({"leaseDurationSeconds": 1.5})),
            ("a string", json!({"leaseDurationSeconds": "15"})),
            ("not positive", json!({"leaseDurationSeconds": 0, "leaseTransitions": -1})),
        ] {
            let r = post(c, &leases, &json!({"metadata": {"name": "l"}, "spec": spec})).await;
            assert!(matches!(r.code, 400 | 422), "{label}: {:?}", r.body);
            t.reply(label, &r);
        }
        let r = post(c, &leases, &json!({"metadata": {"name": "l"}, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}})).await;
        assert_eq!(r.code, 201, "{:?}", r.body);
        let lease = format!("{leases}/l");
        let r = call(c, "PUT", &lease, "application/json",
            &json!({"metadata": {"name": "l"}, "spec": {"leaseDurationSeconds": 9999999999_u64}}).to_string()).await;
        assert_eq!(r.code, 400, "{:?}", r.body);
        t.reply("PUT beyond int32", &r);
        for (label, kind, body) in [
            ("merge patch", "merge", r#"{"spec":{"leaseDurationSeconds":9999999999}}"#),
            ("JSON patch", "json", r#"[{"op":"replace","path":"/spec/leaseDurationSeconds","value":9999999999}]"#),
            ("strategic, a fraction", "strategic", r#"{"spec":{"leaseDurationSeconds":1.5}}"#),
            ("strategic, a string", "strategic", r#"{"spec":{"leaseDurationSeconds":"15"}}"#),
            ("strategic, wraps negative", "strategic", r#"{"spec":{"leaseDurationSeconds":2147483648}}"#),
            ("strategic, wraps", "strategic", r#"{"spec":{"leaseDurationSeconds":9999999999}}"#),
            ("merge patch, strict, unknown field", "merge", r#"{"spec":{"bogus":1}}"#),
            ("strategic, strict, unknown field", "strategic", r#"{"spec":{"bogus":1}}"#),
        ] {
            let path = if label.contains("strict") {
                format!("{lease}?fieldValidation=Strict")
            } else {
                lease.clone()
            };
            let r = patch(c, &path, kind, body).await;
            t.reply(label, &r);
        }
        let apply = |v: &str| {
            format!(r#"{{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{{"name":"l"}},"spec":{{"leaseTransitions":{v}}}}}"#)
        };
        for (label, v) in [("apply wraps", "4294967311"), ("apply, a fraction", "1.5")] {
            let r = patch(c, &format!("{lease}?fieldManager=diff&force=true"), "apply", &apply(v)).await;
            t.reply(label, &r);
        }
        let r = get(c, &lease).await;
        assert_eq!(r.body["spec"]["leaseDurationSeconds"], 1410065407);
        assert_eq!(r.body["spec"]["leaseTransitions"], 15);
        t.reply("stored", &r);
        t
    })
    .await;
}

/// Service status.loadBalancer.ingress validation (issue 27 bug 8):
/// addresses, hostnames and ipMode as ValidateLoadBalancerStatus checks
/// them on a status write.
#[tokio::test]
async fn load_balancer_ingress_is_validated_on_status_writes() {
    differential("ingress", same_service_range, |ctx| async move {
        let c = &ctx.client;
        let mut t = Transcript::new();
        let svcs = format!("/api/v1/namespaces/{}/services", ctx.ns);
        let r = post(c, &svcs, &json!({"metadata": {"name": "lb"},
            "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]}})).await;
        assert_eq!(r.code, 201, "{:?}", r.body);
        let allocated = |r: &common::differential::Reply, t: &mut Transcript| {
            t.volatile(r.body["spec"]["clusterIP"].as_str().unwrap_or_default(), "<cluster-ip>");
            let port = r.body["spec"]["ports"][0]["nodePort"].as_u64().unwrap_or_default();
            t.volatile(&port.to_string(), "<node-port>");
        };
        allocated(&r, &mut t);
        for ingress in [
            json!([{"ip": "1.2.3.04"}]),
            json!([{"ip": "not-an-ip"}]),
            json!([{"ip": "::ffff:1.2.3.4"}]),
            json!([{"ip": "1.2.3.4", "ipMode": "Bogus"}]),
            json!([{"hostname": "1.2.3.4"}]),
            json!([{"hostname": "Bad_Host"}]),
            json!([{"ipMode": "VIP"}]),
            json!([{"ip": "192.0.2.1"}, {"ip": "192.0.2.01", "hostname": "lb.example.com"}]),
        ] {
            let r = patch(c, &format!("{svcs}/lb/status"), "merge",
                &json!({"status": {"loadBalancer": {"ingress": ingress}}}).to_string()).await;
            assert_eq!(r.code, 422, "{ingress}: {:?}", r.body);
            t.reply(&ingress.to_string(), &r);
        }
        let r = patch(c, &format!("{svcs}/lb/status"), "merge",
            r#"{"status":{"loadBalancer":{"ingress":[{"ip":"2001:DB8::1"},{"hostname":"lb.example.com"}]}}}"#).await;
        assert_eq!(r.code, 200, "{:?}", r.body);
        t.reply("a non-canonical IPv6 address and a hostname", &r);
        let r = post(c, &svcs, &json!({"metadata": {"name": "cip"}, "spec": {"ports": [{"port": 80}]}})).await;
        assert_eq!(r.code, 201, "{:?}", r.body);
        let r = patch(c, &format!("{svcs}/cip/status"), "merge",
            r#"{"status":{"loadBalancer":{"ingress":[{"ip":"192.0.2.1"}]}}}"#).await;
        assert_eq!(r.code, 422, "{:?}", r.body);
        t.reply("ingress on a ClusterIP Service", &r);
        // Without a namespace controller the Services would keep their addresses.
        for s in ["lb", "cip"] {
            let _ = delete(c, &format!("{svcs}/{s}")).await;
        }
        t
    })
    .await;
}
