//! Two claim writes on two bindings of one credential, each a compare-and-swap on its own
//! binding, made by writers whose caches have not seen the other's write (two leaders in a
//! hand-over, or a paused leader's write landing late). Every interleaving of their steps is
//! played against a model of the API server; after each, at most one tenant may be recorded
//! Bound on the account.

use std::collections::BTreeMap;

use crate::labels::{CLAIMED_BY, ResolvedLabelKeys};
use crate::selection::{AfterClaim, Check, after_claim};

type Labels = BTreeMap<String, String>;

/// The API server: each binding's resourceVersion and labels; one global revision.
#[derive(Clone, Default)]
struct Server {
    rev: u64,
    objects: BTreeMap<&'static str, (u64, Labels)>,
}

impl Server {
    fn cas(&mut self, name: &str, expected: u64, edit: impl FnOnce(&mut Labels)) -> Option<u64> {
        let (rv, labels) = self.objects.get_mut(name)?;
        if *rv != expected {
            return None;
        }
        self.rev += 1;
        edit(labels);
        *rv = self.rev;
        Some(self.rev)
    }
}

/// One claim: the binding its writer chose on a stale view (free at version `seen`), its tenant,
/// and whether its writer dies after the claim write (a late write, decided again by the next
/// leader).
#[derive(Clone)]
struct Writer {
    claim: &'static str,
    tenant: &'static str,
    binding: &'static str,
    sibling: &'static str,
    seen: u64,
    dies: bool,
    /// The version its claim write left, once it committed.
    written: Option<u64>,
    /// The fresh read's verdict, once made.
    verdict: Option<AfterClaim>,
    bound: bool,
}

/// One step of a writer: claim write, fresh read of the sibling, then bind or give back.
fn step(w: &mut Writer, server: &mut Server, keys: &ResolvedLabelKeys) {
    match (w.written, &w.verdict) {
        (None, _) => {
            let (tenant, claim) = (w.tenant, w.claim);
            w.written = server.cas(w.binding, w.seen, |l| {
                l.insert(keys.tenant_name.clone(), tenant.into());
                l.insert(CLAIMED_BY.into(), claim.into());
            });
            if w.written.is_none() {
                w.verdict = Some(AfterClaim::Bind); // lost its compare-and-swap: nothing more
            }
        }
        (Some(_), None) => {
            let fresh = server.objects.get(w.sibling).map(|(_, l)| l);
            w.verdict = Some(after_claim(
                keys,
                w.tenant,
                Check::ClaimWrite,
                [(w.sibling, fresh)],
            ));
        }
        (Some(_), Some(AfterClaim::Bind)) => w.bound = true,
        (Some(rv), Some(AfterClaim::GiveBack { .. })) => {
            server.cas(w.binding, rv, |l| {
                l.remove(&keys.tenant_name);
                l.remove(CLAIMED_BY);
            });
            w.verdict = Some(AfterClaim::Bind);
            w.written = Some(u64::MAX); // given back: never bound
        }
    }
}

fn done(w: &Writer) -> bool {
    w.bound
        || w.written == Some(u64::MAX)
        || (w.written.is_some() && w.dies)
        || (w.written.is_none() && w.verdict.is_some())
}

/// Plays `order` (which writer moves at each turn), then lets a next leader decide every dead
/// writer's claim onto its labelled binding: a fresh read, then bind or give back.
fn play(order: &[usize], writers: &mut [Writer; 2], server: &mut Server, keys: &ResolvedLabelKeys) {
    for &i in order {
        if !done(&writers[i]) {
            step(&mut writers[i], server, keys);
        }
    }
    for w in writers.iter_mut() {
        if w.dies && w.written.is_some_and(|rv| rv != u64::MAX) {
            let labelled = server.objects[w.binding]
                .1
                .get(CLAIMED_BY)
                .map(String::as_str);
            if labelled == Some(w.claim) {
                w.dies = false;
                w.written = Some(server.objects[w.binding].0);
                w.verdict = None;
                while !done(w) {
                    step(w, server, keys);
                }
            }
        }
    }
}

