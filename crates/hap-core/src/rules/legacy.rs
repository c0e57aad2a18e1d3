//! The legacy four-property syntax (docs/design.md §2.3): parsing each `plan[:region];...` property and
//! expanding the four independent properties into ordinary rules, one per plan and region.

use std::collections::BTreeSet;

use crate::api::LegacyRules;

use super::model::{Cond, EuAccess, PoolResult, Rule};
use super::plans::PlanTable;
use crate::diag::{Diagnostic, Reason};

/// The four properties, in the order their suffixes and labels apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Property {
    PlatformRegion,
    ClusterRegion,
    Shared,
    EuAccess,
}

impl Property {
    pub const ALL: [Property; 4] = [
        Property::PlatformRegion,
        Property::ClusterRegion,
        Property::Shared,
        Property::EuAccess,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Property::PlatformRegion => "platformRegionRule",
            Property::ClusterRegion => "clusterRegionRule",
            Property::Shared => "sharedRule",
            Property::EuAccess => "euAccessRule",
        }
    }

    fn text(self, rules: &LegacyRules) -> &str {
        let v = match self {
            Property::PlatformRegion => &rules.platform_region_rule,
            Property::ClusterRegion => &rules.cluster_region_rule,
            Property::Shared => &rules.shared_rule,
            Property::EuAccess => &rules.eu_access_rule,
        };
        v.as_deref().unwrap_or("")
    }
}

/// `plan[:region]`; `None` stands for `*` (or no region).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    pub plan: Option<String>,
    pub region: Option<String>,
}

impl Item {
    fn applies(&self, plan: &str, region: Option<&str>) -> bool {
        self.plan.as_deref().is_none_or(|p| p == plan)
            && self.region.as_deref().is_none_or(|r| Some(r) == region)
    }
}

/// The parsed properties, or every problem found in them.
pub fn parse(
    rules: &LegacyRules,
    table: &PlanTable,
) -> Result<Vec<(Property, Vec<Item>)>, Vec<Diagnostic>> {
    let mut out = Vec::new();
    let mut errors = Vec::new();
    for prop in Property::ALL {
        let text = prop.text(rules);
        let mut items = Vec::new();
        for (col, raw) in split_items(text) {
            match item(raw, table) {
                Ok(i) => items.push(i),
                Err((reason, offset, msg)) => errors.push(Diagnostic {
                    index: None,
                    entry: Some(text.to_string()),
                    reason,
                    message: format!("{}: {msg}", prop.name()),
                    column: Some(col + offset),
                    field: None,
                }),
            }
        }
        out.push((prop, items));
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors)
    }
}

/// `;`-separated items with the 1-based column where each starts; an all-blank property has none.
fn split_items(text: &str) -> Vec<(usize, &str)> {
    if text.trim().is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut col = 1;
    for part in text.split(';') {
        out.push((col, part));
        col += part.chars().count() + 1;
    }
    out
}

type ItemError = (Reason, usize, String);

/// What an item of valid syntax means: `*` stands for a whole plan or region, on one side only,
/// and a named plan must be one of the table's.
fn check_meaning(
    body: &str,
    (plan, region): (&str, Option<&str>),
    lead: usize,
    table: &PlanTable,
) -> Result<(), ItemError> {
    let wild = |s: &str| s == "*";
    if let Some(bad) = [Some(plan), region]
        .into_iter()
        .flatten()
        .find(|s| s.contains('*') && !wild(s))
    {
        return Err((
            Reason::ParseError,
            lead,
            format!("`{bad}`: `*` must be the whole plan or region"),
        ));
    }
    match (wild(plan), region.is_none_or(wild)) {
        (true, true) => Err((
            Reason::InvalidConfig,
            lead,
            format!(
                "`{body}`: at least one of plan and region must be given; `*` may stand on one side only"
            ),
        )),
        (false, _) if table.get(plan).is_none() && region.is_some_and(wild) => Err((
            Reason::InvalidConfig,
            lead,
            format!(
                "`{body}`: the plan comes first in `plan:region`, and `{plan}` is not a plan; for every plan in a region write `*:{plan}`"
            ),
        )),
        (false, _) if table.get(plan).is_none() => {
            Err((Reason::UnknownPlan, lead, table.unknown_message(plan)))
        }
        _ => Ok(()),
    }
}

