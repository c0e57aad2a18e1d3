//! An adopting AccountClaim (`spec.adoptBinding`, created for a Kyma Runtime that named its
//! binding): what the index says of the binding, read under the ledger lock for the decision
//! (`crate::decision`), and the writes of an adoption — the record of the binding as Bound with
//! decision `Adopted`. What an adoption means is `sources::adopt`; the only write on the binding
//! is the removal of another claim's claimed-by record (`selection::claimant`).

use std::time::Instant;

use kube::runtime::controller::Action;

use super::outcome::{ClaimError, count, record_use, status_outcome, write_outcome};
use super::{Context, resync};
use crate::api::{AccountClaim, Decision};
use crate::decision::Adopted;
use crate::k8s::active::ActiveConfig;
use crate::pools::ClaimView;
use crate::selection::{BeforeUse, Choice, UseReason, before_use};
use crate::sources::adopt::{Adoption, adopt};
use crate::status::{BoundTo, ClaimOutcome};

/// The adoption and the write it needs first. An adoption that binds is counted as the
/// tenant's cluster on the binding at once, like any assignment and under the same lock as the
/// decision, so that a decision taken before the index shows this claim Bound still sees it.
pub(super) fn adoption(
    ctx: &Context,
    view: &ClaimView,
    binding: &str,
    global_account: &str,
) -> Adopted {
    let mut guard = ctx.ledger();
    let l = &mut *guard;
    let adoption = adopt(
        &l.inventory,
        binding,
        global_account,
        Some(&view.cluster_name()),
    );
    let now = Instant::now();
    let reuse = Choice::Use {
        binding: binding.to_string(),
        decision: UseReason::Reused,
    };
    let before = match &adoption {
        Adoption::Bound { .. } => before_use(&l.inventory, &l.inflight, &view.uid, &reuse, now),
        Adoption::NotTenant { .. } => BeforeUse::Bind,
    };
    if let Adoption::Bound { pool } = &adoption
        && !matches!(before, BeforeUse::Wait { .. })
    {
        l.inflight.record(view, pool, &reuse, now);
    }
    Adopted { adoption, before }
}

/// Records the adopted binding Bound; a binding another claim claimed loses that claim's record
/// first.
pub(super) async fn record(
    claim: &AccountClaim,
    ctx: &Context,
    active: &ActiveConfig,
    view: &ClaimView,
    to: BoundTo,
    before: &BeforeUse,
) -> Result<Action, ClaimError> {
    record_use(claim, ctx, active, view, before).await?;
    let pool_type = to.pool.hyperscaler_type.clone();
    let result = write_outcome(claim, ctx, &ClaimOutcome::Bound(to)).await;
    ctx.ledger()
        .assignment_outcome(&view.uid, status_outcome(&result), Instant::now());
    result?;
    if claim.status.as_ref().and_then(|s| s.decision) != Some(Decision::Adopted) {
        count(ctx, "Adopted");
        let created = claim.metadata.creation_timestamp.as_ref().map(|t| t.0);
        ctx.metrics.observe_bind(&pool_type, created);
    }
    Ok(resync(ctx))
}
