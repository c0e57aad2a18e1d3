//! Ends the trial of a binding on probation (crate::pools::quarantine) once a Shoot on it
//! reports `lastOperation` Create Succeeded: `accountpool.io/quarantine=Passed`, one
//! compare-and-swap on the version the index holds, written by the reconcile of the claim bound
//! to it (`selection::needs_visit` brings that claim back when the Shoot's status moves). The
//! record is on the binding, so every later leader reads the verdict from the object.

use kube::Resource;

use super::active::ActiveConfig;
use super::outcome::refused;
use super::{Context, claim_key};
use crate::api::AccountClaim;
use crate::k8s::K8sError;
use crate::pools::ClaimView;
use crate::pools::quarantine::{PASSED, QUARANTINE, proven_by};

/// Records `Passed` on the claim's binding when a Shoot on it proved it; best effort: a failed
/// write is tried again the next time the claim comes back.
pub(super) async fn graduate(
    claim: &AccountClaim,
    ctx: &Context,
    active: &ActiveConfig,
    view: &ClaimView,
) {
    let Some(binding) = view.bound_binding.as_deref() else {
        return;
    };
    let proof = {
        let l = ctx.ledger();
        proven_by(&l.inventory, binding).map(|shoot| {
            let rv = l
                .inventory
                .binding(binding)
                .and_then(|e| e.view.resource_version.clone());
            (shoot.to_string(), rv)
        })
    };
    let Some((shoot, Some(rv))) = proof else {
        return;
    };
    let target = active.binding_target();
    let (kind, ns) = (target.kind, target.namespace.as_str());
    let written = ctx
        .writer
        .set_binding_annotation_cas(kind, ns, binding, &rv, QUARANTINE, PASSED)
        .await;
    match written {
        Ok(_) => {
            let note = format!(
                "binding {ns}/{binding} passed its quarantine: Shoot {shoot} reports lastOperation \
                 Create Succeeded, so {QUARANTINE}={PASSED} was recorded and any request may get \
                 it from now on"
            );
            tracing::info!(claim = claim_key(claim), binding, "{note}");
            ctx.writer
                .event(
                    &claim.object_ref(&()),
                    false,
                    "QuarantinePassed",
                    "Quarantine",
                    note,
                )
                .await;
            ctx.caches.feed.bump();
        }
        Err(K8sError::Forbidden { message, .. }) => {
            refused(
                claim,
                ctx,
                active,
                binding,
                "record the quarantine verdict",
                &message,
            )
            .await;
        }
        Err(error) => {
            tracing::warn!(claim = claim_key(claim), binding, %error, "cannot record that the binding passed its quarantine; retried when the claim comes back");
        }
    }
}
