//! JSON documents as the apiserver's Go code holds and writes them, for the
//! messages that quote them: every number and string literal as the request
//! wrote it (serde_json reads `1e3` as `1000.0`; Go's decoders keep the
//! literal, and its JSON patch library copies it through), and objects in
//! the key order the Go code leaves them in.
//!
//! A JSON or merge patch is applied by gopkg.in/evanphx/json-patch.v4 to the
//! JSON encoding of the stored object (`runtime.Encode`: a built-in kind's
//! keys in Go struct field order, map keys sorted, a custom resource's keys
//! all sorted). The library keeps each value it does not look into as the
//! raw bytes it read (`lazyNode`), and turns each object it looks into into
//! a Go map (`partialDoc`), which `json.Marshal` writes with sorted keys:
//! the top level always, the objects on a JSON patch operation's path, the
//! objects a merge patch merges into, and (pruning nulls) a merge patch's
//! new objects. [`json_patch`] and [`merge_patch`] replay those steps on a
//! [`Node`] tree, for a patch kube-sim has applied without error.

use serde_json::Value;

use crate::openapi::schema::{Shape, TypeRef};

/// One JSON value.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    /// A scalar as written: a number literal, a string literal (quotes and
    /// escapes as written), `true`, `false` or `null`.
    Lit(String),
    /// An object. `map`: it went through a Go map (a `partialDoc`), so it
    /// is written with sorted keys, each once; otherwise as read.
    Obj {
        members: Vec<Member>,
        map: bool,
    },
    Arr(Vec<Node>),
}

/// An object member: the key (decoded), the key as written, the value.
#[derive(Debug, Clone, PartialEq)]
pub struct Member {
    pub key: String,
    raw_key: String,
    pub value: Node,
}

impl Node {
    /// Reads a JSON document, keeping every literal as written. None when it
    /// is not JSON.
    pub fn parse(text: &[u8]) -> Option<Node> {
        let text = std::str::from_utf8(text).ok()?;
        let mut p = Parser { s: text, i: 0 };
        let n = p.value(0)?;
        p.ws();
        (p.i == text.len()).then_some(n)
    }

