//! One tenant cannot starve the shared operator (docs/security.md, the bounds table): the operator runs as a process
//! (its metrics are real) against the real API server; an attacker's sets in one namespace
//! try to make it hold resources, and a victim set in another namespace must stay prompt.
//! After the attacker's sets are gone, what the operator holds returns to where it was.

mod support;

use support::{operator, process};

use std::time::{Duration, Instant};

use operator::{Harness, Parent, configmap, create_rbac, secret, unique};
use process::{OperatorProcess, sample};
use serde_json::{Value, json};
use support::{cluster, wait_for};

const DEADLINE: Duration = Duration::from_secs(90);
/// How long the victim's create-to-Ready and an edit's effect may take under attack.
const PROMPT: Duration = Duration::from_secs(5);

/// A ServiceAccount `name` in `ns` that may manage ConfigMaps and Secrets there, and nothing
/// else (no CustomResourceDefinitions).
async fn deployer(h: &Harness, ns: &str, name: &str) {
    let rule = json!({"apiGroups": [""], "resources": ["configmaps", "secrets"],
        "verbs": ["get", "list", "watch", "create", "patch", "update", "delete"]});
    create_rbac(
        h,
        ns,
        &[
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": {"name": name}, "rules": [rule]}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}]}),
        ],
    )
    .await;
}

/// A CRD of an invented kind `kind` in group `group`, and one object of it.
fn invented_kind(group: &str, kind: &str) -> [Value; 2] {
    let plural = format!("{}s", kind.to_ascii_lowercase());
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {"group": group, "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": kind.to_ascii_lowercase()},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object",
                    "x-kubernetes-preserve-unknown-fields": true}}}]}});
    let obj = json!({"apiVersion": format!("{group}/v1"), "kind": kind,
        "metadata": {"name": "x"}, "spec": {}});
    [crd, obj]
}

/// A handle of ApplySet `name` in namespace `ns` (labelled for this test's operator).
fn set_in(h: &Harness, ns: &str, name: &str) -> Parent {
    Parent {
        namespace: Some(ns.to_string()),
        ..h.applyset(name)
    }
}

fn gauge(op: &OperatorProcess, name: &str) -> Option<f64> {
    op.metrics().and_then(|m| sample(&m, name))
}

/// Requests the operator sent that the API server answered with 404, by any method.
fn not_found_answers(op: &OperatorProcess) -> f64 {
    op.metrics()
        .map(|m| {
            m.lines()
                .filter(|l| l.starts_with("rest_client_requests_total{code=\"404\""))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum()
        })
        .unwrap_or(0.0)
}

