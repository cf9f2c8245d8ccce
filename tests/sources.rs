//! Manifest sources end to end: the in-process operator reads ConfigMaps, Secrets, HTTP(S)
//! documents and bundles, Git repositories and OCI artifacts from real servers on loopback
//! (started by these tests: an HTTPS server with a self-signed CA, `git http-backend`, the
//! CNCF distribution registry) and applies them to the real control plane.

mod support;

use support::{init, operator, servers};

use std::sync::Arc;

use applyset_operator::{api::ApplySetStatus, controller::Operator};
use base64::Engine as _;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::{
    Api,
    api::{Patch, PatchParams, PostParams},
};
use operator::*;
use serde_json::{Value, json};
use servers::*;

/// A ConfigMap document.
fn cm_doc(name: &str, value: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  v: \"{value}\"\n")
}

fn docs(d: &[String]) -> String {
    d.join("---\n")
}

/// The `v` value of ConfigMap `name`, or None when it does not exist.
async fn cm_value(h: &Harness, ns: &str, name: &str) -> Option<String> {
    let obj = get_obj(&h.client, &configmap_ar(), Some(ns), name).await?;
    obj.data
        .get("data")
        .and_then(|d| d.get("v"))
        .and_then(Value::as_str)
        .map(str::to_string)
}

async fn assert_members(h: &Harness, ns: &str, present: &[&str], absent: &[&str]) {
    for n in present {
        assert!(
            exists(&h.client, &configmap_ar(), Some(ns), n).await,
            "ConfigMap {ns}/{n} should exist"
        );
    }
    for n in absent {
        assert!(
            !exists(&h.client, &configmap_ar(), Some(ns), n).await,
            "ConfigMap {ns}/{n} should not exist"
        );
    }
}

/// Waits until status shows Ready=True with a lastAppliedRevision other than `old`.
async fn wait_new_revision(set: &Parent, old: &str) -> ApplySetStatus {
    set.wait_until(
        &format!("a lastAppliedRevision other than {old}"),
        LONG_DEADLINE,
        |_, st| {
            let st = st?;
            let applied = st.last_applied_revision.as_deref()?;
            (applied != old && ready(st).status == "True").then(|| st.clone())
        },
    )
    .await
}

fn applied(st: &ApplySetStatus) -> String {
    st.last_applied_revision
        .clone()
        .unwrap_or_else(|| panic!("no lastAppliedRevision: {}", status_json(st)))
}

async fn put_configmap(h: &Harness, ns: &str, name: &str, data: Value) {
    let api: Api<ConfigMap> = Api::namespaced(h.client.clone(), ns);
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

async fn put_secret(h: &Harness, ns: &str, name: &str, data: &[(&str, &[u8])]) {
    let api: Api<Secret> = Api::namespaced(h.client.clone(), ns);
    let b64 = base64::engine::general_purpose::STANDARD;
    let data: serde_json::Map<String, Value> = data
        .iter()
        .map(|(k, v)| (k.to_string(), json!(b64.encode(v))))
        .collect();
    let s: Secret = serde_json::from_value(
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "data": data}),
    )
    .expect("secret");
    api.patch(name, &PatchParams::apply("test").force(), &Patch::Apply(&s))
        .await
        .expect("apply secret");
}

fn message(st: &ApplySetStatus) -> String {
    ready(st).message.clone()
}

fn assert_not_stalled(st: &ApplySetStatus) {
    assert!(
        condition(st, "Stalled").is_none(),
        "a source failure is retried, not Stalled: {}",
        status_json(st)
    );
}

// ---------------------------------------------------------------------------------------------
// ConfigMap and Secret

/// Documents in ConfigMap keys (only .yaml/.yml/.json); a change of the ConfigMap is applied
/// at once through the watch (interval and retryInterval are an hour); a YAML error names the
/// key and line; a missing ConfigMap is picked up as soon as it is created.
#[tokio::test]
async fn configmap_source_follows_changes_through_the_watch() {
    init();
    let h = Harness::new("src-cm").await;
    let op = h.start_operator_cross_namespace();
    let ns = h.ns.clone();
    put_configmap(
        &h,
        &ns,
        "bundle",
        json!({
            "app.yaml": docs(&[cm_doc("a", "1"), cm_doc("b", "1")]),
            "more.yml": cm_doc("c", "1"),
            "notes.txt": cm_doc("ignored", "1"),
        }),
    )
    .await;
    let set = h.applyset("cm");
    set.create(json!({"interval": "1h", "retryInterval": "1h",
        "sources": [{"configMap": {"name": "bundle"}}]}))
        .await;
    let st = set.wait_ready().await;
    assert_members(&h, &ns, &["a", "b", "c"], &["ignored"]).await;
    let rev = applied(&st);
    assert!(
        rev.starts_with("sha256:") && rev.contains(&format!("; configMap:{ns}/bundle@")),
        "revision {rev}"
    );
    assert_eq!(summary(&st).members, 3);

    // A change of the ConfigMap: applied and pruned without waiting for the interval.
    put_configmap(
        &h,
        &ns,
        "bundle",
        json!({"app.yaml": cm_doc("a", "2"), "d.json": r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"d"}}"#}),
    )
    .await;
    let st = wait_new_revision(&set, &rev).await;
    assert_members(&h, &ns, &["a", "d"], &["b", "c"]).await;
    assert_eq!(cm_value(&h, &ns, "a").await.as_deref(), Some("2"));
    assert_eq!(summary(&st).pruned, 2, "{}", status_json(&st));

    // A YAML error names the source, the key and the line; nothing changes.
    let a_rv = rv(&h.client, &configmap_ar(), Some(&ns), "a").await;
    put_configmap(
        &h,
        &ns,
        "bundle",
        json!({"app.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata: [x, y\n"}),
    )
    .await;
    let st = set
        .wait_ready_reason(Some("False"), "ValidationFailed")
        .await;
    let msg = message(&st);
    assert!(
        msg.contains(&format!("configMap {ns}/bundle key app.yaml, line ")),
        "{msg}"
    );
    assert_members(&h, &ns, &["a", "d"], &[]).await;
    assert_eq!(rv(&h.client, &configmap_ar(), Some(&ns), "a").await, a_rv);

    // A source that does not exist yet: SourceFailed, then applied as soon as it appears.
    let later = h.applyset("later");
    later
        .create(json!({"interval": "1h", "retryInterval": "1h", "targetNamespace": h.extra_namespace("src-cm2").await,
            "sources": [{"configMap": {"name": "later"}}]}))
        .await;
    let st = later.wait_ready_reason(Some("False"), "SourceFailed").await;
    assert!(message(&st).contains("does not exist"), "{}", message(&st));
    assert_not_stalled(&st);
    put_configmap(&h, &ns, "later", json!({"x.yaml": cm_doc("later-x", "1")})).await;
    later.wait_ready().await;
    stop(op).await;
}

/// Secret sources with listed keys; a ClusterApplySet must name the namespace of its
/// ConfigMap/Secret; the CRD refuses an entry with two kinds.
#[tokio::test]
async fn secret_source_and_cluster_applyset_namespaces() {
    init();
    let h = Harness::new("src-secret").await;
    let op = h.start_operator();
    let ns = h.ns.clone();
    put_secret(
        &h,
        &ns,
        "bundle",
        &[
            ("x.yaml", cm_doc("sx", "1").as_bytes()),
            ("y.yaml", cm_doc("sy", "1").as_bytes()),
        ],
    )
    .await;
    let set = h.applyset("secret");
    set.create(json!({"sources": [{"secret": {"name": "bundle", "keys": ["y.yaml"]}}]}))
        .await;
    let st = set.wait_ready().await;
    assert_members(&h, &ns, &["sy"], &["sx"]).await;
    assert!(applied(&st).contains(&format!("; secret:{ns}/bundle@")));

    // ClusterApplySet: the namespace is required.
    let target = h.extra_namespace("src-secret-t").await;
    let cset = h.cluster_applyset(&unique("src-cset"));
    cset.create(json!({"targetNamespace": target, "sources": [{"secret": {"name": "bundle"}}]}))
        .await;
    let st = cset
        .wait_ready_reason(Some("False"), "ValidationFailed")
        .await;
    assert!(
        message(&st).contains("must name the namespace"),
        "{}",
        message(&st)
    );
    assert_condition(&st, "Stalled", "True");
    cset.patch_spec(json!({"sources": [{"secret": {"name": "bundle", "namespace": ns}}]}))
        .await;
    cset.wait_ready().await;
    assert_members(&h, &target, &["sx", "sy"], &[]).await;

    // The CRD's CEL rule: exactly one kind per entry.
    let bad: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "applyset.dev/v1alpha1", "kind": "ApplySet",
        "metadata": {"name": "two-kinds", "namespace": ns},
        "spec": {"sources": [{"configMap": {"name": "a"}, "http": {"url": "https://example.com/a.yaml"}}]}
    }))
    .expect("object");
    let err = set
        .api()
        .create(&PostParams::default(), &bad)
        .await
        .expect_err("two kinds in one entry are refused");
    assert!(
        err.to_string()
            .contains("exactly one of configMap, secret, http, git or oci"),
        "{err}"
    );
    cset.delete().await;
    cset.wait_gone(DEADLINE).await;
    stop(op).await;
}

// ---------------------------------------------------------------------------------------------
// HTTP(S)

