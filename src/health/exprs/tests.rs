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

/// Each expression is refused, on its entry's `current`, with a message that has `words`.
fn assert_refused(cases: &[(&str, &str)]) {
    for (expr, words) in cases {
        let e = refused(&[entry("x.io/v1", None, expr)]).to_string();
        assert!(
            e.starts_with("spec.healthCheckExprs[0].current: "),
            "{expr}: {e}"
        );
        assert!(e.contains(words), "{expr}: {e}");
    }
}

#[test]
fn bounds_refuse_deep_large_nested_and_growing_expressions() {
    let deep = format!("{}true{}", "(".repeat(40), ")".repeat(40));
    let chain = vec!["status.a"; 60].join(" + ") + " == 1";
    let nodes = vec!["a"; 300].join("||");
    let nested = "status.l.all(a, status.l.all(b, status.l.all(c, c == b)))";
    assert_refused(&[
        (deep.as_str(), "does not parse"),
        (chain.as_str(), "nested"),
        (nodes.as_str(), "AST nodes, more than the 512 allowed"),
        (
            nested,
            "comprehensions nested 3 deep, more than the 2 allowed",
        ),
    ]);
}

#[test]
fn functions_whose_cost_cannot_be_estimated_are_refused() {
    assert_refused(&[
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
        (
            "spec.template.spec.containers[0].args.join(metadata.annotations['x']) == ''",
            "function join is not allowed: its result can be many times its input",
        ),
        (
            "'%s%s%s%s'.format([status.a, status.a, status.a, status.a]) == ''",
            "function format is not allowed: its result can be many times its input",
        ),
        (
            "status.a.indexOf(status.b) >= 0",
            "function indexOf is not allowed: its search takes the product",
        ),
        (
            "status.a.lastIndexOf(status.b) >= 0",
            "function lastIndexOf is not allowed",
        ),
        (
            "status.a.matches(status.b)",
            "matches is allowed with a string literal pattern only",
        ),
        (
            "matches(status.a, status.b)",
            "matches is allowed with a string literal pattern only",
        ),
        (
            "status.a.matches('(a')",
            "matches: its pattern is not a valid regular expression",
        ),
        (
            "status.a.matches('\\\\w{100}{100}')",
            "matches: its pattern compiles to more than the 64 KiB allowed",
        ),
    ]);
}

