//! The rules engine (docs/design.md §2–§3): Seed, KEB, structured and legacy entries parsed into one
//! model, validated all at once (with the fallback constraints and pins), indexed by
//! plan, and evaluated without Kubernetes I/O.

pub mod convert;
mod entries;
mod eval;
mod fallback;
mod keb;
mod legacy;
mod legacy_seed;
mod lexer;
pub mod migrate;
pub mod migrate_keb;
mod model;
mod parse;
mod pins;
mod plans;
mod pools;
mod quarantine;
mod seed;
mod validate;

use std::collections::{BTreeSet, HashMap};

use crate::api::{HapConfigSpec, RuleSyntax};
use crate::labels::{PoolKey, ResolvedLabelKeys};

use crate::diag::label_value_problem;
use crate::diag::{Diagnostic, Reason, Validation};
pub(crate) use entries::Entry;
pub use entries::to_structured;
pub use eval::{EvalError, Outcome, Preference, Request};
pub use model::{Cond, EuAccess, PoolResult, Rule, Specificity, TenantCond};
pub use pins::{PinRule, Pins};
pub use plans::{PlanTable, Provider};
pub use pools::{EntryInfo, PreferenceInfo};

/// EU-access platform regions when the spec names none.
pub const DEFAULT_EU_REGIONS: [&str; 2] = ["cf-eu11", "cf-ch20"];

/// The syntax an entry is written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Syntax {
    Seed,
    Keb,
}

impl From<RuleSyntax> for Syntax {
    fn from(s: RuleSyntax) -> Self {
        match s {
            RuleSyntax::Seed => Syntax::Seed,
            RuleSyntax::Keb => Syntax::Keb,
        }
    }
}

/// A positioned parse error or warning of one entry.
pub use parse::Issue as ParseIssue;

/// Parses one entry; the parsed rule and its warnings, or the first error with its column.
pub fn parse_entry(syntax: Syntax, text: &str) -> Result<(Rule, Vec<ParseIssue>), ParseIssue> {
    let p = match syntax {
        Syntax::Seed => seed::parse(text)?,
        Syntax::Keb => keb::parse(text)?,
    };
    Ok((p.rule, p.warnings))
}

/// Parsed, validated and indexed rules, ready for evaluation.
#[derive(Clone, Debug)]
pub struct CompiledRules {
    entries: Vec<Entry>,
    infos: Vec<EntryInfo>,
    by_plan: HashMap<String, Vec<usize>>,
    plans: PlanTable,
    eu_regions: Vec<String>,
    keys: ResolvedLabelKeys,
    legacy: bool,
    pins: Pins,
    /// The request sources, validated with the rules above and compiled once with them.
    sources: crate::sources::CompiledSources,
}

impl CompiledRules {
    /// Parse + validate + index the whole config, request sources included: the one compile of
    /// a HapConfig. Err carries every error (and warnings).
    pub fn from_spec(spec: &HapConfigSpec) -> Result<(CompiledRules, Vec<Diagnostic>), Validation> {
        let mut v = Validation::default();
        let keys = ResolvedLabelKeys::from_spec(spec.label_keys.as_ref());
        v.errors.extend(crate::diag::labelcheck::check_keys(&keys));
        let (plans, plan_errors) = PlanTable::from_spec(spec.plans.as_ref());
        v.errors.extend(plan_errors);
        let eu_regions = eu_regions(spec, &mut v);
        refresh_cycle(spec, &mut v);
        let syntax = Syntax::from(spec.rule_syntax.unwrap_or_default());
        let entries = entries::entries(spec, syntax, &plans, &mut v);
        let keb = syntax == Syntax::Keb || spec.legacy_rules.is_some();
        v.errors.extend(validate::unknown_plans(&entries, &plans));
        v.errors.extend(validate::duplicates(&entries));
        v.errors.extend(validate::ambiguities(&entries, keb));
        v.errors.extend(validate::coverage(
            &entries,
            spec.required_plans.as_deref().unwrap_or_default(),
            &plans,
        ));
        v.errors.extend(validate::fixed_types(&entries, &plans));
        fallback::check(&entries, &plans, &mut v);
        let pins = pins::compile(spec.pins.as_deref().unwrap_or_default(), &mut v);
        quarantine::check(
            spec.quarantine.as_deref().unwrap_or_default(),
            &entries,
            &plans,
            &mut v,
        );
        v.errors.extend(crate::sources::validate(spec));
        // Entry errors in entry order, then the ones about the configuration as a whole.
        v.errors.sort_by_key(|d| d.index.unwrap_or(usize::MAX));
        if !v.errors.is_empty() {
            return Err(v);
        }
        let mut by_plan: HashMap<String, Vec<usize>> = HashMap::new();
        for (i, e) in entries.iter().enumerate() {
            by_plan.entry(e.rule.plan.clone()).or_default().push(i);
        }
        let infos = entries.iter().map(|e| EntryInfo::new(e, &plans)).collect();
        let legacy = spec.legacy_rules.is_some();
        Ok((
            CompiledRules {
                entries,
                infos,
                by_plan,
                plans,
                eu_regions,
                keys,
                legacy,
                pins,
                sources: crate::sources::CompiledSources::of_valid(spec),
            },
            v.warnings,
        ))
    }

