//! Decoding of `application/vnd.kubernetes.protobuf` request bodies for the
//! kinds Go clients send with their typed clientsets (helm's release Secrets,
//! `kubectl create configmap|secret|namespace|serviceaccount`, typed
//! DeleteOptions, `kubectl create role|clusterrole|rolebinding|clusterrolebinding`,
//! the review kinds of `kubectl auth can-i|whoami` and delegated authn/authz).
//! Unknown field numbers are skipped. The envelope is `k8s\0` + runtime.Unknown
//! (k8s.io/apimachinery/pkg/runtime/generated.proto); field numbers are those
//! of k8s.io/api/core/v1/generated.proto and
//! k8s.io/apimachinery/pkg/apis/meta/v1/generated.proto. kube-sim answers in
//! JSON, which these clients accept.

use base64::Engine;
use serde_json::{Map, Value, json};

/// Why a body could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    #[error("protobuf body is truncated or malformed")]
    Malformed,
    #[error("protobuf body lacks the k8s envelope magic")]
    NoMagic,
    #[error("no protobuf decoding for kind {0:?}; send JSON")]
    UnsupportedKind(String),
}

struct Reader<'a> {
    b: &'a [u8],
    i: usize,
}

enum Field<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

impl<'a> Reader<'a> {
    fn new(b: &'a [u8]) -> Self {
        Reader { b, i: 0 }
    }
    fn varint(&mut self) -> Result<u64, ProtoError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = *self.b.get(self.i).ok_or(ProtoError::Malformed)?;
            self.i += 1;
            v |= ((byte & 0x7f) as u64) << shift;
            if byte & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(ProtoError::Malformed)
    }
    fn next(&mut self) -> Result<Option<(u64, Field<'a>)>, ProtoError> {
        if self.i >= self.b.len() {
            return Ok(None);
        }
        let key = self.varint()?;
        let (num, wt) = (key >> 3, key & 7);
        let f = match wt {
            0 => Field::Varint(self.varint()?),
            2 => {
                let len = self.varint()? as usize;
                let end = self.i.checked_add(len).ok_or(ProtoError::Malformed)?;
                let s = self.b.get(self.i..end).ok_or(ProtoError::Malformed)?;
                self.i = end;
                Field::Bytes(s)
            }
            1 => {
                self.i += 8;
                Field::Fixed
            }
            5 => {
                self.i += 4;
                Field::Fixed
            }
            _ => return Err(ProtoError::Malformed),
        };
        if self.i > self.b.len() {
            return Err(ProtoError::Malformed);
        }
        Ok(Some((num, f)))
    }
}

/// How to render one field.
#[derive(Clone, Copy)]
enum T {
    Str,
    /// Dropped when empty (Go omitempty on a plain string).
    Int,
    Bool,
    Bytes,
    Time,
    Msg(fn() -> Schema),
    MapStr,
    MapBytes,
}

/// (field number, json name, type, repeated)
type Schema = &'static [(u64, &'static str, T, bool)];

