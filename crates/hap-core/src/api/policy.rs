//! The policy parts of the HapConfig spec: rule entries in structured form (ordered
//! pools and deny, `oneOf`), pins of global accounts to named bindings, and the CEL
//! rules that reject the EU-access and shared-fallback mistakes at apply time.
//!
//! The CEL rules check what a regular expression can see; the operator's validation
//! (`rules::CompiledRules`) checks everything again with the same words, so `hap validate` and a
//! rejected `kubectl apply` agree.

use kube::KubeSchema;
use kube::core::{Message, Rule};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::accountclaim::{LABEL_VALUE_PATTERN, PLAN_PATTERN};

/// A region condition: a region name, or `*` for any region.
pub const REGION_CONDITION_PATTERN: &str = r"^(\*|[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$";
/// A Kubernetes object name (DNS-1123 subdomain), as bindings are named.
pub const OBJECT_NAME_PATTERN: &str =
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
/// The most preferences one entry may list.
pub const MAX_PREFERENCES: usize = 8;

/// One rule entry written as an object: the same model as an entry of `rules`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.message) || size(self.oneOf) == 0").message("message is what a deny entry tells the request: set it only with oneOf: []"))]
#[x_kube(validation = eu_rule())]
#[x_kube(validation = shared_rule())]
#[x_kube(validation = Rule::new("!has(self.globalAccounts) || size(self.oneOf) == 0").message("globalAccounts: only a deny entry (oneOf: []) may name global accounts; an entry that names pools applies to every tenant"))]
#[x_kube(validation = Rule::new("!has(self.exceptGlobalAccounts) || size(self.oneOf) == 0").message("exceptGlobalAccounts: only a deny entry (oneOf: []) may name global accounts; an entry that names pools applies to every tenant"))]
#[x_kube(validation = Rule::new("!(has(self.globalAccounts) && has(self.exceptGlobalAccounts))").message("globalAccounts and exceptGlobalAccounts are mutually exclusive: an entry takes one of them"))]
pub struct StructuredRule {
    /// The plan the entry matches, e.g. `aws`, `sap-converged-cloud`.
    #[schemars(length(min = 1, max = 63), regex(pattern = PLAN_PATTERN))]
    pub plan: String,
    /// Match condition on the request's platform region: a region, or `*` for any. Unset: no condition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), regex(pattern = REGION_CONDITION_PATTERN))]
    pub platform_region: Option<String>,
    /// Match condition on the request's cluster (hyperscaler) region: a region, or `*` for any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), regex(pattern = REGION_CONDITION_PATTERN))]
    pub cluster_region: Option<String>,
    /// The pools to use, in order: the first one with a usable binding serves the request (a
    /// binding the tenant already holds in any of them is reused first). `[]` denies every
    /// request the entry matches.
    #[schemars(length(max = 8))]
    pub one_of: Vec<PoolPreference>,
    /// What a denied request is told (only with `oneOf: []`). `{plan}` and `{globalAccount}`
    /// are replaced by the request's plan and global account.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 200))]
    pub message: Option<String>,
    /// Deny entries only: the entry matches requests of these global accounts only
    /// (case-insensitive; KEB's blocklist `GA=`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 100), inner(length(max = 63), regex(pattern = LABEL_VALUE_PATTERN)))]
    pub global_accounts: Option<Vec<String>>,
    /// Deny entries only: the entry matches requests of every global account but these
    /// (case-insensitive; KEB's blocklist `GA!=`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 100), inner(length(max = 63), regex(pattern = LABEL_VALUE_PATTERN)))]
    pub except_global_accounts: Option<Vec<String>>,
}

/// One preference: the labels of the pool it names.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.sharedFallback) || !self.sharedFallback || (has(self.shared) && self.shared)").message("sharedFallback: true needs shared: true (it accepts this shared pool as the fallback of a dedicated one)"))]
pub struct PoolPreference {
    /// Append `_<platform region>` to the hyperscalerType.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform_region_suffix: Option<bool>,
    /// Append `_<cluster region>` (after the platform region part).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_region_suffix: Option<bool>,
    /// Use the shared pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared: Option<bool>,
    /// Accept this shared pool as the fallback of an earlier, dedicated preference. Without it a
    /// dedicated preference never falls back to a shared pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_fallback: Option<bool>,
    /// `Required`: bindings labelled `euAccess=true`; `FromRequest`: required for requests from
    /// an EU-access platform region (`euAccessPlatformRegions`); unset: the label must be absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16))]
    pub eu_access: Option<EuAccessMode>,
}

/// What a preference requires of the pool's euAccess label.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum EuAccessMode {
    /// `euAccess=true`.
    Required,
    /// `euAccess=true` for requests from an EU-access platform region, else absent.
    FromRequest,
    /// The label must be absent (the default).
    Absent,
}

