//! Deletion of an AccountClaim: release its binding (crate::release decides) with a
//! compare-and-swap — the dirty label for the cleanup job, or, for a source claim whose object
//! never existed on a binding no other claim was bound to, the tenant and claimed-by labels
//! removed — then remove the finalizer. Before releasing a source
//! claim's binding its object is read live: while it exists (again), the release waits.
//!
//! Without a valid config the operator cannot know the pool's labels, so the finalizer stays and
//! the claim says why (`Released=False`, one event per cause): letting it go would leave the
//! account claimed but not dirty, and the tenant's next claim would reuse an account nobody
//! cleaned.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};

use super::claim_write::Settled;
use super::outcome::{ClaimError, count, k8s, outcome, refused, write_outcome};
use super::{Context, decidable};
use crate::api::conditions::reasons;
use crate::api::{AccountClaim, CLAIM_FINALIZER, ReleaseMode, SourceKind};
use crate::claim_state::SourceRef;
use crate::decision::release::{
    Before, Judged, Next, Read, Record, ReleaseDecision, ReleaseFacts, next,
};
use crate::k8s::K8sError;
use crate::k8s::active::ActiveConfig;
use crate::k8s::caches::BindingTarget;
use crate::k8s::sources::SourceWrites;
use crate::labels::CLAIMED_BY;
use crate::labels::ResolvedLabelKeys;
use crate::pools::{ClaimView, claim_view};
use crate::release::{
    ClaimWriteNow, KeepReason, Origin, Presence, Release, claim_write_indexed, decide_release,
};
use crate::selection::{Choice, InFlight};
use crate::sources::naming::ANNOTATION_SOURCE;
use crate::status::{ClaimOutcome, release_blocked_for};

/// `Released=False` reason of a source claim whose object exists (again).
const OBJECT_EXISTS: &str = "ObjectExists";
/// `Released=False` reason of a release waiting for claims recorded on (or being assigned to)
/// its binding whose status does not show yet.
const RECORDED_USE_WAITING: &str = "RecordedUseWaiting";
/// `Released=False` reason of a release waiting while another binding of the same credential
/// has clusters.
const ACCOUNT_IN_USE: &str = "AccountInUseByBinding";

pub(super) async fn release(
    claim: &AccountClaim,
    ctx: &Context,
    key: &str,
) -> Result<Action, ClaimError> {
    let view = claim_view(claim);
    let finalized = claim.finalizers().iter().any(|f| f == CLAIM_FINALIZER);
    let mut facts = ReleaseFacts::new(finalized);
    // Each pass gets one fact `next` has not seen (the release read twice at most, around a
    // source read), so this ends after a dozen steps at most.
    loop {
        match next(&facts) {
            Next::Read(read) => read_fact(&mut facts, read, claim, ctx, key, &view).await?,
            Next::Do(step) => before(&mut facts, step, claim, ctx, &view).await?,
            Next::Decided(decision) => return carry_out(claim, ctx, key, &view, decision).await,
        }
    }
}

/// Reads the fact the decision asks for. No API write: the release read records the write it
/// decides as started in the ledger, under its lock, as a selection does.
async fn read_fact(
    facts: &mut ReleaseFacts<Arc<ActiveConfig>>,
    read: Read<Arc<ActiveConfig>>,
    claim: &AccountClaim,
    ctx: &Context,
    key: &str,
    view: &ClaimView,
) -> Result<(), ClaimError> {
    match read {
        Read::Config => facts.config = Some(super::claim_facts::in_force(ctx)),
        Read::Inventory { .. } => facts.decidable = Some(decidable(ctx)),
        Read::HoldsBinding => facts.holds_binding = Some(holds_binding(ctx, view)),
        Read::Release { config, source } => {
            let mode = config.spec.release.as_ref().map(|r| r.mode);
            let origin = origin(claim, source);
            facts.judged = Some(judge(
                ctx,
                view,
                mode.unwrap_or(ReleaseMode::MarkDirty),
                origin,
            ));
        }
        Read::Source => {
            let source = claim
                .metadata
                .labels
                .as_ref()
                .and_then(SourceRef::from_labels);
            let presence = match &source {
                Some(s) => object_now(claim, ctx, key, s).await?,
                // Only a source claim's decision asks for it.
                None => Presence::Gone,
            };
            facts.read_source(presence);
        }
    }
    Ok(())
}

