//! Upstream KEB behaviour (shared/reference/upstream-keb.md §2–§10): grammar, every parse error,
//! uniqueness, ambiguity, plans, matching priority, selectors, and the shipped rule sets.

use hap_operator::api::{HapConfigSpec, RuleSyntax};
use hap_operator::diag::{Diagnostic, Reason, Validation};
use hap_operator::rules::{CompiledRules, Request};

fn spec(rules: &[&str]) -> HapConfigSpec {
    HapConfigSpec {
        rule_syntax: Some(RuleSyntax::Keb),
        rules: Some(rules.iter().map(|s| s.to_string()).collect()),
        binding_namespace: "garden-kyma".into(),
        ..Default::default()
    }
}

fn compile(rules: &[&str]) -> (CompiledRules, Vec<Diagnostic>) {
    CompiledRules::from_spec(&spec(rules)).unwrap_or_else(|v| panic!("invalid:\n{}", v.summary()))
}

fn invalid(rules: &[&str]) -> Validation {
    match CompiledRules::from_spec(&spec(rules)) {
        Ok(_) => panic!("{rules:?} should be invalid"),
        Err(v) => v,
    }
}

fn eval(r: &CompiledRules, plan: &str, pr: Option<&str>, hr: Option<&str>) -> String {
    let req = Request {
        plan,
        platform_region: pr,
        cluster_region: hr,
        provider: Some("aws"),
        global_account: None,
    };
    match r.evaluate(&req) {
        Ok(o) => format!(
            "{}{}{}",
            o.hyperscaler_type,
            if o.eu_access { ",EU" } else { "" },
            if o.shared { ",S" } else { "" }
        ),
        Err(e) => format!("!{}", e.reason()),
    }
}

/// The single parse error of `entry` placed as rule 2 after a valid rule: (column, message).
fn parse_error(entry: &str) -> (Option<usize>, String) {
    let v = invalid(&["aws", entry]);
    assert_eq!(v.errors.len(), 1, "{entry}: {:?}", v.errors);
    let d = &v.errors[0];
    assert_eq!(
        (d.reason, d.index, d.entry.as_deref()),
        (Reason::ParseError, Some(2), Some(entry)),
        "{entry}"
    );
    (d.column, d.message.clone())
}

#[test]
fn grammar_accepts_upstream_forms() {
    let (r, warnings) = compile(&[
        "aws",
        "aws(PR=cf-eu11)",
        "aws(HR=eu-central-1)->EU",
        "aws(PR=cf-eu11,HR=eu-central-1) -> EU, S, PR, HR",
        "gcp -> PR",
    ]);
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(r.entries().len(), 5);
}

#[test]
fn whitespace_is_deleted_first() {
    let (r, _) = compile(&[" a w s ( PR = cf - eu11 ) -> E U "]);
    assert_eq!(eval(&r, "aws", Some("cf-eu11"), None), "aws,EU");
}

