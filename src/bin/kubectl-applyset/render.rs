//! Rendering the sets of a file as the operator's reconcile does (`src/controller/reconcile.rs`,
//! step 1): identity, source validation, inline manifests, every source, limits, kinds,
//! namespaces and tenancy — with the operator's messages, prefixed with the file and line.
//! Offline (no client), kinds come from [`crate::kinds`] and configMap/secret sources are
//! refused with a message that says they need a cluster.

use std::{collections::HashMap, sync::Arc};

use applyset_operator::{
    api::{ApplySetSpec, Source},
    decryption,
    discovery::{Resolved, Resolver},
    manifest::Manifest,
    render::{self, DesiredSet, Gvk, SetLimits},
    sops::{self, AgeKeys},
    sources::{self, SourceError, Sources},
    tenancy::{self, Defaults, Identity},
};
use futures::{StreamExt, TryStreamExt};
use kube::Client;

use crate::file::{File, SetDoc};

/// What rendering needs besides the set.
pub struct Renderer {
    /// The cluster, if any: discovery, and configMap/secret sources.
    cluster: Option<(Client, Arc<Resolver>)>,
    /// Built-in kinds and those of the file's CRDs (offline).
    table: HashMap<Gvk, Resolved>,
    sources: Sources,
    pub defaults: Defaults,
    /// A client for the sources when there is no cluster (it is never called: sources that
    /// need the cluster are refused first).
    offline: Client,
    /// The local age identities SOPS-encrypted members are decrypted with (instead of the
    /// set's key Secret in the cluster).
    age_keys: Option<AgeKeys>,
}

/// A rendered set.
pub struct Rendered {
    pub set: DesiredSet,
    /// Who the set acts as.
    pub identity: Identity,
    /// Kinds assumed namespaced because nothing offline knew them.
    pub assumed: Vec<Gvk>,
}

impl Renderer {
    /// A renderer for the sets of `file`, with the cluster of `client` if given.
    pub fn new(file: &File, client: Option<Client>, defaults: Defaults) -> Renderer {
        let mut table = crate::kinds::builtin();
        table.extend(render::declared_kinds(&file.crds));
        let sources = Sources::new(
            sources::Limits::default(),
            sources::egress::Policy::default(),
            None,
        );
        Renderer {
            cluster: client.map(|c| (c.clone(), Arc::new(Resolver::new(c)))),
            table,
            sources,
            defaults,
            offline: unreachable_client(),
            age_keys: None,
        }
    }

    /// Decrypts SOPS-encrypted members with these local identities.
    pub fn with_age_keys(mut self, keys: Option<AgeKeys>) -> Renderer {
        self.age_keys = keys;
        self
    }

