//! The operator as a process: `/metrics` after reconciles (every family parsed as Prometheus
//! text), leader election between two
//! replicas (only the leader reconciles; a killed leader is replaced within the lease
//! duration; a terminated one hands over at once).

mod support;

use support::{operator, process};

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::{
    Api,
    api::{Patch, PatchParams},
};
use operator::{Harness, configmap, ensure_crds, unique};
use process::{OperatorProcess, sample};
use serde_json::json;
use support::{cluster, wait_for};

const DEADLINE: Duration = Duration::from_secs(90);

#[tokio::test]
async fn metrics_show_the_spec_metrics_after_reconciles() {
    let h = Harness::new("metrics").await;
    ensure_crds(&h.client).await;
    let selector = format!("applyset.dev/test={}", h.label);
    let op = OperatorProcess::start(
        cluster().kubeconfig(),
        &["--label-selector", &selector, "--concurrency", "3"],
        "metrics",
    );
    let ns = h.ns.as_str();

    // A conflict first (someone else owns data.k), then a prune.
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(h.client.clone(), ns);
    cms.patch(
        "taken",
        &PatchParams::apply("someone-else"),
        &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "taken"}, "data": {"k": "x"}})),
    )
    .await
    .expect("owned by someone else");
    let set = h.applyset("metrics");
    // "taken" is someone else's object: the member opts in to adopting it.
    let taken = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "taken", "annotations": {"applyset.dev/adopt": "enabled"}},
        "data": {"k": "y"}});
    set.create(json!({"manifests": [configmap("a", json!({"k": "1"})), configmap("b", json!({"k": "1"})), taken]}))
        .await;
    set.wait_ready_reason(Some("False"), "Conflict").await;
    set.patch_spec(json!({"manifests": [configmap("a", json!({"k": "1"})), configmap("b", json!({"k": "1"}))]}))
        .await;
    set.wait_ready().await;
    set.patch_spec(json!({"manifests": [configmap("a", json!({"k": "1"}))]}))
        .await;
    let st = set.wait_ready().await;
    assert_eq!(operator::summary(&st).pruned, 1);

    let text = wait_for("metrics to show the prune", DEADLINE, || async {
        op.metrics()
            .filter(|m| sample(m, "applyset_members_pruned_total").unwrap_or(0.0) >= 1.0)
    })
    .await;
    check_families(&text);
    for (series, at_least) in [
        ("applyset_reconciles_total{result=\"success\"}", 1.0),
        ("applyset_members_applied_total{result=\"created\"}", 2.0),
        ("applyset_members_applied_total{result=\"conflict\"}", 1.0),
        ("applyset_members_pruned_total", 1.0),
        ("applyset_conflicts_total", 1.0),
        ("applyset_managed_members", 1.0),
        (
            "applyset_reconcile_duration_seconds_count{kind=\"ApplySet\"}",
            1.0,
        ),
    ] {
        let v = sample(&text, series)
            .unwrap_or_else(|| panic!("{series} missing from /metrics:\n{text}"));
        assert!(
            v >= at_least,
            "{series} = {v}, expected at least {at_least}"
        );
    }
}

/// The samples of family `name` (a histogram's `_count`, `_sum` and buckets included) whose
/// labels include every one of `labels`.
fn samples<'a>(
    scrape: &'a prometheus_parse::Scrape,
    name: &str,
    labels: &[(&str, &str)],
) -> Vec<&'a prometheus_parse::Sample> {
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == name)
        .filter(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .collect()
}

/// The one value of a counter or gauge series.
fn value(scrape: &prometheus_parse::Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    use prometheus_parse::Value;
    match samples(scrape, name, labels).first().map(|s| &s.value) {
        Some(Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v)) => *v,
        other => panic!("{name}{labels:?}: a counter or gauge expected, found {other:?}"),
    }
}