fn owner_reference() -> Schema {
    &[
        (1, "kind", T::Str, false),
        (3, "name", T::Str, false),
        (4, "uid", T::Str, false),
        (5, "apiVersion", T::Str, false),
        (6, "controller", T::Bool, false),
        (7, "blockOwnerDeletion", T::Bool, false),
    ]
}
fn fields_v1() -> Schema {
    &[(1, "raw", T::Bytes, false)]
}
fn managed_fields_entry() -> Schema {
    &[
        (1, "manager", T::Str, false),
        (2, "operation", T::Str, false),
        (3, "apiVersion", T::Str, false),
        (4, "time", T::Time, false),
        (6, "fieldsType", T::Str, false),
        (7, "fieldsV1", T::Msg(fields_v1), false),
        (8, "subresource", T::Str, false),
    ]
}
fn object_meta() -> Schema {
    &[
        (1, "name", T::Str, false),
        (2, "generateName", T::Str, false),
        (3, "namespace", T::Str, false),
        (4, "selfLink", T::Str, false),
        (5, "uid", T::Str, false),
        (6, "resourceVersion", T::Str, false),
        (7, "generation", T::Int, false),
        (8, "creationTimestamp", T::Time, false),
        (9, "deletionTimestamp", T::Time, false),
        (10, "deletionGracePeriodSeconds", T::Int, false),
        (11, "labels", T::MapStr, false),
        (12, "annotations", T::MapStr, false),
        (13, "ownerReferences", T::Msg(owner_reference), true),
        (14, "finalizers", T::Str, true),
        (17, "managedFields", T::Msg(managed_fields_entry), true),
    ]
}
fn secret() -> Schema {
    &[
        (1, "metadata", T::Msg(object_meta), false),
        (2, "data", T::MapBytes, false),
        (3, "type", T::Str, false),
        (4, "stringData", T::MapStr, false),
        (5, "immutable", T::Bool, false),
    ]
}
fn config_map() -> Schema {
    &[
        (1, "metadata", T::Msg(object_meta), false),
        (2, "data", T::MapStr, false),
        (3, "binaryData", T::MapBytes, false),
        (4, "immutable", T::Bool, false),
    ]
}
fn namespace_spec() -> Schema {
    &[(1, "finalizers", T::Str, true)]
}
fn namespace() -> Schema {
    &[
        (1, "metadata", T::Msg(object_meta), false),
        (2, "spec", T::Msg(namespace_spec), false),
    ]
}
fn object_reference() -> Schema {
    &[
        (1, "kind", T::Str, false),
        (2, "namespace", T::Str, false),
        (3, "name", T::Str, false),
        (4, "uid", T::Str, false),
        (5, "apiVersion", T::Str, false),
        (6, "resourceVersion", T::Str, false),
        (7, "fieldPath", T::Str, false),
    ]
}
fn local_object_reference() -> Schema {
    &[(1, "name", T::Str, false)]
}
fn service_account() -> Schema {
    &[
        (1, "metadata", T::Msg(object_meta), false),
        (2, "secrets", T::Msg(object_reference), true),
        (3, "imagePullSecrets", T::Msg(local_object_reference), true),
        (4, "automountServiceAccountToken", T::Bool, false),
    ]
}
fn preconditions() -> Schema {
    &[
        (1, "uid", T::Str, false),
        (2, "resourceVersion", T::Str, false),
    ]
}
fn delete_options() -> Schema {
    &[
        (1, "gracePeriodSeconds", T::Int, false),
        (2, "preconditions", T::Msg(preconditions), false),
        (3, "orphanDependents", T::Bool, false),
        (4, "propagationPolicy", T::Str, false),
        (5, "dryRun", T::Str, true),
    ]
}
// k8s.io/api/rbac/v1/generated.proto
fn policy_rule() -> Schema {
    &[
        (1, "verbs", T::Str, true),
        (2, "apiGroups", T::Str, true),
        (3, "resources", T::Str, true),
        (4, "resourceNames", T::Str, true),
        (5, "nonResourceURLs", T::Str, true),
    ]
}
fn subject() -> Schema {
    &[
        (1, "kind", T::Str, false),
        (2, "apiGroup", T::Str, false),
        (3, "name", T::Str, false),
        (4, "namespace", T::Str, false),
    ]
}
fn role_ref() -> Schema {
    &[
        (1, "apiGroup", T::Str, false),
        (2, "kind", T::Str, false),
        (3, "name", T::Str, false),
    ]
}
fn role() -> Schema {
    &[
        (1, "metadata", T::Msg(object_meta), false),
        (2, "rules", T::Msg(policy_rule), true),
    ]
}
fn role_binding() -> Schema {
    &[
        (1, "metadata", T::Msg(object_meta), false),
        (2, "subjects", T::Msg(subject), true),
        (3, "roleRef", T::Msg(role_ref), false),
    ]
}
fn type_meta() -> Schema {
    &[(1, "apiVersion", T::Str, false), (2, "kind", T::Str, false)]
}

fn utf8(b: &[u8]) -> Result<String, ProtoError> {
    String::from_utf8(b.to_vec()).map_err(|_| ProtoError::Malformed)
}

fn time(b: &[u8]) -> Result<Option<String>, ProtoError> {
    let mut r = Reader::new(b);
    let mut secs: i64 = 0;
    while let Some((n, f)) = r.next()? {
        if let (1, Field::Varint(v)) = (n, f) {
            secs = v as i64;
        }
    }
    // Go's zero time.
    if secs == -62135596800 || secs == 0 {
        return Ok(None);
    }
    let ts = jiff::Timestamp::from_second(secs).map_err(|_| ProtoError::Malformed)?;
    Ok(Some(crate::object::format_time(ts)))
}

fn map_entry(b: &[u8], bytes_value: bool) -> Result<(String, Value), ProtoError> {
    let mut r = Reader::new(b);
    let (mut k, mut v) = (String::new(), Value::String(String::new()));
    while let Some((n, f)) = r.next()? {
        match (n, f) {
            (1, Field::Bytes(s)) => k = utf8(s)?,
            (2, Field::Bytes(s)) => {
                v = if bytes_value {
                    json!(base64::engine::general_purpose::STANDARD.encode(s))
                } else {
                    json!(utf8(s)?)
                }
            }
            _ => {}
        }
    }
    Ok((k, v))
}

