//! The policy parts of the HapConfig spec (issue 13): rule entries in structured form (ordered
//! pools and deny, seed 002's `oneOf`), pins of global accounts to named bindings, and the CEL
//! rules that reject the EU-access and shared-fallback mistakes at apply time.
//!
//! The CEL rules check what a regular expression can see; the operator's validation
//! (`rules::CompiledRules`) checks everything again with the same words, so `hap validate` and a
//! rejected `kubectl apply` agree.

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::accountclaim::{LABEL_VALUE_PATTERN, PLAN_PATTERN};

/// A region condition: a region name, or `*` for any region.
pub const REGION_CONDITION_PATTERN: &str = r"^(\*|[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$";
/// A Kubernetes object name (DNS-1123 subdomain), as bindings are named.
pub const OBJECT_NAME_PATTERN: &str =
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
/// The most preferences one entry may list.
pub const MAX_PREFERENCES: usize = 8;

/// One rule entry written as an object: the same model as an entry of `rules`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.message) || size(self.oneOf) == 0").message("message is what a deny entry tells the request: set it only with oneOf: []"))]
#[x_kube(validation = Rule::new(EU_FALLBACK_RULE).message(Message::Expression(EU_FALLBACK_MESSAGE.into())))]
#[x_kube(validation = Rule::new(SHARED_FALLBACK_RULE).message(Message::Expression(SHARED_FALLBACK_MESSAGE.into())))]
pub struct StructuredRule {
    /// The plan the entry matches, e.g. `aws`, `sap-converged-cloud`.
    #[schemars(length(min = 1, max = 63), regex(pattern = PLAN_PATTERN))]
    pub plan: String,
    /// Match condition on the request's platform region: a region, or `*` for any. Unset: no condition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), regex(pattern = REGION_CONDITION_PATTERN))]
    pub platform_region: Option<String>,
    /// Match condition on the request's cluster (hyperscaler) region: a region, or `*` for any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), regex(pattern = REGION_CONDITION_PATTERN))]
    pub cluster_region: Option<String>,
    /// The pools to use, in order: the first one with a usable binding serves the request (a
    /// binding the tenant already holds in any of them is reused first). `[]` denies every
    /// request the entry matches.
    #[schemars(length(max = 8))]
    pub one_of: Vec<PoolPreference>,
    /// What a denied request is told (only with `oneOf: []`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 200))]
    pub message: Option<String>,
}

/// One preference: the labels of the pool it names.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.sharedFallback) || !self.sharedFallback || (has(self.shared) && self.shared)").message("sharedFallback: true needs shared: true (it accepts this shared pool as the fallback of a dedicated one)"))]
pub struct PoolPreference {
    /// Append `_<platform region>` to the hyperscalerType.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform_region_suffix: Option<bool>,
    /// Append `_<cluster region>` (after the platform region part).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_region_suffix: Option<bool>,
    /// Use the shared pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared: Option<bool>,
    /// Accept this shared pool as the fallback of an earlier, dedicated preference. Without it a
    /// dedicated preference never falls back to a shared pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_fallback: Option<bool>,
    /// `Required`: bindings labelled `euAccess=true`; `FromRequest`: required for requests from
    /// an EU-access platform region (`euAccessPlatformRegions`); unset: the label must be absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eu_access: Option<EuAccessMode>,
}

/// What a preference requires of the pool's euAccess label.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum EuAccessMode {
    /// `euAccess=true`.
    Required,
    /// `euAccess=true` for requests from an EU-access platform region, else absent.
    FromRequest,
    /// The label must be absent (the default).
    Absent,
}

/// A global account pinned to one named binding.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Pin {
    /// The tenant (BTP global account).
    #[schemars(length(min = 1, max = 63), regex(pattern = LABEL_VALUE_PATTERN))]
    pub global_account: String,
    /// The binding (in `bindingNamespace`) the tenant's clusters use; it is claimed for this
    /// tenant and never given to another one.
    #[schemars(length(min = 1, max = 253), regex(pattern = OBJECT_NAME_PATTERN))]
    pub binding: String,
    /// The pool the pin is for. Unset: the pool the binding's labels put it in; while the
    /// binding is missing, every dedicated request of the tenant waits for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<PinPool>,
}

/// A dedicated pool, named by its labels.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PinPool {
    /// The pool's hyperscalerType label, e.g. `aws`, `gcp_cf-sa30`.
    #[schemars(length(min = 1, max = 63), regex(pattern = LABEL_VALUE_PATTERN))]
    pub hyperscaler_type: String,
    /// Whether the pool is the EU-access one (`euAccess=true`). Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eu_access: Option<bool>,
}

/// No binding pinned to two tenants; the message names the first such binding.
pub(crate) const PINS_ONE_TENANT_RULE: &str =
    "self.all(p, self.all(q, q.binding != p.binding || q.globalAccount == p.globalAccount))";
pub(crate) const PINS_ONE_TENANT_MESSAGE: &str = "'binding ' + self.filter(p, self.exists(q, q.binding == p.binding && q.globalAccount != p.globalAccount))[0].binding + ' is pinned to two global accounts: a pinned binding belongs to one tenant'";

