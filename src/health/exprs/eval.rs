//! The evaluation of one `healthCheckExprs` entry on one object, as Flux's StatusEvaluator
//! (fluxcd/pkg/runtime/cel): each top-level field of the object is a variable; a status
//! whose `observedGeneration` differs from `metadata.generation` is InProgress; then
//! `inProgress`, `failed`, `current`, the first true one deciding; none true is InProgress.
//! An error, or a result that is not a bool, is Unknown.
//!
//! Promises: an evaluation whose cost estimate ([`bounds::cost`]) is over
//! [`bounds::COST_BUDGET`], or whose memory estimate ([`bounds::bytes`]) is over
//! [`bounds::MEMORY_BUDGET`], is never started (Unknown, "cost limit exceeded", "memory limit
//! exceeded"); one estimated over [`OFF_WORKER_UNITS`] runs in
//! [`tokio::task::block_in_place`] on a multi-threaded runtime; messages name
//! the entry and the field, and hold no value of the object (an evaluation error is said in
//! fixed words, never with the crate's Display, which prints values).

use std::borrow::Cow;
use std::collections::BTreeSet;

use cel::{Context, ExecutionError, Value as CelValue};
use kube::api::DynamicObject;
use serde_json::Value;

use super::{Check, ENV, Field, bounds};
use crate::health::{Health, Status};

/// The top-level fields of an object, read as JSON.
pub enum ObjectFields<'a> {
    /// A whole object as the API server returns it.
    Json(&'a Value),
    /// A [`DynamicObject`] of kind `kind` (list items carry no apiVersion nor kind).
    Dynamic {
        object: &'a DynamicObject,
        kind: &'a str,
    },
}

impl<'a> ObjectFields<'a> {
    /// The top-level field `name`, if the object has it.
    pub fn field(&self, name: &str) -> Option<Cow<'a, Value>> {
        match self {
            ObjectFields::Json(v) => v.get(name).map(Cow::Borrowed),
            ObjectFields::Dynamic { object, kind } => match name {
                "metadata" => serde_json::to_value(&object.metadata).ok().map(Cow::Owned),
                "kind" => Some(Cow::Owned(Value::String(
                    object
                        .types
                        .as_ref()
                        .map_or(*kind, |t| t.kind.as_str())
                        .into(),
                ))),
                "apiVersion" => object
                    .types
                    .as_ref()
                    .map(|t| Cow::Owned(Value::String(t.api_version.clone()))),
                _ => object.data.get(name).map(Cow::Borrowed),
            },
        }
    }

    /// `metadata.generation` (0 when absent, as Go's `GetGeneration`).
    fn generation(&self) -> i64 {
        match self {
            ObjectFields::Json(v) => v
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(0),
            ObjectFields::Dynamic { object, .. } => object.metadata.generation.unwrap_or(0),
        }
    }

    /// `status.observedGeneration` when it is an integer.
    fn observed_generation(&self) -> Option<i64> {
        self.field("status")?
            .get("observedGeneration")
            .and_then(Value::as_i64)
    }
}

