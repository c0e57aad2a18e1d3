//! Diagnostics of HapConfig validation (rules, request sources, label syntax): the reasons, one
//! diagnostic per problem, and the one-line-per-error summary the operator writes into
//! conditions. Below both `rules` and `sources`, so that neither imports the other for them.

pub mod labelcheck;
pub mod labelsyntax;

pub use labelsyntax::{label_key_problem, label_value_problem};

use std::fmt;

use serde::{Deserialize, Serialize};

/// Why a rule set (or one of its entries) is rejected or flagged. Serialised as the variant
/// name because it is part of the CLI's JSON contract (docs/design.md §6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Reason {
    ParseError,
    DuplicateRule,
    AmbiguousRules,
    UnknownPlan,
    UncoveredPlan,
    EmptyRules,
    InvalidConfig,
    MissingPool,
    /// An ordered pool list breaks a fallback constraint (EU access, shared) or repeats a pool.
    InvalidFallback,
    /// Warning: a fallback pool is the first pool of another entry.
    FallbackOverlap,
    /// A pin conflicts with another (a binding pinned to two tenants, a tenant pinned twice).
    PinConflict,
    /// Warning: a tenant rule names users or groups, and nothing says the webhook's callers
    /// are authenticated (`hap validate` without `--webhook-client-ca`).
    UnauthenticatedCallers,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::ParseError => "ParseError",
            Reason::DuplicateRule => "DuplicateRule",
            Reason::AmbiguousRules => "AmbiguousRules",
            Reason::UnknownPlan => "UnknownPlan",
            Reason::UncoveredPlan => "UncoveredPlan",
            Reason::EmptyRules => "EmptyRules",
            Reason::InvalidConfig => "InvalidConfig",
            Reason::MissingPool => "MissingPool",
            Reason::InvalidFallback => "InvalidFallback",
            Reason::FallbackOverlap => "FallbackOverlap",
            Reason::PinConflict => "PinConflict",
            Reason::UnauthenticatedCallers => "UnauthenticatedCallers",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One problem. `index` is 1-based; `column` is 1-based and counts characters of `entry`;
/// `field` is the spec path of the problem (`rules[2]`, `structuredRules[0].oneOf[1]`,
/// `pins[3]`), which for structured entries and pins takes the place of the column.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diagnostic {
    pub index: Option<usize>,
    pub entry: Option<String>,
    pub reason: Reason,
    pub message: String,
    pub column: Option<usize>,
    #[serde(default)]
    pub field: Option<String>,
}

impl Diagnostic {
    /// A problem of the configuration as a whole, not of one entry.
    pub fn global(reason: Reason, message: impl Into<String>) -> Self {
        Self {
            index: None,
            entry: None,
            reason,
            message: message.into(),
            column: None,
            field: None,
        }
    }

    /// A problem of one spec field that is not a rule entry (`pins[2]`).
    pub fn field(field: impl Into<String>, reason: Reason, message: impl Into<String>) -> Self {
        Self {
            field: Some(field.into()),
            ..Self::global(reason, message)
        }
    }

    /// The same problem, located at a spec path.
    pub fn with_field(self, field: Option<String>) -> Self {
        Self { field, ..self }
    }

    /// A problem of entry `index` (1-based).
    pub fn at(
        index: usize,
        entry: &str,
        reason: Reason,
        column: Option<usize>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            index: Some(index),
            entry: Some(entry.to_string()),
            reason,
            message: message.into(),
            column,
            field: None,
        }
    }
}

impl fmt::Display for Diagnostic {
    /// `rule 3 `aws(PR=)`: column 8: PR is empty`; the prefix parts are left out when unknown.
    /// Structured entries and pins name their field instead of a column.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `rules[i]` says no more than the index; other paths say where in an object.
        let field = self.field.as_deref().filter(|p| !p.starts_with("rules["));
        let at = |i: usize| match field {
            Some(p) => format!("rule {i} ({p})"),
            None => format!("rule {i}"),
        };
        match (self.index, &self.entry, field) {
            (Some(i), Some(e), _) => write!(f, "{} `{e}`: ", at(i))?,
            (Some(i), None, _) => write!(f, "{}: ", at(i))?,
            (None, Some(e), _) => write!(f, "`{e}`: ")?,
            (None, None, Some(p)) => write!(f, "{p}: ")?,
            (None, None, None) => {}
        }
        if let Some(c) = self.column {
            write!(f, "column {c}: ")?;
        }
        write!(f, "{}", self.message)
    }
}

/// Every error and warning found in one rule set.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Validation {
    pub errors: Vec<Diagnostic>,
    pub warnings: Vec<Diagnostic>,
}

impl Validation {
    /// Every error on a line of its own, for condition messages and logs.
    pub fn summary(&self) -> String {
        self.errors
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl fmt::Display for Validation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.summary())
    }
}

impl std::error::Error for Validation {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_has_one_line_per_error_with_position() {
        let v = Validation {
            errors: vec![
                Diagnostic::at(3, "aws(PR=)", Reason::ParseError, Some(8), "PR is empty"),
                Diagnostic::global(Reason::UncoveredPlan, "required plan `gcp` is not covered"),
            ],
            warnings: vec![],
        };
        assert_eq!(
            v.summary(),
            "rule 3 `aws(PR=)`: column 8: PR is empty\nrequired plan `gcp` is not covered"
        );
    }

    #[test]
    fn reason_serialises_as_its_name() {
        assert_eq!(
            serde_json::to_string(&Reason::MissingPool).unwrap(),
            "\"MissingPool\""
        );
        assert_eq!(Reason::AmbiguousRules.as_str(), "AmbiguousRules");
    }
}
