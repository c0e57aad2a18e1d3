//! Adoption: a request that arrives with its binding already chosen (a Kyma Runtime whose
//! `spec.shoot.secretBindingName` KEB filled) is recorded as it is, never re-chosen. Its claim
//! names the binding in `spec.adoptBinding`; it is Bound (decision `Adopted`) when the binding
//! exists and carries the global account or is shared, and otherwise reports why, without
//! writing anything: the operator claims only bindings it chose itself.

use crate::labels::{PoolKey, ResolvedLabelKeys};
use crate::pools::Inventory;
use crate::small_map::SmallMap;

/// What an adopted binding means for its claim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Adoption {
    /// Record it: the binding is the tenant's (or shared), in this pool.
    Bound { pool: PoolKey },
    /// Report it: the binding cannot be the tenant's.
    NotTenant { message: String },
}

/// Decides an adoption from the inventory.
pub fn adopt(
    inv: &Inventory,
    binding: &str,
    global_account: &str,
    cluster: Option<&str>,
) -> Adoption {
    let labels = inv.binding(binding).map(|e| &e.view.labels);
    match adopt_labels(inv.keys(), labels, binding, global_account) {
        Adoption::Bound { pool } if !pool.shared => {
            match refused_on_account(inv, binding, global_account, cluster) {
                Some(message) => Adoption::NotTenant { message },
                None => Adoption::Bound { pool },
            }
        }
        other => other,
    }
}

/// Decides an adoption from the binding's own labels (`None`: no such binding): what the
/// binding says, before the account's other bindings and the cleanup mark are asked
/// (`refused_on_account`). The observe report reads this from its snapshot.
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

/// Why the tenant's own binding is not recorded for `cluster` (`None`: the cluster is not
/// known, as in the observe report, which reads what runs): the cleanup job marked it failed
/// and the cluster is not on the account yet, so a new cluster would go into an account whose
/// wipe failed (a cluster already running there is recorded and counted; the binding stays
/// `CleanupFailed`); or another binding of its credential carries another tenant, so recording
/// it would have one account serve two tenants.
fn refused_on_account(
    inv: &Inventory,
    binding: &str,
    tenant: &str,
    cluster: Option<&str>,
) -> Option<String> {
    let keys = inv.keys();
    if let Some(cluster) = cluster
        && crate::pools::lifecycle::closed_to(inv, binding, cluster)
    {
        let marked = std::iter::once(binding)
            .chain(inv.siblings(binding))
            .find(|b| {
                inv.binding(b)
                    .is_some_and(|e| crate::pools::lifecycle::is_cleanup_failed(&e.view.labels))
            })
            .unwrap_or(binding);
        let which = if marked == binding {
            format!("binding {binding}, which carries")
        } else {
            format!("binding {binding}, whose credential's other binding {marked} carries")
        };
        return Some(format!(
            "the request names {which} {}=true: its last cleanup failed and the account may \
             hold a previous tenant's resources, so no new cluster goes into it until the \
             cleanup job clears the mark",
            crate::pools::lifecycle::CLEANUP_FAILED
        ));
    }
    let rival = inv.siblings(binding).find_map(|s| {
        let other = inv.binding(s)?.view.labels.get(&keys.tenant_name)?;
        (other != tenant).then(|| (s, format!("{}={other}", keys.tenant_name)))
    })?;
    Some(format!(
        "the request names binding {binding}, but {} carries {}: it references the same \
         credential, and one account never serves two tenants",
        rival.0, rival.1
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pools::fixtures::{binding, inventory};

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
            adopt(&inv, "mine", "ga", None),
            Adoption::Bound { pool: pool(false) }
        );
        assert_eq!(
            adopt(&inv, "sh", "ga", None),
            Adoption::Bound { pool: pool(true) }
        );
        for (b, says) in [
            ("theirs", "carries tenantName=gb, not ga"),
            ("free", "carries no tenantName"),
            ("dirty", "marked dirty"),
            ("gone", "does not exist"),
        ] {
            match adopt(&inv, b, "ga", None) {
                Adoption::NotTenant { message } => assert!(message.contains(says), "{message}"),
                other => panic!("{b}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_binding_marked_cleanup_failed_is_adopted_only_for_a_cluster_already_on_it() {
        use crate::pools::fixtures::shoot;
        use crate::pools::lifecycle::CLEANUP_FAILED;
        let marked = binding(
            "marked",
            &[
                ("hyperscalerType", "azure"),
                ("tenantName", "ga"),
                (CLEANUP_FAILED, "true"),
            ],
        );
        let inv = inventory(vec![marked], vec![], vec![shoot("running", Some("marked"))]);
        // The Shoot already runs in the account: recording it is counting what is there.
        assert!(matches!(
            adopt(&inv, "marked", "ga", Some("running")),
            Adoption::Bound { .. }
        ));
        // A new cluster would go into an account whose wipe failed.
        match adopt(&inv, "marked", "ga", Some("new")) {
            Adoption::NotTenant { message } => assert!(
                message.contains("accountpool.io/cleanup-failed=true"),
                "{message}"
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_binding_whose_credential_another_tenant_holds_is_not_adopted() {
        use crate::pools::fixtures::on_secret;
        let inv = inventory(
            vec![
                on_secret(
                    binding("x", &[("hyperscalerType", "azure"), ("tenantName", "ga")]),
                    "s",
                ),
                on_secret(
                    binding("y", &[("hyperscalerType", "azure"), ("tenantName", "gb")]),
                    "s",
                ),
            ],
            vec![],
            vec![],
        );
        match adopt(&inv, "x", "ga", Some("c")) {
            Adoption::NotTenant { message } => {
                assert!(message.contains("y carries tenantName=gb"), "{message}")
            }
            other => panic!("{other:?}"),
        }
    }
}
