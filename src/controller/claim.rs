//! Reconcile of AccountClaim: keep bound claims where they are (apply-once), otherwise evaluate
//! the rules, choose a binding over the cached inventory seen through the in-flight writes,
//! claim it with a compare-and-swap, and record the result in status. On deletion, release.

use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};

use super::active::{ActiveConfig, ConfigState};
use super::snapshot::claim_view;
use super::{Context, claim_key, resync};
use crate::api::{AccountClaim, CLAIM_FINALIZER, MatchedRule, ReleaseMode};
use crate::k8s::K8sError;
use crate::metrics::{ControllerLabels, OutcomeLabels};
use crate::pools::ClaimView;
use crate::release::{Release, decide_release};
use crate::rules::{EvalError, Request as RuleRequest};
use crate::selection::{Choice, MultiAccountPolicy, OrderedRequest, Placement, select_ordered};
use crate::status::{
    BoundTo, ClaimOutcome, PendingReason, bound_from_status, claim_status_changed,
    desired_claim_status, is_denied,
};

#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    #[error("claim {claim}: {step}")]
    K8s {
        claim: String,
        step: &'static str,
        #[source]
        source: K8sError,
    },
}

impl ClaimError {
    fn is_conflict(&self) -> bool {
        matches!(
            self,
            ClaimError::K8s {
                source: K8sError::Conflict { .. },
                ..
            }
        )
    }
}

fn k8s(claim: &str, step: &'static str) -> impl FnOnce(K8sError) -> ClaimError {
    let claim = claim.to_string();
    move |source| ClaimError::K8s {
        claim,
        step,
        source,
    }
}

pub async fn reconcile(claim: Arc<AccountClaim>, ctx: Arc<Context>) -> Result<Action, ClaimError> {
    let started = Instant::now();
    let result = reconcile_inner(&claim, &ctx).await;
    ctx.metrics
        .reconcile_seconds
        .get_or_create(&ControllerLabels {
            controller: "accountclaim".into(),
        })
        .observe(started.elapsed().as_secs_f64());
    if result.is_ok() {
        ctx.backoff.reset(&claim_key(&claim));
    }
    result
}

