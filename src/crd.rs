//! The CustomResourceDefinitions hap-operator installs, generated from the Rust types.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use serde_json::Value;

use crate::api::{AccountClaim, HapConfig};

/// Every CRD of the product, in install order.
pub fn all() -> Vec<CustomResourceDefinition> {
    vec![HapConfig::crd(), AccountClaim::crd()]
}

/// Why the CRDs could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("encoding a CRD as JSON")]
    Json(#[from] serde_json::Error),
    #[error("encoding a CRD as YAML")]
    Yaml(#[from] serde_saphyr::ser::Error),
}

/// The CRDs as one multi-document YAML stream, exactly what `crds/` holds.
pub fn render_yaml() -> Result<String, RenderError> {
    let mut out = String::new();
    for crd in all() {
        let mut value = serde_json::to_value(&crd)?;
        reflow_descriptions(&mut value);
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(&value)?);
    }
    Ok(out)
}

/// Doc comments are wrapped at 100 columns in the source; `kubectl explain` wraps on its own, so
/// single line breaks become spaces and only paragraph breaks stay.
fn reflow_descriptions(v: &mut Value) {
    match v {
        Value::Object(map) => {
            for (k, child) in map.iter_mut() {
                match child {
                    Value::String(s) if k == "description" => *s = reflow(s),
                    _ => reflow_descriptions(child),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(reflow_descriptions),
        _ => {}
    }
}

fn reflow(s: &str) -> String {
    s.split("\n\n")
        .map(|para| {
            para.split('\n')
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect::<Vec<_>>()
        .join("\n\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reflow_joins_lines_and_keeps_paragraphs() {
        assert_eq!(reflow("a\nb\n\nc\n d"), "a b\n\nc d");
        let mut v = serde_json::json!({"description": "x\ny", "properties": {"f": {"description": "p\nq"}}});
        reflow_descriptions(&mut v);
        assert_eq!(v["description"], "x y");
        assert_eq!(v["properties"]["f"]["description"], "p q");
    }
}
