//! Writes: status through `/status` with server-side apply under one field manager, binding
//! labels with a resourceVersion compare-and-swap, finalizers with JSON-patch `test`, events.
//! Every write passes the leadership fence when it is sent (`Cluster::fenced`, `k8s::gate`).

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::PostParams;
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, Request};
use kube::{Client, Resource, ResourceExt};
use serde::Deserialize;
use serde_json::json;

use super::{Cluster, K8sError};
use crate::api::{
    AccountClaim, AccountClaimStatus, BindingKind, CLAIM_FINALIZER, FIELD_MANAGER, HapConfig,
    HapConfigStatus,
};
use crate::labels::{CLAIMED_BY, FILLING};
use crate::leadership::Fence;

/// Every write the operator makes goes through here: binding labels to the garden, everything
/// else (status, finalizers, events) to the operator's own cluster. It hands out the clusters'
/// handles, never a client: a write is made by a method of this type or of a writer built on it
/// (`k8s::sources::SourceWrites`), through handles fenced by its fence, so each write passes the
/// fence when it is sent.
#[derive(Clone)]
pub struct Writer {
    own: Cluster,
    garden: Cluster,
    /// `reportingInstance` of the events: the replica's identity, else the field manager.
    instance: String,
}

impl Writer {
    pub fn new(own: Cluster, garden: Cluster, instance: Option<String>, fence: Fence) -> Self {
        Self {
            instance: instance.unwrap_or_else(|| FIELD_MANAGER.into()),
            own: own.fenced(&fence),
            garden: garden.fenced(&fence),
        }
    }

    /// The operator's own cluster (HapConfigs, claims, request objects other than Shoots).
    pub fn own(&self) -> &Cluster {
        &self.own
    }

    /// The garden (bindings and Shoots); the operator's own cluster when they are one.
    pub fn garden(&self) -> &Cluster {
        &self.garden
    }

    /// Records the last valid HapConfig generation (`k8s::last_good`). A paused ex-leader that
    /// resumes must not write it either: it may hold an older generation than the new leader.
    pub async fn put_last_good(
        &self,
        record: &super::last_good::LastGoodApi,
        good: &super::last_good::LastGood,
    ) -> Result<(), K8sError> {
        record.put(&self.own, good).await
    }

    /// Applies a HapConfig's status, conditioned on the resourceVersion it was computed from,
    /// so that two instances (or a stale copy) never overwrite a newer status unseen.
    pub async fn apply_config_status(
        &self,
        name: &str,
        resource_version: Option<&str>,
        status: &HapConfigStatus,
    ) -> Result<(), K8sError> {
        let body = json!({
            "apiVersion": "accountpool.io/v1alpha1",
            "kind": "HapConfig",
            "metadata": {"resourceVersion": resource_version},
            "status": status,
        });
        let what = format!("HapConfig {name}");
        let request = Request::new(HapConfig::url_path(&(), None));
        apply_status(self.own.kube(), &request, name, body, what)
            .await
            .map(drop)
    }

    /// Applies an AccountClaim's status, conditioned on the resourceVersion the decision was
    /// made on: a decision taken on a stale copy fails with a conflict and is taken again.
    /// Returns the claim's new resourceVersion.
    pub async fn apply_claim_status(
        &self,
        ns: &str,
        name: &str,
        resource_version: Option<&str>,
        status: &AccountClaimStatus,
    ) -> Result<Option<String>, K8sError> {
        let body = json!({
            "apiVersion": "accountpool.io/v1alpha1",
            "kind": "AccountClaim",
            "metadata": {"resourceVersion": resource_version},
            "status": status,
        });
        let what = format!("AccountClaim {ns}/{name}");
        let request = Request::new(AccountClaim::url_path(&(), Some(ns)));
        apply_status(self.own.kube(), &request, name, body, what).await
    }

    /// Sets labels (and annotations) on a binding in one compare-and-swap, only if the binding
    /// still has `resource_version`: what makes claiming and releasing safe across replicas. A
    /// claim write sets the tenant and claimed-by labels and the claim record together, so that
    /// no reader ever sees one without the others. Returns the new resourceVersion.
    pub async fn set_binding_labels_cas(
        &self,
        kind: BindingKind,
        ns: &str,
        name: &str,
        resource_version: &str,
        labels: &[(&str, &str)],
        annotations: &[(&str, &str)],
    ) -> Result<Option<String>, K8sError> {
        let labels: Vec<(&str, Option<&str>)> =
            labels.iter().map(|(k, v)| (*k, Some(*v))).collect();
        self.patch_binding_cas(
            kind,
            ns,
            name,
            resource_version,
            &labels,
            annotations,
            "label",
        )
        .await
    }

