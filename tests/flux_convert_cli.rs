//! `kubectl applyset convert` run as a process against the test control plane: Flux objects
//! written by the test convert into sets that `kubectl apply --dry-run=server` accepts (our
//! CRDs' schemas and CEL rules); a Bucket source is refused with its reason and `--strict`
//! exits 2; `--from-cluster` reads Kustomizations (Flux's CRDs installed) with their sources,
//! and what their `status.inventory` says they write decides ApplySet or ClusterApplySet; one
//! a stopped handover left suspended is converted as it was.

mod support;

use std::{path::Path, process::Output, time::Duration};

use kube::{
    Api,
    api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams},
};
use serde_json::{Value, json};
use support::cli::{on_cluster, shown};
use support::{cluster, operator, scratch, test_namespace, wait_for};

fn write_docs(path: &Path, docs: &[Value]) {
    let text: Vec<String> = docs
        .iter()
        .map(|d| serde_json::to_string_pretty(d).expect("json"))
        .collect();
    std::fs::write(path, text.join("\n---\n")).expect("write");
}

fn meta(kind: &str, name: &str, ns: &str, spec: Value) -> Value {
    let api_version = if kind == "Kustomization" {
        "kustomize.toolkit.fluxcd.io/v1"
    } else {
        "source.toolkit.fluxcd.io/v1"
    };
    json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": name, "namespace": ns}, "spec": spec})
}

/// A GitRepository on a closed loopback port: the offline build fails at once, and the scope
/// is decided from the spec.
fn git(name: &str, ns: &str) -> Value {
    meta(
        "GitRepository",
        name,
        ns,
        json!({"url": "http://127.0.0.1:1/repo.git", "interval": "1m", "ref": {"branch": "main"}, "secretRef": {"name": "git-auth"}}),
    )
}

/// The OCIRepository `manifests` and the Kustomizations `infra` (from it, into another
/// namespace, with force and a timeout over ours) and `apps` (from the GitRepository `repo`,
/// with every other field the dry-run checks) in `ns`.
fn flux_objects(ns: &str) -> [Value; 3] {
    let oci = meta(
        "OCIRepository",
        "manifests",
        ns,
        json!({"url": "oci://127.0.0.1:1/app", "interval": "5m", "ref": {"tag": "v1"}, "insecure": true}),
    );
    let infra = meta(
        "Kustomization",
        "infra",
        ns,
        json!({
        "interval": "1h", "timeout": "48h", "path": "./infra", "prune": true, "force": true,
        "targetNamespace": "elsewhere", "sourceRef": {"kind": "OCIRepository", "name": "manifests"}}),
    );
    let apps = meta(
        "Kustomization",
        "apps",
        ns,
        json!({
        "interval": "10m", "path": "./apps", "prune": true, "wait": true,
        "dependsOn": [{"name": "infra"}],
        "postBuild": {"substitute": {"env": "prod"}, "substituteFrom": [{"kind": "ConfigMap", "name": "vars"}]},
        "decryption": {"provider": "sops", "secretRef": {"name": "sops-age"}},
        "patches": [{"patch": "- op: replace\n  path: /spec/replicas\n  value: 2", "target": {"kind": "Deployment"}}],
        "images": [{"name": "nginx", "newTag": "1.27"}],
        "healthChecks": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "namespace": ns}],
        "healthCheckExprs": [{"apiVersion": "example.com/v1", "kind": "Thing", "current": "status.ready == true"}],
        "sourceRef": {"kind": "GitRepository", "name": "repo"}}),
    );
    [oci, infra, apps]
}

/// Writes [`flux_objects`] and the GitRepository into `dir` (in nested directories, with a
/// ConfigMap to ignore and a template that is not YAML).
fn write_flux_dir(dir: &Path, ns: &str) {
    std::fs::create_dir_all(dir.join("apps/nested")).expect("dirs");
    let [oci, infra, apps] = flux_objects(ns);
    write_docs(&dir.join("sources.yaml"), &[git("repo", ns), oci]);
    write_docs(
        &dir.join("apps/nested/ks.yaml"),
        &[
            infra,
            apps,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "other"}}),
        ],
    );
    std::fs::write(dir.join("apps/template.yaml"), "{{ .Values.x }}: [").expect("write");
}

