//! Binding labels: the configured label keys and the three pool selectors of docs/design.md §4 (tenant,
//! claim, any). One definition serves both the selector text users read and the in-memory match.
//! `CLAIMED_BY` is the one fixed key: the operator's record of which claim claimed a binding;
//! `FILLING` its record of the claims being bound to a binding whose status may not show yet.

use std::collections::BTreeMap;
use std::fmt;

use crate::api::LabelKeys;
use crate::small_map::SmallMap;

/// Labels a selector can be matched against: an object's `metadata.labels`, and a binding's
/// labels as the index keeps them (a short list, `SmallMap`).
pub trait LabelLookup {
    fn label(&self, key: &str) -> Option<&String>;

    fn has_label(&self, key: &str) -> bool {
        self.label(key).is_some()
    }
}

impl LabelLookup for BTreeMap<String, String> {
    fn label(&self, key: &str) -> Option<&String> {
        self.get(key)
    }
}

impl LabelLookup for SmallMap<String> {
    fn label(&self, key: &str) -> Option<&String> {
        self.get(key)
    }
}

/// The binding label naming the AccountClaim (by uid) whose claim write gave the binding its
/// tenant, for as long as no other claim was bound to it. Written in the same compare-and-swap
/// as the tenant label; removed (compare-and-swap) before any other claim is bound to the
/// binding; a clean release requires it to name the releasing claim (crate::release, step 9).
/// Fixed, not one of the configurable keys: it is the operator's own record, which no other
/// tool (KEB, the cleanup job) reads or writes, and a key that changed with the config would
/// make every record written under the old key read as absent — which is safe (dirty), but
/// pointless to offer.
pub const CLAIMED_BY: &str = "accountpool.io/claimed-by";

/// Annotation on a binding: the uids (comma-separated, sorted) of the claims a use (reuse, fill,
/// pin, adoption) put on it whose Bound status may not be recorded yet. The key is the one the
/// multi-account fills used first, kept so that replicas of both versions read each other's. Written in the same compare-and-swap that
/// precedes the status write of every use (crate::selection::claimant), so that a leader that
/// takes over while the previous leader's status write is still in flight counts those clusters
/// against the limit (docs/design.md §5.3), binds those claims there, and does not release the binding
/// under them. An entry whose claim is gone, bound, deleting, denied or of another tenant counts
/// for nothing and is dropped by the next use.
pub const FILLING: &str = "accountpool.io/filling";

/// Annotation on a binding: the uid of the claim whose earlier claim write of the binding the
/// operator fenced. A claim's status records each claim write before it is sent
/// (`status.claimWrite`); before the claim goes, a write that has not landed and could still
/// (the binding has its base version: a leader paused with it in flight) is made impossible by
/// a compare-and-swap of this annotation, which moves the version the write is conditioned on.
/// Informational afterwards: nothing reads it.
pub const CLAIM_WRITE_FENCED: &str = "accountpool.io/claim-write-fenced";

/// The prefix of every label and annotation key the operator itself defines.
pub const OWN_PREFIX: &str = "accountpool.io/";

/// Whether a label or annotation key is one the operator defines (`OWN_PREFIX`): of a claim it
/// reads these only, and its caches keep no others of claims or bindings' annotations.
pub fn is_own(key: &str) -> bool {
    key.starts_with(OWN_PREFIX)
}

/// The entries of a label or annotation map whose keys are the operator's own (`is_own`).
pub fn own_entries(
    map: Option<&BTreeMap<String, String>>,
) -> impl Iterator<Item = (&String, &String)> {
    map.into_iter().flatten().filter(|(k, _)| is_own(k))
}

/// Labels on the AccountClaims a request source creates (`claim_state::SourceRef` reads them).
pub const SOURCE_ID: &str = "accountpool.io/source-id";
pub const SOURCE_KIND: &str = "accountpool.io/source-kind";
pub const SOURCE_NAMESPACE: &str = "accountpool.io/source-namespace";
/// The object's name, when it is a valid label value (names over 63 characters are left out).
pub const SOURCE_NAME: &str = "accountpool.io/source-name";
pub const SOURCE_UID: &str = "accountpool.io/source-uid";

/// The kind of request object a claim was created for; `None` for claims no source created
/// (or whose source labels are incomplete, which no source reads either).
pub fn source_kind(labels: &BTreeMap<String, String>) -> Option<crate::api::SourceKind> {
    use crate::api::SourceKind;
    if !labels.contains_key(SOURCE_ID) || !labels.contains_key(SOURCE_NAMESPACE) {
        return None;
    }
    match labels.get(SOURCE_KIND)?.as_str() {
        "Shoot" => Some(SourceKind::Shoot),
        "Cluster" => Some(SourceKind::Cluster),
        "Runtime" => Some(SourceKind::Runtime),
        _ => None,
    }
}

