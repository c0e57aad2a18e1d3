//! The record of a claim write in the claim's status (`status.claimWrite`), written before the
//! binding's compare-and-swap, and its settling. A leader that pauses with a claim write in
//! flight may see it land after the next leader let the claim go, on a binding whose version
//! nothing moved: the account would be the tenant's for a claim that no longer exists. With the
//! record, the next leader knows which write may still come, and before a claim goes (or sends
//! a claim write of another binding) it makes sure that write landed or never can: a read of the
//! binding, and while it still has the write's base version, a compare-and-swap of one
//! annotation that moves it (the fence), so the API server refuses the late write.

use std::time::{Duration, Instant};

use kube::ResourceExt;
use kube::runtime::controller::Action;

use super::Context;
use super::active::ActiveConfig;
use super::claim_key;
use super::outcome::{ClaimError, k8s};
use crate::api::{AccountClaim, PendingClaimWrite};
use crate::labels::{CLAIM_WRITE_FENCED, CLAIMED_BY};
use crate::ledger::Outcome;
use crate::release::{ClaimWriteNow, claim_write_now};

/// How soon a claim looks again after a fence, or once a landed write is still to reach the
/// index.
const LOOK_AGAIN: Duration = Duration::from_millis(300);

/// Whether the claim may go on (`None`), or what to do first.
pub(super) type Settled = Option<Action>;

/// The recorded claim write of `claim` that is neither its recorded binding nor this replica's
/// own write in flight (the ledger settles that one, `release::Release::Resolve`).
fn unsettled<'a>(claim: &'a AccountClaim, ctx: &Context) -> Option<&'a PendingClaimWrite> {
    let status = claim.status.as_ref()?;
    let w = status.claim_write.as_ref()?;
    if status.credentials_binding_name.as_deref() == Some(w.binding.as_str()) {
        return None;
    }
    let uid = claim.metadata.uid.as_deref().unwrap_or_default();
    let own = ctx
        .ledger()
        .inflight
        .claim_made_by(uid, Instant::now())
        .is_some_and(|(b, _)| b == w.binding);
    (!own).then_some(w)
}

/// Makes sure the claim write `claim`'s status records can no longer land unseen: `None` once
/// it landed (and the index shows it) or never can. `may_write`: the fence may be written (not
/// while the config is paused or observing: then the claim waits).
pub(super) async fn settle(
    claim: &AccountClaim,
    ctx: &Context,
    active: &ActiveConfig,
    may_write: bool,
) -> Result<Settled, ClaimError> {
    let Some(w) = unsettled(claim, ctx) else {
        return Ok(None);
    };
    let uid = claim.metadata.uid.clone().unwrap_or_default();
    let indexed = ctx
        .ledger()
        .inventory
        .binding(&w.binding)
        .is_some_and(|e| e.view.labels.get(CLAIMED_BY) == Some(&uid));
    if indexed {
        // The release (`release::written_for`) or the stray give-back takes it from here.
        return Ok(None);
    }
    let key = claim_key(claim);
    let target = active.binding_target();
    let live = ctx
        .writer
        .binding_labels_now(target.kind, &target.namespace, &w.binding)
        .await
        .map_err(k8s(&key, "reading the binding of an earlier claim write"))?;
    let now = live
        .as_ref()
        .map(|(rv, labels)| (rv.as_str(), labels.get(CLAIMED_BY).map(String::as_str)));
    match claim_write_now(w, &uid, now) {
        ClaimWriteNow::Void => Ok(None),
        ClaimWriteNow::Landed => Ok(Some(Action::requeue(LOOK_AGAIN))),
        ClaimWriteNow::MayLand if !may_write => Ok(Some(Action::requeue(ctx.args.pending_retry))),
        ClaimWriteNow::MayLand => {
            let fenced = ctx
                .writer
                .set_binding_annotation_cas(
                    target.kind,
                    &target.namespace,
                    &w.binding,
                    &w.resource_version,
                    CLAIM_WRITE_FENCED,
                    &uid,
                )
                .await;
            tracing::info!(
                claim = key,
                binding = w.binding,
                ok = fenced.is_ok(),
                "fenced an earlier claim write that could still land"
            );
            match fenced {
                // A conflict: the binding moved meanwhile; the next look judges it again.
                Ok(_) | Err(crate::k8s::K8sError::Conflict { .. }) => {
                    Ok(Some(Action::requeue(LOOK_AGAIN)))
                }
                Err(e) => Err(k8s(&key, "fencing an earlier claim write")(e)),
            }
        }
    }
}

/// Records the claim write of `binding` at `rv` in the claim's status before it is sent, and
/// returns the claim as written (its new resourceVersion, on which the Bound status is then
/// conditioned). A claim write recorded earlier is settled first.
pub(super) async fn record(
    claim: &AccountClaim,
    ctx: &Context,
    active: &ActiveConfig,
    binding: &str,
    rv: &str,
) -> Result<Result<AccountClaim, Action>, ClaimError> {
    let next = PendingClaimWrite {
        binding: binding.to_string(),
        resource_version: rv.to_string(),
    };
    let current = claim.status.clone().unwrap_or_default();
    if current.claim_write.as_ref() != Some(&next)
        && let Some(wait) = settle(claim, ctx, active, true).await?
    {
        refused(ctx, binding);
        return Ok(Err(wait));
    }
    let status = crate::api::AccountClaimStatus {
        claim_write: Some(next),
        ..current
    };
    let (ns, name) = (claim.namespace().unwrap_or_default(), claim.name_any());
    let written = ctx
        .writer
        .apply_claim_status(
            &ns,
            &name,
            claim.metadata.resource_version.as_deref(),
            &status,
        )
        .await;
    let written = match written {
        Ok(rv) => rv,
        Err(e) => {
            refused(ctx, binding);
            return Err(k8s(&claim_key(claim), "recording the claim write")(e));
        }
    };
    let mut claim = claim.clone();
    if let (Some(rv), Some(uid)) = (&written, claim.metadata.uid.as_deref()) {
        ctx.ledger()
            .inflight
            .status_written(uid, rv.clone(), Instant::now());
    }
    claim.metadata.resource_version = written.or(claim.metadata.resource_version);
    claim.status = Some(status);
    Ok(Ok(claim))
}

/// The claim write was never sent: its slot in the ledger ends.
fn refused(ctx: &Context, binding: &str) {
    ctx.ledger()
        .claim_outcome(binding, Outcome::Refused, Instant::now());
}
