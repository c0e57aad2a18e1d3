//! Deletion of an AccountClaim: release its binding (crate::release decides) with a
//! compare-and-swap, then remove the finalizer. Without a valid config the operator cannot know
//! the pool's labels, so the finalizer stays and the claim says why: letting it go would leave
//! the account claimed but not dirty, and the tenant's next claim would reuse an account nobody
//! cleaned.

use std::time::{Duration, Instant};

use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};

use super::active::ActiveConfig;
use super::active::ConfigState;
use super::claim::{ClaimError, count, k8s, outcome, refused, write_outcome};
use super::{Context, decidable, point_caches};
use crate::api::{AccountClaim, CLAIM_FINALIZER, ReleaseMode};
use crate::k8s::K8sError;
use crate::pools::{ClaimView, claim_view};
use crate::release::{KeepReason, Release, decide_release};
use crate::selection::Choice;
use crate::status::ClaimOutcome;

pub(super) async fn release(
    claim: &AccountClaim,
    ctx: &Context,
    key: &str,
) -> Result<Action, ClaimError> {
    if !claim.finalizers().iter().any(|f| f == CLAIM_FINALIZER) {
        return Ok(Action::await_change());
    }
    let active = match ctx.resolver.resolve() {
        ConfigState::Active { active, .. } => active,
        _ => {
            let note = format!(
                "the release waits for a valid HapConfig `{}`: without one the binding's labels \
                 are unknown and it cannot be marked dirty for the cleanup job",
                ctx.resolver.name()
            );
            ctx.writer
                .event(
                    &claim.object_ref(&()),
                    true,
                    "ReleaseWaiting",
                    "Release",
                    note,
                )
                .await;
            return Ok(Action::requeue(ctx.backoff.next(key)));
        }
    };
    point_caches(ctx);
    if !decidable(ctx) {
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    let view = claim_view(claim);
    let mode = active
        .spec
        .release
        .as_ref()
        .map(|r| r.mode)
        .unwrap_or(ReleaseMode::MarkDirty);
    let decision = {
        let l = ctx.ledger();
        decide_release(&view, &l.inventory, &l.inflight, mode, Instant::now())
    };
    match decision {
        Release::Keep(KeepReason::OtherNamespace { namespace }) => {
            let note = format!(
                "not released: its binding {} lives in namespace {namespace}, which the HapConfig \
                 in force no longer names; release it by hand if it is to be cleaned",
                view.bound_binding.clone().unwrap_or_default()
            );
            ctx.writer
                .event(
                    &claim.object_ref(&()),
                    true,
                    "ReleaseSkipped",
                    "Release",
                    note,
                )
                .await;
        }
        Release::Keep(_) => {}
        Release::WaitForShoot { shoot } => {
            tracing::debug!(
                claim = key,
                shoot,
                "release waits for the Shoot to be deleted"
            );
            return Ok(Action::requeue(Duration::from_secs(5)));
        }
        Release::WaitForWrite { binding } => {
            tracing::debug!(
                claim = key,
                binding,
                "release waits for the outcome of a write"
            );
            return Ok(Action::requeue(Duration::from_secs(1)));
        }
        Release::Resolve {
            binding,
            expected_resource_version,
        } => {
            resolve(
                claim,
                ctx,
                &active,
                &view,
                &binding,
                expected_resource_version,
            )
            .await;
            return Ok(Action::requeue(Duration::from_millis(200)));
        }
        Release::MarkDirty {
            binding,
            expected_resource_version,
        } => {
            let Some(rv) = expected_resource_version else {
                return Ok(Action::requeue(Duration::from_millis(300)));
            };
            if let Some(paused) = ctx.denials.paused(&binding, Instant::now()) {
                return release_blocked(claim, ctx, paused.message, paused.retry_at).await;
            }
            let target = active.binding_target();
            ctx.ledger()
                .inflight
                .release_started(&binding, Some(rv.clone()), Instant::now());
            let dirty_key = &active.rules.label_keys().dirty;
            let result = ctx
                .writer
                .set_binding_label_cas(
                    target.kind,
                    &target.namespace,
                    &binding,
                    &rv,
                    dirty_key,
                    "true",
                )
                .await;
            ctx.ledger()
                .release_outcome(&binding, outcome(&result), Instant::now());
            match result {
                Ok(_) => {
                    if ctx.denials.allowed(&binding) {
                        ctx.caches.feed.bump();
                    }
                    let note = format!(
                        "released binding {}/{binding}: marked {dirty_key}=true for the cleanup job",
                        target.namespace
                    );
                    ctx.writer
                        .event(&claim.object_ref(&()), false, "Released", "Release", note)
                        .await;
                    count(ctx, "Released");
                }
                Err(K8sError::Forbidden { message, .. }) => {
                    let retry_at =
                        refused(claim, ctx, &active, &binding, "release", &message).await;
                    let cause = ctx
                        .denials
                        .paused(&binding, Instant::now())
                        .map_or(message, |p| p.message);
                    return release_blocked(claim, ctx, cause, retry_at).await;
                }
                Err(e) => return Err(k8s(key, "marking the binding dirty")(e)),
            }
        }
    }
    ctx.writer
        .remove_claim_finalizer(claim)
        .await
        .map_err(k8s(key, "removing the finalizer"))?;
    ctx.ledger()
        .inflight
        .forget_claim(&view.uid, Instant::now());
    Ok(Action::await_change())
}

/// Sends a deleting claim's claim write of `binding` again, to learn the outcome of the earlier
/// attempt; the ledger takes the answer, and the next pass releases what the claim won.
async fn resolve(
    claim: &AccountClaim,
    ctx: &Context,
    active: &ActiveConfig,
    view: &ClaimView,
    binding: &str,
    expected: Option<String>,
) {
    let pool = ctx
        .ledger()
        .inflight
        .claim_of(binding, Instant::now())
        .map(|p| p.pool.clone());
    let (Some(rv), Some(pool)) = (expected.clone(), pool) else {
        return;
    };
    let retry = Choice::Claim {
        binding: binding.to_string(),
        expected_resource_version: expected,
    };
    {
        let mut l = ctx.ledger();
        l.inflight.record(view, &pool, &retry, Instant::now());
        // Nothing is to be bound: the claim is going.
        l.inflight.drop_assignment(&view.uid);
    }
    let target = active.binding_target();
    let tenant_key = &active.rules.label_keys().tenant_name;
    let result = ctx
        .writer
        .set_binding_label_cas(
            target.kind,
            &target.namespace,
            binding,
            &rv,
            tenant_key,
            &view.global_account,
        )
        .await;
    ctx.ledger()
        .claim_outcome(binding, outcome(&result), Instant::now());
    if let Err(e) = result {
        tracing::debug!(claim = %claim.name_any(), error = %e, "the repeated claim write was not accepted");
    }
}

/// A deleted claim whose binding the garden refuses to let us mark dirty: the finalizer stays
/// (the account must not go back unwiped), `Released=False` says why, retried after the pause.
async fn release_blocked(
    claim: &AccountClaim,
    ctx: &Context,
    cause: String,
    retry_at: Instant,
) -> Result<Action, ClaimError> {
    let outcome = ClaimOutcome::ReleaseBlocked {
        reason: crate::api::conditions::reasons::FORBIDDEN,
        cause,
    };
    write_outcome(claim, ctx, &outcome).await?;
    let wait = retry_at.saturating_duration_since(Instant::now());
    Ok(Action::requeue(wait.max(Duration::from_millis(100))))
}
