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

/// The label-selector lexer's tokens (labels/selector.go `Token`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tok {
    Error,
    End,
    ClosePar,
    Comma,
    Not,
    DoubleEq,
    Eq,
    Gt,
    Ident,
    In,
    Lt,
    NotEq,
    NotIn,
    OpenPar,
}

/// `string2token`: the literals with a token of their own.
fn keyword(s: &[u8]) -> Option<Tok> {
    Some(match s {
        b")" => Tok::ClosePar,
        b"," => Tok::Comma,
        b"!" => Tok::Not,
        b"==" => Tok::DoubleEq,
        b"=" => Tok::Eq,
        b">" => Tok::Gt,
        b"in" => Tok::In,
        b"<" => Tok::Lt,
        b"!=" => Tok::NotEq,
        b"notin" => Tok::NotIn,
        b"(" => Tok::OpenPar,
        _ => return None,
    })
}

fn is_whitespace(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_special(c: u8) -> bool {
    matches!(c, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

/// The byte lexer of labels/selector.go; a NUL byte ends the input there,
/// as upstream's `read` returns 0 at the end.
struct Lexer<'a> {
    s: &'a [u8],
    pos: usize,
}

impl Lexer<'_> {
    fn read(&mut self) -> u8 {
        match self.s.get(self.pos) {
            Some(&b) => {
                self.pos += 1;
                b
            }
            None => 0,
        }
    }

    fn unread(&mut self) {
        self.pos = self.pos.saturating_sub(1);
    }

    fn text(buf: &[u8]) -> String {
        String::from_utf8_lossy(buf).into_owned()
    }

    fn id_or_keyword(&mut self) -> (Tok, String) {
        let mut buf = Vec::new();
        loop {
            let c = self.read();
            if c == 0 {
                break;
            }
            if is_special(c) || is_whitespace(c) {
                self.unread();
                break;
            }
            buf.push(c);
        }
        (keyword(&buf).unwrap_or(Tok::Ident), Self::text(&buf))
    }

    /// The longest run of special symbols that is a token (`===` lexes as
    /// `==` then `=`).
    fn special(&mut self) -> (Tok, String) {
        let mut last: Option<(Tok, String)> = None;
        let mut buf = Vec::new();
        loop {
            let c = self.read();
            if c == 0 {
                break;
            }
            if !is_special(c) {
                self.unread();
                break;
            }
            buf.push(c);
            match keyword(&buf) {
                Some(t) => last = Some((t, Self::text(&buf))),
                None if last.is_some() => {
                    self.unread();
                    break;
                }
                None => {}
            }
        }
        last.unwrap_or_else(|| {
            (
                Tok::Error,
                format!("error expected: keyword found '{}'", Self::text(&buf)),
            )
        })
    }

    fn lex(&mut self) -> (Tok, String) {
        let mut c = self.read();
        while is_whitespace(c) {
            c = self.read();
        }
        if c == 0 {
            return (Tok::End, String::new());
        }
        self.unread();
        if is_special(c) {
            self.special()
        } else {
            self.id_or_keyword()
        }
    }
}

/// In a `Values` context `in` and `notin` are identifiers.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ctx {
    KeyAndOperator,
    Values,
}

struct Parser {
    items: Vec<(Tok, String)>,
    pos: usize,
}

impl Parser {
    fn new(s: &str) -> Parser {
        let mut l = Lexer {
            s: s.as_bytes(),
            pos: 0,
        };
        let mut items = Vec::new();
        loop {
            let item = l.lex();
            let end = item.0 == Tok::End;
            items.push(item);
            if end {
                break;
            }
        }
        Parser { items, pos: 0 }
    }

    fn item(&self, i: usize, ctx: Ctx) -> (Tok, String) {
        let (t, l) = self
            .items
            .get(i)
            .cloned()
            .unwrap_or((Tok::End, String::new()));
        match t {
            Tok::In | Tok::NotIn if ctx == Ctx::Values => (Tok::Ident, l),
            _ => (t, l),
        }
    }

    fn lookahead(&self, ctx: Ctx) -> (Tok, String) {
        self.item(self.pos, ctx)
    }

    fn consume(&mut self, ctx: Ctx) -> (Tok, String) {
        self.pos += 1;
        self.item(self.pos - 1, ctx)
    }

