//! The handover from Flux, end to end, with the REAL kustomize-controller: it applies a
//! Deployment, a ConfigMap and a Secret (`kustomize.toolkit.fluxcd.io/ssa: IfNotPresent`) from
//! an artifact served on loopback (what source-controller would serve for the GitRepository,
//! whose status the test writes), and `kubectl applyset convert --from-cluster NS/NAME
//! --handover` hands them over to the converted ApplySet, whose git source reads the same
//! files from a loopback git server. A watch over the whole run records every DELETED event
//! of those kinds in the namespace.
//!
//! Asserted: exit 0, the Kustomization gone, the same UIDs, no DELETED event, no field of
//! `kustomize-controller`, no Flux owner label, the Deployment's generation and Pod template
//! unchanged, the Secret's data unchanged, the ApplySet Ready, following the branch again
//! (its source's `ref` is `{branch: main}`) with the commit of `main` in its
//! `status.lastAppliedRevision`; `main` moved on after Flux applied it (a new ConfigMap value):
//! the set, pinned to the commit Flux applied until the Kustomization is gone, applies the new
//! value only then, and says so. And a handover that stops
//! midway (the set does not become Ready: no operator runs, a short --timeout) leaves the
//! Kustomization suspended with deletionPolicy Orphan and in place, and the objects too; the
//! same command run again once the operator runs finishes it.

mod support;

use std::{collections::BTreeMap, process::Output, sync::Arc};

use applyset_operator::api::ApplySetStatus;
use futures::StreamExt;
use kube::{
    Api, Client, ResourceExt,
    api::{ApiResource, DynamicObject, ListParams, Patch, PatchParams, WatchEvent, WatchParams},
};
use parking_lot::Mutex;
use serde_json::{Value, json};
use support::{
    cluster,
    flux::{self, KustomizeController},
    operator::*,
    servers::{FileServer, GitRepo, GitServer},
};
use tokio::task::JoinHandle;

const PLUGIN: &str = env!("CARGO_BIN_EXE_kubectl-applyset");

/// The Kustomization (and the set) name, and the GitRepository's.
const NAME: &str = "web";
const SOURCE: &str = "app";

const FLUX_MANAGER: &str = "kustomize-controller";
const FLUX_LABELS: [&str; 2] = [
    "kustomize.toolkit.fluxcd.io/name",
    "kustomize.toolkit.fluxcd.io/namespace",
];

/// The ConfigMap's file, in namespace `ns`, with data `greeting: {greeting}`.
fn configmap(ns: &str, greeting: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web-config\n  namespace: {ns}\ndata:\n  greeting: {greeting}\n"
    )
}

/// The repository's files, in namespace `ns`.
fn files(ns: &str) -> Vec<(String, String)> {
    let deployment = format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: {ns}\nspec:\n  replicas: 1\n  selector:\n    matchLabels:\n      app: web\n  template:\n    metadata:\n      labels:\n        app: web\n    spec:\n      containers:\n      - name: web\n        image: registry.k8s.io/pause:3.10\n"
    );
    let configmap = configmap(ns, "hello");
    let secret = format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: web-secret\n  namespace: {ns}\n  annotations:\n    kustomize.toolkit.fluxcd.io/ssa: IfNotPresent\ntype: Opaque\nstringData:\n  token: initial\n"
    );
    vec![
        ("deploy/deployment.yaml".into(), deployment),
        ("deploy/configmap.yaml".into(), configmap),
        ("deploy/secret.yaml".into(), secret),
    ]
}

/// The three objects: (API resource, name).
fn objects() -> Vec<(ApiResource, &'static str)> {
    vec![
        (deployment_ar(), "web"),
        (configmap_ar(), "web-config"),
        (secret_ar(), "web-secret"),
    ]
}

/// Every watch event of the watched kinds: (type, kind, name, the witness annotation).
type Events = Arc<Mutex<Vec<(String, String, String, Option<String>)>>>;

const WITNESS: &str = "applyset.dev/test-witness";

