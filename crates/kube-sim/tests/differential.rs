//! Differential conformance: each scenario runs against kube-sim and against
//! the real kube-apiserver 1.36 (see `common/differential.rs`) and their
//! answers must be the same. The scenarios also assert the behaviour users
//! rely on, on both servers.

mod common;

use common::differential::{
    Ctx, Transcript, call, delete, differential, get, patch, post, put, same_service_range,
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
        // Refused on both servers (the transcript then compares the
        // messages): a value the Go type cannot hold is a decode error
        // (400), a value it holds but validation refuses a 422.
        for (label, spec, code) in [
            ("duration beyond int32", json!({"leaseDurationSeconds": 2147483648_u64}), 400),
            ("transitions beyond int32", json!({"holderIdentity": "a", "leaseTransitions": 4294967296_u64}), 400),
            ("a fraction", json!({"leaseDurationSeconds": 1.5}), 400),
            ("a string", json!({"leaseDurationSeconds": "15"}), 400),
            ("not positive", json!({"leaseDurationSeconds": 0, "leaseTransitions": -1}), 422),
        ] {
            let r = post(c, &leases, &json!({"metadata": {"name": "l"}, "spec": spec})).await;
            assert_eq!(r.code, code, "{label}: {:?}", r.body);
            t.reply(label, &r);
        }
        let r = get(c, &format!("{leases}/l")).await;
        assert_eq!(r.code, 404, "nothing refused was stored: {:?}", r.body);
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

/// A number an integer field cannot take, written in every literal form: the
/// decoder's error quotes the literal as the request wrote it (`1e3`, not
/// `1000`), and `-0` decodes as 0. Through a create, an update, a JSON patch
/// (whose patched document keeps the literal) and a merge patch.
#[tokio::test]
async fn number_literals_in_decode_errors_as_written() {
    differential("literal", |_| async { kube_sim::SimConfig::default() }, |ctx| async move {
        let c = &ctx.client;
        let mut t = Transcript::new();
        let leases = format!("/apis/coordination.k8s.io/v1/namespaces/{}/leases", ctx.ns);
        let literals = [
            "1e3", "1E+3", "2e-1", "1.0", "-1.50e2", "0.5E1", "-0", "-0.0", "0e0",
            "100000000000000000000", "-9223372036854775809", "9223372036854775808",
            "18446744073709551616", "1e400", "-1e-400", "123456789.123456789e-2",
        ];
        for (i, lit) in literals.iter().enumerate() {
            let body = format!(
                r#"{{"metadata":{{"name":"n{i}"}},"spec":{{"holderIdentity":"a","leaseDurationSeconds":{lit}}}}}"#
            );
            let r = call(c, "POST", &leases, "application/json", &body).await;
            t.reply(&format!("create with {lit}"), &r);
        }
        // A YAML body reaches the decoder as the JSON Go writes of what it
        // read: a float as a float64 (`1e3` is 1000, which decodes).
        for (i, lit) in ["1e3", "1.5", "1e21", "1.5e-7", "-0", "9999999999"].iter().enumerate() {
            let body = format!("metadata:\n  name: y{i}\nspec:\n  holderIdentity: a\n  leaseDurationSeconds: {lit}\n");
            let r = call(c, "POST", &leases, "application/yaml", &body).await;
            t.reply(&format!("YAML create with {lit}"), &r);
        }
        // An int64 field, and the first of two bad fields.
        for (label, body) in [
            ("int64", r#"{"metadata":{"name":"g","generation":1.5e1}}"#),
            ("two", r#"{"metadata":{"name":"g"},"spec":{"leaseTransitions":1e1,"leaseDurationSeconds":2E1}}"#),
            ("whitespace", "{\"metadata\":{\"name\":\"g\"},\"spec\":{\"leaseDurationSeconds\" :\n 1.00 }}"),
        ] {
            let r = call(c, "POST", &leases, "application/json", body).await;
            t.reply(label, &r);
        }
        let r = post(c, &leases, &json!({"metadata": {"name": "l"}, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}})).await;
        assert_eq!(r.code, 201, "{:?}", r.body);
        let lease = format!("{leases}/l");
        let r = call(c, "PUT", &lease, "application/json",
            r#"{"metadata":{"name":"l"},"spec":{"leaseDurationSeconds":3.0E2}}"#).await;
        t.reply("PUT 3.0E2", &r);
        for (label, kind, body) in [
            ("merge 1e3", "merge", r#"{"spec":{"leaseDurationSeconds":1e3}}"#),
            ("merge -0", "merge", r#"{"spec":{"leaseTransitions":-0}}"#),
            ("JSON patch 1E3", "json", r#"[{"op":"replace","path":"/spec/leaseDurationSeconds","value":1E3}]"#),
            ("JSON patch 2.50", "json", r#"[{"op":"add","path":"/spec/leaseTransitions","value": 2.50}]"#),
            ("JSON patch -0", "json", r#"[{"op":"replace","path":"/spec/leaseDurationSeconds","value":-0}]"#),
            ("JSON patch big", "json", r#"[{"op":"replace","path":"/spec/leaseDurationSeconds","value":100000000000000000000}]"#),
            // Overflowing a float64: the strict decoding of the patch
            // itself (fieldValidation Warn, the default) refuses it.
            ("merge 1e400", "merge", r#"{"metadata":{"labels":{"a":"1e400"}},"spec":{"leaseTransitions":-1E+400,"leaseDurationSeconds":1e400}}"#),
            ("JSON patch 1e400", "json", r#"[{"op":"test","path":"/spec","x":1e999,"value":{"holderIdentity":"a","leaseDurationSeconds":15}},{"op":"replace","path":"/spec/leaseDurationSeconds","value":[1,2e400]}]"#),
        ] {
            let r = patch(c, &lease, kind, body).await;
            t.reply(label, &r);
        }
        t.reply("stored", &get(c, &lease).await);
        // Two bad fields: the first in the patched document's order (the
        // merged spec's keys sorted), not in the stored object's.
        let r = call(c, "POST", &leases, "application/json",
            r#"{"metadata":{"name":"m"},"spec":{"leaseTransitions":1,"leaseDurationSeconds":15}}"#).await;
        assert_eq!(r.code, 201, "{:?}", r.body);
        let r = patch(c, &format!("{leases}/m"), "merge",
            r#"{"spec":{"leaseTransitions":1e1,"leaseDurationSeconds":2E1}}"#).await;
        t.reply("merge, two bad fields", &r);
        t
    })
    .await;
}

/// A JSON or merge patch whose result does not decode: the message quotes
/// the patched document as upstream's patch library writes it, keys in the
/// order it leaves them (the stored object's in Go struct order, what the
/// patch walked into or merged sorted, a new value as the patch wrote it),
/// literals and string escapes as written.
#[tokio::test]
async fn patched_documents_quoted_as_the_patch_library_writes_them() {
    differential("quoted", |_| async { kube_sim::SimConfig::default() }, |ctx| async move {
        let c = &ctx.client;
        let mut t = Transcript::new();
        let roles = "/apis/rbac.authorization.k8s.io/v1/clusterroles";
        let name = ctx.unique("r");
        let role = json!({"metadata": {"name": name, "labels": {"zone": "b", "app": "web"},
                "annotations": {"note": "a<b>&c\u{2028}", "a": "1"}},
            "rules": [{"apiGroups": [""], "resources": ["pods", "services"], "verbs": ["get", "list"]},
                {"nonResourceURLs": ["/x"], "verbs": ["get"]}]});
        let r = post(c, roles, &role).await;
        assert_eq!(r.code, 201, "{:?}", r.body);
        t.volatile(&name, "<name>");
        let strict = format!("{roles}/{name}?fieldValidation=Strict");
        for (label, kind, body) in [
            ("merge, an unknown field", "merge", r#"{"bogus":1}"#),
            ("merge, a new list", "merge",
                r#"{"metadata":{"labels":{"zone":null,"new":"x"}},"rules":[{"verbs":["get"],"resources":["a"],"apiGroups":[""],"zz":{"y":1,"x":null},"resourceNames":null}]}"#),
            ("merge, a new object", "merge",
                r#"{"metadata":{"ownerReferences":[{"uid":"u","name":"n","kind":"K","apiVersion":"v1","zz":1}]}}"#),
            ("merge, into metadata", "merge", r#"{"metadata":{"annotations":{"b":"2"},"bogus":{"b":1,"a":2}}}"#),
            ("JSON patch, add deep", "json",
                r#"[{"op":"add","path":"/rules/0/bogus","value":{"b":1,"a":[{"d":1,"c":2}],"s":"\u0041<"}}]"#),
            ("JSON patch, test then add", "json",
                r#"[{"op":"test","path":"/rules/1","value":{"nonResourceURLs":["/x"],"verbs":["get"]}},{"op":"add","path":"/metadata/annotations/x","value":"<&>"},{"op":"add","path":"/bogus","value":1}]"#),
            ("JSON patch, copy and move", "json",
                r#"[{"op":"copy","from":"/metadata/labels","path":"/bogus"},{"op":"move","from":"/rules/0/verbs","path":"/rules/1/zz"}]"#),
            ("JSON patch, remove and replace", "json",
                r#"[{"op":"remove","path":"/rules/0/resources/0"},{"op":"replace","path":"/rules/1/verbs","value":["list"]},{"op":"add","path":"/metadata/bogus","value":1}]"#),
        ] {
            let r = patch(c, &strict, kind, body).await;
            assert_eq!(r.code, 422, "{label}: {:?}", r.body);
            t.reply(label, &r);
        }
        let leases = format!("/apis/coordination.k8s.io/v1/namespaces/{}/leases", ctx.ns);
        let r = post(c, &leases, &json!({"metadata": {"name": "l", "annotations": {"b": "1"}},
            "spec": {"leaseDurationSeconds": 15, "holderIdentity": "a"}})).await;
        assert_eq!(r.code, 201, "{:?}", r.body);
        let r = patch(c, &format!("{leases}/l"), "merge",
            r#"{"spec":{"leaseDurationSeconds":9999999999},"metadata":{"annotations":{"c":"2","a":"3"}}}"#).await;
        t.reply("lease, merge", &r);
        assert_eq!(delete(c, &format!("{roles}/{name}")).await.code, 200);
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

/// Reads a watch of `path` (which sets `timeoutSeconds`) until the server
/// ends it: every event, as sent.
async fn watch_events(client: kube::Client, path: String) -> Vec<Value> {
    use http_body_util::BodyExt;
    let req = http::Request::builder()
        .method("GET")
        .uri(&path)
        .header(http::header::ACCEPT, "application/json")
        .body(kube::client::Body::empty())
        .expect("watch request");
    let resp = client.send(req).await.expect("watch");
    assert_eq!(resp.status(), 200, "watch {path}");
    let mut body = resp.into_body();
    let mut buf = Vec::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.expect("watch body").into_data() {
            buf.extend_from_slice(&data);
        }
    }
    String::from_utf8_lossy(&buf)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|_| json!(l)))
        .collect()
}

/// Watch: from an old resourceVersion that etcd still has, the changes
/// since (none in a new namespace; a real server reads what its watch cache
/// lacks from etcd, so no 410 before compaction); with bookmarks and a
/// timeout, a BOOKMARK before the end.
#[tokio::test]
async fn watch_from_an_old_version_and_a_bookmark_before_the_timeout() {
    differential("watch", same_service_range, |ctx| async move {
        let c = &ctx.client;
        let mut t = Transcript::new();
        let cms = format!("/api/v1/namespaces/{}/configmaps", ctx.ns);
        let old = watch_events(
            c.clone(),
            format!("{cms}?watch=1&resourceVersion=1&timeoutSeconds=2"),
        )
        .await;
        assert!(old.iter().all(|e| e["type"] != "ERROR"), "{old:?}");
        t.note("watch from resourceVersion 1", json!(old));
        let list = get(c, &cms).await;
        let rv = list.body["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        // A bookmark reports a resourceVersion newer than the watch's start
        // (upstream's cache has none to report for an idle resource), so
        // something happens in the resource first.
        let watch = tokio::spawn(watch_events(
            c.clone(),
            format!("{cms}?watch=1&allowWatchBookmarks=true&timeoutSeconds=4&resourceVersion={rv}"),
        ));
        let r = post(c, &cms, &json!({"metadata": {"name": "tick"}})).await;
        assert_eq!(r.code, 201, "{:?}", r.body);
        let events = watch.await.expect("the watch");
        // How many bookmarks come before the end is timer-dependent upstream.
        let mut types: Vec<Value> = Vec::new();
        for e in &events {
            if types.last() != Some(&e["type"]) {
                types.push(e["type"].clone());
            }
        }
        assert!(types.contains(&json!("BOOKMARK")), "{events:?}");
        t.note("event types until the timeout", json!(types));
        let bookmark = events.iter().find(|e| e["type"] == "BOOKMARK").cloned();
        t.note("a bookmark", bookmark.unwrap_or_default());
        t
    })
    .await;
}

/// One kind the protection controllers hold with finalizers.
struct Held {
    label: &'static str,
    collection: String,
    body: Value,
}

/// Finalizers as the controllers use them, on every kind they protect:
/// name validation on create and update, the JSON-patch `test` guard the
/// manager sends (and its 422 when the list moved), DELETE of a held object,
/// no new finalizer once deleting, removal by index, the last one's removal
/// deleting the object (its answer, and the watch's DELETED event).
#[tokio::test]
async fn finalizers_on_every_protected_kind() {
    differential("fin", same_service_range, |ctx| async move {
        let c = &ctx.client;
        let ns = &ctx.ns;
        let mut t = Transcript::new();
        let net = run_net(&ctx);
        // A custom resource, as ProtectionRules protect them.
        let group = format!("{}.example.com", ctx.unique("fin"));
        let crd = json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("widgets.{group}")},
            "spec": {"group": group, "scope": "Namespaced",
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                        "spec": {"type": "object", "properties": {"size": {"type": "integer"}}}}}}}]},
        });
        let r = post(c, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", &crd).await;
        assert_eq!(r.code, 201, "{:?}", r.body);
        let widgets = format!("/apis/{group}/v1/namespaces/{ns}/widgets");
        common::eventually("the custom resource is served", async || {
            (get(c, &widgets).await.code == 200).then_some(())
        })
        .await;
        let kinds = [
            Held { label: "ConfigMap", collection: format!("/api/v1/namespaces/{ns}/configmaps"), body: json!({}) },
            Held { label: "PersistentVolumeClaim", collection: format!("/api/v1/namespaces/{ns}/persistentvolumeclaims"),
                body: json!({"spec": {"storageClassName": "", "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}) },
            Held { label: "PersistentVolume", collection: "/api/v1/persistentvolumes".into(),
                body: json!({"spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "hostPath": {"path": "/tmp/fin"}}}) },
            Held { label: "Service", collection: format!("/api/v1/namespaces/{ns}/services"),
                body: json!({"spec": {"clusterIP": "None", "ports": [{"port": 80}]}}) },
            Held { label: "ServiceCIDR", collection: format!("{NET}/servicecidrs"),
                body: json!({"spec": {"cidrs": [format!("{net}.0/24")]}}) },
            Held { label: "VolumeAttributesClass", collection: "/apis/storage.k8s.io/v1/volumeattributesclasses".into(),
                body: json!({"driverName": "x.example.com", "parameters": {"a": "b"}}) },
            Held { label: "Widget", collection: widgets.clone(),
                body: json!({"apiVersion": format!("{group}/v1"), "kind": "Widget", "spec": {"size": 1}}) },
        ];
        // A custom resource is decoded as unstructured JSON: its kind is needed.
        let r = post(c, &widgets, &json!({"metadata": {"name": "nokind"}, "spec": {"size": 1}})).await;
        assert_eq!(r.code, 400, "{:?}", r.body);
        t.reply("a custom resource without its kind", &r);
        for k in &kinds {
            let name = ctx.unique("held").to_lowercase();
            let obj = |n: &str, fins: Value| {
                let mut b = k.body.clone();
                b["metadata"] = json!({"name": n, "finalizers": fins});
                b
            };
            let l = |s: &str| format!("{}: {s}", k.label);
            for (what, fins) in [
                ("a finalizer with a space", json!(["Bad Name"])),
                ("a finalizer without a domain", json!(["nodomain"])),
                ("orphan and foregroundDeletion", json!(["orphan", "foregroundDeletion"])),
            ] {
                let n = ctx.unique("bad").to_lowercase();
                let r = post(c, &k.collection, &obj(&n, fins)).await;
                t.reply(&l(what), &r);
                if r.code == 201 {
                    let _ = patch(c, &format!("{}/{n}", k.collection), "merge", r#"{"metadata":{"finalizers":null}}"#).await;
                    let _ = delete(c, &format!("{}/{n}", k.collection)).await;
                }
            }
            let path = format!("{}/{name}", k.collection);
            let r = post(c, &k.collection, &obj(&name, json!(["example.com/hold"]))).await;
            assert_eq!(r.code, 201, "{}: {:?}", k.label, r.body);
            t.reply(&l("created"), &r);
            let guarded = r#"[{"op":"test","path":"/metadata/finalizers","value":["example.com/hold"]},{"op":"add","path":"/metadata/finalizers/-","value":"example.com/second"}]"#;
            let r = patch(c, &path, "json", guarded).await;
            assert_eq!(r.code, 200, "{}: {:?}", k.label, r.body);
            t.reply(&l("finalizer added under a test guard"), &r);
            let r = patch(c, &path, "json", guarded).await;
            assert_eq!(r.code, 422, "{}: {:?}", k.label, r.body);
            t.reply(&l("the guard no longer holds"), &r);
            let r = patch(c, &path, "merge", r#"{"metadata":{"finalizers":["example.com/hold","Bad Name"]}}"#).await;
            t.reply(&l("an invalid finalizer by update"), &r);
            let r = delete(c, &path).await;
            assert_eq!(r.code, 200, "{}: {:?}", k.label, r.body);
            t.reply(&l("deleted while held"), &r);
            let r = patch(c, &path, "json", r#"[{"op":"add","path":"/metadata/finalizers/-","value":"example.com/late"}]"#).await;
            assert_eq!(r.code, 422, "{}: {:?}", k.label, r.body);
            t.reply(&l("no new finalizer while deleting"), &r);
            let r = patch(c, &path, "json", r#"[{"op":"test","path":"/metadata/finalizers/1","value":"example.com/second"},{"op":"remove","path":"/metadata/finalizers/1"}]"#).await;
            assert_eq!(r.code, 200, "{}: {:?}", k.label, r.body);
            t.reply(&l("one finalizer removed by index"), &r);
            let r = patch(c, &path, "json", r#"[{"op":"test","path":"/metadata/finalizers/0","value":"example.com/hold"},{"op":"remove","path":"/metadata/finalizers/0"}]"#).await;
            assert_eq!(r.code, 200, "{}: {:?}", k.label, r.body);
            t.reply(&l("the last one removed"), &r);
            t.reply(&l("gone"), &get(c, &path).await);
        }
        let _ = delete(c, &format!("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.{group}")).await;
        t
    })
    .await;
}

/// SubjectAccessReview over RBAC (what a component delegating its
/// authorization asks: KCM's secure port, a metrics filter) and the
/// TokenReview answers that do not depend on how tokens are issued.
#[tokio::test]
async fn subject_access_reviews_and_token_review_errors() {
    differential("reviews", same_service_range, |ctx| async move {
        let c = &ctx.client;
        let ns = &ctx.ns;
        let mut t = Transcript::new();
        let rbac = "/apis/rbac.authorization.k8s.io/v1";
        let cr = ctx.unique("metrics-reader");
        let crb = ctx.unique("metrics-readers");
        let user = ctx.unique("alice");
        for (path, body) in [
            (format!("{rbac}/clusterroles"), json!({"metadata": {"name": cr}, "rules": [
                {"nonResourceURLs": ["/metrics"], "verbs": ["get"]},
                {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["get", "list", "watch", "patch"]}]})),
            (format!("{rbac}/clusterrolebindings"), json!({"metadata": {"name": crb},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cr},
                "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": user}]})),
            (format!("{rbac}/namespaces/{ns}/roles"), json!({"metadata": {"name": "secrets"}, "rules": [
                {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["one"], "verbs": ["get"]}]})),
            (format!("{rbac}/namespaces/{ns}/rolebindings"), json!({"metadata": {"name": "secrets"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "secrets"},
                "subjects": [{"kind": "ServiceAccount", "name": "manager", "namespace": ns}]})),
        ] {
            let r = post(c, &path, &body).await;
            assert_eq!(r.code, 201, "{path}: {:?}", r.body);
        }
        let sa = format!("system:serviceaccount:{ns}:manager");
        let sa_groups = json!(["system:serviceaccounts", format!("system:serviceaccounts:{ns}"), "system:authenticated"]);
        let sar = |spec: Value| json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec});
        let cases = [
            ("metrics allowed", json!({"user": user, "nonResourceAttributes": {"path": "/metrics", "verb": "get"}})),
            ("metrics, another verb", json!({"user": user, "nonResourceAttributes": {"path": "/metrics", "verb": "post"}})),
            ("another path", json!({"user": user, "nonResourceAttributes": {"path": "/healthz", "verb": "get"}})),
            ("claims anywhere", json!({"user": user, "resourceAttributes": {"namespace": ns, "verb": "patch", "resource": "persistentvolumeclaims"}})),
            ("claims, delete", json!({"user": user, "resourceAttributes": {"namespace": ns, "verb": "delete", "resource": "persistentvolumeclaims"}})),
            ("a named secret by a role binding", json!({"user": sa, "groups": sa_groups, "resourceAttributes": {"namespace": ns, "verb": "get", "resource": "secrets", "name": "one"}})),
            ("another secret", json!({"user": sa, "groups": sa_groups, "resourceAttributes": {"namespace": ns, "verb": "get", "resource": "secrets", "name": "two"}})),
            ("system:masters", json!({"user": "someone", "groups": ["system:masters"], "resourceAttributes": {"verb": "delete", "resource": "nodes"}})),
            ("no attributes", json!({"user": user})),
            ("no user or group", json!({"nonResourceAttributes": {"path": "/metrics", "verb": "get"}})),
        ];
        for (label, spec) in cases {
            let r = post(c, "/apis/authorization.k8s.io/v1/subjectaccessreviews", &sar(spec)).await;
            t.reply(label, &r);
        }
        let r = post(c, "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            &json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "spec": {}})).await;
        assert_eq!(r.code, 422, "{:?}", r.body);
        t.reply("a self review without attributes", &r);
        let tr = |token: &str| json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}});
        let r = post(c, "/apis/authentication.k8s.io/v1/tokenreviews", &tr("")).await;
        assert_eq!(r.code, 400, "{:?}", r.body);
        t.reply("an empty token", &r);
        for p in [format!("{rbac}/clusterrolebindings/{crb}"), format!("{rbac}/clusterroles/{cr}")] {
            let _ = delete(c, &p).await;
        }
        t
    })
    .await;
}

/// A CustomResourceDefinition with a structural schema, CEL rules, a status
/// subresource and printer columns (as the ProtectionRule CRD has): its
/// status as the CRD controllers write it, custom resources refused and
/// accepted alike, and `kubectl get` columns.
#[tokio::test]
async fn custom_resources_validation_status_and_printer_columns() {
    differential("crd", same_service_range, |ctx| async move {
        let c = &ctx.client;
        let ns = &ctx.ns;
        let mut t = Transcript::new();
        let group = format!("{}.example.com", ctx.unique("crd"));
        let name = format!("gadgets.{group}");
        let crd = json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": name},
            "spec": {"group": group, "scope": "Namespaced",
                "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "listKind": "GadgetList", "shortNames": ["gd"]},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        {"name": "Mode", "type": "string", "jsonPath": ".spec.mode"},
                        {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
                        {"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"},
                        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}],
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                        "spec": {"type": "object", "required": ["mode"],
                            "x-kubernetes-validations": [{"rule": "self.mode != 'Off' || self.size == 0", "message": "an Off gadget has no size"}],
                            "properties": {
                                "mode": {"type": "string", "enum": ["On", "Off"]},
                                "size": {"type": "integer", "minimum": 0, "maximum": 10},
                                "tag": {"type": "string", "maxLength": 5, "pattern": "^[a-z]+$"},
                                "quota": {"type": "string"}}},
                        "status": {"type": "object", "properties": {"conditions": {"type": "array",
                            "items": {"type": "object", "properties": {"type": {"type": "string"}, "status": {"type": "string"}}}}}}}}}}]},
        });
        let crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
        let r = post(c, crds, &crd).await;
        assert_eq!(r.code, 201, "{:?}", r.body);
        let established = common::eventually("the CRD is established", async || {
            let r = get(c, &format!("{crds}/{name}")).await;
            let conds = r.body["status"]["conditions"].as_array().cloned().unwrap_or_default();
            conds
                .iter()
                .any(|c| c["type"] == "Established" && c["status"] == "True")
                .then_some(r)
        })
        .await;
        // The status: conditions by type (their order and times are the
        // controllers'), accepted names, stored versions.
        let mut conds: Vec<Value> = established.body["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .map(|c| json!({"type": c["type"], "status": c["status"], "reason": c["reason"], "message": c["message"]}))
            .collect();
        conds.sort_by_key(|c| c["type"].as_str().unwrap_or_default().to_string());
        t.note("CRD status", json!({"conditions": conds,
            "acceptedNames": established.body["status"]["acceptedNames"],
            "storedVersions": established.body["status"]["storedVersions"]}));
        let gadgets = format!("/apis/{group}/v1/namespaces/{ns}/gadgets");
        common::eventually("the custom resource is served", async || {
            (get(c, &gadgets).await.code == 200).then_some(())
        })
        .await;
        let gadget = |n: &str, spec: Value| json!({"apiVersion": format!("{group}/v1"), "kind": "Gadget", "metadata": {"name": n}, "spec": spec});
        for (label, spec) in [
            ("missing mode", json!({"size": 1})),
            ("not in the enum", json!({"mode": "Maybe"})),
            ("above the maximum", json!({"mode": "On", "size": 11})),
            ("a string for an integer", json!({"mode": "On", "size": "1"})),
            ("too long and not matching", json!({"mode": "On", "tag": "ABCDEFG"})),
            ("a CEL rule", json!({"mode": "Off", "size": 3})),
        ] {
            let r = post(c, &gadgets, &gadget("bad", spec)).await;
            assert_eq!(r.code, 422, "{label}: {:?}", r.body);
            t.reply(label, &r);
        }
        // A custom resource is unstructured: a quantity is a string like
        // any other, kept as given.
        let r = post(c, &gadgets, &gadget("good", json!({"mode": "On", "size": 2, "tag": "ab", "extra": "pruned", "quota": "1.5Gi"}))).await;
        assert_eq!(r.code, 201, "{:?}", r.body);
        assert_eq!(r.body["spec"]["quota"], "1.5Gi");
        t.reply("created (unknown field pruned)", &r);
        let r = patch(c, &format!("{gadgets}/good/status"), "merge",
            r#"{"spec":{"size":9},"status":{"conditions":[{"type":"Ready","status":"True"}]}}"#).await;
        t.reply("status subresource", &r);
        let r = patch(c, &format!("{gadgets}/good"), "merge", r#"{"status":{"conditions":[]},"spec":{"size":4}}"#).await;
        t.reply("main resource", &r);
        let tab = table(&ctx, &gadgets).await;
        t.note("table", rows_named(&tab, &["good"]));
        let _ = delete(c, &format!("{crds}/{name}")).await;
        t
    })
    .await;
}

/// A namespace's deletion as kube-controller-manager's namespace
/// controller runs it: pods first, and nothing else (not even a Secret
/// nothing holds) while a pod is Terminating; then the rest, the objects
/// with finalizers kept Terminating and named in the namespace's
/// conditions; the namespace goes once they are released.
#[tokio::test]
async fn namespace_deletion_waits_for_pods_then_reports_what_holds_it() {
    let configure = async |real| {
        let mut cfg = same_service_range(real).await;
        cfg.pod_graceful_deletion = true;
        cfg
    };
    differential("nsdel", configure, |ctx| async move {
        let c = &ctx.client;
        let ns = &ctx.ns;
        let mut t = Transcript::new();
        let api = format!("/api/v1/namespaces/{ns}");
        let pod = json!({"metadata": {"name": "web"}, "spec": {
            "nodeName": "node-1",
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}});
        assert_eq!(post(c, &format!("{api}/pods"), &pod).await.code, 201);
        let held = json!({"metadata": {"name": "held", "finalizers": ["example.com/hold"]}});
        assert_eq!(post(c, &format!("{api}/configmaps"), &held).await.code, 201);
        assert_eq!(
            post(
                c,
                &format!("{api}/secrets"),
                &json!({"metadata": {"name": "free"}})
            )
            .await
            .code,
            201
        );
        let r = delete(c, &api).await;
        assert_eq!(r.code, 200, "{:?}", r.body);
        // Each object as the user sees it: there, being deleted, gone.
        let state = async |path: String| {
            let r = get(c, &path).await;
            match r.code {
                404 => "gone".to_string(),
                _ if r.body.pointer("/metadata/deletionTimestamp").is_some() => {
                    "Terminating".into()
                }
                _ => "present".into(),
            }
        };
        let conditions = async || {
            let r = get(c, &api).await;
            r.body
                .pointer("/status/conditions")
                .cloned()
                .unwrap_or(Value::Null)
        };
        // Past its grace period the pod is reported as content that should
        // have gone (no kubelet finishes it here).
        common::eventually("the pod is Terminating and reported", async || {
            let reported = conditions().await.as_array().is_some_and(|a| {
                a.iter().any(|c| {
                    c["type"] == "NamespaceDeletionContentFailure" && c["status"] == "True"
                })
            });
            (reported && state(format!("{api}/pods/web")).await == "Terminating").then_some(())
        })
        .await;
        for what in ["pods/web", "configmaps/held", "secrets/free"] {
            t.note(
                &format!("while the pod terminates: {what}"),
                json!(state(format!("{api}/{what}")).await),
            );
        }
        t.note("while the pod terminates: conditions", conditions().await);
        // The kubelet's last word: the pod is gone.
        let r = call(
            c,
            "DELETE",
            &format!("{api}/pods/web"),
            "application/json",
            r#"{"gracePeriodSeconds":0}"#,
        )
        .await;
        assert_eq!(r.code, 200, "{:?}", r.body);
        common::eventually("the rest is deleted and reported", async || {
            let remaining = conditions().await.as_array().is_some_and(|a| {
                a.iter()
                    .any(|c| c["type"] == "NamespaceFinalizersRemaining" && c["status"] == "True")
            });
            (remaining && state(format!("{api}/secrets/free")).await == "gone").then_some(())
        })
        .await;
        for what in ["configmaps/held", "secrets/free"] {
            t.note(
                &format!("once the pod is gone: {what}"),
                json!(state(format!("{api}/{what}")).await),
            );
        }
        t.note("once the pod is gone: conditions", conditions().await);
        let r = patch(
            c,
            &format!("{api}/configmaps/held"),
            "merge",
            r#"{"metadata":{"finalizers":null}}"#,
        )
        .await;
        assert_eq!(r.code, 200, "{:?}", r.body);
        common::eventually("the namespace goes", async || {
            (get(c, &api).await.code == 404).then_some(())
        })
        .await;
        t.note("released: the namespace", json!("gone"));
        t
    })
    .await;
}

/// `ValidatePersistentVolumeClaimUpdate` refuses a change to an immutable
/// part of a claim's spec with `spec is immutable after creation except
/// ...` and apimachinery's `diff.Diff` of the internal specs (a unified diff
/// of their indented JSON, Go field names as keys): each change below
/// provokes its own diff, compared whole.
#[tokio::test]
async fn claim_spec_immutability_diffs() {
    differential("pvcdiff", |_| async { kube_sim::SimConfig::default() }, |ctx| async move {
        let c = &ctx.client;
        let mut t = Transcript::new();
        let claims = format!("/api/v1/namespaces/{}/persistentvolumeclaims", ctx.ns);
        let claim = |name: &str, spec: Value| json!({"metadata": {"name": name}, "spec": spec});
        let base = json!({"storageClassName": "fast", "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}}});
        let r = post(c, &claims, &claim("c", base.clone())).await;
        assert_eq!(r.code, 201, "{:?}", r.body);
        let path = format!("{claims}/c");
        for (label, kind, body) in [
            ("storage class", "merge", json!({"spec": {"storageClassName": "slow"}}).to_string()),
            ("storage class removed", "json", r#"[{"op":"remove","path":"/spec/storageClassName"}]"#.to_string()),
            ("access modes", "merge", json!({"spec": {"accessModes": ["ReadWriteOnce", "ReadOnlyMany"]}}).to_string()),
            ("access mode replaced", "strategic", json!({"spec": {"accessModes": ["ReadWriteMany"]}}).to_string()),
            ("selector labels", "merge", json!({"spec": {"selector": {"matchLabels": {"tier": "db", "app": "x"}}}}).to_string()),
            ("selector expressions", "merge", json!({"spec": {"selector": {"matchExpressions": [
                {"key": "zone", "operator": "In", "values": ["a", "b"]},
                {"key": "gone", "operator": "DoesNotExist"}]}}}).to_string()),
            ("volume mode", "merge", json!({"spec": {"volumeMode": "Block"}}).to_string()),
            ("shrunk request", "merge", json!({"spec": {"resources": {"requests": {"storage": "512Mi"}}}}).to_string()),
            ("grown request, another unit", "merge", json!({"spec": {"resources": {"requests": {"storage": "1.5Gi"}}}}).to_string()),
            ("limits", "merge", json!({"spec": {"resources": {"limits": {"storage": "2G"}}}}).to_string()),
            ("data source", "merge", json!({"spec": {"dataSource": {"kind": "PersistentVolumeClaim", "name": "src"}}}).to_string()),
            ("data source ref", "merge", json!({"spec": {"dataSourceRef": {"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot", "name": "snap"}}}).to_string()),
            ("several", "merge", json!({"spec": {"storageClassName": "slow", "accessModes": ["ReadWriteMany"],
                "selector": {"matchLabels": {"a": "b"}}}}).to_string()),
        ] {
            let r = patch(c, &path, kind, &body).await;
            assert_eq!(r.code, 422, "{label}: {:?}", r.body);
            t.reply(label, &r);
        }
        // The first volumeName is allowed; the next is not.
        let r = patch(c, &path, "merge", &json!({"spec": {"volumeName": "pv-a"}}).to_string()).await;
        assert_eq!(r.code, 200, "{:?}", r.body);
        let r = patch(c, &path, "merge", &json!({"spec": {"volumeName": "pv-b"}}).to_string()).await;
        assert_eq!(r.code, 422, "{:?}", r.body);
        t.reply("volume name", &r);
        // A PUT of the whole claim, quantities in other units.
        let mut spec = base.clone();
        spec["resources"]["requests"]["storage"] = json!("1536Mi");
        spec["volumeName"] = json!("pv-a");
        spec["storageClassName"] = json!("other");
        let r = put(c, &path, &claim("c", spec)).await;
        assert_eq!(r.code, 422, "{:?}", r.body);
        t.reply("PUT", &r);

        // Quantities as the diff prints them (canonical), and a bound claim
        // whose storage request may change.
        let r = post(c, &claims, &claim("q", json!({"storageClassName": "fast", "volumeName": "pv-q",
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1.5Gi"}, "limits": {"storage": "2000M"}}}))).await;
        assert_eq!(r.code, 201, "{:?}", r.body);
        let q = format!("{claims}/q");
        let r = patch(c, &q, "merge", &json!({"spec": {"volumeName": "pv-r"}}).to_string()).await;
        assert_eq!(r.code, 422, "{:?}", r.body);
        t.reply("canonical quantities", &r);
        let r = patch(c, &format!("{q}/status"), "merge", &json!({"status": {"phase": "Bound"}}).to_string()).await;
        assert_eq!(r.code, 200, "{:?}", r.body);
        let r = patch(c, &q, "merge", &json!({"spec": {"storageClassName": "slow",
            "resources": {"requests": {"storage": "3Gi"}}}}).to_string()).await;
        assert_eq!(r.code, 422, "{:?}", r.body);
        t.reply("bound", &r);

        // A pending claim's volumeAttributesClassName is part of the spec.
        let r = patch(c, &path, "merge", &json!({"spec": {"volumeAttributesClassName": "gold"}}).to_string()).await;
        assert_eq!(r.code, 422, "{:?}", r.body);
        t.reply("attributes class, pending", &r);

        // A data source fills in dataSourceRef (and one that is neither a
        // claim nor a snapshot is dropped); changing either shows both.
        for (name, key, ds) in [
            ("ds", "dataSource", json!({"kind": "PersistentVolumeClaim", "name": "src"})),
            ("cm", "dataSource", json!({"kind": "ConfigMap", "name": "cfg"})),
            ("ref", "dataSourceRef", json!({"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot", "name": "s"})),
            ("xns", "dataSourceRef", json!({"kind": "PersistentVolumeClaim", "name": "src", "namespace": "other"})),
        ] {
            let mut spec = base.clone();
            spec[key] = ds;
            let r = post(c, &claims, &claim(name, spec)).await;
            assert_eq!(r.code, 201, "{:?}", r.body);
            t.note(&format!("{name}: stored spec"), r.body["spec"].clone());
        }
        let r = patch(c, &format!("{claims}/ds"), "merge", &json!({"spec": {"dataSourceRef": {"name": "other"}}}).to_string()).await;
        t.reply("data source ref renamed", &r);
        let r = patch(c, &format!("{claims}/ds"), "json",
            r#"[{"op":"remove","path":"/spec/dataSource"},{"op":"remove","path":"/spec/dataSourceRef"}]"#).await;
        t.reply("data sources removed", &r);

        // A claim without a class may get its first one (the beta
        // annotation's, if it has one); any other class is a change.
        let mut spec = base.clone();
        spec.as_object_mut().map(|m| m.remove("storageClassName"));
        let mut annotated = claim("ann", spec.clone());
        annotated["metadata"]["annotations"] = json!({"volume.beta.kubernetes.io/storage-class": "fast"});
        let r = post(c, &claims, &annotated).await;
        assert_eq!(r.code, 201, "{:?}", r.body);
        let r = patch(c, &format!("{claims}/ann"), "merge", &json!({"spec": {"storageClassName": "slow"}}).to_string()).await;
        assert_eq!(r.code, 422, "{:?}", r.body);
        t.reply("a class other than the annotation's", &r);
        let r = patch(c, &format!("{claims}/ann"), "merge", &json!({"spec": {"storageClassName": "fast"}}).to_string()).await;
        assert_eq!(r.code, 200, "{:?}", r.body);
        // Server-side apply meets the same rule.
        let apply = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "ann"},
            "spec": {"accessModes": ["ReadWriteMany"]}});
        let r = patch(c, &format!("{claims}/ann?fieldManager=diff&force=true"), "apply", &apply.to_string()).await;
        assert_eq!(r.code, 422, "{:?}", r.body);
        t.reply("apply", &r);
        t
    })
    .await;
}

/// `ValidatePersistentVolumeUpdate` refuses a change to a volume's source
/// with `spec.persistentvolumesource is immutable after creation` and
/// `diff.Diff` of the internal `PersistentVolumeSource`s (all 22 source
/// pointers, the set one expanded); a first CSI controllerExpandSecretRef is
/// allowed.
#[tokio::test]
async fn volume_source_immutability_diffs() {
    differential("pvdiff", |_| async { kube_sim::SimConfig::default() }, |ctx| async move {
        let c = &ctx.client;
        let mut t = Transcript::new();
        let pv = |name: &str, source: Value| {
            let mut v = json!({"metadata": {"name": name}, "spec": {"capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"], "storageClassName": ""}});
            for (k, x) in source.as_object().into_iter().flatten() {
                v["spec"][k] = x.clone();
            }
            v
        };
        let affinity = json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}]}]}});
        let (hp, csi, local, nfs) =
            (ctx.unique("hp"), ctx.unique("csi"), ctx.unique("local"), ctx.unique("nfs"));
        for (name, source) in [
            (&hp, json!({"hostPath": {"path": "/data/a"}})),
            (&csi, json!({"csi": {"driver": "d.example.com", "volumeHandle": "h1",
                "volumeAttributes": {"b": "2", "a": "1"}}})),
            (&local, json!({"local": {"path": "/mnt/x"}, "nodeAffinity": affinity})),
            (&nfs, json!({"nfs": {"server": "nfs.example.com", "path": "/exports/a"}})),
        ] {
            let r = post(c, "/api/v1/persistentvolumes", &pv(name, source)).await;
            assert_eq!(r.code, 201, "{name}: {:?}", r.body);
        }
        let path = |n: &str| format!("/api/v1/persistentvolumes/{n}");
        for (label, name, body) in [
            ("host path", &hp, json!({"spec": {"hostPath": {"path": "/data/b"}}})),
            ("host path type", &hp, json!({"spec": {"hostPath": {"type": "Directory"}}})),
            ("host path to nfs", &hp, json!({"spec": {"hostPath": null, "nfs": {"server": "s", "path": "/p"}}})),
            ("volume mode", &hp, json!({"spec": {"volumeMode": "Block"}})),
            ("csi handle", &csi, json!({"spec": {"csi": {"volumeHandle": "h2"}}})),
            ("csi attributes and fsType", &csi, json!({"spec": {"csi": {"volumeAttributes": {"c": "<&>"}, "fsType": "ext4", "readOnly": true}}})),
            ("csi node publish secret", &csi, json!({"spec": {"csi": {"nodePublishSecretRef": {"name": "s", "namespace": "ns"}}}})),
            ("local path", &local, json!({"spec": {"local": {"path": "/mnt/y", "fsType": "xfs"}}})),
            ("nfs server", &nfs, json!({"spec": {"nfs": {"server": "other.example.com", "readOnly": true}}})),
        ] {
            let r = patch(c, &path(name), "merge", &body.to_string()).await;
            assert_eq!(r.code, 422, "{label}: {:?}", r.body);
            t.reply(label, &r);
        }
        // A first controllerExpandSecretRef is allowed; changing it is not.
        let r = patch(c, &path(&csi), "merge",
            &json!({"spec": {"csi": {"controllerExpandSecretRef": {"name": "e", "namespace": "ns"}}}}).to_string()).await;
        assert_eq!(r.code, 200, "{:?}", r.body);
        t.note("expand secret set", r.body["spec"]["csi"].clone());
        let r = patch(c, &path(&csi), "merge",
            &json!({"spec": {"csi": {"controllerExpandSecretRef": {"name": "f"}}}}).to_string()).await;
        assert_eq!(r.code, 422, "{:?}", r.body);
        t.reply("expand secret changed", &r);
        for n in [&hp, &csi, &local, &nfs] {
            let _ = delete(c, &path(n)).await;
        }
        t
    })
    .await;
}

/// A built-in kind's `resource.Quantity` fields are decoded and marshalled
/// again (`1.5Gi` is stored and answered as `1536Mi`, `2000M` as `2G`,
/// `+1k` and `1E3` kept as upstream's parser keeps canonical-looking text),
/// on create, every patch type, apply and update, and in lists and watches;
/// a text that is no quantity is the decoder's error.
#[tokio::test]
async fn quantities_are_stored_as_they_marshal() {
    differential("qty", |_| async { kube_sim::SimConfig::default() }, |ctx| async move {
        let c = &ctx.client;
        let mut t = Transcript::new();
        let claims = format!("/api/v1/namespaces/{}/persistentvolumeclaims", ctx.ns);
        let claim = |name: &str, storage: Value| {
            json!({"metadata": {"name": name}, "spec": {"accessModes": ["ReadWriteOnce"],
                "storageClassName": "fast", "resources": {"requests": {"storage": storage},
                    "limits": {"storage": "4Gi"}}}})
        };
        let quantities = [
            json!("1.5Gi"), json!("2000M"), json!("1e3"), json!("1E6"), json!("1000e3"),
            json!("+1k"), json!("01k"), json!("1.0k"), json!("0.5"), json!("100000000m"),
            json!("0.1Ki"), json!(" 1Gi "), json!("1024Mi"), json!("1.Gi"), json!("16Ei"),
            json!("1000E"), json!("0.0000000001"), json!(1.5), json!(2048),
            json!("abc"), json!("1kk"), json!("1e"), json!("1Gb"), json!("-1.5Gi"), json!("0Gi"),
            json!(null), json!(true),
        ];
        for (i, q) in quantities.iter().enumerate() {
            let r = post(c, &claims, &claim(&format!("q{i}"), q.clone())).await;
            let seen = if r.code == 201 { r.body["spec"]["resources"].clone() } else { r.body.clone() };
            t.note(&format!("create {q}"), json!({"code": r.code, "seen": seen}));
        }
        let stored = |body: &Value| -> Value {
            let mut items: Vec<(String, Value)> = body["items"].as_array().into_iter().flatten()
                .map(|o| (o["metadata"]["name"].as_str().unwrap_or("").to_string(),
                    o["spec"]["resources"].clone())).collect();
            items.sort_by(|a, b| a.0.cmp(&b.0));
            json!(items)
        };
        let r = get(c, &claims).await;
        t.note("listed", stored(&r.body));
        let events = watch_events(c.clone(), format!("{claims}?watch=1&resourceVersion=0&timeoutSeconds=1")).await;
        let objects: Vec<Value> = events.iter().map(|e| e["object"].clone()).collect();
        t.note("watched", stored(&json!({"items": objects})));

        // A volume's capacity through every write.
        let pv = ctx.unique("qty");
        let path = format!("/api/v1/persistentvolumes/{pv}");
        let r = post(c, "/api/v1/persistentvolumes", &json!({"metadata": {"name": pv},
            "spec": {"capacity": {"storage": "1.5Gi"}, "accessModes": ["ReadWriteOnce"],
                "storageClassName": "manual", "hostPath": {"path": "/data/q"}}})).await;
        t.note("volume created", json!({"code": r.code, "capacity": r.body["spec"]["capacity"]}));
        let apply = |storage: &str| json!({"apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": pv}, "spec": {"capacity": {"storage": storage}}}).to_string();
        for (label, kind, query, body) in [
            ("merge", "merge", "", json!({"spec": {"capacity": {"storage": "2000M"}}}).to_string()),
            ("json", "json", "", r#"[{"op":"replace","path":"/spec/capacity/storage","value":"0.5Gi"}]"#.to_string()),
            ("strategic", "strategic", "", json!({"spec": {"capacity": {"storage": "1.0k"}}}).to_string()),
            ("apply", "apply", "?fieldManager=q&force=true", apply("3.5Gi")),
            ("apply again", "apply", "?fieldManager=q", apply("3.5Gi")),
            ("apply, another manager", "apply", "?fieldManager=other", apply("3.5Gi")),
            ("same value, another unit", "merge", "", json!({"spec": {"capacity": {"storage": "3584Mi"}}}).to_string()),
            ("merge, no quantity", "merge", "", json!({"spec": {"capacity": {"storage": "abc"}}}).to_string()),
            ("json, no quantity", "json", "", r#"[{"op":"replace","path":"/spec/capacity/storage","value":"1kk"}]"#.to_string()),
            ("strategic, no quantity", "strategic", "", json!({"spec": {"capacity": {"storage": "x"}}}).to_string()),
            ("apply, no quantity", "apply", "?fieldManager=q&force=true", apply("1Gb")),
        ] {
            let r = patch(c, &format!("{path}{query}"), kind, &body).await;
            let seen = if r.code == 200 {
                json!({"capacity": r.body["spec"]["capacity"], "managers": r.body["metadata"]["managedFields"]})
            } else {
                r.body.clone()
            };
            t.note(label, json!({"code": r.code, "seen": seen}));
        }
        let r = get(c, &path).await;
        let mut whole = r.body.clone();
        whole["spec"]["capacity"]["storage"] = json!("4096Mi");
        let r = put(c, &path, &whole).await;
        t.note("update", json!({"code": r.code, "capacity": r.body["spec"]["capacity"]}));
        whole["spec"]["capacity"]["storage"] = json!("1e");
        let r = put(c, &path, &whole).await;
        t.reply("update, no quantity", &r);
        let _ = delete(c, &path).await;

        // A pod's container resources and an emptyDir's size limit.
        let pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox",
            "resources": {"requests": {"cpu": "0.5", "memory": "1.5Gi"}, "limits": {"cpu": "1000m", "memory": "2048Mi"}}}],
            "volumes": [{"name": "v", "emptyDir": {"sizeLimit": "0.5Gi"}}]}});
        let r = post(c, &format!("/api/v1/namespaces/{}/pods", ctx.ns), &pod).await;
        t.note("pod", json!({"code": r.code, "resources": r.body["spec"]["containers"][0]["resources"],
            "volumes": r.body["spec"]["volumes"]}));
        t
    })
    .await;
}

/// Sends one request; the status and the body's bytes as text (not
/// parsed: escapes are visible).
async fn raw(
    c: &kube::Client,
    method: &str,
    path: &str,
    content_type: &str,
    body: &str,
) -> (u16, String) {
    use http_body_util::BodyExt;
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header(http::header::CONTENT_TYPE, content_type)
        .header(http::header::ACCEPT, "application/json")
        .body(kube::client::Body::from(body.as_bytes().to_vec()))
        .expect("request");
    let resp = c.send(req).await.expect("response");
    let code = resp.status().as_u16();
    let mut body = resp.into_body();
    let mut buf = Vec::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.expect("body").into_data() {
            buf.extend_from_slice(&data);
        }
    }
    (code, String::from_utf8_lossy(&buf).into_owned())
}

/// Up to `n` characters of `s` after the first `marker` ("" without one).
fn after(s: &str, marker: &str, n: usize) -> String {
    s.find(marker)
        .map(|i| s[i + marker.len()..].chars().take(n).collect())
        .unwrap_or_default()
}

/// Go's encoding/json escapes `<`, `>`, `&`, U+2028 and U+2029
/// (`\u003c`...) in what it writes: the bytes of every JSON answer (an
/// object, a list, a watch event, an error Status), a patched document
/// quoted in an error, a field error's object value.
#[tokio::test]
async fn json_is_written_html_safe_as_go_writes_it() {
    differential("html", |_| async { kube_sim::SimConfig::default() }, |ctx| async move {
        let c = &ctx.client;
        let mut t = Transcript::new();
        let ns = &ctx.ns;
        let cms = format!("/api/v1/namespaces/{ns}/configmaps");
        let text = "<b>&amp;\u{2028}\u{2029}é</b>";
        let cm = json!({"metadata": {"name": "h"}, "data": {"note": text}});
        let (code, body) = raw(c, "POST", &cms, "application/json", &cm.to_string()).await;
        t.note("created", json!({"code": code, "note": after(&body, "\"note\":", 60)}));
        let (code, body) = raw(c, "GET", &format!("{cms}/h"), "application/json", "").await;
        t.note("got", json!({"code": code, "note": after(&body, "\"note\":", 60)}));
        let (code, body) = raw(c, "GET", &cms, "application/json", "").await;
        t.note("listed", json!({"code": code, "note": after(&body, "\"note\":", 60)}));
        let (code, body) = raw(c, "GET", &format!("{cms}?watch=1&resourceVersion=0&timeoutSeconds=1"), "application/json", "").await;
        t.note("watched", json!({"code": code, "note": after(&body, "\"note\":", 60)}));
        let bad = json!({"metadata": {"name": "a<b&"}});
        let (code, body) = raw(c, "POST", &cms, "application/json", &bad.to_string()).await;
        t.note("refused", json!({"code": code, "message": after(&body, "\"message\":", 40)}));

        // A patched document that does not decode, quoted in the error.
        let leases = format!("/apis/coordination.k8s.io/v1/namespaces/{ns}/leases");
        let r = post(c, &leases, &json!({"metadata": {"name": "l", "annotations": {"note": "<&>"}},
            "spec": {"holderIdentity": "a>b"}})).await;
        assert_eq!(r.code, 201, "{:?}", r.body);
        for kind in ["merge", "json"] {
            let body = if kind == "merge" {
                json!({"spec": {"leaseDurationSeconds": "x"}}).to_string()
            } else {
                r#"[{"op":"add","path":"/spec/leaseDurationSeconds","value":"x"}]"#.to_string()
            };
            let r = patch(c, &format!("{leases}/l"), kind, &body).await;
            let msg = r.body["message"].as_str().unwrap_or_default();
            t.note(&format!("{kind} patch that does not decode"), json!({"code": r.code,
                "note": after(msg, "\\\"note\\\":", 28), "holder": after(msg, "\\\"holderIdentity\\\":", 16)}));
            assert!(msg.contains("note"), "{msg}");
        }
        // A field error's object value (a review's metadata).
        let r = post(c, "/apis/authorization.k8s.io/v1/subjectaccessreviews", &json!({
            "metadata": {"name": "x", "annotations": {"n": "<&>"}},
            "spec": {"user": "u", "resourceAttributes": {"verb": "get", "resource": "pods"}}})).await;
        let msg = r.body["message"].as_str().unwrap_or_default();
        t.note("review metadata", json!({"code": r.code, "annotations": after(msg, "\"annotations\":", 20)}));
        t
    })
    .await;
}

/// A Pod's and a Deployment's defaults (`SetDefaults_Pod` only for the
/// Pod: `enableServiceLinks`, requests from limits; the Priority admission
/// plugin's `priority` and `preemptionPolicy`; no `serviceAccountName`, as
/// the test bed's server runs without the ServiceAccount plugin) and the
/// managedFields of their creation (structured-merge-diff's `.` members: a
/// new list item and what it holds, not a field the typed object always
/// has); a ValidatingAdmissionPolicy's decoder defaults, owned by its
/// creator.
#[tokio::test]
async fn pod_and_deployment_defaults_and_managed_fields() {
    differential(
        "podmf",
        |_| async { kube_sim::SimConfig::default() },
        |ctx| async move {
            let c = &ctx.client;
            let mut t = Transcript::new();
            let api = format!("/api/v1/namespaces/{}", ctx.ns);
            let apps = format!("/apis/apps/v1/namespaces/{}", ctx.ns);
            let container = json!({"name": "c", "image": "registry.k8s.io/pause:3.10",
            "ports": [{"containerPort": 80, "name": "http"}],
            "env": [{"name": "A", "value": "1"}],
            "resources": {"limits": {"cpu": "100m", "memory": "64Mi"}},
            "securityContext": {"runAsNonRoot": true}});
            let pod = json!({"metadata": {"name": "web", "labels": {"app": "web"}},
            "spec": {"containers": [container],
                "initContainers": [{"name": "i", "image": "registry.k8s.io/pause:3.10",
                    "resources": {"limits": {"cpu": "50m"}, "requests": {"memory": "1Mi"}}}],
                "volumes": [{"name": "v", "emptyDir": {}}]}});
            let r = post(c, &format!("{api}/pods"), &pod).await;
            assert_eq!(r.code, 201, "{:?}", r.body);
            t.reply("create a pod", &r);
            let deploy = json!({"metadata": {"name": "web"}, "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [container]}}}});
            let r = post(c, &format!("{apps}/deployments"), &deploy).await;
            assert_eq!(r.code, 201, "{:?}", r.body);
            t.reply("create a deployment", &r);
            // An update adding a container and a port: the new item's fields.
            let r = patch(
                c,
                &format!("{apps}/deployments/web"),
                "strategic",
                &json!({"spec": {"template": {"spec": {"containers": [
                {"name": "d", "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": "10m"}}},
                {"name": "c", "ports": [{"containerPort": 81}]}]}}}})
                .to_string(),
            )
            .await;
            assert_eq!(r.code, 200, "{:?}", r.body);
            t.reply("add a container and a port", &r);
            // A PUT of the original body: the defaults it omits are
            // defaulted again, and stay its writer's.
            let mut put_body = deploy.clone();
            put_body["metadata"]["resourceVersion"] = r.body["metadata"]["resourceVersion"].clone();
            let r = put(c, &format!("{apps}/deployments/web"), &put_body).await;
            assert_eq!(r.code, 200, "{:?}", r.body);
            t.reply("replace the deployment", &r);
            // A Job's pod template: PodSpec defaults only.
            let r = post(
                c,
                &format!("/apis/batch/v1/namespaces/{}/jobs", ctx.ns),
                &json!({"metadata": {"name": "j"}, "spec": {"template": {"spec": {
                    "restartPolicy": "Never", "containers": [container]}}}}),
            )
            .await;
            assert_eq!(r.code, 201, "{:?}", r.body);
            let mut spec = r.body["spec"].clone();
            // (The generated selector and labels name the job's uid.)
            spec["selector"] = Value::Null;
            spec["template"]["metadata"]["labels"] = Value::Null;
            t.note("create a job: spec", spec);
            t.note(
                "create a job: managedFields",
                r.body["metadata"]["managedFields"].clone(),
            );
            let vap = ctx.unique("vap");
            t.volatile(&vap, "<vap>");
            let r = post(
                c,
                "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies",
                &json!({"metadata": {"name": vap}, "spec": {
                "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                    "operations": ["CREATE"], "resources": ["configmaps"]}]},
                "validations": [{"expression": "true"}]}}),
            )
            .await;
            assert_eq!(r.code, 201, "{:?}", r.body);
            t.note(
                "create a validating admission policy: spec",
                r.body["spec"].clone(),
            );
            t.note(
                "create a validating admission policy: managedFields",
                r.body["metadata"]["managedFields"].clone(),
            );
            let _ = delete(
                c,
                &format!("/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/{vap}"),
            )
            .await;
            t
        },
    )
    .await;
}

/// A merge patch drops the nulls of what it adds, through arrays too
/// (evanphx/json-patch's pruneNulls), and of a new nested object.
#[tokio::test]
async fn merge_patch_prunes_nulls_in_new_values() {
    differential("mnull", |_| async { kube_sim::SimConfig::default() }, |ctx| async move {
        let c = &ctx.client;
        let mut t = Transcript::new();
        let apps = format!("/apis/apps/v1/namespaces/{}", ctx.ns);
        let deploy = json!({"metadata": {"name": "web"}, "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}}});
        let r = post(c, &format!("{apps}/deployments"), &deploy).await;
        assert_eq!(r.code, 201, "{:?}", r.body);
        for (label, body) in [
            ("a new list with nulls in its items", json!({"spec": {"template": {"spec": {"containers": [
                {"name": "c", "image": "registry.k8s.io/pause:3.10", "command": null,
                    "env": [{"name": "A", "value": null, "valueFrom": null}],
                    "securityContext": {"runAsUser": null, "privileged": false}}]}}}})),
            ("a new nested object with nulls", json!({"metadata": {"annotations": {"a": "1", "b": null}},
                "spec": {"template": {"spec": {"affinity": {"nodeAffinity": null,
                    "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                        {"topologyKey": "k", "labelSelector": {"matchLabels": {"x": "y"}, "matchExpressions": null},
                            "namespaces": null}]}}}}}})),
        ] {
            let r = patch(c, &format!("{apps}/deployments/web"), "merge", &body.to_string()).await;
            t.reply(label, &r);
            let r = get(c, &format!("{apps}/deployments/web")).await;
            t.reply(&format!("{label}: stored"), &r);
        }
        t
    })
    .await;
}

/// `ValidatePodUpdate` allows a change to a pod's spec only in its mutable
/// fields (images, a lower activeDeadlineSeconds, added tolerations,
/// removed scheduling gates, and for a gated pod added nodeSelector entries
/// and its node affinity); any other change is refused with `spec:
/// Forbidden: pod updates may not change fields other than ...` and
/// `diff.Diff` of the old internal PodSpec and the new one with the mutable
/// fields taken from the old, compared whole. Each change below provokes
/// its own answer.
#[tokio::test]
async fn pod_spec_update_rules() {
    differential("podupd", |_| async { kube_sim::SimConfig::default() }, |ctx| async move {
        let c = &ctx.client;
        let mut t = Transcript::new();
        let pods = format!("/api/v1/namespaces/{}/pods", ctx.ns);
        // The service account and preemption policy that kube-sim's
        // admission and the real server's would fill in differently, and the
        // probe's and the ephemeral container's defaults, are given, and no
        // container port (the default hostPort of a host-network pod):
        // defaults are compared elsewhere.
        let pod = json!({"metadata": {"name": "p"}, "spec": {
            "serviceAccountName": "default", "preemptionPolicy": "PreemptLowerPriority",
            "activeDeadlineSeconds": 100,
            "initContainers": [{"name": "init", "image": "busybox"}],
            "containers": [
                {"name": "a", "image": "busybox"},
                {"name": "b", "image": "busybox",
                    "readinessProbe": {"httpGet": {"path": "/", "port": "http", "scheme": "HTTP"},
                        "timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1,
                        "failureThreshold": 3}},
            ],
            "tolerations": [{"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"}]}});
        let r = post(c, &pods, &pod).await;
        assert_eq!(r.code, 201, "{:?}", r.body);
        let path = format!("{pods}/p");
        // The mutable fields.
        for (label, kind, body) in [
            ("image", "strategic", json!({"spec": {"containers": [{"name": "a", "image": "nginx"}]}}).to_string()),
            ("init image", "strategic", json!({"spec": {"initContainers": [{"name": "init", "image": "nginx"}]}}).to_string()),
            ("deadline lowered", "merge", json!({"spec": {"activeDeadlineSeconds": 50}}).to_string()),
            ("toleration added", "json", r#"[{"op":"add","path":"/spec/tolerations/-","value":{"key":"x","operator":"Exists"}}]"#.to_string()),
            ("toleration seconds", "json", r#"[{"op":"add","path":"/spec/tolerations/-","value":{"key":"n","operator":"Exists","effect":"NoExecute","tolerationSeconds":5}}]"#.to_string()),
        ] {
            let r = patch(c, &path, kind, &body).await;
            assert_eq!(r.code, 200, "{label}: {:?}", r.body);
            t.note(label, json!({"images": [&r.body["spec"]["initContainers"][0]["image"],
                &r.body["spec"]["containers"][0]["image"]],
                "deadline": &r.body["spec"]["activeDeadlineSeconds"],
                "tolerations": &r.body["spec"]["tolerations"]}));
        }
        // A toleration compares as the internal struct: an empty value is
        // an absent one.
        let r = patch(c, &path, "json", r#"[{"op":"add","path":"/spec/tolerations/3/value","value":""}]"#).await;
        assert_eq!(r.code, 200, "{:?}", r.body);
        t.note("toleration with an empty value", json!(r.code));
        // Everything else.
        for (label, kind, body) in [
            ("restart policy", "merge", json!({"spec": {"restartPolicy": "Never"}}).to_string()),
            ("node name", "merge", json!({"spec": {"nodeName": "node-1"}}).to_string()),
            ("node selector", "merge", json!({"spec": {"nodeSelector": {"zone": "a"}}}).to_string()),
            ("host network", "merge", json!({"spec": {"hostNetwork": true}}).to_string()),
            ("security context", "merge", json!({"spec": {"securityContext": {"runAsUser": 1000}}}).to_string()),
            ("service account", "merge", json!({"spec": {"serviceAccountName": "other"}}).to_string()),
            ("container command", "strategic", json!({"spec": {"containers": [{"name": "a", "command": ["sh", "-c", "true"]}]}}).to_string()),
            ("container env", "strategic", json!({"spec": {"containers": [{"name": "b", "env": [{"name": "E", "value": "<1>"}]}]}}).to_string()),
            ("probe port", "json", r#"[{"op":"replace","path":"/spec/containers/1/readinessProbe/httpGet/port","value":8080}]"#.to_string()),
            ("image and command", "json", r#"[{"op":"replace","path":"/spec/containers/0/image","value":"redis"},{"op":"add","path":"/spec/containers/0/args","value":["x"]}]"#.to_string()),
            ("volume", "merge", json!({"spec": {"volumes": [{"name": "v", "emptyDir": {}}]}}).to_string()),
            ("ephemeral container", "merge", json!({"spec": {"ephemeralContainers": [{"name": "dbg", "image": "busybox",
                "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
                "imagePullPolicy": "Always"}]}}).to_string()),
            ("container added", "strategic", json!({"spec": {"containers": [{"name": "c", "image": "busybox"}]}}).to_string()),
            ("init container removed", "json", r#"[{"op":"remove","path":"/spec/initContainers/0"}]"#.to_string()),
            ("image with spaces", "strategic", json!({"spec": {"containers": [{"name": "a", "image": " nginx "}]}}).to_string()),
            ("image removed", "json", r#"[{"op":"remove","path":"/spec/containers/0/image"}]"#.to_string()),
            ("deadline raised", "merge", json!({"spec": {"activeDeadlineSeconds": 500}}).to_string()),
            ("deadline negative", "merge", json!({"spec": {"activeDeadlineSeconds": -1}}).to_string()),
            ("deadline removed", "json", r#"[{"op":"remove","path":"/spec/activeDeadlineSeconds"}]"#.to_string()),
            ("toleration changed", "json", r#"[{"op":"replace","path":"/spec/tolerations/0/value","value":"w"}]"#.to_string()),
            ("scheduling gate added", "merge", json!({"spec": {"schedulingGates": [{"name": "g"}]}}).to_string()),
            ("several", "merge", json!({"spec": {"restartPolicy": "OnFailure", "hostname": "h", "priority": 5,
                "dnsPolicy": "Default"}}).to_string()),
        ] {
            let r = patch(c, &path, kind, &body).await;
            assert_eq!(r.code, 422, "{label}: {:?}", r.body);
            t.reply(label, &r);
        }
        // A PUT of the pod as read, with a change.
        let mut got = get(c, &path).await.body;
        got["spec"]["subdomain"] = json!("sub");
        let r = put(c, &path, &got).await;
        assert_eq!(r.code, 422, "{:?}", r.body);
        t.reply("PUT", &r);

        // A gated pod: its gates may only go, its nodeSelector may only
        // grow, a node affinity may be set (gated_pod_node_affinity_only_grows
        // has the rest).
        let gated = json!({"metadata": {"name": "g"}, "spec": {
            "serviceAccountName": "default", "preemptionPolicy": "PreemptLowerPriority",
            "schedulingGates": [{"name": "one"}, {"name": "two"}],
            "nodeSelector": {"zone": "a"},
            "containers": [{"name": "a", "image": "busybox"}]}});
        let r = post(c, &pods, &gated).await;
        assert_eq!(r.code, 201, "{:?}", r.body);
        let g = format!("{pods}/g");
        for (label, code, body) in [
            ("gate removed", 200, json!({"spec": {"schedulingGates": [{"name": "one"}]}})),
            ("selector grown", 200, json!({"spec": {"nodeSelector": {"disk": "ssd"}}})),
            ("selector changed", 422, json!({"spec": {"nodeSelector": {"zone": "b"}}})),
            ("node affinity", 200, json!({"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}}}})),
            ("gate added back", 422, json!({"spec": {"schedulingGates": [{"name": "one"}, {"name": "three"}]}})),
            ("gated restart policy", 422, json!({"spec": {"restartPolicy": "Never"}})),
        ] {
            let r = patch(c, &g, "merge", &body.to_string()).await;
            assert_eq!(r.code, code, "{label}: {:?}", r.body);
            if code == 200 {
                t.note(label, json!({"gates": &r.body["spec"]["schedulingGates"],
                    "selector": &r.body["spec"]["nodeSelector"],
                    "affinity": &r.body["spec"]["affinity"]}));
            } else {
                t.reply(label, &r);
            }
        }
        t
    })
    .await;
}

/// `ValidateTolerations`, on a pod's create (ValidatePodSpec) and update
/// (ValidatePodSpec of the new pod, then again in
/// `validateOnlyAddedTolerations` unless an old toleration went: each error
/// twice in the causes, once in the message), with the
/// TaintTolerationComparisonOperators gate off as in 1.36; and the
/// DefaultTolerationSeconds admission that runs before it, on create and
/// update (a toleration without a key or effect tolerates the not-ready and
/// unreachable taints).
#[tokio::test]
async fn pod_tolerations_are_validated() {
    differential("podtol", |_| async { kube_sim::SimConfig::default() }, |ctx| async move {
        let c = &ctx.client;
        let mut t = Transcript::new();
        let pods = format!("/api/v1/namespaces/{}/pods", ctx.ns);
        let pod = |name: &str, tolerations: Value| json!({"metadata": {"name": name}, "spec": {
            "serviceAccountName": "default", "preemptionPolicy": "PreemptLowerPriority",
            "containers": [{"name": "a", "image": "busybox"}],
            "tolerations": tolerations}});
        let long = "-".repeat(64);
        for (i, (label, tolerations)) in [
            ("bad key", json!([{"key": "a b", "operator": "Exists"}])),
            ("empty key name", json!([{"key": "example.com/", "operator": "Exists"}])),
            ("two slashes", json!([{"key": "a/b/c", "operator": "Exists"}])),
            ("long key", json!([{"key": format!("{}/{}", "p".repeat(254), "k".repeat(64)), "operator": "Exists"}])),
            ("exists with a value", json!([{"key": "k", "operator": "Exists", "value": "v"}])),
            ("equal without a key", json!([{"operator": "Equal", "value": "v"}])),
            ("no key, no operator", json!([{"value": "v", "effect": "NoSchedule"}])),
            ("unknown operator", json!([{"key": "k", "operator": "In", "value": "v"}])),
            ("Lt", json!([{"key": "k", "operator": "Lt", "value": "5"}])),
            ("Gt", json!([{"key": "k", "operator": "Gt", "value": "x"}])),
            ("unknown effect", json!([{"key": "k", "operator": "Exists", "effect": "NoRun"}])),
            ("seconds without NoExecute", json!([{"key": "k", "operator": "Exists", "effect": "NoSchedule",
                "tolerationSeconds": 5}])),
            ("seconds without an effect", json!([{"key": "k", "operator": "Exists", "tolerationSeconds": 5}])),
            ("bad value", json!([{"key": "k", "operator": "Equal", "value": "a b"}])),
            ("long bad value", json!([{"key": "k", "value": long}])),
            ("everything wrong", json!([{"key": "-a", "operator": "Is", "value": "v", "effect": "Never",
                "tolerationSeconds": 1}])),
            ("second of three", json!([{"key": "k", "operator": "Exists"}, {"operator": "Exists", "value": "v"},
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}])),
            // Valid: what DefaultTolerationSeconds adds to each.
            ("match all", json!([{"operator": "Exists"}])),
            ("match all NoSchedule", json!([{"operator": "Exists", "effect": "NoSchedule"}])),
            ("not-ready NoSchedule", json!([{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                "effect": "NoSchedule"}])),
            ("unreachable any effect", json!([{"key": "node.kubernetes.io/unreachable", "operator": "Exists"}])),
            ("valid mix", json!([{"key": "example.com/k", "value": "v"}, {"key": "k", "operator": "Exists",
                "effect": "NoExecute", "tolerationSeconds": 10}])),
        ]
        .into_iter()
        .enumerate()
        {
            let r = post(c, &pods, &pod(&format!("c{i}"), tolerations)).await;
            if r.code == 201 {
                t.note(label, json!({"code": r.code, "tolerations": &r.body["spec"]["tolerations"]}));
            } else {
                t.reply(label, &r);
            }
        }

        // Updates: only additions, and those valid.
        let r = post(c, &pods, &pod("p", json!([{"key": "k", "operator": "Equal", "value": "v",
            "effect": "NoSchedule"}]))).await;
        assert_eq!(r.code, 201, "{:?}", r.body);
        let path = format!("{pods}/p");
        let add = |v: Value| json!([{"op": "add", "path": "/spec/tolerations/-", "value": v}]).to_string();
        for (label, kind, body) in [
            ("added bad key", "json", add(json!({"key": "a b", "operator": "Exists"}))),
            ("added exists with a value", "json", add(json!({"key": "x", "operator": "Exists", "value": "v"}))),
            ("added equal without a key", "json", add(json!({"operator": "Equal"}))),
            ("added unknown operator", "json", add(json!({"key": "x", "operator": "NotIn"}))),
            ("added Lt", "json", add(json!({"key": "x", "operator": "Lt", "value": "3"}))),
            ("added unknown effect", "json", add(json!({"key": "x", "operator": "Exists", "effect": "Sometimes"}))),
            ("added seconds without NoExecute", "json", add(json!({"key": "x", "operator": "Exists",
                "effect": "PreferNoSchedule", "tolerationSeconds": 7}))),
            ("added bad value", "json", add(json!({"key": "x", "value": "a_"}))),
            ("bad one added, old one changed", "json", json!([
                {"op": "replace", "path": "/spec/tolerations/0/value", "value": "w"},
                {"op": "add", "path": "/spec/tolerations/-", "value": {"key": "x", "operator": "Exists", "value": "v"}},
            ]).to_string()),
            ("old one made invalid", "json", r#"[{"op":"replace","path":"/spec/tolerations/0/operator","value":"Exists"}]"#.to_string()),
            ("list emptied", "merge", json!({"spec": {"tolerations": []}}).to_string()),
            ("defaults dropped, match all added", "merge", json!({"spec": {"tolerations": [
                {"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"}, {"operator": "Exists"}]}}).to_string()),
            // Allowed: the defaults come back at the end.
            ("defaults dropped", "merge", json!({"spec": {"tolerations": [
                {"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"}]}}).to_string()),
            ("valid one added", "json", add(json!({"key": "example.com/x", "operator": "Exists", "effect": "NoExecute",
                "tolerationSeconds": 30}))),
        ] {
            let r = patch(c, &path, kind, &body).await;
            if r.code == 200 {
                t.note(label, json!({"code": r.code, "tolerations": &r.body["spec"]["tolerations"]}));
            } else {
                t.reply(label, &r);
            }
        }
        // A PUT of the pod as read, with its default tolerations gone and an
        // invalid one added.
        let mut got = get(c, &path).await.body;
        got["spec"]["tolerations"] = json!([{"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"},
            {"key": "example.com/x", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30},
            {"key": "y", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 1}]);
        let r = put(c, &path, &got).await;
        t.reply("PUT", &r);
        t
    })
    .await;
}

/// A gated pod's node affinity (`validateNodeAffinityMutation`): where it
/// had required node selector terms, there are as many, each only added to
/// (its old match expressions and fields first, none added to a term that
/// had neither); preferred terms, and required ones where there were none,
/// may change in any way. An ungated pod's may not change at all.
#[tokio::test]
async fn gated_pod_node_affinity_only_grows() {
    differential("podaff", |_| async { kube_sim::SimConfig::default() }, |ctx| async move {
        let c = &ctx.client;
        let mut t = Transcript::new();
        let pods = format!("/api/v1/namespaces/{}/pods", ctx.ns);
        let expr = |key: &str, v: &str| json!({"key": key, "operator": "In", "values": [v]});
        let pod = |name: &str, affinity: Value| json!({"metadata": {"name": name}, "spec": {
            "serviceAccountName": "default", "preemptionPolicy": "PreemptLowerPriority",
            "schedulingGates": [{"name": "g"}],
            "containers": [{"name": "a", "image": "busybox"}],
            "affinity": affinity}});
        let affinity = json!({"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [expr("zone", "a")]},
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]},
                {},
            ]},
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "preference": {"matchExpressions": [expr("disk", "ssd")]}}]}});
        let r = post(c, &pods, &pod("g", affinity)).await;
        assert_eq!(r.code, 201, "{:?}", r.body);
        let path = format!("{pods}/g");
        const TERMS: &str = "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms";
        let op = |op: &str, p: &str, v: Option<Value>| {
            let mut o = json!({"op": op, "path": format!("{TERMS}{p}")});
            if let Some(v) = v {
                o["value"] = v;
            }
            json!([o]).to_string()
        };
        for (label, kind, body) in [
            ("expression added", "json", op("add", "/0/matchExpressions/-", Some(expr("rack", "r1")))),
            ("field added", "json", op("add", "/1/matchFields/-",
                Some(json!({"key": "metadata.name", "operator": "NotIn", "values": ["n2"]})))),
            ("expression added beside fields", "json", op("add", "/1/matchExpressions", Some(json!([expr("zone", "b")])))),
            ("term added", "json", op("add", "/-", Some(json!({"matchExpressions": [expr("zone", "c")]})))),
            ("term removed", "json", op("remove", "/2", None)),
            ("terms replaced by as many", "json", op("replace", "", Some(json!([{}, {}, {}])))),
            ("expression changed", "json", op("replace", "/0/matchExpressions/0/values", Some(json!(["b"])))),
            ("expression removed", "json", op("remove", "/0/matchExpressions/0", None)),
            ("expression put first", "json", op("add", "/0/matchExpressions/0", Some(expr("rack", "r2")))),
            ("field changed", "json", op("replace", "/1/matchFields/0/operator", Some(json!("NotIn")))),
            ("empty term given an expression", "json", op("add", "/2/matchExpressions", Some(json!([expr("zone", "a")])))),
            ("empty term given a field", "json", op("add", "/2/matchFields",
                Some(json!([{"key": "metadata.name", "operator": "In", "values": ["n1"]}])))),
            ("two terms changed", "json", json!([
                {"op": "remove", "path": format!("{TERMS}/0/matchExpressions/1")},
                {"op": "replace", "path": format!("{TERMS}/1/matchFields/0/values/0"), "value": "n3"},
            ]).to_string()),
            ("required removed", "json", r#"[{"op":"remove","path":"/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution"}]"#.to_string()),
            ("node affinity removed", "merge", json!({"spec": {"affinity": {"nodeAffinity": null}}}).to_string()),
            ("affinity removed", "json", r#"[{"op":"remove","path":"/spec/affinity"}]"#.to_string()),
            ("changed with a pod affinity added", "merge", json!({"spec": {"affinity": {
                "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{}]}},
                "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "podAffinityTerm": {
                    "topologyKey": "zone", "labelSelector": {"matchLabels": {"a": "b"}}}}]}}}}).to_string()),
            ("preferred changed", "merge", json!({"spec": {"affinity": {"nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 5, "preference": {"matchExpressions": [expr("disk", "hdd")]}}]}}}}).to_string()),
            ("preferred removed", "json", r#"[{"op":"remove","path":"/spec/affinity/nodeAffinity/preferredDuringSchedulingIgnoredDuringExecution"}]"#.to_string()),
            ("gate removed, term changed", "json", json!([
                {"op": "remove", "path": "/spec/schedulingGates"},
                {"op": "remove", "path": format!("{TERMS}/0/matchExpressions/0")},
            ]).to_string()),
            ("gate removed, expression added", "json", json!([
                {"op": "remove", "path": "/spec/schedulingGates"},
                {"op": "add", "path": format!("{TERMS}/0/matchExpressions/-"), "value": expr("rack", "r3")},
            ]).to_string()),
            // No longer gated: no change at all.
            ("ungated expression added", "json", op("add", "/0/matchExpressions/-", Some(expr("rack", "r4")))),
        ] {
            let r = patch(c, &path, kind, &body).await;
            if r.code == 200 {
                t.note(label, json!({"code": r.code, "gates": &r.body["spec"]["schedulingGates"],
                    "affinity": &r.body["spec"]["affinity"]}));
            } else {
                t.reply(label, &r);
            }
        }

        // Required terms where there were none may be set in any way, and
        // then only grow.
        let r = post(c, &pods, &pod("p", json!({"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 1, "preference": {"matchExpressions": [expr("disk", "ssd")]}}]}}))).await;
        assert_eq!(r.code, 201, "{:?}", r.body);
        let p = format!("{pods}/p");
        for (label, body) in [
            ("required set", json!({"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                {"nodeSelectorTerms": [{"matchExpressions": [expr("zone", "a")]}]}}}}})),
            ("required changed", json!({"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                {"nodeSelectorTerms": [{"matchExpressions": [expr("zone", "b")]}]}}}}})),
        ] {
            let r = patch(c, &p, "merge", &body.to_string()).await;
            if r.code == 200 {
                t.note(label, json!({"code": r.code, "affinity": &r.body["spec"]["affinity"]}));
            } else {
                t.reply(label, &r);
            }
        }
        t
    })
    .await;
}

/// A pod's affinity (`validateAffinity`), on create and on a gated pod's
/// update: node affinity's required selector and preferred terms, pod
/// affinity's and anti-affinity's required and weighted terms, with their
/// selectors, namespaces, matchLabelKeys and mismatchLabelKeys (merged into
/// the label selector on create, as `mutatePodAffinity` does) and topology
/// keys. One invalid entry per map (upstream iterates maps at random).
#[tokio::test]
async fn pod_affinity_is_validated() {
    differential("podaffv", |_| async { kube_sim::SimConfig::default() }, |ctx| async move {
        let c = &ctx.client;
        let mut t = Transcript::new();
        let pods = format!("/api/v1/namespaces/{}/pods", ctx.ns);
        let pod = |name: &str, affinity: Value| json!({"metadata": {"name": name, "labels": {"app": "web", "tier": "x"}},
            "spec": {
            "serviceAccountName": "default", "preemptionPolicy": "PreemptLowerPriority",
            "schedulingGates": [{"name": "g"}],
            "containers": [{"name": "a", "image": "busybox"}],
            "affinity": affinity}});
        let required = |terms: Value| json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}});
        let preferred = |terms: Value| json!({"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": terms}});
        let term = |t: Value| json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [t]}});
        let anti = |t: Value| json!({"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [t]}});
        let sel = json!({"matchLabels": {"app": "web"}});
        for (i, (label, affinity)) in [
            ("no terms", required(json!([]))),
            ("null terms", json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}})),
            ("In without values", required(json!([{"matchExpressions": [{"key": "k", "operator": "In"}]}]))),
            ("Exists with values", required(json!([{"matchExpressions": [{"key": "k", "operator": "Exists", "values": ["a"]}]}]))),
            ("Gt two values", required(json!([{"matchExpressions": [{"key": "k", "operator": "Gt", "values": ["1", "2"]}]}]))),
            ("Lt no value", required(json!([{"matchExpressions": [{"key": "k", "operator": "Lt"}]}]))),
            ("unknown operator", required(json!([{"matchExpressions": [{"key": "k", "operator": "Is", "values": ["a"]}]}]))),
            ("no operator, bad key", required(json!([{"matchExpressions": [{"key": "a b"}]}]))),
            ("empty key", required(json!([{"matchExpressions": [{"key": "", "operator": "Exists"}]}]))),
            ("bad value", required(json!([{}, {"matchExpressions": [{"key": "k", "operator": "In", "values": ["ok", "a b", "-x"]}]}]))),
            ("field In two", required(json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a", "b"]}]}]))),
            ("field Exists", required(json!([{"matchFields": [{"key": "metadata.name", "operator": "Exists"}]}]))),
            ("field bad key", required(json!([{"matchFields": [{"key": "metadata.uid", "operator": "In", "values": ["a"]}]}]))),
            ("field bad name", required(json!([{"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["A_b"]}]}]))),
            ("everything in a term", required(json!([{"matchExpressions": [{"key": "-k", "operator": "Gt", "values": []},
                {"key": "k", "operator": "DoesNotExist", "values": ["v"]}],
                "matchFields": [{"key": "spec.x", "operator": "Gt", "values": ["a"]}]}]))),
            ("weight 0", preferred(json!([{"weight": 0, "preference": {}}]))),
            ("weight 101", preferred(json!([{"weight": 101, "preference": {"matchExpressions": [{"key": "k", "operator": "Exists"}]}}]))),
            ("no weight, no preference", preferred(json!([{}]))),
            ("preferred bad value allowed", preferred(json!([{"weight": 1, "preference": {"matchExpressions": [{"key": "k", "operator": "In", "values": ["a b"]}]}}]))),
            ("preferred bad key", preferred(json!([{"weight": 5, "preference": {"matchExpressions": [{"key": "a/b/c", "operator": "In"}],
                "matchFields": [{"key": "metadata.name", "operator": "In"}]}}]))),
            ("required and preferred", json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []},
                "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": -1, "preference": {}}]}})),
            ("no topology key", term(json!({"labelSelector": sel}))),
            ("bad topology key", term(json!({"labelSelector": sel, "topologyKey": "a b"}))),
            ("nothing", term(json!({}))),
            ("selector bad label", term(json!({"labelSelector": {"matchLabels": {"a b": "v"}}, "topologyKey": "zone"}))),
            ("selector bad label value", term(json!({"labelSelector": {"matchLabels": {"k": "-v"}}, "topologyKey": "zone"}))),
            ("selector expressions", term(json!({"labelSelector": {"matchExpressions": [{"key": "k", "operator": "In"},
                {"key": "-k", "operator": "Exists", "values": ["a b"]}, {"key": "k", "operator": "Gt", "values": ["1"]}]},
                "topologyKey": "zone"}))),
            ("namespace selector", term(json!({"namespaceSelector": {"matchExpressions": [{"key": "k", "operator": "NotIn"}]},
                "topologyKey": "zone"}))),
            ("bad namespaces", term(json!({"labelSelector": sel, "namespaces": ["ok", "Not_OK", "x.y"], "topologyKey": "zone"}))),
            ("match keys without selector", term(json!({"matchLabelKeys": ["app"], "mismatchLabelKeys": ["tier"], "topologyKey": "zone"}))),
            ("bad match keys", term(json!({"labelSelector": sel, "matchLabelKeys": ["a b"], "mismatchLabelKeys": ["-x"], "topologyKey": "zone"}))),
            ("match key in selector", term(json!({"labelSelector": sel, "matchLabelKeys": ["app"], "topologyKey": "zone"}))),
            ("match key in expressions", term(json!({"labelSelector": {"matchExpressions": [{"key": "tier", "operator": "Exists"}]},
                "matchLabelKeys": ["other", "tier"], "topologyKey": "zone"}))),
            ("match and mismatch", term(json!({"labelSelector": {"matchExpressions": [{"key": "k", "operator": "Exists"}]},
                "matchLabelKeys": ["tier", "other"], "mismatchLabelKeys": ["other", "tier"], "topologyKey": "zone"}))),
            ("anti weight and term", anti(json!({"weight": 200, "podAffinityTerm": {"labelSelector": sel}}))),
            ("anti no term", anti(json!({"weight": 3}))),
            ("anti required", json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": sel, "topologyKey": "zone"}, {"topologyKey": "-"}]}})),
            ("all three", json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}},
                "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 0, "podAffinityTerm": {"topologyKey": "z"}}]},
                "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": ""}]}})),
            // Valid.
            ("valid node affinity", json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "k", "operator": "Gt", "values": ["1"]}, {"key": "example.com/z", "operator": "NotIn", "values": ["a"]}]},
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}, {}]},
                "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "preference": {}}]}})),
            ("valid pod affinity with label keys", json!({
                "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": sel,
                    "matchLabelKeys": ["tier", "absent"], "mismatchLabelKeys": ["app"], "topologyKey": "zone", "namespaces": ["a", "b"]}],
                    "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "podAffinityTerm": {"labelSelector": {},
                    "mismatchLabelKeys": ["tier"], "topologyKey": "kubernetes.io/hostname"}}]},
                "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {"matchExpressions": [
                    {"key": "x", "operator": "Exists"}]}, "matchLabelKeys": ["app"], "topologyKey": "zone",
                    "namespaceSelector": {}}]}})),
        ]
        .into_iter()
        .enumerate()
        {
            let r = post(c, &pods, &pod(&format!("c{i}"), affinity)).await;
            if r.code == 201 {
                t.note(label, json!({"code": r.code, "affinity": &r.body["spec"]["affinity"]}));
            } else {
                t.reply(label, &r);
            }
        }

        // A gated pod's node affinity may grow; what it grows to is validated.
        let r = post(c, &pods, &pod("p", json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}}))).await;
        assert_eq!(r.code, 201, "{:?}", r.body);
        let path = format!("{pods}/p");
        let add = |v: Value| json!([{"op": "add", "path": "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms/0/matchExpressions/-", "value": v}]).to_string();
        for (label, kind, body) in [
            ("added In without values", "json", add(json!({"key": "k", "operator": "In"}))),
            ("added bad value", "json", add(json!({"key": "k", "operator": "In", "values": ["a b"]}))),
            ("added bad key", "json", add(json!({"key": "a b", "operator": "Exists"}))),
            ("preferred bad weight", "json", json!([{"op": "add", "path": "/spec/affinity/nodeAffinity/preferredDuringSchedulingIgnoredDuringExecution",
                "value": [{"weight": 0, "preference": {"matchFields": [{"key": "x", "operator": "In", "values": ["a"]}]}}]}]).to_string()),
            ("pod affinity added", "merge", json!({"spec": {"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{}]}}}}).to_string()),
            ("valid one added", "json", add(json!({"key": "k", "operator": "Exists"}))),
        ] {
            let r = patch(c, &path, kind, &body).await;
            if r.code == 200 {
                t.note(label, json!({"code": r.code, "affinity": &r.body["spec"]["affinity"]}));
            } else {
                t.reply(label, &r);
            }
        }
        t
    })
    .await;
}

/// Empty slices and maps in omitempty fields of built-in objects are not
/// stored (decoding into the Go struct and encoding it again leaves them
/// out), in a pod, a claim, a service and a config map, on create and on
/// update, so a later forbidden pod update's spec diff does not show them;
/// a field without omitempty (`nodeSelectorTerms`) keeps its `[]`.
#[tokio::test]
async fn empty_omitempty_lists_and_maps_are_dropped() {
    differential("omitempty", |_| async { kube_sim::SimConfig::default() }, |ctx| async move {
        let c = &ctx.client;
        let mut t = Transcript::new();
        let ns = &ctx.ns;
        let pod = json!({"metadata": {"name": "p", "labels": {}, "annotations": {}}, "spec": {
            "serviceAccountName": "default", "preemptionPolicy": "PreemptLowerPriority",
            "containers": [{"name": "a", "image": "busybox", "args": [], "command": [], "env": [], "envFrom": [],
                "ports": [], "volumeMounts": [], "resources": {"limits": {}, "requests": {}, "claims": []},
                "securityContext": {"capabilities": {"add": [], "drop": []}}}],
            "initContainers": [], "volumes": [], "imagePullSecrets": [], "nodeSelector": {}, "hostAliases": [],
            "readinessGates": [], "topologySpreadConstraints": [], "schedulingGates": [], "resourceClaims": [],
            "dnsConfig": {"nameservers": [], "searches": [], "options": []},
            "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "preference": {"matchExpressions": [], "matchFields": []}}]},
                "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [], "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 2, "podAffinityTerm": {"labelSelector": {"matchLabels": {}, "matchExpressions": []},
                        "namespaces": [], "matchLabelKeys": [], "topologyKey": "zone"}}]}}}});
        let pods = format!("/api/v1/namespaces/{ns}/pods");
        let r = post(c, &pods, &pod).await;
        // (serviceAccount, the deprecated copy of serviceAccountName, is
        // left out: kube-sim does not write it.)
        let spec = |b: &Value| {
            let mut s = b["spec"].clone();
            if let Some(m) = s.as_object_mut() {
                m.remove("serviceAccount");
            }
            s
        };
        t.note("pod created", json!({"code": r.code, "metadata": {"labels": &r.body["metadata"]["labels"]}, "spec": spec(&r.body)}));
        let r = get(c, &format!("{pods}/p")).await;
        t.note("pod read", json!({"code": r.code, "spec": spec(&r.body)}));
        // Forbidden: the diff compares what is stored.
        let r = patch(c, &format!("{pods}/p"), "merge", &json!({"spec": {"restartPolicy": "Never"}}).to_string()).await;
        t.reply("pod update diff", &r);
        let r = patch(c, &format!("{pods}/p"), "merge", &json!({"spec": {"affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}}}}).to_string()).await;
        t.reply("pod required terms empty", &r);

        let claims = format!("/api/v1/namespaces/{ns}/persistentvolumeclaims");
        let claim = json!({"metadata": {"name": "c", "finalizers": []}, "spec": {"accessModes": ["ReadWriteOnce"],
            "selector": {"matchLabels": {}, "matchExpressions": []},
            "resources": {"requests": {"storage": "1Gi"}, "limits": {}}}});
        let r = post(c, &claims, &claim).await;
        t.note("claim created", json!({"code": r.code, "spec": &r.body["spec"]}));
        let mut got = get(c, &format!("{claims}/c")).await.body;
        got["spec"]["resources"]["limits"] = json!({});
        got["metadata"]["labels"] = json!({});
        let r = put(c, &format!("{claims}/c"), &got).await;
        if r.code == 200 {
            t.note("claim put", json!({"code": r.code, "spec": &r.body["spec"], "labels": &r.body["metadata"]["labels"]}));
        } else {
            t.reply("claim put", &r);
        }
        got["spec"]["accessModes"] = json!([]);
        got["metadata"]["resourceVersion"] = r.body["metadata"]["resourceVersion"].clone();
        let r = put(c, &format!("{claims}/c"), &got).await;
        t.reply("claim access modes emptied", &r);

        let services = format!("/api/v1/namespaces/{ns}/services");
        let svc = json!({"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}], "selector": {},
            "externalIPs": [], "loadBalancerSourceRanges": [], "ipFamilies": []}});
        let r = post(c, &services, &svc).await;
        t.note("service created", json!({"code": r.code, "selector": &r.body["spec"]["selector"],
            "externalIPs": &r.body["spec"]["externalIPs"], "loadBalancerSourceRanges": &r.body["spec"]["loadBalancerSourceRanges"],
            "ipFamilies": &r.body["spec"]["ipFamilies"], "keys": r.body["spec"].as_object().map(|m| {
                let mut k: Vec<String> = m.keys().cloned().collect();
                k.sort();
                k
            })}));
        let r = patch(c, &format!("{services}/s"), "merge", &json!({"spec": {"selector": {"app": "x"}}}).to_string()).await;
        t.note("service selector set", json!({"code": r.code, "selector": &r.body["spec"]["selector"]}));
        let r = patch(c, &format!("{services}/s"), "json",
            &json!([{"op": "replace", "path": "/spec/selector", "value": {}}]).to_string()).await;
        t.note("service selector emptied", json!({"code": r.code, "selector": &r.body["spec"]["selector"],
            "has": r.body["spec"].get("selector").is_some()}));

        let cms = format!("/api/v1/namespaces/{ns}/configmaps");
        let r = post(c, &cms, &json!({"metadata": {"name": "m"}, "data": {}, "binaryData": {}})).await;
        t.note("configmap created", json!({"code": r.code, "data": r.body.get("data"), "binaryData": r.body.get("binaryData")}));
        let r = put(c, &format!("{cms}/m"), &json!({"metadata": {"name": "m"}, "data": {"a": "b"}, "binaryData": {}})).await;
        t.note("configmap put", json!({"code": r.code, "data": r.body.get("data"), "binaryData": r.body.get("binaryData")}));
        let r = patch(c, &format!("{cms}/m"), "json", &json!([{"op": "remove", "path": "/data/a"}]).to_string()).await;
        t.note("configmap data emptied", json!({"code": r.code, "data": r.body.get("data")}));
        t
    })
    .await;
}

