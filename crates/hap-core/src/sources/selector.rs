//! Which objects a request source serves: the openmcp selector model of seed
//! 003_4da11fbf9ab9a250.txt (`matchIdentities`, `matchLabels`, `matchExpressions`,
//! `matchPurposes`), plus the tenancy filter of openmcp Clusters.
//!
//! - `matchIdentities` set: only it counts (name and namespace equal); an empty list matches
//!   nothing. An object whose name is still to be generated matches no identity.
//! - Otherwise labels AND purposes: `matchLabels` entries are `In [value]` requirements, ANDed
//!   with `matchExpressions` (`NotIn` and `DoesNotExist` hold for an absent key); purpose
//!   requirements are ANDed, purposes are a set (`Equals` ignores order and duplicates).
//! - No selector at all: every object of the kind.

use std::collections::{BTreeMap, BTreeSet};

use crate::api::{LabelOperator, PurposeOperator, RequestSource};

/// The facts of an object that selection reads.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectFacts {
    pub namespace: String,
    /// `None` while the API server has still to generate it (`metadata.generateName`).
    pub name: Option<String>,
    pub labels: BTreeMap<String, String>,
    /// openmcp Cluster `spec.purposes` (empty for other kinds).
    pub purposes: Vec<String>,
    /// openmcp Cluster `spec.tenancy`.
    pub tenancy: Option<String>,
}

/// One label requirement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LabelReq {
    In(String, BTreeSet<String>),
    NotIn(String, BTreeSet<String>),
    Exists(String),
    DoesNotExist(String),
}

impl LabelReq {
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            LabelReq::In(k, vs) => labels.get(k).is_some_and(|v| vs.contains(v)),
            LabelReq::NotIn(k, vs) => labels.get(k).is_none_or(|v| !vs.contains(v)),
            LabelReq::Exists(k) => labels.contains_key(k),
            LabelReq::DoesNotExist(k) => !labels.contains_key(k),
        }
    }
}

/// One purpose requirement; values are a set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PurposeReq {
    pub operator: PurposeOperator,
    pub values: BTreeSet<String>,
}

impl PurposeReq {
    pub fn matches(&self, purposes: &BTreeSet<&str>) -> bool {
        let values = || self.values.iter().map(String::as_str);
        match self.operator {
            PurposeOperator::ContainsAll => values().all(|v| purposes.contains(v)),
            PurposeOperator::ContainsAny => values().any(|v| purposes.contains(v)),
            PurposeOperator::ContainsNone => !values().any(|v| purposes.contains(v)),
            PurposeOperator::Equals => {
                purposes.len() == self.values.len() && values().all(|v| purposes.contains(v))
            }
        }
    }
}

/// A compiled selector.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SourceSelector {
    /// `(namespace, name)` pairs; `Some(empty)` matches nothing.
    pub identities: Option<BTreeSet<(String, String)>>,
    pub labels: Vec<LabelReq>,
    pub purposes: Vec<PurposeReq>,
    /// Skip objects with `spec.tenancy: Shared` (openmcp Clusters unless configured).
    pub skip_shared_tenancy: bool,
}

/// The openmcp tenancy value of a cluster shared by several tenants.
pub const SHARED_TENANCY: &str = "Shared";

impl SourceSelector {
    /// Compiles the selector fields of a source. Shape errors (empty `In` values and the like)
    /// are reported by validation; here they compile to what they literally say.
    pub fn from_source(src: &RequestSource) -> Self {
        let identities = src.match_identities.as_ref().map(|ids| {
            ids.iter()
                .map(|i| (i.namespace.clone(), i.name.clone()))
                .collect()
        });
        let mut labels: Vec<LabelReq> = src
            .match_labels
            .iter()
            .flatten()
            .map(|(k, v)| LabelReq::In(k.clone(), BTreeSet::from([v.clone()])))
            .collect();
        for e in src.match_expressions.iter().flatten() {
            let values: BTreeSet<String> = e.values.iter().flatten().cloned().collect();
            let key = e.key.clone();
            labels.push(match e.operator {
                LabelOperator::In => LabelReq::In(key, values),
                LabelOperator::NotIn => LabelReq::NotIn(key, values),
                LabelOperator::Exists => LabelReq::Exists(key),
                LabelOperator::DoesNotExist => LabelReq::DoesNotExist(key),
            });
        }
        let purposes = src
            .match_purposes
            .iter()
            .flatten()
            .map(|p| PurposeReq {
                operator: p.operator,
                values: p.values.iter().flatten().cloned().collect(),
            })
            .collect();
        Self {
            identities,
            labels,
            purposes,
            skip_shared_tenancy: src.kind == crate::api::SourceKind::Cluster
                && !src.serve_shared_tenancy.unwrap_or(false),
        }
    }