fn item(raw: &str, table: &PlanTable) -> Result<Item, ItemError> {
    let lead = raw.chars().take_while(|c| c.is_whitespace()).count();
    let body = raw.trim();
    if body.is_empty() {
        return Err((
            Reason::ParseError,
            0,
            "empty item: remove the extra `;`".into(),
        ));
    }
    if let Some((i, c)) = body
        .chars()
        .enumerate()
        .find(|(_, c)| !(c.is_ascii_alphanumeric() || "._-*:".contains(*c)))
    {
        return Err((
            Reason::ParseError,
            lead + i,
            format!("unexpected character `{}`", c.escape_debug()),
        ));
    }
    let mut parts = body.splitn(3, ':');
    let plan = parts.next().unwrap_or_default();
    let region = parts.next();
    if parts.next().is_some() {
        return Err((
            Reason::ParseError,
            lead,
            format!("`{body}` has more than one `:`; write `plan:region`"),
        ));
    }
    let region_col = lead + plan.chars().count() + 1;
    if plan.is_empty() {
        return Err((
            Reason::ParseError,
            lead,
            format!("`{body}` has no plan before `:`"),
        ));
    }
    if region == Some("") {
        return Err((
            Reason::ParseError,
            region_col,
            format!("`{body}` has no region after `:`"),
        ));
    }
    let wild = |s: &str| s == "*";
    check_meaning(body, (plan, region), lead, table)?;
    Ok(Item {
        plan: (!wild(plan)).then(|| plan.to_string()),
        region: region.filter(|r| !wild(r)).map(str::to_string),
    })
}

/// One rule per plan of the table, and one more per plan and platform region that some item
/// names, when that region changes the outcome. Specificity makes the region rules win.
pub fn expand(props: &[(Property, Vec<Item>)], table: &PlanTable) -> Vec<Rule> {
    let mut rules = Vec::new();
    for plan in table.names() {
        let base = outcome(props, plan, None);
        let regions: BTreeSet<&str> = props
            .iter()
            .flat_map(|(_, items)| items)
            .filter(|i| i.plan.as_deref().is_none_or(|p| p == plan))
            .filter_map(|i| i.region.as_deref())
            .collect();
        for region in regions {
            let mut r = outcome(props, plan, Some(region));
            r.pr = Cond::Exact(region.to_string());
            if !same_outputs(&r, &base) {
                rules.push(r);
            }
        }
        rules.push(base);
    }
    rules
}

fn same_outputs(a: &Rule, b: &Rule) -> bool {
    a.pools == b.pools
}

fn outcome(props: &[(Property, Vec<Item>)], plan: &str, region: Option<&str>) -> Rule {
    let mut pool = PoolResult::default();
    for (prop, items) in props {
        if items.iter().any(|i| i.applies(plan, region)) {
            match prop {
                Property::PlatformRegion => pool.pr_suffix = true,
                Property::ClusterRegion => pool.cr_suffix = true,
                Property::Shared => pool.shared = true,
                Property::EuAccess => pool.eu_access = EuAccess::Always,
            }
        }
    }
    Rule::single(plan, pool)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(pr: &str, cr: &str, s: &str, eu: &str) -> LegacyRules {
        let o = |v: &str| Some(v.to_string());
        LegacyRules {
            platform_region_rule: o(pr),
            cluster_region_rule: o(cr),
            shared_rule: o(s),
            eu_access_rule: o(eu),
        }
    }

    #[test]
    fn seed_examples_of_valid_and_invalid_items() {
        let t = PlanTable::default();
        for ok in [
            "trial",
            "trial:*",
            "trial:eu",
            "*:eu",
            "*:eu;trial:eu",
            "trial:eu;trial:gcp",
            "",
        ] {
            assert!(parse(&rules(ok, "", "", ""), &t).is_ok(), "{ok}");
        }
        for bad in [
            "eu:*",
            "*:*",
            "*",
            "gcp;;aws",
            "gcp:",
            ":eu",
            "a:b:c",
            "gcp:cf sa30",
        ] {
            assert!(parse(&rules("", bad, "", ""), &t).is_err(), "{bad}");
        }
        let e = parse(&rules("", "", "", "gcp;eu:*"), &t).unwrap_err();
        assert_eq!((e[0].reason, e[0].column), (Reason::InvalidConfig, Some(5)));
        let e = parse(&rules("openstack", "", "", ""), &t).unwrap_err();
        assert_eq!(e[0].reason, Reason::UnknownPlan);
    }

    #[test]
    fn expansion_of_the_initial_configuration() {
        let t = PlanTable::default();
        let props = parse(
            &rules(
                "gcp:cf-sa30",
                "sap-converged-cloud",
                "trial;sap-converged-cloud",
                "azure:cf-ch20;aws:cf-eu11",
            ),
            &t,
        )
        .unwrap();
        let keb: Vec<String> = expand(&props, &t).iter().filter_map(Rule::to_keb).collect();
        for want in [
            "aws(PR=cf-eu11) -> EU",
            "aws",
            "gcp(PR=cf-sa30) -> PR",
            "gcp",
            "sap-converged-cloud -> S,HR",
            "trial -> S",
        ] {
            assert!(keb.contains(&want.to_string()), "{want} in {keb:?}");
        }
        assert!(!keb.iter().any(|k| k.starts_with("gcp(PR=cf-eu11)")));
    }
}