/// The observation count of a histogram series.
fn observations(scrape: &prometheus_parse::Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    match samples(scrape, name, labels).first().map(|s| &s.value) {
        Some(prometheus_parse::Value::Histogram(buckets)) => {
            buckets.iter().map(|b| b.count).fold(0.0, f64::max)
        }
        other => panic!("{name}{labels:?}: a histogram expected, found {other:?}"),
    }
}

/// issue 21, point 7: `/metrics`, parsed as Prometheus text, has the process family and
/// controller-runtime's work-queue, worker and client families, with their labels, after a
/// run with a conflict (a retry) and a prune.
fn check_families(text: &str) {
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string())))
        .expect("/metrics parses as Prometheus text");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("time")
        .as_secs_f64();
    assert!(value(&scrape, "process_resident_memory_bytes", &[]) > 1e6);
    // The prometheus crate counts whole seconds of CPU: a young process may show 0.
    assert!(value(&scrape, "process_cpu_seconds_total", &[]) >= 0.0);
    assert!(value(&scrape, "process_max_fds", &[]) >= value(&scrape, "process_open_fds", &[]));
    assert!(value(&scrape, "process_open_fds", &[]) >= 3.0);
    let start = value(&scrape, "process_start_time_seconds", &[]);
    assert!(start > now - 3600.0 && start <= now, "started at {start}");
    let q = [("name", "applyset"), ("controller", "applyset")];
    assert!(
        value(&scrape, "workqueue_adds_total", &q) >= 3.0,
        "a create, two changes"
    );
    assert!(
        value(&scrape, "workqueue_retries_total", &q) >= 1.0,
        "the conflict's backoff"
    );
    assert!(observations(&scrape, "workqueue_queue_duration_seconds", &q) >= 3.0);
    assert!(observations(&scrape, "workqueue_work_duration_seconds", &q) >= 3.0);
    assert!(value(&scrape, "workqueue_unfinished_work_seconds", &q) >= 0.0);
    assert!(value(&scrape, "workqueue_longest_running_processor_seconds", &q) >= 0.0);
    let c = [("controller", "applyset")];
    assert!(value(&scrape, "controller_runtime_active_workers", &c) <= 3.0);
    assert_eq!(
        value(&scrape, "controller_runtime_max_concurrent_reconciles", &c),
        3.0,
        "--concurrency"
    );
    assert!(
        observations(
            &scrape,
            "rest_client_request_duration_seconds",
            &[("verb", "PATCH")]
        ) >= 3.0
    );
    let hosts = samples(
        &scrape,
        "rest_client_request_duration_seconds",
        &[("verb", "PATCH")],
    );
    assert!(
        hosts
            .iter()
            .all(|s| s.labels.get("host").is_some_and(|h| !h.is_empty())),
        "labelled by host"
    );
}

async fn holder(leases: &Api<Lease>, name: &str) -> Option<String> {
    leases
        .get_opt(name)
        .await
        .ok()
        .flatten()?
        .spec?
        .holder_identity
}

fn reconciles(op: &OperatorProcess) -> f64 {
    op.metrics()
        .map(|m| {
            m.lines()
                .filter(|l| l.starts_with("applyset_reconciles_total{"))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum()
        })
        .unwrap_or(0.0)
}

