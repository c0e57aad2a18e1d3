//! Before a claim is bound to a binding another claim claimed: the `CLAIMED_BY` record goes.
//!
//! A clean release (crate::release, step 9) trusts only what one claim alone did with a binding.
//! `CLAIMED_BY` names the claim whose claim write gave the binding its tenant; the first time any
//! other claim is bound to it (reused, filled, pinned, adopted), the label is removed with a
//! compare-and-swap before that claim is recorded Bound. From then on no claim can release the
//! binding clean, whichever goes last: a cluster of the other claim may have run in the account.

use std::time::Instant;

use crate::labels::CLAIMED_BY;
use crate::pools::Inventory;

use super::InFlight;

/// What has to happen on `binding` before a claim that did not claim it is recorded Bound.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BeforeUse {
    /// Nothing on the binding: record the claim Bound.
    Bind,
    /// Remove `CLAIMED_BY`, conditioned on this version, then record the claim Bound. A conflict
    /// means the binding moved: decide again.
    Unclaim {
        binding: String,
        expected_resource_version: Option<String>,
    },
    /// Another claim's claim write of the binding is not in the index yet, so its `CLAIMED_BY`
    /// cannot be seen (nor removed): decide again once it is.
    Wait { binding: String },
}

/// Decides what claim `claim_uid` must write before it is bound to `binding`. Pure.
pub fn before_use(
    inv: &Inventory,
    inflight: &InFlight,
    claim_uid: &str,
    binding: &str,
    now: Instant,
) -> BeforeUse {
    if inflight
        .claim_of(binding, now)
        .is_some_and(|p| p.claim_uid != claim_uid)
    {
        return BeforeUse::Wait {
            binding: binding.to_string(),
        };
    }
    let Some(entry) = inv.binding(binding) else {
        return BeforeUse::Bind;
    };
    match entry.view.labels.get(CLAIMED_BY) {
        Some(by) if by != claim_uid => BeforeUse::Unclaim {
            binding: binding.to_string(),
            expected_resource_version: entry.view.resource_version.clone(),
        },
        _ => BeforeUse::Bind,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pools::tests::{binding, claim, inventory, pool};
    use crate::selection::Choice;

    fn claimed(by: &str) -> crate::pools::BindingView {
        binding(
            "b",
            &[
                ("hyperscalerType", "aws"),
                ("tenantName", "ga"),
                (CLAIMED_BY, by),
            ],
        )
    }

    #[test]
    fn a_binding_another_claim_claimed_loses_its_record_before_the_reuse() {
        let inv = inventory(vec![claimed("uid-first")], vec![], vec![]);
        let fl = InFlight::default();
        let now = Instant::now();
        assert_eq!(
            before_use(&inv, &fl, "uid-second", "b", now),
            BeforeUse::Unclaim {
                binding: "b".into(),
                expected_resource_version: Some("rv-b".into())
            }
        );
        // The claim that claimed it binds without a write (a status write that failed, again).
        assert_eq!(
            before_use(&inv, &fl, "uid-first", "b", now),
            BeforeUse::Bind
        );
        // No record (removed already, or never written): nothing to remove.
        let bare = inventory(
            vec![binding(
                "b",
                &[("hyperscalerType", "aws"), ("tenantName", "ga")],
            )],
            vec![],
            vec![],
        );
        assert_eq!(
            before_use(&bare, &fl, "uid-second", "b", now),
            BeforeUse::Bind
        );
    }

    #[test]
    fn a_claim_write_the_index_does_not_show_yet_is_waited_for() {
        // Its record is on the binding but not in the index view: binding on that view would
        // leave the record of the first claim in place.
        let now = Instant::now();
        let free = binding("b", &[("hyperscalerType", "aws")]);
        let inv = inventory(vec![free], vec![], vec![]);
        let mut fl = InFlight::default();
        let first = claim("first", "ga", None, None);
        let claim_b = Choice::Claim {
            binding: "b".into(),
            expected_resource_version: Some("rv-b".into()),
        };
        fl.record(&first, &pool("aws", false, false), &claim_b, now);
        fl.claim_written("b", now);
        assert_eq!(
            before_use(&inv, &fl, "uid-second", "b", now),
            BeforeUse::Wait {
                binding: "b".into()
            }
        );
        assert_eq!(
            before_use(&inv, &fl, "uid-first", "b", now),
            BeforeUse::Bind
        );
    }
}
