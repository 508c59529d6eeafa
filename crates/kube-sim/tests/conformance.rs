//! Conformance suite: each test names the upstream behaviour it checks and
//! runs against kube-sim, or against a real API server when
//! `KUBE_SIM_CONFORMANCE_KUBECONFIG` names a kubeconfig (checks that need
//! kube-sim's own controls then print a NOTE and stop).

mod common;

use std::collections::BTreeMap;

use common::{conform, eventually};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    ConfigMap, Namespace, PersistentVolume, PersistentVolumeClaim, Pod, Secret, Service,
};
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions, WatchEvent,
    WatchParams,
};
use kube::core::ObjectMeta;
use serde_json::json;

fn cm(name: &str, labels: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("k".to_string(), "v".to_string())])),
        ..Default::default()
    }
}

/// Secrets for list-shape checks: unlike ConfigMaps (kube-root-ca.crt), no
/// controller of a real cluster adds Secrets to a new namespace.
fn secret(name: &str, labels: &[(&str, &str)]) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        },
        string_data: Some(BTreeMap::from([("k".to_string(), "v".to_string())])),
        ..Default::default()
    }
}

fn pv(name: &str, finalizers: &[&str]) -> PersistentVolume {
    serde_json::from_value(json!({
        "metadata": {"name": name, "finalizers": finalizers},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "hostPath": {"path": "/tmp/kube-sim"}}
    }))
    .unwrap_or_else(|e| panic!("pv literal: {e}"))
}

fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}
    }))
    .unwrap_or_else(|e| panic!("pod literal: {e}"))
}

fn rv_of(m: &ObjectMeta) -> u64 {
    m.resource_version
        .as_deref()
        .unwrap_or("0")
        .parse()
        .unwrap_or(0)
}

/// rest.BeforeCreate + FillObjectMetaSystemFields: uid, creationTimestamp and
/// resourceVersion are set by the server; one global, increasing RV.
#[tokio::test]
async fn create_fills_system_fields_and_global_resource_version_increases() {
    conform(
        "create_fills_system_fields_and_global_resource_version_increases",
        kube_sim::SimConfig::default(),
        async |t| {
            let ns = t.namespace("conf-create").await;
            let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), &ns);
            let a = api
                .create(&PostParams::default(), &cm("a", &[]))
                .await
                .unwrap();
            let b = api
                .create(&PostParams::default(), &cm("b", &[]))
                .await
                .unwrap();
            assert!(a.metadata.uid.as_deref().is_some_and(|u| u.len() == 36));
            assert!(a.metadata.creation_timestamp.is_some());
            assert_eq!(a.metadata.namespace.as_deref(), Some(ns.as_str()));
            assert!(
                rv_of(&b.metadata) > rv_of(&a.metadata),
                "RVs must increase across objects"
            );
            t.cleanup_namespace(&ns).await;
        },
    )
    .await;
}

/// names.SimpleNameGenerator: generateName + 5 chars from "bcdfghjklmnpqrstvwxz2456789".
#[tokio::test]
async fn generate_name_appends_five_random_characters() {
    conform(
        "generate_name_appends_five_random_characters",
        kube_sim::SimConfig::default(),
        async |t| {
            let ns = t.namespace("conf-gen").await;
            let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), &ns);
            let mut c = cm("", &[]);
            c.metadata.name = None;
            c.metadata.generate_name = Some("web-".into());
            let a = api.create(&PostParams::default(), &c).await.unwrap();
            let name = a.metadata.name.unwrap();
            assert!(name.starts_with("web-") && name.len() == 9, "{name}");
            assert!(
                name[4..]
                    .chars()
                    .all(|ch| "bcdfghjklmnpqrstvwxz2456789".contains(ch)),
                "{name}"
            );
            t.cleanup_namespace(&ns).await;
        },
    )
    .await;
}

/// storage errors: create of an existing name is 409 AlreadyExists; a
/// missing object is 404 NotFound with a Status body naming it.
#[tokio::test]
async fn already_exists_409_and_not_found_404_status_bodies() {
    conform(
        "already_exists_409_and_not_found_404_status_bodies",
        kube_sim::SimConfig::default(),
        async |t| {
            let ns = t.namespace("conf-err").await;
            let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), &ns);
            api.create(&PostParams::default(), &cm("dup", &[]))
                .await
                .unwrap();
            let e = t.status(
                api.create(&PostParams::default(), &cm("dup", &[]))
                    .await
                    .unwrap_err(),
            );
            assert_eq!((e.code, e.reason.as_str()), (409, "AlreadyExists"));
            assert_eq!(e.message, "configmaps \"dup\" already exists");
            let e = t.status(api.get("nope").await.unwrap_err());
            assert_eq!((e.code, e.reason.as_str()), (404, "NotFound"));
            assert_eq!(e.message, "configmaps \"nope\" not found");
            let d = e.details.unwrap();
            assert_eq!((d.name.as_str(), d.kind.as_str()), ("nope", "configmaps"));
            let deps: Api<Deployment> = Api::namespaced(t.client.clone(), &ns);
            let e = t.status(deps.get("nope").await.unwrap_err());
            assert_eq!(e.message, "deployments.apps \"nope\" not found");
            t.cleanup_namespace(&ns).await;
        },
    )
    .await;
}

/// ValidateObjectMeta with NameIsDNSSubdomain: 422 with the real message.
#[tokio::test]
async fn invalid_name_is_422_with_rfc1123_message() {
    conform(
        "invalid_name_is_422_with_rfc1123_message",
        kube_sim::SimConfig::default(),
        async |t| {
            let ns = t.namespace("conf-name").await;
            let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), &ns);
            let e = t.status(
                api.create(&PostParams::default(), &cm("Bad_Name", &[]))
                    .await
                    .unwrap_err(),
            );
            assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
            let cause = &e.details.unwrap().causes[0];
            assert_eq!(
                (cause.reason.as_str(), cause.field.as_str()),
                ("FieldValueInvalid", "metadata.name")
            );
            // Services use DNS labels (RelaxedServiceNameValidation, on in 1.36):
            // a leading digit is fine, a dot is not.
            let svcs: Api<Service> = Api::namespaced(t.client.clone(), &ns);
            let svc = |name: &str| -> Service {
                serde_json::from_value(
                    json!({"metadata": {"name": name}, "spec": {"ports": [{"port": 80}]}}),
                )
                .unwrap()
            };
            svcs.create(&PostParams::default(), &svc("1abc"))
                .await
                .unwrap();
            let e = t.status(
                svcs.create(&PostParams::default(), &svc("a.b"))
                    .await
                    .unwrap_err(),
            );
            assert_eq!(e.code, 422);
            svcs.delete("1abc", &Default::default()).await.unwrap();
            t.cleanup_namespace(&ns).await;
        },
    )
    .await;
}

/// NamespaceLifecycle admission: creating in a missing namespace is 404.
#[tokio::test]
async fn create_in_missing_namespace_is_404_namespace_not_found() {
    conform(
        "create_in_missing_namespace_is_404_namespace_not_found",
        kube_sim::SimConfig::default(),
        async |t| {
            let api: Api<ConfigMap> =
                Api::namespaced(t.client.clone(), "no-such-namespace-kube-sim");
            let e = t.status(
                api.create(&PostParams::default(), &cm("a", &[]))
                    .await
                    .unwrap_err(),
            );
            assert_eq!(e.code, 404);
            assert_eq!(
                e.message,
                "namespaces \"no-such-namespace-kube-sim\" not found"
            );
            let nss: Api<Namespace> = Api::all(t.client.clone());
            for n in ["default", "kube-system"] {
                nss.get(n)
                    .await
                    .unwrap_or_else(|e| panic!("namespace {n}: {e}"));
            }
        },
    )
    .await;
}

/// registry Store.Update: a stale metadata.resourceVersion is 409 Conflict
/// with OptimisticLockErrorMsg; for PATCH too.
#[tokio::test]
async fn stale_resource_version_on_update_and_patch_is_409_conflict() {
    conform("stale_resource_version_on_update_and_patch_is_409_conflict", kube_sim::SimConfig::default(), async |t| {
    let ns = t.namespace("conf-stale").await;
    let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), &ns);
    let a = api
        .create(&PostParams::default(), &cm("a", &[]))
        .await
        .unwrap();
    let mut b = a.clone();
    b.data = Some(BTreeMap::from([("k".into(), "v2".into())]));
    let b = api.replace("a", &PostParams::default(), &b).await.unwrap();
    assert!(rv_of(&b.metadata) > rv_of(&a.metadata));
    let e = t.status(
        api.replace("a", &PostParams::default(), &a)
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        e.message,
        "Operation cannot be fulfilled on configmaps \"a\": the object has been modified; please apply your changes to the latest version and try again"
    );
    let p =
        json!({"metadata": {"resourceVersion": a.metadata.resource_version}, "data": {"x": "y"}});
    let e = t.status(
        api.patch("a", &PatchParams::default(), &Patch::Merge(&p))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 409);
    t.cleanup_namespace(&ns).await;
    })
    .await;
}

/// etcd3 GuaranteedUpdate: a write that changes nothing keeps the
/// resourceVersion.
#[tokio::test]
async fn no_op_update_keeps_resource_version() {
    conform(
        "no_op_update_keeps_resource_version",
        kube_sim::SimConfig::default(),
        async |t| {
            let ns = t.namespace("conf-noop").await;
            let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), &ns);
            let a = api
                .create(&PostParams::default(), &cm("a", &[]))
                .await
                .unwrap();
            let p = json!({"data": {"k": "v"}});
            let b = api
                .patch("a", &PatchParams::default(), &Patch::Merge(&p))
                .await
                .unwrap();
            assert_eq!(a.metadata.resource_version, b.metadata.resource_version);
            t.cleanup_namespace(&ns).await;
        },
    )
    .await;
}

/// deployment strategy: generation 1 on create, +1 on spec change, not on
/// status; services have no generation.
#[tokio::test]
async fn generation_tracks_spec_changes_where_upstream_maintains_it() {
    conform("generation_tracks_spec_changes_where_upstream_maintains_it", kube_sim::SimConfig::default(), async |t| {
    let ns = t.namespace("conf-gen").await;
    let api: Api<Deployment> = Api::namespaced(t.client.clone(), &ns);
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}}}
    })).unwrap();
    let d = api.create(&PostParams::default(), &d).await.unwrap();
    assert_eq!(d.metadata.generation, Some(1));
    let d = api
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await
        .unwrap();
    assert_eq!(d.metadata.generation, Some(2));
    let d = api
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"observedGeneration": 2, "replicas": 3}})),
        )
        .await
        .unwrap();
    assert_eq!(d.metadata.generation, Some(2));
    assert_eq!(d.status.and_then(|s| s.replicas), Some(3));
    let svcs: Api<Service> = Api::namespaced(t.client.clone(), &ns);
    let s: Service = serde_json::from_value(
        json!({"metadata": {"name": "web"}, "spec": {"ports": [{"port": 80}]}}),
    )
    .unwrap();
    let s = svcs.create(&PostParams::default(), &s).await.unwrap();
    assert_eq!(s.metadata.generation, None);
    t.cleanup_namespace(&ns).await;
    })
    .await;
}

