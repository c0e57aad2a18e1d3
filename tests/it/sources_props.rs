//! Property tests of request sources: the selector semantics of seed 003_4da11fbf9ab9a250.txt
//! stated as laws (identity overrides, labels AND purposes, `matchLabels` = `In [v]`, `NotIn` =
//! not `In`, purposes are sets), derivation that names exactly the fields it cannot fill, claim
//! names that are valid and never shared by two objects, and admission patches that always apply
//! and write exactly the decided binding.

use std::collections::{BTreeMap, BTreeSet};

use hap_operator::api::{
    BindingKind, HapConfigSpec, LabelOperator, LabelRequirement, ObjectIdentity, PurposeOperator,
    PurposeRequirement, RequestSource, SourceKind,
};
use hap_operator::sources::CompiledSources;
use hap_operator::sources::admission::{
    ClaimState, Operation, Plan, Request, Serving, Verdict, finish, plan,
};
use hap_operator::sources::naming::claim_name;
use hap_operator::sources::selector::{ObjectFacts, SourceSelector};
use proptest::prelude::*;
use serde_json::{Value, json};

const KEYS: [&str; 3] = ["a", "b", "c"];
const VALUES: [&str; 3] = ["x", "y", "z"];
const PURPOSES: [&str; 4] = ["mcp", "workload", "platform", "onboarding"];

fn labels() -> impl Strategy<Value = BTreeMap<String, String>> {
    prop::collection::btree_map(
        prop::sample::select(KEYS.to_vec()).prop_map(String::from),
        prop::sample::select(VALUES.to_vec()).prop_map(String::from),
        0..3,
    )
}

fn purposes() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(
        prop::sample::select(PURPOSES.to_vec()).prop_map(String::from),
        0..5,
    )
}

fn facts() -> impl Strategy<Value = ObjectFacts> {
    (
        prop::sample::select(vec!["n1", "n2"]),
        prop::sample::select(vec!["o1", "o2", "o3"]),
        labels(),
        purposes(),
    )
        .prop_map(|(ns, name, labels, purposes)| ObjectFacts {
            namespace: ns.into(),
            name: Some(name.into()),
            labels,
            purposes,
            tenancy: Some("Exclusive".into()),
        })
}

fn values() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(
        prop::sample::select(VALUES.to_vec()).prop_map(String::from),
        1..3,
    )
}

fn label_requirement() -> impl Strategy<Value = LabelRequirement> {
    let key = prop::sample::select(KEYS.to_vec()).prop_map(String::from);
    (key, 0..4usize, values()).prop_map(|(key, op, values)| {
        let operator = [
            LabelOperator::In,
            LabelOperator::NotIn,
            LabelOperator::Exists,
            LabelOperator::DoesNotExist,
        ][op];
        let values = matches!(operator, LabelOperator::In | LabelOperator::NotIn).then_some(values);
        LabelRequirement {
            key,
            operator,
            values,
        }
    })
}

fn purpose_requirement() -> impl Strategy<Value = PurposeRequirement> {
    (
        0..4usize,
        prop::collection::vec(
            prop::sample::select(PURPOSES.to_vec()).prop_map(String::from),
            1..4,
        ),
    )
        .prop_map(|(op, values)| PurposeRequirement {
            operator: [
                PurposeOperator::ContainsAll,
                PurposeOperator::ContainsAny,
                PurposeOperator::ContainsNone,
                PurposeOperator::Equals,
            ][op],
            values: Some(values),
        })
}

fn source() -> RequestSource {
    RequestSource {
        id: "s".into(),
        kind: SourceKind::Cluster,
        match_identities: None,
        match_labels: None,
        match_expressions: None,
        match_purposes: None,
        serve_shared_tenancy: None,
        request: None,
    }
}

fn selector(
    ml: Option<BTreeMap<String, String>>,
    me: Vec<LabelRequirement>,
    mp: Vec<PurposeRequirement>,
) -> SourceSelector {
    SourceSelector::from_source(&RequestSource {
        match_labels: ml,
        match_expressions: (!me.is_empty()).then_some(me),
        match_purposes: (!mp.is_empty()).then_some(mp),
        ..source()
    })
}

