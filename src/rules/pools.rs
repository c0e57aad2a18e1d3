//! What each entry produces as data (EntryInfo, with hyperscalerType patterns such as
//! `openstack_<clusterRegion>`) and the pool-existence check of seed 000 (MissingPool).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::labels::{PoolKey, ResolvedLabelKeys};

use super::Entry;
use super::diag::{Diagnostic, Reason};
use super::model::{Cond, EuAccess};
use super::plans::{PlanTable, Provider};

/// One rule entry as the status reports it.
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
}

impl EntryInfo {
    pub(crate) fn new(e: &Entry, table: &PlanTable) -> Self {
        let mut t = match table.get(&e.rule.plan) {
            Some(Provider::Fixed(p)) => p.clone(),
            _ => "<provider>".to_string(),
        };
        for (on, cond, hole) in [
            (e.rule.pr_suffix, &e.rule.pr, "<platformRegion>"),
            (e.rule.cr_suffix, &e.rule.cr, "<clusterRegion>"),
        ] {
            if on {
                t.push('_');
                t.push_str(if let Cond::Exact(v) = cond { v } else { hole });
            }
        }
        Self {
            index: e.index,
            entry: e.text.clone(),
            hyperscaler_type: t,
            eu_access: e.rule.eu_access.as_str().to_string(),
            shared: e.rule.shared,
            has_wildcard: e.rule.has_wildcard(),
        }
    }

    /// Whether the hyperscalerType depends on the request.
    pub fn is_pattern(&self) -> bool {
        self.hyperscaler_type.contains('<')
    }

    /// Whether a binding's hyperscalerType label value can belong to this entry's pools: equality
    /// for fixed types, and for patterns each `<...>` stands for one or more characters.
    pub fn matches_type(&self, hyperscaler_type: &str) -> bool {
        glob(&parts(&self.hyperscaler_type), hyperscaler_type)
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
/// binding. Entries whose type comes from the request need at least one binding of the pattern.
pub fn missing(
    entries: &[EntryInfo],
    rules: &[Entry],
    keys: &ResolvedLabelKeys,
    eu_regions: &[String],
    bindings: &[&BTreeMap<String, String>],
) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    for (info, e) in entries.iter().zip(rules) {
        if info.has_wildcard {
            continue;
        }
        let eu_variants: &[bool] = match e.rule.eu_access {
            EuAccess::Never => &[false],
            EuAccess::Always => &[true],
            EuAccess::FromRequest if eu_regions.is_empty() => &[false],
            EuAccess::FromRequest => &[false, true],
        };
        for &eu in eu_variants {
            let found = bindings.iter().any(|b| {
                let Some(t) = b.get(&keys.hyperscaler_type) else {
                    return false;
                };
                let pool = PoolKey {
                    hyperscaler_type: t.clone(),
                    eu_access: eu,
                    shared: info.shared,
                };
                info.matches_type(t) && pool.selectors(keys, "").any.matches(b)
            });
            if !found {
                let pool = PoolKey {
                    hyperscaler_type: info.hyperscaler_type.clone(),
                    eu_access: eu,
                    shared: info.shared,
                };
                out.push(Diagnostic::at(
                    info.index,
                    &info.entry,
                    Reason::MissingPool,
                    None,
                    format!(
                        "no usable binding in the pool `{}`",
                        pool.selectors(keys, "").any
                    ),
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(t: &str) -> EntryInfo {
        EntryInfo {
            index: 1,
            entry: String::new(),
            hyperscaler_type: t.into(),
            eu_access: "false".into(),
            shared: false,
            has_wildcard: true,
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
}
