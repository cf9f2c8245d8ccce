//! Flux in the tests: its CRDs installed on the test control plane, the REAL
//! kustomize-controller run as a child process against it, and what source-controller would
//! provide (a GitRepository whose status carries an artifact served on loopback), since
//! source-controller itself is not run.
//!
//! kustomize-controller (`$APPLYSET_KUSTOMIZE_CONTROLLER`, built by
//! tests/testenv/build-kustomize-controller.sh) runs with the admin kubeconfig (`KUBECONFIG`),
//! `--watch-all-namespaces`, `--watch-label-selector` (each test sees only its own
//! Kustomizations), metrics and health on free loopback ports, no leader election, no events
//! address, and is killed when its handle is dropped (also when the test panics).
//!
//! It fetches `status.artifact.url` of the source (a plain loopback URL here, so
//! `SOURCE_CONTROLLER_LOCALHOST` is left unset) and checks the tarball against
//! `status.artifact.digest` (`sha256:<hex>`), then builds `spec.path` inside it.
#![allow(dead_code)]

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api, Client, ResourceExt,
    api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};

use super::{
    operator::{DEADLINE, wait_established},
    process::free_port,
    servers::{Entry, sha256_hex, tar_gz},
};

/// The test label kustomize-controller's `--watch-label-selector` selects on.
pub const FLUX_TEST_LABEL: &str = "applyset.dev/flux-test";

/// The directory of Flux's CRD YAML files: `$APPLYSET_FLUX_CRDS`, else whatever
/// `tests/testenv/fetch-flux-crds.sh` fetches (or finds in its cache).
pub fn crds_dir() -> PathBuf {
    from_env_or_script("APPLYSET_FLUX_CRDS", "fetch-flux-crds.sh", None)
}

/// The kustomize-controller binary: `$APPLYSET_KUSTOMIZE_CONTROLLER`, else whatever
/// `tests/testenv/build-kustomize-controller.sh` builds (or finds in its cache).
pub fn controller_binary() -> PathBuf {
    from_env_or_script(
        "APPLYSET_KUSTOMIZE_CONTROLLER",
        "build-kustomize-controller.sh",
        Some("kustomize-controller"),
    )
}

fn from_env_or_script(var: &str, script: &str, file: Option<&str>) -> PathBuf {
    if let Some(p) = std::env::var_os(var).filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/testenv")
        .join(script);
    let out = Command::new("bash")
        .arg(&script)
        .stderr(Stdio::inherit())
        .output()
        .expect("run the testenv script");
    assert!(out.status.success(), "{} failed", script.display());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let dir = PathBuf::from(stdout.lines().last().unwrap_or_default().trim());
    match file {
        Some(f) => dir.join(f),
        None => dir,
    }
}

/// `kustomize.toolkit.fluxcd.io/v1` Kustomization.
pub fn kustomization_ar() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kustomize.toolkit.fluxcd.io", "v1", "Kustomization"),
        "kustomizations",
    )
}

/// `source.toolkit.fluxcd.io/v1` GitRepository.
pub fn git_repository_ar() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("source.toolkit.fluxcd.io", "v1", "GitRepository"),
        "gitrepositories",
    )
}

/// Installs Flux's CRDs (create, ignoring AlreadyExists) and waits until each is Established.
pub async fn install_crds(client: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
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
        let name = crd.name_any();
        match crds.create(&PostParams::default(), &crd).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => panic!("installing CRD {name}: {e}"),
        }
        wait_established(client, &name, DEADLINE).await;
    }
}

/// A running kustomize-controller, killed on drop.
pub struct KustomizeController {
    child: Child,
    pub log: PathBuf,
}

