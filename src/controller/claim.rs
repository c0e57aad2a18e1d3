//! Reconcile of AccountClaim: keep claims with a recorded binding where they are (apply-once),
//! otherwise evaluate the rules, choose a binding over the ledger (the index seen through the
//! in-flight writes), claim it with a compare-and-swap (tenant and claimed-by labels), or, for a
//! binding another claim claimed, remove that claim's claimed-by label first; and record the
//! result in status. On deletion, release (controller::release).
//!
//! Every write's outcome goes back into the ledger: written, refused (the record ends), or
//! unknown (the record stays until the index shows the object's new state). A reconcile never
//! waits for a cache: when the inventory cannot be read, the claim says so in a condition.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};

use super::active::{ActiveConfig, ConfigState};
use super::lanes::{LaneFacts, lane_of};
use super::outcome::{
    ClaimError, RECONCILE_TIMEOUT, count, k8s, outcome, pending, pending_reason, refused,
    status_outcome, unclaim, write_outcome,
};
use super::{Context, claim_key, decidable, point_caches, resync};
use crate::api::{AccountClaim, CLAIM_FINALIZER, Decision, MatchedRule};
use crate::k8s::K8sError;
use crate::k8s::lean::StoredClaim;
use crate::labels::CLAIMED_BY;
use crate::ledger::Outcome;
use crate::metrics::{ControllerLabels, OutcomeLabels};
use crate::pools::lifecycle::Cooldown;
use crate::pools::{ClaimView, Kind, claim_view, is_newer};
use crate::rules::{EvalError, Request as RuleRequest};
use crate::selection::{
    BeforeUse, Choice, MultiAccountPolicy, OrderedRequest, Placement, WriteState, before_use,
    check_bound, select_ordered,
};
use crate::status::{BoundTo, ClaimOutcome, PendingReason, is_denied, recorded_binding};

/// How long the binding and Shoot caches may take to list before claims say so.
const SYNC_GRACE: Duration = Duration::from_secs(10);

pub async fn reconcile(claim: Arc<StoredClaim>, ctx: Arc<Context>) -> Result<Action, ClaimError> {
    let facts = LaneFacts {
        namespace: claim.meta().namespace.as_deref(),
        labels: claim.labels(),
        settled: claim.is_settled(),
    };
    let lane = lane_of(facts, &ctx.args.source_claim_namespace());
    let Some(_slot) = ctx.lanes.enter(lane).await else {
        // Stopping: the next leader reconciles it.
        return Ok(Action::await_change());
    };
    // Boxed: a reconcile that queues for its slot is then only this small future (a takeover
    // may queue thousands), not the whole reconcile's state.
    let claim = latest(claim, &ctx);
    Box::pin(reconcile_now(claim, ctx.clone())).await
}

