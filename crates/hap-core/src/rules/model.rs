//! The one rule model all syntaxes parse into (Seed, KEB, legacy and the structured
//! `structuredRules`), and its canonical printing in the Seed and KEB syntaxes (each printer
//! re-parses to the same model).
//!
//! An entry matches requests by plan and region conditions and then either names an ordered list
//! of pool results (`oneOf`: the first preference with a usable binding serves) or,
//! with an empty list, denies what it matches.

use std::fmt::Write as _;

/// A match condition on one request region.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Cond {
    /// No condition: matches with or without a region.
    Absent,
    /// The request's region equals the value.
    Exact(String),
    /// The request has a region (`*`).
    Any,
}

impl Cond {
    /// Whether a request region satisfies the condition; empty regions count as absent.
    pub fn matches(&self, value: Option<&str>) -> bool {
        match self {
            Cond::Absent => true,
            Cond::Any => value.is_some(),
            Cond::Exact(v) => value == Some(v.as_str()),
        }
    }

    pub fn is_absent(&self) -> bool {
        matches!(self, Cond::Absent)
    }

    fn text(&self) -> Option<&str> {
        match self {
            Cond::Absent => None,
            Cond::Any => Some("*"),
            Cond::Exact(v) => Some(v),
        }
    }
}

/// A condition on the request's global account: deny entries only (docs/rules.md §2.4). Values
/// are kept lowercase, sorted and without repeats, so that matching is case-insensitive (as
/// upstream KEB's operation blocklist) and `GA=a|b` equals `GA=B|a`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum TenantCond {
    /// No condition: every global account, and requests without one.
    #[default]
    Absent,
    /// `GA=a|b`: the request's global account is one of these.
    In(Vec<String>),
    /// `GA!=a|b`: the request's global account is none of these (a request without one too).
    NotIn(Vec<String>),
}

impl TenantCond {
    /// The canonical list: lowercase, sorted, each value once.
    pub fn normalize<S: AsRef<str>>(values: &[S]) -> Vec<String> {
        let mut out: Vec<String> = values
            .iter()
            .map(|v| v.as_ref().to_ascii_lowercase())
            .collect();
        out.sort();
        out.dedup();
        out
    }

    pub fn matches(&self, global_account: Option<&str>) -> bool {
        let listed = |list: &[String]| {
            global_account.is_some_and(|g| list.iter().any(|v| v.eq_ignore_ascii_case(g)))
        };
        match self {
            TenantCond::Absent => true,
            TenantCond::In(list) => listed(list),
            TenantCond::NotIn(list) => !listed(list),
        }
    }

    pub fn is_absent(&self) -> bool {
        matches!(self, TenantCond::Absent)
    }

    /// How much the condition narrows: a listed set (2) before everyone-but (1) before none (0).
    pub fn rank(&self) -> u8 {
        match self {
            TenantCond::Absent => 0,
            TenantCond::NotIn(_) => 1,
            TenantCond::In(_) => 2,
        }
    }

    /// `GA=a|b` / `GA!=a|b`, as both entry syntaxes write it; `None` without a condition.
    pub fn text(&self) -> Option<String> {
        match self {
            TenantCond::Absent => None,
            TenantCond::In(l) => Some(format!("GA={}", l.join("|"))),
            TenantCond::NotIn(l) => Some(format!("GA!={}", l.join("|"))),
        }
    }
}

/// What an entry requires of the pool's euAccess label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub enum EuAccess {
    /// The label must be absent.
    #[default]
    Never,
    /// `euAccess=true` is required.
    Always,
    /// Required when the request's platform region is an EU-access region (`euAccess=*`).
    FromRequest,
}

impl EuAccess {
    /// The text EntryInfo and the status use: `true`, `false` or `fromRequest`.
    pub fn as_str(self) -> &'static str {
        match self {
            EuAccess::Never => "false",
            EuAccess::Always => "true",
            EuAccess::FromRequest => "fromRequest",
        }
    }
}

