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
    path::Path,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use kube::Client;

use super::{
    Cached, Fetched, Limits, SourceError, Sources, directory, egress, read_secret, redact_url,
    tree::Tree, under_path,
};
use crate::{
    api::{GitReference, GitSource, KustomizeOverrides},
    applyset::ParentRef,
};

mod objects;
mod transport;

use objects::{Walk, read_commit};
use transport::{
    Creds, RemoveOnDrop, credentials_helper, creds_from, http_options, receive_pack, ssh_config,
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
    let desc = format!("git {}@{name}", redact_url(&g.url));
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
    let r = redact_url(url);
    if r == url {
        msg.to_string()
    } else {
        msg.replace(url, &r)
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

/// Appends `config` to the configuration file of the scratch repository at `repo_dir`.
fn append_config(repo_dir: &Path, config: &str) -> Result<(), String> {
    let config_path = repo_dir.join("config");
    let mut text = std::fs::read_to_string(&config_path)
        .map_err(|e| format!("reading the scratch repository's config: {}", chain(&e)))?;
    text.push_str(config);
    std::fs::write(&config_path, text)
        .map_err(|e| format!("writing the scratch repository's config: {}", chain(&e)))
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
