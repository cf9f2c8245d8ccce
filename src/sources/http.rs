//! HTTP(S) sources: one YAML/JSON document (possibly multi-document) or a `.tar.gz` bundle,
//! recognised by its content (gzip magic). The revision is the SHA-256 of the content.
//!
//! Checks per interval: with a `sha256` pin and the content cached, none; otherwise one
//! conditional GET (`If-None-Match` / `If-Modified-Since` from the cached response), whose
//! `304 Not Modified` costs no download. Downloads are capped ([`super::Limits`]). With a
//! `sha256` pin, cached content is served only when it is the pinned content; otherwise the
//! GET is unconditional (a 304 must not confirm content the pin does not match).

use kube::Client;
use reqwest::{StatusCode, header};

use super::{
    Cached, Fetched, Naming, Parsed, SourceError, SourceFile, Sources, archive, egress,
    memory::Lease, parse_blocking, read_secret, redact_url, secret_text, sha256_hex, under_path,
};
use crate::{api::HttpSource, applyset::ParentRef};

/// Checks an http source's spec without any I/O (`Invalid`, naming the field).
pub fn validate(h: &HttpSource) -> Result<(), SourceError> {
    check(h).map_err(SourceError::Invalid)?;
    super::paths::directory_prefix(h.path.as_deref())?;
    Ok(())
}

fn check(h: &HttpSource) -> Result<(), String> {
    let u = url::Url::parse(&h.url).map_err(|e| format!("url is not a valid URL: {e}"))?;
    if !matches!(u.scheme(), "http" | "https") {
        return Err("url must start with http:// or https://".into());
    }
    if let Some(pin) = &h.sha256
        && !(pin.len() == 64 && pin.bytes().all(|b| b.is_ascii_hexdigit()))
    {
        return Err("sha256 must be 64 hex digits".into());
    }
    Ok(())
}

/// Credentials and TLS settings of HTTP-like sources (from a secretRef).
#[derive(Default)]
pub struct Auth {
    pub bearer: Option<String>,
    pub basic: Option<(String, String)>,
    pub ca: Option<Vec<u8>>,
    /// `namespace/name` of the Secret (part of the cache identity).
    pub secret: Option<String>,
}

impl Auth {
    pub async fn from_secret(
        client: &Client,
        parent: &ParentRef,
        r: Option<&crate::api::SecretReference>,
        dest: &egress::Destination,
    ) -> Result<Auth, SourceError> {
        let Some(r) = r else {
            return Ok(Auth::default());
        };
        let secret = read_secret(client, parent, r, dest).await?;
        let (id, data) = (secret.id, secret.data);
        let basic = match (
            secret_text(&data, "username"),
            secret_text(&data, "password"),
        ) {
            (Some(u), Some(p)) => Some((u, p)),
            _ => None,
        };
        Ok(Auth {
            bearer: secret_text(&data, "token"),
            basic,
            ca: data.get("ca.crt").cloned().filter(|c| !c.is_empty()),
            secret: Some(id),
        })
    }

    pub fn apply(&self, rb: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        if let Some(t) = &self.bearer {
            rb.bearer_auth(t)
        } else if let Some((u, p)) = &self.basic {
            rb.basic_auth(u, Some(p))
        } else {
            rb
        }
    }
}

/// How long room reserved ahead for a body (from its declared length) is kept while the
/// body has not arrived: then only what arrived is held, and the rest is taken as it comes.
pub const RESERVED_FOR: std::time::Duration = std::time::Duration::from_secs(5);