/// Finding 1: a set that declares kinds of its own (CRDs its account may not create) and
/// members of them makes the operator start no watch for them (on main, one watch per
/// invented kind LISTed a resource that does not exist, answered 404, for ever); the kinds
/// a victim declares are watched while it declares them and no longer after; once the
/// attacker's set is deleted, the operator sends no request at all for its kinds.
#[tokio::test]
async fn watches_start_only_for_accepted_kinds_and_end_when_no_set_declares_them() {
    let h = Harness::new("fair-watch").await;
    let victim_ns = h.extra_namespace("fair-victim").await;
    deployer(&h, &h.ns, "deployer").await;
    let selector = format!("applyset.dev/test={}", h.label);
    let op = OperatorProcess::start(
        cluster().kubeconfig(),
        &["--label-selector", &selector],
        "fair-watches",
    );

    // The attacker: 8 invented kinds, and a ConfigMap it may write.
    let group = format!("{}.attack.example.com", unique("g"));
    let mut manifests: Vec<Value> = (0..8)
        .flat_map(|i| invented_kind(&group, &format!("Invented{i}")))
        .collect();
    manifests.push(configmap("allowed", json!({"k": "1"})));
    let attacker = h.applyset("attacker");
    attacker
        .create(json!({"serviceAccountName": "deployer", "manifests": manifests}))
        .await;
    attacker
        .wait_ready_reason(Some("False"), "ApplyFailed")
        .await;

    // The victim, in another namespace: prompt while the attack goes on.
    let victim = set_in(&h, &victim_ns, "victim");
    let t0 = Instant::now();
    victim
        .create(json!({"manifests": [configmap("v", json!({"k": "1"})), secret("s")]}))
        .await;
    victim.wait_ready().await;
    let took = t0.elapsed();
    assert!(took <= PROMPT, "the victim became Ready in {took:?}");

    // Watched: the ConfigMap kind and Secret kind (accepted applies), none of the invented
    // ones (their CRDs were refused, their objects never accepted).
    wait_for("two member watches", DEADLINE, || async {
        (gauge(&op, "applyset_member_watches") == Some(2.0)).then_some(())
    })
    .await;

    // An edit drops the Secret kind: its watch ends after the grace period.
    let t0 = Instant::now();
    victim
        .patch_spec(json!({"manifests": [configmap("v", json!({"k": "2"}))]}))
        .await;
    let cms: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(h.client.clone(), &victim_ns);
    wait_for("the victim's edit", PROMPT, || async {
        let cm = cms.get("v").await.ok()?;
        (cm.data?.get("k")? == "2").then_some(())
    })
    .await;
    assert!(t0.elapsed() <= PROMPT);
    wait_for("the Secret kind's watch to end", DEADLINE, || async {
        (gauge(&op, "applyset_member_watches") == Some(1.0)).then_some(())
    })
    .await;

    // The attacker's set deleted: nothing the operator sends is about its kinds. (On main,
    // each invented kind's watch went on LISTing, answered 404, several times a second.)
    // A request already in flight when the set went (its last reconcile's) may still be
    // answered 404 once; a watch that goes on LISTing is answered 404 in every window. So
    // the effect waited for is a 5 s window without a 404 answer, within the deadline.
    attacker.delete().await;
    attacker.wait_gone(DEADLINE).await;
    let window = Duration::from_secs(5);
    let deadline = Instant::now() + DEADLINE;
    let mut before = not_found_answers(&op);
    loop {
        tokio::time::sleep(window).await;
        let after = not_found_answers(&op);
        if after == before {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "404 answers go on after the attacker's set was deleted: {} in the last {window:?}",
            after - before
        );
        before = after;
    }
    assert_eq!(gauge(&op, "applyset_member_watches"), Some(1.0));
}

/// Finding 5: a set that cycles `serviceAccountName` through fresh names makes the operator
/// keep at most `--max-impersonation-clients` impersonating clients (on main, one per name
/// for ever); since the clients of users no set acts as are dropped, only its current one.
#[tokio::test]
async fn impersonating_clients_are_bounded_whatever_names_a_set_cycles_through() {
    let h = Harness::new("fair-imp").await;
    let selector = format!("applyset.dev/test={}", h.label);
    let op = OperatorProcess::start(
        cluster().kubeconfig(),
        &[
            "--label-selector",
            &selector,
            "--max-impersonation-clients",
            "3",
        ],
        "fair-impersonation",
    );
    let attacker = h.applyset("cycler");
    attacker
        .create(
            json!({"serviceAccountName": "sa-0", "manifests": [configmap("a", json!({"k": "1"}))]}),
        )
        .await;
    for i in 0..8 {
        let name = format!("sa-{i}");
        attacker
            .patch_spec(json!({"serviceAccountName": name}))
            .await;
        attacker
            .wait_until(&format!("the reconcile as {name}"), DEADLINE, |_, st| {
                let msg = &operator::condition(st?, "Ready")?.message;
                msg.contains(&format!(":{name}")).then_some(())
            })
            .await;
    }
    // The client of a user no set acts as any more is dropped (the cap bounds the users sets
    // act as at once): one is kept, the cycler's current one.
    assert_eq!(gauge(&op, "applyset_impersonation_clients"), Some(1.0));
}

