//! The states, counts, named bindings and dirty clock kept per event equal the from-scratch walk
//! (`Inventory::scan`) after any sequence of binding, claim and Shoot events, rule changes,
//! re-classifications, dropped bindings and steps of the clock, forwards or back.

use std::collections::HashMap;

use jiff::{SignedDuration, Timestamp};
use proptest::prelude::*;

use crate::labels::ResolvedLabelKeys;
use crate::pools::lifecycle::{CORDON_REASON, CORDONED, DirtyClock, RELEASED_AT, RELEASED_BY};
use crate::pools::tests::{binding, claim, shoot};
use crate::pools::{Inventory, LifecycleRules};

const CODES: [&str; 3] = ["ERR_A", "ERR_B", "ERR_C"];

#[derive(Clone, Debug)]
enum Op {
    /// Binding `i` with labels and annotations from the flags, or deleted.
    Binding(usize, Option<Flags>),
    /// Claim `i` bound to binding `b` (deleting or not), or deleted.
    Claim(usize, Option<(usize, bool)>),
    /// Shoot `i` on binding `b` with the codes picked by the mask, or deleted.
    Shoot(usize, Option<(usize, u8)>),
    /// The clock at this many minutes after the start (may go back).
    Tick(i64),
    /// Other suspect codes, threshold or cooldown.
    Rules(u8, usize, Option<u64>),
    /// Another tenant label key: every binding classified again.
    Rekey(bool),
    /// The binding watch moved: every binding dropped.
    ClearBindings,
    /// The Shoot watch moved: every Shoot dropped.
    ClearShoots,
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
    /// Released this many minutes after the start, by tenant `t0` or `t1`.
    released: Option<(i64, usize)>,
}

fn flags() -> impl Strategy<Value = Flags> {
    (
        prop::option::weighted(0.9, prop::sample::select(vec!["aws", "gcp"])),
        prop::option::of(0..2usize),
        prop::bool::weighted(0.25),
        prop::bool::weighted(0.1),
        prop::bool::weighted(0.15),
        prop::bool::weighted(0.2),
        prop::bool::weighted(0.3),
        prop::option::weighted(0.5, (-5..15i64, 0..2usize)),
    )
        .prop_map(
            |(hyperscaler, tenant, dirty, shared, internal, cordoned, eu, released)| Flags {
                hyperscaler,
                tenant,
                dirty,
                shared,
                internal,
                cordoned,
                eu,
                released,
            },
        )
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0..6usize, prop::option::weighted(0.85, flags())).prop_map(|(i, f)| Op::Binding(i, f)),
        4 => (0..6usize, prop::option::weighted(0.8, (0..6usize, prop::bool::weighted(0.2))))
            .prop_map(|(i, c)| Op::Claim(i, c)),
        5 => (0..5usize, prop::option::weighted(0.8, (0..6usize, 0..8u8))).prop_map(|(i, s)| Op::Shoot(i, s)),
        4 => (-3..25i64).prop_map(Op::Tick),
        2 => (0..8u8, 0..3usize, prop::option::of(prop::sample::select(vec![0u64, 300, 600])))
            .prop_map(|(m, t, c)| Op::Rules(m, t, c)),
        1 => any::<bool>().prop_map(Op::Rekey),
        1 => Just(Op::ClearBindings),
        1 => Just(Op::ClearShoots),
    ]
}

fn start() -> Timestamp {
    "2026-11-27T00:00:00Z".parse().expect("time")
}

fn minutes(m: i64) -> Timestamp {
    start() + SignedDuration::from_mins(m)
}

fn keys(alt: bool) -> ResolvedLabelKeys {
    let mut k = ResolvedLabelKeys::default();
    if alt {
        k.tenant_name = "owner".into();
    }
    k
}

fn codes(mask: u8) -> Vec<String> {
    CODES
        .iter()
        .enumerate()
        .filter(|(i, _)| mask & (1 << i) != 0)
        .map(|(_, c)| c.to_string())
        .collect()
}

fn view(i: usize, f: &Flags, rv: u64) -> crate::pools::BindingView {
    let tenant = f.tenant.map(|t| format!("t{t}"));
    let mut labels: Vec<(&str, &str)> = Vec::new();
    if let Some(h) = f.hyperscaler {
        labels.push(("hyperscalerType", h));
    }
    if let Some(t) = &tenant {
        labels.push(("tenantName", t));
        if i.is_multiple_of(2) {
            labels.push(("owner", t));
        }
    }
    for (on, key) in [
        (f.dirty, "dirty"),
        (f.shared, "shared"),
        (f.internal, "internal"),
        (f.cordoned, CORDONED),
        (f.eu, "euAccess"),
    ] {
        if on {
            labels.push((key, "true"));
        }
    }
    let mut v = binding(&format!("b{i}"), &labels);
    v.resource_version = Some(rv.to_string());
    if f.cordoned {
        v.annotations
            .insert(CORDON_REASON.into(), format!("reason {i}"));
    }
    if let Some((at, by)) = f.released {
        v.annotations
            .insert(RELEASED_AT.into(), minutes(at).to_string());
        v.annotations.insert(RELEASED_BY.into(), format!("t{by}"));
    }
    v
}

