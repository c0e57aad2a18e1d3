//! The ledger: events end in-flight records in the same step that shows their write.

use std::time::Instant;

use super::*;
use crate::labels::PoolKey;
use crate::pools::fixtures::{binding, claim};
use crate::release::{Release, decide_release};
use crate::selection::{Choice, UseReason};

fn aws() -> PoolKey {
    crate::pools::fixtures::pool("aws", false, false)
}

fn versioned(mut b: BindingView, rv: &str) -> BindingView {
    b.resource_version = Some(rv.into());
    b
}

#[test]
fn the_event_that_shows_a_claim_write_ends_its_record() {
    let mut l = Ledger::default();
    let now = Instant::now();
    l.apply_binding(versioned(binding("x", &[("hyperscalerType", "aws")]), "3"));
    let c = claim("c", "ga", None, None);
    let choice = Choice::Claim {
        binding: "x".into(),
        expected_resource_version: Some("3".into()),
    };
    l.inflight.record(&c, &aws(), &choice, now);
    l.inflight.claim_written("x", now);
    // A late event of an older version changes nothing.
    l.apply_binding(versioned(binding("x", &[("hyperscalerType", "aws")]), "2"));
    assert!(l.inflight.claim_of("x", now).is_some());
    l.apply_binding(versioned(
        binding("x", &[("hyperscalerType", "aws"), ("tenantName", "ga")]),
        "4",
    ));
    assert!(l.inflight.claim_of("x", now).is_none());
    assert_eq!(l.inventory.owned_by(&aws(), "ga").len(), 1);
}

#[test]
fn a_claim_missing_from_the_index_holds_its_binding_from_a_deleting_sibling() {
    // The sibling's release used to mark the binding dirty while the new
    // claim (not yet in the rebuilt snapshot) was binding to it.
    let mut l = Ledger::default();
    let now = Instant::now();
    l.apply_binding(versioned(
        binding("x", &[("hyperscalerType", "aws"), ("tenantName", "ga")]),
        "3",
    ));
    let mut old = claim("old", "ga", None, Some("x"));
    old.resource_version = Some("4".into());
    l.apply_claim(old.clone());
    let new = claim("new", "ga", Some("s-new"), None);
    let use_x = Choice::Use {
        binding: "x".into(),
        decision: UseReason::Reused,
    };
    l.inflight.record(&new, &aws(), &use_x, now);
    old.deleting = true;
    old.resource_version = Some("5".into());
    l.apply_claim(old.clone());
    let mode = crate::api::ReleaseMode::MarkDirty;
    assert_eq!(
        decide_release(
            &old,
            &l.inventory,
            &l.inflight,
            mode,
            crate::release::Origin::User,
            now
        ),
        Release::WaitForUse {
            binding: "x".into(),
            claims: vec!["uid-new".into()]
        }
    );
}

#[test]
fn a_give_back_the_watch_shows_before_its_answer_holds_nothing_back() {
    // The watch may bring the given-back version before the compare-and-swap answers: the
    // record of the give-back must not then outlive it (it kept every binding of the account
    // out of selection for the record's whole lifetime).
    let mut l = Ledger::default();
    let now = Instant::now();
    let aws_labels = [("hyperscalerType", "aws")];
    l.apply_binding(versioned(binding("x", &aws_labels), "5"));
    let c = claim("c", "ga", None, None);
    let choice = Choice::Claim {
        binding: "x".into(),
        expected_resource_version: Some("5".into()),
    };
    l.inflight.record(&c, &aws(), &choice, now);
    l.inflight.claim_written("x", now);
    // The claim write landed at 6; the give-back is sent on 6 and lands at 7, which the watch
    // delivers before the answer.
    l.inflight.release_started("x", Some("6".into()), now);
    l.apply_binding(versioned(binding("x", &aws_labels), "7"));
    assert!(
        l.inflight.is_releasing("x", now),
        "held back while the write is out"
    );
    l.inflight.gave_back(&c.uid, "x");
    l.release_outcome("x", Outcome::Written, now);
    assert!(
        !l.inflight.is_releasing("x", now),
        "held back after the index showed it"
    );
}
