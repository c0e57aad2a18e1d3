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
            global_accounts: Some(vec!["GA-A".into()]),
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
        "GA-1".to_string(),
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
