//! The HapConfig resource: the cluster-scoped rule set and pool settings in force (docs/design.md §1).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::gardener::{BindingKind, CredentialsKind};
use super::policy::{
    PINS_ONE_TENANT_MESSAGE, PINS_ONE_TENANT_RULE, Pin, StructuredRule, rule_items,
};
use super::sources::{RequestSource, SourceStatus};

pub use super::patterns::{DURATION_PATTERN, LABEL_KEY_PATTERN, NAMESPACE_PATTERN};

/// HapConfig decides which pool of hyperscaler credentials a cluster request uses. Only the
/// object named by the operator's `--config-name` (default `default`) is in force.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "accountpool.io",
    version = "v1alpha1",
    kind = "HapConfig",
    doc = "HapConfig: the rules that map a cluster request (plan, platform region, cluster region) to a pool of hyperscaler credentials, and the pool settings. Only the object named by the operator's --config-name (default `default`) is in force.",
    shortname = "hapcfg",
    category = "hap",
    status = "HapConfigStatus",
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Rules","type":"integer","jsonPath":".status.ruleCount"}"#,
    printcolumn = r#"{"name":"Free","type":"integer","jsonPath":".status.freeBindings"}"#,
    printcolumn = r#"{"name":"Claimed","type":"integer","jsonPath":".status.claimedBindings"}"#,
    printcolumn = r#"{"name":"Paused","type":"string","jsonPath":".status.conditions[?(@.type==\"Paused\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","priority":1,"jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name":"Active","type":"integer","priority":1,"jsonPath":".status.activeGeneration"}"#
)]
#[x_kube(validation = Rule::new("!(has(self.rules) && has(self.legacyRules))").message("rules and legacyRules are mutually exclusive: set one of them"))]
#[x_kube(validation = Rule::new("has(self.rules) || has(self.legacyRules) || has(self.structuredRules)").message("one of rules or legacyRules is required (structuredRules count as rules)"))]
#[x_kube(validation = Rule::new("!(has(self.structuredRules) && has(self.legacyRules))").message("structuredRules and legacyRules are mutually exclusive: set one of them"))]
#[x_kube(validation = Rule::new("!has(self.legacyRules) || !has(self.ruleSyntax) || self.ruleSyntax == 'Seed'").message("ruleSyntax applies to rules only; remove it when using legacyRules"))]
#[x_kube(validation = Rule::new("!has(self.requestSources) || self.requestSources.all(s, self.requestSources.filter(t, t.id == s.id).size() == 1)").message("requestSources: every id must be unique"))]
#[x_kube(validation = Rule::new("!has(self.requestSources) || !self.requestSources.exists(s, s.kind == 'Shoot') || !has(self.shootNamespace) || self.shootNamespace == self.bindingNamespace").message("a Shoot request source needs shootNamespace equal to bindingNamespace: a Shoot can only use a binding of its own project namespace"))]
#[serde(rename_all = "camelCase")]
pub struct HapConfigSpec {
    /// Syntax of the entries in `rules`: `Seed` (default; `PLAN(PR=..., CR=..., shared, euAccess)`)
    /// or `KEB` (`PLAN(PR=...,HR=...) -> EU,S,PR,HR`, as Kyma Environment Broker writes them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_syntax: Option<RuleSyntax>,

    /// Rule entries. Each names a pool, an ordered list of pools (`| (...)`: the first with a
    /// usable binding serves), or denies what it matches (`deny "message"`). The most specific
    /// matching entry wins; order does not matter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1000), transform = rule_items)]
    #[x_kube(validation = Rule::new("self.all(r, size(r) <= 256)").message("a rule entry is at most 256 characters"))]
    pub rules: Option<Vec<String>>,

    /// Rule entries written as objects (plan, platformRegion, clusterRegion, oneOf, message):
    /// the same model as `rules`, and entries of one rule set with them; they are numbered after
    /// the entries of `rules`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 200))]
    pub structured_rules: Option<Vec<StructuredRule>>,

    /// The older four-property rule format (`plan[:region];...` per property). Exclusive with `rules`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub legacy_rules: Option<LegacyRules>,

