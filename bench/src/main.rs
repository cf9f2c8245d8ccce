//! `make bench`: applyset-operator side by side with `kubectl apply --server-side --prune
//! --applyset` and with the API server's own ceiling (the same server-side-apply requests in a
//! tight concurrent loop), in one run against one local control plane.
//!
//! ```text
//! applyset-bench [--sizes 100,1000,5000] [--shapes 100,500,1000] [--out bench/results]
//!                [--operator target/release/applyset-operator] [--concurrency N]
//!                [--no-kubectl] [--impersonate] [--wait] [--teardown-baseline]
//!                [--ui 10000] [--plugin target/release/kubectl-applyset]
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
//! refused requests (403) during it counted; its peak RSS covers the teardown.
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
mod shape;
mod ui;

use ceiling::{Request, ceiling_first_apply, ceiling_requests, run_ceiling_set};
use shape::{ShapeRuns, report_shapes, run_shapes, shape_targets};

type Res<T> = Result<T, String>;

const CRD_KINDS: usize = 20;
const GROUP: &str = "bench.applyset.dev";
const WAIT: Duration = Duration::from_secs(900);

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
// The operator process

struct OperatorProc {
    child: Child,
    metrics_port: u16,
}

impl Drop for OperatorProc {
    /// SIGTERM first, so that an operator built with `--features dhat-heap` writes its heap
    /// profile (dhat-heap.json) as it exits; killed after 30 s.
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> Res<u16> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| e.to_string())
}

fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    let code = buf.split_whitespace().nth(1)?.parse().ok()?;
    Some((
        code,
        buf.split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default(),
    ))
}

