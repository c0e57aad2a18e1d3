//! Property tests of binding selection: a simulated controller runs random request sequences over
//! random inventories, with writes that finish, fail or stay in flight and a cache that lags, and
//! every decision is checked against the true state (docs/design.md §5.2, §5.3, §5.4).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use hap_operator::api::MultiHyperscalerAccount;
use hap_operator::api::ReleaseMode;
use hap_operator::labels::{PoolKey, ResolvedLabelKeys};
use hap_operator::pools::{BindingView, ClaimView, Inventory, ShootView};
use hap_operator::release::{Origin, Release, decide_release};
use hap_operator::selection::{Choice, InFlight, MultiAccountPolicy, Request, UseReason, select};
use proptest::prelude::*;

const TENANTS: [&str; 4] = ["t0", "t1", "t2", "t3"];

fn pools() -> [PoolKey; 3] {
    let p = |eu, shared| PoolKey {
        hyperscaler_type: "aws".into(),
        eu_access: eu,
        shared,
    };
    [p(false, false), p(true, false), p(false, true)]
}

/// What a generated binding starts as.
#[derive(Clone, Debug)]
enum Kind {
    Free,
    Owned(usize),
    Dirty(usize),
    Internal,
    InternalOwned(usize),
    Shared,
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        3 => Just(Kind::Free),
        3 => (0..TENANTS.len()).prop_map(Kind::Owned),
        1 => (0..TENANTS.len()).prop_map(Kind::Dirty),
        1 => Just(Kind::Internal),
        1 => (0..TENANTS.len()).prop_map(Kind::InternalOwned),
        2 => Just(Kind::Shared),
    ]
}

/// (kind, eu pool?, Shoots on it)
type Spec = (Kind, bool, usize);

fn binding(i: usize, (kind, eu, _): &Spec) -> BindingView {
    let mut labels = BTreeMap::from([("hyperscalerType".to_string(), "aws".to_string())]);
    let mut put = |k: &str, v: &str| labels.insert(k.to_string(), v.to_string());
    if *eu && !matches!(kind, Kind::Shared) {
        put("euAccess", "true");
    }
    match kind {
        Kind::Free => None,
        Kind::Owned(t) => put("tenantName", TENANTS[*t]),
        Kind::Dirty(t) => put("tenantName", TENANTS[*t]).and(put("dirty", "true")),
        Kind::Internal => put("internal", "true"),
        Kind::InternalOwned(t) => put("tenantName", TENANTS[*t]).and(put("internal", "true")),
        Kind::Shared => put("shared", "true"),
    };
    BindingView {
        name: format!("cb-{i:02}"),
        resource_version: Some("1".into()),
        labels: labels.into(),
        ..Default::default()
    }
}

fn initial_shoots(specs: &[Spec]) -> Vec<ShootView> {
    let per = specs
        .iter()
        .enumerate()
        .flat_map(|(i, (_, _, n))| (0..*n).map(move |j| (i, j)));
    per.map(|(i, j)| ShootView {
        name: format!("old-{i}-{j}"),
        binding: Some(format!("cb-{i:02}")),
        ..Default::default()
    })
    .collect()
}

fn policy(allowed: &[usize], limit: Option<i32>) -> MultiAccountPolicy {
    let spec = MultiHyperscalerAccount {
        allowed_global_accounts: allowed.iter().map(|t| TENANTS[*t].to_string()).collect(),
        limits: limit.map(|l| ("aws".to_string(), l)).into_iter().collect(),
    };
    MultiAccountPolicy::from_spec(Some(&spec))
}

#[derive(Clone, Debug)]
enum Event {
    /// A new claim of tenant `.0` for pool `.1`.
    Request(usize, usize),
    /// The oldest-but-`.0` outstanding write finishes; `.1`: it succeeds.
    Complete(usize, bool),
    /// The caches catch up with the true state.
    Sync,
    /// The `.0`-th bound claim without writes in flight is deleted and released.
    Delete(usize),
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        4 => (0..TENANTS.len(), 0..3usize).prop_map(|(t, p)| Event::Request(t, p)),
        3 => (0..8usize, prop::bool::weighted(0.8)).prop_map(|(i, ok)| Event::Complete(i, ok)),
        1 => Just(Event::Sync),
        1 => (0..8usize).prop_map(Event::Delete),
    ]
}

