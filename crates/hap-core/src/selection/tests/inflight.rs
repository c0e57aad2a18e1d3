//! Bound checks and the life of in-flight records: they end when the index shows the write, when
//! the server refused it, or when they expire — never because a view lacks the object.

use super::*;
use crate::pools::BindingEntry;

fn entry(view: BindingView) -> BindingEntry {
    inventory(vec![view.clone()], vec![], vec![])
        .binding(&view.name)
        .cloned()
        .unwrap()
}

fn at(mut b: BindingView, rv: &str) -> BindingView {
    b.resource_version = Some(rv.into());
    b
}

fn claim_choice(b: &str, rv: &str) -> Choice {
    Choice::Claim {
        binding: b.into(),
        expected_resource_version: Some(rv.into()),
    }
}

#[test]
fn check_bound_keeps_intact_bindings_and_reports_lost_ones() {
    let inv = inventory(
        vec![
            owned("mine", "ga"),
            owned("theirs", "gb"),
            binding("bare", AWS),
            shared("sh"),
            binding("new", AWS),
        ],
        vec![],
        vec![],
    );
    let mut fl = InFlight::default();
    let now = Instant::now();
    let bound = |b: &str| claim("c", "ga", None, Some(b));
    let p = pool("aws", false, false);
    let pol = MultiAccountPolicy::default();
    assert_eq!(
        pick(&inv, &fl, &bound("mine"), &p, &pol),
        Choice::Bound {
            binding: "mine".into()
        }
    );
    assert_eq!(
        pick(&inv, &fl, &bound("sh"), &p, &pol),
        Choice::Bound {
            binding: "sh".into()
        }
    );
    for (b, text) in [
        ("gone", "no longer exists"),
        ("theirs", "tenantName=gb, not ga"),
        ("bare", "no longer carries"),
    ] {
        match check_bound(&inv, &fl, &bound(b), now) {
            Some(Choice::Lost { binding, message }) => {
                assert!(binding == b && message.contains(text), "{message}")
            }
            other => panic!("{b}: {other:?}"),
        }
    }
    // Claimed a moment ago: the index does not show the label yet, but the claim is not lost.
    let c0 = claim("c0", "ga", None, None);
    fl.record(&c0, &p, &claim_choice("new", "rv-new"), now);
    assert!(matches!(
        check_bound(&inv, &fl, &bound("new"), now),
        Some(Choice::Lost { .. })
    ));
    fl.claim_written("new", now);
    assert_eq!(
        check_bound(&inv, &fl, &bound("new"), now),
        Some(Choice::Bound {
            binding: "new".into()
        })
    );
    assert_eq!(
        check_bound(&inv, &fl, &claim("c", "ga", None, None), now),
        None
    );
    // A lost (Failed) claim whose binding came back is Bound again, and never rebinds.
    let failed = ClaimView {
        lost: true,
        ..bound("mine")
    };
    assert_eq!(
        pick(&inv, &fl, &failed, &p, &pol),
        Choice::Bound {
            binding: "mine".into()
        }
    );
}

#[test]
fn a_claim_record_ends_only_when_the_index_shows_a_later_version() {
    let p = pool("aws", false, false);
    let now = Instant::now();
    let mut fl = InFlight::new(Duration::from_secs(60));
    let (c1, c2) = (claim("c1", "ga", None, None), claim("c2", "gb", None, None));
    fl.record(&c1, &p, &claim_choice("x", "5"), now);
    fl.record(&c2, &p, &claim_choice("y", "5"), now);
    fl.claim_written("x", now);
    // The version the write was based on, or an older one (a view that went back): kept.
    for rv in ["5", "4"] {
        fl.observe_binding("x", Some(&entry(at(binding("x", AWS), rv))));
        assert!(fl.claim_of("x", now).is_some(), "ended by version {rv}");
    }
    // Still writing: kept whatever the index says.
    fl.observe_binding("y", Some(&entry(at(owned("y", "gz"), "9"))));
    assert!(fl.claim_of("y", now).is_some());
    fl.observe_binding("x", Some(&entry(at(owned("x", "ga"), "6"))));
    assert!(fl.claim_of("x", now).is_none());
    assert_eq!(
        fl.assigned(now).keys().copied().collect::<Vec<_>>(),
        ["x", "y"]
    );
    // Deleted: nothing to wait for.
    fl.observe_binding("y", None);
    assert!(fl.claim_of("y", now).is_none());
    let later = now + Duration::from_secs(61);
    assert!(fl.assigned(later).is_empty());
    fl.expire(later);
    assert!(fl.is_empty());
}

#[test]
fn an_unknown_claim_write_is_kept_retried_and_ended_by_the_index() {
    // A write that timed out used to be erased although it may have
    // committed, so a sibling of the same tenant claimed a second binding.
    let p = pool("aws", false, false);
    let now = Instant::now();
    let inv = inventory(vec![binding("x", AWS), binding("y", AWS)], vec![], vec![]);
    let pol = MultiAccountPolicy::default();
    let c1 = claim("c1", "ga", None, None);
    let mut fl = InFlight::default();
    let first = pick(&inv, &fl, &c1, &p, &pol);
    let Choice::Claim { binding: b, .. } = first.clone() else {
        panic!("{first:?}")
    };
    fl.record(&c1, &p, &first, now);
    fl.claim_unknown(&b, now);
    // The sibling waits; the claim itself retries the same compare-and-swap.
    let c2 = claim("c2", "ga", None, None);
    assert_eq!(
        pick(&inv, &fl, &c2, &p, &pol),
        Choice::Wait { binding: b.clone() }
    );
    let retry = pick(&inv, &fl, &c1, &p, &pol);
    assert_eq!(retry, first);
    fl.record(&c1, &p, &retry, now);
    // The retry is refused: the first attempt may have won; still in doubt.
    fl.claim_failed(&b);
    assert_eq!(
        fl.claim_of(&b, now).map(|p| p.state),
        Some(WriteState::Unknown)
    );
    assert_eq!(
        pick(&inv, &fl, &c2, &p, &pol),
        Choice::Wait { binding: b.clone() }
    );
    // The index shows the binding at a later version: the outcome is known, the record ends.
    fl.observe_binding(&b, Some(&entry(at(owned(&b, "ga"), "rv-2"))));
    assert!(fl.claim_of(&b, now).is_none());
    // Without doubt a refusal ends the record at once.
    let mut fl = InFlight::default();
    fl.record(&c1, &p, &first, now);
    fl.claim_failed(&b);
    assert!(fl.is_empty());
}

