//! `/metrics` over HTTPS for callers the API server vouches for: a bearer token that a
//! TokenReview authenticates and whose user a SubjectAccessReview allows `get` on the
//! non-resource URL `/metrics` (the ClusterRole `hap-operator-metrics-reader`). The metrics name
//! every global account the operator serves, so they are not for whoever reaches the port.
//! Answers: 401 without a token or with one the API server does not know, 403 for a user without
//! the right, 503 when the API server cannot be asked; decisions are cached briefly per token.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use sha3::Digest;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;
use tokio_util::sync::CancellationToken;

use crate::connections::{self, HANDSHAKE_TIMEOUT, HEADER_READ_TIMEOUT};
use crate::k8s::access::{Access, AccessError};
use crate::metrics::SharedMetrics;

/// How long a decision about a token holds: Prometheus scrapes every 15–60 s with the same
/// token, and each decision costs two API calls. A revoked right is honoured within this time.
const DECISION_TTL: Duration = Duration::from_secs(30);

/// Tokens remembered at once; beyond, the cache starts again (only a flood of distinct tokens
/// gets there, and it then costs the API server what an uncached check would).
const MAX_CACHED: usize = 1024;

/// Connections open at once; a scraper keeps one.
const MAX_CONNECTIONS: usize = 32;

use crate::k8s::access::Reviewer;