impl OperatorProc {
    async fn start(
        binary: &Path,
        kubeconfig: &Path,
        concurrency: Option<u16>,
        log: &Path,
    ) -> Res<OperatorProc> {
        let (metrics_port, health_port) = (free_port()?, free_port()?);
        let out = std::fs::File::create(log).map_err(|e| e.to_string())?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let mut cmd = Command::new(binary);
        cmd.arg("run")
            .arg(format!("--metrics-addr=127.0.0.1:{metrics_port}"))
            .arg(format!("--health-addr=127.0.0.1:{health_port}"))
            // The periodic resync is measured with interval 2s (the default minimum is 10s).
            .arg("--min-interval=1s")
            // The single set of 5000 members is inline: about 590 KiB of JSON, over the
            // default 512 KiB (a user would put so many in a source).
            .arg("--max-inline-manifests-kib=1024")
            .env("KUBECONFIG", kubeconfig)
            .env(
                "RUST_LOG",
                std::env::var("BENCH_OPERATOR_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        if let Some(c) = concurrency {
            cmd.arg(format!("--concurrency={c}"));
        }
        let child = cmd
            .spawn()
            .map_err(|e| format!("starting {}: {e}", binary.display()))?;
        let p = OperatorProc {
            child,
            metrics_port,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while http_get(health_port, "/readyz").map(|(c, _)| c) != Some(200) {
            if Instant::now() > deadline {
                return Err(format!(
                    "operator not ready within 60 s; see {}",
                    log.display()
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(p)
    }

    fn metrics(&self) -> String {
        http_get(self.metrics_port, "/metrics")
            .map(|(_, b)| b)
            .unwrap_or_default()
    }

    /// (all requests, write requests, reconciles) the operator has counted.
    fn counters(&self) -> (f64, f64, f64) {
        let m = self.metrics();
        let mut all = 0.0;
        let mut writes = 0.0;
        let mut reconciles = 0.0;
        for line in m.lines().filter(|l| !l.starts_with('#')) {
            let v: f64 = line
                .rsplit(' ')
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.0);
            if line.starts_with("applyset_api_requests_total{") {
                all += v;
                if ["POST", "PUT", "PATCH", "DELETE"]
                    .iter()
                    .any(|w| line.contains(&format!("\"{w}\"")))
                {
                    writes += v;
                }
            } else if line.starts_with("applyset_reconciles_total{") {
                reconciles += v;
            }
        }
        (all, writes, reconciles)
    }

    /// The API server's answers 403 (forbidden) to the operator so far.
    fn forbidden(&self) -> f64 {
        self.metrics()
            .lines()
            .filter(|l| l.starts_with("rest_client_requests_total{") && l.contains("code=\"403\""))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    fn peak_rss_mib(&self) -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
            .map(|kib| kib / 1024.0)
            .unwrap_or(0.0)
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

// ------------------------------------------------------------------------------------------
// The three contenders for one set of N members

/// One size's results: N, the operator, kubectl, the ceiling, and steady-state figures.
type SetResult = (usize, Timings, Timings, Timings, BTreeMap<String, f64>);

#[derive(Default, Clone)]
struct Timings {
    create: f64,
    noop: f64,
    prune_half: f64,
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

/// Creates namespace `ns` and in it an ApplySet of `n` members; the seconds from its
/// creation until it is Ready.
async fn first_apply(client: &Client, args: &Args, ns: &str, n: usize) -> Res<f64> {
    create_namespace(client, ns).await?;
    let sa = deployer(client, args, ns).await?;
    let api = applysets(client, ns);
    let name = format!("set-{n}");
    let mut body = json!({"apiVersion": "applyset.dev/v1alpha1", "kind": "ApplySet",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"interval": "1h", "manifests": members(n, "m")}});
    if let Some(sa) = sa {
        body["spec"]["serviceAccountName"] = json!(sa);
    }
    let obj: DynamicObject = serde_json::from_value(body).map_err(|e| e.to_string())?;
    let start = Instant::now();
    api.create(&PostParams::default(), &obj)
        .await
        .map_err(|e| format!("create {name}: {e}"))?;
    Ok(wait_ready(&api, &name, start).await?.as_secs_f64())
}

/// measured, for the operator and the ceiling alike.
const REPEATS: usize = 3;
/// The largest set whose first apply is measured [`REPEATS`] times.
const REPEATED_UP_TO: usize = 1000;

/// The medians of [`REPEATS`] first applies of `n` members, the operator's and the
/// ceiling's, from the `first` pair already measured and further pairs in namespaces of
/// their own (each deleted, and gone, before the next run). Operator and ceiling runs take
/// turns, so that a change in the machine's load touches both alike: one run of about a
/// second varied between 0.5 and 2 times the other from run to run; a median of three is
/// steadier.
async fn first_apply_medians(
    client: &Client,
    args: &Args,
    n: usize,
    first: (f64, f64),
) -> Res<(f64, f64)> {
    let (mut ops, mut ceilings) = (vec![first.0], vec![first.1]);
    for k in 1..REPEATS {
        let ns = format!("op-{n}-{k}");
        ops.push(first_apply(client, args, &ns, n).await?);
        delete_namespace(client, &ns).await?;
        let ns = format!("ceiling-{n}-{k}");
        ceilings.push(ceiling_first_apply(client, &ns, n).await?);
        delete_namespace(client, &ns).await?;
    }
    Ok((median(ops), median(ceilings)))
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

async fn run_operator_set(
    client: &Client,
    args: &Args,
    op: &OperatorProc,
    n: usize,
) -> Res<(Timings, BTreeMap<String, f64>)> {
    let ns = format!("op-{n}");
    let name = format!("set-{n}");
    let api = applysets(client, &ns);
    let mut t = Timings {
        create: first_apply(client, args, &ns, n).await?,
        ..Timings::default()
    };
    let mut extra = BTreeMap::new();
    // Let the follow-up reconciles of the creation settle before counting.
    tokio::time::sleep(Duration::from_secs(2)).await;

    // A no-op reconcile, requested with the annotation (no spec change): timed from the
    // request until the operator has finished one more reconcile.
    // One requested reconcile first, so the summary of the creation (created → unchanged)
    // is not counted as the no-op's write.
    request_reconcile(&api, &name, op, "settle").await?;
    let (all0, w0, r0) = op.counters();
    let start = Instant::now();
    api.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"applyset.dev/reconcile-requested-at": format!("{:?}", start)}}})),
    )
    .await
    .map_err(|e| e.to_string())?;
    loop {
        if op.counters().2 > r0 {
            break;
        }
        if start.elapsed() > WAIT {
            return Err("the requested reconcile did not happen".into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    t.noop = start.elapsed().as_secs_f64();
    let (all1, w1, _) = op.counters();
    // The annotation patch is ours, not the operator's: only the operator's requests count.
    extra.insert("noop_requests_per_member".into(), (all1 - all0) / n as f64);
    extra.insert("noop_write_requests".into(), w1 - w0);

    // Periodic resync: interval 2s, over at least 3 resyncs.
    patch_spec(&api, &name, json!({"interval": "2s"})).await?;
    wait_ready(&api, &name, Instant::now()).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (all2, w2, r2) = op.counters();
    let deadline = Instant::now() + Duration::from_secs(120);
    let (all3, w3, r3) = loop {
        let c = op.counters();
        if c.2 >= r2 + 3.0 || Instant::now() > deadline {
            break c;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let resyncs = (r3 - r2).max(1.0);
    extra.insert(
        "resync_requests_per_member".into(),
        (all3 - all2) / resyncs / n as f64,
    );
    extra.insert("resync_write_requests".into(), (w3 - w2) / resyncs);
    patch_spec(&api, &name, json!({"interval": "1h"})).await?;
    wait_ready(&api, &name, Instant::now()).await?;

    let start = Instant::now();
    patch_spec(&api, &name, json!({"manifests": members(n / 2, "m")})).await?;
    t.prune_half = wait_ready(&api, &name, start).await?.as_secs_f64();
    Ok((t, extra))
}

fn write_yaml(dir: &Path, objs: &[Value]) -> Res<()> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    // JSON is YAML: one document per object.
    let text: String = objs.iter().map(|o| format!("---\n{o}\n")).collect();
    std::fs::write(dir.join("objects.yaml"), text).map_err(|e| e.to_string())
}

fn kubectl_apply(kubectl: &Path, kubeconfig: &Path, ns: &str, dir: &Path) -> Res<f64> {
    let start = Instant::now();
    let out = Command::new(kubectl)
        .env("KUBECTL_APPLYSET", "true")
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .args([
            "apply",
            "--server-side",
            "--prune",
            "--applyset=bench",
            "-n",
            ns,
            "-f",
        ])
        .arg(dir)
        .stdout(Stdio::null())
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "kubectl apply failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(start.elapsed().as_secs_f64())
}

async fn run_kubectl_set(
    client: &Client,
    kubectl: &Path,
    kubeconfig: &Path,
    n: usize,
    work: &Path,
) -> Res<Timings> {
    let ns = format!("kubectl-{n}");
    create_namespace(client, &ns).await?;
    let dir = work.join(format!("kubectl-{n}"));
    write_yaml(&dir, &members(n, "m"))?;
    let create = kubectl_apply(kubectl, kubeconfig, &ns, &dir)?;
    let noop = kubectl_apply(kubectl, kubeconfig, &ns, &dir)?;
    write_yaml(&dir, &members(n / 2, "m"))?;
    let prune_half = kubectl_apply(kubectl, kubeconfig, &ns, &dir)?;
    Ok(Timings {
        create,
        noop,
        prune_half,
    })
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

/// The single-set tables (timings, then the steady state) into `md`; their JSON.
fn report_sets(md: &mut String, sets: &[SetResult]) -> Vec<Value> {
    md.push_str("## One ApplySet of N members (seconds)\n\n");
    md.push_str(&format!(
        "`create → Ready` of the operator and of the ceiling is the median of {REPEATS} runs, taking turns, for N ≤ {REPEATED_UP_TO}; one run otherwise (kubectl: one run).\n\n"
    ));
    md.push_str("| N | phase | operator | kubectl --prune --applyset | API server ceiling | operator / kubectl | operator / ceiling |\n|---|---|---|---|---|---|---|\n");
    let mut json_sets = Vec::new();
    for (n, op, kc, ce, extra) in sets {
        for (phase, o, k, c) in [
            ("create → Ready", op.create, kc.create, ce.create),
            ("no-op", op.noop, kc.noop, ce.noop),
            ("prune half", op.prune_half, kc.prune_half, ce.prune_half),
        ] {
            md.push_str(&format!(
                "| {n} | {phase} | {o:.2} | {k:.2} | {c:.2} | {:.2} | {:.2} |\n",
                ratio(o, k),
                ratio(o, c)
            ));
        }
        json_sets.push(json!({"members": n,
            "operator": {"create": op.create, "noop": op.noop, "prune_half": op.prune_half},
            "kubectl": {"create": kc.create, "noop": kc.noop, "prune_half": kc.prune_half},
            "ceiling": {"create": ce.create, "noop": ce.noop, "prune_half": ce.prune_half},
            "steady": extra}));
    }
    md.push_str("\n## Steady state (operator requests)\n\n| N | no-op: requests / member | no-op: write requests | resync: requests / member | resync: writes / resync |\n|---|---|---|---|---|\n");
    for (n, _, _, _, e) in sets {
        md.push_str(&format!(
            "| {n} | {:.3} | {:.0} | {:.3} | {:.1} |\n",
            e.get("noop_requests_per_member")
                .copied()
                .unwrap_or(f64::NAN),
            e.get("noop_write_requests").copied().unwrap_or(f64::NAN),
            e.get("resync_requests_per_member")
                .copied()
                .unwrap_or(f64::NAN),
            e.get("resync_write_requests").copied().unwrap_or(f64::NAN),
        ));
    }
    json_sets
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
    let (shapes, yardstick) = match args.shapes.is_empty() {
        true => (Vec::new(), Value::Null),
        false => {
            let y = ceiling::yardstick(args.ceiling.as_deref())?;
            let shapes = run_shapes(&args, &opts, &y, &work).await?;
            let settings = shapes
                .first()
                .and_then(|s| s.runs.first())
                .map(|r| r.0.doc["settings"].clone())
                .unwrap_or_default();
            (shapes, y.identity(&settings))
        }
    };
    let (cp, client) = fresh_control_plane(&opts).await?;
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

/// The single-set runs of each size (none when `--sizes` is empty): the results and the
/// operator's peak RSS over them.
async fn run_sets(
    client: &Client,
    args: &Args,
    kubectl: &Path,
    kubeconfig: &Path,
    work: &Path,
) -> Res<(Vec<SetResult>, f64)> {
    let mut sets = Vec::new();
    if args.sizes.is_empty() {
        return Ok((sets, f64::NAN));
    }
    let op = OperatorProc::start(
        &args.operator,
        kubeconfig,
        args.concurrency,
        &work.join("operator-sets.log"),
    )
    .await?;
    warm_up(client).await?;
    for &n in &args.sizes {
        eprintln!("bench: one ApplySet of {n} members");
        // Each tool's namespace is deleted, and gone, before the next tool runs: the garbage
        // collection of one run (ReplicaSets and Pods of the Deployments, pruned objects)
        // must not slow down the next one's measurement.
        let (o, extra) = run_operator_set(client, args, &op, n).await?;
        delete_namespace(client, &format!("op-{n}")).await?;
        let k = if args.kubectl {
            let k = run_kubectl_set(client, kubectl, kubeconfig, n, work).await?;
            delete_namespace(client, &format!("kubectl-{n}")).await?;
            k
        } else {
            Timings {
                create: f64::NAN,
                noop: f64::NAN,
                prune_half: f64::NAN,
            }
        };
        let mut c = run_ceiling_set(client, n).await?;
        delete_namespace(client, &format!("ceiling-{n}")).await?;
        let mut o = o;
        if n <= REPEATED_UP_TO {
            (o.create, c.create) =
                first_apply_medians(client, args, n, (o.create, c.create)).await?;
        }
        sets.push((n, o, k, c, extra));
    }
    let rss_sets = op.peak_rss_mib();
    drop(op);
    Ok((sets, rss_sets))
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
