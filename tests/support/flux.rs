//! Flux in the tests: its CRDs installed on a control plane, the REAL kustomize-controller
//! run as a child process against it, and what source-controller would provide (a
//! GitRepository or OCIRepository whose status carries an artifact served on loopback), since
//! source-controller itself is not run.
//!
//! kustomize-controller (`$APPLYSET_KUSTOMIZE_CONTROLLER`, built by
//! tests/testenv/build-kustomize-controller.sh) runs with the admin kubeconfig it is given
//! (`KUBECONFIG`), `--watch-all-namespaces`, optionally `--watch-label-selector` (so each test
//! sees only its own Kustomizations), dependencies re-checked every second, metrics and health
//! on free loopback ports, no leader election, no events address. It runs under a shell guard
//! that stops it when the guard's stdin closes: when its handle is dropped (also when the test
//! panics) or when the test binary ends however it ends, so it never outlives the test.
//!
//! It fetches `status.artifact.url` of the source (a plain loopback URL here, so
//! `SOURCE_CONTROLLER_LOCALHOST` is left unset) and checks the tarball against
//! `status.artifact.digest` (`sha256:<hex>`), then builds `spec.path` inside it.
#![allow(dead_code)]

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::atomic::{AtomicU32, Ordering},
    time::Duration,
};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};

use super::{
    operator::install_crd,
    process::free_port,
    servers::{Entry, sha256_hex, tar_gz},
    testenv_tool,
};

/// The test label kustomize-controller's `--watch-label-selector` selects on.
pub const FLUX_TEST_LABEL: &str = "applyset.dev/flux-test";

/// The directory of Flux's CRD YAML files: `$APPLYSET_FLUX_CRDS`, else whatever
/// `tests/testenv/fetch-flux-crds.sh` fetches (or finds in its cache).
pub fn crds_dir() -> PathBuf {
    testenv_tool("APPLYSET_FLUX_CRDS", "fetch-flux-crds.sh", None)
}

/// The kustomize-controller binary: `$APPLYSET_KUSTOMIZE_CONTROLLER`, else whatever
/// `tests/testenv/build-kustomize-controller.sh` builds (or finds in its cache).
pub fn controller_binary() -> PathBuf {
    testenv_tool(
        "APPLYSET_KUSTOMIZE_CONTROLLER",
        "build-kustomize-controller.sh",
        Some("kustomize-controller"),
    )
}

/// `kustomize.toolkit.fluxcd.io/v1` Kustomization.
pub fn kustomization_ar() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kustomize.toolkit.fluxcd.io", "v1", "Kustomization"),
        "kustomizations",
    )
}

/// `source.toolkit.fluxcd.io/v1` source `kind`: GitRepository, OCIRepository, Bucket.
pub fn source_ar(kind: &str) -> ApiResource {
    let lower = kind.to_lowercase();
    let plural = match lower.strip_suffix('y') {
        Some(stem) => format!("{stem}ies"),
        None => format!("{lower}s"),
    };
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("source.toolkit.fluxcd.io", "v1", kind),
        &plural,
    )
}

/// Installs Flux's CRDs (create, ignoring AlreadyExists) and waits until each is Established.
pub async fn install_crds(client: &Client) {
    let dir = crds_dir();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("the Flux CRDs directory")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no CRD files in {}", dir.display());
    for file in files {
        let text = std::fs::read_to_string(&file).expect("a CRD file");
        let crd: CustomResourceDefinition = serde_saphyr::from_str(&text).expect("a CRD");
        install_crd(client, &crd).await;
    }
}

/// A running kustomize-controller (under its shell guard), stopped on drop.
pub struct KustomizeController {
    guard: Child,
    pub log: PathBuf,
}

/// Numbers the controllers' log files within this test binary.
static STARTED: AtomicU32 = AtomicU32::new(0);

impl KustomizeController {
    /// Starts kustomize-controller against the cluster of `kubeconfig`, reconciling the
    /// Kustomizations labelled `FLUX_TEST_LABEL=<label>`, or all of them (`None`).
    pub fn start(kubeconfig: &Path, label: Option<&str>) -> KustomizeController {
        let log = std::env::temp_dir().join(format!(
            "applyset-kustomize-controller-{}-{}.log",
            std::process::id(),
            STARTED.fetch_add(1, Ordering::SeqCst)
        ));
        let out = std::fs::File::create(&log).expect("log file");
        let selector = label.map(|l| format!("--watch-label-selector={FLUX_TEST_LABEL}={l}"));
        // The guard runs the controller in the background and stops it once stdin closes.
        let guard = Command::new("sh")
            .arg("-c")
            .arg(r#""$0" "$@" & pid=$!; cat >/dev/null; kill $pid 2>/dev/null; wait $pid 2>/dev/null"#)
            .arg(controller_binary())
            .arg(format!("--metrics-addr=127.0.0.1:{}", free_port()))
            .arg(format!("--health-addr=127.0.0.1:{}", free_port()))
            .arg("--watch-all-namespaces=true")
            .args(selector)
            .arg("--requeue-dependency=1s")
            .arg("--enable-leader-election=false")
            .arg("--events-addr=")
            .arg("--log-level=debug")
            .arg("--log-encoding=console")
            .env("KUBECONFIG", kubeconfig)
            .env("RUNTIME_NAMESPACE", "default")
            .env_remove("SOURCE_CONTROLLER_LOCALHOST")
            .stdin(Stdio::piped())
            .stdout(out.try_clone().expect("log handle"))
            .stderr(out)
            .spawn()
            .expect("start kustomize-controller");
        KustomizeController { guard, log }
    }

    /// Its log so far (for failure messages).
    pub fn log(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let start = text.len().saturating_sub(6000);
        let start = (start..text.len())
            .find(|i| text.is_char_boundary(*i))
            .unwrap_or(text.len());
        text[start..].to_owned()
    }
}

impl Drop for KustomizeController {
    fn drop(&mut self) {
        // Closing stdin makes the guard stop the controller and exit.
        drop(self.guard.stdin.take());
        let _ = self.guard.wait();
    }
}

/// The tarball source-controller would serve for a repository of `files` (path, content).
pub fn artifact<P: AsRef<str>, C: AsRef<str>>(files: &[(P, C)]) -> Vec<u8> {
    let entries: Vec<Entry<'_>> = files
        .iter()
        .map(|(p, c)| Entry::File(p.as_ref(), c.as_ref().as_bytes()))
        .collect();
    tar_gz(&entries)
}

/// Creates GitRepository `namespace/name` of `url` (branch main), labelled for the test.
pub async fn create_git_repository(client: &Client, namespace: &str, name: &str, url: &str) {
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &source_ar("GitRepository"));
    let repo: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "source.toolkit.fluxcd.io/v1",
        "kind": "GitRepository",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"url": url, "interval": "1m", "ref": {"branch": "main"}},
    }))
    .expect("a GitRepository");
    api.create(&PostParams::default(), &repo)
        .await
        .expect("create the GitRepository");
}

