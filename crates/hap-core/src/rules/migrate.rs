//! `hap migrate` as pure functions: upstream KEB Helm values or the legacy four properties in,
//! a HapConfig manifest (with comments where the translation is not exact) and notes out.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::api::{HapConfigSpec, LegacyRules, RuleSyntax};

use super::legacy_seed::{SeedTranslation, to_seed};
use super::migrate_keb;
use super::model::{Cond, Rule};
use super::{
    CompiledRules, DEFAULT_EU_REGIONS, Diagnostic, PlanTable, Request, Syntax, expand_legacy,
    parse_entry,
};

/// Names the generated manifest.
#[derive(Clone, Debug)]
pub struct Target {
    pub name: String,
    pub binding_namespace: String,
}

/// The manifest, and what a person should know about it (printed on stderr).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Migration {
    pub manifest: String,
    pub notes: Vec<String>,
    /// Validation errors of the generated configuration; empty when it is valid.
    pub errors: Vec<Diagnostic>,
}

#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    #[error("{0}")]
    Input(String),
}

/// Reads `hap.rule` and `hap.multiHyperscalerAccount` from KEB Helm values.
pub fn from_keb_values(values: &Value, target: &Target) -> Result<Migration, MigrateError> {
    let hap = values.get("hap").unwrap_or(values);
    let rules = rule_strings(hap)?;
    let mut notes = Vec::new();
    let mut comments: BTreeMap<usize, String> = BTreeMap::new();
    let mut seed = Vec::new();
    for (i, text) in rules.iter().enumerate() {
        let Ok((rule, _)) = parse_entry(Syntax::Keb, text) else {
            continue;
        };
        if let Some(c) = star_note(&rule, text) {
            notes.push(format!("rule {}: {c}", i + 1));
            comments.insert(i, c);
        }
        seed.push(rule.to_seed());
    }
    let all_seed =
        seed.len() == rules.len() && seed.iter().all(Option::is_some) && comments.is_empty();
    let (syntax, mut entries): (_, Vec<String>) = if all_seed {
        (RuleSyntax::Seed, seed.into_iter().flatten().collect())
    } else {
        (
            RuleSyntax::Keb,
            rules.iter().map(|r| r.trim().to_string()).collect(),
        )
    };
    let blocked = migrate_keb::blocklist(values).map_err(|e| MigrateError::Input(e.to_string()))?;
    notes.extend(blocked.notes.iter().cloned());
    let dropped = block_plans(&rules, &blocked.denies, &mut entries, &mut comments);
    notes.extend(dropped);
    for d in &blocked.denies {
        entries.push(d.entry(syntax == RuleSyntax::Keb));
    }
    let multi = multi_account(hap.get("multiHyperscalerAccount"), &mut notes);
    let spec = HapConfigSpec {
        rule_syntax: (syntax == RuleSyntax::Keb).then_some(syntax),
        rules: Some(entries.clone()),
        binding_namespace: target.binding_namespace.clone(),
        ..Default::default()
    };
    let errors = CompiledRules::from_spec(&spec)
        .err()
        .map(|v| v.errors)
        .unwrap_or_default();
    let mut y = Manifest::new(target, "--keb-values");
    if syntax == RuleSyntax::Keb {
        y.line(1, "# The KEB syntax: some entries filter on a region without appending it, which Seed cannot say.");
        y.line(1, "ruleSyntax: KEB");
    }
    y.list(1, "rules", &entries, &comments);
    y.raw(&multi);
    Ok(Migration {
        manifest: y.finish(),
        notes,
        errors,
    })
}

/// A blocklist rule for a whole plan is checked before every rule upstream; here a more specific
/// allow entry would win over a plain deny, so the plan's allow entries go (kept as comments).
fn block_plans(
    rules: &[String],
    denies: &[migrate_keb::Deny],
    entries: &mut Vec<String>,
    comments: &mut BTreeMap<usize, String>,
) -> Vec<String> {
    let whole: Vec<&str> = denies
        .iter()
        .filter(|d| d.tenants == migrate_keb::Tenants::All)
        .map(|d| d.plan.as_str())
        .collect();
    if whole.is_empty() {
        return Vec::new();
    }
    let mut notes = Vec::new();
    let mut kept = Vec::new();
    let mut kept_comments = BTreeMap::new();
    let mut left_out = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        let plan = parse_entry(Syntax::Keb, &rules[i])
            .ok()
            .map(|(r, _)| r.plan);
        match plan.filter(|p| whole.contains(&p.as_str())) {
            Some(p) => {
                notes.push(format!(
                    "rule {} `{}`: operationBlocklist blocks every provisioning of plan {p}; the entry is left out (a comment in the manifest)",
                    i + 1,
                    rules[i].trim()
                ));
                left_out.push(format!("`{entry}`"));
            }
            None => {
                if let Some(c) = comments.get(&i) {
                    kept_comments.insert(kept.len(), c.clone());
                }
                kept.push(entry.clone());
            }
        }
    }
    if !left_out.is_empty() {
        kept_comments.insert(
            kept.len(),
            format!(
                "Left out, as operationBlocklist blocks every provisioning of their plan: {}",
                left_out.join(", ")
            ),
        );
    }
    *entries = kept;
    *comments = kept_comments;
    notes
}

