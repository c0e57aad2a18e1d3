//! The claim protocol of one admission call against a scripted API server: the retries,
//! preconditions and deadlines that make a refused, cancelled or re-created request leave
//! nothing behind.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use tokio::sync::watch;
use tokio::time::Instant;

use super::serve::{ClaimCalls, serve, served};
use crate::api::{AccountClaim, AccountClaimSpec, AccountClaimStatus, ClaimPhase};
use crate::k8s::K8sError;
use crate::k8s::source_claims::CreateOutcome;
use crate::sources::admission::{ClaimPlan, ClaimState};
use crate::sources::naming::ANNOTATION_ADMITTED_AT;

type Hook = Box<dyn FnOnce(&mut World) + Send>;

/// The API server's copy of the one claim of the test, and what the test does at each call.
#[derive(Default)]
struct World {
    claim: Option<AccountClaim>,
    rv: u64,
    uids: u64,
    /// The leader, right after a create: how it decides the new claim.
    leader: Option<fn(&mut AccountClaim)>,
    /// Runs before the next delete / stamp is answered (another writer got there first).
    before_delete: Vec<Hook>,
    before_stamp: Vec<Hook>,
    /// Reads never answer (an API server that hangs).
    hang_get: bool,
    /// Creates never answer either.
    hang_create: bool,
    /// What the next creates fail with, before the API server looks at the name.
    create_errors: Vec<K8sError>,
    /// The webhook's cache has not seen the claim yet.
    cache_lags: bool,
    deletes: usize,
    gets: usize,
}

impl World {
    fn bump(&mut self, c: &mut AccountClaim) {
        self.rv += 1;
        c.metadata.resource_version = Some(self.rv.to_string());
    }

    fn modify(&mut self, f: impl FnOnce(&mut AccountClaim)) {
        if let Some(mut c) = self.claim.take() {
            f(&mut c);
            self.bump(&mut c);
            self.claim = Some(c);
        }
    }
}

#[derive(Clone)]
struct Fake {
    world: Arc<Mutex<World>>,
    changed: Arc<watch::Sender<u64>>,
}

impl Fake {
    fn new(world: World) -> Self {
        Self {
            world: Arc::new(Mutex::new(world)),
            changed: Arc::new(watch::channel(0).0),
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut World) -> T) -> T {
        let out = f(&mut self.world.lock().expect("world"));
        self.changed.send_modify(|v| *v += 1);
        out
    }

    fn claim(&self) -> Option<AccountClaim> {
        self.world.lock().expect("world").claim.clone()
    }
}

fn conflict() -> K8sError {
    K8sError::Conflict {
        what: "AccountClaim".into(),
    }
}

impl ClaimCalls for Fake {
    fn cached(&self, _: &str) -> Option<AccountClaim> {
        if self.world.lock().expect("world").cache_lags {
            return None;
        }
        self.claim()
    }

