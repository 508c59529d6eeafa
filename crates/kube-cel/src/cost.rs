//! The static half of the cost budget: one walk over a compiled expression
//! that both rewrites it to charge the run-time meter ([`crate::guard`]) and
//! estimates, for inputs of given maximum sizes, the most the meter can be
//! charged (cost) and the most the expression can create (memory). It is
//! what kube-apiserver's CEL does at compile time (cel-go's
//! `checker.Cost`, with Kubernetes' size estimates: a value read from a
//! request is at most `MaxRequestSizeBytes`), in the meter's own units, so
//! that an expression the estimate admits never runs past what it was
//! admitted for (the fuzz tests check that on random expressions and
//! objects).
//!
//! Sizes and costs are kept as linear forms over the sizes of the
//! comprehension variables in scope. That is what lets
//! `object.spec.containers.map(c, c.env.map(e, e.name))` be linear in the
//! size of the object: the inner loops together visit each `env` entry once
//! (the sum of the sizes of the containers is at most the size of the
//! list), where a product of the two list lengths would call it quadratic.
//! A term that is a product of two sizes is bounded by replacing one factor
//! with its maximum, which keeps the estimate an upper bound.

use cel::IdedExpr;
use cel::common::ast::{
    CallExpr, ComprehensionExpr, EntryExpr, Expr, IdedEntryExpr, ListExpr, LiteralValue, MapExpr,
    StructExpr, operators,
};

use crate::guard;

/// Function namespaces: `lists.range(n)` is a call of `lists.range`, not a
/// method of a variable `lists`.
const NAMESPACES: &[&str] = &[
    "lists",
    "strings",
    "math",
    "optional",
    "base64",
    "jsonpatch",
];

/// The largest list `lists.range` builds (the `cel` crate refuses more).
const MAX_RANGE: f64 = 1_000_000.0;

/// An instrumented expression and its estimate.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The expression rewritten to charge the meter; run it with
    /// [`guard::execute`].
    pub expr: IdedExpr,
    pub estimate: Estimate,
}

/// The most an evaluation can cost and create, for inputs no larger than
/// the sizes the plan was made for.
#[derive(Clone, Debug, PartialEq)]
pub struct Estimate {
    pub cost: f64,
    pub memory: f64,
    /// Functions whose cost is unknown (the estimate is then infinite).
    pub unknown: Vec<String>,
}

impl Estimate {
    /// kube-apiserver's refusal, in its words: "estimated rule cost exceeds
    /// budget by factor of 3.5x (try simplifying the rule ...)", with why
    /// when the estimate is infinite.
    pub fn check(&self, cost_limit: f64, memory_limit: f64) -> Result<(), String> {
        if let Some(f) = self.unknown.first() {
            return Err(format!(
                "the cost of the function '{f}' cannot be estimated; it cannot be used here"
            ));
        }
        if self.cost > cost_limit {
            return Err(format!(
                "estimated cost exceeds budget by factor of {} (the expression may do work \
                 quadratic in the size of an object, e.g. a comprehension inside one over the \
                 same list; try simplifying it)",
                factor(self.cost, cost_limit)
            ));
        }
        if self.memory > memory_limit {
            return Err(format!(
                "estimated memory exceeds budget by factor of {} (the expression may create \
                 values much larger than the object, e.g. copies of the object in a \
                 comprehension; try simplifying it)",
                factor(self.memory, memory_limit)
            ));
        }
        Ok(())
    }
}

/// As kube-apiserver words it (apiextensions validation's
/// `getCostErrorMessage`).
fn factor(value: f64, limit: f64) -> String {
    let f = value / limit;
    if f > 100.0 || !f.is_finite() {
        "more than 100x".into()
    } else if f < 1.5 {
        format!("{f:.6}x")
    } else {
        format!("{f:.1}x")
    }
}

