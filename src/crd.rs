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
        unvalidated_status(&mut value);
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(&value)?);
    }
    Ok(out)
}

/// The status only holds what the operator computed, and `status.activeSpec` a copy of a spec
/// the API server already validated: validation rules there would check nothing new, and the
/// API server's cost budget for the whole schema counts them (the policy rules of the spec need
/// most of it). Schema types, patterns and limits stay.
fn unvalidated_status(v: &mut Value) {
    let Some(versions) = v
        .pointer_mut("/spec/versions")
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    for version in versions {
        if let Some(status) = version.pointer_mut("/schema/openAPIV3Schema/properties/status") {
            strip_validations(status);
        }
    }
}

fn strip_validations(v: &mut Value) {
    match v {
        Value::Object(map) => {
            map.remove("x-kubernetes-validations");
            map.values_mut().for_each(strip_validations);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_validations),
        _ => {}
    }
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
    fn status_has_no_validation_rules_and_the_spec_keeps_them() {
        let mut v = serde_json::json!({"spec": {"versions": [{"schema": {"openAPIV3Schema": {"properties": {
            "spec": {"x-kubernetes-validations": [{"rule": "true"}]},
            "status": {"properties": {"activeSpec": {"x-kubernetes-validations": [{"rule": "true"}],
                "properties": {"rules": {"items": {"x-kubernetes-validations": [], "maxLength": 256}}}}}}
        }}}}]}});
        unvalidated_status(&mut v);
        let schema = &v["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"];
        assert!(schema["spec"]["x-kubernetes-validations"].is_array());
        let text = schema["status"].to_string();
        assert!(
            !text.contains("x-kubernetes-validations") && text.contains("maxLength"),
            "{text}"
        );
    }

    #[test]
    fn reflow_joins_lines_and_keeps_paragraphs() {
        assert_eq!(reflow("a\nb\n\nc\n d"), "a b\n\nc d");
        let mut v = serde_json::json!({"description": "x\ny", "properties": {"f": {"description": "p\nq"}}});
        reflow_descriptions(&mut v);
        assert_eq!(v["description"], "x y");
        assert_eq!(v["properties"]["f"]["description"], "p q");
    }
}
