//! Tests of binding states: the precedence table, counts that agree with the pool figures, and
//! the dirty clock and claim rate taken from the records on the bindings.

use std::collections::BTreeSet;

use jiff::{SignedDuration, Timestamp};
use proptest::prelude::*;

use super::*;
use crate::pools::BindingView;
use crate::pools::fixtures::{binding, claim, inventory, pool, shoot};

fn facts(clusters: usize, cordoned: bool, suspect: bool, cooling_down: bool) -> Facts {
    Facts {
        clusters,
        cordoned,
        suspect,
        cooling_down,
        ..Facts::default()
    }
}

/// The cleanup job's mark outranks every fact but a cluster on an unclaimed binding, in every
/// role that has a state.
#[test]
fn a_failed_cleanup_outranks_cordon_suspect_and_the_cycle_but_not_a_cluster_without_tenant() {
    use BindingState as S;
    let failed = |clusters, cordoned, suspect, cooling_down| Facts {
        cleanup_failed: true,
        ..facts(clusters, cordoned, suspect, cooling_down)
    };
    let owned = BindingClass::Owned {
        tenant: "ga".into(),
    };
    let dirty = BindingClass::Dirty { tenant: None };
    let free = BindingClass::Claimable;
    let cases = [
        (&dirty, failed(0, false, false, false), S::CleanupFailed),
        (&dirty, failed(0, true, true, false), S::CleanupFailed),
        (&free, failed(0, true, true, true), S::CleanupFailed),
        (&free, failed(0, false, false, false), S::CleanupFailed),
        (&owned, failed(2, true, false, false), S::CleanupFailed),
        (
            &BindingClass::InternalFree,
            failed(0, false, false, false),
            S::CleanupFailed,
        ),
        (&free, failed(1, true, true, true), S::InUseWithoutTenant),
    ];
    for (class, f, want) in cases {
        assert_eq!(state_of(class, f), Some(want), "{class:?} {f:?}");
    }
    assert_eq!(
        state_of(&BindingClass::Shared, failed(0, false, false, false)),
        None
    );
    let pos = |s| BindingState::ALL.iter().position(|x| *x == s);
    assert_eq!(
        pos(S::CleanupFailed),
        Some(5),
        "listed right after Cordoned"
    );
}

#[test]
fn state_follows_the_documented_precedence() {
    use BindingState as S;
    let owned = BindingClass::Owned {
        tenant: "ga".into(),
    };
    let dirty = BindingClass::Dirty { tenant: None };
    let free = BindingClass::Claimable;
    let cases = [
        (&free, facts(0, false, false, false), S::Free),
        (&free, facts(0, false, false, true), S::CoolingDown),
        (&free, facts(1, true, true, true), S::InUseWithoutTenant),
        (&free, facts(0, true, true, true), S::Cordoned),
        (&free, facts(0, false, true, true), S::Suspect),
        (&owned, facts(2, false, false, false), S::Claimed),
        (&owned, facts(2, true, false, false), S::Cordoned),
        (&owned, facts(2, false, true, false), S::Suspect),
        (&dirty, facts(0, false, false, false), S::Dirty),
        (&dirty, facts(1, false, false, true), S::Dirty),
        (&dirty, facts(0, true, false, false), S::Cordoned),
        (
            &BindingClass::InternalFree,
            facts(0, false, false, false),
            S::Internal,
        ),
    ];
    for (class, f, want) in cases {
        assert_eq!(state_of(class, f), Some(want), "{class:?} {f:?}");
    }
    assert_eq!(
        state_of(&BindingClass::Shared, facts(3, true, true, true)),
        None
    );
    // Quarantine: only an unclaimed binding, after every mark a person or a Shoot set, and
    // before the cooldown.
    let q = |f: Facts| Facts {
        quarantined: true,
        ..f
    };
    let quarantined = [
        (&free, q(facts(0, false, false, false)), S::Quarantined),
        (&free, q(facts(0, false, false, true)), S::Quarantined),
        (&free, q(facts(0, true, false, false)), S::Cordoned),
        (&free, q(facts(0, false, true, false)), S::Suspect),
        (
            &free,
            q(facts(1, false, false, false)),
            S::InUseWithoutTenant,
        ),
        (&owned, q(facts(1, false, false, false)), S::Claimed),
    ];
    for (class, f, want) in quarantined {
        assert_eq!(state_of(class, f), Some(want), "{class:?} {f:?}");
    }
}