    /// Plan table additions and overrides: plan → `{providerType: aws}` or `{providerFromRequest: true}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self.all(p, p.matches('^[a-z0-9]([-a-z0-9_]*[a-z0-9])?$') && size(p) <= 63)").message("plan names are lowercase letters, digits, '-' and '_', at most 63 characters"))]
    pub plans: Option<BTreeMap<String, PlanSpec>>,

    /// Plans that at least one rule must cover; a missing plan makes the rules invalid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 100))]
    pub required_plans: Option<Vec<String>>,

    /// Platform regions whose requests need EU-access accounts (`euAccess=*`). Default `[cf-eu11, cf-ch20]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 100))]
    pub eu_access_platform_regions: Option<Vec<String>>,

    /// Label keys on the bindings. Defaults: hyperscalerType, tenantName, shared, euAccess, dirty, internal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_keys: Option<LabelKeys>,

    /// The Gardener project namespace that holds the bindings (e.g. `garden-kyma`).
    #[schemars(length(min = 1, max = 63), regex(pattern = NAMESPACE_PATTERN))]
    pub binding_namespace: String,

    /// `CredentialsBinding` (default) or `SecretBinding` (legacy Gardener landscapes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binding_kind: Option<BindingKind>,

    /// Where Shoots are counted. Default: `bindingNamespace`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), regex(pattern = NAMESPACE_PATTERN))]
    pub shoot_namespace: Option<String>,

    /// Several accounts per global account, filled most-populated-first under per-provider limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multi_hyperscaler_account: Option<MultiHyperscalerAccount>,

    /// Global accounts pinned to named bindings (optionally per pool): the binding is used or
    /// claimed for that tenant only, and reported when it is missing or held by another tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 200))]
    #[x_kube(validation = Rule::new(PINS_ONE_TENANT_RULE).message(PINS_ONE_TENANT_MESSAGE))]
    pub pins: Option<Vec<Pin>>,

    /// What happens to a dedicated binding when its tenant's last cluster leaves it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release: Option<ReleaseSpec>,

    /// How often the operator lists bindings and Shoots again and reconciles every claim
    /// (`24h`, `90m`); the watches keep running meanwhile, and a list still running from the last
    /// refresh is left to finish. Unset or `0s`: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = DURATION_PATTERN), length(max = 32))]
    pub internal_state_refresh_cycle_duration: Option<String>,

    /// Foreign requests to serve besides AccountClaims: Gardener Shoots, openmcp Clusters, Kyma
    /// Runtimes (docs/sources.md). Each becomes an AccountClaim the operator creates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    pub request_sources: Option<Vec<RequestSource>>,

    /// Who may claim for which global accounts (docs/configuration.md, Tenant authorization).
    /// Unset: every requester may claim for every global account.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenants: Option<super::tenants::TenantPolicy>,

    // Account lifecycle: one block, kept together.
    /// Hold (as during a migration): while `true` nothing is written on bindings; new claims
    /// wait with reason `Paused`, releases wait, and the admission webhook refuses new requests
    /// of request sources with reason `Paused`. Setting it back to `false` resumes everything.
    /// A pause holds at once even in an edit that is otherwise invalid; lifting it takes a valid
    /// edit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,

    /// `Enforce` (the default): the operator claims, records and releases bindings. `Observe`:
    /// it runs beside another account pool (KEB's HAP) and writes nothing to bindings: claims wait
    /// with reason `Observing`, releases wait, the admission webhook admits request objects that
    /// name their binding (as KEB's do) untouched and refuses new ones it would serve with reason
    /// `Observing`, and `status.observation` reports what it would have chosen against what is in
    /// use (docs/migrating-from-keb.md). Cutover and rollback are an edit of this field. A switch
    /// to `Observe` holds at once even in an edit that is otherwise invalid; leaving it takes a
    /// valid edit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<OperatingMode>,

    /// In `Observe` mode: the namespace of KEB's Runtimes (in the operator's cluster) that the
    /// observation reads besides Shoots and AccountClaims. Default `kcp-system`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub observe_runtime_namespace: Option<String>,