    /// The request sources of this config, in list order.
    pub fn sources(&self) -> &crate::sources::CompiledSources {
        &self.sources
    }

    pub fn evaluate(&self, req: &Request<'_>) -> Result<Outcome, EvalError> {
        eval::evaluate(self, req)
    }

    /// One per rule entry, in input order (for legacy rules: one per derived entry).
    pub fn entries(&self) -> &[EntryInfo] {
        &self.infos
    }

    /// The parsed rules, in the order of `entries()`.
    pub fn rules(&self) -> impl Iterator<Item = &Rule> {
        self.entries.iter().map(|e| &e.rule)
    }

    pub fn label_keys(&self) -> &ResolvedLabelKeys {
        &self.keys
    }

    pub fn plans(&self) -> &PlanTable {
        &self.plans
    }

    pub fn eu_access_platform_regions(&self) -> &[String] {
        &self.eu_regions
    }

    /// The pins of the spec, validated.
    pub fn pins(&self) -> &Pins {
        &self.pins
    }

    /// Whether the entries were derived from `legacyRules`.
    pub fn is_legacy(&self) -> bool {
        self.legacy
    }

    /// MissingPool diagnostics for entries without `*` whose pool has no binding among `bindings` (label maps).
    pub fn missing_pools<'a, L: crate::labels::LabelLookup + 'a>(
        &self,
        bindings: impl IntoIterator<Item = &'a L>,
    ) -> Vec<Diagnostic> {
        let usable: BTreeSet<PoolKey> = bindings
            .into_iter()
            .filter_map(|b| PoolKey::usable(&self.keys, b))
            .collect();
        self.missing_pools_in(&usable)
    }

    /// (One pass over every binding, also when the first one would have answered: the CLI and
    /// the controller's rare fallback use it; the status reads the index, `missing_pools_in`.)
    ///
    /// `missing_pools` from the pools that have a usable binding (`PoolKey::usable` of each
    /// binding, as the index keeps them) instead of every binding's labels.
    pub fn missing_pools_in<'a>(
        &self,
        usable: impl IntoIterator<Item = &'a PoolKey>,
    ) -> Vec<Diagnostic> {
        let usable: Vec<&PoolKey> = usable.into_iter().collect();
        pools::missing(
            &self.infos,
            &self.entries,
            &self.keys,
            &self.eu_regions,
            &usable,
        )
    }
}

fn eu_regions(spec: &HapConfigSpec, v: &mut Validation) -> Vec<String> {
    let Some(list) = &spec.eu_access_platform_regions else {
        return DEFAULT_EU_REGIONS.iter().map(|s| s.to_string()).collect();
    };
    for r in list {
        let message = if r.trim().is_empty() || r.trim() != r.as_str() {
            format!(
                "euAccessPlatformRegions: `{r}` is not a region name (empty or surrounded by spaces)"
            )
        } else if let Some(problem) = label_value_problem(r) {
            // A request's platformRegion is a label value, so this entry could never match one:
            // requests from the region meant here would silently get non-EU accounts.
            format!(
                "euAccessPlatformRegions: `{r}` can never match a request's platformRegion, {problem}"
            )
        } else {
            continue;
        };
        v.errors
            .push(Diagnostic::global(Reason::InvalidConfig, message));
    }
    list.clone()
}

/// The shortest `internalStateRefreshCycleDuration` accepted (other than `0s`, never): each
/// refresh drops every cache and lists bindings and Shoots again, so a cycle shorter than a list
/// never lets the caches settle. Production cycles are hours (`24h`); tests use seconds.
pub const MIN_REFRESH_CYCLE: std::time::Duration = std::time::Duration::from_secs(1);

/// A refresh cycle the operator can honour: `0s` (never) or at least `MIN_REFRESH_CYCLE`, and
/// parseable. The CRD pattern admits `1ns` (a refresh loop that never lets the caches settle)
/// and `99999999999h` (beyond what a timer can wait, formerly ignored without a word).
fn refresh_cycle(spec: &HapConfigSpec, v: &mut Validation) {
    let Some(raw) = spec.internal_state_refresh_cycle_duration.as_deref() else {
        return;
    };
    let problem = match crate::duration::parse(raw) {
        Err(e) => e.to_string(),
        Ok(d) if d.is_zero() || d >= MIN_REFRESH_CYCLE => return,
        Ok(_) => format!(
            "`{raw}` is shorter than 1s: every refresh drops the caches and lists the cluster again, so they would never settle; use 0s (never) or a longer cycle such as 24h"
        ),
    };
    v.errors.push(Diagnostic::global(
        Reason::InvalidConfig,
        format!("internalStateRefreshCycleDuration: {problem}"),
    ));
}

