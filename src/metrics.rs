//! Prometheus metrics. Labels are bounded: hyperscaler types and outcomes, never object names,
//! except the seed-004 per-binding / per-global-account gauges, whose cardinality is the
//! operator's own inventory (one series per binding or tenant, as upstream KEB exports them).

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TypeLabels {
    pub hyperscaler_type: String,
}

/// A dedicated pool and a lifecycle state (crate::pools::lifecycle): a bounded set, never a
/// binding's name.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolStateLabels {
    pub hyperscaler_type: String,
    pub eu_access: String,
    pub state: String,
}

/// A dedicated pool.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolLabels {
    pub hyperscaler_type: String,
    pub eu_access: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BindingLabels {
    pub credentials_binding: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TenantLabels {
    pub global_account: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub outcome: String,
}

/// A fallback preference (2, 3, ...) of an entry and the pool type it gave.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FallbackLabels {
    pub preference: String,
    pub hyperscaler_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    pub controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConfigLabels {
    /// The HapConfig in force (`--config-name`).
    pub config: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HeldLabels {
    /// The HapConfig in force (`--config-name`).
    pub config: String,
    /// `Observing` or `Paused`: what holds the releases.
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LaneLabels {
    /// `source` (request-source claims) or `claims` (all others).
    pub lane: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StructureLabels {
    /// One of the operator's maps, queues or timers (`controller::footprint`).
    pub structure: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AdmissionLabels {
    /// Shoot, Cluster, Runtime.
    pub kind: String,
    /// untouched, patched, denied, error.
    pub outcome: String,
}

/// Every metric the operator exports.
pub struct Metrics {
    pub registry: Registry,
    pub bindings_per_global_account: Family<TenantLabels, Gauge>,
    pub shoots_per_binding: Family<BindingLabels, Gauge>,
    pub available_bindings: Family<TypeLabels, Gauge>,
    pub claimed_bindings: Family<TypeLabels, Gauge>,
    pub dirty_bindings: Family<TypeLabels, Gauge>,
    pub shared_bindings: Family<TypeLabels, Gauge>,
    pub claim_outcomes: Family<OutcomeLabels, Counter>,
    pub fallback_bindings: Family<FallbackLabels, Counter>,
    pub claims_waiting: Family<TypeLabels, Gauge>,
    pub reconcile_seconds: Family<ControllerLabels, Histogram>,
    pub reconcile_errors: Family<OutcomeLabels, Counter>,
    /// Claims in line for a reconcile slot, per lane (`controller::lanes`).
    pub claim_reconciles_queued: Family<LaneLabels, Gauge>,
    pub leader: Gauge,
    /// Compiles of the HapConfig in force: one per generation the replica sees (the webhook and
    /// the controllers share one compiled config).
    pub config_compiles: Counter,
    /// Resync sweeps started (`--resync`, and one per refresh cycle).
    pub resync_sweeps: Counter,
    pub admission_seconds: Family<AdmissionLabels, Histogram>,
    pub pool_bindings: Family<PoolStateLabels, Gauge>,
    pub pool_oldest_dirty_seconds: Family<PoolLabels, Gauge>,
    pub pool_claim_rate: Family<PoolLabels, Gauge<f64, AtomicU64>>,
    pub pool_days_until_empty: Family<PoolLabels, Gauge<f64, AtomicU64>>,
    pub pool_min_free: Family<PoolLabels, Gauge>,
    pub orphan_bindings: Family<TypeLabels, Gauge>,
    /// The hyperscaler types `orphan_bindings` has a series of (`set_orphans`).
    orphan_types: std::sync::Mutex<std::collections::BTreeSet<String>>,
    pub claim_bind_seconds: Family<TypeLabels, Histogram>,
    /// 1 while the config in force is paused (`spec.paused`), else 0.
    pub paused: Family<ConfigLabels, Gauge>,
    /// When the config in force was paused (Unix seconds); no series while it is not.
    pub paused_since: Family<ConfigLabels, Gauge>,
    /// How long a pause may last before `HapPausedTooLong` (annotation
    /// `accountpool.io/paused-alert-after`, 4h by default).
    pub paused_alert_after_seconds: Family<ConfigLabels, Gauge>,
    /// Releases under way that wait because the config in force holds binding writes, by what
    /// holds them; 0 for both reasons while nothing is held.
    pub releases_held: Family<HeldLabels, Gauge>,
    /// Entries of the operator's maps, queues and timers, sampled every 15 s.
    pub internal_entries: Family<StructureLabels, Gauge>,
    /// KEB's names of the pool gauges (`hap run --keb-metrics`), encoded after the `hap_*` ones.
    pub keb: Option<crate::metrics_keb::KebMetrics>,
    /// The length of the last exposition: the next is written into a buffer of about that size
    /// from the start. Grown by doubling, a scrape at 100k bindings and tenants held ~13 MB for
    /// a moment (BENCHMARKS.md, Churn), twice the text.
    last_len: std::sync::atomic::AtomicUsize,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// The `hap_*` metrics, plus KEB's names when `keb` (crate::metrics_keb).
    pub fn with_keb_names(keb: bool) -> Self {
        Self {
            keb: keb.then(crate::metrics_keb::KebMetrics::new),
            ..Self::new()
        }
    }

    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("hap");
        let m = Self {
            bindings_per_global_account: Family::default(),
            shoots_per_binding: Family::default(),
            available_bindings: Family::default(),
            claimed_bindings: Family::default(),
            dirty_bindings: Family::default(),
            shared_bindings: Family::default(),
            claim_outcomes: Family::default(),
            fallback_bindings: Family::default(),
            claims_waiting: Family::default(),
            reconcile_seconds: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.0005, 2.0, 16))
            }),
            reconcile_errors: Family::default(),
            claim_reconciles_queued: Family::default(),
            leader: Gauge::default(),
            config_compiles: Counter::default(),
            resync_sweeps: Counter::default(),
            admission_seconds: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.0005, 2.0, 16))
            }),
            pool_bindings: Family::default(),
            pool_oldest_dirty_seconds: Family::default(),
            pool_claim_rate: Family::default(),
            pool_days_until_empty: Family::default(),
            pool_min_free: Family::default(),
            orphan_bindings: Family::default(),
            orphan_types: Default::default(),
            // From a quarter second to about six days: a claim binds at once, or waits for a free binding.
            claim_bind_seconds: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.25, 2.0, 22))
            }),
            paused: Family::default(),
            paused_since: Family::default(),
            paused_alert_after_seconds: Family::default(),
            releases_held: Family::default(),
            internal_entries: Family::default(),
            keb: None,
            last_len: std::sync::atomic::AtomicUsize::new(0),
            registry: Registry::default(),
        };
        m.register_tenant_figures(&mut registry);
        m.register_operation_and_pools(&mut registry);
        Self { registry, ..m }
    }

    /// The binding and claim figures per tenant and hyperscaler type. Registered first: the
    /// registration order is the order of the exposition, which stays as it was.
    fn register_tenant_figures(&self, registry: &mut Registry) {
        registry.register(
            "credentials_bindings_per_global_account",
            "Dedicated bindings claimed by each global account",
            self.bindings_per_global_account.clone(),
        );
        registry.register(
            "shoots_per_credentials_binding",
            "Clusters (Shoots and bound claims) on each binding",
            self.shoots_per_binding.clone(),
        );
        registry.register(
            "available_credentials_bindings",
            "Unclaimed, clean dedicated bindings per hyperscaler type",
            self.available_bindings.clone(),
        );
        registry.register(
            "claimed_credentials_bindings",
            "Claimed dedicated bindings per hyperscaler type",
            self.claimed_bindings.clone(),
        );
        registry.register(
            "dirty_credentials_bindings",
            "Bindings waiting for cleanup per hyperscaler type",
            self.dirty_bindings.clone(),
        );
        registry.register(
            "shared_credentials_bindings",
            "Shared bindings per hyperscaler type",
            self.shared_bindings.clone(),
        );
        registry.register(
            "claim_outcomes",
            "AccountClaim outcomes: decisions, and reasons once per claim that enters them",
            self.claim_outcomes.clone(),
        );
        registry.register(
        "fallback_bindings",
        "Claims bound through a fallback pool of their entry, by preference (2 = first fallback) and hyperscaler type",
        self.fallback_bindings.clone(),
    );
        registry.register(
        "claims_waiting",
        "Pending AccountClaims that wait for a binding of the type (PoolExhausted, Progressing, PinnedBindingUnavailable)",
        self.claims_waiting.clone(),
    );
    }

    /// The operator's own work (reconciles, leadership, admission) and the per-pool lifecycle
    /// figures, after the tenant figures.
    fn register_operation_and_pools(&self, registry: &mut Registry) {
        registry.register(
            "reconcile_duration_seconds",
            "Reconcile durations",
            self.reconcile_seconds.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Reconcile errors by kind",
            self.reconcile_errors.clone(),
        );
        registry.register(
            "claim_reconciles_queued",
            "Claims in line for a reconcile slot, per lane (source: request-source claims; claims: all others)",
            self.claim_reconciles_queued.clone(),
        );
        registry.register(
            "config_compiles",
            "Compiles of the HapConfig in force, one per generation this replica sees",
            self.config_compiles.clone(),
        );
        registry.register(
            "resync_sweeps",
            "Resync sweeps started: every --resync, and one at each refresh cycle of the HapConfig",
            self.resync_sweeps.clone(),
        );
        registry.register(
            "leader",
            "1 while this replica holds the leader lease",
            self.leader.clone(),
        );
        registry.register(
            "admission_duration_seconds",
            "Admission webhook calls of request sources, by kind and outcome",
            self.admission_seconds.clone(),
        );
        registry.register(
        "pool_bindings",
        "Bindings of each dedicated pool per lifecycle state (Free, Claimed, Dirty, CoolingDown, Cordoned, CleanupFailed, Suspect, InUseWithoutTenant, Internal)",
        self.pool_bindings.clone(),
    );
        registry.register(
        "pool_oldest_dirty_seconds",
        "Age of the longest-waiting dirty binding of each dedicated pool, from the release recorded on it (accountpool.io/released-at); 0 when none is dirty",
        self.pool_oldest_dirty_seconds.clone(),
    );
        registry.register(
        "pool_claims_per_day",
        "Claims per day of each dedicated pool over spec.poolLow.claimRateWindow (default 24h), from the claims recorded on the bindings (accountpool.io/claimed-at)",
        self.pool_claim_rate.clone(),
    );
        registry.register(
        "pool_days_until_empty",
        "Days until no binding of the pool is free at its claim rate; no series while nothing is claimed",
        self.pool_days_until_empty.clone(),
    );
        registry.register(
        "pool_min_free",
        "The pool's minimum of free bindings (spec.poolLow); below it PoolsAvailable is False with reason PoolLow",
        self.pool_min_free.clone(),
    );
        registry.register(
        "orphan_bindings",
        "Bindings labelled for a tenant that no bound claim and no Shoot uses, per hyperscaler type (status.orphans)",
        self.orphan_bindings.clone(),
    );
        registry.register(
        "claim_bind_duration_seconds",
        "Time from an AccountClaim's creation to the write of its Bound status, per hyperscaler type",
        self.claim_bind_seconds.clone(),
    );
        registry.register(
            "paused",
            "1 while the HapConfig in force is paused (spec.paused: no binding writes), else 0",
            self.paused.clone(),
        );
        registry.register(
            "paused_since_timestamp_seconds",
            "When the HapConfig in force was paused (its Paused condition turned True), in Unix seconds; no series while it is not paused",
            self.paused_since.clone(),
        );
        registry.register(
            "paused_alert_after_seconds",
            "How long a pause may last before HapPausedTooLong fires (annotation accountpool.io/paused-alert-after, default 4h)",
            self.paused_alert_after_seconds.clone(),
        );
        registry.register(
            "releases_held",
            "Releases under way (deleting AccountClaims that still record a binding) that wait because the HapConfig in force holds binding writes, by reason (Observing: spec.mode Observe; Paused: spec.paused); 0 while nothing is held",
            self.releases_held.clone(),
        );
        registry.register(
            "internal_entries",
            "Entries of the operator's own maps, queues and records (the index's maps, the in-flight write records, the reconcile lanes, the claim store, backoffs, refused writes, request-source objects), sampled every 15 s; one that grows while the landscape does not is a leak",
            self.internal_entries.clone(),
        );
    }

    /// The orphan count of each hyperscaler type: every series is set to its value in one step
    /// and only a type no longer counted loses its series, so a scrape never sees an orphan
    /// count drop to nothing (which would restart an alert's `for:`).
    pub fn set_orphans(&self, counts: &std::collections::BTreeMap<String, i64>) {
        let Ok(mut types) = self.orphan_types.lock() else {
            return;
        };
        for gone in types.iter().filter(|t| !counts.contains_key(*t)) {
            self.orphan_bindings.remove(&TypeLabels {
                hyperscaler_type: gone.clone(),
            });
        }
        for (t, n) in counts {
            self.orphan_bindings
                .get_or_create(&TypeLabels {
                    hyperscaler_type: t.clone(),
                })
                .set(*n);
        }
        *types = counts.keys().cloned().collect();
    }

    /// Records a claim's time from creation to its Bound status.
    pub fn observe_bind(&self, hyperscaler_type: &str, created: Option<jiff::Timestamp>) {
        if let Some(created) = created {
            self.claim_bind_seconds
                .get_or_create(&TypeLabels {
                    hyperscaler_type: hyperscaler_type.to_string(),
                })
                .observe(seconds_since(created, jiff::Timestamp::now()));
        }
    }

    /// The OpenMetrics text exposition.
    pub fn encode(&self) -> String {
        use prometheus_client::encoding::text::{encode_eof, encode_registry};
        use std::sync::atomic::Ordering::Relaxed;
        let last = self.last_len.load(Relaxed);
        // An eighth to spare: series come and go between scrapes.
        let mut out = String::with_capacity(last + last / 8);
        let encoded = encode_registry(&mut out, &self.registry)
            .and_then(|()| {
                self.keb
                    .as_ref()
                    .map_or(Ok(()), |k| k.encode_into(&mut out))
            })
            .and_then(|()| encode_eof(&mut out));
        if encoded.is_err() {
            out.clear();
        }
        self.last_len.store(out.len(), Relaxed);
        out
    }
}

