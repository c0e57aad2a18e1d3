//! Property tests of the rules engine: canonical printing round-trips (Seed, KEB and the
//! structured form, ordered pools and deny included), results do not depend on rule order,
//! matching and NoMatchingRule never contradict, fallbacks never leave EU access, and parsing
//! never panics — with deny entries that target or exclude global accounts (`GA=`, `GA!=`)
//! among the entries and several tenants among the requests.

use hap_operator::api::{HapConfigSpec, LegacyRules, RuleSyntax};
use hap_operator::rules::{
    CompiledRules, Cond, EuAccess, PoolResult, Rule, Syntax, TenantCond, parse_entry, to_structured,
};
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

fn pool() -> impl Strategy<Value = PoolResult> {
    (any::<[bool; 4]>(), eu()).prop_map(|([pr_suffix, cr_suffix, shared, consent], eu_access)| {
        PoolResult {
            pr_suffix,
            cr_suffix,
            shared,
            eu_access,
            shared_fallback: shared && consent,
        }
    })
}

fn message() -> impl Strategy<Value = Option<String>> {
    prop::option::of(prop::sample::select(vec![
        "frozen while the pool is set up",
        r#"say "no" | \ twice"#,
        "é -> DENY ( ) ,",
    ]))
    .prop_map(|m| m.map(str::to_string))
}

/// A global-account condition over a small alphabet (written in mixed case, as users may).
fn tenant() -> impl Strategy<Value = TenantCond> {
    let list = prop::collection::vec(prop::sample::select(vec!["g1", "G2", "g3"]), 1..3)
        .prop_map(|l| TenantCond::normalize(&l));
    prop_oneof![
        2 => Just(TenantCond::Absent),
        1 => list.clone().prop_map(TenantCond::In),
        1 => list.prop_map(TenantCond::NotIn),
    ]
}

/// Any rule: up to three preferences, or a deny (no preferences) with or without a message and
/// with or without a global-account condition.
fn rule() -> impl Strategy<Value = Rule> {
    (
        prop::sample::select(vec!["aws", "gcp", "trial", "sap-converged-cloud"]),
        cond(),
        cond(),
        prop::collection::vec(pool(), 0..4),
        message(),
        tenant(),
    )
        .prop_map(|(plan, pr, cr, pools, message, ga)| Rule {
            plan: plan.to_string(),
            pr,
            cr,
            ga: if pools.is_empty() {
                ga
            } else {
                TenantCond::Absent
            },
            deny_message: message.filter(|_| pools.is_empty()),
            pools,
        })
}

