//! What one reconcile of an AccountClaim does, decided from plain facts (pure): the claim
//! protocol's guard order, from a stale copy and a deletion down to the choice of a binding.
//!
//! The reconcile (`controller::claim`) reads a fact only when [`next`] asks for it ([`Read`]),
//! so a claim an earlier guard settles costs no read of its namespace, its rules or the
//! selection; the reads come in the order of the guards, and no API write is made before
//! [`ClaimDecision`] is taken (the ledger records the choice under its lock when the selection
//! is read, as every selection does). The config in force is opaque here (`C`): the decision hands it on to the reads and
//! writes that need it and looks only at the plain facts beside it.

// A step's `Err` is where the decision stops (a decision or a read), returned once per pass, not
// an error carried up a call stack: its size costs nothing.
#![allow(clippy::result_large_err)]

use std::time::Duration;

use crate::api::{Decision, MatchedRule};
use crate::labels::PoolKey;
use crate::rules::{EvalError, Outcome};
use crate::selection::{BeforeUse, Choice, Placement, describe_pool};
use crate::sources::adopt::Adoption;
use crate::status::{BoundTo, PendingReason};

pub mod release;
#[cfg(test)]
mod tests;

/// How long a claim waits when the index is about to show a write (its own or a sibling's).
const WRITE_IN_FLIGHT: Duration = Duration::from_millis(200);

/// What the claim object itself says, read at once.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClaimFields {
    /// The copy handed over must not be decided on.
    pub stale: Option<Stale>,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// The release finalizer is in place.
    pub finalized: bool,
    /// The status records a denial (final).
    pub denied: bool,
    /// The status records a binding (Bound, or Failed with the binding lost).
    pub recorded: bool,
    pub global_account: String,
    /// `spec.adoptBinding`: the request named its binding.
    pub adopt_binding: Option<String>,
}

/// Why the copy handed over is not decided on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stale {
    /// The claim is finished (its finalizer went); it waits for its deletion.
    Finished,
    /// The index knows a newer version (or the deletion), or this replica wrote a newer one.
    Older,
}

/// Everything one decision may look at. `None`: not read (yet); [`next`] asks for it when a
/// guard needs it.
#[derive(Clone, Debug)]
pub struct Facts<C> {
    pub claim: ClaimFields,
    pub config: Option<InForce<C>>,
    pub inventory: Option<Inventory>,
    pub recorded_binding: Option<RecordedBinding>,
    pub tenant: Option<Tenant>,
    pub adoption: Option<Adopted>,
    pub rules: Option<Result<Outcome, EvalError>>,
    pub selection: Option<Selection>,
}

impl<C> Facts<C> {
    /// The claim's own fields, nothing read yet.
    pub fn new(claim: ClaimFields) -> Self {
        Self {
            claim,
            config: None,
            inventory: None,
            recorded_binding: None,
            tenant: None,
            adoption: None,
            rules: None,
            selection: None,
        }
    }
}

/// The HapConfig named by `--config-name`, as the resolver has it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InForce<C> {
    Missing {
        name: String,
    },
    /// No generation of it was ever valid; `summary` lists the errors, one a line.
    Invalid {
        name: String,
        generation: i64,
        summary: String,
    },
    Active {
        config: C,
        name: String,
        paused: bool,
        /// `spec.mode: Observe`: nothing is written on bindings, as when paused.
        observing: bool,
        binding_namespace: String,
    },
}

/// Whether the binding and Shoot caches can be decided on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Inventory {
    Decidable,
    /// Not listed; `causes` says why, empty within the caches' grace period.
    Unavailable {
        causes: Vec<String>,
    },
}

/// A recorded binding as the index shows it (`selection::check_bound`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordedBinding {
    /// Recorded in a namespace the index does not hold: it cannot be checked here.
    Unchecked,
    Intact,
    /// Gone, or another tenant's.
    Lost {
        message: String,
    },
}

impl From<Option<Choice>> for RecordedBinding {
    fn from(check: Option<Choice>) -> Self {
        match check {
            None => RecordedBinding::Unchecked,
            Some(Choice::Lost { message, .. }) => RecordedBinding::Lost { message },
            Some(_) => RecordedBinding::Intact,
        }
    }
}

/// What `spec.tenants` says of the claim's requester.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tenant {
    Allowed,
    Refused { cause: String },
}

/// The adopted binding as the index shows it, and what must be written on it first; taken under
/// the ledger lock (`controller::sources_adopt`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Adopted {
    pub adoption: Adoption,
    pub before: BeforeUse,
}

