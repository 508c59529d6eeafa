//! The run-time half of the cost budget: a meter that an instrumented
//! expression ([`crate::cost::plan`]) charges as it runs, and that aborts
//! the evaluation once it has done more work, allocated more, or run longer
//! than its [`Limits`] allow (as kube-apiserver's CEL stops at its per-call
//! cost limit with "operation cancelled: actual cost limit exceeded").
//!
//! The `cel` crate has no cost tracking of its own, so the expression is
//! rewritten to call the meter's functions (names starting with `@`, which
//! no source can spell):
//!
//! * `@tick()` before each iteration of a comprehension: 1;
//! * `@charge(x)` around every value an operation creates (function
//!   results, list and map literals, optional selections): 1, plus a tenth
//!   of its size in cost and its size in memory when it is a new value;
//! * `@own(x)` around an element a `map`/`filter` copies into its result:
//!   a tenth of its size in cost and its size in memory;
//! * `@arg(x)` around the operands of comparisons and the arguments of
//!   functions (which may read all of them): a tenth of its size;
//! * `@add(a, b)` for `a + b`: checks that the result fits the memory left
//!   *before* building it, then charges like `@charge`;
//! * `@range(n)` around `lists.range(n)`'s argument: the same check.
//!
//! Once a limit is passed every charge fails, so each comprehension stops
//! at its next iteration and the evaluation unwinds in time proportional to
//! what it had already done; the result is then the abort, whatever value
//! the expression produced (an error inside `||` may have been absorbed).

use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cel::common::types::{CelInt, DYN_TYPE, INT_TYPE};
use cel::common::value::CowVal;
use cel::objects::Value;
use cel::{Context, DeclarationError, Env, ExecutionError, IdedExpr};

use crate::size::size_capped;

/// What one evaluation may spend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Cost units (about one per comprehension iteration or function call,
    /// plus a tenth per unit of size read or created).
    pub cost: u64,
    /// Size units (see [`crate::size`]) of the values the evaluation
    /// creates, added up: a bound on what it can allocate.
    pub memory: u64,
    /// Wall-clock time.
    pub time: Duration,
}

/// kube-apiserver's per-call cost limit (`PerCallLimit` in
/// k8s.io/apiserver/pkg/apis/cel/config.go), "roughly 0.1 second".
pub const PER_CALL_COST_LIMIT: u64 = 1_000_000;

/// The size of the largest request kube-apiserver accepts (3 MiB,
/// `MaxRequestSizeBytes`): no object it stores is larger.
pub const MAX_OBJECT_SIZE: u64 = 3 * 1024 * 1024;

impl Limits {
    /// The API server's per-call cost limit, with a memory bound of 4 MiB
    /// of values created (every unit created also costs a tenth, so the
    /// cost limit alone would allow 10 MiB) and a 10-second wall clock as a
    /// backstop (the API server has none: its cost limit stops an
    /// evaluation in about 0.1 s; this crate's, unoptimised, in seconds).
    pub const PER_CALL: Limits = Limits {
        cost: PER_CALL_COST_LIMIT,
        memory: 4 * 1024 * 1024,
        time: Duration::from_secs(10),
    };
}

/// Why an evaluation was stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Abort {
    Cost(u64),
    Memory(u64),
    Time(Duration),
    Cancelled,
}

impl Abort {
    /// A short label, for metrics: `cost`, `memory`, `time`, `cancelled`.
    pub fn reason(&self) -> &'static str {
        match self {
            Abort::Cost(_) => "cost",
            Abort::Memory(_) => "memory",
            Abort::Time(_) => "time",
            Abort::Cancelled => "cancelled",
        }
    }
}

impl std::fmt::Display for Abort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Abort::Cost(l) => write!(
                f,
                "operation cancelled: actual cost limit exceeded (the expression did more than {l} units of work on this object)"
            ),
            Abort::Memory(l) => write!(
                f,
                "operation cancelled: memory limit exceeded (the expression created more than {l} bytes of values on this object)"
            ),
            Abort::Time(t) => write!(
                f,
                "operation cancelled: time limit exceeded (the expression ran longer than {} ms on this object)",
                t.as_millis()
            ),
            Abort::Cancelled => write!(f, "operation cancelled: the process is shutting down"),
        }
    }
}

/// An evaluation that failed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum EvalError {
    /// Stopped by the meter.
    #[error("{0}")]
    Aborted(Abort),
    /// The expression's own error (no such key, wrong type, ...).
    #[error("{0}")]
    Execution(ExecutionError),
}

