use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

fn rule(name: &str) -> TenantRule {
    TenantRule {
        name: name.into(),
        ..Default::default()
    }
}

fn claimer<'a>(ns: &'a str, labels: Option<&'a BTreeMap<String, String>>) -> Requester<'a> {
    Requester {
        kind: RequesterKind::AccountClaim,
        namespace: ns,
        namespace_labels: labels,
        user: None,
        admitted_rule: None,
    }
}

fn ask(ga: &str) -> Ask<'_> {
    Ask {
        global_account: ga,
        adopt_binding: false,
    }
}

#[test]
fn without_a_policy_everything_is_allowed() {
    let d = decide(None, &claimer("any", None), &ask("ga"));
    assert_eq!(d, Decision::Allowed { rule: None });
}

#[test]
fn an_empty_policy_allows_nothing_and_says_so() {
    let p = TenantPolicy::default();
    let Decision::Denied { message } = decide(Some(&p), &claimer("ns", None), &ask("ga")) else {
        panic!("allowed")
    };
    assert!(
        message.contains("no rule of spec.tenants covers AccountClaim"),
        "{message}"
    );
}

#[test]
fn namespace_and_global_account_lists_are_conditions_and_the_refusal_names_the_rule() {
    let p = TenantPolicy {
        rules: vec![TenantRule {
            namespaces: Some(vec!["team-a".into()]),
            global_accounts: Some(vec!["ga-a".into()]),
            ..rule("team-a")
        }],
    };
    assert!(decide(Some(&p), &claimer("team-a", None), &ask("ga-a")).is_allowed());
    let Decision::Denied { message } = decide(Some(&p), &claimer("team-b", None), &ask("ga-a"))
    else {
        panic!("allowed")
    };
    assert!(
        message.contains("rule `team-a`: namespace not in [team-a]"),
        "{message}"
    );
    assert!(!decide(Some(&p), &claimer("team-a", None), &ask("ga-b")).is_allowed());
}

#[test]
fn the_namespace_label_binds_a_namespace_to_its_own_global_account() {
    let p = TenantPolicy {
        rules: vec![TenantRule {
            global_account_from_namespace_label: Some("accountpool.io/global-account".into()),
            ..rule("own")
        }],
    };
    let labels = BTreeMap::from([(
        "accountpool.io/global-account".to_string(),
        "ga-1".to_string(),
    )]);
    assert!(decide(Some(&p), &claimer("x", Some(&labels)), &ask("ga-1")).is_allowed());
    assert!(!decide(Some(&p), &claimer("x", Some(&labels)), &ask("ga-2")).is_allowed());
    assert!(!decide(Some(&p), &claimer("x", None), &ask("ga-1")).is_allowed());
    assert!(needs_namespace_labels(Some(&p)));
    assert!(!needs_namespace_labels(Some(&TenantPolicy::default())));
}

#[test]
fn adopting_a_binding_needs_a_rule_that_allows_it() {
    let mut p = TenantPolicy {
        rules: vec![rule("all")],
    };
    let adopt = Ask {
        global_account: "ga",
        adopt_binding: true,
    };
    let Decision::Denied { message } = decide(Some(&p), &claimer("ns", None), &adopt) else {
        panic!("allowed")
    };
    assert!(message.contains("adoptBinding"), "{message}");
    p.rules[0].adopt_binding = Some(true);
    assert!(decide(Some(&p), &claimer("ns", None), &adopt).is_allowed());
}

#[test]
fn users_and_groups_count_only_at_admission() {
    let p = TenantPolicy {
        rules: vec![TenantRule {
            kinds: Some(vec![RequesterKind::Runtime]),
            users: Some(vec!["system:serviceaccount:kcp-system:keb".into()]),
            groups: Some(vec!["keb-admins".into()]),
            ..rule("keb")
        }],
    };
    let keb = User {
        username: "system:serviceaccount:kcp-system:keb".into(),
        groups: vec![],
    };
    let admin = User {
        username: "alice".into(),
        groups: vec!["keb-admins".into()],
    };
    let other = User {
        username: "mallory".into(),
        groups: vec!["system:authenticated".into()],
    };
    let runtime = |user| Requester {
        kind: RequesterKind::Runtime,
        namespace: "kcp-system",
        namespace_labels: None,
        user,
        admitted_rule: None,
    };
    assert!(decide(Some(&p), &runtime(Some(&keb)), &ask("ga")).is_allowed());
    assert!(decide(Some(&p), &runtime(Some(&admin)), &ask("ga")).is_allowed());
    assert!(!decide(Some(&p), &runtime(Some(&other)), &ask("ga")).is_allowed());
    assert!(!decide(Some(&p), &runtime(None), &ask("ga")).is_allowed());
    // The rule covers Runtimes only: a Shoot is not covered at all.
    let shoot = Requester {
        kind: RequesterKind::Shoot,
        ..runtime(Some(&keb))
    };
    assert!(!decide(Some(&p), &shoot, &ask("ga")).is_allowed());
}