/// HTTPS with a self-signed CA and a bearer token from the secretRef; an unchanged document
/// costs a 304 per interval; new content is applied and the rest pruned; without the CA the
/// server is not trusted.
#[tokio::test]
async fn http_source_over_tls_with_ca_token_etag_and_new_revision() {
    init();
    let h = Harness::new("src-https").await;
    let op = h.start_operator();
    let ns = h.ns.clone();
    let tls = Arc::new(Tls::new());
    let server = FileServer::start(Some(tls.clone())).await;
    server.require_auth(Some("Bearer s3cret".into()));
    let v1 = docs(&[cm_doc("a", "1"), cm_doc("b", "1")]);
    server.put("/app.yaml", v1.clone());
    put_secret(
        &h,
        &ns,
        "https-creds",
        &[("token", b"s3cret"), ("ca.crt", tls.ca_pem.as_bytes())],
    )
    .await;
    let set = h.applyset("https");
    set.create(json!({"interval": "2s", "sources": [{"http": {
        "url": server.url("/app.yaml"), "secretRef": {"name": "https-creds"}}}]}))
        .await;
    let st = set.wait_ready().await;
    assert_members(&h, &ns, &["a", "b"], &[]).await;
    let rev = applied(&st);
    assert!(
        rev.ends_with(&format!("; http:sha256:{}", sha256_hex(v1.as_bytes()))),
        "{rev}"
    );

    // The cheap check: conditional GETs answered 304, no new download.
    let full = server.full_responses();
    let metrics = op.metrics();
    let cached = metrics.source_fetches("http", "cached");
    wait_reconciles(&op, 2).await;
    assert_eq!(
        server.full_responses(),
        full,
        "unchanged content is not downloaded again"
    );
    assert!(server.not_modified() >= 1, "a 304 answers the check");
    assert!(metrics.source_fetches("http", "cached") > cached);

    // New content: applied at the next interval, b pruned.
    server.put("/app.yaml", docs(&[cm_doc("a", "2"), cm_doc("c", "1")]));
    let st = wait_new_revision(&set, &rev).await;
    assert_members(&h, &ns, &["a", "c"], &["b"]).await;
    assert_eq!(cm_value(&h, &ns, "a").await.as_deref(), Some("2"));
    assert_eq!(summary(&st).pruned, 1);

    // Without the CA (and the token) the server's certificate is not trusted.
    let other = h.extra_namespace("src-https2").await;
    let noca = h.applyset("noca");
    noca.create(
        json!({"targetNamespace": other, "sources": [{"http": {"url": server.url("/app.yaml")}}]}),
    )
    .await;
    let st = noca.wait_ready_reason(Some("False"), "SourceFailed").await;
    assert!(
        message(&st).to_lowercase().contains("certificate"),
        "{}",
        message(&st)
    );
    assert_members(&h, &other, &[], &["a", "c"]).await;
    stop(op).await;
}

/// A tar.gz bundle: `path` picks a directory, non-manifest files are ignored; a sha256
/// mismatch is SourceFailed and nothing is applied or pruned.
#[tokio::test]
async fn http_bundle_with_path_and_sha256_mismatch() {
    init();
    let h = Harness::new("src-bundle").await;
    let op = h.start_operator();
    let ns = h.ns.clone();
    let server = FileServer::start(None).await;
    let a = cm_doc("a", "1");
    let b = cm_doc("b", "1");
    let c = cm_doc("c", "1");
    let bundle = tar_gz(&[
        Entry::Dir("deploy/"),
        Entry::File("deploy/a.yaml", a.as_bytes()),
        Entry::File("deploy/sub/b.yml", b.as_bytes()),
        Entry::File("deploy/README.md", b"# not a manifest"),
        Entry::File("deploy/run.sh", b"#!/bin/sh\nexit 1\n"),
        Entry::File("other/c.yaml", c.as_bytes()),
    ]);
    let sha = sha256_hex(&bundle);
    server.put("/bundle.tgz", bundle);
    let set = h.applyset("bundle");
    set.create(json!({"sources": [{"http": {"url": server.url("/bundle.tgz"), "path": "deploy", "sha256": sha}}]}))
        .await;
    let st = set.wait_ready().await;
    assert_members(&h, &ns, &["a", "b"], &["c"]).await;
    assert_eq!(summary(&st).members, 2);
    let rev = applied(&st);
    assert!(rev.ends_with(&format!("http:sha256:{sha}")), "{rev}");
    let rvs = resource_versions(
        &h.client,
        &[
            (configmap_ar(), Some(ns.clone()), "a".into()),
            (configmap_ar(), Some(ns.clone()), "b".into()),
        ],
    )
    .await;

    // A wrong pin (with a path that would drop b): SourceFailed, nothing applied or pruned.
    let wrong = "0".repeat(64);
    set.patch_spec(json!({"sources": [{"http": {"url": server.url("/bundle.tgz"), "path": "other", "sha256": wrong}}]}))
        .await;
    let st = set.wait_ready_reason(Some("False"), "SourceFailed").await;
    let msg = message(&st);
    assert!(
        msg.contains(&format!("sha256 is {sha}")) && msg.contains(&wrong),
        "{msg}"
    );
    assert_not_stalled(&st);
    assert_eq!(st.last_applied_revision.as_deref(), Some(rev.as_str()));
    assert_members(&h, &ns, &["a", "b"], &["c"]).await;
    wait_reconciles(&op, 2).await;
    let after = resource_versions(
        &h.client,
        &[
            (configmap_ar(), Some(ns.clone()), "a".into()),
            (configmap_ar(), Some(ns.clone()), "b".into()),
        ],
    )
    .await;
    assert_eq!(after, rvs, "members untouched while the source fails");
    stop(op).await;
}

/// An unreachable source: SourceFailed, retried with backoff, members untouched; when the
/// server is back the set is Ready again.
#[tokio::test]
async fn unreachable_source_is_retried_and_members_stay() {
    init();
    let h = Harness::new("src-down").await;
    let op = h.start_operator();
    let ns = h.ns.clone();
    let server = FileServer::start(None).await;
    server.put("/app.yaml", docs(&[cm_doc("a", "1"), cm_doc("b", "1")]));
    let set = h.applyset("down");
    set.create(json!({"interval": "3s", "retryInterval": "1s",
        "sources": [{"http": {"url": server.url("/app.yaml")}}]}))
        .await;
    set.wait_ready().await;
    let objs = vec![
        (configmap_ar(), Some(ns.clone()), "a".to_owned()),
        (configmap_ar(), Some(ns.clone()), "b".to_owned()),
    ];
    let rvs = resource_versions(&h.client, &objs).await;

    server.stop();
    let st = set.wait_ready_reason(Some("False"), "SourceFailed").await;
    assert!(message(&st).contains("retrying"), "{}", message(&st));
    assert!(st.last_error.is_some());
    assert_not_stalled(&st);
    let failed = op.metrics().source_fetches("any", "failed");
    // Retries keep failing (with backoff) and touch no member.
    eventually("two more failed source reads", LONG_DEADLINE, || {
        let m = op.metrics();
        async move { (m.source_fetches("any", "failed") >= failed + 2).then_some(()) }
    })
    .await;
    assert_eq!(resource_versions(&h.client, &objs).await, rvs);

    server.restart().await;
    let st = set.wait_ready().await;
    assert!(st.last_error.is_none());
    assert_eq!(resource_versions(&h.client, &objs).await, rvs);
    stop(op).await;
}

/// Hostile archives are refused as a whole: traversal, absolute paths, symbolic and hard
/// links, a decompression bomb over the cap. Nothing of them is applied.
#[tokio::test]
async fn hostile_archives_are_refused() {
    init();
    let h = Harness::new("src-hostile").await;
    let mut config = h.config();
    config.source_limits.max_unpacked = 1 << 20;
    let op = Operator::start(h.client.clone(), config);
    let server = FileServer::start(None).await;
    let ok = cm_doc("innocent", "1");
    let zeros = vec![b' '; 3 << 20];
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "traversal",
            tar_gz(&[
                Entry::File("ok.yaml", ok.as_bytes()),
                Entry::File("../evil.yaml", ok.as_bytes()),
            ]),
            "leaves the archive root",
        ),
        (
            "nested-traversal",
            tar_gz(&[
                Entry::File("ok.yaml", ok.as_bytes()),
                Entry::File("a/../../evil.yaml", ok.as_bytes()),
            ]),
            "leaves the archive root",
        ),
        (
            "absolute",
            tar_gz(&[
                Entry::File("ok.yaml", ok.as_bytes()),
                Entry::File("/etc/evil.yaml", ok.as_bytes()),
            ]),
            "absolute path",
        ),
        (
            "symlink",
            tar_gz(&[
                Entry::File("ok.yaml", ok.as_bytes()),
                Entry::Symlink("link.yaml", "/etc/passwd"),
            ]),
            "is a link",
        ),
        (
            "symlink-dir",
            tar_gz(&[
                Entry::Symlink("up", "../.."),
                Entry::File("ok.yaml", ok.as_bytes()),
            ]),
            "is a link",
        ),
        (
            "hardlink",
            tar_gz(&[
                Entry::File("ok.yaml", ok.as_bytes()),
                Entry::HardLink("hard.yaml", "../../../etc/shadow"),
            ]),
            "is a link",
        ),
        (
            "bomb",
            tar_gz(&[
                Entry::File("ok.yaml", ok.as_bytes()),
                Entry::File("big.yaml", &zeros),
            ]),
            "decompresses to more than 1048576 bytes",
        ),
    ];
    let mut sets = Vec::new();
    for (name, data, _) in &cases {
        server.put(&format!("/{name}.tgz"), data.clone());
        let set = h.applyset(name);
        set.create(json!({"sources": [{"http": {"url": server.url(&format!("/{name}.tgz"))}}]}))
            .await;
        sets.push(set);
    }
    for ((name, _, expected), set) in cases.iter().zip(&sets) {
        let st = set.wait_ready_reason(Some("False"), "SourceFailed").await;
        assert!(message(&st).contains(expected), "{name}: {}", message(&st));
    }
    assert_members(&h, &h.ns, &[], &["innocent"]).await;

    // Non-manifest files are ignored, not refused.
    server.put(
        "/mixed.tgz",
        tar_gz(&[
            Entry::File("ok.yaml", ok.as_bytes()),
            Entry::File("install.sh", b"curl | sh"),
            Entry::File("data.bin", &[0, 1, 2, 255]),
        ]),
    );
    let mixed = h.applyset("mixed");
    mixed
        .create(json!({"sources": [{"http": {"url": server.url("/mixed.tgz")}}]}))
        .await;
    let st = mixed.wait_ready().await;
    assert_eq!(summary(&st).members, 1);
    assert_members(&h, &h.ns, &["innocent"], &[]).await;
    stop(op).await;
}

// ---------------------------------------------------------------------------------------------
// Git

