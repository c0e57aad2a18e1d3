//! The reads of one claim reconcile: each fact the pure decision (`crate::decision::next`) asks
//! for, when it asks — the claim's own fields, the config resolver, the caches' state, the
//! recorded binding, the namespace's labels (the tenant check), and the ledger (the adoption and
//! the selection under its lock, where the choice is recorded for the siblings decided next).
//! No API write, and no pointing of the caches: a read only reads.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::ResourceExt;

use super::{Context, decidable};
use crate::api::{AccountClaim, CLAIM_FINALIZER};
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
            Read::Rules { config } => facts.rules = Some(config.rules.evaluate(&request(claim))),
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
/// period, unless a watch reported an error). Caches not yet pointed at a new config count as
/// listing: the background task points them.
fn inventory(ctx: &Context, active: &ActiveConfig) -> Inventory {
    if decidable(ctx) {
        return Inventory::Decidable;
    }
    let (target, other) = (active.binding_target(), active.other_binding_target());
    let caches = [
        (
            &ctx.caches.bindings.listed(&target),
            ctx.caches.bindings.error(),
            ctx.caches.bindings.started(),
            format!("{} in namespace {}", target.kind.gvk().3, target.namespace),
        ),
        (
            &ctx.caches.others.listed(&other),
            ctx.caches.others.error(),
            ctx.caches.others.started(),
            format!("{} in namespace {}", other.kind.gvk().3, other.namespace),
        ),
        (
            &ctx.caches.shoots.listed(&active.shoot_namespace()),
            ctx.caches.shoots.error(),
            ctx.caches.shoots.started(),
            format!("shoots in namespace {}", active.shoot_namespace()),
        ),
    ];
    let waiting = caches.iter().filter(|(ready, ..)| !**ready);
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
    for (_, error, started, what) in waiting {
        let late = started.is_none_or(|t| t.elapsed() > SYNC_GRACE);
        match error {
            Some(e) => causes.push(format!("cannot list {what}: {}", first_line(e))),
            None if late => causes.push(format!("{what} not listed yet")),
            None => {}
        }
    }
    Inventory::Unavailable { causes }
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

fn request(claim: &AccountClaim) -> RuleRequest<'_> {
    RuleRequest {
        plan: &claim.spec.plan,
        platform_region: claim.spec.platform_region.as_deref(),
        cluster_region: claim.spec.cluster_region.as_deref(),
        provider: claim.spec.provider.as_deref(),
        global_account: Some(&claim.spec.global_account),
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
