//! Git sources, with gitoxide (`gix`, pure Rust): a shallow fetch (depth 1) of one ref into a
//! scratch bare repository, then the manifest files of the commit's tree are read from the
//! object database (no checkout, nothing written outside the scratch directory, which is
//! removed afterwards).
//!
//! Checks per interval: one ref listing (handshake + ls-refs); the pack is fetched only when
//! the ref points at a commit that is not cached. A pinned `commit` that is cached costs
//! nothing. The revision is `git:<branch|tag>@sha1:<commit>` (`git:sha1:<commit>` when pinned).
//!
//! Transports: https/http through gix's reqwest backend (rustls), with basic credentials and
//! an extra CA from the secretRef; ssh through the `ssh` program (as git does), with the
//! secretRef's `identity` and `known_hosts` written to the scratch directory (mode 0600) and
//! passed as `core.sshCommand` (no prompts, connect timeout, keep-alives); the key files are
//! removed as soon as the fetch ends, whatever its outcome. `file://` and local paths are
//! refused: a source must not read the operator's own file system.
//!
//! Bounds: the pack is counted as it is received and the fetch interrupted beyond
//! [`Limits::max_download`]; no object may allocate more than [`Limits::max_unpacked`]
//! (`gitoxide.objects.allocLimit`); only the subtree at `path` is walked, every entry counted
//! against [`Limits::max_entries`] and every object's size, read from its header before it is
//! inflated, against [`Limits::max_unpacked`]; https connects within 15 s and the whole
//! transfer is bounded by [`Limits::timeout`]. A `path` that does not exist at the commit is
//! an error, not an empty source.

use std::{
    collections::BTreeMap,
    path::Path,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
};

use kube::Client;

use super::{
    Cached, Fetched, Limits, SourceError, Sources, directory, egress, read_secret, redact,
    secret_text, tree::Tree, under_path,
};
use crate::{
    api::{GitReference, GitSource, KustomizeOverrides},
    applyset::ParentRef,
};

/// The ref's name for messages and revisions: the branch, tag or commit.
pub fn ref_name(r: &GitReference) -> String {
    r.branch
        .clone()
        .or_else(|| r.tag.clone())
        .or_else(|| r.commit.clone())
        .unwrap_or_default()
}

fn valid_ref_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('-')
        && !name.starts_with('/')
        && !name.ends_with('/')
        && !name.ends_with(".lock")
        && !name.contains("..")
        && !name.contains("//")
        && !name.contains("@{")
        && name
            .chars()
            .all(|c| !c.is_control() && !" ~^:?*[\\".contains(c))
}

/// Whether the URL uses a network transport this source accepts.
fn scheme_of(url: &str) -> Result<&'static str, String> {
    if let Some((scheme, _)) = url.split_once("://") {
        return match scheme {
            "https" => Ok("https"),
            "http" => Ok("http"),
            "ssh" => Ok("ssh"),
            other => Err(format!(
                "url scheme {other}:// is not supported; use https://, http:// or ssh:// (or user@host:path)"
            )),
        };
    }
    // scp-like syntax: user@host:path
    match url.split_once(':') {
        Some((host, path)) if host.contains('@') && !path.is_empty() && !host.contains('/') => {
            Ok("ssh")
        }
        _ => Err(
            "url must be https://, http://, ssh:// or user@host:path; local paths are not allowed"
                .into(),
        ),
    }
}

/// Checks a git source's spec without any I/O (`Invalid`, naming the field).
pub fn validate(g: &GitSource) -> Result<(), SourceError> {
    check(g).map_err(SourceError::Invalid)?;
    super::paths::directory_prefix(g.path.as_deref())?;
    Ok(())
}

fn check(g: &GitSource) -> Result<(), String> {
    scheme_of(&g.url)?;
    let r = &g.reference;
    let set = [&r.branch, &r.tag, &r.commit]
        .iter()
        .filter(|v| v.is_some())
        .count();
    if set != 1 {
        return Err("ref must set exactly one of branch, tag or commit".into());
    }
    if let Some(c) = &r.commit
        && !(c.len() == 40 && c.bytes().all(|b| b.is_ascii_hexdigit()))
    {
        return Err("ref.commit must be a full commit SHA (40 hex digits)".into());
    }
    for name in [&r.branch, &r.tag].into_iter().flatten() {
        if !valid_ref_name(name) {
            return Err(format!("{name:?} is not a valid branch or tag name"));
        }
    }
    Ok(())
}

/// Credentials for the transport.
#[derive(Default, Clone)]
struct Creds {
    username: Option<String>,
    password: Option<String>,
    ca: Option<Vec<u8>>,
    identity: Option<Vec<u8>>,
    known_hosts: Option<Vec<u8>>,
}

enum Outcome {
    /// The ref still points at the cached commit.
    Unchanged,
    Fetched {
        commit: String,
        tree: Tree,
    },
}

/// Sets the flag when dropped: a fetch whose future is dropped (timeout, shutdown) stops.
struct InterruptOnDrop(Arc<AtomicBool>);
impl Drop for InterruptOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

