//! The operator's egress policy for sources (http, git over http(s), oci and an OCI token
//! service): which hosts a source may name and which addresses the operator may connect to
//! on a tenant's behalf.
//!
//! - **Addresses.** Every address a connection would use is checked: the addresses a name
//!   resolves to (by [`Resolver`], which drops refused ones and fails when none is left, so a
//!   refused address is never connected to), and a literal address in a URL (checked before
//!   the request, on every redirect hop, and by [`PolicyLayer`] on every connection, which is
//!   what covers gitoxide's redirects). Always refused: link-local and cloud metadata
//!   addresses ([`ALWAYS_DENIED`]) and the unspecified addresses (`0.0.0.0/8`, `::`, which
//!   reach the local host). `--source-deny-cidrs` adds ranges (e.g. the cluster's service and
//!   pod CIDRs, or `127.0.0.0/8,::1/128` to refuse loopback). An IPv6 address that embeds an
//!   IPv4 one (`::ffff:169.254.169.254`, NAT64 `64:ff9b::/96`) is checked as that IPv4
//!   address too.
//! - **Hosts.** With `--source-allowed-hosts`, only hosts matching one of its patterns
//!   ([`HostPattern`]: `registry.local`, `registry.local:5000`, `*.example.com`, an address)
//!   are contacted, on the first request and on every redirect.
//! - **Plain http.** `--source-insecure=false` refuses `http://` URLs (and redirects to them)
//!   and OCI `insecure: true` cluster-wide.
//!
//! The checks themselves ([`Policy::check_ip`], [`Policy::check_host`],
//! [`Policy::check_url`], [`HostPattern`]) are pure functions; [`Resolver`], [`PolicyLayer`]
//! and [`Policy::redirect_policy`] plug them into reqwest (the clients of http and oci
//! sources, and gitoxide's https transport).

use std::{
    fmt,
    future::Future,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
};

use ipnet::IpNet;

/// The text every refusal of the policy contains.
pub const NOT_ALLOWED: &str = "not allowed by the operator's source policy";

/// Ranges refused whatever the flags say: link-local (where cloud metadata services live:
/// 169.254.169.254 on AWS, GCP, Azure, OpenStack; fe80::/10), AWS's IPv6 metadata address,
/// Alibaba Cloud's metadata address, and the unspecified addresses (connecting to them
/// reaches the local host).
pub const ALWAYS_DENIED: &[&str] = &[
    "169.254.0.0/16",
    "fe80::/10",
    "fd00:ec2::254/128",
    "100.100.100.200/32",
    "168.63.129.16/32",
    "0.0.0.0/8",
    "::/128",
];

/// Ranges refused by default, unless exempted by `--source-allow-cidrs` or named as an
/// address in `--source-allowed-hosts`: loopback (the operator's own pod: its metrics and
/// health endpoints, any sidecar).
pub const DEFAULT_DENIED: &[&str] = &["127.0.0.0/8", "::1/128"];

/// Why an address is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Why {
    /// One of [`ALWAYS_DENIED`].
    Always(IpNet),
    /// One of [`DEFAULT_DENIED`], not exempted.
    Default(IpNet),
    /// A range of `--source-deny-cidrs`.
    Flag(IpNet),
}

/// A flag, annotation or URL the policy cannot read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// A host pattern that does not parse: the text and what is wrong with it.
    #[error("host pattern {raw:?}: {why}")]
    HostPattern { raw: String, why: &'static str },
    /// An entry that is neither a CIDR range nor an address.
    #[error("{0:?} is not a CIDR range (e.g. 10.96.0.0/12) or an IP address")]
    Cidr(String),
    /// An error of the flag `flag`.
    #[error("{flag}: {error}")]
    Flag {
        flag: &'static str,
        error: Box<PolicyError>,
    },
    /// A URL of a scheme without a known default port, and none given.
    #[error("{0}:// URL without a port")]
    NoPort(String),
    /// A URL without a host.
    #[error("the URL has no host")]
    NoHost,
}

/// A refusal by the policy (an error of the resolver and of the connector layer, so that it
/// reaches the source's message through reqwest's error chain).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused(pub String);

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

/// A host pattern of `--source-allowed-hosts` or of a Secret's `applyset.dev/allowed-hosts`:
/// `host`, `*.domain` (any name under `domain`, not `domain` itself) or an IP address,
/// optionally with `:port` (`[v6]:port` for IPv6); without a port any port matches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostPattern {
    host: PatternHost,
    port: Option<u16>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum PatternHost {
    /// A lowercase DNS name without trailing dot.
    Name(String),
    /// `*.suffix`: the lowercase suffix, without the leading `*.`.
    Wildcard(String),
    Ip(IpAddr),
}

/// A host as a connection names it: a lowercase DNS name (no trailing dot) or an address, and
/// the port (explicit or the scheme's default).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Destination {
    pub host: DestHost,
    pub port: u16,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DestHost {
    Name(String),
    Ip(IpAddr),
}

impl fmt::Display for Destination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            DestHost::Name(n) => write!(f, "{n}:{}", self.port),
            DestHost::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]:{}", self.port),
            DestHost::Ip(ip) => write!(f, "{ip}:{}", self.port),
        }
    }
}