    /// Sets one annotation of a binding with a compare-and-swap: the end of a trial
    /// (crate::pools::quarantine::PASSED).
    pub async fn set_binding_annotation_cas(
        &self,
        kind: BindingKind,
        ns: &str,
        name: &str,
        resource_version: &str,
        key: &str,
        value: &str,
    ) -> Result<Option<String>, K8sError> {
        let annotations = [(key, value)];
        self.patch_binding_cas(
            kind,
            ns,
            name,
            resource_version,
            &[],
            &annotations,
            "annotate",
        )
        .await
    }

    /// Marks a binding dirty and records the release on it (`annotations`) in one
    /// compare-and-swap: the release time survives restarts without a write of its own.
    pub async fn mark_dirty_cas(
        &self,
        kind: BindingKind,
        ns: &str,
        name: &str,
        resource_version: &str,
        dirty_key: &str,
        annotations: &[(&str, &str)],
    ) -> Result<Option<String>, K8sError> {
        let labels = [(dirty_key, Some("true"))];
        self.patch_binding_cas(
            kind,
            ns,
            name,
            resource_version,
            &labels,
            annotations,
            "label",
        )
        .await
    }

    /// Removes labels of a binding only if the binding still has `resource_version`: the
    /// compare-and-swap of a clean release (tenant and claimed-by). Returns the new
    /// resourceVersion.
    pub async fn remove_binding_labels_cas(
        &self,
        kind: BindingKind,
        ns: &str,
        name: &str,
        resource_version: &str,
        keys: &[&str],
    ) -> Result<Option<String>, K8sError> {
        let labels: Vec<(&str, Option<&str>)> = keys.iter().map(|k| (*k, None)).collect();
        self.patch_binding_cas(kind, ns, name, resource_version, &labels, &[], "unlabel")
            .await
    }

    /// The write before a claim is recorded Bound to a binding it did not claim
    /// (crate::selection::claimant): the `FILLING` record set to `claims` and the claimed-by
    /// label removed, in one compare-and-swap on the version the use was decided on. Returns the
    /// new resourceVersion.
    pub async fn record_claims_cas(
        &self,
        kind: BindingKind,
        ns: &str,
        name: &str,
        resource_version: &str,
        claims: &str,
    ) -> Result<Option<String>, K8sError> {
        let labels = [(CLAIMED_BY, None)];
        let annotations = [(FILLING, claims)];
        self.patch_binding_cas(
            kind,
            ns,
            name,
            resource_version,
            &labels,
            &annotations,
            "label",
        )
        .await
    }

    /// One merge patch of a binding's labels (`None` removes the key: null in a merge patch) and
    /// annotations, conditioned on `resource_version`.
    #[allow(clippy::too_many_arguments)]
    async fn patch_binding_cas(
        &self,
        kind: BindingKind,
        ns: &str,
        name: &str,
        resource_version: &str,
        labels: &[(&str, Option<&str>)],
        annotations: &[(&str, &str)],
        verb: &'static str,
    ) -> Result<Option<String>, K8sError> {
        let labels: serde_json::Map<String, serde_json::Value> = labels
            .iter()
            .map(|(k, v)| {
                (
                    k.to_string(),
                    v.map_or(serde_json::Value::Null, |v| v.into()),
                )
            })
            .collect();
        let mut body = json!({"metadata": {"resourceVersion": resource_version, "labels": labels}});
        if !annotations.is_empty() {
            let annotations: serde_json::Map<String, serde_json::Value> = annotations
                .iter()
                .map(|(k, v)| (k.to_string(), (*v).into()))
                .collect();
            body["metadata"]["annotations"] = annotations.into();
        }
        let what = format!("{} {ns}/{name}", kind.gvk().2);
        let request = Request::new(DynamicObject::url_path(&binding_resource(kind), Some(ns)));
        let request = request.patch(name, &patch_params(), &Patch::Merge(body));
        send(self.garden.kube(), request, "patch")
            .await
            .map_err(|e| K8sError::classify(verb, what, e))
    }