/// Status subresource split (service strategy.go): writes to the main
/// resource do not change status; writes to /status keep spec but keep
/// metadata changes (the service controller's finalizer via services/status).
#[tokio::test]
async fn status_subresource_split_and_metadata_via_status() {
    conform("status_subresource_split_and_metadata_via_status", kube_sim::SimConfig::default(), async |t| {
    let ns = t.namespace("conf-status").await;
    let api: Api<Service> = Api::namespaced(t.client.clone(), &ns);
    let s: Service = serde_json::from_value(json!({"metadata": {"name": "lb"}, "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]}})).unwrap();
    api.create(&PostParams::default(), &s).await.unwrap();
    // Main resource: status ignored.
    let p = json!({"spec": {"ports": [{"port": 81}]}, "status": {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}}});
    let s = api
        .patch("lb", &PatchParams::default(), &Patch::Merge(&p))
        .await
        .unwrap();
    assert!(
        s.status
            .and_then(|st| st.load_balancer)
            .and_then(|lb| lb.ingress)
            .is_none()
    );
    // Status: spec ignored, metadata kept.
    let p = json!({"metadata": {"finalizers": ["service.kubernetes.io/load-balancer-cleanup"]}, "spec": {"ports": [{"port": 99}]}, "status": {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}}});
    let s = api
        .patch_status("lb", &PatchParams::default(), &Patch::Merge(&p))
        .await
        .unwrap();
    assert_eq!(
        s.metadata.finalizers,
        Some(vec![
            "service.kubernetes.io/load-balancer-cleanup".to_string()
        ])
    );
    assert_eq!(
        s.spec
            .as_ref()
            .and_then(|sp| sp.ports.as_ref())
            .map(|p| p[0].port),
        Some(81)
    );
    assert_eq!(
        s.status
            .and_then(|st| st.load_balancer)
            .and_then(|lb| lb.ingress)
            .map(|i| i.len()),
        Some(1)
    );
    // Strategic merge patch to services/status removing the finalizer
    // ($deleteFromPrimitiveList), as the upstream service controller does.
    let p = json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["service.kubernetes.io/load-balancer-cleanup"]}});
    let s = api
        .patch_status("lb", &PatchParams::default(), &Patch::Strategic(&p))
        .await
        .unwrap();
    assert!(s.metadata.finalizers.unwrap_or_default().is_empty());
    t.cleanup_namespace(&ns).await;
    })
    .await;
}

/// registry Store.Delete with finalizers: 200 with the object,
/// deletionTimestamp and deletionGracePeriodSeconds 0 set, object kept;
/// deletionTimestamp immutable; no new finalizers (422, exact message);
/// removing the last finalizer deletes it (watchers see DELETED).
#[tokio::test]
async fn finalizers_and_deletion_exactly() {
    conform("finalizers_and_deletion_exactly", kube_sim::SimConfig::default(), async |t| {
    let api: Api<PersistentVolume> = Api::all(t.client.clone());
    let name = t.unique("conf-pv");
    let created = api
        .create(&PostParams::default(), &pv(&name, &["example.com/hold"]))
        .await
        .unwrap();
    let deleted = api.delete(&name, &DeleteParams::default()).await.unwrap();
    let obj = deleted
        .left()
        .expect("DELETE of an object with finalizers answers with the object");
    let ts = obj
        .metadata
        .deletion_timestamp
        .clone()
        .expect("deletionTimestamp set");
    assert_eq!(obj.metadata.deletion_grace_period_seconds, Some(0));
    // (A real cluster's admission may append kubernetes.io/pv-protection.)
    assert!(
        obj.metadata
            .finalizers
            .clone()
            .unwrap_or_default()
            .contains(&"example.com/hold".to_string())
    );
    // Still there.
    let got = api.get(&name).await.unwrap();
    assert_eq!(got.metadata.deletion_timestamp, Some(ts.clone()));
    // A second DELETE changes nothing.
    let again = api
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .unwrap();
    assert_eq!(
        again.metadata.resource_version,
        got.metadata.resource_version
    );
    // deletionTimestamp cannot change: an update that tries keeps the original.
    let p =
        json!({"metadata": {"deletionTimestamp": "2001-01-01T00:00:00Z", "labels": {"a": "b"}}});
    let upd = api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&p))
        .await
        .unwrap();
    assert_eq!(upd.metadata.deletion_timestamp, Some(ts));
    // No new finalizers while deleting.
    let p = json!({"metadata": {"finalizers": ["example.com/hold", "example.com/x"]}});
    let e = t.status(
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&p))
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    assert!(
        e.message.ends_with("metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{\"example.com/x\"}"),
        "{}",
        e.message
    );
    // Removing the last finalizer deletes the object; a watcher sees DELETED.
    let lp = WatchParams::default().fields(&format!("metadata.name={name}"));
    let mut w = api
        .watch(&lp, &upd.metadata.resource_version.clone().unwrap())
        .await
        .unwrap()
        .boxed();
    let p = json!([{"op": "test", "path": "/metadata/finalizers/0", "value": "example.com/hold"}, {"op": "remove", "path": "/metadata/finalizers"}]);
    api.patch(
        &name,
        &PatchParams::default(),
        &Patch::<()>::Json(serde_json::from_value(p).unwrap()),
    )
    .await
    .unwrap();
    let ev = tokio::time::timeout(std::time::Duration::from_secs(30), w.try_next())
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(ev, Some(WatchEvent::Deleted(_))), "{ev:?}");
    let e = t.status(api.get(&name).await.unwrap_err());
    assert_eq!(e.code, 404);
    assert!(created.metadata.uid.is_some());
    })
    .await;
}

/// Store.Delete without finalizers removes at once; pods (no kubelet here)
/// too, but a pod with a finalizer stays Terminating.
#[tokio::test]
async fn delete_without_finalizers_is_immediate_and_pods_honour_finalizers() {
    conform(
        "delete_without_finalizers_is_immediate_and_pods_honour_finalizers",
        kube_sim::SimConfig::default(),
        async |t| {
            let ns = t.namespace("conf-del").await;
            let cms: Api<ConfigMap> = Api::namespaced(t.client.clone(), &ns);
            cms.create(&PostParams::default(), &cm("gone", &[]))
                .await
                .unwrap();
            let r = cms.delete("gone", &DeleteParams::default()).await.unwrap();
            assert!(
                r.is_right(),
                "configmaps answer a Status on immediate deletion"
            );
            assert_eq!(t.status(cms.get("gone").await.unwrap_err()).code, 404);
            let pods: Api<Pod> = Api::namespaced(t.client.clone(), &ns);
            let mut p = pod("p");
            p.metadata.finalizers = Some(vec!["example.com/keep".into()]);
            pods.create(&PostParams::default(), &p).await.unwrap();
            let r = pods.delete("p", &DeleteParams::default()).await.unwrap();
            let kept = r.left().expect("pod with finalizer is kept");
            assert!(kept.metadata.deletion_timestamp.is_some());
            pods.patch(
                "p",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await
            .unwrap();
            eventually("pod to disappear", || async {
                pods.get_opt("p").await.unwrap().is_none().then_some(())
            })
            .await;
            if t.sim.is_some() {
                // No kubelet: an unscheduled pod goes at once.
                pods.create(&PostParams::default(), &pod("q"))
                    .await
                    .unwrap();
                pods.delete("q", &DeleteParams::default()).await.unwrap();
                assert!(pods.get_opt("q").await.unwrap().is_none());
            }
            t.cleanup_namespace(&ns).await;
        },
    )
    .await;
}

/// rest.BeforeDelete preconditions: mismatched uid or resourceVersion is 409.
#[tokio::test]
async fn delete_preconditions_uid_and_resource_version() {
    conform("delete_preconditions_uid_and_resource_version", kube_sim::SimConfig::default(), async |t| {
    let ns = t.namespace("conf-precond").await;
    let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), &ns);
    let a = api
        .create(&PostParams::default(), &cm("a", &[]))
        .await
        .unwrap();
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some("00000000-0000-0000-0000-000000000000".into()),
            resource_version: None,
        }),
        ..Default::default()
    };
    let e = t.status(api.delete("a", &dp).await.unwrap_err());
    assert_eq!(e.code, 409);
    assert!(e.message.contains("the UID in the precondition (00000000-0000-0000-0000-000000000000) does not match the UID in record"), "{}", e.message);
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            uid: None,
            resource_version: Some("1".into()),
        }),
        ..Default::default()
    };
    let e = t.status(api.delete("a", &dp).await.unwrap_err());
    assert_eq!(e.code, 409);
    assert!(e.message.contains("the ResourceVersion in the precondition (1) does not match the ResourceVersion in record"), "{}", e.message);
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            uid: a.metadata.uid.clone(),
            resource_version: a.metadata.resource_version.clone(),
        }),
        ..Default::default()
    };
    api.delete("a", &dp).await.unwrap();
    t.cleanup_namespace(&ns).await;
    })
    .await;
}

/// handlers/patch.go: a JSON patch whose `test` fails is 422.
#[tokio::test]
async fn json_patch_failed_test_is_422() {
    conform("json_patch_failed_test_is_422", kube_sim::SimConfig::default(), async |t| {
    let ns = t.namespace("conf-jp").await;
    let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), &ns);
    api.create(&PostParams::default(), &cm("a", &[]))
        .await
        .unwrap();
    let p = json!([{"op": "test", "path": "/data/k", "value": "other"}, {"op": "replace", "path": "/data/k", "value": "z"}]);
    let e = t.status(
        api.patch(
            "a",
            &PatchParams::default(),
            &Patch::<()>::Json(serde_json::from_value(p).unwrap()),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    assert_eq!(api.get("a").await.unwrap().data.unwrap()["k"], "v");
    t.cleanup_namespace(&ns).await;
    })
    .await;
}

/// Strategic merge patch of metadata.finalizers ($setElementOrder and
/// $deleteFromPrimitiveList) and merge of containers by name.
#[tokio::test]
async fn strategic_merge_patch_finalizers_and_containers() {
    conform("strategic_merge_patch_finalizers_and_containers", kube_sim::SimConfig::default(), async |t| {
    let ns = t.namespace("conf-smp").await;
    let api: Api<Pod> = Api::namespaced(t.client.clone(), &ns);
    let mut p = pod("p");
    p.metadata.finalizers = Some(vec!["a/x".into(), "b/y".into()]);
    api.create(&PostParams::default(), &p).await.unwrap();
    let patch = json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a/x"], "$setElementOrder/finalizers": ["b/y", "c/z"], "finalizers": ["c/z"]},
                       "spec": {"containers": [{"name": "c", "image": "busybox:1.37"}]}});
    let got = api
        .patch("p", &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .unwrap();
    assert_eq!(
        got.metadata.finalizers,
        Some(vec!["b/y".to_string(), "c/z".to_string()])
    );
    let cs = got.spec.unwrap().containers;
    assert_eq!(cs.len(), 1);
    assert_eq!(cs[0].image.as_deref(), Some("busybox:1.37"));
    api.patch(
        "p",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    t.cleanup_namespace(&ns).await;
    })
    .await;
}