async fn reconcile_inner(claim: &AccountClaim, ctx: &Context) -> Result<Action, ClaimError> {
    let key = claim_key(claim);
    if claim.metadata.deletion_timestamp.is_some() {
        return release(claim, ctx, &key).await;
    }
    if !claim.finalizers().iter().any(|f| f == CLAIM_FINALIZER) {
        ctx.writer
            .add_claim_finalizer(claim)
            .await
            .map_err(k8s(&key, "adding the release finalizer"))?;
        // The update event brings the claim back with the finalizer in place.
        return Ok(Action::await_change());
    }
    if claim.status.as_ref().is_some_and(is_denied) {
        // A denial is final: a later change of the rules does not revisit it.
        return Ok(Action::await_change());
    }
    let state = ctx.resolver.resolve();
    if !matches!(state, ConfigState::Active { .. })
        && claim.status.as_ref().and_then(recorded_binding).is_some()
    {
        // Without rules in force nothing can be verified; a bound claim keeps its record.
        return Ok(resync(ctx));
    }
    let active = match state {
        ConfigState::Missing => {
            let cause = format!(
                "no HapConfig named `{}` exists; the claim waits for one",
                ctx.resolver.name()
            );
            return pending(claim, ctx, PendingReason::ConfigMissing, cause, None).await;
        }
        ConfigState::Invalid {
            generation,
            validation,
        } => {
            let cause = format!(
                "HapConfig `{}` generation {generation} is invalid and no earlier generation was valid: {}",
                ctx.resolver.name(),
                validation.summary().replace('\n', "; ")
            );
            return pending(claim, ctx, PendingReason::ConfigInvalid, cause, None).await;
        }
        ConfigState::Active { active, .. } => active,
    };
    ctx.caches.bindings.retarget(&active.binding_target());
    ctx.caches.shoots.retarget(&active.shoot_namespace());
    if !(ctx.caches.bindings.is_ready() && ctx.caches.shoots.is_ready()) {
        // Never decide on a cache that has not listed everything once.
        return Ok(Action::requeue(Duration::from_millis(300)));
    }
    let view = claim_view(claim);
    let inv = ctx.snapshot.get(&ctx.caches, active.rules.label_keys());
    let now = Instant::now();

    // Step 1 of DESIGN §4: a bound claim never moves; a vanished binding is reported, not replaced.
    // Step 1 of DESIGN §4: a claim that ever recorded a binding stays on it. A vanished or
    // relabelled binding is reported (BindingLost), never replaced; if the label comes back, the
    // claim is Bound again.
    if let Some(pinned) = claim.status.as_ref().and_then(recorded_binding) {
        let view = ClaimView {
            bound_binding: Some(pinned.binding.clone()),
            ..view
        };
        let check = {
            let mut inflight = lock(ctx);
            inflight.observe(&inv, now);
            crate::selection::check_bound(&inv, &inflight, &view, now)
        };
        return match check {
            Some(Choice::Lost { message, .. }) => lost(claim, ctx, message).await,
            _ => write_outcome(claim, ctx, &ClaimOutcome::Bound(pinned))
                .await
                .map(|_| resync(ctx)),
        };
    }

    // A request that named its binding already (adopted from its source) is recorded, never
    // chosen again.
    if let Some(adopted) = claim.spec.adopt_binding.as_deref() {
        return super::sources_adopt::reconcile(claim, ctx, &active, &inv, &view, adopted).await;
    }

    let req = RuleRequest {
        plan: &claim.spec.plan,
        platform_region: claim.spec.platform_region.as_deref(),
        cluster_region: claim.spec.cluster_region.as_deref(),
        provider: claim.spec.provider.as_deref(),
    };
    let outcome = match active.rules.evaluate(&req) {
        Ok(o) => o,
        Err(EvalError::Denied {
            index,
            entry,
            message,
            ..
        }) => {
            let matched = MatchedRule {
                index: i64::try_from(index).unwrap_or(i64::MAX),
                entry,
            };
            return denied(claim, ctx, message, matched).await;
        }
        Err(e) => return pending(claim, ctx, eval_reason(&e), e.to_string(), None).await,
    };
    let matched = MatchedRule {
        index: i64::try_from(outcome.index).unwrap_or(i64::MAX),
        entry: outcome.entry.clone(),
    };
    let policy = MultiAccountPolicy::from_spec(active.spec.multi_hyperscaler_account.as_ref());
    // Bindings the garden just refused to let us write are tried last.
    let paused = ctx.denials.paused_bindings(now);
    let placement = {
        let mut inflight = lock(ctx);
        inflight.observe(&inv, now);
        // This claim's Bound status was written but the cache does not show it yet: deciding
        // again on the stale object could bind it a second time.
        if inflight
            .assignment_of(&view.uid, now)
            .is_some_and(|a| a.state == crate::selection::WriteState::Written)
        {
            return Ok(Action::requeue(Duration::from_millis(200)));
        }
        let request = OrderedRequest {
            claim: &view,
            preferences: &outcome.preferences,
            provider_type: &outcome.provider_type,
            pins: active.rules.pins(),
        };
        let placement = select_ordered(&inv, &inflight, &request, &policy, &paused, now);
        // Recorded under the same lock as the decision, so a sibling claim decided right after
        // sees this one even though nothing has been written yet.
        inflight.record(&view, &placement.pool, &placement.choice, now);
        placement
    };
    let Placement {
        choice,
        preference,
        pool,
        pinned,
    } = placement;
    let bound_to = |binding: String, decision| BoundTo {
        binding,
        namespace: active.spec.binding_namespace.clone(),
        pool: pool.clone(),
        matched_rule: matched.clone(),
        decision,
        preference: Some(preference),
    };
    let claimed_decision = if pinned {
        crate::api::Decision::Pinned
    } else {
        crate::api::Decision::Claimed
    };
    match choice {
        Choice::Use { binding, decision } => {
            bind(claim, ctx, &view, bound_to(binding, decision.into())).await
        }
        Choice::Claim {
            binding,
            expected_resource_version,
        } => {
            if let Some(paused) = ctx.denials.paused(&binding, now) {
                // Only refused bindings are left; do not ask the garden again before its time.
                lock(ctx).claim_failed(&binding);
                return forbidden(
                    claim,
                    ctx,
                    paused.message,
                    Some((matched, pool)),
                    paused.retry_at,
                )
                .await;
            }
            let claimed = claim_binding(
                claim,
                ctx,
                &active,
                &view,
                &binding,
                expected_resource_version.as_deref(),
            )
            .await;
            if let Err(ClaimError::K8s {
                source: K8sError::Forbidden { message, .. },
                ..
            }) = &claimed
            {
                let retry_at = refused(claim, ctx, &active, &binding, "claim", message).await;
                let cause = ctx
                    .denials
                    .paused(&binding, Instant::now())
                    .map(|p| p.message);
                let cause = cause.unwrap_or_else(|| message.clone());
                return forbidden(claim, ctx, cause, Some((matched, pool)), retry_at).await;
            }
            claimed?;
            bind(claim, ctx, &view, bound_to(binding, claimed_decision)).await
        }
        Choice::Wait { binding } => {
            let cause = format!(
                "another claim of {} is claiming binding {binding} in this pool; retrying",
                view.global_account
            );
            pending(
                claim,
                ctx,
                PendingReason::Progressing,
                cause,
                Some((matched, pool)),
            )
            .await?;
            Ok(Action::requeue(Duration::from_millis(200)))
        }
        Choice::Exhausted { message, .. } if pinned => {
            let reason = PendingReason::PinnedBindingUnavailable;
            if pending_reason(claim) != Some(reason.as_str()) {
                ctx.writer
                    .event(
                        &claim.object_ref(&()),
                        true,
                        reason.as_str(),
                        "Select",
                        message.clone(),
                    )
                    .await;
            }
            count(ctx, reason.as_str());
            pending(claim, ctx, reason, message, Some((matched, pool))).await?;
            Ok(Action::requeue(ctx.args.pending_retry))
        }
        Choice::Exhausted { message, .. } => {
            let was_exhausted =
                pending_reason(claim) == Some(PendingReason::PoolExhausted.as_str());
            if !was_exhausted {
                ctx.writer
                    .event(
                        &claim.object_ref(&()),
                        true,
                        "PoolExhausted",
                        "Select",
                        message.clone(),
                    )
                    .await;
            }
            count(ctx, "PoolExhausted");
            pending(
                claim,
                ctx,
                PendingReason::PoolExhausted,
                message,
                Some((matched, pool)),
            )
            .await?;
            Ok(Action::requeue(ctx.args.pending_retry))
        }
        Choice::Bound { .. } | Choice::Lost { .. } => {
            // Only returned for claims whose status says Bound, handled above; re-evaluate.
            Ok(Action::requeue(Duration::from_millis(200)))
        }
    }
}

