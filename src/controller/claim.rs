//! Reconcile of AccountClaim, one pass down the layers: read the facts the pure decision asks
//! for (`claim_facts`), decide (`crate::decision`: keep a recorded binding where it is, deny,
//! wait, or choose a binding over the ledger — the index seen through the in-flight writes),
//! then carry the decision out in one match: claim a free binding with a compare-and-swap
//! (tenant and claimed-by labels), or, for a binding another claim claimed, remove that claim's
//! claimed-by label first; and record the result in status. On deletion, release
//! (controller::release).
//!
//! Every write's outcome goes back into the ledger: written, refused (the record ends), or
//! unknown (the record stays until the index shows the object's new state). A reconcile never
//! waits for a cache: when the inventory cannot be read, the claim says so in a condition.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};

use super::account_check;
use super::claim_write::Settled;
use super::lanes::{Entry, Lane, LaneFacts, lane_of};
use super::outcome::{
    ClaimError, RECONCILE_TIMEOUT, count, k8s, outcome, pending, pending_reason, record_use,
    refused, status_outcome, write_outcome, write_outcome_dropping_record,
};
use super::{Context, claim_key, resync};
use crate::api::{AccountClaim, MatchedRule};
use crate::decision::{ClaimDecision, Retry};
use crate::k8s::K8sError;
use crate::k8s::active::{ActiveConfig, ConfigState};
use crate::k8s::lean::StoredClaim;
use crate::labels::CLAIMED_BY;
use crate::ledger::Outcome;
use crate::metrics::{ControllerLabels, OutcomeLabels};
use crate::pools::quarantine::{PROBATION, QUARANTINE};
use crate::pools::{ClaimView, claim_view};
use crate::selection::{AfterClaim, Check};
use crate::status::{BoundTo, ClaimOutcome, PendingReason};

pub async fn reconcile(claim: Arc<StoredClaim>, ctx: Arc<Context>) -> Result<Action, ClaimError> {
    let key = claim.ref_by_name();
    let _slot = match ctx.lanes.enter(&key, lane(&claim, &ctx)) {
        Entry::Run(slot) => slot,
        // In line: a kick brings it back when a slot is kept for it. Stopping: the next
        // leader reconciles it.
        Entry::Queued | Entry::Closed => return Ok(Action::await_change()),
    };
    reconcile_now(claim, ctx).await
}

/// The lane `claim` waits for a slot in.
pub(super) fn lane(claim: &StoredClaim, ctx: &Context) -> Lane {
    let source_ns = ctx.args.source_claim_namespace();
    let mut facts = LaneFacts {
        namespace: claim.meta().namespace.as_deref(),
        labels: claim.labels(),
        settled: claim.is_settled(),
        writes_no_binding: false,
    };
    // The rules are asked only for a claim that would take the source lane.
    if lane_of(facts, &source_ns) == Lane::Source {
        facts.writes_no_binding = writes_no_binding(claim, ctx);
    }
    lane_of(facts, &source_ns)
}

/// Whether `claim`'s decision cannot write a binding: a use of a shared binding writes nothing
/// on it, so the rules in force must send it to shared pools only — a dedicated fallback is
/// taken when the shared pool is empty, and claims or records on a binding —, and it must adopt
/// nothing and its tenant have no pin (either may place it on a dedicated binding).
fn writes_no_binding(claim: &StoredClaim, ctx: &Context) -> bool {
    let ConfigState::Active { active, .. } = ctx.resolver.resolve() else {
        return false;
    };
    let spec = claim.spec();
    if spec.adopt_binding.is_some()
        || active
            .rules
            .pins()
            .of(&spec.global_account)
            .next()
            .is_some()
    {
        return false;
    }
    let request = super::claim_facts::rule_request(spec);
    active
        .rules
        .evaluate(&request)
        .is_ok_and(|o| o.preferences.iter().all(|p| p.pool.shared))
}