/// Reads a response body, failing beyond `max` bytes (at once when the response declares a
/// larger length). The memory the body takes is taken from `lease` as the bytes arrive,
/// before the buffer grows, from what the caller reserved ahead first. Room reserved ahead
/// (for a declared length) and not used after [`RESERVED_FOR`] is given back: a server that
/// announces a large body and sends it slowly holds no more than it sent. (A quick download
/// keeps its reservation, so that fetches do not hold part of what they need while waiting
/// for each other.)
pub async fn read_capped(
    mut resp: reqwest::Response,
    max: u64,
    lease: &mut Lease,
) -> Result<Vec<u8>, SourceError> {
    let mut body = Vec::new();
    if let Some(len) = resp.content_length()
        && len > max
    {
        return Err(SourceError::TooLarge {
            limit: max,
            declared: Some(len),
        });
    }
    let declared = resp.content_length();
    let reserved_until = tokio::time::Instant::now() + RESERVED_FOR;
    let mut reserved = true;
    loop {
        let next = if reserved {
            match tokio::time::timeout_at(reserved_until, resp.chunk()).await {
                Ok(next) => next,
                Err(_) => {
                    // Slow: keep only what is used.
                    lease.hold(lease.bytes()).await?;
                    reserved = false;
                    continue;
                }
            }
        } else {
            resp.chunk().await
        };
        let Some(chunk) =
            next.map_err(|e| SourceError::Failed(format!("reading the response: {e}")))?
        else {
            break;
        };
        let need = body.len() as u64 + chunk.len() as u64;
        if need > max {
            return Err(SourceError::TooLarge {
                limit: max,
                declared: None,
            });
        }
        if need > body.capacity() as u64 {
            // Grow the buffer as Vec does (doubling, within the limit and the declared
            // length, so that a body takes no more than was reserved for it), the memory
            // first.
            let mut cap = need.max(body.capacity() as u64 * 2).min(max);
            if let Some(len) = declared {
                cap = cap.min(len.max(need));
            }
            lease.grow(cap - body.capacity() as u64).await?;
            let cap = usize::try_from(cap).map_err(|e| SourceError::Failed(e.to_string()))?;
            body.reserve_exact(cap - body.len());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The error text of a request failure, with its causes (reqwest hides the TLS reason in
/// them), without the request's URL: callers name the URL themselves, redacted (a query may
/// hold a token, and a redirect may lead to a signed URL).
pub fn request_error(e: reqwest::Error) -> String {
    let e = e.without_url();
    let mut msg = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        let s_msg = s.to_string();
        if !msg.contains(&s_msg) {
            msg.push_str(": ");
            msg.push_str(&s_msg);
        }
        source = s.source();
    }
    msg
}

pub async fn fetch(
    s: &Sources,
    client: &Client,
    parent: &ParentRef,
    h: &HttpSource,
    overrides: Option<&crate::api::KustomizeOverrides>,
) -> Result<Fetched, SourceError> {
    validate(h)?;
    let prefix = super::paths::directory_prefix(h.path.as_deref())?;
    let url = redact_url(&h.url);
    let dest = egress::checked_destination(&s.policy, &h.url)?;
    let auth = Auth::from_secret(client, parent, h.secret_ref.as_ref(), &dest).await?;
    let desc = format!("http {url}");
    let identity = cache_identity(h, &prefix, &auth, overrides);
    let cached = s.cache.get(&identity);
    let pinned = h
        .sha256
        .as_ref()
        .map(|p| format!("http:sha256:{}", p.to_ascii_lowercase()));
    if let (Some(pin), Some(c)) = (&pinned, &cached)
        && c.revision == *pin
    {
        return Ok(from_cache(c));
    }
    // With a pin, the cached content (not the pinned one, or it would have been served above)
    // must not be confirmed by a 304: download and verify.
    let conditional = cached.as_ref().filter(|_| pinned.is_none());
    let resp = get(s, &auth, &h.url, &url, conditional).await?;
    let status = resp.status();
    if status == StatusCode::NOT_MODIFIED {
        return match conditional {
            Some(c) => Ok(from_cache(c)),
            None => Err(SourceError::Failed(format!(
                "GET {url}: the server answered 304 Not Modified to an unconditional request"
            ))),
        };
    }
    if !status.is_success() {
        return Err(SourceError::Failed(format!(
            "GET {url}: the server answered {status}"
        )));
    }
    let etag = header_text(&resp, header::ETAG);
    let last_modified = header_text(&resp, header::LAST_MODIFIED);
    let (body, mut lease) = download(s, resp, &url).await?;
    let digest = sha256_hex(&body);
    check_pin(h, &digest)?;
    let revision = format!("http:sha256:{digest}");
    let (manifests, bytes, deferred) = match cached.filter(|c| c.revision == revision) {
        Some(c) => {
            // The cached manifests are the content: nothing more is held.
            drop(body);
            lease.hold(0).await?;
            (c.manifests, c.bytes, c.deferred)
        }
        None => {
            let content = Content {
                desc: &desc,
                body,
                prefix: &prefix,
                overrides,
            };
            let p = decode(s, content, &mut lease).await?;
            (p.manifests, p.bytes, p.deferred)
        }
    };
    let cached = Cached {
        revision,
        manifests,
        etag,
        last_modified,
        bytes,
        deferred,
    };
    Ok(s.cache.store(&identity, "http", cached, lease))
}

/// What the source's cached content is kept under: the URL, the directory, the credentials'
/// Secret and the build's overrides.
fn cache_identity(
    h: &HttpSource,
    prefix: &str,
    auth: &Auth,
    overrides: Option<&crate::api::KustomizeOverrides>,
) -> String {
    format!(
        "http {} path={prefix} secret={}{}",
        h.url,
        auth.secret.as_deref().unwrap_or(""),
        super::directory::build_identity(overrides)
    )
}

/// The body of `resp` (from `url`, redacted), within the download cap; its memory is taken
/// from a new lease, with as much again for parsing it (or for the files of a bundle) at once
/// when its length is known.
async fn download(
    s: &Sources,
    resp: reqwest::Response,
    url: &str,
) -> Result<(Vec<u8>, Lease), SourceError> {
    let mut lease = s.memory.lease();
    if let Some(len) = resp
        .content_length()
        .filter(|l| *l <= s.limits.max_download)
    {
        // The body, and about as much again for parsing it (or for the files of a bundle),
        // at once; kept only while the body arrives quickly (see `read_capped`).
        lease
            .reserve_ahead(len.saturating_mul(2))
            .await
            .map_err(|e| SourceError::Failed(format!("GET {url}: {e}")))?;
    }
    let body = read_capped(resp, s.limits.max_download, &mut lease)
        .await
        .map_err(|e| SourceError::Failed(format!("GET {url}: {e}")))?;
    Ok((body, lease))
}

/// The cached content, served without a download.
fn from_cache(c: &Cached) -> Fetched {
    Fetched {
        manifests: c.manifests.clone(),
        revision: c.revision.clone(),
        kind: "http",
        downloaded: false,
        memory: None,
        deferred: c.deferred.clone(),
    }
}

/// Sends the GET of `raw_url` (named `url`, redacted, in messages) with the secretRef's
/// credentials and CA, conditional on the `conditional` cached response's `ETag` and
/// `Last-Modified` if given.
async fn get(
    s: &Sources,
    auth: &Auth,
    raw_url: &str,
    url: &str,
    conditional: Option<&Cached>,
) -> Result<reqwest::Response, SourceError> {
    let http = s.http_client(auth.ca.as_deref())?;
    let mut rb = auth.apply(http.get(raw_url));
    if let Some(c) = conditional {
        if let Some(e) = &c.etag {
            rb = rb.header(header::IF_NONE_MATCH, e);
        }
        if let Some(m) = &c.last_modified {
            rb = rb.header(header::IF_MODIFIED_SINCE, m);
        }
    }
    rb.send()
        .await
        .map_err(|e| SourceError::Failed(format!("GET {url}: {}", request_error(e))))
}

/// The text of response header `name`, if present and visible ASCII.
fn header_text(resp: &reqwest::Response, name: header::HeaderName) -> Option<String> {
    resp.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// Refuses content whose SHA-256 (`digest`, hex) is not the one `h` pins, if it pins one.
fn check_pin(h: &HttpSource, digest: &str) -> Result<(), SourceError> {
    if let Some(pin) = &h.sha256
        && !pin.eq_ignore_ascii_case(digest)
    {
        return Err(SourceError::Failed(format!(
            "the content's sha256 is {digest}, but spec pins {pin}; nothing is applied until they match (fix the pin or the content)"
        )));
    }
    Ok(())
}

/// A downloaded body: the source it came from, and how to read it.
struct Content<'a> {
    desc: &'a str,
    body: Vec<u8>,
    prefix: &'a str,
    overrides: Option<&'a crate::api::KustomizeOverrides>,
}

/// A tar.gz bundle (by content) or a single text document; unpacked and parsed on blocking
/// threads. A `path` that is not in the bundle, and a bundle or document without manifests,
/// are errors (an empty source would prune its members).
async fn decode(s: &Sources, c: Content<'_>, lease: &mut Lease) -> Result<Parsed, SourceError> {
    let Content {
        desc,
        body,
        prefix,
        overrides,
    } = c;
    if archive::is_gzip(&body) {
        let budget = archive::Budget::new(&s.limits);
        let pfx = prefix.to_string();
        let body_bytes = body.capacity() as u64;
        let unpacked = unpack_reserving(lease, move |reserve| {
            archive::read_tar_gz_reserving(&body, &pfx, budget, reserve)
        })
        .await??;
        // The bundle is gone (dropped after unpacking); its room serves the parse.
        lease.release(body_bytes);
        if !unpacked.prefix_found {
            return Err(SourceError::Failed(format!(
                "path {} does not exist in the bundle; fix path",
                prefix.trim_end_matches('/')
            )));
        }
        let dir = super::directory::Directory {
            desc: desc.to_string(),
            tree: unpacked.tree,
            prefix,
            where_: format!("in the bundle{}", under_path(prefix)),
            overrides,
        };
        super::directory::read(s, dir, lease).await
    } else {
        let text = String::from_utf8(body).map_err(|_| {
            SourceError::Failed(
                "the content is neither a .tar.gz bundle nor UTF-8 YAML/JSON text".into(),
            )
        })?;
        parse_blocking(
            desc.to_string(),
            vec![SourceFile {
                path: String::new(),
                text,
            }],
            Naming::Document,
            "in the document".into(),
            lease,
        )
        .await
    }
}

/// Runs `work` on a blocking thread with a `reserve` function that takes memory from `lease`
/// (waiting for room as [`Lease::grow`] does); `lease` holds what was reserved afterwards.
pub async fn unpack_reserving<T: Send + 'static>(
    lease: &mut Lease,
    work: impl FnOnce(&mut dyn FnMut(u64) -> Result<(), SourceError>) -> T + Send + 'static,
) -> Result<T, SourceError> {
    let rt = tokio::runtime::Handle::current();
    let empty = lease.empty();
    let moved = std::mem::replace(lease, empty);
    let (out, moved) = tokio::task::spawn_blocking(move || {
        let mut moved = moved;
        let out = work(&mut |n| Ok(moved.grow_blocking(&rt, n)?));
        (out, moved)
    })
    .await
    .map_err(|e| SourceError::Failed(format!("unpacking: {e}")))?;
    *lease = moved;
    Ok(out)
}