/// Writes `tenantName=<global account>` with the resourceVersion precondition.
async fn claim_binding(
    claim: &AccountClaim,
    ctx: &Context,
    active: &ActiveConfig,
    view: &ClaimView,
    binding: &str,
    expected: Option<&str>,
) -> Result<(), ClaimError> {
    let key = claim_key(claim);
    let tenant_key = &active.rules.label_keys().tenant_name;
    let Some(rv) = expected else {
        lock(ctx).claim_failed(binding);
        return Err(ClaimError::K8s {
            claim: key,
            step: "claiming a binding",
            source: K8sError::Conflict {
                what: format!("binding {binding} has no resourceVersion in the cache"),
            },
        });
    };
    let target = active.binding_target();
    let result = ctx
        .writer
        .set_binding_label_cas(
            target.kind,
            &target.namespace,
            binding,
            rv,
            tenant_key,
            &view.global_account,
        )
        .await;
    match result {
        Ok(_) => {
            lock(ctx).claim_written(binding, Instant::now());
            if ctx.denials.allowed(binding) {
                ctx.caches.feed.bump();
            }
            let note = format!(
                "claimed binding {}/{binding} for global account {}",
                target.namespace, view.global_account
            );
            ctx.writer
                .event(&claim.object_ref(&()), false, "Claimed", "Claim", note)
                .await;
            Ok(())
        }
        Err(e) => {
            lock(ctx).claim_failed(binding);
            lock(ctx).assignment_failed(&view.uid);
            Err(k8s(&key, "claiming a binding")(e))
        }
    }
}