/// The selection's answer, taken under the ledger lock (`controller::claim_facts::select`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Selection {
    /// This claim's Bound status was written and the index does not show it yet: deciding
    /// again on the older object could bind it a second time. Nothing was selected.
    StatusWritten,
    Placed {
        placement: Placement,
        before: BeforeUse,
    },
}

/// The fact [`next`] needs before it can decide, with what the read needs from the facts
/// already there.
#[derive(Debug, PartialEq, Eq)]
pub enum Read<'a, C> {
    Config,
    /// Points the caches at the config, then asks whether they listed.
    Inventory {
        config: &'a C,
    },
    RecordedBinding,
    Tenant {
        config: &'a C,
    },
    Adoption {
        binding: &'a str,
    },
    Rules {
        config: &'a C,
    },
    Selection {
        config: &'a C,
        outcome: &'a Outcome,
    },
}

/// A fact to read, or the decision.
#[derive(Debug, PartialEq, Eq)]
pub enum Next<'a, C> {
    Read(Read<'a, C>),
    Decided(ClaimDecision<C>),
}

/// Everything one reconcile of a claim may do; carried out by one match
/// (`controller::claim::carry_out`), the only place that writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClaimDecision<C> {
    /// Nothing is written; the claim comes back after [`Wait::after`].
    Wait(Wait),
    /// Being deleted: release its binding (`controller::release`).
    Release,
    /// Add the release finalizer; its update event brings the claim back.
    AddFinalizer,
    /// A denial is final: a later change of the rules does not revisit it.
    StayFinal,
    /// Recorded, and no valid config to verify it against: the record stays as it is.
    KeepUnverified,
    /// Recorded and intact (or not checkable here): status Kept; strays go back first.
    Keep {
        config: C,
        namespace: String,
        give_back: bool,
    },
    /// Recorded, and the binding is gone or another tenant's: reported, never replaced.
    ReportLost {
        config: C,
        cause: String,
        give_back: bool,
    },
    /// Not bound, and why; `matched` names the rule and pool it waits in.
    Pending {
        reason: PendingReason,
        cause: String,
        matched: Option<(MatchedRule, PoolKey)>,
        retry: Retry,
    },
    /// `spec.tenants` refuses the requester (final).
    TenantNotAllowed { cause: String },
    /// A deny entry matched (final).
    Deny { cause: String, matched: MatchedRule },
    /// Record the adopted binding Bound, after the write `before` asks for.
    Adopt {
        config: C,
        to: BoundTo,
        before: BeforeUse,
    },
    /// Bind to a binding the tenant holds or shares (reuse, pin, fill), after the write
    /// `before` asks for.
    Use {
        config: C,
        to: BoundTo,
        before: BeforeUse,
    },
    /// Claim a free binding with a compare-and-swap on this resourceVersion, then bind.
    Claim {
        config: C,
        to: BoundTo,
        expected_resource_version: Option<String>,
    },
}

/// Why a claim waits without writing anything.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Finished: waits for its deletion.
    Finished,
    /// The copy handed over is older than one the index or this replica knows.
    OlderCopy,
    /// Recorded, and the inventory cannot be read: writing a pending status would erase the
    /// record (found by the chaos test), so nothing is written.
    RecordedUnverifiable,
    /// The caches are still listing, within their grace period.
    Listing,
    /// This claim's Bound status was written; the index does not show it yet.
    StatusWritten,
    /// Another claim's claim write of `binding` is not in the index yet, so its claimed-by
    /// record can be neither seen nor removed.
    ClaimWrite { binding: String },
    /// The selection answered as for a recorded claim: the status changed meanwhile.
    StatusChanged,
}

impl Wait {
    /// When the claim comes back; `None`: on its next change.
    pub fn after(&self) -> Option<Duration> {
        match self {
            Wait::Finished => None,
            Wait::OlderCopy => Some(Duration::from_millis(100)),
            Wait::RecordedUnverifiable => Some(Duration::from_secs(1)),
            Wait::Listing => Some(Duration::from_millis(500)),
            Wait::StatusWritten | Wait::ClaimWrite { .. } | Wait::StatusChanged => {
                Some(WRITE_IN_FLIGHT)
            }
        }
    }
}

/// When a pending claim is retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retry {
    /// Config and pool changes bring it back; the `--pending-retry` safety net besides.
    SafetyNet,
    /// A growing delay: nothing it waits for sends an event.
    Backoff,
    After(Duration),
}