async fn reconcile_now(claim: Arc<StoredClaim>, ctx: Arc<Context>) -> Result<Action, ClaimError> {
    let started = Instant::now();
    let claim = claim.expand();
    let key = claim_key(&claim);
    let _running = ctx.health.running(format!("AccountClaim {key}"), started);
    let span = tracing::info_span!(
        "reconcile",
        controller = "accountclaim",
        claim = %key,
        tenant = %claim.spec.global_account,
        binding = tracing::field::Empty,
    );
    let recorded = claim
        .status
        .as_ref()
        .and_then(crate::claim_state::recorded_binding);
    if let Some(r) = recorded {
        span.record("binding", r.binding.as_str());
    }
    let inner = tracing::Instrument::instrument(reconcile_inner(&claim, &ctx), span);
    let result = tokio::time::timeout(RECONCILE_TIMEOUT, inner)
        .await
        .unwrap_or(Err(ClaimError::Timeout { claim: key.clone() }));
    ctx.metrics
        .reconcile_seconds
        .get_or_create(&ControllerLabels {
            controller: "accountclaim".into(),
        })
        .observe(started.elapsed().as_secs_f64());
    if result
        .as_ref()
        .is_ok_and(|a| settles(a, ctx.args.pending_retry))
    {
        ctx.backoff.reset(&key);
    }
    result
}

/// Whether a pass left the claim settled — it waits for a change, or (pending) for the safety-net
/// retry — so that its backoff starts over. A pass that asked to be retried soon did not: a
/// backoff retry (no valid config, no inventory) must keep growing its delay, and resetting on
/// every `Ok` kept those retries at ~4 Hz.
fn settles(action: &Action, pending_retry: Duration) -> bool {
    *action == Action::await_change() || *action == Action::requeue(pending_retry)
}

/// One pass down the layers: the facts the decision asks for (reads only), the decision (pure,
/// `crate::decision`), then its writes (`carry_out`).
async fn reconcile_inner(claim: &AccountClaim, ctx: &Context) -> Result<Action, ClaimError> {
    let key = claim_key(claim);
    let view = claim_view(claim);
    let decision = super::claim_facts::decide(claim, ctx, &view).await;
    carry_out(claim, ctx, &key, &view, decision).await
}

/// When a pending claim comes back: as its status write says (the safety net), after the
/// claim's growing backoff (no valid config, no inventory: not every few hundred milliseconds),
/// or after a fixed wait.
fn pending_visit(retry: Retry, settled: Action, backoff: impl FnOnce() -> Duration) -> Action {
    match retry {
        Retry::SafetyNet => settled,
        Retry::Backoff => Action::requeue(backoff()),
        Retry::After(wait) => Action::requeue(wait),
    }
}

/// The writes of a decision, and the claim's next visit.
async fn carry_out(
    claim: &AccountClaim,
    ctx: &Context,
    key: &str,
    view: &ClaimView,
    decision: ClaimDecision<Arc<ActiveConfig>>,
) -> Result<Action, ClaimError> {
    match decision {
        ClaimDecision::Wait(why) => {
            tracing::debug!(?why, "waits");
            Ok(why
                .after()
                .map_or_else(Action::await_change, Action::requeue))
        }
        ClaimDecision::Release => super::release::release(claim, ctx, key).await,
        ClaimDecision::AddFinalizer => {
            ctx.writer
                .add_claim_finalizer(claim)
                .await
                .map_err(k8s(key, "adding the release finalizer"))?;
            // The update event brings the claim back with the finalizer in place.
            Ok(Action::await_change())
        }
        ClaimDecision::StayFinal => Ok(Action::await_change()),
        ClaimDecision::KeepUnverified => Ok(resync(ctx)),
        ClaimDecision::Keep {
            config,
            namespace,
            give_back,
        } => {
            give_strays_back(claim, ctx, &config, view, give_back).await;
            if give_back {
                super::quarantine::graduate(claim, ctx, &config, view).await;
            }
            let kept = ClaimOutcome::Kept { namespace };
            write_outcome(claim, ctx, &kept).await.map(|_| resync(ctx))
        }
        ClaimDecision::ReportLost {
            config,
            cause,
            give_back,
        } => {
            give_strays_back(claim, ctx, &config, view, give_back).await;
            lost(claim, ctx, cause).await
        }
        ClaimDecision::Pending {
            reason,
            cause,
            matched,
            retry,
        } => waiting(claim, ctx, key, (reason, cause, matched), retry).await,
        ClaimDecision::TenantNotAllowed { cause } => tenant_not_allowed(claim, ctx, cause).await,
        ClaimDecision::Deny { cause, matched } => denied(claim, ctx, cause, matched).await,
        ClaimDecision::Adopt { config, to, before } => {
            super::sources_adopt::record(claim, ctx, &config, view, to, &before).await
        }
        ClaimDecision::Use { config, to, before } => {
            // Read before the use's record removes the claimed-by that says a check is due.
            let contested =
                super::account_check::contested_use(claim, ctx, &config, view, &to.binding);
            if let Some(action) = contested.await? {
                return Ok(action);
            }
            record_use(claim, ctx, &config, view, &before).await?;
            bind(claim, ctx, view, to).await
        }
        ClaimDecision::Claim {
            config,
            to,
            expected_resource_version,
        } => {
            let rv = expected_resource_version.as_deref();
            claim_free(claim, ctx, &config, view, to, rv).await
        }
    }
}

