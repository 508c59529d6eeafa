//! Random CEL expressions over random objects (`make fuzz` runs these with
//! many more cases): the meter never changes an answer, and the static
//! estimate is an upper bound of what the meter charges, in work and in
//! memory, for any object no larger than the estimate assumed. That is what
//! makes a refusal at compile time, and a budget at run time, mean the same
//! thing.

use std::sync::Arc;

use cel::{Context, Value};
use kube_cel::guard::{Abort, Limits};
use kube_cel::size::json_size;
use kube_cel::{EvalError, env, plan, to_cel};
use proptest::prelude::*;
use serde_json::json;

/// A small object whose fields the expressions below name.
fn object() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(json!(null)),
        any::<bool>().prop_map(|b| json!(b)),
        (-5i64..50).prop_map(|i| json!(i)),
        "[a-c,-]{0,6}".prop_map(|s| json!(s)),
    ];
    let value = leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::Array),
            // At most one key, as above.
            prop::collection::btree_map(
                prop_oneof![Just("a"), Just("b"), Just("name")],
                inner,
                0..2
            )
            .prop_map(|m| json!(m)),
        ]
    });
    (
        "[a-c,-]{0,8}",
        prop::collection::vec(value.clone(), 0..5),
        value,
        prop::collection::vec("[a-c]{0,3}", 0..4),
    )
        .prop_map(|(name, items, a, names)| {
            json!({"name": name, "items": items, "a": a, "names": names, "n": names.len()})
        })
}

/// Expressions over `object`, comprehension variables named by depth.
fn expr() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just("object".to_string()),
        Just("object.name".to_string()),
        Just("object.items".to_string()),
        Just("object.a".to_string()),
        Just("object.names".to_string()),
        Just("object.n".to_string()),
        Just("object.?a.orValue([])".to_string()),
        Just("x".to_string()),
        Just("y".to_string()),
        (0i64..5).prop_map(|i| i.to_string()),
        "[a-c,-]{0,3}".prop_map(|s| format!("'{s}'")),
        Just("[1, 2]".to_string()),
        Just("lists.range(3)".to_string()),
    ];
    leaf.prop_recursive(4, 40, 3, |inner| {
        let var = prop_oneof![Just("x"), Just("y")];
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a} + {b})")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a} == {b})")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("[{a}, {b}]")),
            // One key: a map's iteration order is unspecified.
            inner.clone().prop_map(|a| format!("{{'k': {a}}}")),
            inner.clone().prop_map(|a| format!("size({a})")),
            inner.clone().prop_map(|a| format!("{a}.name")),
            inner.clone().prop_map(|a| format!("{a}.?name.orValue('')")),
            inner.clone().prop_map(|a| format!("has({a}.a)")),
            inner.clone().prop_map(|a| format!("{a}[0]")),
            (inner.clone(), var.clone(), inner.clone())
                .prop_map(|(a, v, b)| format!("{a}.map({v}, {b})")),
            (inner.clone(), var.clone(), inner.clone(), inner.clone())
                .prop_map(|(a, v, p, b)| format!("{a}.map({v}, {p} == 1, {b})")),
            (inner.clone(), var.clone(), inner.clone())
                .prop_map(|(a, v, b)| format!("{a}.filter({v}, {b} != 0)")),
            (inner.clone(), var.clone(), inner.clone())
                .prop_map(|(a, v, b)| format!("{a}.all({v}, {b} != 0)")),
            (inner.clone(), var.clone(), inner.clone())
                .prop_map(|(a, v, b)| format!("{a}.exists({v}, {b} == 1)")),
            (inner.clone(), var, inner.clone())
                .prop_map(|(a, v, b)| format!("{a}.exists_one({v}, {b} == 1)")),
            inner.clone().prop_map(|a| format!("{a}.split(',')")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("{a}.join({b})")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("{a}.replace('a', {b})")),
            inner.clone().prop_map(|a| format!("{a}.flatten()")),
            inner.clone().prop_map(|a| format!("lists.range({a})")),
            (inner.clone(), inner.clone(), inner)
                .prop_map(|(c, a, b)| format!("({c} ? {a} : {b})")),
        ]
    })
}

/// An expression's answer without the meter, with it (under each of
/// `limits`), its estimate and what the meter charged. One context for all:
/// a map's iteration order is fixed for one value, not between two.
struct Run {
    plain: Result<Value, String>,
    metered: Vec<(Result<Value, EvalError>, kube_cel::Usage)>,
    estimate: kube_cel::Estimate,
}

