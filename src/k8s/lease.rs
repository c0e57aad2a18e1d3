//! The leader Lease (coordination.k8s.io/v1): read it, and write it only with a
//! resourceVersion precondition (merge patches: the RBAC grants `get` and `patch` on the one
//! Lease, `create` to make it), so that two replicas can never both believe their write won.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Api;
use kube::api::Patch;
use serde_json::json;

use super::{Cluster, K8sError};
use crate::leadership::LeaseRecord;

pub struct LeaseApi {
    api: Api<Lease>,
    name: String,
    namespace: String,
}

/// The lease as read, to write it back conditioned on its version.
pub struct Current(Lease);

impl Current {
    pub fn record(&self) -> LeaseRecord {
        let spec = self.0.spec.clone().unwrap_or_default();
        LeaseRecord {
            holder: spec.holder_identity.filter(|h| !h.is_empty()),
            duration: Duration::from_secs(
                u64::try_from(spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0),
            ),
            renew_time: spec.renew_time.map(|t| t.0.to_string()),
            transitions: spec.lease_transitions.unwrap_or(0),
        }
    }
}

impl LeaseApi {
    pub fn new(cluster: &Cluster, namespace: &str, name: &str) -> Self {
        Self {
            api: Api::namespaced(cluster.kube().clone(), namespace),
            name: name.to_string(),
            namespace: namespace.to_string(),
        }
    }

    fn what(&self) -> String {
        format!("Lease {}/{}", self.namespace, self.name)
    }

    /// The lease, if it exists.
    pub async fn get(&self) -> Result<Option<Current>, K8sError> {
        self.api
            .get_opt(&self.name)
            .await
            .map(|l| l.map(Current))
            .map_err(|e| K8sError::classify("read", self.what(), e))
    }

    /// Writes the lease as held by `me` for `duration`: creates it when `current` is `None`,
    /// else patches it conditioned on the version read (a merge patch that names
    /// `metadata.resourceVersion` fails with a conflict when the lease moved on). A create into a
    /// namespace that does not exist fails with `NotFound`. Returns the lease as written, so that
    /// the holder can renew from it without reading it first.
    pub async fn hold(
        &self,
        current: Option<&Current>,
        me: &str,
        duration: Duration,
    ) -> Result<Current, K8sError> {
        let now = MicroTime(Timestamp::now());
        let seconds = i32::try_from(duration.as_secs()).unwrap_or(i32::MAX);
        let result = match current {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        namespace: Some(self.namespace.clone()),
                        ..Default::default()
                    },
                    spec: Some(LeaseSpec {
                        holder_identity: Some(me.to_string()),
                        lease_duration_seconds: Some(seconds),
                        acquire_time: Some(now.clone()),
                        renew_time: Some(now),
                        lease_transitions: Some(0),
                        ..Default::default()
                    }),
                };
                let pp = super::params::post(&field_manager());
                self.api.create(&pp, &lease).await
            }
            Some(Current(lease)) => {
                let spec = lease.spec.clone().unwrap_or_default();
                let mut patch = json!({
                    "metadata": {"resourceVersion": lease.metadata.resource_version},
                    "spec": {
                        "holderIdentity": me,
                        "leaseDurationSeconds": seconds,
                        "renewTime": now,
                    },
                });
                if spec.holder_identity.as_deref() != Some(me) {
                    patch["spec"]["acquireTime"] = json!(now);
                    patch["spec"]["leaseTransitions"] =
                        json!(spec.lease_transitions.unwrap_or(0).saturating_add(1));
                }
                self.patch(patch).await
            }
        };
        result
            .map(Current)
            .map_err(|e| K8sError::classify("write", self.what(), e))
    }

    async fn patch(&self, body: serde_json::Value) -> Result<Lease, kube::Error> {
        let pp = super::params::patch(&field_manager());
        self.api.patch(&self.name, &pp, &Patch::Merge(body)).await
    }

    /// Gives the lease up (on a clean shutdown), so that a standby takes over at once.
    pub async fn release(&self, current: &Current) -> Result<(), K8sError> {
        let body = json!({
            "metadata": {"resourceVersion": current.0.metadata.resource_version},
            "spec": {
                "holderIdentity": null,
                "leaseDurationSeconds": 1,
                "renewTime": MicroTime(Timestamp::now()),
            },
        });
        self.patch(body)
            .await
            .map(drop)
            .map_err(|e| K8sError::classify("release", self.what(), e))
    }
}

fn field_manager() -> String {
    format!("{}-lease", crate::api::FIELD_MANAGER)
}
