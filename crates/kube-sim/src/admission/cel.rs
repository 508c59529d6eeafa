//! CEL for MutatingAdmissionPolicy, through the `cel` crate (cel-rust).
//!
//! What a policy expression may use (anything else makes the policy's create
//! or update fail with a 422 naming the expression, never a silent no-op):
//! - the variables `object`, `oldObject`, `request`, `namespaceObject`,
//!   `params` (always null: policies with `paramKind` are refused) and
//!   `variables.<name>` of the policy's own `spec.variables` declared
//!   earlier in the list;
//! - the standard CEL operators and macros (`has`, `all`, `exists`,
//!   `exists_one`, `map`, `filter`), optionals (`a.?b`, `orValue`, ...), the
//!   functions listed in [`FUNCTIONS`] and Kubernetes' `jsonpatch.escapeKey`;
//! - the types `JSONPatch{op, path, from, value}` (JSONPatch mutations) and
//!   `Object`, `Object.<field>...` (both mutation types) to build values.
//!
//! Not supported, refused at create: `authorizer`, `timestamp`/`duration`
//! and the other functions of Kubernetes' CEL libraries (`quantity`, `url`,
//! `ip`, `cidr`, `format`, `semver`, the `isSorted`/`sum` list functions),
//! type checking against the object's schema (Kubernetes refuses a wrong
//! result type at create; kube-sim when the expression runs, as an error the
//! failurePolicy handles) and the cost budget.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use cel::common::ast::{EntryExpr, Expr};
use cel::common::types::{CelString, CelStruct, Type};
use cel::common::value::{CowVal, Val};
use cel::{Context, Env, ExecutionError, IdedExpr, Program, StructType, Value as CelValue};
use serde_json::{Map, Number, Value};

/// The variables every admission expression sees.
pub const VARIABLES: &[&str] = &[
    "object",
    "oldObject",
    "request",
    "namespaceObject",
    "params",
    "variables",
];

/// Functions (by name, member or global) that kube-sim evaluates; the test
/// `every_listed_function_runs` executes each one.
pub const FUNCTIONS: &[&str] = &[
    "size",
    "contains",
    "startsWith",
    "endsWith",
    "matches",
    "int",
    "uint",
    "double",
    "string",
    "bytes",
    "bool",
    "dyn",
    "type",
    "charAt",
    "indexOf",
    "lastIndexOf",
    "lowerAscii",
    "upperAscii",
    "replace",
    "split",
    "substring",
    "trim",
    "join",
    "strings.quote",
    "reverse",
    "distinct",
    "flatten",
    "slice",
    "sort",
    "lists.range",
    "math.greatest",
    "math.least",
    "math.abs",
    "math.ceil",
    "math.floor",
    "math.round",
    "math.sign",
    "optional.of",
    "optional.none",
    "optional.ofNonZeroValue",
    "hasValue",
    "value",
    "or",
    "orValue",
    "jsonpatch.escapeKey",
];

/// Type names an expression may use as values (`type(x) == string`).
const TYPE_NAMES: &[&str] = &[
    "int",
    "uint",
    "double",
    "bool",
    "string",
    "bytes",
    "list",
    "map",
    "null_type",
    "type",
    "dyn",
];

/// Qualifiers of namespaced functions (`math.abs`).
const FUNCTION_NAMESPACES: &[&str] = &["math", "strings", "lists", "optional", "jsonpatch"];

/// The fields of a `JSONPatch` value.
pub const JSON_PATCH_FIELDS: &[&str] = &["op", "path", "from", "value"];

/// Which struct types an expression may construct.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Structs {
    /// matchConditions and variables: none.
    None,
    /// ApplyConfiguration: `Object`, `Object.<field>...`.
    Object,
    /// JSONPatch: `JSONPatch` and the `Object` types.
    JsonPatch,
}

/// One checked expression.
#[derive(Debug)]
pub struct Compiled {
    pub source: String,
    pub program: Program,
    /// Struct type names the expression constructs.
    pub structs: BTreeSet<String>,
}

