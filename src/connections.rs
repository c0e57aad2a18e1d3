//! What the operator's HTTP servers (the webhook, `/metrics` over TLS, the probes) allow a peer:
//! at most so many connections open at once, and a request's header within a deadline, so that
//! slow or idle peers cannot pin the pod's memory or its open files.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

/// How long a connection may take to send a request's header once it is ready for one: from
/// its start, and again after each answer (hyper starts the clock while a kept-alive connection
/// waits), so an idle connection is closed after this long too. kube-apiserver, the kubelet and
/// Prometheus send a header at once; a peer that trickles one would hold its connection, and its
/// memory, for ever.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a TLS handshake may take.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// At most one log line this often about the connections a server closed over its cap: a flood
/// of them would otherwise flood the log too.
const REFUSALS_LOGGED_EVERY: Duration = Duration::from_secs(10);

/// The connections one server has open, up to its cap.
struct Slots {
    free: Arc<Semaphore>,
    limit: usize,
    server: &'static str,
    /// Connections closed over the cap since the last line about them, and when that was.
    refused: Mutex<(u64, Option<Instant>)>,
}

impl Slots {
    /// `limit` connections at once for `server` (named in the log).
    fn new(server: &'static str, limit: usize) -> Self {
        Self {
            free: Arc::new(Semaphore::new(limit)),
            limit,
            server,
            refused: Mutex::new((0, None)),
        }
    }

    /// A slot for a connection just accepted, held until the connection ends; `None` when
    /// `limit` are open, and the caller closes it at once: a peer beyond the cap gets an EOF
    /// rather than a queue.
    fn take(&self) -> Option<OwnedSemaphorePermit> {
        let slot = self.free.clone().try_acquire_owned().ok();
        if slot.is_none()
            && let Some(closed) = self.refused(Instant::now())
        {
            tracing::warn!(
                server = self.server,
                limit = self.limit,
                closed,
                "connections closed: too many open"
            );
        }
        slot
    }

    /// Counts a connection closed over the cap. The count to log: at once the first time, then
    /// at most once every `REFUSALS_LOGGED_EVERY`, of those closed since the last line.
    fn refused(&self, now: Instant) -> Option<u64> {
        let mut refused = self.refused.lock().unwrap_or_else(|e| e.into_inner());
        let (count, last) = &mut *refused;
        *count += 1;
        if last.is_some_and(|t| now.saturating_duration_since(t) < REFUSALS_LOGGED_EVERY) {
            return None;
        }
        let closed = *count;
        (*count, *last) = (0, Some(now));
        Some(closed)
    }
}

/// The next connection. A failed accept (the open-files limit reached, a peer gone before it
/// was taken) is logged and tried again after a pause, so the loop does not spin on it.
async fn accept(listener: &TcpListener, server: &'static str) -> TcpStream {
    loop {
        match listener.accept().await {
            Ok((tcp, _)) => return tcp,
            Err(e) => {
                tracing::warn!(server, error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// One server's name (in its log lines) and limits.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub server: &'static str,
    pub max_connections: usize,
    pub header_read_timeout: Duration,
    /// After the listener closes, how long connections may take to finish the requests they
    /// are in (idle ones close at once); those left then are cut.
    pub drain: Duration,
}

/// Serves `app` on `listener` until `stop_accepting` resolves, each connection within
/// `limits`, over what `handshake` makes of it (`None`: closed). Then closes the listener and
/// drains the connections (`Limits::drain`).
pub async fn serve<I, H, F>(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    handshake: H,
    stop_accepting: impl Future<Output = ()>,
) where
    H: Fn(TcpStream) -> F + Clone + Send + 'static,
    F: Future<Output = Option<I>> + Send,
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let closing = CancellationToken::new();
    let slots = Slots::new(limits.server, limits.max_connections);
    let mut conns = tokio::task::JoinSet::new();
    tokio::pin!(stop_accepting);
    loop {
        while conns.try_join_next().is_some() {}
        let tcp = tokio::select! {
            () = &mut stop_accepting => break,
            tcp = accept(&listener, limits.server) => tcp,
        };
        let Some(slot) = slots.take() else {
            continue;
        };
        let (app, closing, handshake) = (app.clone(), closing.clone(), handshake.clone());
        conns.spawn(async move {
            let _slot = slot;
            let Some(io) = handshake(tcp).await else {
                return;
            };
            let conn = http1(io, app, limits.header_read_timeout);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {},
                () = closing.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        });
    }
    drop(listener);
    closing.cancel();
    let _ = tokio::time::timeout(limits.drain, async {
        while conns.join_next().await.is_some() {}
    })
    .await;
    conns.abort_all();
}

/// HTTP/1.1 over `io`, with the header deadline.
fn http1<I>(
    io: I,
    app: Router,
    header_read_timeout: Duration,
) -> hyper::server::conn::http1::Connection<TokioIo<I>, TowerToHyperService<Router>>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(header_read_timeout)
        .serve_connection(TokioIo::new(io), TowerToHyperService::new(app))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_closed_over_the_cap_are_logged_at_most_once_every_ten_seconds() {
        let slots = Slots::new("probes", 1);
        let t0 = Instant::now();
        assert_eq!(slots.refused(t0), Some(1), "the first is said at once");
        for s in 1..=5 {
            assert_eq!(slots.refused(t0 + Duration::from_secs(s)), None);
        }
        let later = t0 + REFUSALS_LOGGED_EVERY;
        assert_eq!(
            slots.refused(later),
            Some(6),
            "then with those closed since"
        );
        assert_eq!(slots.refused(later), None);
    }

    #[test]
    fn a_slot_is_given_back_when_its_connection_ends() {
        let slots = Slots::new("probes", 1);
        let held = slots.take().expect("a free slot");
        assert!(slots.take().is_none(), "the cap is one");
        drop(held);
        assert!(slots.take().is_some());
    }
}
