//! Trimmed, read-only views of Gardener's resources. hap-operator never writes these types as a
//! whole: bindings are changed only through label patches, Shoots are only read.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Which Gardener resource holds the pool's credentials.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum BindingKind {
    /// `security.gardener.cloud/v1alpha1` CredentialsBinding (current Gardener).
    #[default]
    CredentialsBinding,
    /// `core.gardener.cloud/v1beta1` SecretBinding (deprecated in Gardener; legacy landscapes).
    SecretBinding,
}

impl BindingKind {
    /// (group, version, kind, plural) of the resource.
    pub fn gvk(self) -> (&'static str, &'static str, &'static str, &'static str) {
        match self {
            BindingKind::CredentialsBinding => (
                "security.gardener.cloud",
                "v1alpha1",
                "CredentialsBinding",
                "credentialsbindings",
            ),
            BindingKind::SecretBinding => (
                "core.gardener.cloud",
                "v1beta1",
                "SecretBinding",
                "secretbindings",
            ),
        }
    }
}

/// What a binding's credentials are: the kind its `credentialsRef` names (a SecretBinding's
/// `secretRef` is always a Secret). gardener-apiserver v1.141 accepts the first three; `Other`
/// stands for a kind a later Gardener may add, so that a binding is never dropped for it.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, JsonSchema,
)]
pub enum CredentialsKind {
    /// `v1` Secret.
    #[default]
    Secret,
    /// `security.gardener.cloud/v1alpha1` WorkloadIdentity.
    WorkloadIdentity,
    /// `core.gardener.cloud/v1beta1` InternalSecret.
    InternalSecret,
    /// A kind this version of hap-operator does not know.
    Other,
}

impl CredentialsKind {
    /// The kind of a `credentialsRef` from its `apiVersion` and `kind`, as gardener-apiserver
    /// tells them apart (by API group).
    pub fn from_ref(api_version: &str, kind: &str) -> Self {
        match (api_version, kind) {
            ("v1", "Secret") => CredentialsKind::Secret,
            ("security.gardener.cloud/v1alpha1", "WorkloadIdentity") => {
                CredentialsKind::WorkloadIdentity
            }
            ("core.gardener.cloud/v1beta1", "InternalSecret") => CredentialsKind::InternalSecret,
            _ => CredentialsKind::Other,
        }
    }

    /// The kind of a binding as the API server sends it: its `credentialsRef`, or a Secret when it
    /// has none (a SecretBinding).
    pub fn of_binding(binding: &serde_json::Value) -> Self {
        let r = &binding["credentialsRef"];
        if r.is_null() {
            return CredentialsKind::Secret;
        }
        let s = |k: &str| r[k].as_str().unwrap_or_default();
        Self::from_ref(s("apiVersion"), s("kind"))
    }

    pub fn as_str(self) -> &'static str {
        match self {
            CredentialsKind::Secret => "Secret",
            CredentialsKind::WorkloadIdentity => "WorkloadIdentity",
            CredentialsKind::InternalSecret => "InternalSecret",
            CredentialsKind::Other => "Other",
        }
    }
}

/// The part of a Shoot that cluster counting needs: which binding it uses (and, in its status,
/// the error codes that make the binding suspect).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "core.gardener.cloud",
    version = "v1beta1",
    kind = "Shoot",
    namespaced,
    status = "ShootStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct ShootSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_binding_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_binding_name: Option<String>,
}

impl ShootSpec {
    /// The binding this Shoot uses, whichever field names it.
    pub fn binding_name(&self) -> Option<&str> {
        self.credentials_binding_name
            .as_deref()
            .or(self.secret_binding_name.as_deref())
    }
}

/// The part of a Shoot's status the binding lifecycle reads: the codes of its last errors
/// (`ERR_INFRA_UNAUTHORIZED`, ...) and the last operation's type and state. Descriptions and times are skipped while decoding.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShootStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub last_errors: Vec<ShootError>,
    /// The last operation's type and state: a Create that Succeeded proves a new account.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_operation: Option<ShootOperation>,
}

/// A Shoot's `status.lastOperation`, reduced to its type and state.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct ShootOperation {
    #[serde(default, rename = "type")]
    pub type_: String,
    #[serde(default)]
    pub state: String,
}

/// One of a Shoot's last errors, reduced to its codes.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct ShootError {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub codes: Vec<String>,
}
