//! A set's page: its state, conditions, source, last plan, member tree, dependsOn graph,
//! events and (when the user may) the live diff.

use axum::{
    extract::{Path, State},
    response::Response,
};

use super::AppState;

pub async fn applyset(
    State(app): State<AppState>,
    Path((namespace, name)): Path<(String, String)>,
) -> Response {
    let _ = (app, namespace, name);
    todo!("set page")
}

pub async fn clusterset(State(app): State<AppState>, Path(name): Path<String>) -> Response {
    let _ = (app, name);
    todo!("cluster set page")
}

pub async fn applyset_diff(
    State(app): State<AppState>,
    Path((namespace, name)): Path<(String, String)>,
) -> Response {
    let _ = (app, namespace, name);
    todo!("diff")
}

pub async fn clusterset_diff(State(app): State<AppState>, Path(name): Path<String>) -> Response {
    let _ = (app, name);
    todo!("cluster set diff")
}