/// A write the simulated controller has sent and not yet seen answered.
#[derive(Clone, Debug)]
struct Outstanding {
    claim: usize,
    binding: String,
    /// Claim write (label) before the status write; false: status write only.
    labels: bool,
}

/// The API server's state, the cache's (possibly stale) copy, and the controller's memory.
struct World {
    bindings: BTreeMap<String, BindingView>,
    claims: Vec<(ClaimView, usize)>,
    shoots: Vec<ShootView>,
    cache: Inventory,
    inflight: InFlight,
    outstanding: Vec<Outstanding>,
    /// Claims deleted and released (their finalizer removed).
    gone: BTreeSet<usize>,
    /// A deletion the caches have not seen: they over-count, which is safe for limits but makes
    /// "least used" relative to what the operator can know.
    unsynced_delete: bool,
    now: Instant,
}

impl World {
    fn new(bindings: Vec<BindingView>, shoots: Vec<ShootView>) -> Self {
        let bindings = bindings.into_iter().map(|b| (b.name.clone(), b)).collect();
        let mut w = World {
            bindings,
            claims: Vec::new(),
            shoots,
            cache: Inventory::default(),
            inflight: InFlight::new(Duration::from_secs(3600)),
            outstanding: Vec::new(),
            gone: BTreeSet::new(),
            unsynced_delete: false,
            now: Instant::now(),
        };
        w.sync();
        w
    }

    fn sync(&mut self) {
        let claims = self.live_claims().map(|(_, c)| c.clone());
        let truth = Inventory::build(
            ResolvedLabelKeys::default(),
            self.bindings.values().cloned(),
            claims,
            self.shoots.clone(),
        );
        self.cache = truth;
        self.unsynced_delete = false;
        for e in self.cache.bindings() {
            self.inflight.observe_binding(&e.view.name, Some(e));
        }
        for c in self.cache.claims() {
            self.inflight.observe_claim(&c.uid, Some(c));
        }
    }

    fn live_claims(&self) -> impl Iterator<Item = (usize, &ClaimView)> {
        self.claims
            .iter()
            .enumerate()
            .filter(|(i, _)| !self.gone.contains(i))
            .map(|(i, (c, _))| (i, c))
    }

    fn tenant_of(&self, b: &str) -> Option<&str> {
        self.bindings
            .get(b)
            .and_then(|v| v.labels.get("tenantName"))
            .map(String::as_str)
    }

    /// Clusters on `b` in the true state plus those of outstanding writes.
    fn true_clusters(&self, b: &str) -> BTreeSet<String> {
        let shoots = self
            .shoots
            .iter()
            .filter(|s| s.binding.as_deref() == Some(b))
            .map(|s| s.name.clone());
        let bound = self
            .live_claims()
            .filter(|(_, c)| !c.deleting && c.bound_binding.as_deref() == Some(b))
            .map(|(_, c)| c.cluster_name());
        let pending = self
            .outstanding
            .iter()
            .filter(|o| o.binding == b)
            .map(|o| self.claims[o.claim].0.cluster_name());
        shoots.chain(bound).chain(pending).collect()
    }

    /// Dedicated bindings of tenant `t` in `pool` in the true state, plus outstanding label writes.
    fn held(&self, t: &str, pool: &PoolKey) -> BTreeSet<String> {
        let in_pool = |b: &BindingView| {
            let l = &b.labels;
            (l.get("euAccess").map(String::as_str) == Some("true")) == pool.eu_access
                && !l.contains_key("shared")
                && !l.contains_key("dirty")
        };
        let labelled = self
            .bindings
            .values()
            .filter(|b| in_pool(b) && self.tenant_of(&b.name) == Some(t));
        let writing = self
            .outstanding
            .iter()
            .filter(|o| o.labels && self.claims[o.claim].0.global_account == t);
        let writing = writing.filter(|o| {
            self.claims[o.claim].1 == pools().iter().position(|p| p == pool).unwrap_or(9)
        });
        labelled
            .map(|b| b.name.clone())
            .chain(writing.map(|o| o.binding.clone()))
            .collect()
    }
}

