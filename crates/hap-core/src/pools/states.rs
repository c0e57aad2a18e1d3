//! The lifecycle state of every dedicated binding, the per-pool state counts, the cordoned and
//! suspect bindings, the dirty clock and the claims per pool by their recorded time, kept one watch
//! event at a time, so that the HapConfig status and the metrics read them in O(pools), not
//! O(bindings + Shoots) a second.
//!
//! Each binding adds its part (pool, `lifecycle::state_of`, cordoned, suspect, release end, claim
//! time) when it is indexed or a fact of it moves, and takes it back before it changes: the same
//! shape as `tallies.rs`. The cooldown is the one fact that moves with time: released bindings are kept
//! by the end of their cooldown, and `tick` moves only those whose end it passes (either way,
//! should the wall clock step back). What still walks every binding or Shoot runs only when the
//! rules change (the config's suspect codes, threshold or cooldown), the label keys change or
//! the bindings are dropped: never per event or per second. The from-scratch walk in
//! `lifecycle.rs` is the reference a property test checks this against.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Bound;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::lifecycle::{
    BindingState, CLEANUP_FAILED_REASON, CORDON_REASON, CORDONED_NAMED, Facts, claimed,
    dirty_since, is_cleanup_failed, is_cordoned, released, state_of,
};
use super::{BindingClass, BindingEntry, Inventory, ShootView};
use crate::api::{CleanupFailedBinding, CordonedBinding, PoolLifecycle, SuspectBinding};
use crate::labels::PoolKey;

/// What decides the time- and config-dependent facts: the suspect codes and threshold and the
/// release cooldown (`spec.suspect`, `spec.release.cooldown`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rules {
    pub codes: Vec<String>,
    /// Shoots with a configured code a binding needs to be suspect (0 reads as 1).
    pub threshold: usize,
    /// `None`: no cooldown.
    pub cooldown: Option<std::time::Duration>,
    /// The pools whose new bindings are quarantined (`spec.quarantine`), each with the time
    /// (seconds) from which a binding created can be new.
    pub quarantined: BTreeMap<PoolKey, i64>,
}

impl Default for Rules {
    /// No suspect codes and no cooldown: what `hap pools` shows without a config.
    fn default() -> Self {
        Rules {
            codes: Vec::new(),
            threshold: 1,
            cooldown: None,
            quarantined: BTreeMap::new(),
        }
    }
}

/// What one dedicated binding adds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Part {
    key: PoolKey,
    state: BindingState,
    cordoned: bool,
    cleanup_failed: bool,
    suspect: bool,
    /// When its cooldown ends (an unclaimed binding with a recorded release, a cooldown set).
    release_end: Option<Timestamp>,
    /// When the operator last claimed it (`CLAIMED_AT`): the claim rate counts it.
    claimed_at: Option<Timestamp>,
}

/// The index's lifecycle book (see the module text).
#[derive(Clone, Debug)]
pub(super) struct Tracker {
    rules: Rules,
    /// The time of the last `tick`; before the first, every recorded release counts as recent.
    now: Timestamp,
    counts: BTreeMap<PoolKey, [usize; BindingState::ALL.len()]>,
    cordoned: BTreeMap<PoolKey, BTreeSet<String>>,
    cleanup_failed: BTreeMap<PoolKey, BTreeSet<String>>,
    suspect: BTreeMap<PoolKey, BTreeSet<String>>,
    releases: BTreeMap<Timestamp, BTreeSet<String>>,
    /// Per pool, its bindings by the time the operator last claimed them.
    claims: BTreeMap<PoolKey, BTreeSet<(Timestamp, String)>>,
    /// Per binding, of its Shoots with a configured code: Shoots per code, and Shoots.
    codes_on: HashMap<String, (BTreeMap<String, usize>, usize)>,
    /// Dirty bindings: their pool and since when they are dirty (the release recorded on them,
    /// else when a tick first saw them dirty; `None` until one does).
    clock: HashMap<String, (PoolKey, Option<Timestamp>)>,
    oldest: BTreeMap<PoolKey, BTreeSet<(Timestamp, String)>>,
    pending: BTreeSet<String>,
}