/// The next step of one reconcile: a fact to read, or the decision. The guards in the order of
/// the claim protocol (docs/design.md §4): a stale copy, a deletion, the finalizer, a final denial, the
/// config in force, the inventory, a recorded binding (kept, never replaced), the tenant policy,
/// a pause, an adoption, the rules, and the selection.
pub fn next<C: Clone>(f: &Facts<C>) -> Next<'_, C> {
    match steps(f) {
        Ok(decision) | Err(Next::Decided(decision)) => Next::Decided(decision),
        Err(read) => read,
    }
}

/// `Err`: stop here, with a decision or a fact to read.
type Step<'a, T, C> = Result<T, Next<'a, C>>;

fn steps<C: Clone>(f: &Facts<C>) -> Step<'_, ClaimDecision<C>, C> {
    if let Some(decision) = guards(&f.claim) {
        return Ok(decision);
    }
    let active = config_in_force(f)?;
    inventory(f, &active)?;
    if f.claim.recorded {
        return recorded(f, &active);
    }
    if let Tenant::Refused { cause } = read(
        &f.tenant,
        Read::Tenant {
            config: active.config,
        },
    )? {
        return Ok(ClaimDecision::TenantNotAllowed {
            cause: cause.clone(),
        });
    }
    if active.paused {
        let cause = format!(
            "HapConfig `{}` is paused (spec.paused: true): no binding is claimed until it is unpaused",
            active.name
        );
        return Ok(pending(
            PendingReason::Paused,
            cause,
            None,
            Retry::SafetyNet,
        ));
    }
    if active.observing {
        return observing(f, &active);
    }
    // A request that named its binding (adopted from its source) is recorded, never chosen.
    if let Some(binding) = f.claim.adopt_binding.as_deref() {
        return adoption(f, &active, binding);
    }
    let outcome = rules(f, &active)?;
    choice(f, &active, outcome)
}

/// What the claim object alone decides.
fn guards<C>(c: &ClaimFields) -> Option<ClaimDecision<C>> {
    Some(match c.stale {
        Some(Stale::Finished) => ClaimDecision::Wait(Wait::Finished),
        Some(Stale::Older) => ClaimDecision::Wait(Wait::OlderCopy),
        None if c.deleting => ClaimDecision::Release,
        None if !c.finalized => ClaimDecision::AddFinalizer,
        None if c.denied => ClaimDecision::StayFinal,
        None => return None,
    })
}

fn read<'a, T, C>(fact: &'a Option<T>, what: Read<'a, C>) -> Step<'a, &'a T, C> {
    fact.as_ref().ok_or(Next::Read(what))
}

fn stop<'a, C>(decision: ClaimDecision<C>) -> Next<'a, C> {
    Next::Decided(decision)
}

fn pending<C>(
    reason: PendingReason,
    cause: String,
    matched: Option<(MatchedRule, PoolKey)>,
    retry: Retry,
) -> ClaimDecision<C> {
    ClaimDecision::Pending {
        reason,
        cause,
        matched,
        retry,
    }
}

/// The config in force, as far as the decision reads it.
struct Active<'a, C> {
    config: &'a C,
    name: &'a str,
    paused: bool,
    observing: bool,
    binding_namespace: &'a str,
}

/// Without a valid config a claim with a recorded binding keeps it unverified (nothing can be
/// verified without rules); any other claim says why it waits.
fn config_in_force<C>(f: &Facts<C>) -> Step<'_, Active<'_, C>, C> {
    let (reason, cause) = match read(&f.config, Read::Config)? {
        InForce::Active {
            config,
            name,
            paused,
            observing,
            binding_namespace,
        } => {
            return Ok(Active {
                config,
                name,
                paused: *paused,
                observing: *observing,
                binding_namespace,
            });
        }
        _ if f.claim.recorded => return Err(stop(ClaimDecision::KeepUnverified)),
        InForce::Missing { name } => (
            PendingReason::ConfigMissing,
            format!("no HapConfig named `{name}` exists; the claim waits for one"),
        ),
        InForce::Invalid {
            name,
            generation,
            summary,
        } => (
            PendingReason::ConfigInvalid,
            format!(
                "HapConfig `{name}` generation {generation} is invalid and no earlier generation was valid: {}",
                summary.replace('\n', "; ")
            ),
        ),
    };
    Err(stop(pending(reason, cause, None, Retry::SafetyNet)))
}

