//! The one-time token and the sessions. `kubectl applyset ui` prints a URL carrying a token
//! (32 random bytes, URL-safe base64 without padding); the first `GET /login?token=…` with it
//! burns it and answers 200 with a session cookie `applyset-ui-PORT=<32 other random bytes>;
//! HttpOnly; SameSite=Strict; Path=/` and a page that moves on to `/` by a meta refresh (not a
//! redirect: a SameSite=Strict cookie is not sent along a redirect chain a cross-site
//! navigation started, such as the `--open` file's). Every other use of the token, a wrong or a
//! missing one, is 403. Every route but `/login` and `/assets/…` needs a live session's
//! cookie, else 401 with a page saying what to open.
//!
//! Only SHA-256 digests of the token and of the session ids are kept, and offered values are
//! compared by their digests: the time a comparison takes tells nothing about the secret.

use std::collections::HashSet;

use askama::Template;
use axum::{
    extract::{Query, Request, State},
    http::StatusCode,
    middleware::Next,
    response::{IntoResponse, Response},
};
use axum_extra::extract::cookie::{Cookie, CookieJar, SameSite};
use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use parking_lot::Mutex;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use tokio::sync::Notify;

use super::{AppState, assets, message};

/// A secret's SHA-256.
type Digest32 = [u8; 32];

fn digest(secret: &str) -> Digest32 {
    Sha256::digest(secret.as_bytes()).into()
}

/// 32 random bytes of the operating system, in URL-safe base64 without padding (43
/// characters): a token or a session id.
pub fn random_secret() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    Ok(URL_SAFE_NO_PAD.encode(bytes))
}

/// The token not yet used and the live sessions of one ui.
pub struct Sessions {
    /// `applyset-ui-PORT`: two uis on two ports keep their own cookies.
    cookie: String,
    /// The unused token's digest; `None` once used.
    token: Mutex<Option<Digest32>>,
    /// The digests of the session ids handed out.
    ids: Mutex<HashSet<Digest32>>,
    /// Notified once the token was used (the `--open` file is then removed).
    pub logged_in: Notify,
}

impl Sessions {
    /// The sessions of the ui on `port`, whose one-time token is `token`.
    pub fn new(port: u16, token: &str) -> Sessions {
        Sessions {
            cookie: format!("applyset-ui-{port}"),
            token: Mutex::new(Some(digest(token))),
            ids: Mutex::new(HashSet::new()),
            logged_in: Notify::new(),
        }
    }

    /// The session cookie's name.
    pub fn cookie_name(&self) -> &str {
        &self.cookie
    }

    /// Exchanges the token: when `offered` is the unused token, burns it and returns a new
    /// session id; else `None`. An error of the randomness leaves the token unused.
    pub fn redeem(&self, offered: &str) -> Result<Option<String>, getrandom::Error> {
        let offered = digest(offered);
        let session = random_secret()?;
        let mut token = self.token.lock();
        if *token != Some(offered) {
            return Ok(None);
        }
        *token = None;
        drop(token);
        self.ids.lock().insert(digest(&session));
        self.logged_in.notify_one();
        Ok(Some(session))
    }

    /// Whether `session` is a session id handed out.
    pub fn valid(&self, session: &str) -> bool {
        self.ids.lock().contains(&digest(session))
    }

    /// Whether the request's cookies carry a live session.
    pub fn signed_in(&self, jar: &CookieJar) -> bool {
        jar.get(self.cookie_name())
            .is_some_and(|c| self.valid(c.value()))
    }

    /// The `Set-Cookie` of a new session.
    pub fn cookie(&self, session: String) -> Cookie<'static> {
        Cookie::build((self.cookie.clone(), session))
            .path("/")
            .http_only(true)
            .same_site(SameSite::Strict)
            .build()
    }
}

/// `/login`'s query.
#[derive(Deserialize)]
pub struct LoginQuery {
    #[serde(default)]
    token: String,
}

/// The page after a good login: moves on to `/` (a same-origin navigation, so the Strict
/// cookie goes along).
#[derive(Template)]
#[template(path = "login.html")]
struct LoginPage {
    css: &'static str,
}