/// The operator treats `GA-1` and `ga-1` as two tenants (tenantName is compared exactly), so a
/// rule for one must not allow the other.
#[test]
fn global_accounts_match_exactly_as_tenant_names_do() {
    let p = TenantPolicy {
        rules: vec![TenantRule {
            global_accounts: Some(vec!["ga-1".into()]),
            ..rule("listed")
        }],
    };
    assert!(decide(Some(&p), &claimer("ns", None), &ask("ga-1")).is_allowed());
    let Decision::Denied { message } = decide(Some(&p), &claimer("ns", None), &ask("GA-1")) else {
        panic!("a rule for ga-1 allowed GA-1")
    };
    assert!(message.contains("global account not listed"), "{message}");
    let by_label = TenantPolicy {
        rules: vec![TenantRule {
            global_account_from_namespace_label: Some("ga".into()),
            ..rule("own")
        }],
    };
    let labels = BTreeMap::from([("ga".to_string(), "ga-1".to_string())]);
    assert!(decide(Some(&by_label), &claimer("ns", Some(&labels)), &ask("ga-1")).is_allowed());
    assert!(!decide(Some(&by_label), &claimer("ns", Some(&labels)), &ask("GA-1")).is_allowed());
}

/// A claim the source pass creates knows no user: only the rule the webhook recorded for its
/// request counts its user conditions as held, and that rule's other conditions still hold or
/// not; without a record only rules without users or groups can allow it.
#[test]
fn a_recorded_admission_stands_for_the_user_of_that_rule_only() {
    let p = TenantPolicy {
        rules: vec![
            TenantRule {
                kinds: Some(vec![RequesterKind::Cluster]),
                namespaces: Some(vec!["platform".into()]),
                groups: Some(vec!["openmcp".into()]),
                ..rule("openmcp")
            },
            TenantRule {
                kinds: Some(vec![RequesterKind::Cluster]),
                users: Some(vec!["alice".into()]),
                ..rule("alice")
            },
        ],
    };
    let cluster = |ns, admitted_rule| Requester {
        kind: RequesterKind::Cluster,
        namespace: ns,
        namespace_labels: None,
        user: None,
        admitted_rule,
    };
    assert!(decide(Some(&p), &cluster("platform", Some("openmcp")), &ask("ga")).is_allowed());
    let Decision::Denied { message } = decide(Some(&p), &cluster("platform", None), &ask("ga"))
    else {
        panic!("allowed without a record")
    };
    assert!(
        message.contains("rule `openmcp`: the requesting user is known at admission only"),
        "{message}"
    );
    // The record names a rule whose namespace condition does not hold here.
    let Decision::Denied { message } =
        decide(Some(&p), &cluster("elsewhere", Some("openmcp")), &ask("ga"))
    else {
        panic!("the recorded rule's namespace condition was skipped")
    };
    assert!(message.contains("namespace not in [platform]"), "{message}");
    // A record of another rule is not a pass for this one.
    let Decision::Denied { message } =
        decide(Some(&p), &cluster("platform", Some("gone")), &ask("ga"))
    else {
        panic!("a record of a rule that no longer exists allowed")
    };
    assert!(message.contains("admitted under rule `gone`"), "{message}");
    assert!(decide(Some(&p), &cluster("elsewhere", Some("alice")), &ask("ga")).is_allowed());
}

proptest! {
    /// Adding a rule never takes an allowance away, and a denial always names every rule that
    /// covers the requester's kind.
    #[test]
    fn rules_only_add_allowances(
        ns in "[a-c]", ga in "[a-c]", adopt in any::<bool>(),
        rules in proptest::collection::vec(("[a-c]", "[a-c]", any::<bool>(), any::<bool>()), 0..4),
        extra in ("[a-c]", "[a-c]"),
    ) {
        let mk = |i: usize, (n, g, k, a): &(String, String, bool, bool)| TenantRule {
            name: format!("r{i}"),
            kinds: k.then(|| vec![RequesterKind::AccountClaim]),
            namespaces: Some(vec![n.clone()]),
            global_accounts: Some(vec![g.clone()]),
            adopt_binding: Some(*a),
            ..Default::default()
        };
        let p = TenantPolicy { rules: rules.iter().enumerate().map(|(i, r)| mk(i, r)).collect() };
        let who = claimer(&ns, None);
        let a = Ask { global_account: &ga, adopt_binding: adopt };
        let before = decide(Some(&p), &who, &a);
        let mut more = p.clone();
        more.rules.push(mk(9, &(extra.0, extra.1, false, true)));
        if before.is_allowed() {
            prop_assert!(decide(Some(&more), &who, &a).is_allowed());
        } else if let Decision::Denied { message } = before {
            for r in &p.rules {
                prop_assert!(message.contains(&format!("rule `{}`", r.name)), "{}", message);
            }
        }
    }
}
