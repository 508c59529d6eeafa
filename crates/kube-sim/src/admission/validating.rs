//! ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1, GA since
//! Kubernetes 1.30): policies and bindings are served like any resource;
//! every create, update and delete of another resource runs the bound
//! policies after the built-in admission, the strategy and validation, as
//! the `ValidatingAdmissionPolicy` plugin of kube-apiserver does
//! (`createValidation`/`updateValidation`/`deleteValidation` of the
//! registry). A delete sees the stored object as `oldObject` and `object`
//! null; a delete of an object whose graceful deletion is pending is not
//! admitted again (`rest.BeforeDelete`: gracefulPending).
//!
//! Supported, as upstream (`staging/src/k8s.io/apiserver/pkg/admission/
//! plugin/policy/validating`): `matchConstraints` and a binding's
//! `matchResources` (the matching of [`super`], with DELETE),
//! `matchConditions` (without `namespaceObject`, as upstream),
//! `variables` (lazily: an error in one is the error of the expressions
//! that use it), `validations` with `message`, `messageExpression` (trimmed;
//! not a string, empty, longer than 5120 bytes or multi-line: the `message`,
//! then `failed expression: <expression>`) and `reason` (Forbidden,
//! Invalid (the default), RequestEntityTooLarge), `auditAnnotations` (their
//! errors count under `failurePolicy: Fail`; the values are not recorded:
//! kube-sim has no audit log), `failurePolicy` Fail/Ignore, a binding's
//! `validationActions` (Deny: the request fails; Warn: a `Warning` header;
//! Audit: nothing to record it in), `paramKind` with a binding's `paramRef`
//! (by name or selector, namespace defaulting to the request's,
//! `parameterNotFoundAction`), and `request.userInfo`.
//!
//! A refusal is upstream's: `admission.NewForbidden` with the validation's
//! reason and code, the message `<resource> "<name>" is forbidden:
//! ValidatingAdmissionPolicy '<policy>' with binding '<binding>' denied
//! request: <message>` and that last part again as the one cause.
//!
//! Not emulated: type checking (`status.typeChecking` stays empty; a result
//! of the wrong type is an error when the expression runs), the cost budget,
//! `authorizer` and the CEL libraries [`super::cel`] refuses.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, LazyLock};

use ::cel::{Env, Value as CelValue};
use parking_lot::Mutex;
use serde_json::{Value, json};

use super::cel::{self, Compiled, Structs};
use super::request::{self, Warnings};
use super::versions::GROUP;
use super::{
    Attributes, Cache, cached, compile_conditions, compile_variables, default_match_resources,
    expr_error, is_policy_kind, resources_match, validate_match_resources,
};
use crate::error::{ApiError, FieldError, GroupResource};
use crate::object::meta_str;
use crate::resources::{self, ResId};
use crate::selector::LabelSelector;
use crate::store::Store;

pub const POLICIES: &str = "validatingadmissionpolicies";
pub const BINDINGS: &str = "validatingadmissionpolicybindings";

/// `supportedOperations` (sorted, as upstream lists them).
const OPERATIONS: &[&str] = &["*", "CONNECT", "CREATE", "DELETE", "UPDATE"];
/// `supportedValidationPolicyReason`.
const REASONS: &[&str] = &["Forbidden", "Invalid", "RequestEntityTooLarge"];
/// `validValidationActions`.
const ACTIONS: &[&str] = &["Audit", "Deny", "Warn"];
/// `maxAuditAnnotations`.
const MAX_AUDIT_ANNOTATIONS: usize = 20;
/// `celconfig.MaxEvaluatedMessageExpressionSizeBytes`.
const MAX_MESSAGE_BYTES: usize = 5 * 1024;

// ------------------------------------------------------------ validation

/// Defaults and validates a ValidatingAdmissionPolicy or binding; no-op
/// for other kinds.
pub(super) fn prepare(def: &resources::ResourceDef, obj: &mut Value) -> Vec<FieldError> {
    if def.group != GROUP {
        return Vec::new();
    }
    match def.resource {
        POLICIES => {
            default_policy(obj);
            validate_policy(obj)
        }
        BINDINGS => {
            default_spec(false, obj);
            validate_binding(obj)
        }
        _ => Vec::new(),
    }
}

fn default_policy(obj: &mut Value) {
    // What kube-controller-manager's validatingadmissionpolicy-status
    // controller writes after each change (kube-sim runs no type check: no
    // expressionWarnings), in the same write.
    let generation = obj.pointer("/metadata/generation").cloned();
    if let Some(m) = obj.as_object_mut() {
        let status = m.entry("status").or_insert_with(|| json!({}));
        if let Some(st) = status.as_object_mut() {
            if let Some(g) = generation {
                st.insert("observedGeneration".into(), g);
            }
            st.entry("typeChecking").or_insert_with(|| json!({}));
        }
    }
    default_spec(true, obj);
}

