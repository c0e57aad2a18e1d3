//! Gives back the stray bindings of a Bound claim: bindings a paused leader's late claim write
//! labelled for it after the next leader had bound it elsewhere (`selection::stray_claimant`).
//! Nothing ever used them, so they go back clean: tenant and claimed-by removed with a
//! compare-and-swap, no cleanup job.

use kube::Resource;

use super::active::ActiveConfig;
use super::outcome::{ClaimError, k8s};
use super::{Context, claim_key};
use crate::api::AccountClaim;
use crate::labels::CLAIMED_BY;
use crate::pools::ClaimView;
use crate::selection::strays_of;

/// Releases each stray of `view` clean. A conflict means the binding moved since the index
/// showed it: the claim is reconciled again and decides on the newer view.
pub(super) async fn give_back(
    claim: &AccountClaim,
    ctx: &Context,
    active: &ActiveConfig,
    view: &ClaimView,
) -> Result<(), ClaimError> {
    let strays = strays_of(&ctx.ledger().inventory, view);
    let target = active.binding_target();
    let (kind, ns) = (target.kind, target.namespace.as_str());
    let tenant_key = ctx.ledger().inventory.keys().tenant_name.clone();
    for (binding, rv) in strays {
        let Some(rv) = rv else { continue };
        let labels = [tenant_key.as_str(), CLAIMED_BY];
        ctx.writer
            .remove_binding_labels_cas(kind, ns, &binding, &rv, &labels)
            .await
            .map_err(k8s(&claim_key(claim), "giving back a stray binding"))?;
        let bound = view.bound_binding.as_deref().unwrap_or_default();
        let note = format!(
            "released binding {ns}/{binding} clean: a previous leader's claim write labelled it \
             for this claim after the claim was bound to {bound}; no cluster ever used it, so \
             {tenant_key} and {CLAIMED_BY} were removed"
        );
        tracing::info!(claim = claim_key(claim), binding, "{note}");
        ctx.writer
            .event(
                &claim.object_ref(&()),
                false,
                "StrayReleased",
                "Release",
                note,
            )
            .await;
        ctx.caches.feed.bump();
    }
    Ok(())
}