    /// The live object as the apiserver's JSON encoder writes it: a struct's
    /// fields in Go order (`t`, the kind's schema), maps and (without a
    /// schema: unstructured) every object sorted, strings escaped as Go's
    /// encoder escapes them.
    pub fn encoded(v: &Value, t: Option<TypeRef<'_>>) -> Node {
        match v {
            Value::Null => Node::Lit("null".to_string()),
            Value::Bool(b) => Node::Lit(b.to_string()),
            Value::Number(n) => Node::Lit(go_number(n)),
            Value::String(s) => Node::Lit(go_quote(s)),
            Value::Array(a) => {
                let it = t.and_then(|t| t.items());
                Node::Arr(a.iter().map(|x| Node::encoded(x, it)).collect())
            }
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                match t.map(|t| (t, t.shape())) {
                    // RawExtension, FieldsV1, JSON: their bytes as stored.
                    Some((_, Shape::Untyped | Shape::Scalar | Shape::List)) => {
                        return Node::untyped(v);
                    }
                    Some((t, Shape::Struct)) => {
                        let order = t.go_field_order();
                        let rank = |k: &str| match order {
                            Some(o) => o.iter().position(|f| f == k).unwrap_or(o.len()),
                            None => 0,
                        };
                        keys.sort_by(|a, b| rank(a).cmp(&rank(b)).then(a.cmp(b)));
                    }
                    // A map, or unstructured JSON (a Go map).
                    _ => keys.sort(),
                }
                let members = keys
                    .into_iter()
                    .map(|k| {
                        let ft = match t {
                            Some(t) => t.field(k),
                            None => None,
                        };
                        // A member the schema does not know stays as stored.
                        let child = match (t, ft) {
                            (Some(_), None) => Node::untyped(&m[k]),
                            (_, ft) => Node::encoded(&m[k], ft),
                        };
                        Member {
                            key: k.clone(),
                            raw_key: go_quote(k),
                            value: child,
                        }
                    })
                    .collect();
                Node::Obj {
                    members,
                    map: false,
                }
            }
        }
    }

    /// `v` in its own key order.
    fn untyped(v: &Value) -> Node {
        match v {
            Value::Array(a) => Node::Arr(a.iter().map(Node::untyped).collect()),
            Value::Object(m) => Node::Obj {
                members: m
                    .iter()
                    .map(|(k, x)| Member {
                        key: k.clone(),
                        raw_key: go_quote(k),
                        value: Node::untyped(x),
                    })
                    .collect(),
                map: false,
            },
            other => Node::encoded(other, None),
        }
    }

    /// Go's `json.Marshal` of the value: compact, `<`, `>`, `&`, U+2028 and
    /// U+2029 escaped in strings, as its encoder compacts raw bytes.
    pub fn to_go_string(&self) -> String {
        let mut out = String::new();
        self.write(&mut out);
        out
    }

    fn write(&self, out: &mut String) {
        match self {
            Node::Lit(s) if s.starts_with('"') => compact_string(s, out),
            Node::Lit(s) => out.push_str(s),
            Node::Arr(a) => {
                out.push('[');
                for (i, x) in a.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    x.write(out);
                }
                out.push(']');
            }
            Node::Obj { members, map } => {
                out.push('{');
                if *map {
                    let mut sorted: Vec<&Member> = members.iter().collect();
                    sorted.sort_by(|a, b| a.key.cmp(&b.key));
                    for (i, m) in sorted.iter().enumerate() {
                        if i > 0 {
                            out.push(',');
                        }
                        out.push_str(&go_quote(&m.key));
                        out.push(':');
                        m.value.write(out);
                    }
                } else {
                    for (i, m) in members.iter().enumerate() {
                        if i > 0 {
                            out.push(',');
                        }
                        compact_string(&m.raw_key, out);
                        out.push(':');
                        m.value.write(out);
                    }
                }
                out.push('}');
            }
        }
    }

    /// The value as serde_json holds it, but a number literal serde_json
    /// cannot hold (`1e400`, which Go's decoder reads as a literal) as 0.5,
    /// a number no integer field takes.
    pub fn to_value_lossy(&self) -> Value {
        match self {
            Node::Lit(s) => serde_json::from_str(s).unwrap_or_else(|_| Value::from(0.5)),
            Node::Arr(a) => Value::Array(a.iter().map(Node::to_value_lossy).collect()),
            Node::Obj { members, .. } => Value::Object(
                members
                    .iter()
                    .map(|m| (m.key.clone(), m.value.to_value_lossy()))
                    .collect(),
            ),
        }
    }

    /// The first number literal, in document order, that overflows a
    /// float64 (`1e400`: Go's `strconv.ParseFloat` fails on it, serde_json
    /// refuses the whole document).
    pub fn first_overflowing_literal(&self) -> Option<&str> {
        match self {
            Node::Lit(s) => (!s.starts_with('"')
                && s.parse::<f64>().is_ok_and(|f| f.is_infinite()))
            .then_some(s.as_str()),
            Node::Arr(a) => a.iter().find_map(Node::first_overflowing_literal),
            Node::Obj { members, .. } => members
                .iter()
                .find_map(|m| m.value.first_overflowing_literal()),
        }
    }

    /// An object's members, in document order.
    pub fn members(&self) -> &[Member] {
        match self {
            Node::Obj { members, .. } => members,
            _ => &[],
        }
    }

    fn is_null(&self) -> bool {
        matches!(self, Node::Lit(s) if s == "null")
    }

    /// The literal at a JSON pointer (`/spec/leaseDurationSeconds`), as
    /// written; None when there is none or it is not a scalar.
    pub fn literal_at(&self, pointer: &str) -> Option<&str> {
        let mut cur = self;
        if !pointer.is_empty() {
            for t in pointer.strip_prefix('/')?.split('/') {
                let t = t.replace("~1", "/").replace("~0", "~");
                cur = cur.get(&t)?;
            }
        }
        match cur {
            Node::Lit(s) => Some(s),
            _ => None,
        }
    }

    /// An object's member (the last of its name, as Go's decoders keep) or
    /// an array's element.
    fn get(&self, key: &str) -> Option<&Node> {
        match self {
            Node::Obj { members, .. } => members
                .iter()
                .rev()
                .find(|m| m.key == key)
                .map(|m| &m.value),
            Node::Arr(a) => a.get(key.parse::<usize>().ok()?),
            Node::Lit(_) => None,
        }
    }

    fn get_mut(&mut self, key: &str) -> Option<&mut Node> {
        match self {
            Node::Obj { members, .. } => members
                .iter_mut()
                .rev()
                .find(|m| m.key == key)
                .map(|m| &mut m.value),
            Node::Arr(a) => a.get_mut(key.parse::<usize>().ok()?),
            Node::Lit(_) => None,
        }
    }

    /// `lazyNode.intoDoc`: an object read into a Go map (one member per
    /// key, the last read). False for anything else.
    fn read_into_map(&mut self) -> bool {
        let Node::Obj { members, map } = self else {
            return false;
        };
        if !*map {
            let mut kept: Vec<Member> = Vec::with_capacity(members.len());
            for m in std::mem::take(members) {
                kept.retain(|k| k.key != m.key);
                kept.push(m);
            }
            *members = kept;
            *map = true;
        }
        true
    }

    /// What a successful `lazyNode.equal` leaves behind: every object in
    /// the value read into a Go map.
    fn read_into_maps_deep(&mut self) {
        self.read_into_map();
        match self {
            Node::Obj { members, .. } => members
                .iter_mut()
                .for_each(|m| m.value.read_into_maps_deep()),
            Node::Arr(a) => a.iter_mut().for_each(Node::read_into_maps_deep),
            Node::Lit(_) => {}
        }
    }

    /// Sets a member of a map object (a `partialDoc` assignment).
    fn set_member(&mut self, key: &str, value: Node) -> Option<()> {
        let Node::Obj { members, .. } = self else {
            return None;
        };
        match members.iter_mut().find(|m| m.key == key) {
            Some(m) => m.value = value,
            None => members.push(Member {
                key: key.to_string(),
                raw_key: go_quote(key),
                value,
            }),
        }
        Some(())
    }

    fn remove_member(&mut self, key: &str) -> Option<Node> {
        let Node::Obj { members, .. } = self else {
            return None;
        };
        let i = members.iter().position(|m| m.key == key)?;
        Some(members.remove(i).value)
    }
}

