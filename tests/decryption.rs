//! spec.decryption end to end (docs/sources.md, "Encrypted Secrets (SOPS)"; without kustomize
//! overlays): members encrypted at
//! test time by the real `sops` with a key from the real `age-keygen`, from a ConfigMap source
//! and inline, are applied decrypted by the in-process operator against the real API server;
//! a tampered value, a changed unencrypted field of a source file or of a SOPS file in a
//! Secret, a file for another key, a set without spec.decryption and a ServiceAccount that may not read the key Secret
//! are refused with ValidationFailed naming the file (or account), and nothing is pruned; the
//! plaintext is in neither status, events nor the operator's logs.

mod support;

use support::{operator, sops as sops_tools};

use std::time::Duration;

use applyset_operator::controller::Operator;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Secret};
use kube::{
    Api,
    api::{ListParams, Patch, PatchParams},
};
use operator::*;
use serde_json::{Value, json};
use sops_tools::{AgeKey, age_keygen, sops_encrypt};

const DEADLINE: Duration = Duration::from_secs(60);
const PASSWORD: &str = "hunter2-e2e";

/// The operator's logs of this test binary (debug level), captured for
/// [`assert_no_plaintext`].
static LOGS: parking_lot::Mutex<Vec<u8>> = parking_lot::Mutex::new(Vec::new());

struct Capture;

impl std::io::Write for Capture {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        LOGS.lock().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn logs() -> String {
    String::from_utf8_lossy(&LOGS.lock()).into_owned()
}

fn init() {
    let filter = std::env::var("RUST_LOG").unwrap_or_else(|_| "applyset_operator=debug".into());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_ansi(false)
        .with_writer(|| Capture)
        .try_init();
}

struct Keys {
    dir: tempfile::TempDir,
    key: AgeKey,
}

fn keys() -> Keys {
    let dir = tempfile::tempdir().expect("tempdir");
    let key = age_keygen(dir.path(), "key.txt");
    Keys { dir, key }
}

impl Keys {
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

const REGEX: [&str; 2] = ["--encrypted-regex", "^(data|stringData)$"];

fn secret_yaml(name: &str, password: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\n  labels: {{app: web}}\ntype: Opaque\nstringData:\n  password: {password}\n  port: \"5432\"\n"
    )
}

async fn put_configmap(h: &Harness, name: &str, data: Value) {
    let api: Api<ConfigMap> = Api::namespaced(h.client.clone(), &h.ns);
    let cm: ConfigMap = serde_json::from_value(
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}),
    )
    .expect("configmap");
    api.patch(
        name,
        &PatchParams::apply("test").force(),
        &Patch::Apply(&cm),
    )
    .await
    .expect("apply configmap");
}

async fn put_key_secret(h: &Harness, name: &str, key: &AgeKey) {
    let api: Api<Secret> = Api::namespaced(h.client.clone(), &h.ns);
    let s: Secret = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name},
        "data": {"identity.agekey": STANDARD.encode(&key.text), "README": STANDARD.encode("not a key")}}))
    .expect("secret");
    api.patch(name, &PatchParams::apply("test").force(), &Patch::Apply(&s))
        .await
        .expect("apply secret");
}

async fn secret_data(h: &Harness, name: &str, key: &str) -> Option<Vec<u8>> {
    let api: Api<Secret> = Api::namespaced(h.client.clone(), &h.ns);
    let s = api.get_opt(name).await.expect("get secret")?;
    s.data?.get(key).map(|b| b.0.clone())
}

async fn wait_message(set: &Parent, reason: &str, text: &str) -> String {
    set.wait_until(
        &format!("Ready reason {reason} with a message containing {text:?}"),
        DEADLINE,
        |obj, st| {
            let st = st?;
            (st.observed_generation == obj.metadata.generation).then_some(())?;
            let ready = condition(st, "Ready")?;
            (ready.reason == reason && ready.message.contains(text)).then(|| ready.message.clone())
        },
    )
    .await
}

