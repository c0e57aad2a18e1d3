//! The API side of request sources on the leader: watch caches of the foreign request objects
//! (Kyma Runtimes, openmcp Clusters, openmcp ClusterConfigs, Shoots), which report why they cannot
//! watch (a CRD not installed, a permission missing) instead of failing, and the writes the
//! source controller makes: claims it creates or labels or deletes, ClusterConfigs it owns. Every
//! one of those writes is sent through the fenced handles of the `Writer` it is built from;
//! deletes are conditioned on the uid and resourceVersion the decision was taken on.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use kube::api::{DeleteParams, DynamicObject, GetParams, Patch, PatchParams, Preconditions};
use kube::core::{ApiResource, Request};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use serde_json::{Value, json};

use super::caches::{ChangeFeed, LIST_PAGE};
use super::source_store::{Shape, SourceStore, trim};
use super::{Cluster, K8sError, Writer};
use crate::api::{AccountClaim, FIELD_MANAGER, SOURCE_FIELD_MANAGER};
use crate::sources::sync::ConfigRef;

/// A watch of one foreign resource, in one namespace or all.
pub struct ForeignCache<T = Value> {
    resource: ApiResource,
    store: Arc<Mutex<SourceStore<T>>>,
    /// The last watch error, cleared by the next event: why the source cannot be watched.
    error: Arc<Mutex<Option<String>>>,
    /// Events seen (errors included): the source controller skips a pass nothing moved for.
    events: Arc<std::sync::atomic::AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl<T> Drop for ForeignCache<T> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ForeignCache<Value> {
    /// Starts watching `resource` in all namespaces, keeping every object as trimmed (`trim`);
    /// every event bumps `feed`.
    pub fn start(cluster: &Cluster, resource: ApiResource, feed: ChangeFeed) -> Self {
        Self::start_in(
            cluster,
            resource,
            None,
            Box::new(std::convert::identity),
            feed,
        )
    }
}

impl<T: Send + Sync + 'static> ForeignCache<T> {
    /// Starts watching `resource` in `namespace` (all when `None`), keeping `shape` of each
    /// object (`SourceKind::watched`); every event bumps `feed`. The list comes in the
    /// inventory's pages (`LIST_PAGE`), not kube's 500: each page is buffered and decoded whole,
    /// and a landscape's Shoot is ~4 KB of JSON, ~24 KB decoded.
    pub fn start_in(
        cluster: &Cluster,
        resource: ApiResource,
        namespace: Option<&str>,
        shape: Shape<T>,
        feed: ChangeFeed,
    ) -> Self {
        let client = cluster.kube();
        let api: Api<DynamicObject> = match namespace {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
            None => Api::all_with(client.clone(), &resource),
        };
        let store = Arc::new(Mutex::new(SourceStore::new(shape)));
        let error = Arc::new(Mutex::new(None));
        let events = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let stream = watcher(api, watcher::Config::default().page_size(LIST_PAGE))
            .default_backoff()
            .modify(trim);
        let task = {
            let (error, kind, seen) = (error.clone(), resource.kind.clone(), events.clone());
            let objects = store.clone();
            tokio::spawn(async move {
                stream
                    .for_each(|ev| {
                        seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        let mut slot = error.lock().unwrap_or_else(|p| p.into_inner());
                        match ev {
                            Ok(ev) => {
                                objects.lock().unwrap_or_else(|p| p.into_inner()).apply(ev);
                                *slot = None;
                                feed.bump();
                            }
                            Err(e) => {
                                if slot.is_none() {
                                    tracing::warn!(kind, error = %e, "cannot watch request source objects; retrying");
                                }
                                *slot = Some(e.to_string());
                                feed.bump();
                            }
                        }
                        futures::future::ready(())
                    })
                    .await;
            })
        };
        Self {
            resource,
            store,
            error,
            events,
            task,
        }
    }