/// Does a write the release needs done before the binding is decided on; its outcome is the
/// fact.
async fn before(
    facts: &mut ReleaseFacts<Arc<ActiveConfig>>,
    step: Before<Arc<ActiveConfig>>,
    claim: &AccountClaim,
    ctx: &Context,
    view: &ClaimView,
) -> Result<(), ClaimError> {
    match step {
        Before::GiveStraysBack { config } => {
            let back = super::strays::give_back(claim, ctx, &config, view).await;
            facts.strays_back = Some(back);
        }
        Before::SettleRecord { config, may_write } => {
            let settled = super::claim_write::settle(claim, ctx, &config, may_write).await?;
            facts.record = Some(match settled {
                Settled::Go => Record::Settled,
                Settled::Wait(after) => Record::MayLand { after },
                Settled::Refused { cause, retry_at } => Record::Refused { cause, retry_at },
            });
        }
        Before::EndTrial { config } => {
            let ended = super::quarantine::graduate(claim, ctx, &config, view).await;
            facts.trial_ended = Some(ended);
        }
    }
    Ok(())
}

/// Who asked for the claim, with the live read of a source claim's object as made so far.
fn origin(claim: &AccountClaim, now: Presence) -> Origin {
    match claim
        .metadata
        .labels
        .as_ref()
        .and_then(SourceRef::from_labels)
    {
        None => Origin::User,
        Some(s) => Origin::Source {
            existed: s.uid.is_some(),
            now,
        },
    }
}

