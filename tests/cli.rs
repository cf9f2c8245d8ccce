//! End to end tests of the `kubectl-applyset` plugin: the binary run as a process against
//! the real control plane of this test binary, with an in-process operator where a command
//! needs one (`reconcile`, and the sets `diff` and `tree` look at). Also: `--help` compared
//! with a checked-in snapshot, through kubectl's plugin mechanism too, and `build` offline.

mod support;

use support::operator;

use std::{path::Path, process::Output};

use kube::api::{Patch, PatchParams};

use operator::*;
use serde_json::{Value, json};
use support::cli::{PLUGIN, on_cluster, plugin, shown};
use support::scratch;
use support::sops as sops_tools;

/// The checked-in `--help` text (regenerate: `kubectl-applyset --help > tests/cli/help.txt`).
const HELP: &str = include_str!("cli/help.txt");

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Writes an ApplySet document for `set` with `spec` to `path` (JSON is YAML).
fn write_set(path: &Path, set: &Parent, spec: &Value) {
    let doc = json!({
        "apiVersion": "applyset.dev/v1alpha1",
        "kind": set.kind(),
        "metadata": {"name": set.name, "namespace": set.namespace},
        "spec": spec,
    });
    let text = serde_json::to_string_pretty(&doc).expect("json");
    std::fs::write(path, text).expect("write the set file");
}

/// `build` decrypts the SOPS-encrypted members of a set with spec.decryption with a local age
/// key (`--sops-age-key-file`, or `SOPS_AGE_KEY`), as the operator would; without one it says
/// how to give one. The fixture is encrypted by the real sops with a key from age-keygen.
#[tokio::test]
async fn build_decrypts_sops_members_with_a_local_key() {
    let dir = scratch("cli-sops");
    let key = sops_tools::age_keygen(&dir, "keys.txt");
    let secret = sops_tools::sops_encrypt(
        &dir,
        "s.yaml",
        b"apiVersion: v1\nkind: Secret\nmetadata: {name: db}\nstringData: {password: cli-pw}\n",
        &key.recipient,
        &["--encrypted-regex", "^stringData$"],
    );
    let member: Value = serde_saphyr::from_slice(&secret).expect("yaml");
    let set_file = dir.join("set.yaml");
    let doc = json!({"apiVersion": "applyset.dev/v1alpha1", "kind": "ApplySet",
        "metadata": {"name": "web", "namespace": "team"},
        "spec": {"manifests": [member],
            "decryption": {"provider": "sops", "secretRef": {"name": "sops-age"}}}});
    std::fs::write(&set_file, serde_json::to_string(&doc).expect("json")).expect("write");
    let set_path = set_file.to_str().expect("path");
    let home = dir.join("home");
    let run = |args: Vec<String>, env: Vec<(&'static str, String)>| {
        let home = home.clone();
        async move {
            let mut cmd = tokio::process::Command::new(PLUGIN);
            cmd.args(&args)
                .env_remove("KUBECONFIG")
                .env_remove("SOPS_AGE_KEY_FILE")
                .env_remove("SOPS_AGE_KEY")
                .env("HOME", &home)
                .env("XDG_CONFIG_HOME", home.join("config"))
                .stdin(std::process::Stdio::null());
            for (k, v) in env {
                cmd.env(k, v);
            }
            cmd.output().await.expect("run kubectl-applyset")
        }
    };
    let key_file = dir.join("keys.txt").display().to_string();
    let with_flag = run(
        vec![
            "build".into(),
            "-f".into(),
            set_path.into(),
            "--sops-age-key-file".into(),
            key_file,
        ],
        vec![],
    )
    .await;
    assert!(with_flag.status.success(), "{}", shown(&with_flag));
    let text = stdout(&with_flag);
    assert!(
        text.contains("cli-pw") && !text.contains("ENC[") && !text.contains("sops:"),
        "{text}"
    );
    let with_env = run(
        vec!["build".into(), "-f".into(), set_path.into()],
        vec![("SOPS_AGE_KEY", key.text.clone())],
    )
    .await;
    assert!(with_env.status.success(), "{}", shown(&with_env));
    assert_eq!(stdout(&with_env), text);
    let without = run(vec!["build".into(), "-f".into(), set_path.into()], vec![]).await;
    assert!(!without.status.success(), "{}", shown(&without));
    assert!(
        stderr(&without).contains("no local age key was found"),
        "{}",
        shown(&without)
    );
}

