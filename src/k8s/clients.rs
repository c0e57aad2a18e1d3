//! API clients: the operator's own cluster, and the garden that serves bindings and Shoots, each
//! behind one opaque handle ([`Cluster`]) that only `k8s` can open.
//!
//! In a real landscape the garden (a virtual kube-apiserver with gardener-apiserver) is not the
//! cluster the operator, its HapConfig and its AccountClaims live in; the operator then reaches it
//! through a kubeconfig of its own (`--garden-kubeconfig`, usually a mounted Secret). Without one,
//! the operator's cluster is the garden.

use std::path::{Path, PathBuf};
use std::time::Duration;

use kube::client::ClientBuilder;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use tower_layer::Layer;

use super::gate::{self, Base, FenceLayer};
pub use super::rate::ApiLimits;
use super::rate::RateLimitLayer;
use crate::leadership::Fence;

/// How long a write may wait for its turn under the request budget before it is refused unsent
/// (`gate::NotSent::Late`): twice the API server's default request time-out, so that only a
/// backlog no burst explains trips it, and a retry then decides on what the caches show.
pub const QUEUED_WRITE_LIMIT: Duration = Duration::from_secs(120);

/// One cluster the operator talks to. Code above `k8s` holds these and hands them to `k8s`
/// functions; the kube client inside is reachable only within `k8s`, so every request (and every
/// write, through the fenced [`super::Writer`]) is made here. Cheap to clone: clones share one
/// connection pool, and every handle of one cluster ([`Cluster::fenced`]) shares its budget.
#[derive(Clone)]
pub struct Cluster {
    /// The requests of this handle: through the cluster's budget, and the fence when fenced.
    client: Client,
    /// The cluster's connections, without budget or fence: what its other handles are built on.
    base: Client,
    /// The budget every handle of the cluster keeps to (`--kube-api-qps`), if any.
    budget: Option<RateLimitLayer>,
    /// Connections of the Lease's requests alone ([`Cluster::lease`]).
    lease: Client,
}

impl Cluster {
    /// The cluster `config` describes, its requests kept to `limits` (shared by every clone).
    fn new(config: Config, limits: ApiLimits) -> Result<Self, kube::Error> {
        let lease = ClientBuilder::try_from(config.clone())?.build();
        let base = ClientBuilder::try_from(config)?.build();
        let mut cluster = Self::on(base, limits.bucket().map(RateLimitLayer::new));
        cluster.lease = lease;
        Ok(cluster)
    }

    /// A cluster on `base`'s connections. The Lease shares them here ([`Cluster::lease`] has
    /// connections of its own only through [`Cluster::new`], which has the config to build them):
    /// this path is for tests and clients built elsewhere.
    fn on(base: Client, budget: Option<RateLimitLayer>) -> Self {
        let client = match &budget {
            Some(b) => {
                let ns = base.default_namespace().to_string();
                Client::new(gate::queued(b.layer(Base(base.clone()))), ns)
            }
            None => base.clone(),
        };
        Self {
            client,
            lease: base.clone(),
            base,
            budget,
        }
    }

    /// This cluster with every request that changes something checked against `fence` when it
    /// is sent — after the budget's queue, so that a write that waited there while the lease
    /// moved is refused `Fenced` — and refused when it waited longer than
    /// [`QUEUED_WRITE_LIMIT`]. Reads pass. Same connections and budget as `self`.
    pub fn fenced(&self, fence: &Fence) -> Cluster {
        let ns = self.base.default_namespace().to_string();
        let gate =
            FenceLayer::new(fence.clone(), QUEUED_WRITE_LIMIT).layer(Base(self.base.clone()));
        let client = match &self.budget {
            Some(b) => Client::new(gate::queued(b.layer(gate)), ns),
            None => Client::new(gate, ns),
        };
        Self {
            client,
            base: self.base.clone(),
            budget: self.budget.clone(),
            lease: self.lease.clone(),
        }
    }

