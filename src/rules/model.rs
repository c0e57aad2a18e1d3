//! The one rule model all three syntaxes parse into, and its canonical printing in the Seed and
//! KEB syntaxes (each printer re-parses to the same model).

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

/// One parsed rule entry: which requests it matches and which pool it points them at.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Rule {
    pub plan: String,
    pub pr: Cond,
    pub cr: Cond,
    /// Append `_<platform region>` to the hyperscalerType.
    pub pr_suffix: bool,
    /// Append `_<cluster region>` after the platform region part.
    pub cr_suffix: bool,
    pub shared: bool,
    pub eu_access: EuAccess,
}

/// Specificity: exact conditions first, then wildcards (DESIGN §2.4); derived ordering compares
/// the fields in that order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Specificity {
    pub exact: u8,
    pub wildcard: u8,
}

impl Rule {
    /// A rule for `plan` with no conditions and default outputs.
    pub fn plain(plan: impl Into<String>) -> Self {
        Self {
            plan: plan.into(),
            pr: Cond::Absent,
            cr: Cond::Absent,
            pr_suffix: false,
            cr_suffix: false,
            shared: false,
            eu_access: EuAccess::Never,
        }
    }

    pub fn specificity(&self) -> Specificity {
        let count = |f: fn(&Cond) -> bool| u8::from(f(&self.pr)) + u8::from(f(&self.cr));
        Specificity {
            exact: count(|c| matches!(c, Cond::Exact(_))),
            wildcard: count(|c| matches!(c, Cond::Any)),
        }
    }

    pub fn matches(&self, platform_region: Option<&str>, cluster_region: Option<&str>) -> bool {
        self.pr.matches(platform_region) && self.cr.matches(cluster_region)
    }

    pub fn has_wildcard(&self) -> bool {
        matches!(self.pr, Cond::Any) || matches!(self.cr, Cond::Any)
    }

    /// Whether the Seed syntax can say exactly this: there a condition always adds its suffix.
    pub fn seed_expressible(&self) -> bool {
        self.pr_suffix != self.pr.is_absent() && self.cr_suffix != self.cr.is_absent()
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
        if self.shared {
            attrs.push("shared".into());
        }
        match self.eu_access {
            EuAccess::Never => {}
            EuAccess::Always => attrs.push("euAccess".into()),
            EuAccess::FromRequest => attrs.push("euAccess=*".into()),
        }
        Some(with_args(&self.plan, &attrs, ", "))
    }

    /// Canonical KEB text, `None` for `euAccess=*`, which the KEB syntax has no way to say.
    pub fn to_keb(&self) -> Option<String> {
        if self.eu_access == EuAccess::FromRequest {
            return None;
        }
        let mut inputs: Vec<String> = Vec::new();
        if let Some(v) = self.pr.text() {
            inputs.push(format!("PR={v}"));
        }
        if let Some(v) = self.cr.text() {
            inputs.push(format!("HR={v}"));
        }
        let mut out = with_args(&self.plan, &inputs, ",");
        let outputs: Vec<&str> = [
            (self.eu_access == EuAccess::Always, "EU"),
            (self.shared, "S"),
            (self.pr_suffix, "PR"),
            (self.cr_suffix, "HR"),
        ]
        .iter()
        .filter(|(on, _)| *on)
        .map(|(_, name)| *name)
        .collect();
        if !outputs.is_empty() {
            let _ = write!(out, " -> {}", outputs.join(","));
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
        with_args(&self.plan, &parts, sep)
    }
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
        let mut r = Rule::plain("aws");
        r.pr = Cond::Exact("cf-eu11".into());
        r.eu_access = EuAccess::Always;
        assert_eq!(r.to_seed(), None);
        assert_eq!(r.to_keb().as_deref(), Some("aws(PR=cf-eu11) -> EU"));
        r.pr_suffix = true;
        assert_eq!(r.to_seed().as_deref(), Some("aws(PR=cf-eu11, euAccess)"));
    }

    #[test]
    fn keb_cannot_say_eu_from_request() {
        let mut r = Rule::plain("azure");
        r.eu_access = EuAccess::FromRequest;
        assert_eq!(r.to_keb(), None);
        assert_eq!(r.to_seed().as_deref(), Some("azure(euAccess=*)"));
    }
}
