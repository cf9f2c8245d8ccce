//! The ui line of `make bench`: `kubectl applyset ui` serving the sets page with N ApplySets
//! present (10,000 by default), warm — its watch cache filled. The sets are made directly
//! (the Flux shape's four members inline, states written to their status subresource: mostly
//! Ready, some failing, waiting on another set, or suspended), not reconciled: the ui's cost
//! does not depend on who wrote the status, and the operator's own cost is measured above.
//! Then: the time until `/readyz` says the cache has listed them all, five `GET /` (the first
//! page of 100 rows and the summary): time to first byte (p50, max) and bytes sent, and the
//! ui process's resident memory (VmRSS now, VmHWM its peak) from /proc.

use std::{
    path::Path,
    process::Stdio,
    time::{Duration, Instant},
};

use futures::{StreamExt, TryStreamExt, stream};
use kube::{
    Api, Client,
    api::{DynamicObject, Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};
use tokio::{
    io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader},
    net::TcpStream,
    process::Command,
};

use crate::{Res, applysets, create_namespace, flux_members, operator::status_mib};

/// GETs of the sets page measured.
const GETS: usize = 5;
/// How long the ui may take to start and fill its cache.
const FILL: Duration = Duration::from_secs(600);

pub struct UiResult {
    pub sets: usize,
    /// From the ui's start until `/readyz` answers (every set listed), seconds.
    pub filled: f64,
    /// Time to first byte of each `GET /`, milliseconds.
    pub ttfb_ms: Vec<f64>,
    /// Bytes sent for one `GET /` (head and body).
    pub bytes: usize,
    pub rss_mib: f64,
    pub peak_rss_mib: f64,
}

impl UiResult {
    pub fn p50(&self) -> f64 {
        crate::median(self.ttfb_ms.clone())
    }

    pub fn max(&self) -> f64 {
        self.ttfb_ms.iter().copied().fold(f64::NAN, f64::max)
    }
}

/// Makes `n` ApplySets in namespace `ui-<n>` and measures the ui serving them.
pub async fn run(client: &Client, plugin: &Path, kubeconfig: &Path, n: usize) -> Res<UiResult> {
    let ns = format!("ui-{n}");
    create_namespace(client, &ns).await?;
    let api = applysets(client, &ns);
    eprintln!("bench: ui: creating {n} ApplySets");
    stream::iter(0..n)
        .map(|i| make_set(&api, &ns, i))
        .buffer_unordered(32)
        .try_collect::<Vec<()>>()
        .await?;
    eprintln!("bench: ui: measuring the sets page");
    measure(plugin, kubeconfig, n).await
}

/// The state of set `i`: every 50th failing, every 61st waiting on the set before it, every
/// 97th suspended, the rest Ready.
fn state_of(i: usize) -> &'static str {
    if i % 50 == 1 {
        "failing"
    } else if i % 61 == 2 {
        "waiting"
    } else if i % 97 == 3 {
        "suspended"
    } else {
        "ready"
    }
}

async fn make_set(api: &Api<DynamicObject>, ns: &str, i: usize) -> Res<()> {
    let name = format!("set-{i:05}");
    let state = state_of(i);
    let mut spec = json!({"manifests": flux_members(&format!("s{i:05}-"))});
    if state == "waiting" {
        spec["dependsOn"] = json!([{"name": format!("set-{:05}", i.saturating_sub(1))}]);
    }
    if state == "suspended" {
        spec["suspend"] = json!(true);
    }
    let obj: DynamicObject = serde_json::from_value(json!({"apiVersion": "applyset.dev/v1alpha1",
        "kind": "ApplySet", "metadata": {"name": name, "namespace": ns}, "spec": spec}))
    .map_err(|e| e.to_string())?;
    api.create(&PostParams::default(), &obj)
        .await
        .map_err(|e| format!("create {ns}/{name}: {e}"))?;
    let status = json!({"status": status_of(ns, i, state)});
    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(status))
        .await
        .map_err(|e| format!("status of {ns}/{name}: {e}"))?;
    Ok(())
}