/// A branch over smart HTTPS (a self-signed CA from the secretRef) with basic auth: a new commit is applied and pruned; a tag and a
/// pinned commit read their own content; an unchanged branch is not fetched again; a YAML
/// error names the file and line; without credentials the fetch fails.
#[tokio::test]
async fn git_source_branch_tag_commit_and_new_revision() {
    init();
    let h = Harness::new("src-git").await;
    let op = h.start_operator_cross_namespace();
    let ns = h.ns.clone();
    let b64 = base64::engine::general_purpose::STANDARD;
    let tls = Arc::new(Tls::new());
    let server = GitServer::start(
        Some(format!("Basic {}", b64.encode("reader:pw"))),
        Some(tls.clone()),
    )
    .await;
    let repo = server.repo("apps");
    let c1 = repo.commit(
        &[
            ("deploy/a.yaml", Some(&cm_doc("a", "1"))),
            ("deploy/nested/b.yml", Some(&cm_doc("b", "1"))),
            ("deploy/README.md", Some("docs")),
            ("other/x.yaml", Some(&cm_doc("outside", "1"))),
        ],
        "first",
    );
    repo.tag("v1");
    put_secret(
        &h,
        &ns,
        "git-creds",
        &[
            ("username", b"reader"),
            ("password", b"pw"),
            ("ca.crt", tls.ca_pem.as_bytes()),
        ],
    )
    .await;
    let git = |r: Value| json!({"git": {"url": server.url("apps"), "ref": r, "path": "deploy", "secretRef": {"name": "git-creds"}}});

    let branch = h.applyset("branch");
    branch
        .create(json!({"interval": "2s", "sources": [git(json!({"branch": "main"}))]}))
        .await;
    let st = branch.wait_ready().await;
    assert_members(&h, &ns, &["a", "b"], &["outside"]).await;
    let rev = applied(&st);
    assert!(rev.ends_with(&format!("; git:main@sha1:{c1}")), "{rev}");

    // The cheap check: the branch did not move, nothing is fetched.
    let metrics = op.metrics();
    let downloads = metrics.source_fetches("git", "downloaded");
    let cached = metrics.source_fetches("git", "cached");
    wait_reconciles(&op, 2).await;
    assert_eq!(metrics.source_fetches("git", "downloaded"), downloads);
    assert!(metrics.source_fetches("git", "cached") > cached);

    // A new commit: applied at the next interval, b pruned.
    let c2 = repo.commit(
        &[
            ("deploy/a.yaml", Some(&cm_doc("a", "2"))),
            ("deploy/nested/b.yml", None),
            (
                "deploy/d.json",
                Some(r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"d"}}"#),
            ),
        ],
        "second",
    );
    let st = wait_new_revision(&branch, &rev).await;
    assert!(
        applied(&st).ends_with(&format!("; git:main@sha1:{c2}")),
        "{}",
        applied(&st)
    );
    assert_members(&h, &ns, &["a", "d"], &["b"]).await;
    assert_eq!(cm_value(&h, &ns, "a").await.as_deref(), Some("2"));

    // A tag and a pinned commit, each into a namespace of its own.
    let tag_ns = h.extra_namespace("src-git-tag").await;
    let tag = h.applyset("tag");
    tag.create(json!({"targetNamespace": tag_ns, "sources": [git(json!({"tag": "v1"}))]}))
        .await;
    let pin_ns = h.extra_namespace("src-git-pin").await;
    let pinned = h.applyset("pinned");
    pinned
        .create(json!({"targetNamespace": pin_ns, "sources": [git(json!({"commit": c1}))]}))
        .await;
    let st = tag.wait_ready().await;
    assert!(
        applied(&st).ends_with(&format!("; git:v1@sha1:{c1}")),
        "{}",
        applied(&st)
    );
    assert_members(&h, &tag_ns, &["a", "b"], &["d"]).await;
    let st = pinned.wait_ready().await;
    assert!(
        applied(&st).ends_with(&format!("; git:sha1:{c1}")),
        "{}",
        applied(&st)
    );
    assert_members(&h, &pin_ns, &["a", "b"], &["d"]).await;
    assert_eq!(cm_value(&h, &pin_ns, "a").await.as_deref(), Some("1"));

    // A YAML error names the source, the file and the line.
    repo.commit(
        &[(
            "deploy/bad.yaml",
            Some("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: e\ndata: [x\n"),
        )],
        "broken",
    );
    let st = branch
        .wait_until(
            "ValidationFailed for the broken commit",
            LONG_DEADLINE,
            |_, st| {
                let st = st?;
                (ready(st).reason == "ValidationFailed").then(|| st.clone())
            },
        )
        .await;
    let msg = message(&st);
    assert!(
        msg.contains(&format!(
            "git {}@main file deploy/bad.yaml, line ",
            server.url("apps")
        )),
        "{msg}"
    );
    assert_members(&h, &ns, &["a", "d"], &[]).await;

    // Without the credentials the server refuses.
    let anon_ns = h.extra_namespace("src-git-anon").await;
    let anon = h.applyset("anon");
    anon.create(json!({"targetNamespace": anon_ns, "sources": [{"git": {"url": server.url("apps"), "ref": {"branch": "main"}}}]}))
        .await;
    let st = anon.wait_ready_reason(Some("False"), "SourceFailed").await;
    assert_not_stalled(&st);
    stop(op).await;
}

// ---------------------------------------------------------------------------------------------
// OCI

fn artifact(files: &[(&str, &str)]) -> Vec<u8> {
    let entries: Vec<Entry<'_>> = files
        .iter()
        .map(|(p, c)| Entry::File(p, c.as_bytes()))
        .collect();
    tar_gz(&entries)
}

/// A Flux-style artifact in the CNCF distribution registry, by tag and by digest; a new push
/// to the tag is applied and pruned; an unchanged tag costs one HEAD.
#[tokio::test]
async fn oci_source_tag_digest_and_new_revision() {
    init();
    let h = Harness::new("src-oci").await;
    let op = h.start_operator_cross_namespace();
    let ns = h.ns.clone();
    let registry = Registry::start().await;
    let d1 = push_artifact(
        &registry,
        "team/manifests",
        "v1",
        &artifact(&[
            ("a.yaml", &cm_doc("a", "1")),
            ("sub/b.yaml", &cm_doc("b", "1")),
            ("README.md", "docs"),
        ]),
    )
    .await;
    let oci = |extra: Value| {
        let mut o = json!({"url": registry.url("team/manifests"), "insecure": true});
        for (k, v) in extra.as_object().expect("object") {
            o[k] = v.clone();
        }
        json!({"oci": o})
    };
    let set = h.applyset("tag");
    set.create(json!({"interval": "2s", "sources": [oci(json!({"tag": "v1"}))]}))
        .await;
    let st = set.wait_ready().await;
    assert_members(&h, &ns, &["a", "b"], &[]).await;
    let rev = applied(&st);
    assert!(rev.ends_with(&format!("; oci:v1@{d1}")), "{rev}");

    let metrics = op.metrics();
    let downloads = metrics.source_fetches("oci", "downloaded");
    wait_reconciles(&op, 2).await;
    assert_eq!(
        metrics.source_fetches("oci", "downloaded"),
        downloads,
        "an unchanged tag is not downloaded again"
    );

    let pin_ns = h.extra_namespace("src-oci-pin").await;
    let pinned = h.applyset("digest");
    pinned
        .create(json!({"targetNamespace": pin_ns, "sources": [oci(json!({"digest": d1, "path": "sub"}))]}))
        .await;
    let st = pinned.wait_ready().await;
    assert!(applied(&st).ends_with(&format!("; oci:{d1}")));
    assert_members(&h, &pin_ns, &["b"], &["a"]).await;

    // A new push to the tag: applied and pruned; the pinned digest stays.
    let d2 = push_artifact(
        &registry,
        "team/manifests",
        "v1",
        &artifact(&[("a.yaml", &cm_doc("a", "2")), ("c.yaml", &cm_doc("c", "1"))]),
    )
    .await;
    let st = wait_new_revision(&set, &rev).await;
    assert!(applied(&st).ends_with(&format!("; oci:v1@{d2}")));
    assert_members(&h, &ns, &["a", "c"], &["b"]).await;
    assert_eq!(cm_value(&h, &ns, "a").await.as_deref(), Some("2"));
    assert_members(&h, &pin_ns, &["b"], &[]).await;

    // A tag that does not exist.
    let none_ns = h.extra_namespace("src-oci-none").await;
    let missing = h.applyset("missing");
    missing
        .create(json!({"targetNamespace": none_ns, "sources": [oci(json!({"tag": "nope"}))]}))
        .await;
    let st = missing
        .wait_ready_reason(Some("False"), "SourceFailed")
        .await;
    assert!(message(&st).contains("no tag \"nope\""), "{}", message(&st));
    stop(op).await;
}

