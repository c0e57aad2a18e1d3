//! Property tests of selection over ordered pools and pins (issue 13): a simulated controller
//! runs random requests of random tenants over entries with fallbacks, with pins, writes that
//! finish, fail or stay in flight and a cache that lags; every decision is checked against the
//! true state:
//! - a tenant never gets a second account because an entry has fallbacks (§5.2 across the
//!   entry's pools), unless a pin names another binding;
//! - a new binding comes from the first pool, in order, that has one to give;
//! - a pinned binding goes to its tenant only, and a pinned tenant gets only its binding.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use hap_operator::labels::{PoolKey, ResolvedLabelKeys};
use hap_operator::pools::{BindingView, ClaimView, Inventory};
use hap_operator::rules::{PinRule, Pins, Preference};
use hap_operator::selection::{
    Choice, InFlight, MultiAccountPolicy, OrderedRequest, select_ordered,
};
use proptest::prelude::*;

const TENANTS: [&str; 4] = ["t0", "t1", "t2", "t3"];
const TYPES: [&str; 2] = ["gcp_ksa", "gcp"];

fn pool(t: &str, shared: bool) -> PoolKey {
    PoolKey {
        hyperscaler_type: t.into(),
        eu_access: false,
        shared,
    }
}

/// The entries a request can match: primary only; primary then fallback; and with a shared
/// fallback last.
fn entries() -> [Vec<Preference>; 3] {
    let pref = |index, pool| Preference { index, pool };
    [
        vec![pref(1, pool(TYPES[0], false))],
        vec![
            pref(1, pool(TYPES[0], false)),
            pref(2, pool(TYPES[1], false)),
        ],
        vec![
            pref(1, pool(TYPES[0], false)),
            pref(2, pool(TYPES[1], false)),
            pref(3, pool(TYPES[1], true)),
        ],
    ]
}

/// (type index, owner tenant or none, shared)
type Spec = (usize, Option<usize>, bool);

fn spec() -> impl Strategy<Value = Spec> {
    (
        0..TYPES.len(),
        prop::option::weighted(0.3, 0..TENANTS.len()),
        prop::bool::weighted(0.15),
    )
}

fn binding(i: usize, (t, owner, shared): &Spec) -> BindingView {
    let mut labels = BTreeMap::from([("hyperscalerType".to_string(), TYPES[*t].to_string())]);
    if *shared {
        labels.insert("shared".into(), "true".into());
    } else if let Some(o) = owner {
        labels.insert("tenantName".into(), TENANTS[*o].into());
    }
    BindingView {
        name: format!("b{i}"),
        resource_version: Some("1".into()),
        labels: labels.into(),
        ..Default::default()
    }
}

#[derive(Clone, Debug)]
enum Event {
    /// Tenant, entry.
    Request(usize, usize),
    /// The `.0`-th outstanding write finishes (true) or fails.
    Complete(usize, bool),
    /// The cache catches up.
    Sync,
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        4 => (0..TENANTS.len(), 0..3usize).prop_map(|(t, e)| Event::Request(t, e)),
        3 => (0..8usize, prop::bool::weighted(0.8)).prop_map(|(i, ok)| Event::Complete(i, ok)),
        1 => Just(Event::Sync),
    ]
}

struct World {
    bindings: BTreeMap<String, BindingView>,
    claims: Vec<ClaimView>,
    cache: Inventory,
    inflight: InFlight,
    /// (claim, binding, label write?)
    outstanding: Vec<(usize, String, bool)>,
    now: Instant,
}

impl World {
    fn sync(&mut self) {
        self.cache = Inventory::build(
            ResolvedLabelKeys::default(),
            self.bindings.values().cloned(),
            self.claims.clone(),
            Vec::new(),
        );
        for e in self.cache.bindings() {
            self.inflight.observe_binding(&e.view.name, Some(e));
        }
        for c in self.cache.claims() {
            self.inflight.observe_claim(&c.uid, Some(c));
        }
    }