/// Server-side apply creates, then updates, the object (kube-lease-manager's
/// Lease pattern); a second manager conflicting is 409 unless forced.
#[tokio::test]
async fn server_side_apply_creates_updates_and_conflicts() {
    conform("server_side_apply_creates_updates_and_conflicts", kube_sim::SimConfig::default(), async |t| {
    let ns = t.namespace("conf-ssa").await;
    let api: Api<Lease> = Api::namespaced(t.client.clone(), &ns);
    let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "lock"}, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}});
    let l = api
        .patch("lock", &PatchParams::apply("mgr-a"), &Patch::Apply(&lease))
        .await
        .unwrap();
    assert_eq!(
        l.spec.as_ref().and_then(|s| s.holder_identity.as_deref()),
        Some("a")
    );
    let lease_b = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "lock"}, "spec": {"holderIdentity": "b"}});
    let e = t.status(
        api.patch(
            "lock",
            &PatchParams::apply("mgr-b"),
            &Patch::Apply(&lease_b),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
    let l = api
        .patch(
            "lock",
            &PatchParams::apply("mgr-b").force(),
            &Patch::Apply(&lease_b),
        )
        .await
        .unwrap();
    assert_eq!(
        l.spec.as_ref().and_then(|s| s.holder_identity.as_deref()),
        Some("b")
    );
    t.cleanup_namespace(&ns).await;
    })
    .await;
}

/// Label selectors (=, !=, in, notin, exists) and field selectors
/// (metadata.name, pod spec.nodeName; unsupported field is 400).
#[tokio::test]
async fn label_and_field_selectors() {
    conform(
        "label_and_field_selectors",
        kube_sim::SimConfig::default(),
        async |t| {
            let ns = t.namespace("conf-sel").await;
            let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), &ns);
            for (n, app) in [("a", "web"), ("b", "db"), ("c", "web")] {
                api.create(&PostParams::default(), &cm(n, &[("app", app)]))
                    .await
                    .unwrap();
            }
            let names = |l: kube::core::ObjectList<ConfigMap>| {
                l.items
                    .into_iter()
                    .filter_map(|c| c.metadata.name)
                    .collect::<Vec<_>>()
            };
            assert_eq!(
                names(
                    api.list(&ListParams::default().labels("app=web"))
                        .await
                        .unwrap()
                ),
                ["a", "c"]
            );
            assert_eq!(
                names(
                    api.list(&ListParams::default().labels("app!=web"))
                        .await
                        .unwrap()
                ),
                ["b"]
            );
            assert_eq!(
                names(
                    api.list(&ListParams::default().labels("app in (db,x)"))
                        .await
                        .unwrap()
                ),
                ["b"]
            );
            assert_eq!(
                names(
                    api.list(&ListParams::default().labels("app notin (db)"))
                        .await
                        .unwrap()
                ),
                ["a", "c"]
            );
            assert_eq!(
                names(
                    api.list(&ListParams::default().fields("metadata.name=b"))
                        .await
                        .unwrap()
                ),
                ["b"]
            );
            let pods: Api<Pod> = Api::namespaced(t.client.clone(), &ns);
            let mut p = pod("on-n1");
            p.spec.as_mut().unwrap().node_name = Some("n1".into());
            pods.create(&PostParams::default(), &p).await.unwrap();
            pods.create(&PostParams::default(), &pod("unscheduled"))
                .await
                .unwrap();
            let l = pods
                .list(&ListParams::default().fields("spec.nodeName=n1"))
                .await
                .unwrap();
            assert_eq!(l.items.len(), 1);
            let l = pods
                .list(&ListParams::default().fields("spec.nodeName="))
                .await
                .unwrap();
            assert_eq!(l.items[0].metadata.name.as_deref(), Some("unscheduled"));
            let e = t.status(
                pods.list(&ListParams::default().fields("status.hostIP=1.2.3.4"))
                    .await
                    .unwrap_err(),
            );
            assert_eq!(e.code, 400);
            assert!(
                e.message
                    .contains("field label not supported: status.hostIP"),
                "{}",
                e.message
            );
            t.cleanup_namespace(&ns).await;
        },
    )
    .await;
}

/// limit/continue paging at a consistent snapshot; remainingItemCount.
#[tokio::test]
async fn limit_and_continue_paging() {
    conform(
        "limit_and_continue_paging",
        kube_sim::SimConfig::default(),
        async |t| {
            let ns = t.namespace("conf-page").await;
            let api: Api<Secret> = Api::namespaced(t.client.clone(), &ns);
            for i in 0..7 {
                api.create(&PostParams::default(), &secret(&format!("c{i}"), &[]))
                    .await
                    .unwrap();
            }
            let first = api.list(&ListParams::default().limit(3)).await.unwrap();
            assert_eq!(first.items.len(), 3);
            assert_eq!(first.metadata.remaining_item_count, Some(4));
            let token = first.metadata.continue_.clone().unwrap();
            // A write between pages is not seen by the continuation (snapshot).
            api.create(&PostParams::default(), &secret("c9", &[]))
                .await
                .unwrap();
            let second = api
                .list(&ListParams::default().limit(3).continue_token(&token))
                .await
                .unwrap();
            assert_eq!(
                second.metadata.resource_version,
                first.metadata.resource_version
            );
            let third = api
                .list(
                    &ListParams::default()
                        .limit(3)
                        .continue_token(second.metadata.continue_.as_deref().unwrap()),
                )
                .await
                .unwrap();
            assert_eq!(third.items.len(), 1);
            assert!(third.metadata.continue_.is_none());
            let all: Vec<String> = first
                .items
                .iter()
                .chain(&second.items)
                .chain(&third.items)
                .filter_map(|c| c.metadata.name.clone())
                .collect();
            assert_eq!(all, ["c0", "c1", "c2", "c3", "c4", "c5", "c6"]);
            t.cleanup_namespace(&ns).await;
        },
    )
    .await;
}

/// List resourceVersion semantics: Exact at an older RV returns that state;
/// NotOlderThan newer than the server is 504 Too large resource version.
#[tokio::test]
async fn list_resource_version_exact_and_not_older_than() {
    conform("list_resource_version_exact_and_not_older_than", kube_sim::SimConfig::default(), async |t| {
    let ns = t.namespace("conf-rv").await;
    let api: Api<Secret> = Api::namespaced(t.client.clone(), &ns);
    let a = api
        .create(&PostParams::default(), &secret("a", &[]))
        .await
        .unwrap();
    let rv_a = a.metadata.resource_version.clone().unwrap();
    api.create(&PostParams::default(), &secret("b", &[]))
        .await
        .unwrap();
    api.delete("a", &DeleteParams::default()).await.unwrap();
    let lp = ListParams::default()
        .at(&rv_a)
        .matching(kube::api::VersionMatch::Exact);
    let old = api.list(&lp).await.unwrap();
    assert_eq!(
        old.items
            .iter()
            .filter_map(|c| c.metadata.name.clone())
            .collect::<Vec<_>>(),
        ["a"]
    );
    assert_eq!(
        old.metadata.resource_version.as_deref(),
        Some(rv_a.as_str())
    );
    // A consistent list (no resourceVersion): the latest state, b alone.
    // (`resourceVersion=0` is "any": the real server answers it from its
    // watch cache, which may not have seen the delete yet; a CI run of the
    // real server saw a stale answer once.)
    let now = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(
        now.items
            .iter()
            .filter_map(|c| c.metadata.name.clone())
            .collect::<Vec<_>>(),
        ["b"]
    );
    if let Some(sim) = &t.sim {
        // (raw request: kube-rs would retry the 504 for minutes.)
        let far = rv_of(&a.metadata) + 1_000_000;
        let (code, body) = common::raw(sim, "GET", &format!("/api/v1/namespaces/{ns}/configmaps?resourceVersion={far}&resourceVersionMatch=NotOlderThan"), "application/json", "").await;
        assert_eq!(code, 504, "{body}");
        assert!(body.contains("Too large resource version"), "{body}");
    }
    t.cleanup_namespace(&ns).await;
    })
    .await;
}

/// Watch from a resourceVersion: ADDED/MODIFIED/DELETED in order, label
/// selector transitions become ADDED/DELETED (cache_watcher.go).
#[tokio::test]
async fn watch_events_and_selector_transitions() {
    conform(
        "watch_events_and_selector_transitions",
        kube_sim::SimConfig::default(),
        async |t| {
            let ns = t.namespace("conf-watch").await;
            let api: Api<Secret> = Api::namespaced(t.client.clone(), &ns);
            let list = api.list(&ListParams::default()).await.unwrap();
            let rv = list.metadata.resource_version.unwrap();
            let mut all = api
                .watch(&WatchParams::default(), &rv)
                .await
                .unwrap()
                .boxed();
            let mut sel = api
                .watch(&WatchParams::default().labels("app=web"), &rv)
                .await
                .unwrap()
                .boxed();
            api.create(&PostParams::default(), &secret("a", &[("app", "db")]))
                .await
                .unwrap();
            api.patch(
                "a",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"app": "web"}}})),
            )
            .await
            .unwrap();
            api.patch(
                "a",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"app": "db"}}})),
            )
            .await
            .unwrap();
            api.delete("a", &DeleteParams::default()).await.unwrap();
            let mut kinds = Vec::new();
            while kinds.len() < 4 {
                let ev = tokio::time::timeout(std::time::Duration::from_secs(30), all.try_next())
                    .await
                    .unwrap()
                    .unwrap()
                    .unwrap();
                kinds.push(match ev {
                    WatchEvent::Added(_) => "ADDED",
                    WatchEvent::Modified(_) => "MODIFIED",
                    WatchEvent::Deleted(_) => "DELETED",
                    WatchEvent::Bookmark(_) => continue,
                    WatchEvent::Error(e) => panic!("{e:?}"),
                });
            }
            assert_eq!(kinds, ["ADDED", "MODIFIED", "MODIFIED", "DELETED"]);
            let mut kinds = Vec::new();
            while kinds.len() < 2 {
                let ev = tokio::time::timeout(std::time::Duration::from_secs(30), sel.try_next())
                    .await
                    .unwrap()
                    .unwrap()
                    .unwrap();
                kinds.push(match ev {
                    WatchEvent::Added(_) => "ADDED",
                    WatchEvent::Modified(_) => "MODIFIED",
                    WatchEvent::Deleted(_) => "DELETED",
                    WatchEvent::Bookmark(_) => continue,
                    WatchEvent::Error(e) => panic!("{e:?}"),
                });
            }
            assert_eq!(kinds, ["ADDED", "DELETED"]);
            t.cleanup_namespace(&ns).await;
        },
    )
    .await;
}

/// watch-list (sendInitialEvents=true): ADDED for existing objects, then a
/// BOOKMARK annotated k8s.io/initial-events-end.
#[tokio::test]
async fn watch_list_send_initial_events_ends_with_annotated_bookmark() {
    conform(
        "watch_list_send_initial_events_ends_with_annotated_bookmark",
        kube_sim::SimConfig::default(),
        async |t| {
            let ns = t.namespace("conf-wl").await;
            let api: Api<Secret> = Api::namespaced(t.client.clone(), &ns);
            api.create(&PostParams::default(), &secret("a", &[]))
                .await
                .unwrap();
            api.create(&PostParams::default(), &secret("b", &[]))
                .await
                .unwrap();
            let wp = WatchParams::default().initial_events();
            let mut w = api.watch(&wp, "").await.unwrap().boxed();
            let mut added = 0;
            loop {
                let ev = tokio::time::timeout(std::time::Duration::from_secs(30), w.try_next())
                    .await
                    .unwrap()
                    .unwrap()
                    .unwrap();
                match ev {
                    WatchEvent::Added(_) => added += 1,
                    WatchEvent::Bookmark(b) => {
                        assert_eq!(
                            b.metadata
                                .annotations
                                .get("k8s.io/initial-events-end")
                                .map(String::as_str),
                            Some("true")
                        );
                        break;
                    }
                    other => panic!("unexpected {other:?}"),
                }
            }
            assert_eq!(added, 2);
            t.cleanup_namespace(&ns).await;
        },
    )
    .await;
}