/// Records the binding in the claim's status.
async fn bind(
    claim: &AccountClaim,
    ctx: &Context,
    view: &ClaimView,
    to: BoundTo,
) -> Result<Action, ClaimError> {
    let decision = to.decision;
    let binding = to.binding.clone();
    let fallback = to
        .preference
        .filter(|p| *p > 1)
        .map(|p| (p, to.pool.hyperscaler_type.clone()));
    match write_outcome(claim, ctx, &ClaimOutcome::Bound(to)).await {
        Ok(()) => {
            lock(ctx).assignment_written(&view.uid, Instant::now());
            count(ctx, &format!("{decision:?}"));
            if let Some((preference, hyperscaler_type)) = fallback {
                ctx.metrics
                    .fallback_bindings
                    .get_or_create(&crate::metrics::FallbackLabels {
                        preference: preference.to_string(),
                        hyperscaler_type,
                    })
                    .inc();
            }
            if decision != crate::api::Decision::Claimed {
                let note = format!("bound to binding {binding} ({decision:?})");
                ctx.writer
                    .event(
                        &claim.object_ref(&()),
                        false,
                        &format!("{decision:?}"),
                        "Bind",
                        note,
                    )
                    .await;
            }
            Ok(resync(ctx))
        }
        Err(e) => {
            lock(ctx).assignment_failed(&view.uid);
            Err(e)
        }
    }
}