/// Finding 9: a member annotated `applyset.dev/force: enabled` whose immutable field changes
/// is deleted and re-created only if prune could delete it: an adopted CRD (which would take
/// every object of its kind with it) is not, and the member fails saying why. On main it was
/// deleted (the check was only that the set owns the object, which adoption makes true).
#[tokio::test]
async fn a_force_recreate_never_deletes_an_adopted_crd() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let h = Harness::new("fair-force").await;
    let op = h.start_operator();
    let group = format!("{}.force.example.com", unique("g"));
    let [crd, _] = invented_kind(&group, "Gadget");
    let crds: kube::Api<CustomResourceDefinition> = kube::Api::all(h.client.clone());
    let existing: CustomResourceDefinition = serde_json::from_value(crd.clone()).expect("a CRD");
    let uid = crds
        .create(&kube::api::PostParams::default(), &existing)
        .await
        .expect("someone else's CRD")
        .metadata
        .uid;
    let name = format!("gadgets.{group}");

    let mut declared = crd.clone();
    declared["metadata"]["annotations"] =
        json!({"applyset.dev/adopt": "enabled", "applyset.dev/force": "enabled"});
    let set = h.cluster_applyset(&unique("force"));
    // spec.force: the CRD's creator owns its fields (a conflict otherwise).
    set.create(json!({"force": true, "manifests": [declared.clone()]}))
        .await;
    set.wait_ready().await;
    // The scope of a CRD is immutable: the change needs a delete and re-create.
    declared["spec"]["scope"] = json!("Cluster");
    set.patch_spec(json!({"force": true, "manifests": [declared]}))
        .await;
    let st = set.wait_ready_reason(Some("False"), "ApplyFailed").await;
    let msg = operator::ready(&st).message.clone();
    assert!(
        msg.contains("not deleted") && msg.contains("adopted"),
        "says why: {msg}"
    );
    let live = crds
        .get(&name)
        .await
        .expect("the adopted CRD is still there");
    assert_eq!(live.metadata.uid, uid, "and was never re-created");
    set.patch_spec(json!({"deletionPolicy": "Orphan"})).await;
    set.delete().await;
    set.wait_gone(DEADLINE).await;
    operator::stop(op).await;
    let _ = crds.delete(&name, &Default::default()).await;
}

/// Finding 8: the deletion order (a set being deleted waits for its dependents being deleted
/// to delete their members first) counts only dependencies the gate allows. A tenant's set
/// that names another namespace's set in `dependsOn` (refused: its account may not read it)
/// and whose own deletion hangs (its account may not delete its members) does not hold up
/// that set's deletion. On main the victim waited for it, up to its spec.timeout (5 min).
#[tokio::test]
async fn a_refused_dependency_does_not_hold_another_namespaces_deletion() {
    let h = Harness::new("fair-del").await;
    let victim_ns = h.extra_namespace("fair-delv").await;
    // The attacker's account may write ConfigMaps but not delete them.
    let rule = json!({"apiGroups": [""], "resources": ["configmaps"],
        "verbs": ["get", "list", "watch", "create", "patch", "update"]});
    create_rbac(
        &h,
        &h.ns,
        &[
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "nodelete"}}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": {"name": "nodelete"}, "rules": [rule]}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": "nodelete"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "nodelete"},
                "subjects": [{"kind": "ServiceAccount", "name": "nodelete", "namespace": h.ns}]}),
        ],
    )
    .await;
    let mut config = h.config();
    config.watch_namespace = None;
    let op = applyset_operator::controller::Operator::start(h.client.clone(), config);

    let victim = set_in(&h, &victim_ns, "victim");
    victim
        .create(json!({"manifests": [configmap("v", json!({"k": "1"}))]}))
        .await;
    victim.wait_ready().await;
    let attacker = h.applyset("holder");
    attacker
        .create(json!({"serviceAccountName": "nodelete",
            "manifests": [configmap("a", json!({"k": "1"}))]}))
        .await;
    attacker.wait_ready().await;
    attacker
        .patch_spec(json!({"dependsOn": [{"name": "victim", "namespace": victim_ns}]}))
        .await;
    attacker
        .wait_ready_reason(Some("False"), "ValidationFailed")
        .await;
    // The attacker's deletion hangs: its cleanup may not delete its ConfigMap.
    attacker.delete().await;
    attacker
        .wait_ready_reason(Some("False"), "PruneFailed")
        .await;

    let t0 = Instant::now();
    victim.delete().await;
    victim.wait_gone(Duration::from_secs(30)).await;
    eprintln!("the victim was deleted in {:?}", t0.elapsed());

    attacker
        .patch_spec(json!({"deletionPolicy": "Orphan"}))
        .await;
    attacker.wait_gone(DEADLINE).await;
    operator::stop(op).await;
}

