//! The static shape of one parsed CEL expression, and the bounds it must stay within: its
//! AST's nodes, depth and comprehension nesting, the functions it calls (and the regular
//! expressions it matches, string literals only), and, before each evaluation, its cost and
//! memory estimates against fixed budgets (an evaluation cannot be interrupted, so it is
//! refused rather than started).
//!
//! Promises (pure, no I/O): [`Shape::of`] walks the AST without recursion (a deep AST cannot
//! overflow the stack); [`cost`] and [`bytes`] saturate instead of overflowing, and bound
//! every node by the work and the memory of its worst operands.

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

/// Most bytes one evaluation may be estimated to build (see [`bytes`]).
pub const MEMORY_BUDGET: u64 = 64 << 20;

/// Bytes of a string a node linear in its operands scans for one cost unit.
pub const STRING_BYTES_PER_UNIT: usize = 64;

/// Extra cost units of a `matches` call (the `cel` crate compiles its pattern at every call: up
/// to about 0.3 ms for a pattern near [`MAX_REGEX_BYTES`], such as `\w`).
pub const MATCHES_UNITS: u64 = 20_000;

/// Largest compiled program of a `matches` pattern, in bytes (the regex crate's size limit).
pub const MAX_REGEX_BYTES: usize = 64 << 10;

/// Bytes one value of a list or map holds besides its strings (the `cel` crate's `Value`).
const VALUE_BYTES: usize = 32;

/// Calls whose work does not grow with their operands: every other call is charged as
/// linear in the largest list, map or string it may be given (see [`cost`]).
pub const CONSTANT_CALLS: &[&str] = &[
    "_&&_",
    "_||_",
    "!_",
    "-_",
    "_?_:_",
    "_[_]",
    "_[?_]",
    "_-_",
    "_*_",
    "_/_",
    "_%_",
    "size",
    "@not_strictly_false",
];

/// Calls linear in their string operands only (comparisons, string functions and
/// conversions): charged the longest string, not the largest list (see [`cost`]).
pub const STRING_CALLS: &[&str] = &[
    "_<_",
    "_<=_",
    "_>_",
    "_>=_",
    "startsWith",
    "endsWith",
    "lowerAscii",
    "upperAscii",
    "trim",
    "substring",
    "charAt",
    "split",
    "matches",
    "string",
    "int",
    "uint",
    "double",
    "bytes",
    "timestamp",
    "duration",
];

/// Calls linear in their operands that build no value (they compare, search or test).
pub const TESTS: &[&str] = &[
    "_==_",
    "_!=_",
    "_<_",
    "_<=_",
    "_>_",
    "_>=_",
    "@in",
    "contains",
    "startsWith",
    "endsWith",
    "matches",
];

/// Why a call of function `name` (called as `namespace.name(...)` when `namespace` is
/// given) is refused, if it is: Flux's CEL environment has these, ours does not, because
/// their result can grow faster than the estimates count (`replace`, `quote`, `repeat`,
/// `join`, `format`: each nesting multiplies a string's size), because their work is the
/// product of their operands' lengths (the `cel` crate's naive `indexOf`, `lastIndexOf`), or
/// because the crate lacks them (Flux's ext.Sets and ext.Encoders).
pub fn refused(namespace: Option<&str>, name: &str) -> Option<&'static str> {
    const GROWS: &str = "its result can be many times its input, beyond the cost estimate";
    const SEARCHES: &str = "its search takes the product of its string's and its needle's lengths, beyond the cost estimate";
    match (namespace, name) {
        (Some("sets"), _) => Some("sets are not available (Flux's ext.Sets)"),
        (Some("base64"), _) => Some("base64 is not available (Flux's ext.Encoders)"),
        (_, "replace" | "quote" | "repeat" | "join" | "format") => Some(GROWS),
        (_, "indexOf" | "lastIndexOf") => Some(SEARCHES),
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
    /// Calls whose work grows with their lists, maps or strings (all but [`CONSTANT_CALLS`],
    /// [`STRING_CALLS`] and the appends of `map` and `filter` to their own result).
    pub linear: usize,
    /// Calls whose work grows with their strings only ([`STRING_CALLS`]).
    pub scans: usize,
    /// `+` calls (each may make a list or string as long as its two operands together).
    pub adds: usize,
    /// Calls that may build a list or string (all but [`CONSTANT_CALLS`] and [`TESTS`]), and
    /// the appends of `map` and `filter`.
    pub builds: usize,
    /// `matches` calls.
    pub matches: usize,
    /// The patterns of `matches` calls: `None` for one that is not a string literal.
    pub patterns: Vec<Option<String>>,
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
                    shape.count_call(c);
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
        for pattern in &self.patterns {
            let Some(pattern) = pattern else {
                return Err(Bound::Pattern);
            };
            if let Err(e) = regex::RegexBuilder::new(pattern)
                .size_limit(MAX_REGEX_BYTES)
                .build()
            {
                return Err(Bound::Regex(regex_words(&e)));
            }
        }
        Ok(())
    }

    /// Counts a call in [`Shape::linear`], [`Shape::adds`], [`Shape::matches`] and
    /// [`Shape::patterns`].
    fn count_call(&mut self, c: &cel::common::ast::CallExpr) {
        let f = c.func_name.as_str();
        // `map` and `filter` append to their result in place (`@result + [x]`).
        let appends = f == "_+_"
            && matches!(c.args.first().map(|a| &a.expr), Some(Expr::Ident(n)) if n.starts_with('@'));
        if appends {
            self.builds += 1;
            return;
        }
        if STRING_CALLS.contains(&f) {
            self.scans += 1;
        } else if !CONSTANT_CALLS.contains(&f) {
            self.linear += 1;
        }
        if !CONSTANT_CALLS.contains(&f) && !TESTS.contains(&f) {
            self.builds += 1;
        }
        if f == "_+_" {
            self.adds += 1;
        }
        if f == "matches" {
            self.matches += 1;
            // `s.matches(p)` or `matches(s, p)`.
            let pattern = if c.target.is_some() {
                c.args.first()
            } else {
                c.args.get(1)
            };
            self.patterns.push(match pattern.map(|p| &p.expr) {
                Some(Expr::Literal(cel::common::ast::LiteralValue::String(s))) => {
                    Some(s.inner().to_string())
                }
                _ => None,
            });
        }
    }
}