/// `diff` of a set with a SOPS-encrypted ConfigMap (encrypted_regex ^data$) decrypts it with
/// the local key and withholds the decrypted values (only Secrets are masked otherwise).
#[tokio::test]
async fn diff_withholds_values_decrypted_from_sops_members() {
    let h = Harness::new("cli-sops-diff").await;
    let ns = h.ns.as_str();
    let dir = scratch("cli-sops-diff");
    let key = sops_tools::age_keygen(&dir, "keys.txt");
    let plain = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cfg, namespace: {ns}}}\ndata: {{url: https://db.internal}}\n"
    );
    let enc = sops_tools::sops_encrypt(
        &dir,
        "c.yaml",
        plain.as_bytes(),
        &key.recipient,
        &["--encrypted-regex", "^data$"],
    );
    let member: Value = serde_saphyr::from_slice(&enc).expect("yaml");
    let set = h.applyset("sops");
    let file = dir.join(format!("{ns}.yaml"));
    write_set(
        &file,
        &set,
        &json!({"manifests": [member], "decryption": {"provider": "sops", "secretRef": {"name": "k"}}}),
    );
    let key_file = dir.join("keys.txt").display().to_string();
    let path = file.to_str().expect("path");
    let out = on_cluster(&["diff", "-f", path, "--sops-age-key-file", &key_file]).await;
    let text = stdout(&out);
    assert!(text.contains("1 to create"), "{}", shown(&out));
    assert!(
        text.contains("url: <redacted>") && !text.contains("db.internal") && !text.contains("ENC["),
        "{}",
        shown(&out)
    );
}

/// `diff` of a set whose ConfigMap takes values from a Secret (spec.postBuild.substituteFrom)
/// masks every value of that ConfigMap on both sides, after the Secret rotated too (the live
/// side holds the old values): multi-line, quoted and 1-byte values alike; a change shows as
/// `*** (before)` / `*** (after)`. A member that takes no Secret's variable shows its values.
#[tokio::test]
async fn diff_withholds_values_substituted_from_secrets() {
    let h = Harness::new("cli-subst-diff").await;
    let op = h.start_operator();
    let ns = h.ns.as_str();
    // A value a diff's YAML quotes or escapes, a 1-byte one (a multi-line value cannot be
    // substituted into a valid manifest's text: the masking's unit tests cover it).
    let vars = |password: &str, quoted: &str, pin: &str| {
        let mut vars = secret_in(ns, "vars");
        vars["stringData"] = json!({"dbpassword": password, "quoted": quoted, "pin": pin});
        vars
    };
    let secret = vars("s3cr3t-passw0rd", "q\"u\\o1", "x");
    ssa(&h.client, &secret_ar(), Some(ns), "test", secret).await;
    let plain = configmap_in(ns, "plain-vars", json!({"region": "eu-west-1"}));
    ssa(&h.client, &configmap_ar(), Some(ns), "test", plain).await;
    let set = h.applyset("subst");
    let member = configmap(
        "cfg",
        json!({"password": "${dbpassword}", "quoted": "${quoted}",
            "pin": "${pin}", "region": "${region}"}),
    );
    let post_build = json!({"substituteFrom": [
        {"kind": "Secret", "name": "vars"},
        {"kind": "ConfigMap", "name": "plain-vars"},
    ]});
    let applied = json!({"manifests": [member.clone()], "postBuild": post_build.clone()});
    set.create(applied).await;
    set.wait_ready().await;
    stop(op).await;
    // The Secret rotates: the live cfg holds the old values; the file adds a member that
    // takes no Secret's variable.
    let rotated = vars("n3w-passw0rd", "q\"u\\o2", "z");
    ssa(&h.client, &secret_ar(), Some(ns), "test", rotated).await;
    let dir = scratch("cli-subst-diff");
    let file = dir.join(format!("{ns}.yaml"));
    let region = configmap("plain", json!({"region": "${region}"}));
    let spec = json!({"manifests": [member, region], "postBuild": post_build});
    write_set(&file, &set, &spec);
    let out = on_cluster(&["diff", "-f", file.to_str().expect("path")]).await;
    let text = stdout(&out);
    assert!(text.contains("1 to create, 1 to change"), "{}", shown(&out));
    // The change shows, none of the values, old or new; the other member's values show.
    assert!(
        text.contains("*** (before)") && text.contains("*** (after)"),
        "{}",
        shown(&out)
    );
    assert!(text.contains("+  region: eu-west-1"), "{}", shown(&out));
    for value in [
        "s3cr3t-passw0rd",
        "n3w-passw0rd",
        "czNjcjN0LXBhc3N3MHJk",
        "u\\o",
    ] {
        assert!(!text.contains(value), "{value}: {}", shown(&out));
    }
    for line in text.lines().filter(|l| l.contains("pin:")) {
        assert!(line.contains("***"), "{line}: {}", shown(&out));
    }
}

