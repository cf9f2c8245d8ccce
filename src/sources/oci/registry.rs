//! A session with one registry repository: the secretRef's registry credentials
//! ([`SecretSettings`]: `username`/`password` or a `.dockerconfigjson`), sent as basic auth or
//! exchanged for a bearer token when the registry's `WWW-Authenticate` challenge asks for one
//! (the Docker token protocol). The token service must be https (http only with `insecure`)
//! and passes the egress policy; the basic credentials go to it only over https or when it is
//! the registry's own host, and only to hosts the secret's `applyset.dev/allowed-hosts`
//! allows. Every download is capped and verified against its digest.

use std::collections::BTreeMap;

use base64::Engine as _;
use kube::Client;
use reqwest::{Method, StatusCode, header};
use serde_json::Value;

use super::Repository;
use crate::{
    api::OciSource,
    applyset::ParentRef,
    sources::{
        SourceError, egress, http::read_capped, http::request_error, read_secret, redact_url,
        secret_text, sha256_hex,
    },
};

/// Registry credentials from a secret: `username`/`password`, or `.dockerconfigjson`.
fn credentials(data: &BTreeMap<String, Vec<u8>>, host: &str) -> Option<(String, String)> {
    if let (Some(u), Some(p)) = (secret_text(data, "username"), secret_text(data, "password")) {
        return Some((u, p));
    }
    let cfg: Value = serde_json::from_slice(data.get(".dockerconfigjson")?).ok()?;
    let auths = cfg.get("auths")?.as_object()?;
    let entry = auths.iter().find_map(|(k, v)| {
        let k = k
            .trim_start_matches("https://")
            .trim_start_matches("http://");
        let k = k.split('/').next().unwrap_or(k);
        (k == host).then_some(v)
    })?;
    if let (Some(u), Some(p)) = (
        entry.get("username").and_then(Value::as_str),
        entry.get("password").and_then(Value::as_str),
    ) {
        return Some((u.to_string(), p.to_string()));
    }
    let auth = entry.get("auth")?.as_str()?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(auth)
        .ok()?;
    let (u, p) = std::str::from_utf8(&decoded).ok()?.split_once(':')?;
    Some((u.to_string(), p.to_string()))
}

/// A session with one registry repository: remembers the auth that worked.
pub(super) struct Session {
    http: reqwest::Client,
    base: String,
    /// `host[:port]` of the registry.
    host: String,
    pub(super) repo: String,
    /// Plain http allowed (`insecure`), for the registry and its token service.
    insecure: bool,
    basic: Option<(String, String)>,
    /// `Authorization` header value once a challenge was answered.
    auth: Option<String>,
    /// The egress policy (the token service's URL is checked against it).
    policy: std::sync::Arc<egress::Policy>,
    /// The hosts the secretRef's `applyset.dev/allowed-hosts` annotation allows (`None`: any);
    /// the basic credentials go to no other token service.
    secret_hosts: Option<Vec<egress::HostPattern>>,
    /// The memory the downloads take, from the operator's budget.
    pub(super) lease: crate::sources::memory::Lease,
}

/// Whether basic credentials may go to the token service at `realm`: over https, or to the
/// registry's own host (which gets them anyway).
fn may_send_credentials(realm: &url::Url, registry_host: &str) -> bool {
    let realm_host = match (realm.host_str(), realm.port()) {
        (Some(h), Some(p)) => format!("{h}:{p}"),
        (Some(h), None) => h.to_string(),
        (None, _) => return false,
    };
    realm.scheme() == "https" || realm_host.eq_ignore_ascii_case(registry_host)
}

/// Parses `Bearer realm="…",service="…",scope="…"` (or `Basic realm=…`).
fn parse_challenge(h: &str) -> Option<(String, BTreeMap<String, String>)> {
    let (scheme, rest) = h.trim().split_once(' ')?;
    let mut params = BTreeMap::new();
    let mut rest = rest.trim();
    while !rest.is_empty() {
        let (k, after) = rest.split_once('=')?;
        let k = k.trim().to_ascii_lowercase();
        let after = after.trim_start();
        let (v, tail) = if let Some(q) = after.strip_prefix('"') {
            let end = q.find('"')?;
            (q[..end].to_string(), &q[end + 1..])
        } else {
            let end = after.find(',').unwrap_or(after.len());
            (after[..end].trim().to_string(), &after[end..])
        };
        params.insert(k, v);
        rest = tail.trim_start().trim_start_matches(',').trim_start();
    }
    Some((scheme.to_ascii_lowercase(), params))
}