/// What one preference of an entry produces: the labels of one pool.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct PoolResult {
    /// Append `_<platform region>` to the hyperscalerType.
    pub pr_suffix: bool,
    /// Append `_<cluster region>` after the platform region part.
    pub cr_suffix: bool,
    pub shared: bool,
    pub eu_access: EuAccess,
    /// The entry explicitly accepts this shared pool as the fallback of a dedicated preference
    /// (Seed `shared=fallback`, KEB `SF`); implies `shared`.
    pub shared_fallback: bool,
}

impl PoolResult {
    /// Whether two preferences name the same pool (the fallback consent does not count).
    pub fn same_pool(&self, other: &PoolResult) -> bool {
        (self.pr_suffix, self.cr_suffix, self.shared, self.eu_access)
            == (
                other.pr_suffix,
                other.cr_suffix,
                other.shared,
                other.eu_access,
            )
    }
}

/// One parsed rule entry: which requests it matches and what it does with them.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Rule {
    pub plan: String,
    pub pr: Cond,
    pub cr: Cond,
    /// The global accounts the entry applies to (deny entries only).
    pub ga: TenantCond,
    /// The ordered preferences (`oneOf`), primary first. Empty: the entry denies what it matches.
    pub pools: Vec<PoolResult>,
    /// What a denied request is told (deny entries only).
    pub deny_message: Option<String>,
}

/// Specificity: the global-account condition first (`GA=` before `GA!=` before none), then
/// exact region conditions, then wildcards (docs/design.md §2.4, docs/rules.md §3); derived ordering
/// compares the fields in that order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Specificity {
    pub tenant: u8,
    pub exact: u8,
    pub wildcard: u8,
}

impl Rule {
    /// A rule for `plan` with no conditions and one default pool.
    pub fn plain(plan: impl Into<String>) -> Self {
        Self::single(plan, PoolResult::default())
    }

    /// A rule for `plan` with no conditions and the one pool `pool`.
    pub fn single(plan: impl Into<String>, pool: PoolResult) -> Self {
        Self {
            plan: plan.into(),
            pr: Cond::Absent,
            cr: Cond::Absent,
            ga: TenantCond::Absent,
            pools: vec![pool],
            deny_message: None,
        }
    }

    /// A rule for `plan` with no conditions that denies what it matches.
    pub fn deny(plan: impl Into<String>, message: Option<String>) -> Self {
        Self {
            plan: plan.into(),
            pr: Cond::Absent,
            cr: Cond::Absent,
            ga: TenantCond::Absent,
            pools: Vec::new(),
            deny_message: message,
        }
    }

    pub fn is_deny(&self) -> bool {
        self.pools.is_empty()
    }

    /// The first preference; `None` for a deny entry.
    pub fn primary(&self) -> Option<&PoolResult> {
        self.pools.first()
    }

    pub fn specificity(&self) -> Specificity {
        let count = |f: fn(&Cond) -> bool| u8::from(f(&self.pr)) + u8::from(f(&self.cr));
        Specificity {
            tenant: self.ga.rank(),
            exact: count(|c| matches!(c, Cond::Exact(_))),
            wildcard: count(|c| matches!(c, Cond::Any)),
        }
    }

    pub fn matches(&self, platform_region: Option<&str>, cluster_region: Option<&str>) -> bool {
        self.pr.matches(platform_region) && self.cr.matches(cluster_region)
    }

    /// Whether the entry matches a request with these regions and this global account.
    pub fn matches_request(
        &self,
        platform_region: Option<&str>,
        cluster_region: Option<&str>,
        global_account: Option<&str>,
    ) -> bool {
        self.matches(platform_region, cluster_region) && self.ga.matches(global_account)
    }

    pub fn has_wildcard(&self) -> bool {
        matches!(self.pr, Cond::Any) || matches!(self.cr, Cond::Any)
    }

    /// Whether the Seed syntax can say exactly this: there a condition always adds its suffix to
    /// the primary pool, and a fallback can append only a region the entry requires.
    pub fn seed_expressible(&self) -> bool {
        let Some((primary, fallbacks)) = self.pools.split_first() else {
            return true;
        };
        primary.pr_suffix != self.pr.is_absent()
            && primary.cr_suffix != self.cr.is_absent()
            && fallbacks.iter().all(|p| {
                (!p.pr_suffix || !self.pr.is_absent()) && (!p.cr_suffix || !self.cr.is_absent())
            })
    }