/// `ValidatePersistentVolumeUpdate` runs the new volume's spec validation
/// first, keeps a node affinity once set (the MutablePVNodeAffinity gate is
/// off in 1.36: only a beta label key may become its GA one) and a
/// volumeAttributesClassName; `ValidatePersistentVolumeClaimUpdate` runs the
/// new claim's spec validation first too.
#[tokio::test]
async fn volume_and_claim_update_validation() {
    differential("pvupd", |_| async { kube_sim::SimConfig::default() }, |ctx| async move {
        let c = &ctx.client;
        let mut t = Transcript::new();
        let terms = |key: &str, values: &[&str]| json!({"required": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": key, "operator": "In", "values": values}]}]}});
        let (pinned, beta, free, classed) =
            (ctx.unique("pinned"), ctx.unique("beta"), ctx.unique("free"), ctx.unique("classed"));
        for (name, extra) in [
            (&pinned, json!({"hostPath": {"path": "/data/p"}, "nodeAffinity": terms("kubernetes.io/hostname", &["n1"])})),
            (&beta, json!({"hostPath": {"path": "/data/b"},
                "nodeAffinity": terms("failure-domain.beta.kubernetes.io/zone", &["z1"])})),
            (&free, json!({"hostPath": {"path": "/data/f"}})),
            (&classed, json!({"csi": {"driver": "d.example.com", "volumeHandle": "h"},
                "volumeAttributesClassName": "gold"})),
        ] {
            let mut pv = json!({"metadata": {"name": name}, "spec": {"capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"], "storageClassName": ""}});
            for (k, v) in extra.as_object().into_iter().flatten() {
                pv["spec"][k] = v.clone();
            }
            let r = post(c, "/api/v1/persistentvolumes", &pv).await;
            assert_eq!(r.code, 201, "{name}: {:?}", r.body);
        }
        let path = |n: &str| format!("/api/v1/persistentvolumes/{n}");
        for (label, name, code, kind, body) in [
            ("capacity removed", &free, 422, "json", r#"[{"op":"remove","path":"/spec/capacity"}]"#.to_string()),
            ("access modes removed", &free, 422, "json", r#"[{"op":"remove","path":"/spec/accessModes"}]"#.to_string()),
            ("source removed", &free, 422, "json", r#"[{"op":"remove","path":"/spec/hostPath"}]"#.to_string()),
            ("affinity changed", &pinned, 422, "merge", json!({"spec": {"nodeAffinity": terms("kubernetes.io/hostname", &["n2"])}}).to_string()),
            ("affinity removed", &pinned, 422, "merge", json!({"spec": {"nodeAffinity": null}}).to_string()),
            ("affinity term added", &pinned, 422, "json", r#"[{"op":"add","path":"/spec/nodeAffinity/required/nodeSelectorTerms/-","value":{"matchExpressions":[{"key":"zone","operator":"Exists"}]}}]"#.to_string()),
            ("beta key to another", &beta, 422, "json", r#"[{"op":"replace","path":"/spec/nodeAffinity/required/nodeSelectorTerms/0/matchExpressions/0/key","value":"topology.kubernetes.io/region"}]"#.to_string()),
            ("beta key to GA", &beta, 200, "json", r#"[{"op":"replace","path":"/spec/nodeAffinity/required/nodeSelectorTerms/0/matchExpressions/0/key","value":"topology.kubernetes.io/zone"}]"#.to_string()),
            ("first affinity", &free, 200, "merge", json!({"spec": {"nodeAffinity": terms("kubernetes.io/hostname", &["n1"])}}).to_string()),
            ("first affinity changed", &free, 422, "merge", json!({"spec": {"nodeAffinity": terms("kubernetes.io/hostname", &["n3"])}}).to_string()),
            ("attributes class removed", &classed, 422, "json", r#"[{"op":"remove","path":"/spec/volumeAttributesClassName"}]"#.to_string()),
            ("attributes class changed", &classed, 200, "merge", json!({"spec": {"volumeAttributesClassName": "silver"}}).to_string()),
        ] {
            let r = patch(c, &path(name), kind, &body).await;
            assert_eq!(r.code, code, "{label}: {:?}", r.body);
            if code == 200 {
                t.note(label, json!({"affinity": &r.body["spec"]["nodeAffinity"],
                    "class": &r.body["spec"]["volumeAttributesClassName"]}));
            } else {
                t.reply(label, &r);
            }
        }
        for n in [&pinned, &beta, &free, &classed] {
            let _ = delete(c, &path(n)).await;
        }

        let claims = format!("/api/v1/namespaces/{}/persistentvolumeclaims", ctx.ns);
        let r = post(c, &claims, &json!({"metadata": {"name": "c"}, "spec": {"storageClassName": "fast",
            "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})).await;
        assert_eq!(r.code, 201, "{:?}", r.body);
        let claim = format!("{claims}/c");
        for (label, body) in [
            ("claim access modes removed", r#"[{"op":"remove","path":"/spec/accessModes"}]"#),
            ("claim request removed", r#"[{"op":"remove","path":"/spec/resources/requests"}]"#),
            ("claim data source mismatch", r#"[{"op":"add","path":"/spec/dataSource","value":{"kind":"PersistentVolumeClaim","name":"a"}},{"op":"add","path":"/spec/dataSourceRef","value":{"kind":"PersistentVolumeClaim","name":"b"}}]"#),
        ] {
            let r = patch(c, &claim, "json", body).await;
            assert_eq!(r.code, 422, "{label}: {:?}", r.body);
            t.reply(label, &r);
        }
        t
    })
    .await;
}

/// A string value in a field error is quoted as Go's `%q` quotes it
/// (strconv.Quote): printable Unicode kept (é, an emoji, `'`), `\t` `\n`
/// `\"` `\\` escaped, other control bytes `\x1b`, a non-printable rune
/// `\u00ad`, `\u200b`, `\U000e0001` — in the value of an Invalid field
/// error (a name, a label, an annotation key, a finalizer), a selector's
/// error, and in the name `NewInvalid` quotes.
#[tokio::test]
async fn field_error_strings_are_quoted_as_go_quotes_them() {
    differential(
        "goquote",
        |_| async { kube_sim::SimConfig::default() },
        |ctx| async move {
            let c = &ctx.client;
            let mut t = Transcript::new();
            let cms = format!("/api/v1/namespaces/{}/configmaps", ctx.ns);
            let odd = [
                "a\u{1b}b",
                "a\tb\n",
                "a\"b\\",
                "it's",
                "é😀",
                "a\u{ad}b",
                "a\u{200b}b",
                "\u{7f}\u{80}\u{9f}",
                "\u{e0001}\u{10ffff}",
                "\u{fffd}\u{feff}",
                "\u{a0}\u{2028}",
                "\u{7}\u{8}\u{c}\u{b}\r\u{0}",
            ];
            for (i, s) in odd.iter().enumerate() {
                let r = post(c, &cms, &json!({"metadata": {"name": s}})).await;
                assert_eq!(r.code, 422, "name {s:?}: {:?}", r.body);
                t.reply(&format!("name {i}"), &r);
                // One invalid entry per map: upstream validates a map in
                // Go's random order.
                for (what, meta) in [
                    ("label value", json!({"labels": {"k": s}})),
                    (
                        "label key",
                        json!({"labels": {*s: "v"}, "annotations": {*s: "v"}, "finalizers": [s]}),
                    ),
                ] {
                    let mut meta = meta;
                    meta["name"] = json!(format!("l{i}"));
                    let r = post(c, &cms, &json!({ "metadata": meta })).await;
                    assert_eq!(r.code, 422, "{what} {s:?}: {:?}", r.body);
                    t.reply(&format!("{what} {i}"), &r);
                }
                let sel: String =
                    form_urlencoded::byte_serialize(format!("k={s}").as_bytes()).collect();
                let r = get(c, &format!("{cms}?labelSelector={sel}")).await;
                t.reply(&format!("selector {i}"), &r);
            }
            t
        },
    )
    .await;
}

/// A field error's value of a named Go string type (a Service's `type`, an
/// access mode, a toleration's operator and effect, a pull policy) is
/// written by `json.Marshal` (ESC as `\u001b`, `<` `>` `&` escaped, U+200B
/// kept), a `string` value by `%q`; and a Service's `type` must be one of
/// the four supported ones, on create and on update.
#[tokio::test]
async fn named_string_values_are_written_as_json() {
    differential("named", same_service_range, |ctx| async move {
        let c = &ctx.client;
        let mut t = Transcript::new();
        let ns = &ctx.ns;
        let odd = ["No\u{1b}de", "a<b>&c", "a\u{200b}b", "clusterip", "é\t\"\\"];
        let svcs = format!("/api/v1/namespaces/{ns}/services");
        let port = json!([{"port": 80}]);
        for (i, ty) in odd.iter().enumerate() {
            let r = post(
                c,
                &svcs,
                &json!({"metadata": {"name": format!("s{i}")}, "spec": {"type": ty, "ports": port}}),
            )
            .await;
            assert_eq!(r.code, 422, "service type {ty:?}: {:?}", r.body);
            t.reply(&format!("service type {i}"), &r);
        }
        // With no ports: the ports' error comes first.
        let r = post(
            c,
            &svcs,
            &json!({"metadata": {"name": "noports"}, "spec": {"type": "a<b"}}),
        )
        .await;
        t.reply("service type without ports", &r);
        // An update to an unsupported type.
        let r = post(
            c,
            &svcs,
            &json!({"metadata": {"name": "web"}, "spec": {"ports": port}}),
        )
        .await;
        assert_eq!(r.code, 201, "{:?}", r.body);
        let r = patch(
            c,
            &format!("{svcs}/web"),
            "merge",
            r#"{"spec":{"type":"Node\u001bPort<"}}"#,
        )
        .await;
        assert_eq!(r.code, 422, "{:?}", r.body);
        t.reply("service type update", &r);
        let r = get(c, &format!("{svcs}/web")).await;
        t.note("service type kept", r.body["spec"]["type"].clone());

        let pvcs = format!("/api/v1/namespaces/{ns}/persistentvolumeclaims");
        for (i, modes) in [
            json!(["a\u{1b}b"]),
            json!(["x<y", "ReadWriteOnce", "a\u{200b}&"]),
            json!(["ReadWriteOncePod", "ReadWriteOnce"]),
        ]
        .into_iter()
        .enumerate()
        {
            let r = post(
                c,
                &pvcs,
                &json!({"metadata": {"name": format!("c{i}")}, "spec": {
                    "accessModes": modes, "resources": {"requests": {"storage": "1Gi"}}}}),
            )
            .await;
            assert_eq!(r.code, 422, "access modes {modes}: {:?}", r.body);
            t.reply(&format!("claim access modes {i}"), &r);
        }

        let pods = format!("/api/v1/namespaces/{ns}/pods");
        let pod = |name: &str, container: Value, tolerations: Value| {
            json!({"metadata": {"name": name}, "spec": {
                "containers": [container], "tolerations": tolerations}})
        };
        let plain = json!({"name": "c", "image": "busybox"});
        for (i, policy) in odd.iter().enumerate() {
            let r = post(
                c,
                &pods,
                &pod(
                    &format!("p{i}"),
                    json!({"name": "c", "image": "busybox", "imagePullPolicy": policy}),
                    json!([]),
                ),
            )
            .await;
            assert_eq!(r.code, 422, "pull policy {policy:?}: {:?}", r.body);
            t.reply(&format!("pull policy {i}"), &r);
        }
        for (i, tol) in [
            json!([{"key": "k", "operator": "a\u{1b}b", "value": "v"}]),
            json!([{"operator": "x<y"}]),
            json!([{"operator": "Exists", "effect": "N\u{200b}&"}]),
            json!([{"operator": "Exists", "effect": "a>b", "tolerationSeconds": 5}]),
            json!([{"key": "k", "operator": "Equal", "value": "a\u{1b}b"}]),
        ]
        .into_iter()
        .enumerate()
        {
            let r = post(c, &pods, &pod(&format!("t{i}"), plain.clone(), tol.clone())).await;
            assert_eq!(r.code, 422, "tolerations {tol}: {:?}", r.body);
            t.reply(&format!("tolerations {i}"), &r);
        }
        t
    })
    .await;
}

/// The named string types of admission policies (a failure policy, an
/// operation, a scope, a match policy, a reason, a validation action, a
/// parameter-not-found action, a reinvocation policy, a patch type) and of
/// the request options (a propagation policy, a resourceVersionMatch) are
/// written in field errors as `json.Marshal` writes them.
#[tokio::test]
async fn named_string_values_of_policies_and_options_are_written_as_json() {
    differential(
        "namedadm",
        |_| async { kube_sim::SimConfig::default() },
        |ctx| async move {
            let c = &ctx.client;
            let mut t = Transcript::new();
            let ar = "/apis/admissionregistration.k8s.io/v1";
            let vap = ctx.unique("vap");
            t.volatile(&vap, "<vap>");
            let rules = |op: &str, scope: &str| {
                json!([{"apiGroups": [""], "apiVersions": ["v1"], "operations": [op],
                    "resources": ["configmaps"], "scope": scope}])
            };
            let r = post(
                c,
                &format!("{ar}/validatingadmissionpolicies"),
                &json!({"metadata": {"name": vap}, "spec": {
                    "failurePolicy": "F<ail",
                    "matchConstraints": {"resourceRules": rules("CRE\u{1b}ATE", "a&b"),
                        "matchPolicy": "Ex\u{200b}act>"},
                    "validations": [{"expression": "true", "reason": "No<pe"}]}}),
            )
            .await;
            assert_eq!(r.code, 422, "{:?}", r.body);
            t.reply("validating policy", &r);
            let r = post(
                c,
                &format!("{ar}/validatingadmissionpolicybindings"),
                &json!({"metadata": {"name": vap}, "spec": {
                    "policyName": "p", "validationActions": ["De<ny", "W\u{1b}"],
                    "paramRef": {"name": "x", "parameterNotFoundAction": "A&llow"}}}),
            )
            .await;
            assert_eq!(r.code, 422, "{:?}", r.body);
            t.reply("validating binding", &r);
            for version in ["v1", "v1beta1"] {
                let r = post(
                    c,
                    &format!("/apis/admissionregistration.k8s.io/{version}/mutatingadmissionpolicies"),
                    &json!({"metadata": {"name": vap}, "spec": {
                        "failurePolicy": "Ig\u{1b}nore", "reinvocationPolicy": "Ne<ver",
                        "matchConstraints": {"resourceRules": rules("CREATE", "*")},
                        "mutations": [{"patchType": "Apply&", "applyConfiguration": {"expression": "Object{}"}}]}}),
                )
                .await;
                t.reply(&format!("mutating policy {version}"), &r);
            }
            let cms = format!("/api/v1/namespaces/{}/configmaps", ctx.ns);
            let r = post(c, &cms, &json!({"metadata": {"name": "a"}})).await;
            assert_eq!(r.code, 201, "{:?}", r.body);
            let r = call(
                c,
                "DELETE",
                &format!("{cms}/a"),
                "application/json",
                r#"{"propagationPolicy":"Or\u001bphan<"}"#,
            )
            .await;
            t.reply("propagation policy", &r);
            let r = get(c, &format!("{cms}?resourceVersion=1&resourceVersionMatch=Ex%3Cact%26")).await;
            t.reply("resourceVersionMatch", &r);
            t
        },
    )
    .await;
}

/// The OpenAPI v3 documents are written as Go's encoding/json writes them:
/// no raw `<`, `>` or `&` in the bytes (`\u003c`, `\u003e`, `\u0026`),
/// a custom resource's too; the v2 document keeps them raw. (Only this
/// property is compared: kube-sim's documents are its own subset of
/// upstream's, in another key order, not the same bytes.)
#[tokio::test]
async fn openapi_documents_are_written_html_safe() {
    differential(
        "openapihtml",
        |_| async { kube_sim::SimConfig::default() },
        |ctx| async move {
            let c = &ctx.client;
            let mut t = Transcript::new();
            for path in [
                "/openapi/v2",
                "/openapi/v3/api/v1",
                "/openapi/v3/apis/apps/v1",
                "/openapi/v3/apis/admissionregistration.k8s.io/v1",
                "/openapi/v3/apis/apiextensions.k8s.io/v1",
            ] {
                let (code, body) = raw(c, "GET", path, "application/json", "").await;
                t.note(path, html_escaping(code, &body));
            }
            // A custom resource's document, once the CRD is served.
            let group = format!("{}.example.com", ctx.ns);
            let crd = json!({"metadata": {"name": format!("widgets.{group}")}, "spec": {
                "group": group, "scope": "Namespaced",
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
                "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                    "type": "object", "description": "a <b> & c",
                    "properties": {"spec": {"type": "object", "description": "x > y && y < z"}}}}}]}});
            let crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
            let r = post(c, crds, &crd).await;
            assert_eq!(r.code, 201, "{:?}", r.body);
            let path = format!("/openapi/v3/apis/{group}/v1");
            let mut last = (0, String::new());
            for _ in 0..100 {
                last = raw(c, "GET", &path, "application/json", "").await;
                if last.0 == 200 && last.1.contains("Widget") {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            t.note("custom resource document", html_escaping(last.0, &last.1));
            let _ = delete(c, &format!("{crds}/widgets.{group}")).await;
            t
        },
    )
    .await;
}

/// Whether a document's bytes hold raw `<`, `>`, `&` or escaped `<`, `>`
/// (not every kube-sim document holds an `&` where upstream's does).
fn html_escaping(code: u16, body: &str) -> Value {
    assert!(
        code != 200 || serde_json::from_str::<Value>(body).is_ok(),
        "not JSON: {body:.200}"
    );
    json!({"code": code,
        "raw <": body.contains('<'), "raw >": body.contains('>'), "raw &": body.contains('&'),
        "escaped <": body.contains("\\u003c"), "escaped >": body.contains("\\u003e")})
}

/// A name in a request path is percent-unescaped as Go's `URL.Path` is
/// before the server splits the path: `a%3Cb` is `a<b`, `%61` is `a` (the
/// object named `a`), on GET, PUT, PATCH and DELETE; an escaped `/` splits
/// the path; an invalid escape is refused before any handler.
#[tokio::test]
async fn escaped_names_in_paths_are_unescaped() {
    differential(
        "pathesc",
        |_| async { kube_sim::SimConfig::default() },
        |ctx| async move {
            let c = &ctx.client;
            let mut t = Transcript::new();
            let ns = &ctx.ns;
            let cms = format!("/api/v1/namespaces/{ns}/configmaps");
            let r = post(
                c,
                &cms,
                &json!({"metadata": {"name": "a"}, "data": {"k": "v"}}),
            )
            .await;
            assert_eq!(r.code, 201, "{:?}", r.body);
            for name in [
                "a%3Cb",
                "a%20b",
                "%7E",
                "%61",
                "a%22b",
                "%E2%80%8B",
                "%1B",
                "a%2Fb",
                "a%2fstatus",
                "%zz",
                "a%",
                "a%2",
                "%C3%A9",
                "%FF",
                "a+b",
                "%2E",
                "%2E%2E",
                "a%25b",
            ] {
                let path = format!("{cms}/{name}");
                let r = call(c, "GET", &path, "application/json", "").await;
                t.reply(&format!("get {name}"), &r);
                let r = patch(c, &path, "merge", r#"{"data":{"p":"1"}}"#).await;
                t.reply(&format!("patch {name}"), &r);
            }
            let r = put(
                c,
                &format!("{cms}/%61"),
                &json!({"metadata": {"name": "a"}, "data": {"k": "w"}}),
            )
            .await;
            t.reply("put %61", &r);
            let r = put(
                c,
                &format!("{cms}/a%3Cb"),
                &json!({"metadata": {"name": "a<b"}}),
            )
            .await;
            t.reply("put a%3Cb", &r);
            let r = call(
                c,
                "GET",
                &format!("/api/v1/namespaces/{}/configmaps/a", ns.replace('-', "%2D")),
                "application/json",
                "",
            )
            .await;
            t.reply("get in an escaped namespace", &r);
            let r = call(
                c,
                "GET",
                &format!("/api/v1/namespaces/{ns}/config%6Daps"),
                "application/json",
                "",
            )
            .await;
            t.note(
                "list escaped resource",
                json!({"code": r.code, "kind": r.body["kind"]}),
            );
            let r = call(c, "GET", "/vers%69on", "application/json", "").await;
            t.note(
                "escaped non-resource path",
                json!({"code": r.code, "major": r.body["major"]}),
            );
            for name in ["a%3Cb", "%61", "%61"] {
                let r = delete(c, &format!("{cms}/{name}")).await;
                t.reply(&format!("delete {name}"), &r);
            }
            t
        },
    )
    .await;
}

/// The pod templates of Deployments, ReplicaSets, Jobs, PodTemplates and
/// ReplicationControllers: their tolerations (`ValidateTolerations`) and
/// affinity (`validateAffinity`) are validated as a pod's are
/// (`ValidatePodTemplateSpec` runs `ValidatePodSpec`), at the template's
/// path, on create and (but for a Job, whose template is immutable) on
/// update; no DefaultTolerationSeconds (a pod admission plugin) nor
/// matchLabelKeys merge (a pod's create strategy) on a template.
#[tokio::test]
async fn pod_template_tolerations_and_affinity_are_validated() {
    differential("tmplv", |_| async { kube_sim::SimConfig::default() }, |ctx| async move {
        let c = &ctx.client;
        let mut t = Transcript::new();
        let ns = &ctx.ns;
        let labels = json!({"app": "web", "tier": "x"});
        // (collection, the object with `spec` as its template's pod spec,
        // where the template's pod spec is)
        let object = |kind: &str, name: &str, spec: Value| -> (String, Value) {
            let template = json!({"metadata": {"labels": labels}, "spec": spec});
            let selector = json!({"matchLabels": {"app": "web"}});
            match kind {
                "Deployment" => (format!("/apis/apps/v1/namespaces/{ns}/deployments"), json!({
                    "apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name},
                    "spec": {"selector": selector, "template": template}})),
                "ReplicaSet" => (format!("/apis/apps/v1/namespaces/{ns}/replicasets"), json!({
                    "apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name},
                    "spec": {"replicas": 0, "selector": selector, "template": template}})),
                "Job" => {
                    let mut template = template;
                    template["spec"]["restartPolicy"] = json!("Never");
                    (format!("/apis/batch/v1/namespaces/{ns}/jobs"), json!({
                        "apiVersion": "batch/v1", "kind": kind, "metadata": {"name": name},
                        "spec": {"suspend": true, "template": template}}))
                }
                "PodTemplate" => (format!("/api/v1/namespaces/{ns}/podtemplates"), json!({
                    "apiVersion": "v1", "kind": kind, "metadata": {"name": name}, "template": template})),
                _ => (format!("/api/v1/namespaces/{ns}/replicationcontrollers"), json!({
                    "apiVersion": "v1", "kind": kind, "metadata": {"name": name},
                    "spec": {"replicas": 0, "selector": {"app": "web"}, "template": template}})),
            }
        };
        let spec_ptr = |kind: &str| if kind == "PodTemplate" { "/template/spec" } else { "/spec/template/spec" };
        let container = json!([{"name": "a", "image": "busybox"}]);
        let sel = json!({"matchLabels": {"app": "web"}});
        let cases = [
            ("bad toleration key", json!({"containers": container, "tolerations": [{"key": "a b", "operator": "Exists"}]})),
            ("toleration Lt, second of two", json!({"containers": container, "tolerations": [
                {"operator": "Exists"}, {"key": "k", "operator": "Lt", "value": "1"}]})),
            ("toleration seconds without NoExecute", json!({"containers": container, "tolerations": [
                {"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 5}, {"value": "v"}]})),
            ("no node selector terms", json!({"containers": container, "affinity": {"nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []},
                "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 0, "preference": {}}]}}})),
            ("pod affinity term", json!({"containers": container, "affinity": {"podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [{"matchLabelKeys": ["app"]},
                    {"labelSelector": sel, "matchLabelKeys": ["a b"], "topologyKey": "zone"}]},
                "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 101,
                    "podAffinityTerm": {"labelSelector": {"matchExpressions": [{"key": "k", "operator": "In"}]},
                    "namespaces": ["Not_OK"], "topologyKey": "-"}}]}}})),
            ("everything", json!({"containers": [{"name": "A"}], "activeDeadlineSeconds": 0,
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "k", "operator": "In", "values": ["a b"]}]}]}}},
                "tolerations": [{"key": "k", "operator": "Exists", "value": "v"}]})),
            ("valid", json!({"containers": container,
                "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoSchedule"},
                    {"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5}],
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "k", "operator": "Gt", "values": ["1"]}]}]}},
                    "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": sel,
                        "matchLabelKeys": ["tier", "app"], "mismatchLabelKeys": ["other"], "topologyKey": "zone"}]}}})),
        ];
        for kind in ["Deployment", "ReplicaSet", "Job", "PodTemplate", "ReplicationController"] {
            for (i, (label, spec)) in cases.iter().enumerate() {
                let (path, body) = object(kind, &format!("c{i}"), spec.clone());
                let r = post(c, &path, &body).await;
                let label = format!("{kind}: {label}");
                if r.code == 201 {
                    let s = r.body.pointer(spec_ptr(kind)).cloned().unwrap_or_default();
                    t.note(&label, json!({"code": r.code, "tolerations": s["tolerations"], "affinity": s["affinity"]}));
                } else {
                    t.reply(&label, &r);
                }
            }
        }
        // Updates of a valid object (a Job's template is immutable).
        for kind in ["Deployment", "ReplicaSet", "PodTemplate", "ReplicationController"] {
            let (path, body) = object(kind, "u", json!({"containers": container}));
            let r = post(c, &path, &body).await;
            assert_eq!(r.code, 201, "{kind}: {:?}", r.body);
            let path = format!("{path}/u");
            let tmpl = if kind == "PodTemplate" { "/template/spec" } else { "/spec/template/spec" };
            for (label, ops) in [
                ("bad toleration added", json!([{"op": "add", "path": format!("{tmpl}/tolerations"),
                    "value": [{"key": "k", "operator": "Exists", "effect": "Never"}]}])),
                ("bad affinity added", json!([{"op": "add", "path": format!("{tmpl}/affinity"),
                    "value": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": ""}]}}}])),
                ("both, and no containers", json!([{"op": "add", "path": format!("{tmpl}/tolerations"),
                    "value": [{"operator": "Equal"}]}, {"op": "add", "path": format!("{tmpl}/affinity"),
                    "value": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}}},
                    {"op": "replace", "path": format!("{tmpl}/containers"), "value": []}])),
                ("valid ones added", json!([{"op": "add", "path": format!("{tmpl}/tolerations"),
                    "value": [{"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"}]},
                    {"op": "add", "path": format!("{tmpl}/affinity"), "value": {"nodeAffinity": {
                        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 3, "preference": {}}]}}}])),
            ] {
                let r = patch(c, &path, "json", &ops.to_string()).await;
                let label = format!("{kind} update: {label}");
                if r.code == 200 {
                    let s = r.body.pointer(spec_ptr(kind)).cloned().unwrap_or_default();
                    t.note(&label, json!({"code": r.code, "tolerations": s["tolerations"], "affinity": s["affinity"]}));
                } else {
                    t.reply(&label, &r);
                }
            }
        }
        t
    })
    .await;
}

/// A `dryRun=All` create, update and patch answer the object as a real
/// write stores it: without the empty slices and maps of its omitempty
/// fields; an update that only adds such empty fields changes nothing.
#[tokio::test]
async fn dry_run_answers_drop_empty_omitempty_fields() {
    differential("dryomit", |_| async { kube_sim::SimConfig::default() }, |ctx| async move {
        let c = &ctx.client;
        let mut t = Transcript::new();
        let ns = &ctx.ns;
        let pods = format!("/api/v1/namespaces/{ns}/pods");
        let pod = json!({"metadata": {"name": "p", "labels": {}, "annotations": {}, "finalizers": []}, "spec": {
            "serviceAccountName": "default", "preemptionPolicy": "PreemptLowerPriority",
            "containers": [{"name": "a", "image": "busybox", "args": [], "env": [], "ports": [],
                "resources": {"limits": {}, "requests": {}}}],
            "initContainers": [], "volumes": [], "nodeSelector": {}, "tolerations": [], "schedulingGates": [],
            "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "preference": {"matchExpressions": [], "matchFields": []}}]}}}});
        // (serviceAccount, the deprecated copy of serviceAccountName, is
        // left out, and its managedFields entry: kube-sim does not write it.)
        let spec = |b: &Value| {
            let mut s = b["spec"].clone();
            if let Some(m) = s.as_object_mut() {
                m.remove("serviceAccount");
            }
            s
        };
        let meta = |b: &Value| {
            let mut m = b["metadata"].clone();
            if let Some(f) = m.pointer_mut("/managedFields/0/fieldsV1/f:spec").and_then(Value::as_object_mut) {
                f.remove("f:serviceAccount");
            }
            m
        };
        let r = post(c, &format!("{pods}?dryRun=All"), &pod).await;
        t.note("pod dry-run create", json!({"code": r.code, "metadata": meta(&r.body), "spec": spec(&r.body)}));
        let r = post(c, &pods, &pod).await;
        t.note("pod create", json!({"code": r.code, "metadata": meta(&r.body), "spec": spec(&r.body)}));

        let cms = format!("/api/v1/namespaces/{ns}/configmaps");
        let cm = json!({"metadata": {"name": "m", "labels": {}, "annotations": {}, "finalizers": [],
            "ownerReferences": []}, "data": {}, "binaryData": {}});
        let r = post(c, &format!("{cms}?dryRun=All"), &cm).await;
        t.reply("configmap dry-run create", &r);
        let r = post(c, &cms, &json!({"metadata": {"name": "m"}, "data": {"a": "b"}})).await;
        assert_eq!(r.code, 201, "{:?}", r.body);
        let rv0 = r.body["metadata"]["resourceVersion"].clone();
        let m = format!("{cms}/m");
        // PUT with dryRun: empty maps and lists beside a change.
        let mut body = r.body.clone();
        body["metadata"]["labels"] = json!({});
        body["metadata"]["annotations"] = json!({"x": "y"});
        body["metadata"]["finalizers"] = json!([]);
        body["binaryData"] = json!({});
        let r = put(c, &format!("{m}?dryRun=All"), &body).await;
        t.reply("configmap dry-run put", &r);
        let r = patch(c, &format!("{m}?dryRun=All"), "merge",
            &json!({"metadata": {"labels": {}, "annotations": {"x": "y"}}, "binaryData": {}, "data": {"c": "d"}}).to_string()).await;
        t.reply("configmap dry-run merge patch", &r);
        let r = patch(c, &format!("{m}?dryRun=All"), "json",
            &json!([{"op": "add", "path": "/binaryData", "value": {}}, {"op": "remove", "path": "/data/a"}]).to_string()).await;
        t.reply("configmap dry-run json patch emptying data", &r);
        let r = patch(c, &format!("{m}?dryRun=All"), "strategic",
            &json!({"metadata": {"finalizers": []}, "binaryData": {}}).to_string()).await;
        t.note("configmap dry-run no-op strategic patch", json!({"code": r.code, "body": r.body,
            "same version": r.body["metadata"]["resourceVersion"] == rv0}));
        let r = patch(c, &format!("{m}?dryRun=All&fieldManager=x"), "apply",
            &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "m", "labels": {}},
                "data": {"e": "f"}, "binaryData": {}}).to_string()).await;
        t.reply("configmap dry-run apply", &r);
        // Nothing of the dry runs is stored.
        let r = get(c, &m).await;
        t.note("configmap after the dry runs", json!({"code": r.code, "body": r.body,
            "same version": r.body["metadata"]["resourceVersion"] == rv0}));
        // A real update adding only empty omitempty fields is a no-op.
        let mut body = r.body.clone();
        body["metadata"]["labels"] = json!({});
        body["binaryData"] = json!({});
        let r = put(c, &m, &body).await;
        t.note("configmap put of empty maps only", json!({"code": r.code, "body": r.body,
            "same version": r.body["metadata"]["resourceVersion"] == rv0}));
        let r = patch(c, &m, "merge", &json!({"metadata": {"annotations": {}}}).to_string()).await;
        t.note("configmap merge patch of empty annotations only", json!({"code": r.code, "body": r.body,
            "same version": r.body["metadata"]["resourceVersion"] == rv0}));

        let services = format!("/api/v1/namespaces/{ns}/services");
        let r = post(c, &format!("{services}?dryRun=All"), &json!({"metadata": {"name": "s"}, "spec": {
            "ports": [{"port": 80}], "selector": {}, "externalIPs": [], "loadBalancerSourceRanges": []}})).await;
        t.note("service dry-run create", json!({"code": r.code, "selector": r.body["spec"].get("selector"),
            "externalIPs": r.body["spec"].get("externalIPs"),
            "loadBalancerSourceRanges": r.body["spec"].get("loadBalancerSourceRanges")}));
        t
    })
    .await;
}

/// Percent-encodes a query parameter's value.
fn query_escape(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Field selectors' escaping (`fields.ParseSelector`, `UnescapeValue`):
/// ClusterRole names (path-segment names) may hold `,`, `=` and `\`, which
/// a selector's value escapes as `\,`, `\=`, `\\`; an unescaped `,` splits
/// the terms, an unescaped `=` in a value, an unknown escape or a trailing
/// backslash is a 400; empty terms are skipped; the terms are sorted before
/// they are checked. In lists, watches, and a watch of one named object.
#[tokio::test]
async fn field_selector_values_are_unescaped() {
    differential(
        "fieldesc",
        |_| async { kube_sim::SimConfig::default() },
        |ctx| async move {
            let c = &ctx.client;
            let mut t = Transcript::new();
            let run = &ctx.run;
            let roles = "/apis/rbac.authorization.k8s.io/v1/clusterroles";
            let names =
                ["a,b", "a=b", "a\\b", "a\\,b", "plain", "a==b"].map(|n| format!("fs{run}-{n}"));
            for n in &names {
                let r = post(
                    c,
                    roles,
                    &json!({"metadata": {"name": n, "labels": {"run": run}}}),
                )
                .await;
                t.note(
                    &format!("create {n}"),
                    json!({"code": r.code, "name": r.body["metadata"]["name"],
                "message": r.body["message"]}),
                );
            }
            let p = format!("fs{run}-");
            let selectors = [
                format!("metadata.name={p}a\\,b"),
                format!("metadata.name={p}a\\=b"),
                format!("metadata.name=={p}a\\\\b"),
                format!("metadata.name={p}a\\\\\\,b"),
                format!("metadata.name={p}a\\=\\=b"),
                format!("metadata.name!={p}a\\,b"),
                format!("metadata.name!={p}plain,metadata.name!={p}a\\=b"),
                format!("metadata.name={p}plain,"),
                format!(",,metadata.name={p}plain"),
                format!("metadata.name={p}a,b"),
                format!("metadata.name={p}a=b"),
                format!("metadata.name={p}a==b"),
                format!("metadata.name={p}a!=b"),
                format!("metadata.name={p}a\\b"),
                format!("metadata.name={p}a\\"),
                format!("metadata.name={p}a\\x,metadata.name={p}a\\y"),
                format!("metadata.name={p}a\\y,metadata.name={p}a\\x"),
                "metadata.name=\\".to_string(),
                "a\\=b=c".to_string(),
                "a\\,b=c".to_string(),
                "metadata.name".to_string(),
                "spec.x=\\,".to_string(),
                "spec.x=1,metadata.name=\\q".to_string(),
                " metadata.name=x".to_string(),
                "metadata.name = x".to_string(),
            ];
            let names_of = |b: &Value| -> Value {
                let mut v: Vec<String> = b["items"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|i| i["metadata"]["name"].as_str().map(str::to_string))
                    .collect();
                v.sort();
                json!(v)
            };
            for s in &selectors {
                let q = format!(
                    "labelSelector=run%3D{run}&fieldSelector={}",
                    query_escape(s)
                );
                let r = get(c, &format!("{roles}?{q}")).await;
                if r.code == 200 {
                    t.note(
                        &format!("list {s}"),
                        json!({"code": r.code, "names": names_of(&r.body)}),
                    );
                } else {
                    t.reply(&format!("list {s}"), &r);
                }
                let r = get(c, &format!("{roles}?{q}&watch=1&timeoutSeconds=1")).await;
                if r.code == 200 {
                    let events: Vec<Value> = match &r.body {
                        Value::String(s) => s
                            .lines()
                            .filter(|l| !l.trim().is_empty())
                            .map(|l| serde_json::from_str(l).unwrap_or_else(|_| json!(l)))
                            .collect(),
                        Value::Null => vec![],
                        v => vec![v.clone()],
                    };
                    let seen: Vec<Value> = events
                        .iter()
                        .map(|e| json!([e["type"], e["object"]["metadata"]["name"]]))
                        .collect();
                    t.note(
                        &format!("watch {s}"),
                        json!({"code": r.code, "events": seen}),
                    );
                } else {
                    t.reply(&format!("watch {s}"), &r);
                }
            }
            // One object by its (escaped) name in the path: `?watch` there is a
            // get; a `/watch/` path watches it, alone or with a field selector
            // that must name it.
            let watched = |r: &common::differential::Reply| -> Value {
                let events: Vec<Value> = match &r.body {
                    Value::String(s) => s
                        .lines()
                        .filter(|l| !l.trim().is_empty())
                        .map(|l| serde_json::from_str(l).unwrap_or_else(|_| json!(l)))
                        .collect(),
                    Value::Null => vec![],
                    v => vec![v.clone()],
                };
                json!(events.iter().map(|e| if e.get("type").is_some() {
                json!([e["type"], e["object"]["metadata"]["name"]])
            } else {
                json!({"kind": e["kind"], "name": e["metadata"]["name"], "message": e["message"]})
            }).collect::<Vec<_>>())
            };
            let watch_roles = "/apis/rbac.authorization.k8s.io/v1/watch/clusterroles";
            for (name, fs) in [
                (format!("{p}a,b"), None),
                (format!("{p}a=b"), None),
                (format!("{p}a\\b"), None),
                (format!("{p}a,b"), Some(format!("metadata.name={p}a\\,b"))),
                (format!("{p}a,b"), Some(format!("metadata.name={p}a,b"))),
                (format!("{p}a=b"), Some(format!("metadata.name={p}plain"))),
                (format!("{p}a=b"), Some(format!("metadata.name!={p}a\\=b"))),
                (
                    format!("{p}a=b"),
                    Some(format!("metadata.name={p}a\\=b,metadata.name!={p}plain")),
                ),
                (format!("{p}plain"), Some("metadata.name=\\x".to_string())),
            ] {
                let q = match &fs {
                    Some(fs) => format!("&fieldSelector={}", query_escape(fs)),
                    None => String::new(),
                };
                for (how, path) in [
                    (
                        "get ?watch",
                        format!(
                            "{roles}/{}?watch=1&timeoutSeconds=1{q}",
                            query_escape(&name)
                        ),
                    ),
                    (
                        "/watch/",
                        format!("{watch_roles}/{}?timeoutSeconds=1{q}", query_escape(&name)),
                    ),
                ] {
                    let r = get(c, &path).await;
                    let label = format!("{how} {name}, fieldSelector {fs:?}");
                    if r.code == 200 {
                        t.note(&label, json!({"code": r.code, "events": watched(&r)}));
                    } else {
                        t.reply(&label, &r);
                    }
                }
            }
            // Fields each kind selects on, and the error for others.
            let ns = &ctx.ns;
            for (path, fs) in [
                (
                    format!("/apis/apps/v1/namespaces/{ns}/replicasets"),
                    "status.replicas=0",
                ),
                (
                    format!("/api/v1/namespaces/{ns}/replicationcontrollers"),
                    "status.replicas=0",
                ),
                (
                    format!("/api/v1/namespaces/{ns}/replicationcontrollers"),
                    "spec.replicas=0",
                ),
                (
                    format!("/apis/batch/v1/namespaces/{ns}/jobs"),
                    "status.successful=0",
                ),
                (
                    format!("/apis/batch/v1/namespaces/{ns}/jobs"),
                    "status.failed=0",
                ),
                (format!("/api/v1/namespaces/{ns}/configmaps"), "data.x=1"),
                (format!("/api/v1/namespaces/{ns}/pods"), "spec.x=1"),
                (
                    format!("/api/v1/namespaces/{ns}/secrets"),
                    "metadata.namespace=x,data=\\=",
                ),
                ("/api/v1/nodes".to_string(), "metadata.namespace=x"),
                ("/api/v1/namespaces".to_string(), "metadata.namespace=x"),
                ("/api/v1/namespaces".to_string(), "status.phase=Gone"),
            ] {
                let r = get(c, &format!("{path}?fieldSelector={}", query_escape(fs))).await;
                if r.code == 200 {
                    t.note(
                        &format!("list {path} {fs}"),
                        json!({"code": r.code, "names": names_of(&r.body)}),
                    );
                } else {
                    t.reply(&format!("list {path} {fs}"), &r);
                }
            }
            for n in &names {
                let _ = delete(c, &format!("{roles}/{}", query_escape(n))).await;
            }
            t
        },
    )
    .await;
}
