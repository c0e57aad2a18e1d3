//! Unit tests of pins and of ordered selection: which pin applies, what a pinned binding allows,
//! reuse before fallback, the first pool with room, and pinned bindings kept from other tenants.

use std::collections::BTreeSet;
use std::time::Instant;

use super::*;
use crate::pools::fixtures::{binding, claim, inventory, pool};
use crate::pools::{BindingView, ClaimView};
use crate::rules::Pins;
use crate::selection::{InFlight, MultiAccountPolicy, OrderedRequest, Placement, select_ordered};

fn pin(ga: &str, b: &str, scope: Option<PoolKey>) -> PinRule {
    PinRule {
        item: 0,
        global_account: ga.into(),
        binding: b.into(),
        pool: scope,
    }
}

fn prefs(pools: &[PoolKey]) -> Vec<Preference> {
    pools
        .iter()
        .enumerate()
        .map(|(i, p)| Preference {
            index: i + 1,
            pool: p.clone(),
        })
        .collect()
}

fn t(name: &str, ty: &str) -> BindingView {
    binding(name, &[("hyperscalerType", ty)])
}

fn owned(name: &str, ty: &str, ga: &str) -> BindingView {
    binding(name, &[("hyperscalerType", ty), ("tenantName", ga)])
}

fn place(
    inv: &Inventory,
    fl: &InFlight,
    c: &ClaimView,
    pools: &[PoolKey],
    pins: &[PinRule],
) -> Placement {
    let p = prefs(pools);
    let pins = Pins::new(pins.to_vec());
    let req = OrderedRequest {
        claim: c,
        preferences: &p,
        provider_type: "gcp",
        pins: &pins,
    };
    select_ordered(
        inv,
        fl,
        &req,
        &MultiAccountPolicy::default(),
        &BTreeSet::new(),
        Instant::now(),
    )
}

fn claimed(b: &str) -> Choice {
    Choice::Claim {
        binding: b.into(),
        expected_resource_version: Some(format!("rv-{b}")),
    }
}

#[test]
fn the_first_pool_with_a_claimable_binding_serves() {
    let (ksa, gcp) = (pool("gcp_ksa", false, false), pool("gcp", false, false));
    let c = claim("c", "ga", None, None);
    let fl = InFlight::default();
    let inv = inventory(vec![t("k1", "gcp_ksa"), t("g1", "gcp")], vec![], vec![]);
    let p = place(&inv, &fl, &c, &[ksa.clone(), gcp.clone()], &[]);
    assert_eq!(
        (p.choice, p.preference, p.pool),
        (claimed("k1"), 1, ksa.clone())
    );
    // The primary pool is exhausted: the fallback serves and says so.
    let inv = inventory(
        vec![owned("k1", "gcp_ksa", "other"), t("g1", "gcp")],
        vec![],
        vec![],
    );
    let p = place(&inv, &fl, &c, &[ksa.clone(), gcp.clone()], &[]);
    assert_eq!(
        (p.choice, p.preference, p.pool),
        (claimed("g1"), 2, gcp.clone())
    );
    // Everything exhausted: one message naming every pool in order.
    let inv = inventory(
        vec![owned("k1", "gcp_ksa", "o"), owned("g1", "gcp", "o")],
        vec![],
        vec![],
    );
    let p = place(&inv, &fl, &c, &[ksa, gcp], &[]);
    let Choice::Exhausted { message, .. } = &p.choice else {
        panic!("{p:?}")
    };
    assert!(message.starts_with("every pool of the entry is exhausted, in order: 1. no claimable binding in pool hyperscalerType=gcp_ksa"), "{message}");
    assert!(
        message.contains("; 2. no claimable binding in pool hyperscalerType=gcp,"),
        "{message}"
    );
    assert_eq!(p.preference, 1);
}

#[test]
fn a_binding_the_tenant_holds_in_any_pool_is_reused_before_a_new_one() {
    let (ksa, gcp) = (pool("gcp_ksa", false, false), pool("gcp", false, false));
    let c = claim("c", "ga", None, None);
    let fl = InFlight::default();
    // The tenant got a fallback binding earlier; the primary has room again: no second account.
    let inv = inventory(
        vec![t("k1", "gcp_ksa"), owned("g1", "gcp", "ga")],
        vec![],
        vec![],
    );
    let p = place(&inv, &fl, &c, &[ksa.clone(), gcp.clone()], &[]);
    assert_eq!(
        (p.choice, p.preference),
        (
            Choice::Use {
                binding: "g1".into(),
                decision: UseReason::Reused
            },
            2
        )
    );
    // A claim of the tenant being written in the fallback pool: wait, do not claim the primary.
    let mut fl = InFlight::default();
    let inv = inventory(vec![t("k1", "gcp_ksa"), t("g1", "gcp")], vec![], vec![]);
    let sibling = claim("s", "ga", None, None);
    fl.record(&sibling, &gcp, &claimed("g1"), Instant::now());
    let p = place(&inv, &fl, &c, &[ksa, gcp], &[]);
    assert_eq!(
        p.choice,
        Choice::Wait {
            binding: "g1".into()
        }
    );
    assert_eq!(p.preference, 2);
}

