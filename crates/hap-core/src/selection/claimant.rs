//! Before a claim is recorded Bound to a binding it did not claim, the claim records itself on
//! the binding; a release counts the claims the binding's records name.
//!
//! Every decision that depends on a binding's state is conditioned on that binding: it is taken
//! on the binding's resourceVersion as the index has it and writes the binding with a
//! compare-and-swap on that version before anything else. A claim write sets the tenant and
//! `CLAIMED_BY` together; a use (reuse, fill, pin, adoption) sets `FILLING` to the claims being
//! bound there, itself included, and removes `CLAIMED_BY`; a release sets the dirty label or
//! removes the tenant. Two decisions on one binding therefore conflict whatever time lies
//! between a write's decision and its landing: a release a paused leader decided and sent cannot
//! land after the next leader's use of the binding, nor a use after the next leader's release.
//! The status write of a use comes after its record, and while that status does not show, every
//! leader counts the recorded claim: as a user when it releases (`recorded_claims`), as one of
//! the binding's clusters when it fills (`pending_claims`, docs/design.md §5.3). A late status write of a claim whose
//! record a release could not count (the claim was deleted or denied since) conflicts on the
//! claim's own version. Shared and internal bindings are never written and never released, so a
//! use of one records nothing.
//!
//! `CLAIMED_BY` names the claim whose claim write gave the binding its tenant. The first use by
//! any other claim removes it, so that no release can take the binding for one only that claim
//! touched: a cluster of the other claim may have run in the account, whichever goes last. A use
//! that removes it while its claim is still pending moves that claim into `FILLING`.
//!
//! `FILLING` is one annotation, a comma-separated list of claim uids, so a use costs one small
//! merge patch; each use rewrites it with only the claims still pending, so it stays as short
//! as the number of uses in flight. A claim whose own record is on the binding already (its
//! status write failed and it is decided again) writes nothing.
//!
//! A claim write of a paused leader that lands after the next leader bound the claim elsewhere
//! leaves a stray: a binding whose claimed-by names a claim Bound to another one
//! (`stray_claimant`). No compare-and-swap can stop that write (it goes to another binding), so
//! the stray is kept from selection and given back clean by its claimant's reconcile.

use std::time::{Duration, Instant};

use crate::api::PendingClaimWrite;
use crate::labels::PoolKey;
use crate::labels::{CLAIMED_BY, FILLING};
use crate::pools::{BindingClass, ClaimView, Inventory};

use super::{Choice, InFlight};

/// How long a use waits for a sibling's write on the same binding before it sends its own.
const SIBLING_WRITE: Duration = Duration::from_secs(5);

/// What has to happen on `binding` before a claim that did not claim it is recorded Bound.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BeforeUse {
    /// Nothing on the binding: record the claim Bound. Its record is there already, or the
    /// binding is shared or internal (never written, never released).
    Bind,
    /// Set `FILLING` to `claims` (the claims recorded there that are still pending, this claim
    /// included) and remove `CLAIMED_BY`, in one write conditioned on this version, then record
    /// the claim Bound. A conflict means the binding moved: decide again.
    Record {
        binding: String,
        expected_resource_version: Option<String>,
        claims: String,
    },
    /// Another claim's claim write of the binding is not in the index yet, so its `CLAIMED_BY`
    /// cannot be seen (nor removed), another claim's use of it is being written by this
    /// replica, or the index does not hold the binding: decide again once it is answered.
    Wait { binding: String },
}

