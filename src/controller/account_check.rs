//! The edge of the check after a claim write (`selection::account_check`): the other bindings
//! of the account read fresh from the API server, and a claim write that one of them contests
//! given back. The claim's status is written first, and always changes: its compare-and-swap on
//! the claim moves the claim's version, so a status write of the same claim a previous leader
//! decided and sent cannot land Bound on the binding after it went back.

use std::time::{Duration, Instant};

use kube::Resource;
use kube::runtime::controller::Action;

use super::Context;
use super::claim_key;
use super::outcome::{ClaimError, k8s, outcome, pending};
use crate::api::AccountClaim;
use crate::k8s::K8sError;
use crate::k8s::active::ActiveConfig;
use crate::labels::CLAIMED_BY;
use crate::pools::ClaimView;
use crate::selection::{
    AfterClaim, Check, ClaimWrite, after_claim, claim_write_on, siblings_to_check,
};
use crate::status::{ClaimOutcome, PendingReason, claim_status_changed, desired_claim_status};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// How soon a claim whose write was given back decides again: its caches may need a moment to
/// show the other binding's tenant, which selection then keeps it from.
const DECIDE_AGAIN: Duration = Duration::from_secs(2);

/// How soon a claim that waits for another claim to give back its contested claim write looks
/// again (that claim's own decision gives it back; the sweep brings it back at the latest).
const WAIT_FOR_CLAIMANT: Duration = Duration::from_secs(10);

/// A claim write contested by another binding of the account: `sibling` carries `label`; the
/// binding's claimed-by names `claimant`, whose write goes back.
pub(super) struct Contest {
    pub sibling: String,
    pub label: String,
    pub claimant: String,
}

/// A fresh read of another binding of the account that failed: which one, and why.
pub(super) struct Unread {
    pub sibling: String,
    pub source: K8sError,
}

/// The verdict on `binding` for `view`'s claim: `Bind` at once when no sibling needs a read
/// (`selection::siblings_to_check`), else from the siblings' labels as the API server has them.
pub(super) async fn verdict(
    ctx: &Context,
    active: &ActiveConfig,
    view: &ClaimView,
    (binding, claimed_now): (&str, bool),
    check: Check,
) -> Result<AfterClaim, Unread> {
    let (siblings, keys) = {
        let l = ctx.ledger();
        let now = Instant::now();
        let siblings = siblings_to_check(
            &l.inventory,
            &l.inflight,
            binding,
            &view.uid,
            claimed_now,
            now,
        );
        (siblings, l.inventory.keys().clone())
    };
    if siblings.is_empty() {
        return Ok(AfterClaim::Bind);
    }
    let target = active.binding_target();
    let mut fresh = Vec::with_capacity(siblings.len());
    for s in &siblings {
        let now = ctx
            .writer
            .binding_labels_now(target.kind, &target.namespace, s)
            .await
            .map_err(|source| Unread {
                sibling: s.clone(),
                source,
            })?;
        fresh.push((s.as_str(), now.map(|(_, labels)| labels)));
    }
    let read = fresh.iter().map(|(s, l)| (*s, l.as_ref()));
    Ok(after_claim(&keys, &view.global_account, check, read))
}

/// A fresh read failed after a claim write: the write stands unchecked and the claim is not
/// recorded Bound. Its status says so, naming the read, so that a read that keeps failing
/// leaves a reason; the error brings the claim back after its backoff.
pub(super) async fn unread(
    claim: &AccountClaim,
    ctx: &Context,
    binding: &str,
    failed: Unread,
) -> ClaimError {
    let cause = format!(
        "binding {binding} is claimed but not yet recorded: reading {}, another binding of the \
         same credential, failed ({}); one account never serves two tenants, so the claim \
         decides again once the read succeeds",
        failed.sibling, failed.source
    );
    // No Bound status goes out on this visit: a release meanwhile knows no status named the
    // binding (`release::decide_release`).
    if let Some(uid) = &claim.metadata.uid {
        let mut l = ctx.ledger();
        let now = Instant::now();
        if l.inflight
            .assignment_of(uid, now)
            .is_some_and(|a| a.binding == binding)
        {
            l.inflight.drop_assignment(uid);
        }
    }
    if let Err(e) = pending(claim, ctx, PendingReason::Progressing, cause, None).await {
        return e;
    }
    k8s(&claim_key(claim), "reading the account's other bindings")(failed.source)
}

