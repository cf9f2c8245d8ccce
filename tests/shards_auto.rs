//! `--shards auto`: operator processes share the sets by themselves. Three replicas and 300
//! sets: each set is reconciled by exactly one replica (its owner annotation, the replicas'
//! metrics and logs), the split is within ±25 % of even, each replica's member watches hold
//! only its share; a replica SIGKILLed: its sets' drift is corrected within the Lease
//! duration + 5 s; a fourth replica: about a quarter of the sets move to it, no other set
//! moves, and the replicas that lost them forget them (their info series; 24 empty sets
//! too, whose handover writes nothing the old owner's member watches see); a replica paused (SIGSTOP) past its Lease and resumed deletes nothing the new
//! owners wrote meanwhile. And the fence itself, against the API server: a claim taken by
//! another refuses the first claimant's proof.

mod support;

use support::{operator, process};

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    time::{Duration, Instant},
};

use applyset_operator::shard::{
    ANNOTATION_EPOCH, ANNOTATION_OWNER, LABEL_BUCKET, assign,
    fence::{Fence, check_patch, claim_patch},
};
use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::{
    Api,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
};
use operator::{Harness, configmap, unique};
use process::{OperatorProcess, sample};
use serde_json::json;
use support::{cluster, wait_for};

const SETS: usize = 300;
/// Empty sets (`allowEmpty`, no members) beside them: a handover writes nothing the old
/// owner's member watches see, so only the end of its parent watch's new list tells it that
/// it lost one.
const EMPTY_SETS: usize = 24;
/// The replicas' Lease duration (seconds): short, so that the test's handovers are quick.
const LEASE: u64 = 5;
const DEADLINE: Duration = Duration::from_secs(180);

/// The replicas of one test: their processes by name, and what they share.
struct Replicas {
    procs: BTreeMap<String, OperatorProcess>,
    h: Harness,
    group: String,
}

impl Replicas {
    fn start(&mut self, name: &str) {
        let selector = format!("applyset.dev/test={}", self.h.label);
        let lease = LEASE.to_string();
        let p = OperatorProcess::start(
            cluster().kubeconfig(),
            &[
                "--shards",
                "auto",
                "--shard-name",
                name,
                "--lease-duration",
                &lease,
                "--leader-election-namespace",
                &self.h.ns,
                "--leader-election-name",
                &self.group,
                "--label-selector",
                &selector,
            ],
            &format!("{}-{name}", self.group),
        );
        self.procs.insert(name.to_string(), p);
    }

    fn names(&self) -> BTreeSet<String> {
        self.procs.keys().cloned().collect()
    }

    fn signal(&self, name: &str, sig: &str) {
        let pid = self.procs[name].pid().to_string();
        let ok = std::process::Command::new("kill")
            .args([sig, &pid])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill {sig} {name}");
    }

    /// A gauge or counter of replica `name` (0 when absent or unreadable).
    fn metric(&self, name: &str, series: &str) -> f64 {
        self.procs[name]
            .metrics()
            .and_then(|m| sample(&m, series))
            .unwrap_or(0.0)
    }

    /// Waits until every live replica (`live`) owns its buckets by rendezvous over `live`.
    async fn wait_assigned(&self, live: &BTreeSet<String>) {
        let want: BTreeMap<String, usize> = live
            .iter()
            .map(|r| (r.clone(), assign::buckets_of(r, live).len()))
            .collect();
        wait_for("every replica to own its buckets", DEADLINE, || async {
            let got: BTreeMap<String, usize> = live
                .iter()
                .map(|r| (r.clone(), self.metric(r, "applyset_shard_buckets") as usize))
                .collect();
            (got == want).then_some(())
        })
        .await;
    }
}

/// The set of index `i`: one ConfigMap `cm`.
fn set_name(i: usize) -> String {
    format!("s-{i:03}")
}

fn empty_set_name(i: usize) -> String {
    format!("e-{i:02}")
}

/// Whether `name` is one of the [`SETS`] sets with a member (not an empty one).
fn has_member(name: &str) -> bool {
    name.starts_with("s-")
}

