//! The render stages hold the tenancy line (attacks on reads and on SOPS), against the operator
//! binary run as a process and the real API server, everything on loopback:
//!
//! - reads whose content lands in the set's objects (`spec.postBuild.substituteFrom`,
//!   `configMap` and `secret` sources) are made as the set's identity: a set acting as a
//!   ServiceAccount that may not get a Secret is refused naming the Secret and the account,
//!   and the Secret's value appears nowhere; once the account may get it, the set is applied;
//! - SOPS decrypts what Flux decrypts, nothing more: an encrypted `.env` under
//!   `configMapGenerator` stays encrypted in its ConfigMap while the same kind of file under
//!   `secretGenerator` is decrypted; a file decrypted for a `secretGenerator` and read by a
//!   `configMapGenerator` too is refused naming it; a build that fails with kustomize quoting
//!   a decrypted input shows no decrypted value in status, events or the operator's log.

mod support;

use support::{operator, process, servers, sops as sops_tools};

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use k8s_openapi::api::core::v1::{Event, Secret};
use kube::{
    Api,
    api::{ListParams, Patch, PatchParams},
};
use operator::{
    Harness, Parent, condition, configmap, configmap_ar, create_rbac, exists, get_obj, secret_ar,
    status_json, unique,
};
use process::OperatorProcess;
use serde_json::{Value, json};
use sops_tools::{AgeKey, age_keygen, sops_encrypt};
use support::{cluster, kustomize_binary};

const DEADLINE: Duration = Duration::from_secs(90);

/// The operator binary for this test's namespace and sets, with the pinned kustomize and the
/// tests' loopback servers allowed as sources.
fn start_operator(h: &Harness, name: &str) -> OperatorProcess {
    let kustomize = kustomize_binary();
    let selector = format!("applyset.dev/test={}", h.label);
    OperatorProcess::start(
        cluster().kubeconfig(),
        &[
            "--watch-namespace",
            &h.ns,
            "--label-selector",
            &selector,
            "--kustomize-binary",
            &kustomize.display().to_string(),
            "--source-allow-cidrs",
            "127.0.0.0/8,::1",
        ],
        name,
    )
}

/// A ServiceAccount `name` that may manage ConfigMaps in the test's namespace, and nothing
/// else (no Secrets).
async fn config_map_deployer(h: &Harness, name: &str) {
    let rule = json!({"apiGroups": [""], "resources": ["configmaps"],
        "verbs": ["get", "list", "watch", "create", "patch", "update", "delete"]});
    create_rbac(h, &h.ns, &role_for(h, name, name, rule)).await;
}

/// A Role `role` with `rule`, bound to ServiceAccount `account` (created when `role` is the
/// account's own name).
fn role_for(h: &Harness, account: &str, role: &str, rule: Value) -> Vec<Value> {
    let mut items = Vec::new();
    if account == role {
        items.push(json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": account}}));
    }
    items.push(
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": role}, "rules": [rule]}),
    );
    items.push(
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": role},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": h.ns}]}),
    );
    items
}

async fn put_secret(h: &Harness, name: &str, data: &[(&str, &str)]) {
    let data: serde_json::Map<String, Value> = data
        .iter()
        .map(|(k, v)| (k.to_string(), json!(STANDARD.encode(v))))
        .collect();
    let s: Secret = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name}, "data": data}))
    .expect("a secret");
    Api::<Secret>::namespaced(h.client.clone(), &h.ns)
        .patch(name, &PatchParams::apply("test").force(), &Patch::Apply(&s))
        .await
        .expect("apply the secret");
}

/// Waits for the set's Ready condition with `reason` and a message containing every one of
/// `parts`, for its current generation; returns the message.
async fn wait_message(set: &Parent, reason: &str, parts: &[&str]) -> String {
    let what = format!("Ready reason {reason} with a message containing {parts:?}");
    set.wait_until(&what, DEADLINE, |obj, st| {
        let st = st?;
        (st.observed_generation == obj.metadata.generation).then_some(())?;
        let ready = condition(st, "Ready")?;
        let all = parts.iter().all(|p| ready.message.contains(p));
        (ready.reason == reason && all).then(|| ready.message.clone())
    })
    .await
}

