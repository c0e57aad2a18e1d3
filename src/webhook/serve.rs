//! The side effects of one admission call that is served through an AccountClaim: find or create
//! the claim, wait (bounded) for the leader's decision, and take back a claim that ends refused
//! or undecided. The calls on the API server go through [`ClaimCalls`], so the protocol can be
//! tested against a scripted API server.

use std::future::Future;
use std::time::Duration;

use tokio::sync::watch;

use crate::api::AccountClaim;
use crate::k8s::K8sError;
use crate::k8s::source_claims::{CreateOutcome, SourceClaims};
use crate::sources::admission::{ClaimPlan, ClaimState, claim_state, same_request};

/// What the protocol needs from the API server and the webhook's claim cache.
pub(super) trait ClaimCalls: Clone + Send + Sync + 'static {
    /// The cached claim of that name (may lag).
    fn cached(&self, name: &str) -> Option<AccountClaim>;
    /// Changes whenever the cache does.
    fn changes(&self) -> watch::Receiver<u64>;
    fn get(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<Option<AccountClaim>, K8sError>> + Send;
    fn create(
        &self,
        claim: &AccountClaim,
    ) -> impl Future<Output = Result<CreateOutcome, K8sError>> + Send;
    /// Deletes only this uid at this resourceVersion; a claim already gone is Ok.
    fn delete_unchanged(
        &self,
        name: &str,
        uid: Option<String>,
        resource_version: Option<String>,
    ) -> impl Future<Output = Result<(), K8sError>> + Send;
}

impl ClaimCalls for SourceClaims {
    fn cached(&self, name: &str) -> Option<AccountClaim> {
        SourceClaims::cached(self, name).map(|c| (*c).clone())
    }

    fn changes(&self) -> watch::Receiver<u64> {
        SourceClaims::changes(self)
    }

    fn get(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<Option<AccountClaim>, K8sError>> + Send {
        SourceClaims::get(self, name)
    }

    fn create(
        &self,
        claim: &AccountClaim,
    ) -> impl Future<Output = Result<CreateOutcome, K8sError>> + Send {
        SourceClaims::create(self, claim)
    }

    fn delete_unchanged(
        &self,
        name: &str,
        uid: Option<String>,
        resource_version: Option<String>,
    ) -> impl Future<Output = Result<(), K8sError>> + Send {
        SourceClaims::delete_unchanged(self, name, uid, resource_version)
    }
}

/// Finds or creates the claim and waits for its decision; a claim that ends refused or
/// undecided is deleted (if nobody bound it meanwhile), so a denial claims nothing.
pub(super) async fn serve<C: ClaimCalls>(
    calls: &C,
    p: &ClaimPlan,
    decision_timeout: Duration,
) -> ClaimState {
    let deadline = tokio::time::Instant::now() + decision_timeout;
    let existing = match calls.cached(&p.claim_name) {
        Some(c) => Some(c),
        None => match calls.get(&p.claim_name).await {
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
            match calls.create(&obj).await {
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
    let (state, last) = wait(calls, &p.claim_name, claim, deadline).await;
    if matches!(state, ClaimState::Bound { .. }) {
        return state;
    }
    // Refused or undecided: take the claim back, unless it changed since it was read (then the
    // leader may have bound it, and the fresh state decides).
    let uid = last.metadata.uid.clone();
    let rv = last.metadata.resource_version.clone();
    match calls.delete_unchanged(&p.claim_name, uid, rv).await {
        Ok(()) => state,
        Err(K8sError::Conflict { .. }) => match calls.get(&p.claim_name).await {
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
async fn wait<C: ClaimCalls>(
    calls: &C,
    name: &str,
    mut claim: AccountClaim,
    deadline: tokio::time::Instant,
) -> (ClaimState, AccountClaim) {
    let mut changes = calls.changes();
    loop {
        if let Some(c) = calls.cached(name)
            && c.metadata.uid == claim.metadata.uid
            && newer(&c, &claim)
        {
            claim = c;
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
                if let Ok(Some(c)) = calls.get(name).await
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
