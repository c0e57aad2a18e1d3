//! Validation of `requestSources`: every problem at once, each naming the source (by position
//! and id), the field and the reason. The CRD's CEL rules reject most of these at apply time;
//! this is the same check for `hap validate` and for objects CEL cannot see into.

use std::collections::BTreeSet;

use super::fieldpath::FieldPath;
use super::kinds::RequestField;
use crate::api::{
    FieldSource, HapConfigSpec, LabelOperator, PurposeOperator, RequestSource, SourceKind,
};
use crate::diag::{Diagnostic, Reason, label_key_problem, label_value_problem};

fn at(i: usize, s: &RequestSource) -> String {
    format!("requestSources[{i}] `{}`", s.id)
}

fn field_origin(s: &RequestSource, f: RequestField) -> Option<&FieldSource> {
    let r = s.request.as_ref()?;
    match f {
        RequestField::GlobalAccount => r.global_account.as_ref(),
        RequestField::Subaccount => r.subaccount.as_ref(),
        RequestField::Plan => r.plan.as_ref(),
        RequestField::PlatformRegion => r.platform_region.as_ref(),
        RequestField::ClusterRegion => r.cluster_region.as_ref(),
        RequestField::Provider => r.provider.as_ref(),
        RequestField::ShootName => r.shoot_name.as_ref(),
    }
}

/// The origin of `f` for source `s`: configured, else the kind's default.
pub(super) fn origin_of(s: &RequestSource, f: RequestField) -> Option<FieldSource> {
    field_origin(s, f)
        .cloned()
        .or_else(|| s.kind.default_origin(f))
}

fn check_field(i: usize, s: &RequestSource, f: RequestField, out: &mut Vec<String>) {
    let name = f.as_str();
    if s.kind == SourceKind::Cluster && f == RequestField::ShootName {
        if field_origin(s, f).is_some() {
            out.push(format!("{}: request.shootName cannot be set for kind Cluster: the Shoot name is the one openmcp's Gardener provider derives", at(i, s)));
        }
        return;
    }
    let Some(o) = origin_of(s, f) else {
        if f.required() {
            out.push(format!(
                "{}: request.{name} is required for kind {} (set a label, fieldPath or constant)",
                at(i, s),
                s.kind.as_str()
            ));
        }
        return;
    };
    let set = [
        o.label.is_some(),
        o.field_path.is_some(),
        o.constant.is_some(),
    ];
    if set.iter().filter(|x| **x).count() != 1 {
        out.push(format!(
            "{}: request.{name}: set exactly one of label, fieldPath or constant",
            at(i, s)
        ));
        return;
    }
    if let Some(k) = &o.label
        && let Some(p) = label_key_problem(k)
    {
        out.push(format!(
            "{}: request.{name}.label: `{k}` is not a valid label key: {p}",
            at(i, s)
        ));
    }
    if let Some(p) = &o.field_path
        && let Err(e) = FieldPath::parse(p)
    {
        out.push(format!("{}: request.{name}.fieldPath `{p}`: {e}", at(i, s)));
    }
    if let Some(c) = &o.constant
        && let Some(p) = super::derive::value_problem(f, c)
    {
        out.push(format!("{}: request.{name}.constant: {p}", at(i, s)));
    }
    if o.optional == Some(true) && f.required() {
        out.push(format!(
            "{}: request.{name} cannot be optional: every request needs a {name}",
            at(i, s)
        ));
    }
}

/// `matchExpressions`: each key and value a valid label key or value, and each operator with
/// the number of values it takes.
fn check_expressions(i: usize, s: &RequestSource, out: &mut Vec<String>) {
    for (j, e) in s.match_expressions.iter().flatten().enumerate() {
        let values = e.values.as_deref().unwrap_or_default();
        if let Some(p) = label_key_problem(&e.key) {
            out.push(format!(
                "{}: matchExpressions[{j}].key `{}`: {p}",
                at(i, s),
                e.key
            ));
        }
        match e.operator {
            LabelOperator::In | LabelOperator::NotIn if values.is_empty() => out.push(format!(
                "{}: matchExpressions[{j}]: {:?} needs at least one value",
                at(i, s),
                e.operator
            )),
            LabelOperator::Exists | LabelOperator::DoesNotExist if !values.is_empty() => {
                out.push(format!(
                    "{}: matchExpressions[{j}]: {:?} takes no values",
                    at(i, s),
                    e.operator
                ))
            }
            _ => {}
        }
        for v in values.iter().filter(|v| !v.is_empty()) {
            if let Some(p) = label_value_problem(v) {
                out.push(format!(
                    "{}: matchExpressions[{j}] value `{v}` {p}",
                    at(i, s)
                ));
            }
        }
    }
}

