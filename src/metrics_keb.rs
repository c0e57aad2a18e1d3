//! KEB's metric names for the binding pool (`kcp_keb_v2_*`, its credentials-binding collector),
//! emitted next to `hap_*` only with `hap run --keb-metrics`, so that dashboards and alerts built
//! for Kyma Environment Broker keep working after a switch. A thin layer: the figures are
//! derived from the same classified inventory as `hap_*`, by KEB's definitions (docs/operating.md
//! §1.1 says where they differ from the `hap_*` ones).

use std::collections::BTreeMap;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::pools::{BindingClass, Inventory};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TypeLabels {
    hyperscaler_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClaimedLabels {
    hyperscaler_type: String,
    tenant_name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct InstancesLabels {
    credentials_binding: String,
    global_account_id: String,
}

/// What KEB's collector needs to know about one binding of a pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KebBinding<'a> {
    pub name: &'a str,
    pub hyperscaler_type: &'a str,
    pub class: &'a BindingClass,
    /// Clusters on the binding (KEB: its active instances).
    pub clusters: usize,
}

/// The gauges' values, keyed as KEB labels them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KebFigures {
    /// Neither labelled with a tenant, nor shared, nor dirty (KEB counts `internal` ones too).
    pub available: BTreeMap<String, i64>,
    /// Labelled with a tenant, dirty ones included: (hyperscaler type, tenant).
    pub claimed: BTreeMap<(String, String), i64>,
    pub dirty: BTreeMap<String, i64>,
    pub shared: BTreeMap<String, i64>,
    /// Bindings with at least one cluster: (binding, its tenant or "").
    pub instances: BTreeMap<(String, String), i64>,
}

/// KEB's figures of a set of bindings. Pure: no clock, no API.
pub fn figures<'a>(bindings: impl IntoIterator<Item = KebBinding<'a>>) -> KebFigures {
    let mut f = KebFigures::default();
    let bump = |m: &mut BTreeMap<String, i64>, k: &str| *m.entry(k.to_string()).or_default() += 1;
    for b in bindings {
        let ty = b.hyperscaler_type;
        let tenant = match b.class {
            BindingClass::Shared => {
                bump(&mut f.shared, ty);
                None
            }
            BindingClass::Claimable | BindingClass::InternalFree => {
                bump(&mut f.available, ty);
                None
            }
            BindingClass::Owned { tenant } => Some(tenant.as_str()),
            BindingClass::Dirty { tenant } => {
                bump(&mut f.dirty, ty);
                tenant.as_deref()
            }
        };
        if let Some(t) = tenant {
            *f.claimed
                .entry((ty.to_string(), t.to_string()))
                .or_default() += 1;
        }
        if b.clusters > 0 {
            let n = i64::try_from(b.clusters).unwrap_or(i64::MAX);
            f.instances.insert(
                (b.name.to_string(), tenant.unwrap_or_default().to_string()),
                n,
            );
        }
    }
    f
}

/// The `kcp_keb_v2_*` gauges in a registry of their own (the operator's has the `hap` prefix).
pub struct KebMetrics {
    registry: Registry,
    available: Family<TypeLabels, Gauge>,
    claimed: Family<ClaimedLabels, Gauge>,
    dirty: Family<TypeLabels, Gauge>,
    shared: Family<TypeLabels, Gauge>,
    instances: Family<InstancesLabels, Gauge>,
}

