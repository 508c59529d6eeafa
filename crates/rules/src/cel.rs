//! The CEL of a rule's users: `reference` yields the protected objects a
//! user object refers to, `while` says whether the reference counts now.
//! Both see the user object as `object`. Through the `cel` crate, the one
//! kube-sim's admission policies use; the strings and lists extensions
//! (`split`, `flatten`, ...) and optionals (`object.spec.?volumes.orValue([])`)
//! are available.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, LazyLock};

use cel::{Context, Env, Value as CelValue};
use kube_cel::guard::{Limits, MAX_OBJECT_SIZE};
use kube_cel::{Abort, EvalError, Plan};
use prometheus::{IntCounterVec, Opts, Registry};

/// The most a rule's expression may be estimated to cost on the largest
/// object the API server stores (3 MiB): about 300 passes over it. An
/// expression whose work grows with the square of an object's size (a
/// comprehension inside one over the same list) is estimated thousands of
/// times higher and refused when the rule is created, as kube-apiserver
/// refuses a CRD validation rule past its estimated cost limit.
pub const STATIC_COST_LIMIT: f64 = 1e9;
/// The most an expression may be estimated to create on that object
/// (values in [`kube_cel::size`] units, added up): about 1,600 copies of
/// it.
pub const STATIC_MEMORY_LIMIT: f64 = 5e9;
/// What one evaluation may spend: kube-apiserver's per-call cost limit, 4
/// MiB of values created and 10 s.
pub const LIMITS: Limits = Limits::PER_CALL;
/// An evaluation first runs where it is called (on an async worker) with
/// this much of the budget; one that needs more runs again off the async
/// workers, one at a time per spare core (so two expensive rules cannot
/// starve the probes, the other controllers or the shutdown).
const INLINE_COST: u64 = 20_000;

/// Sizes the estimate assumes, besides the object's: the fields every
/// object has and Kubernetes bounds (a name is a DNS subdomain or label).
const BOUNDED_FIELDS: &[(&str, u64)] = &[
    ("object", MAX_OBJECT_SIZE),
    ("object.metadata.name", 253 + 2),
    ("object.metadata.generateName", 253 + 2),
    ("object.metadata.namespace", 63 + 2),
    ("object.metadata.uid", 36 + 2),
];

/// Evaluations stopped by their budget, by reason (cost, memory, time,
/// cancelled): a rule whose expression is too expensive for some object.
static ABORTS: LazyLock<Option<IntCounterVec>> = LazyLock::new(|| {
    IntCounterVec::new(
        Opts::new(
            "protection_manager_cel_evaluations_aborted_total",
            "ProtectionRule expressions stopped by their per-evaluation budget, by reason (cost, memory, time, cancelled); the object they were evaluated on holds what it may use.",
        ),
        &["reason"],
    )
    .ok()
});

/// Registers the aborts counter (one process-wide counter, in as many
/// registries as ask: a test process may run several managers).
pub fn register_metrics(registry: &Registry) {
    if let Some(c) = ABORTS.as_ref() {
        let _ = registry.register(Box::new(c.clone()));
    }
}

/// Heavy evaluations at once: one per core beyond the first.
static HEAVY: LazyLock<tokio::sync::Semaphore> = LazyLock::new(|| {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    tokio::sync::Semaphore::new(cores.saturating_sub(1).max(1))
});

/// A compiled expression and its source.
pub struct Expr {
    pub source: String,
    plan: Plan,
    env: Arc<Env>,
    cancel: Option<Arc<AtomicBool>>,
}

impl std::fmt::Debug for Expr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Expr").field(&self.source).finish()
    }
}

/// Why an expression is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CompileError {
    /// It does not parse (or is empty).
    #[error("{0}")]
    Invalid(String),
    /// Its estimated cost or memory on the largest object is past the
    /// budget.
    #[error("{0}")]
    TooExpensive(String),
}

/// Compiles `source`; the error names what is wrong, not where it is used.
pub fn compile(source: &str) -> Result<Expr, CompileError> {
    if source.trim().is_empty() {
        return Err(CompileError::Invalid("expression is empty".into()));
    }
    let env = env().map_err(CompileError::Invalid)?;
    let program = env
        .compile(source)
        .map_err(|e| CompileError::Invalid(e.to_string().trim().to_string()))?;
    let plan = kube_cel::plan(program.expression(), BOUNDED_FIELDS);
    plan.estimate
        .check(STATIC_COST_LIMIT, STATIC_MEMORY_LIMIT)
        .map_err(CompileError::TooExpensive)?;
    Ok(Expr {
        source: source.to_string(),
        plan,
        env: Arc::new(env),
        cancel: None,
    })
}

use kube_cel::env;
pub use kube_cel::to_cel;

