//! The parts of KEB Helm values besides `hap.rule` that `hap migrate --keb-values` carries over:
//! `gardener.project` (the binding namespace) and `operationBlocklist` (deny entries).
//!
//! Upstream checks the blocklist before any rule and lets the first matching blocklist rule win;
//! here the most specific entry wins whatever the order (a `GA=` condition before `GA!=` before
//! none). The translation keeps upstream's outcomes by giving each tenant to the first rule that
//! matched it upstream: a later rule gets only the tenants no earlier rule of its plan matched.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

/// KEB's `gardener.project` when the values do not set it.
pub const KEB_DEFAULT_PROJECT: &str = "kyma-dev";

/// The binding namespace: the flag when given, else `garden-<gardener.project>`, else KEB's
/// default project. The note says where it came from when that is not the flag.
pub fn binding_namespace(values: &Value, flag: Option<&str>) -> (String, Option<String>) {
    let project = values
        .pointer("/gardener/project")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|p| !p.is_empty());
    match (flag, project) {
        (Some(ns), Some(p)) if ns != format!("garden-{p}") => (
            ns.to_string(),
            Some(format!(
                "gardener.project is `{p}` (bindings in garden-{p}); kept --binding-namespace {ns}"
            )),
        ),
        (Some(ns), _) => (ns.to_string(), None),
        (None, Some(p)) => (
            format!("garden-{p}"),
            Some(format!("bindingNamespace garden-{p} from gardener.project")),
        ),
        (None, None) => (
            format!("garden-{KEB_DEFAULT_PROJECT}"),
            Some(format!(
                "no gardener.project in the values: bindingNamespace garden-{KEB_DEFAULT_PROJECT} from KEB's default project `{KEB_DEFAULT_PROJECT}`; pass --binding-namespace if your KEB sets another"
            )),
        ),
    }
}

/// Which tenants a deny entry names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tenants {
    All,
    Only(BTreeSet<String>),
    Except(BTreeSet<String>),
}

/// One deny entry to write, for one plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deny {
    pub plan: String,
    pub tenants: Tenants,
    pub message: String,
}

impl Deny {
    /// The entry in the Seed syntax or, with `keb`, in the KEB syntax.
    pub fn entry(&self, keb: bool) -> String {
        let list = |s: &BTreeSet<String>| s.iter().cloned().collect::<Vec<_>>().join("|");
        let cond = match &self.tenants {
            Tenants::All => String::new(),
            Tenants::Only(s) => format!("(GA={})", list(s)),
            Tenants::Except(s) => format!("(GA!={})", list(s)),
        };
        let message = self.message.replace('\\', "\\\\").replace('"', "\\\"");
        let verb = if keb { " -> DENY" } else { " deny" };
        format!("{}{cond}{verb} \"{message}\"", self.plan)
    }
}

/// The deny entries of `operationBlocklist.provision`, and notes on what has no equivalent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Blocklist {
    pub denies: Vec<Deny>,
    pub notes: Vec<String>,
}

/// One upstream rule as written.
struct Upstream {
    message: String,
    plans: Vec<String>,
    only: Option<BTreeSet<String>>,
    except: Option<BTreeSet<String>>,
}

const OPERATIONS: [&str; 4] = ["provision", "update", "planUpgrade", "deprovision"];

/// Why KEB's `operationBlocklist` cannot be carried over: the value, entry and field, and the reason.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BlocklistError(String);