/// A loopback HTTP server for the source attacks: `/slow…` announces a 60 MB body and sends
/// one byte every half second, `/drip…` announces 100 kB and sends one byte a second (tarpits
/// within `--source-timeout`); anything else answers a small ConfigMap at once. Counts the
/// slow requests (both tarpits) it received.
async fn tarpit() -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    use std::sync::{Arc, atomic::AtomicUsize};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let slow = Arc::new(AtomicUsize::new(0));
    let counted = slow.clone();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let counted = counted.clone();
            tokio::spawn(async move {
                let mut req = Vec::new();
                let mut buf = [0u8; 1024];
                while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => req.extend_from_slice(&buf[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&req);
                let path = head.split_whitespace().nth(1).unwrap_or_default();
                let trickle = if path.starts_with("/slow") {
                    Some((60_000_000, Duration::from_millis(500)))
                } else if path.starts_with("/drip") {
                    Some((100_000, Duration::from_secs(1)))
                } else {
                    None
                };
                if let Some((length, every)) = trickle {
                    counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {length}\r\n\r\n");
                    let _ = conn.write_all(head.as_bytes()).await;
                    while conn.write_all(b"#").await.is_ok() {
                        tokio::time::sleep(every).await;
                    }
                } else {
                    let body = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: fetched\ndata:\n  k: v\n";
                    let resp = format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = conn.write_all(resp.as_bytes()).await;
                }
            });
        }
    });
    (addr, slow)
}

/// Finding 3: sources that announce large bodies and send them slowly hold no more of the
/// sources' memory budget than they sent once their reservation lapses (5 s), and another
/// namespace's set reading a small source stays prompt. On main, each announced body kept
/// twice its length reserved (120 MB of the 256 MiB budget) for as long as it trickled in
/// (up to --source-timeout).
#[tokio::test]
async fn slow_sources_announcing_large_bodies_hold_no_budget_they_did_not_use() {
    let h = Harness::new("fair-budget").await;
    let victim_ns = h.extra_namespace("fair-budgetv").await;
    let (addr, slow) = tarpit().await;
    let selector = format!("applyset.dev/test={}", h.label);
    let op = OperatorProcess::start(
        cluster().kubeconfig(),
        &[
            "--label-selector",
            &selector,
            "--source-allow-cidrs",
            "127.0.0.0/8",
        ],
        "fair-budget",
    );
    for s in 0..2 {
        let sources: Vec<Value> = (0..4)
            .map(|i| json!({"http": {"url": format!("http://{addr}/slow-{s}-{i}.yaml")}}))
            .collect();
        h.applyset(&format!("tarpit-{s}"))
            .create(json!({"sources": sources}))
            .await;
    }
    wait_for("the slow sources to be read", DEADLINE, || async {
        (slow.load(std::sync::atomic::Ordering::SeqCst) >= 4).then_some(())
    })
    .await;

    let victim = set_in(&h, &victim_ns, "victim");
    let t0 = Instant::now();
    victim
        .create(json!({"sources": [{"http": {"url": format!("http://{addr}/fast.yaml")}}]}))
        .await;
    victim.wait_ready().await;
    let took = t0.elapsed();
    assert!(took <= PROMPT, "the victim became Ready in {took:?}");
    // Room reserved for the announced bodies is given back once they do not arrive (5 s):
    // the slow sources hold what they sent.
    wait_for(
        "the slow sources to hold only what they sent",
        Duration::from_secs(20),
        || async {
            let held = gauge(&op, "applyset_source_memory_bytes")?;
            (held < f64::from(16u32 << 20)).then_some(())
        },
    )
    .await;
}

