//! Kustomize builds join the fair share (docs/security.md, the bounds table): the operator
//! runs as a process against the real API server, building overlays served on loopback with
//! a `kustomize` that takes 60 s for one namespace's overlays (a wrapper that sleeps, then
//! runs the pinned kustomize), and another namespace's overlay set must stay prompt. A build's
//! wait for a slot counts toward its sources' deadline, and the message says so.

mod support;

use support::{operator, process, servers};

use std::{
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use operator::{Harness, Parent};
use process::{OperatorProcess, sample};
use serde_json::json;
use servers::{Entry, FileServer, tar_gz};
use support::{cluster, kustomize_binary, wait_for};

const DEADLINE: Duration = Duration::from_secs(90);
/// How long the victim's create-to-Ready may take while another namespace's builds run.
const PROMPT: Duration = Duration::from_secs(5);

/// A `kustomize` that sleeps `seconds` before building a directory named `slow…` (leaving a
/// file in `marks` for each such build it starts), then runs the pinned kustomize. The build's
/// environment is empty (no PATH): every path is absolute.
fn slow_kustomize(dir: &Path, marks: &Path, seconds: u32) -> PathBuf {
    let script = dir.join("kustomize");
    let text = format!(
        "#!/bin/sh\ncase \"$2\" in\n  slow*) : > \"{marks}/$$\"; /bin/sleep {seconds} ;;\nesac\nexec {kustomize} \"$@\"\n",
        marks = marks.display(),
        kustomize = kustomize_binary().display(),
    );
    std::fs::write(&script, text).expect("script");
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    script
}

/// A bundle whose directory `dir` is an overlay of one ConfigMap `name`.
fn overlay(dir: &str, name: &str) -> Vec<u8> {
    let kustomization = "resources: [cm.yaml]\n".to_string();
    let cm = format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  k: v\n");
    tar_gz(&[
        Entry::File(
            &format!("{dir}/kustomization.yaml"),
            kustomization.as_bytes(),
        ),
        Entry::File(&format!("{dir}/cm.yaml"), cm.as_bytes()),
    ])
}

/// Slow builds started so far (the wrapper's marks).
fn started(marks: &Path) -> usize {
    std::fs::read_dir(marks).map_or(0, |d| d.count())
}

fn gauge(op: &OperatorProcess, name: &str) -> Option<f64> {
    op.metrics().and_then(|m| sample(&m, name))
}

/// ApplySet `name` in namespace `ns`, labelled for this test's operator.
fn set_in(h: &Harness, ns: &str, name: &str) -> Parent {
    Parent {
        namespace: Some(ns.to_string()),
        ..h.applyset(name)
    }
}

/// The operator for `h`, building with `kustomize`; `extra` flags added.
fn start(h: &Harness, kustomize: &Path, extra: &[&str], log: &str) -> OperatorProcess {
    let selector = format!("applyset.dev/test={}", h.label);
    let binary = kustomize.display().to_string();
    let mut args = vec![
        "--label-selector",
        &selector,
        "--source-allow-cidrs",
        "127.0.0.0/8",
        "--kustomize-binary",
        &binary,
    ];
    args.extend_from_slice(extra);
    OperatorProcess::start(cluster().kubeconfig(), &args, log)
}

/// Attack 5: eight sets in one namespace whose builds take 60 s each do not hold up an
/// overlay set of another namespace: it is Ready within 5 s (on main: 115 s, the build pool
/// being first come, first served, the attacker's builds held both slots).
#[tokio::test]
async fn a_namespace_of_slow_builds_does_not_hold_up_another_namespaces_overlay() {
    let h = Harness::new("fb-slow").await;
    let victim_ns = h.extra_namespace("fb-victim").await;
    let scratch = tempfile::tempdir().expect("tempdir");
    let marks = scratch.path().join("marks");
    std::fs::create_dir(&marks).expect("marks");
    let kustomize = slow_kustomize(scratch.path(), &marks, 60);
    let http = FileServer::start(None).await;
    let op = start(&h, &kustomize, &[], "fair-builds");

    for i in 0..8 {
        let path = format!("/slow-{i}.tgz");
        http.put(&path, overlay("slow", &format!("slow-{i}")));
        h.applyset(&format!("slow-{i}"))
            .create(json!({"sources": [{"http": {"url": http.url(&path), "path": "slow"}}]}))
            .await;
    }
    // The attacker's builds take what they may: every slot but the last (on main, both).
    wait_for(
        "the attacker's builds to run and queue",
        DEADLINE,
        || async {
            let queued = gauge(&op, "applyset_kustomize_builds_waiting").unwrap_or(0.0) >= 1.0;
            ((started(&marks) >= 1 && queued) || started(&marks) >= 2).then_some(())
        },
    )
    .await;

    http.put("/fast.tgz", overlay("fast", "fast"));
    let victim = set_in(&h, &victim_ns, "victim");
    let t0 = Instant::now();
    victim
        .create(json!({"sources": [{"http": {"url": http.url("/fast.tgz"), "path": "fast"}}]}))
        .await;
    // A deadline longer than the attacker's builds, so that a slow victim is measured.
    victim
        .wait_until("the victim Ready", Duration::from_secs(180), |_, st| {
            (operator::condition(st?, "Ready")?.status == "True").then_some(())
        })
        .await;
    let took = t0.elapsed();
    eprintln!("the victim's overlay set became Ready in {took:?}");
    assert!(took <= PROMPT, "the victim became Ready in {took:?}");
    // Meanwhile the attacker's builds still queue (one of theirs at a time).
    assert!(
        started(&marks) <= 2,
        "{} slow builds started",
        started(&marks)
    );
    assert_eq!(
        gauge(&op, "applyset_kustomize_build_slots_in_use"),
        Some(1.0)
    );
    let waiting = gauge(&op, "applyset_kustomize_builds_waiting").unwrap_or(0.0);
    assert!(waiting >= 6.0, "{waiting} of the attacker's builds wait");
}

/// A loopback HTTP server that answers every request with `body` after `delay`.
async fn delayed(body: Vec<u8>, delay: Duration) -> std::net::SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let body = std::sync::Arc::new(body);
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let body = body.clone();
            tokio::spawn(async move {
                let mut req = Vec::new();
                let mut buf = [0u8; 1024];
                while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => req.extend_from_slice(&buf[..n]),
                    }
                }
                tokio::time::sleep(delay).await;
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = conn.write_all(head.as_bytes()).await;
                let _ = conn.write_all(&body).await;
            });
        }
    });
    addr
}

