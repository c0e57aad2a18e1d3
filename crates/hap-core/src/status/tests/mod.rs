//! Unit tests of status: condition helpers; HapConfig and AccountClaim transitions in the submodules.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::*;
use crate::api::conditions::{reasons, types};
use crate::api::{
    AccountClaimSpec, ClaimPhase, Decision, MatchedRule, OrphanStatus, PoolFigures, RuleStatus,
};
use crate::labels::PoolKey;

pub(crate) fn at(s: i64) -> Time {
    Time(jiff::Timestamp::from_second(s).unwrap())
}

fn cond<'a>(conds: &'a [Condition], t: &str) -> Option<&'a Condition> {
    find_condition(conds, t)
}

/// (status, reason) of a condition, or None when absent.
fn sr(conds: &[Condition], t: &str) -> Option<(String, String)> {
    cond(conds, t).map(|c| (c.status.clone(), c.reason.clone()))
}

fn is(status: &str, reason: &str) -> Option<(String, String)> {
    Some((status.to_string(), reason.to_string()))
}

#[test]
fn set_condition_moves_the_transition_time_only_when_the_status_changes() {
    let mut conds = Vec::new();
    set_condition(
        &mut conds,
        "Ready",
        CondStatus::False,
        "A",
        "one",
        Some(1),
        &at(10),
    );
    assert_eq!(conds[0].last_transition_time, at(10));
    set_condition(
        &mut conds,
        "Ready",
        CondStatus::False,
        "B",
        "two",
        Some(2),
        &at(20),
    );
    let c = &conds[0];
    assert_eq!(
        (c.reason.as_str(), c.message.as_str(), c.observed_generation),
        ("B", "two", Some(2))
    );
    assert_eq!(c.last_transition_time, at(10));
    set_condition(
        &mut conds,
        "Ready",
        CondStatus::True,
        "B",
        "two",
        Some(2),
        &at(30),
    );
    assert_eq!(
        (conds[0].status.as_str(), &conds[0].last_transition_time),
        ("True", &at(30))
    );
    set_condition(
        &mut conds,
        "Other",
        CondStatus::Unknown,
        "C",
        "",
        None,
        &at(40),
    );
    assert_eq!(conds.len(), 2);
    remove_condition(&mut conds, "Ready");
    assert_eq!(
        conds.iter().map(|c| c.type_.as_str()).collect::<Vec<_>>(),
        ["Other"]
    );
}

#[test]
fn long_messages_are_cut_on_a_character_boundary() {
    let m = truncate_message("é".repeat(MAX_MESSAGE_BYTES));
    assert!(m.len() <= MAX_MESSAGE_BYTES + 'é'.len_utf8() + '…'.len_utf8());
    assert!(m.ends_with('…'));
    assert_eq!(truncate_message("short".into()), "short");
}

mod claim;
mod compact;
mod config;
