//! The ui's guards, before any page: the `Host` allowlist (against DNS rebinding) on every
//! route; for actions (every method but GET and HEAD) and the live stream, the `Origin` and
//! `Sec-Fetch-Site` checks (against other sites and other local ports); and the security
//! headers on every answer. The decisions are pure functions; the middlewares apply them.
//!
//! - `Host` must be exactly `127.0.0.1:PORT` or `localhost:PORT` (ASCII case ignored), with
//!   the port served; a request-target in absolute form must name the same; else 403.
//! - `Origin`, when present, must be exactly `http://127.0.0.1:PORT` or `http://localhost:PORT`
//!   (ASCII case ignored; `null` is refused); `Sec-Fetch-Site`, when present, must be
//!   `same-origin`; else 403.
//! - Every answer carries [`SECURITY_HEADERS`] and `Cache-Control: no-store`, except an asset
//!   (marked by [`super::assets::Immutable`]), which keeps its own `Cache-Control`. No CORS
//!   header is ever sent.

use axum::{
    extract::{Request, State},
    http::{
        HeaderMap, HeaderValue, Method, StatusCode, Uri,
        header::{self, HeaderName},
    },
    middleware::Next,
    response::Response,
};

use super::{AppState, assets::Immutable};

/// The Content-Security-Policy of every answer: our own script and style files only, no
/// inline anything, no framing, fetches and forms to ourselves only.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The headers every answer carries (name, value).
pub const SECURITY_HEADERS: [(&str, &str); 6] = [
    ("content-security-policy", CSP),
    ("referrer-policy", "no-referrer"),
    ("x-content-type-options", "nosniff"),
    ("x-frame-options", "DENY"),
    ("cross-origin-opener-policy", "same-origin"),
    ("cross-origin-resource-policy", "same-origin"),
];

/// Whether `host` (a `Host` header, or the authority of an absolute request-target) names this
/// server: `127.0.0.1:PORT` or `localhost:PORT`, ASCII case ignored, nothing else.
pub fn host_allowed(host: &str, port: u16) -> bool {
    let Some((name, given)) = host.rsplit_once(':') else {
        return false;
    };
    given == port.to_string() && (name == "127.0.0.1" || name.eq_ignore_ascii_case("localhost"))
}

/// Whether an `Origin` header names this server: `http://127.0.0.1:PORT` or
/// `http://localhost:PORT` exactly (ASCII case ignored).
pub fn origin_allowed(origin: &str, port: u16) -> bool {
    const SCHEME: &str = "http://";
    origin
        .get(..SCHEME.len())
        .is_some_and(|s| s.eq_ignore_ascii_case(SCHEME))
        && origin
            .get(SCHEME.len()..)
            .is_some_and(|host| host_allowed(host, port))
}

/// Whether a `Sec-Fetch-Site` header says the request comes from our own pages.
pub fn fetch_site_allowed(site: &str) -> bool {
    site == "same-origin"
}

/// Whether a request must pass the origin checks: every method but GET and HEAD (the
/// actions), and the live stream.
pub fn needs_origin_check(method: &Method, path: &str) -> bool {
    !(method == Method::GET || method == Method::HEAD) || path == "/live"
}

/// The one value of header `name`: `Ok(None)` when absent, `Err(())` when repeated or not
/// visible ASCII.
fn single<'h>(headers: &'h HeaderMap, name: &HeaderName) -> Result<Option<&'h str>, ()> {
    let mut values = headers.get_all(name).iter();
    match (values.next(), values.next()) {
        (None, _) => Ok(None),
        (Some(v), None) => v.to_str().map(Some).map_err(|_| ()),
        (Some(_), Some(_)) => Err(()),
    }
}

/// Whether a request's `Host` (required, one) and request-target authority (if any) name
/// this server.
pub fn request_host_allowed(headers: &HeaderMap, uri: &Uri, port: u16) -> bool {
    let host_ok = matches!(single(headers, &header::HOST), Ok(Some(h)) if host_allowed(h, port));
    let authority_ok = uri
        .authority()
        .is_none_or(|a| host_allowed(a.as_str(), port));
    host_ok && authority_ok
}