/// Watches `ar` in `ns` from `rv` on, recording every event (a watch error is recorded as
/// `ERROR`, so that a gap fails the test rather than hiding a deletion).
fn record(
    api: Api<DynamicObject>,
    kind: &'static str,
    mut rv: String,
    events: Events,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let error = |e: String| events.lock().push(("ERROR".into(), kind.into(), e, None));
        loop {
            let params = WatchParams::default().timeout(240);
            let mut stream = match api.watch(&params, &rv).await {
                Ok(s) => s.boxed(),
                Err(e) => return error(e.to_string()),
            };
            // A stream that ends (the server's timeout) is watched again from the last version.
            while let Some(event) = stream.next().await {
                let (type_, obj) = match event {
                    Ok(WatchEvent::Added(o)) => ("ADDED", o),
                    Ok(WatchEvent::Modified(o)) => ("MODIFIED", o),
                    Ok(WatchEvent::Deleted(o)) => ("DELETED", o),
                    Ok(WatchEvent::Bookmark(b)) => {
                        rv = b.metadata.resource_version;
                        continue;
                    }
                    Ok(WatchEvent::Error(e)) => return error(e.message),
                    Err(e) => return error(e.to_string()),
                };
                rv = obj.resource_version().unwrap_or_default();
                let witness = obj.annotations().get(WITNESS).cloned();
                let name = obj.name_any();
                events
                    .lock()
                    .push((type_.into(), kind.into(), name, witness));
            }
        }
    })
}

/// Starts the watches of the three kinds in `ns` (from now on).
async fn watch_all(client: &Client, ns: &str) -> (Events, Vec<JoinHandle<()>>) {
    let events: Events = Arc::default();
    let mut tasks = Vec::new();
    for (ar, kind) in [
        (deployment_ar(), "Deployment"),
        (configmap_ar(), "ConfigMap"),
        (secret_ar(), "Secret"),
    ] {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
        let list = api
            .list_metadata(&ListParams::default())
            .await
            .expect("list");
        let rv = list.metadata.resource_version.unwrap_or_default();
        tasks.push(record(api, kind, rv, events.clone()));
    }
    (events, tasks)
}

/// Annotates each object with a witness value and waits until every watch delivered that
/// change: every event before it (a deletion) was delivered too.
async fn flush_watches(client: &Client, ns: &str, events: &Events) {
    let value = unique("w");
    for (ar, name) in objects() {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
        api.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {WITNESS: value}}})),
        )
        .await
        .expect("annotate a witness");
    }
    support::wait_for(
        "the watches to deliver the witness changes",
        DEADLINE,
        || {
            let seen = events.lock().clone();
            let value = value.clone();
            async move {
                objects()
                    .iter()
                    .all(|(_, name)| {
                        seen.iter()
                            .any(|(_, _, n, w)| n == name && w.as_deref() == Some(&value))
                    })
                    .then_some(())
            }
        },
    )
    .await;
}

/// What the test compares before and after: each object's UID, the Deployment's generation
/// and Pod template, the Secret's data.
#[derive(Debug, PartialEq)]
struct Snapshot {
    uids: BTreeMap<String, String>,
    generation: Option<i64>,
    template: Value,
    secret_data: Value,
}

async fn snapshot(client: &Client, ns: &str) -> Snapshot {
    let mut uids = BTreeMap::new();
    for (ar, name) in objects() {
        let o = must_get(client, &ar, Some(ns), name).await;
        uids.insert(name.to_owned(), o.uid().unwrap_or_default());
    }
    let d = must_get(client, &deployment_ar(), Some(ns), "web").await;
    let s = must_get(client, &secret_ar(), Some(ns), "web-secret").await;
    Snapshot {
        uids,
        generation: d.metadata.generation,
        template: d.data["spec"]["template"].clone(),
        secret_data: s.data["data"].clone(),
    }
}

/// A Flux setup: the repository (git and artifact), the GitRepository, kustomize-controller
/// and the Kustomization, Ready with the three objects applied by kustomize-controller.
struct Flux {
    h: Harness,
    controller: KustomizeController,
    _git: GitServer,
    /// The repository's work tree (a commit pushes to `main`).
    repo: GitRepo,
    _files: FileServer,
    /// The commit the repository's `main` points at (the one Flux applied).
    commit: String,
    events: Events,
    watches: Vec<JoinHandle<()>>,
}

impl Drop for Flux {
    fn drop(&mut self) {
        for w in &self.watches {
            w.abort();
        }
    }
}