/// Finding 4: health-check watches refused because the operator watches as many as it will
/// are watched as soon as room frees, and until then the set's Healthy condition says why. On
/// main a refused check stayed "not watched" for ever (until the operator restarted).
#[tokio::test]
async fn health_checks_refused_for_room_are_watched_once_room_frees() {
    let h = Harness::new("fair-health").await;
    let victim_ns = h.extra_namespace("fair-healthv").await;
    let selector = format!("applyset.dev/test={}", h.label);
    let op = OperatorProcess::start(
        cluster().kubeconfig(),
        &["--label-selector", &selector, "--max-health-watches", "3"],
        "fair-health",
    );
    let missing =
        |i: usize| json!({"apiVersion": "v1", "kind": "ConfigMap", "name": format!("missing-{i}")});
    let attacker = h.applyset("checker");
    attacker
        .create(json!({"healthChecks": [missing(0), missing(1), missing(2)],
            "manifests": [configmap("a", json!({"k": "1"}))]}))
        .await;
    wait_for("the attacker's three check watches", DEADLINE, || async {
        (gauge(&op, "applyset_health_watches") == Some(3.0)).then_some(())
    })
    .await;

    let victim = set_in(&h, &victim_ns, "victim");
    victim
        .create(
            json!({"healthChecks": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "v"}],
            "manifests": [configmap("v", json!({"k": "1"}))]}),
        )
        .await;
    victim
        .wait_until(
            "Healthy to say its check waits for room",
            DEADLINE,
            |_, st| {
                let c = operator::condition(st?, "Healthy")?;
                (c.status == "Unknown" && c.message.contains("not watched yet")).then_some(())
            },
        )
        .await;

    attacker.delete().await;
    attacker.wait_gone(DEADLINE).await;
    victim
        .wait_until("Healthy=True once room freed", DEADLINE, |_, st| {
            let c = operator::condition(st?, "Healthy")?;
            (c.status == "True").then_some(())
        })
        .await;
    wait_for("one check watch left", DEADLINE, || async {
        (gauge(&op, "applyset_health_watches") == Some(1.0)).then_some(())
    })
    .await;
}

/// Finding 6 (part): `spec.interval` has a minimum (`--min-interval`, 10 s by default): a
/// shorter one is raised, and status says so.
#[tokio::test]
async fn a_short_interval_is_raised_to_the_minimum_and_status_says_so() {
    let h = Harness::new("fair-interval").await;
    let mut config = h.config();
    config.min_interval = Duration::from_secs(10);
    let op = applyset_operator::controller::Operator::start(h.client.clone(), config);
    let set = h.applyset("eager");
    set.create(json!({"interval": "1s", "manifests": [configmap("a", json!({"k": "1"}))]}))
        .await;
    let st = set.wait_ready().await;
    let msg = operator::ready(&st).message.clone();
    assert!(
        msg.contains("spec.interval 1s is raised to the operator's minimum, 10s (--min-interval)"),
        "{msg}"
    );
    operator::stop(op).await;
}