fn decode(b: &[u8], schema: Schema) -> Result<Value, ProtoError> {
    let mut out = Map::new();
    let mut r = Reader::new(b);
    while let Some((n, f)) = r.next()? {
        let Some(&(_, name, ty, repeated)) = schema.iter().find(|(num, ..)| *num == n) else {
            continue;
        };
        let v = match (ty, f) {
            (T::Str, Field::Bytes(s)) => {
                let s = utf8(s)?;
                if s.is_empty() && !repeated {
                    continue;
                }
                json!(s)
            }
            (T::Int, Field::Varint(v)) => {
                if name == "generation" && v == 0 {
                    continue;
                }
                json!(v as i64)
            }
            (T::Bool, Field::Varint(v)) => json!(v != 0),
            (T::Bytes, Field::Bytes(s)) => {
                if name == "raw" {
                    // FieldsV1.raw is JSON.
                    serde_json::from_slice(s).map_err(|_| ProtoError::Malformed)?
                } else {
                    json!(base64::engine::general_purpose::STANDARD.encode(s))
                }
            }
            (T::Time, Field::Bytes(s)) => match time(s)? {
                Some(t) => json!(t),
                None => continue,
            },
            (T::Msg(sch), Field::Bytes(s)) => decode(s, sch())?,
            (T::MapStr | T::MapBytes, Field::Bytes(s)) => {
                let (k, v) = map_entry(s, matches!(ty, T::MapBytes))?;
                let m = out.entry(name).or_insert_with(|| json!({}));
                if let Some(m) = m.as_object_mut() {
                    m.insert(k, v);
                }
                continue;
            }
            _ => return Err(ProtoError::Malformed),
        };
        if repeated {
            let a = out.entry(name).or_insert_with(|| json!([]));
            if let Some(a) = a.as_array_mut() {
                a.push(v);
            }
        } else {
            out.insert(name.to_string(), v);
        }
    }
    // FieldsV1 is {"raw": <json>} on the wire, the JSON itself in JSON.
    if out.len() == 1
        && let Some(raw) = out.get("raw")
        && schema.len() == 1
        && schema[0].1 == "raw"
    {
        return Ok(raw.clone());
    }
    Ok(Value::Object(out))
}

fn non_resource_attributes() -> Schema {
    &[(1, "path", T::Str, false), (2, "verb", T::Str, false)]
}
/// ResourceAttributes without the field and label selectors (kube-sim does
/// not authorize by selector).
fn resource_attributes() -> Schema {
    &[
        (1, "namespace", T::Str, false),
        (2, "verb", T::Str, false),
        (3, "group", T::Str, false),
        (4, "version", T::Str, false),
        (5, "resource", T::Str, false),
        (6, "subresource", T::Str, false),
        (7, "name", T::Str, false),
    ]
}
/// SubjectAccessReviewSpec without `extra` (kube-sim's RBAC does not read
/// it); a SelfSubjectAccessReviewSpec is its fields 1 and 2.
fn subject_access_review_spec() -> Schema {
    &[
        (1, "resourceAttributes", T::Msg(resource_attributes), false),
        (
            2,
            "nonResourceAttributes",
            T::Msg(non_resource_attributes),
            false,
        ),
        (3, "user", T::Str, false),
        (4, "groups", T::Str, true),
        (6, "uid", T::Str, false),
    ]
}
fn subject_access_review() -> Schema {
    &[
        (1, "metadata", T::Msg(object_meta), false),
        (2, "spec", T::Msg(subject_access_review_spec), false),
    ]
}
fn self_subject_rules_review_spec() -> Schema {
    &[(1, "namespace", T::Str, false)]
}
fn self_subject_rules_review() -> Schema {
    &[
        (1, "metadata", T::Msg(object_meta), false),
        (2, "spec", T::Msg(self_subject_rules_review_spec), false),
    ]
}
fn token_review_spec() -> Schema {
    &[(1, "token", T::Str, false), (2, "audiences", T::Str, true)]
}
fn token_review() -> Schema {
    &[
        (1, "metadata", T::Msg(object_meta), false),
        (2, "spec", T::Msg(token_review_spec), false),
    ]
}
fn self_subject_review() -> Schema {
    &[(1, "metadata", T::Msg(object_meta), false)]
}

