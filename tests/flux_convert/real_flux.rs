//! The real kustomize-controller (v1.9.4, built from its Go module by
//! tests/testenv/build-kustomize-controller.sh; `$APPLYSET_KUSTOMIZE_CONTROLLER`) applying the
//! fixtures' Flux objects in a control plane of its own, for tests/flux_convert.rs to compare
//! what the converted sets apply with what Flux itself applies.
//!
//! source-controller is not run: the test stands in for it, serving each source's content as
//! a tar.gz on loopback and writing the GitRepository's and OCIRepository's status (an
//! artifact with its URL, digest and revision, and Ready) as source-controller does. The
//! controller runs under a shell guard that stops it when the test binary's end of a pipe
//! closes, so it never outlives the test.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use applyset_testenv::{ControlPlane, Options, binaries};
use kube::{
    Api, Client, Config,
    api::{ApiResource, DynamicObject, Patch, PatchParams},
    config::{KubeConfigOptions, Kubeconfig},
};
use serde_json::{Value, json};

/// A control plane of its own with kustomize-controller running against it.
pub struct RealFlux {
    pub cp: ControlPlane,
    pub client: Client,
    controller: Option<Child>,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for RealFlux {
    fn drop(&mut self) {
        if let Some(mut guard) = self.controller.take() {
            // Closing stdin makes the guard stop the controller.
            drop(guard.stdin.take());
            let _ = guard.wait();
        }
    }
}

/// The kustomize-controller binary: `$APPLYSET_KUSTOMIZE_CONTROLLER`, else what
/// tests/testenv/build-kustomize-controller.sh builds (or finds in its cache).
fn controller_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("APPLYSET_KUSTOMIZE_CONTROLLER").filter(|p| !p.is_empty()) {
        return p.into();
    }
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/testenv/build-kustomize-controller.sh");
    let out = Command::new("bash")
        .arg(&script)
        .stderr(Stdio::inherit())
        .output()
        .expect("run build-kustomize-controller.sh");
    assert!(out.status.success(), "build-kustomize-controller.sh failed");
    let text = String::from_utf8_lossy(&out.stdout);
    PathBuf::from(text.lines().last().unwrap_or_default().trim()).join("kustomize-controller")
}

impl RealFlux {
    /// Starts a control plane (without kube-controller-manager: nothing here needs it).
    pub async fn start() -> RealFlux {
        let cp = tokio::task::spawn_blocking(|| {
            let bin = binaries().expect("test binaries");
            let options = Options {
                controller_manager: false,
                ..Options::new(bin)
            };
            ControlPlane::start(&options).expect("a control plane for Flux")
        })
        .await
        .expect("start the control plane");
        let kc = Kubeconfig::read_from(cp.kubeconfig()).expect("kubeconfig");
        let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .expect("kubeconfig valid");
        let client = Client::try_from(config).expect("client");
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("kustomize-controller.log");
        RealFlux {
            cp,
            client,
            controller: None,
            log,
            _dir: dir,
        }
    }

    /// kubectl on this control plane.
    pub fn kubectl(&self) -> tokio::process::Command {
        let mut c = tokio::process::Command::new(self.cp.kubectl());
        c.arg(format!("--kubeconfig={}", self.cp.kubeconfig().display()));
        c
    }

