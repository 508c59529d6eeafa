//! CustomResourceDefinitions (apiextensions.k8s.io/v1): what a CRD must
//! declare to be accepted, the status kube-apiserver's CRD controllers give
//! it (NamesAccepted, Established), and the validation of its custom
//! resources against the structural schema subset and CEL validation rules
//! (`x-kubernetes-validations`), as
//! staging/src/k8s.io/apiextensions-apiserver validates them.
//!
//! Supported in a schema: `type`, `properties`, `required`, `items`,
//! `additionalProperties` (a schema), `enum`, `minLength`/`maxLength`,
//! `pattern`, `minItems`/`maxItems`, `minimum`/`maximum`, `default`,
//! `x-kubernetes-preserve-unknown-fields` (unknown fields are pruned
//! elsewhere), `x-kubernetes-int-or-string`, `nullable`, and
//! `x-kubernetes-validations` with `rule`, `message`, `fieldPath`; `self` is
//! the value, `oldSelf` the old one on update (a rule that names `oldSelf` is
//! a transition rule and only runs on update). Not supported: conversion
//! webhooks (one served version is enough for kube-sim), `messageExpression`,
//! `format` checks, the CEL cost budget and type checking at create.
//! Deleting a CRD removes its custom resources at once (upstream lets each
//! one's finalizers run first).

use std::sync::Arc;

use cel::{Context, Env, Value as CelValue};
use serde_json::{Value, json};

use crate::error::FieldError;
use crate::resources::{self, CustomResource, ResId};
use kube_cel::{env, to_cel};

/// One compiled `x-kubernetes-validations` rule.
pub struct Rule {
    pub rule: String,
    pub message: String,
    pub field_path: String,
    pub transition: bool,
    /// The program instrumented for the per-call cost budget.
    program: cel::IdedExpr,
}

/// A compiled schema node.
pub struct Node {
    pub raw: Value,
    pub properties: Vec<(String, Node)>,
    pub items: Option<Box<Node>>,
    pub additional: Option<Box<Node>>,
    pub rules: Vec<Rule>,
}

/// One served version of a CRD, as a store serves it.
pub struct Served {
    pub rid: ResId,
    /// `metadata.name` of the CRD (`<plural>.<group>`).
    pub crd: String,
    pub schema: Node,
    pub columns: Vec<Value>,
    env: Arc<Env>,
}

impl std::fmt::Debug for Served {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Served")
            .field("rid", &self.rid)
            .field("crd", &self.crd)
            .finish()
    }
}

fn compile_node(raw: &Value, path: &str, env: &Env, errs: &mut Vec<FieldError>) -> Node {
    let mut node = Node {
        raw: raw.clone(),
        properties: Vec::new(),
        items: None,
        additional: None,
        rules: Vec::new(),
    };
    if let Some(props) = raw.get("properties").and_then(Value::as_object) {
        for (k, v) in props {
            let child = compile_node(v, &format!("{path}.properties[{k}]"), env, errs);
            node.properties.push((k.clone(), child));
        }
    }
    if let Some(items) = raw.get("items").filter(|i| i.is_object()) {
        node.items = Some(Box::new(compile_node(
            items,
            &format!("{path}.items"),
            env,
            errs,
        )));
    }
    if let Some(ap) = raw.get("additionalProperties").filter(|i| i.is_object()) {
        node.additional = Some(Box::new(compile_node(
            ap,
            &format!("{path}.additionalProperties"),
            env,
            errs,
        )));
    }
    if raw.get("properties").is_some() && raw.get("additionalProperties").is_some() {
        errs.push(FieldError::forbidden(
            &format!("{path}.additionalProperties"),
            "additionalProperties and properties are mutual exclusive",
        ));
    }
    let has_type = raw.get("type").and_then(Value::as_str).is_some();
    let int_or_string = raw.get("x-kubernetes-int-or-string") == Some(&json!(true));
    let preserve = raw.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(true));
    if !has_type && !int_or_string && !preserve {
        errs.push(FieldError::required(
            &format!("{path}.type"),
            "must not be empty for specified object fields",
        ));
    }
    for (i, r) in raw
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let at = format!("{path}.x-kubernetes-validations[{i}].rule");
        let Some(src) = r.get("rule").and_then(Value::as_str) else {
            errs.push(FieldError::required(&at, ""));
            continue;
        };
        match env.compile(src) {
            Ok(program) => node.rules.push(Rule {
                program: kube_cel::plan(program.expression(), &[]).expr,
                rule: src.to_string(),
                message: r
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                field_path: r
                    .get("fieldPath")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                transition: src.contains("oldSelf"),
            }),
            Err(e) => errs.push(FieldError::invalid(
                &at,
                json!(src),
                format!("compilation failed: {}", e.to_string().trim()),
            )),
        }
    }
    node
}

