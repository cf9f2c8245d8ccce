//! The cluster side of a walk: a control plane of its own (its kube-apiserver is restarted by
//! the walk, which must not disturb other tests), the operator as a real process reaching the
//! API server through the [`Proxy`], the parents, and the writes of every step.

use std::{
    future::Future,
    time::{Duration, Instant},
};

use applyset_testenv::{ControlPlane, Inflight, Options, binaries, kubeconfig_yaml};
use kube::{
    Api, Client, Config,
    api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions},
    config::{KubeConfigOptions, Kubeconfig},
};
use serde_json::{Value, json};

use crate::{
    check::ANNOTATION_SHARD_OWNER,
    operator::{
        ANNOTATION_GROUP_KINDS, ANNOTATION_NAMESPACES, ANNOTATION_PRUNE, ANNOTATION_TOOLING,
        Parent, TEST_LABEL, crd_ar, dyn_api, ensure_crds, namespace_ar, wait_established,
    },
    proxy::Proxy,
    replicas::{Mode, Operators},
    state::{Recorded, Spec},
    throttle,
    universe::{
        FOREIGN_MANAGER, INTERVAL, Key, NAMESPACES, RETRY_INTERVAL, foreign_manifest, is_cluster,
        manifest, set_name, widget_crd,
    },
};

/// A walk's failure to do something in the cluster (not an invariant broken).
pub type Result<T> = std::result::Result<T, String>;

/// How a walk's cluster is set up.
#[derive(Clone, Copy, Debug)]
pub struct Setup {
    /// When the operator is throttled ([`throttle`]).
    pub throttling: Throttling,
    /// One operator, or replicas under `--shards auto`.
    pub mode: Mode,
}

/// When the walk throttles the operator: kube-apiserver with priority and fairness, the
/// operator as the chart's ServiceAccount, in a priority level that rejects what it cannot
/// run at once during the throttling steps, or always.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Throttling {
    /// No priority and fairness, the operator as `system:masters`: never a 429.
    Off,
    Steps,
    Always,
}

/// kube-apiserver's limits of requests in flight when it throttles (half its defaults): of
/// their 300, the operator's level of one share (of about 250) gets two. With one, a
/// reconcile under throttling took up to 54 s (kube-client retries a 429 up to 15 times,
/// its backoff doubling from 5 ms), which made the walk's short runs twice as long.
const THROTTLED_INFLIGHT: Inflight = Inflight {
    readonly: 200,
    mutating: 100,
};

pub struct World {
    pub cp: ControlPlane,
    /// The test's own admin client, straight to kube-apiserver (not through the proxy).
    pub client: Client,
    pub proxy: Proxy,
    /// The operator processes (through the proxy).
    pub operators: Operators,
    /// Value of the `applyset.dev/test` label of every parent (the operator's selector).
    label: String,
    /// The operator's ServiceAccount, when the walk may throttle it.
    account: Option<String>,
    throttling: Throttling,
    /// The operator's 429s counted by earlier runs of kube-apiserver (its metrics start
    /// again at every restart).
    rejected_before: u64,
}

impl World {
    /// Starts a control plane, installs the CRDs, namespaces and foreign objects (and, when
    /// throttled, the operator's identity and flow control), and starts the operator.
    pub async fn start(seed: u64, setup: Setup) -> Result<World> {
        let cp = tokio::task::spawn_blocking(move || -> Result<ControlPlane> {
            let bin = binaries().map_err(|e| e.to_string())?;
            let opts = Options {
                priority_and_fairness: (setup.throttling != Throttling::Off)
                    .then_some(THROTTLED_INFLIGHT),
                ..Options::new(bin)
            };
            ControlPlane::start(&opts).map_err(|e| e.to_string())
        })
        .await
        .map_err(|e| e.to_string())??;
        let client = admin_client(&cp).await?;
        // The replicas' Leases live in the operator's namespace.
        throttle::create_namespace(&client).await?;
        let (account, token) = match setup.throttling {
            Throttling::Off => (None, cp.token().to_owned()),
            t => {
                let sharded = setup.mode != Mode::Single;
                let id = throttle::install(&client, sharded, t == Throttling::Always).await?;
                (Some(id.account), id.token)
            }
        };
        ensure_crds(&client).await;
        install_widget_crd(&client).await?;
        create_namespaces(&client).await?;
        let upstream = cp
            .server()
            .trim_start_matches("https://")
            .parse()
            .map_err(|e| format!("the API server's address: {e}"))?;
        let proxy = Proxy::start(upstream).await;
        let operator_kubeconfig = cp.dir().join("operator-kubeconfig");
        let server = format!("https://127.0.0.1:{}", proxy.port);
        std::fs::write(
            &operator_kubeconfig,
            kubeconfig_yaml(&server, &cp.ca_file(), &token),
        )
        .map_err(|e| format!("writing the operator's kubeconfig: {e}"))?;
        let label = format!("model-{seed}");
        let mut world = World {
            cp,
            client,
            proxy,
            operators: Operators::new(setup.mode, &operator_kubeconfig, &label),
            label,
            account,
            throttling: setup.throttling,
            rejected_before: 0,
        };
        for key in crate::universe::foreign_keys() {
            world.copy_label(&key, None).await?;
        }
        for i in 0..setup.mode.initial() {
            world.operators.start(i);
        }
        Ok(world)
    }

