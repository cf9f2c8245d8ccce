//! The ui's routes behind their guards, as one service (no cluster: a cache that watches
//! nothing is ready and empty): the order of the layers (Host before everything, the session
//! after it, the security headers on every answer) and what each refusal says.

use std::sync::Arc;

use applyset_operator::view::{SetCache, Watched};
use axum::{
    Router,
    body::Body,
    http::{Request, StatusCode, header},
    response::Response,
};
use kube::Client;
use tower::ServiceExt as _;

use super::{App, AppState, auth, guard, service};
use crate::Global;

const PORT: u16 = 4242;
const TOKEN: &str = "the-one-time-token";

fn app(allow_actions: bool) -> AppState {
    applyset_operator::sources::install_crypto_provider();
    let config = kube::Config::new("http://127.0.0.1:9".parse().expect("url"));
    let client = Client::try_from(config).expect("client");
    let cache = SetCache::start(
        client.clone(),
        Watched {
            namespaces: Some(Vec::new()),
            cluster_sets: false,
        },
    );
    Arc::new(App {
        client,
        cache,
        allow_actions,
        global: Global::default(),
        port: PORT,
        sessions: auth::Sessions::new(PORT, TOKEN),
    })
}

fn get(path: &str) -> http::request::Builder {
    Request::get(path).header(header::HOST, format!("127.0.0.1:{PORT}"))
}

async fn send(router: &Router, request: http::request::Builder) -> Response {
    router
        .clone()
        .oneshot(request.body(Body::empty()).expect("request"))
        .await
        .expect("answer")
}

async fn body(r: Response) -> String {
    let bytes = axum::body::to_bytes(r.into_body(), usize::MAX)
        .await
        .expect("body");
    String::from_utf8(bytes.to_vec()).expect("UTF-8")
}

fn assert_secured(r: &Response) {
    for (name, value) in guard::SECURITY_HEADERS {
        assert_eq!(r.headers()[name], value, "{name} on {:?}", r.status());
    }
    assert!(
        r.headers()
            .keys()
            .all(|k| !k.as_str().starts_with("access-control-")),
        "no CORS header"
    );
}

/// Signs in; the session cookie (`name=value`).
async fn sign_in(router: &Router) -> String {
    let r = send(router, get(&format!("/login?token={TOKEN}"))).await;
    assert_eq!(r.status(), StatusCode::OK);
    let cookie = r.headers()[header::SET_COOKIE]
        .to_str()
        .expect("ASCII")
        .to_string();
    cookie.split(';').next().expect("pair").to_string()
}

