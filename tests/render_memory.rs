//! Every render stage's output is bounded while it is produced (docs/security.md, the bounds
//! table): the operator runs as a process against the real API server and
//! its resident memory is read from /proc. A 100 KB variable (from a `substituteFrom`
//! ConfigMap) referenced 12,000 times in one 48 KB inline ConfigMap is refused with
//! ValidationFailed naming the member, the variable and the limit, alone and with
//! `--concurrency` such sets at once in several namespaces, while the operator stays under the
//! chart's memory limit and a victim in another namespace is Ready within 5 s (on main
//! e7a5fa5, one such set took the operator from 18 to 1,114 MiB in 2.5 s). Age decryption is
//! bounded: a key Secret with more identities than the operator tries, and a file wrapped for
//! more recipients than it tries, are refused naming the Secret and the file.

mod support;

use support::{operator, process, sops as sops_tools};

use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::{
    Api,
    api::{Patch, PatchParams},
};
use operator::{Harness, Parent, configmap};
use process::OperatorProcess;
use serde_json::{Value, json};
use support::cluster;

const DEADLINE: Duration = Duration::from_secs(90);
/// How long the victim's create-to-Ready may take under attack.
const PROMPT: Duration = Duration::from_secs(5);
/// The chart's memory limit (charts/applyset-operator/values.yaml, `resources.limits.memory`).
const CHART_MEMORY_LIMIT_MIB: u64 = 512;
/// The attack's variable: 100 KB.
const VALUE_BYTES: usize = 100_000;
/// References to it in the one inline ConfigMap (`${b}`, 4 bytes each: 48 KB).
const REFERENCES: usize = 12_000;
/// The default per-set YAML text bound (--max-yaml-mib-per-set), in bytes.
const SET_LIMIT: usize = applyset_operator::manifest::DEFAULT_SET_YAML_BYTES;

/// ApplySet `name` in namespace `ns`, labelled for this test's operator.
fn set_in(h: &Harness, ns: &str, name: &str) -> Parent {
    Parent {
        namespace: Some(ns.to_string()),
        ..h.applyset(name)
    }
}

/// Server-side applies `object` (a ConfigMap or Secret) in `ns` as the test's admin.
async fn put<K>(h: &Harness, ns: &str, object: Value)
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::Serialize
        + serde::de::DeserializeOwned,
    <K as kube::Resource>::DynamicType: Default,
{
    let name = object["metadata"]["name"]
        .as_str()
        .expect("a name")
        .to_string();
    let typed: K = serde_json::from_value(object).expect("a typed object");
    Api::<K>::namespaced(h.client.clone(), ns)
        .patch(
            &name,
            &PatchParams::apply("test").force(),
            &Patch::Apply(&typed),
        )
        .await
        .expect("apply");
}

/// The attack in namespace `ns`: ConfigMap `vars` holding a 100 KB variable `b`, and set
/// `name` whose one inline ConfigMap references `${b}` 12,000 times (1.2 GB substituted).
async fn attack(h: &Harness, ns: &str, name: &str) -> Parent {
    let vars = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "vars"},
        "data": {"b": "v".repeat(VALUE_BYTES)}});
    put::<ConfigMap>(h, ns, vars).await;
    let set = set_in(h, ns, name);
    set.create(json!({
        "manifests": [configmap("bomb", json!({"k": "${b}".repeat(REFERENCES)}))],
        "postBuild": {"substituteFrom": [{"kind": "ConfigMap", "name": "vars"}]},
    }))
    .await;
    set
}

/// Waits for the attack's refusal; its message.
async fn refusal(set: &Parent) -> String {
    let st = set
        .wait_ready_reason_within(Some("False"), "ValidationFailed", DEADLINE)
        .await;
    operator::ready(&st).message.clone()
}

/// Checks the refusal's message: the member, the variable, the first bound its expansion
/// passes and its flag (one member's text, 8 times --max-member-kib, comes before the set's
/// 64 MiB); never the value.
fn assert_names_the_bound(msg: &str) {
    let parts = [
        "spec.manifests[0] (ConfigMap bomb)".to_string(),
        "substituting ${b}".to_string(),
        format!("more than {} bytes", 8 * (3 << 20)),
        "--max-member-kib".to_string(),
    ];
    for part in &parts {
        assert!(msg.contains(part.as_str()), "{part:?} not in {msg}");
    }
    assert!(
        !msg.contains("vvvvvvvv"),
        "the value is in the message: {msg}"
    );
}

/// Attack 1 alone: refused with ValidationFailed naming the member, the variable and the
/// limit, the operator's peak RSS under the chart's limit.
#[tokio::test]
async fn a_substitution_bomb_is_refused_at_its_first_bound_within_the_charts_memory() {
    let h = Harness::new("mem-bomb").await;
    let selector = format!("applyset.dev/test={}", h.label);
    let op = OperatorProcess::start(
        cluster().kubeconfig(),
        &["--label-selector", &selector],
        "mem-bomb",
    );
    let set = attack(&h, &h.ns, "bomb").await;
    let msg = refusal(&set).await;
    let peak = op.status_mib("VmHWM");
    eprintln!("one substitution bomb: peak RSS {peak} MiB; {msg}");
    assert_names_the_bound(&msg);
    assert!(
        peak < CHART_MEMORY_LIMIT_MIB,
        "peak RSS {peak} MiB, over the chart's limit"
    );
}