/// `hap.rule` as a list of strings; an empty string is no rules, anything else is refused.
fn rule_strings(hap: &Value) -> Result<Vec<String>, MigrateError> {
    match hap.get("rule") {
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| MigrateError::Input(format!("hap.rule: `{v}` is not a string")))
            })
            .collect::<Result<Vec<_>, _>>(),
        Some(Value::String(s)) if s.trim().is_empty() => Ok(Vec::new()),
        Some(other) => Err(MigrateError::Input(format!(
            "hap.rule must be a list of strings, found `{other}`"
        ))),
        None => Err(MigrateError::Input(
            "no `hap.rule` list in the values file".into(),
        )),
    }
}

/// Why an entry with `*` in a region is not carried over exactly, and the fix, if it has one:
/// upstream KEB reads `*` as the literal region `*`.
fn star_note(rule: &Rule, text: &str) -> Option<String> {
    if rule.pr != Cond::Any && rule.cr != Cond::Any {
        return None;
    }
    let single = rule.pools.len() == 1;
    let primary = rule.primary().cloned().unwrap_or_default();
    let fix = if rule.cr == Cond::Any && !primary.cr_suffix && single {
        format!(
            " For pools labelled `<provider>_<region>` write `{} -> HR{}`.",
            rule.plan,
            if primary.shared { ",S" } else { "" }
        )
    } else {
        String::new()
    };
    Some(format!(
        "Not exact: upstream KEB reads `*` in `{}` as the literal region `*`, so upstream this entry matched no real request; here `*` matches any region.{fix}",
        text.trim()
    ))
}

/// `hap.multiHyperscalerAccount` as our `multiHyperscalerAccount` block (already indented).
fn multi_account(v: Option<&Value>, notes: &mut Vec<String>) -> String {
    let Some(v) = v else { return String::new() };
    let mut out = String::from("  multiHyperscalerAccount:\n    allowedGlobalAccounts:");
    let gas: Vec<String> = v
        .get("allowedGlobalAccounts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|g| g.as_str().map(quote))
        .collect();
    if gas.is_empty() {
        out.push_str(" []\n");
    } else {
        out.push('\n');
        for g in gas {
            out.push_str(&format!("      - {g}\n"));
        }
    }
    let mut limits: BTreeMap<String, i64> = BTreeMap::new();
    for (k, n) in v
        .get("limits")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        let key = match k.as_str() {
            "sapconvergedcloud" | "sap-converged-cloud" => "openstack",
            other => other,
        };
        match n
            .as_i64()
            .or_else(|| n.as_str().and_then(|s| s.parse().ok()))
        {
            Some(0) => notes.push(format!(
                "multiHyperscalerAccount.limits.{k}: 0 means {} upstream; left out",
                if k == "default" {
                    "999999 (no real limit)"
                } else {
                    "\"use default\""
                }
            )),
            Some(n) if n > 0 && n <= i64::from(i32::MAX) => {
                if limits
                    .insert(key.to_string(), n)
                    .is_some_and(|old| old != n)
                {
                    notes.push(format!("multiHyperscalerAccount.limits: `{k}` is an alias of `openstack` with another value; kept {n}"));
                }
            }
            _ => notes.push(format!(
                "multiHyperscalerAccount.limits.{k}: `{n}` is not a positive number; left out"
            )),
        }
    }
    if let Some(g) = v
        .get("minBindingsForGuard")
        .and_then(Value::as_i64)
        .filter(|g| *g > 0)
    {
        notes.push(format!("multiHyperscalerAccount.minBindingsForGuard ({g}) has no equivalent: hap-operator counts clusters from the cluster itself, so the database guard is not needed"));
    }
    out.push_str("    limits:");
    out.push_str(if limits.is_empty() { " {}\n" } else { "\n" });
    for (k, n) in limits {
        out.push_str(&format!("      {}: {n}\n", quote(&k)));
    }
    out
}

