//! The claim cache's status form: every status comes back as it was written.

use proptest::prelude::*;

use super::*;
use crate::api::AccountClaimStatus;

fn spec() -> AccountClaimSpec {
    AccountClaimSpec {
        global_account: "ga-1".into(),
        plan: "aws".into(),
        ..Default::default()
    }
}

fn bound_to(binding: &str, eu: bool, preference: usize, decision: Decision) -> ClaimOutcome {
    ClaimOutcome::Bound(BoundTo {
        binding: binding.into(),
        namespace: "garden-kyma".into(),
        pool: PoolKey {
            hyperscaler_type: "aws".into(),
            eu_access: eu,
            shared: false,
        },
        matched_rule: MatchedRule {
            index: 3,
            entry: "aws(PR=cf-eu11) -> EU".into(),
        },
        decision,
        preference: Some(preference),
    })
}

/// The outcomes a claim goes through, by number.
fn outcome(i: u8) -> ClaimOutcome {
    match i % 6 {
        0 => bound_to("cb-1", false, 1, Decision::Claimed),
        1 => bound_to("cb-2", true, 2, Decision::Reused),
        2 => ClaimOutcome::Kept {
            namespace: "garden-kyma".into(),
        },
        3 => ClaimOutcome::Pending {
            reason: PendingReason::PoolExhausted,
            cause: "no free binding".into(),
            matched: None,
        },
        4 => ClaimOutcome::Lost {
            cause: "binding cb-1 is gone".into(),
        },
        _ => ClaimOutcome::Denied {
            cause: "no trial accounts".into(),
            matched: MatchedRule {
                index: 1,
                entry: "trial -> DENY".into(),
            },
        },
    }
}

fn is_folded(c: &CompactStatus) -> bool {
    c.fields().conditions.is_empty()
}

#[test]
fn a_bound_status_as_written_keeps_no_conditions_and_comes_back_whole() {
    let s = desired_claim_status(None, &spec(), Some(4), &outcome(1), &at(7));
    let c = CompactStatus::new(s.clone());
    assert!(is_folded(&c), "the Bound pair is folded");
    assert_eq!(c.fields().credentials_binding_name.as_deref(), Some("cb-2"));
    assert_eq!(c.expand(), s);
}

#[test]
fn a_pair_that_says_anything_else_is_kept_as_it_is() {
    let s = desired_claim_status(None, &spec(), Some(1), &outcome(0), &at(7));
    let edits: [fn(&mut AccountClaimStatus); 5] = [
        |s| s.conditions[1].message.push('!'),
        |s| s.conditions[0].last_transition_time = at(8),
        |s| s.conditions[1].observed_generation = Some(2),
        |s| s.conditions.swap(0, 1),
        // The fields the message is derived from no longer match it.
        |s| s.credentials_binding_name = Some("cb-9".into()),
    ];
    for (i, edit) in edits.iter().enumerate() {
        let mut edited = s.clone();
        edit(&mut edited);
        let c = CompactStatus::new(edited.clone());
        assert!(!is_folded(&c), "edit {i}");
        assert_eq!(c.expand(), edited, "edit {i}");
    }
}

proptest! {
    /// Any sequence of outcomes, at any times and generations, and any message edited by hand:
    /// the cache gives back the status it was given.
    #[test]
    fn every_status_comes_back_as_it_was(
        steps in proptest::collection::vec((0u8..6, 0i64..5, 1i64..4), 1..6),
        edit in proptest::option::of((0usize..3, "[a-z ]{0,12}")),
    ) {
        let mut current: Option<AccountClaimStatus> = None;
        for (o, t, generation) in steps {
            let next = desired_claim_status(
                current.as_ref(),
                &spec(),
                Some(generation),
                &outcome(o),
                &at(t),
            );
            current = Some(next);
        }
        let mut s = current.expect("one step at least");
        if let Some((i, text)) = edit
            && let Some(c) = s.conditions.get_mut(i)
        {
            c.message = text;
        }
        prop_assert_eq!(CompactStatus::new(s.clone()).expand(), s);
    }
}