    fn changes(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    async fn get(&self, _: &str) -> Result<Option<AccountClaim>, K8sError> {
        self.world.lock().expect("world").gets += 1;
        if self.world.lock().expect("world").hang_get {
            std::future::pending::<()>().await;
        }
        Ok(self.claim())
    }

    async fn create(&self, claim: &AccountClaim) -> Result<CreateOutcome, K8sError> {
        if self.world.lock().expect("world").hang_create {
            std::future::pending::<()>().await;
        }
        self.with(|w| {
            if !w.create_errors.is_empty() {
                return Err(w.create_errors.remove(0));
            }
            if let Some(c) = &w.claim {
                return Ok(CreateOutcome::Exists(c.clone()));
            }
            let mut c = claim.clone();
            w.uids += 1;
            c.metadata.uid = Some(format!("uid-{}", w.uids));
            w.bump(&mut c);
            w.claim = Some(c.clone());
            if let Some(leader) = w.leader {
                w.modify(leader);
            }
            Ok(CreateOutcome::Created(c))
        })
    }

    async fn stamp(
        &self,
        claim: &AccountClaim,
        at: jiff::Timestamp,
    ) -> Result<AccountClaim, K8sError> {
        self.with(|w| {
            if !w.before_stamp.is_empty() {
                let hook = w.before_stamp.remove(0);
                hook(w);
            }
            let Some(mut c) = w.claim.take() else {
                return Err(K8sError::NotFound {
                    what: "AccountClaim".into(),
                });
            };
            if c.metadata.resource_version != claim.metadata.resource_version {
                w.claim = Some(c);
                return Err(conflict());
            }
            c.metadata
                .annotations
                .get_or_insert_default()
                .insert(ANNOTATION_ADMITTED_AT.into(), at.to_string());
            w.bump(&mut c);
            w.claim = Some(c.clone());
            Ok(c)
        })
    }

    async fn delete_unchanged(
        &self,
        _: &str,
        uid: Option<String>,
        resource_version: Option<String>,
    ) -> Result<(), K8sError> {
        self.with(|w| {
            w.deletes += 1;
            if !w.before_delete.is_empty() {
                let hook = w.before_delete.remove(0);
                hook(w);
            }
            let Some(c) = &w.claim else { return Ok(()) };
            if uid.is_some() && c.metadata.uid != uid
                || resource_version.is_some() && c.metadata.resource_version != resource_version
            {
                return Err(conflict());
            }
            w.claim = None;
            Ok(())
        })
    }
}

fn spec(ga: &str) -> AccountClaimSpec {
    serde_json::from_value(json!({"globalAccount": ga, "plan": "aws"})).expect("spec")
}

fn plan() -> ClaimPlan {
    use crate::api::SourceKind;
    use crate::claim_state::SourceRef;
    ClaimPlan {
        source: SourceRef {
            source_id: "kyma".into(),
            kind: SourceKind::Runtime,
            namespace: "kcp-system".into(),
            name: Some("rt".into()),
            uid: None,
        },
        claim_namespace: "hap-system".into(),
        claim_name: "runtime.kcp-system.rt".into(),
        spec: spec("ga-1"),
        dry_run: false,
        binding_path: Some("/spec/shoot/secretBindingName"),
        cluster_config: None,
        has_annotations: false,
        has_cluster_configs: false,
        tenant_rule: None,
    }
}

fn ready_false(reason: &str) -> AccountClaimStatus {
    AccountClaimStatus {
        phase: Some(ClaimPhase::Pending),
        conditions: vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
            type_: "Ready".into(),
            status: "False".into(),
            reason: reason.into(),
            message: "m".into(),
            observed_generation: None,
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                jiff::Timestamp::UNIX_EPOCH,
            ),
        }],
        ..Default::default()
    }
}

fn refuse(c: &mut AccountClaim) {
    c.status = Some(ready_false("PoolExhausted"));
}

fn bind(c: &mut AccountClaim) {
    c.status = Some(AccountClaimStatus {
        phase: Some(ClaimPhase::Bound),
        credentials_binding_name: Some("aws-1".into()),
        ..Default::default()
    });
}

/// A claim of the plan's request, bound, as an earlier object of the same name left it.
fn existing_bound(uid: &str, ga: &str) -> AccountClaim {
    let mut c: AccountClaim = serde_json::from_value(plan().claim_object()).expect("claim");
    c.metadata.uid = Some(uid.into());
    c.metadata.resource_version = Some("100".into());
    c.spec = spec(ga);
    bind(&mut c);
    c
}

/// The API server has `claim`; the webhook's cache has not seen it yet.
fn unseen(claim: AccountClaim) -> Fake {
    Fake::new(World {
        claim: Some(claim),
        rv: 100,
        cache_lags: true,
        ..World::default()
    })
}

const DECISION: Duration = Duration::from_secs(4);

#[tokio::test]
async fn a_delete_that_meets_a_conflict_is_retried_until_the_claim_is_gone() {
    // The leader rewrote the refused claim's status between the call's read and its delete: the
    // delete lost its precondition and the refused claim stayed, to be bound later.
    let fake = Fake::new(World {
        leader: Some(refuse),
        before_delete: vec![Box::new(|w: &mut World| {
            w.modify(|c| c.status = Some(ready_false("PoolExhausted")));
        })],
        ..World::default()
    });
    let state = serve(&fake, &plan(), Instant::now(), DECISION, None).await;
    assert!(matches!(state, ClaimState::Refused { .. }), "{state:?}");
    assert!(fake.claim().is_none(), "the refused claim is taken back");
}