    /// Canonical Seed text, `None` when the Seed syntax cannot express the rule.
    pub fn to_seed(&self) -> Option<String> {
        if !self.seed_expressible() {
            return None;
        }
        let mut attrs: Vec<String> = Vec::new();
        if let Some(v) = self.pr.text() {
            attrs.push(format!("PR={v}"));
        }
        if let Some(v) = self.cr.text() {
            attrs.push(format!("CR={v}"));
        }
        attrs.extend(self.ga.text());
        let Some((primary, fallbacks)) = self.pools.split_first() else {
            let mut out = with_args(&self.plan, &attrs, ", ");
            out.push_str(" deny");
            if let Some(m) = &self.deny_message {
                let _ = write!(out, " {}", quote(m));
            }
            return Some(out);
        };
        seed_outputs(primary, &mut attrs);
        let mut out = with_args(&self.plan, &attrs, ", ");
        for p in fallbacks {
            let mut attrs = Vec::new();
            if p.pr_suffix {
                attrs.push("PR".to_string());
            }
            if p.cr_suffix {
                attrs.push("CR".to_string());
            }
            seed_outputs(p, &mut attrs);
            let _ = write!(out, " | ({})", attrs.join(", "));
        }
        Some(out)
    }

    /// Canonical KEB text, `None` for `euAccess=*`, which the KEB syntax has no way to say.
    pub fn to_keb(&self) -> Option<String> {
        if self
            .pools
            .iter()
            .any(|p| p.eu_access == EuAccess::FromRequest)
        {
            return None;
        }
        let mut inputs: Vec<String> = Vec::new();
        if let Some(v) = self.pr.text() {
            inputs.push(format!("PR={v}"));
        }
        if let Some(v) = self.cr.text() {
            inputs.push(format!("HR={v}"));
        }
        inputs.extend(self.ga.text());
        let mut out = with_args(&self.plan, &inputs, ",");
        if self.is_deny() {
            out.push_str(" -> DENY");
            if let Some(m) = &self.deny_message {
                let _ = write!(out, " {}", quote(m));
            }
            return Some(out);
        }
        let lists: Vec<String> = self.pools.iter().map(keb_outputs).collect();
        match lists.as_slice() {
            [only] if only.is_empty() => {}
            [only] => {
                let _ = write!(out, " -> {only}");
            }
            many => {
                let shown: Vec<&str> = many
                    .iter()
                    .map(|l| if l.is_empty() { "-" } else { l.as_str() })
                    .collect();
                let _ = write!(out, " -> {}", shown.join(" | "));
            }
        }
        Some(out)
    }

    /// The head only (`plan(PR=a, CR=b)`), used in messages that suggest a missing entry.
    pub fn head(&self, keb: bool) -> String {
        let (cr_key, sep) = if keb { ("HR", ",") } else { ("CR", ", ") };
        let mut parts = Vec::new();
        if let Some(v) = self.pr.text() {
            parts.push(format!("PR={v}"));
        }
        if let Some(v) = self.cr.text() {
            parts.push(format!("{cr_key}={v}"));
        }
        parts.extend(self.ga.text());
        with_args(&self.plan, &parts, sep)
    }
}

/// The Seed output attributes of one preference (its suffixes are said elsewhere).
fn seed_outputs(p: &PoolResult, attrs: &mut Vec<String>) {
    if p.shared_fallback {
        attrs.push("shared=fallback".into());
    } else if p.shared {
        attrs.push("shared".into());
    }
    match p.eu_access {
        EuAccess::Never => {}
        EuAccess::Always => attrs.push("euAccess".into()),
        EuAccess::FromRequest => attrs.push("euAccess=*".into()),
    }
}

