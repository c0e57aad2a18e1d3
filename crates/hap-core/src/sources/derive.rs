//! Derivation of a request from an object: each field from the label, field path or constant
//! its source names, checked as an AccountClaim would check it. Every problem names the place
//! in the object and the request field, so an admission denial tells the user what to fix.

use std::fmt;

use serde_json::Value;

use super::fieldpath::FieldPath;
use super::kinds::RequestField;
use super::naming::openmcp_shoot_name;
use crate::api::{AccountClaimSpec, SourceKind};

/// Where one request field comes from, compiled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    Label(String),
    Path(FieldPath),
    Constant(String),
    /// The Shoot name openmcp's Gardener provider derives from a Cluster.
    OpenMcpShootName,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Label(k) => write!(f, "metadata.labels['{k}']"),
            Origin::Path(p) => write!(f, "{p}"),
            Origin::Constant(c) => write!(f, "the constant `{c}`"),
            Origin::OpenMcpShootName => f.write_str("the Shoot name openmcp derives"),
        }
    }
}

/// One field of a source's request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompiledField {
    pub field: RequestField,
    pub origin: Origin,
    pub optional: bool,
}

/// Why a request cannot be derived from an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldProblem {
    pub field: RequestField,
    /// Where in the object (`metadata.labels['x']`, `spec.shoot.region`).
    pub at: String,
    pub problem: String,
}

impl fmt::Display for FieldProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} (it is the request's {})",
            self.at,
            self.problem,
            self.field.as_str()
        )
    }
}

/// Why `value` cannot be the request field, or `None`.
pub fn value_problem(field: RequestField, value: &str) -> Option<String> {
    let len = value.chars().count();
    match field {
        RequestField::Subaccount => (len > 253)
            .then(|| format!("`{value}` is {len} characters long; at most 253 are allowed")),
        RequestField::Plan => plan_problem(value).map(|p| format!("`{value}` {p}")),
        RequestField::Provider => dns_label_problem(value, 32).map(|p| format!("`{value}` {p}")),
        RequestField::ShootName => dns_label_problem(value, 63).map(|p| format!("`{value}` {p}")),
        RequestField::GlobalAccount
        | RequestField::PlatformRegion
        | RequestField::ClusterRegion => {
            crate::diag::label_value_problem(value).map(|p| format!("`{value}` {p}"))
        }
    }
}

fn plan_problem(v: &str) -> Option<String> {
    let ok_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_';
    let ends = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    if v.is_empty() || v.len() > 63 {
        return Some("is not a plan name (1 to 63 characters)".into());
    }
    (!v.chars().all(ok_char) || !ends(v.chars().next()) || !ends(v.chars().last())).then(|| {
        "is not a plan name (lowercase letters, digits, `-` and `_`, starting and ending with a letter or digit)".into()
    })
}

pub(super) fn dns_label_problem(v: &str, max: usize) -> Option<String> {
    let ok_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
    let ends = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    if v.is_empty() || v.len() > max {
        return Some(format!("is not a DNS label of 1 to {max} characters"));
    }
    (!v.chars().all(ok_char) || !ends(v.chars().next()) || !ends(v.chars().last())).then(|| {
        "is not a DNS label (lowercase letters, digits and `-`, starting and ending with a letter or digit)".into()
    })
}

/// Reads one field from the object. `Ok(None)`: absent and allowed to be.
fn read(f: &CompiledField, kind: SourceKind, obj: &Value) -> Result<Option<String>, FieldProblem> {
    let problem = |p: String| FieldProblem {
        field: f.field,
        at: f.origin.to_string(),
        problem: p,
    };
    let raw = match &f.origin {
        Origin::Constant(c) => Some(c.clone()),
        Origin::Label(k) => match obj.pointer("/metadata/labels").and_then(|l| l.get(k)) {
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => return Err(problem("is not a string".into())),
            None => None,
        },
        Origin::Path(p) => match p.lookup(obj) {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Null) | None => None,
            Some(other) => {
                let what = match other {
                    Value::Bool(_) => "a boolean",
                    Value::Number(_) => "a number",
                    Value::Array(_) => "a list",
                    _ => "an object",
                };
                return Err(problem(format!("is {what}, not a string")));
            }
        },
        Origin::OpenMcpShootName => {
            let facts = kind.facts(obj);
            facts
                .name
                .map(|n| openmcp_shoot_name(&facts.namespace, &n, &facts.labels))
        }
    };
    match raw.filter(|s| !s.is_empty()) {
        Some(v) => match value_problem(f.field, &v) {
            Some(p) => Err(problem(p)),
            None => Ok(Some(v)),
        },
        None if f.optional => Ok(None),
        None => Err(problem(
            "is missing or empty, and the request needs it".into(),
        )),
    }
}