    // -----------------------------------------------------------------------------------------
    // The operator processes

    /// SIGKILL of every running operator process; the replicas it killed.
    pub fn kill_all(&mut self) -> Vec<usize> {
        let live = self.operators.live();
        for &i in &live {
            self.operators.kill(i);
        }
        live
    }

    /// The replica that holds parent `s` now (its `shard-owner` annotation), if any.
    pub async fn owner_of(&self, s: usize) -> Option<usize> {
        let p = self.parent(s);
        let o = p.api().get_opt(&p.name).await.ok()??;
        let owner = o
            .metadata
            .annotations
            .as_ref()?
            .get(ANNOTATION_SHARD_OWNER)?;
        Operators::index_of(owner.split('/').next()?)
    }

    /// Kills kube-apiserver and starts it again (same flags, port and etcd data).
    pub async fn restart_apiserver(&mut self) -> Result<()> {
        self.rejected_before = self.rejected().await?;
        tokio::task::block_in_place(|| self.cp.restart_apiserver(Duration::from_secs(120)))
            .map_err(|e| format!("restarting kube-apiserver: {e}"))
    }

    /// Throttles the operator (`on`) or not, unless the walk throttles it always or never.
    pub async fn throttle(&self, on: bool) -> Result<()> {
        match (&self.account, self.throttling) {
            (Some(account), Throttling::Steps) => throttle::set(&self.client, account, on).await,
            _ => Ok(()),
        }
    }

