//! The static shape of one parsed CEL expression, and the bounds it must stay within: its
//! AST's nodes, depth and comprehension nesting, the functions it calls, and, before each
//! evaluation, its cost estimate against a fixed budget (an evaluation cannot be interrupted,
//! so it is refused rather than started).
//!
//! Promises (pure, no I/O): [`Shape::of`] walks the AST without recursion (a deep AST cannot
//! overflow the stack); [`cost`] saturates instead of overflowing.

use std::collections::BTreeSet;

use cel::IdedExpr;
use cel::common::ast::{EntryExpr, Expr};

/// Most nodes one expression's AST may have (macros expanded).
pub const MAX_NODES: usize = 512;

/// Deepest one expression's AST may be (the evaluator recurses once per level).
pub const MAX_AST_DEPTH: usize = 48;

/// Most comprehensions (`all`, `exists`, `filter`, `map`, ...) nested in one another's loop.
pub const MAX_COMPREHENSION_NESTING: usize = 2;

/// Most cost units one evaluation may be estimated at (see [`cost`]).
pub const COST_BUDGET: u64 = 500_000;

/// Why a call of function `name` (called as `namespace.name(...)` when `namespace` is
/// given) is refused, if it is: Flux's CEL environment has these, ours does not, because
/// their result can grow faster than the cost estimate counts (each nesting multiplies a
/// string's size), or because the `cel` crate lacks them (Flux's ext.Sets and ext.Encoders).
pub fn refused(namespace: Option<&str>, name: &str) -> Option<&'static str> {
    const GROWS: &str = "its result can be many times its input, beyond the cost estimate";
    match (namespace, name) {
        (Some("sets"), _) => Some("sets are not available (Flux's ext.Sets)"),
        (Some("base64"), _) => Some("base64 is not available (Flux's ext.Encoders)"),
        (_, "replace" | "quote" | "repeat") => Some(GROWS),
        _ => None,
    }
}

/// What the bounds read of an expression.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Shape {
    /// Nodes of the AST.
    pub nodes: usize,
    /// Depth of the AST (a literal alone is 1).
    pub depth: usize,
    /// Deepest nesting of comprehension loops (a loop inside another's condition or step).
    pub nesting: usize,
    /// The identifiers it names (the object's top-level fields it reads, and loop variables).
    pub idents: BTreeSet<String>,
    /// The functions it calls, with `Some(namespace)` for `ns.f(...)` calls on an identifier.
    pub calls: BTreeSet<(Option<String>, String)>,
}

impl Shape {
    /// Whether it splits strings into lists (their length then counts as a list's).
    pub fn splits(&self) -> bool {
        self.calls.iter().any(|(_, f)| f == "split")
    }
}

impl Shape {
    /// Walks `root` (iteratively).
    pub fn of(root: &IdedExpr) -> Shape {
        let mut shape = Shape::default();
        // (node, its depth, loops it is inside of)
        let mut stack: Vec<(&IdedExpr, usize, usize)> = vec![(root, 1, 0)];
        while let Some((e, depth, loops)) = stack.pop() {
            shape.nodes += 1;
            shape.depth = shape.depth.max(depth);
            shape.nesting = shape.nesting.max(loops);
            let d = depth + 1;
            match &e.expr {
                Expr::Unspecified | Expr::Literal(_) => {}
                Expr::Ident(name) => {
                    shape.idents.insert(name.clone());
                }
                Expr::Call(c) => {
                    let namespace = match c.target.as_deref().map(|t| &t.expr) {
                        Some(Expr::Ident(ns)) => Some(ns.clone()),
                        _ => None,
                    };
                    shape.calls.insert((namespace, c.func_name.clone()));
                    if let Some(t) = &c.target {
                        stack.push((t, d, loops));
                    }
                    stack.extend(c.args.iter().map(|a| (a, d, loops)));
                }
                Expr::Comprehension(c) => {
                    stack.push((&c.iter_range, d, loops));
                    stack.push((&c.accu_init, d, loops));
                    stack.push((&c.loop_cond, d, loops + 1));
                    stack.push((&c.loop_step, d, loops + 1));
                    stack.push((&c.result, d, loops));
                }
                Expr::List(l) => stack.extend(l.elements.iter().map(|a| (a, d, loops))),
                Expr::Map(m) => push_entries(&mut stack, &m.entries, d, loops),
                Expr::Struct(s) => push_entries(&mut stack, &s.entries, d, loops),
                Expr::Select(s) => stack.push((&s.operand, d, loops)),
            }
        }
        shape
    }

    /// The first bound this shape breaks, if any.
    pub fn check(&self) -> Result<(), Bound> {
        if self.nodes > MAX_NODES {
            return Err(Bound::Nodes(self.nodes));
        }
        if self.depth > MAX_AST_DEPTH {
            return Err(Bound::Depth(self.depth));
        }
        if self.nesting > MAX_COMPREHENSION_NESTING {
            return Err(Bound::Nesting(self.nesting));
        }
        for (namespace, f) in &self.calls {
            if let Some(why) = refused(namespace.as_deref(), f) {
                return Err(Bound::Function(f.clone(), why));
            }
        }
        Ok(())
    }
}

fn push_entries<'a>(
    stack: &mut Vec<(&'a IdedExpr, usize, usize)>,
    entries: &'a [cel::common::ast::IdedEntryExpr],
    d: usize,
    loops: usize,
) {
    for entry in entries {
        match &entry.expr {
            EntryExpr::StructField(f) => stack.push((&f.value, d, loops)),
            EntryExpr::MapEntry(m) => {
                stack.push((&m.key, d, loops));
                stack.push((&m.value, d, loops));
            }
        }
    }
}

/// A bound an expression breaks, said in words.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Bound {
    #[error("{0} AST nodes, more than the {MAX_NODES} allowed")]
    Nodes(usize),
    #[error("nested {0} deep, more than the {MAX_AST_DEPTH} allowed")]
    Depth(usize),
    #[error("comprehensions nested {0} deep, more than the {MAX_COMPREHENSION_NESTING} allowed")]
    Nesting(usize),
    #[error("function {0} is not allowed: {1}")]
    Function(String, &'static str),
}

/// The estimated cost of evaluating an expression of `nodes` nodes with loops nested
/// `nesting` deep over an object whose largest list or map has `largest` entries: every node
/// evaluated once per iteration of the loops around it, at most `nodes × (largest + 1) ^
/// nesting` (saturating).
pub fn cost(nodes: usize, nesting: usize, largest: usize) -> u64 {
    let per_loop = u64::try_from(largest).unwrap_or(u64::MAX).saturating_add(1);
    let exponent = u32::try_from(nesting).unwrap_or(u32::MAX);
    u64::try_from(nodes)
        .unwrap_or(u64::MAX)
        .saturating_mul(per_loop.saturating_pow(exponent))
}

/// The number of entries of the largest list or map in `value`, or the length of its longest
/// string when `strings` (walked iteratively).
pub fn largest_collection(value: &serde_json::Value, strings: bool) -> usize {
    let mut largest = 0;
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        match v {
            serde_json::Value::Array(a) => {
                largest = largest.max(a.len());
                stack.extend(a.iter());
            }
            serde_json::Value::Object(m) => {
                largest = largest.max(m.len());
                stack.extend(m.values());
            }
            serde_json::Value::String(t) if strings => largest = largest.max(t.len()),
            _ => {}
        }
    }
    largest
}
