//! Types of the binding lifecycle: the suspect and pool-low settings, and per dedicated
//! pool in the status how many bindings are in each state, since when the oldest dirty one
//! waits, and which ones are cordoned and why.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Which Shoot errors make a binding `Suspect`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SuspectSpec {
    /// Error codes of `status.lastErrors[].codes`. Default
    /// `[ERR_INFRA_UNAUTHORIZED, ERR_INFRA_QUOTA_EXCEEDED]`; `[]` turns the check off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 32),
        inner(length(max = 64), regex(pattern = r"^ERR_[A-Z_]+$"))
    )]
    pub codes: Option<Vec<String>>,
    /// How many Shoots on the binding must report one of the codes. Default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1000))]
    pub threshold: Option<i32>,
}

/// The codes that make a binding suspect when the spec names none.
pub const DEFAULT_SUSPECT_CODES: [&str; 2] = ["ERR_INFRA_UNAUTHORIZED", "ERR_INFRA_QUOTA_EXCEEDED"];

impl SuspectSpec {
    /// The codes and threshold in force, defaults filled in.
    pub fn resolved(spec: Option<&SuspectSpec>) -> (Vec<String>, usize) {
        let codes = spec.and_then(|s| s.codes.clone()).unwrap_or_else(|| {
            DEFAULT_SUSPECT_CODES
                .iter()
                .map(|c| c.to_string())
                .collect()
        });
        let threshold = spec
            .and_then(|s| s.threshold)
            .and_then(|t| usize::try_from(t).ok())
            .filter(|t| *t >= 1)
            .unwrap_or(1);
        (codes, threshold)
    }
}

/// Pool-low thresholds and the claim-rate window.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PoolLowSpec {
    /// Free bindings every dedicated pool should keep at least. Default 0 (no check).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100000))]
    pub min_free: Option<i32>,
    /// Per hyperscalerType (both EU-access variants): its own minimum, overriding `minFree`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 200))]
    #[x_kube(validation = Rule::new("self.all(k, self[k] >= 0)").message("every minFree override must be at least 0"))]
    pub pools: Option<BTreeMap<String, i32>>,
    /// The window the claim rate is measured over (`24h`, `7d` is not a Go duration: `168h`).
    /// Default `24h`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = super::patterns::DURATION_PATTERN), length(max = 32))]
    pub claim_rate_window: Option<String>,
}

impl PoolLowSpec {
    /// The minimum of free bindings for a hyperscalerType (0: no check).
    pub fn min_free(spec: Option<&PoolLowSpec>, hyperscaler_type: &str) -> i64 {
        let own = spec
            .and_then(|s| s.pools.as_ref())
            .and_then(|p| p.get(hyperscaler_type).copied());
        i64::from(own.or(spec.and_then(|s| s.min_free)).unwrap_or(0).max(0))
    }

    /// The claim-rate window; 24 hours when unset or unreadable.
    pub fn window(spec: Option<&PoolLowSpec>) -> std::time::Duration {
        spec.and_then(|s| s.claim_rate_window.as_deref())
            .and_then(|w| crate::duration::parse(w).ok())
            .filter(|d| !d.is_zero())
            .unwrap_or(std::time::Duration::from_secs(24 * 3600))
    }
}

/// A binding whose Shoots report errors that point at the account itself.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SuspectBinding {
    pub binding: String,
    /// The configured codes its Shoots report.
    pub codes: Vec<String>,
    /// How many of its Shoots report one of them.
    pub shoots: i64,
}

/// The lifecycle of one dedicated pool.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolLifecycle {
    pub hyperscaler_type: String,
    pub eu_access: bool,
    /// Bindings per state: Free, Claimed, Dirty, CoolingDown, Cordoned, CleanupFailed, Suspect,
    /// InUseWithoutTenant, Internal, Quarantined (every state listed, zero included).
    pub states: BTreeMap<String, i64>,
    /// Since when the longest-waiting dirty binding is dirty: the release the operator recorded on
    /// it (`accountpool.io/released-at`), the same on every replica and after a restart; a binding
    /// marked dirty without that record counts from when the operator first saw it dirty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oldest_dirty_since: Option<Time>,
    /// Cordoned bindings with the reason given: at most 10, the first by name (`states` counts
    /// them all; `kubectl hap bindings --state Cordoned` lists every one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cordoned: Vec<CordonedBinding>,
    /// Suspect bindings with the codes seen: at most 10, the first by name (`states` counts them
    /// all; `kubectl hap bindings --state Suspect` lists every one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub suspect: Vec<SuspectBinding>,
    /// Bindings the cleanup job marked `accountpool.io/cleanup-failed=true`, with the job's
    /// reason: at most 10, the first by name (`states` counts them all; `kubectl hap bindings
    /// --state CleanupFailed` lists every one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cleanup_failed: Vec<CleanupFailedBinding>,
    /// The pool's minimum of free bindings (`spec.poolLow`); absent when 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_free: Option<i64>,
    /// Bindings the operator claimed in the pool during the claim-rate window, counted from the
    /// claim recorded on each binding (`accountpool.io/claimed-at`; a binding claimed twice in
    /// the window counts once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claims_in_window: Option<i64>,
    /// Claims per day over the window, two decimals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim_rate_per_day: Option<String>,
    /// Days until no binding is free at that rate, one decimal; absent while nothing is claimed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub days_until_empty: Option<String>,
}

/// A binding an operator cordoned.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CordonedBinding {
    pub binding: String,
    /// The tenant that holds it, if any: its clusters stay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// The `accountpool.io/cordon-reason` annotation, or empty.
    pub reason: String,
}

/// A binding the cleanup job could not wipe.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CleanupFailedBinding {
    pub binding: String,
    /// The tenant label it still carries (the tenant whose account was to be wiped), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// The `accountpool.io/cleanup-failed-reason` annotation, or empty.
    pub reason: String,
}

#[cfg(test)]
mod tests {
    use crate::api::{HapConfigSpec, OperatingMode, observing_denial, paused_denial};

    #[test]
    fn only_paused_true_pauses_and_the_denial_names_the_config_and_how_to_retry() {
        let mut spec = HapConfigSpec::default();
        assert!(!spec.is_paused());
        spec.paused = Some(false);
        assert!(!spec.is_paused());
        spec.paused = Some(true);
        assert!(spec.is_paused());
        let m = paused_denial("default", "Runtime");
        assert!(
            m.starts_with("Paused: HapConfig `default` is paused"),
            "{m}"
        );
        assert!(
            m.contains("no new Runtime") && m.contains("Retry the request once"),
            "{m}"
        );
    }

    #[test]
    fn the_observing_denial_names_the_config_the_kind_and_both_ways_out() {
        let spec = HapConfigSpec {
            mode: Some(OperatingMode::Observe),
            ..Default::default()
        };
        assert!(spec.is_observing() && spec.holds_binding_writes());
        let m = observing_denial("default", "Cluster");
        assert!(m.starts_with("Observing: HapConfig `default`"), "{m}");
        assert!(
            m.contains("this Cluster names no binding")
                && m.contains("Name the binding")
                && m.contains("spec.mode: Enforce"),
            "{m}"
        );
    }
}