#[tokio::test]
async fn only_the_leader_reconciles_and_a_killed_leader_is_replaced_within_the_lease() {
    let h = Harness::new("leader").await;
    ensure_crds(&h.client).await;
    let ns = h.ns.as_str();
    let lease_name = unique("lease");
    let lease_secs = 6u64;
    let selector = format!("applyset.dev/test={}", h.label);
    let args = [
        "--leader-elect",
        "--leader-election-namespace",
        ns,
        "--leader-election-name",
        &lease_name,
        "--lease-duration",
        &lease_secs.to_string(),
        "--label-selector",
        &selector,
    ];
    let mut a = Some(OperatorProcess::start(
        cluster().kubeconfig(),
        &args,
        "leader-a",
    ));
    let b = OperatorProcess::start(cluster().kubeconfig(), &args, "leader-b");
    let leases: Api<Lease> = Api::namespaced(h.client.clone(), ns);

    let first = wait_for("a lease holder", DEADLINE, || async {
        holder(&leases, &lease_name).await
    })
    .await;
    let pid_a = a.as_ref().map(|p| p.pid()).unwrap_or_default();
    let a_leads = first.ends_with(&format!("-{pid_a}"));
    let set = h.applyset("led");
    set.create(json!({"manifests": [configmap("one", json!({"k": "1"}))]}))
        .await;
    set.wait_ready().await;

    let (leader, follower) = if a_leads {
        (a.as_ref().expect("a"), &b)
    } else {
        (&b, a.as_ref().expect("a"))
    };
    // The counter moves when the reconcile returns, after its status write made the set
    // Ready: wait for it rather than read it once.
    wait_for("the leader's reconcile counted", DEADLINE, || async {
        (reconciles(leader) >= 1.0).then_some(())
    })
    .await;
    assert_eq!(
        reconciles(follower),
        0.0,
        "the follower did not reconcile:\n{}",
        follower.log()
    );
    assert_eq!(
        follower.readyz().map(|(c, _)| c),
        Some(200),
        "a standby replica is ready to take over"
    );

    // Kill the leader without a chance to release the lease: the follower takes over once
    // the lease expires, and reconciles.
    let killed = Instant::now();
    if a_leads {
        a = None; // drop kills it (SIGKILL)
    } else {
        // b leads: kill b by dropping a clone-free path: SIGKILL through its pid.
        let _ = std::process::Command::new("kill")
            .arg("-KILL")
            .arg(b.pid().to_string())
            .status();
    }
    let survivor = if a_leads { &b } else { a.as_ref().expect("a") };
    let survivor_pid = survivor.pid();
    let new_holder = wait_for("the follower to take the lease", DEADLINE, || async {
        holder(&leases, &lease_name)
            .await
            .filter(|h| h.ends_with(&format!("-{survivor_pid}")))
    })
    .await;
    let took = killed.elapsed();
    assert!(
        took <= Duration::from_secs(lease_secs * 2 + 2),
        "failover took {took:?} with a {lease_secs}s lease (holder now {new_holder})"
    );
    set.patch_spec(json!({"manifests": [configmap("one", json!({"k": "1"})), configmap("two", json!({"k": "2"}))]}))
        .await;
    let st = set.wait_ready().await;
    assert_eq!(operator::summary(&st).members, 2);
    assert!(
        reconciles(survivor) >= 1.0,
        "the new leader reconciles:\n{}",
        survivor.log()
    );
    drop(a);
}

#[tokio::test]
async fn a_terminated_leader_releases_the_lease_at_once() {
    let h = Harness::new("release").await;
    ensure_crds(&h.client).await;
    let ns = h.ns.as_str();
    let lease_name = unique("lease");
    let selector = format!("applyset.dev/test={}", h.label);
    let args = [
        "--leader-elect",
        "--leader-election-namespace",
        ns,
        "--leader-election-name",
        &lease_name,
        "--lease-duration",
        "60",
        "--label-selector",
        &selector,
    ];
    let mut op = OperatorProcess::start(cluster().kubeconfig(), &args, "release");
    let leases: Api<Lease> = Api::namespaced(h.client.clone(), ns);
    wait_for("the lease to be held", DEADLINE, || async {
        holder(&leases, &lease_name).await
    })
    .await;
    op.terminate();
    let status = wait_for("a graceful exit", DEADLINE, || {
        let r = op.child.try_wait().ok().flatten();
        async move { r }
    })
    .await;
    assert!(status.success(), "SIGTERM exits 0: {status}\n{}", op.log());
    // Released, not left to expire (60 s): nobody holds it now.
    let after = holder(&leases, &lease_name).await;
    assert!(
        after.as_deref().is_none_or(str::is_empty),
        "lease still held by {after:?}"
    );
}