#[test]
fn every_state_is_counted_per_dedicated_pool_and_shared_pools_have_none() {
    let aws = |extra: &[(&'static str, &'static str)]| {
        let mut l = vec![("hyperscalerType", "aws")];
        l.extend_from_slice(extra);
        l
    };
    let inv = inventory(
        vec![
            binding("free", &aws(&[])),
            binding("used", &aws(&[])),
            binding("own", &aws(&[("tenantName", "ga")])),
            binding("dirty", &aws(&[("tenantName", "gb"), ("dirty", "true")])),
            binding("int", &aws(&[("internal", "true")])),
            binding("cord", &aws(&[(CORDONED, "true")])),
            binding("not-cord", &aws(&[(CORDONED, "yes")])),
            binding(
                "failed",
                &aws(&[
                    ("tenantName", "gc"),
                    ("dirty", "true"),
                    (CLEANUP_FAILED, "true"),
                ]),
            ),
            binding("not-failed", &aws(&[(CLEANUP_FAILED, "yes")])),
            binding("sus", &aws(&[])),
            binding("cool", &aws(&[])),
            binding("sh", &aws(&[("shared", "true")])),
        ],
        vec![claim("c", "ga", Some("s1"), Some("own"))],
        vec![shoot("s1", Some("own")), shoot("x", Some("used"))],
    );
    let suspect = BTreeSet::from(["sus".to_string()]);
    let cooling = BTreeSet::from(["cool".to_string()]);
    let marks = Marks {
        suspect: Some(&suspect),
        cooling_down: Some(&cooling),
        ..Marks::default()
    };
    let got = inv
        .states(&pool("aws", false, false), marks)
        .expect("dedicated");
    let named: Vec<(&str, usize)> = got.iter().map(|(s, n)| (s.as_str(), *n)).collect();
    assert_eq!(
        named,
        [
            ("Free", 3),
            ("Claimed", 1),
            ("Dirty", 1),
            ("CoolingDown", 1),
            ("Cordoned", 1),
            ("CleanupFailed", 1),
            ("Suspect", 1),
            ("InUseWithoutTenant", 1),
            ("Internal", 1),
            ("Quarantined", 0),
        ]
    );
    assert_eq!(inv.states(&pool("aws", false, true), marks), None);
    // A pool nobody has bindings in still lists every state, at zero.
    let empty = inv
        .states(&pool("gcp", false, false), marks)
        .expect("dedicated");
    assert!(empty.len() == BindingState::ALL.len() && empty.values().all(|n| *n == 0));
}

#[test]
fn the_dirty_clock_keeps_the_first_sight_and_forgets_cleaned_bindings() {
    let t0 = Timestamp::UNIX_EPOCH;
    let t1 = t0 + SignedDuration::from_secs(60);
    let t2 = t1 + SignedDuration::from_secs(60);
    let mut clock = DirtyClock::default();
    clock.observe(["a"], t0);
    clock.observe(["a", "b"], t1);
    assert_eq!((clock.since("a"), clock.since("b")), (Some(t0), Some(t1)));
    assert_eq!(clock.oldest(["a", "b"]), Some(t0));
    // a was cleaned, then dirtied again: a new clock.
    clock.observe(["b"], t2);
    assert_eq!(clock.since("a"), None);
    clock.observe(["a", "b"], t2);
    assert_eq!((clock.since("a"), clock.since("b")), (Some(t2), Some(t1)));
}