#[test]
fn a_shared_fallback_is_used_only_after_the_dedicated_pools() {
    let (gcp, shared) = (pool("gcp", false, false), pool("gcp", false, true));
    let c = claim("c", "ga", None, None);
    let inv = inventory(
        vec![
            owned("g1", "gcp", "o"),
            binding("s1", &[("hyperscalerType", "gcp"), ("shared", "true")]),
        ],
        vec![],
        vec![],
    );
    let p = place(&inv, &InFlight::default(), &c, &[gcp, shared], &[]);
    assert_eq!(
        (p.choice, p.preference),
        (
            Choice::Use {
                binding: "s1".into(),
                decision: UseReason::SharedLeastUsed
            },
            2
        )
    );
}

#[test]
fn a_pin_decides_alone_and_its_binding_is_never_given_to_another_tenant() {
    let gcp = pool("gcp", false, false);
    let fl = InFlight::default();
    let pins = [pin("bank", "g2", None)];
    let inv = inventory(vec![t("g1", "gcp"), t("g2", "gcp")], vec![], vec![]);
    // The pinned tenant gets exactly its binding, though another one is free too.
    let p = place(
        &inv,
        &fl,
        &claim("c", "bank", None, None),
        std::slice::from_ref(&gcp),
        &pins,
    );
    assert_eq!((p.choice, p.pinned), (claimed("g2"), true));
    // Another tenant never gets it: with g1 taken, the pool is exhausted for it.
    let inv = inventory(
        vec![owned("g1", "gcp", "x"), t("g2", "gcp")],
        vec![],
        vec![],
    );
    let p = place(
        &inv,
        &fl,
        &claim("d", "ga", None, None),
        std::slice::from_ref(&gcp),
        &pins,
    );
    let Choice::Exhausted { message, .. } = &p.choice else {
        panic!("{p:?}")
    };
    assert!(
        message.contains("1 free but pinned to other global accounts"),
        "{message}"
    );
    // Held by the pinned tenant: reused, decision Pinned.
    let inv = inventory(vec![owned("g2", "gcp", "bank")], vec![], vec![]);
    let p = place(&inv, &fl, &claim("c", "bank", None, None), &[gcp], &pins);
    assert_eq!(
        p.choice,
        Choice::Use {
            binding: "g2".into(),
            decision: UseReason::Pinned
        }
    );
}

#[test]
fn an_unavailable_pinned_binding_is_reported_not_replaced() {
    let gcp = pool("gcp", false, false);
    let fl = InFlight::default();
    let c = claim("c", "bank", None, None);
    let reason = |inv: &Inventory, pins: &[PinRule]| match place(
        inv,
        &fl,
        &c,
        std::slice::from_ref(&gcp),
        pins,
    ) {
        Placement {
            choice: Choice::Exhausted { message, .. },
            pinned: true,
            ..
        } => message,
        other => panic!("{other:?}"),
    };
    let free = || t("g1", "gcp");
    // Missing, with and without a pool: the tenant never silently gets g1.
    let inv = inventory(vec![free()], vec![], vec![]);
    assert!(reason(&inv, &[pin("bank", "gone", None)]).contains("binding gone does not exist"));
    assert!(reason(&inv, &[pin("bank", "gone", Some(gcp.clone()))]).contains("does not exist"));
    // Held by another tenant, dirty, internal, shared.
    for (labels, why) in [
        (
            vec![("tenantName", "other")],
            "held by another tenant (tenantName=other)",
        ),
        (vec![("dirty", "true")], "waits for the cleanup job"),
        (vec![("internal", "true")], "the operator never claims it"),
        (
            vec![("accountpool.io/cordoned", "true")],
            "binding p is cordoned; no new tenant gets it",
        ),
    ] {
        let mut l = vec![("hyperscalerType", "gcp")];
        l.extend(labels);
        let inv = inventory(vec![free(), binding("p", &l)], vec![], vec![]);
        let m = reason(&inv, &[pin("bank", "p", Some(gcp.clone()))]);
        assert!(
            m.contains(why) && m.starts_with("bank is pinned to binding p (pins[0])"),
            "{m}"
        );
    }
    // Untenanted, but a Shoot uses it: never claimed while so.
    let shoot = crate::pools::fixtures::shoot("foreign", Some("p"));
    let inv = inventory(vec![free(), t("p", "gcp")], vec![], vec![shoot]);
    let m = reason(&inv, &[pin("bank", "p", Some(gcp.clone()))]);
    assert!(m.contains("a cluster uses it (foreign)"), "{m}");
    // In another pool than the pin names.
    let inv = inventory(vec![free(), t("p", "aws")], vec![], vec![]);
    assert!(
        reason(&inv, &[pin("bank", "p", Some(gcp.clone()))])
            .contains("is in pool hyperscalerType=aws")
    );
}

