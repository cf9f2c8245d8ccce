//! The Flux shape: K ApplySets of Flux's four objects, created at once, against the
//! yardstick (`hack/ssa-ceiling`) run for the same K on an equally fresh control plane.

use super::*;
use crate::ceiling::{CeilingRun, Yardstick};

/// One run of the operator on the Flux shape.
pub struct Shape {
    pub sets: usize,
    pub all_ready: f64,
    /// Over the whole run, the teardown included.
    pub peak_rss_mib: f64,
    /// The control plane's kube-apiserver and etcd over the same run (and the baseline
    /// teardown's, which follows on that control plane).
    pub apiserver_peak_rss_mib: f64,
    pub etcd_peak_rss_mib: f64,
    /// From the creation until all Ready: all of the operator's requests, and its writes
    /// (POST, PUT, PATCH, DELETE) among them.
    pub operator_requests: f64,
    pub operator_writes: f64,
    pub apiserver_requests: f64,
    /// The namespace's deletion until it is gone, with the operator running.
    pub teardown: f64,
    /// The operator's requests refused (403) during the teardown.
    pub teardown_forbidden: f64,
    /// The same teardown without the operator (`--teardown-baseline`), else NaN.
    pub teardown_baseline: f64,
    /// One periodic resync of every set, nothing changed: operator requests per set and
    /// write requests (NaN with `--no-shape-resync`).
    pub resync_requests_per_set: f64,
    pub resync_writes: f64,
}

/// The runs of one K: the yardstick's and the operator's, each on a fresh control plane,
/// taking turns.
pub struct ShapeRuns {
    pub sets: usize,
    pub runs: Vec<Run>,
    /// The same K with the operator under `--shards auto` (one replica), for the largest K.
    pub sharded: Option<Shape>,
}

/// One run: the ceiling's and the operator's.
pub type Run = (CeilingRun, Shape);

/// Every K of `--shapes`, `--runs` times each: the yardstick, then the operator, each on a
/// control plane of its own started with `opts` (its CRDs installed), stopped after; but the
/// last operator's, returned for the single-set runs (its namespaces are gone).
pub async fn run_shapes(
    args: &Args,
    opts: &Options,
    yardstick: &Yardstick,
    work: &Path,
) -> Res<(Vec<ShapeRuns>, Option<(ControlPlane, Client)>)> {
    let kubectl = opts.bin_dir.join("kubectl");
    let mut all = Vec::new();
    let mut last = None;
    for &k in &args.shapes {
        let mut runs = Vec::new();
        for run in 1..=args.runs {
            eprintln!(
                "bench: {k} ApplySets × 4, run {run}/{}: the ceiling",
                args.runs
            );
            // The previous operator's control plane stops first: nothing else runs beside
            // either measurement.
            drop(last.take());
            let ceiling = {
                let (cp, client) = fresh_control_plane(opts).await?;
                crate::ceiling::run_flux(yardstick, &cp, &client, k).await?
            };
            eprintln!(
                "bench: {k} ApplySets × 4, run {run}/{}: the operator",
                args.runs
            );
            let (cp, client) = fresh_control_plane(opts).await?;
            let log = work.join(format!("operator-shape-{k}-{run}.log"));
            let shape = run_shape(&cp, &client, args, &kubectl, k, &log).await?;
            last = Some((cp, client));
            runs.push((ceiling, shape));
        }
        let largest = args.shapes.iter().max() == Some(&k);
        let sharded = match args.shards_cost && largest {
            true => {
                eprintln!("bench: {k} ApplySets × 4: the operator under --shards auto");
                drop(last.take());
                let (cp, client) = fresh_control_plane(opts).await?;
                let log = work.join(format!("operator-shape-{k}-sharded.log"));
                let shape = run_shape(&cp, &client, &sharded_args(args), &kubectl, k, &log).await?;
                last = Some((cp, client));
                Some(shape)
            }
            false => None,
        };
        all.push(ShapeRuns {
            sets: k,
            runs,
            sharded,
        });
    }
    Ok((all, last))
}

