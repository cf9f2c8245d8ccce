//! Render: the desired set of a parent. Every producer of manifests (inline `spec.manifests`
//! and each of `spec.sources`) yields [`Manifest`]s, already validated one by one; render
//! validates them together (duplicates), resolves each kind to the API resource the server
//! serves, applies the namespace rules, and orders the members in stages. Any failure stops
//! the reconcile before anything is written.

use std::collections::{BTreeSet, HashMap};
use std::{sync::Arc, time::Instant};

use kube::discovery::ApiResource;
use serde_json::Value;

use crate::{
    Result,
    api::{ApplySetSpec, InlineManifest, MemberRef},
    applyset::{GroupKind, ParentRef, ScopeError},
    decryption::{self, DecryptionError},
    discovery::Resolved,
    kind_order::Stage,
    manifest::{self, Manifest, ManifestError, Origin},
    set_reads::SetReader,
    sops::redact::Redaction,
    sources::{
        self, Fetched, SourceError, SourceErrorClass, Sources,
        memory::{Lease, MemoryBudget},
    },
    stage::StageBudget,
    substitute::{self, SubstituteError},
    tenancy::{self, Defaults, Identity, TenancyError},
};

mod resolve;

pub use resolve::{Gvk, KindLookup, KnownKinds, annotations_of, declared_kinds};
use resolve::{render_resolved, resolve_kinds};

/// A declared object, resolved and ready to apply.
#[derive(Clone, Debug)]
pub struct Member {
    pub origin: Origin,
    /// The object to apply: normalized, namespace set, `part-of` not yet injected.
    pub object: serde_json::Map<String, Value>,
    pub resource: ApiResource,
    pub namespaced: bool,
    pub reference: MemberRef,
    pub stage: Stage,
    /// `force: enabled` on the manifest (either prefix of [`crate::applyset::controls`], label
    /// or annotation): may be deleted and re-created on an immutable change.
    pub force_recreate: bool,
    /// `applyset.dev/adopt: enabled`: may take over an object that exists unlabelled.
    pub adopt: bool,
    /// The paths of the `spec.ignore` rules whose target matches it (see [`crate::ignore`]).
    pub ignore: Vec<crate::ignore::Pointer>,
    /// Decrypted values, and values substituted from Secrets, withheld from messages about
    /// it and from its diff (`None`: the set decrypted and took from Secrets nothing).
    pub redaction: Option<Arc<Redaction>>,
    /// A Secret's variable was substituted into it: a diff masks all its values.
    pub secret_substituted: bool,
}

impl Member {
    /// `message` without the decrypted values of this member, nor the values substituted into
    /// the set from Secrets (an API server's message, or a diff, may echo them).
    pub fn withhold_decrypted(&self, message: String) -> String {
        match &self.redaction {
            Some(r) if !r.is_empty() => r.apply(&message),
            _ => message,
        }
    }

    pub fn group_kind(&self) -> GroupKind {
        GroupKind::new(self.reference.group.clone(), self.reference.kind.clone())
    }
}

/// The rendered desired set.
#[derive(Clone, Debug, Default)]
pub struct DesiredSet {
    pub members: Vec<Member>,
    /// Digest of the rendered set (status.lastAttemptedRevision / lastAppliedRevision).
    pub revision: String,
}

impl DesiredSet {
    pub fn group_kinds(&self) -> BTreeSet<GroupKind> {
        self.members.iter().map(Member::group_kind).collect()
    }
    pub fn namespaces(&self) -> BTreeSet<String> {
        self.members
            .iter()
            .filter_map(|m| m.reference.namespace.clone())
            .collect()
    }
    /// How each kind of the set resolved.
    pub fn resolutions(&self) -> std::collections::HashMap<GroupKind, Resolved> {
        self.members
            .iter()
            .map(|m| {
                let r = Resolved {
                    resource: m.resource.clone(),
                    namespaced: m.namespaced,
                };
                (m.group_kind(), r)
            })
            .collect()
    }
    /// The declared members and their resources (what prune must keep).
    pub fn declared(&self) -> std::collections::HashMap<MemberRef, ApiResource> {
        self.members
            .iter()
            .map(|m| (m.reference.clone(), m.resource.clone()))
            .collect()
    }
}

/// Why a desired set could not be rendered. Only a change of the spec (or the cluster's
/// served kinds) fixes it.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// The member of `origin` has a namespace it may not have, or none it needs.
    #[error("{error}")]
    Scope { origin: Origin, error: ScopeError },
    #[error(
        "{origin}: {kind} {name}: the cluster serves no kind {kind} in {api_version}; install its CustomResourceDefinition first or declare it in this set"
    )]
    UnknownKind {
        origin: Origin,
        api_version: String,
        kind: String,
        name: String,
    },
}

impl RenderError {
    /// The declared object the error is about.
    pub fn origin(&self) -> &Origin {
        match self {
            RenderError::Manifest(e) => e.origin(),
            RenderError::Scope { origin, .. } | RenderError::UnknownKind { origin, .. } => origin,
        }
    }
}