pub async fn fetch(
    s: &Sources,
    client: &Client,
    parent: &ParentRef,
    g: &GitSource,
    overrides: Option<&KustomizeOverrides>,
) -> Result<Fetched, SourceError> {
    validate(g)?;
    let prefix = super::paths::directory_prefix(g.path.as_deref())?;
    let dest = checked_destination(s, &g.url).await?;
    let (secret_id, creds) = secret_creds(client, parent, g, &dest).await?;
    let name = ref_name(&g.reference);
    let desc = format!("git {}@{name}", redact(&g.url));
    let identity = format!(
        "git {} {name} path={prefix} secret={secret_id}{}",
        g.url,
        directory::build_identity(overrides)
    );
    let cached = s.cache.get(&identity);
    if let (Some(commit), Some(c)) = (&g.reference.commit, &cached)
        && c.revision == revision_of(&g.reference, &name, commit)
    {
        return Ok(from_cache(c));
    }
    let cached_commit = cached
        .as_ref()
        .and_then(|c| c.revision.rsplit_once("sha1:").map(|(_, c)| c.to_string()));
    let mut lease = s.memory.lease();
    let scope = Scope {
        prefix: prefix.clone(),
        build: overrides.is_some(),
    };
    let outcome = fetch_on_blocking_thread(s, g, creds, cached_commit, &scope, &mut lease).await?;
    match (outcome, cached) {
        (Outcome::Unchanged, Some(c)) => Ok(from_cache(&c)),
        (Outcome::Unchanged, None) => Err(SourceError::Failed(
            "internal: unchanged without a cached revision".into(),
        )),
        (Outcome::Fetched { commit, tree }, _) => {
            let where_ = format!("{} at commit {commit}", under_path(&prefix));
            let dir = directory::Directory {
                desc,
                tree,
                prefix: &prefix,
                where_: where_.trim_start().to_string(),
                overrides,
            };
            let parsed = directory::read(s, dir, &mut lease).await?;
            let cached = Cached {
                revision: revision_of(&g.reference, &name, &commit),
                manifests: parsed.manifests,
                etag: None,
                last_modified: None,
                bytes: parsed.bytes,
                deferred: parsed.deferred,
            };
            Ok(s.cache.store(&identity, "git", cached, lease))
        }
    }
}

/// The secretRef's id (part of the cache identity) and the credentials read from it; none
/// without a secretRef.
async fn secret_creds(
    client: &Client,
    parent: &ParentRef,
    g: &GitSource,
    dest: &egress::Destination,
) -> Result<(String, Creds), SourceError> {
    match &g.secret_ref {
        None => Ok((String::new(), Creds::default())),
        Some(r) => {
            let secret = read_secret(client, parent, r, dest).await?;
            Ok((secret.id, creds_from(&secret.data)))
        }
    }
}

/// The scheme, host and port of a Git URL (https, http, ssh or scp-like `user@host:path`).
fn origin_of(url: &str) -> Result<(String, egress::Destination), String> {
    let u = gix::url::parse(url).map_err(|e| format!("url is not a valid Git URL: {e}"))?;
    let host = u.host().ok_or("url has no host")?;
    let port = u
        .port_or_default()
        .ok_or("url has no port and its scheme has no default port")?;
    Ok((
        u.scheme.as_str().to_string(),
        egress::Destination::of_host(host, port),
    ))
}

/// The destination of the source's URL, refused (`Failed`, nothing sent) when the egress
/// policy does not allow it. For https/http the same checks run again on every connection
/// (gitoxide's redirects included); for ssh, whose program resolves and connects by itself,
/// the host is checked against `--source-allowed-hosts` and its addresses are resolved and
/// checked here, once (best effort: the program resolves again).
async fn checked_destination(s: &Sources, url: &str) -> Result<egress::Destination, SourceError> {
    if scheme_of(url).map_err(SourceError::Invalid)? != "ssh" {
        return egress::checked_destination(&s.policy, url);
    }
    let (_, dest) = origin_of(url).map_err(SourceError::Invalid)?;
    s.policy
        .check_host(&dest)
        .map_err(|e| SourceError::Failed(e.0))?;
    if let egress::DestHost::Name(name) = &dest.host {
        egress::check_resolved(&s.policy, name, dest.port)
            .await
            .map_err(|e| SourceError::Failed(e.0))?;
    }
    Ok(dest)
}

/// The revision of `commit` for `reference` (whose name is `name`): `git:sha1:<commit>` when
/// the reference pins a commit, else `git:<name>@sha1:<commit>`.
fn revision_of(reference: &GitReference, name: &str, commit: &str) -> String {
    match &reference.commit {
        Some(_) => format!("git:sha1:{commit}"),
        None => format!("git:{name}@sha1:{commit}"),
    }
}

/// The cached content, served without a download.
fn from_cache(c: &Cached) -> Fetched {
    Fetched {
        manifests: c.manifests.clone(),
        revision: c.revision.clone(),
        kind: "git",
        downloaded: false,
        memory: None,
        deferred: c.deferred.clone(),
    }
}

