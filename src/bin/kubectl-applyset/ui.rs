//! `kubectl applyset ui`: a live, read-only web view of every set the user may list, served on
//! 127.0.0.1 with the user's own kubeconfig and identity. The data comes from the library
//! ([`applyset_operator::view`]: one watch per kind shared by every viewer, events, the
//! dependsOn index and graph layout; the engine for members and the diff); this module only
//! serves and presents it.
//!
//! Security (see docs/ui.md): loopback socket only; a one-time token in the printed URL,
//! exchanged at `/login` for an HttpOnly, SameSite=Strict session cookie; a foreign `Host`
//! (DNS rebinding) refused on every route; a foreign `Origin` or a cross-site
//! `Sec-Fetch-Site` refused for actions and the live stream; a strict Content-Security-Policy
//! and `Referrer-Policy: no-referrer` on every answer; every tenant string escaped by the
//! templates.

mod actions;
mod assets;
mod auth;
mod diff;
mod guard;
mod live;
mod members;
mod open;
#[cfg(test)]
mod service_tests;
mod set_page;
mod sets_page;

use std::{
    collections::HashSet,
    io::Write as _,
    net::{Ipv4Addr, SocketAddr},
    sync::Arc,
    time::Duration,
};

use applyset_operator::{
    applyset::{ParentKind, ParentRef},
    view::{SetCache, State, Watched, access},
};
use askama::Template;
use axum::{
    Router,
    http::StatusCode,
    middleware,
    response::{Html, IntoResponse, Response},
    routing::{get, post},
};
use kube::Client;
use tokio::net::TcpListener;

use crate::{Global, conn, error::CliError};

/// `ui`'s flags.
#[derive(clap::Args, Debug, Clone)]
pub struct UiArgs {
    /// The port on 127.0.0.1 (default: a free one, printed).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Open the view in the default browser (through a private file: the token is not put on
    /// a command line).
    #[arg(long)]
    pub open: bool,
    /// Offer reconcile, suspend and resume on each set's page, done as your kubeconfig's user.
    #[arg(long)]
    pub allow_actions: bool,
    /// The namespaces to watch when you may not list ApplySets in every namespace (default:
    /// -n, else the context's namespace); comma-separated or repeated.
    #[arg(long, value_delimiter = ',', value_name = "NAMESPACE")]
    pub namespaces: Vec<String>,
}

/// What every handler shares.
pub struct App {
    /// The user's own client (their kubeconfig and identity).
    pub client: Client,
    pub cache: SetCache,
    pub allow_actions: bool,
    /// The global flags (kubeconfig, SOPS keys, kustomize binary) the diff renders with.
    pub global: Global,
    /// The port served: the only one `Host` and `Origin` may name.
    pub port: u16,
    pub sessions: auth::Sessions,
}

pub type AppState = Arc<App>;

/// What the layout of every page shows around its content (base.html).
pub struct Chrome {
    /// The asset paths (content-hashed).
    pub css: &'static str,
    pub js: &'static str,
    /// The live stream this page listens to (`/live?...`).
    pub live_src: String,
    /// What is watched, in words (`every namespace`, `namespaces a, b`).
    pub watched: String,
    pub actions: bool,
}

impl App {
    /// The chrome of a page that listens to `live_src`.
    pub fn chrome(&self, live_src: String) -> Chrome {
        let watched = watched_words(self.cache.watched());
        Chrome {
            css: assets::CSS_PATH.as_str(),
            js: assets::JS_PATH.as_str(),
            live_src,
            watched,
            actions: self.allow_actions,
        }
    }
}

/// A page's answer: the template rendered, or a 500 that says why.
pub fn html(t: &impl Template) -> Response {
    match t.render() {
        Ok(body) => Html(body).into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("rendering the page: {e}"),
        )
            .into_response(),
    }
}

/// The routes (the guard's and the session's layers wrap them in [`run`]).
pub fn routes(app: AppState) -> Router {
    Router::new()
        .route("/", get(sets_page::page))
        .route("/login", get(auth::login))
        .route("/readyz", get(sets_page::readyz))
        .route("/live", get(live::stream))
        .route("/assets/{hash}/{file}", get(assets::serve))
        .route("/sets/{namespace}/{name}", get(set_page::applyset))
        .route("/clustersets/{name}", get(set_page::clusterset))
        .route(
            "/sets/{namespace}/{name}/diff",
            get(set_page::applyset_diff),
        )
        .route("/clustersets/{name}/diff", get(set_page::clusterset_diff))
        .route("/sets/{namespace}/{name}/{action}", post(actions::applyset))
        .route("/clustersets/{name}/{action}", post(actions::clusterset))
        .with_state(app)
}