/// Finding 6: a namespace whose sets keep every worker busy (12 sets, more than the 8
/// workers, reconciled every second, each reading a source that sends one byte a second
/// within --source-timeout) does not hold up another namespace's set: its create-to-Ready
/// and an edit's effect each stay within 5 s. On main the victim waited for a worker until
/// the tarpits timed out. Once the attacker's sets are gone, the workers, the queue and the
/// namespaces' slots are all given back, and the tarpit hears no more requests.
#[tokio::test]
async fn a_namespace_of_slow_sets_does_not_hold_up_another_namespace() {
    use std::sync::atomic::Ordering::SeqCst;
    let h = Harness::new("fair-work").await;
    let victim_ns = h.extra_namespace("fair-workv").await;
    let (addr, slow) = tarpit().await;
    let selector = format!("applyset.dev/test={}", h.label);
    let op = OperatorProcess::start(
        cluster().kubeconfig(),
        &[
            "--label-selector",
            &selector,
            "--source-allow-cidrs",
            "127.0.0.0/8",
            "--source-timeout",
            "40",
        ],
        "fair-workers",
    );
    let attackers: Vec<Parent> = (0..12).map(|i| h.applyset(&format!("drip-{i}"))).collect();
    for (i, set) in attackers.iter().enumerate() {
        let url = format!("http://{addr}/drip-{i}.yaml");
        set.create(json!({"interval": "1s", "sources": [{"http": {"url": url}}]}))
            .await;
    }
    wait_for("the tarpit to hold 8 fetches", DEADLINE, || async {
        (slow.load(SeqCst) >= 8).then_some(())
    })
    .await;

    let victim = set_in(&h, &victim_ns, "victim");
    let t0 = Instant::now();
    victim
        .create(json!({"manifests": [configmap("v", json!({"k": "1"})), secret("s")]}))
        .await;
    // A deadline longer than the tarpits' timeout, so that a slow victim is measured.
    victim
        .wait_until("the victim Ready", Duration::from_secs(180), |_, st| {
            (operator::condition(st?, "Ready")?.status == "True").then_some(())
        })
        .await;
    let took = t0.elapsed();
    eprintln!("the victim became Ready in {took:?}");
    assert!(took <= PROMPT, "the victim became Ready in {took:?}");

    let t0 = Instant::now();
    victim
        .patch_spec(json!({"manifests": [configmap("v", json!({"k": "2"})), secret("s")]}))
        .await;
    let cms: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(h.client.clone(), &victim_ns);
    wait_for("the victim's edit", Duration::from_secs(180), || async {
        let cm = cms.get("v").await.ok()?;
        (cm.data?.get("k")? == "2").then_some(())
    })
    .await;
    let took = t0.elapsed();
    eprintln!("the victim's edit took effect in {took:?}");
    assert!(took <= PROMPT, "the victim's edit took effect in {took:?}");

    for set in &attackers {
        set.delete().await;
    }
    for set in &attackers {
        set.wait_gone(DEADLINE).await;
    }
    // The attacker's reconciles end by the tarpits' timeout (40 s): then nothing is held.
    let idle = |m: &str| {
        [
            "controller_runtime_active_workers{controller=\"applyset\"}",
            "workqueue_depth{name=\"applyset\"}",
            "applyset_reconciling_namespaces",
        ]
        .iter()
        .all(|series| sample(m, series) == Some(0.0))
    };
    wait_for(
        "workers, queue and namespace slots given back",
        DEADLINE,
        || async { op.metrics().filter(|m| idle(m)).map(|_| ()) },
    )
    .await;
    let heard = slow.load(SeqCst);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        slow.load(SeqCst),
        heard,
        "the tarpit heard from deleted sets"
    );
}

/// The chart's memory limit (charts/applyset-operator/values.yaml, `resources.limits.memory`).
const CHART_MEMORY_LIMIT_MIB: u64 = 512;

/// One inline manifest whose JSON text is exactly `bytes` long: a ConfigMap carrying a long
/// array of zeros, the shape that costs a parser most per byte (on main, 32 bytes of
/// `serde_json::Value` for each two bytes of text).
fn zeros_manifest(name: &str, bytes: usize) -> Value {
    let mut m = configmap(name, json!({"k": "1"}));
    m["zeros"] = json!([]);
    let base = serde_json::to_string(&m).expect("json").len();
    // `[]` becomes `[0,0,…,0]`: one byte for the first zero, two for each further one.
    let zeros = (bytes - base).div_ceil(2);
    m["zeros"] = Value::Array(vec![json!(0); zeros]);
    if (bytes - base).is_multiple_of(2) {
        m["data"]["k"] = json!("12");
    }
    assert_eq!(serde_json::to_string(&m).expect("json").len(), bytes);
    m
}

