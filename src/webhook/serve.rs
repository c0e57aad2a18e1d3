//! The side effects of one admission call that is served through an AccountClaim: find or create
//! the claim, wait for the leader's decision, stamp a claim before answering `Bound` with it,
//! take back a claim that ends refused, and keep an undecided one for the caller's retry. They
//! run in a task of their own, so that a call kube-apiserver gives up on (hyper then drops the
//! handler) or a drain cuts off still takes a refused claim back; the answer is bounded by the
//! decision timeout as a whole. The calls on the API
//! server go through [`ClaimCalls`], so the protocol can be tested against a scripted API server.

use std::future::Future;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use crate::api::AccountClaim;
use crate::k8s::K8sError;
use crate::k8s::source_claims::{CreateOutcome, SourceClaims};
use crate::sources::admission::{
    ClaimPlan, ClaimState, Retake, claim_state, is_same_claim, retake, same_request,
};

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
    /// Writes the admitted-at stamp, conditioned on the claim's resourceVersion (Conflict if it
    /// changed since it was read).
    fn stamp(
        &self,
        claim: &AccountClaim,
        at: jiff::Timestamp,
    ) -> impl Future<Output = Result<AccountClaim, K8sError>> + Send;
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

    fn stamp(
        &self,
        claim: &AccountClaim,
        at: jiff::Timestamp,
    ) -> impl Future<Output = Result<AccountClaim, K8sError>> + Send {
        SourceClaims::stamp(self, claim, at)
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

/// How long a call's task may go on taking its claim back after the call was answered or cut
/// off (an API server that refuses or does not answer for longer leaves it to the source
/// clean-up, which deletes claims of objects that never appeared).
const TAKE_BACK_LIMIT: Duration = Duration::from_secs(30);

/// The instants one call works to.
#[derive(Clone, Copy, Debug)]
struct Deadlines {
    /// The wait for the leader ends here, leaving room to stamp or take the claim back.
    decide_by: Instant,
    /// The call is answered by here, whatever is still running.
    answer_by: Instant,
    /// The task gives up taking the claim back.
    give_up_by: Instant,
}

impl Deadlines {
    fn new(now: Instant, decision_timeout: Duration) -> Self {
        let answer_by = now + decision_timeout;
        Self {
            decide_by: answer_by - (decision_timeout / 4).min(Duration::from_secs(1)),
            answer_by,
            give_up_by: answer_by + TAKE_BACK_LIMIT,
        }
    }
}

/// Keeps a stopping webhook waiting while a call's task still runs (see [`Tasks`]).
pub(super) type TaskGuard = mpsc::Sender<()>;

/// The detached tasks of calls: a stop waits for them (bounded), so a drain that cuts calls off
/// does not also cut off their clean-up.
pub(super) struct Tasks {
    open: std::sync::Mutex<Option<TaskGuard>>,
    done: tokio::sync::Mutex<mpsc::Receiver<()>>,
}

impl Tasks {
    pub(super) fn new() -> Self {
        let (tx, rx) = mpsc::channel(1);
        Self {
            open: std::sync::Mutex::new(Some(tx)),
            done: tokio::sync::Mutex::new(rx),
        }
    }

    /// A guard for a new task (none once draining: the task then runs untracked).
    pub(super) fn guard(&self) -> Option<TaskGuard> {
        self.open.lock().ok().and_then(|g| g.clone())
    }

    /// Waits, at most `limit`, until every task holding a guard has ended.
    pub(super) async fn drain(&self, limit: Duration) {
        if let Ok(mut g) = self.open.lock() {
            g.take();
        }
        let _ = tokio::time::timeout(limit, async {
            // Every guard dropped: `recv` answers None.
            while self.done.lock().await.recv().await.is_some() {}
        })
        .await;
    }
}

/// Whether a claim of that name exists, for an UPDATE guard: the cache first, then (it may lag
/// behind a claim another replica created a moment ago) the API server, bounded by `timeout`.
/// `Err` when it cannot be told.
pub(super) async fn served<C: ClaimCalls>(
    claims: &C,
    name: &str,
    timeout: Duration,
) -> Result<bool, String> {
    if claims.cached(name).is_some() {
        return Ok(true);
    }
    match tokio::time::timeout(timeout, claims.get(name)).await {
        Ok(Ok(found)) => Ok(found.is_some()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("the API server did not answer in time".into()),
    }
}

/// Serves the claim of one admission call that `started` (whatever it did before counts
/// against its time) and returns the state to answer with, within `decision_timeout` of
/// `started` in all. The side effects run in a task of their own: if this future is dropped, or
/// the answer is late, the task still takes back a claim it leaves unanswered.
pub(super) async fn serve<C: ClaimCalls>(
    calls: &C,
    p: &ClaimPlan,
    started: Instant,
    decision_timeout: Duration,
    guard: Option<TaskGuard>,
) -> ClaimState {
    let deadlines = Deadlines::new(started, decision_timeout);
    let (tx, rx) = oneshot::channel();
    let call = Call {
        calls: calls.clone(),
        plan: p.clone(),
        deadlines,
        answer: tx,
    };
    tokio::spawn(async move {
        let _guard = guard;
        // A read or write that never answers (kube-client sets no read timeout) must not keep
        // the task, nor a stopping webhook, forever.
        let _ = tokio::time::timeout_at(deadlines.give_up_by, call.run()).await;
    });
    match tokio::time::timeout_at(deadlines.answer_by, rx).await {
        Ok(Ok(state)) => state,
        _ => ClaimState::Undecided {
            reason: Some("Timeout".into()),
            message: Some(format!(
                "no decision within {}s (--webhook-decision-timeout)",
                decision_timeout.as_secs_f64()
            )),
        },
    }
}

/// The task of one call.
struct Call<C> {
    calls: C,
    plan: ClaimPlan,
    deadlines: Deadlines,
    answer: oneshot::Sender<ClaimState>,
}

/// How the settling of a claim ended.
enum Settled {
    /// Answer this; nothing to take back (bound and stamped, undecided and kept for the retry,
    /// being deleted, gone or not ours).
    Answer(ClaimState),
    /// Refused: take back this version of the claim, then answer the state.
    TakeBack(ClaimState, Box<AccountClaim>),
    /// Undecided: answer, then stamp this version of the claim, kept for the caller's retry.
    Keep(ClaimState, Box<AccountClaim>),
}

impl<C: ClaimCalls> Call<C> {
    async fn run(mut self) {
        let (state, kept) = self.decide().await;
        let Call {
            calls,
            plan,
            answer,
            ..
        } = self;
        let _ = answer.send(state);
        if let Some(claim) = kept {
            keep(&calls, &plan, claim).await;
        }
    }

    /// Whether an answer can still reach kube-apiserver.
    fn answerable(&self) -> bool {
        !self.answer.is_closed() && Instant::now() < self.deadlines.answer_by
    }

    /// The answer, and the claim kept for the caller's retry if any.
    async fn decide(&mut self) -> (ClaimState, Option<AccountClaim>) {
        let claim = match self.acquire().await {
            Ok(c) => c,
            Err(state) => return (state, None),
        };
        if self.plan.dry_run {
            return (claim_state(&claim), None);
        }
        match self.settle(claim).await {
            Settled::Answer(state) => (state, None),
            Settled::TakeBack(state, last) => (self.take_back(state, *last).await, None),
            Settled::Keep(state, last) => (state, Some(*last)),
        }
    }

    /// The claim this call serves through: the existing one of the same request, or a new one.
    async fn acquire(&self) -> Result<AccountClaim, ClaimState> {
        let p = &self.plan;
        if let Some(c) = self.calls.cached(&p.claim_name) {
            return self.serve_through(c);
        }
        if p.dry_run {
            // A dry run creates nothing: only a read tells whether its claim exists.
            return match self
                .calls
                .get(&p.claim_name)
                .await
                .map_err(|e| failed(&e))?
            {
                Some(c) => self.serve_through(c),
                None => Err(ClaimState::Undecided {
                    reason: None,
                    message: None,
                }),
            };
        }
        // Else the create tells (a name taken is read back), without a read first: that would
        // cost every new request one more round trip to kube-apiserver.
        let obj: AccountClaim =
            serde_json::from_value(p.claim_object()).map_err(|e| ClaimState::Undecided {
                reason: Some("Internal".into()),
                message: Some(format!("cannot build the AccountClaim: {e}")),
            })?;
        let created = match self.calls.create(&obj).await {
            // The name was taken, and the claim gone again before it was read: once more.
            Err(K8sError::Conflict { .. }) => self.calls.create(&obj).await,
            other => other,
        };
        match created {
            Ok(CreateOutcome::Created(c)) => {
                tracing::debug!(claim = %p.claim_ref(), uid = ?c.metadata.uid, "created the claim of a request");
                Ok(c)
            }
            Ok(CreateOutcome::Exists(c)) => self.serve_through(c),
            Err(e) => self.after_refused_create(&e).await,
        }
    }

    /// A create the API server refused (a quota, a namespace being deleted, an admission rule)
    /// while this request's claim may exist already, unseen by the cache: a retry is served
    /// through it, as it was when the webhook read before creating.
    async fn after_refused_create(&self, e: &K8sError) -> Result<AccountClaim, ClaimState> {
        match self.calls.get(&self.plan.claim_name).await {
            Ok(Some(c)) => self.serve_through(c),
            Ok(None) | Err(_) => Err(failed(e)),
        }
    }

    /// An existing claim of this name: served through when it is this request's and not being
    /// deleted, else the name is another's.
    fn serve_through(&self, c: AccountClaim) -> Result<AccountClaim, ClaimState> {
        let p = &self.plan;
        if c.metadata.deletion_timestamp.is_none() && same_request(&c.spec, &p.spec) {
            return Ok(c);
        }
        tracing::debug!(
            claim = %p.claim_ref(),
            uid = ?c.metadata.uid,
            rv = ?c.metadata.resource_version,
            deleting = c.metadata.deletion_timestamp.is_some(),
            same_request = same_request(&c.spec, &p.spec),
            "an earlier request's claim holds the name"
        );
        Err(ClaimState::Conflict {
            existing: Box::new(c.spec),
        })
    }

    /// Waits for the leader; a bound claim is stamped before it answers (compare-and-swap: a
    /// claim that changed is read again and decided again, and only this very claim counts).
    async fn settle(&mut self, mut claim: AccountClaim) -> Settled {
        let uid = claim.metadata.uid.clone();
        loop {
            let (state, last) = self.wait(claim).await;
            match state {
                ClaimState::Bound { .. } if self.answerable() => {}
                // Nobody to answer: a bound claim is the source clean-up's (its object never
                // appears).
                ClaimState::Bound { .. } => return Settled::Answer(too_late()),
                ClaimState::Refused { .. } => return Settled::TakeBack(state, Box::new(last)),
                // Undecided (the leader has not decided in time, or the call was cut off): the
                // claim stays for the caller's retry, which is served through it, in its place
                // in the leader's queue. Deleted, a retry's new claim started at the back of the
                // queue again, and a leader whose queue took longer than the decision timeout
                // (a takeover with many claims) never reached any (the full chaos run). If no
                // object appears, the source clean-up deletes it after the grace period, and a
                // binding claimed for it meanwhile goes back clean. Stamped once answered, so
                // that the grace counts from the last call.
                ClaimState::Undecided { .. } => return Settled::Keep(state, Box::new(last)),
                _ => return Settled::Answer(state),
            }
            claim = match self.calls.stamp(&last, jiff::Timestamp::now()).await {
                Ok(stamped) if claim_is_stamped(&stamped, &last) => {
                    if let bound @ ClaimState::Bound { .. } = claim_state(&stamped) {
                        return Settled::Answer(bound);
                    }
                    stamped
                }
                Ok(unchanged) => unchanged,
                Err(K8sError::Conflict { .. } | K8sError::NotFound { .. }) => {
                    match self.calls.get(&self.plan.claim_name).await {
                        Ok(Some(c)) if is_same_claim(&c, uid.as_deref(), &self.plan.spec) => c,
                        Ok(Some(c)) => return Settled::Answer(conflict_with(c)),
                        Ok(None) => return Settled::Answer(gone()),
                        Err(e) => return Settled::Answer(failed(&e)),
                    }
                }
                Err(e) => return Settled::Answer(failed(&e)),
            };
        }
    }

    /// Waits until the claim is bound, refused or being deleted, or the decision deadline
    /// passes; returns the state and the last version of the claim seen.
    async fn wait(&mut self, mut claim: AccountClaim) -> (ClaimState, AccountClaim) {
        let name = self.plan.claim_name.clone();
        let deadline = self.deadlines.decide_by;
        let mut changes = self.calls.changes();
        let mut watching = true;
        loop {
            if let Some(c) = self.calls.cached(&name)
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
                // A call that was cut off waits on too: a refusal still to come is taken back.
                _ = tokio::time::sleep_until(deadline) => return (state, claim),
                changed = changes.changed(), if watching => {
                    // The cache is gone (shutting down): only reads still tell.
                    watching = changed.is_ok();
                }
                // A safety net for a watch that lags: read the claim itself now and then.
                _ = tokio::time::sleep(Duration::from_millis(500)) => {
                    if let Ok(Ok(Some(c))) =
                        tokio::time::timeout_at(deadline, self.calls.get(&name)).await
                        && c.metadata.uid == claim.metadata.uid
                    {
                        claim = c;
                    }
                }
            }
        }
    }

    /// Deletes the claim of a refused or undecided call, conditioned on its uid and the version
    /// read; on a Conflict reads it again and retries while it is this call's claim and not
    /// bound. Goes on after the answer (or after the call was cut off), up to
    /// [`TAKE_BACK_LIMIT`].
    async fn take_back(&mut self, state: ClaimState, last: AccountClaim) -> ClaimState {
        let name = self.plan.claim_name.clone();
        let uid = last.metadata.uid.clone();
        let mut rv = last.metadata.resource_version.clone();
        let mut pause = Duration::from_millis(100);
        while Instant::now() < self.deadlines.give_up_by {
            let error = match self
                .calls
                .delete_unchanged(&name, uid.clone(), rv.clone())
                .await
            {
                Ok(()) => {
                    tracing::debug!(claim = %self.plan.claim_ref(), ?uid, "took back the claim of a request that was not served");
                    return state;
                }
                Err(K8sError::Conflict { .. }) => match self.calls.get(&name).await {
                    Ok(now) => match retake(now.as_ref(), uid.as_deref(), &self.plan.spec) {
                        Retake::Stop => return state,
                        Retake::Retry { resource_version } => {
                            rv = resource_version;
                            continue;
                        }
                        Retake::Bound => return self.answer_late_bind(now, state).await,
                    },
                    Err(e) => e,
                },
                Err(e) => e,
            };
            tracing::warn!(claim = %self.plan.claim_ref(), error = %error, "cannot take back the claim of a request that was not served; retrying");
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(2));
        }
        tracing::warn!(claim = %self.plan.claim_ref(), "gave up taking back the claim of a request that was not served; the source clean-up deletes it once its grace period has passed");
        state
    }

    /// The leader bound the claim after the wait ended: answer `Bound` only if it can still be
    /// answered and the stamp lands; otherwise it is the source clean-up's.
    async fn answer_late_bind(&self, now: Option<AccountClaim>, state: ClaimState) -> ClaimState {
        let Some(claim) = now.filter(|_| self.answerable()) else {
            return state;
        };
        match self.calls.stamp(&claim, jiff::Timestamp::now()).await {
            Ok(stamped) if claim_is_stamped(&stamped, &claim) => match claim_state(&stamped) {
                bound @ ClaimState::Bound { .. } => bound,
                _ => state,
            },
            _ => state,
        }
    }
}

