//! The page assets (`app.js`, `app.css`), embedded in the binary and served at
//! `/assets/<first 12 hex digits of their SHA-256>/<file>` with
//! `Cache-Control: public, max-age=31536000, immutable`: a new binary with other assets serves
//! them under another path, so a browser never keeps a stale one. Anything else under
//! `/assets/` is 404. No session is needed for them (they hold no data).

use std::sync::LazyLock;

use axum::{
    extract::Path,
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use sha2::{Digest, Sha256};

/// Marks an answer whose `Cache-Control` the security headers keep (see `guard::secure`).
#[derive(Clone, Copy, Debug)]
pub struct Immutable;

/// The caching of an asset.
pub const ASSET_CACHE_CONTROL: &str = "public, max-age=31536000, immutable";

/// One embedded asset: its file name, content type and bytes.
struct Asset {
    file: &'static str,
    content_type: &'static str,
    body: &'static str,
}

const JS: Asset = Asset {
    file: "app.js",
    content_type: "text/javascript; charset=utf-8",
    body: include_str!("assets/app.js"),
};

const CSS: Asset = Asset {
    file: "app.css",
    content_type: "text/css; charset=utf-8",
    body: include_str!("assets/app.css"),
};

/// The first 12 hex digits of the SHA-256 of `body`.
fn hash(body: &str) -> String {
    let mut digits = hex::encode(Sha256::digest(body.as_bytes()));
    digits.truncate(12);
    digits
}

/// The path of `asset`.
fn path(asset: &Asset) -> String {
    format!("/assets/{}/{}", hash(asset.body), asset.file)
}

pub static CSS_PATH: LazyLock<String> = LazyLock::new(|| path(&CSS));
pub static JS_PATH: LazyLock<String> = LazyLock::new(|| path(&JS));

/// The asset at `/assets/{hash}/{file}`, if that is one's path.
fn find(hash: &str, file: &str) -> Option<&'static Asset> {
    let wanted = format!("/assets/{hash}/{file}");
    [(&*JS_PATH, &JS), (&*CSS_PATH, &CSS)]
        .into_iter()
        .find(|(p, _)| **p == wanted)
        .map(|(_, a)| a)
}

/// `GET /assets/{hash}/{file}`.
pub async fn serve(Path((hash, file)): Path<(String, String)>) -> Response {
    let Some(asset) = find(&hash, &file) else {
        return (StatusCode::NOT_FOUND, "no such asset").into_response();
    };
    let mut response = asset.body.into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(asset.content_type),
    );
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(ASSET_CACHE_CONTROL),
    );
    response.extensions_mut().insert(Immutable);
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assets_are_served_at_their_hash_only() {
        let js = JS_PATH.as_str();
        let hash = &js["/assets/".len().."/assets/".len() + 12];
        assert!(hash.chars().all(|c| c.is_ascii_hexdigit()), "{js}");
        assert_eq!(js, format!("/assets/{hash}/app.js"));
        assert!(find(hash, "app.js").is_some());
        assert!(find(hash, "app.css").is_none() || CSS_PATH.contains(hash));
        assert!(find("000000000000", "app.js").is_none());
        assert!(find(hash, "other.js").is_none());
        assert!(find(hash, "../app.js").is_none());
        assert_ne!(JS_PATH.as_str(), CSS_PATH.as_str());
    }

    #[tokio::test]
    async fn an_asset_has_its_type_and_is_immutable() {
        let js = JS_PATH.as_str();
        let hash = js["/assets/".len().."/assets/".len() + 12].to_string();
        let r = serve(Path((hash.clone(), "app.js".into()))).await;
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(
            r.headers()["content-type"],
            "text/javascript; charset=utf-8"
        );
        assert_eq!(r.headers()["cache-control"], ASSET_CACHE_CONTROL);
        assert!(r.extensions().get::<Immutable>().is_some());
        let css = CSS_PATH.as_str();
        let css_hash = css["/assets/".len().."/assets/".len() + 12].to_string();
        let r = serve(Path((css_hash, "app.css".into()))).await;
        assert_eq!(r.headers()["content-type"], "text/css; charset=utf-8");
        let r = serve(Path((hash, "nope.css".into()))).await;
        assert_eq!(r.status(), StatusCode::NOT_FOUND);
        assert!(r.extensions().get::<Immutable>().is_none());
    }
}
