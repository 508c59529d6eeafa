//! apimachinery's `diff.Diff` (k8s.io/apimachinery/pkg/util/diff, 1.36) as
//! upstream validation appends it to some "is immutable" errors (a claim's
//! spec): `json.MarshalIndent(x, "", " ")` of each internal Go struct, then
//! go-difflib's unified diff of the two texts with three lines of context and
//! no file header. Deterministic: earlier releases printed go-cmp's
//! `cmp.Diff` there, whose whitespace go-cmp randomises per process, but
//! apimachinery v0.36.3 has no go-cmp variant of `diff.Diff` at all (its doc
//! comment's `usegocmp` build tag names no file).
//!
//! The internal structs are described by [`crate::go_types`], generated from
//! k8s.io/kubernetes by `hack/real-k8s/cmd/go-types`; values come from the v1
//! JSON kube-sim stores.

use std::collections::HashMap;

use serde_json::Value;

use crate::go_types::STRUCTS;
use crate::gojson::write_string;

/// Which object a value comes from. The old object was decoded from storage
/// (protobuf), where an empty list or map decodes as nil; the new one from
/// JSON, where `[]` and `{}` stay empty but not nil.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Old,
    New,
}

/// `diff.Diff(old, new)` of the internal struct `go_type` (e.g.
/// `core.PersistentVolumeClaimSpec`) given the v1 JSON of each side.
pub fn diff(go_type: &str, old: &Value, new: &Value) -> String {
    let a = marshal_indent(go_type, old, Side::Old);
    let b = marshal_indent(go_type, new, Side::New);
    unified_diff(&split_lines(&a), &split_lines(&b), 3)
}

/// `apiequality.Semantic.DeepEqual` of two internal structs given as v1
/// JSON: equal when they marshal alike, nil and empty lists and maps being
/// equal, as are an absent field and its zero value. (A quantity compares
/// by its canonical form here, not by value.)
pub fn semantically_equal(go_type: &str, a: &Value, b: &Value) -> bool {
    marshal_indent(go_type, a, Side::Old) == marshal_indent(go_type, b, Side::Old)
}

/// Whether a v1 value decodes to Go's nil or zero value where storage's
/// protobuf drops it: null, an empty list or map.
pub fn is_go_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(m) => m.is_empty(),
        _ => false,
    }
}

/// `json.MarshalIndent(v, "", " ")` of the internal struct `go_type` whose v1
/// JSON is `v`.
pub fn marshal_indent(go_type: &str, v: &Value, side: Side) -> String {
    let mut out = String::new();
    write_value(&mut out, go_type, Some(v), None, side, 0);
    out
}

fn fields(go_type: &str) -> &'static [crate::go_types::GoField] {
    STRUCTS
        .iter()
        .find(|(n, _)| *n == go_type)
        .map(|(_, f)| *f)
        .unwrap_or_else(|| panic!("go_types has no {go_type}"))
}

fn newline(out: &mut String, depth: usize) {
    out.push('\n');
    for _ in 0..depth {
        out.push(' ');
    }
}

/// Whether encoding/json's `omitempty` drops a field of type `ty` holding
/// `v` (absent and null are Go's zero value).
fn is_empty(ty: &str, v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => true,
        Some(v) => match ty {
            "string" | "time" => v.as_str() == Some(""),
            "bool" => v == &Value::Bool(false),
            "int" => v.as_f64() == Some(0.0),
            t if t.starts_with("[]") => v.as_array().is_some_and(Vec::is_empty),
            t if t.starts_with("map[") => v.as_object().is_some_and(|m| m.is_empty()),
            _ => false,
        },
    }
}

