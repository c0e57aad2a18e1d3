//! The plain views of the API objects: which binding a claim records (through
//! `claim_state::recorded_binding`, the one definition of "bound"), what the request-source pass
//! reads of a claim a source made, which binding a Shoot uses, a binding's labels and credential
//! kind — each with the resourceVersion that orders views of the object.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Resource, ResourceExt};

use super::{BindingView, ClaimView, ShootView};
use crate::api::{AccountClaim, AccountClaimSpec, AccountClaimStatus, CredentialsKind, Shoot};
use crate::claim_state::{SourceFacts, is_denied, recorded_binding, waiting_in};

/// The view of a claim that selection, release and counting take.
pub fn claim_view(c: &AccountClaim) -> ClaimView {
    claim_view_of(&c.metadata, &c.spec, c.status.as_ref())
}

/// The same from a claim's parts (the claim cache keeps them, see `k8s::lean::StoredClaim`).
pub fn claim_view_of(
    meta: &ObjectMeta,
    spec: &AccountClaimSpec,
    status: Option<&AccountClaimStatus>,
) -> ClaimView {
    let recorded = status.and_then(recorded_binding);
    ClaimView {
        namespace: meta.namespace.clone().unwrap_or_default(),
        name: meta.name.clone().unwrap_or_default(),
        uid: meta.uid.clone().unwrap_or_default(),
        resource_version: meta.resource_version.clone(),
        global_account: spec.global_account.clone(),
        shoot_name: spec.shoot_name.clone(),
        lost: recorded.as_ref().is_some_and(|r| r.lost),
        binding_namespace: recorded.as_ref().and_then(|r| r.namespace.clone()),
        bound_binding: recorded.map(|r| r.binding),
        waiting_in: status.and_then(waiting_in),
        deleting: meta.deletion_timestamp.is_some(),
        denied: status.is_some_and(is_denied),
        source: SourceFacts::of(meta, status)
            .map(|f| Box::new(f.adopting(spec.adopt_binding.clone()))),
        claim_write: status.and_then(|s| s.claim_write.clone()).map(Box::new),
    }
}

/// The view of a binding, from its metadata and the kind of its credentials.
pub fn binding_view(b: &impl Resource, credentials: CredentialsKind) -> BindingView {
    BindingView {
        name: b.name_any(),
        resource_version: b.resource_version(),
        labels: b.labels().clone().into(),
        credentials,
        account: None,
        annotations: b
            .annotations()
            .iter()
            .filter(|(k, _)| crate::labels::is_own(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        created: b
            .meta()
            .creation_timestamp
            .as_ref()
            .and_then(|t| super::quarantine::creation_second(t.0.as_second())),
    }
}

impl BindingView {
    /// The view with the account its reference names (`k8s::lean::LeanObject::account`).
    pub fn with_account(mut self, account: Option<super::Account>) -> Self {
        self.account = account;
        self
    }
}

/// The view of a Shoot.
pub fn shoot_view(s: &Shoot) -> ShootView {
    ShootView {
        name: s.name_any(),
        resource_version: s.resource_version(),
        binding: s.spec.binding_name().map(str::to_string),
        binding_kind: if s.spec.credentials_binding_name.is_some() {
            crate::api::BindingKind::CredentialsBinding
        } else {
            crate::api::BindingKind::SecretBinding
        },
        error_codes: s
            .status
            .iter()
            .flat_map(|st| &st.last_errors)
            .flat_map(|e| e.codes.iter().cloned())
            .collect::<std::collections::BTreeSet<String>>()
            .into_iter()
            .collect(),
        created: super::quarantine::shoot_created(s),
    }
}
