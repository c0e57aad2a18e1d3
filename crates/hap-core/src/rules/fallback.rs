//! Constraints on an entry's ordered pools: an EU-access preference never falls back
//! to a pool without EU access, a dedicated one never to a shared pool unless the entry says so
//! (`shared=fallback`, KEB `SF`, `sharedFallback: true`), no pool twice, at most
//! `MAX_PREFERENCES`; and the warning when a fallback takes from another entry's first pool.
//!
//! The CRD's CEL rules (api::policy) check the first two at apply time with the same words;
//! each check reports the first offending preference of an entry, as CEL does.

use crate::api::policy::MAX_PREFERENCES;

use super::Entry;
use super::model::EuAccess;
use super::plans::PlanTable;
use super::pools::PreferenceInfo;
use crate::diag::{Reason, Validation};

/// How much EU access a preference promises; a later preference must not promise less.
fn eu_rank(e: EuAccess) -> u8 {
    match e {
        EuAccess::Never => 0,
        EuAccess::FromRequest => 1,
        EuAccess::Always => 2,
    }
}

pub(crate) fn check(entries: &[Entry], table: &PlanTable, v: &mut Validation) {
    for e in entries {
        let pools = &e.rule.pools;
        if pools.len() > MAX_PREFERENCES {
            v.errors.push(e.diag(
                Reason::InvalidFallback,
                Some(MAX_PREFERENCES),
                format!(
                    "{} preferences; an entry lists at most {MAX_PREFERENCES}",
                    pools.len()
                ),
            ));
        }
        let eu = pools.iter().enumerate().skip(1).find(|(k, p)| {
            pools[..*k]
                .iter()
                .any(|q| eu_rank(q.eu_access) > eu_rank(p.eu_access))
        });
        if let Some((k, _)) = eu {
            v.errors.push(e.diag(
                Reason::InvalidFallback,
                Some(k),
                format!(
                    "preference {} falls back from an EU-access pool to a pool without EU access: every preference after an EU-access one (euAccess, euAccess=*; KEB: EU) must be EU-access too",
                    k + 1
                ),
            ));
        }
        let shared =
            pools.iter().enumerate().skip(1).find(|(k, p)| {
                p.shared && !p.shared_fallback && pools[..*k].iter().any(|q| !q.shared)
            });
        if let Some((k, _)) = shared {
            v.errors.push(e.diag(
                Reason::InvalidFallback,
                Some(k),
                format!(
                    "preference {} falls back from a dedicated pool to a shared one: say so explicitly with shared=fallback (KEB: SF)",
                    k + 1
                ),
            ));
        }
        for (k, p) in pools.iter().enumerate() {
            if let Some(j) = pools[..k].iter().position(|q| q.same_pool(p)) {
                v.errors.push(e.diag(
                    Reason::InvalidFallback,
                    Some(k),
                    format!(
                        "preference {} names the same pool as preference {}: remove one of them",
                        k + 1,
                        j + 1
                    ),
                ));
            }
            if p.shared_fallback && !pools[..k].iter().any(|q| !q.shared) {
                v.warnings.push(e.diag(
                    Reason::InvalidFallback,
                    Some(k),
                    format!(
                        "preference {}: shared=fallback (SF) accepts a shared pool after a dedicated one, and no dedicated preference comes before it; it means plain `shared` here",
                        k + 1
                    ),
                ));
            }
        }
    }
    overlaps(entries, table, v);
}

/// A fallback pool that is another entry's first pool: when the fallback is used, it takes the
/// bindings the other entry's requests are meant to get. Worth a warning, not an error (an
/// overflow pool shared on purpose is a valid design).
fn overlaps(entries: &[Entry], table: &PlanTable, v: &mut Validation) {
    let primaries: Vec<(&Entry, PreferenceInfo)> = entries
        .iter()
        .filter_map(|e| {
            let p = e.rule.primary()?;
            Some((e, PreferenceInfo::new(1, &e.rule, p, table)))
        })
        .collect();
    for e in entries {
        for (k, pool) in e.rule.pools.iter().enumerate().skip(1) {
            let pref = PreferenceInfo::new(k + 1, &e.rule, pool, table);
            let others: Vec<String> = primaries
                .iter()
                .filter(|(o, p)| o.index != e.index && pref.overlaps(p))
                .map(|(o, _)| format!("rule {} `{}`", o.index, o.text))
                .collect();
            if others.is_empty() {
                continue;
            }
            let shown = others
                .iter()
                .take(3)
                .cloned()
                .collect::<Vec<_>>()
                .join(", ");
            let more = match others.len() {
                n if n > 3 => format!(" and {} more", n - 3),
                _ => String::new(),
            };
            v.warnings.push(e.diag(
                Reason::FallbackOverlap,
                Some(k),
                format!(
                    "preference {} uses the pool `{}` that is the first pool of {shown}{more}: when this entry falls back, it takes bindings those requests are meant to get",
                    k + 1,
                    describe(&pref)
                ),
            ));
        }
    }
}