/// The token of an `Authorization: Bearer …` header, if it carries one.
pub fn bearer(value: Option<&str>) -> Option<&str> {
    let (scheme, token) = value?.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The answer to a scrape, by what the API server said.
pub fn status_of(access: &Result<Access, AccessError>) -> StatusCode {
    match access {
        Ok(Access::Allowed { .. }) => StatusCode::OK,
        Ok(Access::Forbidden { .. }) => StatusCode::FORBIDDEN,
        Ok(Access::Unauthenticated) => StatusCode::UNAUTHORIZED,
        Err(_) => StatusCode::SERVICE_UNAVAILABLE,
    }
}

/// Recent decisions by the SHA3 of the token (the token itself is never kept).
#[derive(Default)]
struct Decisions(Mutex<HashMap<[u8; 32], (Access, Instant)>>);

impl Decisions {
    fn key(token: &str) -> [u8; 32] {
        sha3::Sha3_256::digest(token.as_bytes()).into()
    }

    fn get(&self, token: &str, now: Instant) -> Option<Access> {
        let map = self.0.lock().ok()?;
        let (a, at) = map.get(&Self::key(token))?;
        (now.saturating_duration_since(*at) < DECISION_TTL).then(|| a.clone())
    }

    fn put(&self, token: &str, access: Access, now: Instant) {
        if let Ok(mut map) = self.0.lock() {
            if map.len() >= MAX_CACHED {
                map.clear();
            }
            map.insert(Self::key(token), (access, now));
        }
    }
}

#[derive(Clone)]
struct AppState {
    metrics: SharedMetrics,
    reviewer: Reviewer,
    decisions: Arc<Decisions>,
}

async fn metrics_handler(State(s): State<AppState>, headers: HeaderMap) -> Response {
    let value = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let Some(token) = bearer(value) else {
        return (StatusCode::UNAUTHORIZED, "a bearer token is required\n").into_response();
    };
    let now = Instant::now();
    let access = match s.decisions.get(token, now) {
        Some(a) => Ok(a),
        None => {
            let a = (s.reviewer)(token.to_string()).await;
            if let Ok(a) = &a {
                s.decisions.put(token, a.clone(), now);
            }
            a
        }
    };
    match (status_of(&access), access) {
        (StatusCode::OK, _) => (
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            s.metrics.encode(),
        )
            .into_response(),
        (code, Ok(Access::Forbidden { user })) => {
            tracing::debug!(%user, "metrics scrape forbidden");
            (code, format!("{user} may not get /metrics\n")).into_response()
        }
        (code, Err(e)) => {
            tracing::warn!(error = %e, "cannot check a metrics scrape's token");
            (code, "cannot check the token now\n").into_response()
        }
        (code, _) => (code, "the token is not valid\n").into_response(),
    }
}

/// Why the metrics endpoint could not start.
#[derive(Debug, thiserror::Error)]
pub enum MetricsServeError {
    #[error("cannot load the metrics certificate")]
    Tls(#[from] crate::webhook::tls::TlsError),
    #[error("cannot make a self-signed metrics certificate")]
    SelfSigned(#[source] rcgen::Error),
    #[error("cannot build the metrics TLS configuration")]
    Config(#[source] rustls::Error),
    #[error("cannot listen for metrics scrapes on {addr}")]
    Listen {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// The certificate: the files (re-read when they change), else one made at start and signed by
/// itself — scrapers verify the caller's token, not the pod's name (as controller-runtime does).
pub fn tls_config(
    files: Option<(PathBuf, PathBuf)>,
) -> Result<Arc<rustls::ServerConfig>, MetricsServeError> {
    if let Some((cert, key)) = files {
        let cert = Arc::new(crate::webhook::tls::ReloadingCert::new(cert, key)?);
        return Ok(crate::webhook::tls::server_config(cert, None)?);
    }
    let key = rcgen::KeyPair::generate().map_err(MetricsServeError::SelfSigned)?;
    let params = rcgen::CertificateParams::new(vec!["hap-operator-metrics".to_string()])
        .map_err(MetricsServeError::SelfSigned)?;
    let cert = params
        .self_signed(&key)
        .map_err(MetricsServeError::SelfSigned)?;
    let der = rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
    let mut cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(MetricsServeError::Config)?
    .with_no_client_auth()
    .with_single_cert(vec![cert.der().clone()], der)
    .map_err(MetricsServeError::Config)?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// Binds `addr` and serves `/metrics` over TLS until `stop`; returns the bound address.
pub async fn start(
    addr: SocketAddr,
    tls: Arc<rustls::ServerConfig>,
    metrics: SharedMetrics,
    reviewer: Reviewer,
    stop: CancellationToken,
) -> Result<SocketAddr, MetricsServeError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| MetricsServeError::Listen { addr, source })?;
    let bound = listener.local_addr().unwrap_or(addr);
    tracing::info!(addr = %bound, "serving /metrics over TLS to authorized scrapers");
    let app = Router::new()
        .route("/metrics", get(metrics_handler))
        .with_state(AppState {
            metrics,
            reviewer,
            decisions: Arc::default(),
        });
    tokio::spawn(accept_loop(listener, TlsAcceptor::from(tls), app, stop));
    Ok(bound)
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    app: Router,
    stop: CancellationToken,
) {
    let limits = connections::Limits {
        server: "metrics",
        max_connections: MAX_CONNECTIONS,
        header_read_timeout: HEADER_READ_TIMEOUT,
        drain: Duration::ZERO,
    };
    let handshake = move |tcp| {
        let acceptor = acceptor.clone();
        async move {
            tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp))
                .await
                .ok()?
                .ok()
        }
    };
    connections::serve(listener, app, limits, handshake, stop.cancelled_owned()).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_bearer_token_counts() {
        assert_eq!(bearer(Some("Bearer abc")), Some("abc"));
        assert_eq!(bearer(Some("bearer  abc ")), Some("abc"));
        assert_eq!(bearer(Some("Basic abc")), None);
        assert_eq!(bearer(Some("Bearer ")), None);
        assert_eq!(bearer(Some("abc")), None);
        assert_eq!(bearer(None), None);
    }

    fn reviewer(calls: Arc<Mutex<u32>>) -> Reviewer {
        Arc::new(move |token: String| {
            *calls.lock().expect("lock") += 1;
            Box::pin(async move {
                Ok(match token.as_str() {
                    "reader" => Access::Allowed {
                        user: "system:serviceaccount:mon:prometheus".into(),
                    },
                    "other" => Access::Forbidden {
                        user: "system:serviceaccount:x:y".into(),
                    },
                    _ => Access::Unauthenticated,
                })
            })
        })
    }

    async fn scrape(state: &AppState, auth: Option<&str>) -> (StatusCode, String) {
        let mut headers = HeaderMap::new();
        if let Some(a) = auth {
            headers.insert(header::AUTHORIZATION, a.parse().expect("header"));
        }
        let r = metrics_handler(State(state.clone()), headers).await;
        let code = r.status();
        let body = axum::body::to_bytes(r.into_body(), 1 << 20)
            .await
            .expect("body");
        (code, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn scrapes_are_answered_by_what_the_api_server_says_and_decisions_are_cached() {
        let calls = Arc::new(Mutex::new(0));
        let metrics = Arc::new(crate::metrics::Metrics::new());
        metrics.leader.set(1);
        let state = AppState {
            metrics,
            reviewer: reviewer(calls.clone()),
            decisions: Arc::default(),
        };
        let (code, body) = scrape(&state, None).await;
        assert_eq!(code, StatusCode::UNAUTHORIZED);
        assert!(!body.contains("hap_"), "{body}");
        assert_eq!(
            scrape(&state, Some("Bearer forged")).await.0,
            StatusCode::UNAUTHORIZED
        );
        let (code, body) = scrape(&state, Some("Bearer other")).await;
        assert_eq!(code, StatusCode::FORBIDDEN);
        assert!(!body.contains("hap_"), "{body}");
        let (code, body) = scrape(&state, Some("Bearer reader")).await;
        assert_eq!(code, StatusCode::OK);
        assert!(body.contains("hap_leader 1"), "{body}");
        let before = *calls.lock().expect("lock");
        assert_eq!(
            scrape(&state, Some("Bearer reader")).await.0,
            StatusCode::OK
        );
        assert_eq!(*calls.lock().expect("lock"), before, "a cached decision");
    }

    #[test]
    fn a_self_signed_certificate_is_made_without_files() {
        assert!(tls_config(None).is_ok());
    }
}
