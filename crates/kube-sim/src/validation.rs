//! Name and metadata validation with the real server's messages
//! (k8s.io/apimachinery/pkg/util/validation/validation.go,
//! k8s.io/apimachinery/pkg/api/validation/objectmeta.go and
//! k8s.io/apimachinery/pkg/api/validation/path/name.go).

use serde_json::{Value, json};

use crate::error::FieldError;
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
    if !is_dns1123_label_chars(s) {
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
    let mut errs = Vec::new();
    if s.len() > 253 {
        errs.push("must be no more than 253 characters".to_string());
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

fn is_qualified_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|&c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_' || c == b'.')
}

/// `IsQualifiedName`.
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
                for m in dns1123_subdomain(prefix) {
                    errs.push(format!("prefix part {m}"));
                }
            }
            parts[1]
        }
        _ => {
            errs.push(regex_error(
                "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
                QUALIFIED_NAME_FMT,
                &["MyName", "my.name", "123-abc"],
            ) + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')");
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else if name.len() > 63 {
        errs.push("name part must be no more than 63 characters".to_string());
    }
    if !name.is_empty() && !is_qualified_name_part(name) && name.len() <= 63 {
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

/// `IsValidLabelValue`.
pub fn label_value(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 63 {
        errs.push("must be no more than 63 characters".to_string());
    }
    if !value.is_empty() && !is_qualified_name_part(value) && value.len() <= 63 {
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
                kind: crate::error::FieldErrorType::TooLong,
                field: "metadata.annotations".into(),
                value: None,
                detail: "may not be more than 262144 bytes".into(),
            });
        }
    }
    if let Some(fins) = meta.get("finalizers").and_then(Value::as_array) {
        errs.extend(validate_finalizers(fins));
    }
    errs
}

/// The finalizers without a domain that the core API accepts
/// (`helper.IsStandardFinalizerName`).
const STANDARD_FINALIZERS: &[&str] = &["kubernetes", "orphan", "foregroundDeletion"];

/// apimachinery's `ValidateFinalizers` (each name a qualified name, reported
/// at `metadata.finalizers` without an index; `orphan` and
/// `foregroundDeletion` not both), then the core API's
/// `validateKubeFinalizerName` for each (a name without a domain must be a
/// standard one, reported at `metadata.finalizers[i]`), in that order, as
/// pkg/apis/core/validation `ValidateObjectMeta` appends them.
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
        let quoted: Vec<String> = names.iter().flatten().map(|n| format!("{n:?}")).collect();
        errs.push(FieldError {
            kind: crate::error::FieldErrorType::Invalid,
            field: "metadata.finalizers".into(),
            value: None,
            detail: format!(
                "[]string{{{}}}: finalizer orphan and foregroundDeletion cannot be both set",
                quoted.join(", ")
            ),
        });
    }
    for (i, name) in names.iter().enumerate() {
        if let Some(s) = name
            && !s.contains('/')
            && !STANDARD_FINALIZERS.contains(s)
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