pub type SharedMetrics = Arc<Metrics>;

/// Seconds from `created` (the API server's clock) to `now`; never negative, so that a clock
/// behind the API server's records an instant bind rather than a nonsense sample.
pub fn seconds_since(created: jiff::Timestamp, now: jiff::Timestamp) -> f64 {
    let nanos = now.as_nanosecond() - created.as_nanosecond();
    #[allow(clippy::cast_precision_loss)]
    let secs = nanos.max(0) as f64 / 1e9;
    secs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_since_creation_is_never_negative() {
        let t = jiff::Timestamp::from_second(1_700_000_000).unwrap();
        let later = jiff::Timestamp::from_second(1_700_000_090).unwrap();
        assert!((seconds_since(t, later) - 90.0).abs() < 1e-9);
        assert!(seconds_since(later, t).abs() < f64::EPSILON);
    }

    #[test]
    fn the_orphan_and_bind_time_families_are_exported() {
        let m = Metrics::new();
        let l = TypeLabels {
            hyperscaler_type: "aws".into(),
        };
        m.orphan_bindings.get_or_create(&l).set(2);
        m.claim_bind_seconds.get_or_create(&l).observe(3.0);
        let text = m.encode();
        assert!(
            text.contains("hap_orphan_bindings{hyperscaler_type=\"aws\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("hap_claim_bind_duration_seconds_count{hyperscaler_type=\"aws\"} 1"),
            "{text}"
        );
    }

    /// A series per binding and per tenant makes the text 6.25–12.5 MiB at 100k; grown by doubling,
    /// the buffer is up to twice the text and the text is copied at each step.
    #[test]
    fn a_scrape_writes_into_a_buffer_about_the_size_of_the_last_one() {
        let m = Metrics::new();
        let series = |n: usize| {
            for i in 0..n {
                let l = BindingLabels {
                    credentials_binding: format!("binding-{i:06}"),
                };
                m.shoots_per_binding.get_or_create(&l).set(1);
            }
        };
        series(30_000);
        let first = m.encode();
        series(31_000);
        let second = m.encode();
        assert!(second.len() > first.len());
        // The first scrape's length and an eighth, never grown: the text fitted.
        assert_eq!(
            second.capacity(),
            first.len() + first.len() / 8,
            "{} bytes of buffer for {} of text",
            second.capacity(),
            second.len()
        );
    }
}