/// Nothing is decided while the binding or Shoot cache has not listed. After a grace period
/// (or at once after a watch error) an unrecorded claim says why (§5.7), retried with a growing
/// delay; a recorded one is never touched meanwhile.
fn inventory<'a, C>(f: &'a Facts<C>, active: &Active<'a, C>) -> Step<'a, (), C> {
    let config = active.config;
    let causes = match read(&f.inventory, Read::Inventory { config })? {
        Inventory::Decidable => return Ok(()),
        Inventory::Unavailable { .. } if f.claim.recorded => {
            return Err(stop(ClaimDecision::Wait(Wait::RecordedUnverifiable)));
        }
        Inventory::Unavailable { causes } if causes.is_empty() => {
            return Err(stop(ClaimDecision::Wait(Wait::Listing)));
        }
        Inventory::Unavailable { causes } => causes,
    };
    let cause = format!(
        "the inventory cannot be read, so no binding can be chosen: {}; check that the Gardener \
         CRDs are installed and that the operator may list and watch them",
        causes.join("; ")
    );
    let reason = PendingReason::InventoryUnavailable;
    Err(stop(pending(reason, cause, None, Retry::Backoff)))
}

/// Step 1 of docs/design.md §4: a claim that ever recorded a binding stays on it. A vanished or
/// relabelled binding is reported, never replaced; strays claimed for it go back
/// (`controller::strays`) unless the config is paused or the binding could not be checked.
fn recorded<'a, C: Clone>(
    f: &'a Facts<C>,
    active: &Active<'a, C>,
) -> Step<'a, ClaimDecision<C>, C> {
    let check = read(&f.recorded_binding, Read::RecordedBinding)?;
    let give_back = *check != RecordedBinding::Unchecked && !active.paused && !active.observing;
    let config = active.config.clone();
    Ok(match check {
        RecordedBinding::Lost { message } => ClaimDecision::ReportLost {
            config,
            cause: message.clone(),
            give_back,
        },
        RecordedBinding::Unchecked | RecordedBinding::Intact => ClaimDecision::Keep {
            config,
            namespace: active.binding_namespace.to_string(),
            give_back,
        },
    })
}

/// An adoption: the binding the request named is recorded Bound, or the claim says why it
/// cannot be the tenant's (`sources::adopt`).
fn adoption<'a, C: Clone>(
    f: &'a Facts<C>,
    active: &Active<'a, C>,
    binding: &'a str,
) -> Step<'a, ClaimDecision<C>, C> {
    let adopted = read(&f.adoption, Read::Adoption { binding })?;
    Ok(match (&adopted.adoption, &adopted.before) {
        (_, BeforeUse::Wait { binding }) => ClaimDecision::Wait(Wait::ClaimWrite {
            binding: binding.clone(),
        }),
        (Adoption::Bound { pool }, before) => ClaimDecision::Adopt {
            config: active.config.clone(),
            to: BoundTo {
                binding: binding.to_string(),
                namespace: active.binding_namespace.to_string(),
                pool: pool.clone(),
                matched_rule: MatchedRule {
                    index: 0,
                    entry: "(adopted: the request named its binding)".into(),
                },
                decision: Decision::Adopted,
                preference: None,
            },
            before: before.clone(),
        },
        (Adoption::NotTenant { message }, _) => pending(
            PendingReason::BindingNotTenant,
            message.clone(),
            None,
            Retry::SafetyNet,
        ),
    })
}

/// In `spec.mode: Observe` a claim is never bound: it says which pools the rules would serve it
/// from (or why none), and waits. No selection runs, so no binding is reserved in the ledger.
fn observing<'a, C: Clone>(
    f: &'a Facts<C>,
    active: &Active<'a, C>,
) -> Step<'a, ClaimDecision<C>, C> {
    let name = active.name;
    let held = format!(
        "HapConfig `{name}` observes (spec.mode: Observe): no binding is claimed until it is set to Enforce"
    );
    if let Some(binding) = f.claim.adopt_binding.as_deref() {
        let cause = format!("{held}; it would adopt binding {binding}");
        return Ok(pending(
            PendingReason::Observing,
            cause,
            None,
            Retry::SafetyNet,
        ));
    }
    let (cause, matched) = match rules(f, active) {
        Ok(outcome) => {
            let pools: Vec<String> = outcome
                .preferences
                .iter()
                .map(|p| describe_pool(&p.pool))
                .collect();
            let matched = matched_rule(outcome.index, &outcome.entry);
            let first = outcome.preferences.first().map(|p| p.pool.clone());
            (
                format!(
                    "{held}; it would serve the claim from {}",
                    pools.join(", then ")
                ),
                first.map(|pool| (matched, pool)),
            )
        }
        // Not final while observing: the rules may change before the cutover.
        Err(Next::Decided(ClaimDecision::Deny { cause, .. })) => {
            (format!("{held}; the rules would deny it: {cause}"), None)
        }
        Err(Next::Decided(ClaimDecision::Pending { cause, .. })) => (
            format!("{held}; the rules would not serve it now: {cause}"),
            None,
        ),
        Err(other) => return Err(other),
    };
    Ok(pending(
        PendingReason::Observing,
        cause,
        matched,
        Retry::SafetyNet,
    ))
}

