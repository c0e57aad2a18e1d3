use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use super::*;
use crate::pools::tests::{binding, claim, inventory, pool, shoot};
use crate::pools::{BindingView, ShootView};

const AWS: &[(&str, &str)] = &[("hyperscalerType", "aws")];

fn owned(name: &str, ga: &str) -> BindingView {
    binding(name, &[("hyperscalerType", "aws"), ("tenantName", ga)])
}

fn shared(name: &str) -> BindingView {
    binding(name, &[("hyperscalerType", "aws"), ("shared", "true")])
}

/// `n` Shoots named `<prefix>-<i>` on `binding`.
fn shoots(prefix: &str, binding: &str, n: usize) -> Vec<ShootView> {
    (0..n)
        .map(|i| shoot(&format!("{prefix}-{i}"), Some(binding)))
        .collect()
}

fn policy(allowed: &[&str], limits: &[(&str, i32)]) -> MultiAccountPolicy {
    let spec = MultiHyperscalerAccount {
        allowed_global_accounts: allowed.iter().map(|s| s.to_string()).collect(),
        limits: limits.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
    };
    MultiAccountPolicy::from_spec(Some(&spec))
}

fn pick(
    inv: &Inventory,
    fl: &InFlight,
    c: &ClaimView,
    p: &PoolKey,
    pol: &MultiAccountPolicy,
) -> Choice {
    let req = Request {
        claim: c,
        pool: p,
        provider_type: "aws",
    };
    select(inv, fl, &req, pol, &BTreeSet::new(), Instant::now())
}

fn use_of(b: &str, d: UseReason) -> Choice {
    Choice::Use {
        binding: b.into(),
        decision: d,
    }
}

#[test]
fn shared_takes_the_least_used_binding_ties_by_name() {
    let p = pool("aws", false, true);
    let mut s = shoots("a", "sh-a", 2);
    s.extend(shoots("b", "sh-b", 1));
    let inv = inventory(
        vec![
            shared("sh-a"),
            shared("sh-b"),
            shared("sh-c"),
            shared("sh-d"),
        ],
        vec![],
        s,
    );
    let c = claim("c", "ga", Some("new"), None);
    let fl = InFlight::default();
    assert_eq!(
        pick(&inv, &fl, &c, &p, &MultiAccountPolicy::default()),
        use_of("sh-c", UseReason::SharedLeastUsed)
    );
}

#[test]
fn shared_counts_in_flight_assignments_so_a_burst_spreads() {
    let p = pool("aws", false, true);
    let inv = inventory(vec![shared("sh-a"), shared("sh-b")], vec![], vec![]);
    let mut fl = InFlight::default();
    let now = Instant::now();
    let mut got = Vec::new();
    for i in 0..4 {
        let c = claim(&format!("c{i}"), "ga", Some(&format!("s{i}")), None);
        let req = Request {
            claim: &c,
            pool: &p,
            provider_type: "aws",
        };
        let choice = select(
            &inv,
            &fl,
            &req,
            &MultiAccountPolicy::default(),
            &BTreeSet::new(),
            now,
        );
        fl.record(&c, &p, &choice, now);
        got.push(choice);
    }
    let names: Vec<_> = got
        .iter()
        .map(|c| {
            if let Choice::Use { binding, .. } = c {
                binding.as_str()
            } else {
                ""
            }
        })
        .collect();
    assert_eq!(names, ["sh-a", "sh-b", "sh-a", "sh-b"]);
}

