//! The edge of the check after a claim write (`selection::account_check`): the other bindings
//! of the account read fresh from the API server, and a claim write that one of them contests
//! given back. The claim's status is written first: its compare-and-swap on the claim moves the
//! claim's version, so a status write of the same claim a previous leader decided and sent
//! cannot land Bound on the binding after it went back.

use std::time::Duration;

use kube::Resource;
use kube::runtime::controller::Action;

use super::Context;
use super::active::ActiveConfig;
use super::claim_key;
use super::outcome::{ClaimError, k8s, pending};
use crate::api::AccountClaim;
use crate::k8s::K8sError;
use crate::labels::CLAIMED_BY;
use crate::pools::ClaimView;
use crate::selection::{AfterClaim, after_claim, own_write, siblings_to_check};
use crate::status::PendingReason;

/// How soon a claim whose write was given back decides again: its caches may need a moment to
/// show the other binding's tenant, which selection then keeps it from.
const DECIDE_AGAIN: Duration = Duration::from_secs(2);

/// How soon a claim that waits for another claim to give back its contested claim write looks
/// again (that claim's own decision gives it back; the sweep brings it back at the latest).
const WAIT_FOR_CLAIMANT: Duration = Duration::from_secs(10);

/// The verdict on `binding` for `view`'s claim: `Bind` at once when no sibling needs a read
/// (`selection::siblings_to_check`), else from the siblings' labels as the API server has them.
pub(super) async fn verdict(
    ctx: &Context,
    active: &ActiveConfig,
    view: &ClaimView,
    binding: &str,
    claimed_now: bool,
) -> Result<AfterClaim, K8sError> {
    let (siblings, keys) = {
        let l = ctx.ledger();
        let now = std::time::Instant::now();
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
            .await?;
        fresh.push((s.as_str(), now.map(|(_, labels)| labels)));
    }
    let read = fresh.iter().map(|(s, l)| (*s, l.as_ref()));
    Ok(after_claim(&keys, &view.global_account, read))
}

/// Gives `binding` back clean because `sibling` keeps its account (`label`): the claim's status
/// says so first (Pending, `Progressing`), then tenant and claimed-by are removed with a
/// compare-and-swap on the binding as the API server has it, only while its claimed-by still
/// names this claim. The claim decides again shortly.
pub(super) async fn give_back(
    claim: &AccountClaim,
    ctx: &Context,
    active: &ActiveConfig,
    view: &ClaimView,
    binding: &str,
    (sibling, label): (String, String),
) -> Result<Action, ClaimError> {
    let key = claim_key(claim);
    let target = active.binding_target();
    let (kind, ns) = (target.kind, target.namespace.as_str());
    let cause = format!(
        "binding {ns}/{binding} was claimed for {} while {sibling}, another binding of the same \
         credential, carries {label}: one account never serves two tenants, so the claim was \
         given back and the claim decides again",
        view.global_account
    );
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
        && labels.get(CLAIMED_BY) == Some(&view.uid)
    {
        let tenant_key = ctx.ledger().inventory.keys().tenant_name.clone();
        let keys = [tenant_key.as_str(), CLAIMED_BY];
        ctx.writer
            .remove_binding_labels_cas(kind, ns, binding, &rv, &keys)
            .await
            .map_err(err)?;
        let at = std::time::Instant::now();
        ctx.ledger().inflight.gave_back(&view.uid, binding, rv, at);
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

/// Before a use of `binding` (reuse, fill) is recorded: `None` when no other binding of the
/// account contests it. Otherwise the claim's own unchecked claim write goes back
/// (`give_back`); a claim write another claim made, not used since, is that claim's to give
/// back (its status write fences a late Bound status of it), so this claim waits, saying why.
pub(super) async fn contested_use(
    claim: &AccountClaim,
    ctx: &Context,
    active: &ActiveConfig,
    view: &ClaimView,
    binding: &str,
) -> Result<Option<Action>, ClaimError> {
    let read = verdict(ctx, active, view, binding, false).await;
    let read = read.map_err(k8s(
        &claim_key(claim),
        "reading the account's other bindings",
    ))?;
    let AfterClaim::GiveBack { sibling, label } = read else {
        return Ok(None);
    };
    let own = {
        let l = ctx.ledger();
        own_write(
            &l.inventory,
            &l.inflight,
            binding,
            &view.uid,
            std::time::Instant::now(),
        )
    };
    if own {
        let contest = (sibling, label);
        return give_back(claim, ctx, active, view, binding, contest)
            .await
            .map(Some);
    }
    let cause = format!(
        "binding {binding} was claimed by another claim of {} and not used since, while \
         {sibling}, another binding of the same credential, carries {label}: the claim waits \
         until that claim gives it back",
        view.global_account
    );
    pending(claim, ctx, PendingReason::Progressing, cause, None).await?;
    Ok(Some(Action::requeue(WAIT_FOR_CLAIMANT)))
}