/// Label keys with their defaults filled in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedLabelKeys {
    pub hyperscaler_type: String,
    pub tenant_name: String,
    pub shared: String,
    pub eu_access: String,
    pub dirty: String,
    pub internal: String,
}

impl Default for ResolvedLabelKeys {
    fn default() -> Self {
        Self::from_spec(None)
    }
}

impl ResolvedLabelKeys {
    /// Fills every key the spec leaves out with its default name.
    pub fn from_spec(spec: Option<&LabelKeys>) -> Self {
        let pick = |v: Option<&Option<String>>, d: &str| {
            v.and_then(|o| o.clone()).unwrap_or_else(|| d.to_string())
        };
        Self {
            hyperscaler_type: pick(spec.map(|s| &s.hyperscaler_type), "hyperscalerType"),
            tenant_name: pick(spec.map(|s| &s.tenant_name), "tenantName"),
            shared: pick(spec.map(|s| &s.shared), "shared"),
            eu_access: pick(spec.map(|s| &s.eu_access), "euAccess"),
            dirty: pick(spec.map(|s| &s.dirty), "dirty"),
            internal: pick(spec.map(|s| &s.internal), "internal"),
        }
    }
}

/// One requirement of a label selector, in Kubernetes' set-based syntax.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Requirement {
    /// `key=value`
    Equals(String, String),
    /// `key!=value` (also true when the key is absent)
    NotEquals(String, String),
    /// `key`
    Exists(String),
    /// `!key`
    DoesNotExist(String),
}

impl Requirement {
    fn matches(&self, labels: &impl LabelLookup) -> bool {
        match self {
            Requirement::Equals(k, v) => labels.label(k) == Some(v),
            Requirement::NotEquals(k, v) => labels.label(k) != Some(v),
            Requirement::Exists(k) => labels.has_label(k),
            Requirement::DoesNotExist(k) => !labels.has_label(k),
        }
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Requirement::Equals(k, v) => write!(f, "{k}={v}"),
            Requirement::NotEquals(k, v) => write!(f, "{k}!={v}"),
            Requirement::Exists(k) => write!(f, "{k}"),
            Requirement::DoesNotExist(k) => write!(f, "!{k}"),
        }
    }
}

/// A conjunction of requirements; prints as the selector `kubectl get -l` accepts.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Selector(pub Vec<Requirement>);

impl Selector {
    /// Whether a binding with these labels is selected.
    pub fn matches(&self, labels: &impl LabelLookup) -> bool {
        self.0.iter().all(|r| r.matches(labels))
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

/// The pool a rule result points at: `(hyperscalerType, euAccess, shared)`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PoolKey {
    pub hyperscaler_type: String,
    pub eu_access: bool,
    pub shared: bool,
}

/// The three selectors of a pool. `tenant` and `claim` are `None` for shared pools, which are
/// never claimed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolSelectors {
    /// Bindings the tenant already holds in the pool.
    pub tenant: Option<Selector>,
    /// Bindings that can still be claimed.
    pub claim: Option<Selector>,
    /// Every usable binding of the pool.
    pub any: Selector,
}

impl PoolKey {
    /// The pool a binding's labels name: its hyperscalerType with euAccess and shared read as
    /// `true` only when they say so. `None` without a hyperscalerType.
    pub fn of(keys: &ResolvedLabelKeys, labels: &impl LabelLookup) -> Option<PoolKey> {
        let is_true = |k: &str| labels.label(k).map(String::as_str) == Some("true");
        Some(PoolKey {
            hyperscaler_type: labels.label(&keys.hyperscaler_type)?.clone(),
            eu_access: is_true(&keys.eu_access),
            shared: is_true(&keys.shared),
        })
    }

    /// The pool a binding is usable in: the one whose `any` selector it matches. Only the pool
    /// its labels name can match (that selector fixes all three), so `None` means no pool uses
    /// it: no hyperscalerType, an euAccess label other than `true`, or a dedicated binding that
    /// is dirty (a shared one stays usable).
    pub fn usable(keys: &ResolvedLabelKeys, labels: &impl LabelLookup) -> Option<PoolKey> {
        PoolKey::of(keys, labels).filter(|k| k.base(keys).matches(labels))
    }

