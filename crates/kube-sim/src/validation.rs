//! Name and metadata validation with the real server's messages
//! (k8s.io/apimachinery/pkg/util/validation/validation.go,
//! k8s.io/apimachinery/pkg/api/validation/objectmeta.go and
//! k8s.io/apimachinery/pkg/api/validation/path/name.go).

use serde_json::{Value, json};

use crate::error::FieldError;
use crate::object::finalizers;
use crate::resources::NameRule;

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_SUBDOMAIN_FMT: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1035_LABEL_FMT: &str = "[a-z]([-a-z0-9]*[a-z0-9])?";
const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";

/// `validation.RegexError`.
fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    if examples.is_empty() {
        return format!("{msg} (regex used for validation is '{fmt}')");
    }
    let mut s = format!("{msg} (e.g. ");
    for (i, e) in examples.iter().enumerate() {
        if i > 0 {
            s.push_str(" or ");
        }
        s.push_str(&format!("'{e}', "));
    }
    s.push_str(&format!("regex used for validation is '{fmt}')"));
    s
}

fn is_alnum_lower(c: u8) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

fn is_dns1123_label_chars(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && is_alnum_lower(b[0])
        && is_alnum_lower(b[b.len() - 1])
        && b.iter().all(|&c| is_alnum_lower(c) || c == b'-')
}

/// `IsDNS1123Label`.
pub fn dns1123_label(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push("must be no more than 63 characters".to_string());
    }
    if !is_dns1123_label_chars(s) && s.split('.').all(is_dns1123_label_chars) {
        // A valid subdomain that is not a label: it has dots.
        errs.push("must not contain dots".to_string());
    } else if !is_dns1123_label_chars(s) {
        errs.push(regex_error(
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character",
            DNS1123_LABEL_FMT,
            &["my-name", "123-abc"],
        ));
    }
    errs
}

/// `IsDNS1123Subdomain`.
pub fn dns1123_subdomain(s: &str) -> Vec<String> {
    subdomain(s, "characters")
}

