//! The page assets, embedded in the binary and served under a path carrying their hash.

use std::sync::LazyLock;

use axum::{extract::Path, response::Response};

pub static CSS_PATH: LazyLock<String> = LazyLock::new(|| "/assets/0/app.css".to_string());
pub static JS_PATH: LazyLock<String> = LazyLock::new(|| "/assets/0/app.js".to_string());

pub async fn serve(Path((hash, file)): Path<(String, String)>) -> Response {
    let _ = (hash, file);
    todo!("assets")
}
