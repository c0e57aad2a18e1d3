//! One admission call: decode the review, ask `sources::admission` what to do, create or find
//! the AccountClaim and wait (bounded) for the leader's decision, answer with a patch or a
//! denial. Every replica runs this; only the leader decides, so the decision stays in one place.
//! The claim's side effects are `serve`'s: a refused, undecided or cut-off call takes its claim
//! back, so nothing is claimed. An UPDATE guard reads the API server when the cache does not
//! show the claim.

use tokio::time::Instant;

use k8s_openapi::api::authentication::v1::UserInfo;
use kube::api::DynamicObject;
use kube::core::admission::{
    AdmissionRequest, AdmissionResponse, AdmissionReview, Operation as Op,
};
use serde_json::Value;

use super::Webhook;
use crate::api::conditions::reasons;
use crate::api::{BindingKind, HapConfigSpec, SourceKind};
use crate::k8s::active::{ActiveConfig, ConfigState};
use crate::metrics::AdmissionLabels;
use crate::sources::admission::{
    Operation, Plan, Request, Serving, TenantAsk, Verdict, finish, plan, record_ops, tenant_ask,
};

/// Decodes, decides and encodes one review. Never fails: a request it cannot read is answered
/// as invalid, which the API server treats as a webhook error.
pub async fn review(hook: &Webhook, body: &[u8]) -> Vec<u8> {
    let started = Instant::now();
    let review: Result<AdmissionReview<DynamicObject>, _> = serde_json::from_slice(body);
    let request: Option<AdmissionRequest<DynamicObject>> =
        review.ok().and_then(|r| r.try_into().ok());
    let (response, kind, outcome) = match request {
        Some(req) => {
            let kind = kind_of(&req);
            let (resp, outcome) = match kind {
                Some(k) => decide(hook, k, &req, started).await,
                None => (AdmissionResponse::from(&req), "untouched"),
            };
            (resp, kind.map_or("other", SourceKind::as_str), outcome)
        }
        None => (
            AdmissionResponse::invalid("not an admission.k8s.io/v1 AdmissionReview"),
            "other",
            "error",
        ),
    };
    hook.metrics
        .admission_seconds
        .get_or_create(&AdmissionLabels {
            kind: kind.into(),
            outcome: outcome.into(),
        })
        .observe(started.elapsed().as_secs_f64());
    serde_json::to_vec(&response.into_review()).unwrap_or_default()
}

/// The source kind of the reviewed object, if it is one the operator serves.
fn kind_of(req: &AdmissionRequest<DynamicObject>) -> Option<SourceKind> {
    SourceKind::ALL.into_iter().find(|k| {
        let r = k.resource();
        r.group == req.kind.group && r.kind == req.kind.kind
    })
}

fn deny(resp: AdmissionResponse, message: String) -> (AdmissionResponse, &'static str) {
    let mut resp = resp.deny(message);
    resp.result.code = 403;
    resp.result.reason = "Forbidden".into();
    (resp, "denied")
}

/// A refusal while the config holds binding writes: 403 as every denial, with reason `Paused`
/// or `Observing` and a message saying what to do. Not 503: client libraries retry a 503 on
/// their own at once (kube-rs kept one create retrying for minutes in e2e_lifecycle), hammering
/// the webhook for a hold that lasts as long as a migration.
fn held(
    resp: AdmissionResponse,
    reason: &str,
    message: String,
) -> (AdmissionResponse, &'static str) {
    let mut resp = resp.deny(message);
    resp.result.code = 403;
    resp.result.reason = reason.into();
    (resp, "denied")
}

fn allow(
    resp: AdmissionResponse,
    ops: Vec<Value>,
    warnings: Vec<String>,
) -> (AdmissionResponse, &'static str) {
    let mut resp = resp;
    if !warnings.is_empty() {
        resp.warnings = Some(warnings);
    }
    if ops.is_empty() {
        return (resp, "untouched");
    }
    let patch: Result<json_patch::Patch, _> = serde_json::from_value(Value::Array(ops));
    match patch.map(|p| resp.clone().with_patch(p)) {
        Ok(Ok(r)) => (r, "patched"),
        _ => deny(
            resp,
            "hap-operator built a patch it cannot encode; this is a bug".into(),
        ),
    }
}