/// A pending claim: a claim that waits in its pool for another claim's recorded write settles
/// it first (`settle_waited_for`); then the status says why it waits, and it looks again.
async fn waiting(
    claim: &AccountClaim,
    ctx: &Context,
    key: &str,
    (reason, cause, matched): (
        PendingReason,
        String,
        Option<(MatchedRule, crate::labels::PoolKey)>,
    ),
    retry: Retry,
) -> Result<Action, ClaimError> {
    if reason == PendingReason::Progressing
        && let Some(action) = settle_waited_for(claim, ctx, &matched).await?
    {
        return Ok(action);
    }
    let settled = pending(claim, ctx, reason, cause, matched).await?;
    Ok(pending_visit(retry, settled, || ctx.backoff.next(key)))
}

/// A claim waiting in its pool settles another claim's recorded write there first
/// (`claim_write::settle_for`); `None` to say why it waits as decided.
async fn settle_waited_for(
    claim: &AccountClaim,
    ctx: &Context,
    matched: &Option<(MatchedRule, crate::labels::PoolKey)>,
) -> Result<Option<Action>, ClaimError> {
    let Some((_, pool)) = matched else {
        return Ok(None);
    };
    match super::claim_write::settle_for(claim, ctx, pool).await? {
        Settled::Go => Ok(None),
        Settled::Wait(after) => Ok(Some(Action::requeue(after))),
        Settled::Refused { cause, retry_at } => {
            let matched = matched.clone();
            forbidden(claim, ctx, cause, matched, retry_at)
                .await
                .map(Some)
        }
    }
}

/// Strays claimed for a recorded binding go back (`controller::strays`); best effort: the claim
/// keeps its binding either way, and comes back.
async fn give_strays_back(
    claim: &AccountClaim,
    ctx: &Context,
    active: &ActiveConfig,
    view: &ClaimView,
    give_back: bool,
) {
    if give_back {
        super::strays::give_back(claim, ctx, active, view).await;
    }
}

