//! End to end: the per-object controls (docs/apply-controls.md "Per-object controls"), each
//! under both key families (`applyset.dev/` and Flux's `kustomize.toolkit.fluxcd.io/`): what
//! becomes of a marked object after an edit (of its manifest, of the live object by another
//! writer) and after its removal from the set. The manifests of the `applyset.dev/` family
//! carry the marks as annotations and someone else marks live objects with labels; Flux's
//! family the other way round, in the case Flux's docs write (`Disabled`, `Enabled`).
//!
//! Every scenario keeps a witness member `a` whose value changes with each edit: once the
//! witness shows the edit and the status describes the new generation, the operator has
//! reconciled after the change, and what did not change is asserted.

mod support;

use support::operator;

use kube::{
    ResourceExt,
    api::{DynamicObject, Patch, PatchParams, PostParams},
};
use operator::*;
use serde_json::{Value, json};
use support::{cluster, scratch};

/// One of the two key families.
#[derive(Clone, Copy, Debug)]
enum Family {
    /// `applyset.dev/`: annotations on manifests, labels on live objects.
    Ours,
    /// `kustomize.toolkit.fluxcd.io/`: labels on manifests, annotations on live objects.
    Flux,
}

impl Family {
    fn key(self, suffix: &str) -> String {
        match self {
            Family::Ours => format!("applyset.dev/{suffix}"),
            Family::Flux => format!("kustomize.toolkit.fluxcd.io/{suffix}"),
        }
    }

    /// The value as this family's examples write it (the match ignores case).
    fn value(self, value: &str) -> String {
        match (self, value) {
            (Family::Flux, "disabled") => "Disabled".into(),
            (Family::Flux, "enabled") => "Enabled".into(),
            _ => value.into(),
        }
    }

    fn prefix(self) -> &'static str {
        match self {
            Family::Ours => "ours",
            Family::Flux => "flux",
        }
    }

    /// `manifest` with the control `suffix: value`, in this family's manifest form.
    fn marked(self, mut manifest: Value, suffix: &str, value: &str) -> Value {
        let field = match self {
            Family::Ours => "annotations",
            Family::Flux => "labels",
        };
        manifest["metadata"][field] = json!({ self.key(suffix): self.value(value) });
        manifest
    }

    /// A user marks the live object `name` with `suffix: value`, in this family's live form,
    /// as `kubectl label` / `kubectl annotate` do (their field managers, which Override takes
    /// fields over from).
    async fn mark_live(self, h: &Harness, name: &str, suffix: &str, value: &str) {
        self.mark_live_with(h, name, &[(&self.key(suffix), &self.value(value))])
            .await;
    }

    /// [`Family::mark_live`] of several keys in one write.
    async fn mark_live_with(self, h: &Harness, name: &str, pairs: &[(&str, &str)]) {
        let (field, manager) = match self {
            Family::Ours => ("labels", "kubectl-label"),
            Family::Flux => ("annotations", "kubectl-annotate"),
        };
        let map: serde_json::Map<String, Value> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_string(), json!(v)))
            .collect();
        edit_as(h, name, manager, json!({"metadata": { field: map }})).await;
    }

    /// The value of `key` in this family's live form on `obj`.
    fn live_mark(self, obj: &DynamicObject, key: &str) -> Option<String> {
        match self {
            Family::Ours => obj.labels().get(key).cloned(),
            Family::Flux => obj.annotations().get(key).cloned(),
        }
    }
}

/// The field manager of "someone else" (neither a maker the operator takes fields over
/// from, nor the set).
const OTHER: &str = "other-writer";

/// Someone else's merge patch of ConfigMap `name`.
async fn edit(h: &Harness, name: &str, patch: Value) {
    edit_as(h, name, OTHER, patch).await;
}

/// A merge patch of ConfigMap `name` as `manager`.
async fn edit_as(h: &Harness, name: &str, manager: &str, patch: Value) {
    let params = PatchParams {
        field_manager: Some(manager.into()),
        ..PatchParams::default()
    };
    dyn_api(&h.client, &configmap_ar(), Some(&h.ns))
        .patch(name, &params, &Patch::Merge(patch))
        .await
        .unwrap_or_else(|e| panic!("{manager} patching {name}: {e}"));
}

