//! The reads of one claim reconcile: each fact the pure decision (`crate::decision::next`) asks
//! for, when it asks — the claim's own fields, the config resolver, the caches' state, the
//! recorded binding, the namespace's labels (the tenant check), and the ledger (the adoption and
//! the selection under its lock, where the choice is recorded for the siblings decided next).
//! No API write, and no pointing of the caches: a read only reads.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::ResourceExt;

use super::{Context, decidable};
use crate::api::{AccountClaim, AccountClaimSpec, CLAIM_FINALIZER};
use crate::claim_state::{is_denied, recorded_binding};
use crate::decision::{
    ClaimDecision, ClaimFields, Facts, InForce, Inventory, Next, Read, RecordedBinding, Selection,
    Stale, Tenant, next,
};
use crate::k8s::active::{ActiveConfig, ConfigState};
use crate::pools::{ClaimView, Kind};
use crate::rules::{Outcome, Request as RuleRequest};
use crate::selection::{
    BeforeUse, MultiAccountPolicy, OrderedRequest, WriteState, before_use, check_bound,
    select_ordered,
};

/// How long the binding and Shoot caches may take to list before claims say so.
const SYNC_GRACE: Duration = Duration::from_secs(10);

/// Reads what the decision asks for until it is taken.
pub(super) async fn decide(
    claim: &AccountClaim,
    ctx: &Context,
    view: &ClaimView,
) -> ClaimDecision<Arc<ActiveConfig>> {
    let mut facts = Facts::new(own_fields(claim, ctx, view));
    // Each pass reads one fact `next` has not seen, so this ends after at most seven reads.
    loop {
        let read = match next(&facts) {
            Next::Decided(decision) => return decision,
            Next::Read(read) => read,
        };
        match read {
            Read::Config => facts.config = Some(in_force(ctx)),
            Read::Inventory { config } => facts.inventory = Some(inventory(ctx, config)),
            Read::RecordedBinding => facts.recorded_binding = Some(check_recorded(ctx, view)),
            Read::Tenant { config } => facts.tenant = Some(tenant(claim, ctx, config).await),
            Read::Adoption { binding } => {
                let ga = &claim.spec.global_account;
                facts.adoption = Some(super::sources_adopt::adoption(ctx, view, binding, ga));
            }
            Read::Rules { config } => {
                facts.rules = Some(config.rules.evaluate(&rule_request(&claim.spec)))
            }
            Read::Selection { config, outcome } => {
                let selection = select(claim, ctx, config, view, outcome);
                facts.selection = Some(selection);
            }
        }
    }
}

fn own_fields(claim: &AccountClaim, ctx: &Context, view: &ClaimView) -> ClaimFields {
    ClaimFields {
        stale: stale_copy(claim, ctx),
        deleting: claim.metadata.deletion_timestamp.is_some(),
        finalized: claim.finalizers().iter().any(|f| f == CLAIM_FINALIZER),
        denied: claim.status.as_ref().is_some_and(is_denied),
        recorded: claim.status.as_ref().and_then(recorded_binding).is_some(),
        global_account: view.global_account.clone(),
        adopt_binding: claim.spec.adopt_binding.clone(),
    }
}

/// `Some` when the store's copy must not be decided on: the claim is finished (its finalizer
/// went), or the index knows a newer version (or the claim's deletion), or this replica wrote a
/// newer one that is on its way to the store.
fn stale_copy(claim: &AccountClaim, ctx: &Context) -> Option<Stale> {
    let uid = claim.uid().unwrap_or_default();
    let rv = claim.resource_version();
    let l = ctx.ledger();
    if l.inflight.is_finished(&uid, Instant::now()) {
        tracing::debug!("finished; waits for its deletion");
        return Some(Stale::Finished);
    }
    let later = l.inventory.knows_later(Kind::Claim, &uid, rv.as_deref());
    if later || l.inflight.wrote_after(&uid, rv.as_deref(), Instant::now()) {
        tracing::debug!(
            ?rv,
            index_later = later,
            "the store's copy is older; waits for the newer one"
        );
        return Some(Stale::Older);
    }
    None
}

pub(super) fn in_force(ctx: &Context) -> InForce<Arc<ActiveConfig>> {
    let name = ctx.resolver.name().to_string();
    match ctx.resolver.resolve() {
        ConfigState::Active { active, hold, .. } => InForce::Active {
            name,
            paused: hold.paused,
            observing: hold.observing,
            binding_namespace: active.spec.binding_namespace.clone(),
            config: active,
        },
        ConfigState::Missing => InForce::Missing { name },
        ConfigState::Invalid {
            generation,
            validation,
        } => InForce::Invalid {
            name,
            generation,
            summary: validation.summary(),
        },
    }
}