impl Destination {
    /// The destination of `url` (its host and port, explicit or the scheme's default).
    pub fn of_url(url: &url::Url) -> Result<Destination, PolicyError> {
        let port = url
            .port_or_known_default()
            .ok_or_else(|| PolicyError::NoPort(url.scheme().to_string()))?;
        let host = match url.host() {
            Some(url::Host::Domain(d)) => DestHost::of_name(d),
            Some(url::Host::Ipv4(ip)) => DestHost::Ip(IpAddr::V4(ip)),
            Some(url::Host::Ipv6(ip)) => DestHost::Ip(IpAddr::V6(ip)),
            None => return Err(PolicyError::NoHost),
        };
        Ok(Destination { host, port })
    }

    /// The destination of `host` (a name, an IPv4 address or a bracketed or bare IPv6
    /// address) at `port`.
    pub fn of_host(host: &str, port: u16) -> Destination {
        let h = host.trim_start_matches('[').trim_end_matches(']');
        match h.parse::<IpAddr>() {
            Ok(ip) => Destination {
                host: DestHost::Ip(ip),
                port,
            },
            Err(_) => Destination {
                host: DestHost::of_name(host),
                port,
            },
        }
    }
}

impl DestHost {
    fn of_name(name: &str) -> DestHost {
        // `localhost.` and `localhost` are the same host.
        DestHost::Name(name.trim_end_matches('.').to_ascii_lowercase())
    }
}

impl HostPattern {
    /// Parses one pattern; the error says what is wrong with it.
    pub fn parse(raw: &str) -> Result<HostPattern, PolicyError> {
        let s = raw.trim().to_ascii_lowercase();
        let bad = |why: &'static str| {
            Err(PolicyError::HostPattern {
                raw: raw.to_string(),
                why,
            })
        };
        if s.is_empty() {
            return bad("empty");
        }
        if s.contains("://") || s.contains(['/', '@', '?', '#', ' ']) {
            return bad("give a host or host:port, not a URL");
        }
        // Split off the port: `[v6]:port`, `[v6]`, a bare IPv6 address, or `host[:port]`.
        let (host, port) = if let Some(rest) = s.strip_prefix('[') {
            let Some((h, after)) = rest.split_once(']') else {
                return bad("unclosed [");
            };
            match after {
                "" => (h.to_string(), None),
                p => match p.strip_prefix(':') {
                    Some(p) => (h.to_string(), Some(p.to_string())),
                    None => return bad("unexpected text after ]"),
                },
            }
        } else if s.parse::<Ipv6Addr>().is_ok() {
            (s.clone(), None)
        } else {
            match s.rsplit_once(':') {
                Some((h, p)) => (h.to_string(), Some(p.to_string())),
                None => (s.clone(), None),
            }
        };
        let port = match port {
            None => None,
            Some(p) => match p.parse::<u16>() {
                Ok(p) if p > 0 => Some(p),
                _ => return bad("the port is not a number from 1 to 65535"),
            },
        };
        let host = if let Ok(ip) = host.parse::<IpAddr>() {
            PatternHost::Ip(ip)
        } else if let Some(suffix) = host.strip_prefix("*.") {
            if !valid_name(suffix) {
                return bad("*. must be followed by a DNS name");
            }
            PatternHost::Wildcard(suffix.trim_end_matches('.').to_string())
        } else if host.contains(':') {
            return bad("an IPv6 address with a port must be written [address]:port");
        } else if host.contains('*') {
            return bad("* is only allowed as the first label (*.example.com)");
        } else if valid_name(&host) {
            PatternHost::Name(host.trim_end_matches('.').to_string())
        } else {
            return bad("not a DNS name or IP address");
        };
        Ok(HostPattern { host, port })
    }

    /// Parses a comma-separated list of patterns (empty entries are skipped).
    pub fn parse_list<S: AsRef<str>>(items: &[S]) -> Result<Vec<HostPattern>, PolicyError> {
        items
            .iter()
            .flat_map(|s| s.as_ref().split(','))
            .filter(|s| !s.trim().is_empty())
            .map(HostPattern::parse)
            .collect()
    }

    /// Whether `d` matches this pattern.
    pub fn matches(&self, d: &Destination) -> bool {
        if self.port.is_some_and(|p| p != d.port) {
            return false;
        }
        match (&self.host, &d.host) {
            (PatternHost::Name(p), DestHost::Name(n)) => p == n,
            (PatternHost::Wildcard(suffix), DestHost::Name(n)) => n
                .strip_suffix(suffix.as_str())
                .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
            (PatternHost::Ip(p), DestHost::Ip(ip)) => canonical(*p) == canonical(*ip),
            _ => false,
        }
    }
}

/// Whether `s` is a DNS name (letters, digits, `-`, `_` in labels separated by dots; a
/// trailing dot is allowed).
fn valid_name(s: &str) -> bool {
    let s = s.strip_suffix('.').unwrap_or(s);
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// Parses CIDR ranges (`10.96.0.0/12`, `fd00::/8`) or single addresses (as /32 or /128),
/// comma-separated or one per item; the error names the entry.
pub fn parse_cidrs<S: AsRef<str>>(items: &[S]) -> Result<Vec<IpNet>, PolicyError> {
    items
        .iter()
        .flat_map(|s| s.as_ref().split(','))
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<IpNet>()
                .map(|n| n.trunc())
                .or_else(|_| s.parse::<IpAddr>().map(IpNet::from))
                .map_err(|_| PolicyError::Cidr(s.to_string()))
        })
        .collect()
}