impl Default for Tracker {
    fn default() -> Self {
        Tracker {
            rules: Rules::default(),
            now: Timestamp::MIN,
            counts: BTreeMap::new(),
            cordoned: BTreeMap::new(),
            cleanup_failed: BTreeMap::new(),
            suspect: BTreeMap::new(),
            releases: BTreeMap::new(),
            claims: BTreeMap::new(),
            codes_on: HashMap::new(),
            clock: HashMap::new(),
            oldest: BTreeMap::new(),
            pending: BTreeSet::new(),
        }
    }
}

fn index_of(s: BindingState) -> usize {
    BindingState::ALL
        .iter()
        .position(|x| *x == s)
        .unwrap_or_default()
}

/// Adds `name` to (or takes it from) the set under `key`, dropping emptied sets.
fn mark<K: Ord + Clone>(map: &mut BTreeMap<K, BTreeSet<String>>, key: &K, name: &str, add: bool) {
    if add {
        map.entry(key.clone()).or_default().insert(name.to_string());
    } else if let Some(set) = map.get_mut(key) {
        set.remove(name);
        if set.is_empty() {
            map.remove(key);
        }
    }
}

impl Tracker {
    /// Forgets every binding's part (the bindings are indexed again); Shoots and the clock stay.
    pub(super) fn clear_parts(&mut self) {
        self.counts.clear();
        self.cordoned.clear();
        self.cleanup_failed.clear();
        self.suspect.clear();
        self.releases.clear();
        self.claims.clear();
    }

    /// Forgets every binding, with the dirty clock (the binding watch moved).
    pub(super) fn clear_bindings(&mut self) {
        self.clear_parts();
        self.clock.clear();
        self.oldest.clear();
        self.pending.clear();
    }

    fn apply(&mut self, name: &str, p: &Part, add: bool) {
        let counts = self.counts.entry(p.key.clone()).or_default();
        let n = &mut counts[index_of(p.state)];
        *n = if add { *n + 1 } else { n.saturating_sub(1) };
        if counts.iter().all(|n| *n == 0) {
            self.counts.remove(&p.key);
        }
        if p.cordoned {
            mark(&mut self.cordoned, &p.key, name, add);
        }
        if p.cleanup_failed {
            mark(&mut self.cleanup_failed, &p.key, name, add);
        }
        if p.suspect {
            mark(&mut self.suspect, &p.key, name, add);
        }
        if let Some(end) = p.release_end {
            mark(&mut self.releases, &end, name, add);
        }
        if let Some(at) = p.claimed_at {
            let entry = (at, name.to_string());
            if add {
                self.claims.entry(p.key.clone()).or_default().insert(entry);
            } else if let Some(set) = self.claims.get_mut(&p.key) {
                set.remove(&entry);
                if set.is_empty() {
                    self.claims.remove(&p.key);
                }
            }
        }
    }

    fn is_suspect(&self, binding: &str) -> bool {
        self.codes_on
            .get(binding)
            .is_some_and(|(_, n)| *n >= self.rules.threshold.max(1))
    }

    fn release_end(&self, annotations: &BTreeMap<String, String>) -> Option<Timestamp> {
        let period = self.rules.cooldown.filter(|p| !p.is_zero())?;
        let (at, _) = released(annotations)?;
        let period = jiff::SignedDuration::try_from(period).unwrap_or(jiff::SignedDuration::MAX);
        at.checked_add(period).ok()
    }

    /// Counts (or takes back) the configured codes of one Shoot on its binding.
    fn count_codes(&mut self, binding: &str, codes: &[&String], add: bool) {
        let e = self.codes_on.entry(binding.to_string()).or_default();
        for c in codes {
            let n = e.0.entry((*c).clone()).or_default();
            *n = if add { *n + 1 } else { n.saturating_sub(1) };
            if *n == 0 {
                e.0.remove(*c);
            }
        }
        e.1 = if add { e.1 + 1 } else { e.1.saturating_sub(1) };
        if e.1 == 0 {
            self.codes_on.remove(binding);
        }
    }

