//! The operator's per-object controls (`applyset::controls`) and Override's managed fields
//! (`applyset::field_managers::taken_over`) decide as fluxcd/pkg/ssa does for
//! kustomize-controller: every case of a table is given to the Go program
//! `tests/testenv/fluxssa` (built by `tests/testenv/build-fluxssa.sh`, or `$APPLYSET_FLUXSSA`),
//! which runs Flux's own code (`utils.AnyInMetadata` with kustomize-controller's selectors,
//! `ssa.PatchReplaceFieldsManagers` with its field managers), and its answers are compared
//! with ours.
//!
//! The set's own Update entry is matched by its exact name (kustomize-controller matches its
//! name as a prefix; each set has a manager of its own here), and the program is told so.
//!
//! One deliberate difference: when a matching entry comes before the owner's Apply entry, Flux
//! also keeps the owner's original entry (its loop compares entries by value after merging into
//! a copy), so the object would list two Apply entries of the owner; the operator keeps only
//! the merged one. The comparison drops that stale duplicate from Flux's answer.
//!
//! A second deliberate difference: the per-object control keys (`ssa`, `prune`, `force`,
//! `reconcile` under `applyset.dev/` or `kustomize.toolkit.fluxcd.io/`, labels or annotations)
//! stay with the entry that owns them; Flux merges them into its own entry, so the next apply
//! removes a `prune: disabled` a user added with `kubectl annotate`. The cases without such
//! keys are compared as they are; those with them are compared with the control keys left
//! out, and the difference is asserted.

use std::{
    io::Write as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::OnceLock,
};

use applyset_operator::applyset::{
    controls::{Marks, Skip, force_recreate, keep_on_prune, overrides_managers, skip_apply},
    field_managers::taken_over,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use serde_json::{Value, json};

/// The fluxssa program: `$APPLYSET_FLUXSSA`, or whatever `tests/testenv/build-fluxssa.sh`
/// prints (it builds the program on a cache miss and answers at once on a hit).
fn fluxssa_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(p) = std::env::var_os("APPLYSET_FLUXSSA").filter(|p| !p.is_empty()) {
            return PathBuf::from(p);
        }
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/testenv/build-fluxssa.sh");
        let out = Command::new("bash")
            .arg(script)
            .stderr(Stdio::inherit())
            .output()
            .expect("run build-fluxssa.sh");
        assert!(
            out.status.success(),
            "build-fluxssa.sh failed: {}",
            out.status
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        let dir = stdout.lines().last().unwrap_or_default().trim().to_string();
        assert!(!dir.is_empty(), "build-fluxssa.sh printed no directory");
        PathBuf::from(dir).join("fluxssa")
    })
}

