//! The admission webhooks of request sources, served by `hap run` on every replica over TLS:
//! `POST /mutate/shoots`, `/mutate/clusters`, `/mutate/runtimes` (any of them accepts any of
//! the three kinds; the paths keep webhook configurations readable). Each replica keeps its own
//! watch of the HapConfig in force and of the claims sources created, so a standby answers as
//! fast as the leader; only the leader decides. The server bounds what a peer can hold: headers
//! must arrive within `connections::HEADER_READ_TIMEOUT`, at most [`Settings::max_connections`]
//! are open at once (more are closed at once) and a review may be [`MAX_REVIEW_BYTES`] long.

mod admit;
mod open_files;
mod serve;
#[cfg(test)]
mod serve_tests;
pub mod tls;

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::post;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use crate::connections::{self, HANDSHAKE_TIMEOUT, HEADER_READ_TIMEOUT};
use crate::k8s::Cluster;
use crate::k8s::active::ConfigResolver;
use crate::k8s::caches::store_ready;
use crate::k8s::source_claims::SourceClaims;
use crate::metrics::SharedMetrics;

/// How long a stopping replica still accepts webhook connections. A deleted pod leaves the
/// Service's endpoints and kube-proxy's rules only after a moment; a connection refused or
/// closed in that moment fails the API server's call, and `failurePolicy: Fail` turns that into
/// an error for whoever created the object.
const ACCEPT_AFTER_STOP: Duration = Duration::from_secs(3);

/// Connections open at once by default (`--webhook-max-connections`); one more is closed as soon
/// as it is accepted, which its caller sees as "failed calling webhook: EOF". The cap keeps idle
/// or hostile peers from exhausting the pod's memory (~50 KB a TLS connection), but it must
/// exceed the calls in progress: kube-apiserver speaks HTTP/1.1 here, one connection per call,
/// and a call may wait the whole decision timeout, so 50 first claims a second hold ~400 open
/// (a cap of 128 cut 61 of 200 such calls, BENCHMARKS.md, Admission). It also stays below the
/// usual 1024 open files of a container.
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;

/// The longest review accepted. An UPDATE review carries the object twice (object and
/// oldObject); etcd stores objects of up to 1.5 MiB, which may be twice as long as JSON. A
/// longer review is answered 413, which `failurePolicy: Fail` turns into a refused request.
pub const MAX_REVIEW_BYTES: usize = 8 * 1024 * 1024;

/// How long a stopping webhook waits for the claim work of calls it cut off or answered (a
/// claim to take back) before it stops watching.
const TASKS_DRAIN_LIMIT: Duration = Duration::from_secs(10);

/// Where the webhook listens, once it does (tests bind port 0 and read it here), and its
/// shutdown as `hap run` waits for it.
#[derive(Clone, Default)]
pub struct WebhookAddr {
    addr: Arc<OnceLock<SocketAddr>>,
    /// Asks the webhook to stop (as the operator's stop does).
    stop: CancellationToken,
    /// Cancelled once the webhook has answered its last call.
    served: CancellationToken,
}

impl WebhookAddr {
    pub fn get(&self) -> Option<SocketAddr> {
        self.addr.get().copied()
    }

    /// Stops the webhook, if one was started, and waits until it has drained: new connections
    /// for [`ACCEPT_AFTER_STOP`], then the calls in flight (each bounded by the decision
    /// timeout). The operator's controllers and its Lease are gone by then; calls still
    /// arriving create their claims and wait for the new leader's decision like any call.
    pub async fn stop_and_drain(&self) {
        self.stop.cancel();
        if self.get().is_some() {
            self.served.cancelled().await;
        }
    }
}