/// watch cache: a resourceVersion older than the retained window is answered
/// with an ERROR event carrying 410 Expired; an Exact list too.
#[tokio::test]
async fn too_old_resource_version_is_410_gone() {
    let cfg = kube_sim::SimConfig {
        history_window: 5,
        ..Default::default()
    };

    conform("too_old_resource_version_is_410_gone", cfg, async |t| {
        let Some(_) = t.sim() else { return };
        let ns = t.namespace("conf-410").await;
        let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), &ns);
        let a = api
            .create(&PostParams::default(), &cm("a", &[]))
            .await
            .unwrap();
        let old = a.metadata.resource_version.clone().unwrap();
        for i in 0..10 {
            api.patch(
                "a",
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {"i": i.to_string()}})),
            )
            .await
            .unwrap();
        }
        let mut w = api
            .watch(&WatchParams::default(), &old)
            .await
            .unwrap()
            .boxed();
        let ev = tokio::time::timeout(std::time::Duration::from_secs(30), w.try_next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        match ev {
            WatchEvent::Error(s) => {
                assert_eq!((s.code, s.reason.as_str()), (410, "Expired"));
                assert!(
                    s.message
                        .starts_with(&format!("too old resource version: {old} (")),
                    "{}",
                    s.message
                );
            }
            other => panic!("expected ERROR 410, got {other:?}"),
        }
        let e = t.status(
            api.list(
                &ListParams::default()
                    .at(&old)
                    .matching(kube::api::VersionMatch::Exact),
            )
            .await
            .unwrap_err(),
        );
        assert_eq!(e.code, 410);
        assert_eq!(
            e.message,
            "The resourceVersion for the provided list is too old."
        );
    })
    .await;
}

/// Watch bookmarks carry the current resourceVersion.
#[tokio::test]
async fn watch_bookmarks_are_sent_when_allowed() {
    let cfg = kube_sim::SimConfig {
        bookmark_interval: std::time::Duration::from_millis(300),
        ..Default::default()
    };

    conform("watch_bookmarks_are_sent_when_allowed", cfg, async |t| {
        let Some(_) = t.sim() else { return };
        let ns = t.namespace("conf-bm").await;
        let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), &ns);
        let c = api
            .create(&PostParams::default(), &cm("a", &[]))
            .await
            .unwrap();
        let mut w = api
            .watch(
                &WatchParams::default(),
                &c.metadata.resource_version.clone().unwrap(),
            )
            .await
            .unwrap()
            .boxed();
        let ev = tokio::time::timeout(std::time::Duration::from_secs(30), w.try_next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        match ev {
            WatchEvent::Bookmark(b) => {
                assert!(b.metadata.resource_version.parse::<u64>().unwrap() >= rv_of(&c.metadata))
            }
            other => panic!("expected BOOKMARK, got {other:?}"),
        }
    })
    .await;
}

/// StorageObjectInUseProtection admission: adds the protection finalizers to
/// new PVs/PVCs (switchable; off by default in kube-sim).
#[tokio::test]
async fn storage_object_in_use_protection_admission_switch() {
    conform("storage_object_in_use_protection_admission_switch", kube_sim::SimConfig::default(), async |t| {
    let Some(sim) = t.sim() else { return };
    let pvs: Api<PersistentVolume> = Api::all(t.client.clone());
    let off = pvs
        .create(&PostParams::default(), &pv(&t.unique("adm-off"), &[]))
        .await
        .unwrap();
    assert!(off.metadata.finalizers.unwrap_or_default().is_empty());
    sim.set_storage_protection_admission(true);
    let on = pvs
        .create(&PostParams::default(), &pv(&t.unique("adm-on"), &[]))
        .await
        .unwrap();
    assert_eq!(
        on.metadata.finalizers,
        Some(vec!["kubernetes.io/pv-protection".to_string()])
    );
    let ns = t.namespace("conf-adm").await;
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(t.client.clone(), &ns);
    let claim: PersistentVolumeClaim = serde_json::from_value(json!({"metadata": {"name": "c"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})).unwrap();
    let c = pvcs.create(&PostParams::default(), &claim).await.unwrap();
    assert_eq!(
        c.metadata.finalizers,
        Some(vec!["kubernetes.io/pvc-protection".to_string()])
    );
    assert_eq!(c.status.and_then(|s| s.phase).as_deref(), Some("Pending"));
    })
    .await;
}

/// Unsupported patch content type is 415 (handlers/patch.go).
#[tokio::test]
async fn unsupported_patch_content_type_is_415() {
    conform(
        "unsupported_patch_content_type_is_415",
        kube_sim::SimConfig::default(),
        async |t| {
            let ns = t.namespace("conf-415").await;
            let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), &ns);
            api.create(&PostParams::default(), &cm("a", &[]))
                .await
                .unwrap();
            let req = http::Request::builder()
                .method("PATCH")
                .uri(format!("/api/v1/namespaces/{ns}/configmaps/a"))
                .header("Content-Type", "application/xml")
                .body(b"<x/>".to_vec())
                .unwrap();
            let e = t.status(t.client.request_text(req).await.unwrap_err());
            assert_eq!((e.code, e.reason.as_str()), (415, "UnsupportedMediaType"));
            t.cleanup_namespace(&ns).await;
        },
    )
    .await;
}

/// Namespace deletion (namespace registry + namespace controller): the
/// namespace turns Terminating, its content is deleted (objects with
/// finalizers wait for them), then the namespace disappears; creating in a
/// terminating namespace is 403 Forbidden.
#[tokio::test]
async fn namespace_deletion_terminates_then_removes_content_and_namespace() {
    conform(
        "namespace_deletion_terminates_then_removes_content_and_namespace",
        kube_sim::SimConfig::default(),
        async |t| {
            let ns = t.namespace("conf-nsdel").await;
            let cms: Api<ConfigMap> = Api::namespaced(t.client.clone(), &ns);
            cms.create(&PostParams::default(), &cm("plain", &[]))
                .await
                .unwrap();
            let mut held = cm("held", &[]);
            held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
            cms.create(&PostParams::default(), &held).await.unwrap();
            let nss: Api<Namespace> = Api::all(t.client.clone());
            let d = nss.delete(&ns, &DeleteParams::default()).await.unwrap();
            let n = d
                .left()
                .expect("namespace deletion answers with the namespace");
            assert!(n.metadata.deletion_timestamp.is_some());
            assert_eq!(
                n.metadata.deletion_grace_period_seconds, None,
                "the namespace registry sets no grace period"
            );
            assert_eq!(
                n.status.and_then(|s| s.phase).as_deref(),
                Some("Terminating")
            );
            eventually("plain configmap deleted", || async {
                cms.get_opt("plain").await.unwrap().is_none().then_some(())
            })
            .await;
            let e = t.status(
                cms.create(&PostParams::default(), &cm("late", &[]))
                    .await
                    .unwrap_err(),
            );
            assert_eq!((e.code, e.reason.as_str()), (403, "Forbidden"));
            assert!(
                e.message.contains(&format!(
                    "unable to create new content in namespace {ns} because it is being terminated"
                )),
                "{}",
                e.message
            );
            let h = cms.get("held").await.unwrap();
            assert!(h.metadata.deletion_timestamp.is_some());
            assert!(
                nss.get_opt(&ns).await.unwrap().is_some(),
                "namespace waits for its content"
            );
            cms.patch(
                "held",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await
            .unwrap();
            eventually("namespace gone", || async {
                nss.get_opt(&ns).await.unwrap().is_none().then_some(())
            })
            .await;
        },
    )
    .await;
}

/// Foreground/orphan propagation: the garbage-collector finalizer is added
/// and then handled (dependents deleted / orphaned) before the owner goes.
#[tokio::test]
async fn propagation_policies_foreground_and_orphan() {
    conform("propagation_policies_foreground_and_orphan", kube_sim::SimConfig::default(), async |t| {
    let ns = t.namespace("conf-gc").await;
    let cms: Api<ConfigMap> = Api::namespaced(t.client.clone(), &ns);
    let owner = cms
        .create(&PostParams::default(), &cm("owner", &[]))
        .await
        .unwrap();
    let oref = json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid, "blockOwnerDeletion": true}]);
    let mut dep = cm("dep", &[]);
    dep.metadata.owner_references = serde_json::from_value(oref.clone()).unwrap();
    cms.create(&PostParams::default(), &dep).await.unwrap();
    let r = cms
        .delete("owner", &DeleteParams::foreground())
        .await
        .unwrap();
    let o = r
        .left()
        .expect("foreground deletion keeps the owner for the GC");
    assert!(
        o.metadata
            .finalizers
            .unwrap_or_default()
            .contains(&"foregroundDeletion".to_string())
    );
    eventually("dependent deleted", || async {
        cms.get_opt("dep").await.unwrap().is_none().then_some(())
    })
    .await;
    eventually("owner deleted", || async {
        cms.get_opt("owner").await.unwrap().is_none().then_some(())
    })
    .await;

    let owner = cms
        .create(&PostParams::default(), &cm("owner2", &[]))
        .await
        .unwrap();
    let oref = json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner2", "uid": owner.metadata.uid}]);
    let mut dep = cm("dep2", &[]);
    dep.metadata.owner_references = serde_json::from_value(oref).unwrap();
    cms.create(&PostParams::default(), &dep).await.unwrap();
    cms.delete("owner2", &DeleteParams::orphan()).await.unwrap();
    eventually("owner2 deleted", || async {
        cms.get_opt("owner2").await.unwrap().is_none().then_some(())
    })
    .await;
    let d = cms.get("dep2").await.unwrap();
    assert!(
        d.metadata.owner_references.unwrap_or_default().is_empty(),
        "orphaned dependent loses its ownerReference"
    );
    t.cleanup_namespace(&ns).await;
    })
    .await;
}

/// fieldValidation (KEP-2885): unknown fields are dropped; `Strict` makes
/// them a 400 with the strict decoding error.
#[tokio::test]
async fn field_validation_strict_rejects_and_default_drops_unknown_fields() {
    conform("field_validation_strict_rejects_and_default_drops_unknown_fields", kube_sim::SimConfig::default(), async |t| {
    let ns = t.namespace("conf-fv").await;
    let req = |fv: &str, name: &str| {
        http::Request::builder()
            .method("POST")
            .uri(format!("/api/v1/namespaces/{ns}/configmaps?fieldValidation={fv}"))
            .header("Content-Type", "application/json")
            .body(serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "dataa": {"x": "y"}})).unwrap())
            .unwrap()
    };
    let e = t.status(
        t.client
            .request_text(req("Strict", "strict"))
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (400, "BadRequest"));
    assert_eq!(
        e.message,
        "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: strict decoding error: unknown field \"dataa\""
    );
    let created: serde_json::Value =
        serde_json::from_str(&t.client.request_text(req("Warn", "warn")).await.unwrap()).unwrap();
    assert!(created.get("dataa").is_none(), "{created}");
    t.cleanup_namespace(&ns).await;
    })
    .await;
}