/// The test's world besides the index: the rules and time handed to it, and the dirty clock as
/// the status defines it (a binding is dirty since the first tick that found it dirty, counted
/// from when it last became dirty).
struct World {
    alt: bool,
    rules: LifecycleRules,
    now: Timestamp,
    since: HashMap<String, Option<Timestamp>>,
}

impl World {
    fn clock(&self) -> DirtyClock {
        let mut c = DirtyClock::default();
        for (b, t) in &self.since {
            if let Some(t) = t {
                c.set(b, *t);
            }
        }
        c
    }

    /// After every event: forget cleaned bindings, note newly dirty ones (no time yet).
    fn follow(&mut self, inv: &Inventory) {
        let dirty: std::collections::BTreeSet<&str> =
            inv.dirty_bindings().map(|(_, b)| b).collect();
        self.since.retain(|b, _| dirty.contains(b.as_str()));
        for b in dirty {
            self.since.entry(b.to_string()).or_insert(None);
        }
    }
}

fn apply(inv: &mut Inventory, op: &Op, rv: u64, w: &mut World) {
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
        Op::Shoot(i, Some((b, mask))) => {
            let mut s = shoot(&format!("s{i}"), Some(&format!("b{b}")));
            s.resource_version = at;
            s.error_codes = codes(*mask);
            inv.apply_shoot(s);
        }
        Op::Shoot(i, None) => drop(inv.delete_shoot(&format!("s{i}"), at.as_deref())),
        Op::Tick(m) => {
            w.now = minutes(*m);
            inv.lifecycle_tick(w.now);
            for t in w.since.values_mut() {
                t.get_or_insert(w.now);
            }
        }
        Op::Rules(mask, threshold, cooldown) => {
            w.rules = LifecycleRules {
                codes: codes(*mask),
                threshold: *threshold,
                cooldown: cooldown.map(std::time::Duration::from_secs),
            };
            inv.set_lifecycle_rules(w.rules.clone());
        }
        Op::Rekey(to) => {
            w.alt = *to;
            inv.set_keys(keys(*to));
        }
        Op::ClearBindings => inv.clear_bindings(),
        Op::ClearShoots => inv.clear_shoots(),
    }
    w.follow(inv);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    #[test]
    fn states_kept_per_event_equal_a_walk_over_the_index(ops in prop::collection::vec(op(), 1..80)) {
        let mut inv = Inventory::new(keys(false));
        let mut w = World {
            alt: false,
            rules: LifecycleRules::default(),
            now: Timestamp::MIN,
            since: HashMap::new(),
        };
        for (n, op) in ops.iter().enumerate() {
            apply(&mut inv, op, n as u64 + 1, &mut w);
            let want = inv.scan(&w.rules, w.now, &w.clock());
            prop_assert_eq!(inv.lifecycles(), want, "after {:?} (keys alt: {})", op, w.alt);
        }
    }
}

/// A cooldown ends by the clock alone: no event of the binding moves it to Free.
#[test]
fn a_cooldown_ends_at_the_tick_that_passes_it_and_comes_back_when_the_clock_steps_back() {
    let mut inv = Inventory::new(keys(false));
    let f = Flags {
        hyperscaler: Some("aws"),
        tenant: None,
        dirty: false,
        shared: false,
        internal: false,
        cordoned: false,
        eu: false,
        released: Some((0, 0)),
    };
    inv.apply_binding(view(0, &f, 1));
    inv.set_lifecycle_rules(LifecycleRules {
        cooldown: Some(std::time::Duration::from_secs(600)),
        ..LifecycleRules::default()
    });
    let state = |inv: &Inventory, s: &str| inv.lifecycles()[0].states[s];
    inv.lifecycle_tick(minutes(9));
    assert_eq!(state(&inv, "CoolingDown"), 1);
    inv.lifecycle_tick(minutes(10));
    assert_eq!((state(&inv, "CoolingDown"), state(&inv, "Free")), (0, 1));
    inv.lifecycle_tick(minutes(5));
    assert_eq!(state(&inv, "CoolingDown"), 1);
}