/// The decoder's defaulting (`SetDefaults_ValidatingAdmissionPolicySpec`,
/// `SetDefaults_MatchResources`, `SetDefaults_Rule`) of a policy
/// (`policy`) or a binding: part of the object the request's field manager
/// owns.
fn default_spec(policy: bool, obj: &mut Value) {
    if !policy {
        if let Some(mr) = obj.pointer_mut("/spec/matchResources") {
            default_match_resources(mr);
        }
        return;
    }
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    spec.entry("failurePolicy").or_insert_with(|| json!("Fail"));
    if let Some(mc) = spec.get_mut("matchConstraints") {
        default_match_resources(mc);
    }
}

/// Decoder defaults of a ValidatingAdmissionPolicy or binding; no-op for
/// other kinds.
pub(super) fn apply_defaults(def: &resources::ResourceDef, obj: &mut Value) {
    if def.group == GROUP && (def.resource == POLICIES || def.resource == BINDINGS) {
        default_spec(def.resource == POLICIES, obj);
    }
}

fn trimmed<'a>(v: &'a Value, key: &str) -> (Option<&'a str>, &'a str) {
    let raw = v.get(key).and_then(Value::as_str);
    (raw, raw.unwrap_or("").trim())
}

fn validate_policy(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let spec = obj.get("spec").cloned().unwrap_or(Value::Null);
    if let Some(v) = spec.get("failurePolicy")
        && !v.as_str().is_some_and(|s| ["Fail", "Ignore"].contains(&s))
    {
        errs.push(
            FieldError::not_supported("spec.failurePolicy", v.clone(), &["Fail", "Ignore"]).named(),
        );
    }
    if let Some(pk) = spec.get("paramKind").filter(|p| !p.is_null()) {
        for key in ["apiVersion", "kind"] {
            if pk
                .get(key)
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                errs.push(FieldError::required(&format!("spec.paramKind.{key}"), ""));
            }
        }
    }
    match spec.get("matchConstraints") {
        Some(mc) if mc.is_object() => {
            validate_match_resources("spec.matchConstraints", mc, true, OPERATIONS, &mut errs)
        }
        _ => errs.push(FieldError::required("spec.matchConstraints", "")),
    }
    if let Err(e) = compile_spec(&spec) {
        errs.extend(e);
    }
    errs
}