/// Default of `--max-members-per-set`.
pub const DEFAULT_MAX_MEMBERS_PER_SET: usize = 10_000;

/// Default of `--max-kinds-per-set`.
pub const DEFAULT_MAX_KINDS_PER_SET: usize = 64;

/// Default of `--max-inline-manifests-kib`: the JSON text of a set's `spec.manifests`, in KiB.
/// A reconcile reads them into values, up to 16 times their text (a list of small numbers),
/// and the operator renders `--concurrency` sets at once: 8 sets at 512 KiB stay within the
/// chart's 512 MiB (measured in tests/fairness.rs; 1 MiB did not). Larger sets of members
/// belong in a source.
pub const DEFAULT_MAX_INLINE_MANIFESTS_KIB: usize = 512;

/// Default of `--max-member-kib`: one member as JSON, in KiB. The API server reads a request
/// body of at most 3 MiB (k8s.io/apiserver's `MaxRequestBodyBytes`, not a flag of
/// kube-apiserver): a larger member can never be applied, so it is refused before any copy of
/// it is made for the apply.
pub const DEFAULT_MAX_MEMBER_KIB: usize = 3 << 10;

/// What one set may declare (operator flags): members, kinds (each may cost a watch), and
/// parsed YAML/JSON summed over its inline manifests and all its sources.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SetLimits {
    /// `--max-members-per-set`.
    pub max_members: usize,
    /// `--max-kinds-per-set`: distinct (group, kind) of the members.
    pub max_kinds: usize,
    /// `--max-yaml-nodes-per-set` and `--max-yaml-mib-per-set`.
    pub yaml: manifest::YamlCost,
    /// `--max-inline-manifests-kib`, in bytes: the JSON text of `spec.manifests`, checked
    /// before any of it is read into values ([`check_inline_size`]).
    pub max_inline_bytes: usize,
    /// SOPS: a file's text and plaintext, its values, the age identities and stanzas tried
    /// (`--sops-max-*`).
    pub sops: crate::sops::Limits,
    /// `--max-member-kib`, in bytes: one member as JSON (estimated as [`check_limits`]
    /// charges it, never above its real size).
    pub max_member_bytes: usize,
}

impl Default for SetLimits {
    fn default() -> Self {
        SetLimits {
            max_members: DEFAULT_MAX_MEMBERS_PER_SET,
            max_kinds: DEFAULT_MAX_KINDS_PER_SET,
            yaml: manifest::YamlBudget::default().limit,
            max_inline_bytes: DEFAULT_MAX_INLINE_MANIFESTS_KIB << 10,
            sops: crate::sops::Limits::default(),
            max_member_bytes: DEFAULT_MAX_MEMBER_KIB << 10,
        }
    }
}

/// Checks the size of `spec.manifests` as the API server sent it (the entries' JSON text,
/// kept as text by the parent: see [`InlineManifest`]) against `limits`, before any entry is
/// read into a value, so a set's parse costs at most what the limit allows.
pub fn check_inline_size(spec: &ApplySetSpec, limits: &SetLimits) -> Result<(), LimitError> {
    let size: usize = spec.manifests.iter().map(InlineManifest::text_len).sum();
    if size > limits.max_inline_bytes {
        return Err(LimitError::InlineBytes {
            size,
            max_kib: limits.max_inline_bytes >> 10,
        });
    }
    Ok(())
}

/// Checks the declared objects of one set (inline first, then the sources in order) against
/// `limits`: the YAML/JSON budget (the error names the manifest at which it ran out), each
/// member's size, then the number of members. The message says which flag sets the bound.
pub fn check_limits(manifests: &[Manifest], limits: &SetLimits) -> Result<(), LimitError> {
    let mut budget = manifest::YamlBudget::new(limits.yaml);
    for m in manifests {
        let cost = manifest::object_cost(&m.object);
        if let Err(exceeded) = budget.charge(cost) {
            return Err(LimitError::Yaml {
                origin: Box::new(m.origin.clone()),
                exceeded: budget.describe(exceeded),
            });
        }
        if cost.bytes > limits.max_member_bytes {
            return Err(LimitError::Member {
                origin: Box::new(m.origin.clone()),
                object: format!("{} {}", m.kind, m.name),
                bytes: cost.bytes,
                max_kib: limits.max_member_bytes >> 10,
            });
        }
    }
    if manifests.len() > limits.max_members {
        return Err(LimitError::Members {
            declared: manifests.len(),
            max: limits.max_members,
        });
    }
    let kinds: BTreeSet<(&str, &str)> = manifests
        .iter()
        .map(|m| (m.group.as_str(), m.kind.as_str()))
        .collect();
    if kinds.len() > limits.max_kinds {
        return Err(LimitError::Kinds {
            declared: kinds.len(),
            max: limits.max_kinds,
        });
    }
    Ok(())
}

