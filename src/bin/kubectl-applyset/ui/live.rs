//! The live stream (`/live`, server-sent events): the cache's changes, filtered for the page
//! that listens.

use axum::{extract::State, response::Response};

use super::AppState;

pub async fn stream(State(app): State<AppState>) -> Response {
    let _ = app;
    todo!("live")
}