/// Flux's answers to `cases`, in order.
fn flux(cases: &[Value]) -> Vec<Value> {
    let mut child = Command::new(fluxssa_bin())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run fluxssa");
    let input = serde_json::to_vec(cases).expect("cases as JSON");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(&input)
        .expect("write the cases");
    let out = child.wait_with_output().expect("fluxssa's answers");
    assert!(
        out.status.success(),
        "fluxssa failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answers: Vec<Value> = serde_json::from_slice(&out.stdout).expect("answers as JSON");
    assert_eq!(answers.len(), cases.len());
    answers
}

/// Metadata that each set one key (as a label or an annotation, under either prefix) to
/// values that match, match ignoring case, are empty, or do not match; and none at all.
fn metadata_variants() -> Vec<Value> {
    let values: &[(&str, &[&str])] = &[
        (
            "ssa",
            &[
                "Ignore",
                "ignore",
                "IfNotPresent",
                "IFNOTPRESENT",
                "Merge",
                "merge",
                "Override",
                "",
                "Ignore ",
            ],
        ),
        ("prune", &["disabled", "Disabled", "enabled", ""]),
        ("force", &["enabled", "ENABLED", "disabled", ""]),
        ("reconcile", &["disabled", "DISABLED", "enabled", ""]),
    ];
    let mut out = vec![json!({})];
    for prefix in [
        "applyset.dev/",
        "kustomize.toolkit.fluxcd.io/",
        "Kustomize.toolkit.fluxcd.io/",
        "example.com/",
    ] {
        for (key, vals) in values {
            for value in *vals {
                for field in ["labels", "annotations"] {
                    out.push(json!({ field: { format!("{prefix}{key}"): value } }));
                }
            }
        }
    }
    // Two keys at once, on different fields.
    out.push(json!({"labels": {"applyset.dev/ssa": "Merge"}, "annotations": {"kustomize.toolkit.fluxcd.io/force": "Enabled"}}));
    out.push(json!({"labels": {"kustomize.toolkit.fluxcd.io/reconcile": "disabled"}, "annotations": {"applyset.dev/ssa": "IfNotPresent"}}));
    out.push(json!({"annotations": {"applyset.dev/ssa": "IfNotPresent", "kustomize.toolkit.fluxcd.io/ssa": "Ignore"}}));
    out
}

fn marks(meta: &Value) -> Marks {
    let object = json!({ "metadata": meta });
    Marks::of_object(object.as_object().expect("an object"))
}

/// Our answer in the program's terms.
fn ours(desired: &Value, live: Option<&Value>) -> Value {
    let (d, l) = (marks(desired), live.map(marks));
    let skip = match skip_apply(d, l) {
        Some(Skip::Ignore | Skip::ReconcileDisabled) => "Exclusion",
        Some(Skip::IfNotPresentExists) => "IfNotPresent",
        None => "",
    };
    let live_marks = l.unwrap_or_default();
    json!({
        "skip": skip,
        "force": force_recreate(d, live_marks),
        "override": overrides_managers(d, live_marks),
        "keepOnPrune": live.is_some() && keep_on_prune(live_marks).is_some(),
    })
}

#[test]
fn per_object_controls_decide_as_flux() {
    let variants = metadata_variants();
    let mut cases = Vec::new();
    for desired in &variants {
        cases.push(json!({"desired": desired, "live": null}));
        for live in &variants {
            cases.push(json!({"desired": desired, "live": live}));
        }
    }
    let answers = flux(&cases);
    let mut wrong = Vec::new();
    for (case, theirs) in cases.iter().zip(&answers) {
        let mine = ours(
            &case["desired"],
            Some(&case["live"]).filter(|l| !l.is_null()),
        );
        let mut theirs = theirs.clone();
        theirs
            .as_object_mut()
            .expect("an answer")
            .remove("managedFields");
        if mine != theirs {
            wrong.push(format!("{case}: flux {theirs}, ours {mine}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} cases differ:\n{}",
        wrong.len(),
        cases.len(),
        wrong
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

const OWNER: &str = "applyset.dev/ns/app";

fn entry(manager: &str, operation: &str, fields: Value) -> Value {
    json!({"manager": manager, "operation": operation, "apiVersion": "v1",
        "fieldsType": "FieldsV1", "fieldsV1": fields})
}

fn sub(mut e: Value, subresource: &str) -> Value {
    e["subresource"] = json!(subresource);
    e
}

/// Managed fields in the API server's order (Apply entries first).
fn managed_cases() -> Vec<Vec<Value>> {
    let ours = |f| entry(OWNER, "Apply", f);
    let data = |k: &str| json!({"f:data": {format!("f:{k}"): {}}});
    let container = |name: &str, field: &str| {
        json!({"f:spec": {"f:template": {"f:spec": {"f:containers": {
            format!("k:{{\"name\":\"{name}\"}}"): {".": {}, format!("f:{field}"): {}}}}}}})
    };
    vec![
        vec![],
        vec![ours(data("a"))],
        vec![ours(data("a")), entry("helm", "Update", data("h"))],
        vec![ours(data("a")), entry("kubectl-edit", "Update", data("b"))],
        vec![
            ours(data("a")),
            entry("kubectl-client-side-apply", "Update", data("b")),
            entry("kubectl", "Update", data("c")),
        ],
        vec![
            ours(data("a")),
            entry("before-first-apply", "Update", data("b")),
        ],
        vec![
            ours(data("a")),
            entry("before-first-apply", "Apply", data("b")),
        ],
        vec![ours(data("a")), entry(OWNER, "Update", data("u"))],
        vec![
            ours(data("a")),
            entry(&format!("{OWNER}-2"), "Update", data("o")),
        ],
        vec![
            ours(data("a")),
            sub(
                entry("kubectl", "Update", json!({"f:spec": {"f:replicas": {}}})),
                "scale",
            ),
        ],
        vec![
            ours(data("a")),
            sub(
                entry("kubectl-edit", "Update", json!({"f:status": {}})),
                "status",
            ),
        ],
        vec![
            ours(data("a")),
            entry("Kubectl", "Update", data("k")),
            entry("my-kubectl", "Update", data("m")),
        ],
        // No Apply entry of the owner: the first match becomes it.
        vec![
            entry("kubectl-create", "Update", data("a")),
            entry("kubectl-edit", "Update", data("b")),
        ],
        vec![
            entry("helm", "Update", data("h")),
            entry("kubectl", "Update", data("a")),
        ],
        vec![entry("kubectl", "Apply", data("a"))],
        // A kubectl Apply entry older than ours comes first.
        vec![
            entry("kubectl", "Apply", data("k")),
            ours(data("a")),
            entry("kubectl-edit", "Update", data("b")),
        ],
        // Nested sets: list keys, members with children, values, indices.
        vec![
            ours(container("app", "image")),
            entry("kubectl-edit", "Update", container("app", "env")),
            entry(
                "kubectl-patch",
                "Update",
                json!({"f:spec": {"f:template": {"f:spec": {"f:containers": {
                "k:{\"name\":\"side\"}": {".": {}, "f:name": {}}}}}, "f:args": {"i:0": {}}}}),
            ),
            entry(
                "kubectl-label",
                "Update",
                json!({"f:metadata": {"f:finalizers": {"v:\"x\"": {}}, "f:labels": {".": {}, "f:a": {}}}}),
            ),
        ],
        vec![
            ours(json!({"f:metadata": {"f:labels": {"f:a": {}}}})),
            entry(
                "kubectl-annotate",
                "Update",
                json!({"f:metadata": {"f:labels": {".": {}, "f:b": {}}, "f:annotations": {}}}),
            ),
        ],
    ]
}

/// Flux's managed fields without the owner's stale Apply entry it keeps when a matching entry
/// comes first (see the module's documentation).
fn without_stale_owner(theirs: &Value, input: &[Value]) -> Value {
    let Some(list) = theirs.as_array() else {
        return theirs.clone();
    };
    let original = input
        .iter()
        .rfind(|e| e["manager"] == OWNER && e["operation"] == "Apply");
    let stale = |e: &&Value| Some(*e) == original && list.len() > 1;
    let mut kept: Vec<Value> = Vec::with_capacity(list.len());
    let mut dropped = false;
    for e in list {
        if !dropped && stale(&e) && list.last() != Some(e) {
            dropped = true;
            continue;
        }
        kept.push(e.clone());
    }
    Value::Array(kept)
}

/// For each case's managed fields: the entries parsed (for ours) and the managed fields
/// Flux's `PatchReplaceFieldsManagers` computes for them (its stale owner entry dropped).
fn against_flux(inputs: &[Vec<Value>]) -> Vec<(Vec<ManagedFieldsEntry>, Value)> {
    let cases: Vec<Value> = inputs
        .iter()
        .map(|m| json!({"desired": {}, "live": {}, "owner": OWNER, "managedFields": m}))
        .collect();
    let answers = flux(&cases);
    inputs
        .iter()
        .zip(&answers)
        .map(|(input, theirs)| {
            let entries = serde_json::from_value(Value::Array(input.clone())).expect("entries");
            (
                entries,
                without_stale_owner(&theirs["managedFields"], input),
            )
        })
        .collect()
}

#[test]
fn managed_fields_are_taken_over_as_flux() {
    let inputs = managed_cases();
    for (input, (entries, theirs)) in inputs.iter().zip(against_flux(&inputs)) {
        let mine = serde_json::to_value(taken_over(&entries, OWNER)).expect("as JSON");
        assert_eq!(
            mine,
            theirs,
            "managed fields {}",
            Value::Array(input.clone())
        );
    }
}

/// Managed fields whose kubectl entries own per-object control keys.
fn control_cases() -> Vec<Vec<Value>> {
    let ours = |f| entry(OWNER, "Apply", f);
    let data = |k: &str| json!({"f:data": {format!("f:{k}"): {}}});
    let meta = |map: &str, keys: &[&str], data: Option<&str>| {
        let mut keys: serde_json::Map<String, Value> =
            keys.iter().map(|k| (format!("f:{k}"), json!({}))).collect();
        keys.insert(".".into(), json!({}));
        let mut f = json!({"f:metadata": {map: keys}});
        if let Some(k) = data {
            f["f:data"] = json!({format!("f:{k}"): {}});
        }
        f
    };
    vec![
        // Only the mark: Flux takes it over, the operator leaves the entry alone.
        vec![
            ours(data("a")),
            entry(
                "kubectl-annotate",
                "Update",
                meta("f:annotations", &["applyset.dev/prune"], None),
            ),
        ],
        // The mark and more: the rest is taken over.
        vec![
            ours(data("a")),
            entry(
                "kubectl-label",
                "Update",
                meta(
                    "f:labels",
                    &["kustomize.toolkit.fluxcd.io/force", "app"],
                    Some("b"),
                ),
            ),
            entry("kubectl-edit", "Update", data("c")),
        ],
        // No Apply entry of the owner.
        vec![entry(
            "kubectl-annotate",
            "Update",
            meta(
                "f:annotations",
                &["kustomize.toolkit.fluxcd.io/ssa", "applyset.dev/reconcile"],
                Some("a"),
            ),
        )],
    ]
}

/// Whether a `fieldsV1` key is a per-object control key.
fn is_control(field: &str) -> bool {
    ["applyset.dev/", "kustomize.toolkit.fluxcd.io/"]
        .iter()
        .flat_map(|p| {
            ["ssa", "prune", "force", "reconcile"]
                .iter()
                .map(move |s| format!("f:{p}{s}"))
        })
        .any(|k| k == field)
}

/// The control keys an entry owns.
fn controls_of(e: &Value) -> Vec<String> {
    ["f:labels", "f:annotations"]
        .iter()
        .filter_map(|m| e["fieldsV1"]["f:metadata"][m].as_object())
        .flat_map(|m| m.keys().filter(|k| is_control(k)).cloned())
        .collect()
}

/// Managed fields without the control keys (a map left with only `.` goes too, and an entry
/// left with nothing).
fn without_controls(entries: &Value) -> Value {
    let mut out = Vec::new();
    for e in entries.as_array().into_iter().flatten() {
        let mut e = e.clone();
        let fields = e.get_mut("fieldsV1").and_then(Value::as_object_mut);
        if let Some(fields) = fields
            && let Some(meta) = fields.get_mut("f:metadata").and_then(Value::as_object_mut)
        {
            for m in ["f:labels", "f:annotations"] {
                if let Some(map) = meta.get_mut(m).and_then(Value::as_object_mut) {
                    map.retain(|k, _| !is_control(k));
                    if map.keys().all(|k| k == ".") {
                        meta.remove(m);
                    }
                }
            }
            if meta.is_empty() {
                fields.remove("f:metadata");
            }
        }
        if e["fieldsV1"].as_object().is_some_and(|f| !f.is_empty()) {
            out.push(e);
        }
    }
    Value::Array(out)
}

#[test]
fn control_keys_stay_with_their_manager_unlike_flux() {
    let inputs = control_cases();
    for (input, (entries, theirs)) in inputs.iter().zip(against_flux(&inputs)) {
        let mine = match taken_over(&entries, OWNER) {
            Some(m) => serde_json::to_value(m).expect("as JSON"),
            None => Value::Array(input.clone()),
        };
        let shown = Value::Array(input.clone());
        // The difference: Flux's own entry takes the marks; ours leaves them to their manager.
        for e in input.iter().filter(|e| !controls_of(e).is_empty()) {
            let owns = |list: &Value| {
                list.as_array()
                    .into_iter()
                    .flatten()
                    .any(|x| x["manager"] == e["manager"] && controls_of(x) == controls_of(e))
            };
            assert!(owns(&mine), "ours keeps {e} for its manager: {mine}");
            assert!(!owns(&theirs), "Flux takes over {e}: {theirs}");
        }
        // Everything else as Flux.
        assert_eq!(
            without_controls(&mine),
            without_controls(&theirs),
            "managed fields {shown}"
        );
    }
}
