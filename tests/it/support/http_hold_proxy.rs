//! A plain-HTTP proxy in front of an API server for one replica under test: it sees each request
//! (method, path, when it arrived from the replica), can hold every request it receives until
//! released, and forwards through a client of the test's (which carries the credentials). The
//! replica's kubeconfig points at it without credentials of its own. Where the TCP proxies see
//! TLS records only, this one tells a write from a read, so a test can say which of the replica's
//! writes left it when.
//!
//! Self-contained (no `super::` items) so that any test can include it by path.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use tokio::sync::watch;

/// One request as it arrived from the replica.
#[derive(Clone, Debug)]
pub struct Arrival {
    pub at: Instant,
    pub method: http::Method,
    pub path: String,
    /// Arrived while held.
    pub held: bool,
}

impl Arrival {
    pub fn is_write(&self) -> bool {
        !matches!(
            self.method,
            http::Method::GET | http::Method::HEAD | http::Method::OPTIONS
        )
    }
}

#[derive(Clone)]
struct Shared {
    upstream: kube::Client,
    held: watch::Sender<bool>,
    log: Arc<Mutex<Vec<Arrival>>>,
}

pub struct HttpHoldProxy {
    pub addr: SocketAddr,
    shared: Shared,
    task: tokio::task::JoinHandle<()>,
}

impl HttpHoldProxy {
    /// Listens on a free loopback port and forwards every request through `upstream`.
    pub async fn start(upstream: kube::Client) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("proxy port");
        let addr = listener.local_addr().expect("proxy address");
        let shared = Shared {
            upstream,
            held: watch::channel(false).0,
            log: Arc::default(),
        };
        let app = Router::new().fallback(forward).with_state(shared.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { addr, shared, task }
    }

    /// A kubeconfig of this proxy (no credentials), written to `path`.
    pub fn kubeconfig(&self, path: PathBuf) -> PathBuf {
        let config = format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: p\n\
             clusters: [{{name: p, cluster: {{server: 'http://{}'}}}}]\n\
             contexts: [{{name: p, context: {{cluster: p, user: u, namespace: default}}}}]\n\
             users: [{{name: u, user: {{}}}}]\n",
            self.addr
        );
        std::fs::write(&path, config).expect("proxy kubeconfig");
        path
    }

    pub fn hold(&self) {
        self.shared.held.send_replace(true);
    }

    pub fn release(&self) {
        self.shared.held.send_replace(false);
    }

    /// Every request so far, in the order they arrived.
    pub fn arrivals(&self) -> Vec<Arrival> {
        self.shared.log.lock().expect("log").clone()
    }
}

impl Drop for HttpHoldProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn forward(State(shared): State<Shared>, request: Request) -> Response {
    let held = *shared.held.borrow();
    shared.log.lock().expect("log").push(Arrival {
        at: Instant::now(),
        method: request.method().clone(),
        path: request.uri().path().to_string(),
        held,
    });
    let mut until = shared.held.subscribe();
    let _ = until.wait_for(|h| !*h).await;
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, 64 << 20).await else {
        return status(400);
    };
    let mut out = http::Request::builder().method(parts.method).uri(
        parts
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_string(),
    );
    for (k, v) in &parts.headers {
        if k != http::header::HOST && k != http::header::AUTHORIZATION {
            out = out.header(k, v);
        }
    }
    let Ok(out) = out.body(kube::client::Body::from(bytes.to_vec())) else {
        return status(400);
    };
    match shared.upstream.send(out).await {
        Ok(answer) => answer.map(Body::new),
        Err(_) => status(502),
    }
}

fn status(code: u16) -> Response {
    let mut r = Response::new(Body::empty());
    *r.status_mut() = http::StatusCode::from_u16(code).unwrap_or(http::StatusCode::BAD_GATEWAY);
    r
}
