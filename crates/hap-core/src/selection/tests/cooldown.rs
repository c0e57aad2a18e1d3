//! Cooldown and spread: a binding released by one tenant is kept from the others for
//! the cooldown; the never-used and then the longest-released free binding is taken first.

use jiff::{SignedDuration, Timestamp};

use super::*;
use crate::pools::lifecycle::{Cooldown, RELEASED_AT, RELEASED_BY, release_time};

fn released(name: &str, by: &str, at: Timestamp) -> BindingView {
    let mut b = binding(name, AWS);
    b.annotations.insert(RELEASED_AT.into(), release_time(at));
    b.annotations.insert(RELEASED_BY.into(), by.into());
    b
}

fn now() -> Timestamp {
    "2026-11-26T12:00:00Z".parse().expect("time")
}

fn hours(h: i64) -> SignedDuration {
    SignedDuration::from_hours(h)
}

fn cooling(period_h: u64) -> MultiAccountPolicy {
    policy(&[], &[]).with_cooldown(Some(Cooldown {
        period: std::time::Duration::from_secs(period_h * 3600),
        now: now(),
    }))
}

#[test]
fn a_binding_released_within_the_cooldown_goes_only_back_to_its_last_tenant() {
    let p = pool("aws", false, false);
    let inv = inventory(
        vec![released("a", "ga-1", now() - hours(2))],
        vec![],
        vec![],
    );
    let other = claim("c", "ga-2", Some("s"), None);
    match pick(&inv, &InFlight::default(), &other, &p, &cooling(24)) {
        Choice::Exhausted { message, .. } => {
            assert!(
                message.contains("1 free but released by another tenant"),
                "{message}"
            )
        }
        got => panic!("expected Exhausted, got {got:?}"),
    }
    let same = claim("c", "ga-1", Some("s"), None);
    assert!(matches!(
        pick(&inv, &InFlight::default(), &same, &p, &cooling(24)),
        Choice::Claim { ref binding, .. } if binding == "a"
    ));
    // Past the cooldown, or without one, anyone may have it.
    for pol in [cooling(1), policy(&[], &[])] {
        assert!(matches!(
            pick(&inv, &InFlight::default(), &other, &p, &pol),
            Choice::Claim { ref binding, .. } if binding == "a"
        ));
    }
}

#[test]
fn never_used_bindings_go_first_then_the_one_released_longest_ago() {
    let p = pool("aws", false, false);
    let mut bindings = vec![
        released("old", "ga-x", now() - hours(300)),
        released("older", "ga-x", now() - hours(400)),
        released("recent", "ga-x", now() - hours(30)),
        binding("fresh", AWS),
    ];
    for (i, want) in ["fresh", "older", "old", "recent"].iter().enumerate() {
        let inv = inventory(bindings.clone(), vec![], vec![]);
        let c = claim("c", &format!("ga-{i}"), Some("s"), None);
        match pick(&inv, &InFlight::default(), &c, &p, &cooling(24)) {
            Choice::Claim { binding, .. } => assert_eq!(&binding, want),
            got => panic!("expected a claim of {want}, got {got:?}"),
        }
        bindings.retain(|b| b.name != *want);
    }
}

#[test]
fn a_released_binding_keeps_every_other_binding_of_its_credential_cooling_down() {
    use crate::pools::fixtures::on_secret;
    let p = pool("aws", false, false);
    // ga-1 released `aws-01` two hours ago; `aws-01-cb` references the same Secret and was
    // never released itself: the account is still cooling down, whichever binding is asked.
    let inv = inventory(
        vec![
            on_secret(released("aws-01", "ga-1", now() - hours(2)), "aws-01"),
            on_secret(binding("aws-01-cb", AWS), "aws-01"),
        ],
        vec![],
        vec![],
    );
    let other = claim("c", "ga-2", Some("s"), None);
    match pick(&inv, &InFlight::default(), &other, &p, &cooling(24)) {
        Choice::Exhausted { message, .. } => assert!(
            message.contains("2 free but released by another tenant"),
            "{message}"
        ),
        got => panic!("expected Exhausted, got {got:?}"),
    }
    // Its last tenant may have the account back, through either binding.
    let same = claim("c", "ga-1", Some("s"), None);
    assert!(matches!(
        pick(&inv, &InFlight::default(), &same, &p, &cooling(24)),
        Choice::Claim { .. }
    ));
    // Past the cooldown, anyone.
    assert!(matches!(
        pick(&inv, &InFlight::default(), &other, &p, &cooling(1)),
        Choice::Claim { .. }
    ));
}
