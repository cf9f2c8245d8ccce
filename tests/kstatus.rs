//! kstatus, the reference implementation of Kubernetes object status
//! (`sigs.k8s.io/cli-utils/pkg/kstatus/status.Compute`, which Flux's `wait` and `healthChecks`
//! use), reads ApplySets and ClusterApplySets correctly in each state, on the real API
//! server: InProgress until the operator has reconciled the current generation (the CRDs
//! default `status.observedGeneration` to -1), Current when Ready, Failed when Stalled.
//!
//! The verdicts come from the Go program `tests/testenv/kstatus` (built by
//! `tests/testenv/build-kstatus.sh`, or `$APPLYSET_KSTATUS`), given each parent exactly as
//! `kubectl get -o json` returns it.

mod support;

use support::operator;

use std::{
    io::Write as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::OnceLock,
};

use operator::*;
use serde_json::{Value, json};

/// The kstatus program: `$APPLYSET_KSTATUS`, or whatever `tests/testenv/build-kstatus.sh`
/// prints (it builds the program from the Go module proxy on a cache miss and answers at once
/// on a hit).
fn kstatus_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(p) = std::env::var_os("APPLYSET_KSTATUS").filter(|p| !p.is_empty()) {
            return PathBuf::from(p);
        }
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/testenv/build-kstatus.sh");
        let out = Command::new("bash")
            .arg(script)
            .stderr(Stdio::inherit())
            .output()
            .expect("run build-kstatus.sh");
        assert!(
            out.status.success(),
            "build-kstatus.sh failed: {}",
            out.status
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        let dir = stdout.lines().last().unwrap_or_default().trim().to_string();
        assert!(!dir.is_empty(), "build-kstatus.sh printed no directory");
        PathBuf::from(dir).join("kstatus")
    })
}

/// kstatus's verdict on one object.
#[derive(Debug)]
struct Verdict {
    status: String,
    message: String,
    /// The object it was computed from, for failure messages.
    object: Value,
}

/// Runs the kstatus program on `json` (one object as JSON, given on stdin).
fn compute(json: &[u8]) -> Verdict {
    let mut child = Command::new(kstatus_bin())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("running {}: {e}", kstatus_bin().display()));
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(json).expect("write the object to kstatus");
    }
    let out = child.wait_with_output().expect("wait for kstatus");
    assert!(
        out.status.success(),
        "kstatus failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("kstatus prints JSON");
    Verdict {
        status: v["status"].as_str().unwrap_or_default().to_string(),
        message: v["message"].as_str().unwrap_or_default().to_string(),
        object: serde_json::from_slice(json).expect("the object is JSON"),
    }
}