proptest! {
    #[test]
    fn no_selector_matches_every_object(f in facts()) {
        prop_assert!(selector(None, vec![], vec![]).matches(&f));
    }

    #[test]
    fn identities_decide_alone(
        f in facts(),
        ids in prop::collection::vec((prop::sample::select(vec!["n1", "n2"]), prop::sample::select(vec!["o1", "o2", "o3"])), 0..3),
        me in prop::collection::vec(label_requirement(), 0..3),
        mp in prop::collection::vec(purpose_requirement(), 0..3),
    ) {
        let mut s = selector(None, me, mp);
        s.identities = Some(ids.iter().map(|(n, o)| (n.to_string(), o.to_string())).collect());
        let src = RequestSource {
            match_identities: Some(ids.iter().map(|(n, o)| ObjectIdentity { namespace: n.to_string(), name: o.to_string() }).collect()),
            ..source()
        };
        let member = ids.iter().any(|(n, o)| Some(o.to_string()) == f.name && *n == f.namespace);
        prop_assert_eq!(s.matches(&f), member);
        prop_assert_eq!(SourceSelector::from_source(&src).matches(&f), member);
    }

    #[test]
    fn requirements_are_anded(
        f in facts(),
        a in prop::collection::vec(label_requirement(), 0..3),
        b in prop::collection::vec(label_requirement(), 0..3),
        pa in prop::collection::vec(purpose_requirement(), 0..2),
        pb in prop::collection::vec(purpose_requirement(), 0..2),
    ) {
        let both = selector(None, [a.clone(), b.clone()].concat(), [pa.clone(), pb.clone()].concat());
        let each = selector(None, a, pa).matches(&f) && selector(None, b, pb).matches(&f);
        prop_assert_eq!(both.matches(&f), each);
    }

    #[test]
    fn match_labels_are_in_requirements(f in facts(), ml in labels()) {
        let as_in: Vec<LabelRequirement> = ml.iter().map(|(k, v)| LabelRequirement {
            key: k.clone(), operator: LabelOperator::In, values: Some(vec![v.clone()]),
        }).collect();
        let by_labels = selector(Some(ml.clone()), vec![], vec![]).matches(&f);
        prop_assert_eq!(by_labels, selector(None, as_in, vec![]).matches(&f));
        prop_assert_eq!(by_labels, ml.iter().all(|(k, v)| f.labels.get(k) == Some(v)));
    }

    #[test]
    fn negative_operators_are_complements(f in facts(), key in prop::sample::select(KEYS.to_vec()), vs in values()) {
        let req = |op, values: Option<Vec<String>>| selector(None, vec![LabelRequirement { key: key.to_string(), operator: op, values }], vec![]);
        prop_assert_eq!(req(LabelOperator::NotIn, Some(vs.clone())).matches(&f), !req(LabelOperator::In, Some(vs)).matches(&f));
        prop_assert_eq!(req(LabelOperator::DoesNotExist, None).matches(&f), !req(LabelOperator::Exists, None).matches(&f));
    }

    #[test]
    fn purposes_are_sets(f in facts(), r in purpose_requirement(), seed in any::<u64>()) {
        let mut shuffled = f.clone();
        shuffled.purposes.reverse();
        if let Some(p) = f.purposes.first() {
            shuffled.purposes.push(p.clone());
        }
        let mut r2 = r.clone();
        if let Some(vs) = r2.values.as_mut() {
            let by = (seed as usize) % vs.len().max(1);
            vs.rotate_left(by);
            let first = vs[0].clone();
            vs.push(first);
        }
        let s = selector(None, vec![], vec![r.clone()]);
        prop_assert_eq!(s.matches(&f), s.matches(&shuffled));
        prop_assert_eq!(s.matches(&f), selector(None, vec![], vec![r2]).matches(&f));
        let set: BTreeSet<&String> = f.purposes.iter().collect();
        let vals: BTreeSet<&String> = r.values.iter().flatten().collect();
        let expected = match r.operator {
            PurposeOperator::ContainsAll => vals.is_subset(&set),
            PurposeOperator::ContainsAny => !vals.is_disjoint(&set),
            PurposeOperator::ContainsNone => vals.is_disjoint(&set),
            PurposeOperator::Equals => vals == set,
        };
        prop_assert_eq!(s.matches(&f), expected);
    }

    #[test]
    fn claim_names_are_valid_and_distinct(
        objs in prop::collection::btree_set((0..3usize, "[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?", prop::collection::vec("[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", 1..6).prop_map(|l| l.join(".")).prop_filter("a name has at most 253 characters", |n| n.len() <= 253)), 1..20)
    ) {
        let kinds = [SourceKind::Shoot, SourceKind::Cluster, SourceKind::Runtime];
        let mut seen = BTreeMap::new();
        for (k, ns, name) in &objs {
            let n = claim_name(kinds[*k], ns, name);
            prop_assert!(n.len() <= 253, "{} too long", n);
            prop_assert!(n.split('.').all(|l| !l.is_empty() && !l.starts_with('-') && !l.ends_with('-')), "{}", n);
            prop_assert!(n.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.'), "{}", n);
            prop_assert!(n.starts_with(|c: char| c.is_ascii_alphanumeric()) && n.ends_with(|c: char| c.is_ascii_alphanumeric()), "{}", n);
            if let Some(prev) = seen.insert(n.clone(), (k, ns, name)) {
                prop_assert!(false, "{:?} and {:?} share claim {}", prev, (k, ns, name), n);
            }
        }
    }
}

const SOURCES: &str = r#"
- id: shoots
  kind: Shoot
  matchLabels: {opt: "in"}
  request:
    platformRegion: {label: pr, optional: true}
"#;

fn compiled() -> CompiledSources {
    let list: Vec<RequestSource> = serde_saphyr::from_str(SOURCES).expect("yaml");
    CompiledSources::from_spec(&HapConfigSpec {
        binding_namespace: "garden-p".into(),
        rules: Some(vec!["aws".into()]),
        request_sources: Some(list),
        ..Default::default()
    })
    .expect("valid")
}

fn label_value() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        2 => Just(None),
        1 => Just(Some(String::new())),
        1 => Just(Some("Not Valid".to_string())),
        4 => "[a-z][a-z0-9-]{0,10}[a-z0-9]".prop_map(Some),
    ]
}

