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
mod set_page;
mod sets_page;

use std::sync::Arc;

use applyset_operator::view::SetCache;
use askama::Template;
use axum::{
    Router,
    http::StatusCode,
    response::{Html, IntoResponse, Response},
    routing::{get, post},
};
use kube::Client;

use crate::{Global, error::CliError};

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
        let w = self.cache.watched();
        let mut watched = match &w.namespaces {
            None => "ApplySets of every namespace".to_string(),
            Some(ns) => format!("ApplySets of namespaces {}", ns.join(", ")),
        };
        if w.cluster_sets {
            watched.push_str(" and ClusterApplySets");
        }
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
        .route("/sets/{namespace}/{name}/diff", get(set_page::applyset_diff))
        .route("/clustersets/{name}/diff", get(set_page::clusterset_diff))
        .route("/sets/{namespace}/{name}/{action}", post(actions::applyset))
        .route("/clustersets/{name}/{action}", post(actions::clusterset))
        .with_state(app)
}

/// Serves the view until Ctrl-C.
pub async fn run(g: &Global, args: &UiArgs) -> Result<u8, CliError> {
    let _ = (g, args);
    todo!("ui::run")
}
