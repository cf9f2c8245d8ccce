//! Unit tests of `healthCheckExprs`: compile bounds, lookup, evaluation order, error words.

use serde_json::json;

use super::*;
use crate::health::{Health, Status};

fn entry(api_version: &str, kind: Option<&str>, current: &str) -> CustomHealthCheck {
    CustomHealthCheck {
        api_version: api_version.into(),
        kind: kind.map(str::to_string),
        current: current.into(),
        in_progress: None,
        failed: None,
    }
}

fn full(
    api_version: &str,
    kind: Option<&str>,
    in_progress: Option<&str>,
    failed: Option<&str>,
    current: &str,
) -> CustomHealthCheck {
    CustomHealthCheck {
        in_progress: in_progress.map(str::to_string),
        failed: failed.map(str::to_string),
        ..entry(api_version, kind, current)
    }
}

fn refused(entries: &[CustomHealthCheck]) -> ExprError {
    HealthExprs::compile(entries).expect_err("refused")
}

/// A cert-manager-like object with one condition.
fn with_ready(status: &str, generation: i64, observed: i64) -> serde_json::Value {
    json!({"apiVersion": "cert-manager.io/v1", "kind": "ClusterIssuer",
        "metadata": {"name": "x", "generation": generation},
        "status": {"observedGeneration": observed,
            "conditions": [{"type": "Ready", "status": status, "reason": "R", "message": "s3cr3t"}]}})
}

const READY_FAILED: &str =
    "status.conditions.filter(e, e.type == 'Ready').all(e, e.status == 'False')";
const READY_TRUE: &str =
    "status.conditions.filter(e, e.type == 'Ready').all(e, e.status == 'True')";

fn assess(exprs: &HealthExprs, o: &serde_json::Value) -> Health {
    crate::health::assess_with(o, k8s_openapi::jiff::Timestamp::now(), exprs)
}

#[test]
fn the_cheatsheet_shape_is_current_in_progress_and_failed() {
    let e = HealthExprs::compile(&[full(
        "cert-manager.io/v1",
        Some("ClusterIssuer"),
        None,
        Some(READY_FAILED),
        READY_TRUE,
    )])
    .expect("compiles");
    assert_eq!(
        assess(&e, &with_ready("True", 1, 1)).status,
        Status::Current
    );
    let failed = assess(&e, &with_ready("False", 1, 1));
    assert_eq!(failed.status, Status::Failed);
    assert_eq!(
        failed.message,
        "failed: spec.healthCheckExprs[0].failed is true"
    );
    let unknown = assess(&e, &with_ready("Unknown", 1, 1));
    assert_eq!(
        (unknown.status, unknown.message.as_str()),
        (
            Status::InProgress,
            "no expression of spec.healthCheckExprs[0] is true yet"
        )
    );
}

#[test]
fn an_unobserved_generation_is_in_progress_before_any_expression() {
    let e = HealthExprs::compile(&[entry("cert-manager.io/v1", None, "true")]).expect("compiles");
    let h = assess(&e, &with_ready("True", 2, 1));
    assert_eq!(h.status, Status::InProgress);
    assert_eq!(h.message, "generation 2 not yet observed (observed 1)");
    // Without observedGeneration (or not an integer) the expressions decide.
    let mut o = with_ready("True", 2, 1);
    o["status"]["observedGeneration"] = json!("1");
    assert_eq!(assess(&e, &o).status, Status::Current);
    o["status"]
        .as_object_mut()
        .expect("status")
        .remove("observedGeneration");
    assert_eq!(assess(&e, &o).status, Status::Current);
}

#[test]
fn in_progress_then_failed_then_current_the_first_true_deciding() {
    let all = |ip: &str, f: &str, c: &str| {
        let e =
            HealthExprs::compile(&[full("x.io/v1", None, Some(ip), Some(f), c)]).expect("compiles");
        assess(
            &e,
            &json!({"apiVersion": "x.io/v1", "kind": "K", "metadata": {}}),
        )
        .status
    };
    assert_eq!(all("true", "true", "true"), Status::InProgress);
    assert_eq!(all("false", "true", "true"), Status::Failed);
    assert_eq!(all("false", "false", "true"), Status::Current);
    assert_eq!(all("false", "false", "false"), Status::InProgress);
    // An error stops the evaluation where it happens: Unknown.
    assert_eq!(all("1 / 0 == 1", "true", "true"), Status::Unknown);
    assert_eq!(all("false", "true", "1 / 0 == 1"), Status::Failed);
}

