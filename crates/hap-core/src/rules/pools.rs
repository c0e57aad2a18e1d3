//! What each entry produces as data (EntryInfo: per preference a hyperscalerType or a pattern such
//! as `openstack_<clusterRegion>`) and the pool-existence check of docs/design.md §2.4 (MissingPool).

use serde::Serialize;

use crate::labels::{PoolKey, ResolvedLabelKeys};

use super::Entry;
use super::model::{Cond, EuAccess, PoolResult, Rule};
use super::plans::{PlanTable, Provider};
use crate::diag::{Diagnostic, Reason};

/// One rule entry as the status reports it. The top-level pool fields describe the first
/// preference (empty type, `false`, `false` for a deny entry).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EntryInfo {
    /// 1-based position in the rule list.
    pub index: usize,
    pub entry: String,
    /// The hyperscalerType, or its pattern with `<provider>`, `<platformRegion>`, `<clusterRegion>`.
    pub hyperscaler_type: String,
    /// `true`, `false` or `fromRequest`.
    pub eu_access: String,
    pub shared: bool,
    /// Whether a condition is `*`.
    pub has_wildcard: bool,
    /// Every preference in order, the first one included; empty for a deny entry.
    pub preferences: Vec<PreferenceInfo>,
    /// The entry denies what it matches.
    pub deny: bool,
    /// The deny entry's message.
    pub message: Option<String>,
}

/// One preference of an entry as data.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PreferenceInfo {
    /// 1-based position in the entry's ordered pools.
    pub index: usize,
    /// The hyperscalerType, or its pattern.
    pub hyperscaler_type: String,
    /// `true`, `false` or `fromRequest`.
    pub eu_access: String,
    pub shared: bool,
}

impl PreferenceInfo {
    pub(crate) fn new(index: usize, rule: &Rule, pool: &PoolResult, table: &PlanTable) -> Self {
        let mut t = match table.get(&rule.plan) {
            Some(Provider::Fixed(p)) => p.clone(),
            _ => "<provider>".to_string(),
        };
        for (on, cond, hole) in [
            (pool.pr_suffix, &rule.pr, "<platformRegion>"),
            (pool.cr_suffix, &rule.cr, "<clusterRegion>"),
        ] {
            if on {
                t.push('_');
                t.push_str(if let Cond::Exact(v) = cond { v } else { hole });
            }
        }
        Self {
            index,
            hyperscaler_type: t,
            eu_access: pool.eu_access.as_str().to_string(),
            shared: pool.shared,
        }
    }

    /// Whether the hyperscalerType depends on the request.
    pub fn is_pattern(&self) -> bool {
        self.hyperscaler_type.contains('<')
    }

    /// Whether a binding's hyperscalerType label value can belong to this preference's pools:
    /// equality for fixed types, and for patterns each `<...>` stands for one or more characters.
    pub fn matches_type(&self, hyperscaler_type: &str) -> bool {
        glob(&parts(&self.hyperscaler_type), hyperscaler_type)
    }

    /// Whether a pool (by its labels) is one this preference can reach.
    pub fn reaches(&self, key: &PoolKey) -> bool {
        let eu_ok = match self.eu_access.as_str() {
            "true" => key.eu_access,
            "false" => !key.eu_access,
            _ => true,
        };
        eu_ok && key.shared == self.shared && self.matches_type(&key.hyperscaler_type)
    }

    /// Whether some request could get the same pool from both preferences.
    pub fn overlaps(&self, other: &PreferenceInfo) -> bool {
        let eu = self.eu_access == other.eu_access
            || self.eu_access == "fromRequest"
            || other.eu_access == "fromRequest";
        let types = self.hyperscaler_type == other.hyperscaler_type
            || (!self.is_pattern() && other.matches_type(&self.hyperscaler_type))
            || (!other.is_pattern() && self.matches_type(&other.hyperscaler_type));
        eu && types && self.shared == other.shared
    }
}