fn run(
    specs: Vec<Spec>,
    allowed: Vec<usize>,
    limit: Option<i32>,
    events: Vec<Event>,
) -> Result<(), TestCaseError> {
    let bindings: Vec<_> = specs
        .iter()
        .enumerate()
        .map(|(i, s)| binding(i, s))
        .collect();
    let mut w = World::new(bindings, initial_shoots(&specs));
    let pol = policy(&allowed, limit);
    let pools = pools();
    for ev in events {
        match ev {
            Event::Request(t, p) => {
                let n = w.claims.len();
                let shoot = n.is_multiple_of(2).then(|| format!("new-{n}"));
                let view = ClaimView {
                    namespace: "kcp".into(),
                    name: format!("c{n}"),
                    uid: format!("u{n}"),
                    global_account: TENANTS[t].into(),
                    shoot_name: shoot,
                    ..Default::default()
                };
                w.claims.push((view.clone(), p));
                let req = Request {
                    claim: &view,
                    pool: &pools[p],
                    provider_type: "aws",
                };
                let choice = select(&w.cache, &w.inflight, &req, &pol, &BTreeSet::new(), w.now);
                check(&w, &pol, limit, TENANTS[t], &pools[p], &view, &choice)?;
                w.inflight.record(&view, &pools[p], &choice, w.now);
                match choice {
                    Choice::Claim { binding, .. } => {
                        w.outstanding.push(Outstanding {
                            claim: n,
                            binding,
                            labels: true,
                        });
                    }
                    Choice::Use { binding, .. } => w.outstanding.push(Outstanding {
                        claim: n,
                        binding,
                        labels: false,
                    }),
                    _ => {}
                }
            }
            Event::Complete(i, ok) if !w.outstanding.is_empty() => {
                let o = w.outstanding.remove(i % w.outstanding.len());
                let uid = w.claims[o.claim].0.uid.clone();
                match (o.labels, ok) {
                    (true, true) => {
                        let ga = w.claims[o.claim].0.global_account.clone();
                        if let Some(b) = w.bindings.get_mut(&o.binding) {
                            b.labels.insert("tenantName".into(), ga);
                            b.resource_version = Some("2".into());
                        }
                        w.inflight.claim_written(&o.binding, w.now);
                        w.claims[o.claim].0.bound_binding = Some(o.binding.clone());
                        w.inflight.assignment_written(&uid, w.now);
                    }
                    (true, false) => w.inflight.claim_failed(&o.binding),
                    (false, true) => {
                        w.claims[o.claim].0.bound_binding = Some(o.binding.clone());
                        w.inflight.assignment_written(&uid, w.now);
                    }
                    (false, false) => w.inflight.assignment_failed(&uid),
                }
            }
            Event::Complete(..) => {}
            Event::Sync => w.sync(),
            Event::Delete(i) => delete(&mut w, i)?,
        }
        w.now += Duration::from_millis(10);
    }
    Ok(())
}

/// Deletes a bound claim and releases its binding; a release must never take a binding that
/// another cluster uses or that is shared or internal.
fn delete(w: &mut World, i: usize) -> Result<(), TestCaseError> {
    let busy: BTreeSet<usize> = w.outstanding.iter().map(|o| o.claim).collect();
    let candidates: Vec<usize> = w
        .live_claims()
        .filter(|(n, c)| c.bound_binding.is_some() && !busy.contains(n))
        .map(|(n, _)| n)
        .collect();
    if candidates.is_empty() {
        return Ok(());
    }
    let n = candidates[i % candidates.len()];
    w.unsynced_delete = true;
    w.claims[n].0.deleting = true;
    let view = w.claims[n].0.clone();
    match decide_release(
        &view,
        &w.cache,
        &w.inflight,
        ReleaseMode::MarkDirty,
        Origin::User,
        w.now,
    ) {
        Release::MarkDirty {
            binding,
            expected_resource_version,
        } => {
            let others: BTreeSet<String> = w
                .true_clusters(&binding)
                .into_iter()
                .filter(|c| *c != view.cluster_name())
                .collect();
            prop_assert!(
                others.is_empty(),
                "released {binding} still used by {others:?}"
            );
            let labels = &w.bindings[&binding].labels;
            for k in ["shared", "internal", "dirty"] {
                prop_assert!(!labels.contains_key(k), "released {binding} with {k}");
            }
            prop_assert_eq!(w.tenant_of(&binding), Some(view.global_account.as_str()));
            w.inflight
                .release_started(&binding, expected_resource_version, w.now);
            if let Some(b) = w.bindings.get_mut(&binding) {
                b.labels.insert("dirty".into(), "true".into());
                b.resource_version = Some("3".into());
            }
            w.inflight.release_written(&binding, w.now);
            w.gone.insert(n);
            w.inflight.forget_claim(&view.uid, w.now);
        }
        Release::Keep(_) => {
            w.gone.insert(n);
            w.inflight.forget_claim(&view.uid, w.now);
        }
        Release::WaitForShoot { shoot } => {
            prop_assert!(false, "no claim has a Shoot here, yet waits for {shoot}")
        }
        Release::WaitForSibling { sibling, .. } => {
            prop_assert!(
                false,
                "no binding here shares a credential, yet waits for {sibling}"
            )
        }
        // A use of the binding is being written or not in the cache yet: the claim keeps its
        // finalizer and a later deletion step decides again.
        Release::WaitForUse { binding, .. } => {
            let assigned = w.inflight.assigned(w.now);
            prop_assert!(
                assigned
                    .get(binding.as_str())
                    .is_some_and(|m| !m.is_empty()),
                "waits for a use of {binding}, yet none is in flight"
            );
        }
        Release::WaitForWrite { binding } | Release::Resolve { binding, .. } => {
            prop_assert!(false, "no write is in doubt here, yet waits for {binding}")
        }
        Release::ReleaseClean { binding, .. }
        | Release::ReadSource { binding }
        | Release::WaitForSource { binding } => {
            prop_assert!(
                false,
                "no claim here is a source's, yet {binding} is released as one"
            )
        }
    }
    Ok(())
}