proptest! {
    /// A request is served exactly when every required label is a valid value; otherwise the
    /// denial names each missing or invalid label, and no other. A served request's patch
    /// applies to the object and sets exactly the decided binding.
    #[test]
    fn shoots_are_denied_for_exactly_their_bad_fields_or_patched_with_the_binding(
        ga in label_value(), plan_label in label_value(), pr in label_value(),
        has_annotations in any::<bool>(), binding in "[a-z][a-z0-9-]{0,20}[a-z0-9]",
    ) {
        let sources = compiled();
        let mut labels = serde_json::Map::from_iter([("opt".to_string(), json!("in"))]);
        for (k, v) in [("accountpool.io/global-account", &ga), ("accountpool.io/plan", &plan_label), ("pr", &pr)] {
            if let Some(v) = v {
                labels.insert(k.into(), json!(v));
            }
        }
        let mut obj = json!({
            "metadata": {"name": "s", "namespace": "garden-p", "labels": labels},
            "spec": {"region": "eu-1", "provider": {"type": "aws"}},
        });
        if has_annotations {
            obj["metadata"]["annotations"] = json!({"k": "v"});
        }
        let serving = Serving {
            sources: &sources,
            binding_kind: BindingKind::CredentialsBinding,
            binding_namespace: "garden-p",
            claim_namespace: "hap",
            random: "r",
        };
        let req = Request { operation: Operation::Create, dry_run: false, kind: SourceKind::Shoot, namespace: "garden-p", object: &obj, old_object: None };
        let valid = |v: &Option<String>| v.as_ref().is_some_and(|v| !v.is_empty() && v != "Not Valid");
        let bad: Vec<&str> = [
            (!valid(&ga)).then_some("accountpool.io/global-account"),
            (!valid(&plan_label)).then_some("accountpool.io/plan"),
            (pr.as_deref() == Some("Not Valid")).then_some("pr"),
        ].into_iter().flatten().collect();
        match plan(&req, &serving) {
            Plan::Deny(msg) => {
                prop_assert!(!bad.is_empty(), "denied without a bad field: {}", msg);
                for k in ["accountpool.io/global-account", "accountpool.io/plan", "pr"] {
                    let named = msg.contains(&format!("metadata.labels['{k}']"));
                    prop_assert_eq!(named, bad.contains(&k), "{}: {}", k, msg);
                }
            }
            Plan::Claim(p) => {
                prop_assert!(bad.is_empty());
                let Verdict::Allow { ops, .. } = finish(&p, &ClaimState::Bound { binding: binding.clone() }) else {
                    return Err(TestCaseError::fail("a bound claim is allowed"));
                };
                let patch: json_patch::Patch = serde_json::from_value(Value::Array(ops)).expect("patch");
                let mut out = obj.clone();
                json_patch::patch(&mut out, &patch).expect("applies");
                prop_assert_eq!(&out["spec"]["credentialsBindingName"], &json!(binding));
                prop_assert_eq!(&out["metadata"]["labels"], &obj["metadata"]["labels"]);
                if has_annotations {
                    prop_assert_eq!(&out["metadata"]["annotations"]["k"], "v");
                }
            }
            other => prop_assert!(false, "unexpected {:?}", other),
        }
    }
}
