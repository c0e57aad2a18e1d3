//! The claim protocol's guard order as a table (facts in, decision out), the reads it asks for
//! in order, and properties over random facts: a recorded binding is never overwritten with a
//! pending status (nor replaced), and no fact is asked for twice.

use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::api::Decision;
use crate::rules::Preference;

fn pool() -> PoolKey {
    PoolKey {
        hyperscaler_type: "aws".into(),
        eu_access: false,
        shared: false,
    }
}

fn outcome() -> Outcome {
    Outcome {
        index: 1,
        entry: "aws".into(),
        provider_type: "aws".into(),
        hyperscaler_type: "aws".into(),
        eu_access: false,
        shared: false,
        preferences: vec![Preference {
            index: 1,
            pool: pool(),
        }],
    }
}

fn matched() -> MatchedRule {
    MatchedRule {
        index: 1,
        entry: "aws".into(),
    }
}

fn placed(choice: Choice, pinned: bool, before: BeforeUse) -> Option<Selection> {
    let placement = Placement {
        choice,
        preference: 1,
        pool: pool(),
        pinned,
    };
    Some(Selection::Placed { placement, before })
}

fn claim_b1() -> Choice {
    Choice::Claim {
        binding: "b1".into(),
        expected_resource_version: Some("5".into()),
    }
}

fn active(paused: bool) -> Option<InForce<()>> {
    Some(InForce::Active {
        config: (),
        name: "hap".into(),
        paused,
        observing: false,
        binding_namespace: "garden".into(),
    })
}

/// The config in force with `spec.mode: Observe`.
fn observing() -> Option<InForce<()>> {
    Some(InForce::Active {
        config: (),
        name: "hap".into(),
        paused: false,
        observing: true,
        binding_namespace: "garden".into(),
    })
}

const HELD: &str = "HapConfig `hap` observes (spec.mode: Observe): no binding is claimed until it is set to Enforce";

/// An unrecorded, finalized claim of `ga-1` whose every fact says "go on": the selection
/// claims b1.
fn ready() -> Facts<()> {
    Facts {
        claim: ClaimFields {
            finalized: true,
            global_account: "ga-1".into(),
            ..Default::default()
        },
        config: active(false),
        inventory: Some(Inventory::Decidable),
        recorded_binding: Some(RecordedBinding::Intact),
        tenant: Some(Tenant::Allowed),
        adoption: Some(Adopted {
            adoption: Adoption::Bound { pool: pool() },
            before: BeforeUse::Bind,
        }),
        rules: Some(Ok(outcome())),
        selection: placed(claim_b1(), false, BeforeUse::Bind),
    }
}

fn to(binding: &str, decision: Decision) -> BoundTo {
    BoundTo {
        binding: binding.into(),
        namespace: "garden".into(),
        pool: pool(),
        matched_rule: matched(),
        decision,
        preference: Some(1),
    }
}

fn pending(reason: PendingReason, cause: &str, retry: Retry) -> ClaimDecision<()> {
    ClaimDecision::Pending {
        reason,
        cause: cause.into(),
        matched: None,
        retry,
    }
}

fn pending_in(reason: PendingReason, cause: &str, retry: Retry) -> ClaimDecision<()> {
    ClaimDecision::Pending {
        reason,
        cause: cause.into(),
        matched: Some((matched(), pool())),
        retry,
    }
}

fn decided(f: &Facts<()>) -> ClaimDecision<()> {
    match next(f) {
        Next::Decided(d) => d,
        Next::Read(r) => panic!("asks for {r:?} although every fact is there"),
    }
}

