//! Property tests of the rules engine: canonical printing round-trips, results do not depend on
//! rule order, matching and NoMatchingRule never contradict, and parsing never panics.

use hap_operator::api::{HapConfigSpec, LegacyRules, RuleSyntax};
use hap_operator::rules::{CompiledRules, Cond, EuAccess, Rule, Syntax, parse_entry};
use proptest::prelude::*;

fn cond() -> impl Strategy<Value = Cond> {
    prop_oneof![
        Just(Cond::Absent),
        Just(Cond::Any),
        prop::sample::select(vec!["a", "b", "cf-eu11", "x.y_z"])
            .prop_map(|s| Cond::Exact(s.to_string())),
    ]
}

fn eu() -> impl Strategy<Value = EuAccess> {
    prop::sample::select(vec![
        EuAccess::Never,
        EuAccess::Always,
        EuAccess::FromRequest,
    ])
}

fn rule() -> impl Strategy<Value = Rule> {
    (
        prop::sample::select(vec!["aws", "gcp", "trial", "sap-converged-cloud"]),
        cond(),
        cond(),
        any::<[bool; 3]>(),
        eu(),
    )
        .prop_map(
            |(plan, pr, cr, [pr_suffix, cr_suffix, shared], eu_access)| Rule {
                plan: plan.to_string(),
                pr,
                cr,
                pr_suffix,
                cr_suffix,
                shared,
                eu_access,
            },
        )
}

/// A KEB rule set over two plans and a two-region alphabet, so that collisions are frequent.
fn keb_set() -> impl Strategy<Value = Vec<String>> {
    let small = prop_oneof![
        Just(Cond::Absent),
        Just(Cond::Any),
        Just(Cond::Exact("a".into())),
        Just(Cond::Exact("b".into()))
    ];
    let r = (
        prop::sample::select(vec!["aws", "gcp"]),
        small.clone(),
        small,
        any::<[bool; 4]>(),
    )
        .prop_map(|(plan, pr, cr, [ps, cs, sh, e])| {
            let rule = Rule {
                plan: plan.into(),
                pr,
                cr,
                pr_suffix: ps,
                cr_suffix: cs,
                shared: sh,
                eu_access: if e { EuAccess::Always } else { EuAccess::Never },
            };
            rule.to_keb().unwrap_or_default()
        });
    prop::collection::vec(r, 1..8)
}

fn keb_spec(rules: Vec<String>) -> HapConfigSpec {
    HapConfigSpec {
        rule_syntax: Some(RuleSyntax::Keb),
        rules: Some(rules),
        binding_namespace: "ns".into(),
        ..Default::default()
    }
}

const REGIONS: [Option<&str>; 4] = [None, Some("a"), Some("b"), Some("c")];

/// The matched entry's text and pool, or the error reason.
type Comparable = Result<(String, String, bool, bool), &'static str>;

fn results(r: &CompiledRules) -> Vec<Comparable> {
    let mut out = Vec::new();
    for plan in ["aws", "gcp"] {
        for pr in REGIONS {
            for cr in REGIONS {
                let req = hap_operator::rules::Request {
                    plan,
                    platform_region: pr,
                    cluster_region: cr,
                    provider: None,
                };
                out.push(
                    r.evaluate(&req)
                        .map(|o| (o.entry, o.hyperscaler_type, o.eu_access, o.shared))
                        .map_err(|e| e.reason()),
                );
            }
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn seed_printing_round_trips(r in rule()) {
        if let Some(text) = r.to_seed() {
            let (parsed, warnings) = parse_entry(Syntax::Seed, &text).map_err(|e| TestCaseError::fail(format!("{text}: {e:?}")))?;
            prop_assert_eq!(parsed, r);
            prop_assert!(warnings.is_empty());
        } else {
            prop_assert!(!r.seed_expressible());
        }
    }

    #[test]
    fn keb_printing_round_trips(r in rule()) {
        if let Some(text) = r.to_keb() {
            let (parsed, _) = parse_entry(Syntax::Keb, &text).map_err(|e| TestCaseError::fail(format!("{text}: {e:?}")))?;
            prop_assert_eq!(parsed, r);
        } else {
            prop_assert_eq!(r.eu_access, EuAccess::FromRequest);
        }
    }

    #[test]
    fn result_does_not_depend_on_rule_order(set in keb_set(), seed in any::<u64>()) {
        let mut shuffled = set.clone();
        // A deterministic shuffle driven by the generated seed.
        let mut x = seed | 1;
        for i in (1..shuffled.len()).rev() {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            shuffled.swap(i, (x % (i as u64 + 1)) as usize);
        }
        let a = CompiledRules::from_spec(&keb_spec(set));
        let b = CompiledRules::from_spec(&keb_spec(shuffled));
        prop_assert_eq!(a.is_ok(), b.is_ok());
        if let (Ok((a, _)), Ok((b, _))) = (a, b) {
            prop_assert_eq!(results(&a), results(&b));
        }
    }

    #[test]
    fn matching_and_no_matching_rule_never_contradict(set in keb_set()) {
        let Ok((r, _)) = CompiledRules::from_spec(&keb_spec(set)) else { return Ok(()) };
        let rules: Vec<&Rule> = r.rules().collect();
        for plan in ["aws", "gcp"] {
            for pr in REGIONS {
                for cr in REGIONS {
                    let req = hap_operator::rules::Request { plan, platform_region: pr, cluster_region: cr, provider: None };
                    let matching: Vec<&&Rule> = rules.iter().filter(|x| x.plan == plan && x.matches(pr, cr)).collect();
                    match r.evaluate(&req) {
                        Err(e) if e.reason() == "NoMatchingRule" => prop_assert!(matching.is_empty()),
                        // Validation rules out every tie statically.
                        Err(e) => prop_assert_ne!(e.reason(), "AmbiguousMatch"),
                        Ok(o) => {
                            let winner = rules[o.index - 1];
                            prop_assert!(winner.matches(pr, cr));
                            prop_assert!(matching.iter().all(|m| m.specificity() <= winner.specificity()));
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn parsers_never_panic(s in ".{0,64}") {
        let _ = parse_entry(Syntax::Seed, &s);
        let _ = parse_entry(Syntax::Keb, &s);
    }

    #[test]
    fn parsers_never_panic_on_grammar_soup(s in "[a-zA-Z*(),=>: ;\\-_.]{0,48}") {
        let _ = parse_entry(Syntax::Seed, &s);
        let _ = parse_entry(Syntax::Keb, &s);
        let legacy = LegacyRules { platform_region_rule: Some(s.clone()), ..Default::default() };
        let spec = HapConfigSpec { legacy_rules: Some(legacy), binding_namespace: "ns".into(), ..Default::default() };
        let _ = CompiledRules::from_spec(&spec);
        let _ = CompiledRules::from_spec(&keb_spec(vec![s]));
    }
}