/// Every sequence of turns in which each writer takes `n` steps.
fn interleavings(n: usize) -> Vec<Vec<usize>> {
    let mut out = Vec::new();
    fn go(a: usize, b: usize, cur: &mut Vec<usize>, out: &mut Vec<Vec<usize>>) {
        if a == 0 && b == 0 {
            out.push(cur.clone());
            return;
        }
        for (i, left) in [(0, a), (1, b)] {
            if left > 0 {
                cur.push(i);
                let (a2, b2) = if i == 0 { (a - 1, b) } else { (a, b - 1) };
                go(a2, b2, cur, out);
                cur.pop();
            }
        }
    }
    go(n, n, &mut Vec::new(), &mut out);
    out
}

#[test]
fn two_claim_writes_on_two_bindings_of_one_credential_never_both_bind() {
    let keys = ResolvedLabelKeys::default();
    let writer = |claim, tenant, binding, sibling, dies| Writer {
        claim,
        tenant,
        binding,
        sibling,
        seen: 1,
        dies,
        written: None,
        verdict: None,
        bound: false,
    };
    let mut played = 0;
    for dies in [(false, false), (true, false), (false, true), (true, true)] {
        for order in interleavings(3) {
            let mut server = Server {
                rev: 1,
                objects: [("x", (1, Labels::new())), ("y", (1, Labels::new()))].into(),
            };
            let mut ws = [
                writer("c-a", "ga", "x", "y", dies.0),
                writer("c-b", "gb", "y", "x", dies.1),
            ];
            play(&order, &mut ws, &mut server, &keys);
            played += 1;
            let bound: Vec<_> = ws
                .iter()
                .filter(|w| w.bound)
                .map(|w| (w.binding, w.tenant))
                .collect();
            assert!(
                bound.len() <= 1,
                "one account serves two tenants: {bound:?} (turns {order:?}, dies {dies:?})"
            );
            // Never both tenants' labels left on the account either.
            let tenants: Vec<_> = server
                .objects
                .values()
                .filter_map(|(_, l)| l.get(&keys.tenant_name))
                .collect();
            assert!(
                tenants.len() <= 1,
                "labels left: {tenants:?} (turns {order:?})"
            );
        }
    }
    assert_eq!(played, 4 * 20);
}

#[test]
fn a_writer_alone_binds_and_a_sibling_of_the_same_tenant_does_not_hold_it_back() {
    let keys = ResolvedLabelKeys::default();
    let mut mine = Labels::new();
    mine.insert(keys.tenant_name.clone(), "ga".into());
    assert_eq!(
        after_claim(&keys, "ga", Check::ClaimWrite, [("y", Some(&mine))]),
        AfterClaim::Bind
    );
    assert_eq!(
        after_claim::<Labels>(&keys, "ga", Check::ClaimWrite, [("y", None)]),
        AfterClaim::Bind
    );
    assert_eq!(
        after_claim(&keys, "gb", Check::ClaimWrite, [("y", Some(&mine))]),
        AfterClaim::GiveBack {
            sibling: "y".into(),
            label: "tenantName=ga".into()
        }
    );
    let mut dirty = mine.clone();
    dirty.insert(keys.dirty.clone(), "true".into());
    assert!(matches!(
        after_claim(&keys, "ga", Check::ClaimWrite, [("y", Some(&dirty))]),
        AfterClaim::GiveBack { .. }
    ));
}

