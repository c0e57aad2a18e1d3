//! The observe report: what hap-operator would have chosen for every request of a landscape
//! against what is in use there (the binding KEB chose), per request and per tenant. Pure: facts
//! in, rows out; `hap migrate --report` reads the facts from a live cluster and writes nothing.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::labels::{PoolKey, ResolvedLabelKeys};
use crate::pools::Inventory;
use crate::rules::{CompiledRules, EvalError, Request};
use crate::selection::describe_pool;
use crate::small_map::SmallMap;
use crate::sources::adopt::{Adoption, adopt_labels};

/// One request as the landscape holds it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Observed {
    /// `Runtime`, `Shoot` or `AccountClaim`.
    pub kind: String,
    /// `namespace/name`.
    pub object: String,
    /// The global account the object names, when it names one.
    pub global_account: Option<String>,
    /// The plan; a request without one (a Shoot KIM created) is checked for tenancy only.
    pub plan: Option<String>,
    pub platform_region: Option<String>,
    pub cluster_region: Option<String>,
    pub provider: Option<String>,
    /// The binding it uses (KEB's choice); `None`: not served yet.
    pub binding: Option<String>,
}

impl Observed {
    /// The rules' request; `None` without a plan.
    pub fn as_request(&self) -> Option<Request<'_>> {
        Some(Request {
            plan: self.plan.as_deref()?,
            platform_region: self.platform_region.as_deref(),
            cluster_region: self.cluster_region.as_deref(),
            provider: self.provider.as_deref(),
            global_account: self.global_account.as_deref(),
        })
    }
}

/// How the operator's choice compares with what is in use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Verdict {
    /// The binding in use is the tenant's and in a pool the rules give the request.
    Agrees,
    /// The binding is the tenant's (it would be adopted as it is) but the rules would have
    /// chosen another pool for a new request.
    OtherPool,
    /// The operator would not adopt the binding (another tenant's, unlabelled, dirty, gone).
    NotAdoptable,
    /// The rules deny the request or have no entry for it.
    Refused,
    /// Not served yet: the row says which pool the operator would serve it from.
    WouldServe,
    /// Served, no plan known: only tenancy was checked, and it holds.
    TenancyOnly,
}

/// One request of the report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Row {
    pub kind: String,
    pub object: String,
    pub tenant: String,
    pub in_use: Option<String>,
    pub in_use_pool: Option<String>,
    /// The pools the rules give the request, in order (empty when refused or unknown).
    pub would_use: Vec<String>,
    pub verdict: Verdict,
    pub message: String,
    /// The request, for a caller that decides further (the CLI's dry-run selection).
    #[serde(skip)]
    pub request: Option<Observed>,
}

/// What one tenant holds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TenantRow {
    pub tenant: String,
    /// Bindings labelled with the tenant and not dirty.
    pub bindings: Vec<String>,
    /// Bindings labelled with the tenant and dirty (released, waiting for cleanup).
    pub dirty: Vec<String>,
    pub requests: usize,
    pub disagreements: usize,
}

/// The bindings as KEB's selectors count them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BindingCounts {
    pub total: usize,
    /// `!tenantName,!dirty,shared!=true`: what KEB would claim next.
    pub free: usize,
    pub claimed: usize,
    pub dirty: usize,
    pub shared: usize,
}

/// The whole report.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub bindings: BindingCounts,
    pub verdicts: BTreeMap<String, usize>,
    pub tenants: Vec<TenantRow>,
    pub requests: Vec<Row>,
}

impl Report {
    /// Rows the operator would decide differently (or not adopt), the first `limit` of them.
    pub fn disagreements(&self, limit: usize) -> Vec<&Row> {
        self.requests
            .iter()
            .filter(|r| disagrees(r.verdict))
            .take(limit)
            .collect()
    }
}

fn disagrees(v: Verdict) -> bool {
    matches!(
        v,
        Verdict::OtherPool | Verdict::NotAdoptable | Verdict::Refused
    )
}

/// What the report reads of the binding index: the label keys and every binding's labels. The
/// operator copies it under the ledger's lock and builds the report (a rule evaluation per
/// request, thousands on a landscape) after the lock is gone, so that claims are not held up.
pub struct BindingSnapshot {
    keys: ResolvedLabelKeys,
    bindings: BTreeMap<String, SmallMap<String>>,
}

impl BindingSnapshot {
    /// A copy of the bindings' labels in `inv`: the only work done under the lock.
    pub fn of(inv: &Inventory) -> Self {
        Self {
            keys: inv.keys().clone(),
            bindings: inv
                .bindings()
                .map(|b| (b.view.name.clone(), b.view.labels.clone()))
                .collect(),
        }
    }