fn str_at<'a>(v: &'a Value, p: &str) -> &'a str {
    v.pointer(p).and_then(Value::as_str).unwrap_or("")
}

/// Validates a CRD (create and update): the parts kube-sim relies on.
pub fn validate_crd(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let group = str_at(obj, "/spec/group");
    let plural = str_at(obj, "/spec/names/plural");
    let kind = str_at(obj, "/spec/names/kind");
    if group.is_empty() {
        errs.push(FieldError::required("spec.group", ""));
    } else if !group.contains('.') {
        errs.push(FieldError::invalid(
            "spec.group",
            json!(group),
            "should be a domain with at least one dot",
        ));
    }
    if plural.is_empty() {
        errs.push(FieldError::required("spec.names.plural", ""));
    }
    if kind.is_empty() {
        errs.push(FieldError::required("spec.names.kind", ""));
    }
    let name = str_at(obj, "/metadata/name");
    if !plural.is_empty() && !group.is_empty() && name != format!("{plural}.{group}") {
        errs.push(FieldError::invalid(
            "metadata.name",
            json!(name),
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }
    match str_at(obj, "/spec/scope") {
        "Namespaced" | "Cluster" => {}
        "" => errs.push(FieldError::required("spec.scope", "")),
        other => errs.push(FieldError::not_supported(
            "spec.scope",
            json!(other),
            &["Cluster", "Namespaced"],
        )),
    }
    let versions = obj
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if versions.is_empty() {
        errs.push(FieldError::invalid(
            "spec.versions",
            json!(null),
            "must have exactly one version marked as storage version",
        ));
    } else if versions
        .iter()
        .filter(|v| v.get("storage") == Some(&json!(true)))
        .count()
        != 1
    {
        errs.push(FieldError::invalid(
            "spec.versions",
            Value::Array(versions.clone()),
            "must have exactly one version marked as storage version",
        ));
    }
    let env = match env() {
        Ok(e) => e,
        Err(e) => {
            errs.push(FieldError::invalid("spec.versions", json!(null), e));
            return errs;
        }
    };
    for (i, v) in versions.iter().enumerate() {
        let at = format!("spec.versions[{i}].schema.openAPIV3Schema");
        match v.pointer("/schema/openAPIV3Schema") {
            None => errs.push(FieldError::required(&at, "schemas are required")),
            Some(s) => {
                if s.get("type").and_then(Value::as_str) != Some("object") {
                    errs.push(FieldError::invalid(
                        &format!("{at}.type"),
                        s.get("type").cloned().unwrap_or(json!("")),
                        "must be object at the root",
                    ));
                }
                compile_node(s, &at, &env, &mut errs);
            }
        }
    }
    errs
}

/// The status kube-apiserver's naming and establishing controllers write.
pub fn status(obj: &Value, now: &str) -> Value {
    let names = obj.pointer("/spec/names").cloned().unwrap_or(json!({}));
    let mut accepted = names.clone();
    if let Some(m) = accepted.as_object_mut()
        && !m.contains_key("singular")
    {
        let kind = str_at(obj, "/spec/names/kind").to_lowercase();
        m.insert("singular".into(), json!(kind));
    }
    let stored: Vec<Value> = obj
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|v| v.get("storage") == Some(&json!(true)))
        .filter_map(|v| v.get("name").cloned())
        .collect();
    let cond = |t: &str, reason: &str, msg: &str| json!({"type": t, "status": "True", "lastTransitionTime": now, "reason": reason, "message": msg});
    json!({
        "acceptedNames": accepted,
        "conditions": [
            cond("NamesAccepted", "NoConflicts", "no conflicts found"),
            cond("Established", "InitialNamesAccepted", "the initial names have been accepted"),
        ],
        "storedVersions": stored,
    })
}

/// The served versions of a (valid) CRD, registered in the process-wide
/// resource table.
pub fn served(obj: &Value) -> Vec<Served> {
    let Ok(env) = env() else {
        return Vec::new();
    };
    let env = Arc::new(env);
    let names = |k: &str| -> Vec<String> {
        obj.pointer(&format!("/spec/names/{k}"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect()
    };
    let kind = str_at(obj, "/spec/names/kind");
    let singular = match str_at(obj, "/spec/names/singular") {
        "" => kind.to_lowercase(),
        s => s.to_string(),
    };
    let mut out = Vec::new();
    for v in obj
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if v.get("served") == Some(&json!(false)) {
            continue;
        }
        let c = CustomResource {
            group: str_at(obj, "/spec/group").into(),
            version: str_at(v, "/name").into(),
            plural: str_at(obj, "/spec/names/plural").into(),
            singular: singular.clone(),
            kind: kind.into(),
            namespaced: str_at(obj, "/spec/scope") == "Namespaced",
            short_names: names("shortNames"),
            categories: names("categories"),
            status: v.pointer("/subresources/status").is_some(),
        };
        let mut errs = Vec::new();
        let schema = compile_node(
            v.pointer("/schema/openAPIV3Schema").unwrap_or(&json!({})),
            "",
            &env,
            &mut errs,
        );
        let columns: Vec<Value> = v
            .get("additionalPrinterColumns")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_else(|| {
                vec![json!({"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"})]
            });
        COLUMNS
            .write()
            .insert((c.group.clone(), c.plural.clone()), columns.clone());
        out.push(Served {
            rid: resources::register(&c),
            crd: str_at(obj, "/metadata/name").into(),
            schema,
            columns,
            env: env.clone(),
        });
    }
    out
}

/// The printer columns of the custom resources of the process, by (group,
/// plural): the latest CRD registered wins (tests declare a kind once).
static COLUMNS: parking_lot::RwLock<std::collections::BTreeMap<(String, String), Vec<Value>>> =
    parking_lot::RwLock::new(std::collections::BTreeMap::new());

/// The `additionalPrinterColumns` of a custom resource (with upstream's
/// default `Age` column when the CRD declares none); None for built-ins.
pub fn printer_columns(group: &str, resource: &str) -> Option<Vec<Value>> {
    COLUMNS
        .read()
        .get(&(group.to_string(), resource.to_string()))
        .cloned()
}

/// The JSON type name upstream's errors print for a value.
fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn join(path: &str, field: &str) -> String {
    if path.is_empty() {
        field.to_string()
    } else {
        format!("{path}.{field}")
    }
}

impl Served {
    /// What decoding a custom resource does before anything else sees it
    /// (managedFields included): structural defaulting and pruning.
    pub fn decode(&self, obj: &mut Value) {
        default_and_prune(&self.schema, obj, true);
    }

    /// Applies `default`s, prunes unknown fields (outside
    /// `x-kubernetes-preserve-unknown-fields`) and validates a custom
    /// resource; `old` on update.
    ///
    /// As the custom resource strategy validates: the schema first; the
    /// `x-kubernetes-validations` rules only when no blocking error (a
    /// required, enum, type, maxLength or maxItems one) was found, else one
    /// error saying they were not checked.
    pub fn admit(&self, obj: &mut Value, old: Option<&Value>) -> Vec<FieldError> {
        self.decode(obj);
        let mut errs = Vec::new();
        self.walk(&self.schema, obj, old, "", true, Pass::Schema, &mut errs);
        if !has_rules(&self.schema) {
            return errs;
        }
        let blocking = errs.iter().any(|e| {
            use crate::error::FieldErrorType::*;
            matches!(
                e.kind,
                NotSupported | Required | TooLong | TooMany | TypeInvalid
            )
        });
        if blocking {
            errs.push(FieldError::invalid(
                "<nil>",
                Value::Null,
                "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
            ));
        } else {
            self.walk(&self.schema, obj, old, "", true, Pass::Rules, &mut errs);
        }
        errs
    }

    #[allow(clippy::too_many_arguments)]
    fn walk(
        &self,
        node: &Node,
        v: &Value,
        old: Option<&Value>,
        path: &str,
        root: bool,
        pass: Pass,
        errs: &mut Vec<FieldError>,
    ) {
        let raw = &node.raw;
        let field = if path.is_empty() { "<root>" } else { path };
        if v.is_null() && raw.get("nullable") == Some(&json!(true)) {
            return;
        }
        let int_or_string = raw.get("x-kubernetes-int-or-string") == Some(&json!(true));
        if let Some(t) = raw.get("type").and_then(Value::as_str) {
            let ok = match t {
                "integer" => type_name(v) == "integer",
                "number" => v.is_number(),
                other => type_name(v) == other,
            } || (int_or_string && (v.is_string() || type_name(v) == "integer"));
            if !ok {
                if pass == Pass::Schema {
                    errs.push(FieldError {
                        named: false,
                        kind: crate::error::FieldErrorType::TypeInvalid,
                        field: field.into(),
                        value: Some(json!(type_name(v))),
                        detail: format!("{field} in body must be of type {t}: {:?}", type_name(v)),
                    });
                }
                return;
            }
        }
        if pass == Pass::Schema {
            self.check_value(raw, v, field, path, errs);
        }
        match v {
            Value::Array(a) => {
                if let Some(items) = &node.items {
                    for (i, item) in a.iter().enumerate() {
                        // Lists without a map/set type have no correlation
                        // for transition rules.
                        self.walk(
                            items,
                            item,
                            None,
                            &format!("{path}[{i}]"),
                            false,
                            pass,
                            errs,
                        );
                    }
                }
            }
            Value::Object(m) => {
                for (k, child) in &node.properties {
                    if root && k == "metadata" {
                        continue;
                    }
                    if let Some(cv) = m.get(k) {
                        let ov = old.and_then(|o| o.get(k));
                        self.walk(child, cv, ov, &join(path, k), false, pass, errs);
                    }
                }
                if let Some(ap) = &node.additional {
                    for (k, cv) in m {
                        let ov = old.and_then(|o| o.get(k));
                        self.walk(ap, cv, ov, &format!("{path}[{k}]"), false, pass, errs);
                    }
                }
            }
            _ => {}
        }
        if pass == Pass::Rules {
            self.check_rules(node, v, old, field, path, errs);
        }
    }

    /// The value checks of one schema node (enum, string, number, list
    /// bounds, required properties). A string reports only its first
    /// failure (maxLength, minLength, pattern), as kube-openapi's string
    /// validator returns at the first.
    fn check_value(
        &self,
        raw: &Value,
        v: &Value,
        field: &str,
        path: &str,
        errs: &mut Vec<FieldError>,
    ) {
        if let Some(en) = raw.get("enum").and_then(Value::as_array)
            && !en.contains(v)
        {
            let allowed: Vec<String> = en
                .iter()
                .map(|e| e.as_str().map(str::to_string).unwrap_or(e.to_string()))
                .collect();
            let allowed: Vec<&str> = allowed.iter().map(String::as_str).collect();
            errs.push(FieldError::not_supported(field, v.clone(), &allowed));
        }
        match v {
            Value::String(s) => {
                let n = s.chars().count() as u64;
                if let Some(max) = raw.get("maxLength").and_then(Value::as_u64)
                    && n > max
                {
                    errs.push(FieldError {
                        named: false,
                        kind: crate::error::FieldErrorType::TooLong,
                        field: field.into(),
                        value: None,
                        detail: format!("may not be more than {max} bytes"),
                    });
                } else if let Some(min) = raw.get("minLength").and_then(Value::as_u64)
                    && n < min
                {
                    errs.push(FieldError::invalid(
                        field,
                        v.clone(),
                        format!("{field} in body should be at least {min} chars long"),
                    ));
                } else if let Some(p) = raw.get("pattern").and_then(Value::as_str)
                    && regex_matches(p, s) == Some(false)
                {
                    errs.push(FieldError::invalid(
                        field,
                        v.clone(),
                        format!("{field} in body should match '{p}'"),
                    ));
                }
            }
            Value::Number(n) => {
                let x = n.as_f64().unwrap_or(0.0);
                if let Some(min) = raw.get("minimum").and_then(Value::as_f64)
                    && x < min
                {
                    errs.push(FieldError::invalid(
                        field,
                        v.clone(),
                        format!("{field} in body should be greater than or equal to {min}"),
                    ));
                }
                if let Some(max) = raw.get("maximum").and_then(Value::as_f64)
                    && x > max
                {
                    errs.push(FieldError::invalid(
                        field,
                        v.clone(),
                        format!("{field} in body should be less than or equal to {max}"),
                    ));
                }
            }
            Value::Array(a) => {
                if let Some(min) = raw.get("minItems").and_then(Value::as_u64)
                    && (a.len() as u64) < min
                {
                    errs.push(FieldError::invalid(
                        field,
                        json!(a.len()),
                        format!("{field} in body should have at least {min} items"),
                    ));
                }
                if let Some(max) = raw.get("maxItems").and_then(Value::as_u64)
                    && (a.len() as u64) > max
                {
                    errs.push(FieldError {
                        named: false,
                        kind: crate::error::FieldErrorType::TooMany,
                        field: field.into(),
                        value: Some(json!(a.len())),
                        detail: format!("must have at most {max} items"),
                    });
                }
            }
            Value::Object(m) => {
                if let Some(req) = raw.get("required").and_then(Value::as_array) {
                    for r in req.iter().filter_map(Value::as_str) {
                        if !m.contains_key(r) {
                            errs.push(FieldError::required(&join(path, r), ""));
                        }
                    }
                }
            }
            _ => {}
        }
    }

    /// The `x-kubernetes-validations` rules of one node
    /// (apiextensions-apiserver schema/cel `Validate`): a false rule is its
    /// message (or `failed rule: <rule>`) with the value, omitted for
    /// objects and lists; an evaluation error is `<error> evaluating rule:
    /// <message or rule>`.
    fn check_rules(
        &self,
        node: &Node,
        v: &Value,
        old: Option<&Value>,
        field: &str,
        path: &str,
        errs: &mut Vec<FieldError>,
    ) {
        if node.rules.is_empty() {
            return;
        }
        let this = to_cel(v);
        let before = old.map(to_cel);
        for r in &node.rules {
            if r.transition && before.is_none() {
                continue;
            }
            let mut ctx = Context::with_env(self.env.clone());
            ctx.add_variable_from_value("self", this.clone());
            if let Some(b) = &before {
                ctx.add_variable_from_value("oldSelf", b.clone());
            }
            let at = if r.field_path.is_empty() {
                field.to_string()
            } else {
                join(path, r.field_path.trim_start_matches('.'))
            };
            let value = match v {
                Value::Object(_) | Value::Array(_) => None,
                other => Some(other.clone()),
            };
            match kube_cel::execute(&r.program, &ctx, kube_cel::Limits::PER_CALL, None)
                .map(|(v, _)| v)
            {
                Ok(CelValue::Bool(true)) => {}
                Ok(CelValue::Bool(false)) => {
                    let msg = if r.message.is_empty() {
                        format!("failed rule: {}", r.rule.trim())
                    } else {
                        r.message.trim().to_string()
                    };
                    errs.push(FieldError {
                        named: false,
                        kind: crate::error::FieldErrorType::Invalid,
                        field: at,
                        value,
                        detail: msg,
                    });
                }
                Ok(other) => errs.push(FieldError::invalid(
                    &at,
                    json!(type_name(v)),
                    format!(
                        "rule compile error: rule result must be bool, got {}: {}",
                        other.type_of(),
                        r.rule
                    ),
                )),
                // As apiextensions-apiserver words a rule past the per-call
                // cost limit.
                Err(e @ kube_cel::EvalError::Aborted(_)) => errs.push(FieldError::invalid(
                    field,
                    json!(type_name(v)),
                    format!(
                        "'{e}': no further validation rules will be run due to call cost exceeds limit for rule: {}",
                        r.rule
                    ),
                )),
                Err(e) => {
                    let rule = if r.message.is_empty() {
                        r.rule.trim()
                    } else {
                        r.message.trim()
                    };
                    let e = e.to_string();
                    let e = match e.strip_prefix("No such key: ") {
                        Some(k) => format!("no such key: {k}"),
                        None => e,
                    };
                    errs.push(FieldError::invalid(
                        field,
                        json!(type_name(v)),
                        format!("{e} evaluating rule: {rule}"),
                    ))
                }
            }
        }
    }
}

/// Which checks a walk of a custom resource makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pass {
    Schema,
    Rules,
}

/// Whether a schema has any `x-kubernetes-validations` rule (upstream has a
/// CEL validator only then).
fn has_rules(node: &Node) -> bool {
    !node.rules.is_empty()
        || node.properties.iter().any(|(_, n)| has_rules(n))
        || node.items.as_deref().is_some_and(has_rules)
        || node.additional.as_deref().is_some_and(has_rules)
}

fn regex_matches(pattern: &str, s: &str) -> Option<bool> {
    // The cel crate's `matches` brings the regex engine; use it.
    let env = Env::stdlib();
    let prog = env.compile("s.matches(p)").ok()?;
    let mut ctx = Context::with_env(Arc::new(env));
    ctx.add_variable_from_value("s", CelValue::String(Arc::new(s.to_string())));
    ctx.add_variable_from_value("p", CelValue::String(Arc::new(pattern.to_string())));
    match prog.execute(&ctx) {
        Ok(CelValue::Bool(b)) => Some(b),
        _ => None,
    }
}

/// Structural defaulting and pruning (apiextensions-apiserver
/// `structuraldefaulting.Default` and `structuralpruning.Prune`).
fn default_and_prune(node: &Node, v: &mut Value, root: bool) {
    let preserve = node.raw.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(true));
    match v {
        Value::Object(m) => {
            for (k, child) in &node.properties {
                if !m.contains_key(k)
                    && let Some(d) = child.raw.get("default")
                {
                    m.insert(k.clone(), d.clone());
                }
            }
            if let Some(ap) = &node.additional {
                for (_, cv) in m.iter_mut() {
                    default_and_prune(ap, cv, false);
                }
                return;
            }
            if !preserve {
                let keep: Vec<&str> = node.properties.iter().map(|(k, _)| k.as_str()).collect();
                m.retain(|k, _| {
                    keep.contains(&k.as_str())
                        || (root && matches!(k.as_str(), "apiVersion" | "kind" | "metadata"))
                });
            }
            for (k, child) in &node.properties {
                if root && k == "metadata" {
                    continue;
                }
                if let Some(cv) = m.get_mut(k) {
                    default_and_prune(child, cv, false);
                }
            }
        }
        Value::Array(a) => {
            if let Some(items) = &node.items {
                for item in a {
                    default_and_prune(items, item, false);
                }
            }
        }
        _ => {}
    }
}