/// Neither the set's status, nor any event of the namespace, nor the operator's logs (debug
/// level) hold `plain` or its base64.
async fn assert_no_plaintext(h: &Harness, set: &Parent, plain: &str) {
    let encoded = STANDARD.encode(plain);
    let status = serde_json::to_string(&set.live().await.data).expect("json");
    assert!(
        !status.contains(plain) && !status.contains(&encoded),
        "plaintext in the set: {status}"
    );
    let events: Api<Event> = Api::namespaced(h.client.clone(), &h.ns);
    let listed = events.list(&ListParams::default()).await.expect("events");
    let text = serde_json::to_string(&listed.items).expect("json");
    assert!(
        !text.contains(plain) && !text.contains(&encoded),
        "plaintext in events: {text}"
    );
    let logs = logs();
    assert!(
        logs.contains("reconcile"),
        "the operator's logs are captured: {logs}"
    );
    assert!(
        !logs.contains(plain) && !logs.contains(&encoded),
        "plaintext in the logs"
    );
}

/// Encrypted members from a ConfigMap source (YAML Secret, JSON ConfigMap with
/// encrypted_regex), an inline encrypted Secret and a Secret whose data entry is an encrypted
/// dotenv file are applied decrypted; tampering, a changed unencrypted field of the SOPS file
/// in the Secret's data, and another key are then refused naming the file, nothing pruned.
#[tokio::test]
async fn encrypted_members_are_applied_decrypted_and_tampering_is_refused() {
    init();
    let h = Harness::new("sops-apply").await;
    let k = keys();
    put_key_secret(&h, "sops-age", &k.key).await;
    let secret = k.encrypt("secret.yaml", &secret_yaml("db", PASSWORD), &REGEX);
    let config = k.encrypt(
        "config.json",
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cfg"},"data":{"url":"https://db.internal","pool":"10"}}"#,
        &["--encrypted-regex", "^data$"],
    );
    let env = k.encrypt("db.env", &format!("USER=admin\nPASSWORD={PASSWORD}\n"), &[]);
    let from_env = format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: env}}\ndata:\n  db.env: {}\n",
        STANDARD.encode(&env)
    );
    put_configmap(
        &h,
        "bundle",
        json!({"secret.yaml": secret, "config.json": config, "env.yaml": from_env}),
    )
    .await;
    let inline_yaml = k.encrypt("inline.yaml", &secret_yaml("inline", "inline-pw"), &REGEX);
    let inline: Value = serde_saphyr::from_str(&inline_yaml).expect("yaml");

    let op = h.start_operator();
    let set = h.applyset("sops");
    set.create(json!({"interval": "1h", "retryInterval": "1s",
        "manifests": [inline],
        "sources": [{"configMap": {"name": "bundle"}}],
        "decryption": {"provider": "sops", "secretRef": {"name": "sops-age"}}}))
        .await;
    let st = set.wait_ready().await;
    assert_eq!(summary(&st).members, 4, "{}", status_json(&st));
    assert_eq!(
        secret_data(&h, "db", "password").await.as_deref(),
        Some(PASSWORD.as_bytes())
    );
    assert_eq!(
        secret_data(&h, "db", "port").await.as_deref(),
        Some(&b"5432"[..])
    );
    assert_eq!(
        secret_data(&h, "inline", "password").await.as_deref(),
        Some(&b"inline-pw"[..])
    );
    let env_file = secret_data(&h, "env", "db.env").await.expect("db.env");
    assert_eq!(
        String::from_utf8_lossy(&env_file),
        format!("USER=admin\nPASSWORD={PASSWORD}\n")
    );
    let cm = get_obj(&h.client, &configmap_ar(), Some(&h.ns), "cfg")
        .await
        .expect("cfg");
    assert_eq!(cm.data["data"]["url"], "https://db.internal");
    assert!(cm.data.get("sops").is_none());
    let db = get_obj(&h.client, &secret_ar(), Some(&h.ns), "db")
        .await
        .expect("db");
    assert!(db.data.get("sops").is_none(), "{:?}", db.data);
    assert_no_plaintext(&h, &set, PASSWORD).await;
    let db_rv = rv(&h.client, &secret_ar(), Some(&h.ns), "db").await;

    // A flipped byte in an encrypted value: refused naming the file and the field.
    let start =
        secret.find("ENC[AES256_GCM,data:").expect("a value") + "ENC[AES256_GCM,data:".len();
    let mut flipped = secret.clone().into_bytes();
    flipped[start] = if flipped[start] == b'A' { b'B' } else { b'A' };
    let flipped = String::from_utf8(flipped).expect("utf-8");
    put_configmap(
        &h,
        "bundle",
        json!({"secret.yaml": flipped, "config.json": config, "env.yaml": from_env}),
    )
    .await;
    let msg = wait_message(&set, "ValidationFailed", "failed authentication").await;
    assert!(
        msg.contains("key secret.yaml") && msg.contains("stringData.password"),
        "{msg}"
    );

    // A changed unencrypted field of the source file (a label): its MAC, verified over the
    // file as committed, fails.
    let relabelled = secret.replacen("app: web", "app: wet", 1);
    assert_ne!(relabelled, secret);
    put_configmap(
        &h,
        "bundle",
        json!({"secret.yaml": relabelled, "config.json": config, "env.yaml": from_env}),
    )
    .await;
    let msg = wait_message(&set, "ValidationFailed", "MAC mismatch").await;
    assert!(msg.contains("key secret.yaml"), "{msg}");

    // A changed unencrypted field of a SOPS file in a Secret's data: the file MAC fails.
    let app = k.encrypt(
        "app.yaml",
        "name: web\npassword: x\n",
        &["--encrypted-regex", "^password$"],
    );
    let changed = app.replacen("name: web", "name: wet", 1);
    let mac_doc = format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: env}}\ndata:\n  app.yaml: {}\n",
        STANDARD.encode(changed)
    );
    put_configmap(
        &h,
        "bundle",
        json!({"secret.yaml": secret, "config.json": config, "env.yaml": mac_doc}),
    )
    .await;
    let msg = wait_message(&set, "ValidationFailed", "data[app.yaml]").await;
    assert!(
        msg.contains("key env.yaml") && msg.contains("MAC mismatch"),
        "{msg}"
    );

    // A file for another key: refused naming the file and the recipient.
    let other = age_keygen(k.dir.path(), "other.txt");
    let foreign = String::from_utf8(sops_encrypt(
        k.dir.path(),
        "secret.yaml",
        secret_yaml("db", "other-pw").as_bytes(),
        &other.recipient,
        &REGEX,
    ))
    .expect("utf-8");
    put_configmap(
        &h,
        "bundle",
        json!({"secret.yaml": foreign, "config.json": config, "env.yaml": from_env}),
    )
    .await;
    let msg = wait_message(&set, "ValidationFailed", "none of the age keys").await;
    assert!(
        msg.contains("key secret.yaml") && msg.contains(&other.recipient),
        "{msg}"
    );

    // Nothing was pruned or changed by the refused reconciles.
    for name in ["db", "inline", "env"] {
        assert!(
            exists(&h.client, &secret_ar(), Some(&h.ns), name).await,
            "{name}"
        );
    }
    assert_eq!(rv(&h.client, &secret_ar(), Some(&h.ns), "db").await, db_rv);
    assert_no_plaintext(&h, &set, PASSWORD).await;
    stop(op).await;
}