/// The IPv4 address an IPv6 address stands for, if it embeds one: IPv4-mapped
/// (`::ffff:a.b.c.d`), IPv4-compatible (`::a.b.c.d`, deprecated but still routed by some
/// stacks) and NAT64 (`64:ff9b::a.b.c.d`); else the address itself.
pub fn canonical(ip: IpAddr) -> IpAddr {
    let IpAddr::V6(v6) = ip else {
        return ip;
    };
    if let Some(v4) = v6.to_ipv4_mapped() {
        return IpAddr::V4(v4);
    }
    let s = v6.segments();
    let embedded = || {
        let [a, b] = s[6].to_be_bytes();
        let [c, d] = s[7].to_be_bytes();
        IpAddr::V4(Ipv4Addr::new(a, b, c, d))
    };
    // NAT64 well-known prefix 64:ff9b::/96.
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return embedded();
    }
    // IPv4-compatible ::a.b.c.d, but not :: and ::1 themselves.
    if s[..6] == [0; 6] && (s[6] != 0 || s[7] > 1) {
        return embedded();
    }
    ip
}

/// The egress policy of sources (see the module documentation).
#[derive(Clone, Debug)]
pub struct Policy {
    always: Vec<IpNet>,
    /// [`DEFAULT_DENIED`].
    default_denied: Vec<IpNet>,
    /// `--source-allow-cidrs`: exempt from [`DEFAULT_DENIED`].
    exempt: Vec<IpNet>,
    denied: Vec<IpNet>,
    /// Empty: any host.
    allowed_hosts: Vec<HostPattern>,
    /// Whether plain http (and OCI `insecure: true`) may be used.
    insecure: bool,
}

impl Default for Policy {
    /// The default policy: [`ALWAYS_DENIED`] and [`DEFAULT_DENIED`] refused, any other host,
    /// plain http allowed.
    fn default() -> Self {
        Policy {
            always: parse_cidrs(ALWAYS_DENIED).unwrap_or_default(),
            default_denied: parse_cidrs(DEFAULT_DENIED).unwrap_or_default(),
            exempt: Vec::new(),
            denied: Vec::new(),
            allowed_hosts: Vec::new(),
            insecure: true,
        }
    }
}

impl Policy {
    /// The policy of a command a user runs on their own machine (the kubectl plugin): only
    /// [`ALWAYS_DENIED`] is refused. [`DEFAULT_DENIED`] (loopback) guards the operator's own
    /// pod; on the user's machine, loopback is the user's own (a repository served locally,
    /// say).
    pub fn local() -> Self {
        Policy {
            default_denied: Vec::new(),
            ..Policy::default()
        }
    }

    /// The policy of the flags `--source-deny-cidrs`, `--source-allowed-hosts` and
    /// `--source-insecure`; an error names the flag and the bad entry.
    pub fn new<S: AsRef<str>>(
        deny_cidrs: &[S],
        allowed_hosts: &[S],
        insecure: bool,
    ) -> Result<Policy, PolicyError> {
        let flag = |flag| {
            move |e| PolicyError::Flag {
                flag,
                error: Box::new(e),
            }
        };
        let denied = parse_cidrs(deny_cidrs).map_err(flag("--source-deny-cidrs"))?;
        let allowed_hosts =
            HostPattern::parse_list(allowed_hosts).map_err(flag("--source-allowed-hosts"))?;
        Ok(Policy {
            denied,
            allowed_hosts,
            insecure,
            ..Policy::default()
        })
    }

    /// Exempts `ranges` (`--source-allow-cidrs`) from the default refusals
    /// ([`DEFAULT_DENIED`]); it restricts nothing else, and never exempts what is always
    /// refused or what `--source-deny-cidrs` refuses.
    pub fn with_allowed_cidrs<S: AsRef<str>>(
        mut self,
        ranges: &[S],
    ) -> Result<Policy, PolicyError> {
        self.exempt = parse_cidrs(ranges).map_err(|e| PolicyError::Flag {
            flag: "--source-allow-cidrs",
            error: Box::new(e),
        })?;
        Ok(self)
    }

    /// Whether plain http (and OCI `insecure: true`) may be used.
    pub fn insecure_allowed(&self) -> bool {
        self.insecure
    }

    fn why_denied(&self, ip: IpAddr) -> Option<Why> {
        let candidates = [ip, canonical(ip)];
        for c in candidates {
            if let Some(n) = self.always.iter().find(|n| n.contains(&c)) {
                return Some(Why::Always(*n));
            }
            if let Some(n) = self.denied.iter().find(|n| n.contains(&c)) {
                return Some(Why::Flag(*n));
            }
        }
        let by_default = candidates
            .iter()
            .find_map(|c| self.default_denied.iter().find(|n| n.contains(c)))?;
        (!candidates.iter().any(|c| self.is_exempt(*c))).then_some(Why::Default(*by_default))
    }

    /// Whether `ip` is exempt from the default refusals: in `--source-allow-cidrs`, or
    /// named as an address in `--source-allowed-hosts`.
    fn is_exempt(&self, ip: IpAddr) -> bool {
        self.exempt.iter().any(|n| n.contains(&ip))
            || self
                .allowed_hosts
                .iter()
                .any(|p| matches!(p.host, PatternHost::Ip(a) if canonical(a) == canonical(ip)))
    }