/// The owner (replica name) every set should have over `live`, by set name.
fn expected_owners(ns: &str, live: &BTreeSet<String>) -> BTreeMap<String, String> {
    owners_of(ns, live, (0..SETS).map(set_name))
}

/// The replica rendezvous hashing names for each of `sets` (by name), over `live`.
fn owners_of(
    ns: &str,
    live: &BTreeSet<String>,
    sets: impl Iterator<Item = String>,
) -> BTreeMap<String, String> {
    sets.map(|name| {
        let id = operator::applyset_id(ns, &name);
        let owner = assign::owner(assign::bucket(&id), live).unwrap_or_default();
        (name, owner.to_string())
    })
    .collect()
}

/// The owner annotation of every set with a member (`<name>/<incarnation>`), by set name.
async fn owners(h: &Harness) -> BTreeMap<String, String> {
    let api = h.applyset("x").api();
    let lp = ListParams::default().labels(&format!("applyset.dev/test={}", h.label));
    let list = api.list_metadata(&lp).await.expect("list the sets");
    list.items
        .into_iter()
        .filter_map(|o| {
            let owner = o.metadata.annotations?.get(ANNOTATION_OWNER)?.clone();
            Some((o.metadata.name?, owner))
        })
        .filter(|(name, _)| has_member(name))
        .collect()
}

/// The replica name of a holder `<name>/<incarnation>`.
fn replica(holder: &str) -> &str {
    holder.split_once('/').map_or(holder, |(n, _)| n)
}

/// Waits until every set is Ready at its latest generation and owned as `want` says.
async fn wait_owned(h: &Harness, want: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    wait_for("every set owned by its replica", DEADLINE, || async {
        let got = owners(h).await;
        let by_name: BTreeMap<String, String> = got
            .iter()
            .map(|(s, o)| (s.clone(), replica(o).to_string()))
            .collect();
        (by_name == *want).then_some(got)
    })
    .await
}

/// Waits until every set with a member reports Ready=True for its latest generation.
async fn wait_all_ready(h: &Harness) {
    wait_for("every set Ready", DEADLINE, || async {
        let api = h.applyset("x").api();
        let lp = ListParams::default().labels(&format!("applyset.dev/test={}", h.label));
        let list = api.list(&lp).await.ok()?;
        let ready = list.items.iter().filter(|o| {
            o.metadata.name.as_deref().is_some_and(has_member)
                && operator::parse_status(o).is_some_and(|s| {
                    s.observed_generation == o.metadata.generation
                        && operator::condition(&s, "Ready").is_some_and(|c| c.status == "True")
                })
        });
        (ready.count() == SETS).then_some(())
    })
    .await;
}

/// The ConfigMap `name` of every set: name → UID (absent ones left out).
async fn configmaps(h: &Harness, name: &str) -> HashMap<String, String> {
    let cms: Api<ConfigMap> = Api::namespaced(h.client.clone(), &h.ns);
    let lp = ListParams::default().labels("applyset.kubernetes.io/part-of");
    let list = cms.list_metadata(&lp).await.expect("list ConfigMaps");
    list.items
        .into_iter()
        .filter(|o| {
            o.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.ends_with(name))
        })
        .filter_map(|o| Some((o.metadata.name?, o.metadata.uid?)))
        .collect()
}

/// Sets every set's spec to declare the ConfigMaps `<set>-<member>` of `members`.
async fn declare(h: &Harness, members: &[&str]) {
    stream::iter(0..SETS)
        .for_each_concurrent(16, |i| async move {
            let name = set_name(i);
            let manifests: Vec<_> = members
                .iter()
                .map(|m| configmap(&format!("{name}-{m}"), json!({"k": "v"})))
                .collect();
            h.applyset(&name)
                .patch_spec(json!({"manifests": manifests}))
                .await;
        })
        .await;
}