/// Without spec.decryption an encrypted member is refused (not applied with its ENC[…]
/// strings); a member annotated applyset.dev/decrypt: disabled is left as it is; a set acting
/// as a ServiceAccount that may not get the key Secret is refused naming both.
#[tokio::test]
async fn without_decryption_or_access_to_the_key_encrypted_members_are_refused() {
    init();
    let h = Harness::new("sops-refuse").await;
    let k = keys();
    put_key_secret(&h, "sops-age", &k.key).await;
    let inline: Value =
        serde_saphyr::from_str(&k.encrypt("s.yaml", &secret_yaml("plain", PASSWORD), &REGEX))
            .expect("yaml");
    let op = h.start_operator();

    let bare = h.applyset("bare");
    bare.create(json!({"retryInterval": "1s", "manifests": [inline.clone()]}))
        .await;
    let msg = wait_message(&bare, "ValidationFailed", "has no spec.decryption").await;
    assert!(
        msg.contains("spec.manifests[0]") && msg.contains("Secret plain"),
        "{msg}"
    );
    assert!(!exists(&h.client, &secret_ar(), Some(&h.ns), "plain").await);

    // Opted out: applied as it is (a ConfigMap keeps the ENC strings as data).
    let mut opted: Value = serde_saphyr::from_str(&k.encrypt(
        "c.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: kept\n  annotations: {applyset.dev/decrypt: disabled}\ndata: {k: v}\n",
        &["--encrypted-regex", "^data$"],
    ))
    .expect("yaml");
    opted.as_object_mut().expect("object").remove("sops");
    let kept = h.applyset("kept");
    kept.create(json!({"manifests": [opted]})).await;
    kept.wait_ready().await;
    let cm = get_obj(&h.client, &configmap_ar(), Some(&h.ns), "kept")
        .await
        .expect("kept");
    assert!(
        cm.data["data"]["k"]
            .as_str()
            .is_some_and(|v| v.starts_with("ENC[AES256_GCM,"))
    );

    create_rbac(
        &h,
        &h.ns,
        &[json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "deployer"}})],
    )
    .await;
    let tenant = h.applyset("tenant");
    tenant
        .create(
            json!({"retryInterval": "1s", "serviceAccountName": "deployer",
            "manifests": [inline],
            "decryption": {"provider": "sops", "secretRef": {"name": "sops-age"}}}),
        )
        .await;
    let msg = wait_message(&tenant, "ValidationFailed", "may not get Secret").await;
    assert!(
        msg.contains(&format!(
            "ServiceAccount {}/deployer may not get Secret {}/sops-age",
            h.ns, h.ns
        )),
        "{msg}"
    );
    assert!(!exists(&h.client, &secret_ar(), Some(&h.ns), "plain").await);
    stop(op).await;
}

