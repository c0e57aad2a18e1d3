//! Rule-set validation (docs/design.md §2.4) after parsing: duplicates, ambiguous PR-only/CR-only
//! pairs, unknown and uncovered plans, fixed hyperscalerTypes that are no valid label value.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::Entry;
use super::model::{Cond, PoolResult, Rule, TenantCond};
use super::plans::{PlanTable, Provider};
use crate::diag::label_value_problem;
use crate::diag::{Diagnostic, Reason};

/// Same plan and conditions, whatever the outputs: each later copy is an error.
pub fn duplicates(entries: &[Entry]) -> Vec<Diagnostic> {
    let mut first: HashMap<(&str, &Cond, &Cond, &TenantCond), &Entry> = HashMap::new();
    let mut out = Vec::new();
    for e in entries {
        let key = (e.rule.plan.as_str(), &e.rule.pr, &e.rule.cr, &e.rule.ga);
        match first.get(&key) {
            Some(orig) => out.push(e.diag(
                Reason::DuplicateRule,
                None,
                format!(
                    "same plan and conditions as rule {} `{}` (outputs, fallbacks and deny do not count): remove one of them{}",
                    orig.index,
                    orig.text,
                    if orig.rule.is_deny() != e.rule.is_deny() {
                        ", or give the deny entry a condition that sets it apart"
                    } else {
                        ""
                    }
                ),
            )),
            None => {
                first.insert(key, e);
            }
        }
    }
    out
}

/// Pairs of one plan with equal specificity that both match some request, without a more
/// specific entry covering every such request. With those gone no evaluation can tie.
pub fn ambiguities(entries: &[Entry], keb: bool) -> Vec<Diagnostic> {
    let mut by_plan: BTreeMap<&str, Vec<&Entry>> = BTreeMap::new();
    let mut seen = HashSet::new();
    // Later copies of a duplicate are reported as DuplicateRule, not again as ambiguous.
    for e in entries
        .iter()
        .filter(|e| seen.insert((&e.rule.plan, &e.rule.pr, &e.rule.cr, &e.rule.ga)))
    {
        by_plan.entry(e.rule.plan.as_str()).or_default().push(e);
    }
    let mut out = Vec::new();
    for group in by_plan.values() {
        let present: Present = group
            .iter()
            .map(|e| (&e.rule.pr, &e.rule.cr, &e.rule.ga))
            .collect();
        let mut tenants: Vec<&TenantCond> = group.iter().map(|e| &e.rule.ga).collect();
        tenants.sort();
        tenants.dedup();
        for (i, a) in group.iter().enumerate() {
            for b in &group[i + 1..] {
                if let Some(d) = ambiguous_pair(a, b, (&present, &tenants), keb) {
                    out.push(d);
                }
            }
        }
    }
    out.sort_by_key(|d| d.index);
    out
}

/// The conditions of every entry of one plan.
type Present<'a> = HashSet<(&'a Cond, &'a Cond, &'a TenantCond)>;

