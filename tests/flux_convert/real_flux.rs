//! A control plane of its own for the real kustomize-controller (tests/support/flux.rs
//! starts it and stands in for source-controller), for tests/flux_convert.rs to compare what
//! the converted sets apply with what Flux itself applies: its client and kubectl, and the
//! objects of a Kustomization's inventory as live there.

use std::collections::BTreeMap;

use applyset_testenv::{ControlPlane, Options, binaries};
use kube::{
    Api, Client, Config,
    api::DynamicObject,
    config::{KubeConfigOptions, Kubeconfig},
};
use serde_json::Value;

use crate::support::flux::KustomizeController;

/// A control plane of its own, for kustomize-controller.
pub struct RealFlux {
    pub cp: ControlPlane,
    pub client: Client,
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
        RealFlux { cp, client }
    }

    /// kubectl on this control plane.
    pub fn kubectl(&self) -> tokio::process::Command {
        let mut c = tokio::process::Command::new(self.cp.kubectl());
        c.arg(format!("--kubeconfig={}", self.cp.kubeconfig().display()));
        c
    }

    /// Starts kustomize-controller on this control plane, for every Kustomization.
    pub fn start_controller(&self) -> KustomizeController {
        KustomizeController::start(self.cp.kubeconfig(), None)
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