#[test]
fn functions_that_do_not_grow_are_kept() {
    // Flux's ext.Strings functions that do not grow, and a list's contains, are kept.
    for expr in [
        "status.a.lowerAscii() == 'a'",
        "status.a.split(',').size() == 1",
        "[1, 2].contains(1)",
        "'abc'.contains('b')",
        "status.a.matches('^[a-z]+$')",
        "matches(status.a, '^v[0-9]+')",
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
    assert!(h.message.contains(
        "a list or map of 1000 entries, a string of 1 bytes, comprehensions nested 2 deep"
    ));
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

fn shape(expr: &str) -> bounds::Shape {
    let e = HealthExprs::compile(&[entry("x.io/v1", Some("K"), expr)]).expect(expr);
    e.for_kind("x.io", "K").expect("entry").exprs[0]
        .1
        .shape
        .clone()
}

#[test]
fn the_estimates_saturate_and_count_loops_linear_nodes_and_bytes() {
    let sizes = |entries, string| bounds::Sizes {
        entries,
        string,
        values: 0,
    };
    // 2 nodes, none linear: nodes × (N + 1) ^ nesting, N at least the nodes.
    let plain = shape("status.ok");
    assert_eq!(bounds::cost(&plain, sizes(1_000_000, 0)), 2);
    let loop1 = shape("status.l.all(x, x == 0)");
    assert_eq!((loop1.nesting, loop1.linear, loop1.adds), (1, 1, 0));
    let nodes = loop1.nodes as u64;
    assert_eq!(bounds::cost(&loop1, sizes(99, 0)), (nodes + 100) * 100);
    // A long string makes linear nodes dearer, by 1 unit per 64 bytes.
    assert_eq!(bounds::cost(&loop1, sizes(99, 6400)), (nodes + 200) * 100);
    // A comparison or a string function is charged its strings only.
    let scan = shape("status.l.all(x, x > 0)");
    assert_eq!((scan.linear, scan.scans), (0, 1));
    let scan_nodes = scan.nodes as u64;
    assert_eq!(bounds::cost(&scan, sizes(99, 0)), scan_nodes * 100);
    assert_eq!(
        bounds::cost(&scan, sizes(99, 6400)),
        (scan_nodes + 100) * 100
    );
    // A concatenation doubles the list it may iterate; a map's own appends are not counted.
    let concat = shape("(status.l + status.l).all(x, x > 0)");
    assert_eq!((concat.linear, concat.scans, concat.adds), (1, 1, 1));
    assert_eq!(shape("status.l.map(x, x).size() > 0").adds, 0);
    let per_loop = 2 * 99 + 1;
    assert!(concat.nodes < per_loop as usize);
    assert_eq!(
        bounds::cost(&concat, sizes(99, 0)),
        (concat.nodes as u64 + per_loop) * per_loop
    );
    // Bytes: (nodes × 32 + builds × max(S × (adds + 1), 32 (N + 1), 1024)) × (N + 1) ^ nesting.
    assert_eq!(bounds::bytes(&plain, sizes(0, 0)), 2 * 32);
    assert_eq!(loop1.builds, 0);
    assert_eq!(bounds::bytes(&loop1, sizes(99, 5000)), nodes * 32 * 100);
    let strings = shape("status.a + status.b != ''");
    assert_eq!((strings.builds, strings.adds), (1, 1));
    assert_eq!(
        bounds::bytes(&strings, sizes(0, 5000)),
        strings.nodes as u64 * 32 + 10_000
    );
    let mapped = shape("status.l.map(x, x.lowerAscii()).size() > 0");
    assert_eq!((mapped.builds, mapped.linear, mapped.scans), (2, 0, 2));
    assert_eq!(
        bounds::bytes(&mapped, sizes(99, 10)),
        (mapped.nodes as u64 * 32 + 2 * 3200) * 100
    );
    let max = sizes(usize::MAX, usize::MAX);
    assert_eq!(bounds::bytes(&mapped, max), u64::MAX);
    assert_eq!(
        bounds::cost(&shape("status.l.all(a, status.l.all(b, a == b))"), max),
        u64::MAX
    );
    let v = json!({"a": [1, 2, 3], "m": {"k": {"x": 1, "y": 2, "z": 3, "w": [1, 2, 3, 4, 5]}}, "s": "long string"});
    let walked = bounds::Sizes {
        values: 17,
        ..sizes(5, 11)
    };
    assert_eq!(bounds::sizes(&v, false), walked);
    assert_eq!(
        bounds::sizes(&v, true),
        bounds::Sizes {
            entries: 11,
            ..walked
        }
    );
}

/// An object of kind `K` with `status` as given.
fn with_status(status: serde_json::Value) -> serde_json::Value {
    json!({"apiVersion": "x.io/v1", "kind": "K", "metadata": {}, "status": status})
}

/// The message of an expression's assessment that must be refused by an estimate.
fn stopped(expr: &str, status: serde_json::Value) -> String {
    let e = HealthExprs::compile(&[entry("x.io/v1", None, expr)]).expect(expr);
    let h = assess(&e, &with_status(status));
    assert_eq!(h.status, Status::Unknown, "{expr}: {}", h.message);
    h.message
}

#[test]
fn work_linear_in_operands_and_memory_are_stopped_by_the_estimates() {
    let cost = "cannot assess: spec.healthCheckExprs[0]: cost limit exceeded: estimated ";
    let memory = "cannot assess: spec.healthCheckExprs[0]: memory limit exceeded: estimated ";
    let l: Vec<String> = (0..1000).map(|i| format!("k{i}")).collect();
    let m: serde_json::Map<String, serde_json::Value> =
        l.iter().map(|k| (k.clone(), json!(1))).collect();
    // `in`, `==` on lists, a list's `contains`: N per node, N² in a loop.
    for expr in [
        "status.l.all(x, !(x in status.m))",
        "status.l.all(x, !(x in status.l))",
        "status.l.all(x, status.l != [x])",
        "status.l.all(x, !status.l.contains(x))",
    ] {
        let msg = stopped(expr, json!({"l": l, "m": m}));
        assert!(msg.starts_with(cost), "{expr}: {msg}");
    }
    // A concatenation iterates k × N.
    let concat = "((status.l + status.l) + (status.l + status.l)).all(x, x != '')";
    let l20k: Vec<String> = (0..20_000).map(|i| format!("{i}")).collect();
    let msg = stopped(concat, json!({"l": l20k}));
    assert!(msg.starts_with(cost), "{msg}");
    // Strings built N times 2L long: stopped by the cost of their `+` already.
    let big = "x".repeat(200_000);
    let msg = stopped(
        "status.l.map(x, status.big + status.big).size() > 0",
        json!({"l": (0..100).collect::<Vec<_>>(), "big": &big}),
    );
    assert!(msg.starts_with(cost), "{msg}");
    assert!(
        msg.contains("a list or map of 100 entries, a string of 200000 bytes"),
        "{msg}"
    );
    assert!(!msg.contains("xxx"), "{msg}");
    // Strings concatenated without a loop: few units, many bytes.
    let chain = vec!["status.big"; 40].join(" + ") + " != ''";
    let msg = stopped(&chain, json!({"big": &big}));
    assert!(msg.starts_with(memory), "{msg}");
    // The cheatsheet stays well within both, on a status with long messages.
    let e = HealthExprs::compile(&[full("x.io/v1", None, None, Some(READY_FAILED), READY_TRUE)])
        .expect("compiles");
    let conditions: Vec<serde_json::Value> = (0..20)
        .map(|i| json!({"type": format!("T{i}"), "status": "True", "message": "m".repeat(4096)}))
        .chain([json!({"type": "Ready", "status": "True"})])
        .collect();
    let o = with_status(json!({"conditions": conditions}));
    assert_eq!(assess(&e, &o).status, Status::Current);
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
        let units = bounds::cost(
            shape,
            bounds::Sizes {
                entries: n,
                string: 5,
                values: 0,
            },
        );
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
#[ignore = "a timing, run by hand: cargo test --release --lib health::exprs::tests::worst -- --ignored --nocapture"]
fn worst_cases_under_the_bounds() {
    let strs = |n: usize| (0..n).map(|i| format!("{i:08}")).collect::<Vec<_>>();
    let big = "a".repeat(1_000_000);
    let ors = |one: &str, k: usize| vec![one; k].join(" || ");
    let cases = [
        (
            "status.l.all(x, x in status.l)".to_string(),
            json!({"l": strs(650)}),
        ),
        (
            "status.l.all(x, status.l.all(y, x in status.l))".into(),
            json!({"l": strs(68)}),
        ),
        (
            "status.l.all(x, status.l.all(y, status.l == status.m))".into(),
            json!({"l": strs(60), "m": strs(60)}),
        ),
        (
            "status.l.all(x, (status.l + status.l).size() > 0)".into(),
            json!({"l": strs(235)}),
        ),
        (
            "status.l.all(x, !x.matches('\\\\w'))".into(),
            json!({"l": strs(20)}),
        ),
        (
            ors("status.big.lowerAscii() == 'q'", 15),
            json!({"big": &big}),
        ),
        (ors("status.big.contains('ab')", 25), json!({"big": &big})),
        (ors("status.s.matches('\\\\w')", 24), json!({"s": "a"})),
    ];
    for (expr, status) in cases {
        let e = HealthExprs::compile(&[entry("x.io/v1", None, &expr)]).expect("compiles");
        let o = json!({"apiVersion": "x.io/v1", "kind": "K", "metadata": {}, "status": status});
        let check = e.for_kind("x.io", "K").expect("entry");
        let shape = &check.exprs[0].1.shape;
        let sizes = bounds::sizes(&o["status"], shape.splits());
        let t = std::time::Instant::now();
        let h = check.assess(&ObjectFields::Json(&o));
        println!(
            "{:?} units={} bytes={} {:?} {}: {}",
            t.elapsed(),
            bounds::cost(shape, sizes),
            bounds::bytes(shape, sizes),
            h.status,
            &expr[..expr.len().min(60)],
            &h.message[..h.message.len().min(60)]
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

/// An entry whose evaluation is estimated over [`eval::OFF_WORKER_UNITS`], and an object it
/// says is Current.
fn over_a_millisecond() -> (HealthExprs, serde_json::Value) {
    let e = HealthExprs::compile(&[entry("x.io/v1", None, "status.l.all(x, x in status.l)")])
        .expect("compiles");
    let l: Vec<String> = (0..300).map(|i| format!("{i:08}")).collect();
    let check = e.for_kind("x.io", "K").expect("entry");
    let sizes = bounds::Sizes {
        entries: 300,
        string: 8,
        values: 0,
    };
    assert!(bounds::cost(&check.exprs[0].1.shape, sizes) > eval::OFF_WORKER_UNITS);
    (e, with_status(json!({ "l": l })))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_evaluation_on_a_multi_threaded_runtime_runs_in_block_in_place() {
    let (e, o) = over_a_millisecond();
    assert_eq!(assess(&e, &o).status, Status::Current);
}

#[tokio::test]
async fn a_long_evaluation_on_a_current_thread_runtime_runs_in_place() {
    let (e, o) = over_a_millisecond();
    assert_eq!(assess(&e, &o).status, Status::Current);
}
