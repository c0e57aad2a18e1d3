//! The binding lifecycle in the HapConfig reconcile: hands the index the config's
//! rules and the time, reads every dedicated pool's states it keeps per event, and exports them
//! as metrics, one series per pool and state.

use jiff::Timestamp;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

use super::Context;
use crate::api::conditions::reasons;
use crate::api::{HapConfig, HapConfigSpec, HapConfigStatus, PoolLifecycle};
use crate::k8s::active::Hold;
use crate::metrics::{ConfigLabels, HeldLabels, PoolLabels, PoolStateLabels};
use crate::pools::Inventory;
use crate::status::Pause;

/// The lifecycle of every dedicated pool, with the metrics exported from it. The index keeps
/// the states per event; this pass moves its clock and reads them, O(pools).
pub(super) fn pools(
    ctx: &Context,
    spec: &HapConfigSpec,
    inv: &mut Inventory,
) -> Vec<PoolLifecycle> {
    let now = Timestamp::now();
    let pools = crate::status::pool_states(spec, inv, now);
    export(ctx, &pools, now);
    pools
}

/// The `Paused` condition of the config in force (none when no spec is in force) and the pause
/// metrics: whether paused, since when (the condition's transition, so a restart or a leader
/// change does not restart the count; Prometheus takes the age itself) and the alert's threshold.
pub(super) fn pause(
    ctx: &Context,
    cfg: &HapConfig,
    paused: Option<bool>,
    desired: &mut HapConfigStatus,
    now: &Time,
) {
    let (alert_after, note) = crate::status::paused_alert_after(&cfg.metadata);
    let pause = paused.map(|paused| Pause {
        paused,
        by: crate::status::paused_by(&cfg.metadata),
        note,
    });
    crate::status::set_paused_condition(desired, pause.as_ref(), cfg.metadata.generation, now);
    let labels = ConfigLabels {
        config: cfg.name_any(),
    };
    let m = &ctx.metrics;
    let since = crate::status::paused_since(desired);
    if since.is_none() {
        m.paused_since.remove(&labels);
    }
    let Some(pause) = pause else {
        m.paused.remove(&labels);
        m.paused_alert_after_seconds.remove(&labels);
        for reason in [reasons::OBSERVING, reasons::PAUSED] {
            m.releases_held.remove(&HeldLabels {
                config: labels.config.clone(),
                reason: reason.into(),
            });
        }
        return;
    };
    m.paused.get_or_create(&labels).set(i64::from(pause.paused));
    if let Some(since) = since {
        m.paused_since.get_or_create(&labels).set(since.as_second());
    }
    m.paused_alert_after_seconds
        .get_or_create(&labels)
        .set(i64::try_from(alert_after.as_secs()).unwrap_or(i64::MAX));
}

/// `hap_releases_held`: the releases under way, all waiting while writes are held, under the
/// reason the release reports (`Observing` before `Paused`, as `release::paused` says); the
/// other reason, and both while nothing is held, read 0, so an alert's `for:` ends at once.
pub(super) fn releases_held(ctx: &Context, config: &str, hold: Hold, releasing: usize) {
    let held = if hold.observing {
        Some(reasons::OBSERVING)
    } else if hold.paused {
        Some(reasons::PAUSED)
    } else {
        None
    };
    for reason in [reasons::OBSERVING, reasons::PAUSED] {
        let n = if held == Some(reason) { releasing } else { 0 };
        ctx.metrics
            .releases_held
            .get_or_create(&HeldLabels {
                config: config.to_string(),
                reason: reason.into(),
            })
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }
}

fn export(ctx: &Context, pools: &[PoolLifecycle], now: Timestamp) {
    let m = &ctx.metrics;
    m.pool_bindings.clear();
    m.pool_oldest_dirty_seconds.clear();
    m.pool_claim_rate.clear();
    m.pool_days_until_empty.clear();
    m.pool_min_free.clear();
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
        let pool = PoolLabels {
            hyperscaler_type: p.hyperscaler_type.clone(),
            eu_access,
        };
        m.pool_oldest_dirty_seconds.get_or_create(&pool).set(age);
        let parse = |s: &Option<String>| s.as_deref().and_then(|v| v.parse::<f64>().ok());
        m.pool_claim_rate
            .get_or_create(&pool)
            .set(parse(&p.claim_rate_per_day).unwrap_or(0.0));
        if let Some(days) = parse(&p.days_until_empty) {
            m.pool_days_until_empty.get_or_create(&pool).set(days);
        }
        m.pool_min_free
            .get_or_create(&pool)
            .set(p.min_free.unwrap_or(0));
    }
}
