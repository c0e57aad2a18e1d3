//! Evaluation of one request against compiled rules: plan → provider, the most specific
//! matching entry, and either its ordered pools (hyperscalerType, euAccess and shared per
//! preference) or its denial. `EvalError::Denied` is the one definition of a denial: whatever
//! the request's source, it is denied with this reason and message.

use crate::labels::PoolKey;

use super::model::{EuAccess, PoolResult};
use super::plans::Provider;
use super::{CompiledRules, Entry};
use crate::diag::label_value_problem;

/// One cluster request. Empty strings count as absent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Request<'a> {
    pub plan: &'a str,
    pub platform_region: Option<&'a str>,
    pub cluster_region: Option<&'a str>,
    pub provider: Option<&'a str>,
}

/// The matched entry and the pools it points at. The top-level pool fields are those of the
/// first preference (the only one for entries without fallbacks).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// 1-based index of the matched entry.
    pub index: usize,
    pub entry: String,
    pub provider_type: String,
    pub hyperscaler_type: String,
    pub eu_access: bool,
    pub shared: bool,
    /// Every preference in order, the first one included; never empty.
    pub preferences: Vec<Preference>,
}

/// One of the pools a request may use, in the order of the entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Preference {
    /// 1-based position in the entry's ordered pools; 1 is the primary.
    pub index: usize,
    pub pool: PoolKey,
}

impl Outcome {
    /// The first preference's pool.
    pub fn pool(&self) -> PoolKey {
        PoolKey {
            hyperscaler_type: self.hyperscaler_type.clone(),
            eu_access: self.eu_access,
            shared: self.shared,
        }
    }
}

/// Why a request has no pool. Every variant carries the full message shown to users.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EvalError {
    #[error("{message}")]
    NoMatchingRule {
        plan: String,
        candidates: Vec<String>,
        message: String,
    },
    #[error("{message}")]
    AmbiguousMatch {
        plan: String,
        candidates: Vec<String>,
        message: String,
    },
    #[error("{message}")]
    UnknownPlan { plan: String, message: String },
    #[error("{message}")]
    MissingProvider { plan: String, message: String },
    #[error("{message}")]
    InvalidConfig { message: String },
    /// The matching entry denies the request (`deny`, `-> DENY`, `oneOf: []`).
    #[error("{message}")]
    Denied {
        /// 1-based index of the deny entry.
        index: usize,
        entry: String,
        /// The entry's own message, if it has one.
        reason_text: Option<String>,
        message: String,
    },
}

impl EvalError {
    pub fn reason(&self) -> &'static str {
        match self {
            EvalError::NoMatchingRule { .. } => "NoMatchingRule",
            EvalError::AmbiguousMatch { .. } => "AmbiguousMatch",
            EvalError::UnknownPlan { .. } => "UnknownPlan",
            EvalError::MissingProvider { .. } => "MissingProvider",
            EvalError::InvalidConfig { .. } => "InvalidConfig",
            EvalError::Denied { .. } => "Denied",
        }
    }
}

fn present(v: Option<&str>) -> Option<&str> {
    v.filter(|s| !s.is_empty())
}

fn label(e: &Entry) -> String {
    format!("rule {} `{}`", e.index, e.text)
}

/// `plan `gcp` with platform region `cf-eu10` and no cluster region`.
fn describe(req: &Request<'_>) -> String {
    let region = |name: &str, v: Option<&str>| match present(v) {
        Some(v) => format!("{name} `{v}`"),
        None => format!("no {name}"),
    };
    format!(
        "plan `{}` with {} and {}",
        req.plan,
        region("platform region", req.platform_region),
        region("cluster region", req.cluster_region)
    )
}

