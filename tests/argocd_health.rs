//! The Argo CD health check of ApplySets and ClusterApplySets (`config/argocd/health.lua`),
//! run by a real Lua 5.1 interpreter (Debian's `lua5.1`, installed by `make deps`; Argo CD
//! runs its health checks on gopher-lua, a Lua 5.1) against parents the operator wrote in
//! each state, on the real API server.

mod support;

use support::operator;

use std::{fmt::Write as _, path::Path, process::Command};

use operator::*;
use serde_json::{Value, json};

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/config/argocd/health.lua");

/// A JSON value as a Lua literal, as Argo CD hands objects to the script (nulls omitted).
fn lua_literal(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("nil"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::String(s) => {
            out.push('"');
            for b in s.bytes() {
                match b {
                    b'"' => out.push_str("\\\""),
                    b'\\' => out.push_str("\\\\"),
                    0x20..=0x7e => out.push(b as char),
                    _ => {
                        let _ = write!(out, "\\{b}");
                    }
                }
            }
            out.push('"');
        }
        Value::Array(items) => {
            out.push('{');
            for item in items {
                lua_literal(item, out);
                out.push(',');
            }
            out.push('}');
        }
        Value::Object(map) => {
            out.push('{');
            for (k, item) in map.iter().filter(|(_, v)| !v.is_null()) {
                out.push('[');
                lua_literal(&Value::String(k.clone()), out);
                out.push_str("]=");
                lua_literal(item, out);
                out.push(',');
            }
            out.push('}');
        }
    }
}

/// Runs the health check on `obj`: (status, message).
fn health(obj: &Value) -> (String, String) {
    let script = std::fs::read_to_string(SCRIPT).expect("read health.lua");
    let mut program = String::from("obj = ");
    lua_literal(obj, &mut program);
    program.push_str("\nlocal check = function()\n");
    program.push_str(&script);
    program
        .push_str("\nend\nlocal hs = check()\nio.write(hs.status, \"\\n\", hs.message or \"\")\n");
    let out = Command::new("lua5.1")
        .arg("-")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            if let Some(mut stdin) = child.stdin.take() {
                stdin.write_all(program.as_bytes())?;
            }
            child.wait_with_output()
        })
        .expect("run lua5.1 (installed by `make deps`)");
    assert!(
        out.status.success(),
        "lua5.1 failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (status, message) = text.split_once('\n').unwrap_or((&text, ""));
    (status.to_string(), message.to_string())
}

async fn health_of(set: &Parent) -> (String, String) {
    let live = set.live().await;
    health(&serde_json::to_value(&live).expect("json"))
}

#[tokio::test]
async fn argo_cd_health_follows_the_set_through_its_states() {
    let h = Harness::new("argo").await;

    // Created, not reconciled yet (no operator runs): Progressing.
    let set = h.applyset(&unique("argo"));
    set.create(json!({"manifests": [configmap("one", json!({"k": "v"}))]}))
        .await;
    let (status, message) = health_of(&set).await;
    assert_eq!(status, "Progressing", "{message}");
    assert!(
        message.contains("Waiting for the applyset-operator"),
        "{message}"
    );

    // Reconciled: Healthy, with the operator's message.
    let op = h.start_operator();
    let ready = set.wait_ready().await;
    let (status, message) = health_of(&set).await;
    assert_eq!(status, "Healthy", "{message}");
    assert_eq!(message, ready_condition_message(&ready));

    // A new generation the operator has not reconciled yet: Progressing.
    stop(op).await;
    let generation = set
        .patch_spec(json!({"manifests": [configmap("two", json!({"k": "v"}))]}))
        .await;
    let (status, message) = health_of(&set).await;
    assert_eq!(status, "Progressing", "{message}");
    assert!(
        message.contains(&format!("generation {generation}")),
        "{message}"
    );

    // Suspended.
    let op = h.start_operator();
    set.wait_ready().await;
    set.patch_spec(json!({"suspend": true})).await;
    set.wait_ready_reason(Some("False"), "Suspended").await;
    assert_eq!(health_of(&set).await.0, "Suspended");

    // A failure for the current generation: Degraded, with the reason and message.
    let bad = h.applyset(&unique("argo-bad"));
    bad.create(
        json!({"manifests": [{"apiVersion": "v1", "kind": "ConfigMap",
                                       "metadata": {}}]}),
    )
    .await;
    bad.wait_ready_reason(Some("False"), "ValidationFailed")
        .await;
    let (status, message) = health_of(&bad).await;
    assert_eq!(status, "Degraded", "{message}");
    assert!(message.starts_with("ValidationFailed: "), "{message}");

    // A ClusterApplySet reads the same.
    let cluster_set = h.cluster_applyset(&unique("argo-c"));
    cluster_set
        .create(json!({"manifests": [configmap_in(&h.ns, "c", json!({"k": "v"}))]}))
        .await;
    cluster_set.wait_ready().await;
    assert_eq!(health_of(&cluster_set).await.0, "Healthy");
    stop(op).await;
}