/// evanphx `findObject`: the container of `path`'s last token, every object
/// on the way read into a Go map (and the top level, already one), and
/// that token.
fn find_object<'a>(doc: &'a mut Node, path: &str) -> Option<(&'a mut Node, String)> {
    let tokens: Vec<String> = path
        .strip_prefix('/')?
        .split('/')
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect();
    let (last, parents) = tokens.split_last()?;
    let mut cur = doc;
    for t in parents {
        cur = cur.get_mut(t)?;
        if !matches!(cur, Node::Arr(_)) && !cur.read_into_map() {
            return None;
        }
    }
    Some((cur, last.clone()))
}

fn array_index(a: &[Node], key: &str, adding: bool) -> Option<usize> {
    if adding && key == "-" {
        return Some(a.len());
    }
    let i: i64 = key.parse().ok()?;
    let len = a.len() as i64 + i64::from(adding);
    let i = if i < 0 { i + len } else { i };
    (0..len).contains(&i).then_some(i as usize)
}

fn op_add(doc: &mut Node, path: &str, value: Node) -> Option<()> {
    let (con, key) = find_object(doc, path)?;
    match con {
        Node::Arr(a) => {
            let i = array_index(a, &key, true)?;
            a.insert(i, value);
            Some(())
        }
        obj => obj.set_member(&key, value),
    }
}

fn op_remove(doc: &mut Node, path: &str) -> Option<Node> {
    let (con, key) = find_object(doc, path)?;
    match con {
        Node::Arr(a) => {
            let i = array_index(a, &key, false)?;
            Some(a.remove(i))
        }
        obj => obj.remove_member(&key),
    }
}

fn op_get(doc: &mut Node, path: &str) -> Option<Node> {
    let (con, key) = find_object(doc, path)?;
    match con {
        Node::Arr(a) => a.get(array_index(a, &key, false)?).cloned(),
        obj => obj.get(&key).cloned(),
    }
}