#[tokio::test]
async fn help_matches_the_snapshot() {
    let out = plugin(&["--help"]).await;
    assert!(out.status.success(), "{}", shown(&out));
    assert_eq!(
        stdout(&out),
        HELP,
        "`kubectl-applyset --help` changed; if intended, update tests/cli/help.txt"
    );
}

/// kubectl finds the plugin on the PATH: `kubectl applyset --help` runs it.
#[tokio::test]
async fn kubectl_runs_the_plugin_from_the_path() {
    let bin = applyset_testenv::binaries().expect("the kube binaries");
    let dir = Path::new(PLUGIN).parent().expect("the plugin's directory");
    let path = format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = tokio::process::Command::new(bin.join("kubectl"))
        .args(["applyset", "--help"])
        .env("PATH", path)
        .output()
        .await
        .expect("run kubectl");
    assert!(out.status.success(), "{}", shown(&out));
    assert_eq!(stdout(&out), HELP);
}

/// `build` without a cluster: members with the part-of label; errors name the file and line;
/// a configMap source says it needs a cluster.
#[tokio::test]
async fn build_offline_prints_members_and_names_file_and_line_of_errors() {
    let dir = scratch("cli-build");
    let good = dir.join("good.yaml");
    std::fs::write(
        &good,
        "\
apiVersion: applyset.dev/v1alpha1
kind: ApplySet
metadata:
  name: web
  namespace: team
spec:
  manifests:
  - apiVersion: v1
    kind: ConfigMap
    metadata:
      name: a
    data:
      k: v
",
    )
    .expect("write");
    let out = plugin(&["build", "-f", good.to_str().expect("path")]).await;
    assert!(out.status.success(), "{}", shown(&out));
    let id = applyset_id("team", "web");
    let text = stdout(&out);
    assert!(
        text.contains(&format!("applyset.kubernetes.io/part-of: {id}")),
        "{}",
        shown(&out)
    );
    assert!(text.contains("namespace: team"), "{}", shown(&out));

    let bad = dir.join("bad.yaml");
    std::fs::write(
        &bad,
        "\
apiVersion: applyset.dev/v1alpha1
kind: ApplySet
metadata:
  name: web
spec:
  manifests:
  - apiVersion: v1
    kind: ConfigMap
    metadata:
      name: a
  - apiVersion: v1
    kind: ConfigMap
    metadata:
      labels:
        k: v
",
    )
    .expect("write");
    let out = plugin(&["build", "-f", bad.to_str().expect("path")]).await;
    assert_eq!(out.status.code(), Some(2), "{}", shown(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "{}:11: spec.manifests[1]: ConfigMap: metadata.name is missing",
            bad.display()
        )),
        "{}",
        shown(&out)
    );

    build_errors_name_file_and_line(&dir).await;
}

/// `build` without a cluster refuses a source it would read from one, and names the file of a
/// YAML syntax error (the rest of the test above).
async fn build_errors_name_file_and_line(dir: &Path) {
    let source = dir.join("source.yaml");
    std::fs::write(
        &source,
        "\
apiVersion: applyset.dev/v1alpha1
kind: ApplySet
metadata:
  name: web
spec:
  sources:
  - configMap:
      name: manifests
",
    )
    .expect("write");
    let out = plugin(&["build", "-f", source.to_str().expect("path")]).await;
    assert_eq!(out.status.code(), Some(2), "{}", shown(&out));
    assert!(
        stderr(&out).contains(&format!("{}:7: ", source.display()))
            && stderr(&out).contains("build runs without a cluster; run it with --cluster"),
        "{}",
        shown(&out)
    );

    let yaml_error = dir.join("syntax.yaml");
    std::fs::write(&yaml_error, "apiVersion: v1\nkind: [\n").expect("write");
    let out = plugin(&["build", "-f", yaml_error.to_str().expect("path")]).await;
    assert_eq!(out.status.code(), Some(2), "{}", shown(&out));
    assert!(
        stderr(&out).contains(&format!("{}:", yaml_error.display())),
        "{}",
        shown(&out)
    );
}

