//! Printer columns of ValidatingAdmissionPolicy and its binding
//! (pkg/printers/internalversion/printers.go: printValidatingAdmissionPolicy,
//! printValidatingAdmissionPolicyBinding).

use serde_json::{Value, json};

use super::{AGE, Column, Desc::Text, NAME, age, col, int_col, name, s};

pub(super) const VAP_COLUMNS: &[Column] = &[
    NAME,
    int_col(
        "Validations",
        Text("Validations indicates the number of validation rules defined in this configuration"),
    ),
    col(
        "ParamKind",
        Text("ParamKind specifies the kind of resources used to parameterize this policy"),
    ),
    AGE,
];

pub(super) fn vap_row(o: &Value, now: jiff::Timestamp) -> (Vec<Value>, Option<Value>) {
    let validations = o
        .pointer("/spec/validations")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let param_kind = match o.pointer("/spec/paramKind").filter(|p| !p.is_null()) {
        Some(p) => format!("{}/{}", s(p, "/apiVersion"), s(p, "/kind")),
        None => "<unset>".into(),
    };
    (
        vec![name(o), json!(validations), json!(param_kind), age(o, now)],
        None,
    )
}

pub(super) const VAP_BINDING_COLUMNS: &[Column] = &[
    NAME,
    col(
        "PolicyName",
        Text("PolicyName indicates the policy definition which the policy binding binded to"),
    ),
    col(
        "ParamRef",
        Text("ParamRef indicates the param resource which sets the configuration param"),
    ),
    AGE,
];

pub(super) fn vap_binding_row(o: &Value, now: jiff::Timestamp) -> (Vec<Value>, Option<Value>) {
    let param = match o.pointer("/spec/paramRef").filter(|p| !p.is_null()) {
        None => "<unset>".to_string(),
        Some(p) if !s(p, "/name").is_empty() => {
            let ns = s(p, "/namespace");
            format!("{}/{}", if ns.is_empty() { "*" } else { ns }, s(p, "/name"))
        }
        // Upstream prints the selector's Go struct (`Selector.String()`);
        // kube-sim its kubectl form.
        Some(p) => super::label_selector_string(p.get("selector")),
    };
    (
        vec![
            name(o),
            json!(s(o, "/spec/policyName")),
            json!(param),
            age(o, now),
        ],
        None,
    )
}