/// A registry that serves content not matching its digests (a manifest whose bytes do not
/// hash to the announced digest, a layer that does not match its descriptor): SourceFailed,
/// nothing applied, nothing pruned.
#[tokio::test]
async fn oci_digest_mismatch_is_refused_and_nothing_is_pruned() {
    init();
    let h = Harness::new("src-ocibad").await;
    let op = h.start_operator();
    let ns = h.ns.clone();
    let fake = FileServer::start(None).await;
    fake.put("/v2/", "{}");
    let good = artifact(&[("a.yaml", &cm_doc("a", "1")), ("b.yaml", &cm_doc("b", "1"))]);
    serve_artifact(&fake, "repo", "v1", &good, &good, None);
    let url = format!("oci://{}/repo", fake.addr);
    let set = h.applyset("tampered");
    set.create(json!({"interval": "2s", "sources": [{"oci": {"url": url, "tag": "v1", "insecure": true}}]}))
        .await;
    let st = set.wait_ready().await;
    let rev = applied(&st);
    let objs = vec![
        (configmap_ar(), Some(ns.clone()), "a".to_owned()),
        (configmap_ar(), Some(ns.clone()), "b".to_owned()),
    ];
    let rvs = resource_versions(&h.client, &objs).await;

    // A layer whose bytes do not match its digest (it would drop b and add evil).
    let next = artifact(&[("a.yaml", &cm_doc("a", "2"))]);
    let evil = artifact(&[("evil.yaml", &cm_doc("evil", "1"))]);
    serve_artifact(&fake, "repo", "v1", &next, &evil, None);
    let st = set
        .wait_until(
            "SourceFailed for the tampered layer",
            LONG_DEADLINE,
            |_, st| {
                let st = st?;
                (ready(st).reason == "SourceFailed").then(|| st.clone())
            },
        )
        .await;
    let msg = message(&st);
    assert!(
        msg.contains("layer 0") && msg.contains("digest mismatch"),
        "{msg}"
    );
    assert_not_stalled(&st);
    assert_eq!(st.last_applied_revision.as_deref(), Some(rev.as_str()));
    assert_members(&h, &ns, &["a", "b"], &["evil"]).await;

    // A manifest whose bytes do not hash to the digest the registry announces.
    let forged = format!("sha256:{}", "1".repeat(64));
    serve_artifact(&fake, "repo", "v1", &next, &next, Some(&forged));
    let st = set
        .wait_until(
            "SourceFailed for the forged manifest digest",
            LONG_DEADLINE,
            |_, st| {
                let st = st?;
                let m = &ready(st).message;
                (ready(st).reason == "SourceFailed" && m.contains(&forged)).then(|| st.clone())
            },
        )
        .await;
    assert!(message(&st).contains("digest mismatch"), "{}", message(&st));
    wait_reconciles(&op, 2).await;
    assert_eq!(
        resource_versions(&h.client, &objs).await,
        rvs,
        "nothing applied or pruned"
    );
    stop(op).await;
}

// ---------------------------------------------------------------------------------------------
// Examples

/// Every example under examples/sources/ parses, deserializes into the API types and passes
/// the sources' validation; together they cover every source kind.
#[test]
fn source_examples_are_valid_and_cover_every_kind() {
    use applyset_operator::{
        api::{ApplySet, ClusterApplySet},
        applyset::ParentRef,
        manifest::{Origin, parse_documents},
        parent::Parent as _,
        sources,
    };
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/sources");
    let mut kinds = std::collections::BTreeSet::new();
    for file in [
        "configmap.yaml",
        "secret.yaml",
        "http.yaml",
        "git.yaml",
        "oci.yaml",
    ] {
        let text = std::fs::read_to_string(dir.join(file)).expect("read example");
        let docs = parse_documents(&text, &Origin::file("examples/sources", file))
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        let mut parents = 0;
        for d in docs {
            let value = Value::Object(d.object.clone());
            let (parent, spec): (ParentRef, _) = match d.kind.as_str() {
                "ApplySet" => {
                    let a: ApplySet =
                        serde_json::from_value(value).unwrap_or_else(|e| panic!("{file}: {e}"));
                    (a.parent_ref(), a.spec)
                }
                "ClusterApplySet" => {
                    let c: ClusterApplySet =
                        serde_json::from_value(value).unwrap_or_else(|e| panic!("{file}: {e}"));
                    (c.parent_ref(), c.spec.0)
                }
                _ => continue,
            };
            parents += 1;
            sources::validate(&parent, &spec).unwrap_or_else(|e| panic!("{file}: {e}"));
            for s in &spec.sources {
                kinds.insert(
                    sources::describe(s)
                        .split(' ')
                        .next()
                        .unwrap_or("")
                        .to_string(),
                );
            }
        }
        assert_eq!(parents, 1, "{file} has one ApplySet or ClusterApplySet");
    }
    assert_eq!(
        kinds.into_iter().collect::<Vec<_>>(),
        ["configMap", "git", "http", "oci", "secret"]
    );
}

/// Git over ssh (OpenSSH's sshd on loopback, `git-upload-pack` of Debian's git): the identity
/// and known_hosts from the secretRef; a host key that does not match is refused.
#[tokio::test]
async fn git_source_over_ssh_with_identity_and_known_hosts() {
    init();
    if !is_root() {
        eprintln!(
            "skipped: sshd needs root for privilege separation (the project's machines and CI run as root)"
        );
        return;
    }
    let h = Harness::new("src-ssh").await;
    let op = h.start_operator();
    let ns = h.ns.clone();
    let git_server = GitServer::start(None, None).await;
    let repo = git_server.repo("over-ssh");
    let c1 = repo.commit(&[("k8s/a.yaml", Some(&cm_doc("ssh-a", "1")))], "first");
    let ssh = SshServer::start().await;
    put_secret(
        &h,
        &ns,
        "ssh-creds",
        &[
            ("identity", ssh.identity.as_bytes()),
            ("known_hosts", ssh.known_hosts.as_bytes()),
        ],
    )
    .await;
    let set = h.applyset("ssh");
    set.create(json!({"sources": [{"git": {"url": ssh.url(&repo), "ref": {"branch": "main"}, "path": "k8s", "secretRef": {"name": "ssh-creds"}}}]}))
        .await;
    let st = set.wait_ready().await;
    assert!(
        applied(&st).ends_with(&format!("; git:main@sha1:{c1}")),
        "{}",
        applied(&st)
    );
    assert_members(&h, &ns, &["ssh-a"], &[]).await;

    // Another host key in known_hosts: the connection is refused.
    let other = SshServer::start().await;
    let wrong = ssh
        .known_hosts
        .split_whitespace()
        .next()
        .map(|host| {
            let mut parts = other.known_hosts.split_whitespace().skip(1);
            format!(
                "{host} {} {}\n",
                parts.next().unwrap_or_default(),
                parts.next().unwrap_or_default()
            )
        })
        .unwrap_or_default();
    put_secret(
        &h,
        &ns,
        "ssh-wrong-host",
        &[
            ("identity", ssh.identity.as_bytes()),
            ("known_hosts", wrong.as_bytes()),
        ],
    )
    .await;
    let spoof_ns = h.extra_namespace("src-ssh2").await;
    let spoofed = h.applyset("spoofed");
    spoofed
        .create(json!({"targetNamespace": spoof_ns, "sources": [{"git": {"url": ssh.url(&repo), "ref": {"branch": "main"}, "path": "k8s", "secretRef": {"name": "ssh-wrong-host"}}}]}))
        .await;
    let st = spoofed
        .wait_ready_reason(Some("False"), "SourceFailed")
        .await;
    assert_not_stalled(&st);
    assert_members(&h, &spoof_ns, &[], &["ssh-a"]).await;
    stop(op).await;
}

