//! Ends the trial of a binding on probation (crate::pools::quarantine) once a Shoot on its
//! account was created (`quarantine::shoot_created`): `accountpool.io/quarantine=Passed`, one
//! compare-and-swap on the version the index holds, written by the reconcile of the claim bound
//! to it (`selection::needs_visit` brings that claim back when the Shoot's status moves) and by
//! its release, before the binding goes back to the pool. The record is on the binding, so every
//! later leader reads the verdict from the object.

use std::time::Instant;

use kube::Resource;

use super::Context;
use super::outcome::refused;
use crate::api::AccountClaim;
use crate::k8s::K8sError;
use crate::k8s::active::ActiveConfig;
use crate::pools::ClaimView;
use crate::pools::quarantine::{PASSED, QUARANTINE, proven_by};

/// Records `Passed` on the claim's binding when a Shoot proved it; best effort: a failed write
/// is tried again the next time the claim comes back. Whether it wrote: the index then holds an
/// older version of the binding until the watch brings the new one.
pub(super) async fn graduate(
    claim: &AccountClaim,
    ctx: &Context,
    active: &ActiveConfig,
    view: &ClaimView,
) -> bool {
    let Some(binding) = view.bound_binding.as_deref() else {
        return false;
    };
    // After a refusal the garden is not asked again until the pause ends.
    if ctx.denials.paused(binding, Instant::now()).is_some() {
        return false;
    }
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
        return false;
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
                "binding {ns}/{binding} passed its quarantine: Shoot {shoot} on its account was \
                 created, so {QUARANTINE}={PASSED} was recorded and any request may get it from \
                 now on"
            );
            tracing::info!(binding, "{note}");
            ctx.writer
                .event(
                    &claim.object_ref(&()),
                    false,
                    "QuarantinePassed",
                    "Quarantine",
                    note,
                )
                .await;
            // The watch brings the new version; a wake-up is only owed to claims a refusal of
            // this binding held back.
            if ctx.denials.allowed(binding) {
                ctx.caches.feed.bump();
            }
            true
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
            false
        }
        // Another claim's visit of the same binding wrote first, or the binding moved on.
        Err(error @ K8sError::Conflict { .. }) => {
            tracing::debug!(binding, %error, "the quarantine verdict was not recorded: the binding changed; retried when the claim comes back");
            false
        }
        Err(error) => {
            tracing::warn!(binding, %error, "cannot record that the binding passed its quarantine; retried when the claim comes back");
            false
        }
    }
}