#[test]
fn errors_and_non_bools_are_unknown_in_fixed_words_without_values() {
    let o = with_ready("True", 1, 1);
    let cases = [
        (
            "spec.replicas > 0",
            "names a top-level field the object does not have, or a function the cel crate does not have",
        ),
        (
            "status.missing == 1",
            "reads a field the object does not have",
        ),
        (
            "status.conditions[0].message",
            "does not evaluate to a bool",
        ),
        (
            "status.conditions[0].message + 1 == 2",
            "operator add applied to operands it does not support",
        ),
        ("status.conditions[0].message < 1", ""),
        ("int(status.conditions[0].message) == 1", ""),
        (
            "status.conditions[5].type == 'x'",
            "indexes a list out of its bounds",
        ),
        ("status.conditions.size() / 0 == 1", "divides by zero"),
        (
            "sets_are_missing(status) ",
            "names a top-level field the object does not have, or a function the cel crate does not have",
        ),
    ];
    for (expr, words) in cases {
        let e = HealthExprs::compile(&[entry("cert-manager.io/v1", None, expr)]).expect(expr);
        let h = assess(&e, &o);
        assert_eq!(h.status, Status::Unknown, "{expr}: {h:?}");
        assert!(
            h.message
                .starts_with("cannot assess: spec.healthCheckExprs[0].current: "),
            "{expr}: {}",
            h.message
        );
        assert!(h.message.ends_with(words), "{expr}: {}", h.message);
        assert!(!h.message.contains("s3cr3t"), "{expr}: {}", h.message);
    }
}

#[test]
fn lookup_is_by_group_kind_specific_first_then_group_wide() {
    let e = HealthExprs::compile(&[
        entry("cert-manager.io/v1", None, "false"),
        entry("cert-manager.io/v1alpha2", Some("Certificate"), "true"),
        entry("v1", None, "true"),
    ])
    .expect("compiles");
    let index = |g: &str, k: &str| e.for_kind(g, k).map(|c| c.index);
    assert_eq!(index("cert-manager.io", "Certificate"), Some(1));
    assert_eq!(index("cert-manager.io", "ClusterIssuer"), Some(0));
    assert_eq!(index("", "Pod"), Some(2));
    assert_eq!(index("acme.cert-manager.io", "Order"), None);
    // Never for Secrets, nor for the other kinds without status.
    assert_eq!(index("", "Secret"), None);
    assert_eq!(index("", "ConfigMap"), None);
    assert!(HealthExprs::compile(&[]).expect("empty").is_empty());
}

#[test]
fn entries_are_refused_naming_them() {
    let ok = entry("x.io/v1", Some("K"), "true");
    let many: Vec<CustomHealthCheck> = (0..=MAX_ENTRIES)
        .map(|i| entry(&format!("g{i}.io/v1"), None, "true"))
        .collect();
    assert_eq!(refused(&many), ExprError::TooMany(MAX_ENTRIES + 1));
    let long = format!("true{}", " ".repeat(MAX_EXPR_BYTES));
    let cases: Vec<(Vec<CustomHealthCheck>, &str)> = vec![
        (
            vec![ok.clone(), entry("v1", Some("Secret"), "true")],
            "spec.healthCheckExprs[1]: Secrets are never assessed by expression",
        ),
        (
            vec![entry("v1", Some("ConfigMap"), "true")],
            "spec.healthCheckExprs[0]: ConfigMap has no status",
        ),
        (
            vec![ok.clone(), entry("x.io/v2", Some("K"), "false")],
            "spec.healthCheckExprs[1]: duplicate entry for K.x.io (spec.healthCheckExprs[0] has it)",
        ),
        (
            vec![
                entry("x.io/v1", None, "true"),
                entry("x.io/v2", None, "true"),
            ],
            "spec.healthCheckExprs[1]: duplicate entry for every kind of group \"x.io\"",
        ),
        (
            vec![entry("x.io/v1", None, &long)],
            "spec.healthCheckExprs[0].current: 1028 bytes, more than the 1024 allowed",
        ),
        (
            vec![full("x.io/v1", None, Some(" "), None, "true")],
            "spec.healthCheckExprs[0].inProgress: empty",
        ),
        (
            vec![full("x.io/v1", None, None, Some("status.("), "true")],
            "spec.healthCheckExprs[0].failed: does not parse: 1:",
        ),
    ];
    for (entries, start) in cases {
        let e = refused(&entries).to_string();
        assert!(e.starts_with(start), "{e}\n  does not start with\n{start}");
    }
}