/// A KEB rule set over two plans and a two-region alphabet, so that collisions are frequent;
/// entries may have fallbacks or deny.
fn keb_set() -> impl Strategy<Value = Vec<String>> {
    let small = prop_oneof![
        Just(Cond::Absent),
        Just(Cond::Any),
        Just(Cond::Exact("a".into())),
        Just(Cond::Exact("b".into()))
    ];
    let pool = any::<[bool; 4]>().prop_map(|[ps, cs, sh, e]| PoolResult {
        pr_suffix: ps,
        cr_suffix: cs,
        shared: sh,
        eu_access: if e { EuAccess::Always } else { EuAccess::Never },
        shared_fallback: sh,
    });
    let r = (
        prop::sample::select(vec!["aws", "gcp"]),
        small.clone(),
        small,
        prop::collection::vec(pool, 0..3),
        tenant(),
    )
        .prop_map(|(plan, pr, cr, pools, ga)| {
            let rule = Rule {
                plan: plan.into(),
                pr,
                cr,
                ga: if pools.is_empty() {
                    ga
                } else {
                    TenantCond::Absent
                },
                pools,
                deny_message: None,
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
/// The tenants of the requests: listed ones in another case than the entries, and one no entry
/// names.
const TENANTS: [Option<&str>; 5] = [None, Some("G1"), Some("g2"), Some("g3"), Some("g4")];

/// The matched entry's text and its pools in order, or the error reason.
type Comparable = Result<(String, Vec<(String, bool, bool)>), &'static str>;

fn results(r: &CompiledRules) -> Vec<Comparable> {
    let mut out = Vec::new();
    for plan in ["aws", "gcp"] {
        for (pr, cr, ga) in requests() {
            {
                let req = hap_operator::rules::Request {
                    plan,
                    platform_region: pr,
                    cluster_region: cr,
                    provider: None,
                    global_account: ga,
                };
                out.push(
                    r.evaluate(&req)
                        .map(|o| {
                            let pools = o
                                .preferences
                                .iter()
                                .map(|p| {
                                    (
                                        p.pool.hyperscaler_type.clone(),
                                        p.pool.eu_access,
                                        p.pool.shared,
                                    )
                                })
                                .collect();
                            (o.entry, pools)
                        })
                        .map_err(|e| e.reason()),
                );
            }
        }
    }
    out
}

/// Every combination of regions and tenant the properties evaluate.
fn requests() -> impl Iterator<
    Item = (
        Option<&'static str>,
        Option<&'static str>,
        Option<&'static str>,
    ),
> {
    REGIONS.into_iter().flat_map(|pr| {
        REGIONS
            .into_iter()
            .flat_map(move |cr| TENANTS.into_iter().map(move |ga| (pr, cr, ga)))
    })
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
            prop_assert!(r.pools.iter().any(|p| p.eu_access == EuAccess::FromRequest));
        }
    }

    #[test]
    fn structured_form_round_trips(r in rule()) {
        let spec = HapConfigSpec {
            structured_rules: Some(vec![to_structured(&r)]),
            binding_namespace: "ns".into(),
            ..Default::default()
        };
        // Validation may reject the rule (a plan condition, a fallback constraint); when it
        // compiles, it is the same rule.
        if let Ok((compiled, _)) = CompiledRules::from_spec(&spec) {
            let back: Vec<&Rule> = compiled.rules().collect();
            prop_assert_eq!(back, vec![&r]);
        }
    }

    #[test]
    fn fallbacks_never_leave_eu_access(set in keb_set()) {
        let Ok((r, _)) = CompiledRules::from_spec(&keb_spec(set)) else { return Ok(()) };
        for plan in ["aws", "gcp"] {
            for pr in REGIONS {
                for cr in REGIONS {
                    let req = hap_operator::rules::Request { plan, platform_region: pr, cluster_region: cr, provider: None, global_account: None };
                    let Ok(o) = r.evaluate(&req) else { continue };
                    let eu: Vec<bool> = o.preferences.iter().map(|p| p.pool.eu_access).collect();
                    prop_assert!(eu.windows(2).all(|w| w[0] <= w[1]), "{:?}", eu);
                    let shared: Vec<bool> = o.preferences.iter().map(|p| p.pool.shared).collect();
                    // keb_set writes every shared fallback as SF, so dedicated then shared is allowed;
                    // what must hold is that a valid set never repeats a pool.
                    let distinct: std::collections::BTreeSet<_> = o.preferences.iter().map(|p| &p.pool).collect();
                    prop_assert_eq!(distinct.len(), shared.len());
                }
            }
        }
    }

    #[test]
    fn result_does_not_depend_on_rule_order_across_rules_and_structured_rules(set in keb_set(), split in 0usize..8, seed in any::<u64>()) {
        // The same entries, some as strings and some structured, in two orders.
        let parsed: Vec<Rule> = set.iter().filter_map(|t| parse_entry(Syntax::Keb, t).ok().map(|p| p.0)).collect();
        let mut shuffled = parsed.clone();
        let mut x = seed | 1;
        for i in (1..shuffled.len()).rev() {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            shuffled.swap(i, (x % (i as u64 + 1)) as usize);
        }
        let mixed = |rules: &[Rule]| {
            let at = split.min(rules.len());
            HapConfigSpec {
                rule_syntax: Some(RuleSyntax::Keb),
                rules: (at > 0).then(|| rules[..at].iter().filter_map(Rule::to_keb).collect()),
                structured_rules: (at < rules.len()).then(|| rules[at..].iter().map(to_structured).collect()),
                binding_namespace: "ns".into(),
                ..Default::default()
            }
        };
        let a = CompiledRules::from_spec(&mixed(&parsed));
        let b = CompiledRules::from_spec(&mixed(&shuffled));
        prop_assert_eq!(a.is_ok(), b.is_ok());
        if let (Ok((a, _)), Ok((b, _))) = (a, b) {
            // Entry texts may differ in index only; compare pools and reasons.
            let strip = |v: Vec<Comparable>| v.into_iter().map(|c| c.map(|(_, p)| p)).collect::<Vec<_>>();
            prop_assert_eq!(strip(results(&a)), strip(results(&b)));
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
            for (pr, cr, ga) in requests() {
                let req = hap_operator::rules::Request { plan, platform_region: pr, cluster_region: cr, provider: None, global_account: ga };
                let matching: Vec<&&Rule> = rules.iter().filter(|x| x.plan == plan && x.matches_request(pr, cr, ga)).collect();
                match r.evaluate(&req) {
                    Err(e) if e.reason() == "NoMatchingRule" => prop_assert!(matching.is_empty()),
                    // Validation rules out every tie statically.
                    Err(e) => {
                        prop_assert_ne!(e.reason(), "AmbiguousMatch");
                        if let hap_operator::rules::EvalError::Denied { index, .. } = e {
                            let winner = rules[index - 1];
                            prop_assert!(winner.matches_request(pr, cr, ga));
                            prop_assert!(matching.iter().all(|m| m.specificity() <= winner.specificity()));
                        }
                    }
                    Ok(o) => {
                        let winner = rules[o.index - 1];
                        prop_assert!(winner.matches_request(pr, cr, ga));
                        prop_assert!(matching.iter().all(|m| m.specificity() <= winner.specificity()));
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
    fn parsers_never_panic_on_grammar_soup(s in "[a-zA-Z*(),=>: ;|!\\-_.]{0,48}") {
        let _ = parse_entry(Syntax::Seed, &s);
        let _ = parse_entry(Syntax::Keb, &s);
        let legacy = LegacyRules { platform_region_rule: Some(s.clone()), ..Default::default() };
        let spec = HapConfigSpec { legacy_rules: Some(legacy), binding_namespace: "ns".into(), ..Default::default() };
        let _ = CompiledRules::from_spec(&spec);
        let _ = CompiledRules::from_spec(&keb_spec(vec![s]));
    }
}