/// Carries out the decision: the only place a release writes after its `Before` steps.
async fn carry_out(
    claim: &AccountClaim,
    ctx: &Context,
    key: &str,
    view: &ClaimView,
    decision: ReleaseDecision<Arc<ActiveConfig>>,
) -> Result<Action, ClaimError> {
    match decision {
        ReleaseDecision::Done => Ok(Action::await_change()),
        ReleaseDecision::ConfigWait { invalid } => {
            let reason = if invalid {
                reasons::CONFIG_INVALID
            } else {
                reasons::CONFIG_MISSING
            };
            config_wait(claim, ctx, key, reason).await
        }
        ReleaseDecision::Held { observing } => paused(claim, ctx, observing).await,
        ReleaseDecision::Refused { cause, retry_at } => {
            release_blocked(claim, ctx, cause, retry_at).await
        }
        ReleaseDecision::Wait(why) => {
            tracing::debug!(?why, "release waits");
            Ok(Action::requeue(why.after()))
        }
        ReleaseDecision::Carry { config, release } => {
            if let Some(action) = act(claim, ctx, &config, view, key, release).await? {
                return Ok(action);
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
    }
}

/// Decides on the index, and records a release write as started under the same lock: a
/// sibling decided right after sees it although nothing was sent yet.
fn judge(ctx: &Context, view: &ClaimView, mode: ReleaseMode, origin: Origin) -> Judged {
    let now = Instant::now();
    let mut guard = ctx.ledger();
    let l = &mut *guard;
    let decision = decide_release(view, &l.inventory, &l.inflight, mode, origin, now);
    let (Release::MarkDirty {
        binding,
        expected_resource_version,
    }
    | Release::ReleaseClean {
        binding,
        expected_resource_version,
    }) = &decision
    else {
        return Judged::Go(decision);
    };
    let Some(rv) = expected_resource_version else {
        return Judged::NoVersion;
    };
    if let Some(paused) = ctx.denials.paused(binding, now) {
        return Judged::Refused {
            cause: paused.message,
            retry_at: paused.retry_at,
        };
    }
    l.inflight.release_started(binding, Some(rv.clone()), now);
    Judged::Go(decision)
}

/// Carries out a release decision on the index. `Some`: what to do next, the finalizer stays;
/// `None`: the binding is settled, the finalizer can go.
async fn act(
    claim: &AccountClaim,
    ctx: &Context,
    active: &ActiveConfig,
    view: &ClaimView,
    key: &str,
    decision: Release,
) -> Result<Option<Action>, ClaimError> {
    tracing::debug!(?decision, "release decided");
    let wait = |d| Some(Action::requeue(d));
    match decision {
        Release::Keep(KeepReason::OtherNamespace { namespace }) => {
            skipped(claim, ctx, view, &namespace).await;
            Ok(None)
        }
        Release::Keep(_) => Ok(None),
        Release::WaitForShoot { shoot } => {
            tracing::debug!(shoot, "release waits for the Shoot to be deleted");
            Ok(wait(Duration::from_secs(5)))
        }
        w @ Release::WaitForSibling { .. } => sibling_waiting(claim, ctx, key, &w).await,
        Release::WaitForSource { binding } => {
            object_exists(claim, ctx, &binding).await?;
            Ok(wait(Duration::from_secs(5)))
        }
        // Not left by `release`: the read is made and the decision taken again before this.
        Release::ReadSource { .. } => Ok(wait(Duration::from_millis(200))),
        Release::WaitForUse { binding, claims } => {
            recorded_use_waiting(claim, ctx, key, &binding, &claims).await
        }
        Release::WaitForWrite { binding } => {
            tracing::debug!(binding, "release waits for the outcome of a write");
            Ok(wait(Duration::from_secs(1)))
        }
        Release::Resolve {
            binding,
            expected_resource_version,
        } => {
            resolve(
                claim,
                ctx,
                active,
                view,
                &binding,
                expected_resource_version,
            )
            .await;
            Ok(wait(Duration::from_millis(200)))
        }
        Release::MarkDirty {
            binding,
            expected_resource_version: Some(rv),
        } => write_release(claim, ctx, active, key, &binding, &rv, How::Dirty).await,
        Release::ReleaseClean {
            binding,
            expected_resource_version: Some(rv),
        } => write_release(claim, ctx, active, key, &binding, &rv, How::Clean).await,
        // `decide` never hands these on without a version.
        Release::MarkDirty { .. } | Release::ReleaseClean { .. } => {
            Ok(wait(Duration::from_millis(300)))
        }
    }
}

/// A binding in a namespace the config in force no longer names is not released: said once.
async fn skipped(claim: &AccountClaim, ctx: &Context, view: &ClaimView, namespace: &str) {
    let note = format!(
        "not released: its binding {} lives in namespace {namespace}, which the HapConfig in \
         force no longer names; release it by hand if it is to be cleaned",
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

/// The request object of a source claim exists again: the release waits, and the status says
/// so (written only when it changes, not on every look).
async fn object_exists(
    claim: &AccountClaim,
    ctx: &Context,
    binding: &str,
) -> Result<(), ClaimError> {
    let object = claim
        .metadata
        .labels
        .as_ref()
        .and_then(SourceRef::from_labels)
        .map(|s| s.describe())
        .unwrap_or_default();
    let cause = format!(
        "binding {binding} is not released while {object} exists: it may have been created \
         again and run on this binding; the release goes on once it is deleted"
    );
    let outcome = ClaimOutcome::ReleaseBlocked {
        reason: OBJECT_EXISTS,
        cause,
    };
    write_outcome(claim, ctx, &outcome).await.map(drop)
}

/// A release waiting for other claims' use of its binding to show (`Release::WaitForUse`) says
/// so on the claim, naming them, with an event once per cause, and backs off: a recorded claim
/// that stays pending (no rule matches it any more, its pool is exhausted) holds the release
/// for as long, and people must see what it waits for.
async fn recorded_use_waiting(
    claim: &AccountClaim,
    ctx: &Context,
    key: &str,
    binding: &str,
    claims: &[String],
) -> Result<Option<Action>, ClaimError> {
    let cause = format!(
        "binding {binding} is not released while claims recorded on it or being bound to it \
         have no status yet ({}): their status may still land Bound there; the release goes on \
         once each is bound, deleted or denied",
        claims.join(", ")
    );
    blocked(claim, ctx, key, RECORDED_USE_WAITING, cause).await
}

/// A release waiting while another binding of the same credential has clusters
/// (`Release::WaitForSibling`): `Released=False`, reason `AccountInUseByBinding`.
async fn sibling_waiting(
    claim: &AccountClaim,
    ctx: &Context,
    key: &str,
    wait: &Release,
) -> Result<Option<Action>, ClaimError> {
    let Release::WaitForSibling {
        binding,
        sibling,
        clusters,
    } = wait
    else {
        return Ok(Some(Action::requeue(ctx.backoff.next(key))));
    };
    let cause = format!(
        "binding {binding} is not released while binding {sibling}, which references the same \
         credential, is used by {}: the account is one; the release goes on once no binding of \
         the credential has a cluster",
        clusters.join(", ")
    );
    blocked(claim, ctx, key, ACCOUNT_IN_USE, cause).await
}

/// A release that waits for something the claim's status names: `Released=False` with `reason`
/// and `cause`, a `ReleaseWaiting` event once per cause, and retries that back off.
async fn blocked(
    claim: &AccountClaim,
    ctx: &Context,
    key: &str,
    reason: &'static str,
    cause: String,
) -> Result<Option<Action>, ClaimError> {
    tracing::debug!(reason, "release waits: {cause}");
    announce_wait(claim, ctx, reason, cause, false).await?;
    Ok(Some(Action::requeue(ctx.backoff.next(key))))
}

/// Every release wait says so the same way: `Released=False` with `reason` and `cause`, and a
/// `ReleaseWaiting` event (a Warning when `warning`) only when the claim does not show that
/// reason yet, so that a wait that lasts sends one event, not one per retry.
async fn announce_wait(
    claim: &AccountClaim,
    ctx: &Context,
    reason: &'static str,
    cause: String,
    warning: bool,
) -> Result<(), ClaimError> {
    if !release_blocked_for(claim.status.as_ref(), reason) {
        ctx.writer
            .event(
                &claim.object_ref(&()),
                warning,
                "ReleaseWaiting",
                "Release",
                cause.clone(),
            )
            .await;
    }
    write_outcome(claim, ctx, &ClaimOutcome::ReleaseBlocked { reason, cause }).await?;
    Ok(())
}

/// Which release write.
#[derive(Clone, Copy, PartialEq, Eq)]
enum How {
    Dirty,
    Clean,
}

/// Sends the release write (recorded as started by `decide`) and takes its answer.
async fn write_release(
    claim: &AccountClaim,
    ctx: &Context,
    active: &ActiveConfig,
    key: &str,
    binding: &str,
    rv: &str,
    how: How,
) -> Result<Option<Action>, ClaimError> {
    let target = active.binding_target();
    let keys = active.rules.label_keys();
    let ns = &target.namespace;
    let result = send_release(claim, ctx, &target, keys, (binding, rv), how).await;
    ctx.ledger()
        .release_outcome(binding, outcome(&result), Instant::now());
    match result {
        Ok(_) => {
            if ctx.denials.allowed(binding) {
                ctx.caches.feed.bump();
            }
            let (reason, note) = released_note(how, ns, binding, keys);
            tracing::info!(binding, "{note}");
            ctx.writer
                .event(&claim.object_ref(&()), false, reason, "Release", note)
                .await;
            count(ctx, reason);
            Ok(None)
        }
        Err(K8sError::Forbidden { message, .. }) => {
            let retry_at = refused(claim, ctx, active, binding, "release", &message).await;
            let cause = ctx
                .denials
                .paused(binding, Instant::now())
                .map_or(message, |p| p.message);
            release_blocked(claim, ctx, cause, retry_at).await.map(Some)
        }
        Err(e) => Err(k8s(
            key,
            match how {
                How::Dirty => "marking the binding dirty",
                How::Clean => "removing the binding's tenant label",
            },
        )(e)),
    }
}

/// The one API call of a release: the dirty label with the release record, or the tenant and
/// claimed-by labels removed, conditioned on the version the release was decided on.
async fn send_release(
    claim: &AccountClaim,
    ctx: &Context,
    target: &BindingTarget,
    keys: &ResolvedLabelKeys,
    (binding, rv): (&str, &str),
    how: How,
) -> Result<Option<String>, K8sError> {
    let (ns, kind) = (&target.namespace, target.kind);
    match how {
        How::Dirty => {
            // The release is recorded with the dirty label: cooldown and spread read it.
            let at = crate::pools::lifecycle::release_time(jiff::Timestamp::now());
            let record = [
                (crate::pools::lifecycle::RELEASED_AT, at.as_str()),
                (
                    crate::pools::lifecycle::RELEASED_BY,
                    claim.spec.global_account.as_str(),
                ),
            ];
            ctx.writer
                .mark_dirty_cas(kind, ns, binding, rv, &keys.dirty, &record)
                .await
        }
        How::Clean => {
            // The record goes with the tenant: a binding claimed again gets a new one.
            let labels = [keys.tenant_name.as_str(), CLAIMED_BY];
            ctx.writer
                .remove_binding_labels_cas(kind, ns, binding, rv, &labels)
                .await
        }
    }
}

/// The event reason and note of a done release: what a person reading the claim's events
/// needs to know about where the account went.
fn released_note(
    how: How,
    ns: &str,
    binding: &str,
    keys: &ResolvedLabelKeys,
) -> (&'static str, String) {
    match how {
        How::Dirty => (
            "Released",
            format!(
                "released binding {ns}/{binding}: marked {}=true for the cleanup job",
                keys.dirty
            ),
        ),
        How::Clean => (
            "ReleasedClean",
            format!(
                "released binding {ns}/{binding} clean: never used by a cluster (the \
                 object the claim was made for never existed, or the claim went before any \
                 status of it named the binding; no other claim was bound to it), so {} and \
                 {CLAIMED_BY} were removed and it went back to the pool without the cleanup \
                 job",
                keys.tenant_name
            ),
        ),
    }
}

/// Whether the object a source claim serves exists now, read from the API server (the garden's
/// for Shoots), not a cache: a cache may not show an object re-created a moment ago.
async fn object_now(
    claim: &AccountClaim,
    ctx: &Context,
    key: &str,
    source: &SourceRef,
) -> Result<Presence, ClaimError> {
    let name = match &source.name {
        Some(n) => Some(n.clone()),
        // Too long for a label: the source annotation names it.
        None => ctx
            .writer
            .claim_annotation(
                &claim.namespace().unwrap_or_default(),
                &claim.name_any(),
                ANNOTATION_SOURCE,
            )
            .await
            .map_err(k8s(key, "reading the claim's source annotation"))?
            .as_deref()
            .and_then(object_name),
    };
    let Some(name) = name else {
        return Err(ClaimError::SourceUnknown {
            claim: key.to_string(),
            object: source.describe(),
        });
    };
    let reader = if source.kind == SourceKind::Shoot {
        ctx.writer.garden()
    } else {
        ctx.writer.own()
    };
    let exists =
        SourceWrites::object_exists(reader, &source.kind.resource(), &source.namespace, &name)
            .await
            .map_err(k8s(key, "reading the claim's source object"))?;
    Ok(if exists {
        Presence::Exists
    } else {
        Presence::Gone
    })
}

/// The object's name in a source annotation (`Runtime kcp-system/name`).
fn object_name(annotation: &str) -> Option<String> {
    let (_, name) = annotation.rsplit_once('/')?;
    (!name.is_empty()).then(|| name.to_string())
}

/// Whether releasing the claim may write a binding: it records one, a claim write of it is
/// still in flight, its claim write won a binding its status does not show (a status write that
/// failed), an assignment of it was written, or the claim write its status records
/// (`status.claimWrite`) landed as the index shows (one that may still land keeps it too, through
/// `claim_write::settle`). Every binding `release::written_for` can hand the
/// release counts: a claim that got one just before a pause or a switch to Observe and was
/// deleting then would otherwise be released onto that binding while nothing may be written. A
/// claim that never got a binding is let go even while paused.
fn holds_binding(ctx: &Context, view: &ClaimView) -> bool {
    let l = ctx.ledger();
    let landed = view.claim_write.as_deref().is_some_and(|w| {
        claim_write_indexed(&l.inventory, w, &view.uid) == Some(ClaimWriteNow::Landed)
    });
    landed || holds_binding_in(view, &l.inflight, Instant::now())
}

fn holds_binding_in(view: &ClaimView, inflight: &InFlight, now: Instant) -> bool {
    view.bound_binding.is_some()
        || inflight.claim_made_by(&view.uid, now).is_some()
        || inflight.won_by(&view.uid, now).is_some()
        || inflight.assignment_of(&view.uid, now).is_some()
}

/// While the config is paused or observing a release writes nothing: `Released=False` reason
/// `Paused` or `Observing`, an event once, and a retry after `--pending-retry` (unpausing, or
/// `spec.mode: Enforce`, resumes it).
async fn paused(
    claim: &AccountClaim,
    ctx: &Context,
    observing: bool,
) -> Result<Action, ClaimError> {
    let name = ctx.resolver.name();
    let (reason, cause) = if observing {
        (
            reasons::OBSERVING,
            format!(
                "the release waits: HapConfig `{name}` observes (spec.mode: Observe), so the \
                 binding is not marked for the cleanup job until it is set to Enforce"
            ),
        )
    } else {
        (
            reasons::PAUSED,
            format!(
                "the release waits: HapConfig `{name}` is paused (spec.paused: true), so the \
                 binding is not marked for the cleanup job until it is unpaused"
            ),
        )
    };
    tracing::debug!("release waits: paused");
    announce_wait(claim, ctx, reason, cause, false).await?;
    Ok(Action::requeue(ctx.args.pending_retry))
}

/// Without a valid HapConfig nothing can be released: `Released=False` says why, an event is
/// sent once per cause (not on every retry), and the retries back off.
async fn config_wait(
    claim: &AccountClaim,
    ctx: &Context,
    key: &str,
    reason: &'static str,
) -> Result<Action, ClaimError> {
    let cause = format!(
        "the release waits for a valid HapConfig `{}`: without one the binding's labels are \
         unknown and it cannot be marked dirty for the cleanup job",
        ctx.resolver.name()
    );
    announce_wait(claim, ctx, reason, cause, true).await?;
    Ok(Action::requeue(ctx.backoff.next(key)))
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
    let recorded = claim.status.as_ref().and_then(|s| s.claim_write.as_ref());
    let sent_as_recorded = recorded
        .is_some_and(|w| w.binding == binding && Some(&w.resource_version) == expected.as_ref());
    let (Some(rv), Some(pool), true) = (expected.clone(), pool, sent_as_recorded) else {
        // Never sent as recorded (its record failed): nothing can land, and nothing is sent
        // now that no status records.
        ctx.ledger()
            .claim_outcome(binding, crate::ledger::Outcome::Refused, Instant::now());
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
    // The same write as the first attempt, claimed-by and the claim record included.
    let labels = [
        (tenant_key.as_str(), view.global_account.as_str()),
        (CLAIMED_BY, view.uid.as_str()),
    ];
    let at = crate::pools::lifecycle::release_time(jiff::Timestamp::now());
    let record = [(crate::pools::lifecycle::CLAIMED_AT, at.as_str())];
    let result = ctx
        .writer
        .set_binding_labels_cas(
            target.kind,
            &target.namespace,
            binding,
            &rv,
            &labels,
            &record,
        )
        .await;
    ctx.ledger()
        .claim_outcome(binding, outcome(&result), Instant::now());
    if let Err(e) = result {
        tracing::debug!(error = %e, "the repeated claim write was not accepted");
    }
}

/// A deleted claim whose binding the garden refuses to let us release: the finalizer stays
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A claim whose claim write won a binding and whose Bound status write was refused is
    /// deleted while the config holds binding writes: its release must wait, not mark the binding
    /// its won write holds dirty (it did: `holds_binding` looked only at the status and the claim
    /// write in flight).
    #[test]
    fn a_claim_whose_won_write_its_status_does_not_show_holds_its_binding() {
        use crate::pools::fixtures::claim;
        let now = Instant::now();
        let mut fl = InFlight::default();
        let c = claim("c1", "ga", None, None);
        assert!(!holds_binding_in(&c, &fl, now), "nothing written yet");
        let choice = Choice::Claim {
            binding: "b1".into(),
            expected_resource_version: Some("7".into()),
        };
        fl.record(&c, &crate::controller::fixtures::aws_pool(), &choice, now);
        fl.claim_written("b1", now);
        fl.assignment_failed(&c.uid);
        // The index shows the won write: the claim write is no longer in flight.
        fl.observe_binding("b1", None);
        assert!(
            fl.claim_made_by(&c.uid, now).is_none(),
            "settled by the index"
        );
        assert_eq!(fl.won_by(&c.uid, now), Some("b1"));
        assert!(holds_binding_in(&c, &fl, now));
    }

    #[test]
    fn the_object_name_is_read_from_the_source_annotation() {
        let long = "c".repeat(80);
        assert_eq!(
            object_name(&format!("Cluster platform/{long}")),
            Some(long.clone())
        );
        assert_eq!(object_name("Cluster platform/"), None);
        assert_eq!(object_name("garbage"), None);
    }
}