/// Whether the caches listed the config in force's targets; if not, why (empty within the grace
/// period, unless a watch reported an error). A cache not yet pointed at the config's target
/// says nothing: the background task points it, and its old watch's age or error is not the
/// new target's.
fn inventory(ctx: &Context, active: &ActiveConfig) -> Inventory {
    if decidable(ctx) {
        return Inventory::Decidable;
    }
    let (target, other, shoots) = (
        active.binding_target(),
        active.other_binding_target(),
        active.shoot_namespace(),
    );
    let caches = [
        cache_state(&ctx.caches.bindings, &target, || {
            format!("{} in namespace {}", target.kind.gvk().3, target.namespace)
        }),
        cache_state(&ctx.caches.others, &other, || {
            format!("{} in namespace {}", other.kind.gvk().3, other.namespace)
        }),
        cache_state(&ctx.caches.shoots, &shoots, || {
            format!("shoots in namespace {shoots}")
        }),
    ];
    let mut causes = Vec::new();
    if !ctx.took_over.load(std::sync::atomic::Ordering::SeqCst) {
        let error = ctx
            .take_over_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if let Some(e) = error {
            causes.push(format!(
                "cannot re-read bindings and claims after taking over: {}",
                first_line(&e)
            ));
        }
    }
    let now = Instant::now();
    causes.extend(caches.iter().filter_map(|c| c.cause(now)));
    Inventory::Unavailable { causes }
}

/// One watch as the inventory read sees it, for the target the config in force wants.
struct CacheState {
    /// The watch runs for that target (else the background task has yet to point it).
    pointed: bool,
    listed: bool,
    error: Option<String>,
    started: Option<Instant>,
    what: String,
}

fn cache_state<T: Clone + PartialEq + std::fmt::Debug + Send + Sync + 'static>(
    cache: &crate::k8s::Retargetable<T>,
    wanted: &T,
    what: impl FnOnce() -> String,
) -> CacheState {
    CacheState {
        pointed: cache.target().as_ref() == Some(wanted),
        listed: cache.listed(wanted),
        error: cache.error(),
        started: cache.started(),
        what: what(),
    }
}

impl CacheState {
    /// Why this watch keeps decisions waiting, if it is to be said: not while it is listed, not
    /// pointed yet, or within its grace period without an error.
    fn cause(&self, now: Instant) -> Option<String> {
        if self.listed || !self.pointed {
            return None;
        }
        let late = self
            .started
            .is_none_or(|t| now.saturating_duration_since(t) > SYNC_GRACE);
        match &self.error {
            Some(e) => Some(format!("cannot list {}: {}", self.what, first_line(e))),
            None if late => Some(format!("{} not listed yet", self.what)),
            None => None,
        }
    }
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or(s)
}

/// The recorded binding as the index shows it. One recorded in another namespace than the one
/// in force cannot be checked here.
fn check_recorded(ctx: &Context, view: &ClaimView) -> RecordedBinding {
    let l = ctx.ledger();
    if !l
        .inventory
        .holds_namespace(view.binding_namespace.as_deref())
    {
        return RecordedBinding::Unchecked;
    }
    check_bound(&l.inventory, &l.inflight, view, Instant::now()).into()
}

/// What `spec.tenants` says of this claim, whichever path created it. A claim a request source
/// created is checked by the object's kind and namespace; the user, whom only admission knows,
/// counts through the rule the webhook recorded on the claim (for the claims the webhook makes
/// and the Clusters the pass claims for) — without that record only a rule without users or
/// groups can allow it, as for an adoption the operator found itself. An AccountClaim is checked
/// by its own namespace.
async fn tenant(claim: &AccountClaim, ctx: &Context, active: &ActiveConfig) -> Tenant {
    let Some(policy) = active.spec.tenants.as_ref() else {
        return Tenant::Allowed;
    };
    let own_ns = claim.namespace().unwrap_or_default();
    let source = crate::claim_state::SourceRef::from_labels(claim.labels())
        .filter(|_| own_ns == ctx.args.source_claim_namespace());
    let (kind, namespace, admitted_rule) = match &source {
        Some(s) => {
            let rule = claim
                .annotations()
                .get(crate::sources::naming::ANNOTATION_TENANT_RULE)
                .filter(|_| claim.spec.adopt_binding.is_none());
            (s.kind.into(), s.namespace.clone(), rule.map(String::as_str))
        }
        None => (crate::api::RequesterKind::AccountClaim, own_ns, None),
    };
    let needed = crate::tenancy::needs_namespace_labels(Some(policy));
    let labels = ctx.namespaces.labels_if(needed, &namespace).await;
    let who = crate::tenancy::Requester {
        kind,
        namespace: &namespace,
        namespace_labels: labels.as_ref(),
        user: None,
        admitted_rule,
    };
    let ask = crate::tenancy::Ask {
        global_account: &claim.spec.global_account,
        adopt_binding: claim.spec.adopt_binding.is_some(),
    };
    match crate::tenancy::decide(Some(policy), &who, &ask) {
        crate::tenancy::Decision::Allowed { .. } => Tenant::Allowed,
        crate::tenancy::Decision::Denied { message } => Tenant::Refused { cause: message },
    }
}