/// An artifact as source-controller stores it: served at `url`, of `revision` (a
/// GitRepository's `main@sha1:<commit>`, an OCIRepository's `<tag>@sha256:<digest>`), with the
/// content `tarball`.
pub struct Stored<'a> {
    pub url: &'a str,
    pub revision: &'a str,
    pub tarball: &'a [u8],
}

/// Writes the status of source `kind` `namespace/name` as source-controller does once it has
/// an artifact: `status.artifact` (path, url, revision, digest `sha256:<hex>` of the tarball,
/// lastUpdateTime, size) and Ready=True, through the status subresource.
pub async fn write_artifact_status(
    client: &Client,
    kind: &str,
    namespace: &str,
    name: &str,
    stored: &Stored<'_>,
) {
    let ar = source_ar(kind);
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &ar);
    let live = api
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("{kind} {namespace}/{name}: {e}"));
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let hex = sha256_hex(stored.tarball);
    let status = json!({
        "apiVersion": "source.toolkit.fluxcd.io/v1",
        "kind": kind,
        "status": {
            "observedGeneration": live.metadata.generation,
            "artifact": {
                "path": format!("{}/{namespace}/{name}/{hex}.tar.gz", ar.plural),
                "url": stored.url,
                "revision": stored.revision,
                "digest": format!("sha256:{hex}"),
                "lastUpdateTime": now,
                "size": stored.tarball.len(),
            },
            "conditions": [{
                "type": "Ready",
                "status": "True",
                "reason": "Succeeded",
                "message": format!("stored artifact for revision '{}'", stored.revision),
                "observedGeneration": live.metadata.generation,
                "lastTransitionTime": now,
            }],
        },
    });
    api.patch_status(
        name,
        &PatchParams::apply("source-controller").force(),
        &Patch::Apply(&status),
    )
    .await
    .unwrap_or_else(|e| panic!("write the status of {kind} {namespace}/{name}: {e}"));
}

/// Creates Kustomization `namespace/name` over GitRepository `source`, labelled for the
/// kustomize-controller of `label`, with `spec` merged over `sourceRef`.
pub async fn create_kustomization(
    client: &Client,
    namespace: &str,
    name: &str,
    label: &str,
    mut spec: Value,
    source: &str,
) {
    spec["sourceRef"] = json!({"kind": "GitRepository", "name": source});
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &kustomization_ar());
    let k: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
        "kind": "Kustomization",
        "metadata": {"name": name, "namespace": namespace, "labels": {FLUX_TEST_LABEL: label}},
        "spec": spec,
    }))
    .expect("a Kustomization");
    api.create(&PostParams::default(), &k)
        .await
        .expect("create the Kustomization");
}

/// The Kustomization, or None once gone.
pub async fn kustomization(client: &Client, namespace: &str, name: &str) -> Option<Value> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &kustomization_ar());
    let k = api.get_opt(name).await.expect("read the Kustomization")?;
    Some(serde_json::to_value(k).expect("JSON"))
}

/// Waits until kustomize-controller made the Kustomization Ready for its generation (and,
/// with `entries`, with that many objects in its inventory); returns it. Panics with the
/// controller's log on timeout.
pub async fn wait_kustomization_ready(
    client: &Client,
    controller: &KustomizeController,
    namespace: &str,
    name: &str,
    entries: Option<usize>,
    timeout: Duration,
) -> Value {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let k = kustomization(client, namespace, name).await;
        if let Some(k) = k.as_ref().filter(|k| ready_with(k, entries)) {
            return k.clone();
        }
        if std::time::Instant::now() > deadline {
            panic!(
                "Kustomization {namespace}/{name} not Ready with {entries:?} objects within {timeout:?}: {}\n--- kustomize-controller log ---\n{}",
                serde_json::to_string_pretty(&k.and_then(|k| k.get("status").cloned()))
                    .unwrap_or_default(),
                controller.log()
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Whether Kustomization `k` is Ready=True for its generation, with `entries` objects in its
/// inventory when given.
fn ready_with(k: &Value, entries: Option<usize>) -> bool {
    let generation = &k["metadata"]["generation"];
    let ready = k["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| {
            c["type"] == "Ready" && c["status"] == "True" && &c["observedGeneration"] == generation
        });
    let listed = k
        .pointer("/status/inventory/entries")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    ready && entries.is_none_or(|n| n == listed)
}