/// Someone else creates ConfigMap `name` (unlabelled) with `k: value`.
async fn create_theirs(h: &Harness, name: &str, value: &str) {
    let obj: DynamicObject =
        serde_json::from_value(configmap(name, json!({"k": value}))).expect("object");
    let params = PostParams {
        field_manager: Some(OTHER.into()),
        ..PostParams::default()
    };
    dyn_api(&h.client, &configmap_ar(), Some(&h.ns))
        .create(&params, &obj)
        .await
        .unwrap_or_else(|e| panic!("{OTHER} creating {name}: {e}"));
}

/// ConfigMap `name`, if it exists.
async fn cm(h: &Harness, name: &str) -> Option<DynamicObject> {
    get_obj(&h.client, &configmap_ar(), Some(&h.ns), name).await
}

/// `data.k` of ConfigMap `name` (which must exist).
async fn k(h: &Harness, name: &str) -> String {
    let obj = cm(h, name)
        .await
        .unwrap_or_else(|| panic!("ConfigMap {name} should exist"));
    obj.data["data"]["k"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Sets the manifests (the witness `a` at `witness` first) and waits until the operator has
/// applied them: the witness shows `witness` and Ready is True for the new generation.
/// Returns that status.
async fn declare(h: &Harness, set: &Parent, witness: &str, more: Vec<Value>) -> Status {
    let mut manifests = vec![configmap("a", json!({"k": witness}))];
    manifests.extend(more);
    set.patch_spec(json!({ "manifests": manifests })).await;
    eventually("the witness applied", DEADLINE, || async {
        (k(h, "a").await == witness).then_some(())
    })
    .await;
    set.wait_ready().await
}

type Status = applyset_operator::api::ApplySetStatus;

/// Waits for a Ready status of the current generation whose summary satisfies `ok`.
async fn wait_summary(
    set: &Parent,
    what: &str,
    ok: impl Fn(&applyset_operator::api::Summary) -> bool,
) -> Status {
    set.wait_until(what, DEADLINE, |obj, st| {
        let st = st?;
        let current = st.observed_generation == obj.metadata.generation;
        let ready = condition(st, "Ready").is_some_and(|c| c.status == "True");
        (current && ready && st.summary.as_ref().is_some_and(&ok)).then(|| st.clone())
    })
    .await
}

fn part_of(obj: &DynamicObject) -> Option<String> {
    obj.labels().get(LABEL_PART_OF).cloned()
}

/// A test's namespace, operator and set.
struct Case {
    h: Harness,
    op: applyset_operator::controller::Operator,
    set: Parent,
}

impl Case {
    async fn new(f: Family, what: &str) -> Case {
        let h = Harness::new(&format!("{}-{what}", f.prefix())).await;
        let op = h.start_operator();
        let set = h.applyset("controls");
        Case { h, op, set }
    }

    /// Creates the set with the witness at "1" and `more`, and waits until it is Ready.
    async fn create(&self, more: Vec<Value>) -> Status {
        self.create_with(more, false).await
    }

    /// [`Case::create`], waiting for the members' health when `wait` (a skipped member is
    /// not assessed: one that does not exist does not hold the set back).
    async fn create_with(&self, more: Vec<Value>, wait: bool) -> Status {
        let mut manifests = vec![configmap("a", json!({"k": "1"}))];
        manifests.extend(more);
        let spec = json!({ "manifests": manifests, "wait": wait });
        self.set.create(spec).await;
        self.set.wait_ready().await
    }
}

/// `ssa: Ignore` on the manifest: never written (not even when someone else creates the
/// object: not adopted, not refused) and not waited for, reported skipped with its reason in
/// the status, the event and a plan; never pruned when removed (it was never the set's).
async fn ssa_ignore(f: Family) {
    let c = Case::new(f, "ignore").await;
    let (h, set) = (&c.h, &c.set);
    let ignored = |v: &str| f.marked(configmap("ign", json!({"k": v})), "ssa", "Ignore");
    let st = c.create_with(vec![ignored("mine")], true).await;
    let s = summary(&st);
    assert_eq!((s.members, s.created, s.skipped), (2, 1, 1), "{s:?}");
    assert!(
        cm(h, "ign").await.is_none(),
        "an ignored member is never written"
    );

    // Someone else creates it; the manifest and the witness change.
    create_theirs(h, "ign", "theirs").await;
    let st = declare(h, set, "2", vec![ignored("mine2")]).await;
    assert_eq!(summary(&st).skipped, 1, "{}", status_json(&st));
    let live = cm(h, "ign").await.expect("theirs");
    assert_eq!(k(h, "ign").await, "theirs", "not applied");
    assert_eq!(part_of(&live), None, "not adopted");
    let ns = &h.ns;
    let note = event_note(&h.client, ns, "ReconciliationSucceeded", "skipped").await;
    assert!(
        note.contains(&format!("ConfigMap {ns}/ign skipped (ssa: Ignore)")),
        "the event names the skipped member and why: {note}"
    );

    // Removed from the set: left alone (never the set's).
    declare(h, set, "3", vec![]).await;
    assert_eq!(k(h, "ign").await, "theirs", "never touched");

    // A plan says which member it would skip, and why.
    let plan = h.applyset("plan");
    plan.create(json!({"mode": "Plan", "manifests": [
        f.marked(configmap("p-ign", json!({"k": "1"})), "ssa", "Ignore"),
        configmap("p-new", json!({"k": "1"})),
    ]}))
    .await;
    let st = plan.wait_ready_reason(Some("False"), "PlanReady").await;
    let p = st.plan.clone().expect("a plan");
    let skip: Vec<(String, String)> = p
        .skip
        .iter()
        .map(|s| (s.member.name.clone(), s.reason.clone()))
        .collect();
    assert_eq!(skip, [("p-ign".to_string(), "ssa: Ignore".to_string())]);
    assert_eq!(p.create.len(), 1, "{}", status_json(&st));
    assert!(cm(h, "p-ign").await.is_none() && cm(h, "p-new").await.is_none());
    stop(c.op).await;
}

/// `ssa: Ignore` put on the live member by someone else: the set stops applying it (their
/// edits stay, the manifest's do not land), and keeps it when it is removed from the set.
async fn ssa_ignore_live(f: Family) {
    let c = Case::new(f, "ignore-live").await;
    let (h, set) = (&c.h, &c.set);
    let x = |v: &str| configmap("x", json!({"k": v}));
    c.create(vec![x("1")]).await;
    assert_eq!(part_of(&cm(h, "x").await.expect("x")), Some(set.id()));

    f.mark_live(h, "x", "ssa", "Ignore").await;
    wait_summary(set, "x skipped", |s| s.skipped == 1).await;
    edit(h, "x", json!({"data": {"k": "theirs"}})).await;
    declare(h, set, "2", vec![x("2")]).await;
    assert_eq!(
        k(h, "x").await,
        "theirs",
        "an ignored member is not applied"
    );

    // Removed from the set: kept.
    let st = declare(h, set, "3", vec![]).await;
    assert_eq!(summary(&st).retained, 1, "{}", status_json(&st));
    assert_eq!(
        k(h, "x").await,
        "theirs",
        "an ignored object is never pruned"
    );
    stop(c.op).await;
}

/// `ssa: IfNotPresent`: created when absent (carrying the mark), then never changed (by the
/// manifest; someone else's edits stay); an existing object of someone else's is skipped
/// (not adopted, not refused); `diff` says so; removed from the set, the object the set
/// created is pruned, the other is not (never the set's).
async fn ssa_if_not_present(f: Family) {
    let c = Case::new(f, "ifnp").await;
    let (h, set) = (&c.h, &c.set);
    let once =
        |name: &str, v: &str| f.marked(configmap(name, json!({"k": v})), "ssa", "IfNotPresent");
    create_theirs(h, "y", "theirs").await;
    let st = c.create(vec![once("x", "1"), once("y", "mine")]).await;
    let s = summary(&st);
    assert_eq!((s.created, s.skipped), (2, 1), "{s:?}");
    let live = cm(h, "x").await.expect("x created");
    assert_eq!(part_of(&live), Some(set.id()));
    assert_eq!(k(h, "x").await, "1");
    assert_eq!(part_of(&cm(h, "y").await.expect("y")), None, "not adopted");
    assert_eq!(k(h, "y").await, "theirs");

    let st = declare(h, set, "2", vec![once("x", "2"), once("y", "mine")]).await;
    assert_eq!(summary(&st).skipped, 2, "{}", status_json(&st));
    assert_eq!(k(h, "x").await, "1", "an existing object is not changed");

    edit(h, "x", json!({"data": {"k": "theirs"}})).await;
    declare(h, set, "3", vec![once("x", "2"), once("y", "mine")]).await;
    assert_eq!(k(h, "x").await, "theirs", "someone else's edit stays");

    // `kubectl applyset diff` names the skipped members and why; a skip is not a change.
    let dir = scratch(&format!("{}-ifnp", f.prefix()));
    let file = dir.join("set.yaml");
    let spec = json!({"manifests": [configmap("a", json!({"k": "3"})),
        once("x", "2"), once("y", "mine")]});
    let out = diff(&file, set, &spec).await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let ns = &h.ns;
    for name in ["x", "y"] {
        let line = format!("# skipped ConfigMap {ns}/{name}: IfNotPresent, exists\n");
        assert!(text.contains(&line), "{line:?} in:\n{text}");
    }
    assert!(text.contains("1 unchanged, 2 skipped"), "{text}");

    // Removed from the set: the object the set created is pruned, the other is not.
    declare(h, set, "4", vec![]).await;
    assert!(cm(h, "x").await.is_none(), "pruned as any member");
    assert_eq!(k(h, "y").await, "theirs", "never the set's, never pruned");
    stop(c.op).await;
}

/// Runs `kubectl applyset diff` on a file holding `set` with `spec`.
async fn diff(file: &std::path::Path, set: &Parent, spec: &Value) -> std::process::Output {
    let doc = json!({
        "apiVersion": "applyset.dev/v1alpha1",
        "kind": set.kind(),
        "metadata": {"name": set.name, "namespace": set.namespace},
        "spec": spec,
    });
    std::fs::write(file, serde_json::to_string(&doc).expect("json")).expect("write");
    let kubeconfig = format!("--kubeconfig={}", cluster().kubeconfig().display());
    tokio::process::Command::new(env!("CARGO_BIN_EXE_kubectl-applyset"))
        .args([kubeconfig.as_str(), "diff", "-f"])
        .arg(file)
        .env_remove("KUBECONFIG")
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .expect("run kubectl-applyset")
}

/// `reconcile: disabled`: on a manifest, never written (and not waited for); put on the live
/// member by someone else, the set leaves it alone (their edits stay) and keeps it when it is
/// removed.
async fn reconcile_disabled(f: Family) {
    let c = Case::new(f, "reconcile").await;
    let (h, set) = (&c.h, &c.set);
    let x = |v: &str| configmap("x", json!({"k": v}));
    let z = f.marked(configmap("z", json!({"k": "1"})), "reconcile", "disabled");
    let st = c.create_with(vec![x("1"), z.clone()], true).await;
    assert_eq!(summary(&st).skipped, 1, "{}", status_json(&st));
    assert!(cm(h, "z").await.is_none(), "never written");

    f.mark_live(h, "x", "reconcile", "disabled").await;
    wait_summary(set, "x skipped too", |s| s.skipped == 2).await;
    edit(h, "x", json!({"data": {"k": "theirs"}})).await;
    declare(h, set, "2", vec![x("2"), z]).await;
    assert_eq!(k(h, "x").await, "theirs", "not applied");

    let st = declare(h, set, "3", vec![]).await;
    assert_eq!(summary(&st).retained, 1, "{}", status_json(&st));
    assert_eq!(k(h, "x").await, "theirs", "kept");
    assert!(cm(h, "z").await.is_none());
    stop(c.op).await;
}

/// `prune: disabled`: applied as any member (an edit of its manifest lands); removed from the
/// set, kept — on the manifest (so on the live object) or put on the live object with
/// `kubectl label` / `kubectl annotate`: Override takes over what else that manager wrote
/// (removed) but never the mark, which survives the reconcile that follows.
async fn prune_disabled(f: Family) {
    let c = Case::new(f, "prune").await;
    let (h, set) = (&c.h, &c.set);
    let x = |v: &str| f.marked(configmap("x", json!({"k": v})), "prune", "disabled");
    let y = configmap("y", json!({"k": "1"}));
    c.create(vec![x("1"), y.clone()]).await;
    declare(h, set, "2", vec![x("2"), y.clone()]).await;
    assert_eq!(k(h, "x").await, "2", "applied as any member");

    let (mark, extra) = (f.key("prune"), "example.com/extra");
    f.mark_live_with(h, "y", &[(&mark, &f.value("disabled")), (extra, "x")])
        .await;
    // y drifted: the next reconcile applies it and takes over kubectl's `extra` (removed).
    declare(h, set, "3", vec![x("3"), y]).await;
    let live = eventually("kubectl's other key taken over", DEADLINE, || async {
        let o = cm(h, "y").await?;
        f.live_mark(&o, extra).is_none().then_some(o)
    })
    .await;
    assert_eq!(
        f.live_mark(&live, &mark).as_deref(),
        Some(f.value("disabled").as_str()),
        "the mark stays"
    );
    let st = declare(h, set, "4", vec![]).await;
    assert_eq!(summary(&st).retained, 2, "{}", status_json(&st));
    assert_eq!(k(h, "x").await, "3", "kept");
    assert_eq!(k(h, "y").await, "1", "kept");
    stop(c.op).await;
}

/// `force: enabled` (on the manifest, or put on the live object by someone else): a change
/// of an immutable field re-creates the object; removed from the set, it is pruned.
async fn force_enabled(f: Family) {
    let c = Case::new(f, "force").await;
    let (h, set) = (&c.h, &c.set);
    let frozen = |name: &str, v: &str| {
        let mut cm = configmap(name, json!({"k": v}));
        cm["immutable"] = json!(true);
        cm
    };
    let x = |v: &str| f.marked(frozen("x", v), "force", "enabled");
    c.create(vec![x("1"), frozen("y", "1")]).await;
    let uid = |o: Option<DynamicObject>| o.and_then(|o| o.uid()).expect("a uid");
    let (x_uid, y_uid) = (uid(cm(h, "x").await), uid(cm(h, "y").await));

    f.mark_live(h, "y", "force", "enabled").await;
    declare(h, set, "2", vec![x("2"), frozen("y", "2")]).await;
    assert_eq!(k(h, "x").await, "2");
    assert_eq!(k(h, "y").await, "2");
    assert_ne!(uid(cm(h, "x").await), x_uid, "x re-created");
    assert_ne!(uid(cm(h, "y").await), y_uid, "y re-created");

    declare(h, set, "3", vec![]).await;
    eventually("x and y pruned", DEADLINE, || async {
        (cm(h, "x").await.is_none() && cm(h, "y").await.is_none()).then_some(())
    })
    .await;
    stop(c.op).await;
}

/// One `#[tokio::test]` per scenario and key family.
macro_rules! per_family {
    ($($scenario:ident),* $(,)?) => {
        mod applyset_dev {
            $(
                #[tokio::test]
                async fn $scenario() {
                    super::$scenario(super::Family::Ours).await
                }
            )*
        }
        mod kustomize_toolkit_fluxcd_io {
            $(
                #[tokio::test]
                async fn $scenario() {
                    super::$scenario(super::Family::Flux).await
                }
            )*
        }
    };
}

per_family!(
    ssa_ignore,
    ssa_ignore_live,
    ssa_if_not_present,
    reconcile_disabled,
    prune_disabled,
    force_enabled,
);
