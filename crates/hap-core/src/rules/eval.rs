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
    /// The tenant asking, which deny entries with `GA` conditions match on; `None` for a
    /// request of no tenant (`hap explain` without `--global-account`).
    pub global_account: Option<&'a str>,
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
        if !e.rule.matches_request(pr, cr, present(req.global_account)) {
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

/// The denial of `req` by deny entry `e`; the entry's message with its placeholders filled in.
fn denied(e: &Entry, req: &Request<'_>) -> EvalError {
    let own = e.rule.deny_message.as_deref().map(|m| expand(m, req));
    let why = own
        .clone()
        .unwrap_or_else(|| "the HapConfig allows no pool for these requests".to_string());
    let tenant = match present(req.global_account) {
        Some(ga) if !e.rule.ga.is_absent() => format!(" for global account `{ga}`"),
        _ => String::new(),
    };
    EvalError::Denied {
        index: e.index,
        entry: e.text.clone(),
        reason_text: own,
        message: format!("{} denies {}{tenant}: {why}", label(e), describe(req)),
    }
}

/// `{plan}` and `{globalAccount}` replaced as upstream KEB's blocklist does (an absent global
/// account reads as empty). One pass over the message: a replacement is never expanded again.
pub fn expand(message: &str, req: &Request<'_>) -> String {
    let mut out = String::with_capacity(message.len() + 32);
    let mut rest = message;
    while let Some(at) = rest.find('{') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        if let Some(after) = tail.strip_prefix("{plan}") {
            out.push_str(req.plan);
            rest = after;
        } else if let Some(after) = tail.strip_prefix("{globalAccount}") {
            out.push_str(present(req.global_account).unwrap_or_default());
            rest = after;
        } else {
            out.push('{');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    out
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{HapConfigSpec, RuleSyntax};

    fn compile(syntax: RuleSyntax, rules: &[&str]) -> Result<CompiledRules, String> {
        let spec = HapConfigSpec {
            rule_syntax: Some(syntax),
            rules: Some(rules.iter().map(|s| s.to_string()).collect()),
            binding_namespace: "garden-kyma".into(),
            ..Default::default()
        };
        CompiledRules::from_spec(&spec)
            .map(|(r, _)| r)
            .map_err(|v| v.summary())
    }

    fn ask(rules: &CompiledRules, plan: &str, ga: Option<&str>) -> Result<String, String> {
        let req = Request {
            plan,
            provider: Some("aws"),
            global_account: ga,
            ..Default::default()
        };
        match rules.evaluate(&req) {
            Ok(o) => Ok(o.hyperscaler_type),
            Err(EvalError::Denied {
                index, reason_text, ..
            }) => Err(format!("{index}: {}", reason_text.unwrap_or_default())),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Upstream KEB's blocklist patterns, written as deny entries: the listed tenant is denied,
    /// everyone but the exempt one is denied, and a listed tenant outranks the exemption rule
    /// whatever the order; matching ignores case; the placeholders are filled in.
    #[test]
    fn deny_entries_target_and_exclude_global_accounts() {
        for (syntax, rules) in [
            (
                RuleSyntax::Seed,
                [
                    r#"trial(GA!=ga-exempt|ga-ok) deny "{plan} is closed for {globalAccount}""#,
                    "trial",
                    r#"trial(GA=GA-VIP) deny "VIP {globalAccount} ({plan})""#,
                ],
            ),
            (
                RuleSyntax::Keb,
                [
                    r#"trial(GA!=ga-exempt|ga-ok) -> DENY "{plan} is closed for {globalAccount}""#,
                    "trial",
                    r#"trial(GA=GA-VIP) -> DENY "VIP {globalAccount} ({plan})""#,
                ],
            ),
        ] {
            let r = compile(syntax, &rules).expect("valid");
            assert_eq!(ask(&r, "trial", Some("ga-exempt")), Ok("aws".into()));
            assert_eq!(ask(&r, "trial", Some("GA-OK")), Ok("aws".into()));
            assert_eq!(
                ask(&r, "trial", Some("ga-other")),
                Err("1: trial is closed for ga-other".into())
            );
            assert_eq!(
                ask(&r, "trial", Some("ga-vip")),
                Err("3: VIP ga-vip (trial)".into())
            );
            // No tenant: everyone-but matches (nobody is exempt), a listed set does not.
            assert_eq!(
                ask(&r, "trial", None),
                Err("1: trial is closed for ".into())
            );
        }
    }

    #[test]
    fn a_tenant_deny_outranks_region_entries_and_names_the_tenant() {
        let r = compile(
            RuleSyntax::Seed,
            &["aws", "aws(PR=cf-eu10, CR=eu-1)", r#"aws(GA=ga-1) deny"#],
        )
        .expect("valid");
        let req = Request {
            plan: "aws",
            platform_region: Some("cf-eu10"),
            cluster_region: Some("eu-1"),
            provider: None,
            global_account: Some("GA-1"),
        };
        let e = r.evaluate(&req).unwrap_err();
        assert_eq!(
            e.to_string(),
            "rule 3 `aws(GA=ga-1) deny` denies plan `aws` with platform region `cf-eu10` and cluster region `eu-1` for global account `GA-1`: the HapConfig allows no pool for these requests"
        );
        let other = Request {
            global_account: Some("ga-2"),
            ..req
        };
        assert_eq!(
            r.evaluate(&other).map(|o| o.hyperscaler_type),
            Ok("aws_cf-eu10_eu-1".into())
        );
    }

    #[test]
    fn placeholders_expand_once_and_leave_other_braces() {
        let req = Request {
            plan: "trial",
            global_account: Some("{plan}"),
            ..Default::default()
        };
        assert_eq!(
            expand("{plan}/{globalAccount}/{x}/{/{plan", &req),
            "trial/{plan}/{x}/{/{plan"
        );
    }

    #[test]
    fn overlapping_tenant_denies_are_rejected_and_distinct_ones_are_not() {
        let bad = |rules: &[&str], needle: &str| {
            let e = compile(RuleSyntax::Seed, rules).expect_err("invalid");
            assert!(e.contains(needle), "{rules:?}: {e}");
        };
        bad(
            &["trial", "trial(GA=a|b) deny", "trial(GA=B|A) deny"],
            "same plan and conditions",
        );
        bad(
            &["trial", "trial(GA=a|b) deny", r#"trial(GA=b|c) deny "x""#],
            "both deny global account `b`",
        );
        bad(
            &["trial", "trial(GA!=a) deny", "trial(GA!=b) deny"],
            "merge them into one entry",
        );
        // Different regions, same tenant: the entry covering both is suggested.
        bad(
            &["trial", "trial(PR=x, GA=a) deny", "trial(CR=y, GA=a) deny"],
            "add `trial(PR=x, CR=y, GA=a)`",
        );
        assert!(
            compile(
                RuleSyntax::Seed,
                &[
                    "trial",
                    "trial(GA=a) deny",
                    "trial(GA=b) deny",
                    "trial(GA!=c) deny",
                    "trial(PR=x, CR=y, GA=a) deny",
                    "trial(PR=x, GA=a) deny",
                    "trial(CR=y, GA=a) deny",
                ]
            )
            .is_ok()
        );
    }
}