/// kstatus's verdict on the parent as `kubectl get -o json` returns it.
fn kstatus_of(set: &Parent) -> Verdict {
    let mut cmd = support::cluster().kubectl();
    let resource = format!("{}s.applyset.dev", set.kind().to_lowercase());
    cmd.args(["get", "-o", "json", &resource, &set.name]);
    if let Some(ns) = &set.namespace {
        cmd.args(["-n", ns]);
    }
    let out = cmd.output().expect("kubectl get");
    assert!(
        out.status.success(),
        "kubectl get {}: {}",
        set.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    compute(&out.stdout)
}

/// Asserts kstatus's status of `set`, showing the verdict and the object when it differs.
fn assert_kstatus(set: &Parent, expected: &str) -> Verdict {
    let v = kstatus_of(set);
    assert_eq!(
        v.status,
        expected,
        "kstatus on {}: {:?}; the object:\n{}",
        set.display(),
        v.message,
        serde_json::to_string_pretty(&v.object["status"]).unwrap_or_default()
    );
    v
}

#[tokio::test]
async fn kstatus_reads_the_set_through_its_states() {
    let h = Harness::new("kstatus").await;

    // Created, not reconciled yet (no operator runs): InProgress, because the API server
    // defaults the absent status to {observedGeneration: -1}. Without that default kstatus
    // would say Current (an object without conditions is current).
    let set = h.applyset(&unique("ks"));
    set.create(json!({"manifests": [configmap("one", json!({"k": "v"}))]}))
        .await;
    let cluster_set = h.cluster_applyset(&unique("ks-c"));
    cluster_set
        .create(json!({"manifests": [configmap_in(&h.ns, "c", json!({"k": "v"}))]}))
        .await;
    for s in [&set, &cluster_set] {
        let v = assert_kstatus(s, "InProgress");
        assert_eq!(
            v.message,
            format!(
                "{} generation is 1, but latest observed generation is -1",
                s.kind()
            )
        );
        assert_eq!(v.object["status"], json!({"observedGeneration": -1}));
    }

    // Reconciled: Current, from the Ready condition.
    let op = h.start_operator();
    let ready = set.wait_ready().await;
    let v = assert_kstatus(&set, "Current");
    assert_eq!(v.message, "Resource is Ready");
    // The operator wrote the generation it reconciled, and -1 is in no condition.
    assert_eq!(ready.observed_generation, Some(1));
    assert!(
        ready
            .conditions
            .iter()
            .all(|c| c.observed_generation == Some(1)),
        "{}",
        status_json(&ready)
    );
    cluster_set.wait_ready().await;
    assert_kstatus(&cluster_set, "Current");

    // A new generation the operator has not reconciled yet: InProgress.
    stop(op).await;
    let generation = set
        .patch_spec(json!({"manifests": [configmap("two", json!({"k": "v"}))]}))
        .await;
    let v = assert_kstatus(&set, "InProgress");
    assert_eq!(
        v.message,
        format!("ApplySet generation is {generation}, but latest observed generation is 1")
    );

    // Reconciled again: Current.
    let op = h.start_operator();
    set.wait_ready().await;
    assert_kstatus(&set, "Current");

    // Suspended: Ready=False (reason Suspended) for the current generation, which kstatus
    // reads as InProgress (a Ready=False condition without Stalled is "in progress" to
    // it): a Flux `wait` on a suspended set waits until its timeout.
    set.patch_spec(json!({"suspend": true})).await;
    set.wait_ready_reason(Some("False"), "Suspended").await;
    let v = assert_kstatus(&set, "InProgress");
    assert_eq!(v.message, "reconciliation is suspended (spec.suspend)");

    // A failure that only a change fixes (Stalled=True, reason ValidationFailed): Failed,
    // with the Stalled condition's message.
    let bad = h.applyset(&unique("ks-bad"));
    bad.create(json!({"manifests": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}}]}))
        .await;
    let stalled = bad
        .wait_ready_reason(Some("False"), "ValidationFailed")
        .await;
    assert_condition(&stalled, "Stalled", "True");
    let v = assert_kstatus(&bad, "Failed");
    assert_eq!(
        v.message,
        condition(&stalled, "Stalled")
            .map(|c| c.message.clone())
            .unwrap_or_default()
    );

    // A failure the operator retries (reason SourceFailed, no Stalled): InProgress, as kstatus
    // reads any Ready=False.
    let retried = h.applyset(&unique("ks-retry"));
    retried
        .create(json!({"sources": [{"configMap": {"name": "no-such-configmap"}}]}))
        .await;
    retried
        .wait_ready_reason(Some("False"), "SourceFailed")
        .await;
    assert_kstatus(&retried, "InProgress");

    // A set waiting for its members' health (spec.wait, a Deployment not available):
    // Ready=Unknown and Reconciling=True, which kstatus reads as InProgress, so a Flux
    // `wait` on the set waits for its workloads too.
    let health = h.applyset(&unique("ks-health"));
    health
        .create(json!({"wait": true, "manifests": [deployment("web")]}))
        .await;
    health
        .wait_ready_reason(Some("Unknown"), "Progressing")
        .await;
    let v = assert_kstatus(&health, "InProgress");
    assert!(
        v.message.contains("waiting: 1 of 1 not current"),
        "{}",
        v.message
    );

    // `kubectl wait --for=condition=Ready` waits through the defaulted status until the
    // operator has reconciled a new set.
    let waited = h.applyset(&unique("ks-wait"));
    waited
        .create(json!({"manifests": [configmap("w", json!({"k": "v"}))]}))
        .await;
    let mut cmd = support::cluster().kubectl();
    cmd.args([
        "wait",
        "--for=condition=Ready",
        &format!("applyset/{}", waited.name),
        "-n",
        &h.ns,
        "--timeout=60s",
    ]);
    let out = tokio::task::spawn_blocking(move || cmd.output())
        .await
        .expect("kubectl wait task")
        .expect("kubectl wait");
    assert!(
        out.status.success(),
        "kubectl wait: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let st = waited.status().await.expect("a status");
    assert_eq!(ready_status(&st), "True");
    assert_kstatus(&waited, "Current");
    stop(op).await;
}

fn ready_status(status: &applyset_operator::api::ApplySetStatus) -> String {
    ready(status).status.clone()
}

/// The program itself: an object without status is Current to kstatus (which is why the
/// CRDs default the status), and the default makes it InProgress.
#[test]
fn the_program_reads_objects_given_as_json() {
    let obj = |status: Value| {
        let mut o = json!({"apiVersion": "applyset.dev/v1alpha1", "kind": "ApplySet",
                           "metadata": {"name": "x", "namespace": "y", "generation": 1}});
        if !status.is_null() {
            o["status"] = status;
        }
        serde_json::to_vec(&o).expect("json")
    };
    assert_eq!(compute(&obj(Value::Null)).status, "Current");
    assert_eq!(
        compute(&obj(json!({"observedGeneration": -1}))).status,
        "InProgress"
    );
    assert_eq!(
        compute(&obj(json!({"observedGeneration": 1, "conditions": [
            {"type": "Ready", "status": "False", "reason": "ApplyFailed", "message": "m",
             "lastTransitionTime": "2025-01-01T00:00:00Z"},
            {"type": "Stalled", "status": "True", "reason": "ValidationFailed",
             "message": "bad", "lastTransitionTime": "2025-01-01T00:00:00Z"}]})))
        .status,
        "Failed"
    );
}
