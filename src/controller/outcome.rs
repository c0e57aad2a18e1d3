//! The claim reconciles' write toolkit, shared by the claim, release and adoption reconciles
//! (so that none of them imports another): the reconcile error, status writes with their
//! ledger record, pending and refused outcomes, and how a write's result counts.

use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};

use super::{Context, claim_key};
use crate::api::{AccountClaim, AccountClaimStatus, MatchedRule};
use crate::k8s::K8sError;
use crate::k8s::active::ActiveConfig;
use crate::labels::own_entries;
use crate::ledger::Outcome;
use crate::metrics::OutcomeLabels;
use crate::pools::ClaimView;
use crate::selection::BeforeUse;
use crate::status::{ClaimOutcome, PendingReason, claim_status_changed, desired_claim_status};

/// A reconcile that runs this long is cut off (every API call inside has a shorter timeout).
pub(super) const RECONCILE_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    #[error("claim {claim}: {step}")]
    K8s {
        claim: String,
        step: &'static str,
        #[source]
        source: K8sError,
    },
    #[error("claim {claim}: the reconcile did not finish within {RECONCILE_TIMEOUT:?}")]
    Timeout { claim: String },
    /// Its binding is not released while the object may live, and which object is unknown.
    #[error(
        "claim {claim}: the release waits: the claim was made for {object} but names no object \
         that can be read (label accountpool.io/source-name and annotation accountpool.io/source \
         both missing)"
    )]
    SourceUnknown { claim: String, object: String },
}

impl ClaimError {
    pub(super) fn is_conflict(&self) -> bool {
        matches!(
            self,
            ClaimError::K8s {
                source: K8sError::Conflict { .. },
                ..
            }
        )
    }
}

pub(super) fn k8s(claim: &str, step: &'static str) -> impl FnOnce(K8sError) -> ClaimError {
    let claim = claim.to_string();
    move |source| ClaimError::K8s {
        claim,
        step,
        source,
    }
}

/// The write `before` asks for ahead of a Use (`selection::claimant`): the claim's record on
/// the binding. A conflict: the binding moved since the decision, which is taken again; the
/// assignment recorded with it ends.
pub(super) async fn record_use(
    claim: &AccountClaim,
    ctx: &Context,
    active: &ActiveConfig,
    view: &ClaimView,
    before: &BeforeUse,
) -> Result<(), ClaimError> {
    let BeforeUse::Record {
        binding,
        expected_resource_version,
        claims,
    } = before
    else {
        return Ok(());
    };
    let step = "recording the claim on the binding before its status";
    let target = active.binding_target();
    let (kind, ns) = (target.kind, target.namespace.as_str());
    let result = match expected_resource_version {
        Some(rv) => {
            ctx.writer
                .record_claims_cas(kind, ns, binding, rv, claims)
                .await
        }
        None => Err(K8sError::Conflict {
            what: format!("binding {binding} has no resourceVersion in the index"),
        }),
    };
    match result {
        Ok(written) => {
            if let (Some(base), Some(written)) = (expected_resource_version, written) {
                ctx.ledger().record_written(binding, base, &written, claims);
            }
            Ok(())
        }
        Err(e) => {
            // No status was written: the claim is not being assigned any more.
            ctx.ledger()
                .assignment_outcome(&view.uid, Outcome::Refused, Instant::now());
            if let K8sError::Forbidden { message, .. } = &e {
                refused(claim, ctx, active, binding, "reuse", message).await;
            }
            Err(k8s(&claim_key(claim), step)(e))
        }
    }
}

/// Writes a pending status; an event and the outcome counter only when the reason is new, so
/// that they count claims, not reconciles.
pub(super) async fn pending(
    claim: &AccountClaim,
    ctx: &Context,
    reason: PendingReason,
    cause: String,
    matched: Option<(MatchedRule, crate::labels::PoolKey)>,
) -> Result<Action, ClaimError> {
    let new = pending_reason(claim) != Some(reason.as_str());
    let announced = matches!(
        reason,
        PendingReason::PoolExhausted | PendingReason::PinnedBindingUnavailable
    );
    if new && (reason.is_terminal() || announced) {
        ctx.writer
            .event(
                &claim.object_ref(&()),
                true,
                reason.as_str(),
                "Evaluate",
                cause.clone(),
            )
            .await;
        count(ctx, reason.as_str());
    }
    write_outcome(
        claim,
        ctx,
        &ClaimOutcome::Pending {
            reason,
            cause,
            matched,
        },
    )
    .await?;
    // Config changes and changes of the pool bring pending claims back; this is the safety net.
    Ok(Action::requeue(ctx.args.pending_retry))
}

/// The garden refused a write of `binding`: remember it (writes of it pause), tell people once,
/// and return when the next attempt may be made.
pub(super) async fn refused(
    claim: &AccountClaim,
    ctx: &Context,
    active: &ActiveConfig,
    binding: &str,
    what: &str,
    message: &str,
) -> Instant {
    let target = active.binding_target();
    let plural = target.kind.gvk().3;
    let cause = format!(
        "cannot {what} binding {}/{binding}: {}",
        target.namespace,
        crate::k8s::forbidden_hint(message, plural, &target.namespace)
    );
    let (retry_at, news) = ctx.denials.refused(binding, cause.clone(), Instant::now());
    if news {
        tracing::warn!(binding, %cause, "binding write refused by the garden");
        ctx.writer
            .event(&claim.object_ref(&()), true, "Forbidden", "Claim", cause)
            .await;
        // The HapConfig status lists refusals; the feed wakes its reconcile.
        ctx.caches.feed.bump();
    }
    count(ctx, "Forbidden");
    retry_at
}