#[test]
fn bounds_refuse_deep_large_nested_and_growing_expressions() {
    let deep = format!("{}true{}", "(".repeat(40), ")".repeat(40));
    let chain = vec!["status.a"; 60].join(" + ") + " == 1";
    let nodes = vec!["a"; 300].join("||");
    let nested = "status.l.all(a, status.l.all(b, status.l.all(c, c == b)))";
    let cases = [
        (deep.as_str(), "does not parse"),
        (chain.as_str(), "nested"),
        (nodes.as_str(), "AST nodes, more than the 512 allowed"),
        (
            nested,
            "comprehensions nested 3 deep, more than the 2 allowed",
        ),
        (
            "status.a.replace('a', status.a) == ''",
            "function replace is not allowed",
        ),
        (
            "strings.quote(status.a) == ''",
            "function quote is not allowed",
        ),
        (
            "sets.contains(status.l, [1])",
            "function contains is not allowed: sets are not available",
        ),
        (
            "base64.encode(b'a') == ''",
            "function encode is not allowed: base64",
        ),
    ];
    for (expr, words) in cases {
        let e = refused(&[entry("x.io/v1", None, expr)]).to_string();
        assert!(
            e.starts_with("spec.healthCheckExprs[0].current: "),
            "{expr}: {e}"
        );
        assert!(e.contains(words), "{expr}: {e}");
    }
    // Flux's ext.Strings functions that do not grow, and a list's contains, are kept.
    for expr in [
        "status.a.lowerAscii() == 'a'",
        "status.a.split(',').size() == 1",
        "[1, 2].contains(1)",
        "'abc'.contains('b')",
    ] {
        HealthExprs::compile(&[entry("x.io/v1", None, expr)]).expect(expr);
    }
}

#[test]
fn an_evaluation_over_the_budget_is_never_started() {
    let e = HealthExprs::compile(&[entry(
        "x.io/v1",
        None,
        "status.l.all(a, status.l.all(b, a + b >= 0))",
    )])
    .expect("compiles");
    let object = |n: usize| {
        let l: Vec<usize> = (0..n).collect();
        json!({"apiVersion": "x.io/v1", "kind": "K", "metadata": {}, "status": {"l": l}})
    };
    assert_eq!(assess(&e, &object(10)).status, Status::Current);
    let h = assess(&e, &object(1000));
    assert_eq!(h.status, Status::Unknown);
    assert!(
        h.message.starts_with(
            "cannot assess: spec.healthCheckExprs[0]: cost limit exceeded: estimated "
        ),
        "{}",
        h.message
    );
    assert!(
        h.message
            .contains("a list or map of 1000 entries, comprehensions nested 2 deep")
    );
    // A split's list counts a string's length.
    let split = HealthExprs::compile(&[entry(
        "x.io/v1",
        None,
        "status.s.split('').all(a, status.s.split('').all(b, a == b || a != b))",
    )])
    .expect("compiles");
    let long = json!({"apiVersion": "x.io/v1", "kind": "K", "metadata": {}, "status": {"s": "x".repeat(5000)}});
    assert_eq!(assess(&split, &long).status, Status::Unknown);
}

#[test]
fn the_cost_estimate_saturates_and_counts_loops() {
    assert_eq!(bounds::cost(10, 0, 1_000_000), 10);
    assert_eq!(bounds::cost(10, 1, 99), 1000);
    assert_eq!(bounds::cost(10, 2, 99), 100_000);
    assert_eq!(bounds::cost(usize::MAX, 3, usize::MAX), u64::MAX);
    let v = json!({"a": [1, 2, 3], "m": {"k": {"x": 1, "y": 2, "z": 3, "w": [1, 2, 3, 4, 5]}}, "s": "long string"});
    assert_eq!(bounds::largest_collection(&v, false), 5);
    assert_eq!(bounds::largest_collection(&v, true), 11);
}

