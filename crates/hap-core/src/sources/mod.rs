//! Request sources: foreign requests — Gardener Shoots, openmcp Clusters, Kyma
//! Runtimes — served through the same core as AccountClaims. Each served object becomes an
//! AccountClaim the operator creates, so apply-once, counting, limits, BindingLost and release
//! apply unchanged; this module only decides which objects are served, what they request, what
//! the admission answer is and what is written back. Pure: plain data in, decisions out.

pub mod admission;
pub mod adopt;
pub mod clusterconfig;
pub mod derive;
pub mod fieldpath;
pub mod kinds;
pub mod naming;
pub mod selector;
pub mod sync;
mod validate;

#[cfg(test)]
mod admission_tests;
#[cfg(test)]
mod sync_tests;

use serde_json::Value;

use crate::api::{HapConfigSpec, RequestSource, SourceKind};
use crate::diag::Diagnostic;
use derive::{CompiledField, FieldProblem, Origin};
use fieldpath::FieldPath;
use kinds::RequestField;
use selector::{ObjectFacts, SourceSelector};

pub use validate::validate;

/// One source, ready to match and derive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompiledSource {
    pub id: String,
    pub kind: SourceKind,
    pub selector: SourceSelector,
    pub fields: Vec<CompiledField>,
}

impl CompiledSource {
    fn compile(s: &RequestSource) -> Self {
        let mut fields = Vec::new();
        for f in RequestField::ALL {
            if s.kind == SourceKind::Cluster && f == RequestField::ShootName {
                fields.push(CompiledField {
                    field: f,
                    origin: Origin::OpenMcpShootName,
                    optional: true,
                });
                continue;
            }
            let Some(o) = validate::origin_of(s, f) else {
                continue;
            };
            let origin = if let Some(k) = o.label {
                Origin::Label(k)
            } else if let Some(p) = o
                .field_path
                .as_deref()
                .and_then(|p| FieldPath::parse(p).ok())
            {
                Origin::Path(p)
            } else if let Some(c) = o.constant {
                Origin::Constant(c)
            } else {
                continue;
            };
            fields.push(CompiledField {
                field: f,
                origin,
                optional: o.optional.unwrap_or(false) && !f.required(),
            });
        }
        Self {
            id: s.id.clone(),
            kind: s.kind,
            selector: SourceSelector::from_source(s),
            fields,
        }
    }

    /// The request `obj` makes through this source.
    pub fn derive(&self, obj: &Value) -> Result<crate::api::AccountClaimSpec, Vec<FieldProblem>> {
        derive::derive(&self.fields, self.kind, obj)
    }
}

/// The request sources of the config in force, in list order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CompiledSources(Vec<CompiledSource>);

impl CompiledSources {
    /// Validates and compiles the sources of a spec alone; `Err` carries every problem. The
    /// config in force compiles them once, with its rules (`CompiledRules::sources`).
    pub fn from_spec(spec: &HapConfigSpec) -> Result<Self, Vec<Diagnostic>> {
        let problems = validate(spec);
        if !problems.is_empty() {
            return Err(problems);
        }
        Ok(Self::of_valid(spec))
    }

    /// The sources of a spec `validate` found no problem in.
    pub(crate) fn of_valid(spec: &HapConfigSpec) -> Self {
        Self(
            spec.request_sources
                .iter()
                .flatten()
                .map(CompiledSource::compile)
                .collect(),
        )
    }

    pub fn iter(&self) -> impl Iterator<Item = &CompiledSource> {
        self.0.iter()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The source that serves an object: the first of its kind whose selectors match.
    pub fn serving(&self, kind: SourceKind, facts: &ObjectFacts) -> Option<&CompiledSource> {
        self.0
            .iter()
            .find(|s| s.kind == kind && s.selector.matches(facts))
    }
}