/// Applies `stream` (written into `dir`) with `kubectl apply --dry-run=server`: it must be
/// accepted, the ClusterApplySet `infra` and the ApplySet `apps` created.
fn assert_server_dry_run_accepts(dir: &Path, stream: &str) {
    let file = dir.join("converted.yaml");
    std::fs::write(&file, stream).expect("write");
    let applied = cluster()
        .kubectl()
        .args(["apply", "--dry-run=server", "-f"])
        .arg(&file)
        .output()
        .expect("kubectl");
    let text = String::from_utf8_lossy(&applied.stdout);
    assert!(
        applied.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&applied.stderr)
    );
    assert!(
        text.contains("clusterapplyset.applyset.dev/infra created (server dry run)"),
        "{text}"
    );
    assert!(
        text.contains("applyset.applyset.dev/apps created (server dry run)"),
        "{text}"
    );
}

/// Converts a directory of Flux objects (git and OCI sources; postBuild, decryption, patches,
/// images, dependsOn, healthChecks, healthCheckExprs; one deploying into another namespace)
/// and applies the output with a server-side dry-run.
#[tokio::test]
async fn converted_flux_objects_pass_a_server_side_dry_run() {
    let client = cluster().client().await;
    operator::ensure_crds(&client).await;
    let ns = test_namespace(&client, "fluxconv").await;
    let dir = scratch(&format!("flux-convert-{ns}"));
    write_flux_dir(&dir, &ns);
    let d = dir.display().to_string();
    let out = on_cluster(&[
        "convert",
        "-f",
        &d,
        "--service-account",
        &format!("{ns}/applier"),
    ])
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", shown(&out));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        stdout.contains(&format!(
            "# converted from Kustomization {ns}/infra (OCIRepository {ns}/manifests)"
        )),
        "{}",
        shown(&out)
    );
    assert!(
        stdout.contains("kind: ClusterApplySet") && stdout.contains("kind: ApplySet"),
        "{}",
        shown(&out)
    );
    assert!(
        stderr.contains("timeout: 48h is bounded to 24h"),
        "{}",
        shown(&out)
    );
    assert!(
        stderr.contains(&format!("note: Kustomization {ns}/apps: spec.healthChecks: ignored by kustomize-controller when wait is true")),
        "{}",
        shown(&out)
    );
    assert!(
        stderr.contains("template.yaml: not YAML"),
        "{}",
        shown(&out)
    );
    assert_server_dry_run_accepts(&dir, &stdout);
}

/// A Bucket source refuses its Kustomization with the reason and what to do; `--strict`
/// makes that exit 2.
#[tokio::test]
async fn a_bucket_source_is_refused_and_strict_exits_2() {
    let dir = scratch("flux-convert-bucket");
    let file = dir.join("bucket.yaml");
    write_docs(
        &file,
        &[
            meta(
                "Bucket",
                "b",
                "flux",
                json!({"bucketName": "x", "endpoint": "s3.example", "interval": "1m"}),
            ),
            meta(
                "Kustomization",
                "from-bucket",
                "flux",
                json!({"interval": "1m", "prune": true, "sourceRef": {"kind": "Bucket", "name": "b"}}),
            ),
        ],
    );
    let f = file.display().to_string();
    let out = on_cluster(&["convert", "-f", &f]).await;
    assert_eq!(out.status.code(), Some(0), "{}", shown(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("error: Kustomization flux/from-bucket: spec.sourceRef: Bucket flux/b: a Bucket source (S3-compatible object storage) has no equivalent"), "{}", shown(&out));
    assert!(out.stdout.is_empty(), "{}", shown(&out));
    let strict = on_cluster(&["convert", "-f", &f, "--strict"]).await;
    assert_eq!(strict.status.code(), Some(2), "{}", shown(&strict));
}

/// Installs Flux's CRDs (APPLYSET_FLUX_CRDS) and waits until they are established.
async fn install_flux_crds(client: &kube::Client) {
    let dir = std::env::var("APPLYSET_FLUX_CRDS")
        .expect("APPLYSET_FLUX_CRDS (tests/testenv/fetch-flux-crds.sh)");
    let out = cluster()
        .kubectl()
        .args(["apply", "--server-side", "--force-conflicts", "-f", &dir])
        .output()
        .expect("kubectl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for crd in [
        "kustomizations.kustomize.toolkit.fluxcd.io",
        "gitrepositories.source.toolkit.fluxcd.io",
    ] {
        operator::wait_established(client, crd, Duration::from_secs(60)).await;
    }
}

fn api(
    client: &kube::Client,
    ns: &str,
    group: &str,
    kind: &str,
    plural: &str,
) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, "v1", kind), plural);
    Api::namespaced_with(client.clone(), ns, &ar)
}