/// Expands legacy rules into rules of the one model (for `hap migrate` and tests).
pub fn expand_legacy(
    legacy: &crate::api::LegacyRules,
    plans: &PlanTable,
) -> Result<Vec<Rule>, Vec<Diagnostic>> {
    legacy::parse(legacy, plans).map(|props| legacy::expand(&props, plans))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shareable<T: Clone + Send + Sync + std::fmt::Debug>() {}

    #[test]
    fn compiled_rules_can_be_shared_across_tasks() {
        shareable::<CompiledRules>();
        shareable::<EntryInfo>();
        shareable::<Validation>();
    }

    fn with_refresh(d: &str) -> HapConfigSpec {
        HapConfigSpec {
            rules: Some(vec!["aws".into()]),
            binding_namespace: "ns".into(),
            internal_state_refresh_cycle_duration: Some(d.into()),
            ..Default::default()
        }
    }

    #[test]
    fn refresh_cycles_below_a_second_or_beyond_a_timer_are_invalid() {
        // Found by the bad-input corpus (tests/data/bad/config-status): `1ns` passes the CRD
        // pattern and made the operator drop and re-list its caches in a loop.
        for ok in ["0s", "0", "1s", "2s", "1m", "90m", "24h", "1h30m"] {
            assert!(CompiledRules::from_spec(&with_refresh(ok)).is_ok(), "{ok}");
        }
        for (bad, why) in [
            ("1ns", "shorter than 1s"),
            ("999ms", "shorter than 1s"),
            ("0.5s", "shorter than 1s"),
            ("99999999999h", "too large"),
        ] {
            let v = CompiledRules::from_spec(&with_refresh(bad)).unwrap_err();
            assert_eq!(v.errors.len(), 1, "{bad}: {v}");
            assert_eq!(v.errors[0].reason, Reason::InvalidConfig);
            assert!(
                v.errors[0]
                    .message
                    .starts_with("internalStateRefreshCycleDuration: ")
                    && v.errors[0].message.contains(why),
                "{bad}: {}",
                v.errors[0].message
            );
        }
    }

    #[test]
    fn eu_access_regions_that_no_request_can_name_are_invalid() {
        // Found by the bad-input corpus: `cf eu11` was accepted, so cf-eu11 requests would
        // silently have been served from non-EU pools.
        let spec = |regions: &[&str]| HapConfigSpec {
            rules: Some(vec!["aws(euAccess=*)".into()]),
            binding_namespace: "ns".into(),
            eu_access_platform_regions: Some(regions.iter().map(|r| r.to_string()).collect()),
            ..Default::default()
        };
        assert!(CompiledRules::from_spec(&spec(&["cf-eu11", "cf-ch20"])).is_ok());
        for bad in ["cf eu11", "cf-eu11.", "cf/eu11", "c\u{fc}f"] {
            let v = CompiledRules::from_spec(&spec(&["cf-ch20", bad])).unwrap_err();
            assert_eq!(v.errors.len(), 1, "{bad}: {v}");
            assert!(
                v.errors[0]
                    .message
                    .contains(&format!("`{bad}` can never match")),
                "{}",
                v.errors[0].message
            );
        }
        let v = CompiledRules::from_spec(&spec(&[" cf-eu11"])).unwrap_err();
        assert_eq!(v.errors.len(), 1, "one message per region: {v}");
    }

    #[test]
    fn warnings_come_back_with_valid_rules_and_errors_sorted_by_entry() {
        let spec = HapConfigSpec {
            rule_syntax: Some(RuleSyntax::Keb),
            rules: Some(vec!["sap-converged-cloud(HR=*)->S".into()]),
            binding_namespace: "ns".into(),
            ..Default::default()
        };
        let (rules, warnings) = CompiledRules::from_spec(&spec).unwrap();
        assert_eq!((warnings.len(), rules.entries()[0].has_wildcard), (1, true));
        let spec = HapConfigSpec {
            rules: Some(vec!["gcp".into(), "nope".into(), "gcp".into()]),
            required_plans: Some(vec!["aws".into()]),
            binding_namespace: "ns".into(),
            ..Default::default()
        };
        let v = CompiledRules::from_spec(&spec).unwrap_err();
        let order: Vec<_> = v.errors.iter().map(|d| (d.index, d.reason)).collect();
        assert_eq!(
            order,
            [
                (Some(2), Reason::UnknownPlan),
                (Some(3), Reason::DuplicateRule),
                (None, Reason::UncoveredPlan)
            ]
        );
    }
}
