//! The AccountClaim resource: one cluster's request for hyperscaler credentials (docs/design.md §1).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A Kubernetes label value (the global account becomes the binding's `tenantName` label).
pub const LABEL_VALUE_PATTERN: &str = r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$";
/// Plan names: lowercase letters, digits, `-` and `_`.
pub const PLAN_PATTERN: &str = r"^[a-z0-9]([-a-z0-9_]*[a-z0-9])?$";
/// DNS-1123 label (Shoot names).
pub const DNS_LABEL_PATTERN: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";

/// A request for the hyperscaler credentials of one cluster. The spec cannot change once created.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "accountpool.io",
    version = "v1alpha1",
    kind = "AccountClaim",
    doc = "AccountClaim: one cluster's request for hyperscaler credentials. The operator picks the pool from the HapConfig in force, claims a binding for the global account and records it in status.",
    namespaced,
    shortname = "aclaim",
    category = "hap",
    status = "AccountClaimStatus",
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Global-Account","type":"string","jsonPath":".spec.globalAccount"}"#,
    printcolumn = r#"{"name":"Plan","type":"string","jsonPath":".spec.plan"}"#,
    printcolumn = r#"{"name":"Binding","type":"string","jsonPath":".status.credentialsBindingName"}"#,
    printcolumn = r#"{"name":"Type","type":"string","jsonPath":".status.hyperscalerType"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","priority":1,"jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name":"Source","type":"string","priority":1,"jsonPath":".metadata.labels.accountpool\\.io/source-kind"}"#,
    printcolumn = r#"{"name":"Source-Namespace","type":"string","priority":1,"jsonPath":".metadata.labels.accountpool\\.io/source-namespace"}"#,
    printcolumn = r#"{"name":"Source-Name","type":"string","priority":1,"jsonPath":".metadata.labels.accountpool\\.io/source-name"}"#
)]
#[x_kube(validation = Rule::new("self == oldSelf").message("spec is immutable: delete the AccountClaim and create a new one"))]
#[serde(rename_all = "camelCase")]
pub struct AccountClaimSpec {
    /// The tenant (BTP global account). Written as the `tenantName` label on a claimed binding,
    /// so it must be a valid label value.
    #[schemars(length(min = 1, max = 63), regex(pattern = LABEL_VALUE_PATTERN))]
    pub global_account: String,
    /// The BTP subaccount, for the record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub subaccount: Option<String>,
    /// The service plan, e.g. `aws`, `azure_lite`, `sap-converged-cloud`, `trial`.
    #[schemars(length(min = 1, max = 63), regex(pattern = PLAN_PATTERN))]
    pub plan: String,
    /// The BTP subaccount region, e.g. `cf-eu11`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), regex(pattern = LABEL_VALUE_PATTERN))]
    pub platform_region: Option<String>,
    /// The hyperscaler region of the cluster, e.g. `eu-central-1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), regex(pattern = LABEL_VALUE_PATTERN))]
    pub cluster_region: Option<String>,
    /// Provider type for plans that take it from the request (`trial`, `free`): `aws`, `azure`, `gcp`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 32), regex(pattern = DNS_LABEL_PATTERN))]
    pub provider: Option<String>,
    /// The Shoot that will use the credentials; clusters are counted by this name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), regex(pattern = DNS_LABEL_PATTERN))]
    pub shoot_name: Option<String>,
    /// A binding the cluster already uses (its provisioner chose it): recorded as this claim's
    /// binding instead of choosing one, and reported when it does not carry the global account.
    /// Set by the operator for requests it adopts (a Kyma Runtime created with a binding).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub adopt_binding: Option<String>,
}

/// Where a claim stands.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ClaimPhase {
    #[default]
    Pending,
    Bound,
    Failed,
}

/// How the binding was chosen.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum Decision {
    /// The tenant already held a binding in the pool.
    Reused,
    /// An unclaimed binding was claimed for the tenant.
    Claimed,
    /// The shared binding used by the fewest clusters.
    SharedLeastUsed,
    /// Multi-account: the tenant's binding with the most clusters below the limit.
    FilledMostPopulated,
    /// The binding pinned to the global account (`spec.pins` of the HapConfig).
    Pinned,
    /// The binding the request already named (`spec.adoptBinding`), recorded as it is.
    Adopted,
}

/// The rule entry that decided the pool.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MatchedRule {
    /// 1-based index in the rule list.
    pub index: i64,
    /// The entry as written.
    pub entry: String,
}

/// Observed state of an AccountClaim.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AccountClaimStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<ClaimPhase>,
    /// The binding the cluster must use (`spec.credentialsBindingName` of its Shoot).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_binding_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binding_namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hyperscaler_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eu_access: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matched_rule: Option<MatchedRule>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<Decision>,
    /// Which of the matched entry's ordered pools served the claim (1-based; above 1 is a
    /// fallback).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preference: Option<i64>,
    /// The claim write the operator sent for this claim and has not seen settled: the binding
    /// and the resourceVersion it was conditioned on. Written before the binding is; the claim
    /// is let go only once that write has landed or provably never can (a leader that paused
    /// with it in flight may see it land late).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim_write: Option<PendingClaimWrite>,
    /// Ready and Bound.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
}

/// A claim write of a binding: a compare-and-swap on `resourceVersion` that labels it for the
/// claim's tenant.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PendingClaimWrite {
    /// The binding written.
    pub binding: String,
    /// The binding's resourceVersion the write was conditioned on.
    pub resource_version: String,
    /// The binding's namespace (the config's `bindingNamespace` when it was written).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The binding's kind (the config's `bindingKind` when it was written).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<super::BindingKind>,
}