    /// When a binding counts as `Suspect` (a broken account): its Shoots report these error
    /// codes in `status.lastErrors[].codes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspect: Option<super::lifecycle::SuspectSpec>,

    /// When a pool counts as low: fewer `Free` bindings than `minFree` makes `PoolsAvailable`
    /// False with reason `PoolLow`; and the window the claim rate is measured over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool_low: Option<super::lifecycle::PoolLowSpec>,

    /// Pools whose new bindings (created at or after the entry's `since`) are `Quarantined`:
    /// offered only to the requests each entry names (plans, global accounts) until a Shoot on
    /// the binding's account has been created (`lastOperation` Create Succeeded, or a later
    /// Reconcile, Restore or Migrate) or a person releases it (docs/operating.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 50))]
    #[x_kube(validation = Rule::new(super::quarantine::QUARANTINE_UNIQUE_RULE).message(super::quarantine::QUARANTINE_UNIQUE_MESSAGE))]
    pub quarantine: Option<Vec<super::quarantine::QuarantineSpec>>,
}

/// Syntax of rule entries.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum RuleSyntax {
    /// `PLAN(PR=v|*, CR=v|*, shared, euAccess[=*])`.
    #[default]
    Seed,
    /// `PLAN(PR=v,HR=v) -> EU,S,PR,HR`.
    #[serde(rename = "KEB")]
    Keb,
}

/// The four independent properties of the older rule format, each `plan[:region];...`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct LegacyRules {
    /// Plans (optionally `plan:platformRegion`) whose hyperscalerType gets `_<platform region>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4096))]
    pub platform_region_rule: Option<String>,
    /// Plans (optionally `plan:platformRegion`) whose hyperscalerType gets `_<cluster region>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4096))]
    pub cluster_region_rule: Option<String>,
    /// Plans (optionally `plan:platformRegion`) that use the shared pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4096))]
    pub shared_rule: Option<String>,
    /// Plans (optionally `plan:platformRegion`) that need EU-access accounts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4096))]
    pub eu_access_rule: Option<String>,
}

/// How a plan maps to a provider type.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.providerType) != (has(self.providerFromRequest) && self.providerFromRequest)").message("set exactly one of providerType or providerFromRequest: true"))]
pub struct PlanSpec {
    /// Fixed provider type, e.g. `aws`, `openstack`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 32),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    )]
    pub provider_type: Option<String>,
    /// The provider comes from the AccountClaim's `provider` (as for trial and free).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_from_request: Option<bool>,
}

/// Label keys on bindings; each defaults to its field name.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct LabelKeys {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 317), regex(pattern = LABEL_KEY_PATTERN))]
    pub hyperscaler_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 317), regex(pattern = LABEL_KEY_PATTERN))]
    pub tenant_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 317), regex(pattern = LABEL_KEY_PATTERN))]
    pub shared: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 317), regex(pattern = LABEL_KEY_PATTERN))]
    pub eu_access: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 317), regex(pattern = LABEL_KEY_PATTERN))]
    pub dirty: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 317), regex(pattern = LABEL_KEY_PATTERN))]
    pub internal: Option<String>,
}

/// Several hyperscaler accounts per global account (docs/design.md §1, `multiHyperscalerAccount`).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct MultiHyperscalerAccount {
    /// Global accounts that may hold several accounts per pool: `["*"]` all, `[]` none.
    #[serde(default)]
    #[schemars(length(max = 10000))]
    pub allowed_global_accounts: Vec<String>,
    /// Clusters per account: `default` and per provider type (`aws`, `gcp`, `openstack`, ...).
    /// Without an entry for the provider and without `default` there is no limit.
    // The API server checks `type: integer` but not `format: int32`, so a limit beyond i32 is
    // stored; it is read as i32::MAX (no practical limit) rather than failing to decode, which
    // would stop the HapConfig watch of every operator in the cluster.
    #[serde(default, deserialize_with = "saturating_limits")]
    #[x_kube(validation = Rule::new("self.all(k, self[k] >= 1)").message("every limit must be at least 1"))]
    pub limits: BTreeMap<String, i32>,
}