fn arb_binding(i: usize) -> impl Strategy<Value = crate::pools::BindingView> {
    (
        prop::sample::select(vec!["aws", "gcp"]),
        any::<bool>(),
        prop::option::of(prop::sample::select(vec!["ga", "gb"])),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(move |(t, eu, tenant, dirty, internal, shared, cordoned)| {
            let mut l: Vec<(&str, &str)> = vec![("hyperscalerType", t)];
            if eu {
                l.push(("euAccess", "true"));
            }
            if let Some(t) = tenant {
                l.push(("tenantName", t));
            }
            if dirty {
                l.push(("dirty", "true"));
            }
            if internal {
                l.push(("internal", "true"));
            }
            if shared {
                l.push(("shared", "true"));
            }
            if cordoned {
                l.push((CORDONED, "true"));
            }
            binding(&format!("b{i}"), &l)
        })
}

fn arb_bindings() -> impl Strategy<Value = Vec<crate::pools::BindingView>> {
    (0usize..12).prop_flat_map(|n| (0..n).map(arb_binding).collect::<Vec<_>>())
}

proptest! {
    /// States partition a dedicated pool: they add up to its total, and without cordons they
    /// agree with the figures (free, claimed, dirty) and with `bindingsInUse`.
    #[test]
    fn states_partition_the_pool_and_agree_with_the_figures(
        bindings in arb_bindings(),
        used in proptest::collection::vec(0usize..12, 0..6),
    ) {
        let shoots: Vec<_> = used
            .iter()
            .enumerate()
            .map(|(i, b)| shoot(&format!("s{i}"), Some(&format!("b{b}"))))
            .collect();
        let inv = inventory(bindings, vec![], shoots);
        for (key, _) in inv.pools() {
            let Some(states) = inv.states(key, Marks::default()) else {
                prop_assert!(key.shared);
                continue;
            };
            let f = inv.figures(key);
            let sum: usize = states.values().sum();
            prop_assert_eq!(sum as i64, f.total);
            let cordoned = states[&BindingState::Cordoned] as i64;
            let n = |s: BindingState| states[&s] as i64;
            // Cordoned bindings are not free in the figures either (selection never claims them).
            prop_assert_eq!(n(BindingState::Free), f.free);
            let in_use = inv
                .bindings_in_use()
                .into_iter()
                .filter(|u| u.reason == "InUseWithoutTenant" && u.hyperscaler_type == key.hyperscaler_type && u.eu_access == key.eu_access)
                .map(|u| u.count)
                .sum::<i64>();
            prop_assert_eq!(n(BindingState::InUseWithoutTenant), in_use);
            if cordoned == 0 {
                prop_assert_eq!(
                    (n(BindingState::Claimed), n(BindingState::Dirty)),
                    (f.claimed, f.dirty)
                );
            }
        }
    }
}

#[test]
fn suspects_need_a_configured_code_on_enough_shoots() {
    let mut bad = shoot("s1", Some("a"));
    bad.error_codes = vec!["ERR_INFRA_UNAUTHORIZED".into()];
    let mut limited = shoot("s2", Some("b"));
    limited.error_codes = vec!["ERR_INFRA_RATE_LIMITS_EXCEEDED".into()];
    let mut quota = shoot("s3", Some("b"));
    quota.error_codes = vec!["ERR_INFRA_QUOTA_EXCEEDED".into()];
    let inv = inventory(
        vec![
            binding("a", &[("hyperscalerType", "aws"), ("tenantName", "ga")]),
            binding("b", &[("hyperscalerType", "aws"), ("tenantName", "gb")]),
        ],
        vec![],
        vec![bad, limited, quota, shoot("s4", Some("a"))],
    );
    let codes: Vec<String> = crate::api::lifecycle::DEFAULT_SUSPECT_CODES
        .iter()
        .map(|c| c.to_string())
        .collect();
    let got = inv.suspects(&codes, 1);
    let names: Vec<(&str, usize)> = got.iter().map(|(b, (_, n))| (b.as_str(), *n)).collect();
    assert_eq!(names, [("a", 1), ("b", 1)]);
    assert!(inv.suspects(&codes, 2).is_empty());
    assert!(inv.suspects(&[], 1).is_empty());
    let suspect: BTreeSet<String> = got.keys().cloned().collect();
    let marks = Marks {
        suspect: Some(&suspect),
        ..Marks::default()
    };
    assert_eq!(inv.state("a", marks), Some(BindingState::Suspect));
}

/// A binding with the operator's records, dedicated to aws.
fn recorded(name: &str, labels: &[(&str, &str)], records: &[(&str, Timestamp)]) -> BindingView {
    let mut all = vec![("hyperscalerType", "aws")];
    all.extend_from_slice(labels);
    let mut b = binding(name, &all);
    for (k, at) in records {
        b.annotations.insert((*k).into(), release_time(*at));
    }
    b
}

#[test]
fn the_claim_rate_counts_the_claims_recorded_in_the_window_and_the_forecast_divides_free_by_it() {
    let t0: Timestamp = "2026-11-26T00:00:00Z".parse().expect("time");
    let day = std::time::Duration::from_secs(86_400);
    let at = |h: i64| t0 + SignedDuration::from_hours(h);
    let aws = pool("aws", false, false);
    // Claimed at 0 h, 6 h, 12 h and 30 h; the one at 6 h released since, the one at 12 h is
    // free again: a claim counts whatever became of the binding.
    let inv = inventory(
        vec![
            recorded("a", &[("tenantName", "t1")], &[(CLAIMED_AT, at(0))]),
            recorded("b", &[("dirty", "true")], &[(CLAIMED_AT, at(6))]),
            recorded("c", &[], &[(CLAIMED_AT, at(12))]),
            recorded("d", &[("tenantName", "t4")], &[(CLAIMED_AT, at(30))]),
            recorded("e", &[], &[]),
        ],
        vec![],
        vec![],
    );
    // Within the last 24 h before 30 h: the claims at 12 h and 30 h (6 h is exactly 24 h ago).
    assert_eq!(inv.claims_in_window(&aws, at(30), day), 2);
    assert_eq!(inv.claims_in_window(&aws, at(30), 2 * day), 4);
    assert_eq!(
        inv.claims_in_window(&pool("gcp", false, false), at(30), day),
        0
    );
    let (rate, days) = forecast(2, day, 5);
    assert_eq!((rate, days), (2.0, Some(2.5)));
    assert_eq!(forecast(0, day, 5), (0.0, None));
}

#[test]
fn a_dirty_binding_is_dirty_since_its_release_record_unless_a_later_claim_outdates_it() {
    let t0: Timestamp = "2026-11-26T10:00:00Z".parse().expect("time");
    let later = t0 + SignedDuration::from_hours(2);
    let with = |pairs: &[(&str, Timestamp)]| -> std::collections::BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, t)| ((*k).to_string(), release_time(*t)))
            .collect()
    };
    assert_eq!(dirty_since(&with(&[(RELEASED_AT, t0)])), Some(t0));
    assert_eq!(
        dirty_since(&with(&[(CLAIMED_AT, t0), (RELEASED_AT, later)])),
        Some(later)
    );
    // Claimed and released within one second: the records are equal, the release counts.
    assert_eq!(
        dirty_since(&with(&[(CLAIMED_AT, t0), (RELEASED_AT, t0)])),
        Some(t0)
    );
    // Claimed again after that release, then dirty without a release by the operator.
    assert_eq!(
        dirty_since(&with(&[(RELEASED_AT, t0), (CLAIMED_AT, later)])),
        None
    );
    assert_eq!(dirty_since(&with(&[])), None);
    let mut bad = with(&[]);
    bad.insert(RELEASED_AT.into(), "yesterday".into());
    assert_eq!(dirty_since(&bad), None);
}