/// Attack 1 with `--concurrency` (8) such sets at once, in 8 namespaces: each is refused, the
/// peak RSS stays under the chart's limit, and a victim set in another namespace is Ready
/// within 5 s meanwhile.
#[tokio::test]
async fn concurrency_substitution_bombs_at_once_stay_within_the_charts_memory() {
    const SETS: usize = 8;
    let h = Harness::new("mem-bombs").await;
    let victim_ns = h.extra_namespace("mem-victim").await;
    let selector = format!("applyset.dev/test={}", h.label);
    let op = OperatorProcess::start(
        cluster().kubeconfig(),
        &["--label-selector", &selector, "--concurrency", "8"],
        "mem-bombs",
    );
    let mut namespaces = Vec::new();
    for i in 0..SETS {
        namespaces.push(h.extra_namespace(&format!("mem-attacker{i}")).await);
    }
    let attacks = namespaces
        .iter()
        .map(|ns| attack(&h, ns, "bomb"))
        .collect::<Vec<_>>();
    let sets = futures::future::join_all(attacks).await;

    let victim = set_in(&h, &victim_ns, "victim");
    let t0 = Instant::now();
    victim
        .create(json!({"manifests": [configmap("v", json!({"k": "1"}))]}))
        .await;
    victim.wait_ready_within(DEADLINE).await;
    let took = t0.elapsed();

    let messages = futures::future::join_all(sets.iter().map(refusal)).await;
    let peak = op.status_mib("VmHWM");
    eprintln!(
        "{SETS} substitution bombs at once: peak RSS {peak} MiB; the victim Ready in {took:?}"
    );
    assert!(
        peak < CHART_MEMORY_LIMIT_MIB,
        "peak RSS {peak} MiB, over the chart's limit"
    );
    assert!(took <= PROMPT, "the victim became Ready in {took:?}");
    for msg in &messages {
        assert_names_the_bound(msg);
    }
}

/// An age identity generated here, as age-keygen writes it.
fn identity_line() -> String {
    use age::secrecy::ExposeSecret as _;
    age::x25519::Identity::generate()
        .to_string()
        .expose_secret()
        .to_string()
}

/// The SOPS-encrypted Secret `name` (the real sops, for `recipients`), as an inline manifest.
fn encrypted_secret(dir: &std::path::Path, name: &str, recipients: &[String]) -> Value {
    let plain = format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\nstringData:\n  password: hunter2-age\n"
    );
    let out = sops_tools::sops_encrypt(
        dir,
        &format!("{name}.yaml"),
        plain.as_bytes(),
        &recipients.join(","),
        &["--encrypted-regex", "^(data|stringData)$"],
    );
    serde_saphyr::from_str(&String::from_utf8(out).expect("utf-8")).expect("sops writes YAML")
}

/// Creates set `name` with `spec`, waits for ValidationFailed and checks that its message
/// holds every one of `parts`.
async fn refused_naming(h: &Harness, name: &str, spec: Value, parts: &[String]) {
    let set = h.applyset(name);
    set.create(spec).await;
    let st = set
        .wait_ready_reason_within(Some("False"), "ValidationFailed", DEADLINE)
        .await;
    let msg = &operator::ready(&st).message;
    for part in parts {
        assert!(msg.contains(part.as_str()), "{part:?} not in {msg}");
    }
}

/// A spec of `member` decrypted with the keys of Secret `keys`.
fn decrypting(member: &Value, keys: &str) -> Value {
    json!({"manifests": [member],
        "decryption": {"provider": "sops", "secretRef": {"name": keys}}})
}