/// Why the ui could not serve.
#[derive(Debug, thiserror::Error)]
pub enum UiError {
    #[error("listening on {address}: {source}")]
    Bind {
        address: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("making the sign-in token: {0}")]
    Random(#[from] getrandom::Error),
    #[error("serving: {0}")]
    Serve(#[source] std::io::Error),
    #[error("printing the URL: {0}")]
    Print(#[source] std::io::Error),
}

/// The sets the ui watches: every namespace when the user may list and watch ApplySets
/// cluster-wide, else `--namespaces` (default: `-n`, else the context's namespace).
async fn decide_watched(g: &Global, args: &UiArgs) -> Result<(Client, Watched), CliError> {
    let c = conn::connect(g).await?;
    let fallback = if args.namespaces.is_empty() {
        vec![c.namespace.clone()]
    } else {
        args.namespaces.clone()
    };
    let watched = access::watched(&c.client, &fallback)
        .await
        .map_err(|error| CliError::Api {
            doing: "asking the API server which sets you may watch".into(),
            error,
        })?;
    Ok((c.client, watched))
}

/// What is watched, in words: `ApplySets of every namespace and ClusterApplySets`.
pub fn watched_words(w: &Watched) -> String {
    let mut words = match &w.namespaces {
        None => "ApplySets of every namespace".to_string(),
        Some(ns) => format!("ApplySets of namespaces {}", ns.join(", ")),
    };
    if w.cluster_sets {
        words.push_str(" and ClusterApplySets");
    }
    words
}

/// Resolves on Ctrl-C or SIGTERM.
async fn stopped() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

/// Prints each watch error of `cache` to stderr once, as it comes (looked at every 2 s);
/// never ends.
async fn report_errors(cache: SetCache) {
    let mut seen: HashSet<String> = HashSet::new();
    let mut tick = tokio::time::interval(Duration::from_secs(2));
    loop {
        tick.tick().await;
        for e in cache.errors() {
            if seen.insert(e.clone()) {
                eprintln!("warning: {e}");
            }
        }
    }
}

/// The routes with their guards: security headers on every answer (outermost), then the
/// `Host` allowlist and origin checks, then the session.
pub fn service(app: AppState) -> Router {
    routes(Arc::clone(&app))
        .layer(middleware::from_fn_with_state(
            Arc::clone(&app),
            auth::require,
        ))
        .layer(middleware::from_fn_with_state(app, guard::check))
        .layer(middleware::from_fn(guard::headers))
}

/// Serves the view until Ctrl-C or SIGTERM: connects as the user, decides what to watch,
/// starts the cache, listens on 127.0.0.1 (`--port`, else a free port), prints the sign-in
/// URL as the first line of stdout, opens it with `--open`, and serves.
pub async fn run(g: &Global, args: &UiArgs) -> Result<u8, CliError> {
    let (client, watched) = decide_watched(g, args).await?;
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, args.port));
    let listener = TcpListener::bind(address)
        .await
        .map_err(|source| UiError::Bind { address, source })?;
    let port = listener
        .local_addr()
        .map_err(|source| UiError::Bind { address, source })?
        .port();
    let token = auth::random_secret().map_err(UiError::from)?;
    let cache = SetCache::start(client.clone(), watched.clone());
    let app = Arc::new(App {
        client,
        cache,
        allow_actions: args.allow_actions,
        global: g.clone(),
        port,
        sessions: auth::Sessions::new(port, &token),
    });
    let url = format!("http://127.0.0.1:{port}/login?token={token}");
    let mut out = std::io::stdout().lock();
    writeln!(out, "kubectl applyset ui: {url}")
        .and_then(|()| out.flush())
        .map_err(UiError::Print)?;
    drop(out);
    eprintln!("watching {}", watched_words(&watched));
    if args.allow_actions {
        eprintln!(
            "actions (reconcile, suspend, resume) are offered, done as your kubeconfig's user"
        );
    }
    if args.open
        && let Err(e) = open::open(&app, &url)
    {
        eprintln!("warning: could not open a browser ({e}); open the URL above");
    }
    let errors = report_errors(app.cache.clone());
    let served = axum::serve(listener, service(app));
    tokio::select! {
        r = served => r.map_err(UiError::Serve)?,
        () = errors => {}
        () = stopped() => {}
    }
    Ok(0)
}

/// A set's KEY in the ui's URLs, ids and live events (`namespace/name`, `cluster/name`), and
/// the set a KEY names: the view library's.
pub use applyset_operator::view::summary::{from_key as parse_key, key};

/// A KEY as an element id's part: `/` as `--` (`team-a--web`, `cluster--infra`).
pub fn key_id(k: &str) -> String {
    k.replace('/', "--")
}

/// The page of a set: `/sets/NAMESPACE/NAME` or `/clustersets/NAME`.
pub fn set_href(parent: &ParentRef) -> String {
    match parent.kind {
        ParentKind::ApplySet => format!(
            "/sets/{}/{}",
            parent.namespace.as_deref().unwrap_or(""),
            parent.name
        ),
        ParentKind::ClusterApplySet => format!("/clustersets/{}", parent.name),
    }
}

/// A state's word: `Ready`, `Failing`, `Waiting`, `Suspended`, `Reconciling`, `Deleting`.
pub fn word(state: State) -> &'static str {
    match state {
        State::Ready => "Ready",
        State::Failing => "Failing",
        State::Waiting => "Waiting",
        State::Suspended => "Suspended",
        State::Reconciling => "Reconciling",
        State::Deleting => "Deleting",
    }
}