#[test]
fn every_upstream_parse_error_is_an_error() {
    let cases: [(&str, usize, &str); 29] = [
        ("aws->S->EU", 7, "more than one arrow"),
        ("aws((PR=x)", 5, "more than one `(`"),
        ("aws(PR=x))", 10, "more than one `)`"),
        ("aws(PR=x", 4, "not balanced"),
        ("awsPR=x)", 8, "not balanced"),
        ("aws)PR=x(", 4, "not balanced"),
        ("()", 1, "plan name is empty"),
        ("->S", 1, "plan name is empty"),
        ("->", 1, "plan name is empty"),
        ("", 1, "plan name is empty"),
        ("aws()", 5, "input attribute is empty"),
        ("aws(,)", 5, "input attribute is empty"),
        ("aws(PR=x,)", 10, "input attribute is empty"),
        ("aws(PR)", 5, "has no value"),
        ("aws(PR=a=b)", 9, "more than one `=`"),
        ("aws(XX=a)", 5, "unknown attribute `XX`"),
        ("aws(pr=a)", 5, "did you mean `PR`"),
        ("aws(CR=a)", 5, "calls the cluster region `HR`"),
        ("aws->XX", 6, "unknown attribute `XX`"),
        ("aws(PR=a,PR=b)", 10, "PlatformRegion (PR) already set"),
        ("aws(HR=a,HR=b)", 10, "HyperscalerRegion (HR) already set"),
        ("aws(PR=)", 8, "PlatformRegion (PR) is empty"),
        ("aws(PR=,PR=)", 8, "PlatformRegion (PR) is empty"),
        ("aws->", 6, "output attribute is empty"),
        ("aws->,S", 6, "output attribute is empty"),
        ("aws->S,", 8, "output attribute is empty"),
        ("aws->EU,EU", 9, "EuAccess already set"),
        ("aws->S,S", 8, "Shared already set"),
        ("aws(PR=x)y", 10, "after `)`"),
    ];
    for (entry, col, fragment) in cases {
        let (column, message) = parse_error(entry);
        assert_eq!(column, Some(col), "{entry}: {message}");
        assert!(message.contains(fragment), "{entry}: {message}");
    }
    assert!(
        parse_error("aws->PR,PR")
            .1
            .contains("PlatformRegionSuffix already set")
    );
    assert!(
        parse_error("aws->HR,HR")
            .1
            .contains("HyperscalerRegionSuffix already set")
    );
    // Upstream checks repetition before emptiness.
    assert!(parse_error("aws(PR=a,PR=)").1.contains("already set"));
    // EU and S are outputs, never inputs; keys are case-sensitive.
    assert!(parse_error("aws(EU=x)").1.contains("is an output"));
    assert!(parse_error("aws->s").1.contains("unknown attribute `s`"));
}

#[test]
fn all_parse_errors_are_reported_at_once() {
    let v = invalid(&["aws(", "gcp", "azure->X", "trial->S"]);
    let idx: Vec<Option<usize>> = v.errors.iter().map(|d| d.index).collect();
    assert_eq!(idx, [Some(1), Some(3)]);
    assert!(
        v.summary().starts_with("rule 1 `aws(`: column 4: "),
        "{}",
        v.summary()
    );
}

#[test]
fn uniqueness_ignores_outputs_order_and_whitespace() {
    let v = invalid(&["aws->EU", "aws->S"]);
    assert_eq!(
        (v.errors[0].reason, v.errors[0].index),
        (Reason::DuplicateRule, Some(2))
    );
    let v = invalid(&["aws(PR=x,HR=y)", "aws( HR=y , PR=x )->S"]);
    assert_eq!(v.errors[0].reason, Reason::DuplicateRule);
    // k copies give k-1 errors.
    let v = invalid(&["gcp", "gcp", "gcp", "aws"]);
    assert_eq!(v.errors.len(), 2);
    assert!(v.errors.iter().all(|d| d.reason == Reason::DuplicateRule));
}

#[test]
fn pr_only_and_hr_only_need_the_combined_entry() {
    let v = invalid(&["aws(PR=x)", "aws(HR=y)"]);
    assert_eq!(v.errors.len(), 1);
    assert_eq!(v.errors[0].reason, Reason::AmbiguousRules);
    assert!(
        v.errors[0].message.contains("add `aws(PR=x,HR=y)`"),
        "{}",
        v.errors[0].message
    );
    let (r, _) = compile(&["aws(PR=x)", "aws(HR=y)", "aws(PR=x,HR=y)->EU"]);
    assert_eq!(eval(&r, "aws", Some("x"), Some("y")), "aws,EU");
    assert_eq!(eval(&r, "aws", Some("x"), Some("z")), "aws");
    // Different plans never collide.
    compile(&["aws(PR=x)", "gcp(HR=y)"]);
}

