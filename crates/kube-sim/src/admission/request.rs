//! What an admission policy sees of the request: `request` (the
//! `admission.k8s.io/v1` AdmissionRequest of `cel.CreateAdmissionRequest`,
//! with upstream's `omitempty` fields absent when empty), the user who sent
//! it, and where a `Warn` validation action leaves its warnings.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::{Map, Value, json};

use super::Attributes;
use crate::object::meta_str;

/// The authenticated user of a request (`user.Info`): kube-sim's bearer
/// token is the user name; its groups are those a TokenReview reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserInfo {
    pub username: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    /// The user a kube-sim bearer token names (the token is the user name);
    /// no token is `system:anonymous` in `system:unauthenticated`.
    pub fn of_token(token: &str) -> UserInfo {
        if token == "system:anonymous" || token.is_empty() {
            return UserInfo {
                username: "system:anonymous".into(),
                groups: vec!["system:unauthenticated".into()],
                ..UserInfo::default()
            };
        }
        match crate::reviews::authenticate(token) {
            Some((username, groups)) => UserInfo {
                username,
                groups,
                ..UserInfo::default()
            },
            None => UserInfo {
                username: token.to_string(),
                groups: vec!["system:authenticated".into()],
                ..UserInfo::default()
            },
        }
    }

    /// A kube-controller-manager controller running with
    /// `--use-service-account-credentials`, as kube-sim's emulated namespace
    /// controller and garbage collector act:
    /// `system:serviceaccount:kube-system:<controller>`.
    pub fn controller(name: &str) -> UserInfo {
        UserInfo::of_token(&format!("system:serviceaccount:kube-system:{name}"))
    }

    /// `authenticationv1.UserInfo` as JSON (`uid`, `groups`, `extra`
    /// omitted when empty).
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("username".into(), json!(self.username));
        if !self.uid.is_empty() {
            m.insert("uid".into(), json!(self.uid));
        }
        if !self.groups.is_empty() {
            m.insert("groups".into(), json!(self.groups));
        }
        if !self.extra.is_empty() {
            m.insert("extra".into(), json!(self.extra));
        }
        Value::Object(m)
    }
}

/// Warnings a request collects on its way through admission (`Warn`
/// validation actions), sent back as `Warning` headers.
#[derive(Debug, Clone, Default)]
pub struct Warnings(Arc<Mutex<Vec<String>>>);

impl Warnings {
    pub fn add(&self, w: String) {
        let mut list = self.0.lock();
        if !list.contains(&w) {
            list.push(w);
        }
    }
    pub fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock())
    }
}

/// The operation options of a create or update (`request.options`):
/// `CreateOptions` or `UpdateOptions`, with `dryRun: ["All"]` on a dry run.
pub fn write_options(kind: &str, dry_run: bool) -> Value {
    let mut v = json!({"kind": kind, "apiVersion": "meta.k8s.io/v1"});
    if dry_run {
        v["dryRun"] = json!(["All"]);
    }
    v
}

/// The `request` variable: `cel.CreateAdmissionRequest`, as the JSON
/// conversion shows it (`subResource` absent when empty; `kind.group`
/// present even when empty).
pub fn request_value(a: &Attributes<'_>, obj: Option<&Value>) -> Value {
    let gvk = json!({"group": a.def.group, "version": a.def.version, "kind": a.def.kind});
    let gvr = json!({"group": a.def.group, "version": a.def.version, "resource": a.def.resource});
    let mut m = Map::new();
    m.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
    m.insert("kind".into(), gvk.clone());
    m.insert("resource".into(), gvr.clone());
    m.insert("requestKind".into(), gvk);
    m.insert("requestResource".into(), gvr);
    if let Some(sub) = a.subresource.filter(|s| !s.is_empty()) {
        m.insert("subResource".into(), json!(sub));
        m.insert("requestSubResource".into(), json!(sub));
    }
    let name = request_name(a, obj);
    if !name.is_empty() {
        m.insert("name".into(), json!(name));
    }
    let ns = request_namespace(a, obj);
    if !ns.is_empty() {
        m.insert("namespace".into(), json!(ns));
    }
    m.insert("operation".into(), json!(a.operation.as_str()));
    m.insert(
        "userInfo".into(),
        a.user
            .map(UserInfo::to_json)
            .unwrap_or_else(|| json!({"username": ""})),
    );
    m.insert("dryRun".into(), json!(a.dry_run));
    let options = a.options.cloned().unwrap_or_else(|| {
        let kind = match a.operation {
            super::Operation::Create => "CreateOptions",
            super::Operation::Update => "UpdateOptions",
            super::Operation::Delete => "DeleteOptions",
        };
        write_options(kind, a.dry_run)
    });
    m.insert("options".into(), options);
    Value::Object(m)
}

/// The request's object name: the object's (or the old object's on
/// DELETE); none for the objects of a DELETE of a collection.
pub fn request_name<'v>(a: &Attributes<'v>, obj: Option<&'v Value>) -> &'v str {
    if a.collection {
        return "";
    }
    match obj.or(a.old) {
        Some(o) => meta_str(o, "name"),
        None => "",
    }
}

/// The request's namespace ("" for cluster-scoped kinds).
pub fn request_namespace<'v>(a: &Attributes<'v>, obj: Option<&'v Value>) -> &'v str {
    if !a.def.namespaced {
        return "";
    }
    match obj.or(a.old) {
        Some(o) => meta_str(o, "namespace"),
        None => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_name_users_and_their_groups() {
        let admin = UserInfo::of_token("admin");
        assert_eq!(admin.username, "admin");
        assert_eq!(admin.groups, ["system:masters", "system:authenticated"]);
        let gc = UserInfo::controller("generic-garbage-collector");
        assert_eq!(
            gc.username,
            "system:serviceaccount:kube-system:generic-garbage-collector"
        );
        assert!(
            gc.groups
                .contains(&"system:serviceaccounts:kube-system".to_string())
        );
        let anon = UserInfo::of_token("");
        assert_eq!(anon.groups, ["system:unauthenticated"]);
        assert_eq!(
            admin.to_json(),
            json!({"username": "admin", "groups": ["system:masters", "system:authenticated"]})
        );
    }
}
