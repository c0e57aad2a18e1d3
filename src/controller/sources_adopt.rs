//! Reconcile of an adopting AccountClaim (`spec.adoptBinding`, created for a Kyma Runtime that
//! named its binding): record the binding as Bound with decision `Adopted`, or report why it
//! cannot be the tenant's. The decision is `sources::adopt`; nothing is written on the binding.

use std::time::Instant;

use kube::runtime::controller::Action;

use super::active::ActiveConfig;
use super::claim::{ClaimError, count, lock, pending, write_outcome};
use super::{Context, resync};
use crate::api::{AccountClaim, Decision, MatchedRule};
use crate::pools::{ClaimView, Inventory};
use crate::selection::{Choice, UseReason};
use crate::sources::adopt::{Adoption, adopt};
use crate::status::{BoundTo, ClaimOutcome, PendingReason};

pub(super) async fn reconcile(
    claim: &AccountClaim,
    ctx: &Context,
    active: &ActiveConfig,
    inv: &Inventory,
    view: &ClaimView,
    binding: &str,
) -> Result<Action, ClaimError> {
    match adopt(inv, binding, &claim.spec.global_account) {
        Adoption::Bound { pool } => {
            // Counted as the tenant's cluster on the binding at once, like any assignment, so a
            // decision taken before the cache shows this claim Bound still sees it.
            let now = Instant::now();
            lock(ctx).record(
                view,
                &pool,
                &Choice::Use {
                    binding: binding.to_string(),
                    decision: UseReason::Reused,
                },
                now,
            );
            let to = BoundTo {
                binding: binding.to_string(),
                namespace: active.spec.binding_namespace.clone(),
                pool,
                matched_rule: MatchedRule {
                    index: 0,
                    entry: "(adopted: the request named its binding)".into(),
                },
                decision: Decision::Adopted,
                preference: None,
            };
            match write_outcome(claim, ctx, &ClaimOutcome::Bound(to)).await {
                Ok(()) => {
                    lock(ctx).assignment_written(&view.uid, Instant::now());
                    if claim.status.as_ref().and_then(|s| s.decision) != Some(Decision::Adopted) {
                        count(ctx, "Adopted");
                    }
                    Ok(resync(ctx))
                }
                Err(e) => {
                    lock(ctx).assignment_failed(&view.uid);
                    Err(e)
                }
            }
        }
        Adoption::NotTenant { message } => {
            pending(claim, ctx, PendingReason::BindingNotTenant, message, None).await
        }
    }
}