fn base_env() -> Result<Env, String> {
    let mut env = kube_cel::env()?;
    env.add_extension(cel::extensions::math)
        .map_err(|e| e.to_string())?;
    env.add_overload(
        "jsonpatch.escapeKey",
        "jsonpatch_escape_key_string",
        vec![cel::common::types::STRING_TYPE],
        |args| {
            let s: &str = args
                .first()
                .and_then(|a| <&str>::try_from(a.as_ref()).ok())
                .ok_or_else(|| ExecutionError::function_error("escapeKey", "expects a string"))?;
            let escaped = s.replace('~', "~0").replace('/', "~1");
            Ok(CowVal::owned(CelString::from(escaped)))
        },
    )
    .map_err(|e| e.to_string())?;
    Ok(env)
}

/// Parses and checks `source`; `declared` are the `variables.<name>` it may
/// use. The error is the text after "compilation failed: ".
pub fn compile(source: &str, structs: Structs, declared: &[String]) -> Result<Compiled, String> {
    if source.trim().is_empty() {
        return Err("expression is empty".into());
    }
    let env = base_env()?;
    let program = env.compile(source).map_err(|e| {
        let text = e.to_string();
        text.trim().to_string()
    })?;
    let mut checker = Checker {
        structs,
        declared,
        found_structs: BTreeSet::new(),
        scope: Vec::new(),
    };
    checker.walk(program.expression())?;
    Ok(Compiled {
        source: source.to_string(),
        program,
        structs: checker.found_structs,
    })
}

struct Checker<'a> {
    structs: Structs,
    declared: &'a [String],
    found_structs: BTreeSet<String>,
    /// Comprehension variables in scope.
    scope: Vec<String>,
}

impl Checker<'_> {
    fn walk(&mut self, e: &IdedExpr) -> Result<(), String> {
        match &e.expr {
            Expr::Unspecified | Expr::Literal(_) => Ok(()),
            Expr::Ident(name) => self.ident(name),
            Expr::Select(sel) => {
                if let Expr::Ident(root) = &sel.operand.expr
                    && root == "variables"
                    && !self.scope.iter().any(|s| s == "variables")
                {
                    if !self.declared.iter().any(|d| d == &sel.field) {
                        return Err(format!(
                            "undeclared reference to 'variables.{}' (a variable is visible to the variables after it and to the mutations)",
                            sel.field
                        ));
                    }
                    return Ok(());
                }
                self.walk(&sel.operand)
            }
            Expr::Call(call) => {
                let name = call.func_name.as_str();
                let qualified = match call.target.as_deref().map(|t| &t.expr) {
                    Some(Expr::Ident(ns))
                        if FUNCTION_NAMESPACES.contains(&ns.as_str())
                            && !self.scope.iter().any(|s| s == ns) =>
                    {
                        Some(format!("{ns}.{name}"))
                    }
                    _ => None,
                };
                // Operands first: an unknown variable is the better message.
                if qualified.is_none()
                    && let Some(t) = &call.target
                {
                    self.walk(t)?;
                }
                for a in &call.args {
                    self.walk(a)?;
                }
                match &qualified {
                    // Macros of a namespace expand to `math.@max` and the like.
                    Some(q) if !name.starts_with('@') && !FUNCTIONS.contains(&q.as_str()) => {
                        Err(unsupported_function(q))
                    }
                    None if !is_operator(name) && !FUNCTIONS.contains(&name) => {
                        Err(unsupported_function(name))
                    }
                    _ => Ok(()),
                }
            }
            Expr::Comprehension(c) => {
                self.walk(&c.iter_range)?;
                self.walk(&c.accu_init)?;
                let mut pushed = 0;
                for v in std::iter::once(&c.iter_var)
                    .chain(c.iter_var2.iter())
                    .chain(std::iter::once(&c.accu_var))
                {
                    self.scope.push(v.clone());
                    pushed += 1;
                }
                let r = self
                    .walk(&c.loop_cond)
                    .and_then(|_| self.walk(&c.loop_step))
                    .and_then(|_| self.walk(&c.result));
                for _ in 0..pushed {
                    self.scope.pop();
                }
                r
            }
            Expr::List(l) => {
                for el in &l.elements {
                    self.walk(el)?;
                }
                Ok(())
            }
            Expr::Map(m) => {
                for entry in &m.entries {
                    match &entry.expr {
                        EntryExpr::MapEntry(me) => {
                            self.walk(&me.key)?;
                            self.walk(&me.value)?;
                        }
                        EntryExpr::StructField(f) => self.walk(&f.value)?,
                    }
                }
                Ok(())
            }
            Expr::Struct(s) => {
                let name = s.type_name.trim_start_matches('.');
                let ok = match self.structs {
                    Structs::None => false,
                    Structs::Object => is_object_type(name),
                    Structs::JsonPatch => name == "JSONPatch" || is_object_type(name),
                };
                if !ok {
                    return Err(format!("undeclared reference to type '{name}'"));
                }
                self.found_structs.insert(name.to_string());
                for entry in &s.entries {
                    match &entry.expr {
                        EntryExpr::StructField(f) => {
                            if name == "JSONPatch" && !JSON_PATCH_FIELDS.contains(&f.field.as_str())
                            {
                                return Err(format!(
                                    "JSONPatch has no field '{}' (fields: op, path, from, value)",
                                    f.field
                                ));
                            }
                            self.walk(&f.value)?;
                        }
                        EntryExpr::MapEntry(me) => {
                            self.walk(&me.key)?;
                            self.walk(&me.value)?;
                        }
                    }
                }
                Ok(())
            }
        }
    }

    fn ident(&self, name: &str) -> Result<(), String> {
        if self.scope.iter().any(|s| s == name)
            || VARIABLES.contains(&name)
            || TYPE_NAMES.contains(&name)
        {
            return Ok(());
        }
        if name == "authorizer" {
            return Err("kube-sim does not support the CEL variable 'authorizer'".into());
        }
        Err(format!("undeclared reference to '{name}'"))
    }
}