/// Stamps a kept claim (compare-and-swap), so that the source clean-up's grace counts from the
/// call that kept it, not from the claim's creation: a caller that keeps retrying keeps its
/// claim. A claim changed since (decided, being deleted) is left as it is; the stamp is only for
/// the clean-up's clock.
async fn keep<C: ClaimCalls>(calls: &C, plan: &ClaimPlan, claim: AccountClaim) {
    let stamped = calls.stamp(&claim, jiff::Timestamp::now()).await;
    tracing::debug!(claim = %plan.claim_ref(), stamped = stamped.is_ok(), "kept the undecided claim for the retry");
}

/// Whether `after` is a later version than `before` (the stamp took).
fn claim_is_stamped(after: &AccountClaim, before: &AccountClaim) -> bool {
    after.metadata.uid == before.metadata.uid
        && after.metadata.resource_version != before.metadata.resource_version
}

fn failed(e: &K8sError) -> ClaimState {
    ClaimState::Undecided {
        reason: Some(e.kind().into()),
        message: Some(e.to_string()),
    }
}

fn too_late() -> ClaimState {
    ClaimState::Undecided {
        reason: Some("Timeout".into()),
        message: Some("the call ended before its claim was bound".into()),
    }
}

fn gone() -> ClaimState {
    ClaimState::Undecided {
        reason: Some("Gone".into()),
        message: Some("the AccountClaim was deleted while the call was answered".into()),
    }
}

fn conflict_with(c: AccountClaim) -> ClaimState {
    ClaimState::Conflict {
        existing: Box::new(c.spec),
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
