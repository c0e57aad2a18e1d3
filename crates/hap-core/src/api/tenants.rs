//! Tenant authorization in the HapConfig (`spec.tenants`): which requesters may claim for which
//! global accounts. Types and their CRD validation only; the decision is `crate::tenancy`.

use std::collections::BTreeMap;

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::patterns::{LABEL_KEY_PATTERN, NAMESPACE_PATTERN};

/// Who may claim for whom. Without this section every requester may claim for every global
/// account (as before it existed). With it, a request is served only when one of `rules` allows
/// it; any other ends `TenantNotAllowed`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.rules.all(r, self.rules.filter(s, s.name == r.name).size() == 1)").message("tenants.rules: every name must be unique"))]
pub struct TenantPolicy {
    /// Allow rules; a request needs one rule all of whose conditions hold. Order does not matter.
    #[schemars(length(max = 50))]
    pub rules: Vec<TenantRule>,
}

/// Who a request comes from: an AccountClaim a person or controller created, or the object of a
/// request source.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, JsonSchema,
)]
pub enum RequesterKind {
    AccountClaim,
    Shoot,
    Runtime,
    Cluster,
}

impl RequesterKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RequesterKind::AccountClaim => "AccountClaim",
            RequesterKind::Shoot => "Shoot",
            RequesterKind::Runtime => "Runtime",
            RequesterKind::Cluster => "Cluster",
        }
    }
}

impl From<super::SourceKind> for RequesterKind {
    fn from(k: super::SourceKind) -> Self {
        match k {
            super::SourceKind::Shoot => RequesterKind::Shoot,
            super::SourceKind::Runtime => RequesterKind::Runtime,
            super::SourceKind::Cluster => RequesterKind::Cluster,
        }
    }
}

/// One allow rule. Every condition that is set must hold; unset conditions hold for anyone.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.users) && !has(self.groups) || (has(self.kinds) && !self.kinds.exists(k, k == 'AccountClaim'))").message("users and groups are known at admission only: a rule with them needs kinds without AccountClaim"))]
pub struct TenantRule {
    /// Named in every refusal and in `hap explain`.
    #[schemars(length(min = 1, max = 63), regex(pattern = NAMESPACE_PATTERN))]
    pub name: String,
    /// Requesters this rule covers: `AccountClaim`, `Shoot`, `Runtime`, `Cluster`. Default: all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 4))]
    pub kinds: Option<Vec<RequesterKind>>,
    /// The requester's namespace is one of these (for a source: the object's namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1000))]
    #[schemars(inner(length(max = 63)))]
    pub namespaces: Option<Vec<String>>,
    /// The requester's namespace carries all these labels with these values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_labels: Option<BTreeMap<String, String>>,
    /// The global account is one of these (exactly, as `tenantName` is compared; `*` any).
    /// Default: any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 10000))]
    pub global_accounts: Option<Vec<String>>,
    /// The global account must equal (exactly) the value of this label on the requester's
    /// namespace: each namespace claims only for its own tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 317), regex(pattern = LABEL_KEY_PATTERN))]
    pub global_account_from_namespace_label: Option<String>,
    /// The admission request's user is one of these (`system:serviceaccount:<ns>:<name>`).
    /// Sources only: known at admission time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 100))]
    pub users: Option<Vec<String>>,
    /// The admission request's user is in one of these groups. Sources only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 100))]
    pub groups: Option<Vec<String>>,
    /// Requests this rule allows may name their binding (`spec.adoptBinding` of an AccountClaim,
    /// a Runtime or Shoot that already names one). Default `false`: only fresh claims.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adopt_binding: Option<bool>,
}
