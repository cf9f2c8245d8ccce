//! Reconcile now, suspend and resume (`--allow-actions` only), done as the user: the plugin's
//! own verbs; a refusal of the API server is shown as such.

use axum::{
    extract::{Path, State},
    response::Response,
};

use super::AppState;

pub async fn applyset(
    State(app): State<AppState>,
    Path((namespace, name, action)): Path<(String, String, String)>,
) -> Response {
    let _ = (app, namespace, name, action);
    todo!("action")
}

pub async fn clusterset(
    State(app): State<AppState>,
    Path((name, action)): Path<(String, String)>,
) -> Response {
    let _ = (app, name, action);
    todo!("cluster action")
}