/// A global account pinned to one named binding.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Pin {
    /// The tenant (BTP global account).
    #[schemars(length(min = 1, max = 63), regex(pattern = LABEL_VALUE_PATTERN))]
    pub global_account: String,
    /// The binding (in `bindingNamespace`) the tenant's clusters use; it is claimed for this
    /// tenant and never given to another one.
    #[schemars(length(min = 1, max = 253), regex(pattern = OBJECT_NAME_PATTERN))]
    pub binding: String,
    /// The pool the pin is for. Unset: the pool the binding's labels put it in; while the
    /// binding is missing, every dedicated request of the tenant waits for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<PinPool>,
}

/// A dedicated pool, named by its labels.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PinPool {
    /// The pool's hyperscalerType label, e.g. `aws`, `gcp_cf-sa30`.
    #[schemars(length(min = 1, max = 63), regex(pattern = LABEL_VALUE_PATTERN))]
    pub hyperscaler_type: String,
    /// Whether the pool is the EU-access one (`euAccess=true`). Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eu_access: Option<bool>,
}

/// No binding pinned to two tenants (naming it would cost more than the API server allows; `hap
/// validate` and the HapConfig status name both pins).
pub(crate) const PINS_ONE_TENANT_RULE: &str =
    "self.all(p, self.all(q, q.binding != p.binding || q.globalAccount == p.globalAccount))";
pub(crate) const PINS_ONE_TENANT_MESSAGE: &str =
    "a binding is pinned to two global accounts: a pinned binding belongs to one tenant";

// Apply-time checks of the structured form. The API server's cost estimate rules out joining
// the preferences into a string, and CRD rules have no indices over lists, so the checks are
// written out for each position of the (at most 8) preferences.

/// How much EU access preference `i` promises: 0 none, 1 from the request, 2 required.
fn eu_rank(i: usize) -> String {
    format!(
        "(has(self.oneOf[{i}].euAccess) ? (self.oneOf[{i}].euAccess == 'Required' ? 2 : (self.oneOf[{i}].euAccess == 'FromRequest' ? 1 : 0)) : 0)"
    )
}

/// Whether preference `i` breaks the EU rule: it promises less EU access than the one before
/// (for a sequence, never less than the one before is never less than any before).
fn eu_broken(i: usize) -> String {
    format!(
        "(size(self.oneOf) > {i} && {} < {})",
        eu_rank(i),
        eu_rank(i - 1)
    )
}

/// Whether preference `i` is dedicated.
fn dedicated(i: usize) -> String {
    format!("!(has(self.oneOf[{i}].shared) && self.oneOf[{i}].shared)")
}

/// Whether preference `i` breaks the sharing rule: shared without `sharedFallback`, after a
/// dedicated one.
fn shared_broken(i: usize) -> String {
    let earlier: Vec<String> = (0..i).map(dedicated).collect();
    format!(
        "(size(self.oneOf) > {i} && has(self.oneOf[{i}].shared) && self.oneOf[{i}].shared && !(has(self.oneOf[{i}].sharedFallback) && self.oneOf[{i}].sharedFallback) && ({}))",
        earlier.join(" || ")
    )
}

/// A rule that no position is broken, and a message naming the first broken one.
fn positional(broken: fn(usize) -> String, what: &str) -> (String, String) {
    let positions: Vec<usize> = (1..MAX_PREFERENCES).collect();
    let rule = positions
        .iter()
        .map(|i| format!("!{}", broken(*i)))
        .collect::<Vec<_>>()
        .join(" && ");
    let mut index = "0".to_string();
    for i in positions.iter().rev() {
        index = format!("({} ? {i} : {index})", broken(*i));
    }
    let message = format!(
        "'oneOf[' + {} + ']: preference ' + {} + ' {what}'",
        number(&index, MAX_PREFERENCES),
        number(&format!("{index} + 1"), MAX_PREFERENCES)
    );
    (rule, message)
}

/// `expr` (an int from 0 to `max`) as a string. CEL's `string(int)` would do, but the API server
/// estimates its result as unbounded, which puts any message that uses it over the budget.
fn number(expr: &str, max: usize) -> String {
    let digits: Vec<String> = (0..=max).map(|n| format!("'{n}'")).collect();
    format!("[{}][{expr}]", digits.join(","))
}

fn structured_eu() -> (String, String) {
    positional(
        eu_broken,
        "falls back from an EU-access pool to a pool without EU access: every preference after an EU-access one (euAccess: Required, or FromRequest) must be EU-access too",
    )
}

fn structured_shared() -> (String, String) {
    positional(
        shared_broken,
        "falls back from a dedicated pool to a shared one: say so explicitly with sharedFallback: true",
    )
}

fn eu_rule() -> Rule {
    let (rule, message) = structured_eu();
    Rule::new(rule).message(Message::Expression(message))
}

fn shared_rule() -> Rule {
    let (rule, message) = structured_shared();
    Rule::new(rule).message(Message::Expression(message))
}

// Entry strings. The API server estimates the cost of a rule for each of up to 1000 entries of
// up to 256 characters (counted as 4 bytes each), so a rule may spend about 10000 per entry: one
// regular expression of at most some 200 characters. So each check is a small expression over
// the entry with its spaces removed that matches up to the first preference of one kind of
// mistake, and the message counts the `|` in that match to find the column in the entry as
// written. An entry with two kinds of mistake is reported by two checks; the smallest column is
// the first mistake, which is the one the operator reports.