/// Neither the sets' status, nor any event of the namespace, nor the operator's log holds
/// `plain` or its base64.
async fn assert_nowhere(h: &Harness, op: &OperatorProcess, sets: &[&Parent], plain: &str) {
    let encoded = STANDARD.encode(plain);
    let holds = |text: &str| text.contains(plain) || text.contains(&encoded);
    for set in sets {
        let live = serde_json::to_string(&set.live().await.data).expect("json");
        assert!(!holds(&live), "{plain:?} in {}: {live}", set.display());
    }
    let events: Api<Event> = Api::namespaced(h.client.clone(), &h.ns);
    let listed = events.list(&ListParams::default()).await.expect("events");
    assert!(!listed.items.is_empty(), "the operator published events");
    let text = serde_json::to_string(&listed.items).expect("json");
    assert!(!holds(&text), "{plain:?} in the events: {text}");
    let log = op.log();
    assert!(
        log.contains("applyset"),
        "the operator's log is read: {log}"
    );
    assert!(!holds(&log), "{plain:?} in the operator's log");
}

/// Attack 3: a set acting as a ServiceAccount that may get ConfigMaps only names a Secret in
/// `substituteFrom`, and another names one as a `secret` source: both are refused naming the
/// Secret and the account (on main e7a5fa5 the first was Ready with the Secret's value in a
/// ConfigMap), nothing is created, and the value appears nowhere. A `configMap` source the
/// account may get is applied. Granted get on the Secrets, both are applied.
#[tokio::test]
async fn secrets_are_read_as_the_sets_identity() {
    let h = Harness::new("ident-read").await;
    config_map_deployer(&h, "deployer").await;
    let value = format!("hunter2-db-{}", unique("SECRET"));
    put_secret(&h, "db-creds", &[("password", &value)]).await;
    let manifest = serde_yaml_text(&configmap("from-secret", json!({"p": value})));
    put_secret(&h, "manifests", &[("cm.yaml", &manifest)]).await;
    let op = start_operator(&h, "ident-read");
    let account = format!("ServiceAccount {}/deployer", h.ns);

    let subst = h.applyset("subst");
    subst
        .create(
            json!({"serviceAccountName": "deployer", "retryInterval": "1s",
            "manifests": [configmap("leak", json!({"p": "${password}"}))],
            "postBuild": {"substituteFrom": [{"kind": "Secret", "name": "db-creds"}]}}),
        )
        .await;
    let secret_source = h.applyset("secret-source");
    secret_source
        .create(
            json!({"serviceAccountName": "deployer", "retryInterval": "1s",
            "sources": [{"secret": {"name": "manifests"}}]}),
        )
        .await;
    let cm_source = h.applyset("cm-source");
    let api: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(h.client.clone(), &h.ns);
    let cm: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "plain-manifests"},
        "data": {"cm.yaml": serde_yaml_text(&configmap("from-cm", json!({"k": "v"})))}}))
    .expect("a configmap");
    api.patch(
        "plain-manifests",
        &PatchParams::apply("test").force(),
        &Patch::Apply(&cm),
    )
    .await
    .expect("apply the configmap");
    cm_source
        .create(json!({"serviceAccountName": "deployer",
            "sources": [{"configMap": {"name": "plain-manifests"}}]}))
        .await;

    let msg = wait_message(
        &subst,
        "ValidationFailed",
        &[
            "spec.postBuild.substituteFrom[0]",
            &format!("{account} may not get Secret {}/db-creds", h.ns),
            "grant it get on that Secret",
        ],
    )
    .await;
    println!("substituteFrom refused: {msg}");
    let msg = wait_message(
        &secret_source,
        "SourceFailed",
        &[
            "spec.sources[0]",
            &format!("{account} may not get Secret {}/manifests", h.ns),
        ],
    )
    .await;
    println!("secret source refused: {msg}");
    cm_source.wait_ready().await;
    assert!(exists(&h.client, &configmap_ar(), Some(&h.ns), "from-cm").await);
    for name in ["leak", "from-secret"] {
        assert!(
            !exists(&h.client, &configmap_ar(), Some(&h.ns), name).await,
            "{name} was created"
        );
    }
    assert_nowhere(&h, &op, &[&subst, &secret_source, &cm_source], &value).await;

    // Granted get on the two Secrets (by name), both sets are applied.
    let rule = json!({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"],
        "resourceNames": ["db-creds", "manifests"]});
    create_rbac(&h, &h.ns, &role_for(&h, "deployer", "secret-reader", rule)).await;
    for set in [&subst, &secret_source] {
        let st = set.wait_ready().await;
        println!("{} after the grant: {}", set.display(), status_json(&st));
    }
    for (name, key) in [("leak", "p"), ("from-secret", "p")] {
        let cm = get_obj(&h.client, &configmap_ar(), Some(&h.ns), name)
            .await
            .unwrap_or_else(|| panic!("{name} was not created"));
        assert_eq!(
            cm.data["data"][key].as_str(),
            Some(value.as_str()),
            "{name}"
        );
    }
}