/// Runs [`fetch_blocking`] on a blocking thread; the fetch is interrupted if this future is
/// dropped (timeout, shutdown). Its errors come back with the URL redacted. The manifest
/// files read into memory are taken from `lease` (the operator's memory budget) before they
/// are read.
async fn fetch_on_blocking_thread(
    s: &Sources,
    g: &GitSource,
    creds: Creds,
    cached_commit: Option<String>,
    scope: &Scope,
    lease: &mut super::memory::Lease,
) -> Result<Outcome, SourceError> {
    let interrupt = Arc::new(AtomicBool::new(false));
    let _guard = InterruptOnDrop(interrupt.clone());
    let job = Job {
        work_dir: s.work_dir().to_path_buf(),
        url: g.url.clone(),
        reference: g.reference.clone(),
        creds,
        cached_commit,
        scope: scope.clone(),
        limits: s.limits.clone(),
        policy: s.policy.clone(),
        interrupt,
    };
    super::http::unpack_reserving(lease, move |reserve| {
        let reserve = &mut |n: u64| reserve(n).map_err(|e| e.to_string());
        fetch_blocking(&job, reserve)
    })
    .await?
    .map_err(|e| SourceError::Failed(redact_text(&e, &g.url)))
}

/// An error with its causes (gix puts the interesting part, e.g. an HTTP status, in them).
fn chain(e: &dyn std::error::Error) -> String {
    let mut msg = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !msg.contains(&text) {
            msg.push_str(": ");
            msg.push_str(&text);
        }
        source = s.source();
    }
    msg
}

/// Messages of gix can contain the URL as given (possibly with a password): show it redacted.
fn redact_text(msg: &str, url: &str) -> String {
    let r = redact(url);
    if r == url {
        msg.to_string()
    } else {
        msg.replace(url, &r)
    }
}

fn creds_from(data: &BTreeMap<String, Vec<u8>>) -> Creds {
    let password = secret_text(data, "password").or_else(|| secret_text(data, "token"));
    let username =
        secret_text(data, "username").or_else(|| password.as_ref().map(|_| "git".into()));
    Creds {
        username,
        password,
        ca: data.get("ca.crt").cloned().filter(|c| !c.is_empty()),
        identity: data.get("identity").cloned().filter(|c| !c.is_empty()),
        known_hosts: data.get("known_hosts").cloned().filter(|c| !c.is_empty()),
    }
}

fn refspec(r: &GitReference) -> String {
    if let Some(b) = &r.branch {
        format!("+refs/heads/{b}:refs/remotes/origin/{b}")
    } else if let Some(t) = &r.tag {
        format!("+refs/tags/{t}:refs/tags/{t}")
    } else {
        format!(
            "+{}:refs/remotes/origin/pinned",
            r.commit.as_deref().unwrap_or_default()
        )
    }
}

#[cfg(unix)]
fn write_private(path: &Path, data: &[u8]) -> std::io::Result<()> {
    use std::{io::Write, os::unix::fs::OpenOptionsExt};
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(data)?;
    if !data.ends_with(b"\n") {
        f.write_all(b"\n")?;
    }
    Ok(())
}

#[cfg(not(unix))]
fn write_private(path: &Path, data: &[u8]) -> std::io::Result<()> {
    std::fs::write(path, data)
}

/// Quotes a path for `core.sshCommand` (run through a shell by git and gix).
fn shell_quote(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', "'\\''"))
}

/// Bound on connecting to a Git server (https and ssh).
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15);

/// The options of the ssh program: no prompts, bounded connection set-up, and a dead peer
/// noticed within about 45 s (keep-alives every 15 s, two may go unanswered).
const SSH_OPTIONS: &str = "-o BatchMode=yes -o IdentitiesOnly=yes -o ConnectTimeout=15 -o ServerAliveInterval=15 -o ServerAliveCountMax=2";

/// What the pack download may use; shared by the progress children gix creates.
struct PackBudget {
    received: AtomicU64,
    limit: u64,
    exceeded: AtomicBool,
    interrupt: Arc<AtomicBool>,
}

/// A gix progress that counts the bytes of the pack as gix reads them from the server (the
/// `read pack` child, which every byte of the pack passes through) and interrupts the fetch
/// once they exceed the download limit: the pack is never received beyond it.
struct PackCap {
    id: gix::progress::Id,
    counter: gix::progress::StepShared,
    budget: Arc<PackBudget>,
}

impl PackCap {
    fn new(limit: u64, interrupt: Arc<AtomicBool>) -> Self {
        Self {
            id: gix::progress::UNKNOWN,
            counter: Default::default(),
            budget: Arc::new(PackBudget {
                received: AtomicU64::new(0),
                limit,
                exceeded: AtomicBool::new(false),
                interrupt,
            }),
        }
    }

    fn child(&self, id: gix::progress::Id) -> Self {
        Self {
            id,
            counter: Default::default(),
            budget: self.budget.clone(),
        }
    }

    fn read_pack_id() -> gix::progress::Id {
        gix::odb::pack::bundle::write::ProgressId::ReadPackBytes.into()
    }
}

impl gix::progress::Count for PackCap {
    fn set(&self, step: gix::progress::Step) {
        self.counter.store(step, Ordering::Relaxed);
    }