#[test]
fn an_assignment_ends_when_the_index_shows_the_claim_bound_or_moved_on() {
    let p = pool("aws", false, false);
    let now = Instant::now();
    let mut fl = InFlight::default();
    let c = ClaimView {
        resource_version: Some("7".into()),
        ..claim("c", "ga", Some("s"), None)
    };
    fl.record(&c, &p, &use_of("b", UseReason::Reused), now);
    // Defect 1: a view that does not contain the claim yet ends nothing (it used to).
    fl.observe_claim("uid-c", Some(&c));
    assert!(fl.assignment_of("uid-c", now).is_some());
    fl.assignment_unknown("uid-c", now);
    fl.observe_claim("uid-c", Some(&c));
    assert_eq!(
        fl.assignment_of("uid-c", now).map(|a| a.state),
        Some(WriteState::Unknown)
    );
    let moved = ClaimView {
        resource_version: Some("8".into()),
        ..c.clone()
    };
    fl.observe_claim("uid-c", Some(&moved));
    assert!(fl.assignment_of("uid-c", now).is_none());
    // Written: ends when the claim shows the binding.
    fl.record(&c, &p, &use_of("b", UseReason::Reused), now);
    fl.assignment_written("uid-c", now);
    let bound = ClaimView {
        bound_binding: Some("b".into()),
        resource_version: Some("9".into()),
        ..c.clone()
    };
    fl.observe_claim("uid-c", Some(&bound));
    assert!(fl.is_empty());
    // Deleted from the index: gone.
    fl.record(&c, &p, &use_of("b", UseReason::Reused), now);
    fl.observe_claim("uid-c", None);
    assert!(fl.is_empty());
}

#[test]
fn a_written_release_ends_when_the_index_moves_past_its_base_version() {
    let now = Instant::now();
    let mut fl = InFlight::default();
    fl.release_started("b", Some("3".into()), now);
    let stale = entry(at(owned("b", "ga"), "3"));
    fl.observe_binding("b", Some(&stale));
    assert!(fl.is_releasing("b", now), "still writing: kept");
    fl.release_written("b", now);
    fl.observe_binding("b", Some(&stale));
    assert!(fl.is_releasing("b", now), "the index has not caught up yet");
    fl.observe_binding("b", Some(&entry(at(owned("b", "ga"), "4"))));
    assert!(!fl.is_releasing("b", now));
    fl.release_started("b", None, now);
    fl.release_unknown("b", now);
    fl.release_started("b", None, now);
    fl.release_failed("b");
    assert!(
        fl.is_releasing("b", now),
        "a refused retry of an unknown release proves nothing"
    );
}

#[test]
fn a_deleted_claim_takes_its_cluster_off_the_binding() {
    let p = pool("aws", false, false);
    let now = Instant::now();
    let mut fl = InFlight::default();
    let c = claim("c", "ga", Some("s"), None);
    fl.record(&c, &p, &use_of("b", UseReason::Reused), now);
    assert_eq!(fl.bindings_in_use(now), BTreeSet::from(["b".to_string()]));
    assert_eq!(
        fl.assignment_of("uid-c", now)
            .map(|a| (a.binding.as_str(), a.state)),
        Some(("b", WriteState::Writing))
    );
    fl.assignment_written("uid-c", now);
    assert_eq!(
        fl.assignment_of("uid-c", now).map(|a| a.state),
        Some(WriteState::Written)
    );
    assert!(fl.assignment_of("uid-c", now + DEFAULT_TTL).is_none());
    fl.forget_claim("uid-c", now);
    assert!(fl.assigned(now).is_empty() && fl.is_empty());
}

#[test]
fn a_claim_write_given_back_is_neither_the_claims_nor_free_until_the_index_shows_it() {
    let p = pool("aws", false, false);
    let c = claim("c", "ga", None, None);
    let mut fl = InFlight::default();
    let now = Instant::now();
    fl.record(&c, &p, &claim_choice("x", "5"), now);
    fl.claim_written("x", now);
    assert_eq!(fl.won_by(&c.uid, now), Some("x"));
    // Given back at version 6 (the claim write's): not the claim's, not anyone's yet.
    fl.release_started("x", Some("6".into()), now);
    fl.gave_back(&c.uid, "x");
    fl.release_written("x", now);
    assert_eq!(fl.won_by(&c.uid, now), None);
    assert!(fl.claim_of("x", now).is_none());
    assert!(fl.is_releasing("x", now));
    // The index still at the claim write: it stays held back.
    fl.observe_binding("x", Some(&entry(at(owned("x", "ga"), "6"))));
    assert!(fl.is_releasing("x", now));
    // The index shows the give-back.
    fl.observe_binding("x", Some(&entry(at(binding("x", AWS), "7"))));
    assert!(!fl.is_releasing("x", now));
}