/// `parent` is the v1 object holding `v`, where a field whose wire name is
/// `../name` is found (the conversion moves the pod's host namespace fields
/// into its security context).
fn write_value(
    out: &mut String,
    ty: &str,
    v: Option<&Value>,
    parent: Option<&Value>,
    side: Side,
    depth: usize,
) {
    let v = v.filter(|v| !v.is_null());
    if let Some(elem) = ty.strip_prefix('*') {
        match v {
            None => out.push_str("null"),
            Some(v) => write_value(out, elem, Some(v), parent, side, depth),
        }
    } else if let Some(elem) = ty.strip_prefix("[]") {
        match v.and_then(Value::as_array) {
            None => out.push_str("null"),
            Some(a) if a.is_empty() && side == Side::Old => out.push_str("null"),
            Some(a) if a.is_empty() => out.push_str("[]"),
            Some(a) => {
                out.push('[');
                for (i, x) in a.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    newline(out, depth + 1);
                    write_value(out, elem, Some(x), None, side, depth + 1);
                }
                newline(out, depth);
                out.push(']');
            }
        }
    } else if let Some(elem) = ty.strip_prefix("map[string]") {
        match v.and_then(Value::as_object) {
            None => out.push_str("null"),
            Some(m) if m.is_empty() && side == Side::Old => out.push_str("null"),
            Some(m) if m.is_empty() => out.push_str("{}"),
            Some(m) => {
                // encoding/json sorts map keys.
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                out.push('{');
                for (i, k) in keys.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    newline(out, depth + 1);
                    write_string(out, k);
                    out.push_str(": ");
                    write_value(out, elem, m.get(k), None, side, depth + 1);
                }
                newline(out, depth);
                out.push('}');
            }
        }
    } else {
        match ty {
            "string" | "time" => write_string(out, v.and_then(Value::as_str).unwrap_or("")),
            "bool" => out.push_str(if v.and_then(Value::as_bool).unwrap_or(false) {
                "true"
            } else {
                "false"
            }),
            "int" => out.push_str(&v.map(Value::to_string).unwrap_or_else(|| "0".into())),
            // intstr.IntOrString marshals as the one it holds.
            "intorstring" => match v {
                Some(Value::String(s)) => write_string(out, s),
                Some(n @ Value::Number(_)) => out.push_str(&n.to_string()),
                _ => out.push('0'),
            },
            "quantity" => {
                let q = v.and_then(Value::as_str).unwrap_or("0");
                write_string(
                    out,
                    &crate::quantity::canonical(q).unwrap_or_else(|| q.to_string()),
                );
            }
            name => {
                let m = v.and_then(Value::as_object);
                let mut first = true;
                out.push('{');
                for (key, omitempty, wire, fty) in fields(name) {
                    let fv = match wire.strip_prefix("../") {
                        Some(w) => parent.and_then(|p| p.get(w)),
                        None => m.and_then(|m| m.get(*wire)),
                    };
                    // Convert_v1_PodSpec_To_core_PodSpec always makes a
                    // security context (for the host namespace fields) and
                    // takes serviceAccountName from serviceAccount if unset.
                    let made;
                    let fv = match (name, *key) {
                        ("core.PodSpec", "SecurityContext") if fv.is_none_or(Value::is_null) => {
                            made = Value::Object(Default::default());
                            Some(&made)
                        }
                        ("core.PodSpec", "ServiceAccountName")
                            if fv.and_then(Value::as_str).unwrap_or("").is_empty() =>
                        {
                            m.and_then(|m| m.get("serviceAccount"))
                        }
                        _ => fv,
                    };
                    if *omitempty && is_empty(fty, fv) {
                        continue;
                    }
                    if !first {
                        out.push(',');
                    }
                    first = false;
                    newline(out, depth + 1);
                    write_string(out, key);
                    out.push_str(": ");
                    write_value(out, fty, fv, v, side, depth + 1);
                }
                if !first {
                    newline(out, depth);
                }
                out.push('}');
            }
        }
    }
}

/// go-difflib's `SplitLines`: each line with its `\n`, the last given one.
fn split_lines(s: &str) -> Vec<String> {
    let mut lines: Vec<String> = s.split_inclusive('\n').map(str::to_string).collect();
    if s.is_empty() || s.ends_with('\n') {
        lines.push(String::new());
    }
    if let Some(last) = lines.last_mut() {
        last.push('\n');
    }
    lines
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct OpCode {
    tag: u8,
    i1: usize,
    i2: usize,
    j1: usize,
    j2: usize,
}

/// go-difflib's `SequenceMatcher` (a port of Python's difflib), without a
/// junk function, with `autoJunk`.
struct Matcher<'a> {
    a: &'a [String],
    b: &'a [String],
    b2j: HashMap<&'a str, Vec<usize>>,
}

impl<'a> Matcher<'a> {
    fn new(a: &'a [String], b: &'a [String]) -> Self {
        let mut b2j: HashMap<&str, Vec<usize>> = HashMap::new();
        for (i, s) in b.iter().enumerate() {
            b2j.entry(s.as_str()).or_default().push(i);
        }
        // autoJunk: drop the popular lines of a long b.
        let n = b.len();
        if n >= 200 {
            let ntest = n / 100 + 1;
            b2j.retain(|_, idx| idx.len() <= ntest);
        }
        Matcher { a, b, b2j }
    }