/// Instruments `expr` and estimates it with each variable of `vars` at
/// most the given size (any other identifier is a type name or a
/// namespace). A variable's name may be a path (`object.metadata.name`):
/// the size of that field.
pub fn plan(expr: &IdedExpr, vars: &[(&str, u64)]) -> Plan {
    let mut w = Walker {
        scopes: Vec::new(),
        vars: vars
            .iter()
            .map(|(n, s)| (n.to_string(), *s as f64))
            .collect(),
        sym_max: Vec::new(),
        unknown: Vec::new(),
    };
    let (expr, n) = w.walk(expr);
    let (cost, memory) = (w.sym_free_max(&n.cost), w.sym_free_max(&n.alloc));
    let mut unknown = w.unknown;
    unknown.sort();
    unknown.dedup();
    let inf = |v: f64| if unknown.is_empty() { v } else { f64::INFINITY };
    Plan {
        expr,
        estimate: Estimate {
            cost: inf(cost),
            memory: inf(memory),
            unknown,
        },
    }
}

/// `a * b` where `0 * inf` is 0 (an empty loop of an unbounded body costs
/// nothing).
fn smul(a: f64, b: f64) -> f64 {
    if a == 0.0 || b == 0.0 { 0.0 } else { a * b }
}

/// `c + sum(coef * size(sym))`, every coefficient non-negative.
#[derive(Clone, Debug, Default, PartialEq)]
struct Lin {
    c: f64,
    t: Vec<(usize, f64)>,
}

impl Lin {
    fn k(c: f64) -> Lin {
        Lin { c, t: Vec::new() }
    }

    fn sym(s: usize) -> Lin {
        Lin {
            c: 0.0,
            t: vec![(s, 1.0)],
        }
    }

    fn is_const(&self) -> bool {
        self.t.is_empty()
    }

    fn zip(&self, o: &Lin, f: impl Fn(f64, f64) -> f64) -> Lin {
        let mut t: Vec<(usize, f64)> = Vec::new();
        let (mut i, mut j) = (0, 0);
        while i < self.t.len() || j < o.t.len() {
            let a = self.t.get(i);
            let b = o.t.get(j);
            match (a, b) {
                (Some(&(sa, ca)), Some(&(sb, cb))) if sa == sb => {
                    t.push((sa, f(ca, cb)));
                    i += 1;
                    j += 1;
                }
                (Some(&(sa, ca)), Some(&(sb, _))) if sa < sb => {
                    t.push((sa, f(ca, 0.0)));
                    i += 1;
                }
                (Some(&(sa, ca)), None) => {
                    t.push((sa, f(ca, 0.0)));
                    i += 1;
                }
                (_, Some(&(sb, cb))) => {
                    t.push((sb, f(0.0, cb)));
                    j += 1;
                }
                (None, None) => break,
            }
        }
        t.retain(|(_, c)| *c != 0.0);
        Lin {
            c: f(self.c, o.c),
            t,
        }
    }

    fn add(&self, o: &Lin) -> Lin {
        self.zip(o, |a, b| a + b)
    }

    /// Component-wise maximum: an upper bound of both.
    fn max(&self, o: &Lin) -> Lin {
        self.zip(o, f64::max)
    }

    fn plus(&self, k: f64) -> Lin {
        let mut l = self.clone();
        l.c += k;
        l
    }

    fn scale(&self, k: f64) -> Lin {
        if k == 0.0 {
            return Lin::default();
        }
        Lin {
            c: smul(self.c, k),
            t: self.t.iter().map(|&(s, c)| (s, smul(c, k))).collect(),
        }
    }

    fn coef(&self, s: usize) -> f64 {
        self.t
            .iter()
            .find(|(x, _)| *x == s)
            .map(|(_, c)| *c)
            .unwrap_or(0.0)
    }

    fn without(&self, s: usize) -> Lin {
        Lin {
            c: self.c,
            t: self.t.iter().copied().filter(|(x, _)| *x != s).collect(),
        }
    }
}

/// What the walk knows of a subexpression: the most its value can weigh,
/// the most it costs and creates.
#[derive(Clone, Debug, Default)]
struct Node {
    size: Lin,
    cost: Lin,
    alloc: Lin,
    /// An integer literal, for `lists.range(3)`.
    int: Option<i64>,
    literal: bool,
}

impl Node {
    fn sized(size: Lin) -> Node {
        Node {
            size,
            ..Default::default()
        }
    }

    /// This node's cost and allocations plus another's.
    fn and(mut self, o: &Node) -> Node {
        self.cost = self.cost.add(&o.cost);
        self.alloc = self.alloc.add(&o.alloc);
        self
    }
}

struct Walker {
    /// Comprehension variables in scope, innermost last.
    scopes: Vec<(String, Lin)>,
    vars: Vec<(String, f64)>,
    /// The largest size each comprehension variable can have.
    sym_max: Vec<f64>,
    unknown: Vec<String>,
}