/// Graceful pod deletion (podStrategy.CheckGracefulDelete), enabled in
/// kube-sim for an emulated kubelet: a scheduled pod gets deletionTimestamp =
/// now + terminationGracePeriodSeconds and stays until a grace-0 delete.
#[tokio::test]
async fn graceful_pod_deletion_for_scheduled_pods() {
    conform(
        "graceful_pod_deletion_for_scheduled_pods",
        kube_sim::SimConfig {
            pod_graceful_deletion: true,
            ..Default::default()
        },
        async |t| {
            let Some(_) = t.sim() else { return };
            let ns = t.namespace("conf-grace").await;
            let api: Api<Pod> = Api::namespaced(t.client.clone(), &ns);
            let mut p = pod("bound");
            p.spec.as_mut().unwrap().node_name = Some("node-1".into());
            api.create(&PostParams::default(), &p).await.unwrap();
            let kept = api
                .delete("bound", &DeleteParams::default())
                .await
                .unwrap()
                .left()
                .expect("pod kept");
            assert_eq!(kept.metadata.deletion_grace_period_seconds, Some(30));
            assert_eq!(
                kept.metadata.generation,
                Some(2),
                "graceful deletion bumps generation"
            );
            // A shorter grace period; then 0 removes it.
            let shorter = api
                .delete(
                    "bound",
                    &DeleteParams {
                        grace_period_seconds: Some(5),
                        ..Default::default()
                    },
                )
                .await
                .unwrap()
                .left()
                .unwrap();
            assert_eq!(shorter.metadata.deletion_grace_period_seconds, Some(5));
            let r = api
                .delete(
                    "bound",
                    &DeleteParams {
                        grace_period_seconds: Some(0),
                        ..Default::default()
                    },
                )
                .await
                .unwrap();
            assert!(r.is_left(), "pods return the deleted object");
            assert!(api.get_opt("bound").await.unwrap().is_none());
            // Unscheduled pods go at once.
            api.create(&PostParams::default(), &pod("free"))
                .await
                .unwrap();
            api.delete("free", &DeleteParams::default()).await.unwrap();
            assert!(api.get_opt("free").await.unwrap().is_none());
        },
    )
    .await;
}

/// Watch timeoutSeconds ends the stream; deletecollection deletes matching
/// objects; dryRun=All persists nothing; metadata-only (PartialObjectMetadata) reads.
#[tokio::test]
async fn watch_timeout_deletecollection_dry_run_and_metadata_only() {
    conform(
        "watch_timeout_deletecollection_dry_run_and_metadata_only",
        kube_sim::SimConfig::default(),
        async |t| {
            let ns = t.namespace("conf-misc").await;
            let api: Api<Secret> = Api::namespaced(t.client.clone(), &ns);
            let c = api
                .create(&PostParams::default(), &secret("a", &[("app", "x")]))
                .await
                .unwrap();
            api.create(&PostParams::default(), &secret("b", &[("app", "y")]))
                .await
                .unwrap();
            let mut w = api
                .watch(
                    &WatchParams::default().timeout(1),
                    &c.metadata.resource_version.clone().unwrap(),
                )
                .await
                .unwrap()
                .boxed();
            let started = std::time::Instant::now();
            loop {
                match tokio::time::timeout(std::time::Duration::from_secs(30), w.try_next())
                    .await
                    .unwrap()
                    .unwrap()
                {
                    None => break,
                    Some(_) => continue,
                }
            }
            assert!(started.elapsed() < std::time::Duration::from_secs(30));
            let dry = PostParams {
                dry_run: true,
                ..Default::default()
            };
            let d = api.create(&dry, &secret("dry", &[])).await.unwrap();
            assert_eq!(d.metadata.name.as_deref(), Some("dry"));
            assert!(api.get_opt("dry").await.unwrap().is_none());
            let meta = api.list_metadata(&ListParams::default()).await.unwrap();
            assert_eq!(meta.items.len(), 2);
            assert_eq!(meta.items[0].metadata.name.as_deref(), Some("a"));
            api.delete_collection(
                &DeleteParams::default(),
                &ListParams::default().labels("app=x"),
            )
            .await
            .unwrap();
            let left: Vec<String> = api
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .into_iter()
                .filter_map(|c| c.metadata.name)
                .collect();
            assert_eq!(left, ["b"]);
            t.cleanup_namespace(&ns).await;
        },
    )
    .await;
}

/// Every served kind round-trips create/get/list/delete with its scope and
/// name rules (RBAC names are path segments: ':' allowed).
#[tokio::test]
async fn every_served_kind_round_trips() {
    conform("every_served_kind_round_trips", kube_sim::SimConfig::default(), async |t| {
    let ns = t.namespace("conf-kinds").await;
    let cr_name = t.unique("system:kube-sim:role");
    let crb_name = t.unique("system:kube-sim:binding");
    let node_name = t.unique("node");
    let sc_name = t.unique("sc");
    let objects = [
        (
            "",
            "v1",
            "endpoints",
            true,
            json!({"kind": "Endpoints", "metadata": {"name": "ep"}, "subsets": []}),
        ),
        (
            "",
            "v1",
            "events",
            true,
            json!({"kind": "Event", "metadata": {"name": "ev"}, "involvedObject": {"kind": "Pod", "name": "p", "namespace": ns}, "reason": "Test", "message": "m", "type": "Normal"}),
        ),
        (
            "",
            "v1",
            "nodes",
            false,
            json!({"kind": "Node", "metadata": {"name": node_name}}),
        ),
        (
            "",
            "v1",
            "secrets",
            true,
            json!({"kind": "Secret", "metadata": {"name": "s"}, "stringData": {"a": "b"}}),
        ),
        (
            "",
            "v1",
            "serviceaccounts",
            true,
            json!({"kind": "ServiceAccount", "metadata": {"name": "sa"}}),
        ),
        (
            "apps",
            "v1",
            "replicasets",
            true,
            json!({"kind": "ReplicaSet", "metadata": {"name": "rs"}, "spec": {"replicas": 0, "selector": {"matchLabels": {"a": "b"}}, "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}}}}),
        ),
        (
            "batch",
            "v1",
            "jobs",
            true,
            json!({"kind": "Job", "metadata": {"name": "job"}, "spec": {"suspend": true, "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox:1.36"}]}}}}),
        ),
        (
            "storage.k8s.io",
            "v1",
            "storageclasses",
            false,
            json!({"kind": "StorageClass", "metadata": {"name": sc_name}, "provisioner": "example.com/none"}),
        ),
        (
            "coordination.k8s.io",
            "v1",
            "leases",
            true,
            json!({"kind": "Lease", "metadata": {"name": "l"}, "spec": {"holderIdentity": "me"}}),
        ),
        (
            "events.k8s.io",
            "v1",
            "events",
            true,
            json!({"kind": "Event", "metadata": {"name": "ev2"}, "eventTime": "2024-01-01T00:00:00.000000Z", "reportingController": "x/y", "reportingInstance": "i", "action": "A", "reason": "R", "type": "Normal", "regarding": {"kind": "Pod", "name": "p", "namespace": ns}}),
        ),
        (
            "policy",
            "v1",
            "poddisruptionbudgets",
            true,
            json!({"kind": "PodDisruptionBudget", "metadata": {"name": "pdb"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"a": "b"}}}}),
        ),
        (
            "rbac.authorization.k8s.io",
            "v1",
            "roles",
            true,
            json!({"kind": "Role", "metadata": {"name": "r"}, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}),
        ),
        (
            "rbac.authorization.k8s.io",
            "v1",
            "rolebindings",
            true,
            json!({"kind": "RoleBinding", "metadata": {"name": "rb"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"}, "subjects": [{"kind": "ServiceAccount", "name": "sa", "namespace": ns}]}),
        ),
        (
            "rbac.authorization.k8s.io",
            "v1",
            "clusterroles",
            false,
            json!({"kind": "ClusterRole", "metadata": {"name": cr_name}, "rules": []}),
        ),
        (
            "rbac.authorization.k8s.io",
            "v1",
            "clusterrolebindings",
            false,
            json!({"kind": "ClusterRoleBinding", "metadata": {"name": crb_name}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cr_name}}),
        ),
    ];
    for (group, version, plural, namespaced, mut body) in objects {
        let kind = body["kind"].as_str().unwrap().to_string();
        let ar = kube::api::ApiResource {
            group: group.into(),
            version: version.into(),
            api_version: if group.is_empty() {
                version.into()
            } else {
                format!("{group}/{version}")
            },
            kind: kind.clone(),
            plural: plural.into(),
        };
        body["apiVersion"] = json!(ar.api_version);
        let api: Api<kube::api::DynamicObject> = if namespaced {
            Api::namespaced_with(t.client.clone(), &ns, &ar)
        } else {
            Api::all_with(t.client.clone(), &ar)
        };
        let obj: kube::api::DynamicObject = serde_json::from_value(body).unwrap();
        let name = obj.metadata.name.clone().unwrap();
        let created = api
            .create(&PostParams::default(), &obj)
            .await
            .unwrap_or_else(|e| panic!("{kind}: {e}"));
        assert_eq!(
            created.metadata.namespace.is_some(),
            namespaced,
            "{kind} scope"
        );
        let got = api
            .get(&name)
            .await
            .unwrap_or_else(|e| panic!("{kind} get: {e}"));
        if kind == "Secret" {
            assert_eq!(
                got.data["data"],
                json!({"a": "Yg=="}),
                "stringData is merged into data"
            );
            assert!(got.data.get("stringData").is_none());
        }
        assert!(
            !api.list(&ListParams::default())
                .await
                .unwrap()
                .items
                .is_empty(),
            "{kind} list"
        );
        api.delete(&name, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("{kind} delete: {e}"));
        // (A Job orphans its pods by default: the garbage collector removes
        // its `orphan` finalizer first.)
        eventually(&format!("{kind} gone"), async || {
            api.get_opt(&name).await.unwrap().is_none().then_some(())
        })
        .await;
    }
    t.cleanup_namespace(&ns).await;
    })
    .await;
}

/// etcd3 handleCompactedErrorForPaging: a continue token older than the
/// retained history is 410 with a fresh token that finishes the list from
/// the latest state.
#[tokio::test]
async fn expired_continue_token_is_410_with_inconsistent_continuation() {
    conform(
        "expired_continue_token_is_410_with_inconsistent_continuation",
        kube_sim::SimConfig {
            history_window: 3,
            ..Default::default()
        },
        async |t| {
            let Some(_) = t.sim() else { return };
            let ns = t.namespace("conf-cont").await;
            let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), &ns);
            for i in 0..4 {
                api.create(&PostParams::default(), &cm(&format!("c{i}"), &[]))
                    .await
                    .unwrap();
            }
            let first = api.list(&ListParams::default().limit(2)).await.unwrap();
            for i in 0..5 {
                api.patch(
                    "c3",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"data": {"i": i.to_string()}})),
                )
                .await
                .unwrap();
            }
            let e = t.status(
                api.list(
                    &ListParams::default()
                        .limit(2)
                        .continue_token(first.metadata.continue_.as_deref().unwrap()),
                )
                .await
                .unwrap_err(),
            );
            assert_eq!((e.code, e.reason.as_str()), (410, "Expired"));
            assert!(
                e.message
                    .starts_with("The provided continue parameter is too old"),
                "{}",
                e.message
            );
            let token = e
                .metadata
                .and_then(|m| m.continue_)
                .expect("a fresh continue token");
            let rest = api
                .list(&ListParams::default().limit(2).continue_token(&token))
                .await
                .unwrap();
            let names: Vec<String> = rest
                .items
                .into_iter()
                .filter_map(|c| c.metadata.name)
                .collect();
            assert_eq!(names, ["c2", "c3"]);
        },
    )
    .await;
}

