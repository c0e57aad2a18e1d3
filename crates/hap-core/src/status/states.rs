//! The one count of bindings per lifecycle state: `status.pools[].states`, the
//! `hap_pool_bindings` metric and `hap pools` (table and JSON) all take it from here, with the
//! same inputs (the spec in force with its cooldown and suspect settings, and the clock), so
//! they cannot disagree about a cooling-down or suspect binding. The figures beside the counts
//! (minimum, claims in the window, rate, forecast) come from the same index: from the claims
//! recorded on the bindings, so every replica and every restart shows the same ones.

use jiff::Timestamp;

use crate::api::{HapConfigSpec, PoolLifecycle, PoolLowSpec, SuspectSpec};
use crate::labels::PoolKey;
use crate::pools::lifecycle::{Cooldown, forecast};
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
            .filter_map(|q| Some((crate::pools::quarantine::pool_of(q), q.since_second()?)))
            .collect(),
    }
}

/// Every dedicated pool's bindings per state as `spec` and `now` judge them, with its minimum,
/// claims in the window, rate and forecast. The index keeps the states per event; this hands it
/// the rules and the time and reads them, O(pools + claims in the window).
pub fn pool_states(
    spec: &HapConfigSpec,
    inv: &mut Inventory,
    now: Timestamp,
) -> Vec<PoolLifecycle> {
    inv.set_lifecycle_rules(lifecycle_rules(spec, now));
    inv.lifecycle_tick(now);
    let mut pools = inv.lifecycles();
    forecast_all(spec, inv, &mut pools, now);
    pools
}

/// Fills each pool's minimum, claims in the window, rate and forecast.
fn forecast_all(
    spec: &HapConfigSpec,
    inv: &Inventory,
    pools: &mut [PoolLifecycle],
    now: Timestamp,
) {
    let low = spec.pool_low.as_ref();
    let window = PoolLowSpec::window(low);
    for p in pools {
        let key = PoolKey {
            hyperscaler_type: p.hyperscaler_type.clone(),
            eu_access: p.eu_access,
            shared: false,
        };
        let min = PoolLowSpec::min_free(low, &p.hyperscaler_type);
        p.min_free = (min > 0).then_some(min);
        let claims = inv.claims_in_window(&key, now, window);
        let free = p.states.get("Free").copied().unwrap_or(0);
        let (rate, days) = forecast(claims, window, free);
        p.claims_in_window = Some(i64::try_from(claims).unwrap_or(i64::MAX));
        p.claim_rate_per_day = Some(format!("{rate:.2}"));
        p.days_until_empty = days.map(|d| format!("{d:.1}"));
    }
}
