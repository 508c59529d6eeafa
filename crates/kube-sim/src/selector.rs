//! Label and field selectors (k8s.io/apimachinery/pkg/labels/selector.go,
//! k8s.io/apimachinery/pkg/fields/selector.go) and the per-kind selectable
//! fields (pkg/registry/<group>/<resource>/strategy.go `ToSelectableFields`).

use serde_json::Value;

use crate::error::ApiError;
use crate::resources::ResourceDef;

#[derive(Debug, Clone, PartialEq)]
enum Op {
    Exists,
    DoesNotExist,
    Equals(String),
    NotEquals(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    Gt(i64),
    Lt(i64),
}

#[derive(Debug, Clone, PartialEq)]
struct Requirement {
    key: String,
    op: Op,
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector {
    reqs: Vec<Requirement>,
}

fn parse_err(detail: impl std::fmt::Display) -> ApiError {
    ApiError::bad_request(format!("unable to parse requirement: {detail}"))
}

/// Splits on commas that are not inside parentheses.
fn split_top(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn check_key(key: &str) -> Result<(), ApiError> {
    let errs = crate::validation::qualified_name(key);
    if let Some(e) = errs.first() {
        return Err(parse_err(format!("key: Invalid value: {key:?}: {e}")));
    }
    Ok(())
}

fn check_value(v: &str) -> Result<(), ApiError> {
    let errs = crate::validation::label_value(v);
    if let Some(e) = errs.first() {
        return Err(parse_err(format!("values[0]: Invalid value: {v:?}: {e}")));
    }
    Ok(())
}

impl LabelSelector {
    /// A `metav1.LabelSelector` object (matchLabels, matchExpressions) as a
    /// selector (`LabelSelectorAsSelector`).
    pub fn from_label_selector(v: &Value) -> LabelSelector {
        let mut reqs = Vec::new();
        if let Some(m) = v.get("matchLabels").and_then(Value::as_object) {
            for (k, val) in m {
                reqs.push(Requirement {
                    key: k.clone(),
                    op: Op::Equals(val.as_str().unwrap_or_default().to_string()),
                });
            }
        }
        for e in v
            .get("matchExpressions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let key = e
                .get("key")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let values: Vec<String> = e
                .get("values")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|x| x.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
            let op = match e
                .get("operator")
                .and_then(Value::as_str)
                .unwrap_or_default()
            {
                "In" => Op::In(values),
                "NotIn" => Op::NotIn(values),
                "Exists" => Op::Exists,
                "DoesNotExist" => Op::DoesNotExist,
                _ => continue,
            };
            reqs.push(Requirement { key, op });
        }
        LabelSelector { reqs }
    }

    pub fn parse(s: &str) -> Result<LabelSelector, ApiError> {
        let mut reqs = Vec::new();
        if s.trim().is_empty() {
            return Ok(LabelSelector { reqs });
        }
        for part in split_top(s) {
            let p = part.trim();
            if p.is_empty() {
                return Err(parse_err("found '', expected: identifier"));
            }
            let req = if let Some(key) = p.strip_prefix('!') {
                let key = key.trim();
                check_key(key)?;
                Requirement {
                    key: key.into(),
                    op: Op::DoesNotExist,
                }
            } else if let Some(i) = p.find("!=") {
                let (k, v) = (p[..i].trim(), p[i + 2..].trim());
                check_key(k)?;
                check_value(v)?;
                Requirement {
                    key: k.into(),
                    op: Op::NotEquals(v.into()),
                }
            } else if let Some(i) = p.find("==") {
                let (k, v) = (p[..i].trim(), p[i + 2..].trim());
                check_key(k)?;
                check_value(v)?;
                Requirement {
                    key: k.into(),
                    op: Op::Equals(v.into()),
                }
            } else if let Some(i) = p.find('=') {
                let (k, v) = (p[..i].trim(), p[i + 1..].trim());
                check_key(k)?;
                check_value(v)?;
                Requirement {
                    key: k.into(),
                    op: Op::Equals(v.into()),
                }
            } else if let Some(i) = p.find('>') {
                let (k, v) = (p[..i].trim(), p[i + 1..].trim());
                check_key(k)?;
                let n = v.parse::<i64>().map_err(|_| {
                    parse_err("for 'Gt', 'Lt' operators, the value must be an integer")
                })?;
                Requirement {
                    key: k.into(),
                    op: Op::Gt(n),
                }
            } else if let Some(i) = p.find('<') {
                let (k, v) = (p[..i].trim(), p[i + 1..].trim());
                check_key(k)?;
                let n = v.parse::<i64>().map_err(|_| {
                    parse_err("for 'Gt', 'Lt' operators, the value must be an integer")
                })?;
                Requirement {
                    key: k.into(),
                    op: Op::Lt(n),
                }
            } else if let Some(open) = p.find('(') {
                let head = p[..open].trim();
                let close = p
                    .rfind(')')
                    .ok_or_else(|| parse_err("found '', expected: ')'"))?;
                let values: Vec<String> = p[open + 1..close]
                    .split(',')
                    .map(|v| v.trim().to_string())
                    .filter(|v| !v.is_empty())
                    .collect();
                for v in &values {
                    check_value(v)?;
                }
                let mut words = head.split_whitespace();
                let key = words.next().unwrap_or("");
                let op = words.next().unwrap_or("");
                check_key(key)?;
                match op {
                    "in" => Requirement {
                        key: key.into(),
                        op: Op::In(values),
                    },
                    "notin" => Requirement {
                        key: key.into(),
                        op: Op::NotIn(values),
                    },
                    other => {
                        return Err(parse_err(format!(
                            "found '{other}', expected: in, notin, =, ==, !=, gt, lt"
                        )));
                    }
                }
            } else {
                if p.contains(char::is_whitespace) {
                    return Err(parse_err(format!(
                        "found '{}', expected: in, notin, =, ==, !=, gt, lt",
                        p.split_whitespace().nth(1).unwrap_or("")
                    )));
                }
                check_key(p)?;
                Requirement {
                    key: p.into(),
                    op: Op::Exists,
                }
            };
            reqs.push(req);
        }
        Ok(LabelSelector { reqs })
    }

    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    /// Whether an object with these labels matches.
    pub fn matches(&self, labels: Option<&serde_json::Map<String, Value>>) -> bool {
        self.reqs.iter().all(|r| {
            let v = labels.and_then(|l| l.get(&r.key)).and_then(Value::as_str);
            match &r.op {
                Op::Exists => v.is_some(),
                Op::DoesNotExist => v.is_none(),
                Op::Equals(x) => v == Some(x.as_str()),
                Op::NotEquals(x) => v != Some(x.as_str()),
                Op::In(xs) => v.is_some_and(|v| xs.iter().any(|x| x == v)),
                Op::NotIn(xs) => v.is_none_or(|v| !xs.iter().any(|x| x == v)),
                Op::Gt(n) => v
                    .and_then(|v| v.parse::<i64>().ok())
                    .is_some_and(|v| v > *n),
                Op::Lt(n) => v
                    .and_then(|v| v.parse::<i64>().ok())
                    .is_some_and(|v| v < *n),
            }
        })
    }
}

/// A parsed field selector (only `=`, `==`, `!=`, as upstream).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector {
    reqs: Vec<(String, bool, String)>, // (field, equals?, value)
}

/// Splits on unescaped `sep`, unescaping `\,`, `\=`, `\\` afterwards.
fn split_escaped(s: &str, sep: char) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut esc = false;
    for c in s.chars() {
        if esc {
            cur.push('\\');
            cur.push(c);
            esc = false;
        } else if c == '\\' {
            esc = true;
        } else if c == sep {
            out.push(std::mem::take(&mut cur));
        } else {
            cur.push(c);
        }
    }
    if esc {
        cur.push('\\');
    }
    out.push(cur);
    out
}

fn unescape(s: &str) -> String {
    let mut out = String::new();
    let mut esc = false;
    for c in s.chars() {
        if esc {
            out.push(c);
            esc = false;
        } else if c == '\\' {
            esc = true;
        } else {
            out.push(c);
        }
    }
    out
}

impl FieldSelector {
    /// Parses and checks each field against what the resource supports.
    pub fn parse(s: &str, def: &ResourceDef) -> Result<FieldSelector, ApiError> {
        let mut reqs = Vec::new();
        if s.trim().is_empty() {
            return Ok(FieldSelector { reqs });
        }
        for part in split_escaped(s, ',') {
            let (field, eq, value) = if let Some(i) = find_unescaped(&part, "!=") {
                (&part[..i], false, &part[i + 2..])
            } else if let Some(i) = find_unescaped(&part, "==") {
                (&part[..i], true, &part[i + 2..])
            } else if let Some(i) = find_unescaped(&part, "=") {
                (&part[..i], true, &part[i + 1..])
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{s}'; can't understand '{part}'"
                )));
            };
            let field = field.trim().to_string();
            if field != "metadata.name"
                && field != "metadata.namespace"
                && !def.field_labels.contains(&field.as_str())
            {
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {field}"
                )));
            }
            reqs.push((field, eq, unescape(value)));
        }
        Ok(FieldSelector { reqs })
    }

    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    /// The same requirements on renamed fields (another version's labels).
    pub fn map_fields(&self, f: impl Fn(&str) -> String) -> FieldSelector {
        FieldSelector {
            reqs: self
                .reqs
                .iter()
                .map(|(k, eq, v)| (f(k), *eq, v.clone()))
                .collect(),
        }
    }

    /// The single `metadata.name=X` requirement, if that is all there is
    /// (lets a list/watch go straight to one key).
    pub fn single_name(&self) -> Option<&str> {
        match self.reqs.as_slice() {
            [(f, true, v)] if f == "metadata.name" => Some(v),
            _ => None,
        }
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.reqs
            .iter()
            .all(|(f, eq, v)| (field_value(obj, f) == *v) == *eq)
    }
}