/// `a.b.c` as its segments (`cel`'s own helper is private).
trait Segments {
    fn qualified_name_segments_pub(&self) -> Option<Vec<&str>>;
}

impl Segments for Expr {
    fn qualified_name_segments_pub(&self) -> Option<Vec<&str>> {
        let mut segments = Vec::new();
        let mut expr = self;
        loop {
            match expr {
                Expr::Ident(name) => {
                    segments.push(name.as_str());
                    segments.reverse();
                    return Some(segments);
                }
                Expr::Select(s) if !s.test => {
                    segments.push(s.field.as_str());
                    expr = &s.operand.expr;
                }
                _ => return None,
            }
        }
    }
}

fn synth(expr: Expr) -> IdedExpr {
    IdedExpr { id: 0, expr }
}

fn call(name: &str, args: Vec<IdedExpr>) -> IdedExpr {
    synth(Expr::Call(CallExpr {
        func_name: name.to_string(),
        target: None,
        args,
    }))
}

fn lit(v: LiteralValue) -> IdedExpr {
    synth(Expr::Literal(v))
}

fn is_ident(e: &IdedExpr, name: &str) -> bool {
    matches!(&e.expr, Expr::Ident(n) if n == name)
}

/// `@tick() ? then : otherwise`: the tick comes first, so an exhausted
/// meter stops the iteration before its body runs.
fn after_tick(then: IdedExpr, otherwise: LiteralValue) -> IdedExpr {
    call(
        operators::CONDITIONAL,
        vec![call(guard::TICK, vec![]), then, lit(otherwise)],
    )
}

/// The element of a `map`/`filter` step `@result + [e]`.
fn append_elem<'a>(step: &'a IdedExpr, accu: &str) -> Option<&'a IdedExpr> {
    let Expr::Call(c) = &step.expr else {
        return None;
    };
    match (c.func_name.as_str(), c.target.as_ref(), c.args.as_slice()) {
        (operators::ADD, None, [a, l]) if is_ident(a, accu) => match &l.expr {
            Expr::List(list) if list.elements.len() == 1 && list.optional_indices.is_empty() => {
                list.elements.first()
            }
            _ => None,
        },
        _ => None,
    }
}

impl Walker {
    fn sym_free_max(&self, l: &Lin) -> f64 {
        l.c + l
            .t
            .iter()
            .map(|&(s, c)| smul(c, self.sym_max.get(s).copied().unwrap_or(f64::INFINITY)))
            .sum::<f64>()
    }

    /// An upper bound of `a * b`, linear: one factor replaced by its maximum
    /// when both depend on comprehension variables.
    fn mul(&self, a: &Lin, b: &Lin) -> Lin {
        if a.is_const() {
            b.scale(a.c)
        } else if b.is_const() {
            a.scale(b.c)
        } else {
            let (am, bm) = (self.sym_free_max(a), self.sym_free_max(b));
            if am <= bm { b.scale(am) } else { a.scale(bm) }
        }
    }

    /// An upper bound of the sum of `f` over the elements of a range of
    /// `n` elements and size `range`, `f` being linear in the element's
    /// size `sym`: `n * f(0) + f'(sym) * range`.
    fn sum_over(&self, f: &Lin, sym: usize, n: &Lin, range: &Lin) -> Lin {
        self.mul(n, &f.without(sym)).add(&range.scale(f.coef(sym)))
    }

    fn lookup(&self, name: &str) -> Lin {
        if let Some((_, l)) = self.scopes.iter().rev().find(|(n, _)| n == name) {
            return l.clone();
        }
        if let Some((_, s)) = self.vars.iter().find(|(n, _)| n == name) {
            return Lin::k(*s);
        }
        // A type name (`int`) or a namespace: small.
        Lin::k(16.0)
    }

    /// The size a variable path (`object.metadata.name`) is declared with,
    /// unless its root is a comprehension variable.
    fn path_size(&self, e: &Expr) -> Option<f64> {
        let segments = e.qualified_name_segments_pub()?;
        if self.in_scope(segments.first()?) {
            return None;
        }
        let path = segments.join(".");
        self.vars.iter().find(|(n, _)| *n == path).map(|(_, s)| *s)
    }

