//! The API side of request sources on the leader: watch caches of the foreign request objects
//! (Kyma Runtimes, openmcp Clusters, openmcp ClusterConfigs, Shoots), which report why they cannot
//! watch (a CRD not installed, a permission missing) instead of failing, and the writes the
//! source controller makes: claims it creates or labels or deletes, ClusterConfigs it owns.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions};
use kube::core::ApiResource;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use serde_json::{Value, json};

use super::K8sError;
use super::caches::{ChangeFeed, store_ready};
use crate::api::{AccountClaim, FIELD_MANAGER, SOURCE_FIELD_MANAGER};

/// A watch of one foreign resource, in one namespace or all.
pub struct ForeignCache {
    resource: ApiResource,
    store: Store<DynamicObject>,
    /// The last watch error, cleared by the next event: why the source cannot be watched.
    error: Arc<Mutex<Option<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ForeignCache {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Keeps what the source controller reads: metadata without managed fields, the operator's
/// own annotations, and the spec; never a status.
fn trim(obj: &mut DynamicObject) {
    let meta = obj.meta_mut();
    meta.managed_fields = None;
    if let Some(a) = meta.annotations.as_mut() {
        a.retain(|k, _| k.starts_with("accountpool.io/"));
    }
    if let Some(map) = obj.data.as_object_mut() {
        map.remove("status");
    }
}

impl ForeignCache {
    /// Starts watching `resource` in all namespaces; every event bumps `feed`.
    pub fn start(client: &Client, resource: ApiResource, feed: ChangeFeed) -> Self {
        Self::start_in(client, resource, None, feed)
    }

    /// Starts watching `resource` in `namespace` (all when `None`); every event bumps `feed`.
    pub fn start_in(
        client: &Client,
        resource: ApiResource,
        namespace: Option<&str>,
        feed: ChangeFeed,
    ) -> Self {
        let api: Api<DynamicObject> = match namespace {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
            None => Api::all_with(client.clone(), &resource),
        };
        let writer = reflector::store::Writer::new(resource.clone());
        let store = writer.as_reader();
        let error = Arc::new(Mutex::new(None));
        let stream = reflector::reflector(
            writer,
            watcher(api, watcher::Config::default().any_semantic())
                .default_backoff()
                .modify(trim),
        );
        let task = {
            let (error, kind) = (error.clone(), resource.kind.clone());
            tokio::spawn(async move {
                stream
                    .for_each(|ev| {
                        let mut slot = error.lock().unwrap_or_else(|p| p.into_inner());
                        match ev {
                            Ok(_) => {
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
            task,
        }
    }

    pub fn resource(&self) -> &ApiResource {
        &self.resource
    }

    pub fn is_ready(&self) -> bool {
        store_ready(&self.store)
    }

    /// Why it does not watch, if it does not.
    pub fn error(&self) -> Option<String> {
        self.error.lock().ok().and_then(|e| e.clone())
    }

    pub fn objects(&self) -> Vec<Arc<DynamicObject>> {
        self.store.state()
    }
}

/// The writes of the source controller.
#[derive(Clone)]
pub struct SourceWrites {
    client: Client,
}

fn params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    }
}

impl SourceWrites {
    pub fn new(client: Client) -> Self {
        Self { client }
    }

    /// Creates a claim the controller derived (adoption, or a Cluster whose name was generated).
    /// An existing claim of that name is left as it is.
    pub async fn create_claim(&self, ns: &str, claim: &AccountClaim) -> Result<(), K8sError> {
        let api: Api<AccountClaim> = Api::namespaced(self.client.clone(), ns);
        let pp = PostParams {
            dry_run: false,
            field_manager: Some(SOURCE_FIELD_MANAGER.into()),
        };
        let name = claim.metadata.name.clone().unwrap_or_default();
        match api.create(&pp, claim).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.is_already_exists() => Ok(()),
            Err(e) => Err(K8sError::classify(
                "create",
                format!("AccountClaim {ns}/{name}"),
                e,
            )),
        }
    }

    /// Adds labels to a claim (the source object's UID once it exists).
    pub async fn label_claim(
        &self,
        ns: &str,
        name: &str,
        labels: &BTreeMap<String, String>,
    ) -> Result<(), K8sError> {
        let api: Api<AccountClaim> = Api::namespaced(self.client.clone(), ns);
        let pp = PatchParams {
            field_manager: Some(SOURCE_FIELD_MANAGER.into()),
            ..Default::default()
        };
        api.patch_metadata(
            name,
            &pp,
            &Patch::Merge(json!({"metadata": {"labels": labels}})),
        )
        .await
        .map(|_| ())
        .map_err(|e| K8sError::classify("label", format!("AccountClaim {ns}/{name}"), e))
    }

    /// Reads a claim with its annotations (the cache drops them).
    pub async fn get_claim(&self, ns: &str, name: &str) -> Result<Option<AccountClaim>, K8sError> {
        Api::<AccountClaim>::namespaced(self.client.clone(), ns)
            .get_opt(name)
            .await
            .map_err(|e| K8sError::classify("read", format!("AccountClaim {ns}/{name}"), e))
    }

    /// Deletes the claim of a vanished request (its finalizer then releases the binding).
    pub async fn delete_claim(
        &self,
        ns: &str,
        name: &str,
        uid: Option<String>,
    ) -> Result<(), K8sError> {
        let api: Api<AccountClaim> = Api::namespaced(self.client.clone(), ns);
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                uid,
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(name, &dp).await {
            Ok(_) => Ok(()),
            Err(e) => match K8sError::classify("delete", format!("AccountClaim {ns}/{name}"), e) {
                K8sError::NotFound { .. } => Ok(()),
                other => Err(other),
            },
        }
    }

    /// Whether a request object exists, read from the API server (not the cache), through
    /// `client` (the garden's for Shoots).
    pub async fn object_exists(
        client: &Client,
        resource: &ApiResource,
        ns: &str,
        name: &str,
    ) -> Result<bool, K8sError> {
        Api::<DynamicObject>::namespaced_with(client.clone(), ns, resource)
            .get_metadata_opt(name)
            .await
            .map(|o| o.is_some())
            .map_err(|e| K8sError::classify("read", format!("{} {ns}/{name}", resource.kind), e))
    }

    /// Creates a ClusterConfig, or puts the spec of the existing one back (the operator owns
    /// it), conditioned on the version read.
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
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), ns, resource);
        let result = match existing_version {
            None => {
                let body: DynamicObject =
                    serde_json::from_value(obj.clone()).map_err(|source| K8sError::Encode {
                        what: what.clone(),
                        source,
                    })?;
                let pp = PostParams {
                    dry_run: false,
                    field_manager: Some(FIELD_MANAGER.into()),
                };
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

    /// Deletes a ClusterConfig of a vanished Cluster.
    pub async fn delete_cluster_config(
        &self,
        resource: &ApiResource,
        ns: &str,
        name: &str,
    ) -> Result<(), K8sError> {
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), ns, resource);
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(e) => match K8sError::classify("delete", format!("ClusterConfig {ns}/{name}"), e) {
                K8sError::NotFound { .. } => Ok(()),
                other => Err(other),
            },
        }
    }
}
