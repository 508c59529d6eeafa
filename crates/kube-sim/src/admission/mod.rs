//! MutatingAdmissionPolicy (KEP-3962; admissionregistration.k8s.io v1 in
//! Kubernetes 1.36, v1beta1 in 1.34-1.35): policies and bindings are served
//! like any resource ([`versions`]); every create and update of another
//! resource runs the bound policies before strategy and validation, as the
//! `MutatingAdmissionPolicy` plugin of kube-apiserver does (after the
//! built-in plugins: StorageObjectInUseProtection, DefaultStorageClass).
//!
//! Supported: `matchConstraints` and a binding's `matchResources`
//! (resourceRules and excludeResourceRules with operations, apiGroups,
//! apiVersions, resources with subresources and wildcards, resourceNames,
//! scope; namespaceSelector; objectSelector), `matchConditions`,
//! `variables`, mutations of `patchType` `JSONPatch` and
//! `ApplyConfiguration`, `failurePolicy` Fail/Ignore and
//! `reinvocationPolicy` Never/IfNeeded (one reinvocation round, when a later
//! policy changed the object). The CEL subset is described in [`cel`].
//! Refused with a 422 at create or update: `paramKind` (kube-sim has no
//! parameter resources), an expression that does not compile or uses what
//! kube-sim cannot evaluate, and the API's own validation rules.
//!
//! Differences from kube-apiserver a test could see: admission on create
//! runs after the name is generated and the uid set (upstream: before); a
//! failure under `failurePolicy: Fail` is a 500 InternalError naming the
//! policy, the binding and the cause.
//!
//! ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1) is
//! [`validating`]; both kinds of policy share the matching, the CEL and the
//! `request` ([`request`]) of this module.
//! Policies run by name; upstream runs them in Go map order, i.e. any order.

pub mod cel;
pub mod request;
pub mod validating;
pub mod versions;

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use ::cel::{Env, Value as CelValue};
use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::error::{ApiError, FieldError};
use crate::object::meta_str;
use crate::resources::{self, ResourceDef};
use crate::selector::LabelSelector;
use crate::store::Store;
use cel::{Compiled, Structs};
pub use request::{UserInfo, Warnings};
use versions::{BINDINGS, GROUP, POLICIES};

/// The operation of an admission request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
    Delete,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
        }
    }
}

/// What the write path knows about a request.
pub struct Attributes<'a> {
    pub def: &'static ResourceDef,
    pub operation: Operation,
    pub subresource: Option<&'a str>,
    /// The stored object of an update or delete.
    pub old: Option<&'a Value>,
    pub dry_run: bool,
    /// Who sent it (None: an in-process write with no user).
    pub user: Option<&'a UserInfo>,
    /// `request.options` (default: `CreateOptions`/`UpdateOptions`).
    pub options: Option<&'a Value>,
    /// One object of a DELETE of a collection (the request has no name).
    pub collection: bool,
}

/// Whether admission policies skip this kind: upstream exempts its own
/// admission configuration kinds (`IsExemptAdmissionConfigurationResource`),
/// which are all kube-sim serves of admissionregistration.k8s.io.
fn is_policy_kind(def: &ResourceDef) -> bool {
    def.group == GROUP
}

fn is_mutating_kind(def: &ResourceDef) -> bool {
    def.group == GROUP && (def.resource == POLICIES || def.resource == BINDINGS)
}

// ------------------------------------------------------------ validation

/// The operations a MutatingAdmissionPolicy may match.
const OPERATIONS: &[&str] = &["CREATE", "UPDATE", "CONNECT", "*"];

/// Defaults and validates a MutatingAdmissionPolicy or binding (the
/// registry strategy's defaulting and `ValidateMutatingAdmissionPolicy`);
/// no-op for other kinds. The errors go into the usual 422.
pub fn prepare(def: &ResourceDef, obj: &mut Value) -> Vec<FieldError> {
    if !is_mutating_kind(def) {
        return validating::prepare(def, obj);
    }
    if def.resource == POLICIES {
        default_policy(obj);
        validate_policy(obj)
    } else {
        default_binding(obj);
        validate_binding(obj)
    }
}

