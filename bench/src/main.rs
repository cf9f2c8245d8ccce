//! `make bench`: applyset-operator side by side with `kubectl apply --server-side --prune
//! --applyset` and with the API server's own ceiling (the same writes in a tight concurrent
//! loop, without the operator), in one run.
//!
//! ```text
//! applyset-bench [--sizes 100,1000,5000] [--shapes 100,500,1000] [--out bench/results]
//!                [--operator target/release/applyset-operator] [--concurrency N]
//!                [--no-kubectl] [--impersonate] [--wait] [--teardown-baseline]
//!                [--ui 10000] [--plugin target/release/kubectl-applyset]
//!                [--runs 1] [--ceiling PATH] [--no-shape-resync] [--no-shards-cost]
//! ```
//!
//! `--no-kubectl` skips kubectl (its figures read NaN): for quick runs while tuning.
//! `--impersonate` makes every ApplySet name a ServiceAccount (bound to cluster-admin), so
//! the operator makes every member request through impersonation: the cost of tenancy.
//! `--wait` gives every set of the Flux shape `wait: true` (the bench makes each Deployment
//! available, as the Deployment controller would): the cost of health waits.
//! `--teardown-baseline` times each shape's namespace deletion again without the operator
//! (the same objects, made directly, no finalizers): the teardown's baseline.
//! `--ui N` measures `kubectl applyset ui` (the `--plugin` binary) serving the sets page with
//! N ApplySets present, last (see ui.rs); `--ui 0` skips it.
//!
//! The Flux shape is Flux's own benchmark shape: per set a ServiceAccount, a headless
//! Service, a Deployment of 0 replicas and an Ingress. Each shape's teardown (the namespace
//! deleted, with the operator running, until it is gone) is timed, and the operator's
//! refused requests (403) during it counted; its peak RSS covers the teardown. Each K runs on
//! a fresh control plane, and so does its ceiling, `hack/ssa-ceiling` (built here, or
//! `--ceiling PATH`), taking turns `--runs` times (shape.rs, ceiling.rs). One full resync of
//! the shape's sets is measured unless `--no-shape-resync`. The largest K runs once more with
//! the operator under `--shards auto` (one replica), unless `--no-shards-cost`: what sharding
//! costs per write.
//!
//! Writes `<out>/report.md` and `<out>/report.json` and prints the table. Exits non-zero if a
//! measurement could not be taken (a timeout, a failed command): the figures are goals, not
//! assertions, but a benchmark that silently measures nothing is a defect.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::atomic::{AtomicU64, Ordering},
    time::{Duration, Instant},
};

use applyset_testenv::{ControlPlane, Options, binaries};
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::{
    api::core::v1::Namespace,
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api, Client,
    api::{
        ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
    },
    config::{KubeConfigOptions, Kubeconfig},
    discovery::Scope,
};
use serde_json::{Value, json};

mod ceiling;
mod operator;
mod sets;
mod shape;
mod ui;

use ceiling::{Request, ceiling_first_apply, ceiling_requests, run_ceiling_set};
use operator::OperatorProc;
use sets::{SetResult, Timings, report_sets, run_sets};
use shape::{ShapeRuns, report_shapes, run_shapes, shape_targets};

type Res<T> = Result<T, String>;

const CRD_KINDS: usize = 20;
const GROUP: &str = "bench.applyset.dev";
/// The longest wait for an effect (all Ready, a namespace gone): 50,000 sets of the Flux
/// shape take many minutes on 2 cores, for each.
const WAIT: Duration = Duration::from_secs(3600);

#[derive(Clone)]
struct Args {
    sizes: Vec<usize>,
    shapes: Vec<usize>,
    out: PathBuf,
    operator: PathBuf,
    concurrency: Option<u16>,
    kubectl: bool,
    /// Every set names a ServiceAccount (the operator impersonates it).
    impersonate: bool,
    /// The Flux shape's sets wait for their members' health (`spec.wait: true`); the bench
    /// plays the Deployment controller, making each Deployment available once it exists.
    wait: bool,
    /// After each shape's teardown with the operator running, the same objects are made
    /// again without the operator (no finalizers) and their namespace's deletion is timed:
    /// the baseline of the teardown.
    teardown_baseline: bool,
    /// ApplySets present while the ui's sets page is measured (0: not measured).
    ui: usize,
    /// The kubectl-applyset binary whose ui is measured.
    plugin: PathBuf,
    /// Runs of each K of the Flux shape (the ceiling and the operator taking turns).
    runs: usize,
    /// The yardstick's binary (else built from `hack/ssa-ceiling`).
    ceiling: Option<PathBuf>,
    /// One periodic resync of every set of the Flux shape is measured.
    shape_resync: bool,
    /// The largest K of the Flux shape runs once more under `--shards auto` (one replica):
    /// what sharding costs per write (the bucket label and epoch annotation on every member,
    /// the owner annotations on the parent).
    shards_cost: bool,
    /// More arguments for the operator of the Flux shape (the sharded run's).
    operator_args: Vec<String>,
}