fn is_object_type(name: &str) -> bool {
    name == "Object" || name.starts_with("Object.")
}

fn is_operator(name: &str) -> bool {
    name.starts_with('_') || name.contains('@') || name == "!_" || name == "-_"
}

fn unsupported_function(name: &str) -> String {
    format!("kube-sim does not support the CEL function '{name}'")
}

/// A struct type whose values keep their fields as given: `Object...`
/// (any field: kube-sim does not check them against the schema) and
/// `JSONPatch` (its four fields).
struct JsonStruct {
    ty: Type,
    fields: Option<&'static [&'static str]>,
}

impl StructType for JsonStruct {
    fn get_type(&self) -> &Type {
        &self.ty
    }

    fn new_value<'b, 'v>(
        &self,
        fields: BTreeMap<String, CowVal<'b, 'v>>,
    ) -> Result<Box<dyn Val + 'v>, ExecutionError> {
        let mut s = CelStruct::new(self.ty.name().to_string());
        for (k, v) in fields {
            if let Some(allowed) = self.fields
                && !allowed.contains(&k.as_str())
            {
                return Err(ExecutionError::no_such_key(&format!(
                    "field `{k}` on struct `{}`",
                    self.ty.name()
                )));
            }
            s.add_field_value(k, v);
        }
        Ok(Box::new(s))
    }
}

/// The environment a policy's expressions run in: the base environment plus
/// the struct types they construct.
pub fn policy_env<'a>(compiled: impl Iterator<Item = &'a Compiled>) -> Result<Arc<Env>, String> {
    let mut env = base_env()?;
    let names: BTreeSet<&String> = compiled.flat_map(|c| c.structs.iter()).collect();
    for name in names {
        let fields = (name == "JSONPatch").then_some(JSON_PATCH_FIELDS);
        env.add_type(JsonStruct {
            ty: Type::new_struct(name.clone()),
            fields,
        })
        .map_err(|e| e.to_string())?;
    }
    Ok(Arc::new(env))
}

pub use kube_cel::to_cel;