    /// Decrypts the members that carry SOPS metadata, as the operator does, with the local
    /// identities (a set without spec.decryption is refused as the operator refuses it).
    fn decrypt(&self, spec: &ApplySetSpec, manifests: &mut [Manifest]) -> Result<(), String> {
        if !decryption::needs_keys(manifests) {
            return Ok(());
        }
        let keys = match (&spec.decryption, &self.age_keys) {
            (None, _) => None,
            (Some(_), Some(keys)) => Some(keys),
            (Some(_), None) => {
                return Err("members are SOPS-encrypted and no local age key was found: pass --sops-age-key-file, or set SOPS_AGE_KEY_FILE or SOPS_AGE_KEY".to_string());
            }
        };
        decryption::decrypt_members(manifests, keys, &sops::Limits::default())
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    /// The discovery of the cluster, if there is one.
    pub fn resolver(&self) -> Option<&Arc<Resolver>> {
        self.cluster.as_ref().map(|(_, r)| r)
    }

    /// Renders one set; an error names the file and line.
    pub async fn render(&self, file: &File, doc: &SetDoc) -> Result<Rendered, String> {
        let parent = &doc.parent;
        let spec = &doc.spec;
        let fail = |message: String| file.at(doc.line_of(&message), message);
        let identity = tenancy::identity(parent, spec, &self.defaults)
            .map_err(|e| fail(format!("{parent}: {e}")))?;
        sources::validate(parent, spec).map_err(|e| fail(format!("{parent}: {e}")))?;
        let mut manifests = render::inline_manifests(spec).map_err(|e| fail(e.to_string()))?;
        let client = match &self.cluster {
            Some((client, _)) => client,
            None => {
                for (i, source) in spec.sources.iter().enumerate() {
                    if let Some(why) = needs_cluster(source) {
                        let line = doc.source_lines.get(i).copied().unwrap_or(doc.line);
                        return Err(file.at(
                            line,
                            format!(
                                "{parent}: spec.sources[{i}] ({}): {why}, and build runs without a cluster; run it with --cluster (the kubeconfig's current context) or declare the manifests inline",
                                sources::describe(source)
                            ),
                        ));
                    }
                }
                &self.offline
            }
        };
        // Sources are read as the operator reads them (at most FETCH_CONCURRENCY at once,
        // one deadline for all); each error is placed at its entry's line.
        let reads = spec
            .sources
            .iter()
            .enumerate()
            .map(|(i, source)| async move {
                self.sources
                    .fetch(client, parent, i, source)
                    .await
                    .map_err(|e| {
                        let message = match e {
                            SourceError::Failed(m) => {
                                format!("{parent}: {m}; nothing applied or pruned")
                            }
                            SourceError::Invalid(m) => format!("{parent}: {m}"),
                            SourceError::Manifest(m) => m.to_string(),
                        };
                        let line = if message.contains("spec.") {
                            doc.line_of(&message)
                        } else {
                            doc.source_lines.get(i).copied().unwrap_or(doc.line)
                        };
                        file.at(line, message)
                    })
            });
        let all = futures::stream::iter(reads)
            .buffered(sources::FETCH_CONCURRENCY)
            .try_collect::<Vec<_>>();
        let timeout = self.sources.limits.timeout;
        let fetched = tokio::time::timeout(timeout, all).await.map_err(|_| {
            fail(format!(
                "{parent}: spec.sources: not read within {timeout:?}"
            ))
        })??;
        for f in &fetched {
            manifests.extend(f.manifests.iter().cloned());
        }
        self.decrypt(spec, &mut manifests)
            .map_err(|e| fail(format!("{parent}: {e}")))?;
        render::check_limits(&manifests, &SetLimits::default())
            .map_err(|e| fail(format!("{parent}: {e}")))?;
        let wanted = render::kinds_to_resolve(&manifests);
        let mut assumed = Vec::new();
        let served = match &self.cluster {
            Some((_, resolver)) => {
                let mut served = resolver
                    .resolve_all(&wanted)
                    .await
                    .map_err(|e| format!("{parent}: {e}"))?;
                // A CRD declared beside the set in the file is known too.
                for k in &wanted {
                    if !served.contains_key(k)
                        && let Some(r) = crate::kinds::resolve(&self.file_crds(), k)
                    {
                        served.insert(k.clone(), r);
                    }
                }
                served
            }
            None => wanted
                .iter()
                .map(|k| {
                    let r = crate::kinds::resolve(&self.table, k).unwrap_or_else(|| {
                        assumed.push(k.clone());
                        crate::kinds::assumed(k)
                    });
                    (k.clone(), r)
                })
                .collect(),
        };
        let set = render::render_resolved(parent, spec, manifests, served)
            .map_err(|e| fail(e.to_string()))?;
        let members = set.members.iter().map(|m| (&m.reference, m.namespaced));
        tenancy::check_scope(parent, &identity, &self.defaults, members)
            .map_err(|e| fail(format!("{parent}: {e}")))?;
        Ok(Rendered {
            set,
            identity,
            assumed,
        })
    }

    /// The kinds of the file's CRDs only (the table minus the built-in kinds).
    fn file_crds(&self) -> HashMap<Gvk, Resolved> {
        let builtin = crate::kinds::builtin();
        self.table
            .iter()
            .filter(|(k, _)| !builtin.contains_key(*k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}

/// Why a source cannot be read without a cluster, if it cannot.
fn needs_cluster(source: &Source) -> Option<&'static str> {
    if source.config_map.is_some() {
        return Some("a configMap source is read from the cluster");
    }
    if source.secret.is_some() {
        return Some("a secret source is read from the cluster");
    }
    let secret_ref = source
        .http
        .as_ref()
        .and_then(|h| h.secret_ref.as_ref())
        .or(source.git.as_ref().and_then(|g| g.secret_ref.as_ref()))
        .or(source.oci.as_ref().and_then(|o| o.secret_ref.as_ref()));
    secret_ref.map(|_| "its secretRef is read from the cluster")
}

/// A client whose every request fails without any I/O.
fn unreachable_client() -> Client {
    let service = tower::service_fn(|_req: http::Request<kube::client::Body>| async {
        Err::<http::Response<kube::client::Body>, std::io::Error>(std::io::Error::other(
            "build runs without a cluster (--cluster uses the kubeconfig's)",
        ))
    });
    Client::new(service, "default")
}
