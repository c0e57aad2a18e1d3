//! The record of a claim write in the claim's status (`status.claimWrite`), written before the
//! binding's compare-and-swap, and its settling. A leader that pauses with a claim write in
//! flight may see it land after the next leader let the claim go, on a binding whose version
//! nothing moved: the account would be the tenant's for a claim that no longer exists. With the
//! record, the next leader knows which write may still come, and before a claim goes (or sends
//! a claim write of another binding, or another claim of the tenant takes a binding instead) it
//! makes sure that write landed or never can: a read of the binding, and while it still has the
//! write's base version, a compare-and-swap of one annotation that moves it (the fence), so the
//! API server refuses the late write.

use std::time::{Duration, Instant};

use super::Context;
use super::claim_key;
use super::outcome::{ClaimError, apply_status, k8s};
use crate::api::{AccountClaim, BindingKind, PendingClaimWrite};
use crate::k8s::K8sError;
use crate::k8s::active::{ActiveConfig, ConfigState};
use crate::labels::PoolKey;
use crate::labels::{CLAIM_WRITE_FENCED, CLAIMED_BY};
use crate::ledger::Ledger;
use crate::ledger::Outcome;
use crate::pools::claim_view;
use crate::release::{ClaimWriteNow, claim_write_indexed, claim_write_now};
use crate::selection::claimant::recorded_writes;

/// How soon a claim looks again after a fence, or once a landed write is still to reach the
/// index.
const LOOK_AGAIN: Duration = Duration::from_millis(300);

/// Whether a recorded claim write is settled.
pub(super) enum Settled {
    /// It landed and the index shows it, or it never can: go on.
    Go,
    /// Look again then (a fence was sent, the index is to show a landed write, or writes are
    /// held while it could still land).
    Wait(Duration),
    /// The garden refuses the fence: the claim waits and says why.
    Refused { cause: String, retry_at: Instant },
}

/// The recorded claim write of `claim` that is neither its recorded binding nor this replica's
/// own write in flight (the ledger settles that one, `release::Release::Resolve`).
fn unsettled<'a>(claim: &'a AccountClaim, ctx: &Context) -> Option<&'a PendingClaimWrite> {
    let status = claim.status.as_ref()?;
    let w = status.claim_write.as_ref()?;
    if status.credentials_binding_name.as_deref() == Some(w.binding.as_str()) {
        return None;
    }
    let uid = claim.metadata.uid.as_deref().unwrap_or_default();
    (!own(ctx, uid, w)).then_some(w)
}

/// Whether this replica has claim `uid`'s write `w` (same binding, same base) in flight.
fn own(ctx: &Context, uid: &str, w: &PendingClaimWrite) -> bool {
    own_in(&ctx.ledger(), uid, w)
}

fn own_in(l: &Ledger, uid: &str, w: &PendingClaimWrite) -> bool {
    let made = l.inflight.claim_of(&w.binding, Instant::now());
    made.is_some_and(|p| {
        p.claim_uid == uid && p.base_resource_version.as_deref() == Some(&w.resource_version)
    })
}

/// Makes sure the claim write `claim`'s status records can no longer land unseen. `may_write`:
/// the fence may be written (not while the config is paused or observing: then the claim
/// waits).
pub(super) async fn settle(
    claim: &AccountClaim,
    ctx: &Context,
    active: &ActiveConfig,
    may_write: bool,
) -> Result<Settled, ClaimError> {
    let Some(w) = unsettled(claim, ctx) else {
        return Ok(Settled::Go);
    };
    let uid = claim.metadata.uid.clone().unwrap_or_default();
    settle_write(claim, ctx, active, (&uid, w), may_write).await
}

/// A claim that waits for another claim of its tenant's recorded claim write in `pool`
/// (`selection::claimant::recorded_write_in`) settles that write itself: that claim's leader may
/// be gone, and a write never sent would hold the tenant's claims for good.
pub(super) async fn settle_for(
    claim: &AccountClaim,
    ctx: &Context,
    pool: &PoolKey,
) -> Result<Settled, ClaimError> {
    let ConfigState::Active { active, hold, .. } = ctx.resolver.resolve() else {
        return Ok(Settled::Go);
    };
    let view = claim_view(claim);
    let first = {
        let l = ctx.ledger();
        recorded_writes(&l.inventory, &view)
            .filter(|(_, _, p)| *p == pool)
            .map(|(c, w, _)| (c.uid.clone(), w.clone()))
            .find(|(uid, w)| !own_in(&l, uid, w))
    };
    let Some((uid, w)) = first else {
        return Ok(Settled::Go);
    };
    settle_write(claim, ctx, &active, (&uid, &w), !hold.writes()).await
}

