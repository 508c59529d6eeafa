//! The cost budget as a user meets it: an expression too expensive for the
//! largest object is refused when compiled, and one that runs past its
//! budget on a given object is stopped (work, memory, time, shutdown), with
//! the reason; cheap expressions give the same answers as without the
//! meter.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use cel::{Context, Value};
use kube_cel::guard::{Limits, MAX_OBJECT_SIZE};
use kube_cel::{Abort, EvalError, env, plan, to_cel};
use serde_json::json;

/// A tenth of the per-call limits, without their clock: what these tests
/// check must not depend on how fast the machine is.
const UNTIMED: Limits = Limits {
    cost: Limits::PER_CALL.cost / 10,
    memory: Limits::PER_CALL.memory / 10,
    time: Duration::from_secs(3600),
};

fn run(src: &str, object: &serde_json::Value, limits: Limits) -> Result<Value, EvalError> {
    run_cancel(src, object, limits, None)
}

fn run_cancel(
    src: &str,
    object: &serde_json::Value,
    limits: Limits,
    cancel: Option<&Arc<AtomicBool>>,
) -> Result<Value, EvalError> {
    let env = Arc::new(env().unwrap());
    let program = env.compile(src).unwrap();
    let plan = plan(program.expression(), &[("object", MAX_OBJECT_SIZE)]);
    let mut ctx = Context::with_env(env);
    ctx.add_variable_from_value("object", to_cel(object));
    kube_cel::execute(&plan.expr, &ctx, limits, cancel).map(|(v, _)| v)
}

fn pod(containers: usize) -> serde_json::Value {
    json!({"metadata": {"name": "p"}, "spec": {"containers": (0..containers).map(|i| json!({
        "name": format!("c{i}"),
        "env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": format!("s{i}")}}}]
    })).collect::<Vec<_>>()}})
}

#[test]
fn cheap_expressions_answer_as_without_the_meter() {
    let p = pod(3);
    let cases = [
        (
            "object.spec.containers.map(c, c.env.filter(e, has(e.valueFrom)).map(e, e.valueFrom.secretKeyRef.name)).flatten()",
            json!(["s0", "s1", "s2"]),
        ),
        (
            "object.spec.containers.all(c, c.name.startsWith('c'))",
            json!(true),
        ),
        (
            "object.spec.containers.exists(c, c.name == 'c9')",
            json!(false),
        ),
        (
            "object.spec.containers.exists_one(c, c.name == 'c1')",
            json!(true),
        ),
        ("object.spec.?volumes.orValue([]) + ['x']", json!(["x"])),
        ("size(object.metadata.name + 'abc')", json!(4)),
        ("[3, 1, 2].sort()", json!([1, 2, 3])),
        ("lists.range(3).map(i, i * 2)", json!([0, 2, 4])),
        ("'a-b'.split('-').join('+')", json!("a+b")),
        (
            "object.spec.containers.filter(c, c.name != 'c0').size()",
            json!(2),
        ),
    ];
    for (src, want) in cases {
        let got = run(src, &p, Limits::PER_CALL).unwrap_or_else(|e| panic!("{src}: {e}"));
        assert_eq!(got, to_cel(&want), "{src}");
    }
    // The expression's own errors stay its own.
    let e = run("object.nope", &p, Limits::PER_CALL).unwrap_err();
    assert!(matches!(e, EvalError::Execution(_)), "{e:?}");
    let e = run("1 + 'a'", &p, Limits::PER_CALL).unwrap_err();
    assert!(e.to_string().contains("add"), "{e}");
}

#[test]
fn a_nested_comprehension_over_a_large_list_stops_at_the_cost_limit() {
    let p = pod(1000);
    let src =
        "object.spec.containers.all(a, object.spec.containers.all(b, a.name != b.name || a == b))";
    let e = run(src, &p, UNTIMED).unwrap_err();
    assert_eq!(e, EvalError::Aborted(Abort::Cost(UNTIMED.cost)));
    assert!(
        e.to_string()
            .contains("operation cancelled: actual cost limit exceeded"),
        "{e}"
    );
    // The same expression on a small pod is fine.
    assert_eq!(
        run(src, &pod(3), Limits::PER_CALL).unwrap(),
        Value::Bool(true)
    );
}