    /// The selectors of this pool for one tenant (docs/design.md §4).
    pub fn selectors(&self, keys: &ResolvedLabelKeys, global_account: &str) -> PoolSelectors {
        let any = self.base(keys);
        if self.shared {
            return PoolSelectors {
                tenant: None,
                claim: None,
                any,
            };
        }
        let mut tenant = any.clone();
        tenant.0.push(Requirement::Equals(
            keys.tenant_name.clone(),
            global_account.to_string(),
        ));
        let mut claim = any.clone();
        claim
            .0
            .push(Requirement::DoesNotExist(keys.tenant_name.clone()));
        PoolSelectors {
            tenant: Some(tenant),
            claim: Some(claim),
            any,
        }
    }

    /// `hyperscalerType=T`, the euAccess requirement, then shared or dedicated-and-clean.
    fn base(&self, keys: &ResolvedLabelKeys) -> Selector {
        let mut reqs = vec![Requirement::Equals(
            keys.hyperscaler_type.clone(),
            self.hyperscaler_type.clone(),
        )];
        reqs.push(if self.eu_access {
            Requirement::Equals(keys.eu_access.clone(), "true".into())
        } else {
            Requirement::DoesNotExist(keys.eu_access.clone())
        });
        if self.shared {
            reqs.push(Requirement::Equals(keys.shared.clone(), "true".into()));
        } else {
            reqs.push(Requirement::NotEquals(keys.shared.clone(), "true".into()));
            reqs.push(Requirement::DoesNotExist(keys.dirty.clone()));
        }
        Selector(reqs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn dedicated_selectors_print_like_upstream() {
        let k = ResolvedLabelKeys::default();
        let pool = PoolKey {
            hyperscaler_type: "aws".into(),
            eu_access: true,
            shared: false,
        };
        let s = pool.selectors(&k, "ga-1");
        assert_eq!(
            s.any.to_string(),
            "hyperscalerType=aws,euAccess=true,shared!=true,!dirty"
        );
        assert_eq!(
            s.tenant.unwrap().to_string(),
            "hyperscalerType=aws,euAccess=true,shared!=true,!dirty,tenantName=ga-1"
        );
        assert_eq!(
            s.claim.unwrap().to_string(),
            "hyperscalerType=aws,euAccess=true,shared!=true,!dirty,!tenantName"
        );
    }

    #[test]
    fn shared_pool_has_no_tenant_or_claim_selector() {
        let k = ResolvedLabelKeys::default();
        let pool = PoolKey {
            hyperscaler_type: "openstack_eu-de-1".into(),
            eu_access: false,
            shared: true,
        };
        let s = pool.selectors(&k, "ga-1");
        assert!(s.tenant.is_none() && s.claim.is_none());
        assert_eq!(
            s.any.to_string(),
            "hyperscalerType=openstack_eu-de-1,!euAccess,shared=true"
        );
    }

    #[test]
    fn matching_follows_kubernetes_semantics() {
        let k = ResolvedLabelKeys::default();
        let pool = PoolKey {
            hyperscaler_type: "gcp".into(),
            eu_access: false,
            shared: false,
        };
        let s = pool.selectors(&k, "ga");
        let claim = s.claim.unwrap();
        assert!(claim.matches(&labels(&[("hyperscalerType", "gcp")])));
        // shared!=true accepts any other value; !euAccess rejects even "false".
        assert!(claim.matches(&labels(&[("hyperscalerType", "gcp"), ("shared", "false")])));
        assert!(!claim.matches(&labels(&[
            ("hyperscalerType", "gcp"),
            ("euAccess", "false")
        ])));
        assert!(!claim.matches(&labels(&[("hyperscalerType", "gcp"), ("dirty", "true")])));
        assert!(!claim.matches(&labels(&[("hyperscalerType", "gcp"), ("tenantName", "x")])));
        assert!(
            s.tenant
                .unwrap()
                .matches(&labels(&[("hyperscalerType", "gcp"), ("tenantName", "ga")]))
        );
    }

    #[test]
    fn custom_label_keys_are_used() {
        let spec = LabelKeys {
            tenant_name: Some("example.com/tenant".into()),
            ..Default::default()
        };
        let k = ResolvedLabelKeys::from_spec(Some(&spec));
        assert_eq!(k.tenant_name, "example.com/tenant");
        assert_eq!(k.dirty, "dirty");
        let pool = PoolKey {
            hyperscaler_type: "aws".into(),
            eu_access: false,
            shared: false,
        };
        assert!(
            pool.selectors(&k, "t")
                .claim
                .unwrap()
                .to_string()
                .ends_with("!example.com/tenant")
        );
    }
}