fn describe(p: &PreferenceInfo) -> String {
    let eu = match p.eu_access.as_str() {
        "true" => ",euAccess=true",
        "false" => ",!euAccess",
        _ => "",
    };
    let shared = if p.shared { ",shared=true" } else { "" };
    format!("hyperscalerType={}{eu}{shared}", p.hyperscaler_type)
}

#[cfg(test)]
mod tests {
    use crate::api::{HapConfigSpec, RuleSyntax};
    use crate::rules::{CompiledRules, Reason, Validation};

    fn check(syntax: RuleSyntax, rules: &[&str]) -> Validation {
        let spec = HapConfigSpec {
            rule_syntax: Some(syntax),
            rules: Some(rules.iter().map(|r| r.to_string()).collect()),
            binding_namespace: "ns".into(),
            ..Default::default()
        };
        match CompiledRules::from_spec(&spec) {
            Ok((_, warnings)) => Validation {
                errors: Vec::new(),
                warnings,
            },
            Err(v) => v,
        }
    }

    fn first_error(syntax: RuleSyntax, rule: &str) -> (Reason, Option<usize>, String) {
        let v = check(syntax, &[rule]);
        let e = v
            .errors
            .first()
            .unwrap_or_else(|| panic!("{rule}: no error"));
        (e.reason, e.column, e.message.clone())
    }

    #[test]
    fn eu_access_never_falls_back_to_a_pool_without_it() {
        for (syntax, rule, col) in [
            (RuleSyntax::Seed, "aws(euAccess) | ()", 15),
            (RuleSyntax::Seed, "aws(euAccess=*) | (euAccess) | ()", 30),
            (RuleSyntax::Seed, "aws(euAccess) | (euAccess=*)", 15),
            (RuleSyntax::Keb, "aws -> EU | -", 11),
        ] {
            let (reason, column, message) = first_error(syntax, rule);
            assert_eq!(reason, Reason::InvalidFallback, "{rule}");
            assert_eq!(column, Some(col), "{rule}: {message}");
            assert!(message.contains("EU-access"), "{message}");
        }
        for ok in [
            "aws | (euAccess)",
            "aws(euAccess=*) | (euAccess)",
            "aws | (euAccess=*) | (euAccess)",
        ] {
            assert!(check(RuleSyntax::Seed, &[ok]).errors.is_empty(), "{ok}");
        }
    }

    #[test]
    fn dedicated_never_falls_back_to_shared_unless_the_entry_says_so() {
        let (reason, column, message) = first_error(RuleSyntax::Seed, "gcp | (shared)");
        assert_eq!((reason, column), (Reason::InvalidFallback, Some(5)));
        assert!(message.contains("shared=fallback"), "{message}");
        let (_, column, _) = first_error(RuleSyntax::Keb, "gcp(PR=a) -> PR | - | S");
        assert_eq!(column, Some(21));
        for (syntax, ok) in [
            (RuleSyntax::Seed, "gcp | (shared=fallback)"),
            (RuleSyntax::Keb, "gcp -> - | SF"),
            (RuleSyntax::Seed, "gcp(shared) | ()"),
        ] {
            assert!(check(syntax, &[ok]).errors.is_empty(), "{ok}");
        }
        let v = check(RuleSyntax::Seed, &["gcp(shared=fallback)"]);
        assert!(v.errors.is_empty());
        assert_eq!(v.warnings[0].reason, Reason::InvalidFallback);
    }

    #[test]
    fn a_pool_twice_and_too_many_preferences_are_errors() {
        let (_, column, message) = first_error(RuleSyntax::Keb, "gcp -> EU | EU,SF | EU");
        assert_eq!(column, Some(19));
        assert!(message.contains("same pool as preference 1"), "{message}");
        let many = format!("gcp(PR=*){}", " | (PR, euAccess)".repeat(8));
        let v = check(RuleSyntax::Seed, &[&many]);
        assert!(
            v.errors.iter().any(|e| e.message.contains("at most 8")),
            "{v}"
        );
    }

    #[test]
    fn a_fallback_on_another_entrys_first_pool_is_a_warning() {
        let v = check(
            RuleSyntax::Seed,
            &[
                "gcp(PR=cf-sa30) | ()",
                "gcp",
                "build-runtime-gcp | (euAccess)",
            ],
        );
        assert!(v.errors.is_empty(), "{v}");
        let w: Vec<_> = v
            .warnings
            .iter()
            .filter(|w| w.reason == Reason::FallbackOverlap)
            .collect();
        assert_eq!(w.len(), 1, "{:?}", v.warnings);
        assert_eq!((w[0].index, w[0].column), (Some(1), Some(17)));
        assert!(w[0].message.contains("rule 2 `gcp`"), "{}", w[0].message);
    }
}