pub(super) async fn pending(
    claim: &AccountClaim,
    ctx: &Context,
    reason: PendingReason,
    cause: String,
    matched: Option<(MatchedRule, crate::labels::PoolKey)>,
) -> Result<Action, ClaimError> {
    if reason.is_terminal() && pending_reason(claim) != Some(reason.as_str()) {
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
    // Config changes and inventory changes re-trigger pending claims; this is the safety net.
    Ok(Action::requeue(ctx.args.pending_retry))
}

/// The garden refused a write of `binding`: remember it (writes of it pause), tell people once,
/// and return when the next attempt may be made.
async fn refused(
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

/// A claim that can only get a binding the garden refuses to let us write: Pending with reason
/// `Forbidden`, retried when the pause ends (not in a hot loop).
async fn forbidden(
    claim: &AccountClaim,
    ctx: &Context,
    cause: String,
    matched: Option<(MatchedRule, crate::labels::PoolKey)>,
    retry_at: Instant,
) -> Result<Action, ClaimError> {
    write_outcome(
        claim,
        ctx,
        &ClaimOutcome::Pending {
            reason: PendingReason::Forbidden,
            cause,
            matched,
        },
    )
    .await?;
    let wait = retry_at.saturating_duration_since(Instant::now());
    Ok(Action::requeue(wait.max(Duration::from_millis(100))))
}

/// A deny entry matched: the claim ends Failed with reason Denied (final, see status::claim).
async fn denied(
    claim: &AccountClaim,
    ctx: &Context,
    cause: String,
    matched: MatchedRule,
) -> Result<Action, ClaimError> {
    if pending_reason(claim) != Some(crate::api::conditions::reasons::DENIED) {
        ctx.writer
            .event(
                &claim.object_ref(&()),
                true,
                "Denied",
                "Evaluate",
                cause.clone(),
            )
            .await;
        count(ctx, "Denied");
    }
    write_outcome(claim, ctx, &ClaimOutcome::Denied { cause, matched }).await?;
    Ok(Action::await_change())
}

async fn lost(claim: &AccountClaim, ctx: &Context, cause: String) -> Result<Action, ClaimError> {
    if claim.status.as_ref().and_then(|s| s.phase) != Some(crate::api::ClaimPhase::Failed) {
        ctx.writer
            .event(
                &claim.object_ref(&()),
                true,
                "BindingLost",
                "Verify",
                cause.clone(),
            )
            .await;
        count(ctx, "BindingLost");
    }
    write_outcome(claim, ctx, &ClaimOutcome::Lost { cause }).await?;
    Ok(resync(ctx))
}

pub(super) async fn write_outcome(
    claim: &AccountClaim,
    ctx: &Context,
    outcome: &ClaimOutcome,
) -> Result<(), ClaimError> {
    let now = Time(Timestamp::now());
    let desired = desired_claim_status(
        claim.status.as_ref(),
        &claim.spec,
        claim.metadata.generation,
        outcome,
        &now,
    );
    if !claim_status_changed(claim.status.as_ref(), &desired) {
        return Ok(());
    }
    let key = claim_key(claim);
    ctx.writer
        .apply_claim_status(
            &claim.namespace().unwrap_or_default(),
            &claim.name_any(),
            claim.metadata.resource_version.as_deref(),
            &desired,
        )
        .await
        .map_err(k8s(&key, "writing status"))
}

/// Deletion: release the binding when no other cluster of the tenant uses it, then let go.
async fn release(claim: &AccountClaim, ctx: &Context, key: &str) -> Result<Action, ClaimError> {
    if !claim.finalizers().iter().any(|f| f == CLAIM_FINALIZER) {
        return Ok(Action::await_change());
    }
    let active = match ctx.resolver.resolve() {
        ConfigState::Active { active, .. } => active,
        _ => {
            // Without a config the operator cannot know the pool's labels: let the claim go and
            // say so; the next refresh reports the binding as an orphan if it stays claimed.
            let note = "released without marking the binding dirty: no valid HapConfig is in force"
                .to_string();
            ctx.writer
                .event(
                    &claim.object_ref(&()),
                    true,
                    "ReleaseSkipped",
                    "Release",
                    note,
                )
                .await;
            ctx.writer
                .remove_claim_finalizer(claim)
                .await
                .map_err(k8s(key, "removing the finalizer"))?;
            return Ok(Action::await_change());
        }
    };
    ctx.caches.bindings.retarget(&active.binding_target());
    ctx.caches.shoots.retarget(&active.shoot_namespace());
    if !(ctx.caches.bindings.is_ready() && ctx.caches.shoots.is_ready()) {
        return Ok(Action::requeue(Duration::from_millis(300)));
    }
    let inv = ctx.snapshot.get(&ctx.caches, active.rules.label_keys());
    let view = claim_view(claim);
    let mode = active
        .spec
        .release
        .as_ref()
        .map(|r| r.mode)
        .unwrap_or(ReleaseMode::MarkDirty);
    let decision = {
        let mut inflight = lock(ctx);
        inflight.observe(&inv, Instant::now());
        decide_release(&view, &inv, &inflight, mode, Instant::now())
    };
    match decision {
        Release::Keep(_) => {}
        Release::WaitForShoot { shoot } => {
            tracing::debug!(
                claim = key,
                shoot,
                "release waits for the Shoot to be deleted"
            );
            return Ok(Action::requeue(Duration::from_secs(5)));
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
            lock(ctx).release_started(&binding, Some(rv.clone()), Instant::now());
            let dirty_key = &active.rules.label_keys().dirty;
            match ctx
                .writer
                .set_binding_label_cas(
                    target.kind,
                    &target.namespace,
                    &binding,
                    &rv,
                    dirty_key,
                    "true",
                )
                .await
            {
                Ok(_) => {
                    lock(ctx).release_written(&binding, Instant::now());
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
                    lock(ctx).release_failed(&binding);
                    let retry_at =
                        refused(claim, ctx, &active, &binding, "release", &message).await;
                    let cause = ctx
                        .denials
                        .paused(&binding, Instant::now())
                        .map_or(message, |p| p.message);
                    return release_blocked(claim, ctx, cause, retry_at).await;
                }
                Err(e) => {
                    lock(ctx).release_failed(&binding);
                    return Err(k8s(key, "marking the binding dirty")(e));
                }
            }
        }
    }
    ctx.writer
        .remove_claim_finalizer(claim)
        .await
        .map_err(k8s(key, "removing the finalizer"))?;
    lock(ctx).forget_claim(&view.uid);
    Ok(Action::await_change())
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

/// The binding a claim recorded, whether it is Bound or Failed (lost) now.
pub(super) fn recorded_binding(status: &crate::api::AccountClaimStatus) -> Option<BoundTo> {
    if status.phase == Some(crate::api::ClaimPhase::Failed) {
        let as_bound = crate::api::AccountClaimStatus {
            phase: Some(crate::api::ClaimPhase::Bound),
            ..status.clone()
        };
        return bound_from_status(&as_bound);
    }
    bound_from_status(status)
}

fn eval_reason(e: &EvalError) -> PendingReason {
    match e {
        EvalError::NoMatchingRule { .. } => PendingReason::NoMatchingRule,
        EvalError::AmbiguousMatch { .. } => PendingReason::AmbiguousMatch,
        EvalError::UnknownPlan { .. } => PendingReason::UnknownPlan,
        EvalError::MissingProvider { .. } => PendingReason::MissingProvider,
        EvalError::InvalidConfig { .. } => PendingReason::ConfigInvalid,
        // Handled before: a denial is final, not pending.
        EvalError::Denied { .. } => PendingReason::ConfigInvalid,
    }
}

fn pending_reason(claim: &AccountClaim) -> Option<&str> {
    claim
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == crate::api::conditions::types::READY)
        .map(|c| c.reason.as_str())
}

pub(super) fn lock(ctx: &Context) -> std::sync::MutexGuard<'_, crate::selection::InFlight> {
    // A poisoned lock means a panic elsewhere; the data is still the best knowledge we have.
    ctx.inflight.lock().unwrap_or_else(|p| p.into_inner())
}

pub(super) fn count(ctx: &Context, outcome: &str) {
    ctx.metrics
        .claim_outcomes
        .get_or_create(&OutcomeLabels {
            outcome: outcome.to_string(),
        })
        .inc();
}

pub fn error_policy(claim: Arc<AccountClaim>, err: &ClaimError, ctx: Arc<Context>) -> Action {
    let key = claim_key(&claim);
    let kind = match err {
        ClaimError::K8s { source, .. } => source.kind(),
    };
    ctx.metrics
        .reconcile_errors
        .get_or_create(&OutcomeLabels {
            outcome: kind.into(),
        })
        .inc();
    if err.is_conflict() {
        tracing::debug!(claim = key, error = %err, "lost a compare-and-swap; deciding again");
        return Action::requeue(ctx.backoff.conflict());
    }
    tracing::warn!(claim = key, error = %err, source = ?std::error::Error::source(err), "AccountClaim reconcile failed");
    Action::requeue(ctx.backoff.next(&key))
}