    /// This cluster without budget or fence, for the requests that must not wait behind the
    /// controllers' backlog: the Lease (a renewal stuck in the queue loses the lease to the
    /// replica's own claim writes) and the webhook (its answer has a deadline, and every replica
    /// serves it, leading or not). Their rate is set by the lease's timing and by the API
    /// server's admission calls, not by the operator's backlog.
    pub fn priority(&self) -> Cluster {
        Self {
            client: self.base.clone(),
            base: self.base.clone(),
            budget: None,
            lease: self.lease.clone(),
        }
    }

    /// [`Cluster::priority`] on connections of its own, for the Lease. Over HTTP/1.1 a request
    /// holds its connection until answered, so on the shared pool a renewal sent while the
    /// controllers' requests held every open connection (as a backlog's do the moment the lease is
    /// taken) waited for a new one: a TLS handshake, two more round trips to an API server that
    /// may answer seconds late, which can outlast the time a renewal may take. Its own connection
    /// is free whenever a renewal starts, since renewals go one at a time.
    pub fn lease(&self) -> Cluster {
        Self {
            client: self.lease.clone(),
            base: self.lease.clone(),
            budget: None,
            lease: self.lease.clone(),
        }
    }

    /// The kube client of this cluster, for the API calls of `k8s` only.
    pub(in crate::k8s) fn kube(&self) -> &Client {
        &self.client
    }
}

/// For the binary's edge and tests, which build a kube client of their own: no budget.
impl From<Client> for Cluster {
    fn from(client: Client) -> Self {
        Self::on(client, None)
    }
}

/// Why a client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot read the garden kubeconfig {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("the garden kubeconfig {path} does not describe a usable cluster")]
    Config {
        path: PathBuf,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("cannot build a client from the garden kubeconfig {path}")]
    Build {
        path: PathBuf,
        #[source]
        source: kube::Error,
    },
}

/// The cluster a kubeconfig file describes (its current context), its requests kept to `limits`.
pub async fn from_kubeconfig(path: &Path, limits: ApiLimits) -> Result<Cluster, ClientError> {
    let kubeconfig = Kubeconfig::read_from(path).map_err(|source| ClientError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|source| ClientError::Config {
            path: path.to_path_buf(),
            source,
        })?;
    Cluster::new(config, limits).map_err(|source| ClientError::Build {
        path: path.to_path_buf(),
        source,
    })
}

/// The garden: from `garden_kubeconfig` when given, with a budget of `limits` of its own; else
/// the operator's own cluster, whose budget it then shares.
pub async fn garden(
    own: &Cluster,
    garden_kubeconfig: Option<&Path>,
    limits: ApiLimits,
) -> Result<Cluster, ClientError> {
    match garden_kubeconfig {
        Some(path) => from_kubeconfig(path, limits).await,
        None => Ok(own.clone()),
    }
}

/// The operator's own cluster: the in-cluster config, or `KUBECONFIG` as kubectl reads it; its
/// requests kept to `limits`.
pub async fn own(limits: ApiLimits) -> Result<Cluster, kube::Error> {
    let config = Config::infer().await.map_err(kube::Error::InferConfig)?;
    Cluster::new(config, limits)
}

