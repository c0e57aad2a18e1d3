//! Bound checks and the life of in-flight expectations.

use super::*;

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
    // Claimed a moment ago: the cache does not show the label yet, but the claim is not lost.
    let c0 = claim("c0", "ga", None, None);
    let choice = Choice::Claim {
        binding: "new".into(),
        expected_resource_version: Some("rv-new".into()),
    };
    fl.record(&c0, &p, &choice, now);
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
}

#[test]
fn observe_ends_expectations_the_cache_shows_and_expired_ones() {
    let p = pool("aws", false, false);
    let now = Instant::now();
    let mut fl = InFlight::new(Duration::from_secs(60));
    let c1 = claim("c1", "ga", None, None);
    let c2 = claim("c2", "gb", None, None);
    fl.record(
        &c1,
        &p,
        &Choice::Claim {
            binding: "x".into(),
            expected_resource_version: Some("1".into()),
        },
        now,
    );
    fl.record(
        &c2,
        &p,
        &Choice::Claim {
            binding: "y".into(),
            expected_resource_version: Some("1".into()),
        },
        now,
    );
    fl.claim_written("x", now);
    let mut x = owned("x", "ga");
    x.resource_version = Some("1".into());
    let mut y = binding("y", AWS);
    y.resource_version = Some("2".into());
    let stale = inventory(
        vec![x.clone(), y.clone()],
        vec![c1.clone(), c2.clone()],
        vec![],
    );
    fl.observe(&stale, now);
    // x: written but the cache is still at the version the write was based on. y: still writing.
    assert!(fl.claim_of("x", now).is_some() && fl.claim_of("y", now).is_some());
    assert_eq!(fl.assigned(now).len(), 2);
    x.resource_version = Some("2".into());
    let mut c1_bound = c1.clone();
    c1_bound.bound_binding = Some("x".into());
    fl.observe(&inventory(vec![x, y], vec![c1_bound, c2], vec![]), now);
    assert!(fl.claim_of("x", now).is_none());
    assert!(fl.claim_of("y", now).is_some());
    assert_eq!(fl.assigned(now).keys().copied().collect::<Vec<_>>(), ["y"]);
    let later = now + Duration::from_secs(61);
    assert!(fl.claim_of("y", later).is_none() && fl.assigned(later).is_empty());
    fl.observe(&stale, later);
    assert!(fl.is_empty());
}

#[test]
fn a_relist_forgets_written_entries_but_not_writes_in_progress() {
    let p = pool("aws", false, false);
    let t0 = Instant::now();
    let mut fl = InFlight::default();
    let (c1, c2) = (claim("c1", "ga", None, None), claim("c2", "gb", None, None));
    fl.record(
        &c1,
        &p,
        &Choice::Claim {
            binding: "x".into(),
            expected_resource_version: None,
        },
        t0,
    );
    fl.record(
        &c2,
        &p,
        &Choice::Claim {
            binding: "y".into(),
            expected_resource_version: None,
        },
        t0,
    );
    fl.claim_written("x", t0);
    fl.assignment_written("uid-c1", t0);
    fl.release_started("z", None, t0);
    fl.release_written("z", t0);
    assert_eq!(fl.len(), 5);
    fl.forget_written_before(t0 + Duration::from_millis(1));
    assert!(fl.claim_of("x", t0).is_none() && fl.claim_of("y", t0).is_some());
    assert!(!fl.is_releasing("z", t0));
    assert_eq!(fl.bindings_in_use(t0), BTreeSet::from(["y".to_string()]));
    fl.release_started("z", None, t0);
    fl.release_failed("z");
    assert!(!fl.is_releasing("z", t0));
}

#[test]
fn a_written_release_ends_when_the_cache_moves_past_its_base_version() {
    let now = Instant::now();
    let mut fl = InFlight::default();
    fl.release_started("b", Some("rv-b".into()), now);
    let stale = inventory(vec![owned("b", "ga")], vec![], vec![]);
    fl.observe(&stale, now);
    assert!(
        fl.is_releasing("b", now),
        "still writing: kept whatever the cache says"
    );
    fl.release_written("b", now);
    fl.observe(&stale, now);
    assert!(fl.is_releasing("b", now), "the cache has not caught up yet");
    let mut moved = owned("b", "ga");
    moved.resource_version = Some("rv-b2".into());
    fl.observe(&inventory(vec![moved], vec![], vec![]), now);
    assert!(!fl.is_releasing("b", now));
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
    fl.forget_claim("uid-c");
    assert!(fl.assigned(now).is_empty() && fl.is_empty());
}
