//! Pins: a global account pinned to one named binding, for one pool or for the pool
//! the binding's labels put it in. Validation here; what a pin does to a claim is
//! `selection::pinned`.

use std::collections::HashMap;

use crate::api::Pin;
use crate::labels::PoolKey;

use crate::diag::label_value_problem;
use crate::diag::{Diagnostic, Reason, Validation};

/// A validated pin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PinRule {
    /// 0-based position in `spec.pins`.
    pub item: usize,
    pub global_account: String,
    pub binding: String,
    /// The dedicated pool the pin is for; `None`: the one the binding's labels name.
    pub pool: Option<PoolKey>,
}

impl PinRule {
    /// `pool hyperscalerType=aws, euAccess` or `the binding's pool`, for messages.
    pub fn scope(&self) -> String {
        match &self.pool {
            Some(p) => format!(
                "pool hyperscalerType={}{}",
                p.hyperscaler_type,
                if p.eu_access { ", euAccess" } else { "" }
            ),
            None => "the pool of the binding's labels".to_string(),
        }
    }
}

/// The validated pins, indexed by tenant and by binding (selection asks both for every claim).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pins {
    list: Vec<PinRule>,
    by_tenant: HashMap<String, Vec<usize>>,
    tenant_of: HashMap<String, String>,
}

impl Pins {
    pub fn new(list: Vec<PinRule>) -> Self {
        let mut by_tenant: HashMap<String, Vec<usize>> = HashMap::new();
        let mut tenant_of = HashMap::new();
        for (i, p) in list.iter().enumerate() {
            by_tenant
                .entry(p.global_account.clone())
                .or_default()
                .push(i);
            tenant_of.insert(p.binding.clone(), p.global_account.clone());
        }
        Self {
            list,
            by_tenant,
            tenant_of,
        }
    }

    /// Every pin, in the order of `spec.pins`.
    pub fn list(&self) -> &[PinRule] {
        &self.list
    }

    /// The pins of one global account, in spec order.
    pub fn of<'a>(&'a self, ga: &str) -> impl Iterator<Item = &'a PinRule> + 'a {
        self.by_tenant
            .get(ga)
            .into_iter()
            .flatten()
            .filter_map(|i| self.list.get(*i))
    }

    /// Whether `binding` is pinned to a global account other than `ga`.
    pub fn reserved_from(&self, binding: &str, ga: &str) -> bool {
        self.tenant_of.get(binding).is_some_and(|t| t != ga)
    }
}

/// Why `name` is not a Kubernetes object name (DNS-1123 subdomain), or `None`.
fn object_name_problem(name: &str) -> Option<&'static str> {
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if name.is_empty() || name.len() > 253 || !name.split('.').all(label_ok) {
        return Some(
            "is not a binding name (lowercase letters, digits, `-` and `.`, at most 253 characters)",
        );
    }
    None
}

/// The pins of a spec, or an error per problem (each naming `pins[i]`).
pub(crate) fn compile(pins: &[Pin], v: &mut Validation) -> Pins {
    Pins::new(compile_list(pins, v))
}

fn compile_list(pins: &[Pin], v: &mut Validation) -> Vec<PinRule> {
    let mut out: Vec<PinRule> = Vec::new();
    for (i, p) in pins.iter().enumerate() {
        let at = |f: &str| format!("pins[{i}].{f}");
        let mut ok = true;
        if let Some(problem) = label_value_problem(&p.global_account) {
            v.errors.push(Diagnostic::field(
                at("globalAccount"),
                Reason::InvalidConfig,
                format!("global account `{}` {problem}", p.global_account),
            ));
            ok = false;
        }
        if let Some(problem) = object_name_problem(&p.binding) {
            v.errors.push(Diagnostic::field(
                at("binding"),
                Reason::InvalidConfig,
                format!("`{}` {problem}", p.binding),
            ));
            ok = false;
        }
        if let Some(problem) = p
            .pool
            .as_ref()
            .and_then(|pool| label_value_problem(&pool.hyperscaler_type))
        {
            v.errors.push(Diagnostic::field(
                at("pool.hyperscalerType"),
                Reason::InvalidConfig,
                format!("the pool's hyperscalerType {problem}"),
            ));
            ok = false;
        }
        let rule = PinRule {
            item: i,
            global_account: p.global_account.clone(),
            binding: p.binding.clone(),
            pool: p.pool.as_ref().map(|pool| PoolKey {
                hyperscaler_type: pool.hyperscaler_type.clone(),
                eu_access: pool.eu_access.unwrap_or(false),
                shared: false,
            }),
        };
        if let Some(message) = conflict(&out, &rule) {
            v.errors.push(Diagnostic::field(
                format!("pins[{i}]"),
                Reason::PinConflict,
                message,
            ));
            ok = false;
        }
        if ok {
            out.push(rule);
        }
    }
    out
}