/// The namespace of the current kubeconfig context, if it names one (as kubectl defaults it).
pub fn kubeconfig_namespace() -> Option<String> {
    let k = Kubeconfig::read().ok()?;
    let current = k.current_context.clone()?;
    k.contexts
        .iter()
        .find(|c| c.name == current)
        .and_then(|c| c.context.as_ref()?.namespace.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A request the test server saw: when it arrived, on which connection (numbered as
    /// accepted), for which path.
    #[derive(Clone, Debug)]
    struct Seen {
        at: Instant,
        conn: usize,
        path: String,
    }

    /// A kubeconfig of a server that keeps connections open, answers every request `{}` but
    /// `/hold` (never answered), and records each request as it arrives.
    async fn test_server(dir: &Path) -> (PathBuf, Arc<Mutex<Vec<Seen>>>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        tokio::spawn(async move {
            let mut n = 0;
            while let Ok((conn, _)) = listener.accept().await {
                n += 1;
                tokio::spawn(serve_connection(conn, n, log.clone()));
            }
        });
        let path = dir.join("kubeconfig");
        std::fs::write(&path, kubeconfig_of(&format!("http://{addr}"))).expect("write");
        (path, seen)
    }

    fn kubeconfig_of(server: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\n\
             clusters: [{{name: c, cluster: {{server: '{server}'}}}}]\n\
             contexts: [{{name: c, context: {{cluster: c, user: u}}}}]\n\
             users: [{{name: u, user: {{}}}}]\n"
        )
    }

    async fn send(cluster: &Cluster) {
        get(cluster, "/version").await;
    }

    #[tokio::test]
    async fn a_cluster_with_limits_sends_its_burst_at_once_and_the_rest_at_qps() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (path, seen) = test_server(dir.path()).await;
        // 20 a second, 2 at once: of 5 requests the last 3 wait 50 ms each.
        let limits = ApiLimits {
            qps: 20.0,
            burst: 2,
        };
        let cluster = from_kubeconfig(&path, limits).await.expect("cluster");
        let started = Instant::now();
        let sent = (0..5).map(|_| send(&cluster));
        futures::future::join_all(sent).await;
        let seen: Vec<Instant> = seen.lock().expect("log").iter().map(|s| s.at).collect();
        assert_eq!(seen.len(), 5);
        let spread = seen
            .iter()
            .max()
            .expect("a request")
            .duration_since(started);
        assert!(
            spread >= Duration::from_millis(145),
            "5 requests within {spread:?}"
        );
    }

    #[tokio::test]
    async fn a_write_checked_while_leading_is_not_sent_after_the_lease_moved_while_it_queued() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (path, seen) = test_server(dir.path()).await;
        // 5 a second, 1 at once: five writes made together are sent at 0, 200, ... 800 ms.
        let limits = ApiLimits { qps: 5.0, burst: 1 };
        let cluster = from_kubeconfig(&path, limits).await.expect("cluster");
        // Leading for 300 ms from now: every write below is made while leading.
        let fence = crate::leadership::Fence::closed();
        let lease = Duration::from_millis(300);
        let started = Instant::now();
        fence.renewed(started, lease, Duration::ZERO);
        let writer = super::super::Writer::new(cluster.clone(), cluster, None, fence);
        let names: Vec<String> = (0..5).map(|i| format!("b{i}")).collect();
        let writes = names.iter().map(|name| {
            writer.set_binding_labels_cas(
                crate::api::BindingKind::CredentialsBinding,
                "garden-p",
                name,
                "1",
                &[("accountpool.io/dirty", "true")],
                &[],
            )
        });
        let results = futures::future::join_all(writes).await;
        let closed = started + lease;
        let seen: Vec<Instant> = seen.lock().expect("log").iter().map(|s| s.at).collect();
        let late: Vec<Duration> = seen
            .iter()
            .filter(|t| **t >= closed)
            .map(|t| t.duration_since(started))
            .collect();
        assert!(
            late.is_empty(),
            "writes reached the server after the fence closed at {lease:?}: at {late:?}"
        );
        let fenced = results
            .iter()
            .filter(|r| matches!(r, Err(super::super::K8sError::Fenced { .. })))
            .count();
        assert!(fenced >= 2, "{results:?}");
        assert_eq!(seen.len() + fenced, 5, "{results:?}");
    }

    #[tokio::test]
    async fn a_priority_request_does_not_wait_behind_the_budgets_backlog() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (path, seen) = test_server(dir.path()).await;
        // 2 a second, 1 at once: six requests made together take 2.5 s to go out.
        let limits = ApiLimits { qps: 2.0, burst: 1 };
        let cluster = from_kubeconfig(&path, limits).await.expect("cluster");
        let backlog: Vec<_> = (0..6)
            .map(|_| {
                let c = cluster.clone();
                tokio::spawn(async move { send(&c).await })
            })
            .collect();
        // The backlog is queued once its first request went out.
        while seen.lock().expect("log").is_empty() {
            tokio::task::yield_now().await;
        }
        let started = Instant::now();
        send(&cluster.priority()).await;
        let waited = started.elapsed();
        assert!(
            waited < Duration::from_millis(400),
            "a renewal waited {waited:?} behind the controllers' requests"
        );
        for b in backlog {
            b.await.expect("sent");
        }
    }

    async fn serve_connection(
        mut conn: tokio::net::TcpStream,
        id: usize,
        log: Arc<Mutex<Vec<Seen>>>,
    ) {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                match conn.read(&mut chunk).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
                continue;
            };
            let head = String::from_utf8_lossy(&buf[..end]).to_string();
            let body = content_length(&head);
            while buf.len() < end + 4 + body {
                match conn.read(&mut chunk).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            buf.drain(..end + 4 + body);
            let path = head.split(' ').nth(1).unwrap_or_default().to_string();
            log.lock().expect("log").push(Seen {
                at: Instant::now(),
                conn: id,
                path: path.clone(),
            });
            if path == "/hold" {
                return std::future::pending().await;
            }
            let answer =
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}";
            if conn.write_all(answer.as_bytes()).await.is_err() {
                return;
            }
        }
    }

    fn content_length(head: &str) -> usize {
        head.lines()
            .filter_map(|l| l.split_once(':'))
            .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
            .and_then(|(_, v)| v.trim().parse().ok())
            .unwrap_or(0)
    }

    async fn get(cluster: &Cluster, path: &str) {
        let request = http::Request::get(path).body(Vec::new()).expect("request");
        cluster
            .kube()
            .request_text(request)
            .await
            .expect("an answer");
    }

    /// The renewal after the controllers took the pool's only open connection: on a shared pool
    /// it went out on a new connection (a TLS handshake first, against a real API server); on the
    /// Lease's own it reuses the one its last request left open.
    #[tokio::test]
    async fn a_lease_request_keeps_its_connection_while_the_controllers_hold_theirs() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (path, seen) = test_server(dir.path()).await;
        let cluster = from_kubeconfig(&path, ApiLimits::UNLIMITED)
            .await
            .expect("cluster");
        let lease = cluster.lease();
        get(&lease, "/acquire").await;
        let controllers = cluster.clone();
        let held = tokio::spawn(async move { get(&controllers, "/hold").await });
        while seen.lock().expect("log").len() < 2 {
            tokio::task::yield_now().await;
        }
        get(&lease, "/renew").await;
        held.abort();
        let seen = seen.lock().expect("log").clone();
        let on = |p: &str| seen.iter().find(|s| s.path == p).map(|s| s.conn);
        assert_eq!(
            on("/renew"),
            on("/acquire"),
            "the renewal came on another connection: {seen:?}"
        );
        assert_ne!(on("/hold"), on("/acquire"), "{seen:?}");
    }

    #[tokio::test]
    async fn a_missing_garden_kubeconfig_is_named_in_the_error() {
        let path = Path::new("/nonexistent/garden.kubeconfig");
        let Err(err) = from_kubeconfig(path, ApiLimits::UNLIMITED).await else {
            panic!("a client from a file that does not exist");
        };
        assert!(matches!(err, ClientError::Read { .. }), "{err:?}");
        assert!(err.to_string().contains("/nonexistent/garden.kubeconfig"));
    }

    #[tokio::test]
    async fn a_kubeconfig_without_a_context_is_rejected_with_its_path() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("empty.kubeconfig");
        std::fs::write(&path, "apiVersion: v1\nkind: Config\n").expect("write");
        let Err(err) = from_kubeconfig(&path, ApiLimits::UNLIMITED).await else {
            panic!("a client from a kubeconfig without a context");
        };
        assert!(matches!(err, ClientError::Config { .. }), "{err:?}");
        assert!(err.to_string().contains("empty.kubeconfig"), "{err}");
    }
}