#[test]
fn shared_exhausted_names_pool_and_selector() {
    let p = pool("openstack_eu-de-1", false, true);
    let inv = inventory(vec![], vec![], vec![]);
    let c = claim("c", "ga", None, None);
    match pick(
        &inv,
        &InFlight::default(),
        &c,
        &p,
        &MultiAccountPolicy::default(),
    ) {
        Choice::Exhausted { pool: got, message } => {
            assert_eq!(got, p);
            assert!(
                message.contains("hyperscalerType=openstack_eu-de-1,!euAccess,shared=true"),
                "{message}"
            );
            assert!(message.contains("shared"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_cluster_already_on_a_binding_gets_it_again() {
    let p = pool("aws", false, true);
    let inv = inventory(
        vec![shared("sh-a"), shared("sh-b")],
        vec![],
        shoots("s", "sh-b", 3),
    );
    let c = claim("c", "ga", Some("s-1"), None);
    assert_eq!(
        pick(
            &inv,
            &InFlight::default(),
            &c,
            &p,
            &MultiAccountPolicy::default()
        ),
        use_of("sh-b", UseReason::Reused)
    );
}

#[test]
fn dedicated_reuses_the_tenants_binding_and_never_someone_elses() {
    let p = pool("aws", false, false);
    let inv = inventory(
        vec![
            owned("o-x", "other"),
            owned("o-ga", "ga"),
            binding("free", AWS),
        ],
        vec![],
        vec![],
    );
    let c = claim("c", "ga", None, None);
    assert_eq!(
        pick(
            &inv,
            &InFlight::default(),
            &c,
            &p,
            &MultiAccountPolicy::default()
        ),
        use_of("o-ga", UseReason::Reused)
    );
}

#[test]
fn dedicated_claims_only_clean_unlabelled_non_internal_bindings() {
    let p = pool("aws", false, false);
    let inv = inventory(
        vec![
            owned("a-other", "other"),
            binding("b-dirty", &[("hyperscalerType", "aws"), ("dirty", "true")]),
            binding(
                "c-internal",
                &[("hyperscalerType", "aws"), ("internal", "true")],
            ),
            shared("d-shared"),
            binding("e-eu", &[("hyperscalerType", "aws"), ("euAccess", "true")]),
            binding("z-free", AWS),
        ],
        vec![],
        vec![],
    );
    let c = claim("c", "ga", None, None);
    let want = Choice::Claim {
        binding: "z-free".into(),
        expected_resource_version: Some("rv-z-free".into()),
    };
    assert_eq!(
        pick(
            &inv,
            &InFlight::default(),
            &c,
            &p,
            &MultiAccountPolicy::default()
        ),
        want
    );
}

#[test]
fn an_internal_binding_already_held_by_the_tenant_is_used() {
    let p = pool("aws", false, false);
    let b = binding(
        "int",
        &[
            ("hyperscalerType", "aws"),
            ("internal", "true"),
            ("tenantName", "ga"),
        ],
    );
    let inv = inventory(vec![b, binding("free", AWS)], vec![], vec![]);
    let c = claim("c", "ga", None, None);
    assert_eq!(
        pick(
            &inv,
            &InFlight::default(),
            &c,
            &p,
            &MultiAccountPolicy::default()
        ),
        use_of("int", UseReason::Reused)
    );
}

#[test]
fn exhausted_dedicated_pool_names_the_claim_selector() {
    let p = pool("gcp", true, false);
    let inv = inventory(vec![owned("o", "other")], vec![], vec![]);
    let c = claim("c", "ga", None, None);
    match pick(
        &inv,
        &InFlight::default(),
        &c,
        &p,
        &MultiAccountPolicy::default(),
    ) {
        Choice::Exhausted { message, .. } => {
            assert!(
                message
                    .contains("hyperscalerType=gcp,euAccess=true,shared!=true,!dirty,!tenantName"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn fifty_claims_of_one_tenant_back_to_back_get_one_binding() {
    let p = pool("aws", false, false);
    let frees: Vec<_> = (0..10).map(|i| binding(&format!("f{i}"), AWS)).collect();
    let inv = inventory(frees, vec![], vec![]);
    let mut fl = InFlight::default();
    let now = Instant::now();
    let pol = MultiAccountPolicy::default();
    let claims: Vec<_> = (0..50)
        .map(|i| claim(&format!("c{i}"), "ga", None, None))
        .collect();
    let mut claimed = BTreeSet::new();
    let mut waits = 0;
    for c in &claims {
        let req = Request {
            claim: c,
            pool: &p,
            provider_type: "aws",
        };
        let choice = select(&inv, &fl, &req, &pol, &BTreeSet::new(), now);
        fl.record(c, &p, &choice, now);
        match choice {
            Choice::Claim { binding, .. } => {
                claimed.insert(binding);
            }
            Choice::Wait { .. } => waits += 1,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!((claimed.len(), waits), (1, 49));
    let x = claimed.pop_first().unwrap();
    fl.claim_written(&x, now);
    for c in &claims[1..] {
        assert_eq!(pick(&inv, &fl, c, &p, &pol), use_of(&x, UseReason::Reused));
    }
}

#[test]
fn a_binding_claimed_in_flight_for_one_tenant_is_never_offered_to_another() {
    let p = pool("aws", false, false);
    let inv = inventory(vec![binding("only", AWS)], vec![], vec![]);
    let mut fl = InFlight::default();
    let now = Instant::now();
    let c1 = claim("c1", "t1", None, None);
    let first = pick(&inv, &fl, &c1, &p, &MultiAccountPolicy::default());
    assert!(matches!(first, Choice::Claim { .. }));
    fl.record(&c1, &p, &first, now);
    let c2 = claim("c2", "t2", None, None);
    match pick(&inv, &fl, &c2, &p, &MultiAccountPolicy::default()) {
        Choice::Exhausted { message, .. } => {
            assert!(message.contains("1 being claimed"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    fl.claim_written("only", now);
    assert!(matches!(
        pick(&inv, &fl, &c2, &p, &MultiAccountPolicy::default()),
        Choice::Exhausted { .. }
    ));
    // A failed claim gives the binding back.
    fl.claim_failed("only");
    assert!(matches!(
        pick(&inv, &fl, &c2, &p, &MultiAccountPolicy::default()),
        Choice::Claim { .. }
    ));
}

#[test]
fn a_conflict_moves_the_tenant_to_its_next_candidate() {
    let p = pool("aws", false, false);
    let inv = inventory(
        (0..5).map(|i| binding(&format!("f{i}"), AWS)).collect(),
        vec![],
        vec![],
    );
    let c = claim("c", "ga", None, None);
    let req = Request {
        claim: &c,
        pool: &p,
        provider_type: "aws",
    };
    let pol = MultiAccountPolicy::default();
    let now = Instant::now();
    let mut order: Vec<String> = (0..5).map(|i| format!("f{i}")).collect();
    order.sort_by_key(|b| std::cmp::Reverse(weight("ga", b)));
    let mut exclude = BTreeSet::new();
    for expected in &order {
        let Choice::Claim { binding, .. } =
            select(&inv, &InFlight::default(), &req, &pol, &exclude, now)
        else {
            panic!("no claim")
        };
        assert_eq!(&binding, expected);
        exclude.insert(binding);
    }
    // Everything excluded: still the first candidate, the compare-and-swap decides.
    let again = select(&inv, &InFlight::default(), &req, &pol, &exclude, now);
    assert!(matches!(again, Choice::Claim { binding, .. } if binding == order[0]));
}

#[test]
fn different_tenants_start_on_different_candidates() {
    let p = pool("aws", false, false);
    let inv = inventory(
        (0..30).map(|i| binding(&format!("f{i:02}"), AWS)).collect(),
        vec![],
        vec![],
    );
    let firsts: BTreeSet<String> = (0..30)
        .filter_map(|t| {
            match pick(
                &inv,
                &InFlight::default(),
                &claim("c", &format!("ga-{t}"), None, None),
                &p,
                &policy(&[], &[]),
            ) {
                Choice::Claim { binding, .. } => Some(binding),
                _ => None,
            }
        })
        .collect();
    assert!(firsts.len() > 10, "30 tenants all piled onto {firsts:?}");
}

/// Seed 004: limit 200, the four examples of "Integration with Current HAP Implementation".
#[test]
fn fill_most_populated_matches_the_seed_examples() {
    let p = pool("aws", false, false);
    let pol = policy(&["*"], &[("aws", 200), ("default", 3)]);
    let c = claim("new", "ga", Some("new"), None);
    let case = |a: usize, b: Option<usize>| {
        let mut bs = vec![owned("cb-a", "ga"), binding("cb-free", AWS)];
        let mut s = shoots("a", "cb-a", a);
        if let Some(n) = b {
            bs.push(owned("cb-b", "ga"));
            s.extend(shoots("b", "cb-b", n));
        }
        pick(
            &inventory(bs, vec![], s),
            &InFlight::default(),
            &c,
            &p,
            &pol,
        )
    };
    assert_eq!(
        case(150, None),
        use_of("cb-a", UseReason::FilledMostPopulated)
    );
    assert!(matches!(case(200, None), Choice::Claim { binding, .. } if binding == "cb-free"));
    assert_eq!(
        case(200, Some(150)),
        use_of("cb-b", UseReason::FilledMostPopulated)
    );
    assert_eq!(
        case(199, Some(150)),
        use_of("cb-a", UseReason::FilledMostPopulated)
    );
}

/// Seed 004 §4: 250 clusters over a limit of 180 keep working; new ones go elsewhere until 179.
#[test]
fn bindings_over_the_limit_keep_their_clusters_but_get_no_new_one() {
    let p = pool("aws", false, false);
    let pol = policy(&["ga"], &[("aws", 180)]);
    let c = claim("new", "ga", None, None);
    let run = |n: usize| {
        let inv = inventory(
            vec![owned("cb-a", "ga"), binding("cb-free", AWS)],
            vec![],
            shoots("s", "cb-a", n),
        );
        pick(&inv, &InFlight::default(), &c, &p, &pol)
    };
    assert!(matches!(run(250), Choice::Claim { .. }));
    assert!(matches!(run(180), Choice::Claim { .. }));
    assert_eq!(run(179), use_of("cb-a", UseReason::FilledMostPopulated));
}

#[test]
fn limits_fall_back_to_default_then_to_none() {
    let pol = policy(&["a", "b"], &[("default", 3), ("aws", 5), ("gcp", 0)]);
    assert_eq!(
        (
            pol.limit_for("aws"),
            pol.limit_for("azure"),
            pol.limit_for("gcp")
        ),
        (Some(5), Some(3), Some(3))
    );
    assert!(pol.allows("a") && !pol.allows("c"));
    let none = policy(&["*"], &[]);
    assert_eq!(none.limit_for("aws"), None);
    assert!(none.allows("anyone"));
    assert!(!policy(&[], &[("default", 1)]).allows("a"));
    assert!(!MultiAccountPolicy::from_spec(None).allows("a"));
}

#[test]
fn without_allowlisting_limits_do_not_apply() {
    let p = pool("aws", false, false);
    let pol = policy(&["someone-else"], &[("default", 1)]);
    let inv = inventory(
        vec![owned("cb-a", "ga"), binding("cb-free", AWS)],
        vec![],
        shoots("s", "cb-a", 5),
    );
    let c = claim("c", "ga", None, None);
    assert_eq!(
        pick(&inv, &InFlight::default(), &c, &p, &pol),
        use_of("cb-a", UseReason::Reused)
    );
}

#[test]
fn in_flight_assignments_count_toward_the_limit() {
    let p = pool("aws", false, false);
    let pol = policy(&["*"], &[("aws", 2)]);
    let inv = inventory(
        vec![owned("cb-a", "ga"), binding("cb-free", AWS)],
        vec![],
        shoots("s", "cb-a", 1),
    );
    let mut fl = InFlight::default();
    let now = Instant::now();
    let c1 = claim("c1", "ga", Some("n1"), None);
    let first = pick(&inv, &fl, &c1, &p, &pol);
    assert_eq!(first, use_of("cb-a", UseReason::FilledMostPopulated));
    fl.record(&c1, &p, &first, now);
    let c2 = claim("c2", "ga", Some("n2"), None);
    assert!(
        matches!(pick(&inv, &fl, &c2, &p, &pol), Choice::Claim { binding, .. } if binding == "cb-free")
    );
    // Selecting c1 again is idempotent: its own in-flight cluster is not a new one.
    assert_eq!(
        pick(&inv, &fl, &c1, &p, &pol),
        use_of("cb-a", UseReason::Reused)
    );
    fl.assignment_failed("uid-c1");
    assert_eq!(
        pick(&inv, &fl, &c2, &p, &pol),
        use_of("cb-a", UseReason::FilledMostPopulated)
    );
}

#[test]
fn an_allowlisted_tenant_waits_for_its_claim_in_flight_instead_of_claiming_another() {
    let p = pool("aws", false, false);
    let pol = policy(&["*"], &[("aws", 1)]);
    let inv = inventory(
        vec![owned("cb-a", "ga"), binding("f1", AWS), binding("f2", AWS)],
        vec![],
        shoots("s", "cb-a", 1),
    );
    let mut fl = InFlight::default();
    let now = Instant::now();
    let c1 = claim("c1", "ga", Some("n1"), None);
    let first = pick(&inv, &fl, &c1, &p, &pol);
    let Choice::Claim { binding: x, .. } = first.clone() else {
        panic!("{first:?}")
    };
    fl.record(&c1, &p, &first, now);
    let c2 = claim("c2", "ga", Some("n2"), None);
    assert_eq!(
        pick(&inv, &fl, &c2, &p, &pol),
        Choice::Wait { binding: x.clone() }
    );
    fl.claim_written(&x, now);
    // x now holds c1's cluster and is at the limit of 1: c2 needs a third binding.
    assert!(
        matches!(pick(&inv, &fl, &c2, &p, &pol), Choice::Claim { binding, .. } if binding != x)
    );
}

#[test]
fn a_binding_being_released_is_neither_reused_nor_claimed() {
    let p = pool("aws", false, false);
    let inv = inventory(
        vec![owned("cb-a", "ga"), binding("cb-free", AWS)],
        vec![],
        vec![],
    );
    let mut fl = InFlight::default();
    fl.release_started("cb-a", Some("rv-cb-a".into()), Instant::now());
    let c = claim("c", "ga", None, None);
    assert!(
        matches!(pick(&inv, &fl, &c, &p, &MultiAccountPolicy::default()), Choice::Claim { binding, .. } if binding == "cb-free")
    );
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