    fn find_longest_match(
        &self,
        alo: usize,
        ahi: usize,
        blo: usize,
        bhi: usize,
    ) -> (usize, usize, usize) {
        let (mut besti, mut bestj, mut bestsize) = (alo, blo, 0);
        let mut j2len: HashMap<usize, usize> = HashMap::new();
        for i in alo..ahi {
            let mut newj2len: HashMap<usize, usize> = HashMap::new();
            if let Some(js) = self.b2j.get(self.a[i].as_str()) {
                for &j in js {
                    if j < blo {
                        continue;
                    }
                    if j >= bhi {
                        break;
                    }
                    let k = j
                        .checked_sub(1)
                        .and_then(|p| j2len.get(&p))
                        .copied()
                        .unwrap_or(0)
                        + 1;
                    newj2len.insert(j, k);
                    if k > bestsize {
                        (besti, bestj, bestsize) = (i + 1 - k, j + 1 - k, k);
                    }
                }
            }
            j2len = newj2len;
        }
        // No junk here (popular lines are not junk): extend by equal lines.
        while besti > alo && bestj > blo && self.a[besti - 1] == self.b[bestj - 1] {
            (besti, bestj, bestsize) = (besti - 1, bestj - 1, bestsize + 1);
        }
        while besti + bestsize < ahi
            && bestj + bestsize < bhi
            && self.a[besti + bestsize] == self.b[bestj + bestsize]
        {
            bestsize += 1;
        }
        (besti, bestj, bestsize)
    }

    fn matching_blocks(&self) -> Vec<(usize, usize, usize)> {
        // Recursion in order: left part, the match, right part.
        fn rec(
            m: &Matcher,
            alo: usize,
            ahi: usize,
            blo: usize,
            bhi: usize,
            out: &mut Vec<(usize, usize, usize)>,
        ) {
            let (i, j, k) = m.find_longest_match(alo, ahi, blo, bhi);
            if k > 0 {
                if alo < i && blo < j {
                    rec(m, alo, i, blo, j, out);
                }
                out.push((i, j, k));
                if i + k < ahi && j + k < bhi {
                    rec(m, i + k, ahi, j + k, bhi, out);
                }
            }
        }
        let mut matched = Vec::new();
        rec(self, 0, self.a.len(), 0, self.b.len(), &mut matched);
        let mut non_adjacent = Vec::new();
        let (mut i1, mut j1, mut k1) = (0, 0, 0);
        for (i2, j2, k2) in matched {
            if i1 + k1 == i2 && j1 + k1 == j2 {
                k1 += k2;
            } else {
                if k1 > 0 {
                    non_adjacent.push((i1, j1, k1));
                }
                (i1, j1, k1) = (i2, j2, k2);
            }
        }
        if k1 > 0 {
            non_adjacent.push((i1, j1, k1));
        }
        non_adjacent.push((self.a.len(), self.b.len(), 0));
        non_adjacent
    }

    fn opcodes(&self) -> Vec<OpCode> {
        let (mut i, mut j) = (0, 0);
        let mut codes = Vec::new();
        for (ai, bj, size) in self.matching_blocks() {
            let tag = if i < ai && j < bj {
                b'r'
            } else if i < ai {
                b'd'
            } else if j < bj {
                b'i'
            } else {
                0
            };
            if tag > 0 {
                codes.push(OpCode {
                    tag,
                    i1: i,
                    i2: ai,
                    j1: j,
                    j2: bj,
                });
            }
            (i, j) = (ai + size, bj + size);
            if size > 0 {
                codes.push(OpCode {
                    tag: b'e',
                    i1: ai,
                    i2: i,
                    j1: bj,
                    j2: j,
                });
            }
        }
        codes
    }

    fn grouped_opcodes(&self, n: usize) -> Vec<Vec<OpCode>> {
        let mut codes = self.opcodes();
        if codes.is_empty() {
            codes.push(OpCode {
                tag: b'e',
                i1: 0,
                i2: 1,
                j1: 0,
                j2: 1,
            });
        }
        if codes[0].tag == b'e' {
            let c = codes[0];
            codes[0] = OpCode {
                i1: c.i1.max(c.i2.saturating_sub(n)),
                j1: c.j1.max(c.j2.saturating_sub(n)),
                ..c
            };
        }
        let last = codes.len() - 1;
        if codes[last].tag == b'e' {
            let c = codes[last];
            codes[last] = OpCode {
                i2: c.i2.min(c.i1 + n),
                j2: c.j2.min(c.j1 + n),
                ..c
            };
        }
        let nn = n + n;
        let mut groups = Vec::new();
        let mut group = Vec::new();
        for c in codes {
            let (mut i1, mut j1) = (c.i1, c.j1);
            if c.tag == b'e' && c.i2 - c.i1 > nn {
                group.push(OpCode {
                    tag: b'e',
                    i1,
                    i2: c.i2.min(i1 + n),
                    j1,
                    j2: c.j2.min(j1 + n),
                });
                groups.push(std::mem::take(&mut group));
                i1 = i1.max(c.i2.saturating_sub(n));
                j1 = j1.max(c.j2.saturating_sub(n));
            }
            group.push(OpCode { i1, j1, ..c });
        }
        match group.as_slice() {
            [] => {}
            [only] if only.tag == b'e' => {}
            _ => groups.push(group),
        }
        groups
    }
}