/// `diff`: exit 0 when the cluster matches, 1 with a unified diff of a change, an object to
/// create, a member to prune, masked Secret values and a conflict with another manager; 2 on
/// an invalid file.
#[tokio::test]
async fn diff_shows_changes_prunes_masked_secrets_and_conflicts() {
    let h = Harness::new("cli-diff").await;
    let op = h.start_operator();
    let ns = h.ns.as_str();
    let set = h.applyset("app");
    let mut token = secret("token");
    token["data"] = json!({"password": "b2xkLXNlY3JldA==", "user": "YWRtaW4="});
    let applied = json!({"manifests": [
        configmap("a", json!({"k": "a"})),
        configmap("b", json!({"k": "b"})),
        token,
        secret("gone"),
    ]});
    set.create(applied.clone()).await;
    set.wait_ready().await;
    // The diff needs no operator (and one would fight the other manager below).
    stop(op).await;
    let dir = scratch("cli-diff");
    let file = dir.join(format!("{ns}.yaml"));
    let path = file.to_str().expect("path");

    write_set(&file, &set, &applied);
    let out = on_cluster(&["diff", "-f", path]).await;
    assert_eq!(out.status.code(), Some(0), "{}", shown(&out));
    assert!(
        stdout(&out).contains("0 to create, 0 to change, 0 to prune, 0 conflicts, 4 unchanged"),
        "{}",
        shown(&out)
    );

    // Another manager takes b's field; the file changes a and the Secret, adds c, drops gone.
    dyn_api(&h.client, &configmap_ar(), Some(ns))
        .patch(
            "b",
            &PatchParams::apply("someone-else").force(),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}, "data": {"k": "theirs"}})),
        )
        .await
        .expect("another manager takes b's field");
    let mut token = secret("token");
    token["data"] = json!({"password": "bmV3LXNlY3JldA==", "user": "YWRtaW4="});
    let changed = json!({"manifests": [
        configmap("a", json!({"k": "changed"})),
        configmap("b", json!({"k": "ours"})),
        configmap("c", json!({"k": "c"})),
        token,
    ]});
    write_set(&file, &set, &changed);
    let out = on_cluster(&["diff", "-f", path]).await;
    assert_changes_shown(&out, ns);

    // Nothing was written by the diff.
    let a = must_get(&h.client, &configmap_ar(), Some(ns), "a").await;
    assert_eq!(a.data["data"]["k"], "a");
    assert!(!exists(&h.client, &configmap_ar(), Some(ns), "c").await);

    // An invalid file is an error.
    write_set(
        &file,
        &set,
        &json!({"manifests": [{"apiVersion": "v1", "kind": "ConfigMap"}]}),
    );
    let out = on_cluster(&["diff", "-f", path]).await;
    assert_eq!(out.status.code(), Some(2), "{}", shown(&out));
}

/// What the diff of the changed file shows (see the test above): exit 1, the counts, a
/// unified diff of the change, the creation and the prune, Secret values masked and a changed
/// one marked, and the conflict with another field manager.
fn assert_changes_shown(out: &Output, ns: &str) {
    assert_eq!(out.status.code(), Some(1), "{}", shown(out));
    let text = stdout(out);
    assert!(
        text.contains("1 to create, 2 to change, 1 to prune, 1 conflicts, 0 unchanged"),
        "{}",
        shown(out)
    );
    assert!(
        text.contains(&format!(
            "--- live/v1.ConfigMap.{ns}.a\n+++ merged/v1.ConfigMap.{ns}.a\n"
        )),
        "{}",
        shown(out)
    );
    assert!(text.contains("-  k: a\n+  k: changed\n"), "{}", shown(out));
    assert!(
        text.contains(&format!("--- /dev/null\n+++ merged/v1.ConfigMap.{ns}.c\n")),
        "{}",
        shown(out)
    );
    assert!(
        text.contains(&format!("--- live/v1.Secret.{ns}.gone\n+++ /dev/null\n")),
        "{}",
        shown(out)
    );
    // Secret values never show; a changed one is marked.
    for value in [
        "b2xkLXNlY3JldA==",
        "bmV3LXNlY3JldA==",
        "YWRtaW4=",
        "c2VjcmV0",
    ] {
        assert!(!text.contains(value), "{value} shown:\n{}", shown(out));
    }
    assert!(
        text.contains("-  password: '*** (before)'\n+  password: '*** (after)'\n")
            || text.contains("-  password: \"*** (before)\"\n+  password: \"*** (after)\"\n"),
        "{}",
        shown(out)
    );
    assert!(
        text.contains(&format!(
            "# conflict ConfigMap {ns}/b: conflict with field manager(s) \"someone-else\""
        )),
        "{}",
        shown(out)
    );
}

