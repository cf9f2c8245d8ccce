//! Every per-set map forgets a deleted set: the operator runs as a process against the real
//! API server; N sets that each fail once (a source that does not exist; one in ten acting as
//! a ServiceAccount of its own), and one in fifty more that apply a member and wait for its
//! health (so that the member, health and kind maps hold them too, and their deletion goes
//! through the cleanup), are created, then deleted, and every map's size
//! (`applyset_tracked_sets{map}`, and the impersonating clients) returns to where it was. On
//! main the retry backoff kept an entry per deleted set for ever.
//!
//! N is `APPLYSET_FORGET_SETS`: by default 5,000 (86 s on a shared 2-core machine, debug
//! build); 10,000 ran by hand in 200 s (196 s from the first create until every map was back
//! at 0: 39 s of creates, every set failed once after 156 s, deleted and forgotten in 40 s).

mod support;

use support::{operator, process};

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use futures::StreamExt as _;
use operator::{Harness, configmap};
use process::{OperatorProcess, sample};
use serde_json::json;
use support::{cluster, wait_for};

/// Every `applyset_tracked_sets{map="…"}` series, by map, and the impersonating clients.
fn tracked(op: &OperatorProcess) -> Option<BTreeMap<String, f64>> {
    let text = op.metrics()?;
    let prefix = "applyset_tracked_sets{map=\"";
    let mut out: BTreeMap<String, f64> = text
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(prefix)?;
            let (map, value) = rest.split_once("\"} ")?;
            Some((map.to_string(), value.trim().parse().ok()?))
        })
        .collect();
    out.insert(
        "impersonation_clients".into(),
        sample(&text, "applyset_impersonation_clients")?,
    );
    (out.len() > 1).then_some(out)
}

/// Runs `f(i)` for i in 0..n, `width` at a time.
async fn each<F, Fut>(n: usize, width: usize, f: F)
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    futures::stream::iter((0..n).map(f))
        .buffer_unordered(width)
        .collect::<Vec<()>>()
        .await;
}

#[tokio::test]
async fn every_per_set_map_forgets_deleted_sets() {
    let n: usize = std::env::var("APPLYSET_FORGET_SETS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5_000);
    let h = Harness::new("forget").await;
    let selector = format!("applyset.dev/test={}", h.label);
    let op = OperatorProcess::start(
        cluster().kubeconfig(),
        &["--label-selector", &selector],
        "forget",
    );
    let before = wait_for(
        "the operator's metrics",
        Duration::from_secs(60),
        || async { tracked(&op) },
    )
    .await;
    eprintln!("before: {before:?}");

    let t0 = Instant::now();
    let h = &h;
    each(n, 32, |i| async move {
        // A ConfigMap source that does not exist: SourceFailed, retried only after an hour.
        let mut spec = json!({"interval": "1h", "retryInterval": "1h",
            "sources": [{"configMap": {"name": "missing"}}]});
        if i % 10 == 0 {
            spec["serviceAccountName"] = json!(format!("sa-{i}"));
        }
        h.applyset(&format!("s-{i}")).create(spec).await;
    })
    .await;
    let applied = n / 50;
    each(applied, 32, |i| async move {
        let spec = json!({"interval": "1h", "retryInterval": "1h", "wait": true,
            "manifests": [configmap(&format!("cm-{i}"), json!({"k": "v"}))]});
        h.applyset(&format!("a-{i}")).create(spec).await;
    })
    .await;
    eprintln!("{n} + {applied} sets created in {:?}", t0.elapsed());
    let backoff = |m: &BTreeMap<String, f64>| m.get("backoff").copied().unwrap_or(0.0);
    let base = backoff(&before);
    let during = wait_for(
        "every set to fail once",
        Duration::from_secs(600),
        || async {
            let parents = |m: &BTreeMap<String, f64>| m.get("member_parents").copied();
            tracked(&op)
                .filter(|m| backoff(m) >= base + n as f64 && parents(m) >= Some(applied as f64))
        },
    )
    .await;
    eprintln!(
        "{n} sets failed once, {:?} from the start: {during:?}",
        t0.elapsed()
    );
    assert!(
        during.get("identities").copied().unwrap_or(0.0) >= (n / 10) as f64,
        "the sets acting as ServiceAccounts are known: {during:?}"
    );

    let t1 = Instant::now();
    each(n, 32, |i| async move {
        h.applyset(&format!("s-{i}")).delete().await;
    })
    .await;
    each(applied, 32, |i| async move {
        h.applyset(&format!("a-{i}")).delete().await;
    })
    .await;
    // Polled until every map is back where it was, or the deadline: then the last sizes
    // seen are compared, naming the maps that kept something.
    let deadline = Instant::now() + Duration::from_secs(60 + n as u64 / 50);
    let mut after = tracked(&op);
    while after.as_ref() != Some(&before) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
        after = tracked(&op).or(after);
    }
    assert_eq!(
        after.as_ref(),
        Some(&before),
        "the maps after the deletions"
    );
    eprintln!(
        "{n} sets deleted and forgotten in {:?} ({:?} in all): {after:?}",
        t1.elapsed(),
        t0.elapsed()
    );
}