/// Registry credentials from a kubernetes.io/dockerconfigjson Secret, exchanged for a bearer
/// token through the registry's token service (the Docker token protocol of its
/// `WWW-Authenticate: Bearer realm=…` challenge); without them the pull is refused.
#[tokio::test]
async fn oci_registry_credentials_through_the_token_protocol() {
    init();
    let h = Harness::new("src-ocitoken").await;
    let op = h.start_operator();
    let ns = h.ns.clone();
    let b64 = base64::engine::general_purpose::STANDARD;
    let fake = FileServer::start(None).await;
    fake.require_auth_for(
        "/token",
        &format!("Basic {}", b64.encode("puller:secret")),
        "Basic realm=\"token\"",
    );
    fake.put("/token", r#"{"token": "tok-123"}"#);
    fake.require_auth_for(
        "/v2/",
        "Bearer tok-123",
        &format!(
            "Bearer realm=\"http://{}/token\",service=\"fake-registry\",scope=\"repository:private/apps:pull\"",
            fake.addr
        ),
    );
    let layer = artifact(&[("a.yaml", &cm_doc("private-a", "1"))]);
    let digest = serve_artifact(&fake, "private/apps", "v1", &layer, &layer, None);
    let dockercfg =
        json!({"auths": {fake.addr.to_string(): {"auth": b64.encode("puller:secret")}}});
    put_secret(
        &h,
        &ns,
        "registry-creds",
        &[(".dockerconfigjson", dockercfg.to_string().as_bytes())],
    )
    .await;
    let url = format!("oci://{}/private/apps", fake.addr);
    let set = h.applyset("private");
    set.create(json!({"sources": [{"oci": {"url": url, "tag": "v1", "insecure": true, "secretRef": {"name": "registry-creds"}}}]}))
        .await;
    let st = set.wait_ready().await;
    assert!(
        applied(&st).ends_with(&format!("; oci:v1@{digest}")),
        "{}",
        applied(&st)
    );
    assert_members(&h, &ns, &["private-a"], &[]).await;

    let anon_ns = h.extra_namespace("src-ocitoken2").await;
    let anon = h.applyset("anonymous");
    anon.create(json!({"targetNamespace": anon_ns, "sources": [{"oci": {"url": url, "tag": "v1", "insecure": true}}]}))
        .await;
    let st = anon.wait_ready_reason(Some("False"), "SourceFailed").await;
    assert!(
        message(&st).contains("token service answered 401"),
        "{}",
        message(&st)
    );
    assert_members(&h, &anon_ns, &[], &["private-a"]).await;
    stop(op).await;
}

// ---------------------------------------------------------------------------------------------
// Review findings: namespaces, empty sources, pins, limits, deadlines, redaction

/// A namespaced ApplySet may reference ConfigMaps and Secrets (sources and secretRefs) only in
/// its own namespace: otherwise the operator's cluster-wide read of Secrets would lend another
/// team's credentials (or manifests) to whoever may create an ApplySet. ValidationFailed and
/// Stalled, naming the field; no request reaches the URL; nothing is applied.
#[tokio::test]
async fn namespaced_applyset_cannot_reference_another_namespace() {
    init();
    let h = Harness::new("src-xns").await;
    let op = h.start_operator();
    let ns = h.ns.clone();
    let team_b = h.extra_namespace("src-xns-b").await;
    put_secret(&h, &team_b, "creds", &[("token", b"team-b-token")]).await;
    put_configmap(
        &h,
        &team_b,
        "bundle",
        json!({"a.yaml": cm_doc("stolen", "1")}),
    )
    .await;
    // The "attacker's" server accepts exactly team b's token.
    let attacker = FileServer::start(None).await;
    attacker.require_auth(Some("Bearer team-b-token".into()));
    attacker.put("/x.yaml", cm_doc("exfiltrated", "1"));

    let cases = [
        (
            "via-http",
            json!({"http": {"url": attacker.url("/x.yaml"), "secretRef": {"name": "creds", "namespace": team_b}}}),
            "http.secretRef.namespace",
        ),
        (
            "via-git",
            json!({"git": {"url": attacker.url("/repo.git"), "ref": {"branch": "main"}, "secretRef": {"name": "creds", "namespace": team_b}}}),
            "git.secretRef.namespace",
        ),
        (
            "via-oci",
            json!({"oci": {"url": format!("oci://{}/repo", attacker.addr), "tag": "v1", "insecure": true, "secretRef": {"name": "creds", "namespace": team_b}}}),
            "oci.secretRef.namespace",
        ),
        (
            "via-configmap",
            json!({"configMap": {"name": "bundle", "namespace": team_b}}),
            "configMap.namespace",
        ),
        (
            "via-secret",
            json!({"secret": {"name": "creds", "namespace": team_b}}),
            "secret.namespace",
        ),
    ];
    let mut sets = Vec::new();
    for (name, source, _) in &cases {
        let set = h.applyset(name);
        set.create(json!({"sources": [source]})).await;
        sets.push(set);
    }
    for ((name, _, field), set) in cases.iter().zip(&sets) {
        let st = set
            .wait_ready_reason(Some("False"), "ValidationFailed")
            .await;
        let msg = message(&st);
        assert!(
            msg.contains("spec.sources[0] (") && msg.contains(field),
            "{name}: {msg}"
        );
        assert!(
            msg.contains("only reference ConfigMaps and Secrets in its own namespace"),
            "{name}: {msg}"
        );
        assert_condition(&st, "Stalled", "True");
    }
    assert_eq!(attacker.requests(), 0, "no request reached the URL");
    assert_members(&h, &ns, &[], &["exfiltrated", "stolen"]).await;

    // Naming its own namespace explicitly is fine.
    put_configmap(&h, &ns, "own", json!({"a.yaml": cm_doc("own-a", "1")})).await;
    let own = h.applyset("own");
    own.create(json!({"sources": [{"configMap": {"name": "own", "namespace": ns}}]}))
        .await;
    own.wait_ready().await;
    assert_members(&h, &ns, &["own-a"], &[]).await;
    stop(op).await;
}

/// With a `sha256` pin, cached content is served only if it is the pinned content: a changed
/// pin is never confirmed by a 304 of the cached (other) content.
#[tokio::test]
async fn http_pin_is_checked_even_when_the_server_answers_304() {
    init();
    let h = Harness::new("src-pin304").await;
    let op = h.start_operator();
    let ns = h.ns.clone();
    let server = FileServer::start(None).await;
    let v1 = docs(&[cm_doc("a", "1"), cm_doc("b", "1")]);
    server.put("/app.yaml", v1.clone());
    let url = server.url("/app.yaml");
    let set = h.applyset("pinned");
    set.create(json!({"interval": "2s", "sources": [{"http": {"url": url}}]}))
        .await;
    let st = set.wait_ready().await;
    let rev = applied(&st);
    let objs = vec![
        (configmap_ar(), Some(ns.clone()), "a".to_owned()),
        (configmap_ar(), Some(ns.clone()), "b".to_owned()),
    ];
    let rvs = resource_versions(&h.client, &objs).await;
    // The cache holds v1 with its ETag; the server would answer a conditional GET with 304.
    let wrong = sha256_hex(b"some other content");
    set.patch_spec(json!({"sources": [{"http": {"url": url, "sha256": wrong}}]}))
        .await;
    let st = set.wait_ready_reason(Some("False"), "SourceFailed").await;
    let msg = message(&st);
    assert!(
        msg.contains(&format!("sha256 is {}", sha256_hex(v1.as_bytes()))) && msg.contains(&wrong),
        "{msg}"
    );
    assert_eq!(st.last_applied_revision.as_deref(), Some(rev.as_str()));
    assert_eq!(resource_versions(&h.client, &objs).await, rvs);

    // The right pin: applied; then served from the cache without any request.
    let right = sha256_hex(v1.as_bytes());
    set.patch_spec(json!({"sources": [{"http": {"url": url, "sha256": right}}]}))
        .await;
    set.wait_until("Ready with the right pin", LONG_DEADLINE, |_, st| {
        let st = st?;
        (ready(st).status == "True").then_some(())
    })
    .await;
    let requests = server.requests();
    wait_reconciles(&op, 2).await;
    assert_eq!(
        server.requests(),
        requests,
        "pinned cached content costs nothing"
    );
    assert_eq!(resource_versions(&h.client, &objs).await, rvs);
    stop(op).await;
}

/// A source that resolves to nothing is a failure, never an empty source (which would prune
/// its members): a git `path` that disappears, or holds no manifest; an http bundle whose
/// `path` disappears; a ConfigMap without manifest keys. SourceFailed, nothing pruned.
#[tokio::test]
async fn sources_that_resolve_to_nothing_fail_and_prune_nothing() {
    init();
    let h = Harness::new("src-empty").await;
    let op = h.start_operator();
    let ns = h.ns.clone();

    // Git: the path disappears, then exists without manifests, then comes back.
    let git_server = GitServer::start(None, None).await;
    let repo = git_server.repo("vanishing");
    repo.commit(
        &[
            ("deploy/a.yaml", Some(&cm_doc("ga", "1"))),
            ("deploy/b.yaml", Some(&cm_doc("gb", "1"))),
            ("README.md", Some("docs")),
        ],
        "first",
    );
    let git_set = h.applyset("git");
    git_set
        .create(json!({"interval": "2s", "sources": [{"git": {"url": git_server.url("vanishing"), "ref": {"branch": "main"}, "path": "deploy"}}]}))
        .await;
    let st = git_set.wait_ready().await;
    let git_rev = applied(&st);
    let git_objs = vec![
        (configmap_ar(), Some(ns.clone()), "ga".to_owned()),
        (configmap_ar(), Some(ns.clone()), "gb".to_owned()),
    ];
    let git_rvs = resource_versions(&h.client, &git_objs).await;
    let c2 = repo.commit(
        &[("deploy/a.yaml", None), ("deploy/b.yaml", None)],
        "remove deploy",
    );
    let st = git_set
        .wait_until(
            "SourceFailed for the missing path",
            LONG_DEADLINE,
            |_, st| {
                let st = st?;
                (ready(st).reason == "SourceFailed").then(|| st.clone())
            },
        )
        .await;
    let msg = message(&st);
    assert!(
        msg.contains(&format!("path deploy does not exist at commit {c2}")),
        "{msg}"
    );
    assert!(msg.contains("nothing applied or pruned"), "{msg}");
    assert_not_stalled(&st);
    assert_eq!(st.last_applied_revision.as_deref(), Some(git_rev.as_str()));
    let c3 = repo.commit(&[("deploy/NOTES.md", Some("no manifests"))], "notes only");
    let st = git_set
        .wait_until("SourceFailed for no manifests", LONG_DEADLINE, |_, st| {
            let st = st?;
            let m = &ready(st).message;
            (ready(st).reason == "SourceFailed" && m.contains(&c3)).then(|| st.clone())
        })
        .await;
    let msg = message(&st);
    assert!(
        msg.contains(&format!(
            "no manifest files (.yaml, .yml, .json) under path deploy at commit {c3}"
        )),
        "{msg}"
    );
    assert_eq!(resource_versions(&h.client, &git_objs).await, git_rvs);

    // HTTP bundle: the path disappears.
    let server = FileServer::start(None).await;
    server.put(
        "/bundle.tgz",
        tar_gz(&[Entry::File("deploy/h.yaml", cm_doc("ha", "1").as_bytes())]),
    );
    let http_set = h.applyset("http");
    http_set
        .create(json!({"interval": "2s", "sources": [{"http": {"url": server.url("/bundle.tgz"), "path": "deploy"}}]}))
        .await;
    http_set.wait_ready().await;
    let http_objs = vec![(configmap_ar(), Some(ns.clone()), "ha".to_owned())];
    let http_rvs = resource_versions(&h.client, &http_objs).await;
    server.put(
        "/bundle.tgz",
        tar_gz(&[Entry::File("other/h.yaml", cm_doc("ha", "2").as_bytes())]),
    );
    let st = http_set
        .wait_until(
            "SourceFailed for the missing path",
            LONG_DEADLINE,
            |_, st| {
                let st = st?;
                (ready(st).reason == "SourceFailed").then(|| st.clone())
            },
        )
        .await;
    assert!(
        message(&st).contains("path deploy does not exist in the bundle"),
        "{}",
        message(&st)
    );

    // A ConfigMap without manifest keys.
    put_configmap(&h, &ns, "cm-bundle", json!({"a.yaml": cm_doc("ca", "1")})).await;
    let cm_set = h.applyset("cm");
    cm_set
        .create(json!({"sources": [{"configMap": {"name": "cm-bundle"}}]}))
        .await;
    cm_set.wait_ready().await;
    // The same field manager applies without the manifest key: it is removed.
    put_configmap(&h, &ns, "cm-bundle", json!({"notes.txt": "nothing here"})).await;
    let st = cm_set
        .wait_ready_reason(Some("False"), "SourceFailed")
        .await;
    assert!(
        message(&st).contains(&format!(
            "no manifest files (.yaml, .yml, .json) among the data keys of ConfigMap {ns}/cm-bundle"
        )),
        "{}",
        message(&st)
    );

    wait_reconciles(&op, 2).await;
    assert_eq!(resource_versions(&h.client, &git_objs).await, git_rvs);
    assert_eq!(resource_versions(&h.client, &http_objs).await, http_rvs);
    assert_members(&h, &ns, &["ga", "gb", "ha", "ca"], &[]).await;

    // The git path comes back: applied again.
    repo.commit(&[("deploy/a.yaml", Some(&cm_doc("ga", "2")))], "back");
    git_set.wait_ready().await;
    assert_eq!(cm_value(&h, &ns, "ga").await.as_deref(), Some("2"));
    stop(op).await;
}

/// Deterministic bytes that do not compress (xorshift).
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Git downloads and reads are bounded: the pack is refused beyond the download cap while it
/// is received; only the subtree at `path` is walked, every entry counted; a blob's size is
/// checked before it is inflated.
#[tokio::test]
async fn git_fetches_are_bounded() {
    init();
    let h = Harness::new("src-gitcap").await;
    let mut config = h.config();
    config.source_limits.max_download = 1 << 20;
    config.source_limits.max_unpacked = 256 << 10;
    config.source_limits.max_entries = 8;
    let op = Operator::start(h.client.clone(), config);
    let server = GitServer::start(None, None).await;
    // Printable noise: hardly compresses, so the pack is well over the cap.
    let big_blob: String = noise(3 << 20, 7)
        .iter()
        .map(|b| char::from(b % 94 + 33))
        .collect();
    let big = server.repo("big-pack");
    big.commit(
        &[
            ("deploy/a.yaml", Some(&cm_doc("big-a", "1"))),
            ("assets/blob.bin", Some(&big_blob)),
        ],
        "big",
    );
    let many = server.repo("many-entries");
    let names: Vec<String> = (0..10).map(|i| format!("deploy/f{i}.txt")).collect();
    let mut files: Vec<(&str, Option<&str>)> =
        names.iter().map(|n| (n.as_str(), Some("x"))).collect();
    let many_a = cm_doc("many-a", "1");
    files.push(("deploy/a.yaml", Some(&many_a)));
    many.commit(&files, "many");
    let wide = server.repo("wide-elsewhere");
    let others: Vec<String> = (0..30).map(|i| format!("other/f{i}.yaml")).collect();
    let other_doc = cm_doc("elsewhere", "1");
    let mut files: Vec<(&str, Option<&str>)> = others
        .iter()
        .map(|n| (n.as_str(), Some(other_doc.as_str())))
        .collect();
    let wide_a = cm_doc("wide-a", "1");
    files.push(("deploy/a.yaml", Some(&wide_a)));
    wide.commit(&files, "wide");
    let large = server.repo("large-manifest");
    let filler = format!(
        "{}{}",
        cm_doc("large-a", "1"),
        "# filler comment line that compresses very well\n".repeat(8000)
    );
    large.commit(&[("deploy/a.yaml", Some(&filler))], "large");

    let git = |repo: &str| json!({"sources": [{"git": {"url": server.url(repo), "ref": {"branch": "main"}, "path": "deploy"}}]});
    let cases = [
        (
            "big-pack",
            "the pack is more than 1048576 bytes (the download limit)",
        ),
        ("many-entries", "more than 8 entries under the path"),
        (
            "large-manifest",
            "exceed 262144 bytes (the operator's --source-max-unpacked-mib) at deploy/a.yaml",
        ),
    ];
    let mut sets = Vec::new();
    for (repo, _) in &cases {
        let set = h.applyset(repo);
        set.create(git(repo)).await;
        sets.push(set);
    }
    // Entries outside the path do not count.
    let wide_set = h.applyset("wide");
    wide_set.create(git("wide-elsewhere")).await;
    for ((repo, expected), set) in cases.iter().zip(&sets) {
        let st = set.wait_ready_reason(Some("False"), "SourceFailed").await;
        assert!(message(&st).contains(expected), "{repo}: {}", message(&st));
        assert_not_stalled(&st);
    }
    wide_set.wait_ready().await;
    assert_members(
        &h,
        &h.ns,
        &["wide-a"],
        &["big-a", "many-a", "large-a", "elsewhere"],
    )
    .await;
    stop(op).await;
}

/// Serves an artifact with these layers (plain blobs, titled when a title is given) on the
/// hand-made registry; returns the manifest digest.
fn serve_layers(
    fake: &FileServer,
    repo: &str,
    tag: &str,
    layers: &[(Vec<u8>, Option<&str>)],
) -> String {
    let config = b"{}".to_vec();
    let dc = format!("sha256:{}", sha256_hex(&config));
    fake.put(&format!("/v2/{repo}/blobs/{dc}"), config.clone());
    let mut descriptors = Vec::new();
    for (data, title) in layers {
        let d = format!("sha256:{}", sha256_hex(data));
        fake.put(&format!("/v2/{repo}/blobs/{d}"), data.clone());
        let mut desc = json!({"mediaType": FLUX_LAYER, "digest": d, "size": data.len()});
        if let Some(t) = title {
            desc["annotations"] = json!({"org.opencontainers.image.title": t});
        }
        descriptors.push(desc);
    }
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": FLUX_CONFIG, "digest": dc, "size": config.len()},
        "layers": descriptors,
    }))
    .expect("manifest");
    let dm = format!("sha256:{}", sha256_hex(&manifest));
    for reference in [tag, dm.as_str()] {
        fake.put_with(
            &format!("/v2/{repo}/manifests/{reference}"),
            manifest.clone(),
            "application/vnd.oci.image.manifest.v1+json",
            &[("docker-content-digest", &dm)],
        );
    }
    dm
}

