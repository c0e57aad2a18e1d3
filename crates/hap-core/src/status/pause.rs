//! The `Paused` condition of the HapConfig in force: while `spec.paused` holds every binding
//! write the config says so, since when (the condition's `lastTransitionTime`) and who set it (the
//! field manager that last wrote `spec.paused`), so a forgotten pause never reads as plain Ready.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use super::{CondStatus, find_condition, remove_condition, set_condition};
use crate::api::HapConfigStatus;

/// The condition type.
pub const PAUSED: &str = "Paused";
/// The annotation on the HapConfig that says how long a pause may last before
/// `HapPausedTooLong` fires (a duration such as `12h`).
pub const PAUSED_ALERT_AFTER: &str = "accountpool.io/paused-alert-after";
/// How long a pause may last when the annotation does not say.
pub const DEFAULT_PAUSED_ALERT_AFTER: Duration = Duration::from_secs(4 * 3600);

/// The field manager that last wrote `spec.paused` (the newest managedFields entry owning it):
/// `kubectl-patch`, `kubectl-client-side-apply`, `argocd-controller`, … `None` when no entry owns
/// the field (managedFields stripped, or the field unset).
pub fn paused_by(meta: &ObjectMeta) -> Option<String> {
    meta.managed_fields
        .iter()
        .flatten()
        .filter(|m| {
            m.fields_v1
                .as_ref()
                .and_then(|f| f.0.get("f:spec"))
                .and_then(|s| s.get("f:paused"))
                .is_some()
        })
        .max_by_key(|m| m.time.as_ref().map(|t| t.0))
        .and_then(|m| m.manager.clone())
}

/// How long a pause may last before the alert, from the annotation; an annotation that is not a
/// duration is named in the error and the default applies.
pub fn paused_alert_after(meta: &ObjectMeta) -> (Duration, Option<String>) {
    let Some(raw) = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(PAUSED_ALERT_AFTER))
    else {
        return (DEFAULT_PAUSED_ALERT_AFTER, None);
    };
    match crate::duration::parse(raw) {
        Ok(d) if !d.is_zero() => (d, None),
        _ => (
            DEFAULT_PAUSED_ALERT_AFTER,
            Some(format!(
                "annotation {PAUSED_ALERT_AFTER}: `{raw}` is not a positive duration such as `12h`; the alert uses 4h"
            )),
        ),
    }
}

/// What the `Paused` condition is computed from, for the config in force.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pause {
    /// `spec.paused` of the spec in force.
    pub paused: bool,
    /// The field manager that last wrote `spec.paused` (`paused_by`).
    pub by: Option<String>,
    /// Why the alert threshold annotation was not taken (`paused_alert_after`).
    pub note: Option<String>,
}

/// `Paused=True`, reason `Paused`, while the spec in force is paused (naming who paused it when
/// known); `Paused=False`, reason `NotPaused`, otherwise. `None`: not the config in force, no
/// condition.
pub fn set_paused_condition(
    status: &mut HapConfigStatus,
    pause: Option<&Pause>,
    generation: Option<i64>,
    now: &Time,
) {
    let Some(pause) = pause else {
        remove_condition(&mut status.conditions, PAUSED);
        return;
    };
    let (st, reason, mut message) = if pause.paused {
        let by = pause
            .by
            .as_ref()
            .map(|b| format!(" (set by {b})"))
            .unwrap_or_default();
        let m = format!(
            "spec.paused is true{by}: no binding is written, new claims and releases wait and the \
             webhook refuses new requests of request sources until it is false"
        );
        (CondStatus::True, "Paused", m)
    } else {
        let m = "binding writes proceed".to_string();
        (CondStatus::False, "NotPaused", m)
    };
    if let Some(note) = &pause.note {
        message.push_str("; ");
        message.push_str(note);
    }
    set_condition(
        &mut status.conditions,
        PAUSED,
        st,
        reason,
        message,
        generation,
        now,
    );
}

/// Since when the config in force is paused: the transition of its `Paused` condition to True.
pub fn paused_since(status: &HapConfigStatus) -> Option<jiff::Timestamp> {
    find_condition(&status.conditions, PAUSED)
        .filter(|c| c.status == CondStatus::True.as_str())
        .map(|c| c.last_transition_time.0)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn meta(v: serde_json::Value) -> ObjectMeta {
        serde_json::from_value(v).expect("meta")
    }

    #[test]
    fn the_manager_that_last_wrote_spec_paused_paused_it() {
        let m = meta(json!({"managedFields": [
            {"manager": "kubectl-client-side-apply", "operation": "Update", "time": "2026-12-01T10:00:00Z",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:paused": {}, "f:rules": {}}}},
            {"manager": "hap-operator", "operation": "Apply", "time": "2026-12-05T10:00:00Z",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:conditions": {}}}},
            {"manager": "kubectl-patch", "operation": "Update", "time": "2026-12-04T10:00:00Z",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:paused": {}}}}
        ]}));
        assert_eq!(paused_by(&m).as_deref(), Some("kubectl-patch"));
        assert_eq!(paused_by(&meta(json!({}))), None);
    }

    #[test]
    fn the_condition_says_paused_since_the_transition_and_by_whom() {
        let t0 = Time(jiff::Timestamp::from_second(1_000).expect("t"));
        let t1 = Time(jiff::Timestamp::from_second(2_000).expect("t"));
        let mut s = HapConfigStatus::default();
        let off = Pause::default();
        set_paused_condition(&mut s, Some(&off), Some(1), &t0);
        assert_eq!(paused_since(&s), None);
        let on = Pause {
            paused: true,
            by: Some("kubectl-patch".into()),
            note: None,
        };
        set_paused_condition(&mut s, Some(&on), Some(2), &t1);
        let c = find_condition(&s.conditions, PAUSED).expect("condition");
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("True", "Paused"));
        assert!(c.message.contains("set by kubectl-patch"), "{}", c.message);
        // A later pass keeps the time the pause began.
        let t2 = Time(jiff::Timestamp::from_second(3_000).expect("t"));
        set_paused_condition(&mut s, Some(&on), Some(2), &t2);
        assert_eq!(paused_since(&s), Some(t1.0));
        set_paused_condition(&mut s, None, Some(2), &t2);
        assert!(find_condition(&s.conditions, PAUSED).is_none());
    }

    #[test]
    fn the_alert_threshold_comes_from_the_annotation_or_defaults_with_a_reason() {
        let a = |v: &str| meta(json!({"annotations": {PAUSED_ALERT_AFTER: v}}));
        assert_eq!(
            paused_alert_after(&a("12h")),
            (Duration::from_secs(43_200), None)
        );
        let (d, err) = paused_alert_after(&a("soon"));
        assert_eq!(d, DEFAULT_PAUSED_ALERT_AFTER);
        assert!(err.expect("error").contains("`soon`"));
        assert_eq!(
            paused_alert_after(&meta(json!({}))).0,
            DEFAULT_PAUSED_ALERT_AFTER
        );
    }
}