/// The decoder's defaulting of the admission policy kinds
/// (pkg/apis/admissionregistration/v1/defaults.go), which runs before the
/// create and update handlers record managedFields: the request's manager
/// owns the defaulted fields. ([`prepare`] defaults again, harmlessly.)
pub fn apply_defaults(def: &ResourceDef, obj: &mut Value) {
    if !is_mutating_kind(def) {
        return validating::apply_defaults(def, obj);
    }
    if def.resource == POLICIES {
        default_policy(obj);
    } else {
        default_binding(obj);
    }
}

fn default_match_resources(mr: &mut Value) {
    let Some(m) = mr.as_object_mut() else {
        return;
    };
    m.entry("matchPolicy")
        .or_insert_with(|| json!("Equivalent"));
    m.entry("namespaceSelector").or_insert_with(|| json!({}));
    m.entry("objectSelector").or_insert_with(|| json!({}));
    for key in ["resourceRules", "excludeResourceRules"] {
        if let Some(rules) = m.get_mut(key).and_then(Value::as_array_mut) {
            for r in rules {
                if let Some(r) = r.as_object_mut() {
                    r.entry("scope").or_insert_with(|| json!("*"));
                }
            }
        }
    }
}

fn default_policy(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    spec.entry("failurePolicy").or_insert_with(|| json!("Fail"));
    // (reinvocationPolicy has no default: a policy must name it.)
    if let Some(mc) = spec.get_mut("matchConstraints") {
        default_match_resources(mc);
    }
}

fn default_binding(obj: &mut Value) {
    if let Some(mr) = obj.pointer_mut("/spec/matchResources") {
        default_match_resources(mr);
    }
}

fn validate_rules(path: &str, rules: &Value, operations: &[&str], errs: &mut Vec<FieldError>) {
    let Some(rules) = rules.as_array() else {
        return;
    };
    for (i, r) in rules.iter().enumerate() {
        let p = format!("{path}[{i}]");
        for key in ["apiGroups", "apiVersions", "resources", "operations"] {
            let list = r.get(key).and_then(Value::as_array);
            match list {
                None => errs.push(FieldError::required(&format!("{p}.{key}"), "")),
                Some(l) if l.is_empty() => {
                    errs.push(FieldError::required(&format!("{p}.{key}"), ""))
                }
                Some(l) => {
                    if l.len() > 1 && l.iter().any(|v| v == "*") {
                        errs.push(FieldError::invalid(
                            &format!("{p}.{key}"),
                            Value::Array(l.clone()),
                            "if '*' is present, must not specify other values",
                        ));
                    }
                    if key == "operations" {
                        for (j, op) in l.iter().enumerate() {
                            if !op.as_str().is_some_and(|o| operations.contains(&o)) {
                                errs.push(
                                    FieldError::not_supported(
                                        &format!("{p}.{key}[{j}]"),
                                        op.clone(),
                                        operations,
                                    )
                                    .named(),
                                );
                            }
                        }
                    }
                }
            }
        }
        if let Some(s) = r.get("scope")
            && !s
                .as_str()
                .is_some_and(|s| ["Cluster", "Namespaced", "*"].contains(&s))
        {
            errs.push(
                FieldError::not_supported(
                    &format!("{p}.scope"),
                    s.clone(),
                    &["*", "Cluster", "Namespaced"],
                )
                .named(),
            );
        }
    }
}

fn validate_match_resources(
    path: &str,
    mr: &Value,
    require_rules: bool,
    operations: &[&str],
    errs: &mut Vec<FieldError>,
) {
    // validateMatchResources: the match policy first.
    if let Some(mp) = mr.get("matchPolicy")
        && !mp
            .as_str()
            .is_some_and(|s| ["Exact", "Equivalent"].contains(&s))
    {
        errs.push(
            FieldError::not_supported(
                &format!("{path}.matchPolicy"),
                mp.clone(),
                &["Equivalent", "Exact"],
            )
            .named(),
        );
    }
    match mr.get("resourceRules") {
        Some(r) if r.as_array().is_some_and(|a| !a.is_empty()) => {
            validate_rules(&format!("{path}.resourceRules"), r, operations, errs)
        }
        _ if require_rules => errs.push(FieldError::required(&format!("{path}.resourceRules"), "")),
        _ => {}
    }
    if let Some(r) = mr.get("excludeResourceRules") {
        validate_rules(&format!("{path}.excludeResourceRules"), r, operations, errs);
    }
}