    fn step(&self) -> gix::progress::Step {
        self.counter.load(Ordering::Relaxed)
    }

    fn inc_by(&self, step: gix::progress::Step) {
        self.counter.fetch_add(step, Ordering::Relaxed);
        if self.id == Self::read_pack_id() {
            let b = &self.budget;
            let before = b.received.fetch_add(step as u64, Ordering::SeqCst);
            if before.saturating_add(step as u64) > b.limit {
                b.exceeded.store(true, Ordering::SeqCst);
                b.interrupt.store(true, Ordering::SeqCst);
            }
        }
    }

    fn counter(&self) -> gix::progress::StepShared {
        self.counter.clone()
    }
}

impl gix::progress::Progress for PackCap {
    fn init(&mut self, _max: Option<gix::progress::Step>, _unit: Option<gix::progress::Unit>) {}

    fn set_name(&mut self, _name: String) {}

    fn name(&self) -> Option<String> {
        None
    }

    fn id(&self) -> gix::progress::Id {
        self.id
    }

    fn message(&self, _level: gix::progress::MessageLevel, _message: String) {}
}

impl gix::progress::NestedProgress for PackCap {
    type SubProgress = PackCap;

    fn add_child(&mut self, _name: impl Into<String>) -> Self::SubProgress {
        self.child(gix::progress::UNKNOWN)
    }

    fn add_child_with_id(
        &mut self,
        _name: impl Into<String>,
        id: gix::progress::Id,
    ) -> Self::SubProgress {
        self.child(id)
    }
}

/// What the tree walk may still read: bytes of inflated objects (trees and blobs) and tree
/// entries.
#[derive(Clone)]
struct TreeBudget {
    bytes: u64,
    entries: usize,
    limits: Limits,
}

impl TreeBudget {
    /// Takes an object of `size` bytes (from its header, before it is inflated).
    fn take_bytes(&mut self, size: u64, what: &str) -> Result<(), String> {
        if size > self.bytes {
            return Err(format!(
                "the files under the path exceed {} bytes (the limit) at {what} ({size} bytes); refusing them",
                self.limits.max_unpacked
            ));
        }
        self.bytes -= size;
        Ok(())
    }

    fn take_entry(&mut self) -> Result<(), String> {
        if self.entries == 0 {
            return Err(format!(
                "more than {} entries under the path (the limit); refusing them",
                self.limits.max_entries
            ));
        }
        self.entries -= 1;
        Ok(())
    }
}

/// Removes files (the ssh keys) when dropped, on every way out of the fetch; the scratch
/// directory around them goes too when its `TempDir` drops.
struct RemoveOnDrop(Vec<std::path::PathBuf>);
impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// What a fetch reads from the commit: the manifest files under `prefix`, or (when a
/// kustomization lies under it, or the set has `spec.kustomize`: `build`) every file of the
/// commit, for a kustomize build.
#[derive(Clone, Debug)]
struct Scope {
    prefix: String,
    build: bool,
}

/// What the blocking part of a fetch works with (owned: it runs on a blocking thread).
struct Job {
    /// Where its scratch repository is made.
    work_dir: std::path::PathBuf,
    url: String,
    reference: GitReference,
    creds: Creds,
    /// The commit the cache holds for this source, if any.
    cached_commit: Option<String>,
    /// What is read from the commit.
    scope: Scope,
    limits: Limits,
    policy: Arc<egress::Policy>,
    /// Set when the fetch is no longer wanted.
    interrupt: Arc<AtomicBool>,
}

/// The blocking part of a fetch: lists the ref from a scratch bare repository and, unless a
/// branch or tag still points at the cached commit, receives its pack and reads the files of
/// the job's scope from the commit, `reserve`ing memory for each before it is read.
fn fetch_blocking(
    job: &Job,
    reserve: &mut dyn FnMut(u64) -> Result<(), String>,
) -> Result<Outcome, String> {
    use gix::remote::Direction;
    let Job {
        work_dir,
        url,
        reference,
        creds,
        cached_commit,
        scope,
        limits,
        policy,
        interrupt,
    } = job;
    let (url, cached_commit) = (url.as_str(), cached_commit.as_deref());

    let scratch = scratch_dir(work_dir)?;
    let mut keys = RemoveOnDrop(Vec::new());
    let repo_dir = scratch.path().join("repo.git");
    gix::init_bare(&repo_dir)
        .map_err(|e| format!("initialising a scratch repository: {}", chain(&e)))?;
    // No object may claim more memory than the manifests may take together.
    let mut config = format!(
        "[gitoxide \"objects\"]\n\tallocLimit = {}\n",
        limits.max_unpacked.max(1 << 20)
    );
    let ssh = scheme_of(url)? == "ssh";
    if ssh {
        config.push_str(&ssh_config(scratch.path(), creds, &mut keys)?);
    }
    append_config(&repo_dir, &config)?;
    // Isolated: no system or user git configuration, no credential helpers, no prompts.
    let repo = gix::open_opts(&repo_dir, gix::open::Options::isolated())
        .map_err(|e| format!("opening the scratch repository: {}", chain(&e)))?;
    let remote = repo
        .remote_at(url)
        .map_err(|e| format!("invalid url: {}", chain(&e)))?
        .with_refspecs(Some(refspec(reference).as_str()), Direction::Fetch)
        .map_err(|e| format!("invalid ref: {}", chain(&e)))?;
    let connection = remote
        .connect(Direction::Fetch)
        .map_err(|e| format!("connecting: {}", chain(&e)))?
        .with_credentials(credentials_helper(creds, url)?);
    let connection = if ssh {
        connection
    } else {
        connection.with_transport_options(Box::new(http_options(creds, limits, policy)?))
    };
    let prepare = connection
        .prepare_fetch(gix::progress::Discard, Default::default())
        .map_err(|e| format!("listing refs: {}", chain(&e)))?;
    let wanted = wanted_object(&prepare.ref_map().mappings, reference)?;
    if reference.commit.is_none() && cached_commit == Some(wanted.to_string().as_str()) {
        return Ok(Outcome::Unchanged);
    }
    receive_pack(prepare, keys, reference, limits, interrupt)?;
    let walk = Walk { interrupt, reserve };
    let outcome = read_commit(&repo, wanted, scope, limits, walk)?;
    // The scratch directory goes when `scratch` drops (after `repo`, declared later).
    Ok(outcome)
}

