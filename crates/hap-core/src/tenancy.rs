//! The tenant authorization decision (`spec.tenants`): a pure function over the policy, the
//! requester (kind, namespace, its labels, the admission user) and the global account. No policy:
//! everything is allowed, as before the policy existed.

use std::collections::BTreeMap;

use crate::api::{RequesterKind, TenantPolicy, TenantRule};

/// The admission request's user, where the platform tells it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct User {
    pub username: String,
    pub groups: Vec<String>,
}

/// Who asks.
#[derive(Clone, Copy, Debug)]
pub struct Requester<'a> {
    pub kind: RequesterKind,
    pub namespace: &'a str,
    /// The namespace's labels; `None` when they could not be read (a rule that needs them then
    /// does not hold).
    pub namespace_labels: Option<&'a BTreeMap<String, String>>,
    /// `None` outside admission (AccountClaims, adoptions the operator finds itself, claims the
    /// source pass creates).
    pub user: Option<&'a User>,
    /// Outside admission: the rule whose user and group conditions the webhook found held for
    /// the request that led to this claim (its record, which only the operator writes). That
    /// rule's other conditions are still checked now; no other rule's user conditions hold.
    pub admitted_rule: Option<&'a str>,
}

/// What is asked: a fresh claim, or one that names its binding.
#[derive(Clone, Copy, Debug)]
pub struct Ask<'a> {
    pub global_account: &'a str,
    pub adopt_binding: bool,
}

/// The decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// No policy, or the named rule allows it.
    Allowed { rule: Option<String> },
    /// No rule allows it; the message names every rule that covers the requester's kind and why
    /// it does not hold.
    Denied { message: String },
}

impl Decision {
    pub fn is_allowed(&self) -> bool {
        matches!(self, Decision::Allowed { .. })
    }
}

/// Whether deciding for `policy` needs the requester namespace's labels (read them only then).
pub fn needs_namespace_labels(policy: Option<&TenantPolicy>) -> bool {
    policy.is_some_and(|p| {
        p.rules.iter().any(|r| {
            r.namespace_labels.as_ref().is_some_and(|l| !l.is_empty())
                || r.global_account_from_namespace_label.is_some()
        })
    })
}

/// The decision for one request.
pub fn decide(policy: Option<&TenantPolicy>, who: &Requester<'_>, ask: &Ask<'_>) -> Decision {
    let Some(policy) = policy else {
        return Decision::Allowed { rule: None };
    };
    let mut refusals = Vec::new();
    for rule in &policy.rules {
        if !covers(rule, who.kind) {
            continue;
        }
        match refusal(rule, who, ask) {
            None => {
                return Decision::Allowed {
                    rule: Some(rule.name.clone()),
                };
            }
            Some(why) => refusals.push(format!("rule `{}`: {why}", rule.name)),
        }
    }
    let what = format!(
        "{} in namespace `{}` may not claim for global account `{}`{}",
        who.kind.as_str(),
        who.namespace,
        ask.global_account,
        if ask.adopt_binding {
            " with a binding it names"
        } else {
            ""
        }
    );
    let message = if refusals.is_empty() {
        format!(
            "{what}: no rule of spec.tenants covers {}",
            who.kind.as_str()
        )
    } else {
        format!("{what}: {}", refusals.join("; "))
    };
    Decision::Denied { message }
}

fn covers(rule: &TenantRule, kind: RequesterKind) -> bool {
    rule.kinds.as_ref().is_none_or(|k| k.contains(&kind))
}

