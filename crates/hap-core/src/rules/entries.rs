//! The entries of one rule set, from whichever spec field holds them (`rules`, `structuredRules`,
//! `legacyRules`), each with where it was written, so that every diagnostic can name the index,
//! the column (entry strings) or the field path (structured entries).

use crate::api::policy::MAX_PREFERENCES;
use crate::api::{EuAccessMode, HapConfigSpec, PoolPreference, RuleSyntax, StructuredRule};

use super::model::{Cond, EuAccess, PoolResult, Rule, TenantCond};
use super::plans::PlanTable;
use super::{Syntax, keb, legacy, seed};
use crate::diag::label_value_problem;
use crate::diag::{Diagnostic, Reason, Validation};

/// Where an entry was written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum At {
    /// Item `item` (0-based) of `rules`: the column of its plan and of each preference.
    Text {
        item: usize,
        plan_col: usize,
        pref_cols: Vec<usize>,
    },
    /// Derived from `legacyRules`.
    Legacy,
    /// Item `item` (0-based) of `structuredRules`.
    Structured { item: usize },
}

/// One entry of the rule set in force. Legacy rules become entries written in canonical KEB text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub index: usize,
    pub text: String,
    pub rule: Rule,
    pub at: At,
}

impl Entry {
    /// A diagnostic of this entry; `pref` (0-based) points it at one preference.
    pub fn diag(
        &self,
        reason: Reason,
        pref: Option<usize>,
        message: impl Into<String>,
    ) -> Diagnostic {
        let (column, field) = match &self.at {
            At::Text {
                item, pref_cols, ..
            } => (
                pref.and_then(|k| pref_cols.get(k).copied()),
                Some(format!("rules[{item}]")),
            ),
            At::Legacy => (None, None),
            At::Structured { item } => (
                None,
                Some(match pref {
                    Some(k) => format!("structuredRules[{item}].oneOf[{k}]"),
                    None => format!("structuredRules[{item}]"),
                }),
            ),
        };
        Diagnostic::at(self.index, &self.text, reason, column, message).with_field(field)
    }

    /// A diagnostic about the entry's plan, pointing at the plan name.
    pub fn plan_diag(&self, reason: Reason, message: impl Into<String>) -> Diagnostic {
        let (column, field) = match &self.at {
            At::Text { item, plan_col, .. } => (Some(*plan_col), Some(format!("rules[{item}]"))),
            At::Legacy => (Some(1), None),
            At::Structured { item } => (None, Some(format!("structuredRules[{item}].plan"))),
        };
        Diagnostic::at(self.index, &self.text, reason, column, message).with_field(field)
    }
}

/// The entries of `rules`, `structuredRules` or `legacyRules`, recording parse errors and warnings.
pub(crate) fn entries(
    spec: &HapConfigSpec,
    syntax: Syntax,
    plans: &PlanTable,
    v: &mut Validation,
) -> Vec<Entry> {
    let structured = spec.structured_rules.as_deref();
    match (&spec.rules, structured, &spec.legacy_rules) {
        (Some(_), _, Some(_)) => {
            v.errors.push(Diagnostic::global(
                Reason::InvalidConfig,
                "rules and legacyRules are mutually exclusive: set one of them",
            ));
            Vec::new()
        }
        (_, Some(_), Some(_)) => {
            v.errors.push(Diagnostic::global(
                Reason::InvalidConfig,
                "structuredRules and legacyRules are mutually exclusive: set one of them",
            ));
            Vec::new()
        }
        (None, None, None) => {
            v.errors.push(Diagnostic::global(
                Reason::EmptyRules,
                "no rules: set rules (or structuredRules, or legacyRules)",
            ));
            Vec::new()
        }
        (None, None, Some(legacy)) => {
            if spec.rule_syntax.is_some_and(|s| s != RuleSyntax::Seed) {
                v.errors.push(Diagnostic::global(
                    Reason::InvalidConfig,
                    "ruleSyntax applies to rules only; remove it when using legacyRules",
                ));
            }
            match legacy::parse(legacy, plans) {
                Ok(props) => legacy_entries(&legacy::expand(&props, plans)),
                Err(errors) => {
                    v.errors.extend(errors);
                    Vec::new()
                }
            }
        }
        (list, structured, None) => {
            let list = list.as_deref().unwrap_or_default();
            let structured = structured.unwrap_or_default();
            if list.is_empty() && structured.is_empty() {
                v.errors.push(Diagnostic::global(
                    Reason::EmptyRules,
                    "the rule list is empty: every request would fail",
                ));
                return Vec::new();
            }
            let mut out = parse_list(list, syntax, v);
            for (item, s) in structured.iter().enumerate() {
                if let Some(e) = structured_entry(list.len() + item + 1, item, s, syntax, v) {
                    out.push(e);
                }
            }
            out
        }
    }
}