/// ValidateObjectMetaAccessorUpdate: deletionTimestamp cannot be set by an
/// update on an object that is not being deleted (field is immutable).
#[tokio::test]
async fn deletion_timestamp_cannot_be_set_by_update() {
    conform(
        "deletion_timestamp_cannot_be_set_by_update",
        kube_sim::SimConfig::default(),
        async |t| {
            let ns = t.namespace("conf-dts").await;
            let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), &ns);
            api.create(&PostParams::default(), &cm("a", &[]))
                .await
                .unwrap();
            let p = json!({"metadata": {"deletionTimestamp": "2030-01-01T00:00:00Z"}});
            let e = t.status(
                api.patch("a", &PatchParams::default(), &Patch::Merge(&p))
                    .await
                    .unwrap_err(),
            );
            assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
            assert!(
                e.message
                    .contains("metadata.deletionTimestamp: Invalid value"),
                "{}",
                e.message
            );
            assert!(e.message.ends_with("field is immutable"), "{}", e.message);
            t.cleanup_namespace(&ns).await;
        },
    )
    .await;
}

/// Service strategy (dropTypeDependentFields, patchAllocatedValues): a
/// LoadBalancer changed to ClusterIP loses its node ports, its
/// externalTrafficPolicy and its load-balancer status; the cluster IP stays;
/// ClusterIP to NodePort allocates node ports.
#[tokio::test]
async fn service_type_change_drops_type_dependent_fields() {
    conform("service_type_change_drops_type_dependent_fields", kube_sim::SimConfig::default(), async |t| {
    let ns = t.namespace("conf-svc").await;
    let api: Api<Service> = Api::namespaced(t.client.clone(), &ns);
    let s: Service = serde_json::from_value(json!({"metadata": {"name": "lb"}, "spec": {"type": "LoadBalancer", "ports": [{"name": "http", "port": 80}]}})).unwrap();
    let created = api.create(&PostParams::default(), &s).await.unwrap();
    let spec = created.spec.clone().unwrap();
    let ip = spec.cluster_ip.clone().unwrap();
    assert!(
        spec.ports.as_ref().unwrap()[0].node_port.is_some(),
        "LoadBalancer gets a node port"
    );
    api.patch_status(
        "lb",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]}}})),
    )
    .await
    .unwrap();
    let s = api
        .patch(
            "lb",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"type": "ClusterIP"}})),
        )
        .await
        .unwrap();
    let spec = s.spec.clone().unwrap();
    assert_eq!(spec.cluster_ip.as_deref(), Some(ip.as_str()));
    assert_eq!(spec.ports.as_ref().unwrap()[0].node_port, None);
    assert_eq!(spec.external_traffic_policy, None);
    assert!(
        s.status
            .and_then(|st| st.load_balancer)
            .and_then(|lb| lb.ingress)
            .is_none(),
        "load-balancer status cleared"
    );
    let s = api
        .patch(
            "lb",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"type": "NodePort"}})),
        )
        .await
        .unwrap();
    assert!(
        s.spec.unwrap().ports.unwrap()[0].node_port.is_some(),
        "NodePort allocates a node port"
    );
    t.cleanup_namespace(&ns).await;
    })
    .await;
}

/// Garbage collector, background propagation (the default): deleting the
/// owner deletes dependents whose owners are all gone; a dependent with
/// another live owner only loses the dangling reference.
#[tokio::test]
async fn background_cascading_deletion_of_dependents() {
    conform("background_cascading_deletion_of_dependents", kube_sim::SimConfig::default(), async |t| {
    let ns = t.namespace("conf-bg").await;
    let cms: Api<ConfigMap> = Api::namespaced(t.client.clone(), &ns);
    let a = cms
        .create(&PostParams::default(), &cm("owner-a", &[]))
        .await
        .unwrap();
    let b = cms
        .create(&PostParams::default(), &cm("owner-b", &[]))
        .await
        .unwrap();
    let oref = |o: &ConfigMap| json!({"apiVersion": "v1", "kind": "ConfigMap", "name": o.metadata.name, "uid": o.metadata.uid});
    let mut only_a = cm("only-a", &[]);
    only_a.metadata.owner_references = serde_json::from_value(json!([oref(&a)])).unwrap();
    cms.create(&PostParams::default(), &only_a).await.unwrap();
    let mut both = cm("both", &[]);
    both.metadata.owner_references = serde_json::from_value(json!([oref(&a), oref(&b)])).unwrap();
    cms.create(&PostParams::default(), &both).await.unwrap();
    cms.delete("owner-a", &DeleteParams::default())
        .await
        .unwrap();
    eventually("only-a deleted", || async {
        cms.get_opt("only-a").await.unwrap().is_none().then_some(())
    })
    .await;
    eventually("dangling reference removed", || async {
        let d = cms.get("both").await.unwrap();
        (d.metadata.owner_references.unwrap_or_default().len() == 1).then_some(())
    })
    .await;
    t.cleanup_namespace(&ns).await;
    })
    .await;
}

/// Secret `stringData` is write-only and merged into `data` on every write
/// (Convert_v1_Secret_To_core_Secret): on update and patch too, overwriting
/// existing keys.
#[tokio::test]
async fn secret_string_data_merges_into_data_on_update_and_patch() {
    conform(
        "secret_string_data_merges_into_data_on_update_and_patch",
        kube_sim::SimConfig::default(),
        async |t| {
            let ns = t.namespace("conf-stringdata").await;
            let api: Api<Secret> = Api::namespaced(t.client.clone(), &ns);
            let mut s = api
                .create(&PostParams::default(), &secret("s", &[]))
                .await
                .unwrap();
            assert_eq!(
                s.data.as_ref().map(|d| d["k"].0.clone()),
                Some(b"v".to_vec())
            );
            s.string_data = Some(BTreeMap::from([
                ("k".to_string(), "w".to_string()),
                ("n".to_string(), "new".to_string()),
            ]));
            let s = api.replace("s", &PostParams::default(), &s).await.unwrap();
            let d = s.data.clone().unwrap_or_default();
            assert_eq!(
                d["k"].0,
                b"w".to_vec(),
                "stringData overwrites data on update"
            );
            assert_eq!(d["n"].0, b"new".to_vec());
            assert!(s.string_data.is_none(), "stringData is never returned");
            let p = api
                .patch(
                    "s",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"stringData": {"m": "merged"}})),
                )
                .await
                .unwrap();
            let d = p.data.unwrap_or_default();
            assert_eq!(d["m"].0, b"merged".to_vec(), "stringData merges on patch");
            assert_eq!(d["k"].0, b"w".to_vec());
            assert!(p.string_data.is_none());
            t.cleanup_namespace(&ns).await;
        },
    )
    .await;
}

/// The Job strategy generates the selector from the Job's uid and labels
/// the template (pkg/registry/batch/job/strategy.go generateSelector), and
/// SetDefaults_Job fills completions, parallelism, backoffLimit and the
/// completion mode.
#[tokio::test]
async fn job_selector_and_defaults_are_generated() {
    conform("job_selector_and_defaults_are_generated", kube_sim::SimConfig::default(), async |t| {
    let ns = t.namespace("conf-job").await;
    let api: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(t.client.clone(), &ns);
    let job: k8s_openapi::api::batch::v1::Job = serde_json::from_value(json!({
        "metadata": {"name": "j"},
        "spec": {"suspend": true, "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox:1.36"}]}}}
    }))
    .unwrap();
    let j = api.create(&PostParams::default(), &job).await.unwrap();
    let uid = j.metadata.uid.clone().unwrap();
    let spec = j.spec.unwrap();
    assert_eq!(
        spec.selector.and_then(|s| s.match_labels),
        Some(BTreeMap::from([(
            "batch.kubernetes.io/controller-uid".to_string(),
            uid.clone()
        )]))
    );
    let labels = spec
        .template
        .metadata
        .and_then(|m| m.labels)
        .unwrap_or_default();
    assert_eq!(
        labels
            .get("batch.kubernetes.io/job-name")
            .map(String::as_str),
        Some("j")
    );
    assert_eq!(labels.get("controller-uid"), Some(&uid));
    assert_eq!(spec.completions, Some(1));
    assert_eq!(spec.parallelism, Some(1));
    assert_eq!(spec.backoff_limit, Some(6));
    assert_eq!(spec.completion_mode.as_deref(), Some("NonIndexed"));
    // restartPolicy Always is refused for Jobs.
    let mut bad = job.clone();
    bad.metadata.name = Some("bad".into());
    if let Some(ps) = bad.spec.as_mut().and_then(|s| s.template.spec.as_mut()) {
        ps.restart_policy = Some("Always".into());
    }
    let e = t.status(api.create(&PostParams::default(), &bad).await.unwrap_err());
    assert_eq!(e.code, 422);
    assert_eq!(
        e.details.map(|d| d.causes[0].field.clone()).as_deref(),
        Some("spec.template.spec.restartPolicy")
    );
    t.cleanup_namespace(&ns).await;
    })
    .await;
}

