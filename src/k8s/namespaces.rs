//! Reads a namespace's labels for the tenant policy (`spec.tenants`): one GET, only when a rule
//! of the policy needs them (`tenancy::needs_namespace_labels`). RBAC: `get` on namespaces.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Namespace;
use kube::Api;

use super::{Cluster, K8sError};

#[derive(Clone)]
pub struct NamespaceReader {
    api: Api<Namespace>,
}

impl NamespaceReader {
    pub fn new(cluster: &Cluster) -> Self {
        Self {
            api: Api::all(cluster.kube().clone()),
        }
    }

    /// The namespace's labels; `None` when it does not exist.
    pub async fn labels(&self, name: &str) -> Result<Option<BTreeMap<String, String>>, K8sError> {
        self.api
            .get_opt(name)
            .await
            .map(|ns| ns.map(|ns| ns.metadata.labels.unwrap_or_default()))
            .map_err(|e| K8sError::classify("read", format!("Namespace {name}"), e))
    }

    /// The labels when `needed`, else `None` without a call. A failed read is reported and
    /// counts as unreadable (a rule that needs the labels then does not hold).
    pub async fn labels_if(&self, needed: bool, name: &str) -> Option<BTreeMap<String, String>> {
        if !needed || name.is_empty() {
            return None;
        }
        match self.labels(name).await {
            Ok(labels) => labels,
            Err(e) => {
                tracing::warn!(error = %e, namespace = name, "cannot read the namespace's labels for spec.tenants");
                None
            }
        }
    }
}