/// Rewrites the four properties as Seed rules where exact, otherwise keeps them.
pub fn from_legacy(legacy: &LegacyRules, target: &Target) -> Result<Migration, MigrateError> {
    let plans = PlanTable::default();
    let expanded = expand_legacy(legacy, &plans).map_err(|errs| {
        MigrateError::Input(
            errs.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n"),
        )
    })?;
    let legacy_spec = HapConfigSpec {
        legacy_rules: Some(legacy.clone()),
        binding_namespace: target.binding_namespace.clone(),
        ..Default::default()
    };
    let mut notes = Vec::new();
    let translation = to_seed(&expanded, &DEFAULT_EU_REGIONS).and_then(|t| {
        let spec = seed_spec(&t, target);
        if same_results(&legacy_spec, &spec) {
            Ok((t, spec))
        } else {
            Err(vec![
                "the Seed rules would not give the same pools for every request".into(),
            ])
        }
    });
    let mut y = Manifest::new(target, "--legacy");
    let spec = match translation {
        Ok((t, spec)) => {
            let entries: Vec<String> = t.rules.iter().filter_map(|r| r.to_seed()).collect();
            y.line(
                1,
                "# Exact Seed equivalent of the four legacy properties, one entry per plan.",
            );
            y.list(1, "rules", &entries, &BTreeMap::new());
            if let Some(regions) = &t.eu_regions {
                y.list(1, "euAccessPlatformRegions", regions, &BTreeMap::new());
            }
            spec
        }
        Err(reasons) => {
            for r in &reasons {
                notes.push(format!("kept legacyRules: {r}"));
            }
            y.line(1, "# Kept as legacyRules: the Seed syntax cannot say them exactly (see `hap migrate` on stderr).");
            y.line(1, "legacyRules:");
            for (key, v) in [
                ("platformRegionRule", &legacy.platform_region_rule),
                ("clusterRegionRule", &legacy.cluster_region_rule),
                ("sharedRule", &legacy.shared_rule),
                ("euAccessRule", &legacy.eu_access_rule),
            ] {
                y.line(2, &format!("{key}: {}", quote(v.as_deref().unwrap_or(""))));
            }
            y.line(
                1,
                "# The same rules in the KEB syntax (exact; use with `ruleSyntax: KEB`):",
            );
            for r in expanded.iter().filter_map(|r| r.to_keb()) {
                y.line(1, &format!("#   - {}", quote(&r)));
            }
            legacy_spec
        }
    };
    let errors = CompiledRules::from_spec(&spec)
        .err()
        .map(|v| v.errors)
        .unwrap_or_default();
    Ok(Migration {
        manifest: y.finish(),
        notes,
        errors,
    })
}

fn seed_spec(t: &SeedTranslation, target: &Target) -> HapConfigSpec {
    HapConfigSpec {
        rules: Some(t.rules.iter().filter_map(|r| r.to_seed()).collect()),
        eu_access_platform_regions: t.eu_regions.clone(),
        binding_namespace: target.binding_namespace.clone(),
        ..Default::default()
    }
}

/// Both configurations give the same pool, or both fail, for requests over every region they
/// name, the EU-access regions, another region and none.
fn same_results(a: &HapConfigSpec, b: &HapConfigSpec) -> bool {
    let (Ok((ra, _)), Ok((rb, _))) = (CompiledRules::from_spec(a), CompiledRules::from_spec(b))
    else {
        return false;
    };
    let mut regions: Vec<Option<String>> = vec![None, Some("hap-migrate-other".into())];
    regions.extend(DEFAULT_EU_REGIONS.iter().map(|r| Some(r.to_string())));
    for r in ra.rules().chain(rb.rules()) {
        if let Cond::Exact(v) = &r.pr {
            regions.push(Some(v.clone()));
        }
    }
    let plans: Vec<&str> = ra.plans().names().collect();
    plans.iter().all(|plan| {
        regions.iter().all(|pr| {
            [None, Some("cr-1")].iter().all(|cr| {
                let req = Request {
                    plan,
                    platform_region: pr.as_deref(),
                    cluster_region: *cr,
                    provider: Some("aws"),
                    global_account: None,
                };
                match (ra.evaluate(&req), rb.evaluate(&req)) {
                    (Ok(x), Ok(y)) => x.preferences == y.preferences,
                    (Err(_), Err(_)) => true,
                    _ => false,
                }
            })
        })
    })
}

/// JSON string quoting, which YAML reads as a double-quoted scalar.
fn quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("\"{}\"", s.escape_default()))
}

/// A small YAML writer: everything we emit is maps, lists of strings and comments.
struct Manifest {
    out: String,
}

impl Manifest {
    fn new(target: &Target, flag: &str) -> Self {
        let mut out =
            format!("# Generated by `hap migrate {flag}`. Check it with `hap validate -f FILE`.\n");
        out.push_str("apiVersion: accountpool.io/v1alpha1\nkind: HapConfig\nmetadata:\n");
        out.push_str(&format!("  name: {}\nspec:\n", quote(&target.name)));
        out.push_str(&format!(
            "  bindingNamespace: {}\n",
            quote(&target.binding_namespace)
        ));
        Self { out }
    }

    fn line(&mut self, indent: usize, text: &str) {
        self.out.push_str(&"  ".repeat(indent));
        self.out.push_str(text);
        self.out.push('\n');
    }

    fn raw(&mut self, text: &str) {
        self.out.push_str(text);
    }

    fn list(
        &mut self,
        indent: usize,
        key: &str,
        items: &[String],
        comments: &BTreeMap<usize, String>,
    ) {
        self.line(indent, &format!("{key}:"));
        for (i, item) in items.iter().enumerate() {
            if let Some(c) = comments.get(&i) {
                self.line(indent + 1, &format!("# {c}"));
            }
            self.line(indent + 1, &format!("- {}", quote(item)));
        }
    }

    fn finish(self) -> String {
        self.out
    }
}