fn validate_binding(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let spec = obj.get("spec").cloned().unwrap_or(Value::Null);
    match spec.get("policyName").and_then(Value::as_str) {
        Some(p) if !p.is_empty() => {}
        _ => errs.push(FieldError::required("spec.policyName", "")),
    }
    if let Some(pr) = spec.get("paramRef").filter(|p| !p.is_null()) {
        let name = pr.get("name").and_then(Value::as_str).unwrap_or("");
        let selector = pr.get("selector").filter(|s| !s.is_null());
        if !name.is_empty() && selector.is_some() {
            for f in ["name", "selector"] {
                errs.push(FieldError::forbidden(
                    &format!("spec.paramRef.{f}"),
                    "name and selector are mutually exclusive",
                ));
            }
        }
        if name.is_empty() && selector.is_none() {
            errs.push(FieldError::required(
                "spec.paramRef",
                "one of name or selector must be specified",
            ));
        }
        match pr.get("parameterNotFoundAction") {
            None | Some(Value::Null) => errs.push(FieldError::required(
                "spec.paramRef.parameterNotFoundAction",
                "",
            )),
            Some(v) if v == "" => errs.push(FieldError::required(
                "spec.paramRef.parameterNotFoundAction",
                "",
            )),
            Some(v) if !v.as_str().is_some_and(|a| ["Deny", "Allow"].contains(&a)) => errs.push(
                FieldError::not_supported(
                    "spec.paramRef.parameterNotFoundAction",
                    v.clone(),
                    &["Deny", "Allow"],
                )
                .named(),
            ),
            Some(_) => {}
        }
    }
    if let Some(mr) = spec.get("matchResources").filter(|m| m.is_object()) {
        validate_match_resources("spec.matchResources", mr, false, OPERATIONS, &mut errs);
    }
    let actions = spec
        .get("validationActions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut seen: Vec<&Value> = Vec::new();
    for (i, a) in actions.iter().enumerate() {
        if !a.as_str().is_some_and(|a| ACTIONS.contains(&a)) {
            errs.push(
                FieldError::not_supported(
                    &format!("spec.validationActions[{i}]"),
                    a.clone(),
                    ACTIONS,
                )
                .named(),
            );
        }
        if seen.contains(&a) {
            errs.push(FieldError {
                named: false,
                kind: crate::error::FieldErrorType::Duplicate,
                field: format!("spec.validationActions[{i}]"),
                value: Some(a.clone()),
                detail: String::new(),
            });
        }
        seen.push(a);
    }
    if seen.iter().any(|a| *a == "Deny") && seen.iter().any(|a| *a == "Warn") {
        errs.push(FieldError::invalid(
            "spec.validationActions",
            Value::Array(actions.clone()),
            "must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)",
        ));
    }
    if seen.is_empty() {
        errs.push(FieldError::required(
            "spec.validationActions",
            "at least one validation action is required",
        ));
    }
    errs
}

// ------------------------------------------------------------ compiling

/// One `spec.validations` entry, compiled.
struct Validation {
    expr: Compiled,
    message: String,
    message_expr: Option<Compiled>,
    reason: String,
}

/// A policy's expressions, compiled, with the environment they run in.
pub struct CompiledValidating {
    env: Arc<Env>,
    variables: Vec<(String, Compiled)>,
    conditions: Vec<(String, Compiled)>,
    validations: Vec<Validation>,
    audit_annotations: Vec<Compiled>,
}

/// Compiles and checks everything of a policy's spec but its
/// failurePolicy, paramKind and matchConstraints, in upstream's order:
/// matchConditions, variables, validations, auditAnnotations.
fn compile_spec(spec: &Value) -> Result<CompiledValidating, Vec<FieldError>> {
    let mut var_errs = Vec::new();
    let (variables, declared) = compile_variables(spec, &mut var_errs);
    let mut errs = Vec::new();
    let conditions = compile_conditions(spec, &declared, &mut errs);
    errs.extend(var_errs);
    let validation_list = spec
        .get("validations")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let audit_list = spec
        .get("auditAnnotations")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if validation_list.is_empty() && audit_list.is_empty() {
        for f in ["spec.validations", "spec.auditAnnotations"] {
            errs.push(FieldError::required(
                f,
                "validations or auditAnnotations must contain at least one item",
            ));
        }
    }
    let mut validations = Vec::new();
    for (i, v) in validation_list.iter().enumerate() {
        let p = format!("spec.validations[{i}]");
        let before = errs.len();
        let (_, src) = trimmed(v, "expression");
        let expr = if src.is_empty() {
            errs.push(FieldError::required(
                &format!("{p}.expression"),
                "expression is not specified",
            ));
            None
        } else {
            cel::compile(src, Structs::None, &declared)
                .map_err(|e| errs.push(expr_error(&format!("{p}.expression"), src, &e)))
                .ok()
        };
        let message_expr = match trimmed(v, "messageExpression") {
            (Some(raw), "") if !raw.is_empty() => {
                errs.push(FieldError::invalid(
                    &format!("{p}.messageExpression"),
                    json!(raw),
                    "must be non-empty if specified",
                ));
                None
            }
            (Some(raw), _) if !raw.is_empty() => cel::compile(raw, Structs::None, &declared)
                .map_err(|e| errs.push(expr_error(&format!("{p}.messageExpression"), raw, &e)))
                .ok(),
            _ => None,
        };
        match trimmed(v, "message") {
            (Some(raw), "") if !raw.is_empty() => errs.push(FieldError::invalid(
                &format!("{p}.message"),
                json!(raw),
                "must be non-empty if specified",
            )),
            (Some(raw), m) if m.contains(['\n', '\r']) => errs.push(FieldError::invalid(
                &format!("{p}.message"),
                json!(raw),
                "must not contain line breaks",
            )),
            _ => {}
        }
        if let Some(r) = v.get("reason").filter(|r| !r.is_null())
            && !r.as_str().is_some_and(|r| REASONS.contains(&r))
        {
            errs.push(
                FieldError::not_supported(&format!("{p}.reason"), r.clone(), REASONS).named(),
            );
        }
        let Some(expr) = expr.filter(|_| errs.len() == before) else {
            continue;
        };
        validations.push(Validation {
            expr,
            message: trimmed(v, "message").1.to_string(),
            message_expr,
            reason: v
                .get("reason")
                .and_then(Value::as_str)
                .unwrap_or("Invalid")
                .to_string(),
        });
    }
    if audit_list.len() > MAX_AUDIT_ANNOTATIONS {
        errs.push(FieldError::invalid(
            "spec.auditAnnotations",
            Value::Array(audit_list.clone()),
            format!("must not have more than {MAX_AUDIT_ANNOTATIONS} auditAnnotations"),
        ));
    }
    let mut audit_annotations = Vec::new();
    let mut keys: Vec<&str> = Vec::new();
    for (i, a) in audit_list.iter().enumerate() {
        let key = a.get("key").and_then(Value::as_str).unwrap_or("");
        if key.is_empty() {
            errs.push(FieldError::required(
                &format!("spec.auditAnnotations[{i}].key"),
                "",
            ));
        } else if keys.contains(&key) {
            errs.push(FieldError {
                named: false,
                kind: crate::error::FieldErrorType::Duplicate,
                field: format!("spec.auditAnnotations[{i}].key"),
                value: Some(json!(key)),
                detail: String::new(),
            });
        }
        keys.push(key);
        let p = format!("spec.auditAnnotations[{i}].valueExpression");
        let (_, src) = trimmed(a, "valueExpression");
        if src.is_empty() {
            errs.push(FieldError::required(&p, "valueExpression is not specified"));
            continue;
        }
        match cel::compile(src, Structs::None, &declared) {
            Ok(c) => audit_annotations.push(c),
            Err(e) => errs.push(expr_error(&p, src, &e)),
        }
    }
    if !errs.is_empty() {
        return Err(errs);
    }
    let all = variables
        .iter()
        .map(|(_, c)| c)
        .chain(conditions.iter().map(|(_, c)| c))
        .chain(
            validations
                .iter()
                .flat_map(|v| std::iter::once(&v.expr).chain(v.message_expr.as_ref())),
        )
        .chain(audit_annotations.iter());
    let env =
        cel::policy_env(all).map_err(|e| vec![FieldError::invalid("spec", Value::Null, e)])?;
    Ok(CompiledValidating {
        env,
        variables,
        conditions,
        validations,
        audit_annotations,
    })
}

static COMPILED: Cache<CompiledValidating> = LazyLock::new(|| Mutex::new(HashMap::new()));

fn compiled(spec: &Value) -> Result<Arc<CompiledValidating>, String> {
    cached(&COMPILED, spec, compile_spec)
}

// ------------------------------------------------------------ evaluating

/// `PolicyDecision`: what one validation (or error) decided.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Decision {
    deny: bool,
    message: String,
    reason: String,
}