/// The KEB outputs of one preference, in canonical order.
fn keb_outputs(p: &PoolResult) -> String {
    [
        (p.eu_access == EuAccess::Always, "EU"),
        (p.shared && !p.shared_fallback, "S"),
        (p.shared_fallback, "SF"),
        (p.pr_suffix, "PR"),
        (p.cr_suffix, "HR"),
    ]
    .iter()
    .filter(|(on, _)| *on)
    .map(|(_, name)| *name)
    .collect::<Vec<_>>()
    .join(",")
}

/// A deny message as the entry syntaxes write it: in double quotes, `"` and `\` escaped.
pub fn quote(message: &str) -> String {
    let mut out = String::with_capacity(message.len() + 2);
    out.push('"');
    for c in message.chars() {
        if matches!(c, '"' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

fn with_args(plan: &str, args: &[String], sep: &str) -> String {
    if args.is_empty() {
        plan.to_string()
    } else {
        format!("{plan}({})", args.join(sep))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(f: impl FnOnce(&mut PoolResult)) -> PoolResult {
        let mut p = PoolResult::default();
        f(&mut p);
        p
    }

    #[test]
    fn specificity_ranks_exact_before_wildcard() {
        let mut exact = Rule::plain("gcp");
        exact.pr = Cond::Exact("cf-sa30".into());
        let mut two_wild = Rule::plain("gcp");
        two_wild.pr = Cond::Any;
        two_wild.cr = Cond::Any;
        assert!(exact.specificity() > two_wild.specificity());
        assert!(two_wild.specificity() > Rule::plain("gcp").specificity());
    }

    #[test]
    fn seed_printing_needs_suffix_with_every_condition() {
        let mut r = Rule::single("aws", pool(|p| p.eu_access = EuAccess::Always));
        r.pr = Cond::Exact("cf-eu11".into());
        assert_eq!(r.to_seed(), None);
        assert_eq!(r.to_keb().as_deref(), Some("aws(PR=cf-eu11) -> EU"));
        r.pools[0].pr_suffix = true;
        assert_eq!(r.to_seed().as_deref(), Some("aws(PR=cf-eu11, euAccess)"));
    }

    #[test]
    fn keb_cannot_say_eu_from_request() {
        let r = Rule::single("azure", pool(|p| p.eu_access = EuAccess::FromRequest));
        assert_eq!(r.to_keb(), None);
        assert_eq!(r.to_seed().as_deref(), Some("azure(euAccess=*)"));
    }

    #[test]
    fn ordered_pools_print_in_both_syntaxes() {
        let mut r = Rule::single("gcp", pool(|p| p.pr_suffix = true));
        r.pr = Cond::Exact("cf-sa30".into());
        r.pools.push(PoolResult::default());
        r.pools.push(pool(|p| {
            p.shared = true;
            p.shared_fallback = true;
        }));
        assert_eq!(
            r.to_seed().as_deref(),
            Some("gcp(PR=cf-sa30) | () | (shared=fallback)")
        );
        assert_eq!(
            r.to_keb().as_deref(),
            Some("gcp(PR=cf-sa30) -> PR | - | SF")
        );
        // A fallback may append only a region the entry requires, in Seed.
        let mut r = Rule::plain("gcp");
        r.pools.push(pool(|p| p.pr_suffix = true));
        assert_eq!(r.to_seed(), None);
        assert_eq!(r.to_keb().as_deref(), Some("gcp -> - | PR"));
    }

    #[test]
    fn deny_prints_its_message_quoted() {
        let mut r = Rule::deny("aws", Some(r#"frozen: "eu11" \ soon"#.into()));
        r.pr = Cond::Exact("cf-eu11".into());
        assert_eq!(
            r.to_seed().as_deref(),
            Some(r#"aws(PR=cf-eu11) deny "frozen: \"eu11\" \\ soon""#)
        );
        assert_eq!(
            r.to_keb().as_deref(),
            Some(r#"aws(PR=cf-eu11) -> DENY "frozen: \"eu11\" \\ soon""#)
        );
        assert_eq!(
            Rule::deny("aws", None).to_seed().as_deref(),
            Some("aws deny")
        );
        assert!(Rule::deny("aws", None).is_deny());
    }
}