/// Finding 2: 100 sets whose inline manifests are at the operator's size limit
/// (`--max-inline-manifests-kib`, 512 KiB) keep the operator within the chart's memory limit
/// (on main, 30 sets of about 1.3 MiB each took it from 31 to 852 MiB: every parent was kept
/// parsed), a set over the limit fails alone naming the set, its size and the limit, and a
/// victim set in another namespace is Ready within 5 s.
#[tokio::test]
async fn sets_at_the_manifest_size_limit_stay_within_the_charts_memory_limit() {
    const SETS: usize = 100;
    const LIMIT_KIB: usize = applyset_operator::render::DEFAULT_MAX_INLINE_MANIFESTS_KIB;
    const LIMIT: usize = LIMIT_KIB << 10;
    let h = Harness::new("fair-size").await;
    let victim_ns = h.extra_namespace("fair-sizev").await;
    let selector = format!("applyset.dev/test={}", h.label);
    let op = OperatorProcess::start(
        cluster().kubeconfig(),
        &["--label-selector", &selector],
        "fair-size",
    );
    let entry = zeros_manifest("big", LIMIT);
    // Each set is rendered once here (an hour's interval): what is measured is the memory of
    // holding them and of reconciling them 8 at a time (the chart's --concurrency), not how
    // often; the minimum interval bounds that.
    let spec = json!({"interval": "1h", "retryInterval": "1h", "manifests": [entry]});
    for i in 0..SETS {
        h.applyset(&format!("big-{i:03}"))
            .create(spec.clone())
            .await;
        let rss = op.status_mib("VmRSS");
        assert!(
            rss < CHART_MEMORY_LIMIT_MIB,
            "{rss} MiB resident after {} sets at the size limit",
            i + 1
        );
    }
    // Every set was read (its reconcile got past the size check and rendered).
    for i in 0..SETS {
        h.applyset(&format!("big-{i:03}"))
            .wait_until("a reconcile past the size check", DEADLINE, |_, st| {
                let c = operator::condition(st?, "Ready")?;
                (c.reason != "ValidationFailed" && c.reason != "Progressing").then_some(())
            })
            .await;
    }
    let settled = op.status_mib("VmRSS");

    // One byte more is refused before it is parsed, naming the set, its size and the limit.
    let over = h.applyset("over");
    over.create(json!({"manifests": [zeros_manifest("big", LIMIT + 1)]}))
        .await;
    let st = over
        .wait_ready_reason(Some("False"), "ValidationFailed")
        .await;
    let msg = &operator::ready(&st).message;
    let parts = [
        format!("ApplySet {}/over", h.ns),
        format!("{} bytes", LIMIT + 1),
        format!("{LIMIT_KIB} KiB"),
        "--max-inline-manifests-kib".to_string(),
    ];
    for part in &parts {
        assert!(msg.contains(part.as_str()), "{part:?} not in {msg}");
    }

    let victim = set_in(&h, &victim_ns, "victim");
    let t0 = Instant::now();
    victim
        .create(json!({"manifests": [configmap("v", json!({"k": "1"}))]}))
        .await;
    victim.wait_ready().await;
    let took = t0.elapsed();
    assert!(took <= PROMPT, "the victim became Ready in {took:?}");

    let peak = op.status_mib("VmHWM");
    eprintln!(
        "{SETS} sets at {LIMIT} bytes: peak RSS {peak} MiB, {settled} MiB once all were reconciled"
    );
    assert!(
        peak < CHART_MEMORY_LIMIT_MIB,
        "peak RSS {peak} MiB, over the chart's limit"
    );
}