    /// The binding is dirty in pool `key` since `recorded`, the release recorded on it (`None`:
    /// not dirty, or gone). Without a record it keeps the time it has, or waits for a tick.
    fn clock_to(&mut self, name: &str, dirty: Option<(PoolKey, Option<Timestamp>)>) {
        let held = self.clock.get(name).cloned();
        let Some((key, recorded)) = dirty else {
            if let Some((old, at)) = held {
                self.clock.remove(name);
                self.pending.remove(name);
                if let Some(t) = at {
                    self.unclock(&old, t, name);
                }
            }
            return;
        };
        let at = recorded.or_else(|| held.as_ref().and_then(|(_, at)| *at));
        if held.as_ref() == Some(&(key.clone(), at)) {
            return;
        }
        if let Some((old, Some(t))) = &held {
            self.unclock(old, *t, name);
        }
        match at {
            Some(t) => {
                self.pending.remove(name);
                self.oldest
                    .entry(key.clone())
                    .or_default()
                    .insert((t, name.to_string()));
            }
            None => {
                self.pending.insert(name.to_string());
            }
        }
        self.clock.insert(name.to_string(), (key, at));
    }

    fn unclock(&mut self, key: &PoolKey, t: Timestamp, name: &str) {
        if let Some(set) = self.oldest.get_mut(key) {
            set.remove(&(t, name.to_string()));
            if set.is_empty() {
                self.oldest.remove(key);
            }
        }
    }

    /// Dirty bindings no tick has seen yet are dirty since `now`.
    fn stamp(&mut self, now: Timestamp) {
        for name in std::mem::take(&mut self.pending) {
            if let Some((key, at @ None)) = self.clock.get_mut(&name) {
                *at = Some(now);
                self.oldest
                    .entry(key.clone())
                    .or_default()
                    .insert((now, name));
            }
        }
    }
}

impl Inventory {
    /// The part of one binding entry, from the facts the index holds now; `None` when it is in
    /// no pool or shared.
    pub(super) fn life_part(&self, e: &BindingEntry) -> Option<Part> {
        let (key, class) = e.pool.as_ref()?;
        let name = e.view.name.as_str();
        let release_end = match class {
            BindingClass::Claimable => self.life.release_end(&e.view.annotations),
            _ => None,
        };
        let facts = Facts {
            clusters: self.clusters_of(name, e.view.account).len(),
            cordoned: is_cordoned(&e.view.labels),
            cleanup_failed: is_cleanup_failed(&e.view.labels),
            suspect: self.account_suspect(name, e.view.account),
            cooling_down: release_end.is_some_and(|end| self.life.now < end),
            quarantined: matches!(class, BindingClass::Claimable)
                && self
                    .life
                    .rules
                    .quarantined
                    .get(key)
                    .is_some_and(|since| super::quarantine::on_trial(&e.view, *since)),
        };
        Some(Part {
            key: key.clone(),
            state: state_of(class, facts)?,
            cordoned: facts.cordoned,
            cleanup_failed: facts.cleanup_failed,
            suspect: facts.suspect,
            release_end,
            claimed_at: claimed(&e.view.annotations),
        })
    }

    /// The part of a binding by name, as the index holds it now.
    pub(super) fn life_of(&self, name: &str) -> Option<Part> {
        self.life_part(self.bindings.get(name)?)
    }

    /// Adds (`add`) or takes back the part of an entry.
    pub(super) fn life_apply(&mut self, e: &BindingEntry, add: bool) {
        if let Some(p) = self.life_part(e) {
            self.life.apply(&e.view.name, &p, add);
        }
    }

    /// A fact of `name` may have moved since its part was `old`: swaps the part when it did.
    pub(super) fn life_move(&mut self, name: &str, old: Option<Part>) {
        let new = self.life_of(name);
        if new == old {
            return;
        }
        if let Some(p) = old {
            self.life.apply(name, &p, false);
        }
        if let Some(p) = new {
            self.life.apply(name, &p, true);
        }
    }

