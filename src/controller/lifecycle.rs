//! The binding lifecycle in the HapConfig reconcile (issue 22): advances the first-seen-dirty
//! clock, computes every dedicated pool's states for the status, and exports them as metrics,
//! one series per pool and state.

use std::collections::BTreeSet;

use jiff::Timestamp;

use super::Context;
use crate::api::{HapConfigSpec, PoolLifecycle, SuspectSpec};
use crate::metrics::{PoolLabels, PoolStateLabels};
use crate::pools::lifecycle::{Cooldown, Marks};
use crate::pools::{BindingClass, Inventory};

/// The lifecycle of every dedicated pool, with the metrics exported from it.
pub(super) fn pools(ctx: &Context, spec: &HapConfigSpec, inv: &Inventory) -> Vec<PoolLifecycle> {
    let now = Timestamp::now();
    let cooldown = spec.release.as_ref().and_then(|r| r.cooldown.as_deref());
    let cooling = Cooldown::from_spec(cooldown, now)
        .map(|c| cooling_down(inv, &c))
        .unwrap_or_default();
    let (codes, threshold) = SuspectSpec::resolved(spec.suspect.as_ref());
    let suspects = inv.suspects(&codes, threshold);
    let suspect: BTreeSet<String> = suspects.keys().cloned().collect();
    let marks = Marks {
        cooling_down: Some(&cooling),
        suspect: Some(&suspect),
    };
    let pools = {
        // Poisoned only by a panic elsewhere; the clock is a plain map, still consistent.
        let mut clock = ctx
            .dirty_clock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        clock.observe(inv.dirty_bindings().map(|(_, b)| b), now);
        inv.lifecycles_with(marks, &clock, &suspects)
    };
    export(ctx, &pools, now);
    pools
}

/// Unclaimed bindings released less than the cooldown ago (kept from every other tenant).
fn cooling_down(inv: &Inventory, c: &Cooldown) -> BTreeSet<String> {
    inv.bindings()
        .filter(|e| matches!(e.pool, Some((_, BindingClass::Claimable))))
        .filter(|e| c.keeps(&e.view.annotations, None))
        .map(|e| e.view.name.clone())
        .collect()
}

fn export(ctx: &Context, pools: &[PoolLifecycle], now: Timestamp) {
    let m = &ctx.metrics;
    m.pool_bindings.clear();
    m.pool_oldest_dirty_seconds.clear();
    for p in pools {
        let eu_access = p.eu_access.to_string();
        for (state, n) in &p.states {
            m.pool_bindings
                .get_or_create(&PoolStateLabels {
                    hyperscaler_type: p.hyperscaler_type.clone(),
                    eu_access: eu_access.clone(),
                    state: state.clone(),
                })
                .set(*n);
        }
        let age = p
            .oldest_dirty_since
            .as_ref()
            .map_or(0, |t| now.duration_since(t.0).as_secs().max(0));
        m.pool_oldest_dirty_seconds
            .get_or_create(&PoolLabels {
                hyperscaler_type: p.hyperscaler_type.clone(),
                eu_access,
            })
            .set(age);
    }
}
