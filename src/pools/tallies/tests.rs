//! The counters, sets and touched names kept per event equal a walk over the final index, after
//! any sequence of binding, claim and Shoot events, re-classifications and dropped bindings.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use crate::api::CredentialsKind;
use crate::labels::ResolvedLabelKeys;
use crate::pools::figures::scan;
use crate::pools::tests::{binding, claim, shoot};
use crate::pools::{Inventory, Touched};

#[derive(Clone, Debug)]
enum Op {
    /// Binding `i` with labels from the flags, or deleted.
    Binding(usize, Option<Flags>),
    /// Claim `i` bound to binding `b` (deleting or not), or deleted.
    Claim(usize, Option<(usize, bool)>),
    /// Shoot `i` on binding `b`, or deleted.
    Shoot(usize, Option<usize>),
    /// Another tenant label key: every binding classified again.
    Rekey(bool),
    /// The binding watch moved: every binding dropped.
    ClearBindings,
}

#[derive(Clone, Debug)]
struct Flags {
    hyperscaler: Option<&'static str>,
    tenant: Option<usize>,
    dirty: bool,
    shared: bool,
    internal: bool,
    cordoned: bool,
    eu: bool,
    credentials: usize,
}

fn flags() -> impl Strategy<Value = Flags> {
    (
        prop::option::weighted(0.9, prop::sample::select(vec!["aws", "gcp"])),
        prop::option::of(0..3usize),
        prop::bool::weighted(0.2),
        prop::bool::weighted(0.15),
        prop::bool::weighted(0.15),
        prop::bool::weighted(0.15),
        any::<bool>(),
        0..3usize,
    )
        .prop_map(
            |(hyperscaler, tenant, dirty, shared, internal, cordoned, eu, credentials)| Flags {
                hyperscaler,
                tenant,
                dirty,
                shared,
                internal,
                cordoned,
                eu,
                credentials,
            },
        )
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..6usize, prop::option::weighted(0.85, flags())).prop_map(|(i, f)| Op::Binding(i, f)),
        6 => (0..6usize, prop::option::weighted(0.8, (0..6usize, prop::bool::weighted(0.2))))
            .prop_map(|(i, c)| Op::Claim(i, c)),
        4 => (0..4usize, prop::option::weighted(0.8, 0..6usize)).prop_map(|(i, b)| Op::Shoot(i, b)),
        1 => any::<bool>().prop_map(Op::Rekey),
        1 => Just(Op::ClearBindings),
    ]
}

fn keys(alt: bool) -> ResolvedLabelKeys {
    let mut k = ResolvedLabelKeys::default();
    if alt {
        k.tenant_name = "owner".into();
    }
    k
}

fn view(i: usize, f: &Flags, rv: u64) -> crate::pools::BindingView {
    let tenant = f.tenant.map(|t| format!("t{t}"));
    let mut labels: Vec<(&str, &str)> = Vec::new();
    if let Some(h) = f.hyperscaler {
        labels.push(("hyperscalerType", h));
    }
    if let Some(t) = &tenant {
        // Both keys, so that a re-keyed index sees the tenant under either.
        labels.push(("tenantName", t));
        if i.is_multiple_of(2) {
            labels.push(("owner", t));
        }
    }
    for (on, key) in [
        (f.dirty, "dirty"),
        (f.shared, "shared"),
        (f.internal, "internal"),
        (f.cordoned, crate::pools::lifecycle::CORDONED),
        (f.eu, "euAccess"),
    ] {
        if on {
            labels.push((key, "true"));
        }
    }
    let mut v = binding(&format!("b{i}"), &labels);
    v.resource_version = Some(rv.to_string());
    v.credentials = [
        CredentialsKind::Secret,
        CredentialsKind::WorkloadIdentity,
        CredentialsKind::Other,
    ][f.credentials];
    v
}