    /// The report over the copy and `requests`.
    pub fn report(&self, rules: &CompiledRules, requests: &[Observed]) -> Report {
        let mut out = Report {
            bindings: self.counts(),
            ..Default::default()
        };
        let mut tenants: BTreeMap<String, TenantRow> = BTreeMap::new();
        let keys = &self.keys;
        for (name, labels) in &self.bindings {
            if let Some(t) = labels.get(&keys.tenant_name) {
                let row = tenants.entry(t.clone()).or_default();
                if labels.contains_key(&keys.dirty) {
                    row.dirty.push(name.clone());
                } else {
                    row.bindings.push(name.clone());
                }
            }
        }
        for r in requests {
            let row = row(rules, self, r);
            *out.verdicts
                .entry(format!("{:?}", row.verdict))
                .or_default() += 1;
            if !row.tenant.is_empty() {
                let t = tenants.entry(row.tenant.clone()).or_default();
                t.requests += 1;
                t.disagreements += usize::from(disagrees(row.verdict));
            }
            out.requests.push(row);
        }
        out.tenants = tenants
            .into_iter()
            .map(|(tenant, mut t)| {
                t.tenant = tenant;
                t.bindings.sort();
                t.dirty.sort();
                t
            })
            .collect();
        out.requests
            .sort_by(|a, b| (&a.tenant, &a.kind, &a.object).cmp(&(&b.tenant, &b.kind, &b.object)));
        out
    }

    fn counts(&self) -> BindingCounts {
        let keys = &self.keys;
        let mut c = BindingCounts::default();
        for labels in self.bindings.values() {
            c.total += 1;
            if labels.get(&keys.shared).map(String::as_str) == Some("true") {
                c.shared += 1;
            } else if labels.contains_key(&keys.dirty) {
                c.dirty += 1;
            } else if labels.contains_key(&keys.tenant_name) {
                c.claimed += 1;
            } else {
                c.free += 1;
            }
        }
        c
    }

    /// The tenant a row belongs to: the request's global account, else the in-use binding's
    /// label.
    fn tenant_of(&self, r: &Observed) -> String {
        r.global_account.clone().unwrap_or_else(|| {
            r.binding
                .as_deref()
                .and_then(|b| self.bindings.get(b))
                .and_then(|l| l.get(&self.keys.tenant_name).cloned())
                .unwrap_or_default()
        })
    }

    fn adopt(&self, binding: &str, tenant: &str) -> Adoption {
        adopt_labels(&self.keys, self.bindings.get(binding), binding, tenant)
    }
}

/// The report over an inventory (bindings, with the label keys of the config) and requests.
pub fn report(rules: &CompiledRules, inv: &Inventory, requests: &[Observed]) -> Report {
    BindingSnapshot::of(inv).report(rules, requests)
}

/// One request against the binding in use.
fn row(rules: &CompiledRules, snap: &BindingSnapshot, r: &Observed) -> Row {
    let tenant = snap.tenant_of(r);
    let mut row = Row {
        kind: r.kind.clone(),
        object: r.object.clone(),
        tenant: tenant.clone(),
        in_use: r.binding.clone(),
        in_use_pool: None,
        would_use: Vec::new(),
        verdict: Verdict::TenancyOnly,
        message: String::new(),
        request: Some(r.clone()),
    };
    let wanted = r.as_request().map(|req| rules.evaluate(&req));
    let pools: Vec<PoolKey> = match &wanted {
        Some(Ok(o)) => o.preferences.iter().map(|p| p.pool.clone()).collect(),
        _ => Vec::new(),
    };
    row.would_use = pools.iter().map(describe_pool).collect();
    let refused = refusal(wanted.as_ref());
    let Some(binding) = r.binding.as_deref() else {
        let message = match (refused, pools.is_empty()) {
            (Some(m), _) => {
                return Row {
                    verdict: Verdict::Refused,
                    message: m,
                    ..row
                };
            }
            (None, true) => "not served yet; no plan to decide on".into(),
            (None, false) => format!("not served yet; would serve from {}", row.would_use[0]),
        };
        return Row {
            verdict: Verdict::WouldServe,
            message,
            ..row
        };
    };
    match snap.adopt(binding, &tenant) {
        Adoption::NotTenant { message } => Row {
            verdict: Verdict::NotAdoptable,
            message,
            ..row
        },
        Adoption::Bound { pool } => {
            row.in_use_pool = Some(describe_pool(&pool));
            if let Some(message) = refused {
                return Row {
                    verdict: Verdict::Refused,
                    message,
                    ..row
                };
            }
            if wanted.is_none() {
                return Row {
                    message: format!("{binding} is the tenant's; no plan, so no pool to compare"),
                    ..row
                };
            }
            if pools.contains(&pool) {
                Row {
                    verdict: Verdict::Agrees,
                    message: format!("{binding} is the tenant's and in a pool the rules give"),
                    ..row
                }
            } else {
                Row {
                    verdict: Verdict::OtherPool,
                    message: format!(
                        "{binding} is in {}; the rules give {}; it is adopted as it is, a new request would go to the rules' pool",
                        describe_pool(&pool),
                        row.would_use.join(" | ")
                    ),
                    ..row
                }
            }
        }
    }
}