/// OCI bounds are per artifact: one unpacked budget over all layers, one download budget over
/// the manifest and all layers, at most 16 layers; a path missing from the artifact fails; a
/// token service over plain http is refused for a registry reached over https.
#[tokio::test]
async fn oci_limits_are_per_artifact() {
    init();
    let h = Harness::new("src-ocicap").await;
    let mut config = h.config();
    config.source_limits.max_unpacked = 1 << 20;
    config.source_limits.max_download = 2 << 20;
    let op = Operator::start(h.client.clone(), config);
    let fake = FileServer::start(None).await;
    fake.put("/v2/", "{}");
    // Two layers of 600 KiB unpacked each: each fits alone, not together.
    let spaces = format!("{}#{}\n", cm_doc("unpacked", "1"), " ".repeat(600 << 10));
    let layer = |name: &str| tar_gz(&[Entry::File(name, spaces.as_bytes())]);
    serve_layers(
        &fake,
        "unpacked",
        "v1",
        &[(layer("a.yaml"), None), (layer("b.yaml"), None)],
    );
    // Three incompressible layers of 900 KiB: each fits the download cap, not together.
    let downloads: Vec<(Vec<u8>, Option<&str>)> = (0..3)
        .map(|i| (noise(900 << 10, i + 1), Some("x.bin")))
        .collect();
    serve_layers(&fake, "download", "v1", &downloads);
    // Seventeen small layers.
    let doc = cm_doc("layered", "1");
    let titles: Vec<String> = (0..17).map(|i| format!("l{i}.yaml")).collect();
    let many: Vec<(Vec<u8>, Option<&str>)> = titles
        .iter()
        .map(|t| (doc.clone().into_bytes(), Some(t.as_str())))
        .collect();
    serve_layers(&fake, "layers", "v1", &many);
    // A path that is not in the artifact.
    serve_layers(
        &fake,
        "nopath",
        "v1",
        &[(
            tar_gz(&[Entry::File("deploy/a.yaml", doc.as_bytes())]),
            None,
        )],
    );
    let oci = |repo: &str, extra: Value| {
        let mut o =
            json!({"url": format!("oci://{}/{repo}", fake.addr), "tag": "v1", "insecure": true});
        for (k, v) in extra.as_object().expect("object") {
            o[k] = v.clone();
        }
        json!({"sources": [{"oci": o}]})
    };
    let cases = [
        (
            "unpacked",
            json!({}),
            "decompresses to more than 1048576 bytes",
        ),
        (
            "download",
            json!({}),
            "more than 2097152 bytes (the download limit, for the manifest and all layers together)",
        ),
        (
            "layers",
            json!({}),
            "has 17 layers, more than the limit of 16",
        ),
        (
            "nopath",
            json!({"path": "other"}),
            "path other does not exist in the artifact",
        ),
    ];
    let mut sets = Vec::new();
    for (repo, extra, _) in &cases {
        let set = h.applyset(repo);
        set.create(oci(repo, extra.clone())).await;
        sets.push(set);
    }
    for ((repo, _, expected), set) in cases.iter().zip(&sets) {
        let st = set.wait_ready_reason(Some("False"), "SourceFailed").await;
        assert!(message(&st).contains(expected), "{repo}: {}", message(&st));
    }
    assert_members(&h, &h.ns, &[], &["unpacked", "layered"]).await;

    // A registry over https whose token service is plain http: refused, credentials unsent.
    let tls = Arc::new(Tls::new());
    let secure = FileServer::start(Some(tls.clone())).await;
    let token_server = FileServer::start(None).await;
    token_server.put("/token", r#"{"token": "t"}"#);
    secure.require_auth_for(
        "/v2/",
        "Bearer t",
        &format!(
            "Bearer realm=\"http://{}/token\",service=\"s\"",
            token_server.addr
        ),
    );
    put_secret(
        &h,
        &h.ns,
        "tls-registry",
        &[
            ("username", b"u"),
            ("password", b"p"),
            ("ca.crt", tls.ca_pem.as_bytes()),
        ],
    )
    .await;
    let realm = h.applyset("http-realm");
    realm
        .create(json!({"sources": [{"oci": {"url": format!("oci://{}/repo", secure.addr), "tag": "v1", "secretRef": {"name": "tls-registry"}}}]}))
        .await;
    let st = realm.wait_ready_reason(Some("False"), "SourceFailed").await;
    assert!(
        message(&st).contains("is http://, not https://"),
        "{}",
        message(&st)
    );
    assert_eq!(
        token_server.requests(),
        0,
        "no credentials went to the http realm"
    );
    stop(op).await;
}

/// A TCP server that accepts connections and never answers.
async fn silent_server() -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    (addr, task)
}