/// The first condition of `rule` that does not hold, in words; `None` when all hold.
fn refusal(rule: &TenantRule, who: &Requester<'_>, ask: &Ask<'_>) -> Option<String> {
    if let Some(ns) = &rule.namespaces
        && !ns.iter().any(|n| n == who.namespace)
    {
        return Some(format!("namespace not in [{}]", ns.join(", ")));
    }
    if let Some(want) = rule.namespace_labels.as_ref().filter(|l| !l.is_empty()) {
        let Some(have) = who.namespace_labels else {
            return Some("the namespace's labels could not be read".into());
        };
        if let Some((k, v)) = want.iter().find(|(k, v)| have.get(*k) != Some(*v)) {
            return Some(format!("the namespace lacks label {k}={v}"));
        }
    }
    if let Some(gas) = &rule.global_accounts
        && !gas.iter().any(|g| g == "*" || g == ask.global_account)
    {
        return Some("global account not listed".into());
    }
    if let Some(key) = &rule.global_account_from_namespace_label {
        let value = who.namespace_labels.and_then(|l| l.get(key));
        match value {
            Some(v) if v == ask.global_account => {}
            Some(_) => {
                return Some(format!(
                    "the namespace's label {key} names another global account"
                ));
            }
            None => return Some(format!("the namespace has no label {key}")),
        }
    }
    if let Some(why) = user_refusal(rule, who) {
        return Some(why);
    }
    if ask.adopt_binding && rule.adopt_binding != Some(true) {
        return Some("naming a binding (adoptBinding) is not allowed".into());
    }
    None
}

fn user_refusal(rule: &TenantRule, who: &Requester<'_>) -> Option<String> {
    if rule.users.is_none() && rule.groups.is_none() {
        return None;
    }
    let Some(user) = who.user else {
        return match who.admitted_rule {
            Some(r) if r == rule.name => None,
            Some(r) => Some(format!(
                "the user was admitted under rule `{r}`, not this one"
            )),
            None => Some(
                "the requesting user is known at admission only, and no admission decision is recorded for this request"
                    .into(),
            ),
        };
    };
    let by_name = rule
        .users
        .as_ref()
        .is_some_and(|u| u.contains(&user.username));
    let by_group = rule
        .groups
        .as_ref()
        .is_some_and(|g| user.groups.iter().any(|x| g.contains(x)));
    (!by_name && !by_group).then(|| format!("user `{}` is not listed", user.username))
}

/// The policy's effect in words, one line per rule after a headline (`hap validate`).
pub fn describe(policy: Option<&TenantPolicy>) -> Vec<String> {
    let Some(policy) = policy else {
        return vec![
            "tenants: no policy (spec.tenants unset): every requester may claim for every global account".into(),
        ];
    };
    let mut out = vec![format!(
        "tenants: {} allow rule(s); a request no rule allows ends TenantNotAllowed",
        policy.rules.len()
    )];
    let list = |v: &Option<Vec<String>>| v.as_ref().map(|v| v.join(", "));
    for r in &policy.rules {
        let kinds = r.kinds.as_ref().map_or("every requester".to_string(), |k| {
            k.iter().map(|k| k.as_str()).collect::<Vec<_>>().join(", ")
        });
        let mut conds = Vec::new();
        if let Some(n) = list(&r.namespaces) {
            conds.push(format!("namespace in [{n}]"));
        }
        if let Some(l) = r.namespace_labels.as_ref().filter(|l| !l.is_empty()) {
            let l: Vec<String> = l.iter().map(|(k, v)| format!("{k}={v}")).collect();
            conds.push(format!("namespace labelled {}", l.join(",")));
        }
        if let Some(g) = list(&r.global_accounts) {
            conds.push(format!("global account in [{g}]"));
        }
        if let Some(k) = &r.global_account_from_namespace_label {
            conds.push(format!("global account = the namespace's label {k}"));
        }
        if let Some(u) = list(&r.users) {
            conds.push(format!("user in [{u}]"));
        }
        if let Some(g) = list(&r.groups) {
            conds.push(format!("group in [{g}]"));
        }
        let conds = if conds.is_empty() {
            "always".to_string()
        } else {
            conds.join(" and ")
        };
        let adopt = if r.adopt_binding == Some(true) {
            "; may name its binding (adoptBinding)"
        } else {
            ""
        };
        out.push(format!("  rule `{}`: {kinds}: {conds}{adopt}", r.name));
    }
    out
}

#[cfg(test)]
mod tests;