fn saturating_limits<'de, D>(d: D) -> Result<BTreeMap<String, i32>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let wide = BTreeMap::<String, i64>::deserialize(d)?;
    Ok(wide
        .into_iter()
        .map(|(k, v)| (k, v.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32))
        .collect())
}

/// Release behaviour.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ReleaseSpec {
    /// `MarkDirty` (default): label the binding `dirty=true` for the cleanup job, keep `tenantName`.
    /// `Retain`: leave the binding with its tenant.
    #[serde(default)]
    pub mode: ReleaseMode,
    /// Account lifecycle: how long a binding released by one tenant is kept from
    /// other tenants (`24h`, `90m`), counted from the release the operator recorded on it
    /// (`accountpool.io/released-at`). Unset or `0s`: no cooldown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = DURATION_PATTERN), length(max = 32))]
    pub cooldown: Option<String>,
}

/// Whether the operator writes bindings (`Enforce`) or only reports what it would do (`Observe`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum OperatingMode {
    Observe,
    #[default]
    Enforce,
}

/// Release mode.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ReleaseMode {
    #[default]
    MarkDirty,
    Retain,
}

/// Observed state of a HapConfig.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HapConfigStatus {
    /// The generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The generation whose rules are in force: the last valid one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_generation: Option<i64>,
    /// Ready, RulesValid, PoolsAvailable; Reconciling and Stalled only while True.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
    /// The spec of `activeGeneration`, for people and tools to read. The operator never reads it
    /// back: whoever may patch the status could write it. A restarted operator serves the last
    /// valid rules from its own record (ConfigMap `hap-last-known-good.<name>` in its namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_spec: Option<Box<HapConfigSpec>>,
    /// Number of rule entries in force.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_count: Option<i64>,
    /// Unclaimed dedicated bindings across the pools of the rules in force.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub free_bindings: Option<i64>,
    /// Dedicated bindings claimed by a tenant across those pools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claimed_bindings: Option<i64>,
    /// Per rule entry: what it produces and the figures of its pools.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<RuleStatus>,
    /// Bindings labelled for a tenant that no claim or Shoot uses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub orphans: Vec<OrphanStatus>,
    /// Bindings that clusters use although no tenant holds them, or although they wait for the
    /// cleanup job: per pool and reason. They need a person; the operator never claims them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bindings_in_use: Vec<BindingsInUse>,
    /// Every pin of the spec in force and the state of its binding.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pins: Vec<PinStatus>,
    /// When the in-memory state was last rebuilt from the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_refresh_time: Option<Time>,
    /// Per request source: whether it is watched and what it serves.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub request_sources: Vec<SourceStatus>,
    // Account lifecycle: one block, kept together.
    /// Per dedicated pool: bindings per lifecycle state, the oldest dirty one, cordoned ones.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pools: Vec<super::lifecycle::PoolLifecycle>,
    /// In `Observe` mode: what the operator would have chosen for every request of the
    /// landscape against the binding in use, as of the last resync.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observation: Option<ObservationStatus>,
}

/// The observe report in short: counts per verdict and the first disagreements.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObservationStatus {
    /// When the landscape was last read (once per `--resync`, and on every new generation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<Time>,
    /// The generation whose rules decided it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// How many requests were compared (Shoots, Runtimes, AccountClaims).
    pub requests: i64,
    /// Requests per verdict: `Agrees`, `OtherPool`, `NotAdoptable`, `Refused`, `WouldServe`,
    /// `TenancyOnly`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub verdicts: BTreeMap<String, i64>,
    /// Requests the operator would decide differently (`OtherPool`, `NotAdoptable`,
    /// `Refused`), the first 20 by kind and name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20))]
    pub disagreements: Vec<Disagreement>,
    /// Why some requests could not be read (e.g. the Runtime CRD is not installed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// One request the operator would decide differently from what is in use.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Disagreement {
    /// `Runtime`, `Shoot` or `AccountClaim`.
    pub kind: String,
    /// The request's `namespace/name`.
    pub request: String,
    /// The global account it is for (empty when it names none).
    pub tenant: String,
    /// The binding the request uses now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binding_in_use: Option<String>,
    /// The pools the operator's rules give the request, in order (empty when refused).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub would_choose: Vec<String>,
    /// `OtherPool`, `NotAdoptable` or `Refused`.
    pub verdict: String,
    /// Why, as `hap migrate --report` says it.
    pub message: String,
}