/// Creates the GitRepository `repo` (a tag ref) in `ns` and returns the Kustomizations' API
/// there.
async fn repo_and_kustomizations(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let pp = PatchParams::apply("flux-convert-test");
    let repos = api(
        client,
        ns,
        "source.toolkit.fluxcd.io",
        "GitRepository",
        "gitrepositories",
    );
    let mut g = git("repo", ns);
    g["spec"]["ref"] = json!({"name": "refs/tags/v1.0.0"});
    repos
        .patch("repo", &pp, &Patch::Apply(&g))
        .await
        .expect("GitRepository");
    api(
        client,
        ns,
        "kustomize.toolkit.fluxcd.io",
        "Kustomization",
        "kustomizations",
    )
}

/// Creates the Kustomization `name` of `repo` in `ns` (`change` applied to it) with
/// `entries` as its `status.inventory`.
async fn kustomization(
    ks: &Api<DynamicObject>,
    ns: &str,
    name: &str,
    change: impl FnOnce(&mut Value),
    entries: Value,
) {
    let mut k = meta(
        "Kustomization",
        name,
        ns,
        json!({"interval": "5m", "prune": true, "sourceRef": {"kind": "GitRepository", "name": "repo"}}),
    );
    change(&mut k);
    ks.patch(
        name,
        &PatchParams::apply("flux-convert-test"),
        &Patch::Apply(&k),
    )
    .await
    .expect("Kustomization");
    let status = json!({"status": {"inventory": {"entries": entries}}});
    ks.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("status");
}

/// The documents of a YAML stream and their `(kind, name)`.
fn docs_of(out: &Output) -> (Vec<Value>, Vec<(String, String)>) {
    let docs: Vec<Value> =
        serde_saphyr::from_str_multiple::<Value, Vec<Value>>(&String::from_utf8_lossy(&out.stdout))
            .expect("yaml");
    let kinds = docs
        .iter()
        .map(|d| {
            (
                d["kind"].as_str().unwrap_or_default().into(),
                d["metadata"]["name"].as_str().unwrap_or_default().into(),
            )
        })
        .collect();
    (docs, kinds)
}

/// `--from-cluster` reads the Kustomizations of a namespace (or one) and their sources; a
/// Kustomization whose `status.inventory` lists a cluster-scoped object becomes a
/// ClusterApplySet, one that wrote only in its namespace an ApplySet.
#[tokio::test]
async fn from_cluster_decides_the_scope_from_the_inventory() {
    let client = cluster().client().await;
    install_flux_crds(&client).await;
    let ns = test_namespace(&client, "fluxinv").await;
    let ks = repo_and_kustomizations(&client, &ns).await;
    let wide = json!([{"id": format!("_{ns}-extra__Namespace"), "v": "v1"}, {"id": format!("{ns}_cm__ConfigMap"), "v": "v1"}]);
    kustomization(&ks, &ns, "cluster-wide", |_| (), wide).await;
    let local = json!([{"id": format!("{ns}_cm2__ConfigMap"), "v": "v1"}]);
    kustomization(&ks, &ns, "local", |_| (), local).await;
    wait_for("the inventories", Duration::from_secs(30), || async {
        let l = ks.list(&Default::default()).await.ok()?;
        (l.items
            .iter()
            .filter(|k| k.data.pointer("/status/inventory/entries/0").is_some())
            .count()
            == 2)
            .then_some(())
    })
    .await;
    let out = on_cluster(&["convert", "--from-cluster", &ns]).await;
    assert_eq!(out.status.code(), Some(0), "{}", shown(&out));
    let (docs, kinds) = docs_of(&out);
    assert!(
        kinds.contains(&("ClusterApplySet".into(), "cluster-wide".into())),
        "{}",
        shown(&out)
    );
    assert!(
        kinds.contains(&("ApplySet".into(), "local".into())),
        "{}",
        shown(&out)
    );
    assert_eq!(
        docs[0]["spec"]["sources"][0]["git"]["ref"]["tag"],
        "v1.0.0",
        "{}",
        shown(&out)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("it writes cluster-scoped objects (known from status.inventory)"),
        "{}",
        shown(&out)
    );
    let one = on_cluster(&["convert", "--from-cluster", &format!("{ns}/local")]).await;
    let text = String::from_utf8_lossy(&one.stdout);
    assert!(
        text.contains("name: local") && !text.contains("cluster-wide"),
        "{}",
        shown(&one)
    );
}