/// What the rules are asked for a claim of `spec`.
pub(super) fn rule_request(spec: &AccountClaimSpec) -> RuleRequest<'_> {
    RuleRequest {
        plan: &spec.plan,
        platform_region: spec.platform_region.as_deref(),
        cluster_region: spec.cluster_region.as_deref(),
        provider: spec.provider.as_deref(),
        global_account: Some(&spec.global_account),
    }
}

/// The choice, under the ledger lock, and the write it needs first (`before_use`); recorded in
/// the ledger under the same lock (unless it must wait), so that a sibling claim decided right
/// after sees this one even though nothing has been written yet.
fn select(
    claim: &AccountClaim,
    ctx: &Context,
    active: &ActiveConfig,
    view: &ClaimView,
    outcome: &Outcome,
) -> Selection {
    let now = Instant::now();
    let cooldown = active
        .spec
        .release
        .as_ref()
        .and_then(|r| r.cooldown.as_deref());
    let policy = MultiAccountPolicy::from_spec(active.spec.multi_hyperscaler_account.as_ref())
        .with_cooldown(crate::pools::lifecycle::Cooldown::from_spec(
            cooldown,
            jiff::Timestamp::now(),
        ))
        .with_quarantine(crate::pools::quarantine::Gate::for_request(
            active.spec.quarantine.as_deref(),
            &claim.spec.plan,
            &claim.spec.global_account,
        ));
    // Bindings the garden just refused to let us write are tried last.
    let paused = ctx.denials.paused_bindings(now);
    let mut guard = ctx.ledger();
    let l = &mut *guard;
    if l.inflight
        .assignment_of(&view.uid, now)
        .is_some_and(|a| a.state == WriteState::Written)
    {
        return Selection::StatusWritten;
    }
    let request = OrderedRequest {
        claim: view,
        preferences: &outcome.preferences,
        provider_type: &outcome.provider_type,
        pins: active.rules.pins(),
    };
    let placement = select_ordered(&l.inventory, &l.inflight, &request, &policy, &paused, now);
    let before = before_use(&l.inventory, &l.inflight, &view.uid, &placement.choice, now);
    if !matches!(before, BeforeUse::Wait { .. }) {
        l.inflight
            .record(view, &placement.pool, &placement.choice, now);
    }
    drop(guard);
    tracing::debug!(rv = ?claim.resource_version(), choice = ?placement.choice, "decided");
    Selection::Placed { placement, before }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::CacheState;

    fn state(pointed: bool, listed: bool, error: Option<&str>, age: Duration) -> CacheState {
        let now = Instant::now();
        CacheState {
            pointed,
            listed,
            error: error.map(str::to_string),
            started: now.checked_sub(age),
            what: "shoots in namespace garden-new".into(),
        }
    }

    /// Right after a config moved the namespace, the watch still runs for the old one, started
    /// long ago, perhaps with an error of its own: nothing is said of the new target until the
    /// background task points the watch (a claim waits, writing nothing).
    #[test]
    fn a_watch_not_pointed_at_the_configs_target_yet_says_nothing() {
        let hour = Duration::from_secs(3600);
        let now = Instant::now();
        assert_eq!(state(false, false, None, hour).cause(now), None);
        assert_eq!(state(false, false, Some("403"), hour).cause(now), None);
        assert_eq!(
            state(true, false, None, hour).cause(now).as_deref(),
            Some("shoots in namespace garden-new not listed yet")
        );
        assert_eq!(
            state(true, false, None, Duration::from_secs(1)).cause(now),
            None,
            "within the grace period"
        );
        assert_eq!(
            state(true, false, Some("forbidden\nmore"), Duration::ZERO)
                .cause(now)
                .as_deref(),
            Some("cannot list shoots in namespace garden-new: forbidden")
        );
        assert_eq!(state(true, true, Some("old"), hour).cause(now), None);
    }
}