/// Gives `binding` back clean because another binding of the account keeps it (`contest`):
/// the claim's status says so first (Pending, `Progressing`), then tenant and claimed-by are
/// removed with a compare-and-swap on the binding as the API server has it, only while its
/// claimed-by still names the contested write's claimant. The claim decides again shortly.
pub(super) async fn give_back(
    claim: &AccountClaim,
    ctx: &Context,
    active: &ActiveConfig,
    view: &ClaimView,
    binding: &str,
    contest: Contest,
) -> Result<Action, ClaimError> {
    let key = claim_key(claim);
    let target = active.binding_target();
    let (kind, ns) = (target.kind, target.namespace.as_str());
    let cause = moved(claim, give_back_cause(view, (ns, binding), &contest));
    pending(claim, ctx, PendingReason::Progressing, cause.clone(), None).await?;
    let err = |source| ClaimError::K8s {
        claim: key.clone(),
        step: "giving back a contested binding",
        source,
    };
    let now = ctx
        .writer
        .binding_labels_now(kind, ns, binding)
        .await
        .map_err(err)?;
    if let Some((rv, labels)) = now
        && labels.get(CLAIMED_BY) == Some(&contest.claimant)
    {
        // The key the claim write set (`claim_binding`), not the index's: they differ for a
        // moment after a change of the label keys.
        let tenant_key = active.rules.label_keys().tenant_name.clone();
        let keys = [tenant_key.as_str(), CLAIMED_BY];
        // Recorded before the write, as a release is: the watch may show the new version before
        // the answer comes, and the outcome then ends the record against the index.
        let base = Some(rv.clone());
        ctx.ledger()
            .inflight
            .release_started(binding, base, Instant::now());
        let result = ctx
            .writer
            .remove_binding_labels_cas(kind, ns, binding, &rv, &keys)
            .await;
        {
            let mut l = ctx.ledger();
            if result.is_ok() {
                l.inflight.gave_back(&contest.claimant, binding);
            }
            l.release_outcome(binding, outcome(&result), Instant::now());
        }
        result.map_err(err)?;
        let sibling = &contest.sibling;
        tracing::warn!(claim = key, binding, sibling, "{cause}");
        ctx.writer
            .event(
                &claim.object_ref(&()),
                true,
                "AccountContested",
                "Claim",
                cause,
            )
            .await;
        ctx.caches.feed.bump();
    }
    Ok(Action::requeue(DECIDE_AGAIN))
}

/// Why the claim write on `binding` goes back, for the claim's status and the event.
fn give_back_cause(view: &ClaimView, (ns, binding): (&str, &str), c: &Contest) -> String {
    let (ga, sibling, label) = (&view.global_account, &c.sibling, &c.label);
    let whose = if c.claimant == view.uid {
        String::new()
    } else {
        format!(
            " by claim {}, which no longer decides (gone, being deleted, denied or bound \
             elsewhere),",
            c.claimant
        )
    };
    format!(
        "binding {ns}/{binding} was claimed for {ga}{whose} while {sibling}, another binding of \
         the same credential, carries {label}: one account never serves two tenants, so the \
         claim write was given back and the claim decides again"
    )
}

/// `cause`, changed if the claim's status says it already: a status write that changes nothing
/// is not sent, and an apply that changes nothing does not move the claim's version; the
/// give-back's must move it.
fn moved(claim: &AccountClaim, cause: String) -> String {
    let pending = |cause| ClaimOutcome::Pending {
        reason: PendingReason::Progressing,
        cause,
        matched: None,
    };
    let now = Time(jiff::Timestamp::now());
    let shown = claim.status.as_ref();
    let spec = &claim.spec;
    let desired = desired_claim_status(
        shown,
        spec,
        claim.metadata.generation,
        &pending(cause.clone()),
        &now,
    );
    if claim_status_changed(shown, &desired) {
        cause
    } else {
        format!("{cause} (again)")
    }
}

/// Before a use of `binding` (reuse, fill) is recorded: `None` when its claim write was checked
/// already, or no other binding of the account contests it. Otherwise the claim gives back its
/// own unchecked claim write, or one whose claimant no longer decides (`ClaimWrite::Orphaned`:
/// nobody else would); a write of a claim still deciding is that claim's to give back (its
/// status write fences a late Bound status of it), so this claim waits, saying why.
pub(super) async fn contested_use(
    claim: &AccountClaim,
    ctx: &Context,
    active: &ActiveConfig,
    view: &ClaimView,
    binding: &str,
) -> Result<Option<Action>, ClaimError> {
    let write = {
        let l = ctx.ledger();
        claim_write_on(
            &l.inventory,
            &l.inflight,
            binding,
            &view.uid,
            Instant::now(),
        )
    };
    // A live claimant's write: the tenant is in the account already, and that claim's own
    // check keeps new tenants off. An unchecked write nobody else will check: every label.
    let check = match &write {
        ClaimWrite::Checked => return Ok(None),
        ClaimWrite::Claimant(_) => Check::Use,
        ClaimWrite::Own | ClaimWrite::Orphaned(_) => Check::ClaimWrite,
    };
    let read = match verdict(ctx, active, view, (binding, false), check).await {
        Ok(read) => read,
        Err(failed) => return Err(unread(claim, ctx, binding, failed).await),
    };
    let AfterClaim::GiveBack { sibling, label } = read else {
        return Ok(None);
    };
    let claimant = match write {
        ClaimWrite::Claimant(uid) => {
            return wait_for(claim, ctx, view, binding, (&uid, &sibling, &label)).await;
        }
        ClaimWrite::Own | ClaimWrite::Checked => view.uid.clone(),
        ClaimWrite::Orphaned(uid) => uid,
    };
    let contest = Contest {
        sibling,
        label,
        claimant,
    };
    give_back(claim, ctx, active, view, binding, contest)
        .await
        .map(Some)
}

/// The claim waits for claim `uid`, which still decides, to give back its claim write.
async fn wait_for(
    claim: &AccountClaim,
    ctx: &Context,
    view: &ClaimView,
    binding: &str,
    (uid, sibling, label): (&str, &str, &str),
) -> Result<Option<Action>, ClaimError> {
    let cause = format!(
        "binding {binding} was claimed by claim {uid} of {} and not used since, while \
         {sibling}, another binding of the same credential, carries {label}: the claim waits \
         until that claim gives it back",
        view.global_account
    );
    pending(claim, ctx, PendingReason::Progressing, cause, None).await?;
    Ok(Some(Action::requeue(WAIT_FOR_CLAIMANT)))
}