/// The JSON patch `ops` (the request body) replayed on `doc` (the encoded
/// live object) as evanphx/json-patch v4 `Patch.Apply` does; None when an
/// operation does not apply (kube-sim refused the patch before, so the
/// caller falls back).
pub fn json_patch(mut doc: Node, ops: &Node) -> Option<Node> {
    // ApplyIndent reads the document into a partialDoc.
    doc.read_into_map();
    let Node::Arr(ops) = ops else {
        return None;
    };
    for op in ops {
        let text = |k: &str| -> Option<String> {
            match op.get(k)? {
                Node::Lit(s) => serde_json::from_str::<String>(s).ok(),
                _ => None,
            }
        };
        let path = text("path").unwrap_or_default();
        let value = op.get("value").cloned();
        match text("op")?.as_str() {
            "add" => op_add(&mut doc, &path, value?)?,
            "remove" => {
                op_remove(&mut doc, &path)?;
            }
            "replace" => {
                let value = value?;
                if path.is_empty() {
                    doc = value;
                    doc.read_into_map();
                } else {
                    let (con, key) = find_object(&mut doc, &path)?;
                    match con {
                        Node::Arr(a) => {
                            let i = array_index(a, &key, false)?;
                            a[i] = value;
                        }
                        obj => obj.set_member(&key, value)?,
                    }
                }
            }
            "move" => {
                let from = text("from")?;
                let v = op_remove(&mut doc, &from)?;
                op_add(&mut doc, &path, v)?;
            }
            "copy" => {
                let from = text("from")?;
                let v = op_get(&mut doc, &from)?;
                op_add(&mut doc, &path, v)?;
            }
            "test" => {
                if path.is_empty() {
                    doc.read_into_maps_deep();
                } else {
                    let (con, key) = find_object(&mut doc, &path)?;
                    match con {
                        Node::Arr(a) => {
                            let i = array_index(a, &key, false)?;
                            a[i].read_into_maps_deep();
                        }
                        obj => {
                            if let Some(v) = obj.get_mut(&key) {
                                v.read_into_maps_deep();
                            }
                        }
                    }
                }
            }
            _ => return None,
        }
    }
    Some(doc)
}

/// The merge patch `patch` (the request body) replayed on `doc` as
/// evanphx/json-patch v4 `MergePatch` does.
pub fn merge_patch(mut doc: Node, mut patch: Node) -> Option<Node> {
    if !doc.read_into_map() || !patch.read_into_map() {
        return None;
    }
    merge_docs(&mut doc, patch);
    Some(doc)
}

fn merge_docs(doc: &mut Node, patch: Node) {
    let Node::Obj { members, .. } = patch else {
        return;
    };
    for Member { key, value, .. } in members {
        if value.is_null() {
            doc.remove_member(&key);
            continue;
        }
        let merged = match doc.get_mut(&key) {
            Some(cur) if !cur.is_null() => {
                let cur = std::mem::replace(cur, Node::Lit("null".to_string()));
                merge(cur, value)
            }
            _ => {
                let mut v = value;
                prune_nulls(&mut v);
                v
            }
        };
        doc.set_member(&key, merged);
    }
}

/// evanphx `merge`.
fn merge(mut cur: Node, mut patch: Node) -> Node {
    if !cur.read_into_map() {
        prune_nulls(&mut patch);
        return patch;
    }
    if !patch.read_into_map() {
        return patch;
    }
    merge_docs(&mut cur, patch);
    cur
}

/// evanphx `pruneNulls`: objects read into maps without their null
/// members, through arrays too (whose null elements stay).
fn prune_nulls(n: &mut Node) {
    if n.read_into_map() {
        if let Node::Obj { members, .. } = n {
            members.retain(|m| !m.value.is_null());
            members.iter_mut().for_each(|m| prune_nulls(&mut m.value));
        }
    } else if let Node::Arr(a) = n {
        a.iter_mut().filter(|x| !x.is_null()).for_each(prune_nulls);
    }
}