/// A fixed namespace name, so the split of the sets (which depends on their IDs, so on the
/// namespace) is the same at every run.
async fn fixed_namespace(h: &Harness, name: &str) -> Harness {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).expect("ns");
    Api::<Namespace>::all(h.client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("create the test's fixed namespace");
    Harness {
        client: h.client.clone(),
        ns: name.to_string(),
        label: h.label.clone(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_share_the_sets_hand_them_over_and_fence_the_one_that_lost_them() {
    let base = Harness::new("shards-auto").await;
    let h = fixed_namespace(&base, "shards-auto-fixed").await;
    let mut r = Replicas {
        procs: BTreeMap::new(),
        h: Harness {
            client: h.client.clone(),
            ns: h.ns.clone(),
            label: h.label.clone(),
        },
        group: unique("shards"),
    };
    for name in ["r-0", "r-1", "r-2"] {
        r.start(name);
    }
    let three = r.names();
    r.wait_assigned(&three).await;

    // 300 sets of one ConfigMap each.
    let t0 = Instant::now();
    stream::iter(0..SETS)
        .for_each_concurrent(16, |i| {
            let h = &h;
            async move {
                let name = set_name(i);
                h.applyset(&name)
                    .create(json!({"interval": "10m",
                        "manifests": [configmap(&format!("{name}-a"), json!({"k": "v"}))]}))
                    .await;
            }
        })
        .await;
    for i in 0..EMPTY_SETS {
        h.applyset(&empty_set_name(i))
            .create(json!({"interval": "10m", "allowEmpty": true, "manifests": []}))
            .await;
    }
    wait_all_ready(&h).await;
    eprintln!("300 sets Ready over 3 replicas in {:.1?}", t0.elapsed());
    let want = expected_owners(&h.ns, &three);
    wait_owned(&h, &want).await;
    exactly_one_replica_each(&r, &want).await;
    split_within_a_quarter_of_even(&want, &three);
    member_watches_hold_the_share(&r, &want).await;

    // r-1 killed: its sets move to the others; the drift of each (its ConfigMap deleted) is
    // corrected within the Lease duration + 5 s.
    let lost: Vec<String> = want
        .iter()
        .filter(|(_, o)| *o == "r-1")
        .map(|(s, _)| s.clone())
        .collect();
    let killed = Instant::now();
    r.signal("r-1", "-KILL");
    let cms: Api<ConfigMap> = Api::namespaced(h.client.clone(), &h.ns);
    stream::iter(&lost)
        .for_each_concurrent(16, |s| {
            let cms = cms.clone();
            async move {
                let _ = cms
                    .delete(&format!("{s}-a"), &DeleteParams::default())
                    .await;
            }
        })
        .await;
    let bound = Duration::from_secs(LEASE + 5);
    wait_for("the killed replica's drift corrected", bound, || async {
        let present = configmaps(&h, "-a").await;
        lost.iter()
            .all(|s| present.contains_key(&format!("{s}-a")))
            .then_some(())
    })
    .await;
    eprintln!(
        "{} sets of the killed replica: drift corrected {:.1?} after the kill (bound {bound:?})",
        lost.len(),
        killed.elapsed()
    );
    r.procs.remove("r-1");
    let two: BTreeSet<String> = ["r-0", "r-2"].map(String::from).into();
    wait_owned(&h, &expected_owners(&h.ns, &two)).await;

    // r-1 back (a new incarnation), then a fourth replica: only the sets r-3 wins move.
    r.start("r-1");
    r.wait_assigned(&three).await;
    let before = wait_owned(&h, &want).await;
    r.start("r-3");
    let four = r.names();
    r.wait_assigned(&four).await;
    let owners_of_four = expected_owners(&h.ns, &four);
    let after = wait_owned(&h, &owners_of_four).await;
    let moved: Vec<&String> = before.keys().filter(|s| before[*s] != after[*s]).collect();
    assert!(
        moved.iter().all(|s| replica(&after[*s]) == "r-3"),
        "only sets that r-3 wins move"
    );
    let quarter = SETS as f64 / 4.0;
    assert!(
        (moved.len() as f64 - quarter).abs() <= quarter * 0.25,
        "about a quarter of the sets move to a fourth replica: {} of {SETS}",
        moved.len()
    );
    eprintln!(
        "a fourth replica: {} of {SETS} sets moved, all to it",
        moved.len()
    );
    let mut all_of_four = owners_of_four.clone();
    all_of_four.extend(owners_of(&h.ns, &four, (0..EMPTY_SETS).map(empty_set_name)));
    info_series_follow_the_owners(&r, &all_of_four).await;
    wait_all_ready(&h).await;

    paused_replica_deletes_nothing_it_lost(&mut r, &h, &four).await;
}

/// Each replica's info series name exactly the sets it owns now (the empty ones included): a
/// set that moved is forgotten by the replica that lost it.
async fn info_series_follow_the_owners(r: &Replicas, want: &BTreeMap<String, String>) {
    for (name, p) in &r.procs {
        wait_for(
            "the replica's info series to name the sets it owns, and no other",
            DEADLINE,
            || async {
                let m = p.metrics()?;
                want.iter()
                    .all(|(s, owner)| m.contains(&format!("name=\"{s}\"")) == (owner == name))
                    .then_some(())
            },
        )
        .await;
    }
    eprintln!("every replica's info series follow the owners");
}

/// Each set is owned by the replica rendezvous hashing names; only that replica's metrics
/// carry its series and only its log has its reconciles; its members are written by the
/// set's own field manager (the same on every replica).
async fn exactly_one_replica_each(r: &Replicas, want: &BTreeMap<String, String>) {
    for (name, p) in &r.procs {
        let mine: BTreeSet<&String> = want
            .iter()
            .filter(|(_, o)| *o == name)
            .map(|(s, _)| s)
            .collect();
        let text = wait_for("the replica's info series", DEADLINE, || async {
            let m = p.metrics()?;
            mine.iter()
                .all(|s| m.contains(&format!("name=\"{s}\"")))
                .then_some(m)
        })
        .await;
        let log = p.log();
        for s in want.keys() {
            let series = text.contains(&format!("name=\"{s}\""));
            let parent = format!("ApplySet {}/{s}", r.h.ns);
            let logged = log
                .lines()
                .any(|l| l.contains(&parent) && l.contains(" reconciled "));
            if logged {
                let line = log
                    .lines()
                    .find(|l| l.contains(&parent))
                    .unwrap_or_default();
                assert!(
                    line.contains(&format!("{name}/")),
                    "the log line names the replica: {line}"
                );
            }
            let owns = mine.contains(s);
            assert_eq!(series, owns, "{name}'s info series of {s}");
            assert_eq!(logged, owns, "{name}'s log of reconciles of {s}");
        }
    }
    let cm = operator::must_get(
        &r.h.client,
        &operator::configmap_ar(),
        Some(&r.h.ns),
        "s-000-a",
    )
    .await;
    let managers = operator::managers(&cm);
    let set_manager = r.h.applyset("s-000").manager();
    assert!(
        managers.iter().any(|(m, _)| *m == set_manager),
        "members are written by the set's field manager: {managers:?}"
    );
    assert!(
        managers.iter().all(|(m, _)| !m.contains("r-")),
        "no field manager is per replica: {managers:?}"
    );
}

fn split_within_a_quarter_of_even(want: &BTreeMap<String, String>, live: &BTreeSet<String>) {
    let even = SETS as f64 / live.len() as f64;
    for r in live {
        let n = want.values().filter(|o| *o == r).count() as f64;
        assert!(
            (n - even).abs() <= even * 0.25,
            "{r} owns {n} sets, {even:.0} would be even"
        );
        eprintln!("{r}: {n} sets");
    }
}

/// Each replica's member watches know exactly the members of its own sets (one each).
async fn member_watches_hold_the_share(r: &Replicas, want: &BTreeMap<String, String>) {
    for (name, p) in &r.procs {
        let share = want.values().filter(|o| *o == name).count();
        wait_for(
            "the replica's member watches to hold its share",
            DEADLINE,
            || async {
                let n = r.metric(name, "applyset_member_objects") as usize;
                (n == share).then_some(())
            },
        )
        .await;
        eprintln!(
            "{name}: {share} sets, {share} member objects watched, RSS {} MiB",
            p.status_mib("VmRSS")
        );
    }
}

/// r-0 paused while it reconciles a change that prunes (each set's `a` dropped for `b`),
/// past its Lease: the others claim its sets and carry the change out; then `a` is declared
/// again and re-created by them. r-0 resumed deletes none of what they wrote, and takes its
/// sets back.
async fn paused_replica_deletes_nothing_it_lost(
    r: &mut Replicas,
    h: &Harness,
    four: &BTreeSet<String>,
) {
    declare(h, &["b"]).await;
    r.signal("r-0", "-STOP");
    let others: BTreeSet<String> = four.iter().filter(|n| *n != "r-0").cloned().collect();
    wait_owned(h, &expected_owners(&h.ns, &others)).await;
    wait_all_ready(h).await;
    declare(h, &["a", "b"]).await;
    wait_all_ready(h).await;
    let written = configmaps(h, "-a").await;
    assert_eq!(written.len(), SETS, "every set's `a` re-created");
    r.signal("r-0", "-CONT");
    r.wait_assigned(four).await;
    wait_owned(h, &expected_owners(&h.ns, four)).await;
    wait_all_ready(h).await;
    let now = configmaps(h, "-a").await;
    assert_eq!(
        now, written,
        "the resumed replica deleted nothing the new owners wrote"
    );
    let fenced = r.metric("r-0", "applyset_shard_events_total{event=\"fenced\"}");
    eprintln!(
        "the paused replica resumed: nothing deleted; reconciles it stopped at the fence: {fenced}"
    );
}

/// The fence against the API server: a claim, another replica's claim over it, then the first
/// claimant's proof refused, the second's accepted without a write; a claim from a stale read
/// refused.
#[tokio::test]
async fn the_api_server_refuses_the_fence_of_a_replica_whose_claim_was_taken() {
    let h = Harness::new("fence").await;
    let set = h.applyset("fenced");
    set.create(json!({"suspend": true, "manifests": [configmap("x", json!({}))]}))
        .await;
    let api = set.api();
    let live = set.live().await;
    let uid = live.metadata.uid.clone().expect("uid");
    let rv0 = live.metadata.resource_version.clone().expect("rv");
    let has_annotations = live.metadata.annotations.is_some();
    let json_patch =
        |v: serde_json::Value| Patch::Json::<()>(serde_json::from_value(v).expect("a JSON patch"));
    let pp = PatchParams::default();
    let first = api
        .patch(
            "fenced",
            &pp,
            &json_patch(claim_patch(&uid, &rv0, has_annotations, "r-a/1", 1)),
        )
        .await
        .expect("the first claim");
    let rv1 = first.metadata.resource_version.clone().expect("rv");
    // A claim from the stale read (rv0) is refused.
    let stale = api
        .patch(
            "fenced",
            &pp,
            &json_patch(claim_patch(&uid, &rv0, true, "r-b/1", 1)),
        )
        .await;
    assert!(stale.is_err(), "a claim from a stale read is refused");
    let second = api
        .patch(
            "fenced",
            &pp,
            &json_patch(claim_patch(&uid, &rv1, true, "r-b/1", 2)),
        )
        .await
        .expect("the second claim");
    let annotations = second.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations.get(ANNOTATION_OWNER).map(String::as_str),
        Some("r-b/1")
    );
    assert_eq!(
        annotations.get(ANNOTATION_EPOCH).map(String::as_str),
        Some("2")
    );
    let fence = |holder: &str, epoch| Fence {
        uid: uid.clone(),
        holder: holder.into(),
        epoch,
        bucket: 0,
    };
    match api
        .patch("fenced", &pp, &json_patch(check_patch(&fence("r-a/1", 1))))
        .await
    {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 422, "a failed test: {s:?}"),
        other => panic!("the first claimant's fence must be refused: {other:?}"),
    }
    let ok = api
        .patch("fenced", &pp, &json_patch(check_patch(&fence("r-b/1", 2))))
        .await
        .expect("the owner's fence is accepted");
    assert_eq!(
        ok.metadata.resource_version, second.metadata.resource_version,
        "a fence writes nothing"
    );
    // A server-side apply carrying a resourceVersion is conditional on it (the claim that
    // rides with the parent's metadata, and every later write of it by the owner).
    let ssa = |rv: &str| {
        Patch::Apply(
            json!({"apiVersion": "applyset.dev/v1alpha1", "kind": "ApplySet",
            "metadata": {"name": "fenced", "resourceVersion": rv,
                "annotations": {ANNOTATION_OWNER: "r-c/1", ANNOTATION_EPOCH: "3"}}}),
        )
    };
    let apply = PatchParams::apply("applyset.dev/parent").force();
    match api.patch("fenced", &apply, &ssa(&rv1)).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 409, "a stale apply: {s:?}"),
        other => panic!("an apply from a stale read must be refused: {other:?}"),
    }
    let current = ok.metadata.resource_version.clone().expect("rv");
    let claimed = api
        .patch("fenced", &apply, &ssa(&current))
        .await
        .expect("an apply from the current version");
    let annotations = claimed.metadata.annotations.unwrap_or_default();
    assert_eq!(
        annotations.get(ANNOTATION_OWNER).map(String::as_str),
        Some("r-c/1")
    );
    assert!(!LABEL_BUCKET.is_empty());
}