/// Why the webhook could not start.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    #[error("cannot load the webhook certificate (the webhook serves TLS only)")]
    Tls(#[from] tls::TlsError),
    #[error("cannot listen for webhook calls on {addr}")]
    Listen {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// Shared state of the webhook of one replica.
pub struct Webhook {
    /// The replica's one config in force, shared with the controllers.
    resolver: Arc<ConfigResolver>,
    /// Namespace labels for `spec.tenants`, read only when a rule needs them.
    namespaces: crate::k8s::namespaces::NamespaceReader,
    claims: SourceClaims,
    decision_timeout: Duration,
    metrics: SharedMetrics,
    /// The replica is stopping: answers close their connection.
    stopping: CancellationToken,
    /// The claim work of calls, which outlives a call that is cut off.
    tasks: serve::Tasks,
}

impl Webhook {
    fn is_ready(&self) -> bool {
        store_ready(self.resolver.store()) && self.claims.is_ready()
    }

    /// Waits until both caches have listed once.
    pub async fn wait_ready(&self) {
        let _ = self.resolver.store().wait_until_ready().await;
        self.claims.wait_ready().await;
    }

    /// The caches that have not listed yet.
    pub fn unready(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        if !store_ready(self.resolver.store()) {
            out.push("HapConfigs");
        }
        if !self.claims.is_ready() {
            out.push("source AccountClaims");
        }
        out
    }
}

/// What the webhook needs from `hap run`'s settings.
pub struct Settings {
    pub addr: SocketAddr,
    pub cert_file: std::path::PathBuf,
    pub key_file: std::path::PathBuf,
    /// CA of the client certificates callers must present; unset: any caller is served.
    pub client_ca_file: Option<std::path::PathBuf>,
    /// The replica's config in force (its one HapConfig watch), shared with the controllers.
    pub resolver: Arc<ConfigResolver>,
    pub claim_namespace: String,
    pub decision_timeout: Duration,
    /// Connections open at once ([`DEFAULT_MAX_CONNECTIONS`]).
    pub max_connections: usize,
}

/// Loads the certificate, binds, starts the claim watch and serves until `stop` (the config it
/// answers by is the replica's, `Settings::resolver`). Returns once listening; the serving runs
/// in the background.
pub async fn start(
    own: &Cluster,
    settings: Settings,
    metrics: SharedMetrics,
    addr_out: &WebhookAddr,
    stop: CancellationToken,
) -> Result<Arc<Webhook>, WebhookError> {
    let (listener, acceptor) = listen(&settings).await?;
    if let Ok(addr) = listener.local_addr() {
        let _ = addr_out.addr.set(addr);
        tracing::info!(%addr, "serving the request-source admission webhooks (TLS)");
    }
    let (claims, claims_task) = SourceClaims::start(own, &settings.claim_namespace);
    // Stopping: the operator's stop or `hap run`'s. The claim watch outlives it until the last
    // call is answered (`done`), the config watch for the life of the process: a call in the
    // drain still waits for the leader's decision.
    let stopping = CancellationToken::new();
    let done = CancellationToken::new();
    {
        let (stop, own, stopping) = (stop, addr_out.stop.clone(), stopping.clone());
        tokio::spawn(async move {
            tokio::select! {
                _ = stop.cancelled() => {},
                _ = own.cancelled() => {},
            }
            stopping.cancel();
        });
    }
    let hook = Arc::new(Webhook {
        resolver: settings.resolver,
        namespaces: crate::k8s::namespaces::NamespaceReader::new(own),
        claims,
        decision_timeout: settings.decision_timeout,
        metrics,
        stopping: stopping.clone(),
        tasks: serve::Tasks::new(),
    });
    {
        let done = done.clone();
        tokio::spawn(async move {
            done.cancelled().await;
            claims_task.abort();
        });
    }
    let app = Router::new()
        .route("/mutate/shoots", post(handle))
        .route("/mutate/clusters", post(handle))
        .route("/mutate/runtimes", post(handle))
        .layer(DefaultBodyLimit::max(MAX_REVIEW_BYTES))
        .with_state(hook.clone());
    let in_flight = settings.decision_timeout + Duration::from_secs(2);
    let max_connections = connection_cap(settings.max_connections);
    let served = addr_out.served.clone();
    let drained = hook.clone();
    tokio::spawn(async move {
        accept_loop(
            listener,
            acceptor,
            app,
            stopping,
            (in_flight, max_connections),
        )
        .await;
        // Calls cut off by the drain still take their claims back, with the caches alive.
        drained.tasks.drain(TASKS_DRAIN_LIMIT).await;
        done.cancel();
        served.cancel();
    });
    Ok(hook)
}

/// `--webhook-max-connections`, lowered (and said so) where the open-files limit, raised to its
/// hard limit first, would not leave the rest of the operator its descriptors (`open_files`).
fn connection_cap(requested: usize) -> usize {
    match open_files::raise_soft_limit() {
        Ok(Some((from, to))) => {
            tracing::info!(from, to, "open-files soft limit raised to the hard limit")
        }
        Ok(None) => {}
        Err(error) => {
            tracing::warn!(%error, "open-files soft limit left as it is: raising it failed")
        }
    }
    let soft = open_files::soft_limit();
    let cap = open_files::cap(requested, soft);
    if cap < requested {
        tracing::warn!(
            requested,
            cap,
            open_files = soft,
            reserved = open_files::RESERVED,
            "--webhook-max-connections lowered to what the open-files limit leaves; its hard limit is the node's container runtime's setting: raise that, or lower the cap"
        );
    }
    cap
}

/// The certificate loaded (and reloaded when its files change) and the port bound: both fail
/// at start, with the file or address named, rather than on the first call.
async fn listen(settings: &Settings) -> Result<(TcpListener, TlsAcceptor), WebhookError> {
    let cert = Arc::new(tls::ReloadingCert::new(
        settings.cert_file.clone(),
        settings.key_file.clone(),
    )?);
    let acceptor = TlsAcceptor::from(tls::server_config(
        cert,
        settings.client_ca_file.as_deref(),
    )?);
    let listener =
        TcpListener::bind(settings.addr)
            .await
            .map_err(|source| WebhookError::Listen {
                addr: settings.addr,
                source,
            })?;
    Ok((listener, acceptor))
}

async fn handle(State(hook): State<Arc<Webhook>>, body: Bytes) -> impl IntoResponse {
    let out = admit::review(&hook, &body).await;
    // While draining, every answer tells the API server to drop the connection: its next call
    // opens a new one, which the Service sends to a replica that stays.
    let connection = if hook.stopping.is_cancelled() {
        "close"
    } else {
        "keep-alive"
    };
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CONNECTION, connection),
        ],
        out,
    )
}

/// Accepts until [`ACCEPT_AFTER_STOP`] after `stopping`, then closes the connections once
/// their calls are answered (idle ones at once), waiting at most `in_flight` for them; at most
/// `max_connections` open at once.
async fn accept_loop(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    app: Router,
    stopping: CancellationToken,
    (in_flight, max_connections): (Duration, usize),
) {
    let limits = connections::Limits {
        server: "webhook",
        max_connections,
        header_read_timeout: HEADER_READ_TIMEOUT,
        drain: in_flight,
    };
    let handshake = move |tcp| {
        let acceptor = acceptor.clone();
        async move {
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(tls)) => Some(tls),
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "webhook TLS handshake failed");
                    None
                }
                Err(_) => None,
            }
        }
    };
    let accept_until = async move {
        stopping.cancelled().await;
        tokio::time::sleep(ACCEPT_AFTER_STOP).await;
    };
    connections::serve(listener, app, limits, handshake, accept_until).await;
    tracing::info!("webhook stopped");
}
