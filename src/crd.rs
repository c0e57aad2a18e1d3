//! The CustomResourceDefinitions hap-operator installs, generated from the Rust types.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use crate::api::{AccountClaim, HapConfig};

/// Every CRD of the product, in install order.
pub fn all() -> Vec<CustomResourceDefinition> {
    vec![HapConfig::crd(), AccountClaim::crd()]
}

/// The CRDs as one multi-document YAML stream, exactly what `crds/` holds.
pub fn render_yaml() -> Result<String, serde_saphyr::ser::Error> {
    let mut out = String::new();
    for crd in all() {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(&crd)?);
    }
    Ok(out)
}
