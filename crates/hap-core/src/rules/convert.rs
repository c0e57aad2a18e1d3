//! `hap migrate --hapconfig FILE --to seed|keb|structured`: the entries of a HapConfig rewritten
//! by the canonical printers in another form, everything else of the spec kept. An entry the
//! target syntax cannot say (KEB has no `euAccess=*`, Seed no region filter without its suffix)
//! goes to `structuredRules`, which can say everything, and a note says so.

use crate::api::{HapConfigSpec, RuleSyntax};

use super::{CompiledRules, Diagnostic, Validation, to_structured};

/// The form to write the entries in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    Seed,
    Keb,
    Structured,
}

/// The rewritten spec and what a person should know about it.
#[derive(Clone, Debug, PartialEq)]
pub struct Conversion {
    pub spec: HapConfigSpec,
    pub notes: Vec<String>,
    /// Warnings of the rewritten spec (errors are impossible: it has the same entries).
    pub warnings: Vec<Diagnostic>,
}

/// Rewrites the entries of `spec` (which must be valid) in `form`.
pub fn convert(spec: &HapConfigSpec, form: Form) -> Result<Conversion, Validation> {
    let (rules, _) = CompiledRules::from_spec(spec)?;
    let mut notes = Vec::new();
    if rules.is_legacy() {
        notes.push("legacyRules became one entry per plan (and per plan and region where the region changes the pool)".to_string());
    }
    let mut texts = Vec::new();
    let mut structured = Vec::new();
    for (info, rule) in rules.entries().iter().zip(rules.rules()) {
        let text = match form {
            Form::Seed => rule.to_seed(),
            Form::Keb => rule.to_keb(),
            Form::Structured => None,
        };
        match text {
            Some(t) => texts.push(t),
            None => {
                if form != Form::Structured {
                    notes.push(format!(
                        "rule {} `{}` cannot be written in the {} syntax ({}); it is kept in structuredRules",
                        info.index,
                        info.entry,
                        if form == Form::Seed { "Seed" } else { "KEB" },
                        if form == Form::Seed {
                            "it filters on a region without appending it, or a fallback appends a region the entry does not require"
                        } else {
                            "KEB has no euAccess=*"
                        },
                    ));
                }
                structured.push(to_structured(rule));
            }
        }
    }
    let out = HapConfigSpec {
        rule_syntax: (form == Form::Keb && !texts.is_empty()).then_some(RuleSyntax::Keb),
        rules: (!texts.is_empty()).then_some(texts),
        structured_rules: (!structured.is_empty()).then_some(structured),
        legacy_rules: None,
        ..spec.clone()
    };
    // Same entries, so same validity; the warnings may name other indices and columns.
    let warnings = match CompiledRules::from_spec(&out) {
        Ok((_, w)) => w,
        Err(v) => return Err(v),
    };
    Ok(Conversion {
        spec: out,
        notes,
        warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::Request;

    fn spec(rules: &[&str]) -> HapConfigSpec {
        HapConfigSpec {
            rules: Some(rules.iter().map(|r| r.to_string()).collect()),
            binding_namespace: "ns".into(),
            ..Default::default()
        }
    }

    #[test]
    fn every_form_keeps_every_result() {
        let original = spec(&[
            "aws(euAccess=*)",
            "gcp(PR=cf-sa30) | () | (shared=fallback)",
            r#"gcp(PR=cf-me20) deny "frozen""#,
            "gcp",
            "trial(shared)",
        ]);
        let (before, _) = CompiledRules::from_spec(&original).unwrap();
        for form in [Form::Seed, Form::Keb, Form::Structured] {
            let c = convert(&original, form).unwrap();
            let (after, _) = CompiledRules::from_spec(&c.spec).unwrap();
            for (plan, pr) in [
                ("aws", "cf-eu11"),
                ("aws", "cf-us10"),
                ("gcp", "cf-sa30"),
                ("gcp", "cf-me20"),
                ("gcp", "x"),
                ("trial", "x"),
            ] {
                let req = Request {
                    plan,
                    platform_region: Some(pr),
                    cluster_region: None,
                    provider: Some("aws"),
                    global_account: None,
                };
                // Indices and entry texts move with the form; pools and reasons must not.
                let result = |r: &CompiledRules| {
                    r.evaluate(&req)
                        .map(|o| o.preferences)
                        .map_err(|e| e.reason())
                };
                assert_eq!(result(&before), result(&after), "{form:?} {plan} {pr}");
            }
            match form {
                Form::Keb => {
                    assert_eq!(
                        c.spec.structured_rules.as_ref().map(Vec::len),
                        Some(1),
                        "euAccess=* stays structured"
                    );
                    assert_eq!(c.notes.len(), 1);
                }
                Form::Structured => assert!(c.spec.rules.is_none()),
                Form::Seed => assert!(c.spec.structured_rules.is_none()),
            }
        }
    }
}
