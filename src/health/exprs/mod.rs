//! `spec.healthCheckExprs`: CEL expressions that say when objects of a kind are Current,
//! InProgress or Failed, with Flux's semantics (fluxcd/pkg/runtime/cel), evaluated with the
//! `cel` crate.
//!
//! - [`HealthExprs::compile`] checks and parses a set's entries before anything is evaluated:
//!   at most [`MAX_ENTRIES`] entries of at most [`MAX_EXPR_BYTES`] bytes per expression; no
//!   entry for Secrets nor for another kind without status (their objects are Current once
//!   they exist, and are watched by metadata alone); no two entries for one GroupKind; each
//!   expression parses with the parser's recursion capped at [`MAX_PARSE_DEPTH`] (on a thread
//!   of its own with a [`COMPILE_STACK`] stack: the parser recurses deeply), and stays within
//!   the bounds of [`bounds`] (nodes, depth, comprehension nesting, refused functions,
//!   `matches` patterns that are string literals within the regex size limit).
//!   Errors name `spec.healthCheckExprs[i].<field>` and hold no object value.
//! - [`HealthExprs::for_kind`] finds the entry of a GroupKind as Flux does: only the group of
//!   `apiVersion` counts; the kind's own entry first, then the group-wide one (no `kind`);
//!   never for Secrets nor for the kinds without status.
//! - [`Check::assess`] (in [`eval`]) evaluates an entry on one object.

use std::sync::{Arc, LazyLock};

use cel::{Env, IdedExpr};

use crate::api::CustomHealthCheck;

pub mod bounds;
mod eval;
#[cfg(test)]
mod tests;

pub use eval::ObjectFields;

/// Most entries `spec.healthCheckExprs` may have (the CRD says so too).
pub const MAX_ENTRIES: usize = 64;

/// Longest expression, in bytes (the CRD says so too).
pub const MAX_EXPR_BYTES: usize = 1024;

/// The parser's recursion cap (the crate's default is 96).
pub const MAX_PARSE_DEPTH: u16 = 32;

/// The stack of the thread that parses (the ANTLR parser needs far more than a trivial
/// expression's worth at its recursion cap; only the pages touched are used).
pub const COMPILE_STACK: usize = 32 << 20;

/// The three fields of an entry, in the order they are evaluated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    InProgress,
    Failed,
    Current,
}

impl Field {
    /// The field's name in the spec.
    pub fn as_str(self) -> &'static str {
        match self {
            Field::InProgress => "inProgress",
            Field::Failed => "failed",
            Field::Current => "current",
        }
    }
}

/// Why a set's `healthCheckExprs` are refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ExprError {
    #[error("spec.healthCheckExprs has {0} entries, more than the {MAX_ENTRIES} allowed")]
    TooMany(usize),
    #[error(
        "spec.healthCheckExprs[{index}].{}: {len} bytes, more than the {MAX_EXPR_BYTES} allowed; shorten it",
        field.as_str()
    )]
    TooLong {
        index: usize,
        field: Field,
        len: usize,
    },
    #[error("spec.healthCheckExprs[{index}].{}: empty; write an expression or remove the field", field.as_str())]
    Empty { index: usize, field: Field },
    #[error(
        "spec.healthCheckExprs[{index}]: Secrets are never assessed by expression (their health is their existence); remove the entry"
    )]
    Secret { index: usize },
    #[error(
        "spec.healthCheckExprs[{index}]: {kind} has no status (its objects are Current once they exist); remove the entry"
    )]
    NoStatus { index: usize, kind: String },
    #[error(
        "spec.healthCheckExprs[{index}]: duplicate entry for {group_kind} (spec.healthCheckExprs[{first}] has it); merge them"
    )]
    Duplicate {
        index: usize,
        first: usize,
        group_kind: String,
    },
    #[error("spec.healthCheckExprs[{index}].{}: does not parse: {message}", field.as_str())]
    Parse {
        index: usize,
        field: Field,
        message: String,
    },
    #[error("spec.healthCheckExprs[{index}].{}: {bound}", field.as_str())]
    Bound {
        index: usize,
        field: Field,
        bound: bounds::Bound,
    },
    #[error("spec.healthCheckExprs: the expressions could not be compiled: {0}")]
    Thread(String),
}

/// One parsed expression, with its shape.
#[derive(Debug)]
pub struct Compiled {
    pub(crate) expr: IdedExpr,
    pub(crate) shape: bounds::Shape,
}

/// One entry of `spec.healthCheckExprs`, compiled.
#[derive(Debug)]
pub struct Check {
    /// Its position in the spec (messages name it).
    pub index: usize,
    group: String,
    kind: Option<String>,
    /// The expressions present, in evaluation order (inProgress, failed, current).
    pub(crate) exprs: Vec<(Field, Compiled)>,
}

/// A set's `healthCheckExprs`, compiled, and the entries they were compiled from.
#[derive(Debug, Default)]
pub struct HealthExprs {
    checks: Vec<Check>,
    source: Vec<CustomHealthCheck>,
}

/// The environment every expression is parsed and evaluated in: CEL's standard library
/// with optional values, and the strings extension (Flux's ext.Strings).
pub(crate) static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| {
    let mut env = Env::stdlib();
    // Registered once on a fresh environment: only a duplicate declaration fails.
    if let Err(e) = env.add_extension(cel::extensions::strings) {
        tracing::error!(error = %e, "the CEL strings extension could not be added");
    }
    Arc::new(env)
});

