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

use crate::connections::{HEADER_READ_TIMEOUT, Limits};
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

/// What the probe port allows: the kubelet opens a connection per probe and closes it, a
/// scraper of the plain `/metrics` keeps one. Beyond the cap a connection is closed at once, so
/// that a flood on this port cannot take the open files and memory the webhook and the API
/// connections need; the price is that probes fail while such a flood lasts (the
/// NetworkPolicy component, docs/install.md, keeps other pods off this port).
pub const LIMITS: Limits = Limits {
    server: "probes",
    max_connections: 64,
    header_read_timeout: HEADER_READ_TIMEOUT,
    drain: HEADER_READ_TIMEOUT,
};

/// Serves on an already bound listener until `shutdown` resolves, within `limits`; `/metrics`
/// only with `metrics`.
pub async fn serve_on(
    listener: tokio::net::TcpListener,
    health: Health,
    metrics: Option<SharedMetrics>,
    limits: Limits,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let app = Router::new()
        .route("/livez", get(livez))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_handler))
        .with_state(AppState { health, metrics });
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "serving /livez, /readyz and /metrics");
    }
    let plain = |tcp| async move { Some(tcp) };
    crate::connections::serve(listener, app, limits, plain, shutdown).await;
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

    /// The probe server on a port of its own, within `limits`; cancel the token to stop it.
    async fn probe_server(
        limits: Limits,
    ) -> (
        std::net::SocketAddr,
        tokio_util::sync::CancellationToken,
        tokio::task::JoinHandle<()>,
    ) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("address");
        let stop = tokio_util::sync::CancellationToken::new();
        let done = stop.clone().cancelled_owned();
        let server = tokio::spawn(serve_on(listener, Health::default(), None, limits, done));
        (addr, stop, server)
    }

    /// What the peer reads before the server closes the connection; `None` if it is still open
    /// after `wait`.
    async fn read_until_closed(tcp: &mut tokio::net::TcpStream, wait: Duration) -> Option<String> {
        use tokio::io::AsyncReadExt;
        let mut got = Vec::new();
        match tokio::time::timeout(wait, tcp.read_to_end(&mut got)).await {
            Ok(_) => Some(String::from_utf8_lossy(&got).into_owned()),
            Err(_) => None,
        }
    }

    const LIVEZ: &[u8] = b"GET /livez HTTP/1.1\r\nHost: probe\r\n\r\n";

    #[tokio::test]
    async fn the_probe_port_closes_a_connection_that_sends_no_header_in_time() {
        // Before: axum::serve with no header deadline: a peer that trickled a header, or kept
        // an idle connection, held it (and a descriptor) for ever.
        use tokio::io::AsyncWriteExt;
        let limits = Limits {
            header_read_timeout: Duration::from_millis(500),
            ..LIMITS
        };
        let (addr, stop, server) = probe_server(limits).await;
        let mut slow = tokio::net::TcpStream::connect(addr).await.expect("connect");
        slow.write_all(b"GET /livez HTTP/1.1\r\nHo")
            .await
            .expect("write");
        let read = read_until_closed(&mut slow, Duration::from_secs(5)).await;
        assert!(
            read.is_some(),
            "a header not finished in time closes the connection"
        );
        let mut idle = tokio::net::TcpStream::connect(addr).await.expect("connect");
        idle.write_all(LIVEZ).await.expect("write");
        let answered = read_until_closed(&mut idle, Duration::from_secs(5)).await;
        let answered = answered.expect("an idle kept-alive connection is closed too");
        assert!(answered.starts_with("HTTP/1.1 200"), "{answered}");
        stop.cancel();
        server.await.expect("the server stops");
    }

    #[tokio::test]
    async fn the_probe_port_keeps_at_most_its_cap_of_connections_open() {
        // Before: no cap: a flood of connections on the probe port took descriptors the
        // webhook and the API connections need.
        use tokio::io::AsyncWriteExt;
        let cap = 4;
        let limits = Limits {
            max_connections: cap,
            header_read_timeout: Duration::from_secs(60),
            ..LIMITS
        };
        let (addr, stop, server) = probe_server(limits).await;
        let mut open = Vec::new();
        for _ in 0..cap {
            open.push(tokio::net::TcpStream::connect(addr).await.expect("connect"));
        }
        let mut extra = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let closed = read_until_closed(&mut extra, Duration::from_secs(5)).await;
        assert_eq!(
            closed.as_deref(),
            Some(""),
            "beyond the cap: closed unanswered"
        );
        let last = open.last_mut().expect("connections");
        let still = read_until_closed(last, Duration::from_millis(300)).await;
        assert_eq!(still, None, "the cap is {cap}, not one fewer");
        open.pop();
        // The slot comes back once the server has seen the peer go.
        let mut answer = String::new();
        for _ in 0..50 {
            let mut probe = tokio::net::TcpStream::connect(addr).await.expect("connect");
            probe.write_all(LIVEZ).await.expect("write");
            let mut buf = [0u8; 64];
            use tokio::io::AsyncReadExt;
            let n = tokio::time::timeout(Duration::from_secs(5), probe.read(&mut buf))
                .await
                .map_or(0, |r| r.unwrap_or(0));
            answer = String::from_utf8_lossy(&buf[..n]).into_owned();
            if n > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(
            answer.starts_with("HTTP/1.1 200"),
            "a probe after a peer left: {answer:?}"
        );
        stop.cancel();
        let stopped = tokio::time::timeout(Duration::from_secs(5), server).await;
        assert!(stopped.is_ok(), "idle connections do not hold the shutdown");
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
