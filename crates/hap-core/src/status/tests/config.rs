//! HapConfig status transitions.

use super::*;

fn figures(t: &str, free: i64, claimed: i64) -> PoolFigures {
    PoolFigures {
        hyperscaler_type: t.into(),
        free,
        claimed,
        total: free + claimed,
        ..Default::default()
    }
}

fn rule(index: i64, entry: &str, pools: Vec<PoolFigures>) -> RuleStatus {
    RuleStatus {
        index,
        entry: entry.into(),
        hyperscaler_type: "aws".into(),
        eu_access: "false".into(),
        shared: false,
        pools,
        ..Default::default()
    }
}

fn valid_inputs(generation: i64) -> ConfigInputs {
    ConfigInputs {
        generation: Some(generation),
        active_generation: Some(generation),
        // Two entries reach one pool: its figures count once.
        rules: vec![
            rule(1, "aws", vec![figures("aws", 3, 2)]),
            rule(
                2,
                "aws(PR=*)",
                vec![figures("aws", 3, 2), figures("gcp", 1, 0)],
            ),
        ],
        orphans: vec![OrphanStatus {
            binding: "b".into(),
            tenant: "t".into(),
            hyperscaler_type: "aws".into(),
        }],
        last_refresh_time: Some(at(5)),
        ..Default::default()
    }
}

#[test]
fn a_valid_config_in_force_is_ready() {
    let s = desired_config_status(None, &valid_inputs(3), &at(100));
    assert_eq!(sr(&s.conditions, types::READY), is("True", reasons::READY));
    assert_eq!(
        sr(&s.conditions, types::RULES_VALID),
        is("True", reasons::VALID)
    );
    assert_eq!(
        sr(&s.conditions, types::POOLS_AVAILABLE),
        is("True", reasons::POOLS_PRESENT)
    );
    assert_eq!(sr(&s.conditions, types::STALLED), None);
    assert_eq!(sr(&s.conditions, types::RECONCILING), None);
    assert_eq!(
        (s.observed_generation, s.active_generation, s.rule_count),
        (Some(3), Some(3), Some(2))
    );
    assert_eq!((s.free_bindings, s.claimed_bindings), (Some(4), Some(2)));
    assert_eq!(
        (s.orphans.len(), s.rules.len(), s.last_refresh_time),
        (1, 2, Some(at(5)))
    );
    assert!(
        s.conditions
            .iter()
            .all(|c| c.observed_generation == Some(3))
    );
}

#[test]
fn warnings_are_reported_in_rules_valid() {
    let input = ConfigInputs {
        warnings: vec!["`HR=*` differs from upstream".into()],
        ..valid_inputs(1)
    };
    let s = desired_config_status(None, &input, &at(1));
    let c = cond(&s.conditions, types::RULES_VALID).unwrap();
    assert_eq!(c.status, "True");
    assert!(
        c.message
            .contains("1 warning(s): `HR=*` differs from upstream"),
        "{}",
        c.message
    );
}

#[test]
fn missing_pools_are_listed_per_entry_without_unreadying_the_config() {
    let missing = vec![
        MissingPool {
            index: 2,
            entry: "aws(PR=cf-eu11)".into(),
            selector: "hyperscalerType=aws_cf-eu11".into(),
        },
        MissingPool {
            index: 4,
            entry: "gcp".into(),
            selector: "hyperscalerType=gcp".into(),
        },
    ];
    let s = desired_config_status(
        None,
        &ConfigInputs {
            missing_pools: missing,
            ..valid_inputs(1)
        },
        &at(1),
    );
    let c = cond(&s.conditions, types::POOLS_AVAILABLE).unwrap();
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", reasons::MISSING_POOL)
    );
    assert!(
        c.message.contains(
            "entry 2 `aws(PR=cf-eu11)`: no binding matches `hyperscalerType=aws_cf-eu11`"
        ),
        "{}",
        c.message
    );
    assert!(c.message.contains("entry 4 `gcp`"), "{}", c.message);
    let ready = cond(&s.conditions, types::READY).unwrap();
    assert_eq!(ready.status, "True");
    assert!(
        ready.message.contains("2 entries without a pool"),
        "{}",
        ready.message
    );
}