/// The API group of an `apiVersion` (`cert-manager.io/v1` → `cert-manager.io`, `v1` → ``).
fn group_of(api_version: &str) -> &str {
    api_version.split_once('/').map_or("", |(group, _)| group)
}

impl HealthExprs {
    /// Checks and compiles `entries` on a thread with a [`COMPILE_STACK`] stack, waiting for
    /// it (for callers outside the async runtime; see [`Self::compile_async`]).
    pub fn compile(entries: &[CustomHealthCheck]) -> Result<HealthExprs, ExprError> {
        if entries.is_empty() {
            return Ok(HealthExprs::default());
        }
        let owned = entries.to_vec();
        std::thread::Builder::new()
            .name("cel-compile".into())
            .stack_size(COMPILE_STACK)
            .spawn(move || compile_here(owned))
            .map_err(|e| ExprError::Thread(e.to_string()))?
            .join()
            .map_err(|_| ExprError::Thread("the compiling thread panicked".into()))?
    }

    /// [`Self::compile`] without blocking the async runtime's thread.
    pub async fn compile_async(entries: &[CustomHealthCheck]) -> Result<HealthExprs, ExprError> {
        if entries.is_empty() {
            return Ok(HealthExprs::default());
        }
        let owned = entries.to_vec();
        let (tx, rx) = tokio::sync::oneshot::channel();
        std::thread::Builder::new()
            .name("cel-compile".into())
            .stack_size(COMPILE_STACK)
            .spawn(move || {
                let _ = tx.send(compile_here(owned));
            })
            .map_err(|e| ExprError::Thread(e.to_string()))?;
        rx.await
            .map_err(|_| ExprError::Thread("the compiling thread panicked".into()))?
    }

    /// The entries these were compiled from.
    pub fn source(&self) -> &[CustomHealthCheck] {
        &self.source
    }

    pub fn is_empty(&self) -> bool {
        self.checks.is_empty()
    }

    /// The entry for objects of `group`/`kind`: the kind's own, else the group-wide one;
    /// none for Secrets and the other kinds without status (see [`super::needs_object`]).
    pub fn for_kind(&self, group: &str, kind: &str) -> Option<&Check> {
        if !super::needs_object(group, kind) {
            return None;
        }
        let entry = |k: Option<&str>| {
            self.checks
                .iter()
                .find(|c| c.group == group && c.kind.as_deref() == k)
        };
        entry(Some(kind)).or_else(|| entry(None))
    }
}

/// Checks and compiles `entries` on the calling thread (which needs a big stack).
fn compile_here(entries: Vec<CustomHealthCheck>) -> Result<HealthExprs, ExprError> {
    if entries.len() > MAX_ENTRIES {
        return Err(ExprError::TooMany(entries.len()));
    }
    let mut checks: Vec<Check> = Vec::with_capacity(entries.len());
    for (index, e) in entries.iter().enumerate() {
        let group = group_of(&e.api_version).to_string();
        let kind = e.kind.clone().filter(|k| !k.is_empty());
        check_kind(index, &group, kind.as_deref())?;
        if let Some(first) = checks.iter().find(|c| c.group == group && c.kind == kind) {
            let group_kind = match &kind {
                Some(k) if group.is_empty() => k.clone(),
                Some(k) => format!("{k}.{group}"),
                None => format!("every kind of group {group:?}"),
            };
            return Err(ExprError::Duplicate {
                index,
                first: first.index,
                group_kind,
            });
        }
        let sources = [
            (Field::InProgress, e.in_progress.as_deref()),
            (Field::Failed, e.failed.as_deref()),
            (Field::Current, Some(e.current.as_str())),
        ];
        let mut exprs = Vec::with_capacity(3);
        for (field, source) in sources {
            if let Some(source) = source {
                exprs.push((field, compile_one(index, field, source)?));
            }
        }
        checks.push(Check {
            index,
            group,
            kind,
            exprs,
        });
    }
    Ok(HealthExprs {
        checks,
        source: entries,
    })
}

/// Refuses an entry for Secrets or another kind without status.
fn check_kind(index: usize, group: &str, kind: Option<&str>) -> Result<(), ExprError> {
    match kind {
        Some("Secret") if group.is_empty() => Err(ExprError::Secret { index }),
        Some(k) if !super::needs_object(group, k) => Err(ExprError::NoStatus {
            index,
            kind: k.to_string(),
        }),
        _ => Ok(()),
    }
}

/// Parses one expression and checks its bounds.
fn compile_one(index: usize, field: Field, source: &str) -> Result<Compiled, ExprError> {
    if source.len() > MAX_EXPR_BYTES {
        return Err(ExprError::TooLong {
            index,
            field,
            len: source.len(),
        });
    }
    if source.trim().is_empty() {
        return Err(ExprError::Empty { index, field });
    }
    let parser = ENV.parser().max_recursion_depth(MAX_PARSE_DEPTH);
    let expr = parser.parse(source).map_err(|e| ExprError::Parse {
        index,
        field,
        message: parse_message(&e),
    })?;
    let shape = bounds::Shape::of(&expr);
    shape.check().map_err(|bound| ExprError::Bound {
        index,
        field,
        bound,
    })?;
    Ok(Compiled { expr, shape })
}

/// The first parse error, on one line: `line:column: what`.
fn parse_message(e: &cel::ParseErrors) -> String {
    match e.errors.first() {
        Some(first) => {
            let more = e.errors.len() - 1;
            let tail = if more > 0 {
                format!(" (and {more} more)")
            } else {
                String::new()
            };
            format!("{}:{}: {}{tail}", first.pos.0, first.pos.1, first.msg)
        }
        None => "unknown parse error".into(),
    }
}