    /// Follows the dirty clock after `name` was indexed, changed or removed.
    pub(super) fn life_clock(&mut self, name: &str) {
        let dirty_in = self.bindings.get(name).and_then(|e| match &e.pool {
            Some((key, BindingClass::Dirty { .. })) => {
                Some((key.clone(), dirty_since(&e.view.annotations)))
            }
            _ => None,
        });
        self.life.clock_to(name, dirty_in);
    }

    /// Counts (or takes back) a Shoot's configured error codes on its binding.
    pub(super) fn life_shoot(&mut self, s: &ShootView, add: bool) {
        let Some(binding) = &s.binding else { return };
        let codes: Vec<&String> = s
            .error_codes
            .iter()
            .filter(|c| self.life.rules.codes.contains(c))
            .collect();
        if codes.is_empty() {
            return;
        }
        // The codes make the account suspect: every binding of it moves.
        let names = self.account_members(binding);
        self.recounted(names, |inv| inv.life.count_codes(binding, &codes, add));
    }

    /// Whether Shoots on `name`, or on any binding of its account, failed with the configured
    /// codes often enough.
    fn account_suspect(&self, name: &str, account: Option<super::Account>) -> bool {
        self.life.is_suspect(name)
            || account
                .and_then(|a| self.accounts.get(&a))
                .is_some_and(|m| m.iter().any(|n| self.life.is_suspect(n)))
    }

    /// Judges suspects and cooldowns by `rules` from now on. Walks every Shoot and binding, but
    /// only when the rules differ from the ones in force (a config change, the first pass).
    pub fn set_lifecycle_rules(&mut self, rules: Rules) {
        if rules == self.life.rules {
            return;
        }
        self.life.clear_parts();
        self.life.codes_on.clear();
        self.life.rules = rules;
        let rules = &self.life.rules;
        let hits: Vec<(String, Vec<String>)> = self
            .shoots
            .values()
            .filter_map(|s| {
                let codes: Vec<String> = s
                    .error_codes
                    .iter()
                    .filter(|c| rules.codes.contains(c))
                    .cloned()
                    .collect();
                Some((s.binding.clone()?, codes)).filter(|(_, c)| !c.is_empty())
            })
            .collect();
        for (binding, codes) in &hits {
            let codes: Vec<&String> = codes.iter().collect();
            self.life.count_codes(binding, &codes, true);
        }
        let names: Vec<String> = self.bindings.keys().cloned().collect();
        for name in &names {
            if let Some(p) = self.life_of(name) {
                self.life.apply(name, &p, true);
            }
        }
    }

    /// The wall clock moved to `now`: cooldowns that ended (or, after a step back, began again)
    /// in between change state, and dirty bindings not seen by a tick yet are dirty since `now`.
    /// O(bindings whose cooldown end lies in between + newly dirty).
    pub fn lifecycle_tick(&mut self, now: Timestamp) {
        let before = self.life.now;
        if now != before {
            let range = (
                Bound::Excluded(before.min(now)),
                Bound::Included(before.max(now)),
            );
            let names: Vec<String> = self
                .life
                .releases
                .range(range)
                .flat_map(|(_, s)| s.iter().cloned())
                .collect();
            let old: Vec<Option<Part>> = names.iter().map(|n| self.life_of(n)).collect();
            self.life.now = now;
            for (name, old) in names.iter().zip(old) {
                self.life_move(name, old);
            }
        }
        self.life.stamp(now);
    }

    /// Whether every dirty binding of pool `key` carries a release record that dates it (a
    /// single list, as the CLI reads, has no other time to show). O(dirty bindings of the pool).
    pub fn dirty_all_dated(&self, key: &PoolKey) -> bool {
        self.pool(key).is_none_or(|m| {
            m.dirty.iter().all(|b| {
                self.bindings
                    .get(b)
                    .is_some_and(|e| dirty_since(&e.view.annotations).is_some())
            })
        })
    }

