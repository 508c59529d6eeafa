//! Field paths and field sets as sigs.k8s.io/structured-merge-diff defines
//! them, with the `FieldsV1` wire encoding used in `metadata.managedFields`
//! (`f:<field>`, `k:<key fields JSON>`, `v:<value JSON>`, `i:<index>`, `.`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::{Map, Value};

/// One step of a path. The derived order (fields, then keys, then values,
/// then indexes) is structured-merge-diff's `PathElement.Compare` order,
/// which is also the order FieldsV1 is written in.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PathElement {
    /// A struct field or map key.
    Field(String),
    /// A list item of a map-list, identified by its key fields: the canonical
    /// JSON object of the key fields, sorted by field name.
    Key(String),
    /// A list item of a set-list, identified by its JSON value.
    Value(String),
    /// A list item by position (only for lists without keys).
    Index(usize),
}

impl PathElement {
    /// A key element from the item's key fields.
    pub fn key(fields: &[(String, Value)]) -> PathElement {
        let mut sorted: Vec<&(String, Value)> = fields.iter().collect();
        sorted.sort_by(|a, b| a.0.cmp(&b.0));
        let mut m = Map::new();
        for (k, v) in sorted {
            m.insert(k.clone(), v.clone());
        }
        PathElement::Key(Value::Object(m).to_string())
    }

    /// A value element for a set item.
    pub fn value(v: &Value) -> PathElement {
        PathElement::Value(v.to_string())
    }

    fn encode(&self) -> String {
        match self {
            PathElement::Field(f) => format!("f:{f}"),
            PathElement::Key(k) => format!("k:{k}"),
            PathElement::Value(v) => format!("v:{v}"),
            PathElement::Index(i) => format!("i:{i}"),
        }
    }

    fn decode(s: &str) -> Option<PathElement> {
        let (prefix, rest) = s.split_at_checked(2)?;
        match prefix {
            "f:" => Some(PathElement::Field(rest.to_string())),
            "k:" => {
                // Re-canonicalise so that equal keys compare equal.
                let v: Value = serde_json::from_str(rest).ok()?;
                let obj = v.as_object()?;
                let fields: Vec<(String, Value)> =
                    obj.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
                Some(PathElement::key(&fields))
            }
            "v:" => {
                let v: Value = serde_json::from_str(rest).ok()?;
                Some(PathElement::value(&v))
            }
            "i:" => rest.parse().ok().map(PathElement::Index),
            _ => None,
        }
    }
}

impl fmt::Display for PathElement {
    /// structured-merge-diff's `PathElement.String()`: `.name`,
    /// `[name="a",protocol="TCP"]`, `[="x"]`, `[3]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathElement::Field(name) => write!(f, ".{name}"),
            PathElement::Key(k) => {
                let parts: Vec<String> = match serde_json::from_str::<Value>(k) {
                    Ok(Value::Object(m)) => m.iter().map(|(k, v)| format!("{k}={v}")).collect(),
                    _ => vec![k.clone()],
                };
                write!(f, "[{}]", parts.join(","))
            }
            PathElement::Value(v) => write!(f, "[={v}]"),
            PathElement::Index(i) => write!(f, "[{i}]"),
        }
    }
}

/// A path from the object root.
pub type Path = Vec<PathElement>;

/// `fieldpath.Path.String()`.
pub fn path_string(p: &[PathElement]) -> String {
    p.iter().map(ToString::to_string).collect()
}

/// A set of paths, stored as a trie like structured-merge-diff's `Set`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Set {
    members: BTreeSet<PathElement>,
    children: BTreeMap<PathElement, Set>,
}

impl Set {
    pub fn new() -> Set {
        Set::default()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty() && self.children.values().all(Set::is_empty)
    }

    pub fn insert(&mut self, path: &[PathElement]) {
        match path {
            [] => {}
            [last] => {
                self.members.insert(last.clone());
            }
            [first, rest @ ..] => self.children.entry(first.clone()).or_default().insert(rest),
        }
    }

    pub fn has(&self, path: &[PathElement]) -> bool {
        match path {
            [] => false,
            [last] => self.members.contains(last),
            [first, rest @ ..] => self.children.get(first).is_some_and(|c| c.has(rest)),
        }
    }

    /// Whether any member lies strictly below `path`.
    pub fn has_descendant(&self, path: &[PathElement]) -> bool {
        match path {
            [] => !self.is_empty(),
            [first, rest @ ..] => self
                .children
                .get(first)
                .is_some_and(|c| c.has_descendant(rest)),
        }
    }

    /// The subtree under `pe`.
    pub fn child(&self, pe: &PathElement) -> Option<&Set> {
        self.children.get(pe)
    }

    pub fn union(&self, other: &Set) -> Set {
        let mut out = self.clone();
        out.members.extend(other.members.iter().cloned());
        for (k, v) in &other.children {
            let merged = match out.children.get(k) {
                Some(mine) => mine.union(v),
                None => v.clone(),
            };
            out.children.insert(k.clone(), merged);
        }
        out
    }

    pub fn difference(&self, other: &Set) -> Set {
        let mut out = Set::new();
        out.members = self.members.difference(&other.members).cloned().collect();
        for (k, v) in &self.children {
            let d = match other.children.get(k) {
                Some(o) => v.difference(o),
                None => v.clone(),
            };
            if !d.is_empty() {
                out.children.insert(k.clone(), d);
            }
        }
        out
    }

