//! The sets page (`/`): every watched set with its state, filtered, sorted and paged, and the
//! summary bar; `/readyz` says whether the cache has listed.

use axum::{extract::State, response::Response};

use super::AppState;

pub async fn page(State(app): State<AppState>) -> Response {
    let _ = app;
    todo!("sets page")
}

pub async fn readyz(State(app): State<AppState>) -> Response {
    let _ = app;
    todo!("readyz")
}