impl EntryInfo {
    pub(crate) fn new(e: &Entry, table: &PlanTable) -> Self {
        let preferences: Vec<PreferenceInfo> = e
            .rule
            .pools
            .iter()
            .enumerate()
            .map(|(k, p)| PreferenceInfo::new(k + 1, &e.rule, p, table))
            .collect();
        let (hyperscaler_type, eu_access, shared) = match preferences.first() {
            Some(p) => (p.hyperscaler_type.clone(), p.eu_access.clone(), p.shared),
            None => (String::new(), EuAccess::Never.as_str().to_string(), false),
        };
        Self {
            index: e.index,
            entry: e.text.clone(),
            hyperscaler_type,
            eu_access,
            shared,
            has_wildcard: e.rule.has_wildcard(),
            deny: e.rule.is_deny(),
            message: e.rule.deny_message.clone(),
            preferences,
        }
    }

    /// Whether the first preference's hyperscalerType depends on the request.
    pub fn is_pattern(&self) -> bool {
        self.hyperscaler_type.contains('<')
    }

    /// Whether a binding's hyperscalerType can belong to the first preference's pools.
    pub fn matches_type(&self, hyperscaler_type: &str) -> bool {
        self.preferences
            .first()
            .is_some_and(|p| p.matches_type(hyperscaler_type))
    }
}

enum Part<'a> {
    Lit(&'a str),
    Hole,
}

fn parts(pattern: &str) -> Vec<Part<'_>> {
    let mut out = Vec::new();
    let mut rest = pattern;
    while let Some(open) = rest.find('<') {
        let Some(close) = rest[open..].find('>') else {
            break;
        };
        if open > 0 {
            out.push(Part::Lit(&rest[..open]));
        }
        out.push(Part::Hole);
        rest = &rest[open + close + 1..];
    }
    if !rest.is_empty() {
        out.push(Part::Lit(rest));
    }
    out
}

fn glob(parts: &[Part<'_>], s: &str) -> bool {
    match parts.split_first() {
        None => s.is_empty(),
        Some((Part::Lit(l), rest)) => s.strip_prefix(l).is_some_and(|t| glob(rest, t)),
        Some((Part::Hole, rest)) => s
            .char_indices()
            .skip(1)
            .map(|(i, _)| i)
            .chain([s.len()])
            .any(|i| !s.is_empty() && glob(rest, &s[i..])),
    }
}

/// MissingPool for each entry without `*` whose pool (both pools for `euAccess=*`) has no usable
/// binding; for an entry with fallbacks, when none of its preferences has one. Entries whose type
/// comes from the request need at least one binding of the pattern.
pub fn missing(
    entries: &[EntryInfo],
    rules: &[Entry],
    keys: &ResolvedLabelKeys,
    eu_regions: &[String],
    usable: &[&PoolKey],
) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    for (info, e) in entries.iter().zip(rules) {
        if info.has_wildcard || info.deny {
            continue;
        }
        let mut empty = Vec::new();
        for (pref, pool) in info.preferences.iter().zip(&e.rule.pools) {
            let eu_variants: &[bool] = match pool.eu_access {
                EuAccess::Never => &[false],
                EuAccess::Always => &[true],
                EuAccess::FromRequest if eu_regions.is_empty() => &[false],
                EuAccess::FromRequest => &[false, true],
            };
            for &eu in eu_variants {
                if !has_usable(usable, pref, eu) {
                    let key = PoolKey {
                        hyperscaler_type: pref.hyperscaler_type.clone(),
                        eu_access: eu,
                        shared: pref.shared,
                    };
                    empty.push(key.selectors(keys, "").any.to_string());
                }
            }
        }
        let variants: usize = e
            .rule
            .pools
            .iter()
            .map(|p| match p.eu_access {
                EuAccess::FromRequest if !eu_regions.is_empty() => 2,
                _ => 1,
            })
            .sum();
        // With fallbacks an entry serves while any of its pools has a binding.
        if empty.is_empty() || (info.preferences.len() > 1 && empty.len() < variants) {
            continue;
        }
        for selector in empty {
            out.push(e.diag(
                Reason::MissingPool,
                None,
                format!("no usable binding in the pool `{selector}`"),
            ));
        }
    }
    out
}