/// One rule entry and its pools.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RuleStatus {
    /// 1-based position of the entry in the rule list.
    pub index: i64,
    /// The entry as written.
    pub entry: String,
    /// The hyperscalerType it produces, or its pattern (`openstack_<clusterRegion>`).
    pub hyperscaler_type: String,
    /// `true` (required), `false` (must be absent) or `fromRequest`.
    pub eu_access: String,
    /// Whether the entry uses the shared pool.
    pub shared: bool,
    /// Pools this entry can reach, with their figures (of the first preference).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pools: Vec<PoolFigures>,
    /// Entries with fallbacks: every preference in order, with the figures of its pools.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preferences: Vec<PreferenceStatus>,
    /// The entry denies what it matches (`hyperscalerType` is then empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deny: Option<bool>,
    /// The deny entry's message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// One preference of a rule entry and its pools.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreferenceStatus {
    /// 1-based position in the entry's ordered pools; 1 is the primary.
    pub index: i64,
    /// The hyperscalerType, or its pattern.
    pub hyperscaler_type: String,
    /// `true`, `false` or `fromRequest`.
    pub eu_access: String,
    pub shared: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pools: Vec<PoolFigures>,
}

/// A pin and the state of its binding.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PinStatus {
    pub global_account: String,
    pub binding: String,
    /// `Held` (labelled for the tenant), `Free` (claimable: the next claim takes it), `Missing`,
    /// `HeldByOther`, or `Unusable` (shared, dirty, internal and free, or in another pool).
    pub state: String,
    /// What the state means for the tenant's claims.
    pub message: String,
}

/// Figures of one pool (bindings with the same hyperscalerType, euAccess and shared labels).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolFigures {
    pub hyperscaler_type: String,
    pub eu_access: bool,
    pub shared: bool,
    pub total: i64,
    pub free: i64,
    pub claimed: i64,
    pub dirty: i64,
    pub clusters: i64,
    /// How many of the pool's bindings reference each kind of credentials (`Secret`,
    /// `WorkloadIdentity`, `InternalSecret`); kinds with none are left out.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub credentials: BTreeMap<CredentialsKind, i64>,
}

/// A binding labelled for a tenant that no claim or Shoot uses.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OrphanStatus {
    pub binding: String,
    pub tenant: String,
    pub hyperscaler_type: String,
}

/// Bindings of one pool that clusters use in a state the operator cannot hand them out in.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BindingsInUse {
    pub hyperscaler_type: String,
    pub eu_access: bool,
    /// `InUseWithoutTenant`: a cluster uses the binding, but it carries no tenant label (the
    /// operator never claims it while so); `DirtyInUse`: it is marked for the cleanup job while
    /// a cluster still uses it.
    pub reason: String,
    /// How many bindings of the pool are in this state.
    pub count: i64,
    /// Their names, the first ones by name (at most 10).
    pub bindings: Vec<String>,
}

/// The pause switch: here, with the type, so that `lifecycle` need not name it.
impl HapConfigSpec {
    /// Whether the config holds every binding write (`spec.paused: true`).
    pub fn is_paused(&self) -> bool {
        self.paused == Some(true)
    }

    /// Whether the config only observes (`spec.mode: Observe`): no binding is written.
    pub fn is_observing(&self) -> bool {
        self.mode == Some(OperatingMode::Observe)
    }

    /// Whether binding writes are held, by `spec.paused` or by `spec.mode: Observe`.
    pub fn holds_binding_writes(&self) -> bool {
        self.is_paused() || self.is_observing()
    }
}