/// Creates the work directory (if needed) and a fresh scratch directory in it, removed when
/// the returned `TempDir` drops.
fn scratch_dir(work_dir: &Path) -> Result<tempfile::TempDir, String> {
    std::fs::create_dir_all(work_dir)
        .map_err(|e| format!("creating the scratch directory {}: {e}", work_dir.display()))?;
    tempfile::Builder::new()
        .prefix("git-")
        .tempdir_in(work_dir)
        .map_err(|e| {
            format!(
                "creating a scratch directory in {}: {e}",
                work_dir.display()
            )
        })
}

/// Writes the secretRef's `identity` and `known_hosts` (required) into `scratch` (mode 0600,
/// recorded in `keys` for removal) and returns the `[core]` section whose `sshCommand` uses
/// them with [`SSH_OPTIONS`].
fn ssh_config(scratch: &Path, creds: &Creds, keys: &mut RemoveOnDrop) -> Result<String, String> {
    let mut cmd = format!("ssh {SSH_OPTIONS}");
    if let Some(id) = &creds.identity {
        let p = scratch.join("identity");
        keys.0.push(p.clone());
        write_private(&p, id).map_err(|e| format!("writing the ssh identity: {}", chain(&e)))?;
        cmd.push_str(&format!(" -i {}", shell_quote(&p)));
    }
    match &creds.known_hosts {
        Some(kh) => {
            let p = scratch.join("known_hosts");
            keys.0.push(p.clone());
            write_private(&p, kh).map_err(|e| format!("writing known_hosts: {}", chain(&e)))?;
            cmd.push_str(&format!(
                " -o StrictHostKeyChecking=yes -o UserKnownHostsFile={}",
                shell_quote(&p)
            ));
        }
        None => return Err(
            "an ssh URL needs a secretRef with known_hosts (and usually identity): the host key must be verified"
                .into(),
        ),
    }
    Ok(format!(
        "[core]\n\tsshCommand = \"{}\"\n",
        cmd.replace('\\', "\\\\").replace('"', "\\\"")
    ))
}

/// Appends `config` to the configuration file of the scratch repository at `repo_dir`.
fn append_config(repo_dir: &Path, config: &str) -> Result<(), String> {
    let config_path = repo_dir.join("config");
    let mut text = std::fs::read_to_string(&config_path)
        .map_err(|e| format!("reading the scratch repository's config: {}", chain(&e)))?;
    text.push_str(config);
    std::fs::write(&config_path, text)
        .map_err(|e| format!("writing the scratch repository's config: {}", chain(&e)))
}

/// Whether the credentials request `ctx` is for the scheme, host and port of `origin` (the
/// source's URL): only then are the secretRef's credentials given (never to a host a
/// redirect led to).
fn same_origin(
    origin: &(String, egress::Destination),
    ctx: &gix::credentials::protocol::Context,
) -> bool {
    let asked = match (&ctx.url, &ctx.protocol, &ctx.host) {
        (Some(url), _, _) => origin_of(&url.to_string()).ok(),
        (None, Some(protocol), Some(host)) => origin_of(&format!("{protocol}://{host}/")).ok(),
        _ => None,
    };
    asked.as_ref() == Some(origin)
}

/// The credentials callback of the connection: the secretRef's username and password when
/// both are set and the request is for the source URL's own origin ([`same_origin`]), else
/// none.
fn credentials_helper(
    creds: &Creds,
    url: &str,
) -> Result<
    impl FnMut(
        gix::credentials::helper::Action,
    ) -> gix::Result<Option<gix::credentials::protocol::Outcome>>
    + use<>,
    String,