/// `validateMutatingAdmissionPolicySpec`, in its order: the failure
/// policy, the match constraints, the expressions, the reinvocation policy.
fn validate_policy(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let spec = obj.get("spec").cloned().unwrap_or(Value::Null);
    let unsupported = |key: &str, valid: &[&str], errs: &mut Vec<FieldError>| {
        if let Some(v) = spec
            .get(key)
            .filter(|v| !v.is_null() && v.as_str() != Some(""))
            && !v.as_str().is_some_and(|s| valid.contains(&s))
        {
            errs.push(FieldError::not_supported(&format!("spec.{key}"), v.clone(), valid).named());
        }
    };
    unsupported("failurePolicy", &["Fail", "Ignore"], &mut errs);
    if spec.get("paramKind").is_some_and(|p| !p.is_null()) {
        errs.push(FieldError::forbidden(
            "spec.paramKind",
            "kube-sim does not support parameter resources; use a policy without paramKind",
        ));
    }
    match spec.get("matchConstraints") {
        Some(mc) if mc.is_object() => {
            validate_match_resources("spec.matchConstraints", mc, true, OPERATIONS, &mut errs)
        }
        _ => errs.push(FieldError::required("spec.matchConstraints", "")),
    }
    // Compile every expression once: a policy that cannot run is refused.
    if let Err(e) = compile_spec(&spec) {
        errs.extend(e);
    }
    if spec
        .get("reinvocationPolicy")
        .is_none_or(|v| v.is_null() || v.as_str() == Some(""))
    {
        errs.push(FieldError::required("spec.reinvocationPolicy", ""));
    }
    unsupported("reinvocationPolicy", &["IfNeeded", "Never"], &mut errs);
    errs
}

fn validate_binding(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    match obj.pointer("/spec/policyName").and_then(Value::as_str) {
        Some(p) if !p.is_empty() => {}
        _ => errs.push(FieldError::required("spec.policyName", "")),
    }
    if let Some(mr) = obj.pointer("/spec/matchResources")
        && mr.is_object()
    {
        validate_match_resources("spec.matchResources", mr, false, OPERATIONS, &mut errs);
    }
    errs
}

// ------------------------------------------------------------ compiling

/// A policy's expressions, compiled, with the environment they run in.
pub struct CompiledPolicy {
    env: Arc<Env>,
    variables: Vec<(String, Compiled)>,
    conditions: Vec<(String, Compiled)>,
    mutations: Vec<Mutation>,
}

enum MutationKind {
    JsonPatch,
    Apply,
}

struct Mutation {
    kind: MutationKind,
    expr: Compiled,
}

fn duplicate(field: &str, value: Value) -> FieldError {
    FieldError {
        named: false,
        kind: crate::error::FieldErrorType::Duplicate,
        field: field.to_string(),
        value: Some(value),
        detail: String::new(),
    }
}

fn expr_error(path: &str, src: &str, e: &str) -> FieldError {
    FieldError::invalid(path, json!(src), format!("compilation failed: {e}"))
}

/// Compiles `spec.variables`: each name with its expression, and the names
/// declared (for the expressions after them).
fn compile_variables(
    spec: &Value,
    errs: &mut Vec<FieldError>,
) -> (Vec<(String, Compiled)>, Vec<String>) {
    let mut variables = Vec::new();
    let mut declared: Vec<String> = Vec::new();
    for (i, v) in spec
        .get("variables")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let name = v.get("name").and_then(Value::as_str).unwrap_or("");
        let src = v.get("expression").and_then(Value::as_str).unwrap_or("");
        let is_ident = !name.is_empty()
            && name
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !is_ident {
            errs.push(FieldError::invalid(
                &format!("spec.variables[{i}].name"),
                json!(name),
                "name is not a valid CEL identifier",
            ));
            continue;
        }
        if declared.iter().any(|d| d == name) {
            errs.push(duplicate(&format!("spec.variables[{i}].name"), json!(name)));
            continue;
        }
        match cel::compile(src, Structs::None, &declared) {
            Ok(c) => variables.push((name.to_string(), c)),
            Err(e) => errs.push(expr_error(
                &format!("spec.variables[{i}].expression"),
                src,
                &e,
            )),
        }
        declared.push(name.to_string());
    }
    (variables, declared)
}