/// Why a new request of a request source is refused while paused. Every kind is refused rather
/// than admitted untouched: a Shoot without a binding is refused by Gardener anyway, and a
/// Cluster or Runtime admitted without one would never get one (the webhook serves an object
/// only when it is created).
pub fn paused_denial(config: &str, kind: &str) -> String {
    format!(
        "Paused: HapConfig `{config}` is paused (spec.paused: true, e.g. during a migration), \
         so no new {kind} gets a hyperscaler account now; nothing was created. Retry the \
         request once the platform team unpauses it (`kubectl get hapconfig {config}` shows \
         spec.paused)"
    )
}

/// Why a new request that names no binding is refused while observing: the operator assigns
/// none then, and one admitted without would not be served after the cutover either (the
/// webhook serves an object only when it is created). A request that names its binding, as
/// KEB's do, is admitted untouched.
pub fn observing_denial(config: &str, kind: &str) -> String {
    format!(
        "Observing: HapConfig `{config}` only observes (spec.mode: Observe), so hap-operator \
         assigns no hyperscaler account, and this {kind} names no binding; nothing was created. \
         Name the binding in the request (as KEB does while it still assigns accounts), or \
         retry once the platform team sets spec.mode: Enforce (`kubectl get hapconfig {config}` \
         shows spec.mode)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_beyond_i32_decode_saturated_instead_of_failing_the_watch() {
        // Found by the bad-input corpus: the API server stores `limits: {aws: 99999999999}`
        // (`format: int32` is not enforced); decoding it as i32 failed, which broke the
        // HapConfig watch of running operators and kept restarted ones from ever being ready.
        let cfg: HapConfig = serde_json::from_value(serde_json::json!({
            "apiVersion": "accountpool.io/v1alpha1",
            "kind": "HapConfig",
            "metadata": {"name": "other-team"},
            "spec": {
                "bindingNamespace": "garden",
                "rules": ["aws"],
                "multiHyperscalerAccount": {"limits": {"aws": 99_999_999_999_i64, "gcp": -99_999_999_999_i64, "default": 3}},
            },
        }))
        .expect("decodes");
        let limits = &cfg.spec.multi_hyperscaler_account.expect("multi").limits;
        assert_eq!(limits["aws"], i32::MAX);
        assert_eq!(limits["gcp"], i32::MIN);
        assert_eq!(limits["default"], 3);
    }

    #[test]
    fn status_numbers_beyond_32_bits_decode() {
        // The API server enforces the int64 range of `type: integer` but not `format: int32`;
        // with i64 fields no value it stores can fail to decode and stop the watch.
        let big = 99_999_999_999_i64;
        let cfg: HapConfig = serde_json::from_value(serde_json::json!({
            "apiVersion": "accountpool.io/v1alpha1",
            "kind": "HapConfig",
            "metadata": {"name": "x"},
            "spec": {"bindingNamespace": "garden", "rules": ["aws"]},
            "status": {"ruleCount": big, "freeBindings": big, "claimedBindings": big,
                "rules": [{"index": big, "entry": "aws", "hyperscalerType": "aws", "euAccess": "false", "shared": false,
                    "pools": [{"hyperscalerType": "aws", "euAccess": false, "shared": false,
                        "total": big, "free": big, "claimed": big, "dirty": big, "clusters": big}]}]},
        }))
        .expect("decodes");
        assert_eq!(cfg.status.expect("status").rules[0].pools[0].clusters, big);
        let claim: crate::api::AccountClaim = serde_json::from_value(serde_json::json!({
            "apiVersion": "accountpool.io/v1alpha1",
            "kind": "AccountClaim",
            "metadata": {"name": "c", "namespace": "n"},
            "spec": {"globalAccount": "ga", "plan": "aws"},
            "status": {"matchedRule": {"index": big, "entry": "aws"}},
        }))
        .expect("decodes");
        assert_eq!(
            claim.status.and_then(|s| s.matched_rule).map(|m| m.index),
            Some(big)
        );
    }
}