    /// Lifts the throttling `after` from now, whatever the walk does meanwhile.
    pub fn unthrottle_after(&self, after: Duration) -> tokio::task::JoinHandle<Result<()>> {
        let target = match (&self.account, self.throttling) {
            (Some(account), Throttling::Steps) => Some((self.client.clone(), account.clone())),
            _ => None,
        };
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            match target {
                Some((client, account)) => throttle::set(&client, &account, false).await,
                None => Ok(()),
            }
        })
    }

    /// The 429s the operator received in the whole walk (0 when it is not throttled).
    pub async fn rejected(&self) -> Result<u64> {
        if self.throttling == Throttling::Off {
            return Ok(0);
        }
        Ok(self.rejected_before + throttle::rejected(&self.client).await?)
    }

    // -----------------------------------------------------------------------------------------
    // Namespaces

    /// Deletes namespace `ns` of the universe (the namespace controller deletes what it
    /// holds).
    pub async fn delete_namespace(&self, ns: usize) -> Result<()> {
        let api = dyn_api(&self.client, &namespace_ar(), None);
        let name = NAMESPACES[ns];
        retry(&format!("deleting namespace {name}"), || async {
            match api.delete(name, &DeleteParams::background()).await {
                Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
                r => r.map(|_| ()),
            }
        })
        .await
    }

    /// Waits until namespace `ns` is gone; fails naming what it still holds after `timeout`.
    pub async fn wait_namespace_gone(&self, ns: usize, timeout: Duration) -> Result<()> {
        let api = dyn_api(&self.client, &namespace_ar(), None);
        let name = NAMESPACES[ns];
        let deadline = Instant::now() + timeout;
        loop {
            let found = api.get_opt(name).await;
            match found {
                Ok(None) => return Ok(()),
                Ok(Some(o)) if Instant::now() > deadline => {
                    let status = o.data.get("status").cloned().unwrap_or_default();
                    return Err(format!(
                        "namespace {name} was not gone within {timeout:?} of its deletion: {status}"
                    ));
                }
                Err(e) if Instant::now() > deadline => {
                    return Err(format!("reading namespace {name}: {e}"));
                }
                _ => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    /// Creates namespace `ns` again, and the foreign actors' objects in it.
    pub async fn recreate_namespace(&self, ns: usize) -> Result<()> {
        create_namespace(&self.client, NAMESPACES[ns]).await?;
        for key in crate::universe::foreign_keys() {
            if key.ns == Some(ns) {
                self.copy_label(&key, None).await?;
            }
        }
        Ok(())
    }

    // -----------------------------------------------------------------------------------------
    // Parents

    pub fn parent(&self, s: usize) -> Parent {
        Parent {
            client: self.client.clone(),
            cluster: is_cluster(s),
            namespace: (!is_cluster(s)).then(|| NAMESPACES[crate::universe::HOME].to_owned()),
            name: set_name(s).to_owned(),
            label: self.label.clone(),
        }
    }

    pub async fn create_parent(&self, s: usize, spec: &Spec) -> Result<()> {
        let p = self.parent(s);
        let mut metadata = json!({"name": p.name, "labels": {TEST_LABEL: self.label}});
        if let Some(ns) = &p.namespace {
            metadata["namespace"] = json!(ns);
        }
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "applyset.dev/v1alpha1",
            "kind": p.kind(),
            "metadata": metadata,
            "spec": spec_json(s, spec),
        }))
        .map_err(|e| e.to_string())?;
        let api = p.api();
        retry(&format!("creating {}", p.display()), || async {
            match api.create(&PostParams::default(), &obj).await {
                // A retry after a lost answer finds it created.
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
                r => r.map(|_| ()),
            }
        })
        .await
    }

    /// Writes parent `s`'s whole spec (a merge patch: the manifests list is replaced).
    pub async fn write_spec(&self, s: usize, spec: &Spec) -> Result<()> {
        let p = self.parent(s);
        let patch = json!({"spec": spec_json(s, spec)});
        let api = p.api();
        retry(&format!("writing the spec of {}", p.display()), || async {
            api.patch(&p.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map(|_| ())
        })
        .await
    }

    pub async fn delete_parent(&self, s: usize) -> Result<()> {
        let p = self.parent(s);
        let api = p.api();
        retry(&format!("deleting {}", p.display()), || async {
            match api.delete(&p.name, &DeleteParams::background()).await {
                Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
                r => r.map(|_| ()),
            }
        })
        .await
    }

    /// A foreign actor's merge patch of a parent's annotations.
    async fn patch_parent_annotations(&self, s: usize, annotations: Value) -> Result<()> {
        let p = self.parent(s);
        let patch = json!({"metadata": {"annotations": annotations}});
        let api = p.api();
        let params = PatchParams {
            field_manager: Some(FOREIGN_MANAGER.into()),
            ..Default::default()
        };
        retry(&format!("annotating {}", p.display()), || async {
            api.patch(&p.name, &params, &Patch::Merge(&patch))
                .await
                .map(|_| ())
        })
        .await
    }

    /// Writes `recorded` as the parent's `contains-group-kinds` / `additional-namespaces`.
    pub async fn write_recorded(&self, s: usize, recorded: &Recorded) -> Result<()> {
        let kinds: std::collections::BTreeSet<String> =
            recorded.kinds.iter().map(|k| k.group_kind()).collect();
        let namespaces: std::collections::BTreeSet<&str> = recorded
            .namespaces
            .iter()
            .map(|&ns| NAMESPACES[ns])
            .collect();
        let annotations = json!({
            ANNOTATION_GROUP_KINDS: kinds.into_iter().collect::<Vec<_>>().join(","),
            ANNOTATION_NAMESPACES: namespaces.into_iter().collect::<Vec<_>>().join(","),
        });
        self.patch_parent_annotations(s, annotations).await
    }

    /// Sets the parent's `tooling` annotation to another tool's (`on`) or removes it.
    pub async fn hijack(&self, s: usize, on: bool) -> Result<()> {
        let value = if on {
            json!("other-tool/v1")
        } else {
            Value::Null
        };
        self.patch_parent_annotations(s, json!({ ANNOTATION_TOOLING: value }))
            .await
    }

    // -----------------------------------------------------------------------------------------
    // Foreign actors

    fn api(&self, key: &Key) -> Api<DynamicObject> {
        dyn_api(&self.client, &key.kind.api_resource(), key.namespace())
    }

    /// Another field manager takes a ConfigMap's data key (server-side apply with force; the
    /// resourceVersion makes it fail rather than create an object that is gone).
    pub async fn take_field(&self, key: &Key, value: &str) -> Result<()> {
        let api = self.api(key);
        retry(&format!("taking data.k of {key}"), || async {
            let live = api.get(&key.name).await?;
            let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": key.name, "namespace": key.namespace(),
                             "resourceVersion": live.metadata.resource_version},
                "data": { crate::universe::DATA_KEY: value }});
            let params = PatchParams::apply(FOREIGN_MANAGER).force();
            api.patch(&key.name, &params, &Patch::Apply(&body))
                .await
                .map(|_| ())
        })
        .await
    }

    /// A foreign actor applies its own object, with parent `copied`'s `part-of` label or
    /// without one.
    pub async fn copy_label(&self, key: &Key, copied: Option<usize>) -> Result<()> {
        let api = self.api(key);
        let body = foreign_manifest(key, copied);
        let params = PatchParams::apply(FOREIGN_MANAGER).force();
        retry(&format!("applying the foreign {key}"), || async {
            api.patch(&key.name, &params, &Patch::Apply(&body))
                .await
                .map(|_| ())
        })
        .await
    }

    /// A foreign actor deletes the object of UID `uid`; false when it was already gone.
    pub async fn delete_object(&self, key: &Key, uid: Option<&str>) -> Result<bool> {
        let api = self.api(key);
        let params = DeleteParams::background().preconditions(Preconditions {
            uid: uid.map(str::to_owned),
            resource_version: None,
        });
        retry(&format!("deleting {key}"), || async {
            match api.delete(&key.name, &params).await {
                Ok(_) => Ok(Some(true)),
                Err(kube::Error::Api(e)) if e.code == 404 => Ok(Some(false)),
                // Another UID: the object meant is gone, replaced by another.
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(None),
                Err(e) => Err(e),
            }
        })
        .await?
        .ok_or_else(|| format!("deleting {key}: it has another UID than {uid:?} now"))
    }

    /// A foreign actor annotates an object `applyset.dev/prune: disabled` (a merge patch);
    /// false when the object is gone.
    pub async fn annotate_prune_disabled(&self, key: &Key) -> Result<bool> {
        let api = self.api(key);
        let patch = json!({"metadata": {"annotations": { ANNOTATION_PRUNE: "disabled" }}});
        let params = PatchParams {
            field_manager: Some(FOREIGN_MANAGER.into()),
            ..Default::default()
        };
        retry(&format!("annotating {key}"), || async {
            match api.patch(&key.name, &params, &Patch::Merge(&patch)).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(e)) if e.code == 404 => Ok(false),
                Err(e) => Err(e),
            }
        })
        .await
    }

    /// Whether the object exists (and is not being deleted); None when the API server did
    /// not answer.
    pub async fn exists(&self, key: &Key) -> Option<bool> {
        match self.api(key).get_opt(&key.name).await {
            Ok(o) => Some(o.is_some_and(|o| o.metadata.deletion_timestamp.is_none())),
            Err(kube::Error::Api(e)) if e.code == 404 => Some(false),
            Err(_) => None,
        }
    }
}