#[test]
fn a_dynamic_object_exposes_metadata_kind_and_its_data() {
    let e = HealthExprs::compile(&[entry(
        "x.io/v1",
        Some("K"),
        "metadata.name == 'n' && kind == 'K' && spec.size == 2 && status.ok",
    )])
    .expect("compiles");
    let mut o = kube::api::DynamicObject::new(
        "n",
        &kube::discovery::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
            "x.io", "v1", "K",
        )),
    );
    o.data = json!({"spec": {"size": 2}, "status": {"ok": true}});
    let check = e.for_kind("x.io", "K").expect("entry");
    assert_eq!(
        check
            .assess(&ObjectFields::Dynamic {
                object: &o,
                kind: "K"
            })
            .status,
        Status::Current
    );
    // Being deleted is Terminating, whatever the expressions say.
    let mut whole = serde_json::to_value(&o).expect("json");
    whole["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    assert_eq!(assess(&e, &whole).status, Status::Terminating);
}

#[test]
#[ignore = "a timing, run by hand: cargo test --release --lib health::exprs::tests::timing -- --ignored --nocapture"]
fn timing() {
    let cheatsheet = "status.conditions.filter(e, e.type == 'Ready').all(e, e.status == 'True')";
    for (n, expr, rounds) in [
        (5usize, cheatsheet, 2000u32),
        (100, "status.l.all(x, status.l.all(y, y >= 0))", 20),
        (220, "status.l.all(x, status.l.all(y, y >= 0))", 5),
        (30000, "status.l.all(x, x >= 0)", 5),
        (300, "status.l.map(x, status.l.map(y, y)).size() > 0", 5),
    ] {
        let e = HealthExprs::compile(&[entry("x.io/v1", None, expr)]).expect("compiles");
        let l: Vec<usize> = (0..n).collect();
        let o = json!({"apiVersion": "x.io/v1", "kind": "K", "metadata": {"name": "x", "generation": 1},
            "status": {"l": l, "conditions": [{"type": "Ready", "status": "True"}]}});
        let check = e.for_kind("x.io", "K").expect("entry");
        let shape = &check.exprs[0].1.shape;
        let units = bounds::cost(shape.nodes, shape.nesting, n.max(shape.nodes));
        let mut h = Health::not_found();
        let t = std::time::Instant::now();
        for _ in 0..rounds {
            h = check.assess(&ObjectFields::Json(&o));
        }
        let el = t.elapsed() / rounds;
        let builtin = std::time::Instant::now();
        for _ in 0..rounds {
            let _ = crate::health::assess(&o, k8s_openapi::jiff::Timestamp::now());
        }
        let builtin = builtin.elapsed() / rounds;
        println!(
            "n={n} nodes={} nesting={} units={units}: {el:?} per object ({:.1} ns/unit), built-in rules {builtin:?}: {:?}",
            shape.nodes,
            shape.nesting,
            el.as_nanos() as f64 / units as f64,
            h.status
        );
    }
}

#[test]
fn the_deepest_expressions_within_the_length_are_refused_without_overflowing() {
    let n = MAX_EXPR_BYTES / 2 - 2;
    let select = format!("a{}", ".b".repeat(n));
    let cases = [
        format!("{}true{}", "(".repeat(n), ")".repeat(n)),
        format!("{}true", "!".repeat(MAX_EXPR_BYTES - 4)),
        format!("{}1{}", "[".repeat(n), "]".repeat(n)),
        format!("{}1", "-".repeat(MAX_EXPR_BYTES - 1)),
        select,
        vec!["1"; n].join("+"),
    ];
    for expr in cases {
        // Refused, or (a run of `!` or `-` cancels out) compiled into a shallow AST.
        match HealthExprs::compile(&[entry("x.io/v1", None, &expr)]) {
            Err(e) => {
                let e = e.to_string();
                assert!(
                    e.contains("does not parse") || e.contains("nested") || e.contains("AST nodes"),
                    "{}: {e}",
                    &expr[..20]
                );
            }
            Ok(compiled) => {
                let check = compiled.for_kind("x.io", "K").expect("entry");
                assert!(check.exprs[0].1.shape.depth <= 2, "{}", &expr[..20]);
            }
        }
    }
}
