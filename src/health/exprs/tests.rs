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