impl Default for KebMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl KebMetrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("kcp_keb_v2");
        let m = Self {
            registry: Registry::default(),
            available: Family::default(),
            claimed: Family::default(),
            dirty: Family::default(),
            shared: Family::default(),
            instances: Family::default(),
        };
        for (name, help, family) in [
            (
                "available_credentials_bindings",
                "Bindings without tenant, not shared, not dirty, per hyperscaler type (KEB's name)",
                &m.available,
            ),
            (
                "dirty_credentials_bindings",
                "Dirty bindings per hyperscaler type (KEB's name)",
                &m.dirty,
            ),
            (
                "shared_credentials_bindings",
                "Shared bindings per hyperscaler type (KEB's name)",
                &m.shared,
            ),
        ] {
            registry.register(name, help, family.clone());
        }
        registry.register(
            "claimed_credentials_bindings",
            "Bindings labelled with a tenant, per hyperscaler type and tenant (KEB's name)",
            m.claimed.clone(),
        );
        registry.register(
            "instances_per_credentials_binding",
            "Clusters on each binding that has one, with the binding's tenant (KEB's name)",
            m.instances.clone(),
        );
        Self { registry, ..m }
    }

    /// Replaces every gauge with `f`: series of bindings, tenants or types gone are dropped.
    pub fn set(&self, f: &KebFigures) {
        let ty = |t: &String| TypeLabels {
            hyperscaler_type: t.clone(),
        };
        for (family, values) in [
            (&self.available, &f.available),
            (&self.dirty, &f.dirty),
            (&self.shared, &f.shared),
        ] {
            family.clear();
            for (t, n) in values {
                family.get_or_create(&ty(t)).set(*n);
            }
        }
        self.claimed.clear();
        for ((t, tenant), n) in &f.claimed {
            let l = ClaimedLabels {
                hyperscaler_type: t.clone(),
                tenant_name: tenant.clone(),
            };
            self.claimed.get_or_create(&l).set(*n);
        }
        self.instances.clear();
        for ((binding, ga), n) in &f.instances {
            let l = InstancesLabels {
                credentials_binding: binding.clone(),
                global_account_id: ga.clone(),
            };
            self.instances.get_or_create(&l).set(*n);
        }
    }

    /// Sets the gauges from the operator's classified inventory (bindings in no pool have no
    /// hyperscaler type, which KEB skips too).
    pub fn export(&self, inv: &Inventory) {
        let f = figures(inv.bindings().filter_map(|b| {
            let (key, class) = b.pool.as_ref()?;
            Some(KebBinding {
                name: &b.view.name,
                hyperscaler_type: &key.hyperscaler_type,
                class,
                clusters: inv.clusters_on(&b.view.name).len(),
            })
        }));
        self.set(&f);
    }

    /// Appends the families (no `# EOF`: the caller ends the exposition).
    pub fn encode_into(&self, out: &mut String) -> std::fmt::Result {
        prometheus_client::encoding::text::encode_registry(out, &self.registry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;

    fn b<'a>(
        name: &'a str,
        ty: &'a str,
        class: &'a BindingClass,
        clusters: usize,
    ) -> KebBinding<'a> {
        KebBinding {
            name,
            hyperscaler_type: ty,
            class,
            clusters,
        }
    }

    #[test]
    fn figures_follow_kebs_definitions() {
        let acme = BindingClass::Owned {
            tenant: "ga-acme".into(),
        };
        let dirty_old = BindingClass::Dirty {
            tenant: Some("ga-old".into()),
        };
        let dirty_none = BindingClass::Dirty { tenant: None };
        let f = figures([
            b("aws-1", "aws", &BindingClass::Claimable, 0),
            b("aws-2", "aws", &BindingClass::InternalFree, 0),
            b("aws-3", "aws", &acme, 2),
            b("aws-4", "aws", &dirty_old, 1),
            b("aws-5", "aws", &dirty_none, 0),
            b("os-1", "openstack", &BindingClass::Shared, 3),
        ]);
        let m = |v: &[(&str, i64)]| v.iter().map(|(k, n)| (k.to_string(), *n)).collect();
        assert_eq!(f.available, m(&[("aws", 2)]));
        assert_eq!(f.dirty, m(&[("aws", 2)]));
        assert_eq!(f.shared, m(&[("openstack", 1)]));
        let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
        assert_eq!(
            f.claimed,
            [(pair("aws", "ga-acme"), 1), (pair("aws", "ga-old"), 1)].into()
        );
        assert_eq!(
            f.instances,
            [
                (pair("aws-3", "ga-acme"), 2),
                (pair("aws-4", "ga-old"), 1),
                (pair("os-1", ""), 3)
            ]
            .into()
        );
    }

    #[test]
    fn keb_names_appear_only_when_asked_for() {
        // A family without series is not encoded: one binding of each kind.
        let owned = BindingClass::Owned {
            tenant: "ga-acme".into(),
        };
        let dirty = BindingClass::Dirty { tenant: None };
        let f = figures([
            b("aws-1", "aws", &BindingClass::Claimable, 0),
            b("aws-2", "aws", &owned, 1),
            b("aws-3", "aws", &dirty, 0),
            b("os-1", "openstack", &BindingClass::Shared, 0),
        ]);
        let with = Metrics::with_keb_names(true);
        with.keb.as_ref().expect("KEB layer").set(&f);
        let text = with.encode();
        assert!(
            text.contains("kcp_keb_v2_available_credentials_bindings{hyperscaler_type=\"aws\"} 1"),
            "{text}"
        );
        for name in [
            "kcp_keb_v2_claimed_credentials_bindings",
            "kcp_keb_v2_dirty_credentials_bindings",
            "kcp_keb_v2_shared_credentials_bindings",
            "kcp_keb_v2_instances_per_credentials_binding",
        ] {
            assert!(
                text.contains(&format!("# TYPE {name} gauge")),
                "{name}: {text}"
            );
            assert!(!text.contains(&format!("hap_{name}")), "{name}: {text}");
        }
        assert!(text.contains("# TYPE hap_leader gauge"), "{text}");
        assert_eq!(text.matches("# EOF").count(), 1, "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");

        let without = Metrics::with_keb_names(false);
        assert!(without.keb.is_none());
        assert!(!without.encode().contains("kcp_keb"));
        assert!(!Metrics::new().encode().contains("kcp_keb"));
    }
}