#[test]
fn an_expression_that_grows_memory_stops_before_it_has_grown() {
    // Each of a million iterations would copy the whole object (3 GB for a
    // 3 KB pod): the meter stops it at its memory limit.
    let p = pod(30);
    let e = run(
        "lists.range(1000000).map(i, object).size() > 0",
        &p,
        UNTIMED,
    )
    .unwrap_err();
    assert!(
        matches!(
            e,
            EvalError::Aborted(Abort::Memory(_)) | EvalError::Aborted(Abort::Cost(_))
        ),
        "{e:?}"
    );
    // A single concatenation larger than the memory left is refused before
    // it is built.
    let small = Limits {
        memory: 1000,
        ..UNTIMED
    };
    let e = run("object.spec.containers + object.spec.containers", &p, small).unwrap_err();
    assert_eq!(e, EvalError::Aborted(Abort::Memory(1000)));
    let e = run("lists.range(100000).size()", &p, small).unwrap_err();
    assert_eq!(e, EvalError::Aborted(Abort::Memory(1000)));
}

/// Found by `make fuzz` (a budget stops exactly the evaluations that
/// exceed it): the check before `lists.range(n)` is built counted one unit
/// more than the list's size, so an evaluation that fit its memory limit
/// exactly was stopped as over it.
#[test]
fn a_range_that_fits_the_memory_left_exactly_is_built() {
    let p = pod(1);
    // [0,1,2]: 3 ints, 2 separators, 2 brackets.
    let exact = Limits {
        memory: 7,
        ..UNTIMED
    };
    assert_eq!(
        run("lists.range(3)", &p, exact).unwrap(),
        to_cel(&json!([0, 1, 2]))
    );
    let short = Limits {
        memory: 6,
        ..UNTIMED
    };
    assert_eq!(
        run("lists.range(3)", &p, short).unwrap_err(),
        EvalError::Aborted(Abort::Memory(6))
    );
    let empty = Limits {
        memory: 2,
        ..UNTIMED
    };
    assert_eq!(
        run("lists.range(0)", &p, empty).unwrap(),
        to_cel(&json!([]))
    );
}

/// Found by `make fuzz`: a value measured only up to the budget left (so
/// that measuring a huge value costs no more than the budget) was charged
/// with the budget's remainder rounded down, which could land exactly on
/// the limit instead of past it: this evaluation needs 3.4 units, and
/// finished within a limit of 3.
#[test]
fn a_value_larger_than_the_budget_left_always_passes_the_limit() {
    let object = json!({"name": ",,a,a", "items": [null, null]});
    let limits = Limits { cost: 3, ..UNTIMED };
    let e = run(
        "object.items.exists(x, object.name == 1)[0]",
        &object,
        limits,
    )
    .unwrap_err();
    assert_eq!(e, EvalError::Aborted(Abort::Cost(3)));
}

#[test]
fn an_error_absorbed_by_or_still_aborts() {
    // `expensive || true` is true in CEL even when the left side errs: the
    // abort must not be hidden by it.
    let p = pod(1000);
    let e = run(
        "object.spec.containers.exists(a, object.spec.containers.exists(b, a != b && a.name == b.name)) || true",
        &p,
        UNTIMED,
    )
    .unwrap_err();
    assert!(matches!(e, EvalError::Aborted(Abort::Cost(_))), "{e:?}");
}

#[test]
fn the_time_limit_and_cancellation_stop_an_evaluation() {
    let p = pod(1000);
    let src =
        "object.spec.containers.all(a, object.spec.containers.all(b, a.name != b.name || a == b))";
    let quick = Limits {
        cost: u64::MAX,
        memory: u64::MAX,
        time: Duration::from_millis(1),
    };
    let e = run(src, &p, quick).unwrap_err();
    assert_eq!(e, EvalError::Aborted(Abort::Time(Duration::from_millis(1))));
    let cancel = Arc::new(AtomicBool::new(true));
    let e = run_cancel(src, &p, Limits::PER_CALL, Some(&cancel)).unwrap_err();
    assert_eq!(e, EvalError::Aborted(Abort::Cancelled));
}

#[test]
fn the_estimate_refuses_what_could_not_finish_on_the_largest_object() {
    let env = env().unwrap();
    let est = |src: &str| {
        plan(
            env.compile(src).unwrap().expression(),
            &[("object", MAX_OBJECT_SIZE)],
        )
        .estimate
    };
    let square = est("object.items.all(a, object.items.all(b, a == b))");
    let e = square.check(1e8, 64e6).unwrap_err();
    assert!(
        e.starts_with("estimated cost exceeds budget by factor of more than 100x"),
        "{e}"
    );
    let copies = est("lists.range(1000).map(i, object)");
    let e = copies.check(1e12, 64e6).unwrap_err();
    assert!(e.starts_with("estimated memory exceeds budget"), "{e}");
    assert!(est("object.metadata.name").check(1e8, 64e6).is_ok());
}