/// A manifest as YAML text (JSON is YAML).
fn serde_yaml_text(v: &Value) -> String {
    serde_json::to_string(v).expect("json")
}

struct Sops {
    dir: tempfile::TempDir,
    key: AgeKey,
}

impl Sops {
    fn new() -> Sops {
        let dir = tempfile::tempdir().expect("tempdir");
        let key = age_keygen(dir.path(), "key.txt");
        Sops { dir, key }
    }

    fn encrypt(&self, name: &str, plain: &str, args: &[&str]) -> String {
        let out = sops_encrypt(
            self.dir.path(),
            name,
            plain.as_bytes(),
            &self.key.recipient,
            args,
        );
        String::from_utf8(out).expect("utf-8")
    }
}

/// A git repository on a loopback server with `files`; the source of `path` in it.
async fn serve(files: &[(String, String)]) -> (servers::GitServer, impl Fn(&str) -> Value) {
    let server = servers::GitServer::start(None, None).await;
    let repo = server.repo("apps");
    let refs: Vec<(&str, Option<&str>)> = files
        .iter()
        .map(|(p, t)| (p.as_str(), Some(t.as_str())))
        .collect();
    repo.commit(&refs, "first");
    let url = server.url("apps");
    let source =
        move |path: &str| json!({"git": {"url": url, "ref": {"branch": "main"}, "path": path}});
    (server, source)
}