    /// Bindings of dedicated pool `key` the operator claimed less than `window` before `now`
    /// (a claim recorded after `now`, by a replica whose clock runs ahead, counts too).
    /// O(log bindings + claims in the window).
    pub fn claims_in_window(
        &self,
        key: &PoolKey,
        now: Timestamp,
        window: std::time::Duration,
    ) -> usize {
        let window = jiff::SignedDuration::try_from(window).unwrap_or(jiff::SignedDuration::MAX);
        let Some(set) = self.life.claims.get(key) else {
            return 0;
        };
        match now.checked_sub(window) {
            Ok(from) => set
                .range((Bound::Excluded((from, String::new())), Bound::Unbounded))
                .filter(|(t, _)| *t > from)
                .count(),
            Err(_) => set.len(),
        }
    }

    /// The lifecycle status of every dedicated pool that has a binding, ordered by pool key:
    /// O(pools), and up to `CORDONED_NAMED` named bindings each.
    pub fn lifecycles(&self) -> Vec<PoolLifecycle> {
        self.life
            .counts
            .iter()
            .map(|(key, counts)| self.pool_lifecycle(key, counts))
            .collect()
    }

    fn pool_lifecycle(
        &self,
        key: &PoolKey,
        counts: &[usize; BindingState::ALL.len()],
    ) -> PoolLifecycle {
        let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        let named = |m: &BTreeMap<PoolKey, BTreeSet<String>>| {
            m.get(key)
                .into_iter()
                .flatten()
                .take(CORDONED_NAMED)
                .cloned()
                .collect::<Vec<String>>()
        };
        let cordoned = named(&self.life.cordoned)
            .into_iter()
            .map(|b| {
                let e = self.bindings.get(&b);
                CordonedBinding {
                    tenant: e.and_then(|e| e.view.labels.get(&self.keys.tenant_name).cloned()),
                    reason: e
                        .and_then(|e| e.view.annotations.get(CORDON_REASON).cloned())
                        .unwrap_or_default(),
                    binding: b,
                }
            })
            .collect();
        let cleanup_failed = named(&self.life.cleanup_failed)
            .into_iter()
            .map(|b| {
                let e = self.bindings.get(&b);
                CleanupFailedBinding {
                    tenant: e.and_then(|e| e.view.labels.get(&self.keys.tenant_name).cloned()),
                    reason: e
                        .and_then(|e| e.view.annotations.get(CLEANUP_FAILED_REASON).cloned())
                        .unwrap_or_default(),
                    binding: b,
                }
            })
            .collect();
        let suspect = named(&self.life.suspect)
            .into_iter()
            .map(|b| {
                // Suspect through another binding of its account: that binding's codes.
                let (codes, n) = Some(b.as_str())
                    .filter(|b| self.life.is_suspect(b))
                    .or_else(|| self.siblings(&b).find(|s| self.life.is_suspect(s)))
                    .and_then(|s| self.life.codes_on.get(s))
                    .cloned()
                    .unwrap_or_default();
                SuspectBinding {
                    binding: b,
                    codes: codes.into_keys().collect(),
                    shoots: count(n),
                }
            })
            .collect();
        PoolLifecycle {
            hyperscaler_type: key.hyperscaler_type.clone(),
            eu_access: key.eu_access,
            states: BindingState::ALL
                .iter()
                .zip(counts)
                .map(|(s, n)| (s.as_str().to_string(), count(*n)))
                .collect(),
            oldest_dirty_since: self
                .life
                .oldest
                .get(key)
                .and_then(|s| s.first())
                .map(|(t, _)| Time(*t)),
            cordoned,
            cleanup_failed,
            suspect,
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests;

impl Inventory {
    /// One binding's pool and lifecycle state as the per-pool counts hold it (judged with the
    /// rules and time of the last `set_lifecycle_rules` and `lifecycle_tick`); `None` when it is
    /// shared or in no pool.
    pub fn binding_state(&self, name: &str) -> Option<(PoolKey, BindingState)> {
        self.life_of(name).map(|p| (p.key, p.state))
    }

    /// The configured error codes the Shoots on `name` report, sorted, and how many Shoots
    /// report one.
    pub fn binding_error_codes(&self, name: &str) -> Option<(Vec<String>, usize)> {
        self.life
            .codes_on
            .get(name)
            .map(|(codes, n)| (codes.keys().cloned().collect(), *n))
    }
}