/// A set beyond the operator's limits ([`check_limits`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    /// The YAML/JSON budget ran out at the manifest of `origin`; `exceeded` says which bound
    /// and its flag.
    #[error("{origin}: {exceeded}")]
    Yaml {
        origin: Box<Origin>,
        exceeded: String,
    },
    /// A member larger as JSON than `--max-member-kib` (what the API server accepts).
    #[error(
        "{origin} ({object}): it is at least {bytes} bytes as JSON, more than the {max_kib} KiB the API server accepts in one request (the operator's --max-member-kib); split it into smaller objects"
    )]
    Member {
        origin: Box<Origin>,
        /// `Kind name`.
        object: String,
        bytes: usize,
        max_kib: usize,
    },
    /// More members than `--max-members-per-set`.
    #[error(
        "the set declares {declared} members, more than the {max} the operator allows per set (--max-members-per-set); split it into several sets or raise the flag"
    )]
    Members { declared: usize, max: usize },
    /// `spec.manifests` longer (as JSON text) than `--max-inline-manifests-kib`.
    #[error(
        "its inline manifests (spec.manifests) hold {size} bytes of JSON, more than the {max_kib} KiB the operator allows per set (--max-inline-manifests-kib); move them into a source (configMap, git, oci) or raise the flag"
    )]
    InlineBytes { size: usize, max_kib: usize },
    /// Members of more kinds than `--max-kinds-per-set`.
    #[error(
        "the set declares members of {declared} kinds, more than the {max} the operator allows per set (--max-kinds-per-set); split it into several sets or raise the flag"
    )]
    Kinds { declared: usize, max: usize },
}