    fn parse(&mut self) -> Result<Vec<Requirement>, String> {
        let mut reqs = Vec::new();
        loop {
            let (t, lit) = self.lookahead(Ctx::Values);
            match t {
                Tok::Ident | Tok::Not => {
                    let r = self
                        .requirement()
                        .map_err(|e| format!("unable to parse requirement: {e}"))?;
                    reqs.push(r);
                    let (t, l) = self.consume(Ctx::Values);
                    match t {
                        Tok::End => return Ok(reqs),
                        Tok::Comma => {
                            let (t2, l2) = self.lookahead(Ctx::Values);
                            if t2 != Tok::Ident && t2 != Tok::Not {
                                return Err(format!(
                                    "found '{l2}', expected: identifier after ','"
                                ));
                            }
                        }
                        _ => return Err(format!("found '{l}', expected: ',' or 'end of string'")),
                    }
                }
                Tok::End => return Ok(reqs),
                _ => {
                    return Err(format!(
                        "found '{lit}', expected: !, identifier, or 'end of string'"
                    ));
                }
            }
        }
    }

    fn requirement(&mut self) -> Result<Requirement, String> {
        let (key, op) = self.key_and_inferred_operator()?;
        if let Some(op) = op {
            return Ok(Requirement { key, op });
        }
        let (t, lit) = self.consume(Ctx::KeyAndOperator);
        let values = match t {
            Tok::In | Tok::NotIn => self.values()?,
            Tok::Eq | Tok::DoubleEq | Tok::NotEq | Tok::Gt | Tok::Lt => self.exact_value()?,
            _ => {
                return Err(format!(
                    "found '{lit}', expected: in, notin, =, ==, !=, gt, lt"
                ));
            }
        };
        new_requirement(key, t, values)
    }

    /// `parseKeyAndInferOperator`: `Some` operator for `key` and `!key`.
    fn key_and_inferred_operator(&mut self) -> Result<(String, Option<Op>), String> {
        let (mut t, mut lit) = self.consume(Ctx::Values);
        let not = t == Tok::Not;
        if not {
            (t, lit) = self.consume(Ctx::Values);
        }
        if t != Tok::Ident {
            return Err(format!("found '{lit}', expected: identifier"));
        }
        let errs = crate::validation::qualified_name(&lit);
        if !errs.is_empty() {
            // field.Invalid on the parser's nil path.
            return Err(format!(
                "<nil>: Invalid value: {}: {}",
                crate::goquote::quote(&lit),
                errs.join("; ")
            ));
        }
        let (next, _) = self.lookahead(Ctx::Values);
        if not {
            return Ok((lit, Some(Op::DoesNotExist)));
        }
        if next == Tok::End || next == Tok::Comma {
            return Ok((lit, Some(Op::Exists)));
        }
        Ok((lit, None))
    }

    /// `parseValues`: `(a,b,c)`, a sorted set.
    fn values(&mut self) -> Result<Vec<String>, String> {
        let (t, lit) = self.consume(Ctx::Values);
        if t != Tok::OpenPar {
            return Err(format!("found '{lit}' expected: '('"));
        }
        let (t, lit) = self.lookahead(Ctx::Values);
        match t {
            Tok::Ident | Tok::Comma => {
                let s = self.identifiers()?;
                let (t, _) = self.consume(Ctx::Values);
                if t != Tok::ClosePar {
                    return Err(format!("found '{lit}', expected: ')'"));
                }
                Ok(s)
            }
            Tok::ClosePar => {
                self.consume(Ctx::Values);
                Ok(vec![String::new()])
            }
            _ => Err(format!("found '{lit}', expected: ',', ')' or identifier")),
        }
    }

    /// `parseIdentifiersList`.
    fn identifiers(&mut self) -> Result<Vec<String>, String> {
        let mut s = std::collections::BTreeSet::new();
        loop {
            let (t, lit) = self.consume(Ctx::Values);
            match t {
                Tok::Ident => {
                    s.insert(lit);
                    let (t2, l2) = self.lookahead(Ctx::Values);
                    match t2 {
                        Tok::Comma => continue,
                        Tok::ClosePar => return Ok(s.into_iter().collect()),
                        _ => return Err(format!("found '{l2}', expected: ',' or ')'")),
                    }
                }
                Tok::Comma => {
                    if s.is_empty() {
                        s.insert(String::new());
                    }
                    let (t2, _) = self.lookahead(Ctx::Values);
                    if t2 == Tok::ClosePar {
                        s.insert(String::new());
                        return Ok(s.into_iter().collect());
                    }
                    if t2 == Tok::Comma {
                        s.insert(String::new());
                    }
                }
                _ => return Err(format!("found '{lit}', expected: ',', or identifier")),
            }
        }
    }

    /// `parseExactValue`: one value, possibly empty.
    fn exact_value(&mut self) -> Result<Vec<String>, String> {
        let (t, _) = self.lookahead(Ctx::Values);
        if t == Tok::End || t == Tok::Comma {
            return Ok(vec![String::new()]);
        }
        let (t, lit) = self.consume(Ctx::Values);
        if t == Tok::Ident {
            return Ok(vec![lit]);
        }
        Err(format!("found '{lit}', expected: identifier"))
    }
}

