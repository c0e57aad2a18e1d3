//! What an AccountClaim's recorded status says — bound (the one definition), waiting in a pool,
//! denied, settled — read from plain data. Below the inventory (`pools`), which indexes claims
//! by it, and below `status`, which writes the statuses it reads.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::api::conditions::{reasons, types};
use crate::api::{AccountClaim, AccountClaimStatus, CLAIM_FINALIZER, ClaimPhase};
use crate::labels::PoolKey;

/// The binding a claim's status records: written once with `phase: Bound` and kept when the
/// binding is lost (`phase: Failed`). The one definition of "bound" in the operator: a claim
/// with a record never gets another binding (DESIGN §4.1), whatever else its status lacks.
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
