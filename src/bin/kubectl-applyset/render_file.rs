//! Rendering the sets of a file with the operator's own render stage
//! ([`applyset_operator::render::render_set`]): identity, source validation, inline
//! manifests, every source, limits, kinds, namespaces and tenancy — with the operator's
//! messages, placed at the file's line of the entry they are about. Offline (no client),
//! kinds come from [`crate::known_kinds`] and configMap/secret sources are refused with a message
//! that says they need a cluster (so is spec.postBuild.substituteFrom: its read fails).

use std::{collections::HashMap, sync::Arc};

use applyset_operator::{
    api::Source,
    discovery::{Resolved, Resolver},
    render::{
        self, DesiredSet, FieldPath, Gvk, KeySource, KindLookup, Readers, RenderInput, SetLimits,
    },
    set_reads::SetReader,
    sops::AgeKeys,
    sources::{self, Sources, egress},
    tenancy::{self, Defaults, Identity},
};
use kube::Client;

use crate::{
    error::CliError,
    file::{Entry, File, SetDoc},
};

/// What rendering needs besides the set.
pub struct Renderer {
    /// The cluster, if any: discovery, and configMap/secret sources.
    cluster: Option<(Client, Arc<Resolver>)>,
    /// Built-in kinds and those of the file's CRDs (offline).
    table: HashMap<Gvk, Resolved>,
    /// The kinds of the file's CRDs only (with a cluster: for what discovery does not serve).
    file_crds: HashMap<Gvk, Resolved>,
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
    /// A renderer for the sets of `file`, with the cluster of `client` if given; kustomize
    /// overlays are built with `kustomize` (the binary; default: beside this plugin, else on
    /// PATH).
    pub fn new(
        file: &File,
        client: Option<Client>,
        defaults: Defaults,
        kustomize: Option<std::path::PathBuf>,
    ) -> Renderer {
        Renderer::with_policy(file, client, defaults, kustomize, egress::Policy::local())
    }

    /// [`Renderer::new`] whose sources connect only where `policy` allows (the ui renders a
    /// tenant's sources under the operator's default policy, not the user's own).
    pub fn with_policy(
        file: &File,
        client: Option<Client>,
        defaults: Defaults,
        kustomize: Option<std::path::PathBuf>,
        policy: egress::Policy,
    ) -> Renderer {
        let file_crds: HashMap<Gvk, Resolved> =
            render::declared_kinds(&file.crds).into_iter().collect();
        let mut table = crate::known_kinds::builtin();
        table.extend(file_crds.clone());
        let limits = sources::Limits {
            kustomize: sources::kustomize::Settings {
                binary: kustomize,
                ..Default::default()
            },
            ..Default::default()
        };
        let sources = Sources::new(limits, policy, None);
        Renderer {
            cluster: client.map(|c| (c.clone(), Arc::new(Resolver::new(c)))),
            table,
            file_crds,
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

    /// The discovery of the cluster, if there is one.
    pub fn resolver(&self) -> Option<&Arc<Resolver>> {
        self.cluster.as_ref().map(|(_, r)| r)
    }

    /// Renders one set as the operator does; an error names the file and line.
    pub async fn render(&self, file: &File, doc: &SetDoc) -> Result<Rendered, CliError> {
        let parent = &doc.parent;
        let fail = |entry: Option<Entry>, message: String| {
            CliError::File(file.at(doc.line_at(entry), message))
        };
        let identity = tenancy::identity(parent, &doc.spec, &self.defaults)
            .map_err(|e| fail(None, format!("{parent}: {e}")))?;
        let beside = |k: &Gvk| crate::known_kinds::resolve(&self.file_crds, k);
        let known = |k: &Gvk| crate::known_kinds::resolve(&self.table, k);
        let (client, kinds) = match &self.cluster {
            Some((client, resolver)) => (
                client,
                KindLookup::Discovery {
                    resolver,
                    beside: &beside,
                },
            ),
            None => {
                offline_sources(doc).map_err(|(i, m)| fail(Some(Entry::Source(i)), m))?;
                let assume = crate::known_kinds::assumed;
                (
                    &self.offline,
                    KindLookup::Offline {
                        known: &known,
                        assume,
                    },
                )
            }
        };
        let input = RenderInput {
            parent,
            spec: &doc.spec,
            identity: &identity,
            tenancy: &self.defaults,
            limits: &SetLimits::default(),
        };
        // The plugin reads everything with the user's own client.
        let readers = Readers {
            sources: &self.sources,
            client,
            set: SetReader::new(client, "the kubeconfig's user"),
            kinds,
            keys: KeySource::Local(self.age_keys.as_ref()),
            worker: None,
        };
        let rendered = render::render_set(&input, &readers)
            .await
            .map_err(|e| fail(None, format!("{parent}: {e}")))?
            .map_err(|e| fail(e.field_path().map(entry), e.message(parent)))?;
        Ok(Rendered {
            set: rendered.set,
            identity,
            assumed: rendered.assumed,
        })
    }
}

/// The file's entry of a spec's field path.
fn entry(path: FieldPath) -> Entry {
    match path {
        FieldPath::Manifest(i) => Entry::Manifest(i),
        FieldPath::Source(i) => Entry::Source(i),
    }
}

/// Without a cluster, a source that needs one is refused: its index and the message.
fn offline_sources(doc: &SetDoc) -> Result<(), (usize, String)> {
    for (i, source) in doc.spec.sources.iter().enumerate() {
        if let Some(why) = needs_cluster(source) {
            return Err((
                i,
                format!(
                    "{}: spec.sources[{i}] ({}): {why}, and build runs without a cluster; run it with --cluster (the kubeconfig's current context) or declare the manifests inline",
                    doc.parent,
                    sources::describe(source)
                ),
            ));
        }
    }
    Ok(())
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