/// An API server error about a decrypted member that echoes a decrypted value (an invalid
/// label value, encrypted with encrypted_regex ^labels$) is reported with the value withheld,
/// in status and events.
#[tokio::test]
async fn an_apply_error_of_a_decrypted_member_withholds_the_values() {
    init();
    let h = Harness::new("sops-echo").await;
    let k = keys();
    put_key_secret(&h, "sops-age", &k.key).await;
    let bad = "not valid!";
    let plain = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: echo\n  labels: {{tier: '{bad}'}}\ndata: {{k: v}}\n"
    );
    let member: Value =
        serde_saphyr::from_str(&k.encrypt("echo.yaml", &plain, &["--encrypted-regex", "^labels$"]))
            .expect("yaml");
    let op = h.start_operator();
    let set = h.applyset("echo");
    set.create(json!({"retryInterval": "1s", "manifests": [member],
        "decryption": {"provider": "sops", "secretRef": {"name": "sops-age"}}}))
        .await;
    let msg = wait_message(&set, "ApplyFailed", "<redacted>").await;
    assert!(!msg.contains(bad) && msg.contains("ConfigMap"), "{msg}");
    assert_no_plaintext(&h, &set, bad).await;
    stop(op).await;
}

/// The files of the kustomize test repository, encrypted at test time with `k`'s key: a base
/// with a YAML Secret, a JSON Secret and a ConfigMap (encrypted_regex ^data$) as resources, a
/// secretGenerator over an encrypted dotenv file (`envs`) and an encrypted binary file
/// (`files`), a plain ConfigMap changed by an encrypted patch; an overlay over it with
/// namePrefix and labels.
fn kustomize_repo(k: &Keys, secret_yaml_text: &str) -> Vec<(String, String)> {
    let f = |p: &str, t: &str| (p.to_string(), t.to_string());
    let json_secret = r#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"dbjson"},"stringData":{"password":"json-pw-e2e"}}"#;
    let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\ndata:\n  url: https://db.internal\n";
    let patch = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  api-key: patched-key-e2e\n";
    let token = k.encrypt("token.txt", "token-e2e", &[]);
    vec![
        f(
            "base/kustomization.yaml",
            "resources: [secret.yaml, secret.json, cm.yaml, app.yaml]\nsecretGenerator:\n- name: gen\n  envs: [db.env]\n  files: [token.txt]\ngeneratorOptions: {disableNameSuffixHash: true}\npatches:\n- path: patch.yaml\n",
        ),
        f("base/secret.yaml", secret_yaml_text),
        f(
            "base/secret.json",
            &k.encrypt("secret.json", json_secret, &REGEX),
        ),
        f(
            "base/cm.yaml",
            &k.encrypt("cm.yaml", cm, &["--encrypted-regex", "^data$"]),
        ),
        f(
            "base/app.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  mode: base\n",
        ),
        f(
            "base/db.env",
            &k.encrypt(
                "db.env",
                &format!("# the database\nUSER=admin\nPASSWORD={PASSWORD}\n"),
                &[],
            ),
        ),
        f("base/token.txt", &token),
        f(
            "base/patch.yaml",
            &k.encrypt("patch.yaml", patch, &["--encrypted-regex", "^data$"]),
        ),
        f(
            "prod/kustomization.yaml",
            "resources: [../base]\nnamePrefix: prod-\nlabels:\n- pairs: {env: prod}\n",
        ),
    ]
}