/// Decides what claim `claim_uid` must write before it is bound as `choice` says (nothing unless
/// it is a `Use`). Pure.
pub fn before_use(
    inv: &Inventory,
    inflight: &InFlight,
    claim_uid: &str,
    choice: &Choice,
    now: Instant,
) -> BeforeUse {
    let Choice::Use { binding, .. } = choice else {
        return BeforeUse::Bind;
    };
    match inflight.claim_of(binding, now) {
        Some(p) if p.claim_uid != claim_uid => {
            return BeforeUse::Wait {
                binding: binding.to_string(),
            };
        }
        // Its own claim write, which carries its claimed-by record, is not in the index yet.
        Some(_) => return BeforeUse::Bind,
        None => {}
    }
    // Without the binding's version no record can be written, and a status without it could
    // land under a release; the next decision sees the binding, or picks another.
    let Some(entry) = inv.binding(binding) else {
        return BeforeUse::Wait {
            binding: binding.to_string(),
        };
    };
    let labels = &entry.view.labels;
    let shared = labels.get(&inv.keys().shared).is_some_and(|v| v == "true");
    if entry.internal || shared {
        return BeforeUse::Bind;
    }
    let claimed_by = labels.get(CLAIMED_BY);
    let recorded = records(entry.view.annotations.get(FILLING)).any(|u| u == claim_uid);
    if claimed_by.is_some_and(|by| by == claim_uid) || (claimed_by.is_none() && recorded) {
        return BeforeUse::Bind;
    }
    // A sibling's record on this binding is being written: its answer moves the version, so a
    // record sent now would only conflict. Waiting is for throughput alone; the compare-and-swap
    // keeps it safe, so a write that takes longer than this is not waited for.
    if inflight.assigning_other(binding, claim_uid, SIBLING_WRITE, now) {
        return BeforeUse::Wait {
            binding: binding.to_string(),
        };
    }
    let mut claims: Vec<&str> = recorded_claims(inv, binding)
        .map(|c| c.uid.as_str())
        .filter(|u| *u != claim_uid)
        .collect();
    claims.push(claim_uid);
    claims.sort_unstable();
    claims.dedup();
    BeforeUse::Record {
        binding: binding.to_string(),
        expected_resource_version: entry.view.resource_version.clone(),
        claims: claims.join(","),
    }
}

/// The claim uids of a `FILLING` record.
fn records(record: Option<&String>) -> impl Iterator<Item = &str> {
    record
        .into_iter()
        .flat_map(|r| r.split(','))
        .map(str::trim)
        .filter(|u| !u.is_empty())
}

/// The claims the binding's records name (`CLAIMED_BY` and `FILLING`) whose status the index
/// does not show yet and may still land Bound there: they exist, belong to the binding's tenant,
/// are not being deleted, and record no binding and no denial yet. A claim write or use whose
/// status is still in flight, perhaps from a previous leader. A claim being deleted or denied is
/// not one: its deletion or denial moved its resourceVersion, on which a status write of it is
/// conditioned, so no status of it can land Bound any more. What this replica plans for the
/// claim does not matter here: a previous leader's held status write is not bound by it. The
/// index knows every claim a record names unless the claim is gone: a record is written by a
/// leader that knew the claim, and a replica lists the claims when it starts leading, after that
/// leader's fence closed. A release and a use's record count these.
pub fn recorded_claims<'a>(
    inv: &'a Inventory,
    binding: &'a str,
) -> impl Iterator<Item = &'a ClaimView> + 'a {
    let entry = inv.binding(binding);
    let tenant = entry.and_then(|e| e.view.labels.get(&inv.keys().tenant_name));
    let claimed_by = entry.and_then(|e| e.view.labels.get(CLAIMED_BY));
    let fills = records(entry.and_then(|e| e.view.annotations.get(FILLING)));
    claimed_by
        .map(String::as_str)
        .into_iter()
        .chain(fills)
        .filter_map(|uid| inv.claim(uid))
        .filter(move |c| {
            tenant == Some(&c.global_account)
                && c.bound_binding.is_none()
                && !c.deleting
                && !c.denied
        })
}

/// The recorded claims (`recorded_claims`) that selection counts as the binding's clusters and
/// that keep a binding from being a stray: those this replica is not writing to another binding.
/// Counting a claim on both bindings would hold a single-account tenant's claims off the one it
/// is moving to; a release never uses this.
pub fn pending_claims<'a>(
    inv: &'a Inventory,
    inflight: &'a InFlight,
    binding: &'a str,
    now: Instant,
) -> impl Iterator<Item = &'a ClaimView> + 'a {
    recorded_claims(inv, binding).filter(move |c| !assigned_elsewhere(inflight, c, binding, now))
}

/// Whether this replica is writing `claim` onto another binding than `binding`, or won another
/// binding's claim write for it (kept after a refused status write, so that a re-decision does
/// not turn the late one into its binding).
fn assigned_elsewhere(inflight: &InFlight, claim: &ClaimView, binding: &str, now: Instant) -> bool {
    inflight
        .assignment_of(&claim.uid, now)
        .is_some_and(|a| a.binding != binding)
        || inflight
            .won_by(&claim.uid, now)
            .is_some_and(|b| b != binding)
}