impl Session {
    /// A session with the repository of `o` (`repo`, parsed from its URL), over https (http
    /// with `insecure`), not yet authenticated.
    pub(super) fn new(
        http: reqwest::Client,
        policy: std::sync::Arc<egress::Policy>,
        o: &OciSource,
        repo: &Repository,
        secret: SecretSettings,
        lease: crate::sources::memory::Lease,
    ) -> Self {
        Self {
            http,
            base: format!(
                "{}://{}",
                if o.insecure { "http" } else { "https" },
                repo.host
            ),
            host: repo.host.clone(),
            repo: repo.name.clone(),
            insecure: o.insecure,
            basic: secret.basic,
            auth: None,
            policy,
            secret_hosts: secret.allowed_hosts,
            lease,
        }
    }

    async fn send(
        &self,
        method: &Method,
        url: &str,
        accept: Option<&str>,
    ) -> Result<reqwest::Response, String> {
        let mut rb = self.http.request(method.clone(), url);
        if let Some(a) = accept {
            rb = rb.header(header::ACCEPT, a);
        }
        if let Some(a) = &self.auth {
            rb = rb.header(header::AUTHORIZATION, a);
        }
        rb.send()
            .await
            .map_err(|e| format!("{method} {url}: {}", request_error(e)))
    }

    /// A request, answering one authentication challenge if the registry asks.
    pub(super) async fn request(
        &mut self,
        method: Method,
        path: &str,
        accept: Option<&str>,
    ) -> Result<reqwest::Response, String> {
        let url = format!("{}/v2/{}/{path}", self.base, self.repo);
        let resp = self.send(&method, &url, accept).await?;
        if resp.status() != StatusCode::UNAUTHORIZED || self.auth.is_some() {
            return Ok(resp);
        }
        let challenge = resp
            .headers()
            .get(header::WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_challenge);
        match challenge {
            Some((scheme, params)) if scheme == "bearer" => {
                self.auth = Some(self.bearer_token(&params).await?);
            }
            Some((scheme, _)) if scheme == "basic" => {
                self.auth = Some(self.basic_auth(&method, &url)?);
            }
            _ => return Ok(resp),
        }
        self.send(&method, &url, accept).await
    }

    /// Answers a bearer challenge (its `params`): gets a token from the realm (https, or http
    /// with `insecure`) for the challenge's service and scope (default: pull of this
    /// repository), sending the basic credentials only where [`may_send_credentials`] allows.
    /// Returns the `Authorization` header value.
    async fn bearer_token(&mut self, params: &BTreeMap<String, String>) -> Result<String, String> {
        let realm = params
            .get("realm")
            .ok_or("the registry's bearer challenge has no realm")?;
        let mut token_url = url::Url::parse(realm).map_err(|e| {
            format!(
                "the registry's token realm {:?} is not a URL: {e}",
                redact_url(realm)
            )
        })?;
        match token_url.scheme() {
            "https" => {}
            "http" if self.insecure => {}
            other => {
                return Err(format!(
                    "the registry's token realm {} is {other}://, not https:// (set insecure: true only for a registry reached over plain http)",
                    redact_url(realm)
                ));
            }
        }
        self.policy
            .check_url(&token_url)
            .map_err(|e| format!("the registry's token realm {}: {e}", redact_url(realm)))?;
        {
            let mut q = token_url.query_pairs_mut();
            if let Some(s) = params.get("service") {
                q.append_pair("service", s);
            }
            let scope = params
                .get("scope")
                .cloned()
                .unwrap_or_else(|| format!("repository:{}:pull", self.repo));
            q.append_pair("scope", &scope);
        }
        let mut rb = self.http.get(token_url.as_str());
        if let Some((u, p)) = &self.basic
            && may_send_credentials(&token_url, &self.host)
        {
            if let Some(allowed) = &self.secret_hosts {
                let dest = egress::Destination::of_url(&token_url).map_err(|e| e.to_string())?;
                if !allowed.iter().any(|p| p.matches(&dest)) {
                    return Err(format!(
                        "the registry's token realm {} is on host {dest}, which the secretRef's annotation {} does not list; its credentials are not sent there (add the host to the annotation if it is the registry's token service)",
                        redact_url(realm),
                        crate::sources::ALLOWED_HOSTS_ANNOTATION
                    ));
                }
            }
            rb = rb.basic_auth(u, Some(p));
        }
        let tr = rb
            .send()
            .await
            .map_err(|e| format!("getting a registry token: {}", request_error(e)))?;
        if !tr.status().is_success() {
            return Err(format!(
                "the registry's token service answered {} (check the secretRef's credentials)",
                tr.status()
            ));
        }
        let body = read_capped(tr, 1 << 20, &mut self.lease)
            .await
            .map_err(|e| e.to_string())?;
        let v: Value = serde_json::from_slice(&body)
            .map_err(|e| format!("the registry's token answer is not JSON: {e}"))?;
        let token = v
            .get("token")
            .or_else(|| v.get("access_token"))
            .and_then(Value::as_str)
            .ok_or("the registry's token answer has no token")?;
        Ok(format!("Bearer {token}"))
    }