    pub fn matches(&self, obj: &ObjectFacts) -> bool {
        if self.skip_shared_tenancy && obj.tenancy.as_deref() == Some(SHARED_TENANCY) {
            return false;
        }
        if let Some(ids) = &self.identities {
            return obj
                .name
                .as_ref()
                .is_some_and(|n| ids.contains(&(obj.namespace.clone(), n.clone())));
        }
        let purposes: BTreeSet<&str> = obj.purposes.iter().map(String::as_str).collect();
        self.labels.iter().all(|r| r.matches(&obj.labels))
            && self.purposes.iter().all(|r| r.matches(&purposes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{
        LabelRequirement, ObjectIdentity, PurposeRequirement, RequestSource, SourceKind,
    };

    fn source(kind: SourceKind) -> RequestSource {
        RequestSource {
            id: "s".into(),
            kind,
            match_identities: None,
            match_labels: None,
            match_expressions: None,
            match_purposes: None,
            serve_shared_tenancy: None,
            request: None,
        }
    }

    fn obj(ns: &str, name: &str, labels: &[(&str, &str)], purposes: &[&str]) -> ObjectFacts {
        ObjectFacts {
            namespace: ns.into(),
            name: Some(name.into()),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            purposes: purposes.iter().map(|p| p.to_string()).collect(),
            tenancy: Some("Exclusive".into()),
        }
    }

    #[test]
    fn the_seed_example_selects_test_clusters_without_the_listed_purposes() {
        // Rule `test` of the seed's IPAMConfig example.
        let mut s = source(SourceKind::Cluster);
        s.match_labels = Some([("clusters.openmcp.cloud/test".into(), "true".into())].into());
        s.match_purposes = Some(vec![PurposeRequirement {
            operator: PurposeOperator::ContainsNone,
            values: Some(vec![
                "mcp".into(),
                "onboarding".into(),
                "platform".into(),
                "workload".into(),
            ]),
        }]);
        let sel = SourceSelector::from_source(&s);
        let test = [("clusters.openmcp.cloud/test", "true")];
        assert!(sel.matches(&obj("a", "c", &test, &["test"])));
        assert!(!sel.matches(&obj("a", "c", &test, &["test", "mcp"])));
        assert!(!sel.matches(&obj("a", "c", &[], &["test"])));
        let wrong = [("clusters.openmcp.cloud/test", "false")];
        assert!(!sel.matches(&obj("a", "c", &wrong, &[])));
    }

    #[test]
    fn identities_decide_alone_and_an_empty_list_matches_nothing() {
        let mut s = source(SourceKind::Runtime);
        s.match_labels = Some([("never".into(), "there".into())].into());
        s.match_identities = Some(vec![ObjectIdentity {
            name: "r1".into(),
            namespace: "kcp".into(),
        }]);
        let sel = SourceSelector::from_source(&s);
        assert!(sel.matches(&obj("kcp", "r1", &[], &[])));
        assert!(!sel.matches(&obj("other", "r1", &[], &[])));
        let unnamed = ObjectFacts {
            name: None,
            ..obj("kcp", "r1", &[], &[])
        };
        assert!(!sel.matches(&unnamed));
        s.match_identities = Some(vec![]);
        assert!(!SourceSelector::from_source(&s).matches(&obj("kcp", "r1", &[], &[])));
        s.match_identities = None;
        s.match_labels = None;
        assert!(SourceSelector::from_source(&s).matches(&obj("kcp", "r1", &[], &[])));
    }

    #[test]
    fn expressions_follow_kubernetes_label_selectors() {
        let mut s = source(SourceKind::Shoot);
        let req = |key: &str, operator, values: &[&str]| LabelRequirement {
            key: key.into(),
            operator,
            values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
        };
        s.match_expressions = Some(vec![
            req("plan", LabelOperator::In, &["aws", "gcp"]),
            req("stage", LabelOperator::NotIn, &["dev"]),
            req("ga", LabelOperator::Exists, &[]),
            req("skip", LabelOperator::DoesNotExist, &[]),
        ]);
        let sel = SourceSelector::from_source(&s);
        assert!(sel.matches(&obj("n", "x", &[("plan", "aws"), ("ga", "1")], &[])));
        assert!(sel.matches(&obj(
            "n",
            "x",
            &[("plan", "gcp"), ("ga", "1"), ("stage", "prod")],
            &[]
        )));
        assert!(!sel.matches(&obj("n", "x", &[("plan", "azure"), ("ga", "1")], &[])));
        assert!(!sel.matches(&obj(
            "n",
            "x",
            &[("plan", "aws"), ("ga", "1"), ("stage", "dev")],
            &[]
        )));
        assert!(!sel.matches(&obj("n", "x", &[("plan", "aws")], &[])));
        assert!(!sel.matches(&obj(
            "n",
            "x",
            &[("plan", "aws"), ("ga", "1"), ("skip", "")],
            &[]
        )));
    }

    #[test]
    fn purposes_are_sets_and_shared_tenancy_is_skipped_unless_configured() {
        let mut s = source(SourceKind::Cluster);
        s.match_purposes = Some(vec![PurposeRequirement {
            operator: PurposeOperator::Equals,
            values: Some(vec!["mcp".into(), "workload".into(), "mcp".into()]),
        }]);
        let sel = SourceSelector::from_source(&s);
        assert!(sel.matches(&obj("n", "c", &[], &["workload", "mcp", "workload"])));
        assert!(!sel.matches(&obj("n", "c", &[], &["mcp"])));
        let shared = ObjectFacts {
            tenancy: Some(SHARED_TENANCY.into()),
            ..obj("n", "c", &[], &["mcp", "workload"])
        };
        assert!(!sel.matches(&shared));
        s.serve_shared_tenancy = Some(true);
        assert!(SourceSelector::from_source(&s).matches(&shared));
    }
}