/// go-difflib's `formatRangeUnified`.
fn format_range(start: usize, stop: usize) -> String {
    let beginning = start + 1;
    let length = stop - start;
    match length {
        1 => format!("{beginning}"),
        0 => format!("{},0", beginning - 1),
        _ => format!("{beginning},{length}"),
    }
}

/// go-difflib's `GetUnifiedDiffString` without file names.
fn unified_diff(a: &[String], b: &[String], context: usize) -> String {
    let mut out = String::new();
    let m = Matcher::new(a, b);
    for g in m.grouped_opcodes(context) {
        let (first, last) = (g[0], g[g.len() - 1]);
        out.push_str(&format!(
            "@@ -{} +{} @@\n",
            format_range(first.i1, last.i2),
            format_range(first.j1, last.j2)
        ));
        for c in g {
            if c.tag == b'e' {
                for line in &a[c.i1..c.i2] {
                    out.push(' ');
                    out.push_str(line);
                }
                continue;
            }
            if c.tag == b'r' || c.tag == b'd' {
                for line in &a[c.i1..c.i2] {
                    out.push('-');
                    out.push_str(line);
                }
            }
            if c.tag == b'r' || c.tag == b'i' {
                for line in &b[c.j1..c.j2] {
                    out.push('+');
                    out.push_str(line);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_claim_spec_marshals_with_go_names() {
        let spec = json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1.5Gi"}},
            "storageClassName": "fast", "volumeMode": "Filesystem",
            "selector": {"matchLabels": {"b": "2", "a": "1"}}});
        assert_eq!(
            marshal_indent("core.PersistentVolumeClaimSpec", &spec, Side::Old),
            r#"{
 "AccessModes": [
  "ReadWriteOnce"
 ],
 "Selector": {
  "matchLabels": {
   "a": "1",
   "b": "2"
  }
 },
 "Resources": {
  "Limits": null,
  "Requests": {
   "storage": "1536Mi"
  }
 },
 "VolumeName": "",
 "StorageClassName": "fast",
 "VolumeMode": "Filesystem",
 "DataSource": null,
 "DataSourceRef": null,
 "VolumeAttributesClassName": null
}"#
        );
    }

    #[test]
    fn unified_diff_of_two_changes_far_apart() {
        let old = json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
            "storageClassName": "fast", "volumeMode": "Filesystem"});
        let new = json!({"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}},
            "storageClassName": "slow", "volumeMode": "Filesystem", "selector": {"matchLabels": {"a": "b"}}});
        assert_eq!(
            diff("core.PersistentVolumeClaimSpec", &old, &new),
            "@@ -1,8 +1,12 @@\n {\n  \"AccessModes\": [\n-  \"ReadWriteOnce\"\n+  \"ReadWriteMany\"\n  ],\n- \"Selector\": null,\n+ \"Selector\": {\n+  \"matchLabels\": {\n+   \"a\": \"b\"\n+  }\n+ },\n  \"Resources\": {\n   \"Limits\": null,\n   \"Requests\": {\n@@ -10,7 +14,7 @@\n   }\n  },\n  \"VolumeName\": \"\",\n- \"StorageClassName\": \"fast\",\n+ \"StorageClassName\": \"slow\",\n  \"VolumeMode\": \"Filesystem\",\n  \"DataSource\": null,\n  \"DataSourceRef\": null,\n"
        );
    }

    #[test]
    fn empty_lists_are_nil_in_the_stored_object() {
        let spec = json!({"accessModes": []});
        assert!(
            marshal_indent("core.PersistentVolumeClaimSpec", &spec, Side::Old)
                .contains("\"AccessModes\": null")
        );
        assert!(
            marshal_indent("core.PersistentVolumeClaimSpec", &spec, Side::New)
                .contains("\"AccessModes\": []")
        );
    }
}