impl Check {
    /// The health of the object by this entry's expressions (see the module's contract).
    pub fn assess(&self, object: &ObjectFields<'_>) -> Health {
        let entry = format!("spec.healthCheckExprs[{}]", self.index);
        let generation = object.generation();
        if let Some(observed) = object.observed_generation()
            && observed != generation
        {
            return Health::new(
                Status::InProgress,
                format!("generation {generation} not yet observed (observed {observed})"),
            );
        }
        let names: BTreeSet<&str> = self
            .exprs
            .iter()
            .flat_map(|(_, c)| c.shape.idents.iter().map(String::as_str))
            .collect();
        let fields: Vec<(&str, Cow<'_, Value>)> = names
            .into_iter()
            .filter_map(|n| Some((n, object.field(n)?)))
            .collect();
        let units = match self.within_budget(&fields) {
            Ok(units) => units,
            Err(why) => {
                return Health::new(Status::Unknown, format!("cannot assess: {entry}: {why}"));
            }
        };
        off_worker(units, || self.evaluate(&entry, &fields))
    }

    /// Evaluates the entry's expressions on these fields, the first true one deciding.
    fn evaluate(&self, entry: &str, fields: &[(&str, Cow<'_, Value>)]) -> Health {
        let mut ctx = Context::with_env(ENV.clone());
        for (name, value) in fields {
            match cel::to_value(value.as_ref()) {
                Ok(v) => ctx.add_variable_from_value(*name, v),
                Err(_) => {
                    let why = format!("cannot assess: {entry}: {name} cannot be read as CEL");
                    return Health::new(Status::Unknown, why);
                }
            }
        }
        for (field, compiled) in &self.exprs {
            let at = format!("{entry}.{}", field.as_str());
            match CelValue::resolve(&compiled.expr, &ctx) {
                Ok(CelValue::Bool(true)) => return decided(*field, &at),
                Ok(CelValue::Bool(false)) => {}
                Ok(_) => {
                    let why = format!("cannot assess: {at}: does not evaluate to a bool");
                    return Health::new(Status::Unknown, why);
                }
                Err(e) => {
                    let why = format!("cannot assess: {at}: {}", error_words(&e));
                    return Health::new(Status::Unknown, why);
                }
            }
        }
        Health::new(
            Status::InProgress,
            format!("no expression of {entry} is true yet"),
        )
    }

    /// Whether evaluating every expression of the entry on these fields is estimated within
    /// [`bounds::COST_BUDGET`] and [`bounds::MEMORY_BUDGET`]; the estimated cost plus the
    /// values to convert (what decides [`off_worker`]), else why not.
    fn within_budget(&self, fields: &[(&str, Cow<'_, Value>)]) -> Result<u64, String> {
        let splits = self.exprs.iter().any(|(_, c)| c.shape.splits());
        let sizes = fields.iter().map(|(_, v)| bounds::sizes(v, splits)).fold(
            bounds::Sizes::default(),
            |a, b| bounds::Sizes {
                entries: a.entries.max(b.entries),
                string: a.string.max(b.string),
                values: a.values.saturating_add(b.values),
            },
        );
        let (mut units, mut bytes) = (0u64, 0u64);
        for (_, c) in &self.exprs {
            units = units.saturating_add(bounds::cost(&c.shape, sizes));
            bytes = bytes.saturating_add(bounds::bytes(&c.shape, sizes));
        }
        let nesting = self.exprs.iter().map(|(_, c)| c.shape.nesting).max();
        let object = format!(
            "a list or map of {} entries, a string of {} bytes, comprehensions nested {} deep",
            sizes.entries,
            sizes.string,
            nesting.unwrap_or(0)
        );
        if units > bounds::COST_BUDGET {
            return Err(format!(
                "cost limit exceeded: estimated {units} units, over the {} allowed ({object}); never evaluated",
                bounds::COST_BUDGET,
            ));
        }
        if bytes > bounds::MEMORY_BUDGET {
            return Err(format!(
                "memory limit exceeded: estimated {bytes} bytes, over the {} allowed ({object}); never evaluated",
                bounds::MEMORY_BUDGET,
            ));
        }
        Ok(units.saturating_add(u64::try_from(sizes.values).unwrap_or(u64::MAX)))
    }
}

/// Estimated cost units (plus the object's values converted) above which an evaluation
/// (about 1 ms in a release build) runs with
/// [`tokio::task::block_in_place`]: the runtime hands this worker's other tasks to another
/// thread meanwhile.
pub const OFF_WORKER_UNITS: u64 = 50_000;

/// Runs `evaluate`, with [`tokio::task::block_in_place`] when it is estimated over
/// [`OFF_WORKER_UNITS`] on a worker of a multi-threaded runtime (elsewhere, on the thread
/// it is called on: a current-thread runtime cannot hand its tasks over).
fn off_worker<T>(units: u64, evaluate: impl FnOnce() -> T) -> T {
    let multi_threaded = tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    if units > OFF_WORKER_UNITS && multi_threaded {
        tokio::task::block_in_place(evaluate)
    } else {
        evaluate()
    }
}

/// The health an expression decides by being true.
fn decided(field: Field, at: &str) -> Health {
    match field {
        Field::InProgress => Health::new(Status::InProgress, format!("in progress: {at} is true")),
        Field::Failed => Health::new(Status::Failed, format!("failed: {at} is true")),
        Field::Current => Health::new(Status::Current, format!("current: {at} is true")),
    }
}

/// An evaluation error in fixed words: names of functions and types, never values.
pub fn error_words(e: &ExecutionError) -> String {
    match e {
        ExecutionError::NoSuchKey(_) => "reads a field the object does not have".into(),
        ExecutionError::UndeclaredReference(_) => {
            "names a top-level field the object does not have, or a function the cel crate does not have".into()
        }
        ExecutionError::NoSuchOverload(o) => format!(
            "no overload of {} for ({})",
            o.function(),
            o.argument_types().join(", ")
        ),
        ExecutionError::InvalidArgumentCount { expected, actual } => {
            format!("a function called with {actual} arguments instead of {expected}")
        }
        ExecutionError::UnexpectedType { got, want } => {
            format!("a value of type {got} where {want} was expected")
        }
        ExecutionError::ValuesNotComparable(_, _) => "compares values that cannot be compared".into(),
        ExecutionError::UnsupportedBinaryOperator(op, _, _) => {
            format!("operator {op} applied to operands it does not support")
        }
        ExecutionError::UnsupportedIndex(_, _) | ExecutionError::UnsupportedKeyType(_) => {
            "indexes with a key of an unsupported type".into()
        }
        ExecutionError::DivisionByZero(_) => "divides by zero".into(),
        ExecutionError::RemainderByZero(_) => "takes a remainder by zero".into(),
        ExecutionError::Overflow(op, _, _) => format!("overflows in operator {op}"),
        ExecutionError::IndexOutOfBounds(_) => "indexes a list out of its bounds".into(),
        ExecutionError::DuplicateKey(_) => "builds a map with a repeated key".into(),
        ExecutionError::FunctionError { function, .. } => format!("function {function} failed"),
        ExecutionError::NotSupportedAsMethod { method, .. } => {
            format!("calls {method} on a value that does not have it")
        }
        _ => "evaluation failed".into(),
    }
}