/// A claim write another claim of `claim`'s tenant recorded in its status (`status.claimWrite`)
/// that may still land on a claimable binding of `pool`: the index shows the binding claimable
/// at the write's base version (or an older one), and that claim records no binding (a deleting
/// or denied claim's write may land as well). Perhaps a previous leader's write in flight: were
/// it to land after this claim got another binding, a single-account tenant would hold two of
/// the pool (§5.2). The tenant's claims wait for it, and the waiting claim settles it
/// (`controller::claim_write::settle_for`): its own claim's leader may be gone. This replica's
/// own writes are the ledger's (`InFlight::claims_for`).
pub fn recorded_write_in<'a>(
    inv: &'a Inventory,
    claim: &'a ClaimView,
    pool: &PoolKey,
) -> Option<(&'a ClaimView, &'a PendingClaimWrite)> {
    recorded_writes(inv, claim).find_map(|(c, w, p)| (p == pool).then_some((c, w)))
}

/// Every such write (`recorded_write_in`), in any pool, with the binding's pool.
pub fn recorded_writes<'a>(
    inv: &'a Inventory,
    claim: &'a ClaimView,
) -> impl Iterator<Item = (&'a ClaimView, &'a PendingClaimWrite, &'a PoolKey)> + 'a {
    inv.claim_writes_of(&claim.global_account)
        .iter()
        .filter(move |uid| **uid != claim.uid)
        .filter_map(|uid| inv.claim(uid))
        .filter(|c| c.bound_binding.is_none())
        .filter_map(|c| {
            let w = c.claim_write.as_deref().filter(|w| inv.holds_write(w))?;
            let e = inv.binding(&w.binding)?;
            let Some((pool, BindingClass::Claimable)) = &e.pool else {
                return None;
            };
            // At its base, or an index older than it (a re-list from a lagging watch cache).
            let seen = e.view.resource_version.as_deref();
            let moved = crate::pools::is_newer(seen, Some(&w.resource_version));
            (!moved).then_some((c, w, pool))
        })
}

/// The claim a stray binding was claimed for, if `binding` is one: its claimed-by record names
/// a claim of its tenant that is recorded Bound to another binding (or that this replica is
/// writing onto another one), and nothing uses it (no cluster, no claim bound, no fill pending).
/// Only a paused leader's claim write that landed after the next leader had decided the claim
/// elsewhere leaves one (a claim never moves, docs/design.md §4.1, and any other claim's use would have
/// removed the record): the tenant holds a second binding no cluster ever used, which selection
/// keeps its claims off (a single-account tenant would otherwise run clusters in two accounts
/// of one pool, §5.2) and the claimant's reconcile or release gives back clean.
pub fn stray_claimant<'a>(
    inv: &'a Inventory,
    inflight: &InFlight,
    binding: &str,
    now: Instant,
) -> Option<&'a ClaimView> {
    let entry = inv.binding(binding)?;
    let labels = &entry.view.labels;
    let keys = inv.keys();
    let tenant = labels.get(&keys.tenant_name)?;
    if entry.internal || labels.get(&keys.dirty).is_some_and(|v| v == "true") {
        return None;
    }
    let claimant = inv.claim(labels.get(CLAIMED_BY)?)?;
    let elsewhere = claimant
        .bound_binding
        .as_deref()
        .is_some_and(|b| b != binding)
        || assigned_elsewhere(inflight, claimant, binding, now);
    let unused = inv.clusters_on(binding).is_empty()
        && inv.claims_on(binding).is_empty()
        && pending_claims(inv, inflight, binding, now).next().is_none();
    (claimant.global_account == *tenant && elsewhere && unused).then_some(claimant)
}

/// The stray bindings claimed for `claim` among its tenant's bindings in every pool
/// (`stray_claimant`), with the resourceVersion to release them on.
pub fn strays_of(
    inv: &Inventory,
    inflight: &InFlight,
    claim: &ClaimView,
    now: Instant,
) -> Vec<(String, Option<String>)> {
    strays(inv, inflight, claim, now)
        .filter_map(|b| inv.binding(b))
        .map(|e| (e.view.name.clone(), e.view.resource_version.clone()))
        .collect()
}

