//! A claim status as the claim cache keeps it. A Bound status as this operator writes it carries
//! two conditions (Ready and Bound) that say the same thing, with a message derived from the
//! status's own fields: at 10k claims they were half of the cache. The cache keeps their
//! transition time and generation only and derives the rest when the whole status is asked for.
//! Any other status is kept as it is, so `expand(compact(s)) == s` for every status.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::claim::bound_message;
use crate::api::AccountClaimStatus;
use crate::api::conditions::{reasons, types};

/// A status, with the Bound pair of conditions folded when it is the one this operator writes.
#[derive(Clone, Debug, PartialEq)]
pub struct CompactStatus {
    /// The status; without conditions when `pair` is set. Every field the cache's readers look
    /// at (phase, the recorded binding, the pool waited for, a denial) is here as written.
    rest: AccountClaimStatus,
    pair: Option<Pair>,
}

/// What differs between two Bound pairs: when they were set, and for which generation.
#[derive(Clone, Debug, PartialEq)]
struct Pair {
    last_transition_time: Time,
    observed_generation: Option<i64>,
}

impl CompactStatus {
    pub fn new(mut status: AccountClaimStatus) -> Self {
        let pair = folded(&status);
        if pair.is_some() {
            status.conditions = Vec::new();
        }
        Self { rest: status, pair }
    }

    /// The status without the folded conditions: what the recorded binding, the pool waited for
    /// and a denial are read from (a folded pair is Bound, never a denial).
    pub fn fields(&self) -> &AccountClaimStatus {
        &self.rest
    }

    /// The whole status, as written.
    pub fn expand(&self) -> AccountClaimStatus {
        let mut status = self.rest.clone();
        if let Some(pair) = &self.pair {
            let message = bound_message(&status).unwrap_or_default();
            status.conditions = [types::READY, types::BOUND]
                .into_iter()
                .map(|t| Condition {
                    type_: t.to_string(),
                    status: "True".into(),
                    reason: reasons::BOUND.into(),
                    message: message.clone(),
                    last_transition_time: pair.last_transition_time.clone(),
                    observed_generation: pair.observed_generation,
                })
                .collect();
        }
        status
    }
}

/// The pair's time and generation, if the conditions are exactly Ready and Bound, True, reason
/// Bound, one transition time and generation, and the message derived from the status.
fn folded(s: &AccountClaimStatus) -> Option<Pair> {
    let [ready, bound] = s.conditions.as_slice() else {
        return None;
    };
    let canonical =
        |c: &Condition, t: &str| c.type_ == t && c.status == "True" && c.reason == reasons::BOUND;
    if !canonical(ready, types::READY)
        || !canonical(bound, types::BOUND)
        || ready.last_transition_time != bound.last_transition_time
        || ready.observed_generation != bound.observed_generation
        || ready.message != bound.message
        || bound_message(s).as_deref() != Some(ready.message.as_str())
    {
        return None;
    }
    Some(Pair {
        last_transition_time: ready.last_transition_time.clone(),
        observed_generation: ready.observed_generation,
    })
}