/// Why `new` cannot stand next to the pins before it.
fn conflict(before: &[PinRule], new: &PinRule) -> Option<String> {
    for old in before {
        let (i, ga, b) = (old.item, &new.global_account, &new.binding);
        if old.binding == *b && old.global_account != *ga {
            return Some(format!(
                "binding {b} is pinned to global account {ga} and, in pins[{i}], to {}: a pinned binding belongs to one tenant",
                old.global_account
            ));
        }
        if old.global_account != *ga {
            continue;
        }
        if old.binding == *b {
            return Some(if old.pool == new.pool {
                format!("repeats pins[{i}]: remove one of them")
            } else {
                format!(
                    "binding {b} is pinned for {ga} twice, for {} and for {} (pins[{i}]): a binding is in one pool",
                    new.scope(),
                    old.scope()
                )
            });
        }
        if old.pool == new.pool {
            return Some(format!(
                "global account {ga} is pinned twice for {}: binding {b} here and {} in pins[{i}]; a tenant has one pinned binding per pool",
                new.scope(),
                old.binding
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::PinPool;

    fn pin(ga: &str, binding: &str, pool: Option<&str>) -> Pin {
        Pin {
            global_account: ga.into(),
            binding: binding.into(),
            pool: pool.map(|t| PinPool {
                hyperscaler_type: t.into(),
                eu_access: None,
            }),
        }
    }

    fn errors(pins: &[Pin]) -> Vec<(Option<String>, Reason, String)> {
        let mut v = Validation::default();
        compile_list(pins, &mut v);
        v.errors
            .into_iter()
            .map(|d| (d.field, d.reason, d.message))
            .collect()
    }

    #[test]
    fn a_binding_pinned_to_two_tenants_is_rejected() {
        let e = errors(&[pin("ga-1", "cb-1", None), pin("ga-2", "cb-1", Some("aws"))]);
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].0.as_deref(), Some("pins[1]"));
        assert_eq!(e[0].1, Reason::PinConflict);
        assert!(
            e[0].2
                .contains("binding cb-1 is pinned to global account ga-2 and, in pins[0], to ga-1"),
            "{}",
            e[0].2
        );
    }

    #[test]
    fn one_pinned_binding_per_tenant_and_pool() {
        assert!(
            errors(&[
                pin("ga", "a", Some("aws")),
                pin("ga", "b", Some("gcp")),
                pin("ga", "c", None)
            ])
            .is_empty()
        );
        let e = errors(&[pin("ga", "a", Some("aws")), pin("ga", "b", Some("aws"))]);
        assert!(
            e[0].2.contains("pinned twice for pool hyperscalerType=aws"),
            "{}",
            e[0].2
        );
        let e = errors(&[pin("ga", "a", None), pin("ga", "a", None)]);
        assert!(e[0].2.starts_with("repeats pins[0]"), "{}", e[0].2);
        let e = errors(&[pin("ga", "a", None), pin("ga", "a", Some("aws"))]);
        assert!(e[0].2.contains("a binding is in one pool"), "{}", e[0].2);
    }

    #[test]
    fn names_are_checked() {
        let e = errors(&[pin("ga 1", "Cb_1", Some("aws_"))]);
        let fields: Vec<_> = e.iter().filter_map(|x| x.0.clone()).collect();
        assert_eq!(
            fields,
            [
                "pins[0].globalAccount",
                "pins[0].binding",
                "pins[0].pool.hyperscalerType"
            ]
        );
    }

    #[test]
    fn the_index_answers_by_tenant_and_by_binding() {
        let mut v = Validation::default();
        let p = compile(
            &[
                pin("ga", "a", Some("aws")),
                pin("gb", "b", None),
                pin("ga", "c", Some("gcp")),
            ],
            &mut v,
        );
        let mine: Vec<&str> = p.of("ga").map(|r| r.binding.as_str()).collect();
        assert_eq!(mine, ["a", "c"]);
        assert!(p.of("nobody").next().is_none());
        assert!(p.reserved_from("a", "gb") && !p.reserved_from("a", "ga"));
        assert!(!p.reserved_from("free", "gb"));
        assert_eq!(p.list().len(), 3);
    }
}