/// A CEL result as JSON; structs (`Object...`, `JSONPatch`) become objects.
pub fn to_json(v: &CelValue) -> Result<Value, String> {
    Ok(match v {
        CelValue::Null => Value::Null,
        CelValue::Bool(b) => Value::Bool(*b),
        CelValue::Int(i) => Value::Number((*i).into()),
        CelValue::UInt(u) => Value::Number((*u).into()),
        CelValue::Float(f) => Number::from_f64(*f)
            .map(Value::Number)
            .ok_or_else(|| format!("{f} is not a JSON number"))?,
        CelValue::String(s) => Value::String(s.to_string()),
        CelValue::Bytes(b) => Value::String(String::from_utf8_lossy(b).into_owned()),
        CelValue::List(l) => Value::Array(l.iter().map(to_json).collect::<Result<_, _>>()?),
        CelValue::Map(m) => {
            let mut out = Map::new();
            for (k, v) in m.map.iter() {
                let key = match k {
                    cel::objects::Key::String(s) => s.to_string(),
                    other => return Err(format!("map key {other:?} is not a string")),
                };
                out.insert(key, to_json(v)?);
            }
            Value::Object(out)
        }
        CelValue::Struct(s) => {
            let mut out = Map::new();
            for (k, v) in s.field_values() {
                let cv = CelValue::try_from(v.as_ref()).map_err(|e| e.to_string())?;
                out.insert(k, to_json(&cv)?);
            }
            Value::Object(out)
        }
        other => {
            return Err(format!(
                "a {} value cannot be written to an object",
                other.type_of()
            ));
        }
    })
}

/// The name of a struct result (`JSONPatch`, `Object`), if it is one.
pub fn struct_name(v: &CelValue) -> Option<&str> {
    match v {
        CelValue::Struct(s) => Some(s.name()),
        _ => None,
    }
}

/// Runs `c` with `vars` bound.
pub fn eval(env: &Arc<Env>, c: &Compiled, vars: &[(&str, &CelValue)]) -> Result<CelValue, String> {
    let mut ctx = Context::with_env(env.clone());
    for (name, value) in vars {
        ctx.add_variable_from_value(*name, (*value).clone());
    }
    c.program
        .execute(&ctx)
        .map_err(|e| go_error_text(&e.to_string()))
}

