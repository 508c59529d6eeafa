//! Kubernetes object-name rules (k8s.io/apimachinery
//! `pkg/util/validation`), with apimachinery's messages, for flags that name
//! objects: a namespace is a DNS-1123 label, a ConfigMap or a Lease name a
//! DNS-1123 subdomain. Checked at start-up so that a bad flag fails at once
//! instead of every request being refused later.

/// A label's maximum length.
pub const DNS1123_LABEL_MAX_LENGTH: usize = 63;
/// A subdomain's maximum length.
pub const DNS1123_SUBDOMAIN_MAX_LENGTH: usize = 253;

const LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const SUBDOMAIN_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const LABEL_ERR: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";
const SUBDOMAIN_ERR: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";

/// apimachinery's `RegexError`, examples and all (its double space
/// included).
fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    let mut out = format!("{msg} (e.g. ");
    for (i, e) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        out.push_str(&format!("'{e}', "));
    }
    out.push_str(&format!("regex used for validation is '{fmt}')"));
    out
}

fn max_len_error(n: usize) -> String {
    format!("must be no more than {n} characters")
}

fn is_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

fn is_subdomain(s: &str) -> bool {
    s.split('.').all(is_label)
}

/// apimachinery's `IsDNS1123Label`: the problems, empty when valid.
pub fn dns1123_label_errors(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_LABEL_MAX_LENGTH {
        errs.push(max_len_error(DNS1123_LABEL_MAX_LENGTH));
    }
    if !is_label(value) {
        if is_subdomain(value) {
            errs.push("must not contain dots".to_owned());
        } else {
            errs.push(regex_error(LABEL_ERR, LABEL_FMT, &["my-name", "123-abc"]));
        }
    }
    errs
}

/// apimachinery's `IsDNS1123Subdomain`: the problems, empty when valid.
pub fn dns1123_subdomain_errors(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_SUBDOMAIN_MAX_LENGTH {
        errs.push(max_len_error(DNS1123_SUBDOMAIN_MAX_LENGTH));
    }
    if !is_subdomain(value) {
        errs.push(regex_error(SUBDOMAIN_ERR, SUBDOMAIN_FMT, &["example.com"]));
    }
    errs
}

/// A flag value that cannot name the object it names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {flag} {value:?}: {}", reasons.join(", "))]
pub struct InvalidName {
    pub flag: String,
    pub value: String,
    pub reasons: Vec<String>,
}

fn check(flag: &str, value: &str, errs: Vec<String>) -> Result<(), InvalidName> {
    if errs.is_empty() {
        Ok(())
    } else {
        Err(InvalidName {
            flag: flag.to_owned(),
            value: value.to_owned(),
            reasons: errs,
        })
    }
}

/// A namespace name (a DNS-1123 label), given by `flag`.
pub fn validate_namespace(flag: &str, value: &str) -> Result<(), InvalidName> {
    check(flag, value, dns1123_label_errors(value))
}

/// The name of a ConfigMap or a Lease (a DNS-1123 subdomain), given by `flag`.
pub fn validate_object_name(flag: &str, value: &str) -> Result<(), InvalidName> {
    check(flag, value, dns1123_subdomain_errors(value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn messages_are_apimachinerys() {
        let e = validate_namespace("--leader-elect-resource-namespace", "Bad_NS").unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid --leader-elect-resource-namespace \"Bad_NS\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
        );
        let e = validate_object_name("--release-record-name", "../x").unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid --release-record-name \"../x\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
        );
        assert_eq!(
            dns1123_label_errors("a.b"),
            vec!["must not contain dots".to_owned()]
        );
        assert_eq!(
            dns1123_label_errors(&"a".repeat(64)),
            vec!["must be no more than 63 characters".to_owned()]
        );
        assert_eq!(dns1123_subdomain_errors(&"a".repeat(254)).len(), 1);
        assert_eq!(dns1123_subdomain_errors("").len(), 1);
    }

    #[test]
    fn valid_names_pass() {
        for ns in ["default", "kube-system", "a", "0", "a-1"] {
            assert!(validate_namespace("-n", ns).is_ok(), "{ns}");
        }
        for name in ["protection-manager-release", "a.b-c.d", "x"] {
            assert!(validate_object_name("--x", name).is_ok(), "{name}");
        }
        for bad in ["", "-a", "a-", "A", "a_b", "a..b", ".a", "a/b", "é"] {
            assert!(validate_object_name("--x", bad).is_err(), "{bad}");
        }
    }

    proptest! {
        /// The hand-written checks agree with apimachinery's regexes
        /// (checked here with proptest's regex generator: every string the
        /// regex generates is valid).
        #[test]
        fn generated_labels_are_valid(s in "[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?") {
            prop_assert!(dns1123_label_errors(&s).is_empty(), "{s}");
        }

        #[test]
        fn generated_subdomains_are_valid(s in "[a-z0-9]([-a-z0-9]{0,10}[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]{0,10}[a-z0-9])?){0,5}") {
            prop_assert!(dns1123_subdomain_errors(&s).is_empty(), "{s}");
        }

        #[test]
        fn any_text_never_panics(s in any::<String>()) {
            let _ = dns1123_label_errors(&s);
            let _ = dns1123_subdomain_errors(&s);
        }
    }
}