/// The decision for an evaluation error under the policy's failurePolicy.
fn error_decision(fail: bool, message: String) -> Decision {
    Decision {
        deny: fail,
        message,
        reason: String::new(),
    }
}

/// The CEL variables of one evaluation, with the policy's variables
/// evaluated in order; a failing variable is kept as its error.
struct Activation {
    object: CelValue,
    old: CelValue,
    request: CelValue,
    namespace: CelValue,
    params: CelValue,
    variables: CelValue,
    failed: BTreeMap<String, String>,
}

impl Activation {
    /// Runs `c`; the error is `expression '<source>' resulted in error: ...`.
    fn run(
        &self,
        policy: &CompiledValidating,
        c: &Compiled,
        namespace: bool,
    ) -> Result<CelValue, String> {
        self.run_raw(policy, c, namespace)
            .map_err(|e| format!("expression '{}' resulted in error: {e}", c.source))
    }

    /// Runs `c`; the error is CEL's. Lazy variables: an expression that
    /// uses a failed variable fails with that variable's error, as cel-go's
    /// composited evaluation reports it.
    fn run_raw(
        &self,
        policy: &CompiledValidating,
        c: &Compiled,
        namespace: bool,
    ) -> Result<CelValue, String> {
        if let Some(e) = c.variables.iter().find_map(|v| self.failed.get(v)) {
            return Err(e.clone());
        }
        let null = CelValue::Null;
        let vars = [
            ("object", &self.object),
            ("oldObject", &self.old),
            ("request", &self.request),
            (
                "namespaceObject",
                if namespace { &self.namespace } else { &null },
            ),
            ("params", &self.params),
            ("variables", &self.variables),
        ];
        cel::eval(&policy.env, c, &vars)
    }

    fn new(
        policy: &CompiledValidating,
        object: CelValue,
        old: CelValue,
        request: CelValue,
        namespace: CelValue,
        params: CelValue,
    ) -> Activation {
        let mut act = Activation {
            object,
            old,
            request,
            namespace,
            params,
            variables: cel::to_cel(&json!({})),
            failed: BTreeMap::new(),
        };
        let mut done = serde_json::Map::new();
        for (name, c) in &policy.variables {
            act.variables = cel::to_cel(&Value::Object(done.clone()));
            match act.run_raw(policy, c, true).and_then(|v| cel::to_json(&v)) {
                Ok(v) => {
                    done.insert(name.clone(), v);
                }
                Err(e) => {
                    act.failed.insert(name.clone(), e);
                }
            }
        }
        act.variables = cel::to_cel(&Value::Object(done));
        act
    }
}