/// The metric names a PromQL expression queries: ours and the ecosystem's.
fn queried_metrics(expr: &str) -> Vec<String> {
    expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .filter(|t| {
            [
                "applyset_",
                "controller_runtime_",
                "workqueue_",
                "rest_client_",
                "process_",
            ]
            .iter()
            .any(|p| t.starts_with(p))
        })
        .map(str::to_string)
        .collect()
}

/// Every metric the chart's Grafana dashboard and PrometheusRule query is exported by a
/// running operator (a dashboard of empty panels, or an alert that can never fire, fails).
#[tokio::test]
async fn every_metric_the_dashboard_and_the_alerts_query_is_exported() {
    let chart = concat!(env!("CARGO_MANIFEST_DIR"), "/charts/applyset-operator");
    let dashboard: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{chart}/files/grafana-dashboard.json"))
            .expect("read the dashboard"),
    )
    .expect("the dashboard is JSON");
    let mut exprs: Vec<String> = dashboard["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .filter_map(|t| t["expr"].as_str().map(str::to_string))
        .collect();
    let helm = std::env::var("APPLYSET_HELM").expect("APPLYSET_HELM (make test sets it)");
    let out = std::process::Command::new(helm)
        .args([
            "template",
            "aso",
            chart,
            "--set",
            "prometheusRule.enabled=true",
        ])
        .args(["--show-only", "templates/prometheusrule.yaml"])
        .output()
        .expect("helm template");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rule: serde_json::Value =
        serde_saphyr::from_str(&String::from_utf8_lossy(&out.stdout)).expect("the rule is YAML");
    let rules = rule["spec"]["groups"][0]["rules"]
        .as_array()
        .expect("rules");
    assert_eq!(rules.len(), 2, "{rules:?}");
    exprs.extend(
        rules
            .iter()
            .filter_map(|r| r["expr"].as_str().map(str::to_string)),
    );
    let mut names: Vec<String> = exprs.iter().flat_map(|e| queried_metrics(e)).collect();
    names.sort();
    names.dedup();
    assert!(names.len() >= 7, "{names:?} from {exprs:?}");

    let h = Harness::new("dash").await;
    ensure_crds(&h.client).await;
    let selector = format!("applyset.dev/test={}", h.label);
    let op = OperatorProcess::start(
        cluster().kubeconfig(),
        &["--label-selector", &selector],
        "dashboard",
    );
    let set = h.applyset("dash");
    set.create(json!({"manifests": [configmap("a", json!({"k": "1"}))]}))
        .await;
    set.wait_ready().await;
    let text = wait_for("applyset_info in /metrics", DEADLINE, || async {
        op.metrics().filter(|m| m.contains("applyset_info{"))
    })
    .await;
    let exported = |name: &str| {
        text.lines()
            .any(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
    };
    let missing: Vec<&String> = names.iter().filter(|n| !exported(n)).collect();
    assert!(missing.is_empty(), "not exported: {missing:?}\n{text}");
    let info = text
        .lines()
        .find(|l| l.starts_with("applyset_info{"))
        .unwrap_or_default();
    for label in [
        "name=\"dash\"",
        "kind=\"ApplySet\"",
        "ready=\"True\"",
        "reason=\"ReconciliationSucceeded\"",
        "suspended=\"false\"",
    ] {
        assert!(info.contains(label), "{label} in {info}");
    }
    assert!(
        text.contains("rest_client_requests_total{code=\"200\",method=\"PATCH\"}"),
        "answers counted by code: {text}"
    );

    // Deleted (its member pruned by its cleanup): its info goes, and nothing stays queued.
    set.delete().await;
    set.wait_gone(DEADLINE).await;
    wait_for("the deleted set to leave the metrics", DEADLINE, || async {
        op.metrics().filter(|m| {
            !m.contains("applyset_info{")
                && sample(m, "workqueue_depth{name=\"applyset\"}") == Some(0.0)
        })
    })
    .await;
}
