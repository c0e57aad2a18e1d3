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

impl NamespaceReader {
    /// As [`Self::labels_if`], given up at `by`: an admission call must answer within its
    /// decision timeout, and kube-client sets no read timeout. A read given up counts as
    /// unreadable.
    pub async fn labels_by(
        &self,
        needed: bool,
        name: &str,
        by: tokio::time::Instant,
    ) -> Option<BTreeMap<String, String>> {
        match tokio::time::timeout_at(by, self.labels_if(needed, name)).await {
            Ok(labels) => labels,
            Err(_) => {
                tracing::warn!(
                    namespace = name,
                    "the namespace's labels for spec.tenants were not read within the decision timeout"
                );
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use hap_testkit::Call;

    /// A Namespace read the API server never answers ends at the call's deadline, unreadable:
    /// the admission call's whole answer is bounded by the decision timeout.
    #[tokio::test(start_paused = true)]
    async fn a_namespace_read_ends_at_the_calls_deadline() {
        let (cluster, script) = crate::k8s::scripted();
        script.expect([Call::get("/api/v1/namespaces/kcp").hang()]);
        let reader = NamespaceReader::new(&cluster);
        let by = tokio::time::Instant::now() + Duration::from_secs(3);
        let read = tokio::time::timeout(Duration::from_secs(60), reader.labels_by(true, "kcp", by))
            .await
            .expect("the read ends at its deadline");
        assert_eq!(read, None, "unreadable");
        assert_eq!(tokio::time::Instant::now(), by);
        script.done();
    }
}