/// `NewRequirement` for a binary operator: the values' checks, aggregated
/// as `field.ErrorList.ToAggregate` prints them.
fn new_requirement(key: String, t: Tok, values: Vec<String>) -> Result<Requirement, String> {
    let mut errs = Vec::new();
    if matches!(t, Tok::Gt | Tok::Lt) {
        for (i, v) in values.iter().enumerate() {
            if v.parse::<i64>().is_err() {
                errs.push(format!(
                    "values[{i}]: Invalid value: {}: for 'Gt', 'Lt' operators, the value must be an integer",
                    crate::goquote::quote(v)
                ));
            }
        }
    }
    for (i, v) in values.iter().enumerate() {
        let e = crate::validation::label_value(v);
        if !e.is_empty() {
            errs.push(format!(
                "values[{i}][{key}]: Invalid value: {}: {}",
                crate::goquote::quote(v),
                e.join("; ")
            ));
        }
    }
    match errs.len() {
        0 => {}
        1 => return Err(errs.remove(0)),
        _ => return Err(format!("[{}]", errs.join(", "))),
    }
    let first = values.first().cloned().unwrap_or_default();
    let op = match t {
        Tok::In => Op::In(values),
        Tok::NotIn => Op::NotIn(values),
        Tok::NotEq => Op::NotEquals(first),
        Tok::Gt => Op::Gt(first.parse().unwrap_or_default()),
        Tok::Lt => Op::Lt(first.parse().unwrap_or_default()),
        _ => Op::Equals(first),
    };
    Ok(Requirement { key, op })
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

    /// `labels.Parse`, with upstream's error texts (a 400 `BadRequest`).
    pub fn parse(s: &str) -> Result<LabelSelector, ApiError> {
        let mut reqs = Parser::new(s).parse().map_err(ApiError::bad_request)?;
        reqs.sort_by(|a, b| a.key.cmp(&b.key));
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

/// `fields.splitTerms`: the terms between unescaped commas, as written
/// (a backslash and what follows it kept).
fn split_terms(s: &str) -> Vec<&str> {
    if s.is_empty() {
        return Vec::new();
    }
    let mut terms = Vec::new();
    let (mut start, mut in_slash) = (0, false);
    for (i, c) in s.char_indices() {
        if in_slash {
            in_slash = false;
        } else if c == '\\' {
            in_slash = true;
        } else if c == ',' {
            terms.push(&s[start..i]);
            start = i + 1;
        }
    }
    terms.push(&s[start..]);
    terms
}

/// `fields.splitTerm`: split at the first operator (`!=`, `==`, `=`, tried
/// in that order at each position); no escaping on the left.
fn split_term(term: &str) -> Option<(&str, &'static str, &str)> {
    for (i, _) in term.char_indices() {
        for op in ["!=", "==", "="] {
            if term[i..].starts_with(op) {
                return Some((&term[..i], op, &term[i + op.len()..]));
            }
        }
    }
    None
}

/// `fields.UnescapeValue`: `\\`, `\,` and `\=` are the escapes; any other,
/// a trailing backslash, or an unescaped `,` or `=` is an error (the
/// rune written as a number, as Go's `%v` of a rune writes it).
fn unescape_value(s: &str) -> Result<String, String> {
    if !s.contains(['\\', ',', '=']) {
        return Ok(s.to_string());
    }
    let mut out = String::with_capacity(s.len());
    let mut in_slash = false;
    for c in s.chars() {
        if in_slash {
            match c {
                '\\' | ',' | '=' => out.push(c),
                _ => {
                    return Err(format!(
                        "invalid field selector: invalid escape sequence: \\{c}"
                    ));
                }
            }
            in_slash = false;
            continue;
        }
        match c {
            '\\' => in_slash = true,
            ',' | '=' => {
                return Err(format!(
                    "invalid field selector: unescaped character in value: {}",
                    u32::from(c)
                ));
            }
            c => out.push(c),
        }
    }
    if in_slash {
        return Err("invalid field selector: invalid escape sequence: \\".into());
    }
    Ok(out)
}

/// `fields.ParseSelector`: the terms, sorted as written, empty ones
/// skipped, each `(field, equals?, unescaped value)`; the first term that
/// does not parse is the error.
pub fn parse_field_terms(s: &str) -> Result<Vec<(String, bool, String)>, String> {
    let mut parts = split_terms(s);
    parts.sort_unstable();
    let mut terms = Vec::new();
    for part in parts {
        if part.is_empty() {
            continue;
        }
        let Some((field, op, value)) = split_term(part) else {
            return Err(format!(
                "invalid selector: '{s}'; can't understand '{part}'"
            ));
        };
        terms.push((field.to_string(), op != "!=", unescape_value(value)?));
    }
    Ok(terms)
}

/// The field label conversion of a resource's kind (`ConvertFieldLabel`):
/// the error for a field it does not select on. Kinds with a conversion
/// function of their own name theirs (`field label not supported`, a
/// Job's `field label "x" not supported for Job`); the rest take
/// `metadata.name` and `metadata.namespace` only
/// (`DefaultMetaV1FieldSelectorConversion`); a custom resource's
/// `metadata.namespace` only when it is namespaced.
fn field_label_error(def: &ResourceDef, field: &str) -> Option<String> {
    let extra = def.field_labels.contains(&field);
    let (name, namespace) = (field == "metadata.name", field == "metadata.namespace");
    let (supported, message) = if !crate::resources::is_builtin(def) {
        (name || extra || (namespace && def.namespaced), None)
    } else {
        match (def.group, def.resource) {
            // Their own conversion functions, without metadata.namespace.
            ("", "nodes" | "namespaces") => (name || extra, None),
            ("", "pods" | "replicationcontrollers" | "events" | "secrets" | "services")
            | ("events.k8s.io", "events") => (name || namespace || extra, None),
            ("batch", "jobs") => (
                name || namespace || extra,
                Some(format!(
                    "field label {} not supported for Job",
                    crate::goquote::quote(field)
                )),
            ),
            _ => (
                name || namespace,
                Some(format!(
                    "{} is not a known field selector: only \"metadata.name\", \"metadata.namespace\"",
                    crate::goquote::quote(field)
                )),
            ),
        }
    };
    (!supported).then(|| message.unwrap_or_else(|| format!("field label not supported: {field}")))
}

impl FieldSelector {
    /// Parses (`fields.ParseSelector`) and converts each field, in the
    /// sorted order, as the resource's kind does (`ConvertFieldLabel`).
    pub fn parse(s: &str, def: &ResourceDef) -> Result<FieldSelector, ApiError> {
        let reqs = parse_field_terms(s).map_err(ApiError::bad_request)?;
        for (field, _, _) in &reqs {
            if let Some(m) = field_label_error(def, field) {
                return Err(ApiError::bad_request(m));
            }
        }
        Ok(FieldSelector { reqs })
    }

    /// The selector of one object by its name (`fields.OneTermEqualSelector`).
    pub fn name(name: &str) -> FieldSelector {
        FieldSelector {
            reqs: vec![("metadata.name".into(), true, name.to_string())],
        }
    }

    /// `RequiresExactMatch`: the value of the first `=` term of `field`.
    pub fn requires_exact_match(&self, field: &str) -> Option<&str> {
        self.reqs
            .iter()
            .find(|(f, eq, _)| *eq && f == field)
            .map(|(_, _, v)| v.as_str())
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

    #[test]
    fn field_selector_with_an_escaped_multibyte_character_does_not_panic() {
        // Found by the fuzz suite: a byte index after `\\` fell inside `é`.
        let pods =
            &crate::resources::RESOURCES[crate::resources::find("", "v1", "pods").unwrap_or(0)];
        let e = FieldSelector::parse("a\\é=x", pods).unwrap_err();
        assert_eq!(e.message, "field label not supported: a\\é");
    }

    #[test]
    fn label_selector_errors_are_upstreams() {
        let cases = [
            (
                "a===b",
                "unable to parse requirement: found '=', expected: identifier",
            ),
            (
                "!",
                "unable to parse requirement: found '', expected: identifier",
            ),
            ("a,", "found '', expected: identifier after ','"),
            (
                "=a",
                "found '=', expected: !, identifier, or 'end of string'",
            ),
            (
                "a in b",
                "unable to parse requirement: found 'b' expected: '('",
            ),
            (
                "a_ =b",
                "unable to parse requirement: <nil>: Invalid value: \"a_\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
            ),
        ];
        for (sel, want) in cases {
            let e = LabelSelector::parse(sel).unwrap_err();
            assert_eq!((e.code, e.message.as_str()), (400, want), "{sel}");
        }
        // Keywords are values after an operator; sets are sorted.
        let l = labels(json!({"a": "in", "b": "y"}));
        for sel in ["a=in", "a in (notin,in)", "b in (,y)", "b notin ()"] {
            let s = LabelSelector::parse(sel).unwrap_or_else(|e| panic!("{sel}: {e}"));
            assert!(s.matches(Some(&l)), "{sel}");
        }
    }
}