fn parse_list(list: &[String], syntax: Syntax, v: &mut Validation) -> Vec<Entry> {
    let mut out = Vec::new();
    for (i, text) in list.iter().enumerate() {
        let index = i + 1;
        let field = || Some(format!("rules[{i}]"));
        let parsed = match syntax {
            Syntax::Seed => seed::parse(text),
            Syntax::Keb => keb::parse(text),
        };
        match parsed {
            Ok(p) => {
                for w in p.warnings {
                    v.warnings.push(
                        Diagnostic::at(index, text, Reason::ParseError, Some(w.col), w.message)
                            .with_field(field()),
                    );
                }
                out.push(Entry {
                    index,
                    text: text.clone(),
                    rule: p.rule,
                    at: At::Text {
                        item: i,
                        plan_col: p.plan_col,
                        pref_cols: p.pref_cols,
                    },
                });
            }
            Err(e) => v.errors.push(
                Diagnostic::at(index, text, Reason::ParseError, Some(e.col), e.message)
                    .with_field(field()),
            ),
        }
    }
    out
}

fn legacy_entries(rules: &[Rule]) -> Vec<Entry> {
    rules
        .iter()
        .enumerate()
        .map(|(i, r)| Entry {
            index: i + 1,
            text: r.to_keb().unwrap_or_else(|| r.plan.clone()),
            rule: r.clone(),
            at: At::Legacy,
        })
        .collect()
}

/// The rule a structured entry stands for, or its errors (each naming its field).
pub(crate) fn structured_rule(s: &StructuredRule, item: usize) -> Result<Rule, Vec<Diagnostic>> {
    let at = |f: &str| format!("structuredRules[{item}].{f}");
    let mut errors = Vec::new();
    let mut cond = |value: &Option<String>, f: &str| match value.as_deref() {
        None => Cond::Absent,
        Some("*") => Cond::Any,
        Some(v) => {
            if let Some(problem) = label_value_problem(v) {
                errors.push(Diagnostic::field(
                    at(f),
                    Reason::InvalidConfig,
                    format!("`{v}` is neither `*` nor a region a request can carry, {problem}"),
                ));
            }
            Cond::Exact(v.to_string())
        }
    };
    let pr = cond(&s.platform_region, "platformRegion");
    let cr = cond(&s.cluster_region, "clusterRegion");
    if s.one_of.len() > MAX_PREFERENCES {
        errors.push(Diagnostic::field(
            at("oneOf"),
            Reason::InvalidConfig,
            format!(
                "{} preferences; an entry lists at most {MAX_PREFERENCES}",
                s.one_of.len()
            ),
        ));
    }
    if s.message.is_some() && !s.one_of.is_empty() {
        errors.push(Diagnostic::field(
            at("message"),
            Reason::InvalidConfig,
            "message is what a deny entry tells the request: set it only with oneOf: []",
        ));
    }
    let mut pools = Vec::new();
    for (k, p) in s.one_of.iter().enumerate() {
        match preference(p) {
            Ok(pool) => pools.push(pool),
            Err(m) => errors.push(Diagnostic::field(
                at(&format!("oneOf[{k}]")),
                Reason::InvalidConfig,
                m,
            )),
        }
    }
    let deny_message = match s.message.as_deref().map(super::parse::message_text) {
        Some(Err(m)) => {
            errors.push(Diagnostic::field(at("message"), Reason::InvalidConfig, m));
            None
        }
        Some(Ok(m)) => Some(m),
        None => None,
    };
    let ga = tenant_cond(s, item, &mut errors);
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(Rule {
        plan: s.plan.clone(),
        pr,
        cr,
        ga,
        pools,
        deny_message: deny_message.filter(|_| s.one_of.is_empty()),
    })
}