/// The selectors of one source: label syntax, operators, and the fields only a Cluster has.
fn check_selectors(i: usize, s: &RequestSource, out: &mut Vec<String>) {
    for (k, v) in s.match_labels.iter().flatten() {
        if let Some(p) = label_key_problem(k) {
            out.push(format!("{}: matchLabels key `{k}`: {p}", at(i, s)));
        }
        if !v.is_empty()
            && let Some(p) = label_value_problem(v)
        {
            out.push(format!("{}: matchLabels[{k}] `{v}` {p}", at(i, s)));
        }
    }
    check_expressions(i, s, out);
    if s.kind != SourceKind::Cluster {
        if s.match_purposes.is_some() {
            out.push(format!(
                "{}: matchPurposes applies to kind Cluster only (openmcp Clusters have spec.purposes)",
                at(i, s)
            ));
        }
        if s.serve_shared_tenancy.is_some() {
            out.push(format!(
                "{}: serveSharedTenancy applies to kind Cluster only",
                at(i, s)
            ));
        }
    }
    for (j, p) in s.match_purposes.iter().flatten().enumerate() {
        let empty = p.values.as_deref().unwrap_or_default().is_empty();
        if empty
            && matches!(
                p.operator,
                PurposeOperator::ContainsAll | PurposeOperator::ContainsAny
            )
        {
            out.push(format!(
                "{}: matchPurposes[{j}]: {:?} needs at least one value",
                at(i, s),
                p.operator
            ));
        }
    }
    for (j, id) in s.match_identities.iter().flatten().enumerate() {
        if id.name.is_empty() || id.namespace.is_empty() {
            out.push(format!(
                "{}: matchIdentities[{j}]: name and namespace are both required",
                at(i, s)
            ));
        }
    }
}

/// Every problem of the spec's request sources.
pub fn validate(spec: &HapConfigSpec) -> Vec<Diagnostic> {
    let Some(sources) = spec.request_sources.as_deref() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut ids = BTreeSet::new();
    for (i, s) in sources.iter().enumerate() {
        if let Some(p) = super::derive::dns_label_problem(&s.id, 63) {
            out.push(format!("requestSources[{i}].id `{}` {p}", s.id));
        }
        if !ids.insert(s.id.as_str()) {
            out.push(format!(
                "{}: the id is used by an earlier source; ids must be unique",
                at(i, s)
            ));
        }
        check_selectors(i, s, &mut out);
        for f in RequestField::ALL {
            check_field(i, s, f, &mut out);
        }
        if s.kind == SourceKind::Shoot
            && spec
                .shoot_namespace
                .as_ref()
                .is_some_and(|n| *n != spec.binding_namespace)
        {
            out.push(format!(
                "{}: a Shoot source needs shootNamespace equal to bindingNamespace `{}`: a Shoot can only use a binding of its own project namespace",
                at(i, s),
                spec.binding_namespace
            ));
        }
    }
    out.into_iter()
        .map(|m| Diagnostic::global(Reason::InvalidConfig, m))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> HapConfigSpec {
        let mut s: HapConfigSpec = serde_saphyr::from_str(yaml).expect("spec");
        s.rules = Some(vec!["aws".into()]);
        s
    }

    #[test]
    fn every_problem_is_reported_with_source_field_and_reason() {
        let s = spec(
            r#"
bindingNamespace: garden-kyma
shootNamespace: garden-other
requestSources:
- id: Bad_Id
  kind: Shoot
  matchPurposes: [{operator: Equals}]
  matchExpressions: [{key: a, operator: In}, {key: b, operator: Exists, values: [x]}]
  request:
    plan: {label: "no spaces allowed", constant: aws}
    clusterRegion: {fieldPath: "spec..region"}
    globalAccount: {label: ga, optional: true}
- id: mcp
  kind: Cluster
  request: {shootName: {constant: s}}
- id: mcp
  kind: Runtime
  request: {provider: {constant: "Not-A-Provider"}}
"#,
        );
        let got: Vec<String> = validate(&s).iter().map(|d| d.message.clone()).collect();
        let want = [
            "requestSources[0].id `Bad_Id` is not a DNS label (lowercase letters, digits and `-`, starting and ending with a letter or digit)",
            "requestSources[0] `Bad_Id`: matchExpressions[0]: In needs at least one value",
            "requestSources[0] `Bad_Id`: matchExpressions[1]: Exists takes no values",
            "requestSources[0] `Bad_Id`: matchPurposes applies to kind Cluster only (openmcp Clusters have spec.purposes)",
            "requestSources[0] `Bad_Id`: request.globalAccount cannot be optional: every request needs a globalAccount",
            "requestSources[0] `Bad_Id`: request.plan: set exactly one of label, fieldPath or constant",
            "requestSources[0] `Bad_Id`: request.clusterRegion.fieldPath `spec..region`: column 6: expected a field name (letters, digits, `_`, `-`)",
            "requestSources[0] `Bad_Id`: a Shoot source needs shootNamespace equal to bindingNamespace `garden-kyma`: a Shoot can only use a binding of its own project namespace",
            "requestSources[1] `mcp`: request.plan is required for kind Cluster (set a label, fieldPath or constant)",
            "requestSources[1] `mcp`: request.shootName cannot be set for kind Cluster: the Shoot name is the one openmcp's Gardener provider derives",
            "requestSources[2] `mcp`: the id is used by an earlier source; ids must be unique",
            "requestSources[2] `mcp`: request.provider.constant: `Not-A-Provider` is not a DNS label (lowercase letters, digits and `-`, starting and ending with a letter or digit)",
        ];
        assert_eq!(got, want);
        assert!(
            validate(&spec(
                "bindingNamespace: g\nrequestSources: [{id: s, kind: Shoot}]"
            ))
            .is_empty()
        );
    }
}