/// The spec of parent `s` as JSON.
pub fn spec_json(s: usize, spec: &Spec) -> Value {
    let manifests: Vec<Value> = spec
        .members
        .iter()
        .map(|(k, d)| manifest(k, d, is_cluster(s)))
        .collect();
    json!({
        "manifests": manifests,
        "prune": spec.prune,
        "suspend": spec.suspend,
        "deletionPolicy": if spec.orphan { "Orphan" } else { "Delete" },
        "allowEmpty": spec.allow_empty,
        "force": spec.force,
        "interval": INTERVAL,
        "retryInterval": RETRY_INTERVAL,
    })
}

/// Retries a request that failed without an answer from the API server (a connection
/// refused or cut): the walk's own faults make those. An answer that is an error fails.
async fn retry<T, F, Fut>(what: &str, mut request: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = kube::Result<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match request().await {
            Ok(v) => return Ok(v),
            Err(kube::Error::Api(e)) if e.code != 409 || Instant::now() > deadline => {
                return Err(format!("{what}: {e}"));
            }
            Err(e) if Instant::now() > deadline => return Err(format!("{what}: {e}")),
            // No answer, or a conflict of resourceVersions: again, after a pause.
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

async fn admin_client(cp: &ControlPlane) -> Result<Client> {
    let kc = Kubeconfig::read_from(cp.kubeconfig()).map_err(|e| e.to_string())?;
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|e| e.to_string())?;
    Client::try_from(config).map_err(|e| e.to_string())
}

async fn install_widget_crd(client: &Client) -> Result<()> {
    let crd: DynamicObject = serde_json::from_value(widget_crd()).map_err(|e| e.to_string())?;
    dyn_api(client, &crd_ar(), None)
        .create(&PostParams::default(), &crd)
        .await
        .map_err(|e| format!("installing the Widget CRD: {e}"))?;
    wait_established(
        client,
        &format!("widgets.{}", crate::universe::GROUP),
        Duration::from_secs(60),
    )
    .await;
    Ok(())
}

async fn create_namespaces(client: &Client) -> Result<()> {
    for ns in NAMESPACES {
        create_namespace(client, ns).await?;
    }
    Ok(())
}

async fn create_namespace(client: &Client, ns: &str) -> Result<()> {
    let obj: DynamicObject = serde_json::from_value(
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
    )
    .map_err(|e| e.to_string())?;
    let api = dyn_api(client, &namespace_ar(), None);
    retry(&format!("creating namespace {ns}"), || async {
        match api.create(&PostParams::default(), &obj).await {
            // A retry after a lost answer finds it created.
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
            r => r.map(|_| ()),
        }
    })
    .await
}
