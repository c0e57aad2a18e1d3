//! A claim write is a compare-and-swap on one binding, so it cannot see a concurrent claim write
//! on another binding of the same credential: a new leader whose caches have not seen the other
//! write yet, or a paused leader's write that lands late. Before a claim is first recorded Bound
//! onto a binding its own claim write labelled, the other bindings of the account are read
//! fresh from the API server (never from a cache), and the claim write is given back clean if
//! one of them keeps the account from the tenant.
//!
//! Why that is enough: take two claim writes on bindings of one account, committed at `w1 <
//! w2`. Each claim is recorded Bound only after a fresh read of the other bindings made after
//! its own write committed (`r1 > w1`, `r2 > w2`). Then `r2 > w2 > w1`, so the second read sees
//! the first binding's tenant, unless the first was given back already: the second is given
//! back. At most one of the two is ever recorded Bound, whatever the caches and whoever runs
//! the check (the writer, or the next leader deciding the claim of a late write). Both may be
//! given back (both reads after both writes): their claims decide again, which costs a retry,
//! never an account. A rule that picked a winner (the earliest, the lowest name) would need
//! both sides to see the same facts, which a late write does not give.

use crate::labels::{LabelLookup, ResolvedLabelKeys};
use std::time::Instant;

use super::InFlight;
use crate::pools::{Inventory, holding_label};

/// What a claim's fresh read of the other bindings of its account says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AfterClaim {
    /// No other binding keeps the account: the claim may be recorded Bound.
    Bind,
    /// `sibling` keeps the account (`label`): give the claimed binding back clean and decide
    /// again.
    GiveBack { sibling: String, label: String },
}

/// Decides from the fresh labels of the other bindings of the account (`None`: the binding is
/// gone) whether `tenant`'s claim write may stand. A sibling the same tenant holds keeps the
/// account for it, not from it. Pure.
pub fn after_claim<'a, L: LabelLookup + 'a>(
    keys: &ResolvedLabelKeys,
    tenant: &str,
    siblings: impl IntoIterator<Item = (&'a str, Option<&'a L>)>,
) -> AfterClaim {
    for (name, labels) in siblings {
        let Some(labels) = labels else { continue };
        if labels.label(&keys.tenant_name).map(String::as_str) == Some(tenant)
            && labels.label(&keys.dirty).is_none()
        {
            continue;
        }
        if let Some(label) = holding_label(keys, labels) {
            return AfterClaim::GiveBack {
                sibling: name.to_string(),
                label,
            };
        }
    }
    AfterClaim::Bind
}

/// The other bindings of `binding`'s account to read fresh before claim `claim_uid` is recorded
/// Bound onto it: none unless the binding's claim write is this claim's — made in this visit
/// (`claimed_now`), recorded in flight, or shown by the index's claimed-by (a late claim write,
/// perhaps a previous leader's, that no check may have followed). Uses of a binding another
/// claim's write made need none: that claim was checked when it was bound, and the tenant is
/// the same. The siblings are the index's: which bindings reference a credential changes with
/// a binding's spec, not with a claim.
pub fn siblings_to_check(
    inv: &Inventory,
    inflight: &InFlight,
    binding: &str,
    claim_uid: &str,
    claimed_now: bool,
    now: Instant,
) -> Vec<String> {
    let labelled = inv.binding(binding).is_some_and(|e| {
        e.view
            .labels
            .get(crate::labels::CLAIMED_BY)
            .map(String::as_str)
            == Some(claim_uid)
    });
    let in_flight = inflight.won_by(claim_uid, now) == Some(binding)
        || inflight
            .claim_of(binding, now)
            .is_some_and(|p| p.claim_uid == claim_uid);
    if !(claimed_now || labelled || in_flight) {
        return Vec::new();
    }
    inv.siblings(binding).map(str::to_string).collect()
}