    fn tenant_of(&self, b: &str) -> Option<&str> {
        self.bindings[b]
            .labels
            .get("tenantName")
            .map(String::as_str)
    }

    fn dedicated_in(&self, b: &str, p: &PoolKey) -> bool {
        let l = &self.bindings[b].labels;
        !p.shared
            && l.get("hyperscalerType") == Some(&p.hyperscaler_type)
            && !l.contains_key("shared")
    }

    /// Dedicated bindings `t` holds (or is being given) in any of `prefs`' pools, truly.
    fn held(&self, t: &str, prefs: &[Preference]) -> BTreeSet<String> {
        let labelled = self
            .bindings
            .keys()
            .filter(|b| self.tenant_of(b) == Some(t))
            .cloned();
        let writing = self
            .outstanding
            .iter()
            .filter(|(c, _, labels)| *labels && self.claims[*c].global_account == t)
            .map(|(_, b, _)| b.clone());
        labelled
            .chain(writing)
            .filter(|b| prefs.iter().any(|p| self.dedicated_in(b, &p.pool)))
            .collect()
    }
}

fn run(
    specs: Vec<Spec>,
    pinned: Vec<(usize, usize)>,
    events: Vec<Event>,
) -> Result<(), TestCaseError> {
    let bindings: BTreeMap<String, BindingView> = specs
        .iter()
        .enumerate()
        .map(|(i, s)| (format!("b{i}"), binding(i, s)))
        .collect();
    // Pins: (tenant, binding index), one tenant per binding and one binding per tenant.
    let mut pins: Vec<PinRule> = Vec::new();
    for (t, b) in pinned {
        let b = format!("b{}", b % specs.len().max(1));
        if pins
            .iter()
            .any(|p| p.binding == b || p.global_account == TENANTS[t])
        {
            continue;
        }
        pins.push(PinRule {
            item: pins.len(),
            global_account: TENANTS[t].into(),
            binding: b,
            pool: None,
        });
    }
    let mut w = World {
        bindings,
        claims: Vec::new(),
        cache: Inventory::default(),
        inflight: InFlight::new(Duration::from_secs(3600)),
        outstanding: Vec::new(),
        now: Instant::now(),
    };
    w.sync();
    let pin_index = Pins::new(pins.clone());
    let entries = entries();
    let policy = MultiAccountPolicy::default();
    for ev in events {
        match ev {
            Event::Request(t, e) => {
                let n = w.claims.len();
                let view = ClaimView {
                    namespace: "kcp".into(),
                    name: format!("c{n}"),
                    uid: format!("u{n}"),
                    global_account: TENANTS[t].into(),
                    ..Default::default()
                };
                w.claims.push(view.clone());
                let prefs = &entries[e];
                let req = OrderedRequest {
                    claim: &view,
                    preferences: prefs,
                    provider_type: "gcp",
                    pins: &pin_index,
                };
                let p = select_ordered(
                    &w.cache,
                    &w.inflight,
                    &req,
                    &policy,
                    &BTreeSet::new(),
                    w.now,
                );
                check(
                    &w,
                    &pins,
                    TENANTS[t],
                    prefs,
                    &p.choice,
                    &p.pool,
                    p.preference,
                )?;
                w.inflight.record(&view, &p.pool, &p.choice, w.now);
                match p.choice {
                    Choice::Claim { binding, .. } => w.outstanding.push((n, binding, true)),
                    Choice::Use { binding, .. } => w.outstanding.push((n, binding, false)),
                    _ => {}
                }
            }
            Event::Complete(i, ok) if !w.outstanding.is_empty() => {
                let (c, b, labels) = w.outstanding.remove(i % w.outstanding.len());
                let uid = w.claims[c].uid.clone();
                match (labels, ok) {
                    (true, true) => {
                        let ga = w.claims[c].global_account.clone();
                        if let Some(v) = w.bindings.get_mut(&b) {
                            v.labels.insert("tenantName".into(), ga);
                            v.resource_version = Some("2".into());
                        }
                        w.inflight.claim_written(&b, w.now);
                        w.claims[c].bound_binding = Some(b);
                        w.inflight.assignment_written(&uid, w.now);
                    }
                    (true, false) => w.inflight.claim_failed(&b),
                    (false, true) => {
                        w.claims[c].bound_binding = Some(b);
                        w.inflight.assignment_written(&uid, w.now);
                    }
                    (false, false) => w.inflight.assignment_failed(&uid),
                }
            }
            Event::Complete(..) => {}
            Event::Sync => w.sync(),
        }
        w.now += Duration::from_millis(10);
    }
    Ok(())
}