> {
    let (user, pass) = (creds.username.clone(), creds.password.clone());
    let origin = origin_of(url)?;
    Ok(move |action| match action {
        gix::credentials::helper::Action::Get(ctx) if !same_origin(&origin, &ctx) => {
            tracing::debug!("git credentials asked for another host than the source's; none given");
            Ok(None)
        }
        gix::credentials::helper::Action::Get(ctx) => match (&user, &pass) {
            (Some(u), Some(p)) => Ok(Some(gix::credentials::protocol::Outcome {
                identity: gix::sec::identity::Account {
                    username: u.clone(),
                    password: p.clone(),
                    oauth_refresh_token: None,
                },
                next: ctx.into(),
            })),
            _ => Ok(None),
        },
        _ => Ok(None),
    })
}

/// The transport options of https/http: bounded connection set-up and transfer, the
/// secretRef's CA, and the egress policy (resolved addresses filtered, every connection's
/// destination checked, redirect hops included: gitoxide's own redirect policy replaces any
/// other, so the check is in the connector).
fn http_options(
    creds: &Creds,
    limits: &Limits,
    policy: &Arc<egress::Policy>,
) -> Result<gix::protocol::transport::client::blocking_io::http::Options, String> {
    let certs = match &creds.ca {
        Some(pem) => Some(
            reqwest::Certificate::from_pem_bundle(pem)
                .map_err(|e| format!("ca.crt is not a PEM certificate bundle: {}", chain(&e)))?,
        ),
        None => None,
    };
    let timeout = limits.timeout;
    let policy = policy.clone();
    let backend = gix::protocol::transport::client::blocking_io::http::reqwest::Options {
        configure_client: Some(Box::new(move |b| {
            let b = b
                .connect_timeout(CONNECT_TIMEOUT)
                .timeout(timeout)
                .dns_resolver(Arc::new(egress::Resolver(policy.clone())))
                .connector_layer(egress::PolicyLayer(policy.clone()));
            Ok(match &certs {
                Some(c) => b.tls_certs_merge(c.clone()),
                None => b,
            })
        })),
        configure_request: None,
    };
    Ok(
        gix::protocol::transport::client::blocking_io::http::Options {
            connect_timeout: Some(CONNECT_TIMEOUT),
            low_speed_limit_bytes_per_second: 1024,
            low_speed_time_seconds: 30,
            backend: Some(Arc::new(std::sync::Mutex::new(backend))),
            ..Default::default()
        },
    )
}

/// The object the listed ref points at (peeled); an error naming the branch or tag when the
/// repository does not have it.
fn wanted_object(
    mappings: &[gix::protocol::fetch::refmap::Mapping],
    reference: &GitReference,
) -> Result<gix::ObjectId, String> {
    let wanted = mappings.iter().find_map(|m| match &m.remote {
        gix::protocol::fetch::refmap::Source::ObjectId(id) => Some(id.to_owned()),
        gix::protocol::fetch::refmap::Source::Ref(r) => {
            let (_, target, peeled) = r.unpack();
            peeled.or(target).map(|o| o.to_owned())
        }
    });
    wanted.ok_or_else(|| {
        format!(
            "the repository has no {} {:?}",
            if reference.branch.is_some() {
                "branch"
            } else {
                "tag"
            },
            ref_name(reference)
        )
    })
}

/// Receives the pack (depth 1), counted against the download limit and interrupted beyond
/// it. The ssh key files in `keys` are removed as soon as the transfer ends, whatever its
/// outcome.
fn receive_pack<T>(
    prepare: gix::remote::fetch::Prepare<'_, '_, T>,
    keys: RemoveOnDrop,
    reference: &GitReference,
    limits: &Limits,
    interrupt: &Arc<AtomicBool>,
) -> Result<(), String>
where
    T: gix::protocol::transport::client::blocking_io::Transport,
{
    let cap = PackCap::new(limits.max_download, interrupt.clone());
    let budget = cap.budget.clone();
    let received = prepare
        .with_shallow(gix::remote::fetch::Shallow::DepthAtRemote(
            std::num::NonZeroU32::MIN,
        ))
        .receive(cap, interrupt);
    // The keys are not needed any more, whatever happened.
    drop(keys);
    if budget.exceeded.load(Ordering::SeqCst) {
        return Err(format!(
            "fetching {}: the pack is more than {} bytes (the download limit); refusing it",
            ref_name(reference),
            limits.max_download
        ));
    }
    received.map_err(|e| format!("fetching {}: {}", ref_name(reference), chain(&e)))?;
    Ok(())
}

/// What a walk of the object database checks as it goes.
struct Walk<'a> {
    /// Set when the fetch is no longer wanted.
    interrupt: &'a AtomicBool,
    /// Takes memory for a file before it is read (the operator's memory budget).
    reserve: &'a mut dyn FnMut(u64) -> Result<(), String>,
}