fn parse_args() -> Res<Args> {
    let mut a = Args {
        sizes: vec![100, 1000, 5000],
        shapes: vec![100, 500, 1000],
        out: PathBuf::from("bench/results"),
        operator: PathBuf::from("target/release/applyset-operator"),
        concurrency: None,
        kubectl: true,
        impersonate: false,
        wait: false,
        teardown_baseline: false,
        ui: 10_000,
        plugin: PathBuf::from("target/release/kubectl-applyset"),
        runs: 1,
        ceiling: None,
        shape_resync: true,
        shards_cost: true,
        operator_args: Vec::new(),
    };
    let list = |v: Option<String>| -> Res<Vec<usize>> {
        v.unwrap_or_default()
            .split(',')
            .filter(|s| !s.is_empty())
            .map(|s| s.parse().map_err(|e| format!("{s}: {e}")))
            .collect()
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--sizes" => a.sizes = list(it.next())?,
            "--shapes" => a.shapes = list(it.next())?,
            "--out" => {
                a.out = it
                    .next()
                    .map(PathBuf::from)
                    .ok_or("--out needs a directory")?
            }
            "--operator" => {
                a.operator = it
                    .next()
                    .map(PathBuf::from)
                    .ok_or("--operator needs a path")?
            }
            "--concurrency" => {
                a.concurrency = Some(
                    it.next()
                        .and_then(|v| v.parse().ok())
                        .ok_or("--concurrency needs a number")?,
                )
            }
            "--no-kubectl" => a.kubectl = false,
            "--impersonate" => a.impersonate = true,
            "--wait" => a.wait = true,
            "--teardown-baseline" => a.teardown_baseline = true,
            "--ui" => {
                a.ui = it
                    .next()
                    .and_then(|v| v.parse().ok())
                    .ok_or("--ui needs a number")?
            }
            "--plugin" => {
                a.plugin = it
                    .next()
                    .map(PathBuf::from)
                    .ok_or("--plugin needs a path")?
            }
            other => {
                if !shape_flag(&mut a, other, &mut it)? {
                    return Err(format!("unknown argument {other}"));
                }
            }
        }
    }
    Ok(a)
}

/// Parses `flag` if it is one of the Flux shape's (`--runs`, `--ceiling`,
/// `--no-shape-resync`), its value from `it`; whether it was.
fn shape_flag(a: &mut Args, flag: &str, it: &mut impl Iterator<Item = String>) -> Res<bool> {
    match flag {
        "--runs" => {
            a.runs = it
                .next()
                .and_then(|v| v.parse().ok())
                .filter(|r| *r > 0)
                .ok_or("--runs needs a number above 0")?
        }
        "--ceiling" => {
            a.ceiling = Some(
                it.next()
                    .map(PathBuf::from)
                    .ok_or("--ceiling needs a path")?,
            )
        }
        "--no-shape-resync" => a.shape_resync = false,
        "--no-shards-cost" => a.shards_cost = false,
        _ => return Ok(false),
    }
    Ok(true)
}

// ------------------------------------------------------------------------------------------
// Objects

fn bench_crd(i: usize) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("bench{i}s.{GROUP}")},
        "spec": {"group": GROUP, "scope": "Namespaced",
            "names": {"kind": format!("Bench{i}"), "plural": format!("bench{i}s"), "singular": format!("bench{i}"), "listKind": format!("Bench{i}List")},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}]}
    })
}

