//! Request sources in the HapConfig: the foreign objects (Gardener Shoots, openmcp Clusters, Kyma
//! Runtimes) the operator serves besides AccountClaims, how they are selected and where each field
//! of the request comes from. Types and their CRD validation only; the semantics live in
//! `crate::sources`.

use std::collections::BTreeMap;

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::patterns::{LABEL_KEY_PATTERN, NAMESPACE_PATTERN};

/// A source id: it becomes a label value on the AccountClaims the source creates.
pub const SOURCE_ID_PATTERN: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
/// A field path into the object: `spec.shoot.region`, `.spec.provider.type`, `spec.list[0]`,
/// `metadata.labels['a.b/c']`.
pub const FIELD_PATH_PATTERN: &str =
    r"^\.?[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+|\[[0-9]+\]|\['[^']+'\])*$";
/// An optional DNS subdomain prefix and a name, as label keys are written.
pub const LABEL_VALUE_OR_EMPTY_PATTERN: &str = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$";

/// Which kind of foreign object a source serves.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, JsonSchema,
)]
pub enum SourceKind {
    /// `core.gardener.cloud/v1beta1` Shoot in the binding namespace of the garden: the webhook
    /// sets `spec.credentialsBindingName` (or `spec.secretBindingName`) on CREATE.
    Shoot,
    /// `clusters.openmcp.cloud/v1alpha1` Cluster: the webhook adds a ClusterConfig reference, the
    /// operator creates that ClusterConfig with a patch that sets the Shoot's binding name.
    Cluster,
    /// `infrastructuremanager.kyma-project.io/v1` Runtime: the webhook fills an empty
    /// `spec.shoot.secretBindingName` on CREATE; a Runtime that names a binding is adopted.
    Runtime,
}

/// One request source. Sources are tried in list order; the first one whose kind and selectors
/// match an object serves it. An object no source matches is never touched.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.matchPurposes) || self.kind == 'Cluster'").message("matchPurposes applies to kind Cluster only (openmcp Clusters have spec.purposes)"))]
#[x_kube(validation = Rule::new("!has(self.serveSharedTenancy) || self.kind == 'Cluster'").message("serveSharedTenancy applies to kind Cluster only"))]
#[x_kube(validation = Rule::new("self.kind != 'Cluster' || !has(self.request) || !has(self.request.shootName)").message("request.shootName cannot be set for kind Cluster: the Shoot name is the one the openmcp Gardener provider derives"))]
#[x_kube(validation = Rule::new("self.kind != 'Cluster' || (has(self.request) && has(self.request.plan))").message("kind Cluster needs request.plan: openmcp Clusters carry no plan (use a label or a constant)"))]
pub struct RequestSource {
    /// Unique among the sources; a label value on the AccountClaims this source creates.
    /// Changing it makes it a new source: objects it already served keep their claims.
    #[schemars(length(min = 1, max = 63), regex(pattern = SOURCE_ID_PATTERN))]
    pub id: String,
    /// `Shoot`, `Cluster` (openmcp) or `Runtime` (Kyma).
    pub kind: SourceKind,
    /// Exactly these objects (`name` and `namespace`). When set, every other selector is
    /// ignored; an empty list matches nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1000))]
    pub match_identities: Option<Vec<ObjectIdentity>>,
    /// Labels the object must carry with exactly these values. (Keys and values are checked
    /// when the HapConfig is validated: a CEL rule over a map costs more than the API server
    /// allows.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_labels: Option<BTreeMap<String, String>>,
    /// Label requirements (`In`, `NotIn`, `Exists`, `DoesNotExist`), all of which must hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 100))]
    pub match_expressions: Option<Vec<LabelRequirement>>,
    /// Requirements on an openmcp Cluster's `spec.purposes` (`ContainsAll`, `ContainsAny`,
    /// `ContainsNone`, `Equals`), all of which must hold. Kind Cluster only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 100))]
    pub match_purposes: Option<Vec<PurposeRequirement>>,
    /// Also serve openmcp Clusters with `spec.tenancy: Shared` (skipped by default: a shared
    /// cluster has no single tenant). Kind Cluster only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serve_shared_tenancy: Option<bool>,
    /// Where each field of the request comes from; fields left out take the kind's default
    /// (docs/sources.md lists them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<RequestFields>,
}

