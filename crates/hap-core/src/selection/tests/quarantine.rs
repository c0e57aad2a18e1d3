//! Quarantine of new accounts: a binding on trial in a quarantined pool goes only to the
//! requests the entry names, which take it first; a Shoot's success or a person ends the trial,
//! and the probation record written with a named request's claim keeps it on trial after that
//! tenant left.

use proptest::prelude::*;

use super::*;
use crate::api::{PinPool, QuarantineSpec};
use crate::labels::CLAIMED_BY;
use crate::pools::quarantine::{Gate, PASSED, PROBATION, QUARANTINE, RELEASED};

/// The entry's `since`.
const SINCE: i64 = 1_767_225_600;

fn spec() -> Vec<QuarantineSpec> {
    vec![QuarantineSpec {
        pool: PinPool {
            hyperscaler_type: "aws".into(),
            eu_access: None,
        },
        since: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            jiff::Timestamp::from_second(SINCE).unwrap(),
        )),
        plans: Some(vec!["trial".into()]),
        global_accounts: Some(vec!["canary".into()]),
    }]
}

fn gated(plan: &str, ga: &str) -> MultiAccountPolicy {
    policy(&[], &[]).with_quarantine(Gate::for_request(Some(&spec()), plan, ga))
}

/// A binding created after the entry's `since`, without records: new.
fn fresh(name: &str) -> BindingView {
    BindingView {
        created: crate::pools::quarantine::creation_second(SINCE + 60),
        ..binding(name, AWS)
    }
}

/// A binding created before the entry's `since`, without records: a KEB-era account whose
/// cleanup removed its tenant's labels.
fn recycled(name: &str) -> BindingView {
    BindingView {
        created: crate::pools::quarantine::creation_second(SINCE - 86_400),
        ..binding(name, AWS)
    }
}

fn marked(name: &str, value: &str) -> BindingView {
    let mut b = fresh(name);
    b.annotations.insert(QUARANTINE.into(), value.into());
    b
}

fn claimed_of(choice: &Choice) -> Option<&str> {
    match choice {
        Choice::Claim { binding, .. } => Some(binding),
        _ => None,
    }
}

#[test]
fn a_new_binding_is_refused_to_an_unnamed_request_and_given_to_a_named_one() {
    let p = pool("aws", false, false);
    let inv = inventory(vec![fresh("new")], vec![], vec![]);
    let fl = InFlight::default();
    let paying = claim("c", "ga-1", Some("s"), None);
    match pick(&inv, &fl, &paying, &p, &gated("aws", "ga-1")) {
        Choice::Exhausted { message, .. } => {
            assert!(message.contains("1 free but quarantined"), "{message}")
        }
        got => panic!("expected Exhausted, got {got:?}"),
    }
    let trial = claim("t", "ga-2", Some("s"), None);
    assert_eq!(
        claimed_of(&pick(&inv, &fl, &trial, &p, &gated("trial", "ga-2"))),
        Some("new")
    );
    let canary = claim("k", "canary", Some("s"), None);
    assert_eq!(
        claimed_of(&pick(&inv, &fl, &canary, &p, &gated("aws", "canary"))),
        Some("new")
    );
    // Without the config's quarantine, or in another pool, nobody is kept from it.
    assert_eq!(
        claimed_of(&pick(&inv, &fl, &paying, &p, &policy(&[], &[]))),
        Some("new")
    );
}

