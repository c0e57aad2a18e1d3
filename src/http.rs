//! The operator's HTTP endpoints: `/livez` (process up), `/readyz` (every cache synced and a
//! config decision possible), `/metrics` (Prometheus).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::metrics::SharedMetrics;

/// Readiness is set once the caches have synced; it never goes back, since a re-list keeps the
/// old cache serving.
#[derive(Clone, Default)]
pub struct Readiness(Arc<AtomicBool>);

impl Readiness {
    pub fn set_ready(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
    pub fn is_ready(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

#[derive(Clone)]
struct AppState {
    ready: Readiness,
    metrics: SharedMetrics,
}

/// Serves on an already bound listener until `shutdown` resolves.
pub async fn serve_on(
    listener: tokio::net::TcpListener,
    ready: Readiness,
    metrics: SharedMetrics,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/livez", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_handler))
        .with_state(AppState { ready, metrics });
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "serving /livez, /readyz and /metrics");
    }
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}

async fn readyz(State(s): State<AppState>) -> impl IntoResponse {
    if s.ready.is_ready() {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "caches not synced")
    }
}

async fn metrics_handler(State(s): State<AppState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        s.metrics.encode(),
    )
}