pub fn evaluate(rules: &CompiledRules, req: &Request<'_>) -> Result<Outcome, EvalError> {
    let pr = present(req.platform_region);
    let cr = present(req.cluster_region);
    let provider = match rules.plans.get(req.plan) {
        None => {
            return Err(EvalError::UnknownPlan {
                plan: req.plan.to_string(),
                message: rules.plans.unknown_message(req.plan),
            });
        }
        Some(Provider::Fixed(t)) => t.as_str(),
        Some(Provider::FromRequest) => present(req.provider).ok_or_else(|| EvalError::MissingProvider {
            plan: req.plan.to_string(),
            message: format!("plan `{}` takes its provider type from the request, and the request names none", req.plan),
        })?,
    };
    let candidates = rules
        .by_plan
        .get(req.plan)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut best: Option<&Entry> = None;
    let mut tied: Vec<&Entry> = Vec::new();
    for e in candidates.iter().map(|&i| &rules.entries[i]) {
        if !e.rule.matches(pr, cr) {
            continue;
        }
        match best.map(|b| e.rule.specificity().cmp(&b.rule.specificity())) {
            None | Some(std::cmp::Ordering::Greater) => {
                best = Some(e);
                tied.clear();
            }
            Some(std::cmp::Ordering::Equal) => tied.push(e),
            Some(std::cmp::Ordering::Less) => {}
        }
    }
    let all = || {
        candidates
            .iter()
            .map(|&i| label(&rules.entries[i]))
            .collect::<Vec<_>>()
    };
    let Some(best) = best else {
        let names = all();
        let listed = if names.is_empty() {
            format!("there is no entry for plan `{}`", req.plan)
        } else {
            format!("entries for the plan: {}", names.join(", "))
        };
        return Err(EvalError::NoMatchingRule {
            plan: req.plan.to_string(),
            message: format!("no rule matches {}; {listed}", describe(req)),
            candidates: names,
        });
    };
    if !tied.is_empty() {
        let names: Vec<String> = std::iter::once(best).chain(tied).map(label).collect();
        return Err(EvalError::AmbiguousMatch {
            plan: req.plan.to_string(),
            message: format!(
                "{} matches equally specific entries {}",
                describe(req),
                names.join(" and ")
            ),
            candidates: names,
        });
    }
    if best.rule.is_deny() {
        return Err(denied(best, req));
    }
    outcome(rules, best, provider, pr, cr)
}

/// The denial of `req` by deny entry `e`.
fn denied(e: &Entry, req: &Request<'_>) -> EvalError {
    let why = match &e.rule.deny_message {
        Some(m) => m.clone(),
        None => "the HapConfig allows no pool for these requests".to_string(),
    };
    EvalError::Denied {
        index: e.index,
        entry: e.text.clone(),
        reason_text: e.rule.deny_message.clone(),
        message: format!("{} denies {}: {why}", label(e), describe(req)),
    }
}

fn outcome(
    rules: &CompiledRules,
    e: &Entry,
    provider: &str,
    pr: Option<&str>,
    cr: Option<&str>,
) -> Result<Outcome, EvalError> {
    let mut preferences = Vec::with_capacity(e.rule.pools.len());
    for (k, p) in e.rule.pools.iter().enumerate() {
        let pool = pool_of(rules, e, p, provider, pr, cr)?;
        // `euAccess=*` then `euAccess` name one pool for an EU request: it is tried once.
        if !preferences.iter().any(|q: &Preference| q.pool == pool) {
            preferences.push(Preference { index: k + 1, pool });
        }
    }
    let Some(first) = preferences.first() else {
        // Deny entries were handled by the caller; an entry without pools has nothing to give.
        return Err(EvalError::InvalidConfig {
            message: format!("{} names no pool", label(e)),
        });
    };
    Ok(Outcome {
        index: e.index,
        entry: e.text.clone(),
        provider_type: provider.to_string(),
        hyperscaler_type: first.pool.hyperscaler_type.clone(),
        eu_access: first.pool.eu_access,
        shared: first.pool.shared,
        preferences,
    })
}

/// The pool one preference names for this request.
fn pool_of(
    rules: &CompiledRules,
    e: &Entry,
    p: &PoolResult,
    provider: &str,
    pr: Option<&str>,
    cr: Option<&str>,
) -> Result<PoolKey, EvalError> {
    let mut t = String::with_capacity(provider.len() + 24);
    t.push_str(provider);
    for (on, value, name) in [
        (p.pr_suffix, pr, "platform region"),
        (p.cr_suffix, cr, "cluster region"),
    ] {
        if !on {
            continue;
        }
        let Some(v) = value else {
            return Err(EvalError::InvalidConfig {
                message: format!(
                    "{} appends the {name} to the hyperscalerType, and the request has none",
                    label(e)
                ),
            });
        };
        t.push('_');
        t.push_str(v);
    }
    if let Some(problem) = label_value_problem(&t) {
        return Err(EvalError::InvalidConfig {
            message: format!("{} produces hyperscalerType `{t}`, {problem}", label(e)),
        });
    }
    let eu_access = match p.eu_access {
        EuAccess::Never => false,
        EuAccess::Always => true,
        EuAccess::FromRequest => pr.is_some_and(|p| rules.eu_regions.iter().any(|r| r == p)),
    };
    Ok(PoolKey {
        hyperscaler_type: t,
        eu_access,
        shared: p.shared,
    })
}