/// Member `i` of a set: 30% ConfigMaps, 20% Secrets, 10% Services, 10% Deployments, 30%
/// custom resources spread over the 20 CRD kinds.
fn member(i: usize, prefix: &str) -> Value {
    let name = format!("{prefix}{i:05}");
    match i % 10 {
        0..=2 => {
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"key": format!("value-{i}")}})
        }
        3 | 4 => {
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "type": "Opaque", "data": {"key": "dmFsdWU="}})
        }
        5 => json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"clusterIP": "None", "selector": {"app": name}, "ports": [{"port": 80}]}}),
        6 => json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "c", "image": "registry.example/app:1"}]}}}}),
        _ => {
            json!({"apiVersion": format!("{GROUP}/v1"), "kind": format!("Bench{}", (i / 10) % CRD_KINDS), "metadata": {"name": name}, "spec": {"size": i}})
        }
    }
}

/// Flux's benchmark objects, `j` of 0..4: a ServiceAccount, a headless Service, a Deployment
/// of 0 replicas, an Ingress to the Service.
fn flux_member(j: usize, prefix: &str) -> Value {
    let name = format!("{prefix}app");
    match j {
        0 => json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}),
        1 => json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"clusterIP": "None", "selector": {"app": name}, "ports": [{"name": "http", "port": 80}]}}),
        2 => json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": 0, "selector": {"matchLabels": {"app": name}},
                "template": {"metadata": {"labels": {"app": name}}, "spec": {"serviceAccountName": name,
                    "containers": [{"name": "app", "image": "registry.example/app:1", "ports": [{"containerPort": 80}]}]}}}}),
        _ => {
            json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": name},
            "spec": {"rules": [{"host": format!("{name}.example.com"), "http": {"paths": [{"path": "/", "pathType": "Prefix",
                "backend": {"service": {"name": name, "port": {"number": 80}}}}]}}]}})
        }
    }
}

fn flux_members(prefix: &str) -> Vec<Value> {
    (0..4).map(|j| flux_member(j, prefix)).collect()
}

fn members(n: usize, prefix: &str) -> Vec<Value> {
    (0..n).map(|i| member(i, prefix)).collect()
}

fn resource_of(obj: &Value) -> ApiResource {
    let kind = obj["kind"].as_str().unwrap_or_default();
    let (group, version, plural) = match kind {
        "ConfigMap" => ("", "v1", "configmaps".to_string()),
        "Secret" => ("", "v1", "secrets".to_string()),
        "Service" => ("", "v1", "services".to_string()),
        "Deployment" => ("apps", "v1", "deployments".to_string()),
        "ServiceAccount" => ("", "v1", "serviceaccounts".to_string()),
        "Ingress" => ("networking.k8s.io", "v1", "ingresses".to_string()),
        "ApplySet" => ("applyset.dev", "v1alpha1", "applysets".to_string()),
        "Event" => ("events.k8s.io", "v1", "events".to_string()),
        k => (GROUP, "v1", format!("{}s", k.to_lowercase())),
    };
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: if group.is_empty() {
            version.into()
        } else {
            format!("{group}/{version}")
        },
        kind: kind.into(),
        plural,
    }
}

// ------------------------------------------------------------------------------------------
// Helpers against the API server

async fn create_namespace(client: &Client, name: &str) -> Res<()> {
    let ns: Namespace =
        serde_json::from_value(json!({"metadata": {"name": name}})).map_err(|e| e.to_string())?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .map(|_| ())
        .map_err(|e| format!("namespace {name}: {e}"))
}

/// Deletes a namespace and waits until it is gone (the namespace controller empties it).
async fn delete_namespace(client: &Client, name: &str) -> Res<()> {
    let api = Api::<Namespace>::all(client.clone());
    api.delete(name, &DeleteParams::background())
        .await
        .map_err(|e| format!("delete namespace {name}: {e}"))?;
    let start = Instant::now();
    while api
        .get_opt(name)
        .await
        .map_err(|e| e.to_string())?
        .is_some()
    {
        if start.elapsed() > WAIT {
            return Err(format!("namespace {name} not gone within {WAIT:?}"));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Ok(())
}

async fn install_crds(client: &Client) -> Res<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut all: Vec<Value> = (0..CRD_KINDS).map(bench_crd).collect();
    for crd in applyset_operator::api::crds() {
        all.push(serde_json::to_value(crd).map_err(|e| e.to_string())?);
    }
    all.extend(ceiling::twin_crd(&all));
    for crd in &all {
        let name = crd["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        crds.patch(
            &name,
            &PatchParams::apply("bench").force(),
            &Patch::Apply(crd),
        )
        .await
        .map_err(|e| format!("crd {name}: {e}"))?;
    }
    for crd in &all {
        let name = crd["metadata"]["name"].as_str().unwrap_or_default();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let ok = crds
                .get(name)
                .await
                .ok()
                .and_then(|c| c.status)
                .and_then(|s| s.conditions)
                .is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c.type_ == "Established" && c.status == "True")
                });
            if ok {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!("CRD {name} not Established"));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(())
}