fn commit_files(repo: &support::servers::GitRepo, files: &[(String, String)], message: &str) {
    let refs: Vec<(&str, Option<&str>)> = files
        .iter()
        .map(|(p, t)| (p.as_str(), Some(t.as_str())))
        .collect();
    repo.commit(&refs, message);
}

/// `files` with the file at `path` replaced by `text`.
fn with_file(files: &[(String, String)], path: &str, text: &str) -> Vec<(String, String)> {
    files
        .iter()
        .map(|(p, t)| match p == path {
            true => (p.clone(), text.to_string()),
            false => (p.clone(), t.clone()),
        })
        .collect()
}

async fn cm_value(h: &Harness, name: &str, key: &str) -> Option<String> {
    let cm = get_obj(&h.client, &configmap_ar(), Some(&h.ns), name).await?;
    cm.data["data"][key].as_str().map(str::to_string)
}

/// Kustomize overlays of a git source with SOPS files: the encrypted resources (YAML and JSON
/// Secrets, a ConfigMap with encrypted_regex), a dotenv file and a binary file of a
/// secretGenerator and an encrypted patch are applied with their decrypted values, from the
/// base and through an overlay with namePrefix and labels. Every SOPS file the build reads is
/// verified as committed: a flipped byte in an encrypted value, a changed unencrypted field and
/// an input for another key are refused naming the file, nothing pruned; without
/// spec.decryption an encrypted input is refused; a ServiceAccount that may not get the key
/// Secret is named; the plaintext is in neither status, events nor logs.
#[tokio::test]
async fn kustomize_builds_decrypt_inputs_before_and_members_after_the_build() {
    init();
    let h = Harness::new("sops-kz").await;
    let k = keys();
    put_key_secret(&h, "sops-age", &k.key).await;
    let mut config = h.config();
    config.source_limits.kustomize.binary = Some(support::kustomize_binary());
    let op = Operator::start(h.client.clone(), config);
    let server = support::servers::GitServer::start(None, None).await;
    let repo = server.repo("apps");
    let secret = k.encrypt("secret.yaml", &secret_yaml("db", PASSWORD), &REGEX);
    let files = kustomize_repo(&k, &secret);
    commit_files(&repo, &files, "first");
    let source = |path: &str| json!({"git": {"url": server.url("apps"), "ref": {"branch": "main"}, "path": path}});
    let decryption = json!({"provider": "sops", "secretRef": {"name": "sops-age"}});

    let base = h.applyset("base");
    base.create(json!({"interval": "1s", "retryInterval": "1s",
        "sources": [source("base")], "decryption": decryption}))
        .await;
    let prod = h.applyset("prod");
    prod.create(json!({"interval": "1s", "retryInterval": "1s",
        "sources": [source("prod")], "decryption": decryption}))
        .await;
    for (set, prefix) in [(&base, ""), (&prod, "prod-")] {
        let st = set.wait_ready().await;
        assert_eq!(summary(&st).members, 5, "{}", status_json(&st));
        let name = |n: &str| format!("{prefix}{n}");
        assert_eq!(
            secret_data(&h, &name("db"), "password").await.as_deref(),
            Some(PASSWORD.as_bytes())
        );
        assert_eq!(
            secret_data(&h, &name("dbjson"), "password")
                .await
                .as_deref(),
            Some(&b"json-pw-e2e"[..])
        );
        assert_eq!(
            secret_data(&h, &name("gen"), "PASSWORD").await.as_deref(),
            Some(PASSWORD.as_bytes())
        );
        assert_eq!(
            secret_data(&h, &name("gen"), "token.txt").await.as_deref(),
            Some(&b"token-e2e"[..])
        );
        assert_eq!(
            cm_value(&h, &name("cfg"), "url").await.as_deref(),
            Some("https://db.internal")
        );
        assert_eq!(
            cm_value(&h, &name("app"), "api-key").await.as_deref(),
            Some("patched-key-e2e")
        );
        assert_eq!(
            cm_value(&h, &name("app"), "mode").await.as_deref(),
            Some("base")
        );
        let db = get_obj(&h.client, &secret_ar(), Some(&h.ns), &name("db"))
            .await
            .expect("db");
        assert!(db.data.get("sops").is_none(), "{:?}", db.data);
        if !prefix.is_empty() {
            assert_eq!(db.metadata.labels.as_ref().expect("labels")["env"], "prod");
        }
    }
    assert_no_plaintext(&h, &prod, PASSWORD).await;
    let db_rv = rv(&h.client, &secret_ar(), Some(&h.ns), "prod-db").await;

    // A flipped byte in an encrypted value of a resource: refused naming the file.
    let start =
        secret.find("ENC[AES256_GCM,data:").expect("a value") + "ENC[AES256_GCM,data:".len();
    let mut flipped = secret.clone().into_bytes();
    flipped[start] = if flipped[start] == b'A' { b'B' } else { b'A' };
    let flipped = String::from_utf8(flipped).expect("utf-8");
    commit_files(
        &repo,
        &with_file(&files, "base/secret.yaml", &flipped),
        "flipped",
    );
    let msg = wait_message(&prod, "ValidationFailed", "failed authentication").await;
    assert!(msg.contains("file base/secret.yaml"), "{msg}");

    // A changed unencrypted field (a label) of a resource: the MAC, verified over the file as
    // committed before the build (kustomize changes names and labels after), fails.
    let relabelled = secret.replacen("app: web", "app: wet", 1);
    commit_files(
        &repo,
        &with_file(&files, "base/secret.yaml", &relabelled),
        "label",
    );
    let msg = wait_message(&prod, "ValidationFailed", "MAC mismatch").await;
    assert!(msg.contains("file base/secret.yaml"), "{msg}");

    // A generator input encrypted for another key.
    let other = age_keygen(k.dir.path(), "other.txt");
    let foreign = String::from_utf8(sops_encrypt(
        k.dir.path(),
        "db.env",
        b"USER=admin\nPASSWORD=other\n",
        &other.recipient,
        &[],
    ))
    .expect("utf-8");
    commit_files(
        &repo,
        &with_file(&files, "base/db.env", &foreign),
        "other key",
    );
    let msg = wait_message(&prod, "ValidationFailed", "none of the age keys").await;
    assert!(msg.contains("file base/db.env"), "{msg}");

    // Nothing was pruned or changed by the refused reconciles.
    for name in ["prod-db", "prod-dbjson", "prod-gen"] {
        assert!(
            exists(&h.client, &secret_ar(), Some(&h.ns), name).await,
            "{name}"
        );
    }
    assert!(exists(&h.client, &configmap_ar(), Some(&h.ns), "prod-app").await);
    assert_eq!(
        rv(&h.client, &secret_ar(), Some(&h.ns), "prod-db").await,
        db_rv
    );

    // Without spec.decryption an encrypted generator input is refused, naming the file.
    commit_files(&repo, &files, "fixed");
    let bare = h.applyset("bare");
    bare.create(json!({"retryInterval": "1s", "sources": [source("prod")],
        "kustomize": {"namePrefix": "bare-"}}))
        .await;
    let msg = wait_message(&bare, "ValidationFailed", "has no spec.decryption").await;
    assert!(msg.contains("file base/db.env"), "{msg}");

    // A set acting as a ServiceAccount that may not get the key Secret.
    create_rbac(
        &h,
        &h.ns,
        &[json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "deployer"}})],
    )
    .await;
    let tenant = h.applyset("tenant");
    tenant
        .create(
            json!({"retryInterval": "1s", "serviceAccountName": "deployer",
            "sources": [source("prod")], "kustomize": {"namePrefix": "tenant-"},
            "decryption": decryption}),
        )
        .await;
    let msg = wait_message(&tenant, "ValidationFailed", "may not get Secret").await;
    assert!(
        msg.contains(&format!("ServiceAccount {}/deployer", h.ns)) && msg.contains("sops-age"),
        "{msg}"
    );
    prod.wait_ready().await;
    for set in [&base, &prod, &bare, &tenant] {
        assert_no_plaintext(&h, set, PASSWORD).await;
        assert_no_plaintext(&h, set, "patched-key-e2e").await;
        assert_no_plaintext(&h, set, "token-e2e").await;
    }
    stop(op).await;
}