fn check(
    w: &World,
    pol: &MultiAccountPolicy,
    limit: Option<i32>,
    t: &str,
    pool: &PoolKey,
    claim: &ClaimView,
    choice: &Choice,
) -> Result<(), TestCaseError> {
    let multi = pol.allows(t);
    let held = w.held(t, pool);
    let cluster = claim.cluster_name();
    match choice {
        Choice::Claim { binding, .. } => {
            let b = &w.bindings[binding];
            prop_assert!(
                !b.labels.contains_key("tenantName"),
                "claimed {binding}, held by {:?}",
                w.tenant_of(binding)
            );
            for k in ["shared", "internal", "dirty"] {
                prop_assert!(!b.labels.contains_key(k), "claimed {binding} with {k}");
            }
            prop_assert!(!pool.shared);
            prop_assert!(
                !w.outstanding
                    .iter()
                    .any(|o| o.labels && o.binding == *binding),
                "{binding} claimed twice"
            );
            if !multi {
                prop_assert!(
                    held.is_empty(),
                    "{t} already holds {held:?} and claimed {binding}"
                );
            }
            if let Some(l) = limit.filter(|_| multi && !w.unsynced_delete) {
                let full = held.iter().all(|h| w.true_clusters(h).len() >= l as usize);
                prop_assert!(
                    full,
                    "{t} claimed {binding} while one of {held:?} is below {l}"
                );
            }
        }
        Choice::Use { binding, decision } => {
            let before = w.true_clusters(binding);
            if pool.shared {
                prop_assert!(
                    w.bindings[binding].labels.get("shared").map(String::as_str) == Some("true")
                );
            } else {
                prop_assert_eq!(
                    w.tenant_of(binding),
                    Some(t),
                    "used {} of another tenant",
                    binding
                );
                let dirty = w.bindings[binding].labels.contains_key("dirty");
                prop_assert!(!dirty, "used dirty {}", binding);
            }
            if let (Some(l), true, false, false) =
                (limit, multi, pool.shared, before.contains(&cluster))
            {
                prop_assert!(
                    before.len() < l as usize,
                    "{binding} has {} clusters, limit {l}",
                    before.len()
                );
            }
            if *decision == UseReason::Reused && multi && !pool.shared {
                prop_assert!(
                    before.contains(&cluster),
                    "allowlisted reuse of {binding} without the cluster on it"
                );
            }
            if *decision == UseReason::SharedLeastUsed && !w.unsynced_delete {
                let m = w
                    .cache
                    .pool(pool)
                    .map(|m| m.shared.clone())
                    .unwrap_or_default();
                let least = m
                    .iter()
                    .map(|b| w.true_clusters(b).len())
                    .min()
                    .unwrap_or(0);
                prop_assert_eq!(before.len(), least);
            }
        }
        Choice::Wait { binding } => {
            prop_assert!(!pool.shared);
            // A claim of the binding is being written, or the tenant's binding is being released.
            let claiming = w
                .outstanding
                .iter()
                .any(|o| o.labels && o.binding == *binding);
            let releasing = w.inflight.is_releasing(binding, w.now);
            prop_assert!(
                claiming || releasing,
                "waits for {binding} with nothing in flight"
            );
        }
        Choice::Exhausted { .. } | Choice::Bound { .. } | Choice::Lost { .. } => {}
    }
    Ok(())
}