#[test]
fn only_a_claims_own_claim_write_is_checked_against_the_other_bindings_of_its_account() {
    use std::time::Instant;

    use crate::pools::fixtures::{binding, claim, inventory, on_secret, pool};
    use crate::selection::{Choice, InFlight, siblings_to_check};
    let labelled = [
        ("hyperscalerType", "aws"),
        ("tenantName", "ga"),
        (CLAIMED_BY, "uid-c"),
    ];
    let inv = inventory(
        vec![
            on_secret(binding("x", &labelled), "s"),
            on_secret(binding("y", &[("hyperscalerType", "aws")]), "s"),
            on_secret(binding("z", &[("hyperscalerType", "aws")]), "s"),
            binding("alone", &[("hyperscalerType", "aws")]),
        ],
        vec![],
        vec![],
    );
    let (fl, now) = (InFlight::default(), Instant::now());
    // The index shows the claim's own write on x: check y and z.
    assert_eq!(
        siblings_to_check(&inv, &fl, "x", "uid-c", false, now),
        ["y", "z"]
    );
    // Another claim's use of x while x's claim write was not used since: checked too.
    assert_eq!(
        siblings_to_check(&inv, &fl, "x", "uid-other", false, now),
        ["y", "z"]
    );
    // A use of a binding used since (no claimed-by): its tenant was checked when first bound.
    assert!(siblings_to_check(&inv, &fl, "y", "uid-other", false, now).is_empty());
    // A write of this visit, or one in flight the index does not show yet.
    assert_eq!(
        siblings_to_check(&inv, &fl, "y", "uid-c", true, now),
        ["x", "z"]
    );
    let mut fl = InFlight::default();
    let c = claim("c", "ga", None, None);
    let write = Choice::Claim {
        binding: "z".into(),
        expected_resource_version: Some("rv-z".into()),
    };
    fl.record(&c, &pool("aws", false, false), &write, now);
    assert_eq!(
        siblings_to_check(&inv, &fl, "z", "uid-c", false, now),
        ["x", "y"]
    );
    // A binding alone on its credential needs no read.
    assert!(siblings_to_check(&inv, &fl, "alone", "uid-c", true, now).is_empty());
    // A binding of the other kind on the credential is known by its key alone: it cannot be
    // read as a binding of the watched kind (that read would be of a name that does not exist).
    let mut inv = inv;
    let other = crate::pools::OtherBinding {
        resource_version: Some("7".into()),
        account: crate::pools::Account::of_secret(Some("garden"), None, "s"),
    };
    assert!(inv.apply_other_binding("x", other));
    assert_eq!(
        siblings_to_check(&inv, &fl, "y", "uid-c", true, now),
        ["x", "z"]
    );
}

/// Liveness, where both writers live: a claim that gives back decides again, so a round in
/// which nobody binds costs a retry. Nobody binds only when both fresh reads come after both
/// claim writes (each sees the other's tenant). Two writers at once means two leaders (a
/// hand-over, or a paused leader's write landing late); once the hand-over is over, one leader
/// decides both claims, one after the other through its own caches and writes in flight: that
/// retry round, in either order, binds the first claim. What the model cannot show is a
/// scheduler that keeps two live leaders in lockstep for ever; the lease rules that out.
#[test]
fn where_both_writers_live_some_claim_binds_once_one_leader_decides_both() {
    let keys = ResolvedLabelKeys::default();
    let writer = |claim, tenant, binding, sibling, seen| Writer {
        claim,
        tenant,
        binding,
        sibling,
        seen,
        dies: false,
        written: None,
        verdict: None,
        bound: false,
    };
    let fresh = || Server {
        rev: 1,
        objects: [("x", (1, Labels::new())), ("y", (1, Labels::new()))].into(),
    };
    let mut both_gave_back = 0;
    for order in interleavings(3) {
        let mut server = fresh();
        let mut ws = [
            writer("c-a", "ga", "x", "y", 1),
            writer("c-b", "gb", "y", "x", 1),
        ];
        play(&order, &mut ws, &mut server, &keys);
        if ws.iter().any(|w| w.bound) {
            continue;
        }
        // Nobody bound: both gave back, and each read came after both writes (turns 0 and 1 of
        // each writer are its write and its read).
        let turn = |who: usize, nth: usize| {
            order
                .iter()
                .enumerate()
                .filter(|(_, w)| **w == who)
                .nth(nth)
                .map(|(i, _)| i)
        };
        let (wa, ra, wb, rb) = (turn(0, 0), turn(0, 1), turn(1, 0), turn(1, 1));
        assert!(
            ra > wb && rb > wa,
            "both gave back though one read came before the other's write (turns {order:?})"
        );
        both_gave_back += 1;
        // The retry: one leader decides both, one after the other, on the server as it is.
        for first in [0, 1] {
            let mut retry = server.clone();
            let at = |b: &str| retry.objects[b].0;
            let mut again = [
                writer("c-a", "ga", "x", "y", at("x")),
                writer("c-b", "gb", "y", "x", at("y")),
            ];
            let sequential = [first; 3]
                .into_iter()
                .chain([1 - first; 3])
                .collect::<Vec<_>>();
            play(&sequential, &mut again, &mut retry, &keys);
            let bound: Vec<_> = again.iter().filter(|w| w.bound).map(|w| w.claim).collect();
            assert_eq!(
                bound,
                [again[first].claim],
                "the retry after turns {order:?}, {first} first"
            );
        }
    }
    // Some interleavings do make both give back: the retry is not dead code.
    assert!(both_gave_back > 0);
}