/// `args` for the operator under `--shards auto`, one replica, its Lease in `default`.
fn sharded_args(args: &Args) -> Args {
    let operator_args = [
        "--shards=auto",
        "--shard-name=bench-0",
        "--leader-election-namespace=default",
    ];
    Args {
        operator_args: operator_args.map(String::from).to_vec(),
        teardown_baseline: false,
        ..args.clone()
    }
}

pub async fn run_shape(
    cp: &ControlPlane,
    client: &Client,
    args: &Args,
    kubectl: &Path,
    k: usize,
    log: &Path,
) -> Res<Shape> {
    let kubeconfig = cp.kubeconfig();
    // A fresh process, so its peak RSS is this shape's.
    let op = OperatorProc::start(
        &args.operator,
        kubeconfig,
        args.concurrency,
        &args.operator_args,
        log,
    )
    .await?;
    let ns = format!("flux-{k}");
    create_namespace(client, &ns).await?;
    let sa = deployer(client, args, &ns).await?;
    let api = applysets(client, &ns);
    let api_before = apiserver_requests(kubectl, kubeconfig);
    let (op_before, writes_before, _) = op.counters();
    let created = AtomicU64::new(0);
    let wait = args.wait;
    let kubelet =
        wait.then(|| tokio::spawn(make_deployments_available(client.clone(), ns.clone())));
    let start = Instant::now();
    create_flux_sets(&api, &ns, k, sa.as_deref(), wait, &created).await?;
    wait_all_ready(&api, k, start).await?;
    let all_ready = start.elapsed().as_secs_f64();
    if let Some(k) = kubelet {
        k.abort();
    }
    let (op_after, writes_after, _) = op.counters();
    let api_after = apiserver_requests(kubectl, kubeconfig);
    let (resync_requests_per_set, resync_writes) = match args.shape_resync {
        true => shape_resync(&api, &op, k).await?,
        false => (f64::NAN, f64::NAN),
    };
    // The teardown, timed, while this operator still runs: it holds the ApplySets'
    // finalizers, and must not fight the namespace controller.
    let forbidden_before = op.forbidden();
    let t = Instant::now();
    delete_namespace(client, &ns).await?;
    let teardown = t.elapsed().as_secs_f64();
    let teardown_forbidden = op.forbidden() - forbidden_before;
    let peak_rss_mib = op.peak_rss_mib();
    drop(op);
    let teardown_baseline = match args.teardown_baseline {
        true => baseline_teardown(client, k).await?,
        false => f64::NAN,
    };
    let (apiserver_peak_rss_mib, etcd_peak_rss_mib) = crate::operator::plane_peak_rss_mib(cp);
    Ok(Shape {
        sets: k,
        all_ready,
        peak_rss_mib,
        apiserver_peak_rss_mib,
        etcd_peak_rss_mib,
        operator_requests: op_after - op_before,
        operator_writes: writes_after - writes_before,
        apiserver_requests: api_after - api_before,
        teardown,
        teardown_forbidden,
        teardown_baseline,
        resync_requests_per_set,
        resync_writes,
    })
}

/// The interval of every set during the resync's measurement: short, so every set resyncs
/// soon (the bench's operator runs with `--min-interval=1s`).
const RESYNC_INTERVAL: &str = "2s";