    pub fn intersection(&self, other: &Set) -> Set {
        let mut out = Set::new();
        out.members = self.members.intersection(&other.members).cloned().collect();
        for (k, v) in &self.children {
            if let Some(o) = other.children.get(k) {
                let i = v.intersection(o);
                if !i.is_empty() {
                    out.children.insert(k.clone(), i);
                }
            }
        }
        out
    }

    /// Every member path, in order.
    pub fn paths(&self) -> Vec<Path> {
        let mut out = Vec::new();
        self.collect(&mut Vec::new(), &mut out);
        out
    }

    fn collect(&self, prefix: &mut Path, out: &mut Vec<Path>) {
        let mut keys: BTreeSet<&PathElement> = self.members.iter().collect();
        keys.extend(self.children.keys());
        for k in keys {
            prefix.push(k.clone());
            if self.members.contains(k) {
                out.push(prefix.clone());
            }
            if let Some(c) = self.children.get(k) {
                c.collect(prefix, out);
            }
            prefix.pop();
        }
    }

    /// The `FieldsV1` JSON encoding.
    pub fn to_fields_v1(&self) -> Value {
        let mut m = Map::new();
        let mut keys: BTreeSet<&PathElement> = self.members.iter().collect();
        keys.extend(
            self.children
                .iter()
                .filter(|(_, c)| !c.is_empty())
                .map(|(k, _)| k),
        );
        for k in keys {
            let v = match self.children.get(k).filter(|c| !c.is_empty()) {
                Some(c) => {
                    let mut inner = Map::new();
                    if self.members.contains(k) {
                        inner.insert(".".to_string(), Value::Object(Map::new()));
                    }
                    if let Value::Object(cm) = c.to_fields_v1() {
                        inner.extend(cm);
                    }
                    Value::Object(inner)
                }
                None => Value::Object(Map::new()),
            };
            m.insert(k.encode(), v);
        }
        Value::Object(m)
    }

    /// Decodes `FieldsV1`; `None` when it is not valid.
    pub fn from_fields_v1(v: &Value) -> Option<Set> {
        let obj = v.as_object()?;
        let mut s = Set::new();
        for (k, child) in obj {
            if k == "." {
                continue;
            }
            let pe = PathElement::decode(k)?;
            let cobj = child.as_object()?;
            if cobj.is_empty() {
                s.members.insert(pe);
                continue;
            }
            if cobj.contains_key(".") {
                s.members.insert(pe.clone());
            }
            let sub = Set::from_fields_v1(child)?;
            if !sub.is_empty() {
                s.children.insert(pe, sub);
            }
        }
        Some(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn f(s: &str) -> PathElement {
        PathElement::Field(s.to_string())
    }

    #[test]
    fn fields_v1_round_trips_the_upstream_encoding() {
        // A managedFields entry as kubectl create writes it for a Deployment.
        let wire = json!({
            "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
            "f:spec": {
                "f:replicas": {},
                "f:template": {"f:spec": {"f:containers": {
                    "k:{\"name\":\"nginx\"}": {".": {}, "f:image": {}, "f:name": {}}
                }}}
            }
        });
        let set = Set::from_fields_v1(&wire).expect("valid FieldsV1");
        assert!(set.has(&[f("metadata"), f("labels")]));
        assert!(set.has(&[f("metadata"), f("labels"), f("app")]));
        assert!(!set.has(&[f("metadata")]));
        let key = PathElement::key(&[("name".into(), json!("nginx"))]);
        assert!(set.has(&[
            f("spec"),
            f("template"),
            f("spec"),
            f("containers"),
            key.clone(),
            f("image")
        ]));
        assert_eq!(set.to_fields_v1(), wire);
        assert_eq!(
            path_string(&[
                f("spec"),
                f("template"),
                f("spec"),
                f("containers"),
                key,
                f("image")
            ]),
            ".spec.template.spec.containers[name=\"nginx\"].image"
        );
    }

    #[test]
    fn set_algebra_matches_structured_merge_diff() {
        let mut a = Set::new();
        a.insert(&[f("spec"), f("replicas")]);
        a.insert(&[f("spec"), f("paused")]);
        let mut b = Set::new();
        b.insert(&[f("spec"), f("replicas")]);
        b.insert(&[
            f("metadata"),
            f("finalizers"),
            PathElement::value(&json!("x")),
        ]);
        assert_eq!(
            a.intersection(&b).paths(),
            vec![vec![f("spec"), f("replicas")]]
        );
        assert_eq!(a.difference(&b).paths(), vec![vec![f("spec"), f("paused")]]);
        assert_eq!(a.union(&b).paths().len(), 3);
        assert!(a.difference(&a).is_empty());
        assert!(b.has_descendant(&[f("metadata")]));
        assert!(!b.has_descendant(&[f("spec"), f("replicas")]));
        assert_eq!(
            path_string(&[
                f("metadata"),
                f("finalizers"),
                PathElement::value(&json!("x"))
            ]),
            ".metadata.finalizers[=\"x\"]"
        );
    }

    #[test]
    fn invalid_fields_v1_is_rejected() {
        for bad in [
            json!([]),
            json!({"x:foo": {}}),
            json!({"f:a": 1}),
            json!({"k:notjson": {}}),
        ] {
            assert!(Set::from_fields_v1(&bad).is_none(), "{bad}");
        }
    }
}
