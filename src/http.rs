//! The operator's plain HTTP endpoints: `/livez` (the controller makes progress), `/readyz`
//! (every cache synced), `/metrics` (Prometheus) only when it is not served securely
//! (`secure_metrics`), and the health state behind the first two.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::metrics::SharedMetrics;

/// No heartbeat for this long: the runtime or the ledger's lock is stuck.
pub const STALE_HEARTBEAT: Duration = Duration::from_secs(30);
/// A reconcile running this long has outlived its own timeout twice over: its task is wedged.
pub const STUCK_RECONCILE: Duration = Duration::from_secs(120);

/// What `/livez` judges: the last heartbeat and the reconciles in progress.
#[derive(Debug, Default)]
pub struct Pulse {
    last_beat: Option<Instant>,
    running: HashMap<u64, (String, Instant)>,
    next: u64,
}

impl Pulse {
    /// `Ok` while the controller makes progress, else what is stuck.
    pub fn verdict(&self, now: Instant) -> Result<(), String> {
        if let Some(beat) = self.last_beat {
            let quiet = now.saturating_duration_since(beat);
            if quiet > STALE_HEARTBEAT {
                return Err(format!(
                    "no heartbeat for {}s: the runtime or the inventory lock is stuck",
                    quiet.as_secs()
                ));
            }
        }
        let oldest = self.running.values().min_by_key(|(_, t)| *t);
        if let Some((what, started)) = oldest {
            let age = now.saturating_duration_since(*started);
            if age > STUCK_RECONCILE {
                return Err(format!(
                    "reconcile of {what} running for {}s",
                    age.as_secs()
                ));
            }
        }
        Ok(())
    }
}

/// Readiness and liveness of one operator process. Readiness is set once the caches have
/// synced; it never goes back, since a re-list keeps the old index serving.
#[derive(Clone, Default)]
pub struct Health(Arc<Inner>);

#[derive(Default)]
struct Inner {
    ready: AtomicBool,
    pulse: Mutex<Pulse>,
}

/// The name `Handle` has always used for it.
pub type Readiness = Health;

/// Removes a reconcile from the pulse when it ends, however it ends.
pub struct Running {
    health: Health,
    id: u64,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.health.pulse().running.remove(&self.id);
    }
}

impl Health {
    pub fn set_ready(&self) {
        self.0.ready.store(true, Ordering::SeqCst);
    }
    pub fn is_ready(&self) -> bool {
        self.0.ready.load(Ordering::SeqCst)
    }

    fn pulse(&self) -> std::sync::MutexGuard<'_, Pulse> {
        self.0.pulse.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The controller is alive at `now`.
    pub fn beat(&self, now: Instant) {
        self.pulse().last_beat = Some(now);
    }

    /// A reconcile of `what` starts; it counts as running until the guard drops.
    pub fn running(&self, what: String, now: Instant) -> Running {
        let mut p = self.pulse();
        p.next += 1;
        let id = p.next;
        p.running.insert(id, (what, now));
        Running {
            health: self.clone(),
            id,
        }
    }

    /// Whether the process makes progress at `now`.
    pub fn live(&self, now: Instant) -> Result<(), String> {
        self.pulse().verdict(now)
    }
}

#[derive(Clone)]
struct AppState {
    health: Health,
    /// None: /metrics is served over HTTPS to authorized callers, not here.
    metrics: Option<SharedMetrics>,
}

/// Serves on an already bound listener until `shutdown` resolves; `/metrics` only with
/// `metrics`.
pub async fn serve_on(
    listener: tokio::net::TcpListener,
    health: Health,
    metrics: Option<SharedMetrics>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/livez", get(livez))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_handler))
        .with_state(AppState { health, metrics });
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "serving /livez, /readyz and /metrics");
    }
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}

async fn livez(State(s): State<AppState>) -> (StatusCode, String) {
    match s.health.live(Instant::now()) {
        Ok(()) => (StatusCode::OK, "ok".into()),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, why),
    }
}

async fn readyz(State(s): State<AppState>) -> impl IntoResponse {
    if s.health.is_ready() {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "caches not synced")
    }
}

async fn metrics_handler(State(s): State<AppState>) -> axum::response::Response {
    let Some(metrics) = s.metrics else {
        return (
            StatusCode::NOT_FOUND,
            "/metrics is served over HTTPS on --metrics-addr to callers with a bearer token\n",
        )
            .into_response();
    };
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        metrics.encode(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn livez_fails_when_the_heartbeat_stops_or_a_reconcile_hangs() {
        let h = Health::default();
        let t0 = Instant::now();
        assert!(h.live(t0).is_ok(), "alive before the first beat");
        h.beat(t0);
        assert!(h.live(t0 + STALE_HEARTBEAT).is_ok());
        let why = h
            .live(t0 + STALE_HEARTBEAT + Duration::from_secs(1))
            .unwrap_err();
        assert!(why.contains("no heartbeat for 31s"), "{why}");
        let later = t0 + Duration::from_secs(200);
        h.beat(later);
        let guard = h.running("AccountClaim kcp/c1".into(), later);
        h.beat(later + STUCK_RECONCILE);
        assert!(h.live(later + STUCK_RECONCILE).is_ok());
        h.beat(later + STUCK_RECONCILE + Duration::from_secs(1));
        let why = h
            .live(later + STUCK_RECONCILE + Duration::from_secs(1))
            .unwrap_err();
        assert!(
            why.contains("AccountClaim kcp/c1 running for 121s"),
            "{why}"
        );
        drop(guard);
        assert!(
            h.live(later + STUCK_RECONCILE + Duration::from_secs(1))
                .is_ok()
        );
    }

    #[tokio::test]
    async fn the_endpoints_report_the_health_state() {
        use axum::response::IntoResponse;
        let health = Health::default();
        let state = || {
            State(AppState {
                health: health.clone(),
                metrics: Some(Arc::new(crate::metrics::Metrics::new())),
            })
        };
        let ready = || async { readyz(state()).await.into_response().status() };
        assert_eq!(ready().await, StatusCode::SERVICE_UNAVAILABLE);
        health.set_ready();
        assert_eq!(ready().await, StatusCode::OK);
        assert_eq!(livez(state()).await.0, StatusCode::OK);
        let long_ago = Instant::now().checked_sub(STALE_HEARTBEAT + Duration::from_secs(5));
        if let Some(t) = long_ago {
            health.beat(t);
            let (code, body) = livez(state()).await;
            assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
            assert!(body.contains("no heartbeat"), "{body}");
        }
    }
}