async fn reconcile_now(claim: Arc<StoredClaim>, ctx: Arc<Context>) -> Result<Action, ClaimError> {
    let started = Instant::now();
    let claim = claim.expand();
    let key = claim_key(&claim);
    let _running = ctx.health.running(format!("AccountClaim {key}"), started);
    let result = tokio::time::timeout(RECONCILE_TIMEOUT, reconcile_inner(&claim, &ctx))
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

/// The store's copy when it is newer than the one kube-runtime handed over: that one was taken
/// when the reconcile was queued (`lanes`), and deciding on it would only send the claim to the
/// back of the queue again (`stale_copy`).
fn latest(handed: Arc<StoredClaim>, ctx: &Context) -> Arc<StoredClaim> {
    match ctx.caches.claims.get(&ObjectRef::from_obj(handed.as_ref())) {
        Some(stored)
            if stored.uid() == handed.uid()
                && is_newer(
                    stored.resource_version().as_deref(),
                    handed.resource_version().as_deref(),
                ) =>
        {
            stored
        }
        _ => handed,
    }
}

/// Whether a pass left the claim settled — it waits for a change, or (pending) for the safety-net
/// retry — so that its backoff starts over. A pass that asked to be retried soon did not: a
/// backoff retry (no valid config, no inventory) must keep growing its delay, and resetting on
/// every `Ok` kept those retries at ~4 Hz.
fn settles(action: &Action, pending_retry: Duration) -> bool {
    *action == Action::await_change() || *action == Action::requeue(pending_retry)
}

/// One pass down the layers: the guards, the config in force, a recorded binding kept, the
/// tenant and pause checks, then the choice and its writes (`choose`).
async fn reconcile_inner(claim: &AccountClaim, ctx: &Context) -> Result<Action, ClaimError> {
    let key = claim_key(claim);
    if let Some(action) = stale_copy(claim, ctx, &key) {
        return Ok(action);
    }
    if claim.metadata.deletion_timestamp.is_some() {
        return super::release::release(claim, ctx, &key).await;
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
    let recorded = claim.status.as_ref().and_then(recorded_binding).is_some();
    let active = match config_in_force(claim, ctx, recorded).await? {
        Ok(active) => active,
        Err(action) => return Ok(action),
    };
    point_caches(ctx);
    if !decidable(ctx) {
        if recorded {
            // A recorded binding is never touched while the inventory cannot be read: writing
            // a pending status would erase the record (found by the chaos test).
            return Ok(Action::requeue(Duration::from_secs(1)));
        }
        return inventory_unavailable(claim, ctx, &active, &key).await;
    }
    let view = claim_view(claim);
    if recorded {
        return keep_recorded(claim, ctx, &active, &view).await;
    }
    if let Some(cause) = tenant_refusal(claim, ctx, &active).await {
        return tenant_not_allowed(claim, ctx, cause).await;
    }
    // Paused: no binding is chosen or written; the claim waits and comes back with the retry.
    if active.spec.is_paused() {
        let cause = format!(
            "HapConfig `{}` is paused (spec.paused: true): no binding is claimed until it is unpaused",
            ctx.resolver.name()
        );
        return pending(claim, ctx, PendingReason::Paused, cause, None).await;
    }
    // A request that named its binding already (adopted from its source) is recorded, never
    // chosen again.
    if let Some(adopted) = claim.spec.adopt_binding.as_deref() {
        return super::sources_adopt::reconcile(claim, ctx, &active, &view, adopted).await;
    }
    choose(claim, ctx, &active, &view).await
}

/// `Some` when the store's copy must not be decided on: the claim is finished (its finalizer
/// went), or the index knows a newer version (or the claim's deletion), or this replica wrote a
/// newer one that is on its way to the store.
fn stale_copy(claim: &AccountClaim, ctx: &Context, key: &str) -> Option<Action> {
    let uid = claim.uid().unwrap_or_default();
    let rv = claim.resource_version();
    let l = ctx.ledger();
    if l.inflight.is_finished(&uid, Instant::now()) {
        tracing::debug!(claim = key, "finished; waits for its deletion");
        return Some(Action::await_change());
    }
    let later = l.inventory.knows_later(Kind::Claim, &uid, rv.as_deref());
    if later || l.inflight.wrote_after(&uid, rv.as_deref(), Instant::now()) {
        tracing::debug!(
            claim = key,
            ?rv,
            index_later = later,
            "the store's copy is older; waits for the newer one"
        );
        return Some(Action::requeue(Duration::from_millis(100)));
    }
    None
}

/// The config in force, or what the claim does without one (`Err`): a claim with a recorded
/// binding keeps it unverified; any other claim says why it waits.
async fn config_in_force(
    claim: &AccountClaim,
    ctx: &Context,
    recorded: bool,
) -> Result<Result<Arc<ActiveConfig>, Action>, ClaimError> {
    let (reason, cause) = match ctx.resolver.resolve() {
        ConfigState::Active { active, .. } => return Ok(Ok(active)),
        // Without rules in force nothing can be verified; a bound claim keeps its record.
        _ if recorded => return Ok(Err(resync(ctx))),
        ConfigState::Missing => (
            PendingReason::ConfigMissing,
            format!(
                "no HapConfig named `{}` exists; the claim waits for one",
                ctx.resolver.name()
            ),
        ),
        ConfigState::Invalid {
            generation,
            validation,
        } => (
            PendingReason::ConfigInvalid,
            format!(
                "HapConfig `{}` generation {generation} is invalid and no earlier generation was valid: {}",
                ctx.resolver.name(),
                validation.summary().replace('\n', "; ")
            ),
        ),
    };
    pending(claim, ctx, reason, cause, None).await.map(Err)
}

/// Step 1 of DESIGN §4: a claim that ever recorded a binding stays on it. A vanished or
/// relabelled binding is reported (BindingLost), never replaced; if the label comes back, the
/// claim is Bound again, and strays claimed for it go back (`controller::strays`). A binding
/// recorded in another namespace than the one in force cannot be checked here, and stays as it
/// is.
async fn keep_recorded(
    claim: &AccountClaim,
    ctx: &Context,
    active: &ActiveConfig,
    view: &ClaimView,
) -> Result<Action, ClaimError> {
    let check = {
        let l = ctx.ledger();
        if l.inventory
            .holds_namespace(view.binding_namespace.as_deref())
        {
            check_bound(&l.inventory, &l.inflight, view, Instant::now())
        } else {
            None
        }
    };
    let kept = ClaimOutcome::Kept {
        namespace: active.spec.binding_namespace.clone(),
    };
    if check.is_some() && !active.spec.is_paused() {
        // Best effort here: the claim keeps its binding either way, and comes back.
        super::strays::give_back(claim, ctx, active, view).await;
    }
    match check {
        Some(Choice::Lost { message, .. }) => lost(claim, ctx, message).await,
        _ => write_outcome(claim, ctx, &kept).await.map(|_| resync(ctx)),
    }
}

/// What the rules and the index say for an unbound claim, decided under the ledger lock and
/// recorded there before anything is written; then carried out (`carry_out`).
async fn choose(
    claim: &AccountClaim,
    ctx: &Context,
    active: &ActiveConfig,
    view: &ClaimView,
) -> Result<Action, ClaimError> {
    let req = RuleRequest {
        plan: &claim.spec.plan,
        platform_region: claim.spec.platform_region.as_deref(),
        cluster_region: claim.spec.cluster_region.as_deref(),
        provider: claim.spec.provider.as_deref(),
        global_account: Some(&claim.spec.global_account),
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
    let (placement, before) = match decide(ctx, active, view, &outcome) {
        Ok(decided) => decided,
        Err(action) => return Ok(action),
    };
    tracing::debug!(claim = claim_key(claim), rv = ?claim.resource_version(), choice = ?placement.choice, "decided");
    let decided = Decided {
        placement,
        before,
        matched,
    };
    carry_out(claim, ctx, active, view, decided).await
}

/// The choice, under the ledger lock, and the write it needs first (`before_use`); recorded in
/// the ledger under the same lock, so that a sibling claim decided right after sees this one
/// even though nothing has been written yet. `Err`: wait and come back.
fn decide(
    ctx: &Context,
    active: &ActiveConfig,
    view: &ClaimView,
    outcome: &crate::rules::Outcome,
) -> Result<(Placement, BeforeUse), Action> {
    let now = Instant::now();
    let cooldown = active
        .spec
        .release
        .as_ref()
        .and_then(|r| r.cooldown.as_deref());
    let policy = MultiAccountPolicy::from_spec(active.spec.multi_hyperscaler_account.as_ref())
        .with_cooldown(Cooldown::from_spec(cooldown, jiff::Timestamp::now()));
    // Bindings the garden just refused to let us write are tried last.
    let paused = ctx.denials.paused_bindings(now);
    let key = || format!("{}/{}", view.namespace, view.name);
    let mut guard = ctx.ledger();
    let l = &mut *guard;
    // This claim's Bound status was written but the index does not show it yet: deciding
    // again on the older object could bind it a second time.
    if l.inflight
        .assignment_of(&view.uid, now)
        .is_some_and(|a| a.state == WriteState::Written)
    {
        tracing::debug!(
            claim = key(),
            "its Bound status was written; waits for the index to show it"
        );
        return Err(Action::requeue(Duration::from_millis(200)));
    }
    let request = OrderedRequest {
        claim: view,
        preferences: &outcome.preferences,
        provider_type: &outcome.provider_type,
        pins: active.rules.pins(),
    };
    let placement = select_ordered(&l.inventory, &l.inflight, &request, &policy, &paused, now);
    let before = before_use(&l.inventory, &l.inflight, &view.uid, &placement.choice, now);
    if let BeforeUse::Wait { binding } = &before {
        tracing::debug!(
            claim = key(),
            binding,
            "waits for another claim's claim write"
        );
        return Err(Action::requeue(Duration::from_millis(200)));
    }
    l.inflight
        .record(view, &placement.pool, &placement.choice, now);
    Ok((placement, before))
}

/// A decision about to be carried out.
struct Decided {
    placement: Placement,
    before: BeforeUse,
    matched: MatchedRule,
}

impl Decided {
    fn bound_to(&self, active: &ActiveConfig, binding: String, decision: Decision) -> BoundTo {
        BoundTo {
            binding,
            namespace: active.spec.binding_namespace.clone(),
            pool: self.placement.pool.clone(),
            matched_rule: self.matched.clone(),
            decision,
            preference: Some(self.placement.preference),
        }
    }

    /// The rule and pool a pending status names.
    fn waits_in(&self) -> Option<(MatchedRule, crate::labels::PoolKey)> {
        Some((self.matched.clone(), self.placement.pool.clone()))
    }
}

/// The writes of a decision: the record before a use and the Bound status, the claim of a free
/// binding, or a pending status saying why not.
async fn carry_out(
    claim: &AccountClaim,
    ctx: &Context,
    active: &ActiveConfig,
    view: &ClaimView,
    d: Decided,
) -> Result<Action, ClaimError> {
    let pinned = d.placement.pinned;
    match d.placement.choice.clone() {
        Choice::Use { binding, decision } => {
            unclaim(claim, ctx, active, view, &d.before).await?;
            bind(
                claim,
                ctx,
                view,
                d.bound_to(active, binding, decision.into()),
            )
            .await
        }
        Choice::Claim {
            binding,
            expected_resource_version,
        } => {
            let rv = expected_resource_version.as_deref();
            claim_free(claim, ctx, active, view, &d, (&binding, rv)).await
        }
        Choice::Wait { binding } => {
            let cause = format!(
                "binding {binding} of {} in this pool is being claimed or released right now; retrying",
                view.global_account
            );
            pending(claim, ctx, PendingReason::Progressing, cause, d.waits_in()).await?;
            Ok(Action::requeue(Duration::from_millis(200)))
        }
        Choice::Exhausted { message, .. } => {
            let reason = if pinned {
                PendingReason::PinnedBindingUnavailable
            } else {
                PendingReason::PoolExhausted
            };
            pending(claim, ctx, reason, message, d.waits_in()).await
        }
        Choice::Bound { .. } | Choice::Lost { .. } => {
            // Only for claims with a recorded binding, handled above; the status changed meanwhile.
            Ok(Action::requeue(Duration::from_millis(200)))
        }
    }
}

/// Claims a free binding (compare-and-swap of tenant and claimed-by), then records the claim
/// Bound and tells; a binding the garden refused (now, or recently) ends in `Forbidden`.
async fn claim_free(
    claim: &AccountClaim,
    ctx: &Context,
    active: &ActiveConfig,
    view: &ClaimView,
    d: &Decided,
    (binding, expected_rv): (&str, Option<&str>),
) -> Result<Action, ClaimError> {
    if let Some(paused) = ctx.denials.paused(binding, Instant::now()) {
        // Only refused bindings are left; do not ask the garden again before its time.
        ctx.ledger()
            .claim_outcome(binding, Outcome::Refused, Instant::now());
        return forbidden(claim, ctx, paused.message, d.waits_in(), paused.retry_at).await;
    }
    let claimed = claim_binding(claim, ctx, active, view, binding, expected_rv).await;
    if let Err(ClaimError::K8s {
        source: K8sError::Forbidden { message, .. },
        ..
    }) = &claimed
    {
        let retry_at = refused(claim, ctx, active, binding, "claim", message).await;
        let cause = ctx
            .denials
            .paused(binding, Instant::now())
            .map(|p| p.message);
        let cause = cause.unwrap_or_else(|| message.clone());
        return forbidden(claim, ctx, cause, d.waits_in(), retry_at).await;
    }
    claimed?;
    super::lifecycle::record_claim(ctx, &active.spec, &d.placement.pool);
    let decision = if d.placement.pinned {
        Decision::Pinned
    } else {
        Decision::Claimed
    };
    let bound = bind(
        claim,
        ctx,
        view,
        d.bound_to(active, binding.into(), decision),
    )
    .await;
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

/// The binding or Shoot cache has not listed: nothing can be decided. After a grace period, or
/// at once when the watch reported an error, the claim says why (§5.7), and is retried with a
/// growing delay rather than every few hundred milliseconds.
async fn inventory_unavailable(
    claim: &AccountClaim,
    ctx: &Context,
    active: &ActiveConfig,
    key: &str,
) -> Result<Action, ClaimError> {
    let target = active.binding_target();
    let caches = [
        (
            &ctx.caches.bindings.is_ready(),
            ctx.caches.bindings.error(),
            ctx.caches.bindings.started(),
            format!("{} in namespace {}", target.kind.gvk().3, target.namespace),
        ),
        (
            &ctx.caches.shoots.is_ready(),
            ctx.caches.shoots.error(),
            ctx.caches.shoots.started(),
            format!("shoots in namespace {}", active.shoot_namespace()),
        ),
    ];
    let waiting = caches.iter().filter(|(ready, ..)| !**ready);
    let mut causes = Vec::new();
    if !ctx.took_over.load(std::sync::atomic::Ordering::SeqCst) {
        let error = ctx
            .take_over_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if let Some(e) = error {
            causes.push(format!(
                "cannot re-read bindings and claims after taking over: {}",
                first_line(&e)
            ));
        }
    }
    for (_, error, started, what) in waiting {
        let late = started.is_none_or(|t| t.elapsed() > SYNC_GRACE);
        match error {
            Some(e) => causes.push(format!("cannot list {what}: {}", first_line(e))),
            None if late => causes.push(format!("{what} not listed yet")),
            None => {}
        }
    }
    if causes.is_empty() {
        return Ok(Action::requeue(Duration::from_millis(500)));
    }
    let cause = format!(
        "the inventory cannot be read, so no binding can be chosen: {}; check that the Gardener \
         CRDs are installed and that the operator may list and watch them",
        causes.join("; ")
    );
    pending(claim, ctx, PendingReason::InventoryUnavailable, cause, None).await?;
    Ok(Action::requeue(ctx.backoff.next(key)))
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or(s)
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
    let result = ctx
        .writer
        .set_binding_labels_cas(target.kind, &target.namespace, binding, rv, &labels)
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

/// Why `spec.tenants` refuses this claim, if it does. A claim a request source created without
/// naming a binding was checked at admission (with the user, which only admission knows) and is
/// not checked again; an adoption the operator found itself is checked by the object's kind and
/// namespace. An AccountClaim is checked by its own namespace.
async fn tenant_refusal(
    claim: &AccountClaim,
    ctx: &Context,
    active: &super::active::ActiveConfig,
) -> Option<String> {
    let policy = active.spec.tenants.as_ref()?;
    let own_ns = claim.namespace().unwrap_or_default();
    let source = crate::sources::naming::SourceRef::from_labels(claim.labels())
        .filter(|_| own_ns == ctx.args.source_claim_namespace());
    let (kind, namespace) = match &source {
        Some(_) if claim.spec.adopt_binding.is_none() => return None,
        Some(s) => (s.kind.into(), s.namespace.clone()),
        None => (crate::api::RequesterKind::AccountClaim, own_ns),
    };
    let needed = crate::tenancy::needs_namespace_labels(Some(policy));
    let labels = ctx.namespaces.labels_if(needed, &namespace).await;
    let who = crate::tenancy::Requester {
        kind,
        namespace: &namespace,
        namespace_labels: labels.as_ref(),
        user: None,
    };
    let ask = crate::tenancy::Ask {
        global_account: &claim.spec.global_account,
        adopt_binding: claim.spec.adopt_binding.is_some(),
    };
    match crate::tenancy::decide(Some(policy), &who, &ask) {
        crate::tenancy::Decision::Allowed { .. } => None,
        crate::tenancy::Decision::Denied { message } => Some(message),
    }
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
        tracing::debug!(claim = key, error = %err, "lost a compare-and-swap; deciding again");
        return Action::requeue(ctx.backoff.conflict());
    }
    tracing::warn!(claim = key, error = %err, source = ?std::error::Error::source(err), "AccountClaim reconcile failed");
    Action::requeue(ctx.backoff.next(&key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::backoff::Backoff;

    #[test]
    fn backoff_retries_grow_until_the_claim_settles() {
        // Issue 19, defect 9: the backoff was reset after every `Ok`, so a pass returning
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
}