fn apply(inv: &mut Inventory, op: &Op, rv: u64, alt: &mut bool) {
    let at = Some(rv.to_string());
    match op {
        Op::Binding(i, Some(f)) => drop(inv.apply_binding(view(*i, f, rv))),
        Op::Binding(i, None) => drop(inv.delete_binding(&format!("b{i}"), at.as_deref())),
        Op::Claim(i, Some((b, deleting))) => {
            let name = format!("c{i}");
            let mut c = claim(
                &name,
                "ga",
                i.is_multiple_of(2).then_some("s0"),
                Some(&format!("b{b}")),
            );
            c.resource_version = at;
            c.deleting = *deleting;
            inv.apply_claim(c);
        }
        Op::Claim(i, None) => drop(inv.delete_claim(&format!("uid-c{i}"), at.as_deref())),
        Op::Shoot(i, b) => {
            let mut s = shoot(&format!("s{i}"), b.map(|b| format!("b{b}")).as_deref());
            s.resource_version = at.clone();
            match b {
                Some(_) => drop(inv.apply_shoot(s)),
                None => drop(inv.delete_shoot(&s.name, at.as_deref())),
            }
        }
        Op::Rekey(to) => {
            *alt = *to;
            inv.set_keys(keys(*to));
        }
        Op::ClearBindings => inv.clear_bindings(),
    }
}

/// The per-binding and per-tenant series as a full export would set them.
fn series(inv: &Inventory) -> (BTreeMap<String, usize>, BTreeMap<String, usize>) {
    let per_binding = inv
        .bindings()
        .map(|e| (e.view.name.clone(), inv.clusters_on(&e.view.name).len()))
        .collect();
    let mut per_tenant = BTreeMap::new();
    for e in inv.bindings() {
        if let Some((_, crate::pools::BindingClass::Owned { tenant })) = &e.pool {
            *per_tenant.entry(tenant.clone()).or_default() += 1;
        }
    }
    (per_binding, per_tenant)
}

/// What an export that follows only the touched names leaves.
fn follow(
    inv: &Inventory,
    t: &Touched,
    shown: &mut (BTreeMap<String, usize>, BTreeMap<String, usize>),
) {
    if t.all {
        *shown = series(inv);
        return;
    }
    for b in &t.bindings {
        match inv.binding(b) {
            Some(_) => drop(shown.0.insert(b.clone(), inv.clusters_on(b).len())),
            None => drop(shown.0.remove(b)),
        }
    }
    for tenant in &t.tenants {
        match inv.owned_count(tenant) {
            0 => drop(shown.1.remove(tenant)),
            n => drop(shown.1.insert(tenant.clone(), n)),
        }
    }
}

proptest! {
    #[test]
    fn counters_kept_per_event_equal_a_walk_over_the_index(
        ops in prop::collection::vec(op(), 1..80),
        in_flight in prop::collection::btree_set(0..6usize, 0..3),
    ) {
        let mut inv = Inventory::new(keys(false));
        let mut alt = false;
        let mut shown = Default::default();
        let in_flight: BTreeSet<String> = in_flight.iter().map(|i| format!("b{i}")).collect();
        for (n, op) in ops.iter().enumerate() {
            apply(&mut inv, op, n as u64 + 1, &mut alt);
            let keys: Vec<_> = inv.pools().map(|(k, _)| k.clone()).collect();
            for k in &keys {
                prop_assert_eq!(inv.figures(k), scan::figures(&inv, k), "pool {:?} after {:?}", k, op);
            }
            prop_assert_eq!(inv.bindings_in_use(), scan::bindings_in_use(&inv));
            prop_assert_eq!(inv.orphans(&in_flight), scan::orphans(&inv, &in_flight));
            let touched = inv.take_touched();
            follow(&inv, &touched, &mut shown);
            prop_assert_eq!(&shown, &series(&inv), "after {:?}", op);
        }
        // A pool whose last binding went reads all zero, as before.
        for k in [crate::pools::tests::pool("aws", false, false), crate::pools::tests::pool("gcp", true, true)] {
            prop_assert_eq!(inv.figures(&k), scan::figures(&inv, &k));
        }
    }
}
