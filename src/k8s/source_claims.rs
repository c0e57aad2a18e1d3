//! The AccountClaims that request sources create, as every replica's admission webhook sees
//! them: a watch cache of the claim namespace (only claims a source made) that wakes waiters on
//! every change, and the few calls the webhook makes (create, read, stamp and delete, both
//! conditioned on the version read).

use std::sync::Arc;

use futures::StreamExt;
use kube::Api;
use kube::api::{DeleteParams, Patch, Preconditions};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;

use super::{Cluster, K8sError};
use crate::api::{AccountClaim, SOURCE_FIELD_MANAGER};
use crate::labels;
use crate::sources::naming::ANNOTATION_ADMITTED_AT;

/// A cached view of source-created claims and the calls on them.
#[derive(Clone)]
pub struct SourceClaims {
    api: Api<AccountClaim>,
    namespace: String,
    store: Store<AccountClaim>,
    changed: watch::Receiver<u64>,
}

/// Why a claim could not be created.
#[derive(Debug)]
pub enum CreateOutcome {
    Created(AccountClaim),
    /// One of that name exists already (it is returned as read).
    Exists(AccountClaim),
}

impl SourceClaims {
    /// Starts the watch of `namespace`; it runs until the returned task is aborted.
    pub fn start(cluster: &Cluster, namespace: &str) -> (Self, tokio::task::JoinHandle<()>) {
        let api: Api<AccountClaim> = Api::namespaced(cluster.kube().clone(), namespace);
        let (store, writer) = reflector::store();
        let (tx, rx) = watch::channel(0u64);
        let cfg = watcher::Config::default()
            .labels(labels::SOURCE_ID)
            .any_semantic();
        let stream = reflector::reflector(writer, watcher(api.clone(), cfg).default_backoff());
        let task = tokio::spawn(async move {
            stream
                .for_each(|ev| {
                    match ev {
                        Ok(_) => tx.send_modify(|v| *v = v.wrapping_add(1)),
                        Err(e) => tracing::warn!(error = %e, "source claim watch error; retrying"),
                    }
                    futures::future::ready(())
                })
                .await;
        });
        (
            Self {
                api,
                namespace: namespace.to_string(),
                store,
                changed: rx,
            },
            task,
        )
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Whether the cache has listed once.
    pub fn is_ready(&self) -> bool {
        super::caches::store_ready(&self.store)
    }

    pub async fn wait_ready(&self) {
        let _ = self.store.wait_until_ready().await;
    }

    /// The cached claim of that name.
    pub fn cached(&self, name: &str) -> Option<Arc<AccountClaim>> {
        self.store
            .get(&ObjectRef::new(name).within(&self.namespace))
    }

    /// A receiver that changes whenever the cache does.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changed.clone()
    }

    /// Reads a claim from the API server (the cache may not show a claim created a moment ago).
    pub async fn get(&self, name: &str) -> Result<Option<AccountClaim>, K8sError> {
        self.api.get_opt(name).await.map_err(|e| {
            K8sError::classify("read", format!("AccountClaim {}/{name}", self.namespace), e)
        })
    }

    /// Creates a claim; an existing one of the same name is read and returned instead.
    pub async fn create(&self, claim: &AccountClaim) -> Result<CreateOutcome, K8sError> {
        let name = claim.metadata.name.clone().unwrap_or_default();
        let what = format!("AccountClaim {}/{name}", self.namespace);
        let pp = super::params::post(SOURCE_FIELD_MANAGER);
        match self.api.create(&pp, claim).await {
            Ok(c) => Ok(CreateOutcome::Created(c)),
            Err(kube::Error::Api(s)) if s.is_already_exists() => match self.get(&name).await? {
                Some(c) => Ok(CreateOutcome::Exists(c)),
                None => Err(K8sError::Conflict { what }),
            },
            Err(e) => Err(K8sError::classify("create", what, e)),
        }
    }

    /// Stamps a claim the webhook hands out (`accountpool.io/admitted-at` = `at`), only if it is
    /// still the version that was read: the stamp moves its resourceVersion, so a clean-up that
    /// read the claim before fails its delete precondition. A claim changed since is a Conflict.
    pub async fn stamp(
        &self,
        claim: &AccountClaim,
        at: jiff::Timestamp,
    ) -> Result<AccountClaim, K8sError> {
        let name = claim.metadata.name.as_deref().unwrap_or_default();
        let what = format!("AccountClaim {}/{name}", self.namespace);
        // A merge patch without a resourceVersion would not be conditioned.
        let Some(rv) = claim.metadata.resource_version.as_deref() else {
            return Err(K8sError::Conflict { what });
        };
        let patch = serde_json::json!({"metadata": {
            "resourceVersion": rv,
            // Nanoseconds: two stamps never carry the same value, so each one is a change.
            "annotations": {ANNOTATION_ADMITTED_AT: at.to_string()},
        }});
        let pp = super::params::patch(SOURCE_FIELD_MANAGER);
        self.api
            .patch(name, &pp, &Patch::Merge(&patch))
            .await
            .map_err(|e| K8sError::classify("stamp", what, e))
    }

    /// Deletes a claim only if it is still the version that was read: a claim the leader bound
    /// in the meantime is kept (the caller reads it again).
    pub async fn delete_unchanged(
        &self,
        name: &str,
        uid: Option<String>,
        resource_version: Option<String>,
    ) -> Result<(), K8sError> {
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                uid,
                resource_version,
            }),
            ..DeleteParams::default()
        };
        match self.api.delete(name, &dp).await {
            Ok(_) => Ok(()),
            Err(e) => match K8sError::classify(
                "delete",
                format!("AccountClaim {}/{name}", self.namespace),
                e,
            ) {
                K8sError::NotFound { .. } => Ok(()),
                other => Err(other),
            },
        }
    }
}