/// The files of `scope` of the fetched commit `wanted`, read from the object database within
/// the unpacked-size and entry limits.
fn read_commit(
    repo: &gix::Repository,
    wanted: gix::ObjectId,
    scope: &Scope,
    limits: &Limits,
    mut walk: Walk<'_>,
) -> Result<Outcome, String> {
    let commit = repo
        .find_object(wanted)
        .map_err(|e| format!("the fetched object {wanted} is missing: {}", chain(&e)))?
        .peel_to_commit()
        .map_err(|e| format!("{wanted} is not a commit: {}", chain(&e)))?;
    let commit_id = commit.id.to_string();
    let root = commit
        .tree_id()
        .map_err(|e| format!("reading the tree of {commit_id}: {}", chain(&e)))?
        .detach();
    let mut budget = TreeBudget {
        bytes: limits.max_unpacked,
        entries: limits.max_entries,
        limits: limits.clone(),
    };
    let tree = read_tree(repo, root, scope, &commit_id, &mut budget, &mut walk)?;
    Ok(Outcome::Fetched {
        commit: commit_id,
        tree,
    })
}

/// Loads tree `id`, its size taken from the budget (from the header, before inflating it).
fn load_tree<'r>(
    repo: &'r gix::Repository,
    id: gix::ObjectId,
    what: &str,
    budget: &mut TreeBudget,
) -> Result<gix::Tree<'r>, String> {
    let header = repo
        .find_header(id)
        .map_err(|e| format!("reading the tree {what}: {}", chain(&e)))?;
    budget.take_bytes(header.size(), what)?;
    repo.find_tree(id)
        .map_err(|e| format!("reading the tree {what}: {}", chain(&e)))
}

/// The files of `scope` in tree `root`: walks down to the directory at the prefix; when a
/// kustomization lies under it (or `scope.build`), every file of the commit, else the
/// manifest files under the prefix and the root's `.sourceignore`. Every entry (of any kind)
/// and the size of every object read count against the budget, each blob's size checked from
/// its header before it is inflated. A prefix that does not exist (or is not a directory) is
/// an error. A symbolic link to a manifest under the prefix is refused; other links, and
/// submodules, are left out.
fn read_tree(
    repo: &gix::Repository,
    root: gix::ObjectId,
    scope: &Scope,
    commit: &str,
    budget: &mut TreeBudget,
    walk: &mut Walk<'_>,
) -> Result<Tree, String> {
    let prefix = scope.prefix.as_str();
    let dir = prefix.trim_end_matches('/');
    let id = find_directory(repo, root, dir, commit, budget)?;
    let whole = scope.build || has_kustomization(repo, id, dir, budget, walk.interrupt)?;
    let (start, start_dir) = if whole { (root, "") } else { (id, dir) };
    let mut tree = Tree::new();
    let mut queue = std::collections::VecDeque::from([(start, start_dir.to_string())]);
    while let Some((id, dir)) = queue.pop_front() {
        if walk.interrupt.load(Ordering::Relaxed) {
            return Err("interrupted".into());
        }
        let loaded = load_tree(repo, id, &format!("{dir:?}"), budget)?;
        for entry in loaded.iter() {
            let entry = entry.map_err(|e| format!("reading the tree {dir:?}: {}", chain(&e)))?;
            budget.take_entry()?;
            let path = super::tree::join(&dir, &String::from_utf8_lossy(entry.filename()));
            let mode = entry.mode();
            if mode.is_tree() {
                queue.push_back((entry.object_id(), path));
                continue;
            }
            let manifest = super::paths::is_manifest_file(&path) && path.starts_with(prefix);
            if !whole && !manifest {
                continue;
            }
            if mode.is_link() && manifest {
                return Err(format!(
                    "{path} is a symbolic link; links are not followed, declare the manifest as a file"
                ));
            }
            if !mode.is_blob() {
                continue;
            }
            let data = read_blob(repo, entry.object_id(), &path, budget, walk.reserve)?;
            tree.insert(path, data);
        }
    }
    if !whole {
        let top = load_tree(repo, root, "of the root", budget)?;
        if let Some(e) = top.find_entry(super::tree::SOURCEIGNORE)
            && e.mode().is_blob()
        {
            let data = read_blob(
                repo,
                e.object_id(),
                super::tree::SOURCEIGNORE,
                budget,
                walk.reserve,
            )?;
            tree.insert(super::tree::SOURCEIGNORE.into(), data);
        }
    }
    Ok(tree)
}