/// The sources of a set share one deadline (not one each, in sequence) and are read
/// concurrently; the message names the sources not read. URLs in messages carry no query
/// (tokens of signed URLs).
#[tokio::test]
async fn sources_share_one_deadline_and_messages_hide_queries() {
    init();
    let h = Harness::new("src-deadline").await;
    let mut config = h.config();
    config.source_limits.timeout = std::time::Duration::from_secs(3);
    let op = Operator::start(h.client.clone(), config);
    let (addr, silent) = silent_server().await;
    let set = h.applyset("slow");
    let started = std::time::Instant::now();
    set.create(json!({"retryInterval": "1h", "sources": [
        {"http": {"url": format!("http://{addr}/a.yaml?token=s3cret-a")}},
        {"http": {"url": format!("http://{addr}/b.yaml?token=s3cret-b")}},
        {"http": {"url": format!("http://{addr}/c.yaml?token=s3cret-c")}},
    ]}))
    .await;
    // A reconcile that takes a while says so meanwhile (the outcome removes the mark, so
    // seeing it at all means it came first).
    let progressing = set
        .wait_until(
            "Reconciling=True while the sources hang",
            DEADLINE,
            |_, st| {
                st.and_then(|st| condition(st, "Reconciling"))
                    .filter(|c| c.status == "True" && c.reason == "Progressing")
                    .map(|c| c.message.clone())
            },
        )
        .await;
    assert_eq!(progressing, "reconciling generation 1");
    let st = set.wait_ready_reason(Some("False"), "SourceFailed").await;
    assert!(
        condition(&st, "Reconciling").is_none(),
        "the outcome replaces the mark: {}",
        status_json(&st)
    );
    let elapsed = started.elapsed();
    let msg = message(&st);
    assert!(
        msg.contains(&format!(
            "spec.sources[0] (http http://{addr}/a.yaml) and 2 more: not read within 3s"
        )),
        "{msg}"
    );
    assert!(!msg.contains("s3cret"), "{msg}");
    assert!(
        elapsed < std::time::Duration::from_secs(8),
        "one deadline of 3 s for three sources, not 3 × 3 s: {elapsed:?}"
    );
    silent.abort();

    // Errors of the request itself (404, connection refused) show no query either.
    let server = FileServer::start(None).await;
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr")
    };
    let missing = h.applyset("missing");
    missing
        .create(json!({"sources": [{"http": {"url": server.url("/missing.yaml?token=s3cret-d")}}]}))
        .await;
    let refused = h.applyset("refused");
    refused
        .create(json!({"sources": [{"http": {"url": format!("http://{closed}/x.yaml?X-Amz-Signature=s3cret-e")}}]}))
        .await;
    for set in [&missing, &refused] {
        let st = set.wait_ready_reason(Some("False"), "SourceFailed").await;
        let msg = message(&st);
        assert!(!msg.contains("s3cret"), "{msg}");
        assert!(
            !st.last_error
                .as_deref()
                .unwrap_or_default()
                .contains("s3cret")
        );
    }
    stop(op).await;
}

// ---------------------------------------------------------------------------------------------
// Egress policy and credentials

/// The operator's configuration for this test with `policy` as its source egress policy
/// (loopback exempt from the default refusals, where the tests' servers listen).
fn with_policy(h: &Harness, policy: applyset_operator::sources::egress::Policy) -> Operator {
    let mut config = h.config();
    config.source_policy = operator::loopback_exempt(policy);
    Operator::start(h.client.clone(), config)
}

const NOT_ALLOWED: &str = "not allowed by the operator's source policy";

/// With `--source-deny-cidrs 127.0.0.2/32`, a server on 127.0.0.2 is never contacted: not by
/// an http, git or oci source naming it, not through a redirect from an allowed loopback
/// server (reqwest's redirect policy for http and oci; the connector check for gitoxide, whose
/// redirect policy is its own), not as an OCI token service. Each set fails with SourceFailed
/// naming the address, and is retried (not Stalled).
#[tokio::test]
async fn denied_addresses_are_never_contacted() {
    init();
    let h = Harness::new("src-deny").await;
    let policy = applyset_operator::sources::egress::Policy::new(&["127.0.0.2/32"], &[], true)
        .expect("policy");
    let op = with_policy(&h, policy);
    let denied = FileServer::start_on("127.0.0.2", None).await;
    denied.put("/app.yaml", cm_doc("denied", "1"));
    let denied_base = format!("http://{}", denied.addr);
    // An allowed loopback server that redirects everything under /r/ to the denied one, and
    // whose OCI paths ask for a token from the denied one.
    let redirector = FileServer::start(None).await;
    redirector.redirect("/r/", &denied_base);
    redirector.redirect("/v2/r/", &denied_base);
    redirector.require_auth_for(
        "/v2/realm/",
        "Bearer never",
        &format!("Bearer realm=\"{denied_base}/token\",service=\"test\""),
    );
    let oci_at = |addr: std::net::SocketAddr, repo: &str| json!({"oci": {"url": format!("oci://{addr}/{repo}"), "tag": "v1", "insecure": true}});
    let cases = [
        (
            "direct",
            json!({"http": {"url": denied.url("/app.yaml")}}),
            "address 127.0.0.2 not allowed",
        ),
        (
            "redirected",
            json!({"http": {"url": redirector.url("/r/app.yaml")}}),
            "redirect to http://127.0.0.2",
        ),
        (
            "git-direct",
            json!({"git": {"url": format!("{denied_base}/apps.git"), "ref": {"branch": "main"}}}),
            "address 127.0.0.2 not allowed",
        ),
        (
            "git-redirected",
            json!({"git": {"url": redirector.url("/r/apps.git"), "ref": {"branch": "main"}}}),
            "address 127.0.0.2 not allowed",
        ),
        (
            "oci-direct",
            oci_at(denied.addr, "apps"),
            "address 127.0.0.2 not allowed",
        ),
        // The registry redirects the manifest request (HEAD /v2/r/…) to the denied server.
        (
            "oci-redirected",
            oci_at(redirector.addr, "r"),
            "redirect to http://127.0.0.2",
        ),
        ("oci-realm", oci_at(redirector.addr, "realm"), "token realm"),
    ];
    let mut sets = Vec::new();
    for (name, source, _) in &cases {
        let set = h.applyset(name);
        set.create(json!({"retryInterval": "2s", "sources": [source]}))
            .await;
        sets.push(set);
    }
    for (set, (name, _, says)) in sets.iter().zip(&cases) {
        let st = set.wait_ready_reason(Some("False"), "SourceFailed").await;
        let msg = message(&st);
        assert!(msg.contains(NOT_ALLOWED), "{name}: {msg}");
        assert!(msg.contains(says), "{name}: {msg}");
        assert_not_stalled(&st);
    }
    // Retried at least once more each (the policy holds on every attempt).
    let failed = op.metrics().source_fetches("any", "failed");
    eventually("more failed source reads", LONG_DEADLINE, || {
        let m = op.metrics();
        let want = failed + cases.len() as u64;
        async move { (m.source_fetches("any", "failed") >= want).then_some(()) }
    })
    .await;
    assert!(redirector.requests() >= 3, "the redirects were asked for");
    assert_eq!(
        denied.requests(),
        0,
        "the denied server received no request"
    );
    assert_eq!(
        denied.connections_accepted(),
        0,
        "nothing even connected to the denied server"
    );
    assert_members(&h, &h.ns, &[], &["denied"]).await;
    stop(op).await;
}

/// With `--source-allowed-hosts localhost`, a source naming another host (here the same
/// server by address) is refused before any request, the allowed name works, and a redirect
/// to a host that is not allowed is not followed (its server receives nothing).
#[tokio::test]
async fn allowed_hosts_are_honoured_on_every_hop() {
    init();
    let h = Harness::new("src-hosts").await;
    let policy =
        applyset_operator::sources::egress::Policy::new(&[], &["localhost"], true).expect("policy");
    let op = with_policy(&h, policy);
    let server = FileServer::start(None).await;
    server.put("/app.yaml", cm_doc("by-name", "1"));
    let other = FileServer::start(None).await;
    other.put("/away/app.yaml", cm_doc("away", "1"));
    server.redirect("/away/", &format!("http://{}", other.addr));
    let port = server.addr.port();

    let by_address = h.applyset("by-address");
    by_address
        .create(json!({"sources": [{"http": {"url": server.url("/app.yaml")}}]}))
        .await;
    let st = by_address
        .wait_ready_reason(Some("False"), "SourceFailed")
        .await;
    let msg = message(&st);
    assert!(
        msg.contains(&format!(
            "host 127.0.0.1:{port} {NOT_ALLOWED}: it matches no pattern of --source-allowed-hosts"
        )),
        "{msg}"
    );
    assert_eq!(server.requests(), 0, "refused before any request");

    let by_name = h.applyset("by-name");
    by_name
        .create(
            json!({"sources": [{"http": {"url": format!("http://localhost:{port}/app.yaml")}}]}),
        )
        .await;
    by_name.wait_ready().await;
    assert_members(&h, &h.ns, &["by-name"], &[]).await;

    let away = h.applyset("away");
    away.create(
        json!({"sources": [{"http": {"url": format!("http://localhost:{port}/away/app.yaml")}}]}),
    )
    .await;
    let st = away.wait_ready_reason(Some("False"), "SourceFailed").await;
    let msg = message(&st);
    assert!(
        msg.contains(&format!(
            "redirect to http://127.0.0.1:{}/away/app.yaml",
            other.addr.port()
        )),
        "{msg}"
    );
    assert!(msg.contains("--source-allowed-hosts"), "{msg}");
    assert_eq!(other.requests(), 0, "the redirect was not followed");
    assert_eq!(other.connections_accepted(), 0);
    assert_members(&h, &h.ns, &[], &["away"]).await;
    stop(op).await;
}

/// `--source-insecure=false`: plain http:// (http and git sources) and OCI `insecure: true`
/// are refused before any request.
#[tokio::test]
async fn insecure_sources_can_be_forbidden() {
    init();
    let h = Harness::new("src-insecure").await;
    let policy =
        applyset_operator::sources::egress::Policy::new::<&str>(&[], &[], false).expect("policy");
    let op = with_policy(&h, policy);
    let server = FileServer::start(None).await;
    server.put("/app.yaml", cm_doc("plain", "1"));
    let cases = [
        (
            "http",
            json!({"http": {"url": server.url("/app.yaml")}}),
            "plain http://",
        ),
        (
            "git",
            json!({"git": {"url": server.url("/apps.git"), "ref": {"branch": "main"}}}),
            "plain http://",
        ),
        (
            "oci",
            json!({"oci": {"url": format!("oci://{}/apps", server.addr), "tag": "v1", "insecure": true}}),
            "insecure: true",
        ),
    ];
    for (name, source, says) in cases {
        let set = h.applyset(name);
        set.create(json!({"sources": [source]})).await;
        let st = set.wait_ready_reason(Some("False"), "SourceFailed").await;
        let msg = message(&st);
        assert!(
            msg.contains(says) && msg.contains(NOT_ALLOWED),
            "{name}: {msg}"
        );
        assert!(msg.contains("--source-insecure=false"), "{name}: {msg}");
    }
    assert_eq!(server.requests(), 0);
    assert_eq!(server.connections_accepted(), 0);
    stop(op).await;
}