#[test]
fn plans_must_exist_and_required_plans_be_covered() {
    let v = invalid(&["aws", "foo", "openstack"]);
    assert_eq!(
        v.errors
            .iter()
            .map(|d| (d.reason, d.index))
            .collect::<Vec<_>>(),
        [
            (Reason::UnknownPlan, Some(2)),
            (Reason::UnknownPlan, Some(3))
        ]
    );
    assert!(v.errors[1].message.contains("sap-converged-cloud"));
    let mut s = spec(&["aws(PR=cf-eu11)->EU"]);
    s.required_plans = Some(vec!["aws".into(), "gcp".into()]);
    let v = CompiledRules::from_spec(&s).unwrap_err();
    assert_eq!(v.errors.len(), 1);
    assert_eq!(
        (v.errors[0].reason, v.errors[0].index),
        (Reason::UncoveredPlan, None)
    );
    assert!(v.errors[0].message.contains("`gcp`"));
    // At least one rule covers a plan; no catch-all is required.
    s.required_plans = Some(vec!["aws".into()]);
    assert!(CompiledRules::from_spec(&s).is_ok());
}

#[test]
fn an_empty_rule_list_is_invalid() {
    assert_eq!(invalid(&[]).errors[0].reason, Reason::EmptyRules);
}

#[test]
fn most_specific_entry_wins_whatever_the_order() {
    let rules = [
        "gcp",
        "gcp(PR=cf-sa30)->PR",
        "gcp(HR=me-central2)->HR",
        "gcp(PR=cf-sa30,HR=me-central2)->PR,HR,S",
    ];
    let mut order = rules.to_vec();
    for _ in 0..rules.len() {
        order.rotate_left(1);
        let (r, _) = compile(&order);
        assert_eq!(
            eval(&r, "gcp", Some("cf-sa30"), Some("me-central2")),
            "gcp_cf-sa30_me-central2,S"
        );
        assert_eq!(eval(&r, "gcp", Some("cf-sa30"), Some("x")), "gcp_cf-sa30");
        assert_eq!(
            eval(&r, "gcp", Some("cf-eu30"), Some("me-central2")),
            "gcp_me-central2"
        );
        assert_eq!(eval(&r, "gcp", None, None), "gcp");
    }
    let (r, _) = compile(&["gcp(PR=cf-sa30)"]);
    assert_eq!(eval(&r, "gcp", Some("cf-eu30"), None), "!NoMatchingRule");
}

#[test]
fn suffixes_come_pr_then_hr_whatever_the_flag_order() {
    let (r, _) = compile(&["gcp->HR,PR"]);
    assert_eq!(
        eval(&r, "gcp", Some("cf-sa30"), Some("me-central2")),
        "gcp_cf-sa30_me-central2"
    );
    // Upstream yields `gcp_` for a missing region; here that is an error naming the entry.
    let req = Request {
        plan: "gcp",
        platform_region: None,
        cluster_region: Some("x"),
        provider: None,
        global_account: None,
    };
    let e = r.evaluate(&req).unwrap_err();
    assert_eq!(e.reason(), "InvalidConfig");
    assert!(e.to_string().contains("rule 1 `gcp->HR,PR`"), "{e}");
}

#[test]
fn selectors_follow_upstream() {
    let (r, _) = compile(&["aws(PR=cf-eu11)->EU", "aws", "trial->S"]);
    let o = r
        .evaluate(&Request {
            plan: "aws",
            platform_region: Some("cf-eu11"),
            ..Default::default()
        })
        .unwrap();
    let s = o.pool().selectors(r.label_keys(), "ga-1");
    assert_eq!(
        s.tenant.unwrap().to_string(),
        "hyperscalerType=aws,euAccess=true,shared!=true,!dirty,tenantName=ga-1"
    );
    assert_eq!(
        s.claim.unwrap().to_string(),
        "hyperscalerType=aws,euAccess=true,shared!=true,!dirty,!tenantName"
    );
    let o = r
        .evaluate(&Request {
            plan: "trial",
            provider: Some("azure"),
            ..Default::default()
        })
        .unwrap();
    let s = o.pool().selectors(r.label_keys(), "ga-1");
    assert!(s.tenant.is_none() && s.claim.is_none());
    assert_eq!(
        s.any.to_string(),
        "hyperscalerType=azure,!euAccess,shared=true"
    );
}