#[test]
fn an_invalid_generation_stalls_while_the_last_valid_one_serves() {
    let before = desired_config_status(None, &valid_inputs(3), &at(100));
    let input = ConfigInputs {
        generation: Some(4),
        errors: vec![
            "entry 1 `aws(`: expected `)`".into(),
            "entry 2 `foo`: unknown plan".into(),
        ],
        ..valid_inputs(3)
    };
    let s = desired_config_status(Some(&before), &input, &at(200));
    let stalled = cond(&s.conditions, types::STALLED).unwrap();
    assert_eq!(
        (stalled.status.as_str(), stalled.reason.as_str()),
        ("True", reasons::CONFIG_INVALID)
    );
    for text in [
        "generation 4 is invalid",
        "expected `)`",
        "unknown plan",
        "generation 3 stays in force",
    ] {
        assert!(
            stalled.message.contains(text),
            "{text}: {}",
            stalled.message
        );
    }
    assert_eq!(
        sr(&s.conditions, types::READY),
        is("False", reasons::CONFIG_INVALID)
    );
    assert_eq!(
        sr(&s.conditions, types::RULES_VALID),
        is("False", reasons::INVALID)
    );
    assert_eq!(
        sr(&s.conditions, types::POOLS_AVAILABLE),
        is("True", reasons::POOLS_PRESENT)
    );
    assert_eq!(
        (s.observed_generation, s.active_generation, s.rule_count),
        (Some(4), Some(3), Some(2))
    );
    // Ready and RulesValid changed status, PoolsAvailable did not.
    assert_eq!(
        cond(&s.conditions, types::READY)
            .unwrap()
            .last_transition_time,
        at(200)
    );
    assert_eq!(
        cond(&s.conditions, types::POOLS_AVAILABLE)
            .unwrap()
            .last_transition_time,
        at(100)
    );

    // Fixed: Stalled goes away, Ready comes back.
    let fixed = desired_config_status(Some(&s), &valid_inputs(5), &at(300));
    assert_eq!(sr(&fixed.conditions, types::STALLED), None);
    assert_eq!(
        sr(&fixed.conditions, types::READY),
        is("True", reasons::READY)
    );
    assert_eq!(
        cond(&fixed.conditions, types::RULES_VALID)
            .unwrap()
            .last_transition_time,
        at(300)
    );
}

#[test]
fn an_invalid_first_generation_has_nothing_in_force() {
    let input = ConfigInputs {
        generation: Some(1),
        errors: vec!["no rules".into()],
        ..Default::default()
    };
    let s = desired_config_status(None, &input, &at(1));
    assert_eq!(
        sr(&s.conditions, types::STALLED),
        is("True", reasons::CONFIG_INVALID)
    );
    assert!(
        cond(&s.conditions, types::STALLED)
            .unwrap()
            .message
            .contains("no rules are in force")
    );
    assert_eq!(
        sr(&s.conditions, types::POOLS_AVAILABLE),
        is("Unknown", reasons::CONFIG_INVALID)
    );
    assert_eq!(
        sr(&s.conditions, types::READY),
        is("False", reasons::CONFIG_INVALID)
    );
    assert_eq!(
        (s.active_generation, s.rule_count, s.free_bindings),
        (None, None, None)
    );
    assert!(s.rules.is_empty());
}

#[test]
fn progressing_reports_reconciling_and_keeps_the_old_observed_generation() {
    let done = desired_config_status(None, &valid_inputs(1), &at(10));
    let input = ConfigInputs {
        generation: Some(2),
        progressing: Some("waiting for the binding cache".into()),
        ..valid_inputs(2)
    };
    let s = desired_config_status(Some(&done), &input, &at(20));
    assert_eq!(
        sr(&s.conditions, types::RECONCILING),
        is("True", reasons::PROGRESSING)
    );
    assert_eq!(
        sr(&s.conditions, types::READY),
        is("Unknown", reasons::PROGRESSING)
    );
    assert_eq!(
        sr(&s.conditions, types::POOLS_AVAILABLE),
        is("Unknown", reasons::PROGRESSING)
    );
    assert_eq!(s.observed_generation, Some(1));
    let after = desired_config_status(Some(&s), &valid_inputs(2), &at(30));
    assert_eq!(sr(&after.conditions, types::RECONCILING), None);
    assert_eq!(after.observed_generation, Some(2));
    assert_eq!(
        cond(&after.conditions, types::READY)
            .unwrap()
            .last_transition_time,
        at(30)
    );
    // Valid rules the operator has not loaded yet count as progressing too.
    let unloaded = ConfigInputs {
        active_generation: None,
        ..valid_inputs(7)
    };
    let s = desired_config_status(None, &unloaded, &at(40));
    assert_eq!(
        sr(&s.conditions, types::RECONCILING),
        is("True", reasons::PROGRESSING)
    );
    assert_eq!(
        sr(&s.conditions, types::READY),
        is("Unknown", reasons::PROGRESSING)
    );
}

#[test]
fn an_invalid_config_stalls_even_while_progressing() {
    let input = ConfigInputs {
        errors: vec!["bad".into()],
        progressing: Some("starting".into()),
        ..valid_inputs(1)
    };
    let s = desired_config_status(None, &input, &at(1));
    assert_eq!(
        sr(&s.conditions, types::STALLED),
        is("True", reasons::CONFIG_INVALID)
    );
    assert_eq!(sr(&s.conditions, types::RECONCILING), None);
}