fn applysets(client: &Client, ns: &str) -> Api<DynamicObject> {
    let ar = ApiResource {
        group: "applyset.dev".into(),
        version: "v1alpha1".into(),
        api_version: "applyset.dev/v1alpha1".into(),
        kind: "ApplySet".into(),
        plural: "applysets".into(),
    };
    Api::namespaced_with(client.clone(), ns, &ar)
}

fn is_ready(o: &DynamicObject) -> bool {
    let generation = o.metadata.generation;
    let status = &o.data["status"];
    status["observedGeneration"].as_i64() == generation
        && status["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

/// Waits until ApplySet `name` is Ready at its current generation; returns the time since
/// `since`.
/// Watches (rather than polls) the object: repeated GETs of a large ApplySet would load the
/// API server the operator is being measured against.
async fn wait_ready(api: &Api<DynamicObject>, name: &str, since: Instant) -> Res<Duration> {
    let ready =
        kube::runtime::wait::await_condition(api.clone(), name, |o: Option<&DynamicObject>| {
            o.is_some_and(is_ready)
        });
    let left = WAIT.saturating_sub(since.elapsed());
    match tokio::time::timeout(left, ready).await {
        Ok(Ok(_)) => return Ok(since.elapsed()),
        Ok(Err(e)) => eprintln!("bench: watching {name}: {e}; polling"),
        Err(_) => {}
    }
    loop {
        if let Ok(o) = api.get(name).await
            && is_ready(&o)
        {
            return Ok(since.elapsed());
        }
        if since.elapsed() > WAIT {
            let status = api
                .get(name)
                .await
                .map(|o| o.data["status"].to_string())
                .unwrap_or_default();
            return Err(format!(
                "ApplySet {name} not Ready within {WAIT:?}: {status}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Requests a reconcile with the annotation and waits until one more has finished.
async fn request_reconcile(
    api: &Api<DynamicObject>,
    name: &str,
    op: &OperatorProc,
    value: &str,
) -> Res<()> {
    let before = op.counters().2;
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(
            json!({"metadata": {"annotations": {"applyset.dev/reconcile-requested-at": value}}}),
        ),
    )
    .await
    .map_err(|e| e.to_string())?;
    let start = Instant::now();
    while op.counters().2 <= before {
        if start.elapsed() > WAIT {
            return Err("the requested reconcile did not happen".into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

async fn patch_spec(api: &Api<DynamicObject>, name: &str, spec: Value) -> Res<()> {
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": spec})),
    )
    .await
    .map(|_| ())
    .map_err(|e| format!("patch {name}: {e}"))
}

fn apiserver_requests(kubectl: &Path, kubeconfig: &Path) -> f64 {
    let out = Command::new(kubectl)
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .args(["get", "--raw", "/metrics"])
        .output();
    let text = out
        .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
        .unwrap_or_default();
    text.lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// One small ApplySet with a member of every kind: the operator's discovery cache and member
/// watches are warm before anything is measured (as in a running cluster).
async fn warm_up(client: &Client) -> Res<()> {
    create_namespace(client, "warm-up").await?;
    let api = applysets(client, "warm-up");
    let ms: Vec<Value> = (0..(10 * CRD_KINDS)).map(|i| member(i, "w")).collect();
    let body = json!({"apiVersion": "applyset.dev/v1alpha1", "kind": "ApplySet",
        "metadata": {"name": "warm-up", "namespace": "warm-up"}, "spec": {"manifests": ms}});
    let obj: DynamicObject = serde_json::from_value(body).map_err(|e| e.to_string())?;
    let start = Instant::now();
    api.create(&PostParams::default(), &obj)
        .await
        .map_err(|e| e.to_string())?;
    wait_ready(&api, "warm-up", start).await?;
    Ok(())
}

/// With `--impersonate`: a ServiceAccount in `ns` bound to cluster-admin, for the sets there
/// to name (the cost measured is the impersonation, not the RBAC); its name.
async fn deployer(client: &Client, args: &Args, ns: &str) -> Res<Option<String>> {
    if !args.impersonate {
        return Ok(None);
    }
    let name = "bench-deployer";
    let pp = PostParams::default();
    let sa: DynamicObject = serde_json::from_value(json!({"apiVersion": "v1",
        "kind": "ServiceAccount", "metadata": {"name": name, "namespace": ns}}))
    .map_err(|e| e.to_string())?;
    let sa_ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("", "v1", "ServiceAccount"),
        "serviceaccounts",
    );
    Api::<DynamicObject>::namespaced_with(client.clone(), ns, &sa_ar)
        .create(&pp, &sa)
        .await
        .map_err(|e| format!("ServiceAccount: {e}"))?;
    let crb_ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding"),
        "clusterrolebindings",
    );
    let crb: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": format!("bench-deployer-{ns}")},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}]}))
    .map_err(|e| e.to_string())?;
    Api::<DynamicObject>::all_with(client.clone(), &crb_ar)
        .create(&pp, &crb)
        .await
        .map_err(|e| format!("ClusterRoleBinding: {e}"))?;
    Ok(Some(name.to_string()))
}

/// The median of `v` (the mean of the middle two for an even count; NaN when empty).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        l if l % 2 == 1 => v[l / 2],
        l => (v[l / 2 - 1] + v[l / 2]) / 2.0,
    }
}

// ------------------------------------------------------------------------------------------
// Report

/// `a / b`; NaN when `b` was not measured (NaN), never a division by zero.
fn ratio(a: f64, b: f64) -> f64 {
    if b.is_nan() {
        f64::NAN
    } else {
        a / b.max(1e-9)
    }
}

fn verdict(ok: bool) -> &'static str {
    if ok { "met" } else { "NOT met" }
}

/// The report: Markdown for people, JSON for tools.
fn report(
    args: &Args,
    sets: &[SetResult],
    shapes: &[ShapeRuns],
    yardstick: &Value,
    op_rss_sets: f64,
    ui: Option<&ui::UiResult>,
) -> (String, Value) {
    let mut md = String::new();
    md.push_str("# applyset-operator benchmark\n\n");
    md.push_str(&format!(
        "One invocation: local control planes (kube-apiserver v1.37.1, etcd v3.7.0; a fresh one for each run of the Flux shape and of its ceiling), {} cores. Operator: `{}`.\n\n",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        args.operator.display()
    ));
    let json_sets = report_sets(&mut md, sets);
    let json_shapes = report_shapes(&mut md, args.wait, shapes, op_rss_sets);
    let json_ui = ui.map(|u| ui::report(&mut md, u));
    md.push_str("\n## Targets\n\n| target | figure | verdict |\n|---|---|---|\n");
    let mut targets = report_targets(sets, shapes);
    if let Some(u) = ui.filter(|u| u.sets >= 10_000) {
        targets.push((
            format!(
                "ui sets page with {} sets: time to first byte < 1 s (max of 5)",
                u.sets
            ),
            format!("{:.0} ms", u.max()),
            u.max() < 1000.0,
        ));
    }
    for (t, f, ok) in &targets {
        md.push_str(&format!("| {t} | {f} | {} |\n", verdict(*ok)));
    }
    if !yardstick.is_null() {
        md.push_str(&format!(
            "\nThe ceiling of the Flux shape: `hack/ssa-ceiling`, sha256 `{}`, settings `{}`.\n",
            yardstick["source_sha256"].as_str().unwrap_or_default(),
            yardstick["settings"]
        ));
    }
    let json = json!({"sets": json_sets, "shapes": json_shapes, "yardstick": yardstick, "shapes_wait": args.wait, "operator_peak_rss_mib_sets": op_rss_sets, "ui": json_ui,
        "targets": targets.iter().map(|(t, f, ok)| json!({"target": t, "figure": f, "met": ok})).collect::<Vec<_>>()});
    (md, json)
}

/// The targets: (what, the figure measured, whether it is met).
fn report_targets(sets: &[SetResult], shapes: &[ShapeRuns]) -> Vec<(String, String, bool)> {
    let mut targets = Vec::new();
    if let Some((_, op, kc, ce, _)) = sets.iter().find(|s| s.0 == 1000) {
        let a = ratio(op.create, kc.create);
        let b = ratio(op.create, ce.create);
        targets.push((
            "first apply of 1000: ≤ 0.2 × kubectl".to_string(),
            format!("{a:.2} ×"),
            a <= 0.2,
        ));
        targets.push((
            "first apply of 1000: ≤ 1.2 × API server ceiling (medians of 3)".to_string(),
            format!("{b:.2} ×"),
            b <= 1.2,
        ));
    }
    let writes: f64 = sets
        .iter()
        .map(|s| s.4.get("noop_write_requests").copied().unwrap_or(0.0))
        .sum();
    if !sets.is_empty() {
        // A requested reconcile writes the echo of the request (status.lastHandledReconcileAt,
        // which `kubectl applyset reconcile` waits for); nothing else. The periodic resync of
        // the same set writes nothing at all (the steady-state table).
        targets.push((
            "a requested no-op reconcile writes only the echo of the request".into(),
            format!("{writes:.0} writes for {} requests", sets.len()),
            writes <= sets.len() as f64,
        ));
    }
    targets.extend(shape_targets(shapes));
    targets
}

async fn run(args: Args) -> Res<()> {
    let bin = binaries().map_err(|e| e.to_string())?;
    let kubectl = bin.join("kubectl");
    let mut opts = Options::new(bin);
    opts.controller_manager = true;
    std::fs::create_dir_all(&args.out).map_err(|e| e.to_string())?;
    let work = std::env::temp_dir().join(format!("applyset-bench-{}", std::process::id()));
    std::fs::create_dir_all(&work).map_err(|e| e.to_string())?;

    // The Flux shape first: each run of the operator and of its ceiling on a fresh control
    // plane of its own (an operator lists every ApplySet and member at start, and the API
    // server's cost grows with what etcd holds: neither runs on the other's objects).
    let (shapes, yardstick, last) = match args.shapes.is_empty() {
        true => (Vec::new(), Value::Null, None),
        false => {
            let y = ceiling::yardstick(args.ceiling.as_deref())?;
            let (shapes, last) = run_shapes(&args, &opts, &y, &work).await?;
            let settings = shapes
                .first()
                .and_then(|s| s.runs.first())
                .map(|r| r.0.doc["settings"].clone())
                .unwrap_or_default();
            (shapes, y.identity(&settings), last)
        }
    };
    let (cp, client) = match last {
        Some(last) => last,
        None => fresh_control_plane(&opts).await?,
    };
    let kubeconfig = cp.kubeconfig().to_path_buf();
    let (sets, rss_sets) = run_sets(&client, &args, &kubectl, &kubeconfig, &work).await?;
    // The ui last: its ApplySets stay until the control plane goes (no operator runs then).
    let ui = match args.ui {
        0 => None,
        n => Some(ui::run(&client, &args.plugin, &kubeconfig, n).await?),
    };
    let (md, json) = report(&args, &sets, &shapes, &yardstick, rss_sets, ui.as_ref());
    std::fs::write(args.out.join("report.md"), &md).map_err(|e| e.to_string())?;
    std::fs::write(
        args.out.join("report.json"),
        serde_json::to_string_pretty(&json).map_err(|e| e.to_string())?,
    )
    .map_err(|e| e.to_string())?;
    println!("{md}");
    eprintln!("bench: operator logs in {}", work.display());
    drop(cp);
    Ok(())
}

/// A control plane started with `opts`, a client of it, the bench's CRDs installed.
async fn fresh_control_plane(opts: &Options) -> Res<(ControlPlane, Client)> {
    let cp = ControlPlane::start(opts).map_err(|e| e.to_string())?;
    let kc = Kubeconfig::read_from(cp.kubeconfig()).map_err(|e| e.to_string())?;
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|e| e.to_string())?;
    let client = Client::try_from(config).map_err(|e| e.to_string())?;
    install_crds(&client).await?;
    Ok((cp, client))
}

fn main() -> std::process::ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("applyset-bench: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("applyset-bench: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(args)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("applyset-bench: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