/// What an evaluation spent.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Usage {
    pub cost: f64,
    pub memory: u64,
}

struct Meter {
    cost: f64,
    memory: u64,
    limits: Limits,
    deadline: Instant,
    cancel: Option<Arc<AtomicBool>>,
    aborted: Option<Abort>,
    calls: u32,
}

thread_local! {
    static METER: RefCell<Option<Meter>> = const { RefCell::new(None) };
}

fn abort_error(a: Abort) -> ExecutionError {
    ExecutionError::function_error("cost", a.to_string())
}

/// Runs `f` on the meter of the evaluation running on this thread; without
/// one (an instrumented expression run by a plain `execute`) nothing is
/// charged.
fn with_meter(f: impl FnOnce(&mut Meter) -> Result<(), Abort>) -> Result<(), ExecutionError> {
    METER.with(|m| {
        let mut m = m.borrow_mut();
        let Some(m) = m.as_mut() else { return Ok(()) };
        if let Some(a) = m.aborted {
            return Err(abort_error(a));
        }
        let r = f(m).and_then(|()| m.check());
        if let Err(a) = r {
            m.aborted = Some(a);
            return Err(abort_error(a));
        }
        Ok(())
    })
}

impl Meter {
    fn check(&mut self) -> Result<(), Abort> {
        if self.cost > self.limits.cost as f64 {
            return Err(Abort::Cost(self.limits.cost));
        }
        if self.memory > self.limits.memory {
            return Err(Abort::Memory(self.limits.memory));
        }
        if self
            .cancel
            .as_ref()
            .is_some_and(|c| c.load(Ordering::Relaxed))
        {
            return Err(Abort::Cancelled);
        }
        self.calls = self.calls.wrapping_add(1);
        if self.calls.is_multiple_of(64) && Instant::now() > self.deadline {
            return Err(Abort::Time(self.limits.time));
        }
        Ok(())
    }

    /// Size units left before the memory limit, for measuring.
    fn memory_left(&self) -> u64 {
        self.limits.memory.saturating_sub(self.memory)
    }

    /// The largest size worth measuring for a cost charge of a tenth per
    /// unit: past it the charge aborts anyway. Rounded up, so that a value
    /// found larger (charged as this plus one) always passes the limit,
    /// rather than landing on it.
    fn cost_cap(&self) -> u64 {
        let left = (self.limits.cost as f64 - self.cost).max(0.0);
        (left * 10.0).ceil().min(u64::MAX as f64 / 2.0) as u64
    }
}

fn one_arg<'b, 'v>(mut args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    match (args.pop(), args.is_empty()) {
        (Some(a), true) => Ok(a),
        _ => Err(ExecutionError::invalid_argument_count(1, args.len() + 1)),
    }
}

fn tick<'b, 'v>(_args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    with_meter(|m| {
        m.cost += 1.0;
        Ok(())
    })?;
    Ok(CowVal::owned(cel::common::types::CelBool::from(true)))
}

fn charge<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let v = one_arg(args)?;
    let owned = v.is_owned();
    with_meter(|m| {
        m.cost += 1.0;
        if owned {
            let s = size_capped(v.as_ref(), m.cost_cap().min(m.memory_left()));
            m.cost += s as f64 / 10.0;
            m.memory = m.memory.saturating_add(s);
        }
        Ok(())
    })?;
    Ok(v)
}

fn own<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let v = one_arg(args)?;
    with_meter(|m| {
        let s = size_capped(v.as_ref(), m.cost_cap().min(m.memory_left()));
        m.cost += s as f64 / 10.0;
        m.memory = m.memory.saturating_add(s);
        Ok(())
    })?;
    Ok(v)
}

fn arg<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let v = one_arg(args)?;
    with_meter(|m| {
        let s = size_capped(v.as_ref(), m.cost_cap());
        m.cost += s as f64 / 10.0;
        Ok(())
    })?;
    Ok(v)
}

