//! The CEL of a rule's users: `reference` yields the protected objects a
//! user object refers to, `while` says whether the reference counts now.
//! Both see the user object as `object`. Through the `cel` crate, the one
//! kube-sim's admission policies use; the strings and lists extensions
//! (`split`, `flatten`, ...) and optionals (`object.spec.?volumes.orValue([])`)
//! are available.

use std::sync::Arc;

use cel::{Context, Env, Program, Value as CelValue};

/// A compiled expression and its source.
pub struct Expr {
    pub source: String,
    program: Program,
    env: Arc<Env>,
}

impl std::fmt::Debug for Expr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Expr").field(&self.source).finish()
    }
}

/// Compiles `source`; the error names what is wrong, not where it is used.
pub fn compile(source: &str) -> Result<Expr, String> {
    if source.trim().is_empty() {
        return Err("expression is empty".into());
    }
    let env = env()?;
    let program = env
        .compile(source)
        .map_err(|e| e.to_string().trim().to_string())?;
    Ok(Expr {
        source: source.to_string(),
        program,
        env: Arc::new(env),
    })
}

use kube_cel::env;
pub use kube_cel::to_cel;

impl Expr {
    /// Runs the expression with `object` bound.
    pub fn eval(&self, object: &CelValue) -> Result<CelValue, String> {
        let mut ctx = Context::with_env(self.env.clone());
        ctx.add_variable_from_value("object", object.clone());
        self.program.execute(&ctx).map_err(|e| e.to_string())
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