    /// Refuses an address in a denied range; `of` names the host it was resolved from, if
    /// any, for the message.
    pub fn check_ip(&self, ip: IpAddr, of: Option<&str>) -> Result<(), Refused> {
        let Some(why) = self.why_denied(ip) else {
            return Ok(());
        };
        let of = of
            .filter(|h| h.parse::<IpAddr>().is_err())
            .map(|h| format!(" (of host {h})"))
            .unwrap_or_default();
        let why = match why {
            Why::Always(n) => format!(
                "{n} is always refused: link-local, cloud metadata and unspecified addresses"
            ),
            Why::Flag(n) => format!("{n} is in --source-deny-cidrs"),
            Why::Default(n) => format!(
                "{n} is refused by default (loopback: the operator's own pod); exempt it with --source-allow-cidrs or name the address in --source-allowed-hosts"
            ),
        };
        Err(Refused(format!("address {ip}{of} {NOT_ALLOWED}: {why}")))
    }

    /// Refuses a destination whose host is not allowed (`--source-allowed-hosts`) or whose
    /// literal address is denied.
    pub fn check_host(&self, d: &Destination) -> Result<(), Refused> {
        if !self.allowed_hosts.is_empty() && !self.allowed_hosts.iter().any(|p| p.matches(d)) {
            return Err(Refused(format!(
                "host {d} {NOT_ALLOWED}: it matches no pattern of --source-allowed-hosts"
            )));
        }
        if let DestHost::Ip(ip) = d.host {
            self.check_ip(ip, None)?;
        }
        Ok(())
    }

    /// Refuses plain `http://` when `--source-insecure=false`.
    pub fn check_scheme(&self, scheme: &str) -> Result<(), Refused> {
        if scheme.eq_ignore_ascii_case("http") && !self.insecure {
            return Err(Refused(format!(
                "plain http:// is {NOT_ALLOWED}: --source-insecure=false; use https://"
            )));
        }
        Ok(())
    }

    /// Refuses OCI `insecure: true` when `--source-insecure=false`.
    pub fn check_insecure_flag(&self, insecure: bool) -> Result<(), Refused> {
        if insecure && !self.insecure {
            return Err(Refused(format!(
                "insecure: true is {NOT_ALLOWED}: --source-insecure=false; serve the registry over https"
            )));
        }
        Ok(())
    }

    /// All checks of a URL before any connection: the scheme, the host, a literal address.
    pub fn check_url(&self, url: &url::Url) -> Result<(), Refused> {
        self.check_scheme(url.scheme())?;
        let d = Destination::of_url(url).map_err(|e| Refused(e.to_string()))?;
        self.check_host(&d)
    }

    /// [`Policy::check_url`] of a URL given as text (an unparsable URL is refused).
    pub fn check_url_str(&self, url: &str) -> Result<(), Refused> {
        let u = url::Url::parse(url).map_err(|e| Refused(format!("not a URL: {e}")))?;
        self.check_url(&u)
    }

    /// A reqwest redirect policy: at most `max` hops, each hop's URL checked with
    /// [`Policy::check_url`] before it is followed.
    pub fn redirect_policy(self: &Arc<Self>, max: usize) -> reqwest::redirect::Policy {
        let policy = self.clone();
        reqwest::redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() > max {
                return attempt.error(format!("more than {max} redirects"));
            }
            match policy.check_url(attempt.url()) {
                Ok(()) => attempt.follow(),
                Err(e) => {
                    let to = super::redact_url(attempt.url().as_str());
                    attempt.error(Refused(format!("redirect to {to}: {e}")))
                }
            }
        })
    }
}

/// A reqwest resolver that resolves with the system's resolver and keeps only the addresses
/// the policy allows; when none is left, it fails with the policy's message (nothing is
/// connected to).
pub struct Resolver(pub Arc<Policy>);