/// By hand (`SHARDS_MEMORY_SETS=3000 SHARDS_MEMORY_REPLICAS=3 cargo test --test shards_auto --
/// --ignored memory`): each replica's member objects and RSS against its share, for N sets of
/// four ConfigMaps over R replicas (run it with R = 1 for the figure of one replica alone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, by hand"]
async fn memory_by_share() {
    let env = |k: &str, d: usize| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let (n, replicas) = (
        env("SHARDS_MEMORY_SETS", 3000),
        env("SHARDS_MEMORY_REPLICAS", 3),
    );
    let h = Harness::new("shards-memory").await;
    let mut r = Replicas {
        procs: BTreeMap::new(),
        h: Harness {
            client: h.client.clone(),
            ns: h.ns.clone(),
            label: h.label.clone(),
        },
        group: unique("memory"),
    };
    for i in 0..replicas {
        r.start(&format!("r-{i}"));
    }
    let live = r.names();
    r.wait_assigned(&live).await;
    let rss0: BTreeMap<String, u64> = r
        .procs
        .iter()
        .map(|(name, p)| (name.clone(), p.status_mib("VmRSS")))
        .collect();
    let t0 = Instant::now();
    stream::iter(0..n)
        .for_each_concurrent(16, |i| {
            let h = &h;
            async move {
                let name = format!("m-{i:05}");
                let manifests: Vec<_> = (0..4)
                    .map(|k| configmap(&format!("{name}-{k}"), json!({"k": "v"})))
                    .collect();
                h.applyset(&name)
                    .create(json!({"interval": "10m", "manifests": manifests}))
                    .await;
            }
        })
        .await;
    let want = n * 4;
    wait_for(
        "every member watched by its replica",
        Duration::from_secs(1800),
        || async {
            let total: usize = live
                .iter()
                .map(|name| r.metric(name, "applyset_member_objects") as usize)
                .sum();
            (total == want).then_some(())
        },
    )
    .await;
    eprintln!(
        "{n} sets × 4 over {replicas} replica(s), all members watched in {:.1?}",
        t0.elapsed()
    );
    for (name, p) in &r.procs {
        eprintln!(
            "{name}: {} buckets, {} member objects, RSS {} MiB (at start {} MiB, peak {} MiB)",
            r.metric(name, "applyset_shard_buckets"),
            r.metric(name, "applyset_member_objects"),
            p.status_mib("VmRSS"),
            rss0[name],
            p.status_mib("VmHWM")
        );
    }
}