#[tokio::test]
async fn a_failed_delete_never_answers_with_another_claims_binding() {
    // Meanwhile the call's claim went and another request's claim of the same name was bound.
    let fake = Fake::new(World {
        leader: Some(refuse),
        before_delete: vec![Box::new(|w: &mut World| {
            w.claim = Some(existing_bound("uid-other", "ga-2"));
        })],
        ..World::default()
    });
    let state = serve(&fake, &plan(), Instant::now(), DECISION, None).await;
    assert!(!matches!(state, ClaimState::Bound { .. }), "{state:?}");
    assert_eq!(
        fake.claim().and_then(|c| c.metadata.uid).as_deref(),
        Some("uid-other"),
        "another request's claim is left alone"
    );
}

/// Every new request's claim is unknown to the cache: a read before the create would cost each
/// call one more round trip to kube-apiserver (BENCHMARKS.md, Admission), and the create says
/// whether the name is taken.
#[tokio::test]
async fn a_new_request_creates_its_claim_without_reading_it_first() {
    let fake = Fake::new(World {
        leader: Some(bind),
        ..World::default()
    });
    let state = serve(&fake, &plan(), Instant::now(), DECISION, None).await;
    assert!(matches!(state, ClaimState::Bound { .. }), "{state:?}");
    assert_eq!(fake.world.lock().expect("world").gets, 0);
}

/// The name taken by a claim the cache has not seen: the create finds it, and the call is served
/// through it when it is the same request, refused when it is another's.
#[tokio::test]
async fn a_claim_the_cache_has_not_seen_is_found_by_the_create() {
    let fake = unseen(existing_bound("uid-old", "ga-1"));
    let state = serve(&fake, &plan(), Instant::now(), DECISION, None).await;
    assert!(matches!(state, ClaimState::Bound { .. }), "{state:?}");
    assert_eq!(
        fake.claim().and_then(|c| c.metadata.uid).as_deref(),
        Some("uid-old")
    );
    let fake = unseen(existing_bound("uid-other", "ga-2"));
    let state = serve(&fake, &plan(), Instant::now(), DECISION, None).await;
    assert!(matches!(state, ClaimState::Conflict { .. }), "{state:?}");
}

/// A create refused whole (a full quota, a namespace being deleted, an admission rule) while the
/// request's claim exists unseen by the cache: the retry is served through that claim, as when
/// the webhook read before it created. With no claim, the refusal is the answer.
#[tokio::test]
async fn a_refused_create_still_serves_a_retry_through_its_existing_claim() {
    let forbidden = || K8sError::Forbidden {
        action: "create",
        what: "AccountClaim".into(),
        message: "exceeded quota".into(),
    };
    let fake = Fake::new(World {
        claim: Some(existing_bound("uid-old", "ga-1")),
        rv: 100,
        cache_lags: true,
        create_errors: vec![forbidden()],
        ..World::default()
    });
    let state = serve(&fake, &plan(), Instant::now(), DECISION, None).await;
    assert!(matches!(state, ClaimState::Bound { .. }), "{state:?}");
    let fake = Fake::new(World {
        create_errors: vec![forbidden()],
        ..World::default()
    });
    let state = serve(&fake, &plan(), Instant::now(), DECISION, None).await;
    let ClaimState::Undecided { message, .. } = &state else {
        panic!("{state:?}");
    };
    assert!(
        message
            .as_deref()
            .is_some_and(|m| m.contains("exceeded quota")),
        "{state:?}"
    );
}

/// The name was taken when the create came, and the claim gone before it was read back: the
/// create is made once more, rather than answering with a conflict no claim is left to explain.
#[tokio::test]
async fn a_name_taken_and_gone_again_is_created_once_more() {
    let fake = Fake::new(World {
        leader: Some(bind),
        create_errors: vec![conflict()],
        ..World::default()
    });
    let state = serve(&fake, &plan(), Instant::now(), DECISION, None).await;
    assert!(matches!(state, ClaimState::Bound { .. }), "{state:?}");
    assert!(fake.claim().is_some());
}