/// The wait for a build slot counts toward the set's sources' deadline (`--source-timeout`),
/// and the set's message says it waited for one. The set's source arrives after 12 s of its
/// 20 s; meanwhile two builds of its namespace asked for slots (60 s each, cut at their own
/// deadlines): one runs, and the other slot is kept for other namespaces, so the set's build
/// waits, past its deadline. On main it got a slot when the others' builds timed out (15 s,
/// their share of the deadline) and was Ready: nobody held a slot for longer than that.
#[tokio::test]
async fn a_build_that_waited_past_the_source_deadline_fails_saying_so() {
    let h = Harness::new("fb-deadline").await;
    let scratch = tempfile::tempdir().expect("tempdir");
    let marks = scratch.path().join("marks");
    std::fs::create_dir(&marks).expect("marks");
    let kustomize = slow_kustomize(scratch.path(), &marks, 60);
    let op = start(
        &h,
        &kustomize,
        &["--source-timeout", "20"],
        "fair-builds-deadline",
    );

    // First, so that its deadline is the earliest; its build asks for a slot after 12 s,
    // once its namespace's slow builds have asked.
    let late = delayed(overlay("fast", "late"), Duration::from_secs(12)).await;
    let waiter = h.applyset("waiter");
    waiter
        .create(json!({"sources": [{"http": {"url": format!("http://{late}/late.tgz"), "path": "fast"}}]}))
        .await;
    let http = FileServer::start(None).await;
    for i in 0..2 {
        let path = format!("/slow-{i}.tgz");
        http.put(&path, overlay("slow", &format!("slow-{i}")));
        h.applyset(&format!("slow-{i}"))
            .create(json!({"sources": [{"http": {"url": http.url(&path), "path": "slow"}}]}))
            .await;
    }
    let st = waiter
        .wait_ready_reason_within(Some("False"), "SourceFailed", Duration::from_secs(60))
        .await;
    let msg = operator::ready(&st).message.clone();
    eprintln!("{msg}");
    for part in [
        "kustomize build of fast: waited",
        "for one of the 2 kustomize build slots (--kustomize-concurrency",
        "--source-timeout",
    ] {
        assert!(msg.contains(part), "{part:?} not in {msg}");
    }
    assert!(started(&marks) >= 1, "the slow builds ran");
    drop(op);
}