/// Reads `operationBlocklist` (a YAML string, as the Helm chart takes it, or a mapping).
pub fn blocklist(values: &Value) -> Result<Blocklist, BlocklistError> {
    let doc = match values.get("operationBlocklist") {
        None | Some(Value::Null) => return Ok(Blocklist::default()),
        Some(Value::String(s)) if s.trim().is_empty() => return Ok(Blocklist::default()),
        Some(Value::String(s)) => serde_saphyr::from_str::<Value>(s)
            .map_err(|e| BlocklistError(format!("operationBlocklist is not valid YAML: {e}")))?,
        Some(v @ Value::Object(_)) => v.clone(),
        Some(other) => {
            return Err(BlocklistError(format!(
                "operationBlocklist must be a YAML string or a mapping, found `{other}`"
            )));
        }
    };
    let Some(ops) = doc.as_object() else {
        return Err(BlocklistError(
            "operationBlocklist must map operations (provision, update, planUpgrade, deprovision) to rules".into(),
        ));
    };
    let mut out = Blocklist::default();
    for (op, rules) in ops {
        if !OPERATIONS.contains(&op.as_str()) {
            return Err(BlocklistError(format!(
                "operationBlocklist.{op}: unknown operation; KEB knows {}",
                OPERATIONS.join(", ")
            )));
        }
        let texts = rule_texts(op, rules)?;
        if op != "provision" {
            if !texts.is_empty() {
                out.notes.push(format!(
                    "operationBlocklist.{op} ({} rule(s)) has no equivalent: hap-operator decides accounts for new clusters only; keep it in KEB",
                    texts.len()
                ));
            }
            continue;
        }
        let mut parsed = Vec::new();
        for (i, t) in texts.iter().enumerate() {
            let at = format!("operationBlocklist.provision[{i}]");
            match parse_rule(t).map_err(|e| BlocklistError(format!("{at}: {e}")))? {
                Some(r) => parsed.push((at, r)),
                None => out
                    .notes
                    .push(format!("{at}: no plan filter, a no-op upstream; left out")),
            }
        }
        first_match(&parsed, &mut out);
    }
    Ok(out)
}

/// A rule list: a string or a list of strings; empty strings are no-ops upstream.
fn rule_texts(op: &str, v: &Value) -> Result<Vec<String>, BlocklistError> {
    let items: Vec<&Value> = match v {
        Value::Null => Vec::new(),
        Value::Array(a) => a.iter().collect(),
        other => vec![other],
    };
    items
        .into_iter()
        .map(|i| {
            i.as_str().map(str::to_string).ok_or_else(|| {
                BlocklistError(format!("operationBlocklist.{op}: `{i}` is not a string"))
            })
        })
        .filter(|r| r.as_ref().map_or(true, |s| !s.trim().is_empty()))
        .collect()
}

/// `"message"`, `"message","plan=a,b"`, with `"GA=x,y"` and/or `"GA!=z"`. `None`: no plan filter.
fn parse_rule(text: &str) -> Result<Option<Upstream>, String> {
    let tokens = quoted_tokens(text)?;
    let Some((message, rest)) = tokens.split_first() else {
        return Err("empty rule".into());
    };
    if message.is_empty() {
        return Err(format!("empty message in `{text}`"));
    }
    let mut r = Upstream {
        message: message.clone(),
        plans: Vec::new(),
        only: None,
        except: None,
    };
    for tok in rest {
        let list = |v: &str, what: &str| -> Result<Vec<String>, String> {
            let items: Vec<String> = v.split(',').map(|s| s.trim().to_string()).collect();
            if items.iter().any(String::is_empty) {
                return Err(format!("empty item in the {what} list of `{text}`"));
            }
            Ok(items)
        };
        let lower = |v: Vec<String>| v.into_iter().map(|g| g.to_lowercase()).collect();
        if let Some(v) = tok.strip_prefix("GA!=") {
            r.except = Some(lower(list(v, "GA!=")?));
        } else if let Some(v) = tok.strip_prefix("GA=") {
            r.only = Some(lower(list(v, "GA=")?));
        } else if let Some(v) = tok.strip_prefix("plan=") {
            r.plans = list(v, "plan")?;
        } else {
            return Err(format!(
                "unknown token `{tok}` in `{text}`; KEB knows plan=, GA= and GA!="
            ));
        }
    }
    Ok((!r.plans.is_empty()).then_some(r))
}

/// Comma-separated double-quoted tokens, quotes removed.
fn quoted_tokens(text: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut s = text.trim();
    while !s.is_empty() {
        let Some(body) = s.strip_prefix('"') else {
            return Err(format!("expected `\"` at `{s}` in `{text}`"));
        };
        let end = body
            .find('"')
            .ok_or_else(|| format!("unterminated quoted token in `{text}`"))?;
        out.push(body[..end].to_string());
        s = body[end + 1..].trim_start();
        if let Some(next) = s.strip_prefix(',') {
            s = next.trim_start();
            if s.is_empty() {
                return Err(format!("trailing comma in `{text}`"));
            }
        } else if !s.is_empty() {
            return Err(format!("expected `,` between tokens at `{s}` in `{text}`"));
        }
    }
    Ok(out)
}

/// The tenants of a plan no earlier rule matched.
#[derive(Clone)]
enum Left {
    AllBut(BTreeSet<String>),
    Only(BTreeSet<String>),
}

