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

#[test]
fn smoke() {
    let e = HealthExprs::compile(&[entry(
        "cert-manager.io/v1",
        Some("ClusterIssuer"),
        "status.conditions.filter(e, e.type == 'Ready').all(e, e.status == 'True')",
    )])
    .expect("compiles");
    let o = json!({"apiVersion": "cert-manager.io/v1", "kind": "ClusterIssuer",
        "metadata": {"name": "x"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
    let h: Health = crate::health::assess_with(&o, k8s_openapi::jiff::Timestamp::now(), &e);
    assert_eq!(h.status, Status::Current, "{h:?}");
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