// Apply-time checks. Each preference becomes one letter, so that a rule is a regular expression
// over the letters and its message can find the culprit's index: EU access N (absent),
// R (from request), A (required) must read N*R*A* — after an EU-access preference only EU-access
// ones; sharing D (dedicated), S (shared), F (shared, accepted as a fallback) must not have a D
// before an S.
macro_rules! eu_letters {
    () => {
        "self.oneOf.map(p, has(p.euAccess) && p.euAccess == 'Required' ? 'A' : (has(p.euAccess) && p.euAccess == 'FromRequest' ? 'R' : 'N')).join('')"
    };
}
macro_rules! shared_letters {
    () => {
        "self.oneOf.map(p, has(p.shared) && p.shared ? (has(p.sharedFallback) && p.sharedFallback ? 'F' : 'S') : 'D').join('')"
    };
}
/// The preferences of an entry string, spaces removed: the parts between `|` (KEB: after `->`).
macro_rules! entry_parts {
    () => {
        "(self.contains('->') ? self.split('->')[1] : self).replace(' ', '').split('|')"
    };
}
/// EU letter per preference of an entry string: Seed `euAccess=*` R, `euAccess[=true]` A; KEB `EU` A.
macro_rules! entry_eu_letters {
    () => {
        concat!(
            entry_parts!(),
            ".map(p, self.contains('->') ? (p.split(',').exists(o, o == 'EU') ? 'A' : 'N') : (p.matches('[(,]euAccess=[*][,)]') ? 'R' : (p.matches('[(,]euAccess(=true)?[,)]') ? 'A' : 'N'))).join('')"
        )
    };
}
/// Sharing letter per preference of an entry string: Seed `shared=fallback` F, `shared[=true]` S;
/// KEB `SF` F, `S` S.
macro_rules! entry_shared_letters {
    () => {
        concat!(
            entry_parts!(),
            ".map(p, self.contains('->') ? (p.split(',').exists(o, o == 'SF') ? 'F' : (p.split(',').exists(o, o == 'S') ? 'S' : 'D')) : (p.matches('[(,]shared=fallback[,)]') ? 'F' : (p.matches('[(,]shared(=true)?[,)]') ? 'S' : 'D'))).join('')"
        )
    };
}

const EU_FALLBACK_RULE: &str = concat!(eu_letters!(), ".matches('^N*R*A*$')");
const EU_FALLBACK_MESSAGE: &str = concat!(
    "cel.bind(k, size(",
    eu_letters!(),
    ".find('^N*R*A*')), 'oneOf[' + string(k) + ']: preference ' + string(k + 1) + ' falls back from an EU-access pool to a pool without EU access: every preference after an EU-access one (euAccess: Required, or FromRequest) must be EU-access too')"
);
const SHARED_FALLBACK_RULE: &str = concat!("!", shared_letters!(), ".matches('D[^S]*S')");
const SHARED_FALLBACK_MESSAGE: &str = concat!(
    "cel.bind(k, size(",
    shared_letters!(),
    ".find('^[^D]*D[^S]*')), 'oneOf[' + string(k) + ']: preference ' + string(k + 1) + ' falls back from a dedicated pool to a shared one: say so explicitly with sharedFallback: true')"
);

/// The column of the `|` before preference `k` of an entry string (CEL).
macro_rules! bar_column {
    () => {
        "size(self.find('^([^|]*[|]){' + string(k) + '}'))"
    };
}
const ENTRY_EU_RULE: &str = concat!(
    "self.contains('\"') || ",
    entry_eu_letters!(),
    ".matches('^N*R*A*$')"
);
const ENTRY_EU_MESSAGE: &str = concat!(
    "cel.bind(k, size(",
    entry_eu_letters!(),
    ".find('^N*R*A*')), 'column ' + string(",
    bar_column!(),
    ") + ': preference ' + string(k + 1) + ' falls back from an EU-access pool to a pool without EU access: every preference after an EU-access one (euAccess, euAccess=*; KEB: EU) must be EU-access too')"
);
const ENTRY_SHARED_RULE: &str = concat!(
    "self.contains('\"') || !",
    entry_shared_letters!(),
    ".matches('D[^S]*S')"
);
const ENTRY_SHARED_MESSAGE: &str = concat!(
    "cel.bind(k, size(",
    entry_shared_letters!(),
    ".find('^[^D]*D[^S]*')), 'column ' + string(",
    bar_column!(),
    ") + ': preference ' + string(k + 1) + ' falls back from a dedicated pool to a shared one: say so explicitly with shared=fallback (KEB: SF)')"
);

/// Adds per-item CEL rules to the `rules` list schema, so that a rejection names the item
/// (`spec.rules[2]`) and its message the column. Entries with a quoted message are deny entries,
/// which have no preferences; the operator checks them (and every other case) in full.
pub fn rule_items(schema: &mut schemars::Schema) {
    if let Some(items) = schema.get_mut("items").and_then(|i| i.as_object_mut()) {
        items.insert(
            "x-kubernetes-validations".into(),
            serde_json::json!([
                {"rule": ENTRY_EU_RULE, "messageExpression": ENTRY_EU_MESSAGE},
                {"rule": ENTRY_SHARED_RULE, "messageExpression": ENTRY_SHARED_MESSAGE},
            ]),
        );
    }
}
