//! The one-time token and the session cookie.

use axum::{extract::State, response::Response};

use super::AppState;

/// The live sessions (ids handed out by `/login`).
#[derive(Default)]
pub struct Sessions {}

pub async fn login(State(app): State<AppState>) -> Response {
    let _ = app;
    todo!("login")
}