type Case = (&'static str, fn(&mut Facts<()>), ClaimDecision<()>);

fn record_b1() -> BeforeUse {
    BeforeUse::Record {
        binding: "b1".into(),
        expected_resource_version: Some("7".into()),
        claims: "uid-2".into(),
    }
}

fn use_b1(decision: UseReasonOf) -> Choice {
    Choice::Use {
        binding: "b1".into(),
        decision,
    }
}

type UseReasonOf = crate::selection::UseReason;

fn invalid(f: &mut Facts<()>) {
    f.config = Some(InForce::Invalid {
        name: "hap".into(),
        generation: 3,
        summary: "rule 1: bad\nrule 2: worse".into(),
    });
}

fn missing(f: &mut Facts<()>) {
    f.config = Some(InForce::Missing { name: "hap".into() });
}

fn unavailable(f: &mut Facts<()>) {
    f.inventory = Some(Inventory::Unavailable {
        causes: vec!["cannot list x".into(), "shoots not listed yet".into()],
    });
}

fn guard_cases() -> Vec<Case> {
    vec![
        (
            "a finished claim waits for its deletion, whatever else holds",
            |f| {
                f.claim.stale = Some(Stale::Finished);
                f.claim.deleting = true;
            },
            ClaimDecision::Wait(Wait::Finished),
        ),
        (
            "an older copy is not decided on, not even released",
            |f| {
                f.claim.stale = Some(Stale::Older);
                f.claim.deleting = true;
            },
            ClaimDecision::Wait(Wait::OlderCopy),
        ),
        (
            "a deleting claim that is also denied and unfinalized is released",
            |f| {
                f.claim.deleting = true;
                f.claim.denied = true;
                f.claim.finalized = false;
                f.claim.recorded = true;
            },
            ClaimDecision::Release,
        ),
        (
            "a claim without the finalizer gets it before anything else",
            |f| {
                f.claim.finalized = false;
                f.claim.denied = true;
                missing(f);
            },
            ClaimDecision::AddFinalizer,
        ),
        (
            "a denial stays final, even without a config",
            |f| {
                f.claim.denied = true;
                missing(f);
            },
            ClaimDecision::StayFinal,
        ),
        (
            "a recorded claim without config keeps its binding unverified",
            |f| {
                f.claim.recorded = true;
                missing(f);
            },
            ClaimDecision::KeepUnverified,
        ),
        (
            "a recorded claim with only an invalid config keeps its binding unverified",
            |f| {
                f.claim.recorded = true;
                invalid(f);
            },
            ClaimDecision::KeepUnverified,
        ),
        (
            "no config: pending ConfigMissing",
            missing,
            pending(
                PendingReason::ConfigMissing,
                "no HapConfig named `hap` exists; the claim waits for one",
                Retry::SafetyNet,
            ),
        ),
        (
            "an invalid config: pending ConfigInvalid, its errors on one line",
            invalid,
            pending(
                PendingReason::ConfigInvalid,
                "HapConfig `hap` generation 3 is invalid and no earlier generation was valid: \
                 rule 1: bad; rule 2: worse",
                Retry::SafetyNet,
            ),
        ),
        (
            "a recorded claim with the inventory unreadable waits 1 s, never pending",
            |f| {
                f.claim.recorded = true;
                unavailable(f);
            },
            ClaimDecision::Wait(Wait::RecordedUnverifiable),
        ),
        (
            "caches still listing within their grace: wait, nothing written",
            |f| f.inventory = Some(Inventory::Unavailable { causes: vec![] }),
            ClaimDecision::Wait(Wait::Listing),
        ),
        (
            "caches that cannot list: pending InventoryUnavailable with a growing delay",
            unavailable,
            pending(
                PendingReason::InventoryUnavailable,
                "the inventory cannot be read, so no binding can be chosen: cannot list x; \
                 shoots not listed yet; check that the Gardener CRDs are installed and that the \
                 operator may list and watch them",
                Retry::Backoff,
            ),
        ),
    ]
}

fn recorded_cases() -> Vec<Case> {
    vec![
        (
            "a recorded intact binding is kept and its strays go back",
            |f| f.claim.recorded = true,
            ClaimDecision::Keep {
                config: (),
                namespace: "garden".into(),
                give_back: true,
            },
        ),
        (
            "a recorded binding in a namespace not held is kept, nothing given back",
            |f| {
                f.claim.recorded = true;
                f.recorded_binding = Some(RecordedBinding::Unchecked);
            },
            ClaimDecision::Keep {
                config: (),
                namespace: "garden".into(),
                give_back: false,
            },
        ),
        (
            "paused: the recorded binding is kept, no stray is written",
            |f| {
                f.claim.recorded = true;
                f.config = active(true);
            },
            ClaimDecision::Keep {
                config: (),
                namespace: "garden".into(),
                give_back: false,
            },
        ),
        (
            "a recorded binding that is gone is reported, never replaced",
            |f| {
                f.claim.recorded = true;
                f.recorded_binding = Some(RecordedBinding::Lost {
                    message: "binding b1 no longer exists".into(),
                });
            },
            ClaimDecision::ReportLost {
                config: (),
                cause: "binding b1 no longer exists".into(),
                give_back: true,
            },
        ),
        (
            "a recorded claim is not asked about its tenant, rules or selection",
            |f| {
                f.claim.recorded = true;
                f.tenant = Some(Tenant::Refused { cause: "no".into() });
                f.rules = Some(Err(EvalError::InvalidConfig {
                    message: "x".into(),
                }));
            },
            ClaimDecision::Keep {
                config: (),
                namespace: "garden".into(),
                give_back: true,
            },
        ),
    ]
}

fn admission_cases() -> Vec<Case> {
    vec![
        (
            "spec.tenants refuses before a pause is looked at",
            |f| {
                f.tenant = Some(Tenant::Refused {
                    cause: "namespace tenants is not allowed".into(),
                });
                f.config = active(true);
            },
            ClaimDecision::TenantNotAllowed {
                cause: "namespace tenants is not allowed".into(),
            },
        ),
        (
            "paused: pending Paused, nothing chosen",
            |f| f.config = active(true),
            pending(
                PendingReason::Paused,
                "HapConfig `hap` is paused (spec.paused: true): no binding is claimed until it \
                 is unpaused",
                Retry::SafetyNet,
            ),
        ),
        (
            "an adoption of the tenant's binding is recorded Adopted",
            |f| f.claim.adopt_binding = Some("kept".into()),
            ClaimDecision::Adopt {
                config: (),
                to: BoundTo {
                    binding: "kept".into(),
                    namespace: "garden".into(),
                    pool: pool(),
                    matched_rule: MatchedRule {
                        index: 0,
                        entry: "(adopted: the request named its binding)".into(),
                    },
                    decision: Decision::Adopted,
                    preference: None,
                },
                before: BeforeUse::Bind,
            },
        ),
        (
            "an adoption of another tenant's binding: pending BindingNotTenant",
            |f| {
                f.claim.adopt_binding = Some("kept".into());
                f.adoption = Some(Adopted {
                    adoption: Adoption::NotTenant {
                        message: "binding kept carries tenantName=other".into(),
                    },
                    before: BeforeUse::Bind,
                });
            },
            pending(
                PendingReason::BindingNotTenant,
                "binding kept carries tenantName=other",
                Retry::SafetyNet,
            ),
        ),
        (
            "an adoption waits for another claim's claim write of the binding",
            |f| {
                f.claim.adopt_binding = Some("kept".into());
                f.adoption = Some(Adopted {
                    adoption: Adoption::Bound { pool: pool() },
                    before: BeforeUse::Wait {
                        binding: "kept".into(),
                    },
                });
            },
            ClaimDecision::Wait(Wait::ClaimWrite {
                binding: "kept".into(),
            }),
        ),
        (
            "a deny entry: Deny with the matched rule",
            |f| {
                f.rules = Some(Err(EvalError::Denied {
                    index: 2,
                    entry: "trial -> DENY".into(),
                    reason_text: None,
                    message: "plan trial is denied".into(),
                }))
            },
            ClaimDecision::Deny {
                cause: "plan trial is denied".into(),
                matched: MatchedRule {
                    index: 2,
                    entry: "trial -> DENY".into(),
                },
            },
        ),
        (
            "no rule matches: pending NoMatchingRule, the evaluation's message",
            |f| {
                f.rules = Some(Err(EvalError::NoMatchingRule {
                    plan: "gcp".into(),
                    candidates: vec![],
                    message: "no rule for plan gcp".into(),
                }))
            },
            pending(
                PendingReason::NoMatchingRule,
                "no rule for plan gcp",
                Retry::SafetyNet,
            ),
        ),
    ]
}

fn choice_cases() -> Vec<Case> {
    vec![
        (
            "its own Bound status is on its way: wait, nothing selected",
            |f| f.selection = Some(Selection::StatusWritten),
            ClaimDecision::Wait(Wait::StatusWritten),
        ),
        (
            "a use that must wait for a sibling's claim write waits",
            |f| {
                let before = BeforeUse::Wait {
                    binding: "b1".into(),
                };
                f.selection = placed(use_b1(UseReasonOf::Reused), false, before);
            },
            ClaimDecision::Wait(Wait::ClaimWrite {
                binding: "b1".into(),
            }),
        ),
        (
            "a reuse records itself on the binding first",
            |f| f.selection = placed(use_b1(UseReasonOf::Reused), false, record_b1()),
            ClaimDecision::Use {
                config: (),
                to: to("b1", Decision::Reused),
                before: record_b1(),
            },
        ),
        (
            "a pinned binding already the tenant's is used",
            |f| f.selection = placed(use_b1(UseReasonOf::Pinned), true, BeforeUse::Bind),
            ClaimDecision::Use {
                config: (),
                to: to("b1", Decision::Pinned),
                before: BeforeUse::Bind,
            },
        ),
        (
            "a fill records itself on the binding first",
            |f| {
                let fill = BeforeUse::Record {
                    binding: "b1".into(),
                    expected_resource_version: Some("7".into()),
                    claims: "uid-2".into(),
                };
                f.selection = placed(use_b1(UseReasonOf::FilledMostPopulated), false, fill);
            },
            ClaimDecision::Use {
                config: (),
                to: to("b1", Decision::FilledMostPopulated),
                before: BeforeUse::Record {
                    binding: "b1".into(),
                    expected_resource_version: Some("7".into()),
                    claims: "uid-2".into(),
                },
            },
        ),
        (
            "a free binding is claimed on the resourceVersion the index has",
            |_| {},
            ClaimDecision::Claim {
                config: (),
                to: to("b1", Decision::Claimed),
                expected_resource_version: Some("5".into()),
            },
        ),
        (
            "a free pinned binding is claimed as Pinned",
            |f| f.selection = placed(claim_b1(), true, BeforeUse::Bind),
            ClaimDecision::Claim {
                config: (),
                to: to("b1", Decision::Pinned),
                expected_resource_version: Some("5".into()),
            },
        ),
        (
            "a sibling claims in the pool: pending Progressing, back in 200 ms",
            |f| {
                let wait = Choice::Wait {
                    binding: "b2".into(),
                };
                f.selection = placed(wait, false, BeforeUse::Bind);
            },
            pending_in(
                PendingReason::Progressing,
                "binding b2 of ga-1 in this pool is being claimed or released right now, or another binding of its credential is dirty or being released; retrying",
                Retry::After(Duration::from_millis(200)),
            ),
        ),
        (
            "nothing free: pending PoolExhausted in the matched rule's pool",
            |f| f.selection = placed(exhausted(), false, BeforeUse::Bind),
            pending_in(
                PendingReason::PoolExhausted,
                "pool aws is empty",
                Retry::SafetyNet,
            ),
        ),
        (
            "the pinned binding cannot serve: pending PinnedBindingUnavailable",
            |f| f.selection = placed(exhausted(), true, BeforeUse::Bind),
            pending_in(
                PendingReason::PinnedBindingUnavailable,
                "pool aws is empty",
                Retry::SafetyNet,
            ),
        ),
        (
            "the selection answers as for a recorded claim: the status changed, wait",
            |f| {
                let bound = Choice::Bound {
                    binding: "b1".into(),
                };
                f.selection = placed(bound, false, BeforeUse::Bind);
            },
            ClaimDecision::Wait(Wait::StatusChanged),
        ),
    ]
}

fn exhausted() -> Choice {
    Choice::Exhausted {
        pool: pool(),
        message: "pool aws is empty".into(),
    }
}

/// Observing: nothing is chosen, claimed, adopted or given back; the claim says what would be.
fn observe_cases() -> Vec<Case> {
    vec![
        (
            "observing: pending Observing, naming the pools the rules would serve it from",
            |f| f.config = observing(),
            pending_in(
                PendingReason::Observing,
                &format!(
                    "{HELD}; it would serve the claim from hyperscalerType=aws, no euAccess, dedicated"
                ),
                Retry::SafetyNet,
            ),
        ),
        (
            "observing: an adoption is not recorded, only named",
            |f| {
                f.config = observing();
                f.claim.adopt_binding = Some("kept".into());
            },
            pending(
                PendingReason::Observing,
                &format!("{HELD}; it would adopt binding kept"),
                Retry::SafetyNet,
            ),
        ),
        (
            "observing: a deny entry is not final, the rules may change before the cutover",
            |f| {
                f.config = observing();
                f.rules = Some(Err(EvalError::Denied {
                    index: 2,
                    entry: "trial -> DENY".into(),
                    reason_text: None,
                    message: "plan trial is denied".into(),
                }));
            },
            pending(
                PendingReason::Observing,
                &format!("{HELD}; the rules would deny it: plan trial is denied"),
                Retry::SafetyNet,
            ),
        ),
        (
            "observing: no rule matches, said and waited",
            |f| {
                f.config = observing();
                f.rules = Some(Err(EvalError::NoMatchingRule {
                    plan: "gcp".into(),
                    candidates: vec![],
                    message: "no rule for plan gcp".into(),
                }));
            },
            pending(
                PendingReason::Observing,
                &format!("{HELD}; the rules would not serve it now: no rule for plan gcp"),
                Retry::SafetyNet,
            ),
        ),
        (
            "observing: a recorded claim keeps its binding and gives no stray back",
            |f| {
                f.config = observing();
                f.claim.recorded = true;
            },
            ClaimDecision::Keep {
                config: (),
                namespace: "garden".into(),
                give_back: false,
            },
        ),
        (
            "observing: spec.tenants still refuses first",
            |f| {
                f.config = observing();
                f.tenant = Some(Tenant::Refused {
                    cause: "namespace tenants is not allowed".into(),
                });
            },
            ClaimDecision::TenantNotAllowed {
                cause: "namespace tenants is not allowed".into(),
            },
        ),
    ]
}

#[test]
fn each_set_of_facts_gets_its_decision_in_the_protocols_guard_order() {
    let cases = [
        guard_cases(),
        recorded_cases(),
        admission_cases(),
        choice_cases(),
        observe_cases(),
    ];
    for (name, change, want) in cases.into_iter().flatten() {
        let mut f = ready();
        change(&mut f);
        assert_eq!(decided(&f), want, "{name}");
    }
}

/// The name of `$d`'s variant (and of its `Wait`), and the names of all of them, from one list
/// of arms: the match has no wildcard, so a new variant does not compile until it gets an arm
/// here, and its arm adds its name to the list every case table must cover.
macro_rules! variant_names {
    ($d:expr; $($pat:pat => $name:literal),+ $(,)?) => {{
        let name = match $d { $($pat => $name),+ };
        (name, &[$($name),+])
    }};
}

/// The variant of `d` and every variant there is (`ClaimDecision`, with `Wait` unfolded).
fn variant(d: &ClaimDecision<()>) -> (&'static str, &'static [&'static str]) {
    use ClaimDecision as D;
    variant_names!(d;
        D::Wait(Wait::Finished) => "Wait::Finished",
        D::Wait(Wait::OlderCopy) => "Wait::OlderCopy",
        D::Wait(Wait::RecordedUnverifiable) => "Wait::RecordedUnverifiable",
        D::Wait(Wait::Listing) => "Wait::Listing",
        D::Wait(Wait::StatusWritten) => "Wait::StatusWritten",
        D::Wait(Wait::ClaimWrite { .. }) => "Wait::ClaimWrite",
        D::Wait(Wait::StatusChanged) => "Wait::StatusChanged",
        D::Release => "Release",
        D::AddFinalizer => "AddFinalizer",
        D::StayFinal => "StayFinal",
        D::KeepUnverified => "KeepUnverified",
        D::Keep { .. } => "Keep",
        D::ReportLost { .. } => "ReportLost",
        D::Pending { .. } => "Pending",
        D::TenantNotAllowed { .. } => "TenantNotAllowed",
        D::Deny { .. } => "Deny",
        D::Adopt { .. } => "Adopt",
        D::Use { .. } => "Use",
        D::Claim { .. } => "Claim",
    )
}

#[test]
fn every_variant_has_a_case() {
    let cases = [
        guard_cases(),
        recorded_cases(),
        admission_cases(),
        choice_cases(),
    ];
    let seen: std::collections::BTreeSet<&str> = cases
        .iter()
        .flatten()
        .map(|(_, _, want)| variant(want).0)
        .collect();
    let (_, names) = variant(&ClaimDecision::Release);
    let all: std::collections::BTreeSet<&str> = names.iter().copied().collect();
    assert_eq!(all.len(), names.len(), "two arms share a name: {names:?}");
    let missing: Vec<_> = all.difference(&seen).collect();
    assert!(missing.is_empty(), "variants without a case: {missing:?}");
}

/// The reads a claim's decision asks for, in order, each answered as in `ready`.
fn reads(claim: ClaimFields) -> Vec<String> {
    let all = ready();
    let mut f = Facts::new(claim);
    let mut asked = Vec::new();
    loop {
        let read = match next(&f) {
            Next::Decided(_) => return asked,
            Next::Read(r) => r,
        };
        let name = format!("{read:?}");
        asked.push(
            name.split([' ', '{'])
                .next()
                .unwrap_or_default()
                .to_string(),
        );
        match read {
            Read::Config => f.config = all.config.clone(),
            Read::Inventory { .. } => f.inventory = all.inventory.clone(),
            Read::RecordedBinding => f.recorded_binding = all.recorded_binding.clone(),
            Read::Tenant { .. } => f.tenant = all.tenant.clone(),
            Read::Adoption { .. } => f.adoption = all.adoption.clone(),
            Read::Rules { .. } => f.rules = all.rules.clone(),
            Read::Selection { .. } => f.selection = all.selection.clone(),
        }
    }
}

#[test]
fn facts_are_read_only_when_a_guard_needs_them_in_the_protocols_order() {
    let base = ready().claim;
    assert_eq!(
        reads(base.clone()),
        ["Config", "Inventory", "Tenant", "Rules", "Selection"]
    );
    let recorded = ClaimFields {
        recorded: true,
        ..base.clone()
    };
    assert_eq!(reads(recorded), ["Config", "Inventory", "RecordedBinding"]);
    let adopting = ClaimFields {
        adopt_binding: Some("kept".into()),
        ..base.clone()
    };
    assert_eq!(
        reads(adopting),
        ["Config", "Inventory", "Tenant", "Adoption"]
    );
    // The claim's own fields settle these without a read.
    for settled in [
        ClaimFields {
            deleting: true,
            ..base.clone()
        },
        ClaimFields {
            finalized: false,
            ..base.clone()
        },
        ClaimFields {
            denied: true,
            ..base.clone()
        },
        ClaimFields {
            stale: Some(Stale::Older),
            ..base.clone()
        },
    ] {
        assert_eq!(reads(settled.clone()), Vec::<String>::new(), "{settled:?}");
    }
}

#[test]
fn waits_come_back_when_the_old_reconcile_did() {
    let ms = |n| Some(Duration::from_millis(n));
    assert_eq!(Wait::Finished.after(), None);
    assert_eq!(Wait::OlderCopy.after(), ms(100));
    assert_eq!(Wait::RecordedUnverifiable.after(), ms(1000));
    assert_eq!(Wait::Listing.after(), ms(500));
    assert_eq!(Wait::StatusWritten.after(), ms(200));
    assert_eq!(Wait::StatusChanged.after(), ms(200));
    let binding = "b1".to_string();
    assert_eq!(Wait::ClaimWrite { binding }.after(), ms(200));
}

// ---- properties over random facts -----------------------------------------------------------

fn pick<T: Clone>(options: &[T], n: u8) -> T {
    options[usize::from(n) % options.len()].clone()
}

/// Facts from 16 random bytes: each field one of a few samples, each read fact possibly absent.
fn random_facts(b: [u8; 16]) -> Facts<()> {
    let maybe = |n: u8| !n.is_multiple_of(5);
    let stale = [None, None, None, Some(Stale::Finished), Some(Stale::Older)];
    let configs = [
        active(false),
        active(true),
        Some(InForce::Missing { name: "hap".into() }),
    ];
    let invalid = Some(InForce::Invalid {
        name: "hap".into(),
        generation: 2,
        summary: "x".into(),
    });
    let configs = [configs.as_slice(), &[invalid]].concat();
    let inventories = [
        Inventory::Decidable,
        Inventory::Unavailable { causes: vec![] },
        Inventory::Unavailable {
            causes: vec!["x".into()],
        },
    ];
    let recorded = [
        RecordedBinding::Intact,
        RecordedBinding::Unchecked,
        RecordedBinding::Lost {
            message: "gone".into(),
        },
    ];
    let tenants = [Tenant::Allowed, Tenant::Refused { cause: "no".into() }];
    let adoptions = [
        Some(Adopted {
            adoption: Adoption::Bound { pool: pool() },
            before: record_b1(),
        }),
        Some(Adopted {
            adoption: Adoption::NotTenant {
                message: "no".into(),
            },
            before: BeforeUse::Bind,
        }),
    ];
    let rules = [
        Ok(outcome()),
        Err(EvalError::InvalidConfig {
            message: "x".into(),
        }),
        Err(EvalError::Denied {
            index: 1,
            entry: "d".into(),
            reason_text: None,
            message: "d".into(),
        }),
    ];
    let choices = [
        claim_b1(),
        use_b1(UseReasonOf::Reused),
        exhausted(),
        Choice::Wait {
            binding: "b1".into(),
        },
    ];
    let selection = match b[14] % 4 {
        0 => Some(Selection::StatusWritten),
        _ => placed(
            pick(&choices, b[15]),
            b[14].is_multiple_of(2),
            BeforeUse::Bind,
        ),
    };
    Facts {
        claim: ClaimFields {
            stale: pick(&stale, b[0]),
            deleting: b[1].is_multiple_of(4),
            finalized: !b[2].is_multiple_of(4),
            denied: b[3].is_multiple_of(4),
            recorded: b[4].is_multiple_of(2),
            global_account: "ga-1".into(),
            adopt_binding: b[5].is_multiple_of(3).then(|| "kept".to_string()),
        },
        config: pick(&configs, b[6]).filter(|_| maybe(b[7])),
        inventory: Some(pick(&inventories, b[8])).filter(|_| maybe(b[7] / 5)),
        recorded_binding: Some(pick(&recorded, b[9])).filter(|_| maybe(b[9] / 3)),
        tenant: Some(pick(&tenants, b[10])).filter(|_| maybe(b[10] / 2)),
        adoption: pick(&adoptions, b[11]).filter(|_| maybe(b[11] / 2)),
        rules: Some(pick(&rules, b[12])).filter(|_| maybe(b[12] / 3)),
        selection: selection.filter(|_| maybe(b[13])),
    }
}

/// Whether the fact `read` asks for is already there.
fn known(f: &Facts<()>, read: &Read<'_, ()>) -> bool {
    match read {
        Read::Config => f.config.is_some(),
        Read::Inventory { .. } => f.inventory.is_some(),
        Read::RecordedBinding => f.recorded_binding.is_some(),
        Read::Tenant { .. } => f.tenant.is_some(),
        Read::Adoption { .. } => f.adoption.is_some(),
        Read::Rules { .. } => f.rules.is_some(),
        Read::Selection { .. } => f.selection.is_some(),
    }
}

proptest! {
    /// A claim with a recorded binding is never written pending (which would erase the record),
    /// denied, refused or bound anew, and nothing about a new binding is read for it.
    #[test]
    fn a_recorded_binding_is_never_overwritten(bytes in any::<[u8; 16]>()) {
        let mut f = random_facts(bytes);
        f.claim.recorded = true;
        match next(&f) {
            Next::Read(read) => prop_assert!(
                matches!(read, Read::Config | Read::Inventory { .. } | Read::RecordedBinding),
                "{read:?}"
            ),
            Next::Decided(d) => prop_assert!(
                matches!(
                    d,
                    ClaimDecision::Wait(_)
                        | ClaimDecision::Release
                        | ClaimDecision::AddFinalizer
                        | ClaimDecision::StayFinal
                        | ClaimDecision::KeepUnverified
                        | ClaimDecision::Keep { .. }
                        | ClaimDecision::ReportLost { .. }
                ),
                "{d:?} for {f:?}"
            ),
        }
    }

    /// `next` asks only for facts it does not have, so a reconcile reading them ends: after at
    /// most seven reads, whatever the answers.
    #[test]
    fn no_fact_is_asked_for_twice(start in any::<[u8; 16]>(), answers in any::<[u8; 16]>()) {
        let mut f = random_facts(start);
        let (given, fallback) = (random_facts(answers), ready());
        for _ in 0..8 {
            let read = match next(&f) {
                Next::Decided(_) => return Ok(()),
                Next::Read(read) => read,
            };
            prop_assert!(!known(&f, &read), "asks again for {read:?} in {f:?}");
            let (g, h) = (given.clone(), fallback.clone());
            match read {
                Read::Config => f.config = g.config.or(h.config),
                Read::Inventory { .. } => f.inventory = g.inventory.or(h.inventory),
                Read::RecordedBinding => f.recorded_binding = g.recorded_binding.or(h.recorded_binding),
                Read::Tenant { .. } => f.tenant = g.tenant.or(h.tenant),
                Read::Adoption { .. } => f.adoption = g.adoption.or(h.adoption),
                Read::Rules { .. } => f.rules = g.rules.or(h.rules),
                Read::Selection { .. } => f.selection = g.selection.or(h.selection),
            }
        }
        prop_assert!(false, "no decision after eight reads: {f:?}");
    }
}
