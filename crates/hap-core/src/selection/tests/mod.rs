//! Unit tests of selection: fixtures, shared and dedicated choices, in-flight claims, conflicts.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use super::*;
use crate::pools::fixtures::{binding, claim, inventory, pool, shoot};
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
    let writing = pick(&inv, &fl, &c2, &p, &MultiAccountPolicy::default());
    assert!(matches!(writing, Choice::Exhausted { .. }), "{writing:?}");
    // A refused claim gives the binding back.
    fl.claim_failed("only");
    assert!(matches!(
        pick(&inv, &fl, &c2, &p, &MultiAccountPolicy::default()),
        Choice::Claim { .. }
    ));
    fl.record(&c1, &p, &first, now);
    fl.claim_written("only", now);
    // The message is part of the claim's status: it carries no figure that moves with the
    // writes in flight, so waiting claims are not rewritten on each one.
    let written = pick(&inv, &fl, &c2, &p, &MultiAccountPolicy::default());
    assert_eq!(written, writing);
    // A refusal that comes after the write succeeded (another attempt's) changes nothing.
    fl.claim_failed("only");
    assert_eq!(
        pick(&inv, &fl, &c2, &p, &MultiAccountPolicy::default()),
        writing
    );
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

mod account_race;
mod cooldown;
mod cordon;
mod first_free;
mod inflight;
mod multi;
mod quarantine;

#[test]
fn a_binding_a_shoot_uses_is_never_claimed_though_it_has_no_tenant() {
    // Shoot `s` names the free binding `f` (created so, or adopted across a
    // label-key change); a new tenant's claim must not land there.
    let p = pool("aws", false, false);
    let inv = inventory(vec![binding("f", AWS)], vec![], vec![shoot("s", Some("f"))]);
    let c = claim("c", "ga-b", Some("new"), None);
    let fl = InFlight::default();
    let got = pick(&inv, &fl, &c, &p, &MultiAccountPolicy::default());
    assert!(
        !matches!(&got, Choice::Claim { binding, .. } if binding == "f"),
        "{got:?}"
    );
    let Choice::Exhausted { message, .. } = got else {
        panic!("{got:?}");
    };
    assert!(
        message.contains("1 without a tenant but used by a cluster"),
        "{message}"
    );
    // A free binding next to it is taken instead.
    let inv = inventory(
        vec![binding("f", AWS), binding("g", AWS)],
        vec![],
        vec![shoot("s", Some("f"))],
    );
    assert!(matches!(
        pick(&inv, &fl, &c, &p, &MultiAccountPolicy::default()),
        Choice::Claim { binding, .. } if binding == "g"
    ));
}

#[test]
fn a_binding_another_claim_is_being_assigned_to_is_never_claimed() {
    let p = pool("aws", false, false);
    let inv = inventory(vec![binding("f", AWS)], vec![], vec![]);
    let mut fl = InFlight::default();
    let now = Instant::now();
    let other = claim("o", "ga-a", Some("other"), None);
    fl.record(&other, &p, &use_of("f", UseReason::Reused), now);
    let c = claim("c", "ga-b", Some("new"), None);
    let got = pick(&inv, &fl, &c, &p, &MultiAccountPolicy::default());
    assert!(matches!(got, Choice::Exhausted { .. }), "{got:?}");
}

#[test]
fn a_binding_whose_credential_another_tenant_holds_is_never_claimed() {
    use crate::pools::fixtures::on_secret;
    let p = pool("aws", false, false);
    // Two pool bindings on one Secret (a SecretBinding and the CredentialsBinding Gardener
    // migrated to, both labelled): the account is ga's.
    let inv = inventory(
        vec![
            on_secret(owned("aws-01", "ga"), "aws-01"),
            on_secret(binding("aws-01-cb", AWS), "aws-01"),
        ],
        vec![],
        vec![],
    );
    let c = claim("c", "gb", None, None);
    let fl = InFlight::default();
    match pick(&inv, &fl, &c, &p, &MultiAccountPolicy::default()) {
        Choice::Exhausted { message, .. } => assert!(
            message.contains("1 without a tenant but referencing the same credential"),
            "{message}"
        ),
        other => panic!("{other:?}"),
    }
    // Nor while a claim of it is being written.
    let inv = inventory(
        vec![
            on_secret(binding("aws-01", AWS), "aws-01"),
            on_secret(binding("aws-01-cb", AWS), "aws-01"),
        ],
        vec![],
        vec![],
    );
    let mut fl = InFlight::default();
    let now = Instant::now();
    let first = claim("c1", "ga", None, None);
    let req = Request {
        claim: &first,
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
    assert!(matches!(&choice, Choice::Claim { .. }), "{choice:?}");
    fl.record(&first, &p, &choice, now);
    let second = claim("c2", "gb", None, None);
    let req = Request {
        claim: &second,
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
    assert!(matches!(choice, Choice::Exhausted { .. }), "{choice:?}");
}

#[test]
fn a_tenants_binding_whose_credential_is_being_wiped_is_not_used_the_claim_waits() {
    use crate::pools::fixtures::on_secret;
    let p = pool("aws", false, false);
    let c = claim("c", "ga", None, None);
    let fl = InFlight::default();
    // ga holds aws-01; the other binding of its Secret is dirty: the cleanup job wipes the
    // account, so no new cluster goes into it.
    let inv = inventory(
        vec![
            on_secret(owned("aws-01", "ga"), "s"),
            on_secret(
                binding(
                    "aws-01-cb",
                    &[("hyperscalerType", "aws"), ("dirty", "true")],
                ),
                "s",
            ),
            binding("aws-02", AWS),
        ],
        vec![],
        vec![],
    );
    let got = pick(&inv, &fl, &c, &p, &MultiAccountPolicy::default());
    assert_eq!(
        got,
        Choice::Wait {
            binding: "aws-01".into()
        }
    );
}

#[test]
fn on_secret_bindings_a_free_binding_whose_account_runs_a_shoot_on_a_credentials_binding_is_not_claimed()
 {
    use crate::api::BindingKind;
    use crate::pools::fixtures::on_secret;
    use crate::pools::{Account, OtherBinding};
    let p = pool("aws", false, false);
    let mut inv = Inventory::new(Default::default());
    inv.set_binding_kind(BindingKind::SecretBinding);
    inv.apply_binding(on_secret(binding("aws-01", AWS), "aws-01"));
    // Gardener moved the Shoot onto a new CredentialsBinding of the same Secret.
    let migrated = OtherBinding {
        resource_version: Some("1".into()),
        account: Account::of_secret(Some("garden"), None, "aws-01"),
    };
    inv.apply_other_binding("force-migrated-aws-01", migrated);
    inv.apply_shoot(ShootView {
        name: "s9".into(),
        binding: Some("force-migrated-aws-01".into()),
        ..Default::default()
    });
    let c = claim("c", "gb", None, None);
    match pick(
        &inv,
        &InFlight::default(),
        &c,
        &p,
        &MultiAccountPolicy::default(),
    ) {
        Choice::Exhausted { message, .. } => {
            assert!(message.contains("used by a cluster"), "{message}")
        }
        other => panic!("{other:?}"),
    }
}