    /// One annotation of a claim as the API server has it (the claim watch drops annotations):
    /// the release of a source claim reads the identity of its object from it when the name is
    /// too long for a label. A read, never fenced.
    pub async fn claim_annotation(
        &self,
        ns: &str,
        name: &str,
        key: &str,
    ) -> Result<Option<String>, K8sError> {
        let api: kube::Api<AccountClaim> = kube::Api::namespaced(self.own.kube().clone(), ns);
        let meta = api
            .get_metadata_opt(name)
            .await
            .map_err(|e| K8sError::classify("read", format!("AccountClaim {ns}/{name}"), e))?;
        Ok(meta.and_then(|m| m.metadata.annotations?.remove(key)))
    }

    /// A binding's resourceVersion and labels as the API server has them now (a GET, never a
    /// cache; `None` when it is gone): the check after a claim write reads the other bindings of
    /// the account this way, because a cache may not have seen a concurrent claim of one. A
    /// read, never fenced.
    pub async fn binding_labels_now(
        &self,
        kind: BindingKind,
        ns: &str,
        name: &str,
    ) -> Result<Option<(String, std::collections::BTreeMap<String, String>)>, K8sError> {
        let api: kube::Api<DynamicObject> =
            kube::Api::namespaced_with(self.garden.kube().clone(), ns, &binding_resource(kind));
        let what = || format!("{} {ns}/{name}", kind.gvk().2);
        let meta = api
            .get_metadata_opt(name)
            .await
            .map_err(|e| K8sError::classify("read", what(), e))?;
        Ok(meta.map(|m| {
            let rv = m.metadata.resource_version.unwrap_or_default();
            (rv, m.metadata.labels.unwrap_or_default())
        }))
    }

    /// Adds the release finalizer to a claim. The `test` makes a concurrent change of the
    /// finalizer list fail instead of being overwritten.
    pub async fn add_claim_finalizer(&self, claim: &AccountClaim) -> Result<(), K8sError> {
        let ns = claim.namespace().unwrap_or_default();
        let name = claim.name_any();
        let current = claim.meta().finalizers.clone();
        let ops = match &current {
            None => json!([
                {"op": "test", "path": "/metadata/finalizers", "value": null},
                {"op": "add", "path": "/metadata/finalizers", "value": [CLAIM_FINALIZER]}
            ]),
            Some(list) => json!([
                {"op": "test", "path": "/metadata/finalizers", "value": list},
                {"op": "add", "path": "/metadata/finalizers/-", "value": CLAIM_FINALIZER}
            ]),
        };
        self.json_patch_claim(&ns, &name, ops, "add finalizer to")
            .await
    }

    /// Removes the release finalizer, testing that it is still where it was read.
    pub async fn remove_claim_finalizer(&self, claim: &AccountClaim) -> Result<(), K8sError> {
        let ns = claim.namespace().unwrap_or_default();
        let name = claim.name_any();
        let Some(index) = claim.finalizers().iter().position(|f| f == CLAIM_FINALIZER) else {
            return Ok(());
        };
        let path = format!("/metadata/finalizers/{index}");
        let ops = json!([
            {"op": "test", "path": path, "value": CLAIM_FINALIZER},
            {"op": "remove", "path": path}
        ]);
        match self
            .json_patch_claim(&ns, &name, ops, "remove finalizer from")
            .await
        {
            Err(K8sError::NotFound { .. }) => Ok(()),
            other => other,
        }
    }

    async fn json_patch_claim(
        &self,
        ns: &str,
        name: &str,
        ops: serde_json::Value,
        action: &'static str,
    ) -> Result<(), K8sError> {
        let what = format!("AccountClaim {ns}/{name}");
        let patch: json_patch::Patch =
            serde_json::from_value(ops).map_err(|source| K8sError::Encode {
                what: what.clone(),
                source,
            })?;
        let request = Request::new(AccountClaim::url_path(&(), Some(ns)));
        let request = request.patch(name, &patch_params(), &Patch::<()>::Json(patch));
        send(self.own.kube(), request, "patch")
            .await
            .map(drop)
            .map_err(|e| K8sError::classify(action, what, e))
    }