/// The checks of entry strings: EU access and sharing, in Seed and in KEB. The Seed fallback
/// patterns spell "a fallback without `euAccess`" (`shared`) as "without `eu`" (`sh`): only that
/// attribute has those letters, so `euAccess=false` (`shared=false`) is left to the operator.
pub fn entry_checks() -> Vec<EntryCheck> {
    const EU: &str = "a fallback from an EU-access pool to a pool without EU access: every preference after an EU-access one (euAccess, euAccess=*; KEB: EU) must be EU-access too";
    const SHARED: &str = "a fallback from a dedicated pool to a shared one: say so explicitly with shared=fallback (KEB: SF)";
    let non_eu = "[|][(](?:[^|e]|e[^u|])*e?[)]";
    let a = "[(,]euAccess(?:=true)?[,)]";
    let r = "[(,]euAccess=[*][,)]";
    let dedicated = "[|][(](?:[^|s]|s[^h|])*s?[)]";
    let shared = "[|][(](?:[^|]*,)?shared(?:=true)?[,)]";
    let (kn, kd) = ("(?:SF?|[PH]R)", "(?:EU|[PH]R)");
    let check = |keb, head_dedicated, violation: String, what| EntryCheck {
        keb,
        head_dedicated,
        violation,
        what,
    };
    vec![
        // Seed: EU access, then none; EU access, then from the request; from the request, then none.
        check(false, false, format!("^.*?{a}.*?{non_eu}"), EU),
        check(false, false, format!("^.*?{a}.*?[|][^|]*{r}"), EU),
        check(false, false, format!("^.*?{r}.*?{non_eu}"), EU),
        // Seed: a dedicated head, then shared; a dedicated fallback, then shared.
        check(false, true, format!("^.*?{shared}"), SHARED),
        check(false, false, format!("^.*?{dedicated}.*?{shared}"), SHARED),
        // KEB: EU, then a preference without it; a dedicated preference, then S (not SF).
        check(
            true,
            false,
            format!(r"^.*?(?:->|[|,])EU\b.*?[|](?:-|{kn}(?:,{kn})*)(?:[|]|$)"),
            EU,
        ),
        check(
            true,
            false,
            format!(r"^.*?(?:->|[|])(?:-|{kd}(?:,{kd})*)[|](?:[^|]*[|])*?(?:[^|]*,)?S\b"),
            SHARED,
        ),
    ]
}

/// One CEL rule on an entry string: no match of `violation` in the entry without spaces (only
/// for entries of the syntax it is written for), else a message with the column of the `|`
/// that starts the offending preference.
fn entry_rule(check: &EntryCheck) -> serde_json::Value {
    let v = &check.violation;
    let syntax = if check.keb {
        "!self.contains('->')"
    } else {
        "self.contains('->')"
    };
    let head = if check.head_dedicated {
        // The head of the entry (before the first `|`) names no shared pool.
        " || self.split('|')[0].replace(' ', '').matches('[(,]shared(?:=true|=fallback)?[,)]')"
    } else {
        ""
    };
    // Deny entries (a quoted message) have no preferences and are left to the operator.
    let rule =
        format!("self.contains('\"') || {syntax}{head} || !self.replace(' ', '').matches(r'{v}')");
    // k: the `|` in the match, less the one after the culprit when the match ends with it; the
    // column of the k-th `|` of the entry as written is where the rest after it begins.
    let m = format!("self.replace(' ', '').find(r'{v}')");
    let k = if check.keb {
        format!("(size({m}.split('|')) - ({m}.endsWith('|') ? 2 : 1))")
    } else {
        format!("(size({m}.split('|')) - 1)")
    };
    let message = format!(
        "'column ' + {} + ': {}'",
        number(
            &format!("size(self) - size(self.split('|', {k} + 1)[{k}])"),
            256
        ),
        check.what
    );
    serde_json::json!({"rule": rule, "messageExpression": message})
}

/// Adds per-item CEL rules to the `rules` list schema, so that a rejection names the item
/// (`spec.rules[2]`) and its message the column. The operator checks every case in full (tabs,
/// odd spacing); these catch what people write.
pub fn rule_items(schema: &mut schemars::Schema) {
    if let Some(items) = schema.get_mut("items").and_then(|i| i.as_object_mut()) {
        // Also bounds the cost the API server estimates for the rules below.
        items.insert("maxLength".into(), 256.into());
        let rules: Vec<serde_json::Value> = entry_checks().iter().map(entry_rule).collect();
        items.insert("x-kubernetes-validations".into(), rules.into());
    }
}

/// One apply-time check of entry strings, as the CRD carries it (exposed for the tests that
/// hold the expressions against the operator's own validation).
#[derive(Clone, Debug)]
pub struct EntryCheck {
    /// For KEB entries (those with `->`); else for Seed entries.
    pub keb: bool,
    /// Applies only when the head (before the first `|`) names no shared pool.
    pub head_dedicated: bool,
    /// Matches, in the entry without spaces, the shortest prefix that ends in the first
    /// preference with this mistake (possibly followed by its closing `|`).
    pub violation: String,
    pub what: &'static str,
}