/// Why the rules refuse the request, when they do.
fn refusal(wanted: Option<&Result<crate::rules::Outcome, EvalError>>) -> Option<String> {
    match wanted {
        Some(Err(e)) => Some(format!("{}: {e}", e.reason())),
        _ => None,
    }
}

/// A Runtime or Shoot as a request: KEB's Runtime labels and shoot fields; a Shoot names its
/// global account with KIM's `account` label (or the operator's), and rarely a plan.
pub fn from_object(kind: crate::api::SourceKind, obj: &serde_json::Value) -> Observed {
    use crate::api::SourceKind;
    let s = |p: &str| {
        obj.pointer(p)
            .and_then(serde_json::Value::as_str)
            .filter(|v| !v.is_empty())
            .map(str::to_string)
    };
    let label = |k: &str| s(&format!("/metadata/labels/{}", k.replace('/', "~1")));
    let object = format!(
        "{}/{}",
        s("/metadata/namespace").unwrap_or_default(),
        s("/metadata/name").unwrap_or_default()
    );
    let binding = kind.existing_binding(obj);
    match kind {
        SourceKind::Runtime => Observed {
            kind: "Runtime".into(),
            object,
            global_account: label("kyma-project.io/global-account-id"),
            plan: label("kyma-project.io/broker-plan-name"),
            platform_region: label("kyma-project.io/platform-region"),
            cluster_region: s("/spec/shoot/region"),
            provider: s("/spec/shoot/provider/type"),
            binding,
        },
        _ => Observed {
            kind: "Shoot".into(),
            object,
            global_account: label("accountpool.io/global-account").or_else(|| label("account")),
            plan: label("accountpool.io/plan"),
            platform_region: label("accountpool.io/platform-region"),
            cluster_region: s("/spec/region"),
            provider: s("/spec/provider/type"),
            binding,
        },
    }
}