    fn in_scope(&self, name: &str) -> bool {
        self.scopes.iter().any(|(n, _)| n == name)
    }

    /// `@charge(x)`: a new value is 1 plus a tenth of its size, and its size
    /// in memory.
    fn charge(&self, (e, mut n): (IdedExpr, Node)) -> (IdedExpr, Node) {
        n.cost = n.cost.add(&n.size.scale(0.1)).plus(1.0);
        n.alloc = n.alloc.add(&n.size);
        n.literal = false;
        n.int = None;
        (call(guard::CHARGE, vec![e]), n)
    }

    /// `@arg(x)`: read in full, a tenth of its size. Literals are free.
    fn arg(&self, (e, mut n): (IdedExpr, Node)) -> (IdedExpr, Node) {
        if n.literal {
            return (e, n);
        }
        n.cost = n.cost.add(&n.size.scale(0.1));
        (call(guard::ARG, vec![e]), n)
    }

    /// `@own(x)`: copied into a result, a tenth of its size and its size
    /// (plus a separator) in memory.
    fn own(&self, (e, mut n): (IdedExpr, Node)) -> (IdedExpr, Node) {
        n.cost = n.cost.add(&n.size.scale(0.1));
        n.alloc = n.alloc.add(&n.size).plus(1.0);
        (call(guard::OWN, vec![e]), n)
    }

    fn walk(&mut self, e: &IdedExpr) -> (IdedExpr, Node) {
        let id = e.id;
        let (expr, node) = match &e.expr {
            Expr::Unspecified => (Expr::Unspecified, Node::default()),
            Expr::Literal(l) => {
                let (size, int) = match l {
                    LiteralValue::Boolean(_) | LiteralValue::Null => (4.0, None),
                    LiteralValue::Int(i) => (1.0, Some(*i.inner())),
                    LiteralValue::UInt(_) | LiteralValue::Double(_) => (1.0, None),
                    LiteralValue::String(s) => (s.inner().len() as f64 + 2.0, None),
                    LiteralValue::Bytes(b) => (b.inner().len() as f64 + 2.0, None),
                };
                let mut n = Node::sized(Lin::k(size));
                n.int = int;
                n.literal = true;
                (e.expr.clone(), n)
            }
            Expr::Ident(name) => (e.expr.clone(), Node::sized(self.lookup(name))),
            Expr::Select(s) => {
                let (operand, n) = self.walk(&s.operand);
                let size = if s.test {
                    Lin::k(4.0)
                } else {
                    match self.path_size(&e.expr) {
                        Some(bound) => Lin::k(bound),
                        None => n.size.clone(),
                    }
                };
                let mut sel = s.clone();
                sel.operand = Box::new(operand);
                (
                    Expr::Select(sel),
                    Node {
                        size,
                        ..Node::default()
                    }
                    .and(&n),
                )
            }
            Expr::List(l) => {
                let mut out = Node::sized(Lin::k(2.0 + (l.elements.len() as f64 - 1.0).max(0.0)));
                let mut elements = Vec::new();
                for el in &l.elements {
                    let (x, n) = self.walk(el);
                    out.size = out.size.add(&n.size);
                    out = out.and(&n);
                    elements.push(x);
                }
                let list = Expr::List(ListExpr {
                    elements,
                    optional_indices: l.optional_indices.clone(),
                });
                let (x, n) = self.charge((synth(list), out));
                return (IdedExpr { id, expr: x.expr }, n);
            }
            Expr::Map(m) => {
                let (entries, out) = self.entries(&m.entries);
                let (x, n) = self.charge((synth(Expr::Map(MapExpr { entries })), out));
                return (IdedExpr { id, expr: x.expr }, n);
            }
            Expr::Struct(s) => {
                let (entries, out) = self.entries(&s.entries);
                let st = Expr::Struct(StructExpr {
                    type_name: s.type_name.clone(),
                    entries,
                });
                let (x, n) = self.charge((synth(st), out));
                return (IdedExpr { id, expr: x.expr }, n);
            }
            Expr::Call(c) => return self.call(id, c),
            Expr::Comprehension(c) => {
                let (x, n) = self.comprehension(c);
                (Expr::Comprehension(Box::new(x)), n)
            }
        };
        (IdedExpr { id, expr }, node)
    }