impl reqwest::dns::Resolve for Resolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = self.0.clone();
        let host = name.as_str().to_string();
        Box::pin(async move {
            let addrs = tokio::net::lookup_host((host.as_str(), 0)).await?;
            let (allowed, refused) = filter_addrs(&policy, &host, addrs);
            if allowed.is_empty() {
                let e =
                    refused.unwrap_or_else(|| Refused(format!("{host} resolved to no address")));
                return Err(Box::new(e) as Box<dyn std::error::Error + Send + Sync>);
            }
            Ok(Box::new(allowed.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// The addresses of `addrs` the policy allows, and the first refusal.
fn filter_addrs(
    policy: &Policy,
    host: &str,
    addrs: impl Iterator<Item = std::net::SocketAddr>,
) -> (Vec<std::net::SocketAddr>, Option<Refused>) {
    let mut allowed = Vec::new();
    let mut refused = None;
    for a in addrs {
        match policy.check_ip(a.ip(), Some(host)) {
            Ok(()) => allowed.push(a),
            Err(e) => {
                refused.get_or_insert(e);
            }
        }
    }
    (allowed, refused)
}

/// Resolves `host` (for transports that connect by themselves, e.g. the `ssh` program) and
/// refuses it when an address it resolves to is denied. Best effort: the program resolves
/// again when it connects.
pub async fn check_resolved(policy: &Policy, host: &str, port: u16) -> Result<(), Refused> {
    if let Ok(ip) = host.trim_start_matches('[').trim_end_matches(']').parse() {
        return policy.check_ip(ip, None);
    }
    let addrs = tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| Refused(format!("resolving {host}: {e}")))?;
    match filter_addrs(policy, host, addrs) {
        (_, Some(refused)) => Err(refused),
        _ => Ok(()),
    }
}

/// A tower layer around reqwest's connector that checks the destination of every
/// connection (first request and every redirect hop, also for gitoxide, whose own redirect
/// policy replaces any other) with [`Policy::check_url`] before connecting. Names are
/// resolved by [`Resolver`]; this layer is what catches literal addresses.
///
/// reqwest hands the connector an opaque request type whose `Debug` output is
/// `Unnameable(<uri>)`; the URI is read from it. Anything that cannot be read is refused
/// (fail closed).
#[derive(Clone)]
pub struct PolicyLayer(pub Arc<Policy>);

impl<S> tower::Layer<S> for PolicyLayer {
    type Service = PolicyService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        PolicyService {
            inner,
            policy: self.0.clone(),
        }
    }
}

#[derive(Clone)]
pub struct PolicyService<S> {
    inner: S,
    policy: Arc<Policy>,
}

/// The URI in the `Debug` text of reqwest's connector request (`Unnameable(<uri>)`).
fn uri_of_debug(text: &str) -> Option<url::Url> {
    let inner = text.strip_prefix("Unnameable(")?.strip_suffix(')')?;
    url::Url::parse(inner).ok()
}

impl<S, R> tower::Service<R> for PolicyService<S>
where
    S: tower::Service<R>,
    S::Response: Send + 'static,
    S::Error: From<Box<dyn std::error::Error + Send + Sync>> + Send + 'static,
    S::Future: Send + 'static,
    R: fmt::Debug,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: R) -> Self::Future {
        let checked = match uri_of_debug(&format!("{req:?}")) {
            Some(u) => self.policy.check_url(&u),
            None => Err(Refused(format!(
                "cannot read the destination of a connection; refused ({NOT_ALLOWED} check)"
            ))),
        };
        match checked {
            Ok(()) => Box::pin(self.inner.call(req)),
            Err(e) => {
                let e: Box<dyn std::error::Error + Send + Sync> = Box::new(e);
                Box::pin(std::future::ready(Err(S::Error::from(e))))
            }
        }
    }
}