/// Whether a pool this preference reaches with `eu` has a usable binding.
fn has_usable(usable: &[&PoolKey], pref: &PreferenceInfo, eu: bool) -> bool {
    usable.iter().any(|k| {
        k.eu_access == eu && k.shared == pref.shared && pref.matches_type(&k.hyperscaler_type)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(t: &str) -> PreferenceInfo {
        PreferenceInfo {
            index: 1,
            hyperscaler_type: t.into(),
            eu_access: "false".into(),
            shared: false,
        }
    }

    /// The MissingPool check asks the pools that have a usable binding (`PoolKey::usable`, what
    /// the index keeps per event) instead of walking every binding's labels; both must agree for
    /// every preference and euAccess variant, whatever labels the bindings carry.
    mod usable_pools_agree_with_the_walk {
        use std::collections::BTreeMap;

        use super::*;
        use proptest::prelude::*;

        /// The check as it walked the bindings before.
        fn found_by_walk(
            keys: &ResolvedLabelKeys,
            pref: &PreferenceInfo,
            eu: bool,
            bindings: &[BTreeMap<String, String>],
        ) -> bool {
            bindings.iter().any(|b| {
                let Some(t) = b.get(&keys.hyperscaler_type) else {
                    return false;
                };
                let key = PoolKey {
                    hyperscaler_type: t.clone(),
                    eu_access: eu,
                    shared: pref.shared,
                };
                pref.matches_type(t) && key.selectors(keys, "").any.matches(b)
            })
        }

        fn labels() -> impl Strategy<Value = BTreeMap<String, String>> {
            let keys = ResolvedLabelKeys::default();
            let value = |vs: &'static [&'static str]| {
                proptest::option::of(proptest::sample::select(vs).prop_map(str::to_string))
            };
            (
                value(&[
                    "aws",
                    "gcp",
                    "openstack_eu-de-1",
                    "openstack_",
                    "aws_cf-eu11",
                ]),
                value(&["true", "false", "yes"]),
                value(&["true", "false"]),
                value(&["true", "false"]),
                value(&["ga-1", "ga-2"]),
                value(&["true"]),
            )
                .prop_map(move |(t, eu, shared, dirty, tenant, internal)| {
                    let mut m = BTreeMap::new();
                    for (k, v) in [
                        (&keys.hyperscaler_type, t),
                        (&keys.eu_access, eu),
                        (&keys.shared, shared),
                        (&keys.dirty, dirty),
                        (&keys.tenant_name, tenant),
                        (&keys.internal, internal),
                    ] {
                        if let Some(v) = v {
                            m.insert(k.clone(), v);
                        }
                    }
                    m
                })
        }

        proptest! {
            #[test]
            fn for_every_preference_and_variant(
                bindings in proptest::collection::vec(labels(), 0..6),
                pattern in proptest::sample::select(vec![
                    "aws", "gcp", "openstack_<clusterRegion>", "<provider>_<platformRegion>",
                ]),
                shared: bool,
                eu: bool,
            ) {
                let keys = ResolvedLabelKeys::default();
                let pref = PreferenceInfo { shared, ..info(pattern) };
                let usable: Vec<PoolKey> =
                    bindings.iter().filter_map(|b| PoolKey::usable(&keys, b)).collect();
                let usable: Vec<&PoolKey> = usable.iter().collect();
                prop_assert_eq!(
                    has_usable(&usable, &pref, eu),
                    found_by_walk(&keys, &pref, eu, &bindings)
                );
            }
        }
    }

    #[test]
    fn patterns_match_any_non_empty_region() {
        assert!(info("openstack_<clusterRegion>").matches_type("openstack_eu-de-1"));
        assert!(!info("openstack_<clusterRegion>").matches_type("openstack_"));
        assert!(!info("openstack_<clusterRegion>").matches_type("openstack"));
        assert!(info("<provider>_<platformRegion>").matches_type("aws_cf-eu11"));
        assert!(!info("<provider>_<platformRegion>").matches_type("aws"));
        assert!(info("gcp_cf-sa30").matches_type("gcp_cf-sa30"));
        assert!(!info("gcp").matches_type("gcp_cf-sa30"));
    }

    #[test]
    fn overlaps_need_type_eu_and_sharing_in_common() {
        let eu = |t: &str, e: &str| PreferenceInfo {
            eu_access: e.into(),
            ..info(t)
        };
        assert!(info("aws").overlaps(&info("aws")));
        assert!(info("aws_cf-eu11").overlaps(&info("aws_<platformRegion>")));
        assert!(!info("aws").overlaps(&info("aws_<platformRegion>")));
        assert!(!eu("aws", "true").overlaps(&info("aws")));
        assert!(eu("aws", "fromRequest").overlaps(&eu("aws", "true")));
        let shared = PreferenceInfo {
            shared: true,
            ..info("aws")
        };
        assert!(!shared.overlaps(&info("aws")));
    }
}