    fn entries(&mut self, entries: &[IdedEntryExpr]) -> (Vec<IdedEntryExpr>, Node) {
        let mut out = Node::sized(Lin::k(2.0 + (entries.len() as f64 - 1.0).max(0.0)));
        let mut walked = Vec::new();
        for en in entries {
            let expr = match &en.expr {
                EntryExpr::MapEntry(me) => {
                    let (k, kn) = self.walk(&me.key);
                    let (v, vn) = self.walk(&me.value);
                    out.size = out.size.add(&kn.size).add(&vn.size).plus(1.0);
                    out = out.and(&kn).and(&vn);
                    let mut me = me.clone();
                    me.key = k;
                    me.value = v;
                    EntryExpr::MapEntry(me)
                }
                EntryExpr::StructField(f) => {
                    let (v, vn) = self.walk(&f.value);
                    out.size = out.size.add(&vn.size).plus(f.field.len() as f64 + 3.0);
                    out = out.and(&vn);
                    let mut f = f.clone();
                    f.value = v;
                    EntryExpr::StructField(f)
                }
            };
            walked.push(IdedEntryExpr { id: en.id, expr });
        }
        (walked, out)
    }

    fn call(&mut self, id: u64, c: &CallExpr) -> (IdedExpr, Node) {
        let name = c.func_name.as_str();
        // The same call on the walked arguments, of result `size`, costing
        // what they cost.
        let plain = |args: Vec<(IdedExpr, Node)>, size: Lin| {
            let mut n = Node::sized(size);
            let mut xs = Vec::new();
            for (x, an) in args {
                n = n.and(&an);
                xs.push(x);
            }
            (
                IdedExpr {
                    id,
                    expr: Expr::Call(CallExpr {
                        func_name: c.func_name.clone(),
                        target: None,
                        args: xs,
                    }),
                },
                n,
            )
        };
        if c.target.is_none() {
            match (name, c.args.len()) {
                (operators::LOGICAL_AND | operators::LOGICAL_OR, 2) => {
                    let args = c.args.iter().map(|a| self.walk(a)).collect();
                    return plain(args, Lin::k(4.0));
                }
                (operators::CONDITIONAL, 3) => {
                    let (cx, cn) = self.walk(&c.args[0]);
                    let (ax, an) = self.walk(&c.args[1]);
                    let (bx, bn) = self.walk(&c.args[2]);
                    let n = Node {
                        size: an.size.max(&bn.size),
                        cost: cn.cost.add(&an.cost.max(&bn.cost)),
                        alloc: cn.alloc.add(&an.alloc.max(&bn.alloc)),
                        ..Node::default()
                    };
                    let (x, _) = plain(vec![(cx, cn), (ax, an), (bx, bn)], Lin::default());
                    return (x, n);
                }
                (operators::LOGICAL_NOT | operators::NOT_STRICTLY_FALSE, 1) => {
                    let args = vec![self.walk(&c.args[0])];
                    return plain(args, Lin::k(4.0));
                }
                (operators::NEGATE, 1) => {
                    let (x, n) = self.walk(&c.args[0]);
                    let int = n.int.and_then(i64::checked_neg);
                    let (x, mut n) = plain(vec![(x, n)], Lin::k(1.0));
                    n.int = int;
                    return (x, n);
                }
                (
                    operators::SUBSTRACT
                    | operators::MULTIPLY
                    | operators::DIVIDE
                    | operators::MODULO,
                    2,
                ) => {
                    let args = c.args.iter().map(|a| self.walk(a)).collect();
                    return plain(args, Lin::k(1.0));
                }
                (
                    operators::EQUALS
                    | operators::NOT_EQUALS
                    | operators::LESS
                    | operators::LESS_EQUALS
                    | operators::GREATER
                    | operators::GREATER_EQUALS
                    | operators::IN,
                    2,
                ) => {
                    let args = c
                        .args
                        .iter()
                        .map(|a| {
                            let w = self.walk(a);
                            self.arg(w)
                        })
                        .collect();
                    return plain(args, Lin::k(4.0));
                }
                (operators::INDEX, 2) => {
                    let (a, an) = self.walk(&c.args[0]);
                    let b = self.walk(&c.args[1]);
                    let size = an.size.clone();
                    return plain(vec![(a, an), b], size);
                }
                (operators::OPT_INDEX | operators::OPT_SELECT, 2) => {
                    let (a, an) = self.walk(&c.args[0]);
                    let b = self.walk(&c.args[1]);
                    let size = an.size.plus(1.0);
                    let r = plain(vec![(a, an), b], size);
                    return self.charge(r);
                }
                (operators::ADD, 2) => {
                    let (a, an) = self.walk(&c.args[0]);
                    let (b, bn) = self.walk(&c.args[1]);
                    let size = an.size.add(&bn.size);
                    let mut n = Node::sized(size.clone()).and(&an).and(&bn);
                    n.cost = n.cost.add(&size.scale(0.1)).plus(1.0);
                    n.alloc = n.alloc.add(&size);
                    let mut x = call(guard::ADD, vec![a, b]);
                    x.id = id;
                    return (x, n);
                }
                _ => {}
            }
        }
        self.function(id, c)
    }

