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
//! passed as `core.sshCommand`. `file://` and local paths are refused: a source must not read
//! the operator's own file system.

use std::{
    collections::BTreeMap,
    path::Path,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use kube::Client;

use super::{
    Cached, Fetched, Limits, SourceError, SourceFile, Sources, archive, parse_files, read_secret,
    redact, secret_text,
};
use crate::{
    api::{GitReference, GitSource},
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

pub fn validate(g: &GitSource) -> Result<(), String> {
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
    archive::directory_prefix(g.path.as_deref())?;
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
        files: Vec<SourceFile>,
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
) -> Result<Fetched, SourceError> {
    validate(g).map_err(SourceError::Invalid)?;
    let prefix = archive::directory_prefix(g.path.as_deref()).map_err(SourceError::Invalid)?;
    let (secret_id, creds) = match &g.secret_ref {
        None => (String::new(), Creds::default()),
        Some(r) => {
            let (id, data) = read_secret(client, parent, r).await?;
            (id, creds_from(&data))
        }
    };
    let name = ref_name(&g.reference);
    let desc = format!("git {}@{name}", redact(&g.url));
    let identity = format!("git {} {name} path={prefix} secret={secret_id}", g.url);
    let revision_of = |commit: &str| match &g.reference.commit {
        Some(_) => format!("git:sha1:{commit}"),
        None => format!("git:{name}@sha1:{commit}"),
    };
    let cached = s.cache.get(&identity);
    if let (Some(commit), Some(c)) = (&g.reference.commit, &cached)
        && c.revision == revision_of(commit)
    {
        return Ok(Fetched {
            manifests: c.manifests.clone(),
            revision: c.revision.clone(),
            kind: "git",
            downloaded: false,
        });
    }
    let cached_commit = cached
        .as_ref()
        .and_then(|c| c.revision.rsplit_once("sha1:").map(|(_, c)| c.to_string()));
    let interrupt = Arc::new(AtomicBool::new(false));
    let _guard = InterruptOnDrop(interrupt.clone());
    let work = s.work_dir().to_path_buf();
    let url = g.url.clone();
    let reference = g.reference.clone();
    let limits = s.limits.clone();
    let pfx = prefix.clone();
    let outcome = tokio::task::spawn_blocking(move || {
        fetch_blocking(
            &work,
            &url,
            &reference,
            &creds,
            cached_commit.as_deref(),
            &pfx,
            &limits,
            &interrupt,
        )
    })
    .await
    .map_err(|e| SourceError::Failed(format!("git fetch task: {e}")))?
    .map_err(|e| SourceError::Failed(redact_text(&e, &g.url)))?;
    match (outcome, cached) {
        (Outcome::Unchanged, Some(c)) => Ok(Fetched {
            manifests: c.manifests,
            revision: c.revision,
            kind: "git",
            downloaded: false,
        }),
        (Outcome::Unchanged, None) => Err(SourceError::Failed(
            "internal: unchanged without a cached revision".into(),
        )),
        (Outcome::Fetched { commit, files }, _) => {
            let manifests = Arc::new(parse_files(&desc, &files)?);
            let revision = revision_of(&commit);
            s.cache.put(
                &identity,
                Cached {
                    revision: revision.clone(),
                    manifests: manifests.clone(),
                    etag: None,
                    last_modified: None,
                },
            );
            Ok(Fetched {
                manifests,
                revision,
                kind: "git",
                downloaded: true,
            })
        }
    }
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

#[allow(clippy::too_many_arguments)]
fn fetch_blocking(
    work_dir: &Path,
    url: &str,
    reference: &GitReference,
    creds: &Creds,
    cached_commit: Option<&str>,
    prefix: &str,
    limits: &Limits,
    interrupt: &AtomicBool,
) -> Result<Outcome, String> {
    use gix::remote::Direction;

    std::fs::create_dir_all(work_dir)
        .map_err(|e| format!("creating the scratch directory {}: {e}", work_dir.display()))?;
    let scratch = tempfile::Builder::new()
        .prefix("git-")
        .tempdir_in(work_dir)
        .map_err(|e| {
            format!(
                "creating a scratch directory in {}: {e}",
                work_dir.display()
            )
        })?;
    let repo_dir = scratch.path().join("repo.git");
    gix::init_bare(&repo_dir)
        .map_err(|e| format!("initialising a scratch repository: {}", chain(&e)))?;
    if scheme_of(url)? == "ssh" {
        let mut cmd = String::from("ssh -o BatchMode=yes -o IdentitiesOnly=yes");
        if let Some(id) = &creds.identity {
            let p = scratch.path().join("identity");
            write_private(&p, id)
                .map_err(|e| format!("writing the ssh identity: {}", chain(&e)))?;
            cmd.push_str(&format!(" -i {}", shell_quote(&p)));
        }
        match &creds.known_hosts {
            Some(kh) => {
                let p = scratch.path().join("known_hosts");
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
        let config = repo_dir.join("config");
        let mut text = std::fs::read_to_string(&config)
            .map_err(|e| format!("reading the scratch repository's config: {}", chain(&e)))?;
        text.push_str(&format!(
            "[core]\n\tsshCommand = \"{}\"\n",
            cmd.replace('\\', "\\\\").replace('"', "\\\"")
        ));
        std::fs::write(&config, text)
            .map_err(|e| format!("writing the scratch repository's config: {}", chain(&e)))?;
    }
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
        .map_err(|e| format!("connecting: {}", chain(&e)))?;
    let (user, pass) = (creds.username.clone(), creds.password.clone());
    let connection = connection.with_credentials(move |action| match action {
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
    });
    let connection = match &creds.ca {
        Some(pem) => {
            let certs = reqwest::Certificate::from_pem_bundle(pem)
                .map_err(|e| format!("ca.crt is not a PEM certificate bundle: {}", chain(&e)))?;
            let backend = gix::protocol::transport::client::blocking_io::http::reqwest::Options {
                configure_client: Some(Box::new(move |b| Ok(b.tls_certs_merge(certs.clone())))),
                configure_request: None,
            };
            let opts = gix::protocol::transport::client::blocking_io::http::Options {
                backend: Some(Arc::new(std::sync::Mutex::new(backend))),
                ..Default::default()
            };
            connection.with_transport_options(Box::new(opts))
        }
        None => connection,
    };
    let prepare = connection
        .prepare_fetch(gix::progress::Discard, Default::default())
        .map_err(|e| format!("listing refs: {}", chain(&e)))?;
    let wanted = prepare
        .ref_map()
        .mappings
        .iter()
        .find_map(|m| match &m.remote {
            gix::protocol::fetch::refmap::Source::ObjectId(id) => Some(id.to_owned()),
            gix::protocol::fetch::refmap::Source::Ref(r) => {
                let (_, target, peeled) = r.unpack();
                peeled.or(target).map(|o| o.to_owned())
            }
        });
    let Some(wanted) = wanted else {
        return Err(format!(
            "the repository has no {} {:?}",
            if reference.branch.is_some() {
                "branch"
            } else {
                "tag"
            },
            ref_name(reference)
        ));
    };
    if reference.commit.is_none() && cached_commit == Some(wanted.to_string().as_str()) {
        return Ok(Outcome::Unchanged);
    }
    prepare
        .with_shallow(gix::remote::fetch::Shallow::DepthAtRemote(
            std::num::NonZeroU32::MIN,
        ))
        .receive(gix::progress::Discard, interrupt)
        .map_err(|e| format!("fetching {}: {}", ref_name(reference), chain(&e)))?;
    let commit = repo
        .find_object(wanted)
        .map_err(|e| format!("the fetched object {wanted} is missing: {}", chain(&e)))?
        .peel_to_commit()
        .map_err(|e| format!("{wanted} is not a commit: {}", chain(&e)))?;
    let commit_id = commit.id.to_string();
    let tree = commit
        .tree()
        .map_err(|e| format!("reading the tree of {commit_id}: {}", chain(&e)))?;
    let entries = tree
        .traverse()
        .breadthfirst
        .files()
        .map_err(|e| format!("reading the tree of {commit_id}: {}", chain(&e)))?;
    let mut files = Vec::new();
    let mut total = 0u64;
    for e in entries {
        let path = String::from_utf8_lossy(&e.filepath).into_owned();
        if !path.starts_with(prefix) || !archive::is_manifest_file(&path) {
            continue;
        }
        if e.mode.is_link() {
            return Err(format!(
                "{path} is a symbolic link; links are not followed, declare the manifest as a file"
            ));
        }
        if !e.mode.is_blob() {
            continue;
        }
        if files.len() >= limits.max_entries {
            return Err(format!(
                "more than {} manifest files under the path (the limit)",
                limits.max_entries
            ));
        }
        let blob = repo
            .find_object(e.oid)
            .map_err(|err| format!("reading {path}: {}", chain(&err)))?;
        total = total.saturating_add(blob.data.len() as u64);
        if total > limits.max_unpacked {
            return Err(format!(
                "the manifests under the path exceed {} bytes (the limit)",
                limits.max_unpacked
            ));
        }
        let text = String::from_utf8(blob.data.clone())
            .map_err(|_| format!("{path} is not UTF-8 text; manifests must be UTF-8"))?;
        files.push(SourceFile { path, text });
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    // The scratch directory goes when `scratch` drops (after `repo`, declared later).
    Ok(Outcome::Fetched {
        commit: commit_id,
        files,
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
