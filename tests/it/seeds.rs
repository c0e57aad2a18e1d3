//! Every example configuration of seeds 000 (rule entries) and 001 (legacy properties), with the
//! requests each describes and the pools they must reach; the initial configuration in all
//! three syntaxes must agree.

use std::collections::BTreeMap;

use hap_operator::api::{HapConfigSpec, LegacyRules, RuleSyntax};
use hap_operator::diag::Reason;
use hap_operator::rules::{CompiledRules, Request};

fn seed(rules: &[&str]) -> HapConfigSpec {
    HapConfigSpec {
        rules: Some(rules.iter().map(|s| s.to_string()).collect()),
        binding_namespace: "garden-kyma".into(),
        ..Default::default()
    }
}

fn keb(rules: &[&str]) -> HapConfigSpec {
    HapConfigSpec {
        rule_syntax: Some(RuleSyntax::Keb),
        ..seed(rules)
    }
}

fn legacy(pr: &str, cr: &str, shared: &str, eu: &str) -> HapConfigSpec {
    let o = |s: &str| Some(s.to_string());
    HapConfigSpec {
        legacy_rules: Some(LegacyRules {
            platform_region_rule: o(pr),
            cluster_region_rule: o(cr),
            shared_rule: o(shared),
            eu_access_rule: o(eu),
        }),
        binding_namespace: "garden-kyma".into(),
        ..Default::default()
    }
}

fn compile(spec: &HapConfigSpec) -> CompiledRules {
    match CompiledRules::from_spec(spec) {
        Ok((r, _)) => r,
        Err(v) => panic!("rules invalid:\n{}", v.summary()),
    }
}

/// `type[,eu][,shared]` for a match, `!Reason` for an error.
fn pool(
    rules: &CompiledRules,
    plan: &str,
    pr: Option<&str>,
    cr: Option<&str>,
    provider: Option<&str>,
) -> String {
    let req = Request {
        plan,
        platform_region: pr,
        cluster_region: cr,
        provider,
        global_account: None,
    };
    match rules.evaluate(&req) {
        Ok(o) => {
            let mut s = o.hyperscaler_type.clone();
            if o.eu_access {
                s.push_str(",eu");
            }
            if o.shared {
                s.push_str(",shared");
            }
            assert_eq!(o.pool().hyperscaler_type, o.hyperscaler_type);
            s
        }
        Err(e) => format!("!{}", e.reason()),
    }
}

fn at(rules: &CompiledRules, plan: &str, pr: Option<&str>, cr: Option<&str>) -> String {
    pool(rules, plan, pr, cr, None)
}

// ---- seed 000 ----

#[test]
fn s000_platform_region_attribute() {
    let r = compile(&seed(&["gcp(PR=cf-sa30)"]));
    assert_eq!(at(&r, "gcp", Some("cf-sa30"), None), "gcp_cf-sa30");
    assert_eq!(at(&r, "gcp", Some("cf-eu10"), None), "!NoMatchingRule");
}

#[test]
fn s000_platform_region_wildcard() {
    let r = compile(&seed(&["aws(PR=*)"]));
    assert_eq!(at(&r, "aws", Some("cf-eu10"), None), "aws_cf-eu10");
    assert_eq!(
        at(&r, "aws", Some("cf-us10"), Some("us-east-1")),
        "aws_cf-us10"
    );
    assert_eq!(at(&r, "aws", None, None), "!NoMatchingRule");
}

#[test]
fn s000_cluster_region_attribute_and_wildcard() {
    let r = compile(&seed(&["gcp(CR=us-central1)"]));
    assert_eq!(
        at(&r, "gcp", Some("cf-us30"), Some("us-central1")),
        "gcp_us-central1"
    );
    assert_eq!(
        at(&r, "gcp", Some("cf-us30"), Some("europe-west3")),
        "!NoMatchingRule"
    );
    let r = compile(&seed(&["gcp(CR=*)"]));
    assert_eq!(at(&r, "gcp", None, Some("us-central1")), "gcp_us-central1");
    assert_eq!(
        at(&r, "gcp", None, Some("europe-west3")),
        "gcp_europe-west3"
    );
}

#[test]
fn s000_attribute_and_non_attribute_rules() {
    let r = compile(&seed(&["gcp(PR=cf-sa30)", "gcp"]));
    assert_eq!(at(&r, "gcp", Some("cf-sa30"), None), "gcp_cf-sa30");
    assert_eq!(at(&r, "gcp", Some("cf-eu10"), None), "gcp");
    assert_eq!(at(&r, "gcp", None, None), "gcp");
}

