//! Status types of the binding lifecycle (issue 22): per dedicated pool, how many bindings are in
//! each state, since when the oldest dirty one waits, and which ones are cordoned and why.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The lifecycle of one dedicated pool.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolLifecycle {
    pub hyperscaler_type: String,
    pub eu_access: bool,
    /// Bindings per state: Free, Claimed, Dirty, CoolingDown, Cordoned, Suspect,
    /// InUseWithoutTenant, Internal (every state listed, zero included).
    pub states: BTreeMap<String, i64>,
    /// When the longest-waiting dirty binding was first seen dirty by this operator process
    /// (a restart starts the clock again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oldest_dirty_since: Option<Time>,
    /// Cordoned bindings, the first ones by name (at most 10), with the reason given.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cordoned: Vec<CordonedBinding>,
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