fn add<'b, 'v>(mut args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (Some(rhs), Some(lhs), true) = (args.pop(), args.pop(), args.is_empty()) else {
        return Err(ExecutionError::invalid_argument_count(2, 2));
    };
    // The sum is at most as large as its operands together: check that it
    // fits before building it.
    with_meter(|m| {
        let cap = m.cost_cap().min(m.memory_left());
        let s = size_capped(lhs.as_ref(), cap)
            .saturating_add(size_capped(rhs.as_ref(), cap))
            .min(cap.saturating_add(1));
        m.cost += 1.0 + s as f64 / 10.0;
        m.memory = m.memory.saturating_add(s);
        Ok(())
    })?;
    let adder = lhs.as_adder().ok_or_else(|| {
        ExecutionError::UnsupportedBinaryOperator(
            "add",
            Value::try_from(lhs.as_ref()).unwrap_or(Value::Null),
            Value::try_from(rhs.as_ref()).unwrap_or(Value::Null),
        )
    })?;
    Ok(CowVal::Owned(adder.add(rhs.as_ref())?.into_owned()))
}

fn range<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let v = one_arg(args)?;
    if let Some(n) = v.downcast_ref::<CelInt>() {
        let n = u64::try_from(*n.inner()).unwrap_or(0);
        with_meter(|m| {
            // `lists.range(n)` is n ints (size 1 each), n - 1 separators and
            // the brackets: exactly what `@charge` will count for it.
            let size = n.saturating_add(n.saturating_sub(1)).saturating_add(2);
            if size > m.memory_left() {
                return Err(Abort::Memory(m.limits.memory));
            }
            Ok(())
        })?;
    }
    Ok(v)
}

/// The meter's functions, added to every environment of this crate.
pub(crate) fn register(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_overload(TICK, "guard_tick", vec![], tick)?;
    env.add_overload(CHARGE, "guard_charge", vec![DYN_TYPE], charge)?;
    env.add_overload(OWN, "guard_own", vec![DYN_TYPE], own)?;
    env.add_overload(ARG, "guard_arg", vec![DYN_TYPE], arg)?;
    env.add_overload(ADD, "guard_add", vec![DYN_TYPE, DYN_TYPE], add)?;
    env.add_overload(RANGE, "guard_range", vec![INT_TYPE], range)?;
    env.add_overload(RANGE, "guard_range_dyn", vec![DYN_TYPE], range)?;
    Ok(())
}

pub(crate) const TICK: &str = "@tick";
pub(crate) const CHARGE: &str = "@charge";
pub(crate) const OWN: &str = "@own";
pub(crate) const ARG: &str = "@arg";
pub(crate) const ADD: &str = "@add";
pub(crate) const RANGE: &str = "@range";

/// Evaluates an instrumented expression (see [`crate::cost::plan`]) under
/// `limits`; `cancel`, once set, stops it at its next charge.
///
/// Runs on the calling thread; a caller on an async runtime runs it where a
/// blocked thread does no harm (see the rules controller).
pub fn execute(
    expr: &IdedExpr,
    ctx: &Context,
    limits: Limits,
    cancel: Option<&Arc<AtomicBool>>,
) -> Result<(Value, Usage), EvalError> {
    let (r, usage) = run(expr, ctx, limits, cancel);
    r.map(|v| (v, usage))
}

/// [`execute`], with what the evaluation spent whatever its outcome.
pub fn run(
    expr: &IdedExpr,
    ctx: &Context,
    limits: Limits,
    cancel: Option<&Arc<AtomicBool>>,
) -> (Result<Value, EvalError>, Usage) {
    if cancel.is_some_and(|c| c.load(Ordering::Relaxed)) {
        return (Err(EvalError::Aborted(Abort::Cancelled)), Usage::default());
    }
    let meter = Meter {
        cost: 0.0,
        memory: 0,
        limits,
        deadline: Instant::now() + limits.time,
        cancel: cancel.cloned(),
        aborted: None,
        calls: 0,
    };
    // An evaluation inside an evaluation (a function that evaluates CEL)
    // keeps the outer meter aside and puts it back after.
    let outer = METER.with(|m| m.borrow_mut().replace(meter));
    let result = Value::resolve(expr, ctx);
    let meter = METER.with(|m| std::mem::replace(&mut *m.borrow_mut(), outer));
    let Some(meter) = meter else {
        let e = ExecutionError::InternalError("the cost meter went missing".into());
        return (Err(EvalError::Execution(e)), Usage::default());
    };
    let usage = Usage {
        cost: meter.cost,
        memory: meter.memory,
    };
    if let Some(a) = meter.aborted {
        return (Err(EvalError::Aborted(a)), usage);
    }
    (result.map_err(EvalError::Execution), usage)
}