impl Expr {
    /// Stops this expression's evaluations once `flag` is set (shutdown).
    pub fn set_cancel(&mut self, flag: Arc<AtomicBool>) {
        self.cancel = Some(flag);
    }

    /// Runs the expression with `object` bound, within [`LIMITS`].
    pub fn eval(&self, object: &CelValue) -> Result<CelValue, String> {
        let mut ctx = Context::with_env(self.env.clone());
        ctx.add_variable_from_value("object", object.clone());
        let inline = Limits {
            cost: INLINE_COST,
            ..LIMITS
        };
        let cancel = self.cancel.as_ref();
        let result = match kube_cel::execute(&self.plan.expr, &ctx, inline, cancel) {
            Err(EvalError::Aborted(Abort::Cost(_))) => {
                heavy(|| kube_cel::execute(&self.plan.expr, &ctx, LIMITS, cancel))
            }
            r => r,
        };
        match result {
            Ok((v, _)) => Ok(v),
            Err(EvalError::Aborted(a)) => {
                if let Some(c) = ABORTS.as_ref() {
                    c.with_label_values(&[a.reason()]).inc();
                }
                Err(a.to_string())
            }
            Err(EvalError::Execution(e)) => Err(e.to_string()),
        }
    }

    /// A `while` condition: true, false, or an error for any other result.
    pub fn eval_bool(&self, object: &CelValue) -> Result<bool, String> {
        match self.eval(object)? {
            CelValue::Bool(b) => Ok(b),
            other => Err(format!("must evaluate to a bool, got {}", other.type_of())),
        }
    }

    /// A `reference`: the (namespace, name) pairs it yields. A string or a
    /// list of strings names objects in `default_ns`; a map (or list of
    /// maps) `{name, namespace?}` may name another namespace; null or an
    /// empty string refers to nothing.
    pub fn eval_refs(
        &self,
        object: &CelValue,
        default_ns: &str,
    ) -> Result<Vec<(String, String)>, String> {
        let mut out = Vec::new();
        collect(&self.eval(object)?, default_ns, &mut out)?;
        out.sort();
        out.dedup();
        Ok(out)
    }
}

/// Runs `f` where blocking does no harm: off the async workers when on a
/// multi-threaded runtime (`block_in_place`), one at a time per spare core.
fn heavy<T>(f: impl FnOnce() -> T) -> T {
    let run = || {
        let _permit = futures::executor::block_on(HEAVY.acquire());
        f()
    };
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(run),
        _ => run(),
    }
}

fn collect(v: &CelValue, ns: &str, out: &mut Vec<(String, String)>) -> Result<(), String> {
    match v {
        CelValue::Null => Ok(()),
        CelValue::String(s) if s.is_empty() => Ok(()),
        CelValue::String(s) => {
            out.push((ns.to_string(), s.to_string()));
            Ok(())
        }
        CelValue::List(l) => l.iter().try_for_each(|e| collect(e, ns, out)),
        CelValue::Map(m) => {
            let get = |k: &str| match m.map.get(&cel::objects::Key::String(Arc::new(k.into()))) {
                Some(CelValue::String(s)) => Some(s.to_string()),
                _ => None,
            };
            let Some(name) = get("name") else {
                return Err("a map in a reference must have a string name".into());
            };
            if !name.is_empty() {
                out.push((get("namespace").unwrap_or_else(|| ns.to_string()), name));
            }
            Ok(())
        }
        other => Err(format!(
            "must yield a string, a list of strings or {{name, namespace}} maps, got {}",
            other.type_of()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn references_take_the_three_shapes() {
        let pod =
            to_cel(&json!({"spec": {"volumes": [{"secret": {"secretName": "a"}}, {"name": "x"}]}}));
        let e = compile(
            "object.spec.?volumes.orValue([]).filter(v, has(v.secret)).map(v, v.secret.secretName)",
        )
        .unwrap();
        assert_eq!(
            e.eval_refs(&pod, "ns").unwrap(),
            [("ns".into(), "a".into())]
        );
        let e = compile("'b'").unwrap();
        assert_eq!(
            e.eval_refs(&pod, "ns").unwrap(),
            [("ns".into(), "b".into())]
        );
        let e = compile("[{'namespace': 'o', 'name': 'c'}, {'name': ''}]").unwrap();
        assert_eq!(e.eval_refs(&pod, "ns").unwrap(), [("o".into(), "c".into())]);
        let e = compile("object.spec.?missing.orValue([])").unwrap();
        assert!(e.eval_refs(&pod, "ns").unwrap().is_empty());
        let e = compile("1").unwrap();
        assert!(e.eval_refs(&pod, "ns").unwrap_err().contains("got int"));
        assert!(compile("object.(").is_err());
    }
}