/// Compiles `spec.matchConditions` (at most 64, unique names).
fn compile_conditions(
    spec: &Value,
    declared: &[String],
    errs: &mut Vec<FieldError>,
) -> Vec<(String, Compiled)> {
    let mut conditions: Vec<(String, Compiled)> = Vec::new();
    let conds = spec
        .get("matchConditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if conds.len() > 64 {
        errs.push(FieldError {
            named: false,
            kind: crate::error::FieldErrorType::TooLong,
            field: "spec.matchConditions".into(),
            value: None,
            detail: "must have at most 64 items".into(),
        });
    }
    for (i, c) in conds.iter().enumerate() {
        let name = c.get("name").and_then(Value::as_str).unwrap_or("");
        let src = c.get("expression").and_then(Value::as_str).unwrap_or("");
        if name.is_empty() {
            errs.push(FieldError::required(
                &format!("spec.matchConditions[{i}].name"),
                "",
            ));
        }
        if conditions.iter().any(|(n, _)| n == name) {
            errs.push(duplicate(
                &format!("spec.matchConditions[{i}].name"),
                json!(name),
            ));
        }
        match cel::compile(src, Structs::None, declared) {
            Ok(comp) => conditions.push((name.to_string(), comp)),
            Err(e) => errs.push(expr_error(
                &format!("spec.matchConditions[{i}].expression"),
                src,
                &e,
            )),
        }
    }
    conditions
}

/// Compiles a policy spec; the errors name each expression that fails.
fn compile_spec(spec: &Value) -> Result<CompiledPolicy, Vec<FieldError>> {
    let mut errs = Vec::new();
    let (variables, declared) = compile_variables(spec, &mut errs);
    let conditions = compile_conditions(spec, &declared, &mut errs);
    let mut mutations = Vec::new();
    let muts = spec
        .get("mutations")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if muts.is_empty() {
        errs.push(FieldError::required(
            "spec.mutations",
            "mutations must contain at least one item",
        ));
    }
    for (i, m) in muts.iter().enumerate() {
        let p = format!("spec.mutations[{i}]");
        let pt = m.get("patchType").and_then(Value::as_str).unwrap_or("");
        let (kind, field, structs) = match pt {
            "JSONPatch" => (MutationKind::JsonPatch, "jsonPatch", Structs::JsonPatch),
            "ApplyConfiguration" => (MutationKind::Apply, "applyConfiguration", Structs::Object),
            "" => {
                errs.push(FieldError::required(&format!("{p}.patchType"), ""));
                continue;
            }
            other => {
                errs.push(
                    FieldError::not_supported(
                        &format!("{p}.patchType"),
                        json!(other),
                        &["ApplyConfiguration", "JSONPatch"],
                    )
                    .named(),
                );
                continue;
            }
        };
        let other_field = if field == "jsonPatch" {
            "applyConfiguration"
        } else {
            "jsonPatch"
        };
        if m.get(other_field).is_some_and(|v| !v.is_null()) {
            errs.push(FieldError::forbidden(
                &format!("{p}.{other_field}"),
                format!("must not be set when patchType is {pt}"),
            ));
        }
        let src = m
            .get(field)
            .and_then(|f| f.get("expression"))
            .and_then(Value::as_str);
        let Some(src) = src.filter(|s| !s.trim().is_empty()) else {
            errs.push(FieldError::required(&format!("{p}.{field}.expression"), ""));
            continue;
        };
        match cel::compile(src, structs, &declared) {
            Ok(expr) => mutations.push(Mutation { kind, expr }),
            Err(e) => errs.push(expr_error(&format!("{p}.{field}.expression"), src, &e)),
        }
    }
    if !errs.is_empty() {
        return Err(errs);
    }
    let all = variables
        .iter()
        .map(|(_, c)| c)
        .chain(conditions.iter().map(|(_, c)| c))
        .chain(mutations.iter().map(|m| &m.expr));
    let env =
        cel::policy_env(all).map_err(|e| vec![FieldError::invalid("spec", Value::Null, e)])?;
    Ok(CompiledPolicy {
        env,
        variables,
        conditions,
        mutations,
    })
}