/// Whether a request's `Origin` and `Sec-Fetch-Site` (each absent, or one allowed value)
/// allow it.
pub fn request_origin_allowed(headers: &HeaderMap, port: u16) -> bool {
    let origin = single(headers, &header::ORIGIN);
    let site = single(headers, &HeaderName::from_static("sec-fetch-site"));
    matches!(origin, Ok(o) if o.is_none_or(|o| origin_allowed(o, port)))
        && matches!(site, Ok(s) if s.is_none_or(fetch_site_allowed))
}

/// The middleware of the `Host` allowlist (every route) and of the origin checks (actions and
/// the live stream): 403 with a plain-text reason otherwise.
pub async fn check(State(app): State<AppState>, request: Request, next: Next) -> Response {
    if !request_host_allowed(request.headers(), request.uri(), app.port) {
        return forbidden(
            "this server answers only to http://127.0.0.1:PORT and http://localhost:PORT (Host refused)",
        );
    }
    if needs_origin_check(request.method(), request.uri().path())
        && !request_origin_allowed(request.headers(), app.port)
    {
        return forbidden(
            "this request must come from the ui's own pages (Origin or Sec-Fetch-Site refused)",
        );
    }
    next.run(request).await
}

fn forbidden(why: &'static str) -> Response {
    let mut r = Response::new(axum::body::Body::from(why));
    *r.status_mut() = StatusCode::FORBIDDEN;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// Puts the security headers on an answer, and `Cache-Control: no-store` unless it is an
/// asset.
pub fn secure(mut response: Response) -> Response {
    let immutable = response.extensions().get::<Immutable>().is_some();
    let headers = response.headers_mut();
    for (name, value) in SECURITY_HEADERS {
        headers.insert(
            HeaderName::from_static(name),
            HeaderValue::from_static(value),
        );
    }
    if !immutable {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

/// The middleware of [`secure`] (the outermost layer: every answer, refusals included).
pub async fn headers(request: Request, next: Next) -> Response {
    secure(next.run(request).await)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_the_loopback_names_with_the_port_served() {
        for ok in [
            "127.0.0.1:8080",
            "localhost:8080",
            "LOCALHOST:8080",
            "LocalHost:8080",
        ] {
            assert!(host_allowed(ok, 8080), "{ok}");
        }
        for refused in [
            "127.0.0.1",
            "localhost",
            "127.0.0.1:8081",
            "localhost:80",
            "127.0.0.1:08080",
            "127.0.0.1:8080.",
            "localhost.:8080",
            "evil.example:8080",
            "localhost.evil.example:8080",
            "127.0.0.2:8080",
            "0.0.0.0:8080",
            "[::1]:8080",
            "127.1:8080",
            "2130706433:8080",
            " localhost:8080",
            "localhost:8080 ",
            "user@localhost:8080",
            "localhost:8080:8080",
            "",
            ":8080",
        ] {
            assert!(!host_allowed(refused, 8080), "{refused:?}");
        }
    }

    #[test]
    fn origins_are_http_of_an_allowed_host() {
        for ok in [
            "http://127.0.0.1:8080",
            "http://localhost:8080",
            "HTTP://LOCALHOST:8080",
        ] {
            assert!(origin_allowed(ok, 8080), "{ok}");
        }
        for refused in [
            "null",
            "",
            "http://",
            "https://127.0.0.1:8080",
            "http://127.0.0.1:8081",
            "http://127.0.0.1",
            "http://127.0.0.1:8080/",
            "http://evil.example:8080",
            "http://localhost:8080.evil.example",
            "file://",
            "http://127.0.0.1:8080 ",
            "htté://127.0.0.1:8080",
        ] {
            assert!(!origin_allowed(refused, 8080), "{refused:?}");
        }
    }

    #[test]
    fn fetch_site_must_be_same_origin() {
        assert!(fetch_site_allowed("same-origin"));
        for refused in ["same-site", "cross-site", "none", "", "Same-Origin"] {
            assert!(!fetch_site_allowed(refused), "{refused}");
        }
    }

    #[test]
    fn actions_and_the_live_stream_need_the_origin_checks() {
        assert!(needs_origin_check(&Method::POST, "/sets/a/b/reconcile"));
        assert!(needs_origin_check(&Method::PUT, "/"));
        assert!(needs_origin_check(&Method::DELETE, "/"));
        assert!(needs_origin_check(&Method::GET, "/live"));
        assert!(needs_origin_check(&Method::HEAD, "/live"));
        assert!(!needs_origin_check(&Method::GET, "/"));
        assert!(!needs_origin_check(&Method::GET, "/live/x"));
        assert!(!needs_origin_check(&Method::HEAD, "/sets/a/b"));
        assert!(!needs_origin_check(&Method::GET, "/login"));
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.append(
                HeaderName::from_static(name),
                HeaderValue::from_static(value),
            );
        }
        h
    }

    #[test]
    fn a_request_needs_exactly_one_allowed_host() {
        let uri: Uri = "/".parse().expect("uri");
        assert!(request_host_allowed(
            &headers(&[("host", "localhost:9")]),
            &uri,
            9
        ));
        assert!(!request_host_allowed(&headers(&[]), &uri, 9));
        assert!(!request_host_allowed(
            &headers(&[("host", "localhost:9"), ("host", "evil:9")]),
            &uri,
            9
        ));
        assert!(!request_host_allowed(
            &headers(&[("host", "evil.example:9")]),
            &uri,
            9
        ));
        // An absolute request-target must name this server too.
        let absolute: Uri = "http://evil.example:9/".parse().expect("uri");
        assert!(!request_host_allowed(
            &headers(&[("host", "localhost:9")]),
            &absolute,
            9
        ));
        let own: Uri = "http://127.0.0.1:9/".parse().expect("uri");
        assert!(request_host_allowed(
            &headers(&[("host", "localhost:9")]),
            &own,
            9
        ));
    }

    #[test]
    fn origin_and_fetch_site_are_each_absent_or_allowed() {
        assert!(request_origin_allowed(&headers(&[]), 9));
        assert!(request_origin_allowed(
            &headers(&[
                ("origin", "http://127.0.0.1:9"),
                ("sec-fetch-site", "same-origin")
            ]),
            9
        ));
        assert!(request_origin_allowed(
            &headers(&[("sec-fetch-site", "same-origin")]),
            9
        ));
        assert!(request_origin_allowed(
            &headers(&[("origin", "http://localhost:9")]),
            9
        ));
        for refused in [
            headers(&[("origin", "http://127.0.0.1:10")]),
            headers(&[("origin", "null")]),
            headers(&[("sec-fetch-site", "same-site")]),
            headers(&[("sec-fetch-site", "cross-site")]),
            headers(&[("sec-fetch-site", "none")]),
            headers(&[
                ("origin", "http://127.0.0.1:9"),
                ("sec-fetch-site", "cross-site"),
            ]),
            headers(&[
                ("origin", "http://127.0.0.1:9"),
                ("origin", "http://127.0.0.1:9"),
            ]),
        ] {
            assert!(!request_origin_allowed(&refused, 9), "{refused:?}");
        }
    }

    #[test]
    fn every_answer_carries_the_security_headers_and_no_store_but_assets() {
        let page = secure(Response::new(axum::body::Body::empty()));
        for (name, value) in SECURITY_HEADERS {
            assert_eq!(page.headers()[name], value, "{name}");
        }
        assert_eq!(page.headers()["cache-control"], "no-store");
        assert!(
            page.headers()
                .keys()
                .all(|k| !k.as_str().starts_with("access-control-")),
            "no CORS header"
        );
        // An answer that chose its own caching (the SSE stream's no-cache) gets no-store too.
        let mut stream = Response::new(axum::body::Body::empty());
        stream
            .headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        assert_eq!(secure(stream).headers()["cache-control"], "no-store");
        let mut asset = Response::new(axum::body::Body::empty());
        asset.headers_mut().insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static("public, max-age=31536000, immutable"),
        );
        asset.extensions_mut().insert(Immutable);
        let asset = secure(asset);
        assert_eq!(
            asset.headers()["cache-control"],
            "public, max-age=31536000, immutable"
        );
        assert_eq!(asset.headers()["content-security-policy"], CSP);
    }
}