#[test]
fn a_config_that_is_not_in_force_is_ignored() {
    let was_active = desired_config_status(None, &valid_inputs(1), &at(1));
    let input = ConfigInputs {
        ignored_in_favour_of: Some("default".into()),
        ..valid_inputs(2)
    };
    let s = desired_config_status(Some(&was_active), &input, &at(2));
    let ready = cond(&s.conditions, types::READY).unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", reasons::IGNORED)
    );
    assert!(
        ready
            .message
            .contains("HapConfig default is the one in force"),
        "{}",
        ready.message
    );
    assert_eq!(
        sr(&s.conditions, types::RULES_VALID),
        is("True", reasons::VALID)
    );
    // Stalled, so that kstatus reads Failed rather than InProgress forever.
    assert_eq!(
        sr(&s.conditions, types::STALLED),
        is("True", reasons::IGNORED)
    );
    for t in [types::POOLS_AVAILABLE, types::RECONCILING] {
        assert_eq!(sr(&s.conditions, t), None, "{t}");
    }
    assert_eq!(
        (s.observed_generation, s.active_generation),
        (Some(2), None)
    );
    assert!(s.rules.is_empty() && s.orphans.is_empty() && s.active_spec.is_none());
}

#[test]
fn recomputing_the_same_config_status_later_is_not_a_change() {
    let a = desired_config_status(None, &valid_inputs(1), &at(1));
    let b = desired_config_status(Some(&a), &valid_inputs(1), &at(99));
    assert!(!config_status_changed(Some(&a), &b));
    assert!(config_status_changed(None, &b));
    let mut reordered = b.clone();
    reordered.conditions.reverse();
    reordered.conditions[0].last_transition_time = at(12345);
    assert!(!config_status_changed(Some(&a), &reordered));
    let other = desired_config_status(
        Some(&a),
        &ConfigInputs {
            orphans: vec![],
            ..valid_inputs(1)
        },
        &at(99),
    );
    assert!(config_status_changed(Some(&a), &other));
    let refreshed = desired_config_status(
        Some(&a),
        &ConfigInputs {
            last_refresh_time: Some(at(50)),
            ..valid_inputs(1)
        },
        &at(99),
    );
    assert!(config_status_changed(Some(&a), &refreshed));
}

#[test]
fn refused_binding_writes_make_a_valid_config_unready_and_stalled() {
    let mut input = valid_inputs(3);
    input.refused_writes.insert(
        "aws-1".into(),
        "cannot claim binding garden-kyma/aws-1: the garden refused the write: no".into(),
    );
    let s = desired_config_status(None, &input, &at(100));
    assert_eq!(
        sr(&s.conditions, types::READY),
        is("False", reasons::FORBIDDEN)
    );
    assert_eq!(
        sr(&s.conditions, types::STALLED),
        is("True", reasons::FORBIDDEN)
    );
    let msg = &cond(&s.conditions, types::READY).unwrap().message;
    assert!(
        msg.contains("1 binding write(s) refused") && msg.contains("binding aws-1"),
        "{msg}"
    );
    // The next write that goes through clears it.
    let again = desired_config_status(Some(&s), &valid_inputs(3), &at(101));
    assert_eq!(
        sr(&again.conditions, types::READY),
        is("True", reasons::READY)
    );
    assert_eq!(sr(&again.conditions, types::STALLED), None);
}

#[test]
fn bindings_in_use_are_reported_and_an_event_is_due_only_when_the_set_changes() {
    let used = |names: &[&str]| crate::api::BindingsInUse {
        hyperscaler_type: "aws".into(),
        eu_access: false,
        reason: "InUseWithoutTenant".into(),
        count: i64::try_from(names.len()).unwrap_or_default() + 2,
        bindings: names.iter().map(|n| n.to_string()).collect(),
    };
    let mut input = valid_inputs(3);
    input.bindings_in_use = vec![used(&["f"])];
    let s = desired_config_status(None, &input, &at(100));
    assert_eq!(s.bindings_in_use, [used(&["f"])]);
    let (warning, reason, note) = bindings_in_use_event(None, &s).expect("a new set");
    assert!(warning && reason == "BindingsInUse", "{reason}");
    assert!(
        note.contains("InUseWithoutTenant in pool hyperscalerType=aws: f and 2 more"),
        "{note}"
    );
    // The same set again (a reconcile a second later): no event, no status change.
    let again = desired_config_status(Some(&s), &input, &at(101));
    assert_eq!(bindings_in_use_event(Some(&s), &again), None);
    assert!(!crate::status::config_status_changed(Some(&s), &again));
    // Another binding joins: an event again.
    input.bindings_in_use = vec![used(&["f", "g"])];
    let more = desired_config_status(Some(&again), &input, &at(102));
    assert!(bindings_in_use_event(Some(&again), &more).is_some());
    // All resolved: one Normal event.
    input.bindings_in_use.clear();
    let none = desired_config_status(Some(&more), &input, &at(103));
    assert_eq!(
        bindings_in_use_event(Some(&more), &none).map(|(w, r, _)| (w, r)),
        Some((false, "BindingsInUseResolved"))
    );
}