/// `validator.Validate` for one binding and param: the decisions of the
/// validations (none when a matchCondition is false).
fn validate(policy: &CompiledValidating, act: &Activation, fail: bool) -> Vec<Decision> {
    // matchConditions: any false skips; else errors fail (aggregated).
    let mut errors = Vec::new();
    for (_, c) in &policy.conditions {
        match act.run(policy, c, false) {
            Ok(CelValue::Bool(false)) => return Vec::new(),
            Ok(_) => {}
            Err(e) => errors.push(e),
        }
    }
    if !errors.is_empty() {
        if !fail {
            return Vec::new();
        }
        let message = if errors.len() == 1 {
            errors.remove(0)
        } else {
            format!("[{}]", errors.join(", "))
        };
        return vec![error_decision(true, message)];
    }
    let mut out = Vec::new();
    for v in &policy.validations {
        match act.run(policy, &v.expr, true) {
            Err(e) => out.push(error_decision(fail, e)),
            Ok(CelValue::Bool(true)) => out.push(Decision {
                deny: false,
                message: String::new(),
                reason: String::new(),
            }),
            Ok(_) => out.push(Decision {
                deny: true,
                message: failure_message(policy, act, v),
                reason: v.reason.clone(),
            }),
        }
    }
    for c in &policy.audit_annotations {
        match act.run(policy, c, true) {
            Ok(CelValue::String(_)) | Ok(CelValue::Null) => {}
            Ok(other) if fail => out.push(error_decision(
                true,
                format!(
                    "valueExpression '{}' resulted in unsupported return type: {}. Return type must be either string or null.",
                    c.source,
                    other.type_of()
                ),
            )),
            Err(e) if fail => out.push(error_decision(true, e)),
            _ => {}
        }
    }
    out
}

/// The message of a failed validation: the messageExpression's string if
/// it is one (trimmed, not empty, at most 5120 bytes, one line), else the
/// message, else `failed expression: <expression>`.
fn failure_message(policy: &CompiledValidating, act: &Activation, v: &Validation) -> String {
    if let Some(me) = &v.message_expr
        && let Ok(CelValue::String(s)) = act.run(policy, me, true)
    {
        let s = s.trim();
        if !s.is_empty() && s.len() <= MAX_MESSAGE_BYTES && !s.contains('\n') {
            return s.to_string();
        }
    }
    if !v.message.is_empty() {
        return v.message.clone();
    }
    format!("failed expression: {}", v.expr.source.trim())
}

/// `reasonToCode`.
fn reason_code(reason: &str) -> u16 {
    match reason {
        "Forbidden" => 403,
        "Unauthorized" => 401,
        "RequestEntityTooLarge" => 413,
        _ => 422,
    }
}

/// One denial, with the policy and binding it came from.
struct Denial {
    policy: String,
    binding: Option<String>,
    decision: Decision,
}

/// A param kind's resource in this store: built-in or custom.
fn param_resource(store: &Store, api_version: &str, kind: &str) -> Option<ResId> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    resources::RESOURCES
        .iter()
        .find(|d| d.group == group && d.version == version && d.kind == kind)
        .and_then(|d| resources::find(d.group, d.version, d.resource))
        .or_else(|| {
            store
                .custom_resources()
                .into_iter()
                .find(|d| d.group == group && d.version == version && d.kind == kind)
                .and_then(|d| store.find(d.group, d.version, d.resource))
        })
}

/// `generic.CollectParams`: the params a binding selects (`[None]`
/// without a paramKind or a paramRef), or a configuration error.
fn collect_params(
    store: &Store,
    param_rid: Option<ResId>,
    param_ref: Option<&Value>,
    request_ns: &str,
) -> Result<Vec<Option<Value>>, String> {
    let (Some(rid), Some(pr)) = (param_rid, param_ref) else {
        return Ok(vec![None]);
    };
    let def = resources::def(rid);
    let ref_ns = pr.get("namespace").and_then(Value::as_str).unwrap_or("");
    if !ref_ns.is_empty() && !def.namespaced {
        return Err(
            "paramRef.namespace must not be provided for a cluster-scoped `paramKind`".into(),
        );
    }
    let ns = if !def.namespaced {
        ""
    } else if !ref_ns.is_empty() {
        ref_ns
    } else if !request_ns.is_empty() {
        request_ns
    } else {
        return Err(
            "cannot use namespaced paramRef in policy binding that matches cluster-scoped resources"
                .into(),
        );
    };
    let name = pr.get("name").and_then(Value::as_str).unwrap_or("");
    let params: Vec<Option<Value>> = if !name.is_empty() {
        store
            .get(rid, ns, name)
            .ok()
            .map(|s| Some(s.value.clone()))
            .into_iter()
            .collect()
    } else {
        let sel = pr
            .get("selector")
            .map(LabelSelector::from_label_selector)
            .unwrap_or_default();
        let scope = def.namespaced.then_some(ns);
        let (items, _) = store.snapshot(rid, scope);
        items
            .iter()
            .filter(|s| sel.matches(crate::object::labels(&s.value)))
            .map(|s| Some(s.value.clone()))
            .collect()
    };
    if params.is_empty()
        && pr.get("parameterNotFoundAction").and_then(Value::as_str) == Some("Deny")
    {
        return Err(
            "no params found for policy binding with `Deny` parameterNotFoundAction".into(),
        );
    }
    Ok(params)
}

