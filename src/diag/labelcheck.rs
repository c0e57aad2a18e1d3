//! Kubernetes label syntax checks: label values (hyperscalerTypes) and label keys (labelKeys).

use crate::labels::ResolvedLabelKeys;

use super::{Diagnostic, Reason};

/// Why `value` is not a valid label value, or `None` when it is.
pub fn label_value_problem(value: &str) -> Option<String> {
    let len = value.chars().count();
    if value.is_empty() {
        return Some("which is empty".into());
    }
    if len > 63 {
        return Some(format!(
            "which is {len} characters long; a label value has at most 63"
        ));
    }
    if !value
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Some(
            "which is not a valid label value (letters, digits, `-`, `_` and `.` only)".into(),
        );
    }
    let ends_ok = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    if !ends_ok(value.chars().next()) || !ends_ok(value.chars().last()) {
        return Some(
            "which is not a valid label value (it must begin and end with a letter or digit)"
                .into(),
        );
    }
    None
}

/// Why `key` is not a valid qualified label key, or `None`.
pub fn label_key_problem(key: &str) -> Option<String> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        let dns_ok = !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|l| {
                !l.is_empty()
                    && l.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !l.starts_with('-')
                    && !l.ends_with('-')
            });
        if !dns_ok {
            return Some(format!("prefix `{p}` is not a DNS subdomain"));
        }
    }
    label_value_problem(name).map(|p| format!("name `{name}` {p}"))
}

/// Every label key must be valid and the six roles must use six different keys.
pub fn check_keys(keys: &ResolvedLabelKeys) -> Vec<Diagnostic> {
    let roles = [
        ("hyperscalerType", &keys.hyperscaler_type),
        ("tenantName", &keys.tenant_name),
        ("shared", &keys.shared),
        ("euAccess", &keys.eu_access),
        ("dirty", &keys.dirty),
        ("internal", &keys.internal),
    ];
    let mut out = Vec::new();
    for (i, (role, key)) in roles.iter().enumerate() {
        if let Some(p) = label_key_problem(key) {
            out.push(Diagnostic::global(
                Reason::InvalidConfig,
                format!("labelKeys.{role}: `{key}` is not a valid label key: {p}"),
            ));
        }
        if let Some((other, _)) = roles[..i].iter().find(|(_, k)| k == key) {
            out.push(Diagnostic::global(
                Reason::InvalidConfig,
                format!("labelKeys.{role} and labelKeys.{other} are both `{key}`: each role needs its own label"),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values() {
        assert_eq!(label_value_problem("openstack_eu-de-1"), None);
        assert!(label_value_problem("gcp_").is_some());
        assert!(label_value_problem(&"a".repeat(64)).is_some());
        assert!(label_value_problem("a b").is_some());
    }

    #[test]
    fn keys() {
        assert_eq!(label_key_problem("example.com/tenant"), None);
        assert!(label_key_problem("Example.com/x").is_some());
        assert!(label_key_problem("a/b/c").is_some());
        let k = ResolvedLabelKeys {
            dirty: "shared".into(),
            ..ResolvedLabelKeys::default()
        };
        assert_eq!(check_keys(&k).len(), 1);
    }
}