    /// How many events the watch has delivered so far.
    pub fn events(&self) -> u64 {
        self.events.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub fn resource(&self) -> &ApiResource {
        &self.resource
    }

    pub fn is_ready(&self) -> bool {
        self.lock().is_ready()
    }

    /// Objects held now.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Why it does not watch, if it does not.
    pub fn error(&self) -> Option<String> {
        self.error.lock().ok().and_then(|e| e.clone())
    }

    /// The cached objects as kept (`SourceStore`).
    pub fn values(&self) -> Vec<Arc<T>> {
        self.lock().values()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SourceStore<T>> {
        // Each event is applied whole between two statements that cannot panic.
        self.store.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The writes of the source controller: built from the `Writer`, whose fence each of them passes
/// when it is sent, so that a paused ex-leader that resumes sends none.
#[derive(Clone)]
pub struct SourceWrites {
    writer: Writer,
}

/// A claim read live, and the API server's clock at that read (the `Date` of its answer).
pub struct LiveRead {
    pub claim: Option<AccountClaim>,
    pub server_now: Option<jiff::Timestamp>,
}

fn params() -> PatchParams {
    super::params::patch(FIELD_MANAGER)
}

/// A delete conditioned on both the uid and the resourceVersion it was decided on.
fn conditioned(uid: Option<String>, resource_version: Option<String>) -> DeleteParams {
    DeleteParams {
        preconditions: Some(Preconditions {
            uid,
            resource_version,
        }),
        ..DeleteParams::default()
    }
}

/// The `Date` header of an answer (RFC 9110 IMF-fixdate, one-second resolution).
fn server_date(headers: &http::HeaderMap) -> Option<jiff::Timestamp> {
    let v = headers.get(http::header::DATE)?.to_str().ok()?;
    jiff::fmt::rfc2822::DateTimeParser::new()
        .parse_timestamp(v)
        .ok()
}

impl SourceWrites {
    pub fn new(writer: Writer) -> Self {
        Self { writer }
    }

    fn client(&self) -> Client {
        self.writer.own().kube().clone()
    }

    /// Creates a claim the controller derived (adoption, or a Cluster whose name was generated).
    /// An existing claim of that name is left as it is.
    pub async fn create_claim(&self, ns: &str, claim: &AccountClaim) -> Result<(), K8sError> {
        let api: Api<AccountClaim> = Api::namespaced(self.client(), ns);
        let pp = super::params::post(SOURCE_FIELD_MANAGER);
        let name = claim.metadata.name.clone().unwrap_or_default();
        let what = format!("AccountClaim {ns}/{name}");
        match api.create(&pp, claim).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.is_already_exists() => Ok(()),
            Err(e) => Err(K8sError::classify("create", what, e)),
        }
    }

    /// Adds labels to a claim (the source object's UID once it exists).
    pub async fn label_claim(
        &self,
        ns: &str,
        name: &str,
        labels: &BTreeMap<String, String>,
    ) -> Result<(), K8sError> {
        let api: Api<AccountClaim> = Api::namespaced(self.client(), ns);
        let pp = super::params::patch(SOURCE_FIELD_MANAGER);
        let what = format!("AccountClaim {ns}/{name}");
        api.patch_metadata(
            name,
            &pp,
            &Patch::Merge(json!({"metadata": {"labels": labels}})),
        )
        .await
        .map(|_| ())
        .map_err(|e| K8sError::classify("label", what, e))
    }

    /// Reads a claim with its annotations (the cache drops them).
    pub async fn get_claim(&self, ns: &str, name: &str) -> Result<Option<AccountClaim>, K8sError> {
        Ok(self.read_claim(ns, name).await?.claim)
    }

    /// Reads a claim with its annotations and resourceVersion, and the API server's clock.
    pub async fn read_claim(&self, ns: &str, name: &str) -> Result<LiveRead, K8sError> {
        let what = || format!("AccountClaim {ns}/{name}");
        let request = Request::new(AccountClaim::url_path(&(), Some(ns)))
            .get(name, &GetParams::default())
            .map_err(|e| K8sError::classify("read", what(), kube::Error::BuildRequest(e)))?;
        let answer = self
            .writer
            .own()
            .kube()
            .send(request.map(kube::client::Body::from))
            .await
            .map_err(|e| K8sError::classify("read", what(), e))?;
        let server_now = server_date(answer.headers());
        let code = answer.status();
        let body = answer
            .into_body()
            .collect_bytes()
            .await
            .map_err(|e| K8sError::classify("read", what(), e))?;
        if code == http::StatusCode::NOT_FOUND {
            return Ok(LiveRead {
                claim: None,
                server_now,
            });
        }
        if !code.is_success() {
            let status = serde_json::from_slice::<kube::core::Status>(&body).unwrap_or_else(|_| {
                kube::core::Status::failure(&String::from_utf8_lossy(&body), "")
                    .with_code(code.as_u16())
            });
            return Err(K8sError::classify(
                "read",
                what(),
                kube::Error::Api(status.boxed()),
            ));
        }
        let claim = serde_json::from_slice(&body).map_err(|source| K8sError::Encode {
            what: what(),
            source,
        })?;
        Ok(LiveRead {
            claim: Some(claim),
            server_now,
        })
    }

    /// Deletes the claim of a vanished request (its finalizer then releases the binding), only
    /// if it is still the claim read (uid) and unchanged since (resourceVersion): a webhook that
    /// handed it out meanwhile stamped it, and the delete then fails with `Conflict`.
    pub async fn delete_claim(
        &self,
        ns: &str,
        name: &str,
        uid: &str,
        resource_version: &str,
    ) -> Result<(), K8sError> {
        let api: Api<AccountClaim> = Api::namespaced(self.client(), ns);
        let dp = conditioned(Some(uid.into()), Some(resource_version.into()));
        let what = format!("AccountClaim {ns}/{name}");
        match api.delete(name, &dp).await {
            Ok(_) => Ok(()),
            Err(e) => match K8sError::classify("delete", what, e) {
                K8sError::NotFound { .. } => Ok(()),
                other => Err(other),
            },
        }
    }

    /// Whether a request object exists, read from the API server (not the cache), in
    /// `cluster` (the garden for Shoots).
    pub async fn object_exists(
        cluster: &Cluster,
        resource: &ApiResource,
        ns: &str,
        name: &str,
    ) -> Result<bool, K8sError> {
        let client = cluster.kube();
        Api::<DynamicObject>::namespaced_with(client.clone(), ns, resource)
            .get_metadata_opt(name)
            .await
            .map(|o| o.is_some())
            .map_err(|e| K8sError::classify("read", format!("{} {ns}/{name}", resource.kind), e))
    }

    /// Creates a ClusterConfig (`existing_version: None`), or puts the spec of one of the
    /// operator's own back, conditioned on the version its ownership was checked at.
    pub async fn put_cluster_config(
        &self,
        resource: &ApiResource,
        obj: &Value,
        existing_version: Option<String>,
    ) -> Result<(), K8sError> {
        let ns = obj
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let name = obj
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let what = format!("ClusterConfig {ns}/{name}");
        let api: Api<DynamicObject> = Api::namespaced_with(self.client(), ns, resource);
        let result = match existing_version {
            None => {
                let body: DynamicObject =
                    serde_json::from_value(obj.clone()).map_err(|source| K8sError::Encode {
                        what: what.clone(),
                        source,
                    })?;
                let pp = super::params::post(FIELD_MANAGER);
                api.create(&pp, &body).await.map(|_| ())
            }
            Some(rv) => {
                let body = json!({
                    "metadata": {"resourceVersion": rv},
                    "spec": obj.get("spec"),
                });
                api.patch(name, &params(), &Patch::Merge(body))
                    .await
                    .map(|_| ())
            }
        };
        match result {
            Ok(()) => Ok(()),
            Err(kube::Error::Api(s)) if s.is_already_exists() => Err(K8sError::Conflict { what }),
            Err(e) => Err(K8sError::classify("write", what, e)),
        }
    }

    /// Deletes a ClusterConfig of the operator's, only if it is still the object at the version
    /// the pass saw (and so still the operator's).
    pub async fn delete_cluster_config(
        &self,
        resource: &ApiResource,
        cfg: &ConfigRef,
    ) -> Result<(), K8sError> {
        let (ns, name) = (&cfg.namespace, &cfg.name);
        let api: Api<DynamicObject> = Api::namespaced_with(self.client(), ns, resource);
        let dp = conditioned(cfg.uid.clone(), cfg.resource_version.clone());
        let what = format!("ClusterConfig {ns}/{name}");
        match api.delete(name, &dp).await {
            Ok(_) => Ok(()),
            Err(e) => match K8sError::classify("delete", what, e) {
                K8sError::NotFound { .. } => Ok(()),
                other => Err(other),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::leadership::Fence;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::{Duration, Instant};

    /// A client of an address that counts the connections made to it and drops each at once, so
    /// that a write that was sent fails with a transport error instead of being `Fenced`.
    async fn counting_client() -> (Client, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let count = Arc::new(AtomicUsize::new(0));
        let seen = count.clone();
        tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                seen.fetch_add(1, Ordering::SeqCst);
                drop(conn);
            }
        });
        let config = kube::Config::new(url.parse().expect("url"));
        (Client::try_from(config).expect("client"), count)
    }

    fn fenced<T: std::fmt::Debug>(what: &str, r: Result<T, K8sError>) {
        assert!(
            matches!(r, Err(K8sError::Fenced { .. })),
            "{what}: {r:?} (sent although not leading)"
        );
    }

    #[tokio::test]
    async fn a_replica_that_does_not_lead_sends_no_source_write() {
        let (client, connections) = counting_client().await;
        let expired = Fence::closed();
        expired.renewed(
            Instant::now() - Duration::from_secs(30),
            Duration::from_secs(15),
            Duration::ZERO,
        );
        for fence in [Fence::closed(), expired] {
            let cluster = Cluster::from(client.clone());
            let writer = Writer::new(cluster.clone(), cluster, None, fence);
            let w = SourceWrites::new(writer);
            let claim: AccountClaim = serde_json::from_value(json!({
                "apiVersion": "accountpool.io/v1alpha1", "kind": "AccountClaim",
                "metadata": {"name": "runtime.kcp.r1"},
                "spec": {"globalAccount": "ga", "plan": "aws", "platformRegion": "cf-eu10"},
            }))
            .expect("claim");
            let cfg = json!({"metadata": {"namespace": "p", "name": "c--hap"}, "spec": {}});
            let res = crate::sources::kinds::cluster_config_resource();
            let cfg_ref = ConfigRef {
                namespace: "p".into(),
                name: "c--hap".into(),
                uid: Some("u".into()),
                resource_version: Some("1".into()),
            };
            fenced("create claim", w.create_claim("hap", &claim).await);
            fenced(
                "label claim",
                w.label_claim("hap", "runtime.kcp.r1", &BTreeMap::new())
                    .await,
            );
            fenced(
                "delete claim",
                w.delete_claim("hap", "runtime.kcp.r1", "u", "1").await,
            );
            fenced(
                "create ClusterConfig",
                w.put_cluster_config(&res, &cfg, None).await,
            );
            fenced(
                "rewrite ClusterConfig",
                w.put_cluster_config(&res, &cfg, Some("3".into())).await,
            );
            fenced(
                "delete ClusterConfig",
                w.delete_cluster_config(&res, &cfg_ref).await,
            );
        }
        assert_eq!(connections.load(Ordering::SeqCst), 0, "requests were sent");
    }
}