/// core/v1 and events.k8s.io/v1 Events are two versions of one resource
/// (pkg/apis/events/v1/conversion.go): an Event written through either is
/// read through both, with regarding↔involvedObject, note↔message,
/// reportingController↔reportingComponent, deprecatedCount↔count, the same
/// uid and resourceVersion, and field selectors in each version's names.
#[tokio::test]
async fn core_and_events_v1_events_are_one_resource() {
    use k8s_openapi::api::core::v1::Event as CoreEvent;
    use k8s_openapi::api::events::v1::Event as V1Event;

    conform("core_and_events_v1_events_are_one_resource", kube_sim::SimConfig::default(), async |t| {
    let ns = t.namespace("conf-events").await;
    let core: Api<CoreEvent> = Api::namespaced(t.client.clone(), &ns);
    let v1: Api<V1Event> = Api::namespaced(t.client.clone(), &ns);
    let e: V1Event = serde_json::from_value(json!({
        "metadata": {"name": "from-v1"},
        "eventTime": "2024-01-01T00:00:00.000000Z",
        "reportingController": "example.com/ctl",
        "reportingInstance": "ctl-1",
        "action": "Check",
        "reason": "InUse",
        "note": "claim in use by pod p",
        "type": "Normal",
        "regarding": {"kind": "PersistentVolumeClaim", "namespace": ns, "name": "data", "apiVersion": "v1"},
    }))
    .unwrap();
    let created = v1.create(&PostParams::default(), &e).await.unwrap();
    let via_core = core
        .list(
            &ListParams::default()
                .fields("involvedObject.name=data,involvedObject.kind=PersistentVolumeClaim"),
        )
        .await
        .unwrap()
        .items;
    assert_eq!(via_core.len(), 1, "kubectl describe's query finds it");
    let c = &via_core[0];
    assert_eq!(c.metadata.name.as_deref(), Some("from-v1"));
    assert_eq!(c.metadata.uid, created.metadata.uid);
    assert_eq!(
        c.metadata.resource_version,
        created.metadata.resource_version
    );
    assert_eq!(c.message.as_deref(), Some("claim in use by pod p"));
    assert_eq!(c.reporting_component.as_deref(), Some("example.com/ctl"));
    assert_eq!(c.involved_object.name.as_deref(), Some("data"));

    let ce: CoreEvent = serde_json::from_value(json!({
        "metadata": {"name": "from-core"},
        "involvedObject": {"kind": "Pod", "namespace": ns, "name": "p"},
        "reason": "Scheduled", "message": "assigned", "type": "Normal",
        "source": {"component": "default-scheduler"}, "count": 3,
        "firstTimestamp": "2024-01-01T00:00:00Z", "lastTimestamp": "2024-01-01T00:00:01Z",
    }))
    .unwrap();
    let rv = v1
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap_or_default();
    let mut stream = v1
        .watch(&WatchParams::default().timeout(20), &rv)
        .await
        .unwrap()
        .boxed();
    core.create(&PostParams::default(), &ce).await.unwrap();
    match stream.try_next().await.unwrap() {
        Some(WatchEvent::Added(ev)) => {
            assert_eq!(ev.metadata.name.as_deref(), Some("from-core"));
            assert_eq!(
                ev.note.as_deref(),
                Some("assigned"),
                "watchers of events.k8s.io see core writes"
            );
        }
        other => panic!("expected ADDED, got {other:?}"),
    }
    drop(stream);
    let got = v1.get("from-core").await.unwrap();
    assert_eq!(got.note.as_deref(), Some("assigned"));
    assert_eq!(
        got.regarding.as_ref().and_then(|r| r.name.as_deref()),
        Some("p")
    );
    assert_eq!(got.deprecated_count, Some(3));
    assert_eq!(
        got.deprecated_source
            .as_ref()
            .and_then(|s| s.component.as_deref()),
        Some("default-scheduler")
    );
    let by_regarding = v1
        .list(&ListParams::default().fields("regarding.name=p"))
        .await
        .unwrap()
        .items;
    assert_eq!(by_regarding.len(), 1);
    assert_eq!(
        v1.list(&ListParams::default()).await.unwrap().items.len(),
        2
    );

    // A patch through one version is seen through the other; through
    // events.k8s.io/v1 the event's own fields are immutable
    // (ValidateEventUpdate), through core/v1 they are not.
    let e = t.status(
        v1.patch(
            "from-core",
            &PatchParams::default(),
            &Patch::Merge(json!({"note": "re-assigned"})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(e.code, 422);
    v1.patch(
        "from-core",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"seen": "v1"}}})),
    )
    .await
    .unwrap();
    core.patch(
        "from-core",
        &PatchParams::default(),
        &Patch::Merge(json!({"message": "re-assigned"})),
    )
    .await
    .unwrap();
    let got = v1.get("from-core").await.unwrap();
    assert_eq!(got.note.as_deref(), Some("re-assigned"));
    assert_eq!(
        got.metadata.labels.and_then(|l| l.get("seen").cloned()).as_deref(),
        Some("v1")
    );
    core.delete("from-v1", &DeleteParams::default())
        .await
        .unwrap();
    let e = t.status(v1.get("from-v1").await.unwrap_err());
    assert_eq!(e.code, 404);
    assert_eq!(e.message, "events.events.k8s.io \"from-v1\" not found");
    t.cleanup_namespace(&ns).await;
    })
    .await;
}

// ------------------------------------------------------------------------
// Issue 15: what a real kube-apiserver 1.36 answers where kube-sim used to
// answer differently. Each test states the real server's text.

/// pkg/apis/core/validation `validateKubeFinalizerName`: a finalizer without
/// a domain must be `kubernetes`, `orphan` or `foregroundDeletion`. Real:
/// 422 `ConfigMap "nodomain" is invalid: metadata.finalizers[0]: Invalid
/// value: "nodomain": name is neither a standard finalizer name nor is it
/// fully qualified`.
#[tokio::test]
async fn domainless_finalizer_that_is_not_standard_is_422() {
    conform("domainless_finalizer_that_is_not_standard_is_422", kube_sim::SimConfig::default(), async |t| {
    let ns = t.namespace("conf-fin").await;
    let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), &ns);
    let mut c = cm("nodomain", &[]);
    c.metadata.finalizers = Some(vec!["nodomain".into()]);
    let e = t.status(api.create(&PostParams::default(), &c).await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        e.message,
        "ConfigMap \"nodomain\" is invalid: metadata.finalizers[0]: Invalid value: \"nodomain\": name is neither a standard finalizer name nor is it fully qualified"
    );
    // The standard names are accepted without a domain.
    let mut ok = cm("standard", &[]);
    ok.metadata.finalizers = Some(vec!["kubernetes".into(), "orphan".into()]);
    api.create(&PostParams::default(), &ok)
        .await
        .unwrap_or_else(|e| panic!("standard finalizers refused: {e}"));
    // And so is an update that adds a non-standard one refused.
    let e = t.status(
        api.patch(
            "standard",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["kubernetes", "orphan", "other"]}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(
        e.message,
        "ConfigMap \"standard\" is invalid: metadata.finalizers[2]: Invalid value: \"other\": name is neither a standard finalizer name nor is it fully qualified"
    );
    api.patch(
        "standard",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap_or_else(|e| panic!("clearing finalizers: {e}"));
    t.cleanup_namespace(&ns).await;
    })
    .await;
}

/// apimachinery `ValidateFinalizers` reports an invalid name at
/// `metadata.finalizers` without an index; with the core rule's error the
/// aggregate is a list. Real: `ConfigMap "badfin" is invalid:
/// [metadata.finalizers: Invalid value: "not a name!": name part must
/// consist of ...`.
#[tokio::test]
async fn invalid_finalizer_name_error_has_no_index_and_is_a_list() {
    conform("invalid_finalizer_name_error_has_no_index_and_is_a_list", kube_sim::SimConfig::default(), async |t| {
    let ns = t.namespace("conf-badfin").await;
    let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), &ns);
    let mut c = cm("badfin", &[]);
    c.metadata.finalizers = Some(vec!["not a name!".into()]);
    let e = t.status(api.create(&PostParams::default(), &c).await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        e.message,
        "ConfigMap \"badfin\" is invalid: [metadata.finalizers: Invalid value: \"not a name!\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]'), metadata.finalizers[0]: Invalid value: \"not a name!\": name is neither a standard finalizer name nor is it fully qualified]"
    );
    let fields: Vec<String> = e
        .details
        .map(|d| d.causes.into_iter().map(|c| c.field).collect())
        .unwrap_or_default();
    assert_eq!(fields, ["metadata.finalizers", "metadata.finalizers[0]"]);
    t.cleanup_namespace(&ns).await;
    })
    .await;
}

/// structured-merge-diff cannot type an applied list given as a map. Real:
/// 500 `failed to create typed patch object (/ssa; /v1, Kind=ConfigMap):
/// .metadata.finalizers: expected list, got &{map[bad:1]}`.
#[tokio::test]
async fn server_side_apply_with_a_wrong_type_is_500_typed_patch_error() {
    conform("server_side_apply_with_a_wrong_type_is_500_typed_patch_error", kube_sim::SimConfig::default(), async |t| {
    let ns = t.namespace("conf-ssatype").await;
    let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), &ns);
    let e = t.status(
        api.patch(
            "ssa",
            &PatchParams::apply("conformance"),
            &Patch::Apply(json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "ssa", "finalizers": {"bad": 1}},
            })),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(e.code, 500);
    assert_eq!(
        e.message,
        "failed to create typed patch object (/ssa; /v1, Kind=ConfigMap): .metadata.finalizers: expected list, got &{map[bad:1]}"
    );
    // Nothing was created.
    assert!(
        api.get_opt("ssa")
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .is_none()
    );
    // A map given as a list is refused the same way.
    let e = t.status(
        api.patch(
            "ssa",
            &PatchParams::apply("conformance"),
            &Patch::Apply(json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "ssa", "labels": ["a"]},
            })),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(
        (e.code, e.message.as_str()),
        (
            500,
            "failed to create typed patch object (/ssa; /v1, Kind=ConfigMap): .metadata.labels: expected map, got &{[a]}"
        )
    );
    t.cleanup_namespace(&ns).await;
    })
    .await;
}

/// `ValidatePersistentVolumeClaimUpdate`: shrinking a pending claim's
/// request changes an immutable spec. Real: 422 `PersistentVolumeClaim "c"
/// is invalid: spec: Forbidden: spec is immutable after creation except
/// resources.requests and volumeAttributesClassName for bound claims`
/// followed by apimachinery's `diff.Diff` of the internal specs (a unified
/// diff of their indented JSON), compared whole.
#[tokio::test]
async fn pending_claim_spec_is_immutable() {
    conform("pending_claim_spec_is_immutable", kube_sim::SimConfig::default(), async |t| {
    let ns = t.namespace("conf-pvcimm").await;
    let api: Api<PersistentVolumeClaim> = Api::namespaced(t.client.clone(), &ns);
    let pvc: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "c"},
        "spec": {"storageClassName": "", "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "2Gi"}}},
    }))
    .unwrap_or_else(|e| panic!("{e}"));
    api.create(&PostParams::default(), &pvc)
        .await
        .unwrap_or_else(|e| panic!("creating the claim: {e}"));
    let e = t.status(
        api.patch(
            "c",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"resources": {"requests": {"storage": "1Gi"}}}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    let head = "PersistentVolumeClaim \"c\" is invalid: spec: Forbidden: spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims\n";
    assert!(e.message.starts_with(head), "{}", e.message);
    assert!(
        e.message[head.len()..].to_lowercase().contains("resources"),
        "{}",
        e.message
    );
    // Another spec field: the same error. A label: fine.
    let e = t.status(
        api.patch(
            "c",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"accessModes": ["ReadWriteMany"]}})),
        )
        .await
        .unwrap_err(),
    );
    assert!(e.message.starts_with(head), "{}", e.message);
    api.patch(
        "c",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}})),
    )
    .await
    .unwrap_or_else(|e| panic!("a metadata change was refused: {e}"));
    t.cleanup_namespace(&ns).await;
    })
    .await;
}

/// `validateLoadBalancerClassField`: real 422 `Service "lb" is invalid:
/// spec.loadBalancerClass: Invalid value: "y.io/lb": may not change once
/// set`.
#[tokio::test]
async fn load_balancer_class_may_not_change_once_set() {
    conform(
        "load_balancer_class_may_not_change_once_set",
        kube_sim::SimConfig::default(),
        async |t| {
            let ns = t.namespace("conf-lbclass").await;
            let api: Api<Service> = Api::namespaced(t.client.clone(), &ns);
            let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "lb"},
        "spec": {"type": "LoadBalancer", "loadBalancerClass": "x.io/lb", "ports": [{"port": 80}]},
    }))
    .unwrap_or_else(|e| panic!("{e}"));
            api.create(&PostParams::default(), &svc)
                .await
                .unwrap_or_else(|e| panic!("creating the service: {e}"));
            let e = t.status(
                api.patch(
                    "lb",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"loadBalancerClass": "y.io/lb"}})),
                )
                .await
                .unwrap_err(),
            );
            assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
            let e = t.status(
                api.patch(
                    "lb",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"loadBalancerClass": null}})),
                )
                .await
                .unwrap_err(),
            );
            assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
            t.cleanup_namespace(&ns).await;
        },
    )
    .await;
}

