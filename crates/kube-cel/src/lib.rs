//! CEL as Kubernetes evaluates it over JSON objects: the base environment of
//! CRD validation rules (the standard library with the `strings` and
//! `lists` extensions) and the conversion of a JSON object into CEL values.
//! kube-sim (CRD validation rules, admission policies) and the rules
//! controller (ProtectionRule references) both evaluate CEL over API
//! objects; they must read an object the same way, and both bound what an
//! evaluation may cost as kube-apiserver does: a static estimate when the
//! expression is compiled ([`cost`]) and a per-evaluation budget of work,
//! memory and time when it runs ([`guard`]).

pub mod cost;
pub mod guard;
pub mod size;

pub use cost::{Estimate, Plan, plan};
pub use guard::{Abort, EvalError, Limits, Usage, execute, run};

use std::sync::Arc;

use cel::objects::{Key, Map};
use cel::{Env, Value as CelValue};
use serde_json::Value;

/// The standard library plus the `strings` and `lists` extensions, and the
/// cost meter's functions an instrumented expression calls; callers add
/// what their context has on top (admission policies add `math`).
pub fn env() -> Result<Env, String> {
    let mut env = Env::stdlib();
    env.add_extension(cel::extensions::strings)
        .map_err(|e| e.to_string())?;
    env.add_extension(cel::extensions::lists)
        .map_err(|e| e.to_string())?;
    guard::register(&mut env).map_err(|e| e.to_string())?;
    Ok(env)
}

/// JSON to a CEL value as the API server converts an object: integers are
/// `int` (`uint` only above i64), other numbers `double`, objects maps with
/// string keys. (`cel::to_value` would make every positive integer a
/// `uint`, and `spec.replicas == 1` would then compare `uint` with `int`.)
pub fn to_cel(v: &Value) -> CelValue {
    match v {
        Value::Null => CelValue::Null,
        Value::Bool(b) => CelValue::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => CelValue::Int(i),
            (None, Some(u)) => CelValue::UInt(u),
            _ => CelValue::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => CelValue::String(Arc::new(s.clone())),
        Value::Array(a) => CelValue::List(Arc::new(a.iter().map(to_cel).collect())),
        Value::Object(m) => {
            let map: std::collections::HashMap<Key, CelValue> = m
                .iter()
                .map(|(k, v)| (Key::String(Arc::new(k.clone())), to_cel(v)))
                .collect();
            CelValue::Map(Map { map: Arc::new(map) })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn eval(src: &str, object: &Value) -> CelValue {
        let env = Arc::new(env().unwrap());
        let program = env.compile(src).unwrap();
        let mut ctx = cel::Context::with_env(env);
        ctx.add_variable_from_value("object", to_cel(object));
        program.execute(&ctx).unwrap()
    }

    #[test]
    fn numbers_are_ints_as_the_api_server_reads_them() {
        let o = json!({"replicas": 1, "big": u64::MAX, "ratio": 0.5});
        assert_eq!(eval("object.replicas == 1", &o), CelValue::Bool(true));
        assert_eq!(eval("object.big", &o), CelValue::UInt(u64::MAX));
        assert_eq!(eval("object.ratio", &o), CelValue::Float(0.5));
    }

    #[test]
    fn strings_and_lists_extensions_are_there() {
        let o = json!({"names": ["a", "b"], "s": "Hello"});
        assert_eq!(
            eval("object.s.lowerAscii()", &o),
            CelValue::String(Arc::new("hello".into()))
        );
        assert_eq!(
            eval("object.names.slice(1, 2) == ['b']", &o),
            CelValue::Bool(true)
        );
    }
}