#[tokio::test]
async fn a_foreign_host_is_refused_before_the_token_is_looked_at() {
    let router = service(app(false));
    for host in ["evil.example:4242", "127.0.0.1:4243", "localhost"] {
        let r = send(
            &router,
            Request::get(format!("/login?token={TOKEN}")).header(header::HOST, host),
        )
        .await;
        assert_eq!(r.status(), StatusCode::FORBIDDEN, "{host}");
        assert_secured(&r);
        assert!(r.headers().get(header::SET_COOKIE).is_none());
    }
    // The token still works: the refusals did not burn it.
    let r = send(
        &router,
        Request::get(format!("/login?token={TOKEN}")).header(header::HOST, "LOCALHOST:4242"),
    )
    .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_secured(&r);
    assert_eq!(r.headers()[header::CACHE_CONTROL], "no-store");
    let page = body(r).await;
    assert!(
        page.contains(r#"<meta http-equiv="refresh" content="0;url=/">"#),
        "{page}"
    );
    assert!(page.contains(r#"<a href="/">"#), "{page}");
    // Assets too are refused to a foreign host.
    let r = send(
        &router,
        Request::get(super::assets::JS_PATH.as_str()).header(header::HOST, "evil.example:4242"),
    )
    .await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn the_token_works_once_and_the_session_opens_every_page() {
    let router = service(app(false));
    let r = send(&router, get("/")).await;
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert_secured(&r);
    assert!(
        body(r)
            .await
            .contains("open the URL printed by kubectl applyset ui")
    );
    for wrong in ["/login", "/login?token=", "/login?token=nope"] {
        assert_eq!(
            send(&router, get(wrong)).await.status(),
            StatusCode::FORBIDDEN
        );
    }
    let cookie = sign_in(&router).await;
    assert!(cookie.starts_with("applyset-ui-4242="), "{cookie}");
    let again = send(&router, get(&format!("/login?token={TOKEN}"))).await;
    assert_eq!(again.status(), StatusCode::FORBIDDEN);
    assert!(again.headers().get(header::SET_COOKIE).is_none());

    let r = send(&router, get("/").header(header::COOKIE, &cookie)).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_secured(&r);
    assert_eq!(r.headers()[header::CACHE_CONTROL], "no-store");
    let page = body(r).await;
    assert!(
        page.contains(r#"<tbody id="sets-body" data-live>"#),
        "{page}"
    );
    assert!(page.contains("No sets found"), "{page}");
    let r = send(&router, get("/readyz").header(header::COOKIE, &cookie)).await;
    assert_eq!(body(r).await, "ready 0\n");
    // Unknown pages: 404 signed in, 401 not.
    let r = send(&router, get("/nothing").header(header::COOKIE, &cookie)).await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert_secured(&r);
    assert_eq!(
        send(&router, get("/nothing")).await.status(),
        StatusCode::UNAUTHORIZED
    );
    // A forged session, or the right value under another port's name: 401.
    for forged in [
        "applyset-ui-4242=forged".to_string(),
        cookie.replace("applyset-ui-4242", "applyset-ui-4243"),
    ] {
        let r = send(&router, get("/").header(header::COOKIE, forged)).await;
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    }
}

#[tokio::test]
async fn assets_need_no_session_and_are_immutable() {
    let router = service(app(false));
    let r = send(&router, get(super::assets::CSS_PATH.as_str())).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_secured(&r);
    assert_eq!(
        r.headers()[header::CACHE_CONTROL],
        "public, max-age=31536000, immutable"
    );
    assert_eq!(r.headers()[header::CONTENT_TYPE], "text/css; charset=utf-8");
    let r = send(&router, get("/assets/000000000000/app.css")).await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert_eq!(r.headers()[header::CACHE_CONTROL], "no-store");
}

#[tokio::test]
async fn the_live_stream_and_actions_need_our_own_origin() {
    let router = service(app(false));
    let cookie = sign_in(&router).await;
    let live = || get("/live?page=sets").header(header::COOKIE, &cookie);
    for (name, value) in [
        ("origin", "http://evil.example"),
        ("origin", "http://127.0.0.1:4243"),
        ("origin", "null"),
        ("sec-fetch-site", "cross-site"),
        ("sec-fetch-site", "same-site"),
    ] {
        let r = send(&router, live().header(name, value)).await;
        assert_eq!(r.status(), StatusCode::FORBIDDEN, "{name}: {value}");
        assert_secured(&r);
    }
    let r = send(
        &router,
        live()
            .header("origin", "http://127.0.0.1:4242")
            .header("sec-fetch-site", "same-origin"),
    )
    .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()[header::CONTENT_TYPE], "text/event-stream");
    assert_eq!(r.headers()[header::CACHE_CONTROL], "no-store");
    assert_secured(&r);
    let r = send(&router, get("/live").header(header::COOKIE, &cookie)).await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);

    // Actions: a foreign origin is refused before anything; without --allow-actions, 404.
    let post = || {
        Request::post("/sets/team/web/reconcile")
            .header(header::HOST, format!("127.0.0.1:{PORT}"))
            .header(header::COOKIE, &cookie)
    };
    let r = send(&router, post().header("origin", "http://evil.example")).await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let r = send(&router, post().header("origin", "http://localhost:4242")).await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert_secured(&r);
    // Without a session, an action is 401 even from our own origin.
    let r = send(
        &router,
        Request::post("/sets/team/web/reconcile").header(header::HOST, format!("127.0.0.1:{PORT}")),
    )
    .await;
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn with_actions_an_unknown_action_is_404_and_an_api_failure_is_shown() {
    let router = service(app(true));
    let cookie = sign_in(&router).await;
    let post = |path: &str| {
        Request::post(path)
            .header(header::HOST, format!("127.0.0.1:{PORT}"))
            .header(header::COOKIE, &cookie)
    };
    let r = send(&router, post("/sets/team/web/delete")).await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    // No API server behind this client: the failure is said, not a success.
    let r = send(&router, post("/clustersets/infra/suspend")).await;
    assert_eq!(r.status(), StatusCode::BAD_GATEWAY);
    assert!(
        body(r)
            .await
            .contains(r#"<p id="message" class="refused">failed: "#)
    );
}