/// A runtime error as cel-go words it (the `cel` crate capitalises some):
/// `no such key: annotations`.
fn go_error_text(e: &str) -> String {
    match e.strip_prefix("No such key: ") {
        Some(k) => format!("no such key: {k}"),
        None => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(src: &str, structs: Structs, object: Value) -> Result<Value, String> {
        let c = compile(src, structs, &[])?;
        let env = policy_env(std::iter::once(&c))?;
        let obj = to_cel(&object);
        let null = CelValue::Null;
        let out = eval(
            &env,
            &c,
            &[("object", &obj), ("oldObject", &null), ("params", &null)],
        )?;
        to_json(&out)
    }

    #[test]
    fn every_listed_function_runs() {
        let cases = [
            ("size('ab') == 2", "size"),
            ("'abc'.contains('b')", "contains"),
            ("'abc'.startsWith('a')", "startsWith"),
            ("'abc'.endsWith('c')", "endsWith"),
            ("'abc'.matches('^a.c$')", "matches"),
            ("int('2') == 2", "int"),
            ("uint(2) == 2u", "uint"),
            ("double(2) == 2.0", "double"),
            ("string(2) == '2'", "string"),
            ("bytes('a') == b'a'", "bytes"),
            ("bool('true')", "bool"),
            ("dyn(1) == 1", "dyn"),
            ("type(1) == int", "type"),
            ("'abc'.charAt(1) == 'b'", "charAt"),
            ("'abc'.indexOf('c') == 2", "indexOf"),
            ("'abca'.lastIndexOf('a') == 3", "lastIndexOf"),
            ("'AbC'.lowerAscii() == 'abc'", "lowerAscii"),
            ("'abc'.upperAscii() == 'ABC'", "upperAscii"),
            ("'abc'.replace('b', 'x') == 'axc'", "replace"),
            ("'a,b'.split(',') == ['a', 'b']", "split"),
            ("'abc'.substring(1) == 'bc'", "substring"),
            ("' a '.trim() == 'a'", "trim"),
            ("['a', 'b'].join('-') == 'a-b'", "join"),
            ("strings.quote('a') == '\"a\"'", "strings.quote"),
            ("'ab'.reverse() == 'ba'", "reverse"),
            ("[1, 1, 2].distinct() == [1, 2]", "distinct"),
            ("[[1], [2]].flatten() == [1, 2]", "flatten"),
            ("[1, 2, 3].slice(1, 2) == [2]", "slice"),
            ("[2, 1].sort() == [1, 2]", "sort"),
            ("lists.range(2) == [0, 1]", "lists.range"),
            ("math.greatest(1, 2) == 2", "math.greatest"),
            ("math.least(1, 2) == 1", "math.least"),
            ("math.abs(-1) == 1", "math.abs"),
            ("math.ceil(1.2) == 2.0", "math.ceil"),
            ("math.floor(1.2) == 1.0", "math.floor"),
            ("math.round(1.6) == 2.0", "math.round"),
            ("math.sign(-2) == -1", "math.sign"),
            ("optional.of(1).value() == 1", "optional.of"),
            ("!optional.none().hasValue()", "optional.none"),
            (
                "!optional.ofNonZeroValue(0).hasValue()",
                "optional.ofNonZeroValue",
            ),
            ("optional.of(1).hasValue()", "hasValue"),
            ("optional.of(2).value() == 2", "value"),
            ("optional.none().or(optional.of(1)).value() == 1", "or"),
            ("optional.none().orValue(3) == 3", "orValue"),
            (
                "jsonpatch.escapeKey('a/b~c') == 'a~1b~0c'",
                "jsonpatch.escapeKey",
            ),
        ];
        let covered: BTreeSet<&str> = cases.iter().map(|(_, f)| *f).collect();
        for f in FUNCTIONS {
            assert!(covered.contains(f), "no case runs {f}");
        }
        for (src, f) in cases {
            assert_eq!(
                run(src, Structs::None, json!({})),
                Ok(json!(true)),
                "{f}: {src}"
            );
        }
    }

    #[test]
    fn object_access_macros_and_optionals() {
        let pvc = json!({"metadata": {"name": "a", "finalizers": ["x", "y"]}, "spec": {"n": 3}});
        for (src, want) in [
            (
                "object.metadata.finalizers.exists(f, f == 'y')",
                json!(true),
            ),
            ("has(object.metadata.labels)", json!(false)),
            ("object.metadata.?labels.orValue({}).size()", json!(0)),
            ("object.spec.n + 1", json!(4)),
            (
                "object.metadata.finalizers.filter(f, f != 'x')",
                json!(["y"]),
            ),
            (
                "object.metadata.finalizers.map(f, f + '!')",
                json!(["x!", "y!"]),
            ),
            ("oldObject == null", json!(true)),
        ] {
            assert_eq!(run(src, Structs::None, pvc.clone()), Ok(want), "{src}");
        }
    }

    #[test]
    fn structs_become_json() {
        let out = run(
            "[JSONPatch{op: 'add', path: '/metadata/finalizers/-', value: 'x'}]",
            Structs::JsonPatch,
            json!({}),
        );
        assert_eq!(
            out,
            Ok(json!([{"op": "add", "path": "/metadata/finalizers/-", "value": "x"}]))
        );
        let out = run(
            "Object{metadata: Object.metadata{finalizers: ['x']}}",
            Structs::Object,
            json!({}),
        );
        assert_eq!(out, Ok(json!({"metadata": {"finalizers": ["x"]}})));
    }

    #[test]
    fn unsupported_features_are_named_at_compile() {
        for (src, structs, want) in [
            (
                "authorizer.group('').check('x')",
                Structs::None,
                "authorizer",
            ),
            (
                "quantity('1Gi').isGreaterThan(quantity('1'))",
                Structs::None,
                "quantity",
            ),
            (
                "timestamp('2024-01-01T00:00:00Z') > timestamp('2023-01-01T00:00:00Z')",
                Structs::None,
                "timestamp",
            ),
            ("foo == 1", Structs::None, "undeclared reference to 'foo'"),
            ("variables.x", Structs::None, "variables.x"),
            ("JSONPatch{op: 'add'}", Structs::Object, "JSONPatch"),
            (
                "JSONPatch{op: 'add', bogus: 1}",
                Structs::JsonPatch,
                "bogus",
            ),
            ("Object{}", Structs::None, "Object"),
            ("object.metadata.name ==", Structs::None, ""),
            ("", Structs::None, "empty"),
        ] {
            match compile(src, structs, &[]) {
                Ok(_) => panic!("{src} compiled"),
                Err(e) => assert!(e.contains(want), "{src}: {e}"),
            }
        }
        assert!(compile("variables.x == 1", Structs::None, &["x".to_string()]).is_ok());
        assert!(compile("[1].all(object, object > 0)", Structs::None, &[]).is_ok());
    }
}