/// The destination of `raw_url`, refused (`Failed`, nothing sent) when the egress policy
/// does not allow its scheme, host or literal address.
pub fn checked_destination(
    policy: &Policy,
    raw_url: &str,
) -> Result<Destination, super::SourceError> {
    use super::SourceError;
    let u = url::Url::parse(raw_url)
        .map_err(|e| SourceError::Invalid(format!("url is not a valid URL: {e}")))?;
    policy.check_url(&u).map_err(|e| SourceError::Failed(e.0))?;
    Destination::of_url(&u).map_err(|e| SourceError::Invalid(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    /// A policy of these flags, loopback exempt (as for a test's local servers).
    fn policy(deny: &[&str], hosts: &[&str]) -> Policy {
        Policy::new(deny, hosts, true)
            .and_then(|p| p.with_allowed_cidrs(&["127.0.0.0/8", "::1"]))
            .expect("policy")
    }

    #[test]
    fn a_local_command_may_reach_loopback_but_never_metadata() {
        let p = Policy::local();
        for allowed in ["127.0.0.1", "::1", "10.0.0.1", "192.168.1.1"] {
            assert!(p.check_ip(ip(allowed), None).is_ok(), "{allowed}");
        }
        for denied in ["169.254.169.254", "fe80::1", "168.63.129.16", "0.0.0.0"] {
            assert!(p.check_ip(ip(denied), None).is_err(), "{denied}");
        }
        assert!(
            Policy::default().check_ip(ip("127.0.0.1"), None).is_err(),
            "the operator's default still refuses loopback"
        );
    }

    #[test]
    fn default_denies_link_local_metadata_and_loopback() {
        let p = Policy::default();
        for denied in [
            "169.254.169.254",
            "169.254.0.1",
            "169.254.255.255",
            "fe80::1",
            "febf:ffff::1",
            "fd00:ec2::254",
            "100.100.100.200",
            "168.63.129.16",
            "0.0.0.0",
            "0.1.2.3",
            "::",
            // IPv6 forms of IPv4 metadata addresses.
            "::ffff:169.254.169.254",
            "::ffff:a9fe:a9fe",
            "::169.254.169.254",
            "64:ff9b::169.254.169.254",
            "::ffff:100.100.100.200",
            "::ffff:168.63.129.16",
        ] {
            let e = p.check_ip(ip(denied), None).expect_err(denied);
            assert!(e.0.starts_with(&format!("address {} ", ip(denied))), "{e}");
            assert!(e.0.contains(NOT_ALLOWED), "{e}");
            assert!(e.0.contains("always refused"), "{e}");
        }
        for denied in [
            "127.0.0.1",
            "127.0.0.2",
            "127.255.255.254",
            "::1",
            "::ffff:127.0.0.1",
        ] {
            let e = p.check_ip(ip(denied), None).expect_err(denied);
            assert!(e.0.contains("refused by default"), "{e}");
            assert!(e.0.contains("--source-allow-cidrs"), "{e}");
        }
        for allowed in [
            "10.0.0.1",
            "192.168.1.1",
            "172.16.0.1",
            "8.8.8.8",
            "169.253.255.255",
            "169.255.0.0",
            "100.100.100.199",
            "100.100.100.201",
            "168.63.129.15",
            "168.63.129.17",
            "128.0.0.1",
            "126.255.255.255",
            "fec0::1",
            "fd00:ec2::253",
            "fd00:ec2::255",
            "2001:db8::1",
            "::ffff:10.0.0.1",
        ] {
            assert!(p.check_ip(ip(allowed), None).is_ok(), "{allowed}");
        }
    }

    #[test]
    fn the_default_refusals_are_exempted_by_allow_cidrs_and_allowed_addresses_only() {
        // --source-allow-cidrs: loopback exempt; other hosts not restricted; what is always
        // refused, and what --source-deny-cidrs refuses, stay refused.
        let p = Policy::new(&["127.0.0.2/32"], &[], true)
            .and_then(|p| p.with_allowed_cidrs(&["127.0.0.0/8", "169.254.0.0/16", "168.63.129.16"]))
            .expect("valid");
        for allowed in ["127.0.0.1", "::ffff:127.0.0.1", "8.8.8.8"] {
            assert!(p.check_ip(ip(allowed), None).is_ok(), "{allowed}");
        }
        for denied in ["127.0.0.2", "169.254.169.254", "168.63.129.16", "::1"] {
            assert!(p.check_ip(ip(denied), None).is_err(), "{denied}");
        }
        assert!(p.check_url_str("https://example.com/x").is_ok());
        // An address named in --source-allowed-hosts is exempt (with or without a port);
        // a name that resolves to loopback is not.
        let p = Policy::new(
            &[],
            &["127.0.0.1:8443", "[::1]", "localhost", "169.254.169.254"],
            true,
        )
        .expect("valid");
        assert!(p.check_ip(ip("127.0.0.1"), Some("localhost")).is_ok());
        assert!(p.check_ip(ip("::1"), None).is_ok());
        assert!(p.check_ip(ip("127.0.0.3"), Some("localhost")).is_err());
        assert!(
            p.check_ip(ip("169.254.169.254"), None).is_err(),
            "never exempt"
        );
        let e = Policy::default()
            .with_allowed_cidrs(&["10.0.0.0/33"])
            .expect_err("bad range")
            .to_string();
        assert!(e.starts_with("--source-allow-cidrs: "), "{e}");
    }

    #[test]
    fn flag_ranges_are_added_and_apply_to_mapped_addresses() {
        let p = policy(&["127.0.0.2/32", "10.96.0.0/12,fd00:10::/64"], &[]);
        for denied in [
            "127.0.0.2",
            "::ffff:127.0.0.2",
            "10.96.0.1",
            "10.111.255.255",
            "fd00:10::1",
        ] {
            let e = p
                .check_ip(ip(denied), Some("svc.example"))
                .expect_err(denied);
            assert!(e.0.contains(NOT_ALLOWED), "{e}");
            assert!(e.0.contains("--source-deny-cidrs"), "{e}");
            assert!(e.0.contains("(of host svc.example)"), "{e}");
        }
        for allowed in ["127.0.0.1", "10.95.255.255", "10.112.0.0", "fd00:11::1"] {
            assert!(p.check_ip(ip(allowed), None).is_ok(), "{allowed}");
        }
        // The defaults stay.
        assert!(p.check_ip(ip("169.254.169.254"), None).is_err());
    }

    #[test]
    fn cidr_parsing() {
        let nets = parse_cidrs(&[" 10.0.0.0/8 , 1.2.3.4", "", "fd00::/8,::1", "10.1.2.3/16"])
            .expect("parses");
        let shown: Vec<String> = nets.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                "10.0.0.0/8",
                "1.2.3.4/32",
                "fd00::/8",
                "::1/128",
                "10.1.0.0/16"
            ]
        );
        for bad in [
            "10.0.0.0/33",
            "fd00::/129",
            "10.0.0",
            "example.com",
            "10.0.0.0/",
            "/8",
            "10.0.0.0/8/8",
            "*",
        ] {
            let e = parse_cidrs(&[bad]).expect_err(bad).to_string();
            assert!(e.contains("is not a CIDR range"), "{e}");
        }
        let e = Policy::new(&["10.0.0.0/8,nope"], &[], true)
            .expect_err("bad flag")
            .to_string();
        assert!(e.starts_with("--source-deny-cidrs: \"nope\""), "{e}");
        let e = Policy::new(&[], &["https://x"], true)
            .expect_err("bad flag")
            .to_string();
        assert!(e.starts_with("--source-allowed-hosts: "), "{e}");
    }

    fn d(host: &str, port: u16) -> Destination {
        Destination::of_host(host, port)
    }

    #[test]
    fn host_patterns() {
        let p = |s: &str| HostPattern::parse(s).expect(s);
        assert!(p("Registry.Local").matches(&d("registry.local", 443)));
        assert!(p("registry.local").matches(&d("REGISTRY.local.", 5000)));
        assert!(!p("registry.local").matches(&d("x.registry.local", 443)));
        assert!(!p("registry.local").matches(&d("registry.local.evil", 443)));
        assert!(p("registry.local:5000").matches(&d("registry.local", 5000)));
        assert!(!p("registry.local:5000").matches(&d("registry.local", 443)));
        let w = p("*.example.com");
        assert!(w.matches(&d("a.example.com", 443)));
        assert!(w.matches(&d("a.b.example.com", 80)));
        assert!(!w.matches(&d("example.com", 443)));
        assert!(!w.matches(&d("aexample.com", 443)));
        assert!(!w.matches(&d("a.example.com.evil", 443)));
        assert!(!w.matches(&d("127.0.0.1", 443)));
        assert!(p("*.example.com:8443").matches(&d("git.example.com", 8443)));
        assert!(!p("*.example.com:8443").matches(&d("git.example.com", 443)));
        assert!(p("127.0.0.1").matches(&d("127.0.0.1", 1234)));
        assert!(p("127.0.0.1:1234").matches(&d("127.0.0.1", 1234)));
        assert!(!p("127.0.0.1").matches(&d("127.0.0.2", 1234)));
        assert!(!p("127.0.0.1").matches(&d("localhost", 1234)));
        assert!(!p("localhost").matches(&d("127.0.0.1", 1234)));
        assert!(p("::1").matches(&d("[::1]", 80)));
        assert!(p("[::1]:8080").matches(&d("::1", 8080)));
        assert!(!p("[::1]:8080").matches(&d("::1", 8081)));
        // An address pattern matches the IPv4-mapped form of the address.
        assert!(p("127.0.0.1").matches(&d("::ffff:127.0.0.1", 80)));
        for bad in [
            "",
            " ",
            "*",
            "*.",
            "a.*.com",
            "*example.com",
            "https://example.com",
            "example.com/path",
            "user@example.com",
            "example.com:",
            "example.com:0",
            "example.com:65536",
            "example.com:http",
            "[::1",
            "[::1]x",
            "fe80::1:80:x",
            "exa mple.com",
            "a..b",
        ] {
            assert!(HostPattern::parse(bad).is_err(), "{bad:?} should not parse");
        }
        let list = HostPattern::parse_list(&["a.com, *.b.com", "", "c.com:1"]).expect("list");
        assert_eq!(list.len(), 3);
    }

    #[test]
    fn allowed_hosts_and_urls() {
        let p = policy(&["127.0.0.2/32"], &["*.example.com", "localhost:5000"]);
        let url = |s: &str| url::Url::parse(s).expect(s);
        assert!(p.check_url(&url("https://git.example.com/r.git")).is_ok());
        assert!(p.check_url(&url("http://localhost:5000/v2/")).is_ok());
        for (refused, says) in [
            (
                "https://example.com/",
                "matches no pattern of --source-allowed-hosts",
            ),
            ("http://localhost:5001/", "matches no pattern"),
            ("https://169.254.169.254/latest", "matches no pattern"),
        ] {
            let e = p.check_url(&url(refused)).expect_err(refused);
            assert!(e.0.contains(NOT_ALLOWED) && e.0.contains(says), "{e}");
        }
        // Without an allow list, literal addresses are still checked.
        let p = policy(&["127.0.0.2/32"], &[]);
        assert!(p.check_url(&url("http://127.0.0.1:8080/a")).is_ok());
        for refused in [
            "http://127.0.0.2:8080/a",
            "https://[::ffff:127.0.0.2]/a",
            "http://169.254.169.254/latest/meta-data/",
            "http://[fe80::1]/",
            "http://[fd00:ec2::254]/",
            "http://100.100.100.200/",
            "http://0.0.0.0:8080/",
            "http://[::]:8080/",
        ] {
            let e = p.check_url(&url(refused)).expect_err(refused);
            assert!(e.0.starts_with("address "), "{e}");
            assert!(e.0.contains(NOT_ALLOWED), "{e}");
        }
        // The url crate normalises other spellings of addresses before the check.
        for odd in [
            "http://0xa9fea9fe/",
            "http://2852039166/",
            "http://169.254.43518/",
        ] {
            assert!(p.check_url(&url(odd)).is_err(), "{odd}");
        }
    }

    #[test]
    fn insecure_can_be_forbidden() {
        let open = policy(&[], &[]);
        assert!(open.check_scheme("http").is_ok());
        assert!(open.check_insecure_flag(true).is_ok());
        let strict = Policy::new::<&str>(&[], &[], false).expect("policy");
        let e = strict.check_scheme("http").expect_err("http");
        assert!(e.0.contains("--source-insecure=false"), "{e}");
        assert!(strict.check_scheme("https").is_ok());
        assert!(strict.check_insecure_flag(true).is_err());
        assert!(strict.check_insecure_flag(false).is_ok());
        assert!(strict.check_url_str("http://127.0.0.1/x").is_err());
        assert!(strict.check_url_str("https://10.0.0.1/x").is_ok());
    }

    #[test]
    fn embedded_ipv4_addresses() {
        assert_eq!(canonical(ip("::ffff:1.2.3.4")), ip("1.2.3.4"));
        assert_eq!(canonical(ip("64:ff9b::1.2.3.4")), ip("1.2.3.4"));
        assert_eq!(canonical(ip("::1.2.3.4")), ip("1.2.3.4"));
        assert_eq!(canonical(ip("::1")), ip("::1"));
        assert_eq!(canonical(ip("::")), ip("::"));
        assert_eq!(canonical(ip("2001:db8::1.2.3.4")), ip("2001:db8::1.2.3.4"));
        assert_eq!(canonical(ip("1.2.3.4")), ip("1.2.3.4"));
    }

    #[test]
    fn resolved_addresses_are_filtered() {
        let p = policy(&["127.0.0.2/32"], &[]);
        let addrs = ["127.0.0.2:0", "127.0.0.1:0", "[::ffff:169.254.169.254]:0"]
            .map(|a| a.parse::<std::net::SocketAddr>().expect("addr"));
        let (ok, refused) = filter_addrs(&p, "h.example", addrs.into_iter());
        assert_eq!(ok, ["127.0.0.1:0".parse().expect("addr")]);
        let refused = refused.expect("a refusal");
        assert!(
            refused.0.contains("address 127.0.0.2 (of host h.example)"),
            "{refused}"
        );
        let (ok, refused) = filter_addrs(&p, "h", [addrs[0]].into_iter());
        assert!(ok.is_empty() && refused.is_some());
    }

    #[test]
    fn connector_request_uri() {
        // The Debug form of reqwest's connector request.
        let u = uri_of_debug("Unnameable(http://127.0.0.2:8080/)").expect("uri");
        assert_eq!(u.host_str(), Some("127.0.0.2"));
        assert_eq!(u.port(), Some(8080));
        assert!(uri_of_debug("Other(http://x/)").is_none());
        assert!(uri_of_debug("Unnameable(not a uri)").is_none());
    }

    /// A loopback server on `ip` that counts accepted connections and answers every request
    /// with `200 ok`.
    async fn counting_server(
        ip: &str,
    ) -> (std::net::SocketAddr, Arc<std::sync::atomic::AtomicU64>) {
        use std::sync::atomic::Ordering;
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let listener = tokio::net::TcpListener::bind((ip, 0)).await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let accepted = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let count = accepted.clone();
        tokio::spawn(async move {
            while let Ok((mut tcp, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    let _ = tcp.read(&mut buf).await;
                    let _ = tcp
                        .write_all(
                            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
                        )
                        .await;
                });
            }
        });
        (addr, accepted)
    }

    fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
        let mut out = e.to_string();
        let mut source = e.source();
        while let Some(s) = source {
            out.push_str(": ");
            out.push_str(&s.to_string());
            source = s.source();
        }
        out
    }

    /// The connector layer reads each connection's destination and refuses a denied literal
    /// address without connecting, and lets an allowed one through (so the destination is
    /// read correctly from reqwest's request).
    #[tokio::test]
    async fn connector_layer_refuses_denied_addresses_without_connecting() {
        crate::sources::install_crypto_provider();
        let (denied, denied_hits) = counting_server("127.0.0.2").await;
        let (allowed, allowed_hits) = counting_server("127.0.0.1").await;
        let p = Arc::new(policy(&["127.0.0.2/32"], &[]));
        let client = reqwest::Client::builder()
            .no_proxy()
            .connector_layer(PolicyLayer(p.clone()))
            .build()
            .expect("client");
        let e = client
            .get(format!("http://{denied}/x"))
            .send()
            .await
            .expect_err("refused");
        let msg = error_chain(&e);
        assert!(
            msg.contains("address 127.0.0.2 not allowed by the operator's source policy"),
            "{msg}"
        );
        let body = client
            .get(format!("http://{allowed}/x"))
            .send()
            .await
            .expect("allowed")
            .text()
            .await
            .expect("body");
        assert_eq!(body, "ok");
        assert_eq!(allowed_hits.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert_eq!(
            denied_hits.load(std::sync::atomic::Ordering::SeqCst),
            0,
            "no connection to a denied address"
        );
    }

    /// The resolver drops denied addresses of a name and fails when none is left: `localhost`
    /// with loopback denied is refused without connecting.
    #[tokio::test]
    async fn resolver_refuses_names_of_denied_addresses_without_connecting() {
        crate::sources::install_crypto_provider();
        let (addr, hits) = counting_server("127.0.0.1").await;
        let p = Arc::new(policy(&["127.0.0.0/8", "::1"], &[]));
        let client = reqwest::Client::builder()
            .no_proxy()
            .dns_resolver(Resolver(p.clone()))
            .build()
            .expect("client");
        let e = client
            .get(format!("http://localhost:{}/x", addr.port()))
            .send()
            .await
            .expect_err("refused");
        let msg = error_chain(&e);
        assert!(
            msg.contains("(of host localhost) not allowed by the operator's source policy"),
            "{msg}"
        );
        assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 0);
        // The same name with loopback exempt resolves and connects.
        let client = reqwest::Client::builder()
            .no_proxy()
            .dns_resolver(Resolver(Arc::new(policy(&[], &[]))))
            .build()
            .expect("client");
        let resp = client
            .get(format!("http://localhost:{}/x", addr.port()))
            .send()
            .await;
        // localhost may resolve to ::1 first where nothing listens; reqwest tries each address.
        assert!(resp.is_ok(), "{resp:?}");
        assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 1);
    }
}