/// Parses the inline manifests of a spec (each entry read from its JSON text here: the
/// parent keeps them as text). Check their size first ([`check_inline_size`]).
pub fn inline_manifests(spec: &ApplySetSpec) -> Result<Vec<Manifest>, ManifestError> {
    let mut out = Vec::new();
    for (i, entry) in spec.manifests.iter().enumerate() {
        match entry.value() {
            Ok(value) => out.extend(Manifest::from_value(value, Origin::inline(i))?),
            Err(crate::api::UnreadableManifest(problem)) => {
                return Err(ManifestError::Unreadable {
                    origin: Box::new(Origin::inline(i)),
                    problem,
                });
            }
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// The render stage: a set's spec in, its members (or the first error) out.

/// What rendering a set reads with.
pub struct Readers<'a> {
    pub sources: &'a Sources,
    /// The operator's client: the credentials of http, git and oci sources (`secretRef`).
    pub client: &'a kube::Client,
    /// Every read whose content lands in the set's objects (configMap and secret sources,
    /// substituteFrom, the key Secret), made as the set's identity ([`crate::set_reads`]).
    pub set: SetReader<'a>,
    pub kinds: KindLookup<'a>,
    /// Where the age keys of SOPS-encrypted members come from.
    pub keys: KeySource<'a>,
    /// The reconcile's worker, given back while the sources are read (None: no workers).
    pub worker: Option<&'a crate::fair::Worker>,
}

/// Where the age keys of a set's SOPS-encrypted members come from (spec.decryption).
pub enum KeySource<'a> {
    /// The operator: the set's key Secret, read by [`Readers::set`] as the set's identity.
    Cluster,
    /// The plugin: identities found locally (`None`: none were found).
    Local(Option<&'a crate::sops::AgeKeys>),
}

/// The set to render and the operator's rules for it.
pub struct RenderInput<'a> {
    pub parent: &'a ParentRef,
    pub spec: &'a ApplySetSpec,
    /// Who the set acts as (what it may declare depends on it).
    pub identity: &'a Identity,
    pub tenancy: &'a Defaults,
    pub limits: &'a SetLimits,
}

/// A rendered set.
pub struct Rendered {
    /// The members; its revision names the sources' revisions too.
    pub set: DesiredSet,
    /// What each source produced (its manifests hold their share of the memory budget).
    pub fetched: Vec<Fetched>,
    /// What the render stages' output (decrypted, substituted members) holds of the memory
    /// budget, to be held as long as the set is ([`crate::stage`]).
    pub stage_memory: Vec<std::sync::Arc<Lease>>,
    /// Kinds assumed namespaced because nothing offline knew them.
    pub assumed: Vec<Gvk>,
}

/// Why a set does not render: the first error, typed; [`SetError::message`] is its text.
#[derive(Debug, thiserror::Error)]
pub enum SetError {
    /// A source entry's spec is invalid (found before anything is read).
    #[error(transparent)]
    SourceSpec(SourceError),
    /// A source could not be read, or its content does not parse.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// An inline manifest is invalid.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// The set is beyond the operator's limits.
    #[error(transparent)]
    Limits(#[from] LimitError),
    /// The manifests do not make a set (duplicates, unknown kinds, namespaces).
    #[error(transparent)]
    Render(#[from] RenderError),
    /// A member is outside what the set's identity may declare.
    #[error(transparent)]
    Tenancy(#[from] TenancyError),
    /// A SOPS-encrypted member could not be decrypted (spec.decryption).
    #[error(transparent)]
    Decryption(#[from] DecryptionError),
    /// spec.postBuild: a variable source could not be read now, or a variable is missing.
    #[error(transparent)]
    Substitute(#[from] SubstituteError),
    /// spec.ignore is invalid.
    #[error(transparent)]
    Ignore(#[from] crate::ignore::IgnoreError),
    /// spec.takeOverFieldManagers is invalid.
    #[error(transparent)]
    TakeOver(#[from] crate::applyset::field_managers::NamedError),
    /// An error of a set that decrypted something, shown without the decrypted values (a
    /// message may quote a build's input: kustomize's errors, a parse error of its output).
    #[error("{}", .withheld.apply(&.error.to_string()))]
    Withheld {
        error: Box<SetError>,
        withheld: Arc<Redaction>,
    },
}

/// An entry of a set's spec an error is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldPath {
    /// `spec.manifests[i]`.
    Manifest(usize),
    /// `spec.sources[i]`.
    Source(usize),
}

impl SetError {
    /// The error itself, without what withholds decrypted values from its message.
    pub fn inner(&self) -> &SetError {
        match self {
            SetError::Withheld { error, .. } => error.inner(),
            other => other,
        }
    }

    /// `error` shown without `withheld` (itself when nothing is withheld).
    fn withholding(error: SetError, withheld: &Redaction) -> SetError {
        match withheld.is_empty() {
            true => error,
            false => SetError::Withheld {
                error: Box::new(error),
                withheld: Arc::new(withheld.clone()),
            },
        }
    }

    /// Whether it is a source that could not be read now (SourceFailed, retried); every
    /// other error is in what the set declares (ValidationFailed).
    pub fn is_source_failure(&self) -> bool {
        match self {
            SetError::Withheld { error, .. } => error.is_source_failure(),
            SetError::Source(e) => e.class() == SourceErrorClass::Failed,
            SetError::Substitute(e) => e.is_transient(),
            _ => false,
        }
    }

    /// The message shown for `parent` (status, events, the plugin's errors).
    pub fn message(&self, parent: &ParentRef) -> String {
        match self {
            SetError::SourceSpec(e) => format!("{parent}: {e}"),
            SetError::Source(e) => match e.class() {
                SourceErrorClass::Failed => {
                    format!("{parent}: {e}; nothing applied or pruned")
                }
                SourceErrorClass::Invalid => format!("{parent}: {e}"),
                SourceErrorClass::Manifest => e.to_string(),
            },
            SetError::Manifest(e) => e.to_string(),
            SetError::Render(e) => e.to_string(),
            SetError::Limits(e) => format!("{parent}: {e}"),
            SetError::Tenancy(e) => format!("{parent}: {e}"),
            SetError::Decryption(e) => format!("{parent}: {e}; nothing applied or pruned"),
            SetError::Substitute(e) => format!("{parent}: {e}"),
            SetError::Ignore(e) => format!("{parent}: {e}"),
            SetError::TakeOver(e) => format!("{parent}: {e}"),
            SetError::Withheld { error, withheld } => withheld.apply(&error.message(parent)),
        }
    }

    /// The entry of the spec the error is about, when it is about one.
    pub fn field_path(&self) -> Option<FieldPath> {
        let inline = |o: &Origin| o.inline_index().map(FieldPath::Manifest);
        match self {
            SetError::Withheld { error, .. } => error.field_path(),
            SetError::Source(e) | SetError::SourceSpec(e) => {
                e.source_index().map(FieldPath::Source)
            }
            SetError::Manifest(e) => manifest_path(e),
            SetError::Render(RenderError::Manifest(e)) => manifest_path(e),
            SetError::Render(e) => inline(e.origin()),
            SetError::Limits(
                LimitError::Yaml { origin, .. } | LimitError::Member { origin, .. },
            ) => inline(origin),
            SetError::Limits(
                LimitError::Members { .. }
                | LimitError::Kinds { .. }
                | LimitError::InlineBytes { .. },
            )
            | SetError::Tenancy(_)
            | SetError::Decryption(_)
            | SetError::Substitute(_)
            | SetError::Ignore(_)
            | SetError::TakeOver(_) => None,
        }
    }
}

/// The inline manifest a manifest error is about: for a duplicate, the first declaration
/// that is inline.
fn manifest_path(e: &ManifestError) -> Option<FieldPath> {
    let inline = |o: &Origin| o.inline_index().map(FieldPath::Manifest);
    match e {
        ManifestError::Duplicate { first, second, .. } => inline(first).or_else(|| inline(second)),
        other => inline(other.origin()),
    }
}

/// Renders a set: its sources validated, its inline manifests and every source read (at most
/// [`sources::FETCH_CONCURRENCY`] at once, one deadline for all; a build that reads SOPS files
/// run now with the set's keys), SOPS-encrypted members decrypted, spec.postBuild's variables
/// substituted, the set's limits checked, kinds resolved, namespaces set, and the members
/// checked against what its identity may declare. The one render of the operator's reconcile
/// and of the plugin's `build` and `diff`.
///
/// The outer `Result` is I/O (discovery); the inner one is what the set declares.
pub async fn render_set(
    input: &RenderInput<'_>,
    readers: &Readers<'_>,
) -> Result<std::result::Result<Rendered, SetError>> {
    let (parent, spec) = (input.parent, input.spec);
    // The values decrypted for this set: withheld from every message about it.
    let mut withheld = Redaction::default();
    // The render's deadline: its sources, builds and stages together (--source-timeout).
    let allowed = readers.sources.limits.timeout;
    let stages = Stages {
        memory: &readers.sources.memory,
        deadline: Instant::now() + allowed,
        allowed,
        worker: readers.worker,
    };
    let mut stage_memory = Vec::new();
    let read = async {
        sources::validate(parent, spec).map_err(SetError::SourceSpec)?;
        let ignore = crate::ignore::Rules::compile(&spec.ignore)?;
        let own = parent.member_field_manager();
        crate::applyset::field_managers::validate(&spec.take_over_field_managers, &own)?;
        check_inline_size(spec, input.limits)?;
        let mut manifests = inline_manifests(spec)?;
        let fetch = readers
            .sources
            .fetch_all(readers.client, &readers.set, parent, spec);
        let fetched = match readers.worker {
            Some(worker) if !spec.sources.is_empty() => worker.away(fetch).await?,
            _ => fetch.await?,
        };
        let mut keys = SetKeys {
            input,
            source: &readers.keys,
            reader: &readers.set,
            read: None,
        };
        for (index, f) in fetched.iter().enumerate() {
            match &f.deferred {
                None => manifests.extend(f.manifests.iter().cloned()),
                Some(d) => {
                    let (values, built) =
                        build_deferred(readers.sources, index, d, &mut keys, &stages).await;
                    withheld.extend(&values);
                    let (built, held) = built?;
                    stage_memory.push(held);
                    manifests.extend(built);
                }
            }
        }
        // Flux's order: build (the sources above), decrypt, substitute.
        stage_memory.extend(decrypt(&mut keys, &mut manifests, &stages).await?);
        withhold(&mut manifests, &mut withheld);
        let substituted = post_build(input, &readers.set, manifests, &stages, &mut withheld);
        let (mut manifests, held) = substituted.await?;
        stage_memory.extend(held);
        // Members substituted anew are parsed anew: they carry the values again.
        withhold(&mut manifests, &mut withheld);
        check_limits(&manifests, input.limits)?;
        Ok::<_, SetError>((manifests, fetched, ignore))
    };
    let (manifests, fetched, ignore) = match read.await {
        Ok(read) => read,
        Err(e) => return Ok(Err(SetError::withholding(e, &withheld))),
    };
    let (served, assumed) = resolve_kinds(&readers.kinds, &manifests).await?;
    Ok(finish(input, manifests, served, &fetched)
        .map(|mut set| {
            for m in &mut set.members {
                m.ignore = ignore.paths_for(&m.object);
            }
            set
        })
        .map(|set| Rendered {
            set,
            fetched,
            stage_memory: stage_memory.into_iter().map(Arc::new).collect(),
            assumed,
        })
        .map_err(|e| SetError::withholding(e, &withheld)))
}

/// Every value decrypted for the set (its build inputs', carried by the members they built,
/// and its decrypted members') and every value substituted from a Secret (already in
/// `withheld`) withheld from the messages about any member, and from those about the set
/// (`withheld`).
fn withhold(manifests: &mut [Manifest], withheld: &mut Redaction) {
    for m in manifests.iter() {
        if let Some(r) = &m.redaction {
            withheld.extend(r);
        }
    }
    if withheld.is_empty() {
        return;
    }
    let all = Arc::new(withheld.clone());
    for m in manifests.iter_mut() {
        m.redaction = Some(all.clone());
    }
}

/// What the render stages of one set draw on: the operator-wide memory budget and the
/// render's deadline (see [`crate::stage`]).
struct Stages<'a> {
    memory: &'a MemoryBudget,
    deadline: Instant,
    allowed: std::time::Duration,
    /// The reconcile's worker, given back while a stage runs (as while sources are read).
    worker: Option<&'a crate::fair::Worker>,
}

impl Stages<'_> {
    /// Runs `stage` on the blocking pool with a budget of `limit` bytes for the set's output
    /// (see [`StageBudget::run`]), without holding the reconcile's worker: a stage waiting for
    /// room in the memory budget holds none.
    async fn run<T, F>(&self, limit: usize, stage: F) -> (T, Option<Lease>)
    where
        T: Send + 'static,
        F: FnOnce(&mut StageBudget) -> T + Send + 'static,
    {
        let budget = StageBudget::new(limit as u64, self.memory, self.deadline, self.allowed);
        match self.worker {
            Some(worker) => worker.away(budget.run(stage)).await,
            None => budget.run(stage).await,
        }
    }
}

/// The set's age keys (spec.decryption), read at most once per render and only when a member
/// or a build input needs them.
struct SetKeys<'r, 'a> {
    input: &'r RenderInput<'a>,
    source: &'r KeySource<'a>,
    reader: &'r SetReader<'a>,
    read: Option<crate::sops::AgeKeys>,
}

impl SetKeys<'_, '_> {
    /// `None` when the set has no spec.decryption.
    async fn get(&mut self) -> std::result::Result<Option<&crate::sops::AgeKeys>, DecryptionError> {
        let Some(secret_ref) = decryption::secret_ref(self.input.spec) else {
            return Ok(None);
        };
        match self.source {
            KeySource::Local(Some(keys)) => {
                let limits = &self.input.limits.sops;
                decryption::check_identities(keys, "the local age keys", limits)?;
                Ok(Some(*keys))
            }
            KeySource::Local(None) => Err(DecryptionError::NoLocalKey),
            KeySource::Cluster => {
                if self.read.is_none() {
                    let parent = self.input.parent;
                    let keys = decryption::read_keys(self.reader, parent, secret_ref).await?;
                    let source = decryption::key_source(parent, secret_ref);
                    decryption::check_identities(&keys, &source, &self.input.limits.sops)?;
                    self.read = Some(keys);
                }
                Ok(self.read.as_ref())
            }
        }
    }
}

/// Builds a directory source whose build reads SOPS files (see
/// [`sources::directory::Deferred`]), for this set: every SOPS file the build reads verified
/// with the set's keys, its inputs in Flux's scope decrypted into the private copy (wiped from
/// memory once the build ends; decrypted on the blocking pool, within the set's stage budget),
/// the output kept for this render only, with what it holds of the memory budget. The build
/// (its wait for a build slot included) holds no worker: the reconcile's worker is given back
/// meanwhile. Returns the decrypted values too, to withhold from every message about the set,
/// the build's failure included.
async fn build_deferred(
    sources: &sources::Sources,
    index: usize,
    d: &std::sync::Arc<sources::directory::Deferred>,
    keys: &mut SetKeys<'_, '_>,
    stages: &Stages<'_>,
) -> (
    Redaction,
    std::result::Result<(Vec<Manifest>, Lease), SetError>,
) {
    let namespace = keys.input.parent.namespace.clone().unwrap_or_default();
    let (limits, bytes) = (keys.input.limits.sops, keys.input.limits.yaml.bytes);
    let spec = keys.input.spec;
    let keys = match decryption::build_needs_keys(d) {
        true => match keys.get().await {
            Ok(keys) => keys.cloned(),
            Err(e) => return (Redaction::default(), Err(e.into())),
        },
        false => None,
    };
    let deferred = d.clone();
    let (inputs, _held) = stages
        .run(bytes, move |budget| {
            decryption::decrypt_build_inputs(&deferred, keys.as_ref(), &limits, budget)
        })
        .await;
    let mut inputs = match inputs {
        Ok(inputs) => inputs,
        Err(e) => return (Redaction::default(), Err(e.into())),
    };
    // The build's wait for a slot and its run count toward the render's deadline.
    let scope = sources::kustomize::BuildScope {
        namespace: namespace.as_str().into(),
        deadline: tokio::time::Instant::from_std(stages.deadline),
    };
    let build = sources::directory::build_deferred(sources, d, &inputs.files, scope);
    let built = match stages.worker {
        Some(worker) => worker.away(build).await,
        None => build.await,
    };
    decryption::wipe(&mut inputs.files);
    let built = built.map_err(|e| match spec.sources.get(index) {
        Some(source) => SetError::Source(SourceError::at(index, source, e)),
        None => SetError::Source(e),
    });
    (std::mem::take(&mut inputs.withheld), built)
}

/// Decrypts the SOPS-encrypted members in memory (spec.decryption; see [`decryption`]),
/// reading the keys only when a member needs them; on the blocking pool, within the set's
/// stage budget. Returns what the decrypted content holds of the memory budget.
async fn decrypt(
    keys: &mut SetKeys<'_, '_>,
    manifests: &mut Vec<Manifest>,
    stages: &Stages<'_>,
) -> std::result::Result<Option<Lease>, DecryptionError> {
    if !decryption::needs_keys(manifests) {
        return Ok(None);
    }
    let (limits, bytes) = (keys.input.limits.sops, keys.input.limits.yaml.bytes);
    let keys = keys.get().await?.cloned();
    let mut members = std::mem::take(manifests);
    let ((out, count), held) = stages
        .run(bytes, move |budget| {
            let count = decryption::decrypt_members(&mut members, keys.as_ref(), &limits, budget);
            (members, count)
        })
        .await;
    *manifests = out;
    let count = count?;
    tracing::debug!(members = count, "decrypted");
    Ok(held)
}

/// spec.postBuild: the set's variables substituted in every member (see [`substitute`]), on
/// the blocking pool, the output counted against the set's YAML bound and the operator-wide
/// memory budget as it is expanded; `manifests` unchanged when the set has none. The values
/// read from Secrets join `withheld` (withheld from every message about the set, and from a
/// diff, as decrypted values are). Returns what the substituted members hold of the memory
/// budget.
async fn post_build(
    input: &RenderInput<'_>,
    reader: &SetReader<'_>,
    manifests: Vec<Manifest>,
    stages: &Stages<'_>,
    withheld: &mut Redaction,
) -> std::result::Result<(Vec<Manifest>, Option<Lease>), SetError> {
    let Some(vars) = substitute::variables(reader, input.parent, input.spec).await? else {
        return Ok((manifests, None));
    };
    withheld.extend(vars.secret_values());
    let member_text = input
        .limits
        .max_member_bytes
        .saturating_mul(substitute::MEMBER_TEXT_FACTOR) as u64;
    let (out, held) = stages
        .run(input.limits.yaml.bytes, move |budget| {
            budget.limit_member_text(member_text);
            substitute::apply_within(manifests, &vars, budget)
        })
        .await;
    Ok((out?, held))
}

/// The render's pure end: members from resolved kinds, the revision, the tenancy check.
#[allow(clippy::result_large_err)]
fn finish(
    input: &RenderInput<'_>,
    manifests: Vec<Manifest>,
    served: HashMap<Gvk, Resolved>,
    fetched: &[Fetched],
) -> std::result::Result<DesiredSet, SetError> {
    let mut set = render_resolved(input.parent, input.spec, manifests, served)?;
    set.revision = sources::combined_revision(&set.revision, fetched);
    let members = set.members.iter().map(|m| (&m.reference, m.namespaced));
    tenancy::check_scope(input.parent, input.identity, input.tenancy, members)?;
    Ok(set)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::{YamlCost, parse_documents};

    fn manifests(n: usize) -> Vec<Manifest> {
        let text: String = (0..n)
            .map(|i| format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c{i}\n---\n"))
            .collect();
        parse_documents(
            &text,
            &Origin::file("git https://example.com/r.git@main", "all.yaml"),
        )
        .expect("valid")
    }

    #[test]
    fn inline_manifests_are_bounded_by_their_text_before_they_are_read() {
        let entry = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a"}, "data": {"k": "v"}});
        let len = entry.to_string().len();
        let spec = ApplySetSpec {
            manifests: vec![entry.clone().into(), entry.into()],
            ..serde_json::from_value(serde_json::json!({})).expect("an empty spec")
        };
        let limits = |bytes: usize| SetLimits {
            max_inline_bytes: bytes,
            ..SetLimits::default()
        };
        assert_eq!(check_inline_size(&spec, &limits(2 * len)), Ok(()));
        assert_eq!(check_inline_size(&spec, &limits(2048)), Ok(()));
        let err = check_inline_size(&spec, &limits(2 * len - 1)).expect_err("one byte over");
        assert_eq!(
            err,
            LimitError::InlineBytes {
                size: 2 * len,
                max_kib: 0
            }
        );
        let msg = err.to_string();
        for part in [&format!("{} bytes", 2 * len), "--max-inline-manifests-kib"] {
            assert!(msg.contains(part), "{part:?} not in {msg}");
        }
        // The parent's name comes first in the set's message.
        let parent = ParentRef::applyset("team", "big");
        let msg = SetError::Limits(err).message(&parent);
        assert!(
            msg.starts_with("ApplySet team/big: its inline manifests"),
            "{msg}"
        );
    }

    #[test]
    fn values_substituted_from_a_secret_are_withheld_from_what_is_said_of_every_member() {
        let parent = ParentRef::applyset("team", "app");
        let spec: ApplySetSpec = serde_json::from_value(serde_json::json!({})).expect("spec");
        let text = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  password: ${password}\n  region: ${region}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\n";
        let manifests = parse_documents(text, &Origin::source("test")).expect("parses");
        let layer = |pairs: &[(&str, &str)], secret: bool| {
            let values = pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            ("substituteFrom[0]".to_string(), values, secret)
        };
        let vars = substitute::merge(vec![
            layer(&[("password", "hunter2-secret")], true),
            layer(&[("region", "eu-west-1")], false),
        ])
        .expect("valid");
        let mut manifests = substitute::apply(manifests, &vars).expect("substituted");
        // As render_set does after post_build.
        let mut withheld = Redaction::default();
        withheld.extend(vars.secret_values());
        withhold(&mut manifests, &mut withheld);
        let resolved = |kind: &str| {
            let gvk = (String::new(), "v1".to_string(), kind.to_string());
            let resource = kube::core::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
                "", "v1", kind,
            ));
            let namespaced = true;
            (
                gvk,
                crate::discovery::Resolved {
                    resource,
                    namespaced,
                },
            )
        };
        let served = HashMap::from([resolved("ConfigMap")]);
        let set = render_resolved(&parent, &spec, manifests, served).expect("rendered");
        assert_eq!(set.members[0].object["data"]["password"], "hunter2-secret");
        let said =
            "data.password: Invalid value: \"hunter2-secret\" (aHVudGVyMi1zZWNyZXQ=) in eu-west-1";
        // Every member withholds it (a message about one may quote another), not the
        // ConfigMap's value.
        for m in &set.members {
            assert_eq!(
                m.withhold_decrypted(said.to_string()),
                "data.password: Invalid value: \"<redacted>\" (<redacted>) in eu-west-1"
            );
        }
        // Without a Secret, nothing is withheld.
        let plain = substitute::merge(vec![layer(&[("password", "hunter2-secret")], false)])
            .expect("valid");
        assert!(plain.secret_values().is_empty());
    }

    #[test]
    fn an_error_of_a_set_that_decrypted_shows_no_decrypted_value() {
        let parent = ParentRef::applyset("team", "app");
        let e = SetError::Source(SourceError::At {
            index: 1,
            description: "git https://host/r.git@main".into(),
            error: Box::new(SourceError::Failed(
                "kustomize: no matches for Id ConfigMap.v1.[noGrp]/name-hunter2.[noNs]".into(),
            )),
        });
        let withheld = Redaction::new(vec!["name-hunter2".into()]);
        let e = SetError::withholding(e, &withheld);
        for shown in [e.message(&parent), e.to_string()] {
            assert!(!shown.contains("hunter2"), "{shown}");
            assert!(
                shown.contains("ConfigMap.v1.[noGrp]/<redacted>.[noNs]"),
                "{shown}"
            );
        }
        // Classified as the error it wraps.
        assert!(e.is_source_failure());
        assert_eq!(e.field_path(), Some(FieldPath::Source(1)));
        assert!(matches!(e.inner(), SetError::Source(_)));
        // Nothing decrypted: the error as it is.
        let plain = SetError::withholding(
            SetError::Limits(LimitError::Members {
                declared: 2,
                max: 1,
            }),
            &Redaction::default(),
        );
        assert!(matches!(plain, SetError::Limits(_)));
    }

    #[test]
    fn limits_allow_up_to_the_member_count_and_name_the_flag_beyond() {
        let limits = SetLimits {
            max_members: 3,
            ..SetLimits::default()
        };
        assert_eq!(check_limits(&manifests(3), &limits), Ok(()));
        assert_eq!(check_limits(&[], &limits), Ok(()));
        let err = check_limits(&manifests(4), &limits)
            .expect_err("too many")
            .to_string();
        assert!(err.contains("declares 4 members"), "{err}");
        assert!(err.contains("--max-members-per-set"), "{err}");
        assert_eq!(SetLimits::default().max_members, 10_000);
    }

    #[test]
    fn a_member_larger_than_the_api_server_reads_is_refused_naming_it_and_the_flag() {
        let all = manifests(2);
        let one = crate::manifest::object_cost(&all[0].object).bytes;
        // The estimate never exceeds the member's JSON text: what is refused, the API server
        // would refuse too.
        let text = serde_json::to_string(&all[0].object).expect("json");
        assert!(one <= text.len(), "{one} > {}", text.len());
        let limits = |max_member_bytes: usize| SetLimits {
            max_member_bytes,
            ..SetLimits::default()
        };
        assert_eq!(check_limits(&all, &limits(one)), Ok(()));
        let err = check_limits(&all, &limits(one - 1))
            .expect_err("too large")
            .to_string();
        let named = format!("{} ({} {})", all[0].origin, all[0].kind, all[0].name);
        assert!(err.starts_with(&named), "{err}");
        assert!(err.contains(&format!("at least {one} bytes")), "{err}");
        assert!(err.contains("--max-member-kib"), "{err}");
        assert_eq!(SetLimits::default().max_member_bytes, 3 << 20);
    }

    #[test]
    fn limits_allow_up_to_the_kind_count_and_name_the_flag_beyond() {
        let text: String = (0..3)
            .map(|i| format!("apiVersion: example.com/v1\nkind: K{i}\nmetadata:\n  name: x\n---\n"))
            .collect();
        let three = parse_documents(&text, &Origin::file("inline", "x.yaml")).expect("valid");
        let limits = SetLimits {
            max_kinds: 3,
            ..SetLimits::default()
        };
        assert_eq!(check_limits(&three, &limits), Ok(()));
        // Many members of one kind count once.
        assert_eq!(check_limits(&manifests(10), &limits), Ok(()));
        let mut four = three;
        four.extend(manifests(1));
        let err = check_limits(&four, &limits)
            .expect_err("too many kinds")
            .to_string();
        assert!(err.contains("members of 4 kinds"), "{err}");
        assert!(err.contains("--max-kinds-per-set"), "{err}");
        assert_eq!(SetLimits::default().max_kinds, 64);
    }

    #[test]
    fn limits_name_the_manifest_where_the_yaml_budget_ran_out() {
        let all = manifests(3);
        let one = crate::manifest::object_cost(&all[0].object);
        let limits = |nodes: usize, bytes: usize| SetLimits {
            max_members: 100,
            yaml: YamlCost { nodes, bytes },
            ..SetLimits::default()
        };
        assert_eq!(
            check_limits(&all, &limits(3 * one.nodes, 3 * one.bytes)),
            Ok(())
        );
        let err = check_limits(&all, &limits(3 * one.nodes - 1, 1 << 20))
            .expect_err("nodes")
            .to_string();
        assert!(
            err.starts_with("git https://example.com/r.git@main file all.yaml, document 3"),
            "{err}"
        );
        assert!(err.contains("--max-yaml-nodes-per-set"), "{err}");
        let err = check_limits(&all, &limits(1000, 2 * one.bytes))
            .expect_err("bytes")
            .to_string();
        assert!(err.contains("document 3"), "{err}");
        assert!(err.contains("--max-yaml-mib-per-set"), "{err}");
    }
}