#[test]
fn s000_pools_divided_per_attribute() {
    let r = compile(&seed(&[
        "azure",
        "aws",
        "aws(PR=cf-eu11)",
        "gcp",
        "gcp(PR=cf-sa30)",
        "gcp(PR=cf-jp30)",
        "sap-converged-cloud",
    ]));
    let cases = [
        ("azure", "cf-eu20", "azure"),
        ("aws", "cf-us10", "aws"),
        ("aws", "cf-eu11", "aws_cf-eu11"),
        ("gcp", "cf-eu30", "gcp"),
        ("gcp", "cf-sa30", "gcp_cf-sa30"),
        ("gcp", "cf-jp30", "gcp_cf-jp30"),
        ("sap-converged-cloud", "cf-eu20", "openstack"),
    ];
    for (plan, pr, want) in cases {
        assert_eq!(
            at(&r, plan, Some(pr), Some("any-region")),
            want,
            "{plan} {pr}"
        );
    }
    let types: Vec<&str> = r
        .entries()
        .iter()
        .map(|e| e.hyperscaler_type.as_str())
        .collect();
    assert_eq!(
        types,
        [
            "azure",
            "aws",
            "aws_cf-eu11",
            "gcp",
            "gcp_cf-sa30",
            "gcp_cf-jp30",
            "openstack"
        ]
    );
}

#[test]
fn s000_multiple_attributes_in_one_rule() {
    let r = compile(&seed(&[
        "gcp(CR=*, PR=*)",
        "azure",
        "aws",
        "sap-converged-cloud",
    ]));
    assert_eq!(
        at(&r, "gcp", Some("cf-sa30"), Some("me-central2")),
        "gcp_cf-sa30_me-central2"
    );
    assert_eq!(at(&r, "gcp", Some("cf-sa30"), None), "!NoMatchingRule");
    assert_eq!(
        at(&r, "sap-converged-cloud", Some("cf-eu20"), Some("eu-de-1")),
        "openstack"
    );
    let r = compile(&seed(&[
        "azure",
        "aws",
        "gcp(CR=*, PR=*, euAccess=true, shared=true)",
        "sap-converged-cloud",
    ]));
    assert_eq!(
        at(&r, "gcp", Some("cf-eu30"), Some("europe-west3")),
        "gcp_cf-eu30_europe-west3,eu,shared"
    );
    assert_eq!(
        r.entries()[2].hyperscaler_type,
        "gcp_<platformRegion>_<clusterRegion>"
    );
}

#[test]
fn s000_simple_rules() {
    let r = compile(&seed(&["azure", "gcp"]));
    assert_eq!(
        at(&r, "azure", Some("cf-eu20"), Some("westeurope")),
        "azure"
    );
    assert_eq!(at(&r, "gcp", None, None), "gcp");
    assert_eq!(at(&r, "aws", None, None), "!NoMatchingRule");
}