/// `globalAccounts` / `exceptGlobalAccounts`: deny entries only, one of them, valid values.
fn tenant_cond(s: &StructuredRule, item: usize, errors: &mut Vec<Diagnostic>) -> TenantCond {
    let mut err = |f: &str, m: String| {
        errors.push(Diagnostic::field(
            format!("structuredRules[{item}].{f}"),
            Reason::InvalidConfig,
            m,
        ));
    };
    let (field, list, exclude) = match (&s.global_accounts, &s.except_global_accounts) {
        (None, None) => return TenantCond::Absent,
        (Some(_), Some(_)) => {
            err(
                "exceptGlobalAccounts",
                "globalAccounts and exceptGlobalAccounts are mutually exclusive: an entry takes one of them".into(),
            );
            return TenantCond::Absent;
        }
        (Some(l), None) => ("globalAccounts", l, false),
        (None, Some(l)) => ("exceptGlobalAccounts", l, true),
    };
    if !s.one_of.is_empty() {
        err(
            field,
            format!(
                "{field}: only a deny entry (oneOf: []) may name global accounts; an entry that names pools applies to every tenant"
            ),
        );
    }
    if list.is_empty() {
        err(
            field,
            format!("{field} is empty: name at least one global account, or remove it"),
        );
    }
    for (k, v) in list.iter().enumerate() {
        if let Some(problem) = label_value_problem(v) {
            err(
                &format!("{field}[{k}]"),
                format!("`{v}` is not a global account a request can carry, {problem}"),
            );
        }
    }
    let list = TenantCond::normalize(list);
    if exclude {
        TenantCond::NotIn(list)
    } else {
        TenantCond::In(list)
    }
}

fn preference(p: &PoolPreference) -> Result<PoolResult, String> {
    let shared = p.shared.unwrap_or(false);
    let shared_fallback = p.shared_fallback.unwrap_or(false);
    if shared_fallback && !shared {
        return Err("sharedFallback: true needs shared: true (it accepts this shared pool as the fallback of a dedicated one)".into());
    }
    Ok(PoolResult {
        pr_suffix: p.platform_region_suffix.unwrap_or(false),
        cr_suffix: p.cluster_region_suffix.unwrap_or(false),
        shared,
        eu_access: match p.eu_access {
            Some(EuAccessMode::Required) => EuAccess::Always,
            Some(EuAccessMode::FromRequest) => EuAccess::FromRequest,
            Some(EuAccessMode::Absent) | None => EuAccess::Never,
        },
        shared_fallback,
    })
}

/// The structured form of a rule (for `hap migrate --to structured`).
pub fn to_structured(rule: &Rule) -> StructuredRule {
    let cond = |c: &Cond| match c {
        Cond::Absent => None,
        Cond::Any => Some("*".to_string()),
        Cond::Exact(v) => Some(v.clone()),
    };
    let flag = |b: bool| b.then_some(true);
    StructuredRule {
        plan: rule.plan.clone(),
        platform_region: cond(&rule.pr),
        cluster_region: cond(&rule.cr),
        one_of: rule
            .pools
            .iter()
            .map(|p| PoolPreference {
                platform_region_suffix: flag(p.pr_suffix),
                cluster_region_suffix: flag(p.cr_suffix),
                shared: flag(p.shared),
                shared_fallback: flag(p.shared_fallback),
                eu_access: match p.eu_access {
                    EuAccess::Never => None,
                    EuAccess::Always => Some(EuAccessMode::Required),
                    EuAccess::FromRequest => Some(EuAccessMode::FromRequest),
                },
            })
            .collect(),
        message: rule.deny_message.clone(),
        global_accounts: match &rule.ga {
            TenantCond::In(l) => Some(l.clone()),
            _ => None,
        },
        except_global_accounts: match &rule.ga {
            TenantCond::NotIn(l) => Some(l.clone()),
            _ => None,
        },
    }
}

/// How a rule reads in messages and status: its canonical text in the config's syntax, else in
/// the other one, else (neither can say it) a compact description of the structured form.
pub(crate) fn canonical_text(rule: &Rule, syntax: Syntax) -> String {
    let (first, second) = match syntax {
        Syntax::Seed => (rule.to_seed(), rule.to_keb()),
        Syntax::Keb => (rule.to_keb(), rule.to_seed()),
    };
    first
        .or(second)
        .unwrap_or_else(|| serde_json::to_string(&to_structured(rule)).unwrap_or_default())
}