/// The age bounds: a key Secret holding more identities than the operator tries
/// (`--sops-max-age-identities`, 32) is refused naming the Secret, and a file whose data key
/// is wrapped for more recipients than it tries (`--sops-max-age-recipients`, 32) is refused
/// naming the member; within both bounds the same member decrypts and applies.
#[tokio::test]
async fn age_decryption_is_bounded_by_identities_and_recipients() {
    let limit = applyset_operator::sops::DEFAULT_MAX_IDENTITIES;
    let stanzas = applyset_operator::sops::DEFAULT_MAX_STANZAS;
    let h = Harness::new("mem-age").await;
    let selector = format!("applyset.dev/test={}", h.label);
    let _op = OperatorProcess::start(
        cluster().kubeconfig(),
        &["--label-selector", &selector],
        "mem-age",
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let key = sops_tools::age_keygen(dir.path(), "key.txt");
    // One identity more than the operator tries, the matching one last.
    let mut many: Vec<String> = (0..limit).map(|_| identity_line()).collect();
    many.push(key.text.clone());
    let keys = |name: &str, text: String| {
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
            "data": {"keys.agekey": STANDARD.encode(text)}})
    };
    put::<Secret>(&h, &h.ns, keys("many-keys", many.join("\n"))).await;
    put::<Secret>(&h, &h.ns, keys("one-key", key.text.clone())).await;
    let member = encrypted_secret(dir.path(), "db", std::slice::from_ref(&key.recipient));
    let parts = [
        format!(
            "Secret {}/many-keys holds {} age identities",
            h.ns,
            limit + 1
        ),
        format!("more than the {limit}"),
        "--sops-max-age-identities".to_string(),
    ];
    refused_naming(
        &h,
        "many-identities",
        decrypting(&member, "many-keys"),
        &parts,
    )
    .await;

    // The file wrapped for one recipient more than the operator tries (ours among them).
    let mut recipients: Vec<String> = (0..stanzas)
        .map(|_| age::x25519::Identity::generate().to_public().to_string())
        .collect();
    recipients.push(key.recipient.clone());
    let wide = encrypted_secret(dir.path(), "wide", &recipients);
    let parts = [
        "spec.manifests[0] (Secret wide)".to_string(),
        format!("wrapped for {} age recipients", stanzas + 1),
        format!("more than the {stanzas}"),
        "--sops-max-age-recipients".to_string(),
    ];
    refused_naming(&h, "many-recipients", decrypting(&wide, "one-key"), &parts).await;

    // Within both bounds: decrypted and applied.
    let ok = h.applyset("within");
    ok.create(decrypting(&member, "one-key")).await;
    ok.wait_ready_within(DEADLINE).await;
    let applied = Api::<Secret>::namespaced(h.client.clone(), &h.ns)
        .get("db")
        .await
        .expect("the decrypted Secret");
    let password = applied
        .data
        .and_then(|d| d.get("password").map(|b| b.0.clone()))
        .unwrap_or_default();
    assert_eq!(password, b"hunter2-age");
}

/// `--concurrency` (8) sets whose one member substitutes to just under the per-set bound
/// (600 references to the 100 KB variable: 60 MB each, in 8 namespaces) stay far within the
/// chart's limit: one member's text is bounded too (8 times --max-member-kib: a member the
/// API server could never read in one request), so each is refused while its expansion is
/// counted, before any of it is written (ValidationFailed naming the member and the flag). On
/// main (e1dfac3, a debug build), the same 8 sets took the operator to 1,188 MiB; with the
/// stages budgeted but such members written, parsed and sent, 364 to 513 MiB.
#[tokio::test]
async fn concurrency_sets_at_their_bound_stay_within_the_charts_memory() {
    const SETS: usize = 8;
    const NEAR: usize = 600;
    const { assert!(NEAR * VALUE_BYTES < SET_LIMIT) };
    const { assert!(NEAR * VALUE_BYTES > 8 * (3 << 20)) };
    let h = Harness::new("mem-near").await;
    let selector = format!("applyset.dev/test={}", h.label);
    // A set waits for room at most half of --source-timeout: 10 s here.
    let op = OperatorProcess::start(
        cluster().kubeconfig(),
        &["--label-selector", &selector, "--source-timeout", "20"],
        "mem-near",
    );
    let mut sets = Vec::new();
    for i in 0..SETS {
        let ns = h.extra_namespace(&format!("mem-near{i}")).await;
        let vars = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "vars"},
            "data": {"b": "v".repeat(VALUE_BYTES)}});
        put::<ConfigMap>(&h, &ns, vars).await;
        let set = set_in(&h, &ns, "near");
        set.create(json!({
            "manifests": [configmap("near", json!({"k": "${b}".repeat(NEAR)}))],
            "postBuild": {"substituteFrom": [{"kind": "ConfigMap", "name": "vars"}]},
        }))
        .await;
        sets.push(set);
    }
    let outcomes = sets.iter().map(|set| {
        set.wait_until("the first outcome", DEADLINE, |_, st| {
            let c = operator::condition(st?, "Ready")?;
            matches!(c.reason.as_str(), "SourceFailed" | "ValidationFailed")
                .then(|| (c.reason.clone(), c.message.clone()))
        })
    });
    let outcomes = futures::future::join_all(outcomes).await;
    let peak = op.status_mib("VmHWM");
    let waited = outcomes.iter().filter(|(r, _)| r == "SourceFailed").count();
    eprintln!(
        "{SETS} sets of {} MB at once: peak RSS {peak} MiB; {waited} found no room",
        NEAR * VALUE_BYTES / 1_000_000
    );
    for (reason, msg) in &outcomes {
        match reason.as_str() {
            // Refused while its expansion is counted, nothing written.
            "ValidationFailed" => assert!(
                msg.contains("(ConfigMap near)") && msg.contains("--max-member-kib"),
                "{msg}"
            ),
            _ => assert!(
                msg.contains("substituting its variables")
                    && msg.contains("--source-memory-mib=256"),
                "{msg}"
            ),
        }
    }
    assert!(
        peak < CHART_MEMORY_LIMIT_MIB,
        "peak RSS {peak} MiB, over the chart's limit"
    );
}