/// Two processes that list the same objects at different times (a restart, a new leader) show
/// the same dirty-since and claims in the window; only a binding without a release record is
/// dated by the first pass that saw it dirty.
#[test]
fn two_processes_listing_the_same_objects_later_show_the_same_figures() {
    let t0: Timestamp = "2026-11-26T10:00:00Z".parse().expect("time");
    let at = |m: i64| t0 + SignedDuration::from_mins(m);
    let day = std::time::Duration::from_secs(86_400);
    let aws = pool("aws", false, false);
    let objects = || {
        vec![
            recorded(
                "a",
                &[("dirty", "true")],
                &[(CLAIMED_AT, at(0)), (RELEASED_AT, at(5))],
            ),
            recorded(
                "b",
                &[("dirty", "true")],
                &[(CLAIMED_AT, at(1)), (RELEASED_AT, at(20))],
            ),
            recorded("c", &[("tenantName", "t")], &[(CLAIMED_AT, at(2))]),
        ]
    };
    let seen = |now: Timestamp, bindings: Vec<BindingView>| {
        let mut inv = inventory(bindings, vec![], vec![]);
        inv.lifecycle_tick(now);
        let p = inv.lifecycles().remove(0);
        (
            p.oldest_dirty_since.map(|t| t.0),
            inv.claims_in_window(&aws, at(30), day),
        )
    };
    let first = seen(at(6), objects());
    assert_eq!(first, (Some(at(5)), 3));
    assert_eq!(seen(at(90), objects()), first);
    // Marked dirty by hand, without a release record: dated by the first pass that saw it.
    let mut by_hand = objects();
    by_hand.push(recorded("d", &[("dirty", "true")], &[]));
    assert_eq!(seen(at(3), by_hand.clone()).0, Some(at(3)));
    assert_eq!(seen(at(90), by_hand).0, Some(at(5)));
}