/// Attack 4: an encrypted `.env` under `configMapGenerator` becomes a ConfigMap of ciphertext
/// (on main e7a5fa5 it held the plaintext), while an encrypted `.env` under `secretGenerator`
/// is decrypted into its Secret, as Flux does; one file under both is refused naming it; and
/// the plaintext of the first is nowhere.
#[tokio::test]
async fn sops_decrypts_secret_generator_inputs_and_leaves_config_map_generator_inputs() {
    let h = Harness::new("ident-sops").await;
    let k = Sops::new();
    put_secret(&h, "sops-age", &[("identity.agekey", &k.key.text)]).await;
    let secret_value = format!("db-password-{}", unique("S"));
    let config_value = format!("config-token-{}", unique("C"));
    let f = |p: &str, t: &str| (p.to_string(), t.to_string());
    let secret_env = k.encrypt("secret.env", &format!("PASSWORD={secret_value}\n"), &[]);
    let config_env = k.encrypt("config.env", &format!("TOKEN={config_value}\n"), &[]);
    let files = vec![
        f(
            "app/kustomization.yaml",
            "secretGenerator:\n- name: gen\n  envs: [secret.env]\nconfigMapGenerator:\n- name: cfg\n  envs: [config.env]\ngeneratorOptions: {disableNameSuffixHash: true}\n",
        ),
        f("app/secret.env", &secret_env),
        f("app/config.env", &config_env),
        f(
            "both/kustomization.yaml",
            "namePrefix: both-\nsecretGenerator:\n- name: gen\n  envs: [config.env]\nconfigMapGenerator:\n- name: cfg\n  envs: [config.env]\n",
        ),
        f("both/config.env", &config_env),
    ];
    let (_server, source) = serve(&files).await;
    let op = start_operator(&h, "ident-sops");
    let decryption = json!({"provider": "sops", "secretRef": {"name": "sops-age"}});

    let app = h.applyset("app");
    app.create(json!({"retryInterval": "1s", "sources": [source("app")],
        "decryption": decryption}))
        .await;
    let st = app.wait_ready().await;
    println!("app: {}", status_json(&st));
    let generated = get_obj(&h.client, &secret_ar(), Some(&h.ns), "gen")
        .await
        .expect("the generated Secret");
    let password = generated.data["data"]["PASSWORD"]
        .as_str()
        .expect("PASSWORD");
    assert_eq!(
        STANDARD.decode(password).expect("base64"),
        secret_value.as_bytes(),
        "the secretGenerator input is decrypted"
    );
    let cfg = get_obj(&h.client, &configmap_ar(), Some(&h.ns), "cfg")
        .await
        .expect("the generated ConfigMap");
    let token = cfg.data["data"]["TOKEN"].as_str().expect("TOKEN");
    assert!(
        token.starts_with("ENC[AES256_GCM,data:"),
        "the configMapGenerator input stays encrypted: {token}"
    );
    assert!(
        cfg.data["data"]["sops_mac"].is_string(),
        "the ConfigMap holds the file as committed: {:?}",
        cfg.data
    );
    let cfg_text = serde_json::to_string(&cfg.data).expect("json");
    assert!(!cfg_text.contains(&config_value), "{cfg_text}");

    // One file read by both generators: refused, naming the file and where else it is used.
    let both = h.applyset("both");
    both.create(json!({"retryInterval": "1s", "sources": [source("both")],
        "decryption": decryption}))
        .await;
    let msg = wait_message(
        &both,
        "ValidationFailed",
        &[
            "file both/config.env: decrypted for both/kustomization.yaml secretGenerator[0].envs",
            "also used in both/kustomization.yaml",
        ],
    )
    .await;
    println!("both: {msg}");
    for name in ["both-gen", "both-cfg"] {
        let kind = if name.ends_with("gen") {
            secret_ar()
        } else {
            configmap_ar()
        };
        assert!(!exists(&h.client, &kind, Some(&h.ns), name).await, "{name}");
    }
    assert_nowhere(&h, &op, &[&app, &both], &config_value).await;
}

/// Attack 4, messages: a build whose decrypted patch file makes kustomize fail quoting it (the
/// patch's decrypted name matches no resource) is refused with the decrypted value withheld
/// from status, events and the operator's log (on main e7a5fa5, kustomize's message reached
/// them as printed).
#[tokio::test]
async fn a_failed_build_quotes_no_decrypted_input() {
    let h = Harness::new("ident-quote").await;
    let k = Sops::new();
    put_secret(&h, "sops-age", &[("identity.agekey", &k.key.text)]).await;
    let hidden = format!("target-{}", unique("hidden"));
    let patch = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {hidden}\ndata:\n  k: patched\n"
    );
    let f = |p: &str, t: &str| (p.to_string(), t.to_string());
    let files = vec![
        f(
            "bad/kustomization.yaml",
            "resources: [cm.yaml]\npatches:\n- path: patch.yaml\n",
        ),
        f(
            "bad/cm.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: target\ndata:\n  k: v\n",
        ),
        f(
            "bad/patch.yaml",
            &k.encrypt(
                "patch.yaml",
                &patch,
                &["--encrypted-regex", "^(name|data)$"],
            ),
        ),
    ];
    let (_server, source) = serve(&files).await;
    let op = start_operator(&h, "ident-quote");
    let set = h.applyset("bad");
    set.create(json!({"retryInterval": "1s", "sources": [source("bad")],
        "decryption": {"provider": "sops", "secretRef": {"name": "sops-age"}}}))
        .await;
    let msg = wait_message(&set, "ValidationFailed", &["kustomize", "<redacted>"]).await;
    println!("bad: {msg}");
    assert!(!exists(&h.client, &configmap_ar(), Some(&h.ns), "target").await);
    assert_nowhere(&h, &op, &[&set], &hidden).await;
}