    /// A function call: its target and arguments read (`@arg`), its result
    /// charged (`@charge`).
    fn function(&mut self, id: u64, c: &CallExpr) -> (IdedExpr, Node) {
        let namespace = match c.target.as_deref().map(|t| &t.expr) {
            Some(Expr::Ident(ns)) if NAMESPACES.contains(&ns.as_str()) && !self.in_scope(ns) => {
                Some(ns.as_str())
            }
            _ => None,
        };
        let qualified = match namespace {
            Some(ns) => format!("{ns}.{}", c.func_name),
            None => c.func_name.clone(),
        };
        let mut n = Node::default();
        let target = match (&c.target, namespace) {
            (Some(t), None) => {
                let w = self.walk(t);
                let (x, tn) = self.arg(w);
                n = n.and(&tn);
                Some((x, tn))
            }
            (Some(t), Some(_)) => Some(((**t).clone(), Node::default())),
            (None, _) => None,
        };
        let mut args = Vec::new();
        for a in &c.args {
            let w = self.walk(a);
            let (mut x, an) = self.arg(w);
            if qualified == "lists.range" {
                x = call(guard::RANGE, vec![x]);
            }
            n = n.and(&an);
            args.push((x, an));
        }
        let t_size = target
            .as_ref()
            .filter(|_| namespace.is_none())
            .map(|(_, tn)| &tn.size);
        let a_nodes: Vec<&Node> = args.iter().map(|(_, an)| an).collect();
        n.size = match result_size(&qualified, t_size, &a_nodes, |a, b| self.mul(a, b)) {
            Some(s) => s,
            None => {
                self.unknown.push(qualified.clone());
                Lin::k(f64::INFINITY)
            }
        };
        let x = IdedExpr {
            id,
            expr: Expr::Call(CallExpr {
                func_name: c.func_name.clone(),
                target: target.map(|(x, _)| Box::new(x)),
                args: args.into_iter().map(|(x, _)| x).collect(),
            }),
        };
        self.charge((x, n))
    }