/// A claim of the same request that is being deleted, unseen by the cache, holds the name: the
/// new call is refused with a conflict, never served through a claim on its way out.
#[tokio::test]
async fn a_claim_being_deleted_holds_the_name_against_the_create() {
    let mut deleting = existing_bound("uid-old", "ga-1");
    deleting.metadata.deletion_timestamp = Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
    );
    let fake = unseen(deleting);
    let state = serve(&fake, &plan(), Instant::now(), DECISION, None).await;
    assert!(matches!(state, ClaimState::Conflict { .. }), "{state:?}");
}

/// A dry run creates nothing, so only a read tells whether its claim exists.
#[tokio::test]
async fn a_dry_run_reads_the_claim_and_creates_none() {
    let dry = ClaimPlan {
        dry_run: true,
        ..plan()
    };
    let fake = Fake::new(World {
        leader: Some(bind),
        ..World::default()
    });
    let state = serve(&fake, &dry, Instant::now(), DECISION, None).await;
    assert!(matches!(state, ClaimState::Undecided { .. }), "{state:?}");
    assert!(fake.claim().is_none(), "a dry run created a claim");
    assert_eq!(fake.world.lock().expect("world").gets, 1);
    let fake = unseen(existing_bound("uid-old", "ga-1"));
    let state = serve(&fake, &dry, Instant::now(), DECISION, None).await;
    assert!(matches!(state, ClaimState::Bound { .. }), "{state:?}");
}

#[tokio::test]
async fn a_claim_handed_back_is_stamped_before_it_is_answered_bound() {
    let fake = Fake::new(World {
        claim: Some(existing_bound("uid-old", "ga-1")),
        rv: 100,
        ..World::default()
    });
    let state = serve(&fake, &plan(), Instant::now(), DECISION, None).await;
    assert!(matches!(state, ClaimState::Bound { .. }), "{state:?}");
    let c = fake.claim().expect("kept");
    assert_ne!(c.metadata.resource_version.as_deref(), Some("100"));
    let stamp = c
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_ADMITTED_AT))
        .expect("stamped");
    assert!(stamp.parse::<jiff::Timestamp>().is_ok(), "{stamp}");
}

#[tokio::test]
async fn a_claim_deleted_as_it_is_handed_back_is_never_answered_bound() {
    // The clean-up deletes the claim between the call's read and its answer.
    let fake = Fake::new(World {
        claim: Some(existing_bound("uid-old", "ga-1")),
        rv: 100,
        before_stamp: vec![Box::new(|w: &mut World| {
            w.modify(|c| {
                c.metadata.deletion_timestamp = Some(
                    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now()),
                );
            });
        })],
        ..World::default()
    });
    let state = serve(&fake, &plan(), Instant::now(), DECISION, None).await;
    assert!(!matches!(state, ClaimState::Bound { .. }), "{state:?}");
}

/// Cancels a call (kube-apiserver gave up on it and hyper dropped the handler) once its claim
/// exists.
async fn cancel_once_claimed(fake: &Fake, p: &ClaimPlan) {
    let mut changes = fake.changes();
    let call = serve(fake, p, Instant::now(), DECISION, None);
    tokio::pin!(call);
    tokio::select! {
        _ = &mut call => panic!("no leader: the call cannot end this soon"),
        _ = async {
            while fake.claim().is_none() {
                let _ = changes.changed().await;
            }
        } => {}
    }
}

#[tokio::test]
async fn a_cancelled_call_still_takes_its_refused_claim_back() {
    let fake = Fake::new(World::default());
    let p = plan();
    cancel_once_claimed(&fake, &p).await;
    // The leader refuses the claim after the call was cut off.
    fake.with(|w| w.modify(refuse));
    let mut changes = fake.changes();
    tokio::time::timeout(Duration::from_secs(2), async {
        while fake.claim().is_some() {
            let _ = changes.changed().await;
        }
    })
    .await
    .expect("the refused claim of the cancelled call is deleted");
}

