//! One ApplySet of N members: the operator, kubectl and the ceiling side by side (create →
//! Ready, a no-op reconcile, pruning half) and the operator's steady state.

use super::*;

/// One size's results: N, the operator, kubectl, the ceiling, and steady-state figures.
pub type SetResult = (usize, Timings, Timings, Timings, BTreeMap<String, f64>);

#[derive(Default, Clone)]
pub struct Timings {
    pub create: f64,
    pub noop: f64,
    pub prune_half: f64,
}

/// Creates namespace `ns` and in it an ApplySet of `n` members; the seconds from its
/// creation until it is Ready.
pub async fn first_apply(client: &Client, args: &Args, ns: &str, n: usize) -> Res<f64> {
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
pub const REPEATS: usize = 3;
/// The largest set whose first apply is measured [`REPEATS`] times.
pub const REPEATED_UP_TO: usize = 1000;

/// The medians of [`REPEATS`] first applies of `n` members, the operator's and the
/// ceiling's, from the `first` pair already measured and further pairs in namespaces of
/// their own (each deleted, and gone, before the next run). Operator and ceiling runs take
/// turns, so that a change in the machine's load touches both alike: one run of about a
/// second varied between 0.5 and 2 times the other from run to run; a median of three is
/// steadier.
pub async fn first_apply_medians(
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

pub async fn run_operator_set(
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

pub fn write_yaml(dir: &Path, objs: &[Value]) -> Res<()> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    // JSON is YAML: one document per object.
    let text: String = objs.iter().map(|o| format!("---\n{o}\n")).collect();
    std::fs::write(dir.join("objects.yaml"), text).map_err(|e| e.to_string())
}

pub fn kubectl_apply(kubectl: &Path, kubeconfig: &Path, ns: &str, dir: &Path) -> Res<f64> {
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

pub async fn run_kubectl_set(
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

/// The single-set tables (timings, then the steady state) into `md`; their JSON.
pub fn report_sets(md: &mut String, sets: &[SetResult]) -> Vec<Value> {
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

/// The single-set runs of each size (none when `--sizes` is empty): the results and the
/// operator's peak RSS over them.
pub async fn run_sets(
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
        &[],
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