/// One review of a source kind: refused while the caches are cold, untouched without rules in
/// force, else planned by `sources::admission` and the plan carried out, answered within the
/// decision timeout of `started` (when the review arrived). Every answer that admits the object
/// also sets its record of the tenant decision (`record_ops`), so a record the requester wrote
/// never reaches the source pass.
#[tracing::instrument(name = "admission", skip_all, fields(
    kind = kind.as_str(),
    namespace = req.namespace.as_deref(),
    object = %req.name,
    operation = ?req.operation,
    user = req.user_info.username.as_deref(),
))]
async fn decide(
    hook: &Webhook,
    kind: SourceKind,
    req: &AdmissionRequest<DynamicObject>,
    started: Instant,
) -> (AdmissionResponse, &'static str) {
    let resp = AdmissionResponse::from(req);
    let to_value =
        |o: &Option<DynamicObject>| o.as_ref().and_then(|o| serde_json::to_value(o).ok());
    let Some(object) = to_value(&req.object) else {
        return (resp, "untouched");
    };
    let old = to_value(&req.old_object);
    let operation = match req.operation {
        Op::Create => Operation::Create,
        Op::Update => Operation::Update,
        _ => Operation::Other,
    };
    let request = Request {
        operation,
        dry_run: req.dry_run,
        kind,
        namespace: req.namespace.as_deref().unwrap_or_default(),
        object: &object,
        old_object: old.as_ref(),
    };
    let state = hook.resolver.resolve();
    let hold = state.hold();
    if hold.observing {
        return observing(hook, resp, &request, &state);
    }
    if !hook.is_ready() {
        return deny(
            resp,
            "hap-operator is starting (its caches have not synced yet); retry".into(),
        );
    }
    let active = match state {
        ConfigState::Active { active, .. } => active,
        // No rules in force: no source is in force either.
        _ => return allow(resp, record_ops(&request, &[], None), Vec::new()),
    };
    let random = crate::sources::naming::random_suffix();
    let serving = serving(hook, &active, &random);
    let planned = plan(&request, &serving);
    tracing::debug!(kind = kind.as_str(), namespace = request.namespace, name = %req.name, plan = ?planned, "admission");
    let (ops, warnings) = match planned {
        Plan::Deny(m) => return deny(resp, m),
        Plan::Claim(p) => {
            let call = (kind, req, &request);
            let spec = (&active.spec, hold.paused);
            return claim_and_wait(hook, resp, spec, call, &p, started).await;
        }
        Plan::DenyIfServed { claim, message } => match served(hook, &claim).await {
            Ok(false) => (Vec::new(), Vec::new()),
            Ok(true) => return deny(resp, message),
            Err(why) => return deny(resp, why),
        },
        Plan::Untouched => (Vec::new(), Vec::new()),
        Plan::Patch { ops, warnings } => (ops, warnings),
    };
    let who = (kind, &req.user_info);
    match pass_tenant_decision(hook, &active.spec, who, &request, &serving, started).await {
        Ok(decided) => {
            let mut ops = ops;
            let record = record_ops(&request, &ops, decided.as_ref().map(Option::as_deref));
            ops.extend(record);
            allow(resp, ops, warnings)
        }
        Err(message) => deny(resp, format!("{}: {message}", reasons::TENANT_NOT_ALLOWED)),
    }
}

/// What the config in force serves, for `plan`.
fn serving<'a>(hook: &'a Webhook, active: &'a ActiveConfig, random: &'a str) -> Serving<'a> {
    Serving {
        sources: active.rules.sources(),
        binding_kind: active
            .spec
            .binding_kind
            .unwrap_or(BindingKind::CredentialsBinding),
        binding_namespace: &active.spec.binding_namespace,
        claim_namespace: hook.claims.namespace(),
        random,
    }
}

/// While the config observes (`spec.mode: Observe`) beside another account pool: that pool's
/// requests must not depend on this operator, so whatever the caches, an object that names its
/// binding (as KEB's do), an update and an object no source serves pass untouched (no claim,
/// no adoption). A new object the operator would serve is refused `Observing`: nothing gives it
/// a binding now, and after the cutover it would not be served either.
fn observing(
    hook: &Webhook,
    resp: AdmissionResponse,
    request: &Request<'_>,
    state: &ConfigState,
) -> (AdmissionResponse, &'static str) {
    let untouched = |resp| allow(resp, record_ops(request, &[], None), Vec::new());
    let ConfigState::Active { active, .. } = state else {
        return untouched(resp);
    };
    if request.operation != Operation::Create {
        return untouched(resp);
    }
    match plan(request, &serving(hook, active, "")) {
        Plan::Untouched => untouched(resp),
        _ => {
            let message = crate::api::observing_denial(hook.resolver.name(), request.kind.as_str());
            held(resp, reasons::OBSERVING, message)
        }
    }
}

