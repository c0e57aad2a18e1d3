//! The one count of bindings per lifecycle state: `status.pools[].states`, the
//! `hap_pool_bindings` metric and `hap pools` (table and JSON) all take it from here, with the
//! same inputs (the spec in force with its cooldown and suspect settings, and the clock), so
//! they cannot disagree about a cooling-down or suspect binding.

use jiff::Timestamp;

use crate::api::{HapConfigSpec, PoolLifecycle, SuspectSpec};
use crate::pools::lifecycle::Cooldown;
use crate::pools::{Inventory, LifecycleRules};

/// The suspect codes and threshold, the release cooldown and the quarantined pools the spec
/// sets.
pub fn lifecycle_rules(spec: &HapConfigSpec, now: Timestamp) -> LifecycleRules {
    let (codes, threshold) = SuspectSpec::resolved(spec.suspect.as_ref());
    let cooldown = spec.release.as_ref().and_then(|r| r.cooldown.as_deref());
    LifecycleRules {
        codes,
        threshold,
        cooldown: Cooldown::from_spec(cooldown, now).map(|c| c.period),
        quarantined: spec
            .quarantine
            .iter()
            .flatten()
            .map(crate::pools::quarantine::pool_of)
            .collect(),
    }
}

/// Every dedicated pool's bindings per state as `spec` and `now` judge them. The index keeps
/// the states per event; this hands it the rules and the time and reads them, O(pools).
pub fn pool_states(
    spec: &HapConfigSpec,
    inv: &mut Inventory,
    now: Timestamp,
) -> Vec<PoolLifecycle> {
    inv.set_lifecycle_rules(lifecycle_rules(spec, now));
    inv.lifecycle_tick(now);
    inv.lifecycles()
}
