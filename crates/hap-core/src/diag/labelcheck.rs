//! The label keys a HapConfig names, checked as a whole (syntax from `labelsyntax`, six roles,
//! six different keys).

use crate::labels::ResolvedLabelKeys;

use super::labelsyntax::label_key_problem;
use super::{Diagnostic, Reason};

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
    use super::super::labelsyntax::label_value_problem;
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