#[test]
fn a_pin_applies_only_where_its_pool_is_one_of_the_entrys() {
    let (aws, gcp) = (pool("aws", false, false), pool("gcp", false, false));
    let inv = inventory(vec![t("a1", "aws"), t("g1", "gcp")], vec![], vec![]);
    let pins = [pin("bank", "a1", None)];
    let index = Pins::new(pins.to_vec());
    // The pin is for aws (the binding's labels); a gcp request of the tenant is not held by it.
    assert!(
        applies(
            &Pins::new(pins.to_vec()),
            &inv,
            "bank",
            &prefs(std::slice::from_ref(&gcp))
        )
        .is_none()
    );
    let a = applies(&index, &inv, "bank", &prefs(&[gcp.clone(), aws.clone()])).expect("applies");
    assert_eq!(a.at, 1);
    // A scoped pin wins over an unscoped one of the same tenant.
    let both = [
        pin("bank", "a1", None),
        pin("bank", "a2", Some(aws.clone())),
    ];
    assert_eq!(
        applies(&Pins::new(both.to_vec()), &inv, "bank", &prefs(&[aws]))
            .expect("applies")
            .pin
            .binding,
        "a2"
    );
    // Shared-only requests are not held by a missing unscoped pin.
    let missing = [pin("bank", "gone", None)];
    assert!(
        applies(
            &Pins::new(missing.to_vec()),
            &inv,
            "bank",
            &prefs(&[pool("gcp", false, true)])
        )
        .is_none()
    );
    assert!(applies(&Pins::new(missing.to_vec()), &inv, "bank", &prefs(&[gcp])).is_some());
}

#[test]
fn pin_states_for_the_status() {
    let inv = inventory(
        vec![
            owned("held", "gcp", "bank"),
            t("free", "gcp"),
            owned("other", "gcp", "x"),
            binding("dirty", &[("hyperscalerType", "gcp"), ("dirty", "true")]),
        ],
        vec![],
        vec![],
    );
    let pins = [
        pin("bank", "held", None),
        pin("b2", "free", None),
        pin("b3", "other", None),
        pin("b4", "dirty", None),
        pin("b5", "gone", None),
    ];
    let s: Vec<(String, String)> = states(&Pins::new(pins.to_vec()), &inv)
        .into_iter()
        .map(|p| (p.binding, p.state))
        .collect();
    let want = [
        ("held", "Held"),
        ("free", "Free"),
        ("other", "HeldByOther"),
        ("dirty", "Unusable"),
        ("gone", "Missing"),
    ];
    assert_eq!(
        s,
        want.map(|(b, st)| (b.to_string(), st.to_string())).to_vec()
    );
}

#[test]
fn a_pinned_binding_is_not_claimed_while_another_binding_of_its_credential_is_being_claimed() {
    use crate::pools::fixtures::on_secret;
    let gcp = pool("gcp", false, false);
    let pins = [pin("bank", "g2", None)];
    // g1 and g2 reference one Secret: one account. Another tenant's claim of g1 is in flight.
    let inv = inventory(
        vec![
            on_secret(t("g1", "gcp"), "s"),
            on_secret(t("g2", "gcp"), "s"),
        ],
        vec![],
        vec![],
    );
    let mut fl = InFlight::default();
    fl.record(
        &claim("x1", "x", None, None),
        &gcp,
        &claimed("g1"),
        Instant::now(),
    );
    let p = place(
        &inv,
        &fl,
        &claim("c", "bank", None, None),
        std::slice::from_ref(&gcp),
        &pins,
    );
    let Choice::Exhausted { message, .. } = &p.choice else {
        panic!("{p:?}")
    };
    assert!(message.contains("same credential"), "{message}");
    // With nothing in flight the pin claims it.
    let p = place(
        &inv,
        &InFlight::default(),
        &claim("c", "bank", None, None),
        &[gcp],
        &pins,
    );
    assert_eq!(p.choice, claimed("g2"));
}