/// Gives each tenant of each plan to the first rule that matched it upstream.
fn first_match(rules: &[(String, Upstream)], out: &mut Blocklist) {
    let mut left: BTreeMap<String, Left> = BTreeMap::new();
    for (at, r) in rules {
        let only = match (&r.only, &r.except) {
            (Some(o), Some(e)) => Some(o.difference(e).cloned().collect()),
            (Some(o), None) => Some(o.clone()),
            _ => None,
        };
        let except = r.except.clone().filter(|e| !e.is_empty() && only.is_none());
        for plan in &r.plans {
            let state = left
                .entry(plan.clone())
                .or_insert_with(|| Left::AllBut(BTreeSet::new()));
            let (tenants, next) = split(state, only.as_ref(), except.as_ref());
            *state = next;
            match tenants {
                Some(tenants) => out.denies.push(Deny {
                    plan: plan.clone(),
                    tenants,
                    message: r.message.clone(),
                }),
                None => out.notes.push(format!(
                    "{at}: for plan {plan} every tenant it names is matched by an earlier rule upstream; left out"
                )),
            }
        }
    }
}

/// What a rule takes of the tenants left, and what it leaves.
fn split(
    state: &Left,
    only: Option<&BTreeSet<String>>,
    except: Option<&BTreeSet<String>>,
) -> (Option<Tenants>, Left) {
    let some = |s: BTreeSet<String>| (!s.is_empty()).then_some(Tenants::Only(s));
    match (state, only, except) {
        (Left::AllBut(seen), Some(l), _) => (
            some(l.difference(seen).cloned().collect()),
            Left::AllBut(seen.union(l).cloned().collect()),
        ),
        (Left::Only(f), Some(l), _) => (
            some(f.intersection(l).cloned().collect()),
            Left::Only(f.difference(l).cloned().collect()),
        ),
        // Tenants an earlier `GA=` rule took keep its entry: `GA=` outranks `GA!=`.
        (Left::AllBut(seen), None, Some(e)) => (
            Some(Tenants::Except(e.clone())),
            Left::Only(e.difference(seen).cloned().collect()),
        ),
        (Left::Only(f), None, Some(e)) => (
            some(f.difference(e).cloned().collect()),
            Left::Only(f.intersection(e).cloned().collect()),
        ),
        (Left::AllBut(_), None, None) => (Some(Tenants::All), Left::Only(BTreeSet::new())),
        (Left::Only(f), None, None) => (some(f.clone()), Left::Only(BTreeSet::new())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn set(v: &[&str]) -> BTreeSet<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_project_names_the_binding_namespace_unless_the_flag_does() {
        let v = json!({"gardener": {"project": "kyma-prod"}});
        assert_eq!(binding_namespace(&v, None).0, "garden-kyma-prod");
        assert_eq!(
            binding_namespace(&v, Some("garden-kyma-prod")),
            ("garden-kyma-prod".into(), None)
        );
        let (ns, note) = binding_namespace(&v, Some("garden-x"));
        assert_eq!(ns, "garden-x");
        assert!(note.unwrap().contains("gardener.project is `kyma-prod`"));
        let (ns, note) = binding_namespace(&json!({"hap": {}}), None);
        assert_eq!(ns, "garden-kyma-dev");
        assert!(note.unwrap().contains("KEB's default project"));
    }

    #[test]
    fn provision_rules_become_deny_entries_with_upstream_first_match() {
        let v = json!({"operationBlocklist": "provision:\n  - '\"offboarding {globalAccount}\",\"plan=aws,gcp\",\"GA=GA-1,ga-2\"'\n  - '\"only partners\",\"plan=trial\",\"GA!=ga-p\"'\n  - '\"aws frozen\",\"plan=aws\",\"GA=ga-2,ga-3\"'\n  - '\"trial closed\",\"plan=trial\"'\n  - '\"never\",\"plan=trial\",\"GA=ga-x\"'\n  - '\"no filter\"'\nupdate: '\"no updates\",\"plan=aws\"'\n"});
        let b = blocklist(&v).unwrap();
        let d = |plan: &str, tenants: Tenants, message: &str| Deny {
            plan: plan.into(),
            tenants,
            message: message.into(),
        };
        assert_eq!(
            b.denies,
            vec![
                d(
                    "aws",
                    Tenants::Only(set(&["ga-1", "ga-2"])),
                    "offboarding {globalAccount}"
                ),
                d(
                    "gcp",
                    Tenants::Only(set(&["ga-1", "ga-2"])),
                    "offboarding {globalAccount}"
                ),
                d("trial", Tenants::Except(set(&["ga-p"])), "only partners"),
                // ga-2 met the first rule upstream: only ga-3 is this rule's.
                d("aws", Tenants::Only(set(&["ga-3"])), "aws frozen"),
                // After `GA!=ga-p` only ga-p is left for the plan-wide rule.
                d("trial", Tenants::Only(set(&["ga-p"])), "trial closed"),
            ]
        );
        let notes = b.notes.join("\n");
        assert!(
            notes.contains("provision[4]: for plan trial every tenant"),
            "{notes}"
        );
        assert!(notes.contains("provision[5]: no plan filter"), "{notes}");
        assert!(
            notes.contains("operationBlocklist.update (1 rule(s)) has no equivalent"),
            "{notes}"
        );
        assert_eq!(
            b.denies[0].entry(false),
            "aws(GA=ga-1|ga-2) deny \"offboarding {globalAccount}\""
        );
        assert_eq!(
            b.denies[2].entry(true),
            "trial(GA!=ga-p) -> DENY \"only partners\""
        );
        assert_eq!(
            d("aws", Tenants::All, "say \"no\"").entry(false),
            "aws deny \"say \\\"no\\\"\""
        );
    }

    #[test]
    fn a_blocked_plan_loses_its_allow_entries_and_the_manifest_validates_in_seed_syntax() {
        let v = json!({
            "hap": {"rule": ["aws", "trial->S", "gcp", "gcp(PR=cf-sa30)->PR"]},
            "operationBlocklist": {"provision": [
                "\"trial is closed\",\"plan=trial\"",
                "\"bye {globalAccount}\",\"plan=gcp\",\"GA=Ga-1\"",
            ]},
        });
        let target = super::super::migrate::Target {
            name: "default".into(),
            binding_namespace: "garden-kyma-dev".into(),
        };
        let m = super::super::migrate::from_keb_values(&v, &target).unwrap();
        assert!(m.errors.is_empty(), "{:?}\n{}", m.errors, m.manifest);
        let doc: Value = serde_saphyr::from_str(&m.manifest).unwrap();
        assert_eq!(
            doc["spec"]["rules"],
            json!([
                "aws",
                "gcp",
                "gcp(PR=cf-sa30)",
                "trial deny \"trial is closed\"",
                "gcp(GA=ga-1) deny \"bye {globalAccount}\""
            ]),
            "{}",
            m.manifest
        );
        assert!(m.manifest.contains("# Left out, as operationBlocklist blocks every provisioning of their plan: `trial(shared)`"), "{}", m.manifest);
        assert!(
            m.notes.iter().any(|n| n.starts_with("rule 2 `trial->S`")),
            "{:?}",
            m.notes
        );
    }

    #[test]
    fn ga_and_except_in_one_rule_is_their_difference() {
        let v = json!({"operationBlocklist": {"provision": ["\"m\",\"plan=aws\",\"GA=a,b\",\"GA!=b\""]}});
        let b = blocklist(&v).unwrap();
        assert_eq!(b.denies[0].tenants, Tenants::Only(set(&["a"])));
    }

    #[test]
    fn bad_blocklists_name_the_entry_and_the_reason() {
        let err = |v: Value| blocklist(&v).unwrap_err().to_string();
        assert!(
            err(json!({"operationBlocklist": {"planUpgarde": "\"m\",\"plan=aws\""}}))
                .contains("operationBlocklist.planUpgarde: unknown operation")
        );
        let e = err(
            json!({"operationBlocklist": {"provision": ["\"m\",\"plan=aws\"", "\"m\",\"region=x\""]}}),
        );
        assert!(
            e.contains("operationBlocklist.provision[1]: unknown token `region=x`"),
            "{e}"
        );
        let e = err(json!({"operationBlocklist": {"provision": "\"\",\"plan=aws\""}}));
        assert!(e.contains("provision[0]: empty message"), "{e}");
        let e = err(json!({"operationBlocklist": {"provision": "\"m\",\"plan=aws,,gcp\""}}));
        assert!(e.contains("empty item in the plan list"), "{e}");
        let e = err(json!({"operationBlocklist": {"provision": "\"m\","}}));
        assert!(e.contains("trailing comma"), "{e}");
        let e = err(json!({"operationBlocklist": "provision: [unclosed"}));
        assert!(e.contains("not valid YAML"), "{e}");
        assert_eq!(
            blocklist(&json!({"operationBlocklist": ""})).unwrap(),
            Blocklist::default()
        );
    }
}
