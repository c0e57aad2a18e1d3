//! Candidate spreading and multi-account (docs/design.md §1, `multiHyperscalerAccount`).

use super::*;

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
    // Neither used (the release may succeed) nor replaced (it may fail, and the tenant would
    // hold two): the claim waits until the release has an outcome.
    assert_eq!(
        pick(&inv, &fl, &c, &p, &MultiAccountPolicy::default()),
        Choice::Wait {
            binding: "cb-a".into()
        }
    );
    fl.release_failed("cb-a");
    assert_eq!(
        pick(&inv, &fl, &c, &p, &MultiAccountPolicy::default()),
        use_of("cb-a", UseReason::Reused)
    );
    // Released: the index shows it dirty, and a new binding is claimed.
    let inv = inventory(
        vec![
            binding(
                "cb-a",
                &[
                    ("hyperscalerType", "aws"),
                    ("tenantName", "ga"),
                    ("dirty", "true"),
                ],
            ),
            binding("cb-free", AWS),
        ],
        vec![],
        vec![],
    );
    assert!(
        matches!(pick(&inv, &fl, &c, &p, &MultiAccountPolicy::default()), Choice::Claim { binding, .. } if binding == "cb-free")
    );
}

/// A binding of limit 2 with one cluster and a fill recorded by a previous leader whose status
/// the index does not show yet: full. The recorded claim itself finds its binding there.
#[test]
fn recorded_fills_count_against_the_limit_until_their_status_shows() {
    let p = pool("aws", false, false);
    let pol = policy(&["*"], &[("aws", 2)]);
    let mut cb = owned("cb-a", "ga");
    cb.annotations
        .insert(crate::labels::FILLING.into(), "uid-first".into());
    let first = claim("first", "ga", Some("s-first"), None);
    let second = claim("second", "ga", Some("s-second"), None);
    let bs = vec![cb, binding("cb-free", AWS)];
    let inv = inventory(bs.clone(), vec![first.clone()], shoots("a", "cb-a", 1));
    let fl = InFlight::default();
    assert!(
        matches!(pick(&inv, &fl, &second, &p, &pol), Choice::Claim { binding, .. } if binding == "cb-free")
    );
    assert_eq!(
        pick(&inv, &fl, &first, &p, &pol),
        use_of("cb-a", UseReason::Reused)
    );
    // A record whose claim is gone, bound, denied or another tenant's counts for nothing.
    let stale = |c: Option<ClaimView>| {
        let claims = c.into_iter().collect();
        pick(
            &inventory(bs.clone(), claims, shoots("a", "cb-a", 1)),
            &fl,
            &second,
            &p,
            &pol,
        )
    };
    let filled = use_of("cb-a", UseReason::FilledMostPopulated);
    assert_eq!(stale(None), filled);
    assert_eq!(
        stale(Some(claim("first", "ga", None, Some("cb-x")))),
        filled
    );
    let denied = ClaimView {
        denied: true,
        ..first.clone()
    };
    assert_eq!(stale(Some(denied)), filled);
    assert_eq!(stale(Some(claim("first", "other", None, None))), filled);
}

/// A claim write whose status is still in flight (its claimed-by record on the binding, no
/// status in the index) is counted too: it is a cluster that may land any moment.
#[test]
fn a_pending_claim_write_counts_against_the_limit() {
    let p = pool("aws", false, false);
    let pol = policy(&["*"], &[("aws", 1)]);
    let mut cb = owned("cb-a", "ga");
    cb.labels
        .insert(crate::labels::CLAIMED_BY.into(), "uid-first".into());
    let first = claim("first", "ga", Some("s-first"), None);
    let inv = inventory(vec![cb, binding("cb-free", AWS)], vec![first], vec![]);
    let second = claim("second", "ga", Some("s-second"), None);
    assert!(matches!(
        pick(&inv, &InFlight::default(), &second, &p, &pol),
        Choice::Claim { binding, .. } if binding == "cb-free"
    ));
}

/// A paused leader's late claim write labelled cb-a for `first` after the next leader had bound
/// it to cb-b: cb-a is a stray. A single-account tenant's next claim goes to cb-b, the binding
/// its clusters use, never to the stray (it sorts first by name).
#[test]
fn a_stray_is_never_chosen_for_the_tenant() {
    let p = pool("aws", false, false);
    let mut stray = owned("cb-a", "ga");
    stray
        .labels
        .insert(crate::labels::CLAIMED_BY.into(), "uid-first".into());
    let first = claim("first", "ga", None, Some("cb-b"));
    let inv = inventory(vec![stray, owned("cb-b", "ga")], vec![first], vec![]);
    let next = claim("next", "ga", Some("s-next"), None);
    assert_eq!(
        pick(&inv, &InFlight::default(), &next, &p, &policy(&[], &[])),
        use_of("cb-b", UseReason::Reused)
    );
}

/// The late write lands before this replica's own status write for the claim shows: `first` is
/// being written onto cb-b here, and cb-a (sorting first) carries its claimed-by from a previous
/// leader's late claim write. cb-a is a stray already; the tenant's next claim never goes there.
#[test]
fn a_binding_whose_claimant_this_replica_writes_elsewhere_is_a_stray() {
    let p = pool("aws", false, false);
    let now = Instant::now();
    let mut late = owned("cb-a", "ga");
    late.labels
        .insert(crate::labels::CLAIMED_BY.into(), "uid-first".into());
    let first = claim("first", "ga", Some("s-first"), None);
    let inv = inventory(
        vec![late, binding("cb-b", AWS)],
        vec![first.clone()],
        vec![],
    );
    let mut fl = InFlight::default();
    let claim_b = Choice::Claim {
        binding: "cb-b".into(),
        expected_resource_version: Some("rv-cb-b".into()),
    };
    fl.record(&first, &p, &claim_b, now);
    fl.claim_written("cb-b", now);
    assert!(claimant::stray_claimant(&inv, &fl, "cb-a", now).is_some());
    let next = claim("next", "ga", Some("s-next"), None);
    assert_eq!(
        pick(&inv, &fl, &next, &p, &policy(&[], &[])),
        use_of("cb-b", UseReason::Reused)
    );
    // Its Bound status refused (the claim changed meanwhile): the assignment ends, but the
    // binding it won stays its own, so cb-a stays a stray and `first` is decided onto cb-b.
    fl.assignment_failed("uid-first");
    assert!(claimant::stray_claimant(&inv, &fl, "cb-a", now).is_some());
    let again = pick(&inv, &fl, &first, &p, &policy(&[], &[]));
    assert!(
        matches!(&again, Choice::Use { binding, .. } | Choice::Claim { binding, .. } if binding == "cb-b"),
        "{again:?}"
    );
}

/// A single-account tenant that holds two bindings of a pool (an orphan left by a claim that is
/// gone, sorting first) gets its next cluster where its clusters are.
#[test]
fn a_single_account_tenant_with_two_bindings_stays_where_its_clusters_are() {
    let p = pool("aws", false, false);
    let mut orphan = owned("cb-a", "ga");
    orphan
        .labels
        .insert(crate::labels::CLAIMED_BY.into(), "uid-gone".into());
    let user = claim("user", "ga", Some("s-user"), Some("cb-b"));
    let inv = inventory(vec![orphan, owned("cb-b", "ga")], vec![user], vec![]);
    let next = claim("next", "ga", Some("s-next"), None);
    assert_eq!(
        pick(&inv, &InFlight::default(), &next, &p, &policy(&[], &[])),
        use_of("cb-b", UseReason::Reused)
    );
}
