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

use std::time::Instant;

use super::InFlight;
use crate::labels::{LabelLookup, ResolvedLabelKeys};
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

/// Which labels on another binding of the account keep it from the claim's tenant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check {
    /// After a claim write this claim made: every label that keeps a new tenant off the account
    /// (`holding_label`), as selection reads it.
    ClaimWrite,
    /// Before a use of a binding whose claim write is not this claim's: the tenant is in the
    /// account already, so only another tenant or a dirty sibling contests it. A cordon, the
    /// cleanup job's mark, shared or internal on a tenantless sibling keep new tenants off; they
    /// do not make the tenant already there give back, nor wait.
    Use,
}

/// Decides from the fresh labels of the other bindings of the account (`None`: the binding is
/// gone) whether `tenant`'s claim write may stand. A sibling the same tenant holds keeps the
/// account for it, not from it. Pure.
pub fn after_claim<'a, L: LabelLookup + 'a>(
    keys: &ResolvedLabelKeys,
    tenant: &str,
    check: Check,
    siblings: impl IntoIterator<Item = (&'a str, Option<&'a L>)>,
) -> AfterClaim {
    for (name, labels) in siblings {
        let Some(labels) = labels else { continue };
        let theirs = labels.label(&keys.tenant_name).map(String::as_str);
        let dirty = labels.label(&keys.dirty);
        if theirs == Some(tenant) && dirty.is_none() {
            continue;
        }
        let label = match check {
            Check::ClaimWrite => holding_label(keys, labels),
            Check::Use => theirs
                .map(|t| format!("{}={t}", keys.tenant_name))
                .or_else(|| dirty.map(|d| format!("{}={d}", keys.dirty))),
        };
        if let Some(label) = label {
            return AfterClaim::GiveBack {
                sibling: name.to_string(),
                label,
            };
        }
    }
    AfterClaim::Bind
}

/// Whose claim write a binding carries (its claimed-by), as a claim about to use it sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClaimWrite {
    /// None, or one checked already: its claimant is recorded Bound to this binding, which it
    /// is only after its own fresh read of the other bindings. Nothing to read.
    Checked,
    /// This claim's own (`own_write`): the claim gives it back if contested.
    Own,
    /// A live claim's (`uid`) still deciding (pending, not deleting, not denied, or written by
    /// this replica right now): that claim gives it back if contested, so this claim waits.
    Claimant(String),
    /// The claim `uid` named is gone, deleting, denied, or recorded on another binding: it will
    /// never give the write back, and no Bound status of it can land here any more (its
    /// deletion, denial or other status moved its resourceVersion, on which a status write of it
    /// is conditioned; the index knows every claim a record names unless it is gone, see
    /// `claimant::recorded_claims`). If contested, this claim gives it back itself.
    Orphaned(String),
}

/// Whose claim write `binding` carries, for claim `claim_uid` about to use it. Pure.
pub fn claim_write_on(
    inv: &Inventory,
    inflight: &InFlight,
    binding: &str,
    claim_uid: &str,
    now: Instant,
) -> ClaimWrite {
    if own_write(inv, inflight, binding, claim_uid, now) {
        return ClaimWrite::Own;
    }
    if let Some(p) = inflight.claim_of(binding, now) {
        return ClaimWrite::Claimant(p.claim_uid.clone());
    }
    let by = inv
        .binding(binding)
        .and_then(|e| e.view.labels.get(crate::labels::CLAIMED_BY));
    let Some(uid) = by else {
        return ClaimWrite::Checked;
    };
    let writing = inflight
        .assignment_of(uid, now)
        .is_some_and(|a| a.binding == binding);
    match inv.claim(uid) {
        Some(c) if c.bound_binding.as_deref() == Some(binding) && !c.lost => ClaimWrite::Checked,
        Some(c) if writing || (c.bound_binding.is_none() && !c.deleting && !c.denied) => {
            ClaimWrite::Claimant(uid.clone())
        }
        _ => ClaimWrite::Orphaned(uid.clone()),
    }
}

/// The other bindings of `binding`'s account to read fresh before claim `claim_uid` is recorded
/// Bound onto it: none unless a claim write on the binding may not have been checked yet — this
/// claim's own (made in this visit, `claimed_now`, or in flight), or any claim's whose
/// claimed-by is still on the binding (nothing used the binding since its claim write: a late
/// write, perhaps a previous leader's, may never have been checked, and a use by another claim
/// of the same tenant would have bound it unread). A binding used since (its claimed-by
/// removed) was checked when it was first bound. The siblings are the index's: which bindings
/// reference a credential changes with a binding's spec, not with a claim.
pub fn siblings_to_check(
    inv: &Inventory,
    inflight: &InFlight,
    binding: &str,
    claim_uid: &str,
    claimed_now: bool,
    now: Instant,
) -> Vec<String> {
    let labelled = inv
        .binding(binding)
        .is_some_and(|e| e.view.labels.get(crate::labels::CLAIMED_BY).is_some());
    if !(claimed_now || labelled || own_write(inv, inflight, binding, claim_uid, now)) {
        return Vec::new();
    }
    // A binding of the other kind is known by its account alone, keyed `Kind/name`: it is no
    // binding of the watched kind to read. Its Shoots count with the account where clusters do.
    inv.siblings(binding)
        .filter(|s| inv.binding(s).is_some())
        .map(str::to_string)
        .collect()
}

/// Whether the claim write on `binding` is claim `claim_uid`'s own: in flight, or named by the
/// binding's claimed-by in the index. Only its own
/// is given back by the claim (its status write first fences a late Bound status of it); a
/// write of another claim is that claim's to give back, and this claim waits.
pub fn own_write(
    inv: &Inventory,
    inflight: &InFlight,
    binding: &str,
    claim_uid: &str,
    now: Instant,
) -> bool {
    let labelled = inv.binding(binding).is_some_and(|e| {
        e.view
            .labels
            .get(crate::labels::CLAIMED_BY)
            .map(String::as_str)
            == Some(claim_uid)
    });
    labelled
        || inflight.won_by(claim_uid, now) == Some(binding)
        || inflight
            .claim_of(binding, now)
            .is_some_and(|p| p.claim_uid == claim_uid)
}
