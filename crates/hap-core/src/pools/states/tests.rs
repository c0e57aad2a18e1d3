//! The states, counts, named bindings and dirty clock kept per event equal the from-scratch walk
//! (`Inventory::scan`) after any sequence of binding, claim and Shoot events, rule changes,
//! re-classifications, dropped bindings and steps of the clock, forwards or back.

use std::collections::HashMap;

use jiff::Timestamp;
use proptest::prelude::*;

use crate::pools::lifecycle::DirtyClock;
use crate::pools::random_events::{self, Event, Flags, codes, keys, minutes, view};
use crate::pools::{Inventory, LifecycleRules};

/// An inventory event, or a move of the clock or the rules.
#[derive(Clone, Debug)]
enum Op {
    Event(Event),
    /// The clock at this many minutes after the start (may go back).
    Tick(i64),
    /// Other suspect codes, threshold, cooldown or quarantined pools (bit 0 aws, bit 1 gcp).
    Rules(u8, usize, Option<u64>, u8),
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
        prop::bool::weighted(0.15),
    )
        .prop_map(
            |(hyperscaler, tenant, dirty, shared, internal, cordoned, eu, released, failed)| {
                Flags {
                    hyperscaler,
                    tenant,
                    dirty,
                    shared,
                    internal,
                    cordoned,
                    cleanup_failed: failed,
                    eu,
                    released,
                    credentials: 0,
                }
            },
        )
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0..6usize, prop::option::weighted(0.85, flags()))
            .prop_map(|(i, f)| Op::Event(Event::Binding(i, f))),
        4 => (0..6usize, prop::option::weighted(0.8, (0..6usize, prop::bool::weighted(0.2))))
            .prop_map(|(i, c)| Op::Event(Event::Claim(i, c))),
        5 => (0..5usize, prop::option::weighted(0.8, (0..6usize, 0..8u8)))
            .prop_map(|(i, s)| Op::Event(Event::Shoot(i, s))),
        4 => (-3..25i64).prop_map(Op::Tick),
        2 => (0..8u8, 0..3usize, prop::option::of(prop::sample::select(vec![0u64, 300, 600])), 0..4u8)
            .prop_map(|(m, t, c, q)| Op::Rules(m, t, c, q)),
        1 => any::<bool>().prop_map(|alt| Op::Event(Event::Rekey(alt))),
        1 => Just(Op::Event(Event::ClearBindings)),
        1 => Just(Op::Event(Event::ClearShoots)),
    ]
}

/// The test's world besides the index: the rules and time handed to it, and the dirty clock as
/// the status defines it (a binding is dirty since the release recorded on it; without one, since
/// the time it had, or the first tick that found it dirty, counted from when it last became
/// dirty).
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

    /// After every event: forget cleaned bindings, date dirty ones by their release record, note
    /// newly dirty ones without one (no time yet).
    fn follow(&mut self, inv: &Inventory) {
        let dirty: std::collections::BTreeSet<&str> =
            inv.dirty_bindings().map(|(_, b)| b).collect();
        self.since.retain(|b, _| dirty.contains(b.as_str()));
        for b in dirty {
            let recorded = inv
                .binding(b)
                .and_then(|e| crate::pools::lifecycle::dirty_since(&e.view.annotations));
            let t = self.since.entry(b.to_string()).or_insert(None);
            if recorded.is_some() {
                *t = recorded;
            }
        }
    }
}

fn apply(inv: &mut Inventory, op: &Op, rv: u64, w: &mut World) {
    match op {
        Op::Event(e) => {
            if let Event::Rekey(to) = e {
                w.alt = *to;
            }
            random_events::apply(inv, e, rv);
        }
        Op::Tick(m) => {
            w.now = minutes(*m);
            inv.lifecycle_tick(w.now);
            for t in w.since.values_mut() {
                t.get_or_insert(w.now);
            }
        }
        Op::Rules(mask, threshold, cooldown, quarantined) => {
            let pool = |t: &str| crate::labels::PoolKey {
                hyperscaler_type: t.into(),
                eu_access: false,
                shared: false,
            };
            w.rules = LifecycleRules {
                codes: codes(*mask),
                threshold: *threshold,
                cooldown: cooldown.map(std::time::Duration::from_secs),
                quarantined: [(1, "aws"), (2, "gcp")]
                    .into_iter()
                    .filter(|(bit, _)| quarantined & bit != 0)
                    .map(|(_, t)| (pool(t), 0))
                    .collect(),
            };
            inv.set_lifecycle_rules(w.rules.clone());
        }
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
            // Selection ranks a pool's free bindings by this order (`PoolMembers::claim_order`).
            for (key, m) in inv.pools() {
                let ranked: std::collections::BTreeSet<_> = m
                    .claimable
                    .iter()
                    .map(|b| {
                        let e = inv.binding(b).expect("a member is indexed");
                        let at = crate::pools::lifecycle::released(&e.view.annotations);
                        (at.map(|(at, _)| at), b.clone())
                    })
                    .collect();
                prop_assert_eq!(&m.claim_order, &ranked, "pool {:?} after {:?}", key, op);
            }
        }
    }
}

/// A cooldown ends by the clock alone: no event of the binding moves it to Free.
#[test]
fn a_cooldown_ends_at_the_tick_that_passes_it_and_comes_back_when_the_clock_steps_back() {
    let mut inv = Inventory::new(keys(false));
    let f = Flags {
        hyperscaler: Some("aws"),
        released: Some((0, 0)),
        ..Flags::default()
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