#[test]
fn passed_or_released_bindings_serve_anyone_and_probation_keeps_a_binding_on_trial() {
    let p = pool("aws", false, false);
    let fl = InFlight::default();
    let paying = claim("c", "ga-1", Some("s"), None);
    for value in [PASSED, RELEASED] {
        let inv = inventory(vec![marked("b", value)], vec![], vec![]);
        assert_eq!(
            claimed_of(&pick(&inv, &fl, &paying, &p, &gated("aws", "ga-1"))),
            Some("b")
        );
    }
    // Back in the pool after a trial tenant whose Shoot never succeeded: still on trial,
    // although its claimed-by record says it was claimed once.
    let mut back = marked("b", PROBATION);
    back.labels.insert(CLAIMED_BY.into(), "uid-old".into());
    let inv = inventory(vec![back], vec![], vec![]);
    assert!(matches!(
        pick(&inv, &fl, &paying, &p, &gated("aws", "ga-1")),
        Choice::Exhausted { .. }
    ));
    // A binding that served before the quarantine existed is no new account.
    let mut served = fresh("b");
    served.labels.insert(CLAIMED_BY.into(), "uid-old".into());
    let inv = inventory(vec![served], vec![], vec![]);
    assert_eq!(
        claimed_of(&pick(&inv, &fl, &paying, &p, &gated("aws", "ga-1"))),
        Some("b")
    );
}

#[test]
fn a_binding_created_before_the_quarantine_serves_anyone_without_records() {
    let p = pool("aws", false, false);
    let fl = InFlight::default();
    let inv = inventory(vec![recycled("keb")], vec![], vec![]);
    let paying = claim("c", "ga-1", Some("s"), None);
    assert_eq!(
        claimed_of(&pick(&inv, &fl, &paying, &p, &gated("aws", "ga-1"))),
        Some("keb")
    );
    let mut inv = inv;
    inv.set_lifecycle_rules(crate::pools::LifecycleRules {
        quarantined: [(pool("aws", false, false), SINCE)].into(),
        ..Default::default()
    });
    inv.lifecycle_tick(jiff::Timestamp::now());
    assert_eq!(inv.lifecycles()[0].states["Quarantined"], 0);
}

#[test]
fn a_shoot_on_a_sibling_or_past_its_create_proves_the_binding() {
    let now = Instant::now();
    let fl = InFlight::default();
    let c = claim("t", "ga-t", Some("s"), Some("b"));
    let mut b = marked("b", PROBATION);
    b.labels.insert("tenantName".into(), "ga-t".into());
    // Gardener moved the Shoot to another binding of the same credential.
    let account = crate::pools::Account::of_secret(Some("garden"), None, "one-secret");
    let b = b.with_account(account);
    let sibling = binding("b2", AWS).with_account(account);
    let moved = ShootView {
        created: true,
        ..shoot("s", Some("b2"))
    };
    let inv = inventory(vec![b.clone(), sibling], vec![c.clone()], vec![moved]);
    assert_eq!(crate::pools::quarantine::proven_by(&inv, "b"), Some("s"));
    assert!(needs_visit(&c, &inv, &fl, now));
    // A Shoot on a binding of another account proves nothing.
    let other = ShootView {
        created: true,
        ..shoot("s", Some("b3"))
    };
    let inv = inventory(vec![b, binding("b3", AWS)], vec![c], vec![other]);
    assert_eq!(crate::pools::quarantine::proven_by(&inv, "b"), None);
}

#[test]
fn named_requests_take_bindings_on_trial_first_and_others_the_proven_ones() {
    let p = pool("aws", false, false);
    let fl = InFlight::default();
    let inv = inventory(
        vec![
            marked("proven-a", PASSED),
            fresh("new"),
            marked("proven-b", PASSED),
        ],
        vec![],
        vec![],
    );
    for i in 0..20 {
        let ga = format!("ga-{i}");
        let c = claim("c", &ga, Some("s"), None);
        assert_eq!(
            claimed_of(&pick(&inv, &fl, &c, &p, &gated("trial", &ga))),
            Some("new")
        );
        let got = pick(&inv, &fl, &c, &p, &gated("aws", &ga));
        assert!(
            claimed_of(&got).is_some_and(|b| b.starts_with("proven")),
            "{got:?}"
        );
    }
}

