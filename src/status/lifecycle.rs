//! Events about the binding lifecycle (issue 22), computed from the status before and after a
//! write, so that an Event goes out once per change and never on a rewrite of the same status.

use std::collections::BTreeSet;

use crate::api::HapConfigStatus;

/// Every cordoned binding the status lists, as `(binding, tenant, reason)`.
fn cordoned(s: &HapConfigStatus) -> BTreeSet<(&str, Option<&str>, &str)> {
    s.pools
        .iter()
        .flat_map(|p| &p.cordoned)
        .map(|c| (c.binding.as_str(), c.tenant.as_deref(), c.reason.as_str()))
        .collect()
}

/// The Event to send when the cordoned bindings changed from `old` to `new`:
/// `(warning, reason, note)`, or `None` when they are the same.
pub fn cordon_event(
    old: Option<&HapConfigStatus>,
    new: &HapConfigStatus,
) -> Option<(bool, &'static str, String)> {
    let before = old.map(cordoned).unwrap_or_default();
    let now = cordoned(new);
    if before == now {
        return None;
    }
    if now.is_empty() {
        let note = "no binding is cordoned any more";
        return Some((false, "CordonsLifted", note.to_string()));
    }
    let each: Vec<String> = now
        .iter()
        .map(|(b, tenant, reason)| {
            let tenant = tenant.map(|t| format!(", held by {t}")).unwrap_or_default();
            let reason = if reason.is_empty() {
                "no reason given".to_string()
            } else {
                (*reason).to_string()
            };
            format!("{b} ({reason}{tenant})")
        })
        .collect();
    let note = format!(
        "cordoned bindings get no new tenant; a tenant that holds one keeps its clusters: {}",
        each.join("; ")
    );
    Some((false, "BindingsCordoned", note))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{CordonedBinding, PoolLifecycle};

    fn status(cordoned: &[(&str, Option<&str>, &str)]) -> HapConfigStatus {
        HapConfigStatus {
            pools: vec![PoolLifecycle {
                hyperscaler_type: "aws".into(),
                cordoned: cordoned
                    .iter()
                    .map(|(b, t, r)| CordonedBinding {
                        binding: b.to_string(),
                        tenant: t.map(Into::into),
                        reason: r.to_string(),
                    })
                    .collect(),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn a_cordon_event_goes_out_once_per_change_naming_binding_reason_and_tenant() {
        let none = status(&[]);
        assert_eq!(cordon_event(None, &none), None);
        let one = status(&[("aws-1", Some("ga-1"), "quota ticket 42")]);
        let (warning, reason, note) = cordon_event(Some(&none), &one).expect("a change");
        assert_eq!((warning, reason), (false, "BindingsCordoned"));
        assert!(
            note.contains("aws-1 (quota ticket 42, held by ga-1)"),
            "{note}"
        );
        assert_eq!(cordon_event(Some(&one), &one.clone()), None);
        // A new reason is a change too.
        let other = status(&[("aws-1", Some("ga-1"), "revoked")]);
        assert!(cordon_event(Some(&one), &other).is_some());
        let (_, reason, _) = cordon_event(Some(&other), &none).expect("lifted");
        assert_eq!(reason, "CordonsLifted");
    }
}