/// `SetDefaults_Service` (LoadBalancerIPMode, GA): a status ingress written
/// as `{ip}` is stored and returned as `{ip, ipMode: VIP}`; a hostname-only
/// ingress gets none.
#[tokio::test]
async fn status_ingress_ip_is_defaulted_to_ip_mode_vip() {
    conform(
        "status_ingress_ip_is_defaulted_to_ip_mode_vip",
        kube_sim::SimConfig::default(),
        async |t| {
            let ns = t.namespace("conf-ipmode").await;
            let api: Api<Service> = Api::namespaced(t.client.clone(), &ns);
            let svc: Service = serde_json::from_value(json!({
                "metadata": {"name": "lb"},
                "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]},
            }))
            .unwrap_or_else(|e| panic!("{e}"));
            api.create(&PostParams::default(), &svc)
                .await
                .unwrap_or_else(|e| panic!("creating the service: {e}"));
            let patched = api
                .patch_status(
                    "lb",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {"loadBalancer": {"ingress": [
                        {"ip": "203.0.113.7"},
                        {"hostname": "lb.example.com"},
                        {"ip": "203.0.113.8", "ipMode": "Proxy"},
                    ]}}})),
                )
                .await
                .unwrap_or_else(|e| panic!("patching the status: {e}"));
            let ingress = serde_json::to_value(
                patched
                    .status
                    .and_then(|s| s.load_balancer)
                    .and_then(|l| l.ingress),
            )
            .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(
                ingress,
                json!([
                    {"ip": "203.0.113.7", "ipMode": "VIP"},
                    {"hostname": "lb.example.com"},
                    {"ip": "203.0.113.8", "ipMode": "Proxy"},
                ])
            );
            t.cleanup_namespace(&ns).await;
        },
    )
    .await;
}

/// labels.Parse lexes `===` as `==` then `=`. Real: 400 `unable to parse
/// requirement: found '=', expected: identifier`.
#[tokio::test]
async fn label_selector_triple_equals_is_400_with_upstream_text() {
    conform("label_selector_triple_equals_is_400_with_upstream_text", kube_sim::SimConfig::default(), async |t| {
    let ns = t.namespace("conf-selparse").await;
    let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), &ns);
    let cases = [
        (
            "a===b",
            "unable to parse requirement: found '=', expected: identifier",
        ),
        ("a,,b", "found ',', expected: identifier after ','"),
        (
            "a b",
            "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt",
        ),
        ("a=b c", "found 'c', expected: ',' or 'end of string'"),
        (
            "a in (x",
            "unable to parse requirement: found '', expected: ',' or ')'",
        ),
        (
            "a>x",
            "unable to parse requirement: values[0]: Invalid value: \"x\": for 'Gt', 'Lt' operators, the value must be an integer",
        ),
    ];
    for (sel, want) in cases {
        let e = t.status(
            api.list(&ListParams::default().labels(sel))
                .await
                .unwrap_err(),
        );
        assert_eq!((e.code, e.message.as_str()), (400, want), "{sel}");
    }
    t.cleanup_namespace(&ns).await;
    })
    .await;
}

/// `ValidateConfigMap` / `ValidateSecret`: data may total 1 MiB
/// (`core.MaxSecretSize`). Real: 422 `ConfigMap "big" is invalid: []: Too
/// long: may not be more than 1048576 bytes` (kubectl prints it after
/// "The "); a Secret's error is on `data`.
#[tokio::test]
async fn config_map_and_secret_data_over_one_mebibyte_is_422() {
    conform(
        "config_map_and_secret_data_over_one_mebibyte_is_422",
        kube_sim::SimConfig::default(),
        async |t| {
            let ns = t.namespace("conf-big").await;
            let cms: Api<ConfigMap> = Api::namespaced(t.client.clone(), &ns);
            let mut big = cm("big", &[]);
            big.data = Some(BTreeMap::from([(
                "k".to_string(),
                "x".repeat(1024 * 1024 + 512 * 1024),
            )]));
            let e = t.status(cms.create(&PostParams::default(), &big).await.unwrap_err());
            assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
            assert_eq!(
                e.message,
                "ConfigMap \"big\" is invalid: []: Too long: may not be more than 1048576 bytes"
            );
            // Exactly 1 MiB is accepted; growing past it by an update is refused.
            let mut limit = cm("limit", &[]);
            limit.data = Some(BTreeMap::from([("k".to_string(), "x".repeat(1024 * 1024))]));
            cms.create(&PostParams::default(), &limit)
                .await
                .unwrap_or_else(|e| panic!("1 MiB refused: {e}"));
            let e = t.status(
                cms.patch(
                    "limit",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"data": {"more": "y"}})),
                )
                .await
                .unwrap_err(),
            );
            assert_eq!(
                e.message,
                "ConfigMap \"limit\" is invalid: []: Too long: may not be more than 1048576 bytes"
            );
            let secrets: Api<Secret> = Api::namespaced(t.client.clone(), &ns);
            let mut s = secret("big", &[]);
            s.string_data = Some(BTreeMap::from([(
                "k".to_string(),
                "x".repeat(1024 * 1024 + 1),
            )]));
            let e = t.status(
                secrets
                    .create(&PostParams::default(), &s)
                    .await
                    .unwrap_err(),
            );
            assert_eq!(
                e.message,
                "Secret \"big\" is invalid: data: Too long: may not be more than 1048576 bytes"
            );
            t.cleanup_namespace(&ns).await;
        },
    )
    .await;
}

/// Discovery of the core group lists every core resource of a real
/// server, with its kind, scope, verbs and short names; the ones kube-sim
/// added for this answer list/get (or create, for bindings).
#[tokio::test]
async fn core_discovery_lists_every_core_resource() {
    conform("core_discovery_lists_every_core_resource", kube_sim::SimConfig::default(), async |t| {
    let list = t
        .client
        .list_core_api_resources("v1")
        .await
        .unwrap_or_else(|e| panic!("core discovery: {e}"));
    let names: Vec<&str> = list
        .resources
        .iter()
        .filter(|r| !r.name.contains('/'))
        .map(|r| r.name.as_str())
        .collect();
    assert_eq!(
        names,
        [
            "bindings",
            "componentstatuses",
            "configmaps",
            "endpoints",
            "events",
            "limitranges",
            "namespaces",
            "nodes",
            "persistentvolumeclaims",
            "persistentvolumes",
            "pods",
            "podtemplates",
            "replicationcontrollers",
            "resourcequotas",
            "secrets",
            "serviceaccounts",
            "services",
        ]
    );
    let full = [
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch",
    ];
    /// (resource, kind, namespaced, verbs, short names).
    type Want<'a> = (&'a str, &'a str, bool, &'a [&'a str], &'a [&'a str]);
    let want: [Want<'_>; 6] = [
        ("bindings", "Binding", true, &["create"], &[]),
        (
            "componentstatuses",
            "ComponentStatus",
            false,
            &["get", "list"],
            &["cs"],
        ),
        ("limitranges", "LimitRange", true, &full, &["limits"]),
        ("podtemplates", "PodTemplate", true, &full, &[]),
        (
            "replicationcontrollers",
            "ReplicationController",
            true,
            &full,
            &["rc"],
        ),
        ("resourcequotas", "ResourceQuota", true, &full, &["quota"]),
    ];
    for (name, kind, namespaced, verbs, short) in want {
        let r = list
            .resources
            .iter()
            .find(|r| r.name == name)
            .unwrap_or_else(|| panic!("{name} missing"));
        assert_eq!(r.kind, kind, "{name}");
        assert_eq!(r.namespaced, namespaced, "{name}");
        assert_eq!(r.verbs, verbs, "{name}");
        assert_eq!(r.short_names.clone().unwrap_or_default(), short, "{name}");
    }
    for sub in ["replicationcontrollers/status", "resourcequotas/status"] {
        assert!(
            list.resources.iter().any(|r| r.name == sub),
            "{sub} missing"
        );
    }

    // The new resources answer what their verbs say.
    let ns = t.namespace("conf-core").await;
    let lr: Api<k8s_openapi::api::core::v1::LimitRange> = Api::namespaced(t.client.clone(), &ns);
    let obj: k8s_openapi::api::core::v1::LimitRange = serde_json::from_value(json!({
        "metadata": {"name": "lr"},
        "spec": {"limits": [{"type": "Container", "default": {"cpu": "100m"}}]},
    }))
    .unwrap_or_else(|e| panic!("{e}"));
    lr.create(&PostParams::default(), &obj)
        .await
        .unwrap_or_else(|e| panic!("creating a LimitRange: {e}"));
    assert_eq!(
        lr.list(&ListParams::default())
            .await
            .unwrap_or_else(|e| panic!("listing LimitRanges: {e}"))
            .items
            .len(),
        1
    );
    let rq: Api<k8s_openapi::api::core::v1::ResourceQuota> = Api::namespaced(t.client.clone(), &ns);
    assert!(
        rq.list(&ListParams::default())
            .await
            .unwrap_or_else(|e| panic!("listing ResourceQuotas: {e}"))
            .items
            .is_empty()
    );
    let pt: Api<k8s_openapi::api::core::v1::PodTemplate> = Api::namespaced(t.client.clone(), &ns);
    assert!(
        pt.get_opt("none")
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .is_none()
    );
    let rc: Api<k8s_openapi::api::core::v1::ReplicationController> =
        Api::namespaced(t.client.clone(), &ns);
    assert!(
        rc.list(&ListParams::default())
            .await
            .unwrap_or_else(|e| panic!("listing ReplicationControllers: {e}"))
            .items
            .is_empty()
    );
    let cs: Api<k8s_openapi::api::core::v1::ComponentStatus> = Api::all(t.client.clone());
    cs.list(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("listing ComponentStatuses: {e}"));
    if let Some(sim) = t.sim() {
        // ComponentStatus is read-only: no create route.
        let (code, body) = common::raw(
            sim,
            "POST",
            "/api/v1/componentstatuses",
            "application/json",
            r#"{"metadata":{"name":"x"}}"#,
        )
        .await;
        assert_eq!(code, 405, "{body}");
        // POST bindings binds the pod named by the Binding.
        let pods: Api<Pod> = Api::namespaced(t.client.clone(), &ns);
        pods.create(&PostParams::default(), &pod("p"))
            .await
            .unwrap_or_else(|e| panic!("creating a pod: {e}"));
        let (code, body) = common::raw(
            sim,
            "POST",
            &format!("/api/v1/namespaces/{ns}/bindings"),
            "application/json",
            r#"{"kind":"Binding","apiVersion":"v1","metadata":{"name":"p"},"target":{"kind":"Node","name":"node-1"}}"#,
        )
        .await;
        assert_eq!(code, 201, "{body}");
        let p = pods.get("p").await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.spec.and_then(|s| s.node_name).as_deref(), Some("node-1"));
    }
    t.cleanup_namespace(&ns).await;
    })
    .await;
}