/// Credentials stay with their host: a bearer token is not sent past a redirect to another
/// host; a Secret annotated `applyset.dev/allowed-hosts` is used only for those hosts (else
/// ValidationFailed, nothing sent); a `kubernetes.io/service-account-token` Secret is refused
/// (ValidationFailed naming it).
#[tokio::test]
async fn credentials_stay_with_their_host() {
    init();
    let h = Harness::new("src-creds").await;
    let op = h.start_operator();
    let ns = h.ns.clone();
    let origin = FileServer::start(None).await;
    let elsewhere = FileServer::start(None).await;
    origin.put("/app.yaml", cm_doc("direct", "1"));
    elsewhere.put("/moved/app.yaml", cm_doc("moved", "1"));
    // To another host (localhost instead of 127.0.0.1, another port).
    origin.redirect(
        "/moved/",
        &format!("http://localhost:{}", elsewhere.addr.port()),
    );
    put_secret(&h, &ns, "token", &[("token", b"s3cret")]).await;
    let moved = h.applyset("moved");
    moved
        .create(json!({"sources": [{"http": {"url": origin.url("/moved/app.yaml"), "secretRef": {"name": "token"}}}]}))
        .await;
    moved.wait_ready().await;
    assert_members(&h, &ns, &["moved"], &[]).await;
    assert!(
        origin.authorizations().iter().all(|a| a == "Bearer s3cret"),
        "{:?}",
        origin.authorizations()
    );
    let seen = elsewhere.authorizations();
    assert!(!seen.is_empty(), "the redirect was followed");
    assert!(
        seen.iter().all(String::is_empty),
        "no credentials past the host they were given for: {seen:?}"
    );

    // A Secret restricted to other hosts: refused before any request.
    let secrets: Api<Secret> = Api::namespaced(h.client.clone(), &ns);
    let restricted = |name: &str, hosts: &str| -> Secret {
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "annotations": {"applyset.dev/allowed-hosts": hosts}},
            "type": "Opaque", "stringData": {"token": format!("s3cret-{name}")}}))
        .expect("secret")
    };
    for (name, hosts) in [
        ("elsewhere-only", "registry.example.com, *.example.com"),
        ("origin-only", "127.0.0.1"),
    ] {
        secrets
            .create(&PostParams::default(), &restricted(name, hosts))
            .await
            .expect("create secret");
    }
    // Nothing sent is shown by what origin received, each request by its credential: the
    // set `moved` keeps checking its source (with `Bearer s3cret`) at its interval, so a
    // count of requests taken before would race with it.
    let wrong = h.applyset("wrong-host");
    wrong
        .create(json!({"sources": [{"http": {"url": origin.url("/app.yaml"), "secretRef": {"name": "elsewhere-only"}}}]}))
        .await;
    let st = wrong
        .wait_ready_reason(Some("False"), "ValidationFailed")
        .await;
    let msg = message(&st);
    assert!(
        msg.contains(&format!(
            "its secretRef {ns}/elsewhere-only may only be used for the hosts in its annotation applyset.dev/allowed-hosts"
        )),
        "{msg}"
    );
    assert!(
        msg.contains(&format!(
            "127.0.0.1:{} is not one of them",
            origin.addr.port()
        )),
        "{msg}"
    );
    assert_only_sent(&origin, &["Bearer s3cret"]);
    let right = h.applyset("right-host");
    right
        .create(json!({"sources": [{"http": {"url": origin.url("/app.yaml"), "secretRef": {"name": "origin-only"}}}]}))
        .await;
    right.wait_ready().await;

    // A ServiceAccount token Secret is never used.
    let sas: Api<k8s_openapi::api::core::v1::ServiceAccount> =
        Api::namespaced(h.client.clone(), &ns);
    sas.create(
        &PostParams::default(),
        &serde_json::from_value(
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "robot"}}),
        )
        .expect("sa"),
    )
    .await
    .expect("create sa");
    let sa_token: Secret = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "robot-token", "annotations": {"kubernetes.io/service-account.name": "robot"}},
        "type": "kubernetes.io/service-account-token", "stringData": {"token": "sa-token"}}))
    .expect("secret");
    secrets
        .create(&PostParams::default(), &sa_token)
        .await
        .expect("create token secret");
    let token = h.applyset("sa-token");
    token
        .create(json!({"sources": [{"http": {"url": origin.url("/app.yaml"), "secretRef": {"name": "robot-token"}}}]}))
        .await;
    let st = token
        .wait_ready_reason(Some("False"), "ValidationFailed")
        .await;
    let msg = message(&st);
    assert!(
        msg.contains(&format!(
            "its secretRef {ns}/robot-token is a Secret of type kubernetes.io/service-account-token"
        )),
        "{msg}"
    );
    assert_only_sent(&origin, &["Bearer s3cret", "Bearer s3cret-origin-only"]);
    assert!(
        !origin
            .authorizations()
            .iter()
            .any(|a| a.contains("sa-token")),
        "the ServiceAccount token never left the operator"
    );
    stop(op).await;
}

/// Asserts that every request `server` received carried one of the `Authorization` values
/// `allowed` (those of the sets that may send): a set refused before any request sent none,
/// with or without a credential.
fn assert_only_sent(server: &FileServer, allowed: &[&str]) {
    let seen = server.authorizations();
    assert!(
        seen.iter().all(|a| allowed.contains(&a.as_str())),
        "nothing sent but by the sets that may ({allowed:?}); received: {seen:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Memory budget

/// Peak resident memory of this process (VmHWM) in KiB, after resetting it when `reset`
/// (Linux: writing 5 to /proc/self/clear_refs); None where unavailable.
fn peak_rss_kib(reset: bool) -> Option<u64> {
    if reset {
        let _ = std::fs::write("/proc/self/clear_refs", "5");
    }
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// A document of about `bytes` bytes: one small ConfigMap and comment lines (downloaded and
/// read like any content, cheap for the API server).
fn padded_doc(name: &str, bytes: usize) -> String {
    let mut doc = cm_doc(name, "1");
    let line = format!("# {}\n", "x".repeat(98));
    while doc.len() < bytes {
        doc.push_str(&line);
    }
    doc
}

/// Many concurrent large sources under a small `--source-memory-mib` (8 MiB): 12 sets of 4
/// sources of 1 MiB each (each fetch holds about 2 MiB at its peak: the download, then the
/// text being parsed), read 16 at a time, far more than fits at once. They wait for their
/// share and all apply; the budget's peak stays within it (and was reached: the budget is
/// what limited them). A source larger than the whole budget fails at once, naming the flag.
#[tokio::test]
async fn memory_budget_holds_with_many_concurrent_large_sources() {
    init();
    let h = Harness::new("src-memory").await;
    let mut config = h.config();
    config.source_limits.memory = 8 << 20;
    config.source_limits.timeout = std::time::Duration::from_secs(60);
    let op = Operator::start(h.client.clone(), config);
    let budget = op.source_memory();
    assert_eq!(budget.total_bytes(), 8 << 20);
    let server = FileServer::start(None).await;
    const SETS: usize = 12;
    const PER_SET: usize = 4;
    for s in 0..SETS {
        for i in 0..PER_SET {
            server.put(
                &format!("/s{s}/d{i}.yaml"),
                padded_doc(&format!("m-{s}-{i}"), 1 << 20),
            );
        }
    }
    let rss_before = peak_rss_kib(true);
    let started = std::time::Instant::now();
    let mut sets = Vec::new();
    for s in 0..SETS {
        let set = h.applyset(&format!("big-{s}"));
        let sources: Vec<Value> = (0..PER_SET)
            .map(|i| json!({"http": {"url": server.url(&format!("/s{s}/d{i}.yaml"))}}))
            .collect();
        set.create(json!({"sources": sources})).await;
        sets.push(set);
    }
    for set in &sets {
        set.wait_ready_within(LONG_DEADLINE).await;
    }
    let elapsed = started.elapsed();
    let rss_after = peak_rss_kib(false);
    let names: Vec<String> = (0..SETS)
        .flat_map(|s| (0..PER_SET).map(move |i| format!("m-{s}-{i}")))
        .collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    assert_members(&h, &h.ns, &names, &[]).await;
    let peak = budget.peak_bytes();
    eprintln!(
        "memory budget: {SETS} sets x {PER_SET} sources of 1 MiB under 8 MiB: peak held {} KiB, all applied in {elapsed:?}; process peak RSS {:?} KiB before, {:?} KiB after",
        peak / 1024,
        rss_before,
        rss_after
    );
    assert!(
        peak <= budget.total_bytes(),
        "peak {peak} within the budget"
    );
    assert!(
        peak >= 4 << 20,
        "the sources did contend for the budget (peak {peak})"
    );
    let exposed = op.metrics().encode();
    assert!(
        exposed.contains(&format!("applyset_source_memory_peak_bytes {peak}")),
        "the peak is exposed: {exposed}"
    );
    // Everything given back once the reconciles are done (results are dropped with them).
    eventually("the budget given back", DEADLINE, || {
        let b = budget.clone();
        async move { (b.held_bytes() == 0).then_some(()) }
    })
    .await;

    // A source larger than the whole budget fails at once, naming the flag.
    server.put("/huge.yaml", padded_doc("huge", 9 << 20));
    let huge = h.applyset("huge");
    huge.create(json!({"sources": [{"http": {"url": server.url("/huge.yaml")}}]}))
        .await;
    let st = huge.wait_ready_reason(Some("False"), "SourceFailed").await;
    let msg = message(&st);
    assert!(
        msg.contains(
            "more than the operator's whole memory budget for sources (--source-memory-mib=8)"
        ),
        "{msg}"
    );
    assert_not_stalled(&st);
    assert_members(&h, &h.ns, &[], &["huge"]).await;
    stop(op).await;
}
