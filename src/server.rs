//! The HTTP endpoints of the process: `/metrics` (Prometheus text) on the metrics address,
//! `/healthz` and `/readyz` on the health address.
//!
//! `/readyz` answers 200 once the process can do its job: as the leader (or without leader
//! election) when the caches of both controllers have synced; as a standby replica at once,
//! since standing by is its job. Before that it answers 503 saying what it waits for.

use std::{net::SocketAddr, sync::Arc};

use axum::{Router, extract::State, http::StatusCode, response::IntoResponse, routing::get};
use parking_lot::RwLock;
use tokio::net::TcpListener;

use crate::{controller::Readiness, metrics::Metrics};

/// What the process is doing, for `/readyz`.
#[derive(Clone, Default)]
pub enum Phase {
    /// Connecting, before leader election or the controllers start.
    #[default]
    Starting,
    /// Waiting to become the leader.
    Standby,
    /// Running the controllers.
    Running(Arc<Readiness>),
}

/// Shared, updatable process phase.
#[derive(Clone, Default)]
pub struct Health(Arc<RwLock<Phase>>);

impl Health {
    pub fn set(&self, phase: Phase) {
        *self.0.write() = phase;
    }

    /// `(ready, why)`.
    pub fn ready(&self) -> (bool, String) {
        let phase = self.0.read().clone();
        match phase {
            Phase::Starting => (false, "starting".into()),
            Phase::Standby => (true, "standby: waiting for leadership".into()),
            Phase::Running(r) => match r.waiting_for() {
                None => (true, "ok".into()),
                Some(what) => (false, format!("waiting for the caches of {what} to sync")),
            },
        }
    }
}

async fn readyz(State(health): State<Health>) -> impl IntoResponse {
    let (ready, why) = health.ready();
    let code = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, why)
}

async fn metrics(State(metrics): State<Arc<Metrics>>) -> impl IntoResponse {
    (
        [("content-type", "text/plain; version=0.0.4; charset=utf-8")],
        metrics.encode(),
    )
}

/// Binds the health endpoints; returns the bound address and the server future.
pub async fn health_server(
    addr: &str,
    health: Health,
) -> std::io::Result<(
    SocketAddr,
    impl Future<Output = std::io::Result<()>> + use<>,
)> {
    let app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(health);
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    Ok((bound, async move { axum::serve(listener, app).await }))
}

/// Binds `/metrics`; returns the bound address and the server future.
pub async fn metrics_server(
    addr: &str,
    m: Arc<Metrics>,
) -> std::io::Result<(
    SocketAddr,
    impl Future<Output = std::io::Result<()>> + use<>,
)> {
    let app = Router::new().route("/metrics", get(metrics)).with_state(m);
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    Ok((bound, async move { axum::serve(listener, app).await }))
}