/// `cmd/broker/testdata/hap-rules.yaml` (19 entries at the commit we read) plus gdch = 20.
const TESTED_SET: [&str; 20] = [
    "aws",
    "build-runtime-aws",
    "aws(PR=cf-eu11) -> EU",
    "build-runtime-aws(PR=cf-eu11) -> EU",
    "azure",
    "build-runtime-azure",
    "azure(PR=cf-ch20) -> EU",
    "build-runtime-azure(PR=cf-ch20) -> EU",
    "gcp",
    "build-runtime-gcp",
    "gcp(PR=cf-sa30) -> PR",
    "build-runtime-gcp(PR=cf-sa30) -> PR",
    "trial -> S",
    "sap-converged-cloud -> HR,S",
    "azure_lite",
    "preview",
    "free",
    "alicloud",
    "build-runtime-alicloud",
    "gdch",
];

#[test]
fn tested_upstream_rule_set() {
    let (r, warnings) = compile(&TESTED_SET);
    assert!(warnings.is_empty());
    let cases = [
        ("aws", Some("cf-eu10"), None, "aws"),
        ("aws", Some("cf-eu11"), None, "aws,EU"),
        ("build-runtime-aws", Some("cf-eu11"), None, "aws,EU"),
        ("azure", Some("cf-ch20"), None, "azure,EU"),
        ("build-runtime-azure", Some("cf-eu20"), None, "azure"),
        ("gcp", Some("cf-sa30"), None, "gcp_cf-sa30"),
        ("build-runtime-gcp", Some("cf-sa30"), None, "gcp_cf-sa30"),
        ("gcp", Some("cf-eu30"), None, "gcp"),
        ("trial", Some("cf-eu10"), None, "aws,S"),
        (
            "sap-converged-cloud",
            Some("cf-eu20"),
            Some("eu-de-1"),
            "openstack_eu-de-1,S",
        ),
        ("azure_lite", Some("cf-eu20"), None, "azure"),
        ("preview", None, None, "aws"),
        ("free", None, None, "aws"),
        ("alicloud", None, None, "alicloud"),
        ("build-runtime-alicloud", None, None, "alicloud"),
        ("gdch", None, None, "gdch"),
        ("build-runtime-gdch", None, None, "!UnknownPlan"),
    ];
    for (plan, pr, hr, want) in cases {
        assert_eq!(eval(&r, plan, pr, hr), want, "{plan} {pr:?} {hr:?}");
    }
}

#[test]
fn helm_default_with_literal_star_warns_and_means_any_region() {
    let helm = [
        "aws",
        "aws(PR=cf-eu11)->EU",
        "azure",
        "azure(PR=cf-ch20)->EU",
        "gcp",
        "gcp(PR=cf-sa30)->PR",
        "trial->S",
        "sap-converged-cloud(HR=*)->S",
        "azure_lite",
        "preview",
        "free",
    ];
    let (r, warnings) = compile(&helm);
    assert_eq!(warnings.len(), 1);
    assert_eq!((warnings[0].index, warnings[0].column), (Some(8), Some(24)));
    assert!(
        warnings[0].message.contains("literal region `*`"),
        "{}",
        warnings[0].message
    );
    // Upstream: no match for any real region. Here: the shared openstack pool, without suffix.
    assert_eq!(
        eval(&r, "sap-converged-cloud", Some("cf-eu20"), Some("eu-de-1")),
        "openstack,S"
    );
    assert_eq!(
        eval(&r, "sap-converged-cloud", Some("cf-eu20"), None),
        "!NoMatchingRule"
    );
}