fn check(
    w: &World,
    pins: &[PinRule],
    t: &str,
    prefs: &[Preference],
    choice: &Choice,
    pool: &PoolKey,
    preference: usize,
) -> Result<(), TestCaseError> {
    prop_assert!(
        prefs
            .iter()
            .any(|p| p.index == preference && p.pool == *pool),
        "preference {preference} / pool {pool:?} is not one of the entry's"
    );
    let my_pin = pins.iter().find(|p| p.global_account == t);
    let pinned_to_other = |b: &str| pins.iter().any(|p| p.binding == b && p.global_account != t);
    let binding = match choice {
        Choice::Claim { binding, .. } | Choice::Use { binding, .. } => binding,
        _ => return Ok(()),
    };
    // A pinned binding is never claimed for another tenant. One another tenant already holds
    // stays with it (the pin reports HeldByOther), and a pin on a shared binding reserves
    // nothing: shared bindings serve every tenant.
    prop_assert!(
        !matches!(choice, Choice::Claim { .. }) || !pinned_to_other(binding),
        "{t} claimed {binding}, pinned to another tenant"
    );
    let applies = my_pin.filter(|p| {
        w.bindings
            .get(&p.binding)
            .is_some_and(|v| prefs.iter().any(|q| w.dedicated_in(&v.name, &q.pool)))
            && !w.bindings[&p.binding].labels.contains_key("shared")
    });
    if let Some(pin) = applies {
        prop_assert_eq!(binding, &pin.binding, "pinned {} got another binding", t);
        return Ok(());
    }
    if let Choice::Use { binding, .. } = choice
        && !pool.shared
    {
        let writing = w
            .outstanding
            .iter()
            .any(|(c, b, l)| *l && b == binding && w.claims[*c].global_account == t);
        prop_assert!(
            w.tenant_of(binding) == Some(t) || writing,
            "{t} uses {binding} of {:?}",
            w.tenant_of(binding)
        );
    }
    if let Choice::Claim { binding, .. } = choice {
        let v = &w.bindings[binding];
        prop_assert!(
            !v.labels.contains_key("tenantName") && !v.labels.contains_key("shared"),
            "claimed {binding}: {:?}",
            v.labels
        );
        prop_assert!(
            !w.outstanding.iter().any(|(_, b, l)| *l && b == binding),
            "{binding} claimed twice"
        );
        let held = w.held(t, prefs);
        prop_assert!(
            held.is_empty(),
            "{t} holds {held:?} in the entry's pools and claimed {binding}"
        );
        // Every earlier pool had nothing to give, as the cache and the writes in flight show it.
        for p in prefs.iter().take_while(|p| p.index < preference) {
            let free = w
                .cache
                .pool(&p.pool)
                .map(|m| {
                    m.claimable
                        .iter()
                        .filter(|b| !pinned_to_other(b) && w.inflight.claim_of(b, w.now).is_none())
                        .count()
                        + m.shared.len()
                })
                .unwrap_or(0);
            prop_assert_eq!(
                free,
                0,
                "claimed in preference {} while {} had room",
                preference,
                p.index
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn ordered_pools_and_pins_keep_the_invariants(
        specs in prop::collection::vec(spec(), 1..10),
        pinned in prop::collection::vec((0..TENANTS.len(), 0..10usize), 0..3),
        events in prop::collection::vec(event(), 1..60),
    ) {
        run(specs, pinned, events)?;
    }
}
