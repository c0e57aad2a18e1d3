//! Rewriting expanded legacy rules as Seed entries when that is exact, and saying why when it
//! is not. Used by `hap migrate --legacy`.

use std::collections::{BTreeMap, BTreeSet};

use super::model::{Cond, EuAccess, Rule};

/// Seed entries and the euAccessPlatformRegions they need (`None` = the default list is right).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeedTranslation {
    pub rules: Vec<Rule>,
    pub eu_regions: Option<Vec<String>>,
}

/// Translates expanded legacy rules (one base rule per plan plus region rules, as
/// `legacy::expand` makes them). `Err` lists every reason the Seed syntax cannot say them.
pub fn to_seed(expanded: &[Rule], default_eu: &[&str]) -> Result<SeedTranslation, Vec<String>> {
    let mut by_plan: BTreeMap<&str, Vec<&Rule>> = BTreeMap::new();
    for r in expanded {
        by_plan.entry(r.plan.as_str()).or_default().push(r);
    }
    let mut reasons = Vec::new();
    let mut out = Vec::new();
    let mut eu_sets: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (plan, rules) in &by_plan {
        let Some(base) = rules.iter().find(|r| r.pr.is_absent()) else {
            continue;
        };
        let mut eu_regions = BTreeSet::new();
        for r in rules.iter().filter(|r| !r.pr.is_absent()) {
            let (Cond::Exact(region), Some(pool)) = (&r.pr, r.primary()) else {
                continue;
            };
            if pool.pr_suffix {
                out.push(with_wildcards(r));
            } else if only_eu_differs(r, base) {
                eu_regions.insert(region.as_str());
            } else {
                reasons.push(format!(
                    "plan `{plan}` in platform region `{region}` changes the pool without appending the region (`{}`); a Seed condition on PR always appends it",
                    r.to_keb().unwrap_or_default()
                ));
            }
        }
        let mut b = with_wildcards(base);
        if !eu_regions.is_empty() {
            for p in &mut b.pools {
                p.eu_access = EuAccess::FromRequest;
            }
            eu_sets.insert(plan, eu_regions);
        }
        out.push(b);
    }
    let distinct: BTreeSet<&BTreeSet<&str>> = eu_sets.values().collect();
    if distinct.len() > 1 {
        let per_plan: Vec<String> = eu_sets
            .iter()
            .map(|(p, rs)| format!("{p}: {}", rs.iter().copied().collect::<Vec<_>>().join(", ")))
            .collect();
        reasons.push(format!(
            "euAccessRule names different platform regions per plan ({}); Seed's `euAccess=*` uses one list, euAccessPlatformRegions, for every plan",
            per_plan.join("; ")
        ));
    }
    if !reasons.is_empty() {
        return Err(reasons);
    }
    let eu_regions = distinct.into_iter().next().and_then(|set| {
        let want: BTreeSet<&str> = default_eu.iter().copied().collect();
        (*set != want).then(|| set.iter().map(|s| s.to_string()).collect())
    });
    Ok(SeedTranslation {
        rules: out,
        eu_regions,
    })
}

/// A suffix without a condition becomes `*`: requests without that region fail either way
/// (an invalid hyperscalerType before, no matching rule after).
fn with_wildcards(r: &Rule) -> Rule {
    let mut r = r.clone();
    let (pr, cr) = (
        r.pools.iter().any(|p| p.pr_suffix),
        r.pools.iter().any(|p| p.cr_suffix),
    );
    if pr && r.pr.is_absent() {
        r.pr = Cond::Any;
    }
    if cr && r.cr.is_absent() {
        r.cr = Cond::Any;
    }
    r
}

fn only_eu_differs(r: &Rule, base: &Rule) -> bool {
    let (Some(r), Some(base)) = (r.primary(), base.primary()) else {
        return false;
    };
    r.eu_access == EuAccess::Always
        && base.eu_access == EuAccess::Never
        && (r.pr_suffix, r.cr_suffix, r.shared) == (base.pr_suffix, base.cr_suffix, base.shared)
}
