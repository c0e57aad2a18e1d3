//! What the operator knows about each kind of request object: its API resource, where the
//! binding goes, where selection facts live, and the default origin of every request field.

use kube::core::ApiResource;
use serde_json::Value;

use super::naming::{ANNOTATION_CLUSTER_CONFIG, cluster_config_name};
use super::selector::ObjectFacts;
use crate::api::{BindingKind, FieldSource, SourceKind};

/// A watched object as a source pass reads it, and all that the source controller's cache keeps
/// of it: its identity, selection facts, the binding it names, the ClusterConfig a Cluster
/// references, and, for the kinds whose claims a pass derives at the field paths a config names
/// (Runtime, Cluster), the object as compact JSON text, read only for an object without a claim.
/// Held as `serde_json::Value`, a landscape's Shoot took ~8.5 KB even without its status, and a
/// KEB Runtime ~12 KB; 100k Shoots did not fit the operator's memory limit (`cargo run
/// --example memory`). A Shoot's claim is the webhook's, derived from the Shoot it admits, so
/// no more of a Shoot is kept.
#[derive(Clone, Debug, PartialEq)]
pub struct Watched {
    pub facts: ObjectFacts,
    pub uid: Option<String>,
    pub existing_binding: Option<String>,
    /// The ClusterConfig a Cluster references (`referenced_config`).
    pub cluster_config: Option<String>,
    /// `None` for a Shoot.
    pub object: Option<Box<str>>,
}

impl Watched {
    /// The object, read from its text (`None` for a Shoot). The text is `Value`'s own output,
    /// which always reads back.
    pub fn object(&self) -> Option<Value> {
        let read = serde_json::from_str(self.object.as_deref()?).ok();
        debug_assert!(read.is_some(), "a kept object's text reads back");
        read
    }
}

/// The ClusterConfig a served Cluster references: the one its annotation names, or
/// `<name>--hap`, if `spec.clusterConfigs` lists it.
pub(crate) fn referenced_config(cluster: &Value, name: &str) -> Option<String> {
    let str_at = |v: &Value, ptr: &str| {
        v.pointer(ptr)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    let annotation = format!(
        "/metadata/annotations/{}",
        ANNOTATION_CLUSTER_CONFIG.replace('/', "~1")
    );
    let wanted = str_at(cluster, &annotation).unwrap_or_else(|| cluster_config_name(name));
    cluster
        .pointer("/spec/clusterConfigs")
        .and_then(Value::as_array)?
        .iter()
        .any(|r| str_at(r, "/name").as_deref() == Some(wanted.as_str()))
        .then_some(wanted)
}

/// The fields of a request (an AccountClaim's spec).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RequestField {
    GlobalAccount,
    Subaccount,
    Plan,
    PlatformRegion,
    ClusterRegion,
    Provider,
    ShootName,
}

impl RequestField {
    pub const ALL: [RequestField; 7] = [
        RequestField::GlobalAccount,
        RequestField::Subaccount,
        RequestField::Plan,
        RequestField::PlatformRegion,
        RequestField::ClusterRegion,
        RequestField::Provider,
        RequestField::ShootName,
    ];

    /// The field's name in `request` and in the AccountClaim spec.
    pub fn as_str(self) -> &'static str {
        match self {
            RequestField::GlobalAccount => "globalAccount",
            RequestField::Subaccount => "subaccount",
            RequestField::Plan => "plan",
            RequestField::PlatformRegion => "platformRegion",
            RequestField::ClusterRegion => "clusterRegion",
            RequestField::Provider => "provider",
            RequestField::ShootName => "shootName",
        }
    }

    /// Whether an AccountClaim needs it.
    pub fn required(self) -> bool {
        matches!(self, RequestField::GlobalAccount | RequestField::Plan)
    }
}

fn api_resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: format!("{group}/{version}"),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// openmcp's Gardener ClusterConfig, which the operator creates for served Clusters.
pub fn cluster_config_resource() -> ApiResource {
    api_resource(
        "gardener.clusters.openmcp.cloud",
        "v1alpha1",
        "ClusterConfig",
        "clusterconfigs",
    )
}