/// Claims a free binding (compare-and-swap of tenant and claimed-by), then records the claim
/// Bound and tells; a binding the garden refused (now, or recently) ends in `Forbidden`.
async fn claim_free(
    claim: &AccountClaim,
    ctx: &Context,
    active: &ActiveConfig,
    view: &ClaimView,
    to: BoundTo,
    expected_rv: Option<&str>,
) -> Result<Action, ClaimError> {
    let binding = to.binding.clone();
    let waits_in = Some((to.matched_rule.clone(), to.pool.clone()));
    if let Some(paused) = ctx.denials.paused(&binding, Instant::now()) {
        // Only refused bindings are left; do not ask the garden again before its time.
        ctx.ledger()
            .claim_outcome(&binding, Outcome::Refused, Instant::now());
        return forbidden(claim, ctx, paused.message, waits_in, paused.retry_at).await;
    }
    // Recorded first: whoever leads when the claim goes must know this write may still land.
    let claim = &match expected_rv {
        Some(rv) => match super::claim_write::record(claim, ctx, active, &binding, rv).await? {
            Ok(recorded) => recorded,
            Err(Settled::Refused { cause, retry_at }) => {
                return forbidden(claim, ctx, cause, waits_in, retry_at).await;
            }
            Err(Settled::Wait(after)) => return Ok(Action::requeue(after)),
            // Not handed back by `record`; were it, nothing is sent unrecorded.
            Err(Settled::Go) => return Ok(Action::requeue(Duration::from_millis(300))),
        },
        None => claim.clone(),
    };
    let claimed = claim_binding(claim, ctx, active, view, &binding, expected_rv).await;
    if let Err(ClaimError::K8s {
        source: K8sError::Forbidden { message, .. },
        ..
    }) = &claimed
    {
        let retry_at = refused(claim, ctx, active, &binding, "claim", message).await;
        let cause = ctx
            .denials
            .paused(&binding, Instant::now())
            .map(|p| p.message);
        let cause = cause.unwrap_or_else(|| message.clone());
        let outcome = ClaimOutcome::Pending {
            reason: PendingReason::Forbidden,
            cause,
            matched: waits_in,
        };
        // Refused outright: it never landed and never can, so its record goes with the status.
        write_outcome_dropping_record(claim, ctx, &outcome).await?;
        return Ok(forbidden_retry(retry_at));
    }
    claimed?;
    tracing::Span::current().record("binding", binding.as_str());
    tracing::info!("Claimed a free binding for the tenant");
    let check = Check::ClaimWrite;
    let verdict = match account_check::verdict(ctx, active, view, (&binding, true), check).await {
        Ok(verdict) => verdict,
        Err(failed) => return Err(account_check::unread(claim, ctx, &binding, failed).await),
    };
    if let AfterClaim::GiveBack { sibling, label } = verdict {
        let claimant = view.uid.clone();
        let contest = account_check::Contest {
            sibling,
            label,
            claimant,
        };
        return account_check::give_back(claim, ctx, active, view, &binding, contest).await;
    }
    let bound = bind(claim, ctx, view, to).await;
    // Told after the status write, whatever its outcome: the binding is claimed either way, and
    // an event awaited between the two writes widened every race window.
    let note = format!(
        "claimed binding {}/{binding} for global account {}",
        active.spec.binding_namespace, view.global_account
    );
    ctx.writer
        .event(&claim.object_ref(&()), false, "Claimed", "Claim", note)
        .await;
    bound
}

