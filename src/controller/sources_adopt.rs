//! Reconcile of an adopting AccountClaim (`spec.adoptBinding`, created for a Kyma Runtime that
//! named its binding): record the binding as Bound with decision `Adopted`, or report why it
//! cannot be the tenant's. The decision is `sources::adopt`; the only write on the binding is the
//! removal of another claim's claimed-by record (`selection::claimant`).

use std::time::{Duration, Instant};

use kube::runtime::controller::Action;

use super::active::ActiveConfig;
use super::outcome::{ClaimError, count, pending, status_outcome, unclaim, write_outcome};
use super::{Context, resync};
use crate::api::{AccountClaim, Decision, MatchedRule};
use crate::pools::ClaimView;
use crate::selection::{BeforeUse, Choice, UseReason, before_use};
use crate::sources::adopt::{Adoption, adopt};
use crate::status::{BoundTo, ClaimOutcome, PendingReason};

pub(super) async fn reconcile(
    claim: &AccountClaim,
    ctx: &Context,
    active: &ActiveConfig,
    view: &ClaimView,
    binding: &str,
) -> Result<Action, ClaimError> {
    let (adoption, before) = {
        let mut guard = ctx.ledger();
        let l = &mut *guard;
        let adoption = adopt(&l.inventory, binding, &claim.spec.global_account);
        let now = Instant::now();
        let before = match &adoption {
            Adoption::Bound { .. } => {
                let reuse = Choice::Use {
                    binding: binding.to_string(),
                    decision: UseReason::Reused,
                };
                before_use(&l.inventory, &l.inflight, &view.uid, &reuse, now)
            }
            Adoption::NotTenant { .. } => BeforeUse::Bind,
        };
        if let BeforeUse::Wait { .. } = before {
            return Ok(Action::requeue(Duration::from_millis(200)));
        }
        if let Adoption::Bound { pool } = &adoption {
            // Counted as the tenant's cluster on the binding at once, like any assignment and
            // under the same lock as the decision, so a decision taken before the index shows
            // this claim Bound still sees it.
            l.inflight.record(
                view,
                pool,
                &Choice::Use {
                    binding: binding.to_string(),
                    decision: UseReason::Reused,
                },
                now,
            );
        }
        (adoption, before)
    };
    match adoption {
        Adoption::Bound { pool } => {
            // A binding another claim claimed loses that claim's record before this one binds.
            unclaim(claim, ctx, active, view, &before).await?;
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
            let pool_type = to.pool.hyperscaler_type.clone();
            let result = write_outcome(claim, ctx, &ClaimOutcome::Bound(to)).await;
            ctx.ledger()
                .assignment_outcome(&view.uid, status_outcome(&result), Instant::now());
            match result {
                Ok(()) => {
                    if claim.status.as_ref().and_then(|s| s.decision) != Some(Decision::Adopted) {
                        count(ctx, "Adopted");
                        let created = claim.metadata.creation_timestamp.as_ref().map(|t| t.0);
                        ctx.metrics.observe_bind(&pool_type, created);
                    }
                    Ok(resync(ctx))
                }
                Err(e) => Err(e),
            }
        }
        Adoption::NotTenant { message } => {
            pending(claim, ctx, PendingReason::BindingNotTenant, message, None).await
        }
    }
}