/// `kubectl applyset diff` and Plan mode run one plan (the library's `SetEngine::plan`): on a set
/// that adds a member (c), changes one (a), prunes one (gone) and refuses one (b: another
/// field manager owns the field it sets), both refuse b with the same message; once b no
/// longer conflicts, Plan mode's lists are exactly the diff's creations, changes and prunes.
#[tokio::test]
async fn diff_and_plan_mode_agree() {
    let h = Harness::new("cli-agree").await;
    let _op = h.start_operator();
    let ns = h.ns.as_str();
    let set = h.applyset("app");
    set.create(json!({"manifests": [
        configmap("a", json!({"k": "a"})),
        configmap("b", json!({"k": "b"})),
        configmap("gone", json!({"k": "g"})),
    ]}))
    .await;
    set.wait_ready().await;
    dyn_api(&h.client, &configmap_ar(), Some(ns))
        .patch(
            "b",
            &PatchParams::apply("someone-else").force(),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}, "data": {"k": "theirs"}})),
        )
        .await
        .expect("another manager takes b's field");
    let dir = scratch("cli-agree");
    let file = dir.join(format!("{ns}.yaml"));
    let path = file.to_str().expect("path");
    let with_b = |b: Value| {
        json!({"mode": "Plan", "manifests": [
            configmap("a", json!({"k": "changed"})),
            configmap("b", b),
            configmap("c", json!({"k": "c"})),
        ]})
    };

    // b refused: the diff's conflict line is Plan mode's reason and message.
    let refusing = with_b(json!({"k": "ours"}));
    write_set(&file, &set, &refusing);
    let out = on_cluster(&["diff", "-f", path]).await;
    assert_eq!(out.status.code(), Some(1), "{}", shown(&out));
    let text = stdout(&out);
    assert!(
        text.contains("1 to create, 1 to change, 1 to prune, 1 conflicts, 0 unchanged"),
        "{}",
        shown(&out)
    );
    let conflict = text
        .lines()
        .find_map(|l| l.strip_prefix("# conflict "))
        .unwrap_or_else(|| panic!("no conflict line: {}", shown(&out)))
        .to_string();
    assert!(
        conflict.starts_with(&format!("ConfigMap {ns}/b: ")),
        "{conflict}"
    );
    set.patch_spec(refusing).await;
    let st = set.wait_ready_reason(Some("False"), "Conflict").await;
    let ready = condition(&st, "Ready").expect("Ready");
    assert!(
        ready.message.contains(&conflict),
        "Plan mode: {}\ndiff: {conflict}",
        ready.message
    );

    // b as the other manager has it: no conflict; the same plan both ways.
    let agreeing = with_b(json!({"k": "theirs"}));
    write_set(&file, &set, &agreeing);
    let out = on_cluster(&["diff", "-f", path]).await;
    assert_eq!(out.status.code(), Some(1), "{}", shown(&out));
    let text = stdout(&out);
    assert!(
        text.contains("1 to create, 1 to change, 1 to prune, 0 conflicts, 1 unchanged"),
        "{}",
        shown(&out)
    );
    set.patch_spec(agreeing).await;
    let st = set.wait_ready_reason(None, "PlanReady").await;
    assert_plan_lists(&st);
    assert_diffs_named(&out, ns);
    // Neither wrote anything.
    let a = must_get(&h.client, &configmap_ar(), Some(ns), "a").await;
    assert_eq!(a.data["data"]["k"], "a");
    assert!(!exists(&h.client, &configmap_ar(), Some(ns), "c").await);
    assert!(exists(&h.client, &configmap_ar(), Some(ns), "gone").await);
}

/// Plan mode's lists of the agreeing set (see the test above): c to create, a to update,
/// gone to prune, one unchanged.
fn assert_plan_lists(st: &applyset_operator::api::ApplySetStatus) {
    let plan = st.plan.clone().expect("status.plan");
    let named = |list: &[applyset_operator::api::MemberRef]| -> Vec<String> {
        list.iter().map(|m| m.name.clone()).collect()
    };
    assert_eq!(named(&plan.create), ["c"], "{}", status_json(st));
    assert_eq!(named(&plan.update), ["a"], "{}", status_json(st));
    assert_eq!(named(&plan.prune), ["gone"], "{}", status_json(st));
    assert_eq!(plan.unchanged, 1, "{}", status_json(st));
}