/// Settles claim `uid`'s recorded write `w` on a GET of its binding (`release::claim_write_now`);
/// `claim` is the claim whose reconcile does it.
async fn settle_write(
    claim: &AccountClaim,
    ctx: &Context,
    active: &ActiveConfig,
    (uid, w): (&str, &PendingClaimWrite),
    may_write: bool,
) -> Result<Settled, ClaimError> {
    let judged = {
        let l = ctx.ledger();
        claim_write_indexed(&l.inventory, w, uid)
    };
    match judged {
        // Landed: the release (`release::written_for`) or the stray give-back takes it from
        // here. Moved past its base: it can never land (the index saw a later version).
        Some(ClaimWriteNow::Landed | ClaimWriteNow::Void) => return Ok(Settled::Go),
        Some(ClaimWriteNow::MayLand) | None => {}
    }
    if let Some(paused) = ctx.denials.paused(&w.binding, Instant::now()) {
        // The garden refused the last write of it: not asked again before its time.
        let (cause, retry_at) = (paused.message, paused.retry_at);
        return Ok(Settled::Refused { cause, retry_at });
    }
    let (kind, ns) = target_of(active, w);
    let key = claim_key(claim);
    let live = match ctx.writer.binding_labels_now(kind, &ns, &w.binding).await {
        Ok(live) => live,
        Err(K8sError::Forbidden { message, .. }) => {
            // Not a write: no pause of the binding, a look again after the usual retry.
            let cause = format!(
                "cannot read binding {ns}/{} to settle an earlier claim write: {message}",
                w.binding
            );
            let retry_at = Instant::now() + ctx.args.pending_retry;
            return Ok(Settled::Refused { cause, retry_at });
        }
        Err(e) => {
            return Err(k8s(&key, "reading the binding of an earlier claim write")(
                e,
            ));
        }
    };
    let now = live
        .as_ref()
        .map(|(rv, labels)| (rv.as_str(), labels.get(CLAIMED_BY).map(String::as_str)));
    let wait = Settled::Wait;
    match claim_write_now(w, uid, now) {
        ClaimWriteNow::Void => Ok(Settled::Go),
        ClaimWriteNow::Landed => Ok(wait(LOOK_AGAIN)),
        ClaimWriteNow::MayLand if !may_write => Ok(wait(ctx.args.pending_retry)),
        ClaimWriteNow::MayLand => fence(claim, ctx, active, (uid, w)).await,
    }
}

/// Where the recorded write went: its own namespace and kind, else the target in force.
fn target_of(active: &ActiveConfig, w: &PendingClaimWrite) -> (BindingKind, String) {
    let target = active.binding_target();
    let ns = w.namespace.clone().unwrap_or(target.namespace);
    (w.kind.unwrap_or(target.kind), ns)
}

/// Moves the binding off the write's base version with a compare-and-swap of one annotation.
/// Its value names the base too, so that it always changes the binding: an apply that changes
/// nothing would leave the version where the write can still land.
async fn fence(
    claim: &AccountClaim,
    ctx: &Context,
    active: &ActiveConfig,
    (uid, w): (&str, &PendingClaimWrite),
) -> Result<Settled, ClaimError> {
    let (kind, ns) = target_of(active, w);
    let value = format!("{uid}@{}", w.resource_version);
    let fenced = ctx
        .writer
        .set_binding_annotation_cas(
            kind,
            &ns,
            &w.binding,
            &w.resource_version,
            CLAIM_WRITE_FENCED,
            &value,
        )
        .await;
    let key = claim_key(claim);
    tracing::info!(
        claim = key,
        writer = uid,
        binding = w.binding,
        ok = fenced.is_ok(),
        "fenced an earlier claim write that could still land"
    );
    match fenced {
        // A conflict: the binding moved meanwhile; the next look judges it again.
        Ok(_) | Err(K8sError::Conflict { .. }) => Ok(Settled::Wait(LOOK_AGAIN)),
        Err(K8sError::Forbidden { message, .. }) => {
            let what = "fence a claim write on";
            let retry_at =
                super::outcome::refused(claim, ctx, active, &w.binding, what, &message).await;
            let cause = ctx
                .denials
                .paused(&w.binding, Instant::now())
                .map_or(message, |p| p.message);
            Ok(Settled::Refused { cause, retry_at })
        }
        Err(e) => Err(k8s(&key, "fencing an earlier claim write")(e)),
    }
}

/// Records the claim write of `binding` at `rv` in the claim's status before it is sent, and
/// returns the claim as written (its new resourceVersion, on which the Bound status is then
/// conditioned); `Err` when an earlier recorded write must settle first. Whatever keeps the
/// write from being sent ends its slot in the ledger.
pub(super) async fn record(
    claim: &AccountClaim,
    ctx: &Context,
    active: &ActiveConfig,
    binding: &str,
    rv: &str,
) -> Result<Result<AccountClaim, Settled>, ClaimError> {
    let recorded = try_record(claim, ctx, active, binding, rv).await;
    if !matches!(recorded, Ok(Ok(_))) {
        ctx.ledger()
            .claim_outcome(binding, Outcome::Refused, Instant::now());
    }
    recorded
}

async fn try_record(
    claim: &AccountClaim,
    ctx: &Context,
    active: &ActiveConfig,
    binding: &str,
    rv: &str,
) -> Result<Result<AccountClaim, Settled>, ClaimError> {
    let target = active.binding_target();
    let next = PendingClaimWrite {
        binding: binding.to_string(),
        resource_version: rv.to_string(),
        namespace: Some(target.namespace),
        kind: Some(target.kind),
    };
    let current = claim.status.clone().unwrap_or_default();
    if current.claim_write.as_ref() != Some(&next) {
        match settle(claim, ctx, active, true).await? {
            Settled::Go => {}
            other => return Ok(Err(other)),
        }
    }
    let status = crate::api::AccountClaimStatus {
        claim_write: Some(next),
        ..current
    };
    let written = apply_status(claim, ctx, &status, "recording the claim write").await?;
    let mut claim = claim.clone();
    claim.metadata.resource_version = written.or(claim.metadata.resource_version);
    claim.status = Some(status);
    Ok(Ok(claim))
}