/// Whether a kustomization file lies in tree `id` (directory `dir`) or below; the walk
/// counts against a copy of the budget (it bounds this walk without being charged twice).
fn has_kustomization(
    repo: &gix::Repository,
    id: gix::ObjectId,
    dir: &str,
    budget: &TreeBudget,
    interrupt: &AtomicBool,
) -> Result<bool, String> {
    let mut budget = budget.clone();
    let mut queue = std::collections::VecDeque::from([(id, dir.to_string())]);
    while let Some((id, dir)) = queue.pop_front() {
        if interrupt.load(Ordering::Relaxed) {
            return Err("interrupted".into());
        }
        let loaded = load_tree(repo, id, &format!("{dir:?}"), &mut budget)?;
        for entry in loaded.iter() {
            let entry = entry.map_err(|e| format!("reading the tree {dir:?}: {}", chain(&e)))?;
            budget.take_entry()?;
            let name = String::from_utf8_lossy(entry.filename()).into_owned();
            if entry.mode().is_tree() {
                queue.push_back((entry.object_id(), super::tree::join(&dir, &name)));
            } else if super::tree::KUSTOMIZATION_NAMES.contains(&name.as_str()) {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// The id of the tree of directory `dir` (no trailing `/`; `""` for the root) under tree
/// `root`, each tree on the way loaded within the budget. An error says which component is
/// missing or is not a directory.
fn find_directory(
    repo: &gix::Repository,
    root: gix::ObjectId,
    dir: &str,
    commit: &str,
    budget: &mut TreeBudget,
) -> Result<gix::ObjectId, String> {
    let mut id = root;
    let mut walked = String::new();
    for component in dir.split('/').filter(|c| !c.is_empty()) {
        let tree = load_tree(repo, id, &format!("of {walked:?}"), budget)?;
        if !walked.is_empty() {
            walked.push('/');
        }
        walked.push_str(component);
        let detail = |what: &str| {
            if walked == dir {
                String::new()
            } else {
                format!(" ({walked} {what})")
            }
        };
        let entry = tree.find_entry(component).ok_or_else(|| {
            format!(
                "path {dir} does not exist at commit {commit}{}; fix path",
                detail("is missing")
            )
        })?;
        if !entry.mode().is_tree() {
            return Err(format!(
                "path {dir} is not a directory at commit {commit}{}; fix path",
                detail("is not a directory")
            ));
        }
        id = entry.object_id();
    }
    Ok(id)
}

/// The content of blob `oid` (the file at `path`), its size taken from the budget and
/// reserved with `reserve` (the memory budget; from the header, before it is inflated).
fn read_blob(
    repo: &gix::Repository,
    oid: gix::ObjectId,
    path: &str,
    budget: &mut TreeBudget,
    reserve: &mut dyn FnMut(u64) -> Result<(), String>,
) -> Result<Vec<u8>, String> {
    let header = repo
        .find_header(oid)
        .map_err(|e| format!("reading {path}: {}", chain(&e)))?;
    budget.take_bytes(header.size(), path)?;
    reserve(header.size())?;
    let mut blob = repo
        .find_object(oid)
        .map_err(|e| format!("reading {path}: {}", chain(&e)))?;
    Ok(std::mem::take(&mut blob.data))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git(url: &str, r: GitReference) -> GitSource {
        GitSource {
            url: url.into(),
            reference: r,
            ..Default::default()
        }
    }

    fn branch(b: &str) -> GitReference {
        GitReference {
            branch: Some(b.into()),
            ..Default::default()
        }
    }

    #[test]
    fn urls() {
        for ok in [
            "https://example.com/r.git",
            "http://127.0.0.1:8080/r.git",
            "ssh://git@example.com/r.git",
            "git@example.com:org/r.git",
        ] {
            assert!(validate(&git(ok, branch("main"))).is_ok(), "{ok}");
        }
        for bad in [
            "file:///etc",
            "/var/repo",
            "../repo",
            "git://x/y",
            "ext::sh -c x",
        ] {
            assert!(validate(&git(bad, branch("main"))).is_err(), "{bad}");
        }
    }

    #[test]
    fn credentials_go_only_to_the_source_origin() {
        let origin = origin_of("https://git.example.com/org/r.git").expect("origin");
        let ctx = |url: Option<&str>, protocol: Option<&str>, host: Option<&str>| {
            gix::credentials::protocol::Context {
                url: url.map(Into::into),
                protocol: protocol.map(Into::into),
                host: host.map(Into::into),
                ..Default::default()
            }
        };
        assert!(same_origin(
            &origin,
            &ctx(Some("https://git.example.com/org/r.git"), None, None)
        ));
        assert!(same_origin(
            &origin,
            &ctx(Some("https://GIT.example.com:443/other"), None, None)
        ));
        assert!(same_origin(
            &origin,
            &ctx(None, Some("https"), Some("git.example.com"))
        ));
        for other in [
            ctx(Some("https://evil.example.com/org/r.git"), None, None),
            ctx(Some("http://git.example.com/org/r.git"), None, None),
            ctx(Some("https://git.example.com:8443/org/r.git"), None, None),
            ctx(None, Some("https"), Some("evil.example.com")),
            ctx(None, Some("https"), Some("git.example.com:8443")),
            ctx(None, None, Some("git.example.com")),
            ctx(None, None, None),
        ] {
            assert!(!same_origin(&origin, &other), "{other:?}");
        }
        let scp = origin_of("git@example.com:org/r.git").expect("scp");
        assert_eq!(scp.1, egress::Destination::of_host("example.com", 22));
    }

    #[test]
    fn refs() {
        assert!(validate(&git("https://x/r", GitReference::default())).is_err());
        let both = GitReference {
            branch: Some("a".into()),
            tag: Some("b".into()),
            ..Default::default()
        };
        assert!(validate(&git("https://x/r", both)).is_err());
        for bad in ["-x", "a..b", "a b", "a:b", ""] {
            assert!(validate(&git("https://x/r", branch(bad))).is_err(), "{bad}");
        }
        let short = GitReference {
            commit: Some("abc".into()),
            ..Default::default()
        };
        assert!(validate(&git("https://x/r", short)).is_err());
        assert_eq!(
            refspec(&branch("release/1")),
            "+refs/heads/release/1:refs/remotes/origin/release/1"
        );
    }
}