/// `IsDNS1123Subdomain` of util/validation (a length in `characters`) or of
/// api/validate/content (`bytes`: its `MaxLenError` says so).
fn subdomain(s: &str, unit: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 253 {
        errs.push(format!("must be no more than 253 {unit}"));
    }
    if !s.split('.').all(is_dns1123_label_chars) {
        errs.push(regex_error(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    errs
}

/// `IsDNS1035Label`.
pub fn dns1035_label(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push("must be no more than 63 characters".to_string());
    }
    let b = s.as_bytes();
    let ok = !b.is_empty()
        && b[0].is_ascii_lowercase()
        && is_alnum_lower(b[b.len() - 1])
        && b.iter().all(|&c| is_alnum_lower(c) || c == b'-');
    if !ok {
        errs.push(regex_error(
            "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character",
            DNS1035_LABEL_FMT,
            &["my-name", "abc-123"],
        ));
    }
    errs
}

/// `path.IsValidPathSegmentName` / `IsValidPathSegmentPrefix`.
pub fn path_segment(s: &str, prefix: bool) -> Vec<String> {
    let mut errs = Vec::new();
    if !prefix && (s == "." || s == "..") {
        errs.push(format!("may not be '{s}'"));
    }
    for bad in ["/", "%"] {
        if s.contains(bad) {
            errs.push(format!("may not contain '{bad}'"));
        }
    }
    errs
}

/// `maskTrailingDash`: a generateName prefix may end with '-'.
fn mask_trailing_dash(s: &str) -> String {
    if s.len() > 1 && s.ends_with('-') {
        format!("{}a", &s[..s.len() - 1])
    } else {
        s.to_string()
    }
}

/// The resource's `ValidateNameFunc(name, prefix)`.
pub fn validate_name(rule: NameRule, name: &str, prefix: bool) -> Vec<String> {
    let n = if prefix {
        mask_trailing_dash(name)
    } else {
        name.to_string()
    };
    match rule {
        NameRule::DnsSubdomain => dns1123_subdomain(&n),
        NameRule::DnsLabel => dns1123_label(&n),
        NameRule::Dns1035Label => dns1035_label(&n),
        NameRule::PathSegment => path_segment(name, prefix),
        NameRule::IpAddress => crate::networking::validate_ip_address_name(name),
    }
}

/// Whether `s` matches `labelKeyFmt`,
/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]` (any length).
fn matches_label_key_fmt(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|&c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_' || c == b'.')
}

/// `IsQualifiedName`, since 1.36 `content.IsLabelKey`: an optional DNS
/// subdomain prefix and `/`, then a name of at most 63 bytes matching
/// `labelKeyFmt` (an empty name fails both checks).
pub fn qualified_name(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.len() {
        1 => parts[0],
        2 => {
            let prefix = parts[0];
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else {
                for m in subdomain(prefix, "bytes") {
                    errs.push(format!("prefix part {m}"));
                }
            }
            parts[1]
        }
        _ => {
            errs.push(format!(
                "a valid label key {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(
                    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
                    QUALIFIED_NAME_FMT,
                    &["MyName", "my.name", "123-abc"],
                )
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else if name.len() > 63 {
        errs.push("name part must be no more than 63 bytes".to_string());
    }
    if !matches_label_key_fmt(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
                QUALIFIED_NAME_FMT,
                &["MyName", "my.name", "123-abc"],
            )
        ));
    }
    errs
}

/// `IsValidLabelValue` (`content.IsLabelValue`): at most 63 bytes, empty
/// or matching `labelKeyFmt`.
pub fn label_value(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 63 {
        errs.push("must be no more than 63 bytes".to_string());
    }
    if !value.is_empty() && !matches_label_key_fmt(value) {
        errs.push(regex_error(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
            LABEL_VALUE_FMT,
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

/// Validates the user-settable parts of `metadata` common to every kind
/// (`ValidateObjectMetaAccessor`): name/generateName, labels, annotation keys,
/// finalizer names.
pub fn validate_object_meta(meta: &Value, rule: NameRule, namespaced: bool) -> Vec<FieldError> {
    object_meta(meta, rule, namespaced, true)
}

/// The metadata validation of a new object of `def`: the core API's for the
/// kinds validated by pkg/apis/core/validation `ValidateObjectMeta`,
/// apimachinery's generic one (no rule for finalizers without a domain)
/// for Leases, CRDs, admission policies and custom resources.
pub fn validate_object_meta_on_create(
    def: &crate::resources::ResourceDef,
    custom: bool,
    meta: &Value,
) -> Vec<FieldError> {
    let generic = custom
        || matches!(
            def.group,
            "coordination.k8s.io" | "apiextensions.k8s.io" | "admissionregistration.k8s.io"
        );
    object_meta(meta, def.name_rule, def.namespaced, !generic)
}

/// [`validate_object_meta`]; `kube_finalizers`: with the core API's
/// finalizer-name rule (pkg/apis/core/validation), or apimachinery's
/// generic checks alone.
fn object_meta(
    meta: &Value,
    rule: NameRule,
    namespaced: bool,
    kube_finalizers: bool,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let name = meta.get("name").and_then(Value::as_str).unwrap_or("");
    let generate = meta
        .get("generateName")
        .and_then(Value::as_str)
        .unwrap_or("");
    if !generate.is_empty() {
        for m in validate_name(rule, generate, true) {
            errs.push(FieldError::invalid(
                "metadata.generateName",
                json!(generate),
                m,
            ));
        }
    }
    if name.is_empty() {
        errs.push(FieldError::required(
            "metadata.name",
            "name or generateName is required",
        ));
    } else {
        for m in validate_name(rule, name, false) {
            errs.push(FieldError::invalid("metadata.name", json!(name), m));
        }
    }
    let ns = meta.get("namespace").and_then(Value::as_str).unwrap_or("");
    if namespaced {
        if ns.is_empty() {
            errs.push(FieldError::required("metadata.namespace", ""));
        } else {
            for m in dns1123_label(ns) {
                errs.push(FieldError::invalid("metadata.namespace", json!(ns), m));
            }
        }
    } else if !ns.is_empty() {
        errs.push(FieldError::forbidden(
            "metadata.namespace",
            "not allowed on this type",
        ));
    }
    if let Some(labels) = meta.get("labels").and_then(Value::as_object) {
        for (k, v) in labels {
            for m in qualified_name(k) {
                errs.push(FieldError::invalid("metadata.labels", json!(k), m));
            }
            match v.as_str() {
                Some(s) => {
                    for m in label_value(s) {
                        errs.push(FieldError::invalid("metadata.labels", json!(s), m));
                    }
                }
                None => errs.push(FieldError::invalid(
                    "metadata.labels",
                    v.clone(),
                    "label values must be strings",
                )),
            }
        }
    }
    if let Some(ann) = meta.get("annotations").and_then(Value::as_object) {
        let mut total = 0usize;
        for (k, v) in ann {
            for m in qualified_name(&k.to_ascii_lowercase()) {
                errs.push(FieldError::invalid("metadata.annotations", json!(k), m));
            }
            total += k.len() + v.as_str().map(str::len).unwrap_or(0);
        }
        if total > 256 * 1024 {
            errs.push(FieldError {
                named: false,
                kind: crate::error::FieldErrorType::TooLong,
                field: "metadata.annotations".into(),
                value: None,
                detail: "may not be more than 262144 bytes".into(),
            });
        }
    }
    if let Some(fins) = meta.get("finalizers").and_then(Value::as_array) {
        errs.extend(validate_finalizers(fins));
        if kube_finalizers {
            errs.extend(kube_finalizer_names(fins));
        }
    }
    errs
}

/// `ValidateObjectMetaAccessorUpdate` (apimachinery/pkg/api/validation/objectmeta.go).
fn meta_accessor_update(new: &Value, old: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if crate::object::meta(old).is_some_and(|m| m.contains_key("deletionTimestamp")) {
        let old_f = finalizers(old);
        // sets.NewString(new...).Difference(old).List(): sorted, unique.
        let added: Vec<String> = finalizers(new)
            .into_iter()
            .filter(|f| !old_f.contains(f))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        if !added.is_empty() {
            let list: Vec<String> = added.iter().map(|f| crate::goquote::quote(f)).collect();
            errs.push(FieldError::forbidden(
                "metadata.finalizers",
                format!(
                    "no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
                    list.join(", ")
                ),
            ));
        }
    }
    for key in ["name", "namespace", "uid"] {
        let (n, o) = (
            crate::object::meta_str(new, key),
            crate::object::meta_str(old, key),
        );
        if n != o {
            errs.push(FieldError::invalid(
                &format!("metadata.{key}"),
                json!(n),
                "field is immutable",
            ));
        }
    }
    // BeforeUpdate already carried over the old values where set; what is
    // left is an attempt to set them on an object that is not being deleted.
    for key in ["deletionTimestamp", "deletionGracePeriodSeconds"] {
        let n = crate::object::meta(new)
            .and_then(|m| m.get(key))
            .filter(|v| !v.is_null());
        let o = crate::object::meta(old)
            .and_then(|m| m.get(key))
            .filter(|v| !v.is_null());
        if n != o {
            errs.push(FieldError::invalid(
                &format!("metadata.{key}"),
                n.cloned().unwrap_or(Value::Null),
                "field is immutable",
            ));
        }
    }
    errs
}

/// One metadata check of an update strategy's `ValidateUpdate`.
#[derive(Debug, Clone, Copy)]
enum MetaStep {
    /// pkg/apis/core/validation `ValidateObjectMetaUpdate`: the generic
    /// update checks, then the core finalizer names.
    UpdateCore,
    /// apimachinery `ValidateObjectMetaUpdate` alone.
    UpdateGeneric,
    /// pkg/apis/core/validation `ValidateObjectMeta` of the new object.
    ObjectCore,
}

/// What a kind's update strategy validates of the metadata, as measured on
/// kube-apiserver 1.36.3 (a bad label and finalizer, and a new finalizer on
/// a deleting object, per kind): e.g. ConfigMap's `ValidateConfigMapUpdate`
/// is `ValidateObjectMetaUpdate` plus `ValidateConfigMap(new)`, so each
/// metadata error comes back once from each and once from the registry's
/// common checks.
fn update_steps(
    def: &crate::resources::ResourceDef,
    subresource: Option<&str>,
) -> &'static [MetaStep] {
    use MetaStep::*;
    if subresource.is_some() {
        return &[UpdateCore];
    }
    match (def.group, def.resource) {
        ("", "events" | "bindings" | "componentstatuses") | ("policy", _) => &[],
        ("", "limitranges") => &[ObjectCore],
        ("", "persistentvolumes") => &[ObjectCore, ObjectCore],
        ("", "services" | "podtemplates" | "replicationcontrollers" | "resourcequotas")
        | ("apps", _)
        | ("events.k8s.io", _)
        | ("networking.k8s.io", "servicecidrs") => &[UpdateCore],
        ("coordination.k8s.io", _)
        | ("apiextensions.k8s.io", _)
        | ("admissionregistration.k8s.io", _) => &[UpdateGeneric],
        ("" | "rbac.authorization.k8s.io" | "batch" | "storage.k8s.io", _)
        | ("networking.k8s.io", "ipaddresses") => &[UpdateCore, ObjectCore],
        // Custom resources: apiextensions' generic metadata validation.
        _ => &[UpdateGeneric],
    }
}

/// The metadata errors of an update, in the order the API server reports
/// them: the registry's common checks (`rest.BeforeUpdate` →
/// `validateCommonFields`: the generic object-meta checks with path-segment
/// names, then `ValidateObjectMetaAccessorUpdate`), then the strategy's own
/// ([`update_steps`]). The same error may come back two or three times, as
/// upstream's causes list it (the message shows it once).
pub fn validate_meta_on_update(
    def: &crate::resources::ResourceDef,
    new: &Value,
    old: &Value,
    subresource: Option<&str>,
) -> Vec<FieldError> {
    let meta = new.get("metadata").unwrap_or(&Value::Null);
    let mut errs = object_meta(meta, NameRule::PathSegment, def.namespaced, false);
    errs.extend(meta_accessor_update(new, old));
    for step in update_steps(def, subresource) {
        match step {
            MetaStep::UpdateGeneric => errs.extend(meta_accessor_update(new, old)),
            MetaStep::UpdateCore => {
                errs.extend(meta_accessor_update(new, old));
                if let Some(fins) = meta.get("finalizers").and_then(Value::as_array) {
                    errs.extend(kube_finalizer_names(fins));
                }
            }
            MetaStep::ObjectCore => {
                errs.extend(validate_object_meta(meta, def.name_rule, def.namespaced))
            }
        }
    }
    errs
}

/// The finalizers without a domain that the core API accepts
/// (`helper.IsStandardFinalizerName`).
const STANDARD_FINALIZERS: &[&str] = &["kubernetes", "orphan", "foregroundDeletion"];

/// apimachinery's `ValidateFinalizers`: each name a qualified name, reported
/// at `metadata.finalizers` without an index; `orphan` and
/// `foregroundDeletion` not both. (pkg/apis/core/validation
/// `ValidateObjectMeta` appends [`kube_finalizer_names`] after these.)
fn validate_finalizers(fins: &[Value]) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let names: Vec<Option<&str>> = fins.iter().map(Value::as_str).collect();
    for (i, f) in fins.iter().enumerate() {
        match names[i] {
            Some(s) => {
                for m in qualified_name(s) {
                    errs.push(FieldError::invalid("metadata.finalizers", json!(s), m));
                }
            }
            None => errs.push(FieldError::invalid(
                &format!("metadata.finalizers[{i}]"),
                f.clone(),
                "must be a string",
            )),
        }
    }
    if names.contains(&Some("orphan")) && names.contains(&Some("foregroundDeletion")) {
        errs.push(FieldError::invalid(
            "metadata.finalizers",
            Value::Array(fins.to_vec()),
            "finalizer orphan and foregroundDeletion cannot be both set",
        ));
    }
    errs
}

/// The core API's `validateKubeFinalizerName` for each finalizer: a name
/// without a domain must be a standard one (reported at
/// `metadata.finalizers[i]`).
fn kube_finalizer_names(fins: &[Value]) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (i, name) in fins.iter().map(Value::as_str).enumerate() {
        if let Some(s) = name
            && !s.contains('/')
            && !STANDARD_FINALIZERS.contains(&s)
        {
            errs.push(FieldError::invalid(
                &format!("metadata.finalizers[{i}]"),
                json!(s),
                "name is neither a standard finalizer name nor is it fully qualified",
            ));
        }
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subdomain_message_is_upstreams() {
        let e = dns1123_subdomain("Bad_Name");
        assert_eq!(
            e,
            vec![
                "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
            ]
        );
        assert!(dns1123_subdomain("a.b-c.d").is_empty());
    }

    #[test]
    fn label_message_has_upstreams_double_space() {
        let e = dns1123_label("a_b");
        assert!(
            e[0].contains("(e.g. 'my-name',  or '123-abc', regex"),
            "{}",
            e[0]
        );
    }

    #[test]
    fn generate_name_prefix_may_end_with_dash() {
        assert!(validate_name(NameRule::DnsSubdomain, "web-", true).is_empty());
        assert!(!validate_name(NameRule::DnsSubdomain, "web-", false).is_empty());
    }

    #[test]
    fn qualified_names() {
        assert!(qualified_name("kubernetes.io/pv-protection").is_empty());
        assert!(qualified_name("foo").is_empty());
        assert!(!qualified_name("a b").is_empty());
        assert!(!qualified_name("a/b/c").is_empty());
    }

    #[test]
    fn path_segment_rules() {
        assert_eq!(path_segment("..", false), vec!["may not be '..'"]);
        assert_eq!(path_segment("a/b", false), vec!["may not contain '/'"]);
        assert!(path_segment("system:controller:x", false).is_empty());
    }
}