fn ready_condition_message(status: &applyset_operator::api::ApplySetStatus) -> String {
    ready(status).message.clone()
}

/// Objects the operator never writes: no crash, a sensible answer.
#[test]
fn odd_objects_get_an_answer() {
    for (obj, expected) in [
        (json!({"metadata": {"name": "x"}}), "Progressing"),
        (json!({"metadata": {}, "status": {}}), "Progressing"),
        // A new set as the API server returns it (the CRD's status default).
        (
            json!({"metadata": {"generation": 1}, "status": {"observedGeneration": -1}}),
            "Progressing",
        ),
        (json!({"status": {"conditions": []}}), "Progressing"),
        (
            json!({"status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}}),
            "Progressing",
        ),
        (
            json!({"metadata": {"generation": 3},
                   "status": {"conditions": [{"type": "Ready", "status": "False",
                                              "reason": "ApplyFailed", "message": "m\n\"q\"",
                                              "observedGeneration": 3}]}}),
            "Degraded",
        ),
        // Ready, then a member failed (Healthy kept current between reconciles), or is
        // rolling out again.
        (
            json!({"status": {"conditions": [{"type": "Ready", "status": "True"},
                {"type": "Healthy", "status": "False", "reason": "HealthCheckFailed"}]}}),
            "Degraded",
        ),
        (
            json!({"status": {"conditions": [{"type": "Ready", "status": "True"},
                {"type": "Healthy", "status": "Unknown", "reason": "Progressing"}]}}),
            "Progressing",
        ),
        (
            json!({"status": {"conditions": [{"type": "Ready", "status": "True"},
                {"type": "Healthy", "status": "True", "reason": "Current"}]}}),
            "Healthy",
        ),
    ] {
        assert_eq!(health(&obj).0, expected, "{obj}");
    }
}

/// `config/argocd` is a kustomize component that merges the script into argocd-cm under the
/// keys Argo CD reads, for both kinds.
#[test]
fn the_component_adds_the_script_to_argocd_cm() {
    let dir = support::scratch("argocd-component");
    std::fs::write(
        dir.join("argocd-cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: argocd-cm\n  namespace: argocd\ndata:\n  url: https://argocd.example\n",
    )
    .expect("write argocd-cm");
    // kustomize loads components by relative path only: a copy of config/argocd beside it.
    let component = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/argocd");
    std::fs::create_dir_all(dir.join("argocd")).expect("component dir");
    for file in ["kustomization.yaml", "health.lua"] {
        std::fs::copy(component.join(file), dir.join("argocd").join(file)).expect("copy");
    }
    std::fs::write(
        dir.join("kustomization.yaml"),
        "resources: [argocd-cm.yaml]\ncomponents: [argocd]\n",
    )
    .expect("write kustomization");
    let out = support::cluster()
        .kubectl()
        .args(["kustomize", &dir.display().to_string()])
        .output()
        .expect("kubectl kustomize");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cm: Value = serde_saphyr::from_str(&String::from_utf8_lossy(&out.stdout)).expect("yaml");
    let script = std::fs::read_to_string(SCRIPT).expect("read health.lua");
    assert_eq!(cm["metadata"]["name"], "argocd-cm");
    assert_eq!(
        cm["data"]["url"], "https://argocd.example",
        "merged, not replaced"
    );
    for kind in ["ApplySet", "ClusterApplySet"] {
        let key = format!("resource.customizations.health.applyset.dev_{kind}");
        assert_eq!(cm["data"][&key], script.as_str(), "{key}");
    }
}