fn structured_entry(
    index: usize,
    item: usize,
    s: &StructuredRule,
    syntax: Syntax,
    v: &mut Validation,
) -> Option<Entry> {
    match structured_rule(s, item) {
        Ok(rule) => Some(Entry {
            index,
            text: canonical_text(&rule, syntax),
            rule,
            at: At::Structured { item },
        }),
        Err(errors) => {
            let text = serde_json::to_string(s).unwrap_or_default();
            v.errors.extend(errors.into_iter().map(|d| Diagnostic {
                index: Some(index),
                entry: Some(text.clone()),
                ..d
            }));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn structured(json: serde_json::Value) -> StructuredRule {
        serde_json::from_value(json).expect("structured rule")
    }

    #[test]
    fn structured_entries_are_the_same_model() {
        let s = structured(serde_json::json!({
            "plan": "gcp", "platformRegion": "cf-sa30",
            "oneOf": [{"platformRegionSuffix": true}, {}, {"shared": true, "sharedFallback": true}],
        }));
        let r = structured_rule(&s, 0).unwrap();
        let (seed, _) =
            super::super::parse_entry(Syntax::Seed, "gcp(PR=cf-sa30) | () | (shared=fallback)")
                .unwrap();
        assert_eq!(r, seed);
        assert_eq!(to_structured(&r), s);
        assert_eq!(
            canonical_text(&r, Syntax::Keb),
            "gcp(PR=cf-sa30) -> PR | - | SF"
        );
    }

    #[test]
    fn structured_deny_and_its_errors_name_the_field() {
        let s = structured(
            serde_json::json!({"plan": "aws", "platformRegion": "*", "oneOf": [], "message": "frozen"}),
        );
        let r = structured_rule(&s, 0).unwrap();
        assert!(r.is_deny());
        assert_eq!(r.deny_message.as_deref(), Some("frozen"));
        let bad = structured(serde_json::json!({
            "plan": "aws", "clusterRegion": "eu de", "oneOf": [{}, {"sharedFallback": true}], "message": "x",
        }));
        let errs = structured_rule(&bad, 4).unwrap_err();
        let fields: Vec<_> = errs.iter().filter_map(|d| d.field.clone()).collect();
        assert_eq!(
            fields,
            [
                "structuredRules[4].clusterRegion",
                "structuredRules[4].message",
                "structuredRules[4].oneOf[1]"
            ]
        );
    }

    #[test]
    fn a_rule_neither_syntax_can_say_reads_as_its_structured_form() {
        let mut r = Rule::plain("aws");
        r.pr = Cond::Exact("cf-eu11".into());
        r.pools[0].eu_access = EuAccess::FromRequest;
        let text = canonical_text(&r, Syntax::Seed);
        assert!(
            text.starts_with('{') && text.contains("FromRequest"),
            "{text}"
        );
    }

    #[test]
    fn structured_global_account_conditions_and_their_errors_name_the_field() {
        let s = structured(serde_json::json!({
            "plan": "trial", "exceptGlobalAccounts": ["GA-2", "ga-1"], "oneOf": [],
            "message": "{plan} is closed for {globalAccount}",
        }));
        let r = structured_rule(&s, 0).unwrap();
        assert_eq!(r.ga, TenantCond::NotIn(vec!["ga-1".into(), "ga-2".into()]));
        assert_eq!(
            canonical_text(&r, Syntax::Seed),
            r#"trial(GA!=ga-1|ga-2) deny "{plan} is closed for {globalAccount}""#
        );
        let bad = structured(serde_json::json!({
            "plan": "trial", "globalAccounts": ["ga-1", "ga 2"], "oneOf": [{}],
        }));
        let fields: Vec<_> = structured_rule(&bad, 3)
            .unwrap_err()
            .iter()
            .filter_map(|d| d.field.clone())
            .collect();
        assert_eq!(
            fields,
            [
                "structuredRules[3].globalAccounts",
                "structuredRules[3].globalAccounts[1]"
            ]
        );
        let both = structured(serde_json::json!({
            "plan": "trial", "globalAccounts": ["a"], "exceptGlobalAccounts": ["b"], "oneOf": [],
        }));
        let errs = structured_rule(&both, 0).unwrap_err();
        assert!(errs[0].message.contains("mutually exclusive"), "{errs:?}");
    }
}
