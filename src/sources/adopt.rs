//! Adoption: a request that arrives with its binding already chosen (a Kyma Runtime whose
//! `spec.shoot.secretBindingName` KEB filled) is recorded as it is, never re-chosen. Its claim
//! names the binding in `spec.adoptBinding`; it is Bound (decision `Adopted`) when the binding
//! exists and carries the global account or is shared, and otherwise reports why, without
//! writing anything: the operator claims only bindings it chose itself.

use crate::labels::{PoolKey, ResolvedLabelKeys};
use crate::pools::{Inventory, SmallMap};

/// What an adopted binding means for its claim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Adoption {
    /// Record it: the binding is the tenant's (or shared), in this pool.
    Bound { pool: PoolKey },
    /// Report it: the binding cannot be the tenant's.
    NotTenant { message: String },
}

/// Decides an adoption from the inventory.
pub fn adopt(inv: &Inventory, binding: &str, global_account: &str) -> Adoption {
    let labels = inv.binding(binding).map(|e| &e.view.labels);
    adopt_labels(inv.keys(), labels, binding, global_account)
}

/// Decides an adoption from the binding's labels (`None`: no such binding).
pub fn adopt_labels(
    keys: &ResolvedLabelKeys,
    labels: Option<&SmallMap<String>>,
    binding: &str,
    global_account: &str,
) -> Adoption {
    let Some(labels) = labels else {
        return Adoption::NotTenant {
            message: format!(
                "the request names binding {binding}, which does not exist in the binding namespace"
            ),
        };
    };
    let is = |k: &str| labels.get(k).map(String::as_str) == Some("true");
    let pool = PoolKey {
        hyperscaler_type: labels
            .get(&keys.hyperscaler_type)
            .cloned()
            .unwrap_or_default(),
        eu_access: is(&keys.eu_access),
        shared: is(&keys.shared),
    };
    if pool.shared {
        return Adoption::Bound { pool };
    }
    let message = match labels.get(&keys.tenant_name) {
        Some(t) if t == global_account && labels.contains_key(&keys.dirty) => format!(
            "the request names binding {binding}, which carries {}={t} but is marked {} for cleanup",
            keys.tenant_name, keys.dirty
        ),
        Some(t) if t == global_account => return Adoption::Bound { pool },
        Some(t) => format!(
            "the request names binding {binding}, which carries {}={t}, not {global_account}: two tenants would share one account",
            keys.tenant_name
        ),
        None => format!(
            "the request names binding {binding}, which carries no {}: hap-operator does not claim a binding it did not choose; label it {}={global_account} if it is this tenant's",
            keys.tenant_name, keys.tenant_name
        ),
    };
    Adoption::NotTenant { message }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pools::tests::{binding, inventory};

    #[test]
    fn only_the_tenants_or_a_shared_binding_is_recorded() {
        let inv = inventory(
            vec![
                binding(
                    "mine",
                    &[("hyperscalerType", "azure"), ("tenantName", "ga")],
                ),
                binding(
                    "theirs",
                    &[("hyperscalerType", "azure"), ("tenantName", "gb")],
                ),
                binding("free", &[("hyperscalerType", "azure")]),
                binding("sh", &[("hyperscalerType", "azure"), ("shared", "true")]),
                binding(
                    "dirty",
                    &[
                        ("hyperscalerType", "azure"),
                        ("tenantName", "ga"),
                        ("dirty", "true"),
                    ],
                ),
            ],
            vec![],
            vec![],
        );
        let pool = |shared| PoolKey {
            hyperscaler_type: "azure".into(),
            eu_access: false,
            shared,
        };
        assert_eq!(
            adopt(&inv, "mine", "ga"),
            Adoption::Bound { pool: pool(false) }
        );
        assert_eq!(
            adopt(&inv, "sh", "ga"),
            Adoption::Bound { pool: pool(true) }
        );
        for (b, says) in [
            ("theirs", "carries tenantName=gb, not ga"),
            ("free", "carries no tenantName"),
            ("dirty", "marked dirty"),
            ("gone", "does not exist"),
        ] {
            match adopt(&inv, b, "ga") {
                Adoption::NotTenant { message } => assert!(message.contains(says), "{message}"),
                other => panic!("{b}: {other:?}"),
            }
        }
    }
}