/// The agreeing diff (see the test above) shows the creation of c, the change of a and the
/// prune of gone, each under the names `kubectl diff` gives them.
fn assert_diffs_named(out: &Output, ns: &str) {
    for (name, old, new) in [
        (
            "c",
            "/dev/null".to_string(),
            format!("merged/v1.ConfigMap.{ns}.c"),
        ),
        (
            "a",
            format!("live/v1.ConfigMap.{ns}.a"),
            format!("merged/v1.ConfigMap.{ns}.a"),
        ),
        (
            "gone",
            format!("live/v1.ConfigMap.{ns}.gone"),
            "/dev/null".to_string(),
        ),
    ] {
        assert!(
            stdout(out).contains(&format!("--- {old}\n+++ {new}\n")),
            "{name}: {}",
            shown(out)
        );
    }
}

/// The operator echoes the reconcile request it handled in status.lastHandledReconcileAt;
/// `reconcile` waits for that echo and reports the outcome (exit 1 when suspended: not
/// Ready); `suspend` and `resume` set spec.suspend.
#[tokio::test]
async fn reconcile_waits_for_the_operator_and_suspend_resume() {
    let h = Harness::new("cli-rec").await;
    let op = h.start_operator();
    let ns = h.ns.as_str();
    let set = h.applyset("app");
    set.create(json!({"manifests": [configmap("a", json!({"k": "a"}))]}))
        .await;
    set.wait_ready().await;

    // The echo, through the API alone.
    set.patch_metadata(
        json!({"annotations": {"applyset.dev/reconcile-requested-at": "by-hand-1"}}),
    )
    .await;
    set.wait_until("the echo of by-hand-1", DEADLINE, |_, s| {
        (s?.last_handled_reconcile_at.as_deref() == Some("by-hand-1")).then_some(())
    })
    .await;

    let out = on_cluster(&["reconcile", "app", "-n", ns, "--timeout", "60s"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", shown(&out));
    assert!(
        stdout(&out).contains(&format!(
            "ApplySet {ns}/app: Ready=True ReconciliationSucceeded"
        )),
        "{}",
        shown(&out)
    );
    let requested = set
        .annotation("applyset.dev/reconcile-requested-at")
        .await
        .expect("the request annotation");
    let status = set.status().await.expect("status");
    assert_eq!(
        status.last_handled_reconcile_at.as_deref(),
        Some(requested.as_str())
    );

    let out = on_cluster(&["suspend", "applyset/app", "-n", ns]).await;
    assert!(out.status.success(), "{}", shown(&out));
    assert_eq!(stdout(&out), format!("ApplySet {ns}/app suspended\n"));
    let out = on_cluster(&["reconcile", "app", "-n", ns, "--timeout", "60s"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", shown(&out));
    assert!(stdout(&out).contains("Suspended"), "{}", shown(&out));

    let out = on_cluster(&["resume", "app", "-n", ns]).await;
    assert!(out.status.success(), "{}", shown(&out));
    let out = on_cluster(&["reconcile", "app", "-n", ns, "--timeout", "60s"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", shown(&out));
    stop(op).await;

    // No operator: the wait ends at the timeout, an error.
    let out = on_cluster(&["reconcile", "app", "-n", ns, "--timeout", "2s"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", shown(&out));
    assert!(
        stderr(&out).contains("did not handle the request within"),
        "{}",
        shown(&out)
    );
}

/// `reconcile` of a set that waits for its health waits through `Progressing` until the
/// health decides (or its own timeout: not Ready, exit 1).
#[tokio::test]
async fn reconcile_waits_for_the_health_of_a_set_that_waits() {
    let h = Harness::new("cli-health").await;
    let op = h.start_operator();
    let ns = h.ns.as_str();
    let set = h.applyset("web");
    set.create(json!({"wait": true, "timeout": "10m", "manifests": [deployment("web")]}))
        .await;
    set.wait_ready_reason(Some("Unknown"), "Progressing").await;
    let out = on_cluster(&["reconcile", "web", "-n", ns, "--timeout", "3s"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", shown(&out));
    assert!(
        stdout(&out).contains("Ready=Unknown Progressing"),
        "{}",
        shown(&out)
    );
    // The Deployment controller (here the test) reports the replica available while the
    // plugin waits, after the operator handled its request (still Progressing): the plugin
    // ends with the set Ready.
    let earlier = set.annotation("applyset.dev/reconcile-requested-at").await;
    let waiting = tokio::spawn(on_cluster_owned(vec![
        "reconcile".into(),
        "web".into(),
        "-n".into(),
        ns.to_string(),
        "--timeout".into(),
        "60s".into(),
    ]));
    set.wait_until(
        "the plugin's request handled, still Progressing",
        DEADLINE,
        |obj, st| {
            let requested = obj
                .metadata
                .annotations
                .as_ref()?
                .get("applyset.dev/reconcile-requested-at")?;
            let st = st?;
            (Some(requested) != earlier.as_ref()
                && st.last_handled_reconcile_at.as_ref() == Some(requested)
                && ready(st).reason == "Progressing")
                .then_some(())
        },
    )
    .await;
    let deployments: kube::Api<kube::api::DynamicObject> =
        kube::Api::namespaced_with(h.client.clone(), ns, &deployment_ar());
    let generation = deployments
        .get("web")
        .await
        .expect("the Deployment")
        .metadata
        .generation;
    let available = json!({"status": {"observedGeneration": generation, "replicas": 1,
        "updatedReplicas": 1, "readyReplicas": 1, "availableReplicas": 1, "conditions": [
            {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
            {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}]}});
    deployments
        .patch_status(
            "web",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(available),
        )
        .await
        .expect("write the Deployment's status");
    let out = waiting.await.expect("the plugin's task");
    assert_eq!(out.status.code(), Some(0), "{}", shown(&out));
    assert!(
        stdout(&out).contains("Ready=True ReconciliationSucceeded"),
        "{}",
        shown(&out)
    );
    stop(op).await;
}

/// [`on_cluster`] with owned arguments (for a task of its own).
async fn on_cluster_owned(args: Vec<String>) -> Output {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    on_cluster(&args).await
}

/// `tree` lists the members with their health, as text and as JSON; `get` prints the table.
#[tokio::test]
async fn tree_and_get_show_the_set_from_the_cluster() {
    let h = Harness::new("cli-tree").await;
    let op = h.start_operator();
    let ns = h.ns.as_str();
    let set = h.applyset("app");
    set.create(json!({"manifests": [configmap("a", json!({"k": "a"})), deployment("web")]}))
        .await;
    set.wait_ready().await;
    stop(op).await;

    let out = on_cluster(&["tree", "app", "-n", ns]).await;
    assert!(out.status.success(), "{}", shown(&out));
    let text = stdout(&out);
    assert!(
        text.starts_with(&format!(
            "ApplySet.applyset.dev/{ns}/app  Ready=True ReconciliationSucceeded"
        )),
        "{}",
        shown(&out)
    );
    assert!(
        text.contains(&format!("├── ConfigMap/{ns}/a  Current")),
        "{}",
        shown(&out)
    );
    // No deployment controller runs in the test control plane: the Deployment is in progress.
    assert!(
        text.contains(&format!("└── Deployment.apps/{ns}/web  InProgress")),
        "{}",
        shown(&out)
    );

    let out = on_cluster(&["tree", "applyset/app", "-n", ns, "-o", "json"]).await;
    assert!(out.status.success(), "{}", shown(&out));
    let tree: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(tree["kind"], "ApplySet");
    assert_eq!(tree["ready"]["status"], "True");
    let members = tree["members"].as_array().expect("members");
    assert_eq!(members.len(), 2, "{tree}");
    assert_eq!(members[0]["kind"], "ConfigMap");
    assert_eq!(members[0]["health"]["status"], "Current");

    let out = on_cluster(&["get", "-n", ns]).await;
    assert!(out.status.success(), "{}", shown(&out));
    let text = stdout(&out);
    let mut lines = text.lines();
    let header = lines.next().expect("header");
    assert!(
        header.starts_with("NAME") && header.contains("READY") && header.ends_with("MESSAGE"),
        "{text}"
    );
    let row = lines
        .find(|l| l.starts_with("applyset/app "))
        .unwrap_or_else(|| panic!("no row for the set:\n{text}"));
    assert!(
        row.contains("True") && row.contains("applied 2 members"),
        "{row}"
    );
}

/// `diff` of a large set runs concurrently: 400 unchanged members and one changed one.
#[tokio::test]
async fn diff_of_a_large_set() {
    const N: usize = 400;
    let h = Harness::new("cli-large").await;
    let op = h.start_operator();
    let set = h.applyset("big");
    let manifests: Vec<Value> = (0..N)
        .map(|i| configmap(&format!("c{i}"), json!({"i": i.to_string()})))
        .collect();
    set.create(json!({"manifests": manifests})).await;
    set.wait_ready_within(LONG_DEADLINE).await;
    stop(op).await;
    let mut changed = manifests.clone();
    changed[7] = configmap("c7", json!({"i": "seven"}));
    let dir = scratch("cli-large");
    let file = dir.join("big.yaml");
    write_set(&file, &set, &json!({"manifests": changed}));
    let started = std::time::Instant::now();
    let out = on_cluster(&[
        "diff",
        "-f",
        file.to_str().expect("path"),
        "--concurrency",
        "32",
    ])
    .await;
    let took = started.elapsed();
    assert_eq!(out.status.code(), Some(1), "{}", shown(&out));
    assert!(
        stdout(&out).contains(&format!(
            "0 to create, 1 to change, 0 to prune, 0 conflicts, {} unchanged",
            N - 1
        )),
        "{}",
        shown(&out)
    );
    eprintln!("diff of {N} members took {took:?}");
    assert!(
        took < std::time::Duration::from_secs(60),
        "diff of {N} members took {took:?}"
    );
}

/// `diff` refuses, as the operator would, the members of a namespace being terminated — one
/// that exists (the API server would accept its dry-run) and one that does not — names the
/// reason on a `# refused` line and exits 1. An object of the test with a finalizer of its
/// own keeps the namespace Terminating until the end.
#[tokio::test]
async fn diff_refuses_members_of_a_terminating_namespace_and_names_why() {
    let h = Harness::new("cli-refused").await;
    let doomed = h.extra_namespace("cli-doomed").await;
    let set = Parent {
        namespace: Some(doomed.clone()),
        ..h.applyset("app")
    };
    let mut kept = configmap_in(&doomed, "kept", json!({"k": "v"}));
    kept["metadata"]["labels"] = json!({LABEL_PART_OF: set.id()});
    ssa(
        &h.client,
        &configmap_ar(),
        Some(&doomed),
        &set.manager(),
        kept,
    )
    .await;
    let configmaps: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(h.client.clone(), &doomed);
    let hold = json!({"metadata": {"finalizers": ["applyset.dev/test-hold"]}});
    configmaps
        .patch("kept", &PatchParams::default(), &Patch::Merge(hold))
        .await
        .expect("hold the namespace");
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
        kube::Api::all(h.client.clone());
    namespaces
        .delete(&doomed, &Default::default())
        .await
        .expect("delete the namespace");

    let dir = scratch("cli-refused");
    let file = dir.join("app.yaml");
    let spec = json!({"manifests": [
        configmap("kept", json!({"k": "v"})),
        configmap("new", json!({"k": "v"})),
    ]});
    write_set(&file, &set, &spec);
    let out = on_cluster(&["diff", "-f", file.to_str().expect("path")]).await;
    let text = stdout(&out);

    let release = json!({"metadata": {"finalizers": null}});
    configmaps
        .patch("kept", &PatchParams::default(), &Patch::Merge(release))
        .await
        .expect("release the namespace");
    assert_eq!(out.status.code(), Some(1), "{}", shown(&out));
    for name in ["kept", "new"] {
        let line = format!(
            "# refused ConfigMap {doomed}/{name}: namespace {doomed} is being terminated\n"
        );
        assert!(text.contains(&line), "no {line:?} in\n{}", shown(&out));
    }
    assert!(
        text.contains("0 conflicts, 2 refused, 0 unchanged"),
        "{}",
        shown(&out)
    );
}

/// `tree` and `diff` list the set's members through the engine, a page at a time: with
/// `--chunk-size 2` every one of five members is found (the tree shows each; the diff prunes
/// the four no longer declared).
#[tokio::test]
async fn tree_and_diff_list_members_a_page_at_a_time() {
    let h = Harness::new("cli-pages").await;
    let op = h.start_operator();
    let ns = h.ns.as_str();
    let set = h.applyset("paged");
    let manifests: Vec<Value> = (0..5)
        .map(|i| configmap(&format!("c{i}"), json!({"i": i.to_string()})))
        .collect();
    set.create(json!({"manifests": manifests.clone()})).await;
    set.wait_ready().await;
    stop(op).await;

    let out = on_cluster(&["tree", "paged", "-n", ns, "--chunk-size", "2"]).await;
    assert!(out.status.success(), "{}", shown(&out));
    let text = stdout(&out);
    for i in 0..5 {
        assert!(
            text.contains(&format!("ConfigMap/{ns}/c{i}  Current")),
            "c{i} missing:\n{}",
            shown(&out)
        );
    }

    let dir = scratch("cli-pages");
    let file = dir.join("paged.yaml");
    write_set(&file, &set, &json!({"manifests": [manifests[0].clone()]}));
    let path = file.to_str().expect("path");
    let out = on_cluster(&["diff", "-f", path, "--chunk-size", "2"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", shown(&out));
    assert!(
        stdout(&out).contains("0 to create, 0 to change, 4 to prune, 0 conflicts, 1 unchanged"),
        "{}",
        shown(&out)
    );
}