/// A printer column's value for a custom resource (`jsonPath` of the simple
/// forms CRDs use: `.a.b`, `.a[0].b`, `.a[?(@.type=="X")].b`).
pub fn column_value(obj: &Value, json_path: &str) -> Value {
    let mut cur: Vec<&Value> = vec![obj];
    let path = json_path
        .trim()
        .trim_start_matches('{')
        .trim_end_matches('}');
    let mut rest = path.trim_start_matches('.');
    while !rest.is_empty() {
        let (seg, tail) = match rest.find(['.', '[']) {
            Some(0) if rest.starts_with('[') => {
                let end = rest.find(']').unwrap_or(rest.len() - 1);
                let inner = &rest[1..end];
                let tail = rest[end + 1..].trim_start_matches('.');
                let mut next = Vec::new();
                for c in &cur {
                    let Some(a) = c.as_array() else { continue };
                    if let Some(f) = inner.strip_prefix("?(@.").and_then(|f| f.strip_suffix(')')) {
                        let (k, want) = f.split_once("==").unwrap_or((f, ""));
                        let want = want.trim().trim_matches(['"', '\'']);
                        next.extend(
                            a.iter()
                                .filter(|e| e.get(k.trim()).and_then(Value::as_str) == Some(want)),
                        );
                    } else if let Ok(i) = inner.parse::<usize>() {
                        next.extend(a.get(i));
                    } else if inner == "*" {
                        next.extend(a.iter());
                    }
                }
                cur = next;
                rest = tail;
                continue;
            }
            Some(i) => (&rest[..i], rest[i..].trim_start_matches('.')),
            None => (rest, ""),
        };
        cur = cur.iter().filter_map(|c| c.get(seg)).collect();
        rest = tail;
    }
    match cur.as_slice() {
        [] => Value::Null,
        [one] => (*one).clone(),
        many => Value::Array(many.iter().map(|v| (*v).clone()).collect()),
    }
}