#[tokio::test]
async fn a_retry_is_served_through_the_claim_an_undecided_call_kept() {
    // The full chaos run: each undecided call deleted its claim, so every retry's new claim
    // joined the back of a leader's queue that took longer than the decision timeout to reach
    // it, and no retry was ever served. Now the claim stays for the retry.
    let fake = Fake::new(World::default());
    let p = plan();
    cancel_once_claimed(&fake, &p).await;
    let first = fake.claim().and_then(|c| c.metadata.uid);
    let retry = {
        let fake = fake.clone();
        let p = p.clone();
        tokio::spawn(async move { serve(&fake, &p, Instant::now(), DECISION, None).await })
    };
    // Time for the cut-off call's task to act on its claim (it used to delete it at once).
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(fake.with(|w| w.deletes), 0, "the undecided claim is kept");
    fake.with(|w| w.modify(bind));
    let state = retry.await.expect("retry");
    assert!(matches!(state, ClaimState::Bound { .. }), "{state:?}");
    assert_eq!(
        fake.claim().and_then(|c| c.metadata.uid),
        first,
        "the same claim"
    );
}

/// The separate-garden chaos run: a kept claim's clean-up grace counted from its creation, so
/// the clean-up deleted it while the caller's retries were still being served through it, and
/// each later retry met the deleting claim ("an earlier object of this name"). A call that keeps
/// its undecided claim stamps it after answering: the grace counts from the last call.
#[tokio::test(start_paused = true)]
async fn an_undecided_call_stamps_the_claim_it_keeps_for_the_retry() {
    let fake = Fake::new(World::default());
    let state = serve(&fake, &plan(), Instant::now(), DECISION, None).await;
    assert!(matches!(state, ClaimState::Undecided { .. }), "{state:?}");
    let mut changes = fake.changes();
    let stamped = || {
        fake.claim()
            .and_then(|c| c.metadata.annotations)
            .is_some_and(|a| a.contains_key(ANNOTATION_ADMITTED_AT))
    };
    tokio::time::timeout(Duration::from_secs(2), async {
        while !stamped() {
            let _ = changes.changed().await;
        }
    })
    .await
    .expect("the kept claim is stamped");
    assert_eq!(fake.with(|w| w.deletes), 0, "and kept");
}

#[tokio::test(start_paused = true)]
async fn the_whole_call_answers_within_the_decision_timeout() {
    // Reads that hang (kube-client has no read timeout) held the call past kube-apiserver's
    // webhook timeout. The create, a new request's first call, hangs as well.
    let fake = Fake::new(World {
        hang_get: true,
        hang_create: true,
        ..World::default()
    });
    let state = tokio::time::timeout(
        DECISION + Duration::from_millis(10),
        serve(&fake, &plan(), Instant::now(), DECISION, None),
    )
    .await
    .expect("answered within the decision timeout");
    assert!(matches!(state, ClaimState::Undecided { .. }), "{state:?}");
}

/// Found by review: the deadline started after the tenant policy's Namespace read, so a slow
/// read pushed the answer past the webhook's timeoutSeconds. It counts from the top of the call.
#[tokio::test(start_paused = true)]
async fn the_decision_deadline_counts_from_the_top_of_the_call() {
    let fake = Fake::new(World {
        hang_get: true,
        hang_create: true,
        ..World::default()
    });
    let started = tokio::time::Instant::now();
    // What the call did before it came to its claim (a slow Namespace read).
    tokio::time::sleep(DECISION / 2).await;
    let state = serve(&fake, &plan(), started, DECISION, None).await;
    assert!(matches!(state, ClaimState::Undecided { .. }), "{state:?}");
    assert_eq!(
        tokio::time::Instant::now() - started,
        DECISION,
        "answered when the decision timeout ran out, counted from the top of the call"
    );
}

/// An UPDATE that would move a served object's binding is refused when its
/// claim exists; the webhook's cache may not show a claim created a moment ago (another replica
/// created it), so the check reads the API server before it lets the UPDATE through.
#[tokio::test]
async fn an_update_guard_whose_cache_lags_reads_the_claim_from_the_api_server() {
    let fake = Fake::new(World {
        claim: Some(existing_bound("u-1", "ga-1")),
        cache_lags: true,
        ..Default::default()
    });
    let name = plan().claim_name;
    assert_eq!(served(&fake, &name, DECISION).await, Ok(true));
    fake.with(|w| w.claim = None);
    assert_eq!(served(&fake, &name, DECISION).await, Ok(false));
    fake.with(|w| w.hang_get = true);
    let unknown = served(&fake, &name, Duration::from_millis(50)).await;
    assert!(unknown.is_err(), "{unknown:?}");
}
