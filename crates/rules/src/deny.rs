//! `mode: Deny`: while a protected object is in use, the rule keeps the
//! label `protection-manager.io/in-use: "true"` and the annotation
//! `protection-manager.io/in-use-by` (its users, the first few and a count,
//! and the rule with its reason) on it. The chart's Deny-mode
//! ValidatingAdmissionPolicy refuses the DELETE of a labelled object with
//! that annotation as its message, e.g. `secrets "db" is in use by pods/web
//! (rule secrets-used-by-pods: mounted credentials)`. The rule's finalizer
//! stays on as in `Enforce`: the backstop for the moment between a new user
//! and the label, and for the deletes the policy lets through (the namespace
//! controller's, the garbage collector's).
//!
//! The runner's hooks: [`crate::runner`]'s `decide` records the desired
//! annotation from the index's users (`Desired`), its `after` writes the
//! difference with one JSON merge patch of the two keys (nothing else of
//! the object is touched). A rule that is deleted, or no longer in Deny
//! mode, removes the label and annotation it wrote (the annotation names
//! the rule, so another rule's are left alone).

use std::collections::HashMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::decide::UserRef;

/// The label the chart's Deny-mode policy selects objects by.
pub const IN_USE_LABEL: &str = "protection-manager.io/in-use";
/// The annotation naming the users and the rule (the refusal's message).
pub const IN_USE_BY: &str = "protection-manager.io/in-use-by";
/// How many users the annotation names before it counts the rest.
pub const NAMED_USERS: usize = 3;

/// The annotation's value: `pods/web, pods/api and 2 more (rule r: why)`.
pub fn in_use_by(object_ns: &str, users: &[UserRef], rule: &str, reason: Option<&str>) -> String {
    let named: Vec<String> = users
        .iter()
        .take(NAMED_USERS)
        .map(|u| {
            if u.namespace.is_empty() || u.namespace == object_ns {
                format!("{}/{}", u.resource, u.name)
            } else {
                format!("{}/{} in {}", u.resource, u.name, u.namespace)
            }
        })
        .collect();
    let rest = match users.len().saturating_sub(NAMED_USERS) {
        0 => String::new(),
        n => format!(" and {n} more"),
    };
    let reason = reason
        .filter(|r| !r.is_empty())
        .map(|r| format!(": {r}"))
        .unwrap_or_default();
    format!("{}{rest} (rule {rule}{reason})", named.join(", "))
}

/// Whether the object's annotation was written by `rule`.
pub fn written_by(meta: &ObjectMeta, rule: &str) -> bool {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(IN_USE_BY))
        .is_some_and(|v| {
            v.ends_with(&format!("(rule {rule})")) || v.contains(&format!("(rule {rule}: "))
        })
}

/// Whether the object carries the label.
pub fn labelled(meta: &ObjectMeta) -> bool {
    meta.labels
        .as_ref()
        .and_then(|l| l.get(IN_USE_LABEL))
        .is_some_and(|v| v == "true")
}

/// The merge patch bringing `meta` to `desired` (`Some(annotation)`: in
/// use; `None`: not, and only what `rule` wrote is removed); `None` when
/// nothing is to change.
pub fn patch(meta: &ObjectMeta, rule: &str, desired: Option<&str>) -> Option<Value> {
    let current = meta.annotations.as_ref().and_then(|a| a.get(IN_USE_BY));
    match desired {
        Some(want) => (!labelled(meta) || current.map(String::as_str) != Some(want)).then(|| {
            json!({"metadata": {
                "labels": {IN_USE_LABEL: "true"},
                "annotations": {IN_USE_BY: want},
            }})
        }),
        None => written_by(meta, rule).then(|| {
            json!({"metadata": {
                "labels": {IN_USE_LABEL: null},
                "annotations": {IN_USE_BY: null},
            }})
        }),
    }
}