/// `kubectl applyset build` of a set whose git source is an overlay with SOPS files decrypts
/// them with a local key as the operator does (inputs before the build, members after); without
/// a key it says how to give one.
#[tokio::test]
async fn plugin_build_of_an_overlay_decrypts_with_a_local_key() {
    let k = keys();
    let server = support::servers::GitServer::start(None, None).await;
    let repo = server.repo("cli");
    let secret = k.encrypt("secret.yaml", &secret_yaml("db", PASSWORD), &REGEX);
    commit_files(&repo, &kustomize_repo(&k, &secret), "first");
    let set = json!({"apiVersion": "applyset.dev/v1alpha1", "kind": "ApplySet",
        "metadata": {"name": "cli", "namespace": "team"},
        "spec": {"sources": [{"git": {"url": server.url("cli"), "ref": {"branch": "main"}, "path": "prod"}}],
            "decryption": {"provider": "sops", "secretRef": {"name": "sops-age"}}}});
    let file = k.dir.path().join("set.yaml");
    std::fs::write(&file, serde_json::to_string(&set).expect("json")).expect("write");
    let home = k.dir.path().join("home");
    let run = |key: Option<&std::path::Path>| {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_kubectl-applyset"));
        cmd.arg("build")
            .arg("-f")
            .arg(&file)
            .arg("--kustomize-binary")
            .arg(support::kustomize_binary())
            .env_remove("KUBECONFIG")
            .env_remove("SOPS_AGE_KEY_FILE")
            .env_remove("SOPS_AGE_KEY")
            .env("HOME", &home)
            .env("XDG_CONFIG_HOME", home.join("config"))
            .stdin(std::process::Stdio::null());
        if let Some(key) = key {
            cmd.arg("--sops-age-key-file").arg(key);
        }
        cmd.output()
    };
    let out = run(Some(&k.dir.path().join("key.txt"))).await.expect("run");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{text}{err}");
    let printed: Vec<Value> = serde_saphyr::from_multiple(&text).expect("YAML");
    let find = |kind: &str, name: &str| {
        printed
            .iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("{kind} {name} not printed:\n{text}"))
            .clone()
    };
    assert_eq!(
        find("Secret", "prod-db")["stringData"]["password"],
        PASSWORD
    );
    assert_eq!(
        find("Secret", "prod-db")["metadata"]["labels"]["env"],
        "prod"
    );
    assert_eq!(
        find("Secret", "prod-gen")["data"]["PASSWORD"],
        STANDARD.encode(PASSWORD)
    );
    assert_eq!(
        find("ConfigMap", "prod-app")["data"]["api-key"],
        "patched-key-e2e"
    );
    assert!(!text.contains("ENC[") && !text.contains("sops:"), "{text}");

    let out = run(None).await.expect("run");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("no local age key was found"), "{err}");
}