/// The source pass will claim for this object once it is stored: the policy is decided now,
/// where the user is known, and its rule recorded on the object for that claim. `Ok(None)` when
/// the object leads to no claim of the pass.
async fn pass_tenant_decision(
    hook: &Webhook,
    spec: &HapConfigSpec,
    who: (SourceKind, &UserInfo),
    request: &Request<'_>,
    serving: &Serving<'_>,
    started: Instant,
) -> Result<Option<Option<String>>, String> {
    let Some(ask) = tenant_ask(request, serving) else {
        return Ok(None);
    };
    tenant_decision(hook, spec, who, &ask, false, started)
        .await
        .map(Some)
}

/// Whether the claim of an object exists (an UPDATE that would change what a served object
/// asked for is refused then), read live when the cache does not show it.
async fn served(hook: &Webhook, claim: &str) -> Result<bool, String> {
    let name = claim.rsplit('/').next().unwrap_or_default();
    super::serve::served(&hook.claims, name, hook.decision_timeout)
        .await
        .map_err(|e| format!("hap-operator cannot tell whether this object is served ({e}); retry"))
}

/// A request that needs a claim: refused by tenancy or a pause before any claim exists, else
/// the claim is created (or found), carrying the rule the user was allowed under, and the
/// leader's decision awaited, bounded.
async fn claim_and_wait(
    hook: &Webhook,
    resp: AdmissionResponse,
    (spec, paused): (&HapConfigSpec, bool),
    (kind, req, request): (SourceKind, &AdmissionRequest<DynamicObject>, &Request<'_>),
    p: &crate::sources::admission::ClaimPlan,
    started: Instant,
) -> (AdmissionResponse, &'static str) {
    let ask = TenantAsk {
        source_id: p.source.source_id.clone(),
        namespace: p.source.namespace.clone(),
        global_account: p.spec.global_account.clone(),
        cluster_config: p.cluster_config.clone(),
    };
    let mut p = p.clone();
    let who = (kind, &req.user_info);
    let adopt = p.spec.adopt_binding.is_some();
    match tenant_decision(hook, spec, who, &ask, adopt, started).await {
        Ok(rule) => p.tenant_rule = rule,
        // Refused before any claim exists: nothing is created, nothing claimed.
        Err(message) => {
            return deny(resp, format!("{}: {message}", reasons::TENANT_NOT_ALLOWED));
        }
    }
    if paused {
        let message = crate::api::paused_denial(hook.resolver.name(), kind.as_str());
        return held(resp, reasons::PAUSED, message);
    }
    let state = super::serve::serve(
        &hook.claims,
        &p,
        started,
        hook.decision_timeout,
        hook.tasks.guard(),
    )
    .await;
    match finish(&p, &state) {
        Verdict::Allow { mut ops, warnings } => {
            let record = record_ops(request, &ops, Some(p.tenant_rule.as_deref()));
            ops.extend(record);
            allow(resp, ops, warnings)
        }
        Verdict::Deny(m) => deny(resp, m),
    }
}

/// What `spec.tenants` says of this request, by the object's kind and namespace, the admission
/// request's user and the global account it asks for: the allowing rule (`None` without a
/// policy), or why it refuses.
async fn tenant_decision(
    hook: &Webhook,
    spec: &HapConfigSpec,
    (kind, user): (SourceKind, &UserInfo),
    ask: &TenantAsk,
    adopt_binding: bool,
    started: Instant,
) -> Result<Option<String>, String> {
    let Some(policy) = spec.tenants.as_ref() else {
        return Ok(None);
    };
    let needed = crate::tenancy::needs_namespace_labels(Some(policy));
    let by = started + hook.decision_timeout;
    let labels = (hook.namespaces)
        .labels_by(needed, &ask.namespace, by)
        .await;
    let user = crate::tenancy::User {
        username: user.username.clone().unwrap_or_default(),
        groups: user.groups.clone().unwrap_or_default(),
    };
    let who = crate::tenancy::Requester {
        kind: kind.into(),
        namespace: &ask.namespace,
        namespace_labels: labels.as_ref(),
        user: Some(&user),
        admitted_rule: None,
    };
    let ask = crate::tenancy::Ask {
        global_account: &ask.global_account,
        adopt_binding,
    };
    match crate::tenancy::decide(Some(policy), &who, &ask) {
        crate::tenancy::Decision::Allowed { rule } => Ok(rule),
        crate::tenancy::Decision::Denied { message } => Err(message),
    }
}