async fn flux_setup(prefix: &str) -> Flux {
    let h = Harness::new(prefix).await;
    flux::install_crds(&h.client).await;
    let (events, watches) = watch_all(&h.client, &h.ns).await;
    let files = files(&h.ns);
    let git = GitServer::start(None, None).await;
    let repo = git.repo(SOURCE);
    let entries: Vec<(&str, Option<&str>)> = files
        .iter()
        .map(|(p, c)| (p.as_str(), Some(c.as_str())))
        .collect();
    let commit = repo.commit(&entries, "the app");
    let tarball = flux::artifact(&files);
    let server = FileServer::start(None).await;
    let path = format!("/gitrepository/{}/{SOURCE}/{commit}.tar.gz", h.ns);
    server.put(&path, tarball.clone());
    flux::create_git_repository(&h.client, &h.ns, SOURCE, &git.url(SOURCE)).await;
    let stored = flux::Stored {
        url: &server.url(&path),
        revision: &format!("main@sha1:{commit}"),
        tarball: &tarball,
    };
    flux::write_artifact_status(&h.client, "GitRepository", &h.ns, SOURCE, &stored).await;
    let controller = KustomizeController::start(cluster().kubeconfig(), Some(&h.label));
    let spec = json!({"interval": "1m", "path": "./deploy", "prune": true});
    flux::create_kustomization(&h.client, &h.ns, NAME, &h.label, spec, SOURCE).await;
    flux::wait_kustomization_ready(&h.client, &controller, &h.ns, NAME, Some(3), LONG_DEADLINE)
        .await;
    for (ar, name) in objects() {
        let o = must_get(&h.client, &ar, Some(&h.ns), name).await;
        assert!(
            managers(&o).iter().any(|(m, _)| m == FLUX_MANAGER),
            "{name} applied by kustomize-controller: {:?}",
            managers(&o)
        );
        assert_eq!(
            o.labels().get(FLUX_LABELS[0]).map(String::as_str),
            Some(NAME),
            "{name}"
        );
    }
    // No nodes run the Deployment: its status says its one replica is available.
    let deployments: Api<DynamicObject> =
        Api::namespaced_with(h.client.clone(), &h.ns, &deployment_ar());
    let d = deployments.get("web").await.expect("the Deployment");
    let status = json!({"status": {"observedGeneration": d.metadata.generation, "replicas": 1,
        "updatedReplicas": 1, "readyReplicas": 1, "availableReplicas": 1, "conditions": [
        {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
        {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}]}});
    deployments
        .patch_status("web", &PatchParams::default(), &Patch::Merge(status))
        .await
        .expect("the Deployment's status");
    Flux {
        h,
        controller,
        _git: git,
        repo,
        _files: server,
        commit,
        events,
        watches,
    }
}

async fn handover(ns: &str, timeout: &str) -> Output {
    tokio::process::Command::new(PLUGIN)
        .arg(format!("--kubeconfig={}", cluster().kubeconfig().display()))
        .args([
            "convert",
            "--from-cluster",
            &format!("{ns}/{NAME}"),
            "--handover",
            "--timeout",
            timeout,
        ])
        .env_remove("KUBECONFIG")
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .expect("run kubectl-applyset")
}

/// The operator of the converted set: the test's namespace, no label selector (the set
/// carries no test label), the kustomize binary (Flux's path is a plain directory, built by
/// kustomize as kustomize-controller does).
fn start_operator(h: &Harness) -> applyset_operator::controller::Operator {
    let mut config = h.config();
    config.label_selector = None;
    config.source_limits.kustomize.binary = Some(support::kustomize_binary());
    applyset_operator::controller::Operator::start(h.client.clone(), config)
}

/// The set's source follows the branch again, and what it last applied is `commit` (of `main`).
fn assert_follows_main(set: &Value, status: &ApplySetStatus, commit: &str) {
    let sources = &set["spec"]["sources"];
    assert_eq!(
        sources[0]["git"]["ref"],
        json!({"branch": "main"}),
        "the set follows the branch again: {sources}"
    );
    let applied = status.last_applied_revision.as_deref().unwrap_or_default();
    assert!(
        applied.contains(&format!("main@sha1:{commit}")),
        "the set last applied the commit {commit} of the branch: {applied}"
    );
}

fn deletions(events: &Events) -> Vec<String> {
    events
        .lock()
        .iter()
        .filter(|(t, ..)| t == "DELETED" || t == "ERROR")
        .map(|(t, k, n, _)| format!("{t} {k} {n}"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handover_from_kustomize_controller_deletes_and_recreates_nothing() {
    let f = flux_setup("fluxho").await;
    let (h, ns) = (&f.h, f.h.ns.as_str());
    let before = snapshot(&h.client, ns).await;
    // `main` moves on after Flux applied it: the artifact Flux read stays the old commit. The
    // set is pinned to that commit until the Kustomization is gone (applying the new value
    // earlier would fight kustomize-controller), then follows `main` and applies it.
    let newer = f.repo.commit(
        &[("deploy/configmap.yaml", Some(&configmap(ns, "hello-again")))],
        "a new value",
    );
    let op = start_operator(h);

    let out = handover(ns, "90s").await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("--- kubectl applyset convert --handover ---\n{stderr}");
    assert!(
        out.status.success(),
        "handover failed: {stderr}\n--- kustomize-controller log ---\n{}",
        f.controller.log()
    );
    let pinned = format!(
        "Flux applied revision main@sha1:{}: the set is pinned to its commit {}",
        f.commit, f.commit
    );
    assert!(stderr.contains(&pinned), "{pinned} not printed: {stderr}");
    let moved = format!(
        "the set now follows branch main at main@sha1:{newer} (Flux had applied main@sha1:{}): what changed between them was applied",
        f.commit
    );
    assert!(stderr.contains(&moved), "{moved} not printed: {stderr}");
    for step in [
        "[1/6]",
        "[2/6]",
        "[3/6]",
        "[4/6]",
        "[5/6]",
        "[6/6]",
        "handover done",
    ] {
        assert!(stderr.contains(step), "{step} not printed: {stderr}");
    }

    assert_eq!(
        flux::kustomization(&h.client, ns, NAME).await,
        None,
        "the Kustomization is gone"
    );
    let set = h.applyset(NAME);
    let status = set.wait_ready().await;
    assert_eq!(ready(&status).status, "True");
    assert_follows_main(&set.live().await.data, &status, &newer);
    let cm = must_get(&h.client, &configmap_ar(), Some(ns), "web-config").await;
    assert_eq!(
        cm.data["data"]["greeting"],
        json!("hello-again"),
        "the set applied the new commit's value once it followed main again"
    );
    let id = applyset_id(ns, NAME);
    for (ar, name) in objects() {
        let o = must_get(&h.client, &ar, Some(ns), name).await;
        assert!(
            !managers(&o).iter().any(|(m, _)| m == FLUX_MANAGER),
            "{name} still has fields of kustomize-controller: {:?}",
            managers(&o)
        );
        for label in FLUX_LABELS {
            assert!(
                !o.labels().contains_key(label),
                "{name} still carries {label}"
            );
        }
        assert_eq!(
            o.labels().get(LABEL_PART_OF),
            Some(&id),
            "{name} is the set's"
        );
    }
    let after = snapshot(&h.client, ns).await;
    assert_eq!(
        after, before,
        "UIDs, the Deployment's generation and template, the Secret's data"
    );
    flush_watches(&h.client, ns, &f.events).await;
    assert_eq!(
        deletions(&f.events),
        Vec::<String>::new(),
        "a watch over the run saw no deletion"
    );
    stop(op).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handover_that_stops_midway_leaves_the_kustomization_suspended_and_the_objects_in_place()
{
    let f = flux_setup("fluxstop").await;
    let (h, ns) = (&f.h, f.h.ns.as_str());
    let before = snapshot(&h.client, ns).await;

    // No operator runs: the set never becomes Ready.
    let out = handover(ns, "4s").await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("[3/6]"), "the set was applied: {stderr}");
    assert!(
        !stderr.contains("[5/6]"),
        "the Kustomization was not deleted: {stderr}"
    );
    assert!(
        stderr.contains(&format!("Kustomization {ns}/{NAME} is suspended")),
        "{stderr}"
    );
    assert!(stderr.contains("To go back"), "{stderr}");
    assert!(
        stderr.contains(&format!(
            r#"`kubectl patch applysets.applyset.dev {NAME} -n {ns} --type=merge -p '{{"spec":{{"deletionPolicy":"Orphan"}}}}'`, then `kubectl delete applysets.applyset.dev {NAME} -n {ns}`"#
        )),
        "the way back orphans the set's members before deleting it: {stderr}"
    );

    let k = flux::kustomization(&h.client, ns, NAME)
        .await
        .expect("the Kustomization is in place");
    assert_eq!(k["spec"]["suspend"], json!(true));
    assert_eq!(k["spec"]["deletionPolicy"], json!("Orphan"));
    assert!(
        k["metadata"].get("deletionTimestamp").is_none(),
        "not being deleted"
    );
    assert_eq!(
        k["metadata"]["annotations"]["applyset.dev/handover-original"],
        json!(r#"{"suspend":false,"deletionPolicy":null}"#),
        "what it had is recorded"
    );
    assert_eq!(
        snapshot(&h.client, ns).await,
        before,
        "the objects are in place, unchanged"
    );

    // Going on: with the operator running, the same command again finishes the handover (the
    // Kustomization converted as it was before, not as suspended).
    let op = start_operator(h);
    let out = handover(ns, "90s").await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the handover run again: {stderr}");
    assert_eq!(flux::kustomization(&h.client, ns, NAME).await, None);
    let set = h.applyset(NAME);
    let status = set.wait_ready().await;
    let live = set.live().await;
    assert_eq!(
        live.data["spec"]["suspend"],
        json!(false),
        "the set is not suspended"
    );
    assert_follows_main(&live.data, &status, &f.commit);
    assert_eq!(snapshot(&h.client, ns).await, before);
    flush_watches(&h.client, ns, &f.events).await;
    assert_eq!(deletions(&f.events), Vec::<String>::new());
    stop(op).await;
}

/// Creates Kustomization `namespace/name` depending on `NAME`, without the label that makes
/// the test's kustomize-controller reconcile it (it is only listed).
async fn create_dependent(client: &Client, namespace: &str, name: &str) {
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &flux::kustomization_ar());
    let k: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
        "kind": "Kustomization",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"interval": "1m", "prune": true, "dependsOn": [{"name": NAME}],
            "sourceRef": {"kind": "GitRepository", "name": SOURCE}},
    }))
    .expect("a Kustomization");
    api.create(&kube::api::PostParams::default(), &k)
        .await
        .expect("create the dependent Kustomization");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_skipped_by_its_marks_does_not_block_the_handover_and_dependents_are_warned_of() {
    let f = flux_setup("fluxskip").await;
    let (h, ns) = (&f.h, f.h.ns.as_str());
    // The live ConfigMap is marked to be skipped: the set leaves it as it is, Flux's fields
    // and labels included.
    let configmaps: Api<DynamicObject> =
        Api::namespaced_with(h.client.clone(), ns, &configmap_ar());
    let mark =
        json!({"metadata": {"annotations": {"kustomize.toolkit.fluxcd.io/reconcile": "disabled"}}});
    configmaps
        .patch("web-config", &PatchParams::default(), &Patch::Merge(mark))
        .await
        .expect("mark the ConfigMap");
    create_dependent(&h.client, ns, "after").await;
    let before = snapshot(&h.client, ns).await;
    let op = start_operator(h);

    let out = handover(ns, "90s").await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "handover failed: {stderr}");
    let warning = format!(
        "warning: the Kustomizations {ns}/after depend on Kustomization {ns}/{NAME} (spec.dependsOn): once it is deleted they report DependencyNotReady"
    );
    assert!(stderr.contains(&warning), "{warning} not printed: {stderr}");
    let note = format!(
        "note: ConfigMap {ns}/web-config carries reconcile: disabled: the set does not apply it"
    );
    assert!(stderr.contains(&note), "{note} not printed: {stderr}");
    assert_eq!(flux::kustomization(&h.client, ns, NAME).await, None);
    let cm = must_get(&h.client, &configmap_ar(), Some(ns), "web-config").await;
    assert_eq!(
        cm.labels().get(FLUX_LABELS[0]).map(String::as_str),
        Some(NAME),
        "the skipped ConfigMap is left as it was"
    );
    assert_eq!(snapshot(&h.client, ns).await, before);
    flush_watches(&h.client, ns, &f.events).await;
    assert_eq!(deletions(&f.events), Vec::<String>::new());
    stop(op).await;
}