fn binding(labels: &[(&str, &str)]) -> BTreeMap<String, String> {
    labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn s000_pools_misconfiguration() {
    let r = compile(&seed(&["azure", "gcp"]));
    let pools = [binding(&[("hyperscalerType", "azure")])];
    let missing = r.missing_pools(pools.iter());
    assert_eq!(missing.len(), 1);
    assert_eq!(
        (missing[0].reason, missing[0].index),
        (Reason::MissingPool, Some(2))
    );
    assert!(
        missing[0].message.contains("hyperscalerType=gcp"),
        "{}",
        missing[0].message
    );
    // A pool no rule uses is harmless; a request no rule matches fails, without fallback.
    let r = compile(&seed(&["azure"]));
    let pools = [
        binding(&[("hyperscalerType", "azure")]),
        binding(&[("hyperscalerType", "gcp")]),
    ];
    assert!(r.missing_pools(pools.iter()).is_empty());
    assert_eq!(at(&r, "gcp", None, None), "!NoMatchingRule");
}

#[test]
fn s000_empty_pool() {
    let e = CompiledRules::from_spec(&seed(&[""])).unwrap_err();
    assert_eq!(
        (e.errors[0].reason, e.errors[0].index),
        (Reason::ParseError, Some(1))
    );
    let e = CompiledRules::from_spec(&seed(&[])).unwrap_err();
    assert_eq!(e.errors[0].reason, Reason::EmptyRules);
}

// ---- the initial configuration, three ways ----

const INITIAL_SEED: [&str; 6] = [
    "azure(euAccess=*)",
    "aws(euAccess=*)",
    "trial(shared)",
    "gcp",
    "gcp(PR=cf-sa30)",
    "sap-converged-cloud(CR=*, shared)",
];

const INITIAL_KEB: [&str; 8] = [
    "azure",
    "azure(PR=cf-ch20) -> EU",
    "aws",
    "aws(PR=cf-eu11) -> EU",
    "trial -> S",
    "gcp",
    "gcp(PR=cf-sa30) -> PR",
    "sap-converged-cloud -> HR,S",
];

fn initial_legacy() -> HapConfigSpec {
    legacy(
        "gcp:cf-sa30",
        "sap-converged-cloud",
        "trial;sap-converged-cloud",
        "azure:cf-ch20;aws:cf-eu11",
    )
}

type Case = (
    &'static str,
    Option<&'static str>,
    Option<&'static str>,
    Option<&'static str>,
    &'static str,
);

/// The seed's list: azure, aws, gcp dedicated; gcp_cf-sa30; openstack_<CR> shared; trial shared
/// on azure or aws; EU pools for azure in cf-ch20 and aws in cf-eu11.
const TABLE: [Case; 14] = [
    ("azure", Some("cf-eu20"), Some("westeurope"), None, "azure"),
    (
        "azure",
        Some("cf-ch20"),
        Some("switzerlandnorth"),
        None,
        "azure,eu",
    ),
    ("aws", Some("cf-us10"), Some("us-east-1"), None, "aws"),
    ("aws", Some("cf-eu11"), Some("eu-central-1"), None, "aws,eu"),
    ("gcp", Some("cf-eu30"), Some("europe-west3"), None, "gcp"),
    (
        "gcp",
        Some("cf-sa30"),
        Some("me-central2"),
        None,
        "gcp_cf-sa30",
    ),
    ("gcp", None, None, None, "gcp"),
    (
        "trial",
        Some("cf-eu10"),
        Some("eu-central-1"),
        Some("aws"),
        "aws,shared",
    ),
    (
        "trial",
        Some("cf-eu20"),
        Some("westeurope"),
        Some("azure"),
        "azure,shared",
    ),
    ("trial", Some("cf-eu10"), None, None, "!MissingProvider"),
    (
        "sap-converged-cloud",
        Some("cf-eu20"),
        Some("eu-de-1"),
        None,
        "openstack_eu-de-1,shared",
    ),
    (
        "sap-converged-cloud",
        Some("cf-ap10"),
        Some("ap-jp-1"),
        None,
        "openstack_ap-jp-1,shared",
    ),
    ("openstack", None, None, None, "!UnknownPlan"),
    ("gdch-typo", None, None, None, "!UnknownPlan"),
];

#[test]
fn initial_configuration_agrees_in_all_three_syntaxes() {
    let sets = [
        ("seed", compile(&seed(&INITIAL_SEED))),
        ("keb", compile(&keb(&INITIAL_KEB))),
        ("legacy", compile(&initial_legacy())),
    ];
    for (plan, pr, cr, provider, want) in TABLE {
        for (name, rules) in &sets {
            assert_eq!(
                pool(rules, plan, pr, cr, provider),
                want,
                "{name}: {plan} {pr:?} {cr:?} {provider:?}"
            );
        }
    }
    // Without a cluster region sap-converged-cloud has no pool in any syntax (the reason differs:
    // Seed's `CR=*` does not match, KEB's and legacy's HR suffix has no value).
    for (name, rules) in &sets {
        assert!(
            pool(rules, "sap-converged-cloud", Some("cf-eu20"), None, None).starts_with('!'),
            "{name}"
        );
    }
}

#[test]
fn initial_configuration_differs_only_where_documented() {
    // Seed's `euAccess=*` uses one region list for every plan; the KEB and legacy forms name a
    // region per plan. An azure request from cf-eu11 is where they part.
    let s = compile(&seed(&INITIAL_SEED));
    let k = compile(&keb(&INITIAL_KEB));
    assert_eq!(at(&s, "azure", Some("cf-eu11"), None), "azure,eu");
    assert_eq!(at(&k, "azure", Some("cf-eu11"), None), "azure");
}

#[test]
fn initial_configuration_pools_of_the_seed_are_enough() {
    let pools = [
        binding(&[("hyperscalerType", "azure")]),
        binding(&[("hyperscalerType", "aws")]),
        binding(&[("hyperscalerType", "gcp")]),
        binding(&[("hyperscalerType", "azure"), ("shared", "true")]),
        binding(&[("hyperscalerType", "aws"), ("shared", "true")]),
        binding(&[("hyperscalerType", "azure"), ("euAccess", "true")]),
        binding(&[("hyperscalerType", "aws"), ("euAccess", "true")]),
        binding(&[("hyperscalerType", "gcp_cf-sa30")]),
        binding(&[("hyperscalerType", "openstack_eu-de-1"), ("shared", "true")]),
    ];
    let r = compile(&seed(&INITIAL_SEED));
    assert_eq!(r.missing_pools(pools.iter()), vec![]);
    // Without the EU pools both euAccess=* entries miss their EU half.
    let missing = r.missing_pools(pools.iter().filter(|b| !b.contains_key("euAccess")));
    assert_eq!(
        missing.iter().map(|d| d.index).collect::<Vec<_>>(),
        [Some(1), Some(2)]
    );
    // Without shared bindings the trial entry has no pool of any provider.
    let missing = r.missing_pools(pools.iter().filter(|b| !b.contains_key("shared")));
    assert_eq!(
        missing.iter().map(|d| d.index).collect::<Vec<_>>(),
        [Some(3)]
    );
}

#[test]
fn seed_head_naming_a_provider_type_gets_the_plan_hint() {
    let e = CompiledRules::from_spec(&seed(&["openstack(CR=*, shared)"])).unwrap_err();
    assert_eq!(e.errors[0].reason, Reason::UnknownPlan);
    assert_eq!(e.errors[0].column, Some(1));
    assert!(
        e.errors[0]
            .message
            .contains("did you mean `sap-converged-cloud`"),
        "{}",
        e.errors[0].message
    );
}

// ---- seed 001: the legacy properties ----

#[test]
fn s001_default_is_the_plain_provider_type() {
    let r = compile(&legacy("", "", "", ""));
    for (plan, want) in [
        ("aws", "aws"),
        ("azure", "azure"),
        ("gcp", "gcp"),
        ("sap-converged-cloud", "openstack"),
        ("azure_lite", "azure"),
    ] {
        assert_eq!(at(&r, plan, Some("cf-eu10"), Some("x")), want);
    }
    assert_eq!(pool(&r, "trial", None, None, Some("gcp")), "gcp");
}

#[test]
fn s001_platform_region_rule() {
    let r = compile(&legacy("gcp", "", "", ""));
    assert_eq!(at(&r, "gcp", Some("cf-sa30"), None), "gcp_cf-sa30");
    assert_eq!(at(&r, "gcp", Some("cf-eu30"), None), "gcp_cf-eu30");
    let r = compile(&legacy("gcp:cf-sa30", "", "", ""));
    assert_eq!(at(&r, "gcp", Some("cf-sa30"), None), "gcp_cf-sa30");
    assert_eq!(at(&r, "gcp", Some("cf-eu30"), None), "gcp");
}

#[test]
fn s001_several_plan_region_pairs() {
    // The seed writes `openstack`, a provider type; the plan is sap-converged-cloud.
    let e = CompiledRules::from_spec(&legacy(
        "gcp:cf-sa30;gcp:cf-jp30;aws:cf-eu11;openstack",
        "",
        "",
        "",
    ))
    .unwrap_err();
    assert_eq!(e.errors[0].reason, Reason::UnknownPlan);
    assert!(e.errors[0].message.contains("sap-converged-cloud"));
    let r = compile(&legacy(
        "gcp:cf-sa30;gcp:cf-jp30;aws:cf-eu11;sap-converged-cloud",
        "",
        "",
        "",
    ));
    let cases = [
        ("gcp", "cf-eu30", "gcp"),
        ("gcp", "cf-sa30", "gcp_cf-sa30"),
        ("gcp", "cf-jp30", "gcp_cf-jp30"),
        ("aws", "cf-us10", "aws"),
        ("aws", "cf-eu11", "aws_cf-eu11"),
        ("sap-converged-cloud", "cf-eu20", "openstack_cf-eu20"),
        ("azure", "cf-eu20", "azure"),
    ];
    for (plan, pr, want) in cases {
        assert_eq!(at(&r, plan, Some(pr), None), want, "{plan} {pr}");
    }
}

#[test]
fn s001_cluster_region_rule_and_combinations() {
    let r = compile(&legacy("gcp", "azure", "", ""));
    assert_eq!(
        at(&r, "gcp", Some("cf-sa30"), Some("me-central2")),
        "gcp_cf-sa30"
    );
    assert_eq!(
        at(&r, "azure", Some("cf-eu20"), Some("westeurope")),
        "azure_westeurope"
    );
    let r = compile(&legacy("gcp", "gcp", "", ""));
    assert_eq!(
        at(&r, "gcp", Some("cf-sa30"), Some("me-central2")),
        "gcp_cf-sa30_me-central2"
    );
    let r = compile(&legacy("gcp", "gcp", "gcp", "gcp"));
    assert_eq!(
        at(&r, "gcp", Some("cf-sa30"), Some("me-central2")),
        "gcp_cf-sa30_me-central2,eu,shared"
    );
}

#[test]
fn s001_format_examples() {
    let shared = |prop: &str, plan: &str, pr: &str| {
        let r = compile(&legacy("", "", prop, ""));
        pool(&r, plan, Some(pr), None, Some("aws")).ends_with(",shared")
    };
    assert!(shared("trial", "trial", "eu") && shared("trial", "trial", "us"));
    assert!(shared("trial:*", "trial", "eu") && shared("trial:*", "trial", "us"));
    assert!(shared("trial:eu", "trial", "eu") && !shared("trial:eu", "trial", "us"));
    assert!(
        shared("*:eu", "trial", "eu")
            && shared("*:eu", "aws", "eu")
            && !shared("*:eu", "aws", "us")
    );
    assert!(shared("*:eu;trial:eu", "gcp", "eu") && !shared("*:eu;trial:eu", "trial", "us"));
    assert!(
        shared("trial:eu;trial:gcp", "trial", "gcp")
            && !shared("trial:eu;trial:gcp", "trial", "us")
    );
    for bad in ["eu:*", "*:*"] {
        let e = CompiledRules::from_spec(&legacy("", "", bad, "")).unwrap_err();
        assert_eq!(e.errors[0].reason, Reason::InvalidConfig, "{bad}");
        assert_eq!(e.errors[0].column, Some(1));
    }
}

#[test]
fn s001_initial_configuration() {
    let r = compile(&initial_legacy());
    assert_eq!(at(&r, "gcp", Some("cf-sa30"), None), "gcp_cf-sa30");
    assert_eq!(
        at(&r, "sap-converged-cloud", Some("cf-eu20"), Some("eu-de-1")),
        "openstack_eu-de-1,shared"
    );
    assert_eq!(pool(&r, "trial", None, None, Some("azure")), "azure,shared");
    assert_eq!(at(&r, "azure", Some("cf-ch20"), None), "azure,eu");
    assert_eq!(at(&r, "aws", Some("cf-eu11"), None), "aws,eu");
    assert_eq!(at(&r, "aws", Some("cf-ch20"), None), "aws");
}

// ---- seed 002: ordered preferences (`oneOf`), deny (`oneOf: []`), one named instance ----

/// Seed 002's policy rules map onto entries: `oneOf` preferences become ordered pools (the first
/// one with a usable binding serves, so evaluation lists them all in order), `oneOf: []` denies,
/// and the injected instance becomes a pin (a HapConfig field, tested in rules::pins and e2e).
#[test]
fn seed_002_ordered_preferences_and_deny() {
    let r = compile(&seed(&[
        "gcp(PR=*) | () | (shared=fallback)",
        "gcp",
        r#"gcp(PR=cf-me20) deny "frozen""#,
    ]));
    let req = |pr| Request {
        plan: "gcp",
        platform_region: pr,
        cluster_region: None,
        provider: None,
        global_account: None,
    };
    let o = r.evaluate(&req(Some("cf-sa30"))).expect("matches");
    let pools: Vec<String> = o
        .preferences
        .iter()
        .map(|p| {
            format!(
                "{}{}",
                p.pool.hyperscaler_type,
                if p.pool.shared { ",shared" } else { "" }
            )
        })
        .collect();
    assert_eq!(pools, ["gcp_cf-sa30", "gcp", "gcp,shared"]);
    // The more specific deny wins over the wildcard entry; its message is the one users see.
    let e = r.evaluate(&req(Some("cf-me20"))).unwrap_err();
    assert_eq!(e.reason(), "Denied");
    assert!(e.to_string().ends_with(": frozen"), "{e}");
    // Deny all of a plan: the structured `oneOf: []` of seed 002.
    let spec = HapConfigSpec {
        structured_rules: Some(vec![
            serde_json::from_value(serde_json::json!({"plan": "aws", "oneOf": []})).unwrap(),
        ]),
        ..seed(&["gcp"])
    };
    let r = compile(&spec);
    let e = r
        .evaluate(&Request {
            plan: "aws",
            ..req(None)
        })
        .unwrap_err();
    assert_eq!(e.reason(), "Denied");
    assert_eq!(at(&r, "gcp", None, None), "gcp");
}