/// The live stream of a set's page: `/live?set=KEY`, the KEY query-encoded.
pub fn live_src(parent: &ParentRef) -> String {
    let query: String = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("set", &key(parent))
        .finish();
    format!("/live?{query}")
}

/// A small page that says one thing (a refusal, an action's outcome, a missing page): its
/// text is in `#message`.
#[derive(Template)]
#[template(path = "message.html")]
struct MessagePage<'a> {
    css: &'static str,
    title: &'a str,
    text: &'a str,
    ok: bool,
}

/// A [`MessagePage`] answered with `status`.
pub fn message(status: StatusCode, title: &str, text: &str) -> Response {
    let page = MessagePage {
        css: assets::CSS_PATH.as_str(),
        title,
        text,
        ok: status.is_success(),
    };
    (status, html(&page)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_name_sets_both_ways() {
        let web = ParentRef::applyset("team-a", "web");
        let infra = ParentRef::cluster("infra");
        assert_eq!(key(&web), "team-a/web");
        assert_eq!(key(&infra), "cluster/infra");
        assert_eq!(parse_key("team-a/web"), Some(web.clone()));
        assert_eq!(parse_key("cluster/infra"), Some(infra.clone()));
        for bad in ["", "web", "/web", "team/", "a/b/c"] {
            assert_eq!(parse_key(bad), None, "{bad}");
        }
        assert_eq!(key_id(&key(&web)), "team-a--web");
        assert_eq!(key_id(&key(&infra)), "cluster--infra");
        assert_eq!(set_href(&web), "/sets/team-a/web");
        assert_eq!(set_href(&infra), "/clustersets/infra");
        assert_eq!(live_src(&web), "/live?set=team-a%2Fweb");
        assert_eq!(live_src(&infra), "/live?set=cluster%2Finfra");
        assert_eq!(word(State::Failing), "Failing");
    }

    #[test]
    fn watched_in_words() {
        let all = Watched {
            namespaces: None,
            cluster_sets: true,
        };
        assert_eq!(
            watched_words(&all),
            "ApplySets of every namespace and ClusterApplySets"
        );
        let some = Watched {
            namespaces: Some(vec!["a".into(), "b".into()]),
            cluster_sets: false,
        };
        assert_eq!(watched_words(&some), "ApplySets of namespaces a, b");
    }

    #[tokio::test]
    async fn a_message_page_has_its_status_and_escapes_its_text() {
        let r = message(
            StatusCode::FORBIDDEN,
            "Refused",
            "refused: <script>x</script>",
        );
        assert_eq!(r.status(), StatusCode::FORBIDDEN);
        let body = axum::body::to_bytes(r.into_body(), usize::MAX)
            .await
            .expect("body");
        let body = String::from_utf8(body.to_vec()).expect("UTF-8");
        assert!(
            body.contains(
                r#"<p id="message" class="refused">refused: &#60;script&#62;x&#60;/script&#62;</p>"#
            ),
            "{body}"
        );
        let r = message(StatusCode::OK, "Done", "Suspended ApplySet a/b");
        let body = axum::body::to_bytes(r.into_body(), usize::MAX)
            .await
            .expect("body");
        let body = String::from_utf8(body.to_vec()).expect("UTF-8");
        assert!(
            body.contains(r#"<p id="message" class="ok">Suspended ApplySet a/b</p>"#),
            "{body}"
        );
    }
}
