//! Condition types and reasons, as constants, so that status code and tests agree on spelling.

/// Condition types.
pub mod types {
    pub const READY: &str = "Ready";
    pub const RULES_VALID: &str = "RulesValid";
    pub const POOLS_AVAILABLE: &str = "PoolsAvailable";
    pub const RECONCILING: &str = "Reconciling";
    pub const STALLED: &str = "Stalled";
    pub const BOUND: &str = "Bound";
    /// On a claim being deleted: whether its binding has been released.
    pub const RELEASED: &str = "Released";
    pub const SOURCES_AVAILABLE: &str = "SourcesAvailable";
    /// On a HapConfig in `spec.mode: Observe`: what it would choose, in counts.
    pub const OBSERVING: &str = "Observing";
}

/// Condition reasons (CamelCase, as metav1.Condition requires).
pub mod reasons {
    pub const READY: &str = "Ready";
    pub const IGNORED: &str = "Ignored";
    pub const PROGRESSING: &str = "Progressing";
    pub const VALID: &str = "Valid";
    pub const INVALID: &str = "Invalid";
    pub const CONFIG_INVALID: &str = "ConfigInvalid";
    pub const CONFIG_MISSING: &str = "ConfigMissing";
    pub const POOLS_PRESENT: &str = "PoolsPresent";
    pub const MISSING_POOL: &str = "MissingPool";
    pub const NO_MATCHING_RULE: &str = "NoMatchingRule";
    pub const AMBIGUOUS_MATCH: &str = "AmbiguousMatch";
    pub const POOL_EXHAUSTED: &str = "PoolExhausted";
    pub const MISSING_PROVIDER: &str = "MissingProvider";
    pub const UNKNOWN_PLAN: &str = "UnknownPlan";
    pub const BINDING_LOST: &str = "BindingLost";
    pub const DENIED: &str = "Denied";
    pub const PINNED_BINDING_UNAVAILABLE: &str = "PinnedBindingUnavailable";
    pub const INVENTORY_UNAVAILABLE: &str = "InventoryUnavailable";
    pub const BOUND: &str = "Bound";
    /// The garden refused a binding write (RBAC, or admission: the referenced Secret).
    pub const FORBIDDEN: &str = "Forbidden";
    pub const SOURCES_WATCHED: &str = "SourcesWatched";
    pub const SOURCE_UNAVAILABLE: &str = "SourceUnavailable";
    /// An adopted binding (`spec.adoptBinding`) that does not carry the claim's global account.
    pub const BINDING_NOT_TENANT: &str = "BindingNotTenant";
    /// `spec.tenants` allows no such requester to claim for that global account (final).
    pub const TENANT_NOT_ALLOWED: &str = "TenantNotAllowed";
    /// The HapConfig in force is paused (`spec.paused: true`): nothing is claimed or released.
    pub const PAUSED: &str = "Paused";
    /// The HapConfig in force observes (`spec.mode: Observe`): nothing is claimed or released.
    pub const OBSERVING: &str = "Observing";
}