impl Store {
    /// Runs the ValidatingAdmissionPolicies bound to this request. `obj`:
    /// the new object (None on delete; `a.old` is the stored one).
    /// Warnings of `Warn` bindings go to `warnings`.
    pub(crate) fn validating_admission(
        &self,
        a: &Attributes<'_>,
        obj: Option<&Value>,
        warnings: &Warnings,
    ) -> Result<(), ApiError> {
        if is_policy_kind(a.def) {
            return Ok(());
        }
        let (Some(prid), Some(brid)) = (
            resources::find(GROUP, "v1", POLICIES),
            resources::find(GROUP, "v1", BINDINGS),
        ) else {
            return Ok(());
        };
        let (bindings, _) = self.snapshot(brid, None);
        if bindings.is_empty() {
            return Ok(());
        }
        let (policies, _) = self.snapshot(prid, None);
        let mut policies: Vec<_> = policies.iter().collect();
        policies.sort_by(|x, y| meta_str(&x.value, "name").cmp(meta_str(&y.value, "name")));
        let mut bindings: Vec<_> = bindings.iter().collect();
        bindings.sort_by(|x, y| meta_str(&x.value, "name").cmp(meta_str(&y.value, "name")));
        let ns_obj = self.namespace_object(a, obj);
        let request_ns = request::request_namespace(a, obj).to_string();
        let mut denials: Vec<Denial> = Vec::new();
        for p in policies {
            let pname = meta_str(&p.value, "name").to_string();
            let spec = p.value.get("spec").cloned().unwrap_or(Value::Null);
            let Some(mc) = spec.get("matchConstraints") else {
                continue;
            };
            if !resources_match(mc, a, obj, ns_obj.as_ref(), true) {
                continue;
            }
            let fail = spec.get("failurePolicy").and_then(Value::as_str) != Some("Ignore");
            // `addConfigError`: Fail denies, Ignore admits.
            let config_error = |binding: Option<&str>, e: String| {
                let what = if binding.is_some() {
                    "binding"
                } else {
                    "policy"
                };
                fail.then(|| Denial {
                    policy: pname.clone(),
                    binding: binding.map(str::to_string),
                    decision: error_decision(true, format!("failed to configure {what}: {e}")),
                })
            };
            let param_kind = spec.get("paramKind").filter(|k| !k.is_null());
            let param_rid = match param_kind {
                None => None,
                Some(pk) => {
                    let av = pk.get("apiVersion").and_then(Value::as_str).unwrap_or("");
                    let kind = pk.get("kind").and_then(Value::as_str).unwrap_or("");
                    match param_resource(self, av, kind) {
                        Some(r) => Some(r),
                        None => {
                            let (g, v) = av.split_once('/').unwrap_or(("", av));
                            denials.extend(config_error(
                                None,
                                format!(
                                    "failed to find resource referenced by paramKind: '{g}/{v}, Kind={kind}'"
                                ),
                            ));
                            continue;
                        }
                    }
                }
            };
            let policy = match compiled(&spec) {
                Ok(c) => c,
                Err(e) => {
                    denials.extend(config_error(None, e));
                    continue;
                }
            };
            let object = obj.map(cel::to_cel).unwrap_or(CelValue::Null);
            let old = a.old.map(cel::to_cel).unwrap_or(CelValue::Null);
            let request = cel::to_cel(&request::request_value(a, obj));
            let namespace = ns_obj.as_ref().map(cel::to_cel).unwrap_or(CelValue::Null);
            for b in &bindings {
                if b.value.pointer("/spec/policyName").and_then(Value::as_str)
                    != Some(pname.as_str())
                {
                    continue;
                }
                let bname = meta_str(&b.value, "name").to_string();
                if let Some(mr) = b
                    .value
                    .pointer("/spec/matchResources")
                    .filter(|m| !m.is_null())
                    && !resources_match(mr, a, obj, ns_obj.as_ref(), false)
                {
                    continue;
                }
                let param_ref = b.value.pointer("/spec/paramRef").filter(|r| !r.is_null());
                let params = match collect_params(self, param_rid, param_ref, &request_ns) {
                    Ok(p) => p,
                    Err(e) => {
                        denials.extend(config_error(Some(&bname), e));
                        continue;
                    }
                };
                let actions: Vec<&str> = b
                    .value
                    .pointer("/spec/validationActions")
                    .and_then(Value::as_array)
                    .map(|l| l.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                for param in params {
                    let act = Activation::new(
                        &policy,
                        object.clone(),
                        old.clone(),
                        request.clone(),
                        namespace.clone(),
                        param.as_ref().map(cel::to_cel).unwrap_or(CelValue::Null),
                    );
                    for d in validate(&policy, &act, fail) {
                        if !d.deny {
                            continue;
                        }
                        for action in &actions {
                            match *action {
                                "Deny" => denials.push(Denial {
                                    policy: pname.clone(),
                                    binding: Some(bname.clone()),
                                    decision: d.clone(),
                                }),
                                "Warn" => warnings.add(format!(
                                    "Validation failed for ValidatingAdmissionPolicy '{pname}' with binding '{bname}': {}",
                                    d.message
                                )),
                                _ => tracing::info!(
                                    policy = %pname, binding = %bname,
                                    "validating admission policy audit: {}", d.message
                                ),
                            }
                        }
                    }
                }
            }
        }
        match denials.into_iter().next() {
            None => Ok(()),
            Some(d) => Err(refusal(a, obj, d)),
        }
    }
}

/// The first denial as the API error upstream's dispatcher returns.
fn refusal(a: &Attributes<'_>, obj: Option<&Value>, d: Denial) -> ApiError {
    let message = match &d.binding {
        Some(b) => format!(
            "ValidatingAdmissionPolicy '{}' with binding '{b}' denied request: {}",
            d.policy, d.decision.message
        ),
        None => format!(
            "ValidatingAdmissionPolicy '{}' denied request: {}",
            d.policy, d.decision.message
        ),
    };
    let mut name = request::request_name(a, obj).to_string();
    if name.is_empty() {
        name = obj
            .map(|o| meta_str(o, "generateName").to_string())
            .filter(|g| !g.is_empty())
            .unwrap_or_else(|| "Unknown".into());
    }
    let gr = GroupResource::new(a.def.group, a.def.resource);
    let reason = if d.decision.reason.is_empty() {
        "Invalid".to_string()
    } else {
        d.decision.reason.clone()
    };
    let mut details = serde_json::Map::new();
    details.insert("name".into(), json!(name));
    if !gr.group.is_empty() {
        details.insert("group".into(), json!(gr.group));
    }
    details.insert("kind".into(), json!(gr.resource));
    details.insert("causes".into(), json!([{"message": message}]));
    ApiError::new(
        reason_code(&reason),
        &reason,
        format!("{gr} \"{name}\" is forbidden: {message}"),
    )
    .with_details(Value::Object(details))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(spec: Value) -> Value {
        json!({"metadata": {"name": "p"}, "spec": spec})
    }

    fn rules(ops: Value) -> Value {
        json!({"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"], "operations": ops}]})
    }

    fn errors(obj: &mut Value, resource: &str) -> Vec<String> {
        let def = resources::def(resources::find(GROUP, "v1", resource).unwrap_or(0));
        prepare(def, obj).iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_policy_is_defaulted_and_may_match_delete() {
        let mut p = policy(json!({
            "matchConstraints": rules(json!(["DELETE"])),
            "validations": [{"expression": "true"}],
        }));
        assert_eq!(errors(&mut p, POLICIES), Vec::<String>::new());
        assert_eq!(p["spec"]["failurePolicy"], "Fail");
        assert_eq!(p["spec"]["matchConstraints"]["matchPolicy"], "Equivalent");
        assert_eq!(
            p["spec"]["matchConstraints"]["resourceRules"][0]["scope"],
            "*"
        );
        assert_eq!(p["status"], json!({"typeChecking": {}}));
    }

    #[test]
    fn policy_validation_names_each_bad_field() {
        let mut p = policy(json!({
            "matchConstraints": rules(json!(["DELETE", "PATCH"])),
            "validations": [
                {"expression": "true", "message": "a\nb", "reason": "Conflict"},
                {"expression": "object.(", "messageExpression": " "},
            ],
        }));
        let errs = errors(&mut p, POLICIES);
        let want = [
            "spec.matchConstraints.resourceRules[0].operations[1]: Unsupported value: \"PATCH\": supported values: \"*\", \"CONNECT\", \"CREATE\", \"DELETE\", \"UPDATE\"",
            "spec.validations[0].message: Invalid value: \"a\\nb\": must not contain line breaks",
            "spec.validations[0].reason: Unsupported value: \"Conflict\": supported values: \"Forbidden\", \"Invalid\", \"RequestEntityTooLarge\"",
            "spec.validations[1].messageExpression: Invalid value: \" \": must be non-empty if specified",
        ];
        for w in want {
            assert!(errs.iter().any(|e| e == w), "missing {w:?} in {errs:#?}");
        }
        assert!(
            errs.iter()
                .any(|e| e.starts_with("spec.validations[1].expression: Invalid value")),
            "{errs:#?}"
        );
        let mut empty = policy(json!({"matchConstraints": rules(json!(["*"]))}));
        assert_eq!(
            errors(&mut empty, POLICIES),
            [
                "spec.validations: Required value: validations or auditAnnotations must contain at least one item",
                "spec.auditAnnotations: Required value: validations or auditAnnotations must contain at least one item",
            ]
        );
    }

    #[test]
    fn binding_validation_follows_upstream() {
        let mut b = json!({"metadata": {"name": "b"}, "spec": {"policyName": "p", "validationActions": ["Deny", "Warn", "Deny", "Log"]}});
        let errs = errors(&mut b, BINDINGS);
        assert_eq!(
            errs,
            [
                "spec.validationActions[2]: Duplicate value: \"Deny\"",
                "spec.validationActions[3]: Unsupported value: \"Log\": supported values: \"Audit\", \"Deny\", \"Warn\"",
                "spec.validationActions: Invalid value: [\"Deny\",\"Warn\",\"Deny\",\"Log\"]: must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)",
            ]
        );
        let mut none = json!({"metadata": {"name": "b"}, "spec": {"paramRef": {"name": "x"}}});
        assert_eq!(
            errors(&mut none, BINDINGS),
            [
                "spec.policyName: Required value",
                "spec.paramRef.parameterNotFoundAction: Required value",
                "spec.validationActions: Required value: at least one validation action is required",
            ]
        );
    }

    fn activation(policy: &CompiledValidating, old: Value) -> Activation {
        Activation::new(
            policy,
            CelValue::Null,
            cel::to_cel(&old),
            cel::to_cel(&json!({"operation": "DELETE"})),
            CelValue::Null,
            CelValue::Null,
        )
    }

    #[test]
    fn messages_fall_back_as_upstream() {
        let spec = json!({
            "variables": [
                {"name": "users", "expression": "oldObject.metadata.annotations['users']"},
                {"name": "bad", "expression": "oldObject.metadata.annotations['missing']"},
            ],
            "validations": [
                {"expression": "false", "messageExpression": "'in use by ' + variables.users", "reason": "Forbidden"},
                {"expression": "false", "messageExpression": "'a\\nb'", "message": "fixed"},
                {"expression": "false", "messageExpression": "1"},
                {"expression": "variables.bad == ''"},
                {"expression": "true"},
            ],
        });
        let policy = compile_spec(&spec).unwrap_or_else(|e| panic!("{e:?}"));
        let act = activation(
            &policy,
            json!({"metadata": {"annotations": {"users": "pods/web"}}}),
        );
        let got: Vec<(bool, String, String)> = validate(&policy, &act, true)
            .into_iter()
            .map(|d| (d.deny, d.message, d.reason))
            .collect();
        assert_eq!(
            got[0],
            (true, "in use by pods/web".into(), "Forbidden".into())
        );
        assert_eq!(got[1], (true, "fixed".into(), "Invalid".into()));
        assert_eq!(
            got[2],
            (true, "failed expression: false".into(), "Invalid".into())
        );
        assert!(got[3].0, "an error denies under Fail");
        assert!(
            got[3]
                .1
                .starts_with("expression 'variables.bad == ''' resulted in error: "),
            "{}",
            got[3].1
        );
        assert_eq!(got[4], (false, String::new(), String::new()));
        // Under Ignore the error admits.
        assert!(!validate(&policy, &act, false)[3].deny);
    }

    #[test]
    fn a_false_match_condition_skips_and_an_error_fails() {
        let spec = json!({
            "matchConditions": [{"name": "labelled", "expression": "has(oldObject.metadata.labels)"}],
            "validations": [{"expression": "false"}],
        });
        let policy = compile_spec(&spec).unwrap_or_else(|e| panic!("{e:?}"));
        let act = activation(&policy, json!({"metadata": {}}));
        assert_eq!(validate(&policy, &act, true), Vec::new());
        let spec = json!({
            "matchConditions": [{"name": "ns", "expression": "namespaceObject.metadata.name == 'x'"}],
            "validations": [{"expression": "false"}],
        });
        let policy = compile_spec(&spec).unwrap_or_else(|e| panic!("{e:?}"));
        let act = activation(&policy, json!({"metadata": {}}));
        let d = validate(&policy, &act, true);
        assert_eq!(d.len(), 1);
        assert!(
            d[0].deny
                && d[0].message.starts_with(
                    "expression 'namespaceObject.metadata.name == 'x'' resulted in error"
                ),
            "{d:?}"
        );
    }
}