/// A JSON number as Go's encoder writes a decoded one (an integer as is; a
/// float64 in the shortest `strconv.FormatFloat` 'f' form, or 'e' form below
/// 1e-6 or from 1e21 on: `1e+21`, `1e-7`).
pub fn go_number(n: &serde_json::Number) -> String {
    if n.is_i64() || n.is_u64() {
        return n.to_string();
    }
    let f = n.as_f64().unwrap_or_default();
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        let e = format!("{f:e}");
        let (mantissa, exp) = e.split_once('e').unwrap_or((&e, "0"));
        let exp: i32 = exp.parse().unwrap_or(0);
        // 'e' form has two exponent digits; encoding/json then cleans
        // `e-07` up to `e-7`.
        return if exp < 0 {
            format!("{mantissa}e-{}", exp.abs())
        } else {
            format!("{mantissa}e+{exp:02}")
        };
    }
    let s = format!("{f}");
    s.strip_suffix(".0").map(str::to_string).unwrap_or(s)
}

/// Go's encoding/json quoting of a string (HTML characters escaped).
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    crate::gojson::write_string(&mut out, s);
    out
}

/// A string literal as written, with what Go's compaction of raw JSON
/// escapes (`<`, `>`, `&`, U+2028, U+2029).
fn compact_string(raw: &str, out: &mut String) {
    for c in raw.chars() {
        match c {
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            c => out.push(c),
        }
    }
}

struct Parser<'a> {
    s: &'a str,
    i: usize,
}

