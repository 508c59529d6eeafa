//! kube-sim's CEL has kube-apiserver's per-call cost limit (issue 27, bug
//! 1): a CRD validation rule that would loop over a large list squared is
//! stopped and the write refused with upstream's message, instead of
//! pinning a core of the server.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube_sim::{KubeSim, SimConfig};
use serde_json::json;

#[tokio::test]
async fn a_validation_rule_past_the_per_call_cost_limit_refuses_the_write() {
    let sim = KubeSim::start(SimConfig::default()).await.expect("start");
    let client = sim.client().await;
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "lists.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Cluster",
            "names": {"plural": "lists", "singular": "list", "kind": "List"},
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                "type": "object",
                "properties": {"spec": {
                    "type": "object",
                    "x-kubernetes-validations": [{
                        "rule": "self.items.all(a, self.items.all(b, a == b || a != b))",
                        "message": "never false"
                    }],
                    "properties": {"items": {"type": "array", "items": {"type": "string"}}}
                }}
            }}}]
        }
    }))
    .expect("crd");
    Api::<CustomResourceDefinition>::all(client.clone())
        .create(&PostParams::default(), &crd)
        .await
        .expect("create crd");
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.com", "v1", "List"),
        "lists",
    );
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let obj = |name: &str, n: usize| -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "example.com/v1", "kind": "List",
            "metadata": {"name": name},
            "spec": {"items": (0..n).map(|i| format!("item-{i}")).collect::<Vec<_>>()}
        }))
        .expect("object")
    };
    // A short list is fine.
    api.create(&PostParams::default(), &obj("short", 10))
        .await
        .expect("a short list is valid");
    // 3,000 items squared is 9,000,000 iterations: past the limit.
    let err = match api.create(&PostParams::default(), &obj("long", 3000)).await {
        Ok(_) => panic!("the rule ran to its end: the write was accepted"),
        Err(e) => e,
    };
    let kube::Error::Api(s) = err else {
        panic!("want an API error, got {err}")
    };
    assert_eq!(s.code, 422, "{s:?}");
    // (On a machine too loaded to reach the cost limit within the 10 s
    // backstop, the time limit stops it, in the same words otherwise.)
    assert!(
        s.message.contains("'operation cancelled: ")
            && s.message
                .contains("no further validation rules will be run due to call cost exceeds limit for rule: self.items.all"),
        "{}",
        s.message
    );
}