    fn comprehension(&mut self, c: &ComprehensionExpr) -> (ComprehensionExpr, Node) {
        let (range, rn) = self.walk(&c.iter_range);
        let n_elems = rn.size.scale(0.5);
        let sym = self.sym_max.len();
        self.sym_max.push(self.sym_free_max(&rn.size));
        let depth = self.scopes.len();
        self.scopes.push((c.iter_var.clone(), Lin::sym(sym)));
        if let Some(v2) = &c.iter_var2 {
            self.scopes.push((v2.clone(), Lin::sym(sym)));
        }
        let accu = c.accu_var.as_str();
        let scalar_accu = matches!(
            &c.accu_init.expr,
            Expr::Literal(LiteralValue::Boolean(_) | LiteralValue::Int(_))
        );
        let is_append = is_ident(&c.result, accu)
            && matches!(c.loop_cond.expr, Expr::Literal(_))
            && matches!(&c.accu_init.expr, Expr::List(l) if l.elements.is_empty());
        let mut out = c.clone();
        out.iter_range = range;
        // What one iteration costs, creates, and (map, filter) adds to the
        // result.
        let (per_cost, per_alloc, per_size, result_node);
        let guarded_append = match &c.loop_step.expr {
            Expr::Call(k)
                if k.func_name == operators::CONDITIONAL
                    && k.args.len() == 3
                    && is_ident(&k.args[2], accu) =>
            {
                append_elem(&k.args[1], accu).map(|e| (Some(&k.args[0]), e))
            }
            _ => append_elem(&c.loop_step, accu).map(|e| (None, e)),
        };
        let fold = match &c.loop_step.expr {
            Expr::Call(k)
                if (k.func_name == operators::LOGICAL_AND
                    || k.func_name == operators::LOGICAL_OR)
                    && k.args.len() == 2
                    && is_ident(&k.args[0], accu)
                    && is_ident(&c.result, accu)
                    && scalar_accu =>
            {
                Some((k.func_name.clone(), &k.args[1]))
            }
            _ => None,
        };
        match (is_append, guarded_append, fold) {
            (true, Some((guard_expr, elem)), _) => {
                // @result + [@tick() ? @own(e) : null], or with a guard
                // (@tick() ? g : false) ? @result + [@own(e)] : @result.
                self.scopes.push((accu.to_string(), Lin::k(f64::INFINITY)));
                let w = self.walk(elem);
                let (ex, en) = self.own(w);
                let accu_ident = synth(Expr::Ident(accu.to_string()));
                let mut cost = en.cost.plus(1.0);
                let mut alloc = en.alloc.clone();
                let step = match guard_expr {
                    None => call(
                        operators::ADD,
                        vec![
                            accu_ident,
                            synth(Expr::List(ListExpr::new(vec![after_tick(
                                ex,
                                LiteralValue::Null,
                            )]))),
                        ],
                    ),
                    Some(g) => {
                        let (gx, gn) = self.walk(g);
                        cost = cost.add(&gn.cost);
                        alloc = alloc.add(&gn.alloc);
                        call(
                            operators::CONDITIONAL,
                            vec![
                                after_tick(gx, LiteralValue::Boolean(false.into())),
                                call(
                                    operators::ADD,
                                    vec![
                                        accu_ident.clone(),
                                        synth(Expr::List(ListExpr::new(vec![ex]))),
                                    ],
                                ),
                                accu_ident,
                            ],
                        )
                    }
                };
                out.loop_step = step;
                per_cost = cost;
                per_alloc = alloc;
                per_size = Some(en.size.plus(1.0));
                result_node = Node::default();
            }
            (_, _, Some((op, p))) => {
                self.scopes.push((accu.to_string(), Lin::k(4.0)));
                let (px, pn) = self.walk(p);
                let (cx, cn) = self.walk(&c.loop_cond);
                out.loop_cond = cx;
                out.loop_step = call(
                    &op,
                    vec![
                        synth(Expr::Ident(accu.to_string())),
                        after_tick(px, LiteralValue::Boolean(false.into())),
                    ],
                );
                per_cost = pn.cost.add(&cn.cost).plus(1.0);
                per_alloc = pn.alloc.add(&cn.alloc);
                per_size = None;
                result_node = Node::sized(Lin::k(4.0));
            }
            _ => {
                // Any other shape (exists_one): the accumulator must stay a
                // scalar for the estimate to hold.
                let accu_size = if scalar_accu {
                    Lin::k(4.0)
                } else {
                    Lin::k(f64::INFINITY)
                };
                self.scopes.push((accu.to_string(), accu_size));
                let (cx, cn) = self.walk(&c.loop_cond);
                let (sx, sn) = self.walk(&c.loop_step);
                out.loop_cond = cx;
                out.loop_step = after_tick(sx, LiteralValue::Null);
                per_cost = sn.cost.add(&cn.cost).plus(1.0);
                per_alloc = sn.alloc.add(&cn.alloc);
                per_size = None;
                let (rx, rn2) = self.walk(&c.result);
                out.result = rx;
                result_node = rn2;
            }
        }
        self.scopes.truncate(depth);
        let cost = self
            .sum_over(&per_cost, sym, &n_elems, &rn.size)
            .add(&rn.cost)
            .add(&result_node.cost);
        let alloc = self
            .sum_over(&per_alloc, sym, &n_elems, &rn.size)
            .add(&rn.alloc)
            .add(&result_node.alloc);
        let size = match per_size {
            Some(s) => self.sum_over(&s, sym, &n_elems, &rn.size).plus(2.0),
            None => result_node.size.without(sym),
        };
        (
            out,
            Node {
                size,
                cost,
                alloc,
                ..Node::default()
            },
        )
    }
}