/// An AccountClaim as a request: its spec, and the binding it holds or names for adoption.
pub fn from_claim(c: &crate::api::AccountClaim) -> Observed {
    let status = c.status.as_ref();
    let bound = status
        .filter(|st| st.phase == Some(crate::api::ClaimPhase::Bound))
        .and_then(|st| st.credentials_binding_name.clone());
    Observed {
        kind: "AccountClaim".into(),
        object: format!(
            "{}/{}",
            c.metadata.namespace.as_deref().unwrap_or_default(),
            c.metadata.name.as_deref().unwrap_or_default()
        ),
        global_account: Some(c.spec.global_account.clone()).filter(|g| !g.is_empty()),
        plan: Some(c.spec.plan.clone()).filter(|p| !p.is_empty()),
        platform_region: c.spec.platform_region.clone(),
        cluster_region: c.spec.cluster_region.clone(),
        provider: c.spec.provider.clone(),
        binding: bound.or_else(|| c.spec.adopt_binding.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::HapConfigSpec;
    use crate::pools::fixtures::{binding, inventory};

    fn rules(entries: &[&str]) -> CompiledRules {
        let spec = HapConfigSpec {
            rule_syntax: Some(crate::api::RuleSyntax::Keb),
            rules: Some(entries.iter().map(|s| s.to_string()).collect()),
            binding_namespace: "garden-kyma".into(),
            ..Default::default()
        };
        CompiledRules::from_spec(&spec).expect("rules").0
    }

    fn runtime(name: &str, ga: &str, plan: &str, pr: &str, binding: Option<&str>) -> Observed {
        Observed {
            kind: "Runtime".into(),
            object: format!("kcp-system/{name}"),
            global_account: Some(ga.into()),
            plan: Some(plan.into()),
            platform_region: Some(pr.into()),
            binding: binding.map(str::to_string),
            ..Default::default()
        }
    }

    #[test]
    fn runtimes_and_shoots_read_as_requests() {
        use crate::api::SourceKind;
        let rt = serde_json::json!({
            "metadata": {"namespace": "kcp-system", "name": "rt-1", "labels": {
                "kyma-project.io/global-account-id": "ga-1",
                "kyma-project.io/broker-plan-name": "aws",
                "kyma-project.io/platform-region": "cf-eu11"}},
            "spec": {"shoot": {"region": "eu-central-1", "provider": {"type": "aws"}, "secretBindingName": "aws-1"}},
        });
        let o = from_object(SourceKind::Runtime, &rt);
        assert_eq!(o.object, "kcp-system/rt-1");
        assert_eq!(
            (
                o.global_account.as_deref(),
                o.plan.as_deref(),
                o.platform_region.as_deref(),
                o.binding.as_deref()
            ),
            (Some("ga-1"), Some("aws"), Some("cf-eu11"), Some("aws-1"))
        );
        let shoot = serde_json::json!({
            "metadata": {"namespace": "garden-kyma", "name": "s1", "labels": {"account": "ga-2"}},
            "spec": {"region": "eu-west-1", "provider": {"type": "aws"}, "secretBindingName": "sb-1"},
        });
        let o = from_object(SourceKind::Shoot, &shoot);
        assert_eq!(
            (o.global_account.as_deref(), o.plan, o.binding.as_deref()),
            (Some("ga-2"), None, Some("sb-1"))
        );
    }

    #[test]
    fn every_request_is_compared_with_the_binding_in_use() {
        let inv = inventory(
            vec![
                binding(
                    "aws-1",
                    &[("hyperscalerType", "aws"), ("tenantName", "ga-1")],
                ),
                binding(
                    "aws-2",
                    &[("hyperscalerType", "aws"), ("tenantName", "ga-2")],
                ),
                binding(
                    "aws-3",
                    &[
                        ("hyperscalerType", "aws"),
                        ("tenantName", "ga-3"),
                        ("dirty", "true"),
                    ],
                ),
                binding("aws-4", &[("hyperscalerType", "aws")]),
                binding("trial-1", &[("hyperscalerType", "aws"), ("shared", "true")]),
            ],
            vec![],
            vec![],
        );
        let r = rules(&[
            "aws",
            "aws(PR=cf-eu11)->EU",
            "trial->S",
            "gcp(GA=ga-9) -> DENY \"offboarded\"",
            "gcp",
        ]);
        let requests = vec![
            runtime("rt-1", "ga-1", "aws", "cf-eu10", Some("aws-1")),
            runtime("rt-2", "ga-2", "aws", "cf-eu11", Some("aws-2")),
            runtime("rt-3", "ga-1", "aws", "cf-eu10", Some("aws-2")),
            Observed {
                provider: Some("aws".into()),
                ..runtime("rt-4", "ga-5", "trial", "cf-eu10", Some("trial-1"))
            },
            runtime("rt-5", "ga-9", "gcp", "cf-eu10", None),
            runtime("rt-6", "ga-6", "aws", "cf-eu10", None),
            Observed {
                kind: "Shoot".into(),
                object: "garden-kyma/s-3".into(),
                binding: Some("aws-3".into()),
                ..Default::default()
            },
        ];
        let rep = report(&r, &inv, &requests);
        let v: BTreeMap<&str, (Verdict, &str)> = rep
            .requests
            .iter()
            .map(|r| (r.object.as_str(), (r.verdict, r.message.as_str())))
            .collect();
        assert_eq!(v["kcp-system/rt-1"].0, Verdict::Agrees);
        assert_eq!(
            v["kcp-system/rt-2"].0,
            Verdict::OtherPool,
            "{}",
            v["kcp-system/rt-2"].1
        );
        assert!(v["kcp-system/rt-2"].1.contains("euAccess"));
        assert_eq!(v["kcp-system/rt-3"].0, Verdict::NotAdoptable);
        assert!(v["kcp-system/rt-3"].1.contains("tenantName=ga-2, not ga-1"));
        assert_eq!(
            v["kcp-system/rt-4"].0,
            Verdict::Agrees,
            "{}",
            v["kcp-system/rt-4"].1
        );
        assert_eq!(v["kcp-system/rt-5"].0, Verdict::Refused);
        assert!(v["kcp-system/rt-5"].1.contains("offboarded"));
        assert_eq!(v["kcp-system/rt-6"].0, Verdict::WouldServe);
        assert_eq!(
            v["garden-kyma/s-3"].0,
            Verdict::NotAdoptable,
            "a dirty binding with a Shoot on it"
        );
        assert_eq!(
            rep.bindings,
            BindingCounts {
                total: 5,
                free: 1,
                claimed: 2,
                dirty: 1,
                shared: 1
            }
        );
        let ga1 = rep.tenants.iter().find(|t| t.tenant == "ga-1").unwrap();
        assert_eq!(
            (ga1.bindings.clone(), ga1.requests, ga1.disagreements),
            (vec!["aws-1".to_string()], 2, 1)
        );
        let ga3 = rep.tenants.iter().find(|t| t.tenant == "ga-3").unwrap();
        assert_eq!(ga3.dirty, vec!["aws-3".to_string()]);
        assert_eq!(rep.disagreements(2).len(), 2);
        assert_eq!(rep.disagreements(10).len(), 4);
        assert_eq!(rep.verdicts["Agrees"], 2);
    }
}