impl Parser<'_> {
    fn ws(&mut self) {
        let b = self.s.as_bytes();
        while self.i < b.len() && matches!(b[self.i], b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.s.as_bytes().get(self.i).copied()
    }

    fn value(&mut self, depth: usize) -> Option<Node> {
        // serde_json's limit: a body nested deeper was refused before.
        if depth > 128 {
            return None;
        }
        self.ws();
        match self.peek()? {
            b'{' => {
                self.i += 1;
                let mut members = Vec::new();
                self.ws();
                if self.peek()? == b'}' {
                    self.i += 1;
                } else {
                    loop {
                        self.ws();
                        let raw_key = self.string()?;
                        let key = serde_json::from_str::<String>(&raw_key).ok()?;
                        self.ws();
                        (self.peek()? == b':').then_some(())?;
                        self.i += 1;
                        let value = self.value(depth + 1)?;
                        members.push(Member {
                            key,
                            raw_key,
                            value,
                        });
                        self.ws();
                        match self.peek()? {
                            b',' => self.i += 1,
                            b'}' => {
                                self.i += 1;
                                break;
                            }
                            _ => return None,
                        }
                    }
                }
                Some(Node::Obj {
                    members,
                    map: false,
                })
            }
            b'[' => {
                self.i += 1;
                let mut items = Vec::new();
                self.ws();
                if self.peek()? == b']' {
                    self.i += 1;
                } else {
                    loop {
                        items.push(self.value(depth + 1)?);
                        self.ws();
                        match self.peek()? {
                            b',' => self.i += 1,
                            b']' => {
                                self.i += 1;
                                break;
                            }
                            _ => return None,
                        }
                    }
                }
                Some(Node::Arr(items))
            }
            b'"' => self.string().map(Node::Lit),
            _ => {
                let start = self.i;
                let b = self.s.as_bytes();
                while self.i < b.len()
                    && matches!(b[self.i], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9' | b'a'..=b'z')
                {
                    self.i += 1;
                }
                let lit = &self.s[start..self.i];
                let ok = matches!(lit, "true" | "false" | "null") || is_number(lit);
                ok.then(|| Node::Lit(lit.to_string()))
            }
        }
    }

    /// A string literal, quotes included, as written.
    fn string(&mut self) -> Option<String> {
        let b = self.s.as_bytes();
        (self.peek()? == b'"').then_some(())?;
        let start = self.i;
        self.i += 1;
        while self.i < b.len() {
            match b[self.i] {
                b'\\' => self.i += 2,
                b'"' => {
                    self.i += 1;
                    return Some(self.s.get(start..self.i)?.to_string());
                }
                c if c < 0x20 => return None,
                _ => self.i += 1,
            }
        }
        None
    }
}

/// The JSON number grammar.
fn is_number(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    if b.get(i) == Some(&b'-') {
        i += 1;
    }
    match b.get(i) {
        Some(b'0') => i += 1,
        Some(b'1'..=b'9') => {
            while b.get(i).is_some_and(u8::is_ascii_digit) {
                i += 1;
            }
        }
        _ => return false,
    }
    if b.get(i) == Some(&b'.') {
        i += 1;
        let d = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == d {
            return false;
        }
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let d = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == d {
            return false;
        }
    }
    i == b.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(s: &str) -> Node {
        Node::parse(s.as_bytes()).expect("JSON")
    }

    #[test]
    fn literals_are_kept_as_written() {
        let n = node(r#"{"b": {"x": 1e3, "y": -0, "s": "\u0041<"}, "a": [1.50, null]}"#);
        assert_eq!(n.literal_at("/b/x"), Some("1e3"));
        assert_eq!(n.literal_at("/b/y"), Some("-0"));
        assert_eq!(n.literal_at("/a/0"), Some("1.50"));
        assert_eq!(
            n.to_go_string(),
            r#"{"b":{"x":1e3,"y":-0,"s":"\u0041\u003c"},"a":[1.50,null]}"#
        );
        assert!(Node::parse(b"{\"a\":01}").is_none());
        assert!(Node::parse(b"{\"a\":1} x").is_none());
    }

    #[test]
    fn json_patch_sorts_what_it_walks_into() {
        let doc = node(r#"{"z":{"b":1,"a":{"d":1,"c":2}},"y":{"b":1,"a":2}}"#);
        let ops = node(r#"[{"op":"add","path":"/z/a/e","value":{"q":1E3,"p":2}}]"#);
        let out = json_patch(doc, &ops).expect("applies");
        assert_eq!(
            out.to_go_string(),
            r#"{"y":{"b":1,"a":2},"z":{"a":{"c":2,"d":1,"e":{"q":1E3,"p":2}},"b":1}}"#
        );
    }

    #[test]
    fn merge_patch_sorts_what_it_merges_and_prunes() {
        let doc = node(r#"{"s":{"b":1,"a":{"d":1,"c":2}},"m":{"b":1,"a":2}}"#);
        let patch =
            node(r#"{"s":{"n":{"z":null,"y":[{"k":null,"j":1}]},"b":2e0},"t":[{"b":null}]}"#);
        let out = merge_patch(doc, patch).expect("applies");
        assert_eq!(
            out.to_go_string(),
            r#"{"m":{"b":1,"a":2},"s":{"a":{"d":1,"c":2},"b":2e0,"n":{"y":[{"j":1}]}},"t":[{}]}"#
        );
    }

    #[test]
    fn numbers_as_go_writes_a_float64() {
        let n = |s: &str| go_number(&serde_json::from_str(s).expect("number"));
        assert_eq!(n("1000.0"), "1000");
        assert_eq!(n("1e21"), "1e+21");
        assert_eq!(n("1.5e-7"), "1.5e-7");
        assert_eq!(n("1e-10"), "1e-10");
        assert_eq!(n("0.000001"), "0.000001");
        assert_eq!(n("-2.5"), "-2.5");
        let big = serde_json::Number::from_f64(123_456_789_012_345_678_901.0).expect("finite");
        assert_eq!(go_number(&big), "123456789012345680000");
    }

    #[test]
    fn encoded_as_go_writes_it() {
        let v = json!({"spec": {"leaseDurationSeconds": 15, "holderIdentity": "a<"}, "metadata": {"name": "l", "labels": {"b": "1", "a": "2"}}, "kind": "Lease", "apiVersion": "coordination.k8s.io/v1"});
        let t = crate::openapi::schema::schemas().root("coordination.k8s.io", "v1", "Lease");
        assert_eq!(
            Node::encoded(&v, t).to_go_string(),
            r#"{"kind":"Lease","apiVersion":"coordination.k8s.io/v1","metadata":{"name":"l","labels":{"a":"2","b":"1"}},"spec":{"holderIdentity":"a\u003c","leaseDurationSeconds":15}}"#
        );
    }
}