/// `items` reordered by the random `keys`.
fn permute<T>(items: Vec<T>, keys: &[u64]) -> Vec<T> {
    let mut keyed: Vec<(u64, usize, T)> = items
        .into_iter()
        .enumerate()
        .map(|(i, x)| (keys.get(i % keys.len().max(1)).copied().unwrap_or(0), i, x))
        .collect();
    keyed.sort_by_key(|(k, i, _)| (*k, *i));
    keyed.into_iter().map(|(_, _, x)| x).collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn simulated_controller_keeps_the_invariants(
        specs in prop::collection::vec((kind(), any::<bool>(), 0..4usize), 0..14),
        allowed in prop::collection::vec(0..TENANTS.len(), 0..3),
        limit in prop::option::of(1..5i32),
        events in prop::collection::vec(event(), 1..60),
    ) {
        run(specs, allowed, limit, events)?;
    }

    #[test]
    fn the_choice_does_not_depend_on_listing_order(
        specs in prop::collection::vec((kind(), any::<bool>(), 0..4usize), 0..14),
        keys in prop::collection::vec(any::<u64>(), 64),
        t in 0..TENANTS.len(),
        p in 0..3usize,
        multi in any::<bool>(),
    ) {
        let bindings: Vec<_> = specs.iter().enumerate().map(|(i, s)| binding(i, s)).collect();
        let shoots = initial_shoots(&specs);
        let build = |b: Vec<BindingView>, s: Vec<ShootView>| Inventory::build(ResolvedLabelKeys::default(), b, Vec::<ClaimView>::new(), s);
        let a = build(bindings.clone(), shoots.clone());
        let b = build(permute(bindings, &keys), permute(shoots, &keys));
        let pol = policy(if multi { &[0, 1, 2, 3] } else { &[] }, Some(2));
        let claim = ClaimView { name: "c".into(), uid: "u".into(), global_account: TENANTS[t].into(), ..Default::default() };
        let pools = pools();
        let req = Request { claim: &claim, pool: &pools[p], provider_type: "aws" };
        let fl = InFlight::default();
        let now = Instant::now();
        prop_assert_eq!(
            select(&a, &fl, &req, &pol, &BTreeSet::new(), now),
            select(&b, &fl, &req, &pol, &BTreeSet::new(), now)
        );
    }

    #[test]
    fn fill_most_populated_picks_the_fullest_binding_below_the_limit(
        counts in prop::collection::vec(0..8usize, 1..6),
        free in any::<bool>(),
        limit in 1..8i32,
    ) {
        let mut bindings: Vec<_> = (0..counts.len()).map(|i| binding(i, &(Kind::Owned(0), false, 0))).collect();
        if free { bindings.push(binding(99, &(Kind::Free, false, 0))); }
        let shoots: Vec<_> = counts.iter().enumerate().flat_map(|(i, n)| {
            (0..*n).map(move |j| ShootView { name: format!("s-{i}-{j}"), binding: Some(format!("cb-{i:02}")), ..Default::default() })
        }).collect();
        let inv = Inventory::build(ResolvedLabelKeys::default(), bindings, Vec::<ClaimView>::new(), shoots);
        let claim = ClaimView { name: "c".into(), uid: "u".into(), global_account: "t0".into(), ..Default::default() };
        let pools = pools();
        let req = Request { claim: &claim, pool: &pools[0], provider_type: "aws" };
        let got = select(&inv, &InFlight::default(), &req, &policy(&[0], Some(limit)), &BTreeSet::new(), Instant::now());
        // Oracle: highest count strictly below the limit, first index among equals.
        let best = counts.iter().enumerate().filter(|(_, n)| **n < limit as usize)
            .fold(None::<(usize, usize)>, |acc, (i, n)| match acc { Some((_, m)) if m >= *n => acc, _ => Some((i, *n)) });
        let want = match (best, free) {
            (Some((i, _)), _) => Choice::Use { binding: format!("cb-{i:02}"), decision: UseReason::FilledMostPopulated },
            (None, true) => Choice::Claim { binding: "cb-99".into(), expected_resource_version: Some("1".into()) },
            (None, false) => {
                prop_assert!(matches!(got, Choice::Exhausted { .. }), "{got:?}");
                return Ok(());
            }
        };
        prop_assert_eq!(got, want);
    }
}
