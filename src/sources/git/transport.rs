//! The transport of a Git fetch: the secretRef's credentials ([`Creds`]), given only to the
//! source URL's own origin; ssh through the `ssh` program with the key files written to the
//! scratch directory (mode 0600) and removed as soon as the transfer ends; https/http options
//! under the egress policy; and the pack received within the download limit ([`PackCap`]).

use std::{
    collections::BTreeMap,
    path::Path,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
};

use super::{chain, origin_of, ref_name};
use crate::{
    api::GitReference,
    sources::{Limits, egress, secret_text},
};

/// Credentials for the transport.
#[derive(Default, Clone)]
pub(super) struct Creds {
    username: Option<String>,
    password: Option<String>,
    ca: Option<Vec<u8>>,
    identity: Option<Vec<u8>>,
    known_hosts: Option<Vec<u8>>,
}

pub(super) fn creds_from(data: &BTreeMap<String, Vec<u8>>) -> Creds {
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

/// Removes files (the ssh keys) when dropped, on every way out of the fetch; the scratch
/// directory around them goes too when its `TempDir` drops.
pub(super) struct RemoveOnDrop(pub(super) Vec<std::path::PathBuf>);
impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Writes the secretRef's `identity` and `known_hosts` (required) into `scratch` (mode 0600,
/// recorded in `keys` for removal) and returns the `[core]` section whose `sshCommand` uses
/// them with [`SSH_OPTIONS`].
pub(super) fn ssh_config(
    scratch: &Path,
    creds: &Creds,
    keys: &mut RemoveOnDrop,
) -> Result<String, String> {
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
pub(super) fn credentials_helper(
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
pub(super) fn http_options(
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
            // gix's own option type: a std Mutex that gix locks, not one of ours.
            #[expect(
                clippy::disallowed_types,
                reason = "gix's http Options take a std Mutex"
            )]
            backend: Some(Arc::new(std::sync::Mutex::new(backend))),
            ..Default::default()
        },
    )
}

/// Receives the pack (depth 1), counted against the download limit and interrupted beyond
/// it. The ssh key files in `keys` are removed as soon as the transfer ends, whatever its
/// outcome.
pub(super) fn receive_pack<T>(
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