/// The rules' answer for the claim: an entry to select in, or a denial (final), or why none.
fn rules<'a, C>(f: &'a Facts<C>, active: &Active<'a, C>) -> Step<'a, &'a Outcome, C> {
    let config = active.config;
    match read(&f.rules, Read::Rules { config })? {
        Ok(outcome) => Ok(outcome),
        Err(EvalError::Denied {
            index,
            entry,
            message,
            ..
        }) => Err(stop(ClaimDecision::Deny {
            cause: message.clone(),
            matched: matched_rule(*index, entry),
        })),
        Err(e) => Err(stop(pending(
            eval_reason(e),
            e.to_string(),
            None,
            Retry::SafetyNet,
        ))),
    }
}

/// The selection's answer as a decision.
fn choice<'a, C: Clone>(
    f: &'a Facts<C>,
    active: &Active<'a, C>,
    outcome: &'a Outcome,
) -> Step<'a, ClaimDecision<C>, C> {
    let config = active.config;
    let (placement, before) = match read(&f.selection, Read::Selection { config, outcome })? {
        Selection::StatusWritten => return Ok(ClaimDecision::Wait(Wait::StatusWritten)),
        Selection::Placed { placement, before } => (placement, before),
    };
    if let BeforeUse::Wait { binding } = before {
        let binding = binding.clone();
        return Ok(ClaimDecision::Wait(Wait::ClaimWrite { binding }));
    }
    let matched = matched_rule(outcome.index, &outcome.entry);
    let to = |binding: &str, decision: Decision| BoundTo {
        binding: binding.to_string(),
        namespace: active.binding_namespace.to_string(),
        pool: placement.pool.clone(),
        matched_rule: matched.clone(),
        decision,
        preference: Some(placement.preference),
    };
    let waits_in = Some((matched.clone(), placement.pool.clone()));
    Ok(match &placement.choice {
        Choice::Use { binding, decision } => ClaimDecision::Use {
            config: config.clone(),
            to: to(binding, (*decision).into()),
            before: before.clone(),
        },
        Choice::Claim {
            binding,
            expected_resource_version,
        } => ClaimDecision::Claim {
            config: config.clone(),
            to: to(binding, claimed(placement.pinned)),
            expected_resource_version: expected_resource_version.clone(),
        },
        Choice::Wait { binding } => {
            let cause = format!(
                "binding {binding} of {} in this pool is being claimed or released right now, or another binding of its credential is dirty or being released; retrying",
                f.claim.global_account
            );
            let retry = Retry::After(WRITE_IN_FLIGHT);
            pending(PendingReason::Progressing, cause, waits_in, retry)
        }
        Choice::Exhausted { message, .. } => {
            let reason = match placement.pinned {
                true => PendingReason::PinnedBindingUnavailable,
                false => PendingReason::PoolExhausted,
            };
            pending(reason, message.clone(), waits_in, Retry::SafetyNet)
        }
        // Only for claims with a recorded binding, handled above.
        Choice::Bound { .. } | Choice::Lost { .. } => ClaimDecision::Wait(Wait::StatusChanged),
    })
}

fn claimed(pinned: bool) -> Decision {
    match pinned {
        true => Decision::Pinned,
        false => Decision::Claimed,
    }
}

fn matched_rule(index: usize, entry: &str) -> MatchedRule {
    MatchedRule {
        index: i64::try_from(index).unwrap_or(i64::MAX),
        entry: entry.to_string(),
    }
}

fn eval_reason(e: &EvalError) -> PendingReason {
    match e {
        EvalError::NoMatchingRule { .. } => PendingReason::NoMatchingRule,
        EvalError::AmbiguousMatch { .. } => PendingReason::AmbiguousMatch,
        EvalError::UnknownPlan { .. } => PendingReason::UnknownPlan,
        EvalError::MissingProvider { .. } => PendingReason::MissingProvider,
        EvalError::InvalidConfig { .. } => PendingReason::ConfigInvalid,
        // Handled before: a denial is final, not pending.
        EvalError::Denied { .. } => PendingReason::ConfigInvalid,
    }
}