/// The request an object makes, or every problem with it.
pub fn derive(
    fields: &[CompiledField],
    kind: SourceKind,
    obj: &Value,
) -> Result<AccountClaimSpec, Vec<FieldProblem>> {
    let mut spec = AccountClaimSpec::default();
    let mut problems = Vec::new();
    for f in fields {
        match read(f, kind, obj) {
            Ok(v) => {
                let slot = match f.field {
                    RequestField::GlobalAccount => {
                        spec.global_account = v.unwrap_or_default();
                        continue;
                    }
                    RequestField::Plan => {
                        spec.plan = v.unwrap_or_default();
                        continue;
                    }
                    RequestField::Subaccount => &mut spec.subaccount,
                    RequestField::PlatformRegion => &mut spec.platform_region,
                    RequestField::ClusterRegion => &mut spec.cluster_region,
                    RequestField::Provider => &mut spec.provider,
                    RequestField::ShootName => &mut spec.shoot_name,
                };
                *slot = v;
            }
            Err(p) => problems.push(p),
        }
    }
    if problems.is_empty() {
        Ok(spec)
    } else {
        Err(problems)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn label(field: RequestField, k: &str) -> CompiledField {
        CompiledField {
            field,
            origin: Origin::Label(k.into()),
            optional: false,
        }
    }

    fn path(field: RequestField, p: &str) -> CompiledField {
        CompiledField {
            field,
            origin: Origin::Path(FieldPath::parse(p).expect("path")),
            optional: false,
        }
    }

    #[test]
    fn a_kyma_runtime_becomes_a_request() {
        let fields = vec![
            label(
                RequestField::GlobalAccount,
                "kyma-project.io/global-account-id",
            ),
            label(RequestField::Plan, "kyma-project.io/broker-plan-name"),
            path(RequestField::ClusterRegion, "spec.shoot.region"),
            path(RequestField::Provider, "spec.shoot.provider.type"),
            CompiledField {
                optional: true,
                ..label(
                    RequestField::PlatformRegion,
                    "kyma-project.io/platform-region",
                )
            },
        ];
        let rt = json!({
            "metadata": {"labels": {"kyma-project.io/global-account-id": "ga-1", "kyma-project.io/broker-plan-name": "aws"}},
            "spec": {"shoot": {"region": "eu-central-1", "provider": {"type": "aws"}}},
        });
        let spec = derive(&fields, SourceKind::Runtime, &rt).expect("derives");
        assert_eq!(spec.global_account, "ga-1");
        assert_eq!(spec.plan, "aws");
        assert_eq!(spec.cluster_region.as_deref(), Some("eu-central-1"));
        assert_eq!(spec.provider.as_deref(), Some("aws"));
        assert_eq!(spec.platform_region, None);
    }

    #[test]
    fn every_problem_names_the_place_and_the_field() {
        let fields = vec![
            label(RequestField::GlobalAccount, "ga"),
            label(RequestField::Plan, "plan"),
            path(RequestField::ClusterRegion, "spec.region"),
            path(RequestField::Provider, "spec.provider"),
        ];
        let obj = json!({
            "metadata": {"labels": {"plan": "Not A Plan"}},
            "spec": {"region": "", "provider": {"type": "aws"}},
        });
        let problems = derive(&fields, SourceKind::Shoot, &obj).expect_err("invalid");
        let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            vec![
                "metadata.labels['ga']: is missing or empty, and the request needs it (it is the request's globalAccount)",
                "metadata.labels['plan']: `Not A Plan` is not a plan name (lowercase letters, digits, `-` and `_`, starting and ending with a letter or digit) (it is the request's plan)",
                "spec.region: is missing or empty, and the request needs it (it is the request's clusterRegion)",
                "spec.provider: is an object, not a string (it is the request's provider)",
            ]
        );
    }

    #[test]
    fn the_openmcp_shoot_name_needs_the_cluster_name() {
        let f = vec![CompiledField {
            field: RequestField::ShootName,
            origin: Origin::OpenMcpShootName,
            optional: true,
        }];
        let named = json!({"metadata": {"name": "c", "namespace": "p"}});
        let spec = derive(&f, SourceKind::Cluster, &named).expect("derives");
        assert!(spec.shoot_name.is_some_and(|s| s.starts_with("s-")));
        let generated = json!({"metadata": {"generateName": "c-", "namespace": "p"}});
        assert_eq!(
            derive(&f, SourceKind::Cluster, &generated)
                .expect("derives")
                .shoot_name,
            None
        );
    }
}
