//! Quarantine of new accounts in the HapConfig (`spec.quarantine`): per dedicated pool, which
//! requests may take a binding that never served anyone until a Shoot on it has succeeded once.
//! Types and their CRD validation only; the state is `crate::pools::quarantine`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use super::accountclaim::{LABEL_VALUE_PATTERN, PLAN_PATTERN};
use super::policy::PinPool;

/// One quarantined pool. Its new bindings (created at or after `since` and never claimed, used,
/// released or dirty since) are `Quarantined`: only requests of `plans` or of `globalAccounts`
/// get them, until a Shoot on the binding has been created (`lastOperation` Create Succeeded,
/// or any later Reconcile, Restore or Migrate) or a person releases it
/// (`accountpool.io/quarantine=Released`). The plans and global accounts are matched as rule
/// entries match plans and pins match global accounts: exactly.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.since)").field_path(".since").reason(Reason::FieldValueRequired).message("the time from which new bindings are quarantined (RFC 3339, e.g. when the entry is added)"))]
#[x_kube(validation = Rule::new("has(self.plans) || has(self.globalAccounts)").message("quarantine: name the requests that may take quarantined bindings (plans, globalAccounts, or both); with neither, no request could prove a new account"))]
pub struct QuarantineSpec {
    /// The dedicated pool, by its labels (as a pin names it).
    pub pool: PinPool,
    /// Only bindings created at or after this time (RFC 3339, e.g. the time the entry is added)
    /// can be new: older ones, such as accounts taken over from KEB whose cleanup removed every
    /// trace of their tenants, served before and are never withheld. Required.
    // Optional in Rust only: an entry stored under an older schema must not make the whole
    // HapConfig undecodable (its watch would stop); validation names it (`rules::quarantine`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Time")]
    pub since: Option<Time>,
    /// Requests of these plans may take quarantined bindings (e.g. `trial`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 50), inner(length(max = 63), regex(pattern = PLAN_PATTERN)))]
    pub plans: Option<Vec<String>>,
    /// Requests of these global accounts may take quarantined bindings (e.g. a canary tenant).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 100), inner(length(max = 63), regex(pattern = LABEL_VALUE_PATTERN)))]
    pub global_accounts: Option<Vec<String>>,
}

/// Every pool at most once (CEL on the list; `hap validate` and the status say the same).
pub(crate) const QUARANTINE_UNIQUE_RULE: &str = "self.all(q, self.filter(r, r.pool.hyperscalerType == q.pool.hyperscalerType && (has(r.pool.euAccess) && r.pool.euAccess) == (has(q.pool.euAccess) && q.pool.euAccess)).size() == 1)";
pub(crate) const QUARANTINE_UNIQUE_MESSAGE: &str =
    "quarantine: a pool (hyperscalerType and euAccess) is listed twice: list every pool once";

impl QuarantineSpec {
    /// `since` in seconds since the epoch (a binding's creation time has that resolution);
    /// `None` for an entry without it, which validation refuses and nothing applies.
    pub fn since_second(&self) -> Option<i64> {
        self.since.as_ref().map(|t| t.0.as_second())
    }

    /// Whether a request of `plan` and `global_account` may take this pool's quarantined
    /// bindings.
    pub fn admits(&self, plan: &str, global_account: &str) -> bool {
        let has =
            |l: &Option<Vec<String>>, v: &str| l.as_ref().is_some_and(|l| l.iter().any(|x| x == v));
        has(&self.plans, plan) || has(&self.global_accounts, global_account)
    }
}