fn status_of(ns: &str, i: usize, state: &str) -> Value {
    let (status, reason, message) = match state {
        "failing" => (
            "False",
            "ApplyFailed",
            "Deployment s-app: the API server refused the apply".to_string(),
        ),
        "waiting" => (
            "False",
            "DependencyNotReady",
            format!(
                "ApplySet {ns}/set-{i:05}: dependency ApplySet {ns}/set-{:05} is not ready: Ready=False (ApplyFailed); nothing is applied until it is ready",
                i.saturating_sub(1)
            ),
        ),
        _ => (
            "True",
            "ReconciliationSucceeded",
            "applied 4 members".to_string(),
        ),
    };
    json!({"observedGeneration": 1,
        "conditions": [{"type": "Ready", "status": status, "reason": reason, "message": message,
            "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}],
        "summary": {"members": 4, "created": 0, "configured": 0, "unchanged": 4, "pruned": 0,
            "failed": 0, "conflicts": 0, "retained": 0}})
}

/// Starts the ui, waits until its cache holds the `n` sets, measures `GET /` and its memory.
async fn measure(plugin: &Path, kubeconfig: &Path, n: usize) -> Res<UiResult> {
    let start = Instant::now();
    let mut child = Command::new(plugin)
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .args(["ui", "--port", "0"])
        .env_remove("KUBECONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("start {}: {e}", plugin.display()))?;
    let stdout = child.stdout.take().ok_or("the ui's stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let line = tokio::time::timeout(FILL, lines.next_line())
        .await
        .map_err(|_| "the ui printed no URL".to_string())?
        .map_err(|e| e.to_string())?
        .ok_or("the ui exited before printing its URL")?;
    // Keep reading its stdout so that it never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let (port, token) = parse_url(&line).ok_or(format!("not the ui's URL: {line:?}"))?;
    let (status, head, _) = get(port, &format!("/login?token={token}"), "").await?;
    if status != 200 {
        return Err(format!("login answered {status}"));
    }
    let cookie = head
        .lines()
        .find_map(|l| {
            l.strip_prefix("set-cookie: ")
                .or(l.strip_prefix("Set-Cookie: "))
        })
        .and_then(|c| c.split(';').next())
        .ok_or("login set no cookie")?
        .to_string();
    loop {
        let (status, _, body) = get(port, "/readyz", &cookie).await?;
        let listed = body
            .trim()
            .strip_prefix("ready ")
            .and_then(|c| c.parse::<usize>().ok());
        if status == 200 && listed.is_none_or(|c| c >= n) {
            break;
        }
        if start.elapsed() > FILL {
            return Err(format!(
                "the ui's cache did not fill within {FILL:?}: {status} {body}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let filled = start.elapsed().as_secs_f64();
    let mut ttfb_ms = Vec::new();
    let mut bytes = 0;
    for _ in 0..GETS {
        let (status, ttfb, size) = timed_get(port, "/", &cookie).await?;
        if status != 200 {
            return Err(format!("GET / answered {status}"));
        }
        ttfb_ms.push(ttfb.as_secs_f64() * 1000.0);
        bytes = size;
    }
    let pid = child.id().ok_or("the ui exited")?;
    let result = UiResult {
        sets: n,
        filled,
        ttfb_ms,
        bytes,
        rss_mib: status_mib(pid, "VmRSS"),
        peak_rss_mib: status_mib(pid, "VmHWM"),
    };
    let _ = child.kill().await;
    Ok(result)
}

/// `(port, token)` of `kubectl applyset ui: http://127.0.0.1:PORT/login?token=TOKEN`.
fn parse_url(line: &str) -> Option<(u16, String)> {
    let rest = line.strip_prefix("kubectl applyset ui: http://127.0.0.1:")?;
    let (port, token) = rest.split_once("/login?token=")?;
    Some((port.parse().ok()?, token.to_string()))
}

async fn send(port: u16, path: &str, cookie: &str) -> Res<TcpStream> {
    let mut s = TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| format!("connect to the ui: {e}"))?;
    let cookie = match cookie {
        "" => String::new(),
        c => format!("Cookie: {c}\r\n"),
    };
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{cookie}Connection: close\r\n\r\n"
    );
    s.write_all(req.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    Ok(s)
}

/// `(status, head, body)` of a GET (the body not de-chunked: only its text matters here).
async fn get(port: u16, path: &str, cookie: &str) -> Res<(u16, String, String)> {
    let mut s = send(port, path, cookie).await?;
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut buf))
        .await
        .map_err(|_| format!("GET {path}: no answer"))?
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or(format!("GET {path}: not HTTP: {head}"))?;
    Ok((status, head.to_string(), body.to_string()))
}

/// `(status, time to first byte, bytes sent)` of a GET.
async fn timed_get(port: u16, path: &str, cookie: &str) -> Res<(u16, Duration, usize)> {
    let t = Instant::now();
    let mut s = send(port, path, cookie).await?;
    let mut first = [0u8; 1];
    let n = s.read(&mut first).await.map_err(|e| e.to_string())?;
    let ttfb = t.elapsed();
    if n == 0 {
        return Err(format!("GET {path}: closed without an answer"));
    }
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).await.map_err(|e| e.to_string())?;
    let mut all = first.to_vec();
    all.extend_from_slice(&rest);
    let text = String::from_utf8_lossy(&all);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Ok((status, ttfb, all.len()))
}

/// The report's section (Markdown) and JSON.
pub fn report(md: &mut String, r: &UiResult) -> Value {
    md.push_str(&format!(
        "\n## kubectl applyset ui: the sets page with {} ApplySets, warm\n\n",
        r.sets
    ));
    md.push_str("The sets made directly with their statuses (mostly Ready; every 50th failing, every 61st waiting on another set, every 97th suspended), the Flux shape's four members inline. `GET /` (the first page, 100 rows, and the summary) five times once `/readyz` says every set is cached.\n\n");
    md.push_str("| sets | cache filled from start (s) | time to first byte p50 (ms) | max (ms) | bytes sent | ui RSS (MiB) | ui peak RSS (MiB) |\n|---|---|---|---|---|---|---|\n");
    md.push_str(&format!(
        "| {} sets | {:.1} | {:.1} | {:.1} | {} | {:.1} | {:.1} |\n",
        r.sets,
        r.filled,
        r.p50(),
        r.max(),
        r.bytes,
        r.rss_mib,
        r.peak_rss_mib
    ));
    json!({"sets": r.sets, "cache_filled_seconds": r.filled, "ttfb_ms": r.ttfb_ms,
        "ttfb_p50_ms": r.p50(), "ttfb_max_ms": r.max(), "bytes": r.bytes,
        "rss_mib": r.rss_mib, "peak_rss_mib": r.peak_rss_mib})
}