fn find_unescaped(s: &str, pat: &str) -> Option<usize> {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' {
            i += 2;
            continue;
        }
        if s[i..].starts_with(pat) {
            return Some(i);
        }
        i += 1;
    }
    None
}

/// The selectable value of a field, formatted as upstream's `fields.Set`
/// (strings as is, booleans via `strconv.FormatBool`, absent as "").
pub fn field_value(obj: &Value, field: &str) -> String {
    let path = match field {
        "source" => "source.component",
        "deprecatedSource" => "deprecatedSource.component",
        other => other,
    };
    let mut cur = obj;
    for seg in path.split('.') {
        match cur.get(seg) {
            Some(v) => cur = v,
            None => {
                return match field {
                    "spec.hostNetwork" | "spec.unschedulable" => "false".into(),
                    // int32 status fields select as their decimal value.
                    "status.replicas" | "status.successful" => "0".into(),
                    _ => String::new(),
                };
            }
        }
    }
    match cur {
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::Array(items) => items
            .iter()
            .filter_map(|i| i.get("ip").and_then(Value::as_str).or(i.as_str()))
            .collect::<Vec<_>>()
            .join(","),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(v: Value) -> serde_json::Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn label_selector_operators() {
        let l = labels(json!({"app":"web","tier":"fe","n":"5"}));
        let cases = [
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("missing!=x", true),
            ("app in (web,db)", true),
            ("app notin (web)", false),
            ("missing notin (web)", true),
            ("app", true),
            ("!app", false),
            ("app=web,tier=fe", true),
            ("app=web,tier=be", false),
            ("n>4", true),
            ("n<4", false),
            ("", true),
        ];
        for (sel, want) in cases {
            let s = LabelSelector::parse(sel).unwrap_or_else(|e| panic!("{sel}: {e}"));
            assert_eq!(s.matches(Some(&l)), want, "{sel}");
        }
    }

    #[test]
    fn bad_label_selector_is_400() {
        let e = LabelSelector::parse("a b c").unwrap_err();
        assert_eq!(e.code, 400);
    }

    #[test]
    fn field_selector_known_and_unknown_fields() {
        let pods =
            &crate::resources::RESOURCES[crate::resources::find("", "v1", "pods").unwrap_or(0)];
        let s = FieldSelector::parse("spec.nodeName=n1,metadata.name!=x", pods).unwrap();
        assert!(s.matches(&json!({"metadata":{"name":"a"},"spec":{"nodeName":"n1"}})));
        assert!(!s.matches(&json!({"metadata":{"name":"a"},"spec":{}})));
        let e = FieldSelector::parse("status.hostIP=1.2.3.4", pods).unwrap_err();
        assert_eq!(e.message, "field label not supported: status.hostIP");
        let empty_node = FieldSelector::parse("spec.nodeName=", pods).unwrap();
        assert!(empty_node.matches(&json!({"metadata":{"name":"a"},"spec":{}})));
    }
}
