//! What an AccountClaim's recorded status says — bound (the one definition), waiting in a pool,
//! denied, settled — and, for a claim a request source made, which object it serves (its
//! labels) and what the source pass reads of it; read from plain data. Below the inventory
//! (`pools`), which indexes claims by it, below `sources`, and below `status`, which writes the
//! statuses it reads.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::api::conditions::{reasons, types};
use crate::api::{AccountClaim, AccountClaimStatus, CLAIM_FINALIZER, ClaimPhase, SourceKind};
use crate::labels::{self, PoolKey};

/// The binding a claim's status records: written once with `phase: Bound` and kept when the
/// binding is lost (`phase: Failed`). The one definition of "bound" in the operator: a claim
/// with a record never gets another binding (docs/design.md §4.1), whatever else its status lacks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recorded {
    pub binding: String,
    /// `status.bindingNamespace`; `None` (a status written by hand or by an older version) is
    /// read as the binding namespace in force.
    pub namespace: Option<String>,
    /// The status says `Failed`: the binding was lost.
    pub lost: bool,
}

/// The binding record of a status, if it has one.
pub fn recorded_binding(s: &AccountClaimStatus) -> Option<Recorded> {
    let lost = match s.phase {
        Some(ClaimPhase::Bound) => false,
        Some(ClaimPhase::Failed) => true,
        _ => return None,
    };
    Some(Recorded {
        binding: s.credentials_binding_name.clone()?,
        namespace: s.binding_namespace.clone(),
        lost,
    })
}

/// The pool a pending claim waits for, as its status records it.
pub fn waiting_in(s: &AccountClaimStatus) -> Option<PoolKey> {
    if s.phase != Some(ClaimPhase::Pending) {
        return None;
    }
    Some(PoolKey {
        hyperscaler_type: s.hyperscaler_type.clone()?,
        eu_access: s.eu_access.unwrap_or(false),
        shared: s.shared.unwrap_or(false),
    })
}

/// Whether a status records a denial (`ClaimOutcome::Denied` or `TenantNotAllowed`), which is
/// final.
pub fn is_denied(s: &AccountClaimStatus) -> bool {
    s.phase == Some(ClaimPhase::Failed)
        && s.conditions.iter().any(|c| {
            c.type_ == types::READY
                && (c.reason == reasons::DENIED || c.reason == reasons::TENANT_NOT_ALLOWED)
        })
}

/// Whether a claim needs nothing until something else moves: it holds the release finalizer, is
/// not being deleted, its status answers its current generation, and records a decision that
/// stays (a binding, with the namespace it lives in, or a denial). The claim's own watch events
/// (above all the status this operator just wrote) then start no reconcile: a binding that is
/// lost or comes back brings the claim back through the inventory (`controller::revisit`), and
/// the sweep of every claim each `--resync` is the safety net.
pub fn is_settled(claim: &AccountClaim) -> bool {
    settled(&claim.metadata, claim.status.as_ref())
}

/// The same from a claim's metadata and status (the claim cache keeps parts).
pub fn settled(meta: &ObjectMeta, status: Option<&AccountClaimStatus>) -> bool {
    let Some(s) = status else {
        return false;
    };
    meta.deletion_timestamp.is_none()
        && meta
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == CLAIM_FINALIZER)
        && s.observed_generation == meta.generation
        && (is_denied(s) || recorded_binding(s).is_some_and(|r| r.namespace.is_some()))
}

/// The identity of the object a claim serves, as its labels record it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceRef {
    pub source_id: String,
    pub kind: SourceKind,
    pub namespace: String,
    /// `None` until known (an openmcp Cluster named by the API server).
    pub name: Option<String>,
    pub uid: Option<String>,
}

impl SourceRef {
    /// The labels of the claim.
    pub fn labels(&self) -> BTreeMap<String, String> {
        let mut l = BTreeMap::from([
            (labels::SOURCE_ID.to_string(), self.source_id.clone()),
            (
                labels::SOURCE_KIND.to_string(),
                self.kind.as_str().to_string(),
            ),
            (labels::SOURCE_NAMESPACE.to_string(), self.namespace.clone()),
        ]);
        if let Some(n) = self
            .name
            .as_ref()
            .filter(|n| crate::diag::label_value_problem(n).is_none())
        {
            l.insert(labels::SOURCE_NAME.to_string(), n.clone());
        }
        if let Some(u) = &self.uid {
            l.insert(labels::SOURCE_UID.to_string(), u.clone());
        }
        l
    }

    /// `Runtime kcp-system/name` (or `Cluster p/(generated)`), for the annotation and messages.
    pub fn describe(&self) -> String {
        format!(
            "{} {}/{}",
            self.kind.as_str(),
            self.namespace,
            self.name.as_deref().unwrap_or("(name not generated yet)")
        )
    }

    /// Reads the labels of a claim; `None` for claims no source created.
    pub fn from_labels(labels: &BTreeMap<String, String>) -> Option<Self> {
        let kind = labels::source_kind(labels)?;
        Some(Self {
            source_id: labels.get(labels::SOURCE_ID)?.clone(),
            kind,
            namespace: labels.get(labels::SOURCE_NAMESPACE)?.clone(),
            name: labels.get(labels::SOURCE_NAME).cloned(),
            uid: labels.get(labels::SOURCE_UID).cloned(),
        })
    }
}

/// What the request-source pass reads of a claim a source made, besides its name, uid and
/// deletion: the index keeps it on the claim's view (`pools::ClaimView::source`), so that the
/// claim store need not hold such claims whole.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceFacts {
    pub source: SourceRef,
    pub phase: Option<ClaimPhase>,
    /// `status.credentialsBindingName`, as written.
    pub binding: Option<String>,
    /// `creationTimestamp`, set by the API server.
    pub created: Option<jiff::Timestamp>,
    /// `spec.adoptBinding`: the binding the object itself names. Its cluster will run there
    /// whatever the adoption's verdict, so the index counts it as a use of that binding.
    pub adopt: Option<String>,
}

impl SourceFacts {
    /// `None` for claims no source created.
    pub fn of(meta: &ObjectMeta, status: Option<&AccountClaimStatus>) -> Option<Self> {
        Some(Self {
            source: SourceRef::from_labels(meta.labels.as_ref()?)?,
            phase: status.and_then(|s| s.phase),
            binding: status.and_then(|s| s.credentials_binding_name.clone()),
            created: meta.creation_timestamp.as_ref().map(|t| t.0),
            adopt: None,
        })
    }

    /// The same, with the binding the claim's object names (`spec.adoptBinding`).
    pub fn adopting(self, adopt: Option<String>) -> Self {
        Self { adopt, ..self }
    }
}