/// Writes `tenantName=<global account>` and `claimed-by=<claim uid>` with the resourceVersion
/// precondition.
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
        ctx.ledger()
            .claim_outcome(binding, Outcome::Refused, Instant::now());
        return Err(ClaimError::K8s {
            claim: key,
            step: "claiming a binding",
            source: K8sError::Conflict {
                what: format!("binding {binding} has no resourceVersion in the index"),
            },
        });
    };
    let target = active.binding_target();
    // The claimed-by record in the same compare-and-swap: a clean release trusts it only as
    // long as no other claim was bound to the binding (crate::release, step 9).
    let labels = [
        (tenant_key.as_str(), view.global_account.as_str()),
        (CLAIMED_BY, view.uid.as_str()),
    ];
    // The claim time rides along: the claim rate counts it from the objects, the same on every
    // replica and after a restart.
    let at = crate::pools::lifecycle::release_time(jiff::Timestamp::now());
    let mut annotations = vec![(crate::pools::lifecycle::CLAIMED_AT, at.as_str())];
    // A binding on trial keeps its trial record through this tenant's tenure (and after it),
    // in the same compare-and-swap: until a Shoot proves it, it never reads as served.
    if ctx.ledger().inventory.binding(binding).is_some_and(|e| {
        crate::pools::quarantine::needs_probation(active.spec.quarantine.as_deref(), e)
    }) {
        annotations.push((QUARANTINE, PROBATION));
    }
    let result = ctx
        .writer
        .set_binding_labels_cas(
            target.kind,
            &target.namespace,
            binding,
            rv,
            &labels,
            &annotations,
        )
        .await;
    ctx.ledger()
        .claim_outcome(binding, outcome(&result), Instant::now());
    match result {
        Ok(_) => {
            if ctx.denials.allowed(binding) {
                ctx.caches.feed.bump();
            }
            Ok(())
        }
        Err(e) => Err(k8s(&key, "claiming a binding")(e)),
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
    let pool_type = to.pool.hyperscaler_type.clone();
    let result = write_outcome(claim, ctx, &ClaimOutcome::Bound(to)).await;
    ctx.ledger()
        .assignment_outcome(&view.uid, status_outcome(&result), Instant::now());
    match result {
        Ok(()) => {
            count(ctx, &format!("{decision:?}"));
            let created = claim.metadata.creation_timestamp.as_ref().map(|t| t.0);
            ctx.metrics.observe_bind(&pool_type, created);
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
        Err(e) => Err(e),
    }
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
    let outcome = ClaimOutcome::Pending {
        reason: PendingReason::Forbidden,
        cause,
        matched,
    };
    write_outcome(claim, ctx, &outcome).await?;
    Ok(forbidden_retry(retry_at))
}

/// When a claim refused by the garden looks again: when the binding's pause ends.
fn forbidden_retry(retry_at: Instant) -> Action {
    let wait = retry_at.saturating_duration_since(Instant::now());
    Action::requeue(wait.max(Duration::from_millis(100)))
}

/// `spec.tenants` refuses the claim: Failed with reason TenantNotAllowed (final), and an event.
async fn tenant_not_allowed(
    claim: &AccountClaim,
    ctx: &Context,
    cause: String,
) -> Result<Action, ClaimError> {
    let reason = crate::api::conditions::reasons::TENANT_NOT_ALLOWED;
    if pending_reason(claim) != Some(reason) {
        ctx.writer
            .event(
                &claim.object_ref(&()),
                true,
                reason,
                "Authorize",
                cause.clone(),
            )
            .await;
        count(ctx, reason);
    }
    write_outcome(claim, ctx, &ClaimOutcome::TenantNotAllowed { cause }).await?;
    Ok(Action::await_change())
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

pub fn error_policy(claim: Arc<StoredClaim>, err: &ClaimError, ctx: Arc<Context>) -> Action {
    let key = claim_key(claim.as_ref());
    let kind = match err {
        ClaimError::K8s { source, .. } => source.kind(),
        ClaimError::Timeout { .. } => "timeout",
        ClaimError::SourceUnknown { .. } => "source_unknown",
    };
    ctx.metrics
        .reconcile_errors
        .get_or_create(&OutcomeLabels {
            outcome: kind.into(),
        })
        .inc();
    if err.is_conflict() {
        // Outside the reconcile's span: the claim is named here.
        tracing::debug!(claim = %key, error = %err, "lost a compare-and-swap; deciding again");
        return Action::requeue(ctx.backoff.conflict());
    }
    tracing::warn!(claim = %key, error = %err, source = ?std::error::Error::source(err), "AccountClaim reconcile failed");
    Action::requeue(ctx.backoff.next(&key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::backoff::Backoff;

    #[test]
    fn backoff_retries_grow_until_the_claim_settles() {
        // The backoff was reset after every `Ok`, so a pass returning
        // `requeue(backoff.next())` was retried at 200-300 ms forever.
        let (backoff, pending_retry) = (Backoff::default(), Duration::from_secs(30));
        let mut delays = Vec::new();
        for _ in 0..6 {
            let delay = backoff.next("c");
            if settles(&Action::requeue(delay), pending_retry) {
                backoff.reset("c");
            }
            delays.push(delay);
        }
        assert!(delays[5] >= Duration::from_millis(6400), "{delays:?}");
        // A short wait (a write in flight, a stale copy) neither grows nor resets it.
        assert!(!settles(
            &Action::requeue(Duration::from_millis(100)),
            pending_retry
        ));
        for settled in [Action::await_change(), Action::requeue(pending_retry)] {
            assert!(settles(&settled, pending_retry));
        }
    }

    #[test]
    fn a_pending_claim_comes_back_as_its_retry_says() {
        // The decision's `Retry` is carried out here only: a swap of two arms passed every
        // other unit test.
        let settled = Action::requeue(Duration::from_secs(30));
        let backoff = Backoff::default();
        let visit = |retry| pending_visit(retry, settled.clone(), || backoff.next("c"));
        assert_eq!(visit(Retry::SafetyNet), settled);
        let waits: Vec<_> = (0..4).map(|_| visit(Retry::Backoff)).collect();
        assert!(waits.iter().all(|a| *a != settled), "{waits:?}");
        assert_ne!(waits[0], waits[3], "the backoff grows: {waits:?}");
        assert_eq!(
            visit(Retry::After(Duration::from_millis(200))),
            Action::requeue(Duration::from_millis(200))
        );
    }
}