#[test]
fn a_bound_claim_needs_a_visit_once_a_shoot_on_its_probation_binding_succeeded() {
    let now = Instant::now();
    let fl = InFlight::default();
    let mut b = marked("b", PROBATION);
    b.labels.insert("tenantName".into(), "ga-t".into());
    let c = claim("t", "ga-t", Some("s"), Some("b"));
    let running = shoot("s", Some("b"));
    let inv = inventory(vec![b.clone()], vec![c.clone()], vec![running.clone()]);
    assert!(!needs_visit(&c, &inv, &fl, now), "no success yet");
    let created = ShootView {
        created: true,
        ..running
    };
    let inv = inventory(vec![b.clone()], vec![c.clone()], vec![created.clone()]);
    assert!(needs_visit(&c, &inv, &fl, now));
    assert_eq!(crate::pools::quarantine::proven_by(&inv, "b"), Some("s"));
    // Once Passed is recorded, nothing is left to do.
    let mut passed = b;
    passed.annotations.insert(QUARANTINE.into(), PASSED.into());
    let inv = inventory(vec![passed], vec![c.clone()], vec![created]);
    assert!(!needs_visit(&c, &inv, &fl, now));
}

#[test]
fn the_lifecycle_counts_new_bindings_of_a_quarantined_pool_as_quarantined() {
    let mut inv = inventory(
        vec![
            fresh("new"),
            recycled("keb"),
            marked("proven", PASSED),
            marked("back", PROBATION),
        ],
        vec![],
        vec![],
    );
    let state = |inv: &Inventory, s: &str| inv.lifecycles()[0].states[s];
    inv.lifecycle_tick(jiff::Timestamp::now());
    assert_eq!((state(&inv, "Free"), state(&inv, "Quarantined")), (4, 0));
    inv.set_lifecycle_rules(crate::pools::LifecycleRules {
        quarantined: [(pool("aws", false, false), SINCE)].into(),
        ..Default::default()
    });
    assert_eq!((state(&inv, "Free"), state(&inv, "Quarantined")), (2, 2));
    // The verdict is read from the binding: a new copy with Passed moves it.
    inv.apply_binding(BindingView {
        resource_version: Some("rv-new-2".into()),
        ..marked("new", PASSED)
    });
    assert_eq!((state(&inv, "Free"), state(&inv, "Quarantined")), (3, 1));
}

proptest! {
    /// Whatever the pool holds, a request the quarantine does not name never gets a binding on
    /// trial, and a named one gets one whenever the pool has one that is otherwise free.
    #[test]
    fn unnamed_requests_never_get_a_binding_on_trial(
        marks in proptest::collection::vec(0u8..5, 1..8),
        named in any::<bool>(),
    ) {
        let views: Vec<BindingView> = marks.iter().enumerate().map(|(i, m)| {
            let name = format!("b{i}");
            match m {
                0 => fresh(&name),
                1 => marked(&name, PROBATION),
                2 => marked(&name, PASSED),
                3 => recycled(&name),
                _ => {
                    let mut b = fresh(&name);
                    b.labels.insert(CLAIMED_BY.into(), "uid-old".into());
                    b
                }
            }
        }).collect();
        // On trial by construction: new, or back from a trial tenant (not by `on_trial`).
        let trial: BTreeSet<String> = marks.iter().enumerate()
            .filter(|(_, m)| **m <= 1)
            .map(|(i, _)| format!("b{i}"))
            .collect();
        let inv = inventory(views, vec![], vec![]);
        let p = pool("aws", false, false);
        let c = claim("c", "ga-1", Some("s"), None);
        let plan = if named { "trial" } else { "aws" };
        let got = pick(&inv, &InFlight::default(), &c, &p, &gated(plan, "ga-1"));
        match claimed_of(&got) {
            Some(b) if !named => prop_assert!(!trial.contains(b), "{b} is on trial"),
            Some(b) => prop_assert!(trial.is_empty() || trial.contains(b), "{b} over a trial one"),
            None => prop_assert!(!named && marks.len() == trial.len(), "{got:?}"),
        }
    }
}