/// A claim write whose claimant no longer decides is given back by the claim that would use it;
/// one whose claimant still decides is waited for; one whose claimant is recorded Bound there
/// was checked. A claim never waits for a claim that cannot act.
#[test]
fn a_claim_waits_only_for_a_claimant_that_still_decides() {
    use std::time::Instant;

    use crate::pools::fixtures::{binding, claim, inventory, on_secret};
    use crate::selection::{ClaimWrite, InFlight, claim_write_on};
    let x = |by: &str| {
        let labels = [
            ("hyperscalerType", "aws"),
            ("tenantName", "ga"),
            (CLAIMED_BY, by),
        ];
        on_secret(binding("x", &labels), "s")
    };
    let (fl, now) = (InFlight::default(), Instant::now());
    let on = |c: Option<crate::pools::ClaimView>| {
        let inv = inventory(vec![x("uid-c1")], c.into_iter().collect(), vec![]);
        claim_write_on(&inv, &fl, "x", "uid-c2", now)
    };
    let orphaned = ClaimWrite::Orphaned("uid-c1".into());
    assert_eq!(on(None), orphaned, "gone");
    let mut deleting = claim("c1", "ga", None, None);
    deleting.deleting = true;
    assert_eq!(on(Some(deleting)), orphaned, "deleting");
    let mut denied = claim("c1", "ga", None, None);
    denied.denied = true;
    assert_eq!(on(Some(denied)), orphaned, "denied");
    assert_eq!(on(Some(claim("c1", "ga", None, Some("z")))), orphaned);
    assert_eq!(
        on(Some(claim("c1", "ga", None, None))),
        ClaimWrite::Claimant("uid-c1".into())
    );
    assert_eq!(
        on(Some(claim("c1", "ga", None, Some("x")))),
        ClaimWrite::Checked
    );
    let inv = inventory(vec![x("uid-c2")], vec![], vec![]);
    assert_eq!(
        claim_write_on(&inv, &fl, "x", "uid-c2", now),
        ClaimWrite::Own
    );
}

#[test]
fn a_use_is_contested_only_by_another_tenant_or_a_dirty_sibling() {
    use crate::selection::Check;
    let keys = ResolvedLabelKeys::default();
    for label in [
        crate::pools::lifecycle::CORDONED,
        crate::pools::lifecycle::CLEANUP_FAILED,
        keys.shared.as_str(),
        keys.internal.as_str(),
    ] {
        let mut held = Labels::new();
        held.insert(label.into(), "true".into());
        assert_eq!(
            after_claim(&keys, "ga", Check::Use, [("y", Some(&held))]),
            AfterClaim::Bind,
            "{label}"
        );
        assert!(matches!(
            after_claim(&keys, "ga", Check::ClaimWrite, [("y", Some(&held))]),
            AfterClaim::GiveBack { .. }
        ));
    }
    let mut theirs = Labels::new();
    theirs.insert(keys.tenant_name.clone(), "gb".into());
    let mut dirty = Labels::new();
    dirty.insert(keys.dirty.clone(), "true".into());
    for held in [theirs, dirty] {
        assert!(matches!(
            after_claim(&keys, "ga", Check::Use, [("y", Some(&held))]),
            AfterClaim::GiveBack { .. }
        ));
    }
}