/// One object, by name and namespace.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ObjectIdentity {
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    #[schemars(length(min = 1, max = 63), regex(pattern = NAMESPACE_PATTERN))]
    pub namespace: String,
}

/// A label requirement, as in a Kubernetes label selector.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.operator in ['In', 'NotIn'] ? (has(self.values) && size(self.values) > 0) : (!has(self.values) || size(self.values) == 0)").message("In and NotIn need at least one value; Exists and DoesNotExist take none"))]
pub struct LabelRequirement {
    #[schemars(length(min = 1, max = 317), regex(pattern = LABEL_KEY_PATTERN))]
    pub key: String,
    pub operator: LabelOperator,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 100), inner(length(max = 63), regex(pattern = LABEL_VALUE_OR_EMPTY_PATTERN)))]
    pub values: Option<Vec<String>>,
}

/// Operators of a label requirement.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum LabelOperator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

/// A requirement on the purposes of an openmcp Cluster.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!(self.operator in ['ContainsAll', 'ContainsAny']) || (has(self.values) && size(self.values) > 0)").message("ContainsAll and ContainsAny need at least one value"))]
pub struct PurposeRequirement {
    pub operator: PurposeOperator,
    /// Purposes; duplicates are ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 100))]
    pub values: Option<Vec<String>>,
}

/// Operators of a purpose requirement.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum PurposeOperator {
    /// Every value is among the Cluster's purposes.
    ContainsAll,
    /// At least one value is among them.
    ContainsAny,
    /// None of the values is among them.
    ContainsNone,
    /// The purposes are exactly the values (order and duplicates ignored).
    Equals,
}

/// Where each request field comes from. Unset fields take the kind's default.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RequestFields {
    /// The tenant (BTP global account); required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub global_account: Option<FieldSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subaccount: Option<FieldSource>,
    /// The service plan; required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<FieldSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform_region: Option<FieldSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_region: Option<FieldSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<FieldSource>,
    /// The Shoot the credentials are for (clusters are counted by this name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shoot_name: Option<FieldSource>,
}

/// One field's origin: exactly one of a label of the object, a field path into it, or a constant.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("(has(self.label) ? 1 : 0) + (has(self.fieldPath) ? 1 : 0) + (has(self.constant) ? 1 : 0) == 1").message("set exactly one of label, fieldPath or constant"))]
pub struct FieldSource {
    /// A label key of the object, e.g. `kyma-project.io/global-account-id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 317), regex(pattern = LABEL_KEY_PATTERN))]
    pub label: Option<String>,
    /// A path to a string field of the object, e.g. `spec.shoot.region`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256), regex(pattern = FIELD_PATH_PATTERN))]
    pub field_path: Option<String>,
    /// A fixed value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub constant: Option<String>,
    /// An object without this label or field makes a request without the value, instead of
    /// being denied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optional: Option<bool>,
}

/// What one source is doing, in the HapConfig status.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SourceStatus {
    pub id: String,
    pub kind: String,
    /// Whether the operator can watch the source's objects.
    pub watching: bool,
    /// Why it cannot, or a summary of what it serves.
    pub message: String,
    /// Objects the source's selectors match now.
    pub matching: i64,
    /// AccountClaims this source created (one per object it served).
    pub claims: i64,
    pub bound: i64,
    pub pending: i64,
    pub failed: i64,
    /// Matching objects without a binding and without a claim: created while the webhook was not
    /// called for them (its objectSelector or namespaceSelector does not cover the source).
    pub unserved: i64,
}