/// Removes the label and annotation `rule` wrote from every object of
/// `kind` (the rule is deleted); returns how many objects changed.
pub async fn remove_everywhere(
    client: &kube::Client,
    kind: &crate::runner::Kind,
    rule: &str,
) -> Result<usize, crate::runner::Error> {
    use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
    let all: Api<DynamicObject> = Api::all_with(client.clone(), &kind.ar);
    let list = all
        .list_metadata(&ListParams::default().labels(&format!("{IN_USE_LABEL}=true")))
        .await
        .map_err(|source| crate::runner::Error::Api {
            what: format!("listing {}", kind.display()),
            source,
        })?;
    let pp = PatchParams {
        field_manager: Some(crate::controller::FIELD_MANAGER.into()),
        ..Default::default()
    };
    let mut n = 0;
    for o in list.items {
        let Some(p) = patch(&o.metadata, rule, None) else {
            continue;
        };
        let name = o.metadata.name.clone().unwrap_or_default();
        let api: Api<DynamicObject> = match (&o.metadata.namespace, kind.namespaced) {
            (Some(ns), true) => Api::namespaced_with(client.clone(), ns, &kind.ar),
            _ => Api::all_with(client.clone(), &kind.ar),
        };
        match api.patch(&name, &pp, &Patch::Merge(&p)).await {
            Ok(_) => n += 1,
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(source) => {
                return Err(crate::runner::Error::Api {
                    what: format!("removing {IN_USE_LABEL} from {} {name}", kind.display()),
                    source,
                });
            }
        }
    }
    Ok(n)
}

/// What `decide` saw for each object (by uid), for `after` to write.
#[derive(Debug, Default)]
pub struct Desired(Mutex<HashMap<String, Option<String>>>);

impl Desired {
    pub fn set(&self, uid: &str, annotation: Option<String>) {
        self.0.lock().insert(uid.to_string(), annotation);
    }

    pub fn take(&self, uid: &str) -> Option<Option<String>> {
        self.0.lock().remove(uid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(ns: &str, name: &str) -> UserRef {
        UserRef {
            resource: "pods".into(),
            namespace: ns.into(),
            name: name.into(),
            error: None,
        }
    }

    fn meta(labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> ObjectMeta {
        let map = |kv: &[(&str, &str)]| {
            (!kv.is_empty()).then(|| {
                kv.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect()
            })
        };
        ObjectMeta {
            labels: map(labels),
            annotations: map(annotations),
            ..Default::default()
        }
    }

    #[test]
    fn the_annotation_names_a_few_users_counts_the_rest_and_names_the_rule() {
        assert_eq!(
            in_use_by(
                "shop",
                &[user("shop", "web")],
                "secrets-used-by-pods",
                Some("mounted credentials")
            ),
            "pods/web (rule secrets-used-by-pods: mounted credentials)"
        );
        let many: Vec<UserRef> = (0..5).map(|i| user("shop", &format!("p{i}"))).collect();
        assert_eq!(
            in_use_by("other", &many, "r", None),
            "pods/p0 in shop, pods/p1 in shop, pods/p2 in shop and 2 more (rule r)"
        );
    }

    #[test]
    fn the_patch_writes_only_a_difference_and_removes_only_its_own() {
        let want = "pods/web (rule r)";
        let m = meta(&[], &[]);
        assert_eq!(
            patch(&m, "r", Some(want)),
            Some(json!({"metadata": {
                "labels": {IN_USE_LABEL: "true"},
                "annotations": {IN_USE_BY: want},
            }}))
        );
        let done = meta(&[(IN_USE_LABEL, "true")], &[(IN_USE_BY, want)]);
        assert_eq!(patch(&done, "r", Some(want)), None);
        assert!(patch(&done, "r", Some("pods/api (rule r)")).is_some());
        assert_eq!(
            patch(&done, "r", None),
            Some(json!({"metadata": {
                "labels": {IN_USE_LABEL: null},
                "annotations": {IN_USE_BY: null},
            }}))
        );
        // Another rule's label and annotation stay.
        assert_eq!(patch(&done, "rr", None), None);
        assert_eq!(patch(&m, "r", None), None);
    }
}