/// A regular expression's error in fixed words (the crate's message quotes the pattern).
fn regex_words(e: &regex::Error) -> &'static str {
    match e {
        regex::Error::CompiledTooBig(_) => "its pattern compiles to more than the 64 KiB allowed",
        _ => "its pattern is not a valid regular expression",
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
    #[error(
        "matches is allowed with a string literal pattern only (a pattern read from the object would be compiled at every call)"
    )]
    Pattern,
    #[error("matches: {0}")]
    Regex(&'static str),
}

/// What an object gives an expression to work on: `entries`, the entries of its largest list
/// or map (or the length of its longest string when the expression splits strings), and
/// `string`, the length of its longest string; `values`, how many JSON values it holds (each
/// converted to a CEL value before the evaluation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sizes {
    pub entries: usize,
    pub string: usize,
    pub values: usize,
}

/// The estimated cost of evaluating an expression of shape `shape` over an object of
/// `sizes` (saturating): the largest list it may iterate, N = entries × (`+` calls + 1) (a
/// concatenation lengthens a list), or the expression's nodes (a list written in it) if
/// more; every node evaluated once per iteration of the loops around it, `(N + 1) ^ nesting`
/// times; a call linear in its strings ([`STRING_CALLS`]) charged S /
/// [`STRING_BYTES_PER_UNIT`] more (S the longest string), one linear in its lists or maps
/// (`in`, `==`, `+`, `contains`, ...) N + 1 + S / 64 more, and a `matches` call
/// [`MATCHES_UNITS`] more: `(nodes + scans × S / 64 + linear × (N + 1 + S / 64) + matches ×
/// 20000) × (N + 1) ^ nesting`.
pub fn cost(shape: &Shape, sizes: Sizes) -> u64 {
    let per_loop = iterated(shape, sizes).saturating_add(1);
    let per_scan = wide(sizes.string / STRING_BYTES_PER_UNIT);
    let per_linear = per_loop.saturating_add(per_scan);
    wide(shape.nodes)
        .saturating_add(wide(shape.scans).saturating_mul(per_scan))
        .saturating_add(wide(shape.linear).saturating_mul(per_linear))
        .saturating_add(wide(shape.matches).saturating_mul(MATCHES_UNITS))
        .saturating_mul(loops(per_loop, shape.nesting))
}

/// The estimated bytes an evaluation builds (saturating): once per iteration of the loops
/// around it, every node a value of 32 bytes, and every call that may build one
/// ([`Shape::builds`]) at most a list of N + 1 values of 32 bytes, a string (`+` calls + 1)
/// times the longest (a concatenation lengthens it), or the expression's length:
/// `(nodes × 32 + builds × max(S × (adds + 1), 32 × (N + 1), 1024)) × (N + 1) ^ nesting`.
pub fn bytes(shape: &Shape, sizes: Sizes) -> u64 {
    let per_loop = iterated(shape, sizes).saturating_add(1);
    let value = wide(sizes.string)
        .saturating_mul(wide(shape.adds).saturating_add(1))
        .max(per_loop.saturating_mul(wide(VALUE_BYTES)))
        .max(wide(super::MAX_EXPR_BYTES));
    wide(shape.nodes)
        .saturating_mul(wide(VALUE_BYTES))
        .saturating_add(wide(shape.builds).saturating_mul(value))
        .saturating_mul(loops(per_loop, shape.nesting))
}

/// The longest list an expression of `shape` may iterate over an object of `sizes`.
fn iterated(shape: &Shape, sizes: Sizes) -> u64 {
    wide(sizes.entries)
        .saturating_mul(wide(shape.adds).saturating_add(1))
        .max(wide(shape.nodes))
}

fn loops(per_loop: u64, nesting: usize) -> u64 {
    per_loop.saturating_pow(u32::try_from(nesting).unwrap_or(u32::MAX))
}

fn wide(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// The [`Sizes`] of `value`: its largest list or map (or longest string, when `splits`) and
/// its longest string (walked iteratively).
pub fn sizes(value: &serde_json::Value, splits: bool) -> Sizes {
    let mut sizes = Sizes::default();
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        sizes.values += 1;
        match v {
            serde_json::Value::Array(a) => {
                sizes.entries = sizes.entries.max(a.len());
                stack.extend(a.iter());
            }
            serde_json::Value::Object(m) => {
                sizes.entries = sizes.entries.max(m.len());
                // A key is a string too.
                let key = m.keys().map(String::len).max().unwrap_or(0);
                sizes.string = sizes.string.max(key);
                stack.extend(m.values());
            }
            serde_json::Value::String(t) => {
                sizes.string = sizes.string.max(t.len());
                if splits {
                    sizes.entries = sizes.entries.max(t.len());
                }
            }
            _ => {}
        }
    }
    sizes
}