impl SourceKind {
    pub const ALL: [SourceKind; 3] = [SourceKind::Shoot, SourceKind::Cluster, SourceKind::Runtime];

    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::Shoot => "Shoot",
            SourceKind::Cluster => "Cluster",
            SourceKind::Runtime => "Runtime",
        }
    }

    /// The API resource of the request objects.
    pub fn resource(self) -> ApiResource {
        match self {
            SourceKind::Shoot => api_resource("core.gardener.cloud", "v1beta1", "Shoot", "shoots"),
            SourceKind::Cluster => {
                api_resource("clusters.openmcp.cloud", "v1alpha1", "Cluster", "clusters")
            }
            SourceKind::Runtime => api_resource(
                "infrastructuremanager.kyma-project.io",
                "v1",
                "Runtime",
                "runtimes",
            ),
        }
    }

    /// The first segment of the AccountClaims created for this kind.
    pub fn claim_prefix(self) -> &'static str {
        match self {
            SourceKind::Shoot => "shoot",
            SourceKind::Cluster => "cluster",
            SourceKind::Runtime => "runtime",
        }
    }

    /// Where the binding name is written in the object itself (Clusters carry none: the
    /// ClusterConfig patches it into the Shoot).
    pub fn binding_path(self, binding_kind: BindingKind) -> Option<&'static str> {
        match (self, binding_kind) {
            (SourceKind::Shoot, BindingKind::CredentialsBinding) => {
                Some("/spec/credentialsBindingName")
            }
            (SourceKind::Shoot, BindingKind::SecretBinding) => Some("/spec/secretBindingName"),
            (SourceKind::Runtime, _) => Some("/spec/shoot/secretBindingName"),
            (SourceKind::Cluster, _) => None,
        }
    }

    /// The binding the object names already, if any (empty strings count as none).
    pub fn existing_binding(self, obj: &Value) -> Option<String> {
        let pick = |v: Option<&Value>| {
            v.and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
        };
        match self {
            SourceKind::Shoot => pick(obj.pointer("/spec/credentialsBindingName"))
                .or_else(|| pick(obj.pointer("/spec/secretBindingName"))),
            SourceKind::Runtime => pick(obj.pointer("/spec/shoot/secretBindingName")),
            SourceKind::Cluster => None,
        }
    }

    /// A watched object as a source pass reads it (`Watched`).
    pub fn watched(self, obj: Value) -> Watched {
        let facts = self.facts(&obj);
        let uid = obj
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string);
        let existing_binding = self.existing_binding(&obj);
        let cluster_config = match (self, &facts.name) {
            (SourceKind::Cluster, Some(name)) => referenced_config(&obj, name),
            _ => None,
        };
        let object = match self {
            SourceKind::Shoot => None,
            SourceKind::Runtime | SourceKind::Cluster => Some(obj.to_string().into_boxed_str()),
        };
        Watched {
            facts,
            uid,
            existing_binding,
            cluster_config,
            object,
        }
    }

    /// The selection facts of an object of this kind.
    pub fn facts(self, obj: &Value) -> ObjectFacts {
        let meta = |k: &str| {
            obj.pointer(&format!("/metadata/{k}"))
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
        };
        let labels = obj
            .pointer("/metadata/labels")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        let (purposes, tenancy) = match self {
            SourceKind::Cluster => (
                obj.pointer("/spec/purposes")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(|p| p.as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default(),
                obj.pointer("/spec/tenancy")
                    .and_then(Value::as_str)
                    .map(str::to_string),
            ),
            _ => (Vec::new(), None),
        };
        ObjectFacts {
            namespace: meta("namespace").unwrap_or_default(),
            name: meta("name"),
            labels,
            purposes,
            tenancy,
        }
    }

    /// Where a request field comes from when the source does not say. `None`: no default (the
    /// field stays unset, or, for a required field, the source must name an origin).
    pub fn default_origin(self, field: RequestField) -> Option<FieldSource> {
        let label = |k: &str, optional: bool| {
            Some(FieldSource {
                label: Some(k.into()),
                optional: optional.then_some(true),
                ..Default::default()
            })
        };
        let path = |p: &str| {
            Some(FieldSource {
                field_path: Some(p.into()),
                ..Default::default()
            })
        };
        use RequestField as F;
        match (self, field) {
            (SourceKind::Shoot, F::GlobalAccount) => label("accountpool.io/global-account", false),
            (SourceKind::Shoot, F::Subaccount) => label("accountpool.io/subaccount", true),
            (SourceKind::Shoot, F::Plan) => label("accountpool.io/plan", false),
            (SourceKind::Shoot, F::PlatformRegion) => label("accountpool.io/platform-region", true),
            (SourceKind::Shoot, F::ClusterRegion) => path("spec.region"),
            (SourceKind::Shoot, F::Provider) => path("spec.provider.type"),
            (SourceKind::Shoot, F::ShootName) => path("metadata.name"),
            (SourceKind::Runtime, F::GlobalAccount) => {
                label("kyma-project.io/global-account-id", false)
            }
            (SourceKind::Runtime, F::Subaccount) => label("kyma-project.io/subaccount-id", false),
            (SourceKind::Runtime, F::Plan) => label("kyma-project.io/broker-plan-name", false),
            (SourceKind::Runtime, F::PlatformRegion) => {
                label("kyma-project.io/platform-region", false)
            }
            (SourceKind::Runtime, F::ClusterRegion) => path("spec.shoot.region"),
            (SourceKind::Runtime, F::Provider) => path("spec.shoot.provider.type"),
            (SourceKind::Runtime, F::ShootName) => path("spec.shoot.name"),
            (SourceKind::Cluster, F::GlobalAccount) => {
                label("metadata.open-control-plane.io/project", false)
            }
            (SourceKind::Cluster, F::PlatformRegion) => {
                label("metadata.open-control-plane.io/platform-region", true)
            }
            // Plan is required in the config; region and provider live in the ProviderConfig the
            // Cluster's profile names, which the operator does not read; the Shoot name is derived.
            (SourceKind::Cluster, _) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn facts_and_existing_bindings_per_kind() {
        let cluster = json!({
            "metadata": {"generateName": "workload-", "namespace": "p", "labels": {"a": "b"}},
            "spec": {"purposes": ["workload"], "tenancy": "Exclusive"},
        });
        let f = SourceKind::Cluster.facts(&cluster);
        assert_eq!(f.name, None);
        assert_eq!(f.namespace, "p");
        assert_eq!(f.purposes, vec!["workload".to_string()]);
        assert_eq!(f.tenancy.as_deref(), Some("Exclusive"));
        assert_eq!(f.labels.get("a").map(String::as_str), Some("b"));
        let runtime = json!({"spec": {"shoot": {"secretBindingName": ""}}});
        assert_eq!(SourceKind::Runtime.existing_binding(&runtime), None);
        let shoot = json!({"spec": {"secretBindingName": "sb"}});
        let w = SourceKind::Shoot.watched(shoot.clone());
        assert_eq!(w.existing_binding.as_deref(), Some("sb"));
        assert_eq!(w.facts, SourceKind::Shoot.facts(&shoot));
        assert_eq!(
            w.object, None,
            "nothing of a Shoot is kept beyond what a pass reads"
        );
        let w = SourceKind::Cluster.watched(cluster.clone());
        assert_eq!(
            (&w.facts, w.object()),
            (&f, Some(cluster.clone())),
            "a Cluster is kept whole"
        );
        assert_eq!(w.cluster_config, None, "it references no ClusterConfig");
        let mut referencing = cluster.clone();
        referencing["metadata"]["name"] = json!("c1");
        referencing["spec"]["clusterConfigs"] = json!([{"name": "c1--hap"}]);
        let w = SourceKind::Cluster.watched(referencing);
        assert_eq!(w.cluster_config.as_deref(), Some("c1--hap"));
        for (uid, kept) in [
            (json!("u-1"), Some("u-1")),
            (json!(""), None),
            (Value::Null, None),
        ] {
            let shoot = json!({"metadata": {"name": "s", "uid": uid}});
            assert_eq!(SourceKind::Shoot.watched(shoot).uid.as_deref(), kept);
        }
        assert_eq!(
            SourceKind::Shoot.existing_binding(&shoot).as_deref(),
            Some("sb")
        );
    }
}