impl KustomizeController {
    /// Starts kustomize-controller against the cluster of `kubeconfig`, reconciling only the
    /// Kustomizations labelled `FLUX_TEST_LABEL=<label>`.
    pub fn start(kubeconfig: &Path, label: &str) -> KustomizeController {
        let log = std::env::temp_dir().join(format!(
            "applyset-kustomize-controller-{}-{label}.log",
            std::process::id()
        ));
        let out = std::fs::File::create(&log).expect("log file");
        let child = Command::new(controller_binary())
            .arg(format!("--metrics-addr=127.0.0.1:{}", free_port()))
            .arg(format!("--health-addr=127.0.0.1:{}", free_port()))
            .arg("--watch-all-namespaces=true")
            .arg(format!("--watch-label-selector={FLUX_TEST_LABEL}={label}"))
            .arg("--enable-leader-election=false")
            .arg("--events-addr=")
            .arg("--log-level=debug")
            .arg("--log-encoding=console")
            .env("KUBECONFIG", kubeconfig)
            .env("RUNTIME_NAMESPACE", "default")
            .env_remove("SOURCE_CONTROLLER_LOCALHOST")
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log handle"))
            .stderr(out)
            .spawn()
            .expect("start kustomize-controller");
        KustomizeController { child, log }
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

    /// Whether it still runs.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for KustomizeController {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The tarball source-controller would serve for a repository of `files` (path, content).
pub fn artifact(files: &[(&str, &str)]) -> Vec<u8> {
    let entries: Vec<Entry<'_>> = files
        .iter()
        .map(|(p, c)| Entry::File(p, c.as_bytes()))
        .collect();
    tar_gz(&entries)
}

/// Creates GitRepository `namespace/name` of `url` (branch main), labelled for the test.
pub async fn create_git_repository(client: &Client, namespace: &str, name: &str, url: &str) {
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &git_repository_ar());
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

/// Writes the GitRepository's status as source-controller does once it has an artifact:
/// `status.artifact` (path, url, revision `main@sha1:<commit>`, digest `sha256:<hex>` of
/// `tarball`, lastUpdateTime, size) and Ready=True, through the status subresource.
pub async fn write_artifact_status(
    client: &Client,
    namespace: &str,
    name: &str,
    url: &str,
    commit: &str,
    tarball: &[u8],
) {
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &git_repository_ar());
    let live = api.get(name).await.expect("the GitRepository");
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let revision = format!("main@sha1:{commit}");
    let status = json!({
        "apiVersion": "source.toolkit.fluxcd.io/v1",
        "kind": "GitRepository",
        "status": {
            "observedGeneration": live.metadata.generation,
            "artifact": {
                "path": format!("gitrepository/{namespace}/{name}/{commit}.tar.gz"),
                "url": url,
                "revision": revision,
                "digest": format!("sha256:{}", sha256_hex(tarball)),
                "lastUpdateTime": now,
                "size": tarball.len(),
            },
            "conditions": [{
                "type": "Ready",
                "status": "True",
                "reason": "Succeeded",
                "message": format!("stored artifact for revision '{revision}'"),
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
    .expect("write the GitRepository's status");
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

/// Waits until kustomize-controller made the Kustomization Ready with `entries` objects in
/// its inventory; returns it. Panics with the controller's log on timeout.
pub async fn wait_kustomization_ready(
    client: &Client,
    controller: &KustomizeController,
    namespace: &str,
    name: &str,
    entries: usize,
    timeout: Duration,
) -> Value {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let k = kustomization(client, namespace, name).await;
        let ready = k.as_ref().is_some_and(|k| {
            let conditions = k.pointer("/status/conditions").and_then(Value::as_array);
            let ready = conditions
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            let listed = k
                .pointer("/status/inventory/entries")
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            ready && listed == entries
        });
        if ready {
            return k.unwrap_or_default();
        }
        if std::time::Instant::now() > deadline {
            panic!(
                "Kustomization {namespace}/{name} not Ready with {entries} objects within {timeout:?}: {}\n--- kustomize-controller log ---\n{}",
                serde_json::to_string_pretty(&k.and_then(|k| k.get("status").cloned()))
                    .unwrap_or_default(),
                controller.log()
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