fn ambiguous_pair(
    a: &Entry,
    b: &Entry,
    (present, tenants): (&Present<'_>, &[&TenantCond]),
    keb: bool,
) -> Option<Diagnostic> {
    let spec = a.rule.specificity();
    let same_regions = a.rule.pr == b.rule.pr && a.rule.cr == b.rule.cr;
    if spec != b.rule.specificity() || (same_regions && a.rule.ga == b.rule.ga) {
        return None;
    }
    let pr = intersect(&a.rule.pr, &b.rule.pr)?;
    let cr = intersect(&a.rule.cr, &b.rule.cr)?;
    let ga = intersect_tenants(&a.rule.ga, &b.rule.ga)?;
    if same_regions {
        // Only the global-account lists differ, and no entry can be more specific for every
        // request both match: the lists themselves must change.
        return Some(b.diag(
            Reason::AmbiguousRules,
            None,
            format!(
                "rules {} `{}` and {} `{}` are ambiguous: {}",
                a.index,
                a.text,
                b.index,
                b.text,
                tenant_overlap(&ga)
            ),
        ));
    }
    let resolved = wider(&pr).iter().any(|p| {
        wider(&cr).iter().any(|c| {
            tenants.iter().any(|g| {
                let mut r = Rule::plain("");
                r.pr = p.clone();
                r.cr = c.clone();
                r.ga = (*g).clone();
                covers(g, &ga) && r.specificity() > spec && present.contains(&(p, c, *g))
            })
        })
    });
    if resolved {
        return None;
    }
    let mut missing = Rule::plain(a.rule.plan.clone());
    missing.pr = pr;
    missing.cr = cr;
    missing.ga = ga;
    let (pr_name, cr_name) = if keb { ("PR", "HR") } else { ("PR", "CR") };
    Some(b.diag(
        Reason::AmbiguousRules,
        None,
        format!(
            "rules {} `{}` and {} `{}` are ambiguous: a request with {} and {} matches both equally; add `{}`",
            a.index,
            a.text,
            b.index,
            b.text,
            describe(pr_name, &missing.pr),
            describe(cr_name, &missing.cr),
            missing.head(keb),
        ),
    ))
}

/// Every condition that accepts all requests `c` accepts.
fn wider(c: &Cond) -> Vec<Cond> {
    match c {
        Cond::Absent => vec![Cond::Absent],
        Cond::Any => vec![Cond::Any, Cond::Absent],
        Cond::Exact(_) => vec![c.clone(), Cond::Any, Cond::Absent],
    }
}

fn describe(name: &str, c: &Cond) -> String {
    match c {
        Cond::Exact(v) => format!("{name}={v}"),
        _ => format!("any {name}"),
    }
}

/// Global accounts both conditions of equal rank accept, as a condition; `None` when none.
fn intersect_tenants(a: &TenantCond, b: &TenantCond) -> Option<TenantCond> {
    match (a, b) {
        (TenantCond::In(x), TenantCond::In(y)) => {
            let both: Vec<String> = x.iter().filter(|v| y.contains(v)).cloned().collect();
            (!both.is_empty()).then_some(TenantCond::In(both))
        }
        (TenantCond::NotIn(x), TenantCond::NotIn(y)) => Some(TenantCond::NotIn(
            TenantCond::normalize(&[x.as_slice(), y.as_slice()].concat()),
        )),
        (TenantCond::Absent, TenantCond::Absent) => Some(TenantCond::Absent),
        // Unequal ranks are never compared (their specificity differs); both match some
        // requests, so report the overlap conservatively.
        (x, _) => Some(x.clone()),
    }
}

/// Whether condition `wide` accepts every global account `narrow` accepts.
fn covers(wide: &TenantCond, narrow: &TenantCond) -> bool {
    match (wide, narrow) {
        (TenantCond::Absent, _) => true,
        (TenantCond::In(w), TenantCond::In(n)) => n.iter().all(|v| w.contains(v)),
        (TenantCond::NotIn(w), TenantCond::In(n)) => n.iter().all(|v| !w.contains(v)),
        (TenantCond::NotIn(w), TenantCond::NotIn(n)) => w.iter().all(|v| n.contains(v)),
        _ => false,
    }
}

/// Why two entries that differ only in their global-account lists are ambiguous.
fn tenant_overlap(ga: &TenantCond) -> String {
    match ga {
        TenantCond::In(l) => format!(
            "both deny global account{} `{}` under the same region conditions: name each global account in one of them only",
            if l.len() == 1 { "" } else { "s" },
            l.join("`, `")
        ),
        _ => "both `GA!=` entries match every global account neither lists, under the same region conditions: merge them into one entry".to_string(),
    }
}

/// Requests both conditions accept, as a condition; `None` when there are none.
fn intersect(a: &Cond, b: &Cond) -> Option<Cond> {
    match (a, b) {
        (Cond::Absent, x) | (x, Cond::Absent) => Some(x.clone()),
        (Cond::Any, x) | (x, Cond::Any) => Some(x.clone()),
        (Cond::Exact(x), Cond::Exact(y)) => (x == y).then(|| Cond::Exact(x.clone())),
    }
}

/// Entries whose plan is not in the plan table.
pub fn unknown_plans(entries: &[Entry], table: &PlanTable) -> Vec<Diagnostic> {
    entries
        .iter()
        .filter(|e| table.get(&e.rule.plan).is_none())
        .map(|e| e.plan_diag(Reason::UnknownPlan, table.unknown_message(&e.rule.plan)))
        .collect()
}

/// Required plans without any entry (and required plans that do not exist).
pub fn coverage(entries: &[Entry], required: &[String], table: &PlanTable) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    for plan in required {
        if table.get(plan).is_none() {
            out.push(Diagnostic::global(
                Reason::UnknownPlan,
                format!("requiredPlans: {}", table.unknown_message(plan)),
            ));
        } else if !entries.iter().any(|e| &e.rule.plan == plan) {
            out.push(Diagnostic::global(
                Reason::UncoveredPlan,
                format!("required plan `{plan}` is not covered by any rule: add an entry for it, e.g. `{plan}`"),
            ));
        }
    }
    out
}

/// Preferences whose hyperscalerType is fixed (no request value in it) must produce a valid
/// label value.
pub fn fixed_types(entries: &[Entry], table: &PlanTable) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    for e in entries {
        let Some(Provider::Fixed(provider)) = table.get(&e.rule.plan) else {
            continue;
        };
        for (k, pool) in e.rule.pools.iter().enumerate() {
            let Some(t) = fixed_type(&e.rule, pool, provider) else {
                continue;
            };
            if let Some(problem) = label_value_problem(&t) {
                let pref = (e.rule.pools.len() > 1).then_some(k);
                out.push(e.diag(
                    Reason::InvalidConfig,
                    pref,
                    format!("the entry produces hyperscalerType `{t}`, {problem}"),
                ));
            }
        }
    }
    out
}

/// The hyperscalerType of one preference when no request value goes into it.
pub fn fixed_type(rule: &Rule, pool: &PoolResult, provider: &str) -> Option<String> {
    let mut t = provider.to_string();
    for (suffix, cond) in [(pool.pr_suffix, &rule.pr), (pool.cr_suffix, &rule.cr)] {
        if suffix {
            let Cond::Exact(v) = cond else { return None };
            t.push('_');
            t.push_str(v);
        }
    }
    Some(t)
}