/// A Kustomization left suspended (with deletionPolicy Orphan) by a handover that did not
/// finish is converted, without `--handover`, as it was before the handover (recorded in
/// `applyset.dev/handover-original`), with a note saying so.
#[tokio::test]
async fn from_cluster_converts_a_kustomization_a_handover_suspended_as_it_was() {
    let client = cluster().client().await;
    install_flux_crds(&client).await;
    let ns = test_namespace(&client, "fluxsusp").await;
    let ks = repo_and_kustomizations(&client, &ns).await;
    let suspended = |k: &mut Value| {
        k["spec"]["suspend"] = json!(true);
        k["spec"]["deletionPolicy"] = json!("Orphan");
        k["metadata"]["annotations"] = json!({
            "applyset.dev/handover-original": r#"{"suspend":false,"deletionPolicy":"Delete"}"#
        });
    };
    let entries = json!([{"id": format!("{ns}_cm__ConfigMap"), "v": "v1"}]);
    kustomization(&ks, &ns, "apps", suspended, entries).await;
    let out = on_cluster(&["convert", "--from-cluster", &format!("{ns}/apps")]).await;
    assert_eq!(out.status.code(), Some(0), "{}", shown(&out));
    let (docs, kinds) = docs_of(&out);
    assert_eq!(
        kinds,
        vec![("ApplySet".to_string(), "apps".to_string())],
        "{}",
        shown(&out)
    );
    let spec = &docs[0]["spec"];
    assert_eq!(spec["deletionPolicy"], "Delete", "{}", shown(&out));
    assert_ne!(spec["suspend"], json!(true), "{}", shown(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("note: Kustomization {ns}/apps: suspended by a handover that did not finish (annotation applyset.dev/handover-original); converted as it was before it: suspend false, deletionPolicy Delete")),
        "{}",
        shown(&out)
    );
}

/// Without an inventory, the converted set is built offline (its git source served on
/// loopback): objects in another namespace or cluster-scoped make a ClusterApplySet, objects
/// of its own namespace only an ApplySet, each "known from a build of the converted set".
#[tokio::test]
async fn an_offline_build_decides_the_scope_of_files() {
    let server = support::servers::GitServer::start(None, None).await;
    let repo = server.repo("fleet");
    repo.commit(
        &[
            ("wide/ns.yaml", Some("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: wide-extra\n")),
            ("wide/cm.yaml", Some("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\n  namespace: elsewhere\n")),
            ("local/cm.yaml", Some("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\n")),
        ],
        "fleet",
    );
    let dir = scratch("flux-convert-build");
    let file = dir.join("flux.yaml");
    let g = meta(
        "GitRepository",
        "fleet",
        "flux",
        json!({"url": server.url("fleet"), "interval": "1m", "ref": {"branch": "main"}}),
    );
    let ks = |name: &str, path: &str| {
        meta(
            "Kustomization",
            name,
            "flux",
            json!({"interval": "1m", "prune": true, "path": path, "sourceRef": {"kind": "GitRepository", "name": "fleet"}}),
        )
    };
    write_docs(&file, &[g, ks("wide", "./wide"), ks("local", "./local")]);
    let kustomize = support::kustomize_binary().display().to_string();
    let f = file.display().to_string();
    let out = on_cluster(&["convert", "-f", &f, "--kustomize-binary", &kustomize]).await;
    assert_eq!(out.status.code(), Some(0), "{}", shown(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("Kustomization flux/wide: becomes a ClusterApplySet: it writes cluster-scoped objects and objects in namespace elsewhere (known from a build of the converted set)"), "{}", shown(&out));
    assert!(stderr.contains("Kustomization flux/local: becomes an ApplySet: it writes only in its own namespace (known from a build of the converted set)"), "{}", shown(&out));
    let docs: Vec<Value> =
        serde_saphyr::from_str_multiple::<Value, Vec<Value>>(&String::from_utf8_lossy(&out.stdout))
            .expect("yaml");
    let kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
    assert_eq!(
        kinds,
        vec!["ClusterApplySet", "ApplySet"],
        "{}",
        shown(&out)
    );
}
