//! Status of HapConfig and AccountClaim, computed from plain inputs: conditions per kstatus and
//! Flux conventions (`Ready`, `Reconciling`, `Stalled`, with `observedGeneration`), and the test that tells
//! the controller whether a newly computed status is worth a write.
//!
//! Condition rules for both kinds: `Ready` is always present; `Reconciling` and `Stalled` are
//! "abnormal-true" and present only while True, never both; every condition carries the
//! generation it was computed from; `lastTransitionTime` changes only when the status does.

mod claim;
mod compact;
mod config;
mod lifecycle;
mod observation;
pub mod observe;
mod pause;
mod sources;
mod states;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

pub use claim::{
    BoundTo, ClaimOutcome, PendingReason, bound_message, desired_claim_status, release_blocked_for,
};
pub use compact::CompactStatus;
pub use config::{ConfigInputs, MissingPool, bindings_in_use_event, desired_config_status};
pub use lifecycle::{
    ACCOUNTS_HEALTHY, cleanup_failed_events, cordon_event, pool_low_event, set_accounts_condition,
    set_pool_low_condition, suspect_event,
};
pub use observation::{MAX_DISAGREEMENTS, disagreement_events, observation, observation_due};
pub use pause::{
    DEFAULT_PAUSED_ALERT_AFTER, PAUSED, PAUSED_ALERT_AFTER, Pause, paused_alert_after, paused_by,
    paused_since, set_paused_condition,
};
pub use states::{lifecycle_rules, pool_states};

use crate::api::{AccountClaimStatus, HapConfigStatus};

/// metav1.Condition caps `message` at 32768 bytes; stay below with room for the ellipsis.
pub const MAX_MESSAGE_BYTES: usize = 32_000;

/// The status of a condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CondStatus {
    True,
    False,
    Unknown,
}

impl CondStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            CondStatus::True => "True",
            CondStatus::False => "False",
            CondStatus::Unknown => "Unknown",
        }
    }
}

/// Cuts a message to `MAX_MESSAGE_BYTES` on a character boundary.
pub fn truncate_message(mut message: String) -> String {
    if message.len() <= MAX_MESSAGE_BYTES {
        return message;
    }
    let mut end = MAX_MESSAGE_BYTES;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    message.truncate(end);
    message.push('…');
    message
}

/// Sets condition `type_`, adding it when absent. `lastTransitionTime` becomes `now` only when the
/// condition is new or its status changes; reason, message and generation are always updated.
pub fn set_condition(
    conds: &mut Vec<Condition>,
    type_: &str,
    status: CondStatus,
    reason: &str,
    message: impl Into<String>,
    observed_generation: Option<i64>,
    now: &Time,
) {
    let message = truncate_message(message.into());
    if let Some(c) = conds.iter_mut().find(|c| c.type_ == type_) {
        if c.status != status.as_str() {
            c.status = status.as_str().to_string();
            c.last_transition_time = now.clone();
        }
        c.reason = reason.to_string();
        c.message = message;
        c.observed_generation = observed_generation;
        return;
    }
    conds.push(Condition {
        type_: type_.to_string(),
        status: status.as_str().to_string(),
        reason: reason.to_string(),
        message,
        observed_generation,
        last_transition_time: now.clone(),
    });
}

/// Removes condition `type_` (for `Reconciling` and `Stalled` once they stop being True).
pub fn remove_condition(conds: &mut Vec<Condition>, type_: &str) {
    conds.retain(|c| c.type_ != type_);
}

/// The condition of that type, if present.
pub fn find_condition<'a>(conds: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conds.iter().find(|c| c.type_ == type_)
}

/// Conditions in type order with their timestamps blanked, for comparison.
fn normalized(conds: &[Condition]) -> Vec<Condition> {
    let mut out: Vec<Condition> = conds
        .iter()
        .map(|c| Condition {
            last_transition_time: Time(jiff::Timestamp::UNIX_EPOCH),
            ..c.clone()
        })
        .collect();
    out.sort_by(|a, b| a.type_.cmp(&b.type_));
    out
}

/// Whether writing `new` over `old` changes anything but condition timestamps and order.
/// `lastRefreshTime` counts as a change: it moves only when a refresh happened.
pub fn config_status_changed(old: Option<&HapConfigStatus>, new: &HapConfigStatus) -> bool {
    let Some(old) = old else { return true };
    let strip = |s: &HapConfigStatus| HapConfigStatus {
        conditions: normalized(&s.conditions),
        ..s.clone()
    };
    strip(old) != strip(new)
}

/// Whether writing `new` over `old` changes anything but condition timestamps and order.
pub fn claim_status_changed(old: Option<&AccountClaimStatus>, new: &AccountClaimStatus) -> bool {
    let Some(old) = old else { return true };
    let strip = |s: &AccountClaimStatus| AccountClaimStatus {
        conditions: normalized(&s.conditions),
        ..s.clone()
    };
    strip(old) != strip(new)
}

#[cfg(test)]
pub(crate) mod tests;