/// No limit but a generous clock.
const UNLIMITED: Limits = Limits {
    cost: u64::MAX,
    memory: u64::MAX,
    time: std::time::Duration::from_secs(60),
};

fn eval(src: &str, object: &serde_json::Value, limits: &[Limits]) -> Option<Run> {
    let env = Arc::new(env().ok()?);
    let program = env.compile(src).ok()?;
    let plan = plan(program.expression(), &[("object", json_size(object))]);
    let mut ctx = Context::with_env(env);
    ctx.add_variable_from_value("object", to_cel(object));
    let plain = program.execute(&ctx).map_err(|e| e.to_string());
    let metered = limits
        .iter()
        .map(|l| kube_cel::run(&plan.expr, &ctx, *l, None))
        .collect();
    Some(Run {
        plain,
        metered,
        estimate: plan.estimate,
    })
}

// No `cases` here: a number fixed in the config would override
// PROPTEST_CASES, and `make fuzz` would run 256 cases like `make test`.
proptest! {
    #[test]
    fn the_meter_changes_no_answer_and_the_estimate_bounds_it(src in expr(), object in object()) {
        let Some(Run { plain, mut metered, estimate }) = eval(&src, &object, &[UNLIMITED]) else {
            return Ok(());
        };
        let Some((metered, usage)) = metered.pop() else {
            return Ok(());
        };
        match (&plain, &metered) {
            (Ok(a), Ok(b)) => prop_assert_eq!(a, b, "{}", src),
            (Err(_), Err(EvalError::Execution(_))) => {}
            _ => prop_assert!(false, "{src}: plain {plain:?}, metered {metered:?}"),
        }
        prop_assert!(
            usage.cost <= estimate.cost + 1e-6,
            "{src} on {object}: cost {} > estimate {}", usage.cost, estimate.cost
        );
        prop_assert!(
            usage.memory as f64 <= estimate.memory + 1e-6,
            "{src} on {object}: memory {} > estimate {}", usage.memory, estimate.memory
        );
    }

    /// A budget is kept to the unit: an evaluation whose unmetered cost and
    /// memory fit the limits gives its answer; one that needs more is
    /// stopped, naming the limit it passed (and never answers with more
    /// spent than allowed).
    #[test]
    fn a_budget_stops_exactly_the_evaluations_that_exceed_it(
        src in expr(),
        object in object(),
        cost_share in 0.0f64..1.25,
        memory_share in 0.0f64..1.25,
    ) {
        // The limits come from the unlimited run's usage: one run to learn
        // it, then both again in one context.
        let Some(mut probe) = eval(&src, &object, &[UNLIMITED]) else {
            return Ok(());
        };
        let Some((_, probe_usage)) = probe.metered.pop() else {
            return Ok(());
        };
        let limits = Limits {
            cost: (probe_usage.cost * cost_share) as u64,
            memory: (probe_usage.memory as f64 * memory_share) as u64,
            time: std::time::Duration::from_secs(60),
        };
        let Some(run) = eval(&src, &object, &[UNLIMITED, limits]) else {
            return Ok(());
        };
        let [(full_answer, full_usage), (answer, usage)] = &run.metered[..] else {
            return Ok(());
        };
        let fits = full_usage.cost <= limits.cost as f64 && full_usage.memory <= limits.memory;
        match answer {
            Err(EvalError::Aborted(Abort::Cost(l))) => {
                prop_assert_eq!(*l, limits.cost);
                prop_assert!(full_usage.cost > limits.cost as f64, "{src}: stopped within its cost {limits:?}, full {:?}", full_usage);
            }
            Err(EvalError::Aborted(Abort::Memory(l))) => {
                prop_assert_eq!(*l, limits.memory);
                prop_assert!(full_usage.memory > limits.memory, "{src}: stopped within its memory {limits:?}, full {:?}", full_usage);
            }
            Err(EvalError::Aborted(a)) => prop_assert!(false, "{src}: {a:?}"),
            answer => {
                prop_assert!(fits, "{src} answered {answer:?} beyond {limits:?}: full {:?}", full_usage);
                prop_assert_eq!(answer, full_answer, "{}", src);
                prop_assert!(usage.cost <= limits.cost as f64 && usage.memory <= limits.memory);
            }
        }
    }
}