/// Whether any binding is a stray claimed for `claim` (`strays_of` is not empty), without
/// collecting them.
pub fn has_strays(inv: &Inventory, inflight: &InFlight, claim: &ClaimView, now: Instant) -> bool {
    strays(inv, inflight, claim, now).next().is_some()
}

/// The names of the stray bindings claimed for `claim`.
fn strays<'a>(
    inv: &'a Inventory,
    inflight: &'a InFlight,
    claim: &'a ClaimView,
    now: Instant,
) -> impl Iterator<Item = &'a String> + 'a {
    let mine = move |b: &&String| {
        stray_claimant(inv, inflight, b, now).is_some_and(|c| c.uid == claim.uid)
    };
    inv.pools()
        .flat_map(|(pool, _)| inv.owned_by(pool, &claim.global_account).iter())
        .filter(mine)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pools::fixtures::{binding, claim, inventory, pool};
    use crate::selection::UseReason;

    fn reuse(b: &str) -> Choice {
        Choice::Use {
            binding: b.into(),
            decision: UseReason::Reused,
        }
    }

    fn claimed(by: &str) -> crate::pools::BindingView {
        binding(
            "b",
            &[
                ("hyperscalerType", "aws"),
                ("tenantName", "ga"),
                (CLAIMED_BY, by),
            ],
        )
    }

    #[test]
    fn a_binding_another_claim_claimed_loses_its_record_before_the_reuse() {
        let inv = inventory(vec![claimed("uid-first")], vec![], vec![]);
        let fl = InFlight::default();
        let now = Instant::now();
        assert_eq!(
            before_use(&inv, &fl, "uid-second", &reuse("b"), now),
            BeforeUse::Record {
                binding: "b".into(),
                expected_resource_version: Some("rv-b".into()),
                claims: "uid-second".into(),
            }
        );
        // The claim that claimed it binds without a write (a status write that failed, again).
        assert_eq!(
            before_use(&inv, &fl, "uid-first", &reuse("b"), now),
            BeforeUse::Bind
        );
    }

    /// A reuse that wrote nothing on the binding left its version as it was: a release decided
    /// on that version by a previous leader (dirty, its write still in flight) would land under
    /// the reused cluster. So every use of a binding the operator may release records itself.
    #[test]
    fn a_plain_reuse_records_its_claim_on_the_binding_before_its_status() {
        let now = Instant::now();
        let fl = InFlight::default();
        let bare = binding("b", &[("hyperscalerType", "aws"), ("tenantName", "ga")]);
        let inv = inventory(vec![bare.clone()], vec![], vec![]);
        assert_eq!(
            before_use(&inv, &fl, "uid-second", &reuse("b"), now),
            BeforeUse::Record {
                binding: "b".into(),
                expected_resource_version: Some("rv-b".into()),
                claims: "uid-second".into(),
            }
        );
        // Its own record is there already (a status write that failed, again): nothing to write,
        // every leader counts it while its status does not show.
        let mut mine = bare;
        mine.annotations.insert(FILLING.into(), "uid-second".into());
        let inv = inventory(vec![mine], vec![], vec![]);
        assert_eq!(
            before_use(&inv, &fl, "uid-second", &reuse("b"), now),
            BeforeUse::Bind
        );
    }

    /// Concurrent uses of one binding in this replica are written one after the other: each
    /// record moves the binding's version, so a second one sent meanwhile would only conflict.
    #[test]
    fn a_use_waits_while_a_siblings_use_of_the_binding_is_being_written() {
        let now = Instant::now();
        let b = binding("b", &[("hyperscalerType", "aws"), ("tenantName", "ga")]);
        let inv = inventory(vec![b], vec![], vec![]);
        let mut fl = InFlight::default();
        let sibling = claim("sibling", "ga", None, None);
        fl.record(&sibling, &pool("aws", false, false), &reuse("b"), now);
        assert_eq!(
            before_use(&inv, &fl, "uid-second", &reuse("b"), now),
            BeforeUse::Wait {
                binding: "b".into()
            }
        );
        // Its own write in progress does not hold it; a sibling's answered write no longer does.
        assert!(matches!(
            before_use(&inv, &fl, "uid-sibling", &reuse("b"), now),
            BeforeUse::Record { .. }
        ));
        fl.assignment_written("uid-sibling", now);
        assert!(matches!(
            before_use(&inv, &fl, "uid-second", &reuse("b"), now),
            BeforeUse::Record { .. }
        ));
    }

    /// The operator never writes a shared or internal binding, and never releases one either:
    /// a use of one needs no record.
    #[test]
    fn a_use_of_a_shared_or_internal_binding_writes_nothing_on_it() {
        let now = Instant::now();
        let fl = InFlight::default();
        for extra in [("shared", "true"), ("internal", "true")] {
            let b = binding(
                "b",
                &[("hyperscalerType", "aws"), ("tenantName", "ga"), extra],
            );
            let inv = inventory(vec![b], vec![], vec![]);
            assert_eq!(
                before_use(&inv, &fl, "uid-second", &reuse("b"), now),
                BeforeUse::Bind,
                "{extra:?}"
            );
        }
    }

    /// A record counts only claims whose status may still land Bound there: not a claim that is
    /// gone, being deleted (its deletion moved its version, so a late status write of it fails),
    /// denied, another tenant's, or recorded on another binding.
    #[test]
    fn a_record_counts_only_claims_whose_status_may_still_land_there() {
        let now = Instant::now();
        let fl = InFlight::default();
        let mut b = binding("b", &[("hyperscalerType", "aws"), ("tenantName", "ga")]);
        b.annotations.insert(
            FILLING.into(),
            "uid-p,uid-gone,uid-del,uid-den,uid-other,uid-bound".into(),
        );
        let claims = vec![
            claim("p", "ga", None, None),
            ClaimView {
                deleting: true,
                ..claim("del", "ga", None, None)
            },
            ClaimView {
                denied: true,
                ..claim("den", "ga", None, None)
            },
            claim("other", "gb", None, None),
            claim("bound", "ga", None, Some("b2")),
        ];
        let inv = inventory(vec![b], claims, vec![]);
        let pending: Vec<&str> = pending_claims(&inv, &fl, "b", now)
            .map(|c| c.uid.as_str())
            .collect();
        assert_eq!(pending, ["uid-p"]);
    }

    /// A use rewriting `FILLING` keeps a recorded claim this replica is assigning elsewhere: a
    /// held status write of it (a previous leader's) may still land Bound on this binding, and a
    /// release counts only what the record names.
    #[test]
    fn a_use_keeps_the_record_of_a_claim_assigned_elsewhere() {
        let now = Instant::now();
        let mut b = binding("b", &[("hyperscalerType", "aws"), ("tenantName", "ga")]);
        b.annotations.insert(FILLING.into(), "uid-c".into());
        let c = claim("c", "ga", None, None);
        let inv = inventory(vec![b], vec![c.clone()], vec![]);
        let mut fl = InFlight::new(Duration::from_secs(60));
        fl.record(&c, &pool("aws", false, false), &reuse("b2"), now);
        assert_eq!(
            before_use(&inv, &fl, "uid-d", &reuse("b"), now),
            BeforeUse::Record {
                binding: "b".into(),
                expected_resource_version: Some("rv-b".into()),
                claims: "uid-c,uid-d".into(),
            }
        );
    }

    /// A binding the index does not hold (deleted, or not listed yet) cannot be recorded on, and
    /// a status written without the record could land under a release: decide again later.
    #[test]
    fn a_use_of_a_binding_missing_from_the_index_waits() {
        let inv = inventory(vec![], vec![], vec![]);
        assert_eq!(
            before_use(
                &inv,
                &InFlight::default(),
                "uid-c",
                &reuse("b"),
                Instant::now()
            ),
            BeforeUse::Wait {
                binding: "b".into()
            }
        );
    }

    #[test]
    fn a_claim_write_the_index_does_not_show_yet_is_waited_for() {
        // Its record is on the binding but not in the index view: binding on that view would
        // leave the record of the first claim in place.
        let now = Instant::now();
        let free = binding("b", &[("hyperscalerType", "aws")]);
        let inv = inventory(vec![free], vec![], vec![]);
        let mut fl = InFlight::default();
        let first = claim("first", "ga", None, None);
        let claim_b = Choice::Claim {
            binding: "b".into(),
            expected_resource_version: Some("rv-b".into()),
        };
        fl.record(&first, &pool("aws", false, false), &claim_b, now);
        fl.claim_written("b", now);
        assert_eq!(
            before_use(&inv, &fl, "uid-second", &reuse("b"), now),
            BeforeUse::Wait {
                binding: "b".into()
            }
        );
        assert_eq!(
            before_use(&inv, &fl, "uid-first", &reuse("b"), now),
            BeforeUse::Bind
        );
    }

    fn fill(b: &str) -> Choice {
        Choice::Use {
            binding: b.into(),
            decision: UseReason::FilledMostPopulated,
        }
    }

    #[test]
    fn a_fill_records_itself_and_every_claim_still_pending_on_the_binding() {
        let now = Instant::now();
        let fl = InFlight::default();
        let mut b = claimed("uid-first");
        b.annotations
            .insert(FILLING.into(), "uid-gone,uid-other".into());
        let pending = |name: &str| claim(name, "ga", Some(name), None);
        let inv = inventory(vec![b], vec![pending("first"), pending("other")], vec![]);
        // claimed-by's claim is still pending: it moves into the record as claimed-by goes;
        // the record of a claim that is gone is dropped.
        assert_eq!(
            before_use(&inv, &fl, "uid-new", &fill("b"), now),
            BeforeUse::Record {
                binding: "b".into(),
                expected_resource_version: Some("rv-b".into()),
                claims: "uid-first,uid-new,uid-other".into(),
            }
        );
        // Anything but a Use needs nothing on the binding.
        let claim_it = Choice::Claim {
            binding: "b".into(),
            expected_resource_version: None,
        };
        assert_eq!(
            before_use(&inv, &fl, "uid-new", &claim_it, now),
            BeforeUse::Bind
        );
    }

    #[test]
    fn a_binding_claimed_for_a_claim_bound_elsewhere_and_unused_is_a_stray() {
        let x = claim("x", "ga", None, Some("b1"));
        let stray = claimed("uid-x");
        let inv = inventory(vec![stray.clone()], vec![x.clone()], vec![]);
        assert_eq!(
            stray_claimant(&inv, &InFlight::default(), "b", Instant::now()).map(|c| c.uid.as_str()),
            Some("uid-x")
        );
        // Not a stray: its claimant is bound to it, pending, or gone; a Shoot uses it.
        let on_it = claim("x", "ga", None, Some("b"));
        let pending = claim("x", "ga", None, None);
        for c in [vec![on_it], vec![pending], vec![]] {
            let inv = inventory(vec![stray.clone()], c, vec![]);
            assert_eq!(
                stray_claimant(&inv, &InFlight::default(), "b", Instant::now()),
                None
            );
        }
        let shoot = crate::pools::fixtures::shoot("s", Some("b"));
        let used = inventory(vec![stray], vec![x], vec![shoot]);
        assert_eq!(
            stray_claimant(&used, &InFlight::default(), "b", Instant::now()),
            None
        );
    }

    #[test]
    fn a_settled_claim_needs_a_visit_when_its_verdict_moved_or_it_claimed_a_stray() {
        use crate::selection::needs_visit;
        let (fl, now) = (InFlight::default(), Instant::now());
        let mine = binding("b1", &[("hyperscalerType", "aws"), ("tenantName", "ga")]);
        let other = binding("b1", &[("hyperscalerType", "aws"), ("tenantName", "gb")]);
        let x = claim("x", "ga", None, Some("b1"));
        let visit = |bindings: Vec<crate::pools::BindingView>, c: &ClaimView| {
            let inv = inventory(bindings, vec![c.clone()], vec![]);
            let c = inv.claim(&c.uid).expect("indexed");
            needs_visit(c, &inv, &fl, now)
        };
        assert!(
            !visit(vec![mine.clone()], &x),
            "Bound and still the tenant's"
        );
        assert!(visit(vec![other.clone()], &x), "Bound, but lost");
        assert!(visit(vec![], &x), "Bound, but the binding is gone");
        let lost = ClaimView {
            lost: true,
            ..x.clone()
        };
        assert!(!visit(vec![other.clone()], &lost), "lost, and recorded so");
        assert!(visit(vec![mine.clone()], &lost), "recorded lost, but back");
        assert!(
            visit(vec![mine.clone(), claimed("uid-x")], &x),
            "a stray to give back"
        );
        let elsewhere = ClaimView {
            binding_namespace: Some("old-garden".into()),
            ..x.clone()
        };
        let mut inv = inventory(vec![other.clone()], vec![elsewhere.clone()], vec![]);
        inv.set_namespace(Some("garden".into()));
        assert!(
            !needs_visit(&elsewhere, &inv, &fl, now),
            "its binding is not in the namespace watched"
        );
        let denied = ClaimView {
            denied: true,
            ..x.clone()
        };
        let deleting = ClaimView {
            deleting: true,
            ..x.clone()
        };
        assert!(!visit(vec![other.clone()], &denied), "a denial is final");
        assert!(!visit(vec![other], &deleting), "the release's");
    }

    /// Any use that removes the claimed-by of a claim still pending keeps that claim counted:
    /// an adoption or reuse removed it, the claim's late status landed, and a fill counted one
    /// cluster too few (§5.3).
    #[test]
    fn a_use_that_removes_a_pending_claimants_record_moves_it_into_the_fill_record() {
        let now = Instant::now();
        let inv = inventory(
            vec![claimed("uid-first")],
            vec![claim("first", "ga", Some("first"), None)],
            vec![],
        );
        assert_eq!(
            before_use(&inv, &InFlight::default(), "uid-second", &reuse("b"), now),
            BeforeUse::Record {
                binding: "b".into(),
                expected_resource_version: Some("rv-b".into()),
                claims: "uid-first,uid-second".into(),
            }
        );
    }

    /// Another claim of the tenant recorded a claim write of a free binding of the pool at the
    /// version the index shows: it may still land, so it counts (a claim of the tenant waits);
    /// once the binding moved, or for a deleting claim, or the claim's own record, it does not.
    #[test]
    fn another_claims_recorded_write_counts_while_the_binding_is_at_its_base() {
        let record = |rv: &str| {
            Some(Box::new(crate::api::PendingClaimWrite {
                binding: "f".into(),
                resource_version: rv.into(),
                ..Default::default()
            }))
        };
        let other = ClaimView {
            claim_write: record("rv-f"),
            ..claim("d", "ga", None, None)
        };
        let me = claim("c", "ga", None, None);
        let free = binding("f", &[("hyperscalerType", "aws")]);
        let inv = inventory(vec![free.clone()], vec![other.clone()], vec![]);
        let found = recorded_write_in(&inv, &me, &pool("aws", false, false))
            .map(|(c, w)| (c.uid.clone(), w.binding.clone()));
        assert_eq!(found, Some(("uid-d".into(), "f".into())));
        assert!(
            recorded_write_in(&inv, &other, &pool("aws", false, false)).is_none(),
            "its own record"
        );
        let moved = ClaimView {
            claim_write: record("rv-0"),
            ..other.clone()
        };
        let inv = inventory(vec![free.clone()], vec![moved], vec![]);
        assert!(
            recorded_write_in(&inv, &me, &pool("aws", false, false)).is_none(),
            "the binding moved on"
        );
        // A deleting or denied claim's write may land as well.
        for going in [
            ClaimView {
                deleting: true,
                ..other.clone()
            },
            ClaimView {
                denied: true,
                ..other.clone()
            },
        ] {
            let inv = inventory(vec![free.clone()], vec![going], vec![]);
            assert!(recorded_write_in(&inv, &me, &pool("aws", false, false)).is_some());
        }
        // An index older than the write's base counts too (numbers: etcd revisions).
        let at = |rv: &str| crate::pools::BindingView {
            resource_version: Some(rv.into()),
            ..free.clone()
        };
        let seven = ClaimView {
            claim_write: record("7"),
            ..other
        };
        let inv = inventory(vec![at("6")], vec![seven.clone()], vec![]);
        assert!(recorded_write_in(&inv, &me, &pool("aws", false, false)).is_some());
        let inv = inventory(vec![at("8")], vec![seven], vec![]);
        assert!(recorded_write_in(&inv, &me, &pool("aws", false, false)).is_none());
    }
}