pub(super) async fn write_outcome(
    claim: &AccountClaim,
    ctx: &Context,
    outcome: &ClaimOutcome,
) -> Result<(), ClaimError> {
    write_status(claim, ctx, outcome, false).await
}

/// `write_outcome`, and the record of the claim's claim write (`status.claimWrite`) goes: this
/// replica's write of it was refused outright, so it never landed and never can. Compared with
/// the status that holds the record, so it is written even when nothing else changed.
pub(super) async fn write_outcome_dropping_record(
    claim: &AccountClaim,
    ctx: &Context,
    outcome: &ClaimOutcome,
) -> Result<(), ClaimError> {
    write_status(claim, ctx, outcome, true).await
}

async fn write_status(
    claim: &AccountClaim,
    ctx: &Context,
    outcome: &ClaimOutcome,
    drop_record: bool,
) -> Result<(), ClaimError> {
    let now = Time(Timestamp::now());
    let mut desired = desired_claim_status(
        claim.status.as_ref(),
        &claim.spec,
        claim.metadata.generation,
        outcome,
        &now,
    );
    if drop_record {
        desired.claim_write = None;
    }
    if !claim_status_changed(claim.status.as_ref(), &desired) {
        return Ok(());
    }
    apply_status(claim, ctx, &desired, "writing status").await?;
    Ok(())
}

/// Applies `status` on the claim's version (again on the version the webhook's stamp left, as
/// `write_on_stamped` allows) and returns the new version; until the watch brings it, a
/// reconcile handed the older copy waits for it (it would decide, count and tell people all
/// over again). `step` names the write in an error.
pub(super) async fn apply_status(
    claim: &AccountClaim,
    ctx: &Context,
    status: &AccountClaimStatus,
    step: &'static str,
) -> Result<Option<String>, ClaimError> {
    let (ns, name) = (claim.namespace().unwrap_or_default(), claim.name_any());
    let rv = claim.metadata.resource_version.as_deref();
    let written = match ctx.writer.apply_claim_status(&ns, &name, rv, status).await {
        Err(conflict @ K8sError::Conflict { .. }) => {
            write_on_stamped(claim, ctx, status, conflict).await
        }
        other => other,
    }
    .map_err(k8s(&claim_key(claim), step))?;
    if let (Some(rv), Some(uid)) = (&written, claim.uid()) {
        ctx.ledger()
            .inflight
            .status_written(&uid, rv.clone(), Instant::now());
    }
    Ok(written)
}

/// After a status write met a Conflict: writes it again, once, on the claim's new version when
/// the claim changed only in what the decision does not read (`only_restamped`: the webhook's
/// `admitted-at` stamp after each call it could not answer). Otherwise the Conflict stands and
/// the claim is decided again.
async fn write_on_stamped(
    claim: &AccountClaim,
    ctx: &Context,
    desired: &AccountClaimStatus,
    conflict: K8sError,
) -> Result<Option<String>, K8sError> {
    let (ns, name) = (claim.namespace().unwrap_or_default(), claim.name_any());
    // A failed read leaves the Conflict as it was: retried at once, not after a growing backoff.
    // Read as the API server has it now (the cache drops annotations, and may lag).
    let live = crate::k8s::sources::SourceWrites::new(ctx.writer.clone())
        .get_claim(&ns, &name)
        .await;
    match live {
        Ok(Some(live)) if only_restamped(claim, &live) => {
            let rv = live.metadata.resource_version.as_deref();
            ctx.writer.apply_claim_status(&ns, &name, rv, desired).await
        }
        Ok(None) => Err(K8sError::NotFound {
            what: format!("AccountClaim {ns}/{name}"),
        }),
        _ => Err(conflict),
    }
}

/// Whether `live` differs from `read` only in annotations, labels that are not the operator's
/// and bookkeeping (resourceVersion, managedFields): the same object, spec, own labels,
/// finalizers and status. `read` comes from the claim cache, which keeps no other labels. Pure.
pub(super) fn only_restamped(read: &AccountClaim, live: &AccountClaim) -> bool {
    let (r, l) = (&read.metadata, &live.metadata);
    r.uid == l.uid
        && r.generation == l.generation
        && r.deletion_timestamp == l.deletion_timestamp
        && r.finalizers.as_deref().unwrap_or_default()
            == l.finalizers.as_deref().unwrap_or_default()
        && own_entries(r.labels.as_ref()).eq(own_entries(l.labels.as_ref()))
        && read.spec == live.spec
        && read.status == live.status
}

pub(super) fn pending_reason(claim: &AccountClaim) -> Option<&str> {
    claim
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == crate::api::conditions::types::READY)
        .map(|c| c.reason.as_str())
}

/// How an API call ended, for the ledger.
pub(super) fn outcome<T>(result: &Result<T, K8sError>) -> Outcome {
    match result {
        Ok(_) => Outcome::Written,
        Err(e) if e.outcome_unknown() => Outcome::Unknown,
        Err(_) => Outcome::Refused,
    }
}

/// How a status write ended, for the ledger.
pub(super) fn status_outcome(result: &Result<(), ClaimError>) -> Outcome {
    match result {
        Ok(()) => Outcome::Written,
        Err(ClaimError::K8s { source, .. }) if source.outcome_unknown() => Outcome::Unknown,
        Err(_) => Outcome::Refused,
    }
}

pub(super) fn count(ctx: &Context, outcome: &str) {
    ctx.metrics
        .claim_outcomes
        .get_or_create(&OutcomeLabels {
            outcome: outcome.to_string(),
        })
        .inc();
}