/// Upstream's cell for a printer column value.
pub fn column_cell(v: Value, ty: &str) -> Value {
    match (v, ty) {
        (Value::Null, _) => Value::Null,
        (v @ Value::String(_), _) => v,
        (Value::Array(a), _) => json!(
            a.iter()
                .map(|e| e.as_str().map(str::to_string).unwrap_or(e.to_string()))
                .collect::<Vec<_>>()
                .join(",")
        ),
        (v, _) => v,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd(schema: Value) -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.io"},
            "spec": {
                "group": "example.io",
                "scope": "Cluster",
                "names": {"plural": "widgets", "kind": "Widget"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": schema}}]
            }
        })
    }

    #[test]
    fn self_rules_and_messages() {
        let c = crd(json!({
            "type": "object",
            "properties": {"spec": {"type": "object", "required": ["size"],
                "properties": {
                    "size": {"type": "integer", "minimum": 1},
                    "mode": {"type": "string", "enum": ["A", "B"], "default": "A"},
                    "name": {"type": "string", "x-kubernetes-validations": [
                        {"rule": "self.contains('.')", "message": "must be domain-qualified"},
                        {"rule": "self == oldSelf", "message": "is immutable"}]}
                }}}
        }));
        assert!(validate_crd(&c).is_empty(), "{:?}", validate_crd(&c));
        let s = served(&c);
        let mut o = json!({"spec": {"size": 0, "name": "x", "junk": 1}});
        let errs: Vec<String> = s[0]
            .admit(&mut o, None)
            .iter()
            .map(|e| e.to_string())
            .collect();
        assert_eq!(
            errs,
            [
                "spec.size: Invalid value: 0: spec.size in body should be greater than or equal to 1",
                // A scalar's failed rule quotes its value (validation.go:
                // only objects and arrays omit it).
                "spec.name: Invalid value: \"x\": must be domain-qualified",
            ]
        );
        assert_eq!(o["spec"]["mode"], "A");
        assert!(o["spec"].get("junk").is_none());
        let old = json!({"spec": {"size": 1, "name": "a.b"}});
        let mut o = json!({"spec": {"size": 1, "name": "c.d"}});
        let errs: Vec<String> = s[0]
            .admit(&mut o, Some(&old))
            .iter()
            .map(|e| e.to_string())
            .collect();
        assert_eq!(errs, ["spec.name: Invalid value: \"c.d\": is immutable"]);
    }

    #[test]
    fn bad_rule_is_refused_at_create() {
        let c = crd(json!({"type": "object", "x-kubernetes-validations": [{"rule": "self.("}]}));
        let errs = validate_crd(&c);
        assert_eq!(errs.len(), 1);
        assert!(
            errs[0]
                .to_string()
                .starts_with("spec.versions[0].schema.openAPIV3Schema.x-kubernetes-validations[0].rule: Invalid value: \"self.(\": compilation failed"),
            "{}",
            errs[0]
        );
    }

    #[test]
    fn columns() {
        let o = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}, "spec": {"a": ["x", "y"]}});
        assert_eq!(
            column_value(&o, ".status.conditions[?(@.type==\"Ready\")].status"),
            json!("True")
        );
        assert_eq!(
            column_cell(column_value(&o, ".spec.a"), "string"),
            json!("x,y")
        );
    }
}