/// `GET /login?token=T`.
pub async fn login(
    State(app): State<AppState>,
    Query(query): Query<LoginQuery>,
    jar: CookieJar,
) -> Response {
    match app.sessions.redeem(&query.token) {
        Ok(Some(session)) => {
            let page = super::html(&LoginPage {
                css: assets::CSS_PATH.as_str(),
            });
            (jar.add(app.sessions.cookie(session)), page).into_response()
        }
        Ok(None) => message(
            StatusCode::FORBIDDEN,
            "Link used or wrong",
            "This sign-in link was used already, or is not the one printed. Its token works once: restart kubectl applyset ui and open the URL it prints.",
        ),
        Err(e) => message(
            StatusCode::INTERNAL_SERVER_ERROR,
            "No session",
            &format!("No random session id could be made: {e}"),
        ),
    }
}

/// Whether `path` is served without a session.
pub fn open_path(path: &str) -> bool {
    path == "/login" || path.starts_with("/assets/")
}

/// The middleware that requires a session on every route but `/login` and `/assets/…`.
pub async fn require(
    State(app): State<AppState>,
    jar: CookieJar,
    request: Request,
    next: Next,
) -> Response {
    if open_path(request.uri().path()) || app.sessions.signed_in(&jar) {
        return next.run(request).await;
    }
    message(
        StatusCode::UNAUTHORIZED,
        "Not signed in",
        "Not signed in: open the URL printed by kubectl applyset ui (its token works once; restart the ui for a new one).",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_43_url_safe_characters_and_differ() {
        let a = random_secret().expect("random");
        let b = random_secret().expect("random");
        assert_eq!(a.len(), 43);
        assert!(
            a.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'),
            "{a}"
        );
        assert_ne!(a, b);
    }

    #[test]
    fn the_token_works_once_and_gives_a_session() {
        let s = Sessions::new(8080, "the-token");
        assert_eq!(s.redeem("wrong").expect("random"), None);
        assert_eq!(s.redeem("").expect("random"), None);
        assert_eq!(s.redeem("the-token ").expect("random"), None);
        let session = s.redeem("the-token").expect("random").expect("session");
        assert_eq!(session.len(), 43);
        assert_ne!(session, "the-token");
        assert!(s.valid(&session));
        assert!(!s.valid("the-token"));
        assert!(!s.valid(""));
        // One time only.
        assert_eq!(s.redeem("the-token").expect("random"), None);
        assert!(s.valid(&session));
    }

    #[test]
    fn the_cookie_is_named_by_the_port_http_only_and_strict() {
        let s = Sessions::new(8080, "t");
        assert_eq!(s.cookie_name(), "applyset-ui-8080");
        let text = s.cookie("SESSION".into()).to_string();
        let mut parts: Vec<&str> = text.split("; ").collect();
        assert_eq!(parts.remove(0), "applyset-ui-8080=SESSION");
        parts.sort_unstable();
        assert_eq!(parts, ["HttpOnly", "Path=/", "SameSite=Strict"]);
    }

    #[test]
    fn a_jar_signs_in_only_with_a_live_session_under_the_ports_name() {
        let s = Sessions::new(8080, "t");
        let session = s.redeem("t").expect("random").expect("session");
        let jar = CookieJar::new().add(Cookie::new("applyset-ui-8080", session.clone()));
        assert!(s.signed_in(&jar));
        let other_port = CookieJar::new().add(Cookie::new("applyset-ui-8081", session));
        assert!(!s.signed_in(&other_port));
        let forged = CookieJar::new().add(Cookie::new("applyset-ui-8080", "forged"));
        assert!(!s.signed_in(&forged));
        assert!(!s.signed_in(&CookieJar::new()));
    }

    #[test]
    fn only_login_and_assets_go_without_a_session() {
        assert!(open_path("/login"));
        assert!(open_path("/assets/0123456789ab/app.js"));
        for closed in [
            "/",
            "/readyz",
            "/live",
            "/login/",
            "/loginx",
            "/assets",
            "/sets/a/b",
        ] {
            assert!(!open_path(closed), "{closed}");
        }
    }
}