    /// Publishes an event; failures are logged, never fatal: events are for people.
    pub async fn event(
        &self,
        regarding: &ObjectReference,
        warning: bool,
        reason: &str,
        action: &str,
        note: String,
    ) {
        // Created directly rather than through kube's Recorder: events come once per outcome
        // change, so its series cache buys nothing, and it swept every cached event on each
        // publish (a cost that grew with the number of claims).
        let now = jiff::Timestamp::now();
        let name = regarding.name.as_deref().unwrap_or("object");
        let name = truncate(name.to_string(), 200);
        let ns = regarding.namespace.as_deref().unwrap_or("default");
        let ev = Event {
            metadata: kube::api::ObjectMeta {
                name: Some(format!("{name}.{:x}", now.as_nanosecond())),
                namespace: Some(ns.to_string()),
                ..Default::default()
            },
            event_time: Some(MicroTime(now)),
            type_: Some(if warning { "Warning" } else { "Normal" }.into()),
            reason: Some(reason.into()),
            action: Some(action.into()),
            note: Some(truncate(note, 1024)),
            regarding: Some(regarding.clone()),
            reporting_controller: Some(FIELD_MANAGER.into()),
            reporting_instance: Some(self.instance.clone()),
            ..Default::default()
        };
        let request = serde_json::to_vec(&ev)
            .map_err(kube::Error::SerdeError)
            .and_then(|body| {
                Request::new(Event::url_path(&(), Some(ns)))
                    .create(&PostParams::default(), body)
                    .map_err(kube::Error::BuildRequest)
            });
        let sent = match request {
            Ok(request) => send(self.own.kube(), Ok(request), "create").await.map(drop),
            Err(e) => Err(e),
        };
        match sent {
            // Not leading: the leader publishes what is worth saying.
            Err(e) if super::gate::NotSent::of(&e).is_some() => {}
            Err(e) => tracing::warn!(error = %e, reason, "cannot publish event"),
            Ok(()) => {}
        }
    }
}

/// Server-side apply of `/status` under the operator's field manager.
/// Returns the object's new resourceVersion.
async fn apply_status(
    client: &Client,
    request: &Request,
    name: &str,
    body: serde_json::Value,
    what: String,
) -> Result<Option<String>, K8sError> {
    let params = super::params::apply(FIELD_MANAGER);
    let request = request.patch_subresource("status", name, &params, &Patch::Apply(body));
    send(client, request, "patch_status")
        .await
        .map_err(|e| K8sError::classify("apply status of", what, e))
}

/// The answer to a write, read for the object's new resourceVersion only. The rest is skipped
/// without being built: an apply's answer carries the managedFields of every manager, and
/// building them cost more than the write itself. The watch brings the whole object anyway.
#[derive(Deserialize)]
struct Written {
    #[serde(default)]
    metadata: WrittenMeta,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct WrittenMeta {
    resource_version: Option<String>,
}

/// Sends a write and returns the new resourceVersion from its answer.
async fn send(
    client: &Client,
    request: Result<http::Request<Vec<u8>>, kube::core::request::Error>,
    verb: &'static str,
) -> Result<Option<String>, kube::Error> {
    let mut request = request.map_err(kube::Error::BuildRequest)?;
    // What kube's own Api methods name the request (its traces and metrics).
    request.extensions_mut().insert(verb);
    let written: Written = client.request(request).await?;
    Ok(written.metadata.resource_version)
}

/// Plain patches, attributed to the operator in managedFields.
fn patch_params() -> PatchParams {
    super::params::patch(FIELD_MANAGER)
}

/// ApiResource of the configured binding kind.
pub fn binding_resource(kind: BindingKind) -> ApiResource {
    let (group, version, kind_name, plural) = kind.gvk();
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: format!("{group}/{version}"),
        kind: kind_name.into(),
        plural: plural.into(),
    }
}

fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_read_for_its_resource_version_only() {
        let answer = json!({
            "apiVersion": "accountpool.io/v1alpha1",
            "kind": "AccountClaim",
            "metadata": {
                "name": "c1", "resourceVersion": "42",
                "managedFields": [{"manager": "hap-operator", "operation": "Apply",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:phase": {}}}}]
            },
            "status": {"phase": "Bound"}
        });
        let written: Written = serde_json::from_value(answer).expect("decodes");
        assert_eq!(written.metadata.resource_version.as_deref(), Some("42"));
        let bare: Written = serde_json::from_value(json!({"kind": "Status"})).expect("decodes");
        assert_eq!(bare.metadata.resource_version, None);
    }
}