/// The most a function's result can weigh, from the sizes of its target
/// and arguments; `None` for a function this estimate does not know.
fn result_size(
    name: &str,
    target: Option<&Lin>,
    args: &[&Node],
    mul: impl Fn(&Lin, &Lin) -> Lin,
) -> Option<Lin> {
    let t = || {
        target
            .cloned()
            .or_else(|| args.first().map(|a| a.size.clone()))
    };
    let a = |i: usize| args.get(i).map(|n| n.size.clone()).unwrap_or_default();
    // A member call's first argument; a global call's second.
    let arg0 = || if target.is_some() { a(0) } else { a(1) };
    Some(match name {
        "size" | "int" | "uint" | "double" | "bool" | "contains" | "startsWith" | "endsWith"
        | "matches" | "indexOf" | "lastIndexOf" | "hasValue" | "type" | "charAt" => Lin::k(8.0),
        n if n.starts_with("math.") => Lin::k(8.0),
        "string" => t()?.plus(32.0),
        "bytes" => t()?.plus(2.0),
        "dyn"
        | "lowerAscii"
        | "upperAscii"
        | "trim"
        | "substring"
        | "slice"
        | "distinct"
        | "sort"
        | "flatten"
        | "value"
        | "reverse"
        | "@sortByAssociatedKeys" => t()?,
        // Each occurrence of `from` (at most one per character, and one
        // more) becomes `to`.
        "replace" => {
            let t = t()?;
            mul(&t.plus(1.0), &arg0().plus(1.0)).add(&t)
        }
        // At most one part per character: a quoted string each.
        "split" => t()?.scale(4.0).plus(5.0),
        // A separator between each two elements.
        "join" => {
            let t = t()?;
            mul(&t.scale(0.5), &arg0()).add(&t).plus(2.0)
        }
        "strings.quote" => a(0).scale(2.0).plus(2.0),
        // At most one clause per two characters of the format, each taking
        // its own argument and writing at most 8 characters per unit of it
        // (%b, %x) or 420 for a number (a precision of at most 100).
        "format" => {
            let t = t()?;
            t.scale(211.0).add(&arg0().scale(8.0)).plus(2.0)
        }
        "optional.of" | "optional.ofNonZeroValue" => a(0).plus(1.0),
        "optional.none" => Lin::k(1.0),
        "or" | "orValue" => t()?.max(&arg0()),
        "lists.range" => {
            let n = args
                .first()
                .and_then(|a| a.int)
                .map(|i| (i.max(0) as f64).min(MAX_RANGE))
                .unwrap_or(MAX_RANGE);
            Lin::k(2.0 * n + 2.0)
        }
        "jsonpatch.escapeKey" => a(0).scale(2.0),
        "base64.encode" => a(0).scale(2.0).plus(4.0),
        "base64.decode" => a(0),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn est(src: &str) -> Estimate {
        let env = crate::env().unwrap();
        let p = env.compile(src).unwrap();
        plan(p.expression(), &[("object", crate::guard::MAX_OBJECT_SIZE)]).estimate
    }

    #[test]
    fn a_pass_over_the_object_is_linear_and_a_nested_one_is_not() {
        let one = est("object.spec.containers.map(c, c.name)");
        let parts = est("object.spec.containers.map(c, c.env.map(e, e.name))");
        let square = est("object.spec.containers.map(c, object.spec.containers.map(d, d.name))");
        let s = crate::guard::MAX_OBJECT_SIZE as f64;
        assert!(one.cost < 2.0 * s, "{one:?}");
        assert!(parts.cost < 4.0 * s, "{parts:?}");
        assert!(square.cost > s * s / 10.0, "{square:?}");
    }

    #[test]
    fn literals_are_sized_exactly() {
        let e = est("[1, 2, 3].map(x, x * 2)");
        assert!(e.cost < 30.0, "{e:?}");
        let r = est("lists.range(10).map(x, lists.range(10).map(y, y))");
        assert!(r.cost < 2000.0, "{r:?}");
        let big = est("lists.range(1000000).map(x, object)");
        assert!(big.memory > 1e12, "{big:?}");
    }

    #[test]
    fn an_unknown_function_cannot_be_estimated() {
        let e = est("object.foo()");
        assert_eq!(e.unknown, ["foo"]);
        assert!(e.check(1e9, 1e9).unwrap_err().contains("'foo'"));
    }
}
