//! Gives back the stray bindings of a Bound claim: bindings a paused leader's late claim write
//! labelled for it after the next leader had bound it elsewhere (`selection::stray_claimant`).
//! Nothing ever used them, so they go back clean: tenant and claimed-by removed with a
//! compare-and-swap, no cleanup job. Run by the claim's reconcile while it is recorded (Bound or
//! lost) and by its release, so that a stray never outlives its claimant as an ordinary binding
//! of the tenant.

use std::time::Instant;

use kube::Resource;

use super::outcome::refused;
use super::{Context, claim_key};
use crate::api::AccountClaim;
use crate::k8s::K8sError;
use crate::k8s::active::ActiveConfig;
use crate::labels::CLAIMED_BY;
use crate::pools::ClaimView;
use crate::selection::strays_of;

/// Releases each stray of `view` clean; whether all went. A failed write is reported (a refusal
/// by the garden pauses the binding like any refused write) and tried again the next time the
/// claim comes back (a binding event, the sweep; the release waits for it); meanwhile selection
/// keeps the stray from the tenant's claims.
pub(super) async fn give_back(
    claim: &AccountClaim,
    ctx: &Context,
    active: &ActiveConfig,
    view: &ClaimView,
) -> bool {
    let (strays, tenant_key) = {
        let l = ctx.ledger();
        let strays = strays_of(&l.inventory, &l.inflight, view, Instant::now());
        (strays, l.inventory.keys().tenant_name.clone())
    };
    let target = active.binding_target();
    let (kind, ns) = (target.kind, target.namespace.as_str());
    let mut all = true;
    for (binding, rv) in strays {
        let Some(rv) = rv else {
            all = false;
            continue;
        };
        let labels = [tenant_key.as_str(), CLAIMED_BY];
        let written = ctx
            .writer
            .remove_binding_labels_cas(kind, ns, &binding, &rv, &labels)
            .await;
        match written {
            Ok(_) => told(claim, ctx, view, (ns, &binding), &tenant_key).await,
            Err(K8sError::Forbidden { message, .. }) => {
                all = false;
                refused(claim, ctx, active, &binding, "release", &message).await;
            }
            Err(error) => {
                all = false;
                tracing::warn!(claim = claim_key(claim), binding, %error, "cannot give back a stray binding; retried when the claim comes back");
            }
        }
    }
    all
}

async fn told(
    claim: &AccountClaim,
    ctx: &Context,
    view: &ClaimView,
    (ns, binding): (&str, &str),
    tenant_key: &str,
) {
    let note = format!(
        "released binding {ns}/{binding} clean: a previous leader's claim write labelled it for \
         this claim after the claim was decided onto {}; no cluster ever used it, so {tenant_key} \
         and {CLAIMED_BY} were removed",
        view.bound_binding.as_deref().unwrap_or("another binding")
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