/// Compiled policies by their spec's text: policies are compiled once, not
/// per request; two kube-sims in one process share a cache safely since the
/// key is the content.
type Cache<T> = LazyLock<Mutex<HashMap<String, Arc<T>>>>;

/// `spec` compiled with `compile`, from `cache` when it was before.
fn cached<T>(
    cache: &Cache<T>,
    spec: &Value,
    compile: impl FnOnce(&Value) -> Result<T, Vec<FieldError>>,
) -> Result<Arc<T>, String> {
    let key = spec.to_string();
    if let Some(c) = cache.lock().get(&key) {
        return Ok(c.clone());
    }
    let c = Arc::new(compile(spec).map_err(|errs| {
        errs.iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")
    })?);
    let mut cache = cache.lock();
    if cache.len() > 512 {
        cache.clear();
    }
    cache.insert(key, c.clone());
    Ok(c)
}

static COMPILED: Cache<CompiledPolicy> = LazyLock::new(|| Mutex::new(HashMap::new()));

fn compiled(spec: &Value) -> Result<Arc<CompiledPolicy>, String> {
    cached(&COMPILED, spec, compile_spec)
}

// ------------------------------------------------------------ matching

fn str_list(v: Option<&Value>) -> Vec<&str> {
    v.and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

fn rule_matches(rule: &Value, a: &Attributes<'_>, name: &str) -> bool {
    let op = a.operation.as_str();
    let ops = str_list(rule.get("operations"));
    if !ops.iter().any(|o| *o == "*" || *o == op) {
        return false;
    }
    let groups = str_list(rule.get("apiGroups"));
    if !groups.iter().any(|g| *g == "*" || *g == a.def.group) {
        return false;
    }
    let versions = str_list(rule.get("apiVersions"));
    if !versions.iter().any(|v| *v == "*" || *v == a.def.version) {
        return false;
    }
    let sub = a.subresource.unwrap_or("");
    let resources = str_list(rule.get("resources"));
    let res_ok = resources.iter().any(|r| {
        let (rr, rs) = r.split_once('/').unwrap_or((r, ""));
        let res = rr == "*" || rr == a.def.resource;
        let subr = if rs.is_empty() {
            sub.is_empty()
        } else {
            rs == "*" || rs == sub
        };
        res && subr
    });
    if !res_ok {
        return false;
    }
    let names = str_list(rule.get("resourceNames"));
    if !names.is_empty() && !names.contains(&name) {
        return false;
    }
    match rule.get("scope").and_then(Value::as_str).unwrap_or("*") {
        "Cluster" => !a.def.namespaced,
        "Namespaced" => a.def.namespaced,
        _ => true,
    }
}

fn labels(v: Option<&Value>) -> Option<&serde_json::Map<String, Value>> {
    v.and_then(|o| o.pointer("/metadata/labels"))
        .and_then(Value::as_object)
}

/// `matchResources` of a policy (`require_rules`) or a binding. `obj`:
/// the object of a create or update, None on delete (then the old one
/// stands for it).
fn resources_match(
    mr: &Value,
    a: &Attributes<'_>,
    obj: Option<&Value>,
    ns_obj: Option<&Value>,
    require_rules: bool,
) -> bool {
    let name = request::request_name(a, obj);
    let rules = mr.get("resourceRules").and_then(Value::as_array);
    match rules {
        Some(r) if !r.is_empty() && !r.iter().any(|rule| rule_matches(rule, a, name)) => {
            return false;
        }
        Some(r) if !r.is_empty() => {}
        _ if require_rules => return false,
        _ => {}
    }
    if mr
        .get("excludeResourceRules")
        .and_then(Value::as_array)
        .is_some_and(|r| r.iter().any(|rule| rule_matches(rule, a, name)))
    {
        return false;
    }
    if let Some(sel) = mr.get("namespaceSelector").filter(|s| !s.is_null()) {
        let sel = LabelSelector::from_label_selector(sel);
        let target = if a.def.group.is_empty() && a.def.resource == "namespaces" {
            obj.or(a.old)
        } else if a.def.namespaced {
            ns_obj
        } else {
            None
        };
        // Other cluster-scoped objects are never skipped by it.
        if (a.def.namespaced || a.def.resource == "namespaces")
            && !sel.is_empty()
            && !sel.matches(labels(target))
        {
            return false;
        }
    }
    if let Some(sel) = mr.get("objectSelector").filter(|s| !s.is_null()) {
        let sel = LabelSelector::from_label_selector(sel);
        // The new or the old object (a delete has only the old one).
        if !sel.is_empty()
            && ![obj, a.old]
                .into_iter()
                .flatten()
                .any(|o| sel.matches(labels(Some(o))))
        {
            return false;
        }
    }
    true
}

// ------------------------------------------------------------ evaluating

/// One policy with one of its bindings, matched for a request.
struct Invocation {
    policy: String,
    binding: String,
    spec: Value,
    reinvoke: bool,
    fail: bool,
}

/// Runs one invocation on `obj`. `Ok(true)` when it changed the object.
fn invoke(
    inv: &Invocation,
    a: &Attributes<'_>,
    obj: &mut Value,
    ns_obj: Option<&Value>,
) -> Result<bool, String> {
    let policy = compiled(&inv.spec)?;
    let mut current = obj.clone();
    let old = a.old.map(cel::to_cel).unwrap_or(CelValue::Null);
    let request = cel::to_cel(&request::request_value(a, Some(&current)));
    let ns_val = ns_obj.map(cel::to_cel).unwrap_or(CelValue::Null);
    let null = CelValue::Null;
    let bind = |object: &CelValue, vars: &CelValue| -> Vec<(&'static str, CelValue)> {
        vec![
            ("object", object.clone()),
            ("oldObject", old.clone()),
            ("request", request.clone()),
            ("namespaceObject", ns_val.clone()),
            ("params", null.clone()),
            ("variables", vars.clone()),
        ]
    };
    let eval_vars = |object: &CelValue| -> Result<CelValue, String> {
        let mut vars: Vec<(String, Value)> = Vec::new();
        for (name, c) in &policy.variables {
            let so_far = cel::to_cel(&Value::Object(vars.iter().cloned().collect()));
            let b = bind(object, &so_far);
            let refs: Vec<(&str, &CelValue)> = b.iter().map(|(n, v)| (*n, v)).collect();
            let v = cel::eval(&policy.env, c, &refs)
                .map_err(|e| format!("variable '{name}' resulted in error: {e}"))?;
            vars.push((name.clone(), cel::to_json(&v)?));
        }
        Ok(cel::to_cel(&Value::Object(vars.into_iter().collect())))
    };
    let object = cel::to_cel(&current);
    let vars = eval_vars(&object)?;
    // matchConditions: any false skips; else any error fails.
    let mut cond_err = None;
    for (name, c) in &policy.conditions {
        let b = bind(&object, &vars);
        let refs: Vec<(&str, &CelValue)> = b.iter().map(|(n, v)| (*n, v)).collect();
        match cel::eval(&policy.env, c, &refs) {
            Ok(CelValue::Bool(false)) => return Ok(false),
            Ok(CelValue::Bool(true)) => {}
            Ok(other) => {
                cond_err.get_or_insert(format!(
                    "matchCondition '{name}' must evaluate to bool, got {}",
                    other.type_of()
                ));
            }
            Err(e) => {
                cond_err.get_or_insert(format!("matchCondition '{name}' resulted in error: {e}"));
            }
        }
    }
    if let Some(e) = cond_err {
        return Err(e);
    }
    for m in &policy.mutations {
        let object = cel::to_cel(&current);
        let b = bind(&object, &vars);
        let refs: Vec<(&str, &CelValue)> = b.iter().map(|(n, v)| (*n, v)).collect();
        let out = cel::eval(&policy.env, &m.expr, &refs)
            .map_err(|e| format!("expression '{}' resulted in error: {e}", m.expr.source))?;
        match m.kind {
            MutationKind::JsonPatch => {
                let items = match &out {
                    CelValue::List(l) => l.clone(),
                    other => {
                        return Err(format!(
                            "JSONPatch expression must return a list of JSONPatch, got {}",
                            other.type_of()
                        ));
                    }
                };
                if let Some(bad) = items
                    .iter()
                    .find(|i| cel::struct_name(i) != Some("JSONPatch"))
                {
                    return Err(format!(
                        "JSONPatch expression must return a list of JSONPatch, got an item of type {}",
                        bad.type_of()
                    ));
                }
                let ops = cel::to_json(&out)?;
                let patch: json_patch::Patch =
                    serde_json::from_value(ops).map_err(|e| format!("invalid JSONPatch: {e}"))?;
                json_patch::patch(&mut current, &patch).map_err(|e| format!("JSON Patch: {e}"))?;
            }
            MutationKind::Apply => {
                if cel::struct_name(&out) != Some("Object") {
                    return Err(format!(
                        "ApplyConfiguration expression must return an Object, got {}",
                        cel::struct_name(&out).unwrap_or(&out.type_of().to_string())
                    ));
                }
                let config = cel::to_json(&out)?;
                let gvk = crate::patch::Gvk {
                    group: a.def.group,
                    version: a.def.version,
                    kind: a.def.kind,
                };
                current = crate::patch::merge_apply_configuration(&gvk, &current, &config)
                    .map_err(|e| format!("error applying patch: {e}"))?;
            }
        }
    }
    let changed = current != *obj;
    *obj = current;
    Ok(changed)
}

impl Store {
    /// The namespace of a namespaced request's object (`namespaceObject`),
    /// as `cel.CreateNamespaceObject` copies it: spec, status and some of
    /// the metadata (no kind, apiVersion, ownerReferences, managedFields).
    fn namespace_object(&self, a: &Attributes<'_>, obj: Option<&Value>) -> Option<Value> {
        let ns = request::request_namespace(a, obj);
        if ns.is_empty() {
            return None;
        }
        let stored =
            resources::find("", "v1", "namespaces").and_then(|rid| self.get(rid, "", ns).ok())?;
        let v = &stored.value;
        let mut meta = serde_json::Map::new();
        if let Some(m) = v.get("metadata").and_then(Value::as_object) {
            let skipped = ["selfLink", "ownerReferences", "managedFields"];
            for key in crate::object::META_ORDER
                .iter()
                .filter(|k| !skipped.contains(k))
            {
                if let Some(x) = m.get(*key) {
                    meta.insert((*key).into(), x.clone());
                }
            }
        }
        let mut out = json!({"metadata": meta});
        for key in ["spec", "status"] {
            if let Some(x) = v.get(key) {
                out[key] = x.clone();
            }
        }
        Some(out)
    }

    /// The bound MutatingAdmissionPolicies for a request, in upstream's
    /// order (policies by name, then their bindings by name).
    fn invocations(
        &self,
        a: &Attributes<'_>,
        obj: &Value,
        ns_obj: Option<&Value>,
    ) -> Vec<Invocation> {
        let (Some(prid), Some(brid)) = (
            resources::find(GROUP, "v1", POLICIES),
            resources::find(GROUP, "v1", BINDINGS),
        ) else {
            return Vec::new();
        };
        let (bindings, _) = self.snapshot(brid, None);
        if bindings.is_empty() {
            return Vec::new();
        }
        let (policies, _) = self.snapshot(prid, None);
        let mut out = Vec::new();
        let mut policies: Vec<_> = policies.iter().collect();
        policies.sort_by(|x, y| meta_str(&x.value, "name").cmp(meta_str(&y.value, "name")));
        let mut bindings: Vec<_> = bindings.iter().collect();
        bindings.sort_by(|x, y| meta_str(&x.value, "name").cmp(meta_str(&y.value, "name")));
        for p in policies {
            let pname = meta_str(&p.value, "name");
            let spec = p.value.get("spec").cloned().unwrap_or(Value::Null);
            let Some(mc) = spec.get("matchConstraints") else {
                continue;
            };
            if !resources_match(mc, a, Some(obj), ns_obj, true) {
                continue;
            }
            for b in &bindings {
                if b.value.pointer("/spec/policyName").and_then(Value::as_str) != Some(pname) {
                    continue;
                }
                if let Some(mr) = b
                    .value
                    .pointer("/spec/matchResources")
                    .filter(|m| !m.is_null())
                    && !resources_match(mr, a, Some(obj), ns_obj, false)
                {
                    continue;
                }
                out.push(Invocation {
                    policy: pname.to_string(),
                    binding: meta_str(&b.value, "name").to_string(),
                    spec: spec.clone(),
                    reinvoke: spec.get("reinvocationPolicy").and_then(Value::as_str)
                        == Some("IfNeeded"),
                    fail: spec.get("failurePolicy").and_then(Value::as_str) != Some("Ignore"),
                });
            }
        }
        out
    }

    /// Runs the MutatingAdmissionPolicies bound to this request on `obj`.
    pub(crate) fn mutating_admission(
        &self,
        a: &Attributes<'_>,
        obj: &mut Value,
    ) -> Result<(), ApiError> {
        if is_policy_kind(a.def) {
            // Policies never match the policy kinds themselves.
            return Ok(());
        }
        let ns_obj = self.namespace_object(a, Some(obj));
        let invocations = self.invocations(a, obj, ns_obj.as_ref());
        if invocations.is_empty() {
            return Ok(());
        }
        // First round; remember what each IfNeeded invocation left behind.
        // A failing policy (failurePolicy Fail) does not stop the others; the
        // request fails with every failure once they have run.
        let mut failures: Vec<String> = Vec::new();
        let mut after: Vec<Option<Value>> = Vec::with_capacity(invocations.len());
        for inv in &invocations {
            failures.extend(self.run_invocation(inv, a, obj, ns_obj.as_ref()));
            after.push(inv.reinvoke.then(|| obj.clone()));
        }
        // Reinvocation: once, for IfNeeded policies whose output a later
        // policy changed.
        if failures.is_empty() {
            for (i, inv) in invocations.iter().enumerate() {
                let changed_later = after[i].as_ref().is_some_and(|snap| snap != obj);
                if inv.reinvoke && changed_later {
                    failures.extend(self.run_invocation(inv, a, obj, ns_obj.as_ref()));
                }
            }
        }
        if failures.is_empty() {
            return Ok(());
        }
        Err(denied(a, obj, &failures))
    }

    /// Runs one invocation; a failure under failurePolicy Fail is returned
    /// (as upstream's PolicyError words it), one under Ignore is logged and
    /// leaves the object as it was.
    fn run_invocation(
        &self,
        inv: &Invocation,
        a: &Attributes<'_>,
        obj: &mut Value,
        ns_obj: Option<&Value>,
    ) -> Option<String> {
        let before = obj.clone();
        match invoke(inv, a, obj, ns_obj) {
            Ok(_) => None,
            Err(e) if !inv.fail => {
                tracing::warn!(
                    policy = %inv.policy, binding = %inv.binding,
                    "mutating admission policy failed, ignored (failurePolicy Ignore): {e}"
                );
                *obj = before;
                None
            }
            Err(e) => {
                *obj = before;
                Some(format!(
                    "policy '{}' with binding '{}' denied request: {e}",
                    inv.policy, inv.binding
                ))
            }
        }
    }
}

/// The answer to a request a policy failed (generic policy_dispatcher.go):
/// `admission.NewForbidden` (403, details naming the object and resource)
/// with the first failure as message, reason `Invalid`, and one cause per
/// failure.
fn denied(a: &Attributes<'_>, obj: &Value, failures: &[String]) -> ApiError {
    let mut d = serde_json::Map::new();
    let name = meta_str(obj, "name");
    if !name.is_empty() {
        d.insert("name".into(), json!(name));
    }
    if !a.def.group.is_empty() {
        d.insert("group".into(), json!(a.def.group));
    }
    d.insert("kind".into(), json!(a.def.resource));
    d.insert(
        "causes".into(),
        Value::Array(failures.iter().map(|m| json!({"message": m})).collect()),
    );
    ApiError::new(403, "Invalid", failures[0].clone()).with_details(Value::Object(d))
}