    /// Answers a basic challenge with the secretRef's credentials (an error without them).
    /// Returns the `Authorization` header value.
    fn basic_auth(&self, method: &Method, url: &str) -> Result<String, String> {
        let Some((u, p)) = &self.basic else {
            return Err(format!(
                "{method} {url}: the registry requires credentials; set a secretRef with username and password"
            ));
        };
        let raw = format!("{u}:{p}");
        Ok(format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(raw)
        ))
    }

    /// GETs `path`, at most `max` bytes, and verifies it against `digest`.
    pub(super) async fn get_verified(
        &mut self,
        path: &str,
        accept: Option<&str>,
        digest: &str,
        what: &str,
        max: u64,
    ) -> Result<Vec<u8>, SourceError> {
        let resp = self
            .request(Method::GET, path, accept)
            .await
            .map_err(SourceError::Failed)?;
        if !resp.status().is_success() {
            return Err(SourceError::Failed(format!(
                "GET {what}: the registry answered {}",
                resp.status()
            )));
        }
        let body = read_capped(resp, max, &mut self.lease)
            .await
            .map_err(|e| match e {
                e @ SourceError::TooLarge { .. } => e,
                e => SourceError::Failed(format!("GET {what}: {e}")),
            })?;
        let got = format!("sha256:{}", sha256_hex(&body));
        if got != digest {
            return Err(SourceError::Failed(format!(
                "{what}: digest mismatch: expected {digest}, downloaded content has {got}; refusing it"
            )));
        }
        Ok(body)
    }
}

/// What the secretRef provides: its id (part of the cache identity), the registry
/// credentials and an extra CA; all empty without a secretRef.
pub(super) struct SecretSettings {
    pub(super) id: String,
    pub(super) basic: Option<(String, String)>,
    pub(super) ca: Option<Vec<u8>>,
    /// The secret's `applyset.dev/allowed-hosts` (`None`: any host).
    pub(super) allowed_hosts: Option<Vec<egress::HostPattern>>,
}

impl SecretSettings {
    /// Reads the secretRef of `o`, taking the credentials for registry `host`.
    pub(super) async fn read(
        client: &Client,
        parent: &ParentRef,
        o: &OciSource,
        host: &str,
        dest: &egress::Destination,
    ) -> Result<Self, SourceError> {
        match &o.secret_ref {
            None => Ok(Self {
                id: String::new(),
                basic: None,
                ca: None,
                allowed_hosts: None,
            }),
            Some(r) => {
                let secret = read_secret(client, parent, r, dest).await?;
                let data = secret.data;
                let ca = data.get("ca.crt").cloned().filter(|c| !c.is_empty());
                Ok(Self {
                    id: secret.id,
                    basic: credentials(&data, host),
                    ca,
                    allowed_hosts: secret.allowed_hosts,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges() {
        let (s, p) = parse_challenge(
            r#"Bearer realm="https://auth.example.com/token",service="registry.example.com",scope="repository:a/b:pull""#,
        )
        .expect("parsed");
        assert_eq!(s, "bearer");
        assert_eq!(p["realm"], "https://auth.example.com/token");
        assert_eq!(p["service"], "registry.example.com");
        assert_eq!(p["scope"], "repository:a/b:pull");
        let (s, p) = parse_challenge(r#"Basic realm="Registry Realm""#).expect("parsed");
        assert_eq!(s, "basic");
        assert_eq!(p["realm"], "Registry Realm");
    }

    #[test]
    fn credentials_go_only_to_safe_token_services() {
        let u = |s: &str| url::Url::parse(s).expect("url");
        assert!(may_send_credentials(
            &u("https://auth.example.com/token"),
            "r.example.com"
        ));
        assert!(may_send_credentials(
            &u("http://127.0.0.1:5000/token"),
            "127.0.0.1:5000"
        ));
        assert!(!may_send_credentials(
            &u("http://auth.example.com/token"),
            "r.example.com"
        ));
        assert!(!may_send_credentials(
            &u("http://127.0.0.1:5001/token"),
            "127.0.0.1:5000"
        ));
    }

    #[test]
    fn docker_config_credentials() {
        let auth = base64::engine::general_purpose::STANDARD.encode("me:pw");
        let cfg = format!(r#"{{"auths":{{"https://r.example.com":{{"auth":"{auth}"}}}}}}"#);
        let data = BTreeMap::from([(".dockerconfigjson".to_string(), cfg.into_bytes())]);
        assert_eq!(
            credentials(&data, "r.example.com"),
            Some(("me".into(), "pw".into()))
        );
        assert_eq!(credentials(&data, "other.example.com"), None);
    }
}
