//! One admission call: decode the review, ask `sources::admission` what to do, create or find
//! the AccountClaim and wait (bounded) for the leader's decision, answer with a patch or a
//! denial. Every replica runs this; only the leader decides, so the decision stays in one place.
//! A refused or undecided claim is deleted before the denial goes out: nothing is claimed.

use std::time::{Duration, Instant};

use kube::api::DynamicObject;
use kube::core::admission::{
    AdmissionRequest, AdmissionResponse, AdmissionReview, Operation as Op,
};
use rand::Rng;
use serde_json::Value;

use super::Webhook;
use crate::api::{AccountClaim, BindingKind, SourceKind};
use crate::controller::active::ConfigState;
use crate::k8s::K8sError;
use crate::k8s::source_claims::CreateOutcome;
use crate::metrics::AdmissionLabels;
use crate::sources::admission::{
    ClaimPlan, ClaimState, Operation, Plan, Request, Serving, Verdict, claim_state, finish, plan,
    same_request,
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
                Some(k) => decide(hook, k, &req).await,
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

fn random_suffix() -> String {
    const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    (0..8)
        .map(|_| char::from(CHARS[rng.random_range(0..CHARS.len())]))
        .collect()
}

async fn decide(
    hook: &Webhook,
    kind: SourceKind,
    req: &AdmissionRequest<DynamicObject>,
) -> (AdmissionResponse, &'static str) {
    let resp = AdmissionResponse::from(req);
    if !hook.is_ready() {
        return deny(
            resp,
            "hap-operator is starting (its caches have not synced yet); retry".into(),
        );
    }
    let active = match hook.resolver.resolve() {
        ConfigState::Active { active, .. } => active,
        // No rules in force: no source is in force either.
        _ => return (resp, "untouched"),
    };
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
    let random = random_suffix();
    let serving = Serving {
        sources: &active.sources,
        binding_kind: active
            .spec
            .binding_kind
            .unwrap_or(BindingKind::CredentialsBinding),
        binding_namespace: &active.spec.binding_namespace,
        claim_namespace: hook.claims.namespace(),
        random: &random,
    };
    let request = Request {
        operation,
        dry_run: req.dry_run,
        kind,
        namespace: req.namespace.as_deref().unwrap_or_default(),
        object: &object,
        old_object: old.as_ref(),
    };
    let planned = plan(&request, &serving);
    tracing::debug!(kind = kind.as_str(), namespace = request.namespace, name = %req.name, plan = ?planned, "admission");
    match planned {
        Plan::Untouched => (resp, "untouched"),
        Plan::Deny(m) => deny(resp, m),
        Plan::Patch { ops, warnings } => allow(resp, ops, warnings),
        Plan::DenyIfServed { claim, message } => {
            let name = claim.rsplit('/').next().unwrap_or_default();
            if hook.claims.cached(name).is_some() {
                deny(resp, message)
            } else {
                (resp, "untouched")
            }
        }
        Plan::Claim(p) => {
            let state = serve(hook, &p).await;
            match finish(&p, &state) {
                Verdict::Allow { ops, warnings } => allow(resp, ops, warnings),
                Verdict::Deny(m) => deny(resp, m),
            }
        }
    }
}

/// Finds or creates the claim and waits for its decision; a claim that ends refused or
/// undecided is deleted (if nobody bound it meanwhile), so a denial claims nothing.
async fn serve(hook: &Webhook, p: &ClaimPlan) -> ClaimState {
    let deadline = tokio::time::Instant::now() + hook.decision_timeout;
    let existing = match hook.claims.cached(&p.claim_name) {
        Some(c) => Some((*c).clone()),
        None => match hook.claims.get(&p.claim_name).await {
            Ok(c) => c,
            Err(e) => return failed(&e),
        },
    };
    let claim = match existing {
        Some(c) if c.metadata.deletion_timestamp.is_some() || !same_request(&c.spec, &p.spec) => {
            return ClaimState::Conflict {
                existing: Box::new(c.spec),
            };
        }
        Some(c) => c,
        None if p.dry_run => {
            return ClaimState::Undecided {
                reason: None,
                message: None,
            };
        }
        None => {
            let obj: AccountClaim = match serde_json::from_value(p.claim_object()) {
                Ok(o) => o,
                Err(e) => {
                    return ClaimState::Undecided {
                        reason: Some("Internal".into()),
                        message: Some(format!("cannot build the AccountClaim: {e}")),
                    };
                }
            };
            match hook.claims.create(&obj).await {
                Ok(CreateOutcome::Created(c)) => c,
                Ok(CreateOutcome::Exists(c)) if same_request(&c.spec, &p.spec) => c,
                Ok(CreateOutcome::Exists(c)) => {
                    return ClaimState::Conflict {
                        existing: Box::new(c.spec),
                    };
                }
                Err(e) => return failed(&e),
            }
        }
    };
    if p.dry_run {
        return claim_state(&claim);
    }
    let (state, last) = wait(hook, &p.claim_name, claim, deadline).await;
    if matches!(state, ClaimState::Bound { .. }) {
        return state;
    }
    // Refused or undecided: take the claim back, unless it changed since it was read (then the
    // leader may have bound it, and the fresh state decides).
    let uid = last.metadata.uid.clone();
    let rv = last.metadata.resource_version.clone();
    match hook.claims.delete_unchanged(&p.claim_name, uid, rv).await {
        Ok(()) => state,
        Err(K8sError::Conflict { .. }) => match hook.claims.get(&p.claim_name).await {
            Ok(Some(now)) if matches!(claim_state(&now), ClaimState::Bound { .. }) => {
                claim_state(&now)
            }
            _ => state,
        },
        Err(e) => {
            tracing::warn!(claim = %p.claim_ref(), error = %e, "cannot delete a claim whose request was denied");
            state
        }
    }
}

fn failed(e: &K8sError) -> ClaimState {
    ClaimState::Undecided {
        reason: Some(e.kind().into()),
        message: Some(e.to_string()),
    }
}

/// Waits until the claim is bound or refused, or the deadline passes; returns the state and the
/// last version of the claim seen.
async fn wait(
    hook: &Webhook,
    name: &str,
    mut claim: AccountClaim,
    deadline: tokio::time::Instant,
) -> (ClaimState, AccountClaim) {
    let mut changes = hook.claims.changes();
    loop {
        if let Some(c) = hook.claims.cached(name)
            && c.metadata.uid == claim.metadata.uid
            && newer(&c, &claim)
        {
            claim = (*c).clone();
        }
        let state = claim_state(&claim);
        if !matches!(state, ClaimState::Undecided { .. }) {
            return (state, claim);
        }
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => return (state, claim),
            changed = changes.changed() => {
                if changed.is_err() {
                    // The cache is gone (shutting down): nothing more will arrive.
                    tokio::time::sleep_until(deadline).await;
                    return (state, claim);
                }
            }
            // A safety net for a watch that lags: read the claim itself now and then.
            _ = tokio::time::sleep(Duration::from_millis(500)) => {
                if let Ok(Some(c)) = hook.claims.get(name).await
                    && c.metadata.uid == claim.metadata.uid
                {
                    claim = c;
                }
            }
        }
    }
}

/// Whether `a` is a later version than `b` (resourceVersions compare as numbers on etcd; an
/// unparsable one is taken as newer, the cache being the fresher source).
fn newer(a: &AccountClaim, b: &AccountClaim) -> bool {
    let rv = |c: &AccountClaim| {
        c.metadata
            .resource_version
            .as_deref()
            .and_then(|v| v.parse::<u64>().ok())
    };
    match (rv(a), rv(b)) {
        (Some(x), Some(y)) => x > y,
        _ => true,
    }
}