    /// Starts kustomize-controller (all namespaces, no leader election, dependencies
    /// re-checked every second, metrics and health on free loopback ports).
    pub fn start_controller(&mut self) {
        let log = std::fs::File::create(&self.log).expect("log");
        let guard = Command::new("sh")
            .arg("-c")
            .arg(r#""$0" "$@" & pid=$!; cat >/dev/null; kill $pid 2>/dev/null; wait $pid 2>/dev/null"#)
            .arg(controller_binary())
            .args([
                "--enable-leader-election=false",
                "--metrics-addr=127.0.0.1:0",
                "--health-addr=127.0.0.1:0",
                "--requeue-dependency=1s",
                "--watch-all-namespaces=true",
                "--log-level=debug",
            ])
            .env("KUBECONFIG", self.cp.kubeconfig())
            .env("RUNTIME_NAMESPACE", "flux-system")
            .stdin(Stdio::piped())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start kustomize-controller");
        self.controller = Some(guard);
    }

    /// The last lines of the controller's log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// Writes the status source-controller would write for source `kind` `namespace/name`:
    /// an artifact at `url` of `content` (a tar.gz) with `revision`, and Ready.
    pub async fn source_ready(
        &self,
        kind: &str,
        namespace: &str,
        name: &str,
        (url, content, revision): (&str, &[u8], &str),
    ) {
        // gitrepositories, ocirepositories.
        let lower = kind.to_lowercase();
        let plural = format!("{}ies", lower.strip_suffix('y').unwrap_or(&lower));
        let ar = ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("source.toolkit.fluxcd.io", "v1", kind),
            &plural,
        );
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), namespace, &ar);
        let digest = format!("sha256:{}", crate::support::servers::sha256_hex(content));
        let now = "2026-01-01T00:00:00Z";
        let status = json!({"status": {
            "observedGeneration": 1,
            "artifact": {"path": format!("{plural}/{namespace}/{name}/a.tar.gz"), "url": url,
                "revision": revision, "digest": digest, "lastUpdateTime": now,
                "size": content.len()},
            "conditions": [{"type": "Ready", "status": "True", "reason": "Succeeded",
                "message": "stored artifact", "lastTransitionTime": now, "observedGeneration": 1}]}});
        api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap_or_else(|e| panic!("status of {kind} {namespace}/{name}: {e}"));
    }

    /// Waits until Kustomization `namespace/name` is Ready for its generation; returns it.
    pub async fn wait_ready(&self, namespace: &str, name: &str, timeout: Duration) -> Value {
        let ar = ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("kustomize.toolkit.fluxcd.io", "v1", "Kustomization"),
            "kustomizations",
        );
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), namespace, &ar);
        let deadline = Instant::now() + timeout;
        loop {
            let ks = api.get(name).await.expect("get the Kustomization");
            let ks = serde_json::to_value(ks).expect("json");
            let generation = &ks["metadata"]["generation"];
            let ready = ks["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| {
                    c["type"] == "Ready"
                        && c["status"] == "True"
                        && &c["observedGeneration"] == generation
                });
            if ready {
                return ks;
            }
            assert!(
                Instant::now() < deadline,
                "Kustomization {namespace}/{name} not Ready within {timeout:?}: {}\n--- kustomize-controller log\n{}",
                serde_json::to_string_pretty(&ks["status"]).unwrap_or_default(),
                self.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The objects in a Kustomization's `status.inventory`, as live here, by
    /// `group/kind/namespace/name`.
    pub async fn inventory(&self, ks: &Value) -> BTreeMap<String, Value> {
        let mut out = BTreeMap::new();
        for entry in ks["status"]["inventory"]["entries"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let id = entry["id"].as_str().expect("inventory id");
            let version = entry["v"].as_str().expect("inventory version");
            // `namespace_name_group_kind` (fluxcd/cli-utils ObjMetadata).
            let parts: Vec<&str> = id.split('_').collect();
            let [namespace, name, group, kind] = parts[..] else {
                panic!("an inventory id of four parts: {id}");
            };
            let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
            let (ar, _) = kube::discovery::pinned_kind(&self.client, &gvk)
                .await
                .unwrap_or_else(|e| panic!("discovery of {gvk:?}: {e}"));
            let api: Api<DynamicObject> = if namespace.is_empty() {
                Api::all_with(self.client.clone(), &ar)
            } else {
                Api::namespaced_with(self.client.clone(), namespace, &ar)
            };
            let obj = api.get(name).await.unwrap_or_else(|e| panic!("{id}: {e}"));
            out.insert(
                format!("{group}/{kind}/{namespace}/{name}"),
                serde_json::to_value(obj).expect("json"),
            );
        }
        out
    }
}
