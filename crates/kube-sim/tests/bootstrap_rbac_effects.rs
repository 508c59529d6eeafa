//! RBAC decides from the stored bootstrap policy (`src/bootstrap_rbac.rs`):
//! deleting or editing a bootstrap object changes what a user may do, as on
//! the real kube-apiserver 1.36 (`common::conform`). Its own test binary, so
//! its own real server: the tests of `bootstrap_rbac.rs` see the objects as
//! the bootstrap hook left them.

mod common;

use common::conform;
use common::differential::{Reply, delete, get, post, put};
use kube::Client;
use kube_sim::SimConfig;
use serde_json::{Value, json};

const RBAC: &str = "/apis/rbac.authorization.k8s.io/v1";

/// A SubjectAccessReview of `user` (in `system:authenticated` only) for
/// `verb` on `resource` of `group`, as the admin asks it.
async fn may(t: &common::Target, user: &str, verb: &str, group: &str, resource: &str) -> Value {
    let r = post(
        &t.client,
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        &json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": user, "groups": ["system:authenticated"],
                "resourceAttributes": {"verb": verb, "group": group, "resource": resource}}}),
    )
    .await;
    assert_eq!(r.code, 201, "{:?}", r.body);
    r.body["status"].clone()
}

/// `user`'s own SelfSubjectRulesReview in `default`, its rules sorted (the
/// real server visits bindings in its informer's map order).
async fn rules_of(client: &Client) -> Value {
    let r = post(
        client,
        "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews",
        &json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview",
            "spec": {"namespace": "default"}}),
    )
    .await;
    assert_eq!(r.code, 201, "{:?}", r.body);
    let mut status = r.body["status"].clone();
    for k in ["resourceRules", "nonResourceRules"] {
        if let Some(rules) = status[k].as_array_mut() {
            rules.sort_by_key(|r| r.to_string());
        }
    }
    status
}

/// What the admin needs to put a bootstrap object back as it was: the
/// object without what the server set.
fn recreatable(r: &Reply) -> Value {
    let mut o = r.body.clone();
    if let Some(m) = o["metadata"].as_object_mut() {
        for k in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "managedFields",
        ] {
            m.remove(k);
        }
    }
    o
}

/// RBAC decides from the stored bootstrap objects: deleting the binding
/// `system:discovery` takes the discovery paths out of a plain user's
/// rules, editing the ClusterRole `system:public-info-viewer` puts the
/// edited rules in, and deleting the binding `system:basic-user` revokes
/// the user's right to create its own reviews. Each object is put back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbac_decides_from_the_stored_bootstrap_objects() {
    conform(
        "rbac_decides_from_the_stored_bootstrap_objects",
        SimConfig::default(),
        async |t| {
            let user = "rbac-plain-user";
            let plain = t.client_as(user).await;
            let before = rules_of(&plain).await;
            t.record("a plain user's rules", before.clone());
            let has_url = |status: &Value, url: &str| {
                status["nonResourceRules"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|r| {
                        r["nonResourceURLs"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .any(|u| u == url)
                    })
            };
            assert!(has_url(&before, "/apis/*"), "{before}");

            let discovery = format!("{RBAC}/clusterrolebindings/system:discovery");
            let saved_discovery = get(&t.client, &discovery).await;
            assert_eq!(saved_discovery.code, 200, "{:?}", saved_discovery.body);
            let r = delete(&t.client, &discovery).await;
            assert_eq!(r.code, 200, "{:?}", r.body);
            let without = common::eventually("the discovery binding is gone", async || {
                let s = rules_of(&plain).await;
                (!has_url(&s, "/apis/*")).then_some(s)
            })
            .await;
            t.record("without system:discovery", without);

            let viewer = format!("{RBAC}/clusterroles/system:public-info-viewer");
            let saved_viewer = get(&t.client, &viewer).await;
            assert_eq!(saved_viewer.code, 200, "{:?}", saved_viewer.body);
            let mut edited = saved_viewer.body.clone();
            edited["rules"] = json!([{"verbs": ["get"], "nonResourceURLs": ["/edited-by-a-user"]}]);
            let r = put(&t.client, &viewer, &edited).await;
            assert_eq!(r.code, 200, "{:?}", r.body);
            let after_edit = common::eventually("the edited role is in effect", async || {
                let s = rules_of(&plain).await;
                has_url(&s, "/edited-by-a-user").then_some(s)
            })
            .await;
            t.record("system:public-info-viewer edited", after_edit);

            let verb = ("create", "authorization.k8s.io", "selfsubjectaccessreviews");
            let granted = may(&t, user, verb.0, verb.1, verb.2).await;
            assert_eq!(granted["allowed"], json!(true), "{granted}");
            t.record("may create its reviews", granted);
            let basic = format!("{RBAC}/clusterrolebindings/system:basic-user");
            let saved_basic = get(&t.client, &basic).await;
            assert_eq!(saved_basic.code, 200, "{:?}", saved_basic.body);
            let r = delete(&t.client, &basic).await;
            assert_eq!(r.code, 200, "{:?}", r.body);
            let revoked = common::eventually("the basic-user binding is gone", async || {
                let s = may(&t, user, verb.0, verb.1, verb.2).await;
                (s["allowed"] == json!(false)).then_some(s)
            })
            .await;
            t.record("without system:basic-user", revoked);
            let r = get(&t.client, &basic).await;
            t.record("the deleted binding", r.record());

            // Put everything back (the real server is shared by this binary).
            for (path, saved) in [(&discovery, &saved_discovery), (&basic, &saved_basic)] {
                let collection = path.rsplit_once('/').map_or("", |(c, _)| c);
                let r = post(&t.client, collection, &recreatable(saved)).await;
                assert_eq!(r.code, 201, "recreating {path}: {:?}", r.body);
            }
            let current = get(&t.client, &viewer).await;
            let mut restored = recreatable(&saved_viewer);
            restored["metadata"]["resourceVersion"] =
                current.body["metadata"]["resourceVersion"].clone();
            let r = put(&t.client, &viewer, &restored).await;
            assert_eq!(r.code, 200, "restoring {viewer}: {:?}", r.body);
            let back = common::eventually("the policy is back", async || {
                let s = rules_of(&plain).await;
                (s == before).then_some(s)
            })
            .await;
            t.record("the policy put back", back);
        },
    )
    .await;
}