/// Decodes a `k8s\0`-enveloped protobuf body into the JSON object the same
/// request would carry as JSON.
pub fn decode_body(body: &[u8]) -> Result<Value, ProtoError> {
    let rest = body.strip_prefix(b"k8s\x00").ok_or(ProtoError::NoMagic)?;
    let mut r = Reader::new(rest);
    let (mut tm, mut raw) = (Value::Null, &[][..]);
    while let Some((n, f)) = r.next()? {
        match (n, f) {
            (1, Field::Bytes(s)) => tm = decode(s, type_meta())?,
            (2, Field::Bytes(s)) => raw = s,
            _ => {}
        }
    }
    let kind = tm
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let api_version = tm
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let schema = match (api_version.as_str(), kind.as_str()) {
        ("v1", "Secret") => secret(),
        ("v1", "ConfigMap") => config_map(),
        ("v1", "Namespace") => namespace(),
        ("v1", "ServiceAccount") => service_account(),
        (_, "DeleteOptions") => delete_options(),
        ("rbac.authorization.k8s.io/v1", "Role" | "ClusterRole") => role(),
        ("rbac.authorization.k8s.io/v1", "RoleBinding" | "ClusterRoleBinding") => role_binding(),
        // The reviews of kubectl auth can-i / whoami and of client-go's
        // delegated authn/authz.
        ("authentication.k8s.io/v1", "TokenReview") => token_review(),
        ("authentication.k8s.io/v1", "SelfSubjectReview") => self_subject_review(),
        (
            "authorization.k8s.io/v1",
            "SubjectAccessReview" | "LocalSubjectAccessReview" | "SelfSubjectAccessReview",
        ) => subject_access_review(),
        ("authorization.k8s.io/v1", "SelfSubjectRulesReview") => self_subject_rules_review(),
        _ => return Err(ProtoError::UnsupportedKind(format!("{api_version}/{kind}"))),
    };
    let mut v = decode(raw, schema)?;
    if let Some(m) = v.as_object_mut() {
        let mut out = Map::new();
        out.insert("kind".into(), json!(kind));
        out.insert("apiVersion".into(), json!(api_version));
        out.append(m);
        v = Value::Object(out);
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(n: u64, payload: &[u8]) -> Vec<u8> {
        let mut v = vec![((n << 3) | 2) as u8, payload.len() as u8];
        v.extend_from_slice(payload);
        v
    }

    #[test]
    fn decodes_a_helm_release_secret() {
        let meta = [
            field(1, b"sh.helm.release.v1.demo.v1"),
            field(11, &[field(1, b"owner"), field(2, b"helm")].concat()),
        ]
        .concat();
        let secret = [
            field(1, &meta),
            field(2, &[field(1, b"release"), field(2, b"\x01\x02")].concat()),
            field(3, b"helm.sh/release.v1"),
        ]
        .concat();
        let tm = [field(1, b"v1"), field(2, b"Secret")].concat();
        let body = [b"k8s\x00".to_vec(), field(1, &tm), field(2, &secret)].concat();
        let v = decode_body(&body).unwrap();
        assert_eq!(
            v,
            json!({"kind": "Secret", "apiVersion": "v1",
                   "metadata": {"name": "sh.helm.release.v1.demo.v1", "labels": {"owner": "helm"}},
                   "data": {"release": "AQI="}, "type": "helm.sh/release.v1"})
        );
    }

    #[test]
    fn decodes_kubectl_auth_can_i_reviews() {
        // kubectl auth can-i list pods -n shop: an empty group is not sent.
        let attrs = [field(1, b"shop"), field(2, b"list"), field(5, b"pods")].concat();
        let spec = field(1, &attrs);
        let tm = [
            field(1, b"authorization.k8s.io/v1"),
            field(2, b"SelfSubjectAccessReview"),
        ]
        .concat();
        let body = [
            b"k8s\x00".to_vec(),
            field(1, &tm),
            field(2, &[field(1, &[]), field(2, &spec)].concat()),
        ]
        .concat();
        assert_eq!(
            decode_body(&body).unwrap(),
            json!({"kind": "SelfSubjectAccessReview", "apiVersion": "authorization.k8s.io/v1",
                   "metadata": {}, "spec": {"resourceAttributes": {"namespace": "shop", "verb": "list", "resource": "pods"}}})
        );
        // kubectl auth can-i --list -n shop.
        let tm = [
            field(1, b"authorization.k8s.io/v1"),
            field(2, b"SelfSubjectRulesReview"),
        ]
        .concat();
        let body = [
            b"k8s\x00".to_vec(),
            field(1, &tm),
            field(2, &field(2, &field(1, b"shop"))),
        ]
        .concat();
        assert_eq!(
            decode_body(&body).unwrap()["spec"],
            json!({"namespace": "shop"})
        );
    }

    #[test]
    fn rejects_unknown_kinds_and_garbage() {
        let tm = [field(1, b"apps/v1"), field(2, b"Deployment")].concat();
        let body = [b"k8s\x00".to_vec(), field(1, &tm)].concat();
        assert!(matches!(
            decode_body(&body),
            Err(ProtoError::UnsupportedKind(_))
        ));
        assert_eq!(decode_body(b"{}"), Err(ProtoError::NoMagic));
        assert_eq!(decode_body(b"k8s\x00\x0a\xff"), Err(ProtoError::Malformed));
    }
}