/// One periodic resync of all `k` sets of `api` with nothing changed: every set's interval
/// set to [`RESYNC_INTERVAL`] (a new generation: one reconcile each, not counted), and once
/// all are Ready again and the operator's writes have stopped, its requests counted until it
/// has finished `k` more reconciles (the resyncs); the interval set back to 1h after.
/// Returns (requests per resynced set, write requests over the window).
async fn shape_resync(api: &Api<DynamicObject>, op: &OperatorProc, k: usize) -> Res<(f64, f64)> {
    set_intervals(api, k, RESYNC_INTERVAL).await?;
    wait_all_ready(api, k, Instant::now()).await?;
    writes_settled(op).await?;
    let (all0, w0, r0) = op.counters();
    let start = Instant::now();
    let (all1, w1, r1) = loop {
        let c = op.counters();
        if c.2 >= r0 + k as f64 {
            break c;
        }
        if start.elapsed() > WAIT {
            return Err(format!("only {} of {k} sets resynced", c.2 - r0));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    set_intervals(api, k, "1h").await?;
    wait_all_ready(api, k, Instant::now()).await?;
    Ok(((all1 - all0) / (r1 - r0).max(1.0), w1 - w0))
}

/// Sets `spec.interval` of the `k` sets of `api` to `interval`, 32 at a time.
async fn set_intervals(api: &Api<DynamicObject>, k: usize, interval: &str) -> Res<()> {
    stream::iter(0..k)
        .map(|i| async move {
            patch_spec(api, &format!("set-{i:05}"), json!({"interval": interval})).await
        })
        .buffer_unordered(32)
        .try_collect::<Vec<()>>()
        .await
        .map(|_| ())
}

/// Waits until the operator has sent no write for 2 s (the writes of the reconciles that
/// made the sets Ready are over).
async fn writes_settled(op: &OperatorProc) -> Res<()> {
    let start = Instant::now();
    let (mut last, mut since) = (op.counters().1, Instant::now());
    while since.elapsed() < Duration::from_secs(2) {
        if start.elapsed() > WAIT {
            return Err("the operator's writes did not stop".into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = op.counters().1;
        if now != last {
            (last, since) = (now, Instant::now());
        }
    }
    Ok(())
}

/// Creates the `k` ApplySets of the Flux shape in `ns`, 32 at a time, counting them in
/// `created`.
pub async fn create_flux_sets(
    api: &Api<DynamicObject>,
    ns: &str,
    k: usize,
    sa: Option<&str>,
    wait: bool,
    created: &AtomicU64,
) -> Res<()> {
    stream::iter(0..k)
        .map(|i| async move {
            let p = format!("s{i:05}-");
            let ms = flux_members(&p);
            let mut body = json!({"apiVersion": "applyset.dev/v1alpha1", "kind": "ApplySet",
                "metadata": {"name": format!("set-{i:05}"), "namespace": ns}, "spec": {"manifests": ms}});
            if let Some(sa) = sa {
                body["spec"]["serviceAccountName"] = json!(sa);
            }
            if wait {
                body["spec"]["wait"] = json!(true);
            }
            let obj: DynamicObject = serde_json::from_value(body).map_err(|e| e.to_string())?;
            api.create(&PostParams::default(), &obj).await.map_err(|e| e.to_string())?;
            created.fetch_add(1, Ordering::Relaxed);
            Res::Ok(())
        })
        .buffer_unordered(32)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

/// Waits until all `k` ApplySets of `api` are Ready, at most until [`WAIT`] after `start`.
/// Watched, not polled: LISTs of all K ApplySets several times a second would load the API
/// server the operator is measured against.
pub async fn wait_all_ready(api: &Api<DynamicObject>, k: usize, start: Instant) -> Res<()> {
    // Filled by the watch below; read again once the wait is over (the watch future is then
    // gone, and its borrow with it).
    let mut ready = std::collections::HashSet::<String>::new();
    let all_ready = async {
        use kube::runtime::WatchStreamExt;
        let mut events = kube::runtime::watcher(api.clone(), Default::default())
            .default_backoff()
            .boxed();
        while let Some(e) = events.next().await {
            let objs = match e {
                Ok(kube::runtime::watcher::Event::Apply(o))
                | Ok(kube::runtime::watcher::Event::InitApply(o)) => vec![o],
                _ => continue,
            };
            for o in objs {
                let name = o.metadata.name.clone().unwrap_or_default();
                if is_ready(&o) {
                    ready.insert(name);
                } else {
                    ready.remove(&name);
                }
            }
            if ready.len() == k {
                return;
            }
        }
    };
    if tokio::time::timeout(WAIT.saturating_sub(start.elapsed()), all_ready)
        .await
        .is_err()
    {
        let n = ready.len();
        return Err(format!("only {n} of {k} ApplySets Ready within {WAIT:?}"));
    }
    Ok(())
}

/// The teardown's baseline: the objects the operator's namespace holds for `k` sets of the
/// Flux shape, made directly in a namespace of their own (not timed): the members with their
/// `part-of` label, the ApplySets without finalizers (no operator runs), and one event per
/// set (the operator publishes one per reconcile); then the namespace's deletion until it is
/// gone, timed.
pub async fn baseline_teardown(client: &Client, k: usize) -> Res<f64> {
    let ns = format!("flux-{k}-bare");
    create_namespace(client, &ns).await?;
    let objs: Vec<Value> = (0..k)
        .flat_map(|i| {
            let (p, name) = (format!("s{i:05}-"), format!("set-{i:05}"));
            let mut objs = crate::ceiling::labelled(flux_members(&p));
            objs.push(
                json!({"apiVersion": "applyset.dev/v1alpha1", "kind": "ApplySet",
                "metadata": {"name": name}, "spec": {"manifests": flux_members(&p)}}),
            );
            objs.push(json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
                "metadata": {"name": format!("{name}.baseline")},
                "action": "Reconcile", "reason": "ReconciliationSucceeded", "type": "Normal",
                "note": "applied 4 members (4 created, 0 configured, 0 unchanged), pruned 0",
                "eventTime": k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
                    k8s_openapi::jiff::Timestamp::now()),
                "regarding": {"apiVersion": "applyset.dev/v1alpha1", "kind": "ApplySet",
                    "name": name, "namespace": ns},
                "reportingController": "applyset-operator",
                "reportingInstance": "applyset-operator"}));
            objs
        })
        .collect();
    ceiling_requests(client, &ns, &objs, Request::Apply).await?;
    let t = Instant::now();
    delete_namespace(client, &ns).await?;
    Ok(t.elapsed().as_secs_f64())
}

/// Plays the Deployment controller (there is none in the bench's control plane): every
/// Deployment in `ns` gets the status of one available replica as soon as it is seen.
pub async fn make_deployments_available(client: Client, ns: String) {
    use kube::runtime::WatchStreamExt;
    let api: Api<DynamicObject> =
        Api::namespaced_with(client, &ns, &resource_of(&json!({"kind": "Deployment"})));
    kube::runtime::watcher(api.clone(), Default::default())
        .default_backoff()
        .applied_objects()
        .for_each_concurrent(16, |o| {
            let api = api.clone();
            async move {
                let Ok(o) = o else { return };
                let generation = o.metadata.generation;
                if o.data["status"]["observedGeneration"].as_i64() == generation {
                    return;
                }
                let status = json!({"status": {"observedGeneration": generation, "replicas": 1,
                    "updatedReplicas": 1, "readyReplicas": 1, "availableReplicas": 1,
                    "conditions": [
                        {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
                        {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}]}});
                let name = o.metadata.name.clone().unwrap_or_default();
                let _ = api
                    .patch_status(&name, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(status))
                    .await;
            }
        })
        .await;
}

/// The median of `f` over `runs`.
fn median_of(runs: &[Run], f: impl Fn(&Run) -> f64) -> f64 {
    median(runs.iter().map(f).collect())
}

/// The least and the greatest of `f` over `runs`.
fn spread_of(runs: &[Run], f: impl Fn(&Run) -> f64) -> (f64, f64) {
    runs.iter()
        .map(f)
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        })
}

/// A run's all Ready against its ceiling.
fn ready_ratio(r: &Run) -> f64 {
    ratio(r.1.all_ready, r.0.wall)
}

/// The teardown against its baseline in a run (NaN without `--teardown-baseline`).
fn teardown_ratio(r: &Run) -> f64 {
    ratio(r.1.teardown, r.1.teardown_baseline)
}

/// The worst of `f` over `runs` (the greatest; NaN if one is NaN).
fn worst(runs: &[Run], f: impl Fn(&Shape) -> f64) -> f64 {
    runs.iter()
        .map(|r| f(&r.1))
        .fold(f64::NEG_INFINITY, |w, v| {
            if v.is_nan() || w.is_nan() {
                f64::NAN
            } else {
                w.max(v)
            }
        })
}

/// The targets of the Flux shape (docs/benchmarks.md), on the medians of the runs (peak RSS,
/// requests per set and resync figures: the worst run).
pub fn shape_targets(shapes: &[ShapeRuns]) -> Vec<(String, String, bool)> {
    let mut t = Vec::new();
    for s in shapes {
        time_targets(s, &mut t);
        request_targets(s, &mut t);
    }
    t
}

/// The targets of one K on time and memory into `t`.
fn time_targets(s: &ShapeRuns, t: &mut Vec<(String, String, bool)>) {
    let (k, runs) = (s.sets, &s.runs);
    let r = median_of(runs, ready_ratio);
    let bound = match k {
        10_000 => Some(1.15),
        50_000 => Some(1.2),
        _ => None,
    };
    if let Some(b) = bound {
        t.push((
            format!(
                "{k} × 4 all Ready ≤ {b} × the ceiling (median of {})",
                runs.len()
            ),
            format!("{r:.2} ×"),
            r <= b,
        ));
    }
    if k == 1000 {
        let ready = median_of(runs, |r| r.1.all_ready);
        t.push((
            "1000 × 4 all Ready within 60 s".into(),
            format!("{ready:.1} s"),
            ready <= 60.0,
        ));
    }
    let rss = worst(runs, |s| s.peak_rss_mib);
    let rss_bound = match k {
        1000 => Some(64.0),
        10_000 => Some(256.0),
        50_000 => Some(1024.0),
        _ => None,
    };
    if let Some(b) = rss_bound {
        t.push((
            format!("operator peak RSS ≤ {b} MiB ({k} × 4, teardown included)"),
            format!("{rss:.1} MiB"),
            rss <= b,
        ));
    }
    let td = median_of(runs, teardown_ratio);
    if !td.is_nan() {
        t.push((
            format!("teardown ≤ 1.25 × without the operator ({k} × 4)"),
            format!("{td:.2} ×"),
            td <= 1.25,
        ));
    }
}

/// The targets of one K on requests into `t`.
fn request_targets(s: &ShapeRuns, t: &mut Vec<(String, String, bool)>) {
    let (k, runs) = (s.sets, &s.runs);
    let per_set = worst(runs, |s| s.operator_requests / s.sets as f64);
    t.push((
        format!("≤ 7 requests per new set ({k} × 4)"),
        format!("{per_set:.2}"),
        per_set <= 7.0,
    ));
    if k == 50_000 {
        let w = worst(runs, |s| s.resync_writes);
        let q = worst(runs, |s| s.resync_requests_per_set);
        t.push((
            "a full resync, nothing changed, sends no write (50,000 × 4)".into(),
            format!("{w:.0} writes"),
            w == 0.0,
        ));
        t.push((
            "a full resync, nothing changed: ≤ 0.01 requests per set (50,000 × 4)".into(),
            format!("{q:.3}"),
            q <= 0.01,
        ));
    }
    let refused = worst(runs, |s| s.teardown_forbidden);
    t.push((
        format!("teardown refuses ≤ 64 requests ({k} × 4)"),
        format!("{refused:.0}"),
        refused <= 64.0,
    ));
}

/// The Flux-shape tables into `md` (`wait`: the sets waited for their Deployments): each
/// run, then the medians and spreads against the ceiling; their JSON.
pub fn report_shapes(
    md: &mut String,
    wait: bool,
    shapes: &[ShapeRuns],
    op_rss_sets: f64,
) -> Vec<Value> {
    let waiting = if wait {
        ", every set with `wait: true` (the bench makes each Deployment available as the Deployment controller would; its status writes count among the API server's requests)"
    } else {
        ""
    };
    md.push_str(&format!(
        "\n## The Flux shape: K ApplySets × 4 members, created at once{waiting}\n\n"
    ));
    md.push_str("Per set: a ServiceAccount, a headless Service, a Deployment of 0 replicas, an Ingress (Flux's benchmark objects). Each run of the operator and of the ceiling (`hack/ssa-ceiling`: the same writes, the event included, without the operator) on a fresh control plane of its own, taking turns. Teardown: the namespace deleted, with the operator running, until it is gone; baseline: the same objects made without the operator (no finalizers), their namespace deleted. Resync: every set's interval set to 2 s, then the operator's requests over as many reconciles as sets.\n\n");
    md.push_str("| ApplySets | run | all Ready (s) | ceiling (s) | all Ready / ceiling | operator peak RSS, teardown included (MiB) | operator requests | requests / set | API server requests (all clients) | resync: requests / set | resync: writes | teardown (s) | teardown without the operator (s) | 403s during teardown |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    let mut json_shapes = Vec::new();
    for s in shapes {
        let mut runs = Vec::new();
        for (i, (c, o)) in s.runs.iter().enumerate() {
            let per_set = o.operator_requests / o.sets as f64;
            md.push_str(&format!(
                "| {} | {} | {:.1} | {:.1} | {:.2} | {:.1} | {:.0} | {per_set:.2} | {:.0} | {:.3} | {:.0} | {:.1} | {:.1} | {:.0} |\n",
                o.sets, i + 1, o.all_ready, c.wall, ratio(o.all_ready, c.wall), o.peak_rss_mib,
                o.operator_requests, o.apiserver_requests, o.resync_requests_per_set, o.resync_writes,
                o.teardown, o.teardown_baseline, o.teardown_forbidden
            ));
            runs.push(json!({"all_ready_seconds": o.all_ready, "ceiling_seconds": c.wall,
                "ratio": ratio(o.all_ready, c.wall), "ceiling": c.doc,
                "ceiling_apiserver_cpu_seconds": c.apiserver_cpu, "peak_rss_mib": o.peak_rss_mib,
                "operator_requests": o.operator_requests, "requests_per_set": per_set,
                "apiserver_requests": o.apiserver_requests,
                "resync_requests_per_set": o.resync_requests_per_set, "resync_writes": o.resync_writes,
                "teardown_seconds": o.teardown, "teardown_baseline_seconds": o.teardown_baseline,
                "teardown_forbidden": o.teardown_forbidden,
                "apiserver_peak_rss_mib": o.apiserver_peak_rss_mib,
                "etcd_peak_rss_mib": o.etcd_peak_rss_mib}));
        }
        json_shapes.push(
            json!({"applysets": s.sets, "runs": runs, "summary": summary(s),
            "sharded": sharded_json(s)}),
        );
    }
    md.push_str("\n### Against the ceiling (medians, and min–max over the runs)\n\n| ApplySets | | all Ready (s) | ceiling (s) | all Ready / ceiling | teardown / baseline |\n|---|---|---|---|---|---|\n");
    for s in shapes {
        let f = |v: &Value| v.as_f64().unwrap_or(f64::NAN);
        let m = summary(s);
        md.push_str(&format!(
            "| {} × 4 | median | {:.1} | {:.1} | {:.2} × | {:.2} × |\n",
            s.sets,
            f(&m["median"]["all_ready_seconds"]),
            f(&m["median"]["ceiling_seconds"]),
            f(&m["median"]["ratio"]),
            f(&m["median"]["teardown_ratio"])
        ));
        let lh = |key: &str| {
            format!(
                "{:.2}–{:.2}",
                f(&m["spread"][key][0]),
                f(&m["spread"][key][1])
            )
        };
        md.push_str(&format!(
            "| {} × 4 | min–max of {} | {} | {} | {} | {} |\n",
            s.sets,
            s.runs.len(),
            lh("all_ready_seconds"),
            lh("ceiling_seconds"),
            lh("ratio"),
            lh("teardown_ratio")
        ));
    }
    report_sharded(md, shapes);
    report_memory(md, shapes);
    // Without single-set runs (`--sizes ""`) there is no figure to give.
    if op_rss_sets.is_finite() {
        md.push_str(&format!(
            "\nOperator peak RSS over the single-set runs: {op_rss_sets:.1} MiB.\n"
        ));
    }
    json_shapes
}

/// The run under `--shards auto` against the runs without, for the K that has one.
fn report_sharded(md: &mut String, shapes: &[ShapeRuns]) {
    let with: Vec<(&ShapeRuns, &Shape)> = shapes
        .iter()
        .filter_map(|s| Some((s, s.sharded.as_ref()?)))
        .collect();
    if with.is_empty() {
        return;
    }
    md.push_str("\n### Under `--shards auto` (one replica): what sharding costs\n\nThe same K once more on a fresh control plane, the operator run with `--shards=auto` alone: every member carries its bucket label and epoch annotation, the parent its owner and epoch. Against the median of the runs without.\n\n| ApplySets | all Ready, sharded (s) | all Ready, not sharded (s) | sharded / not | requests / set, sharded | requests / set, not | writes / set, sharded | writes / set, not | resync: requests / set | resync: writes |\n|---|---|---|---|---|---|---|---|---|---|\n");
    for (s, o) in with {
        let unsharded = median_of(&s.runs, |r| r.1.all_ready);
        let per_set = |sh: &Shape| sh.operator_requests / sh.sets as f64;
        let writes_per_set = |sh: &Shape| sh.operator_writes / sh.sets as f64;
        md.push_str(&format!(
            "| {} | {:.1} | {unsharded:.1} | {:.2} × | {:.2} | {:.2} | {:.2} | {:.2} | {:.3} | {:.0} |\n",
            s.sets,
            o.all_ready,
            ratio(o.all_ready, unsharded),
            per_set(o),
            median_of(&s.runs, |r| per_set(&r.1)),
            writes_per_set(o),
            median_of(&s.runs, |r| writes_per_set(&r.1)),
            o.resync_requests_per_set,
            o.resync_writes
        ));
    }
}

/// The run under `--shards auto` of `s`, if any, as JSON.
fn sharded_json(s: &ShapeRuns) -> Value {
    let Some(o) = &s.sharded else {
        return Value::Null;
    };
    let unsharded = median_of(&s.runs, |r| r.1.all_ready);
    json!({"all_ready_seconds": o.all_ready, "unsharded_all_ready_seconds": unsharded,
        "ratio": ratio(o.all_ready, unsharded),
        "requests_per_set": o.operator_requests / o.sets as f64,
        "writes_per_set": o.operator_writes / o.sets as f64,
        "resync_requests_per_set": o.resync_requests_per_set, "resync_writes": o.resync_writes,
        "peak_rss_mib": o.peak_rss_mib})
}

/// The machine's memory over each run of the operator: its peak RSS and the control plane's.
fn report_memory(md: &mut String, shapes: &[ShapeRuns]) {
    md.push_str("\n### The machine's memory: peak RSS of each process over a run of the operator and the baseline teardown after it, if any, on one control plane (MiB; each process's peak, not at one instant)\n\n| ApplySets | run | operator | kube-apiserver | etcd | sum |\n|---|---|---|---|---|---|\n");
    for s in shapes {
        for (i, (_, o)) in s.runs.iter().enumerate() {
            let (op, api, etcd) = (
                o.peak_rss_mib,
                o.apiserver_peak_rss_mib,
                o.etcd_peak_rss_mib,
            );
            md.push_str(&format!(
                "| {} | {} | {op:.0} | {api:.0} | {etcd:.0} | {:.0} |\n",
                o.sets,
                i + 1,
                op + api + etcd
            ));
        }
    }
}

/// A figure of a run.
type Figure = fn(&Run) -> f64;

/// The medians and spreads (min, max) of one K's runs.
fn summary(s: &ShapeRuns) -> Value {
    let runs = &s.runs;
    let figures: [(&str, Figure); 4] = [
        ("all_ready_seconds", |r| r.1.all_ready),
        ("ceiling_seconds", |r| r.0.wall),
        ("ratio", ready_ratio),
        ("teardown_ratio", teardown_ratio),
    ];
    let mut median = serde_json::Map::new();
    let mut spread = serde_json::Map::new();
    for (key, f) in figures {
        median.insert(key.into(), json!(median_of(runs, f)));
        let (lo, hi) = spread_of(runs, f);
        spread.insert(key.into(), json!([lo, hi]));
    }
    json!({"runs": runs.len(), "median": median, "spread": spread})
}
