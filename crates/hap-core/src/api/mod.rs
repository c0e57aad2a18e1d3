//! The Kubernetes resource types hap-operator serves (HapConfig, AccountClaim) and the trimmed
//! views of the Gardener resources it reads. Types only: no I/O, no decisions.

pub mod accountclaim;
pub mod conditions;
pub mod gardener;
pub mod hapconfig;
pub mod lifecycle;
pub mod patterns;
pub mod policy;
pub mod quarantine;
pub mod sources;
pub mod tenants;

pub use accountclaim::{
    AccountClaim, AccountClaimSpec, AccountClaimStatus, ClaimPhase, Decision, MatchedRule,
    PendingClaimWrite,
};
pub use gardener::{BindingKind, CredentialsKind, Shoot, ShootError, ShootSpec, ShootStatus};
pub use hapconfig::{
    BindingsInUse, Disagreement, HapConfig, HapConfigSpec, HapConfigStatus, LabelKeys, LegacyRules,
    MultiHyperscalerAccount, ObservationStatus, OperatingMode, OrphanStatus, PinStatus, PlanSpec,
    PoolFigures, PreferenceStatus, ReleaseMode, ReleaseSpec, RuleStatus, RuleSyntax,
    observing_denial, paused_denial,
};
pub use lifecycle::{
    CleanupFailedBinding, CordonedBinding, PoolLifecycle, PoolLowSpec, SuspectBinding, SuspectSpec,
};
pub use policy::{EuAccessMode, Pin, PinPool, PoolPreference, StructuredRule};
pub use quarantine::QuarantineSpec;
pub use sources::{
    FieldSource, LabelOperator, LabelRequirement, ObjectIdentity, PurposeOperator,
    PurposeRequirement, RequestFields, RequestSource, SourceKind, SourceStatus,
};
pub use tenants::{RequesterKind, TenantPolicy, TenantRule};

/// Field manager for every write the operator makes; one fixed name for all replicas so that
/// server-side apply never sees two owners of the same status.
pub const FIELD_MANAGER: &str = "hap-operator";
/// Field manager of the AccountClaims request sources create (and label): the operator acting
/// for the request's owner, kept apart from the decisions it writes as `FIELD_MANAGER` (status,
/// finalizer), so managedFields show which role wrote what.
pub const SOURCE_FIELD_MANAGER: &str = "hap-operator-sources";
/// Finalizer the operator puts on AccountClaims so that it can release the binding.
pub const CLAIM_FINALIZER: &str = "accountpool.io/release";
