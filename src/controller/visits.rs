//! The stage in front of the claim controller's triggers (revisits, kicks, the sweep): the claim
//! store holds a settled claim only while a visit needs it (`k8s::claim_store`), and
//! kube-runtime's controller drops a ref whose claim its store lacks. A ref whose claim the
//! store holds goes on at once. One it lacks is looked up in the index (by the uid the ref
//! carries, `revisit::claim_ref`): when the index says the claim needs a visit
//! (`selection::needs_visit`) it is fetched with one GET, put into the store, and handed on;
//! otherwise it is dropped without a request. A second ref of a claim (name and uid) that
//! waits or is being fetched is dropped (one GET). A claim that no longer exists (404) is
//! dropped.
//! Any other failure is retried a few times with a growing delay and then (unless the claim was
//! asked for again meanwhile: then it is fetched once more) left to the sweep,
//! which brings every claim the index flags back each `--resync`. Until the index can judge
//! (`can_judge`: a config in force, its bindings listed) nothing is fetched: before that every
//! recorded binding looks lost; the revisit pass that follows looks at every claim again.

use std::collections::{HashMap, VecDeque};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::stream::{BoxStream, FuturesUnordered};
use futures::{FutureExt, Stream, StreamExt};

use super::revisit::claim_ref;
use super::{ClaimRef, Context};
use crate::k8s::claim_store;
use crate::selection::needs_visit;

/// Fetches in flight at once; refs the store holds pass in between.
const FETCHES_AT_ONCE: usize = 16;
/// Tries of one GET before the claim is left to the sweep, and the delay before the second.
const FETCH_TRIES: u32 = 3;
const FETCH_RETRY: Duration = Duration::from_millis(200);
/// A GET that does not answer in time counts as failed (the client has no read timeout).
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// Refs waiting for a fetch slot; while this many wait, no more refs are read (the sweep and
/// the revisits wait, as they did behind the fetches alone).
const WAITING_AT_MOST: usize = 1024;

/// `refs`, each handed on once the claim store holds its claim, or dropped (see the module). A
/// ref whose claim the store holds goes on at once, also while every fetch slot is taken.
pub(super) fn stored_first(
    ctx: Arc<Context>,
    refs: impl Stream<Item = ClaimRef> + Send + 'static,
) -> impl Stream<Item = ClaimRef> + Send {
    StoredFirst {
        ctx,
        refs: Some(refs.boxed()),
        waiting: VecDeque::new(),
        pending: HashMap::new(),
        fetches: FuturesUnordered::new(),
    }
}

/// The stage of `stored_first`: held refs pass, the others wait for one of
/// `FETCHES_AT_ONCE` slots.
struct StoredFirst {
    ctx: Arc<Context>,
    /// `None` once the input has ended.
    refs: Option<BoxStream<'static, ClaimRef>>,
    waiting: VecDeque<ClaimRef>,
    /// The refs waiting or fetching (by name and uid: a claim re-created under its name is
    /// another), each with whether it was asked for again meanwhile. A second ref of one of
    /// them is dropped, as the first is judged afresh when its fetch starts and again when its
    /// GET has answered; if that fetch fails, a claim asked for again is fetched once more.
    pending: HashMap<Pending, bool>,
    fetches: FuturesUnordered<BoxFuture<'static, (ClaimRef, Admitted)>>,
}

/// A ref's key in `pending`: kube's `ObjectRef` compares name and namespace, not the uid.
type Pending = (ClaimRef, Option<String>);

fn pending_key(r: &ClaimRef) -> Pending {
    (r.clone(), r.extra.uid.clone())
}

/// How one ref's way through the stage ended.
enum Admitted {
    /// The store holds its claim: on to the controller.
    Pass(ClaimRef),
    /// No reconcile needs it (not flagged, gone, another claim of that name).
    Dropped,
    /// Every try of the GET failed.
    Failed,
}

impl StoredFirst {
    /// `r` waits for a fetch slot, unless a ref of its claim waits or is being fetched already.
    fn wait(&mut self, r: ClaimRef) {
        match self.pending.entry(pending_key(&r)) {
            std::collections::hash_map::Entry::Occupied(mut asked) => {
                asked.insert(true);
            }
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(false);
                self.waiting.push_back(r);
            }
        }
    }
}

impl Stream for StoredFirst {
    type Item = ClaimRef;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Option<ClaimRef>> {
        let this = &mut *self;
        loop {
            if this.waiting.len() < WAITING_AT_MOST
                && let Some(refs) = this.refs.as_mut()
            {
                match refs.poll_next_unpin(cx) {
                    Poll::Ready(Some(r)) if this.ctx.caches.claims.get(&r).is_some() => {
                        return Poll::Ready(Some(r));
                    }
                    Poll::Ready(Some(r)) => {
                        this.wait(r);
                        continue;
                    }
                    Poll::Ready(None) => this.refs = None,
                    Poll::Pending => {}
                }
            }
            while this.fetches.len() < FETCHES_AT_ONCE
                && let Some(r) = this.waiting.pop_front()
            {
                let ctx = this.ctx.clone();
                this.fetches
                    .push(async move { (r.clone(), admit(&ctx, r).await) }.boxed());
            }
            match this.fetches.poll_next_unpin(cx) {
                Poll::Ready(Some((done, admitted))) => {
                    let again = this.pending.remove(&pending_key(&done));
                    match admitted {
                        Admitted::Pass(r) => return Poll::Ready(Some(r)),
                        Admitted::Failed if again == Some(true) => this.wait(done),
                        Admitted::Failed | Admitted::Dropped => {}
                    }
                }
                Poll::Ready(None) if this.refs.is_none() && this.waiting.is_empty() => {
                    return Poll::Ready(None);
                }
                Poll::Ready(None) | Poll::Pending => return Poll::Pending,
            }
        }
    }
}

/// Claims judged under one hold of the ledger's lock by the sweep's walk: ~15 ms at ~3 µs a
/// claim.
const VISIT_CHUNK: usize = 4096;

/// The settled claims the index says need a visit (`selection::needs_visit`), as refs for the
/// sweep; the store's settled claims that no longer need one are taken out first
/// (`ClaimWriter::prune`). One walk of the index, once each `--resync`, a chunk of claims at a
/// time, letting the runtime run between chunks: at 100k claims the walk takes ~0.3 s, which
/// held the ledger's lock and the runtime's one thread at once, so admission calls and watch
/// events waited for it.
pub(super) async fn settled_visits(ctx: &Context) -> Vec<ClaimRef> {
    settled_visits_by(ctx, VISIT_CHUNK).await
}

async fn settled_visits_by(ctx: &Context, chunk: usize) -> Vec<ClaimRef> {
    let claims = {
        let l = ctx.ledger();
        ctx.caches.claim_writer.prune(&l, Instant::now());
        if !super::can_judge(ctx) {
            return Vec::new();
        }
        l.inventory.claims_shared()
    };
    let mut flagged = Vec::new();
    for part in claims.chunks(chunk.max(1)) {
        {
            let (l, now) = (ctx.ledger(), Instant::now());
            let (inv, inflight) = (&l.inventory, &l.inflight);
            // Judged as the index holds it now: a claim changed or gone since the copy is too.
            flagged.extend(
                part.iter()
                    .filter_map(|c| inv.claim(&c.uid))
                    .filter(|c| needs_visit(c, inv, inflight, now))
                    .map(claim_ref),
            );
        }
        tokio::task::yield_now().await;
    }
    flagged
}

/// The ref, once the store holds its claim (see `Admitted`).
async fn admit(ctx: &Context, r: ClaimRef) -> Admitted {
    if ctx.caches.claims.get(&r).is_some() {
        return Admitted::Pass(r);
    }
    let (Some(uid), Some(ns)) = (r.extra.uid.as_deref(), r.namespace.as_deref()) else {
        return Admitted::Dropped;
    };
    // Without a config in force whose bindings have been listed every recorded binding may look
    // lost: nothing is judged (the first revisit pass after that looks at every claim again).
    let flagged = super::can_judge(ctx) && {
        let l = ctx.ledger();
        let (inv, inflight) = (&l.inventory, &l.inflight);
        inv.claim(uid)
            .is_some_and(|c| needs_visit(c, inv, inflight, Instant::now()))
    };
    if !flagged {
        return Admitted::Dropped;
    }
    let mut delay = FETCH_RETRY;
    for attempt in 1..=FETCH_TRIES {
        let got = tokio::time::timeout(
            FETCH_TIMEOUT,
            claim_store::fetch(ctx.writer.own(), ns, &r.name),
        )
        .await;
        match got {
            Ok(Ok(Some(claim))) => {
                ctx.caches
                    .claim_writer
                    .insert_fetched(claim, uid, &ctx.ledger(), Instant::now());
                return Admitted::Pass(r);
            }
            Ok(Ok(None)) => return Admitted::Dropped,
            Ok(Err(e)) if attempt == FETCH_TRIES => {
                tracing::warn!(claim = %r, error = %e, "cannot read a settled claim that needs a visit; the sweep brings it back");
            }
            Err(_) if attempt == FETCH_TRIES => {
                tracing::warn!(claim = %r, "reading a settled claim that needs a visit timed out; the sweep brings it back");
            }
            _ => {
                tokio::time::sleep(delay).await;
                delay *= 2;
            }
        }
    }
    Admitted::Failed
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;
    use kube::runtime::controller::Action;

    use super::super::fixtures::*;
    use super::*;
    use crate::api::{AccountClaim, HapConfigSpec};
    use crate::k8s::lean::StoredClaim;
    use crate::pools::claim_view;

    /// A harness whose store lacks `c` (settled: the claim watch left it out), as the operator
    /// holds it; its index has it.
    fn out_of_store(c: &AccountClaim, bindings: &[crate::pools::BindingView]) -> Harness {
        let h = Harness::new(hap_config(aws_spec()), &[c], bindings);
        h.forget_stored(c);
        h
    }

    /// A settled claim c1 the store lacks whose binding b1 now carries another tenant, so that
    /// the index says it needs a visit: the claim, the harness, its ref and the claim as a GET
    /// answers it.
    fn lost_out_of_store() -> (AccountClaim, Harness, ClaimRef, serde_json::Value) {
        let c = bound(finalized(claim("c1")), "b1");
        let h = out_of_store(&c, &[binding("b1", "5", &[("tenantName", "ga-2")])]);
        let r = claim_ref(&claim_view(&c));
        let json = serde_json::to_value(&c).expect("json");
        (c, h, r, json)
    }

    /// The refs the stage hands on for `refs`.
    async fn through(h: &Harness, refs: Vec<ClaimRef>) -> Vec<String> {
        stored_first(h.ctx.clone(), futures::stream::iter(refs))
            .map(|r| r.name)
            .collect()
            .await
    }

    #[tokio::test]
    async fn a_kick_for_a_settled_claim_whose_binding_was_lost_reads_it_once_then_records_the_loss()
    {
        let c = bound(finalized(claim("c1")), "b1");
        assert!(StoredClaim::from(c.clone()).is_settled());
        // b1 now carries another tenant.
        let h = out_of_store(&c, &[binding("b1", "5", &[("tenantName", "ga-2")])]);
        let r = claim_ref(&claim_view(&c));
        h.api
            .expect([get_claim(&c).answer(200, serde_json::to_value(&c).expect("json"))]);
        assert_eq!(through(&h, vec![r.clone()]).await, ["c1"]);
        h.api.done();
        let stored = h.ctx.caches.claims.get(&r).expect("in the store now");
        h.api.expect([
            event(TENANTS, "c1", "Warning", "BindingLost"),
            claim_status(
                &c,
                serde_json::json!({"phase": "Failed", "credentialsBindingName": "b1"}),
            )
            .answer_rv("13"),
        ]);
        let action = super::super::claim::reconcile(stored, h.ctx.clone())
            .await
            .expect("the loss recorded");
        h.api.done();
        assert_eq!(action, Action::await_change());
        let gets = h
            .api
            .received()
            .iter()
            .filter(|r| r.method == http::Method::GET)
            .count();
        assert_eq!(gets, 1, "exactly one read");
    }

    #[tokio::test]
    async fn a_kick_for_a_settled_claim_that_needs_nothing_makes_no_request() {
        let c = bound(finalized(claim("c1")), "b1");
        let h = out_of_store(&c, &[binding("b1", "5", &[("tenantName", GA)])]);
        let r = claim_ref(&claim_view(&c));
        assert!(through(&h, vec![r]).await.is_empty(), "dropped");
        assert!(h.api.received().is_empty(), "{:?}", h.api.received());
        h.api.done();
    }

    #[tokio::test]
    async fn nothing_is_fetched_until_every_cache_has_listed() {
        let c = bound(finalized(claim("c1")), "b1");
        let h = out_of_store(&c, &[binding("b1", "5", &[("tenantName", "ga-2")])]);
        h.ctx
            .took_over
            .store(false, std::sync::atomic::Ordering::SeqCst);
        let r = claim_ref(&claim_view(&c));
        assert!(through(&h, vec![r]).await.is_empty(), "dropped");
        assert!(h.api.received().is_empty(), "{:?}", h.api.received());
        assert!(settled_visits(&h.ctx).await.is_empty(), "the sweep neither");
        h.ctx
            .took_over
            .store(true, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(
            settled_visits(&h.ctx).await.len(),
            1,
            "the lost claim, once judged"
        );
    }

    #[tokio::test]
    async fn without_a_config_in_force_a_claim_that_looks_lost_is_neither_read_nor_held() {
        let c = bound(finalized(claim("c1")), "b1");
        // b1 is not in the index: with a config in force the claim would need a visit.
        let mut h = out_of_store(&c, &[]);
        assert_eq!(
            settled_visits(&h.ctx).await.len(),
            1,
            "with the config: judged"
        );
        h.delete_config(hap_config(aws_spec()));
        assert!(super::super::caches_ready(&h.ctx), "ready without a config");
        assert!(!super::super::can_judge(&h.ctx));
        let r = claim_ref(&claim_view(&c));
        assert!(through(&h, vec![r.clone()]).await.is_empty(), "dropped");
        assert!(settled_visits(&h.ctx).await.is_empty(), "the sweep neither");
        // Its watch event leaves it out of the store.
        let ev = kube::runtime::watcher::Event::Apply(StoredClaim::from(c.clone()));
        h.ctx
            .caches
            .claim_writer
            .apply(&ev, &h.ctx.ledger(), Instant::now());
        assert!(h.ctx.caches.claims.get(&r).is_none(), "not held");
        assert!(h.api.received().is_empty(), "{:?}", h.api.received());
        h.api.done();
    }

    /// The sweep's walk of the index lets the runtime run between chunks, and judges every
    /// claim as the index holds it then. Before, it judged every claim under one hold of the
    /// ledger's lock on the runtime's thread: ~0.3 s at 100k claims in which no admission call,
    /// watch event or reconcile moved.
    #[tokio::test]
    async fn the_sweeps_walk_lets_the_runtime_run_between_chunks() {
        let lost: Vec<AccountClaim> = (0..5)
            .map(|i| bound(finalized(claim(&format!("c{i}"))), "gone"))
            .collect();
        let fine = bound(finalized(claim("ok")), "b1");
        let mut all: Vec<&AccountClaim> = lost.iter().collect();
        all.push(&fine);
        let h = Harness::new(
            hap_config(aws_spec()),
            &all,
            &[binding("b1", "5", &[("tenantName", GA)])],
        );
        let others = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let ticker = tokio::spawn({
            let others = others.clone();
            async move {
                loop {
                    others.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    tokio::task::yield_now().await;
                }
            }
        });
        let mut flagged: Vec<String> = settled_visits_by(&h.ctx, 2)
            .await
            .into_iter()
            .map(|r| r.name)
            .collect();
        ticker.abort();
        flagged.sort();
        assert_eq!(flagged, ["c0", "c1", "c2", "c3", "c4"], "the lost ones");
        assert!(
            others.load(std::sync::atomic::Ordering::SeqCst) >= 3,
            "another task ran between the walk's chunks"
        );
    }

    #[tokio::test]
    async fn while_the_bindings_of_a_new_config_are_not_listed_nothing_is_judged() {
        let c = bound(finalized(claim("c1")), "b1");
        let mut h = out_of_store(&c, &[]);
        // A new generation moves the bindings elsewhere; the watch has not been pointed there.
        let mut moved = hap_config(HapConfigSpec {
            binding_namespace: "garden-2".into(),
            ..aws_spec()
        });
        moved.metadata.generation = Some(2);
        h.observe_config(moved);
        assert!(!super::super::can_judge(&h.ctx));
        let r = claim_ref(&claim_view(&c));
        assert!(through(&h, vec![r]).await.is_empty(), "dropped");
        assert!(settled_visits(&h.ctx).await.is_empty());
        assert!(h.api.received().is_empty(), "{:?}", h.api.received());
        h.api.done();
    }

    #[tokio::test]
    async fn a_claim_the_store_holds_passes_without_a_request_and_one_that_is_gone_is_dropped() {
        let held = finalized(claim("held"));
        let c = bound(finalized(claim("c1")), "b1");
        let h = Harness::new(
            hap_config(aws_spec()),
            &[&held, &c],
            &[binding("b1", "5", &[("tenantName", "ga-2")])],
        );
        h.forget_stored(&c);
        h.api.expect([get_claim(&c).fail(404, "NotFound")]);
        let refs = vec![claim_ref(&claim_view(&held)), claim_ref(&claim_view(&c))];
        assert_eq!(through(&h, refs).await, ["held"]);
        h.api.done();
        assert!(
            h.ctx
                .caches
                .claims
                .get(&claim_ref(&claim_view(&c)))
                .is_none()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_claim_the_store_holds_passes_while_every_fetch_slot_hangs() {
        let held = finalized(claim("held"));
        let lost: Vec<AccountClaim> = (0..FETCHES_AT_ONCE)
            .map(|i| bound(finalized(claim(&format!("c{i}"))), "b1"))
            .collect();
        let mut claims: Vec<&AccountClaim> = lost.iter().collect();
        claims.push(&held);
        let h = Harness::new(
            hap_config(aws_spec()),
            &claims,
            &[binding("b1", "5", &[("tenantName", "ga-2")])],
        );
        for c in &lost {
            h.forget_stored(c);
            h.api.always(get_claim(c).hang());
        }
        let refs: Vec<ClaimRef> = lost
            .iter()
            .chain([&held])
            .map(|c| claim_ref(&claim_view(c)))
            .collect();
        let mut stage = stored_first(
            h.ctx.clone(),
            futures::stream::iter(refs).chain(futures::stream::pending()),
        )
        .boxed();
        let next = tokio::time::timeout(Duration::from_secs(1), stage.next()).await;
        assert_eq!(
            next.expect("not behind the fetches").map(|r| r.name),
            Some("held".to_string())
        );
    }

    #[tokio::test]
    async fn refs_of_one_claim_that_arrive_while_it_is_fetched_make_one_request() {
        // A revisit pass and the sweep (or two passes) flag the same claim before its GET has
        // answered: one GET, one ref handed on.
        let (c, h, r, json) = lost_out_of_store();
        h.api.expect([get_claim(&c).answer(200, json)]);
        assert_eq!(through(&h, vec![r.clone(), r.clone(), r]).await, ["c1"]);
        h.api.done();
    }

    #[tokio::test(start_paused = true)]
    async fn a_claim_asked_for_again_while_its_fetch_fails_is_fetched_once_more() {
        // Asked for again while the first fetch waits between tries: dropped then (one fetch at
        // a time), but not lost when every try of that fetch fails.
        let (c, h, r, json) = lost_out_of_store();
        let failing = (0..FETCH_TRIES).map(|_| get_claim(&c).fail(500, "InternalError"));
        h.api
            .expect(failing.chain([get_claim(&c).answer(200, json)]));
        let (tx, rx) = futures::channel::mpsc::unbounded();
        let mut stage = stored_first(h.ctx.clone(), rx).boxed();
        tx.unbounded_send(r.clone()).expect("send");
        let next = tokio::spawn(async move { stage.next().await.map(|r| r.name) });
        while h.api.received().is_empty() {
            tokio::task::yield_now().await;
        }
        tx.unbounded_send(r.clone()).expect("send");
        tx.unbounded_send(r).expect("send");
        let got = tokio::time::timeout(Duration::from_secs(60), next).await;
        assert_eq!(
            got.expect("fetched once more").expect("task"),
            Some("c1".to_string())
        );
        h.api.done();
    }

    #[tokio::test]
    async fn a_claim_re_created_under_its_name_is_not_taken_for_the_one_being_fetched() {
        let c = bound(finalized(claim("c1")), "b1");
        let h = out_of_store(&c, &[]);
        let mut stage = StoredFirst {
            ctx: h.ctx.clone(),
            refs: None,
            waiting: VecDeque::new(),
            pending: HashMap::new(),
            fetches: FuturesUnordered::new(),
        };
        let old = claim_ref(&claim_view(&c));
        let mut new = old.clone();
        new.extra.uid = Some("uid-c1-again".into());
        stage.wait(old.clone());
        stage.wait(old);
        stage.wait(new);
        let uids: Vec<_> = stage.waiting.iter().map(|r| r.extra.uid.clone()).collect();
        assert_eq!(uids.len(), 2, "{uids:?}");
        assert_ne!(uids[0], uids[1]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_that_fails_is_tried_again_and_after_the_last_try_left_to_the_sweep() {
        let (c, h, r, json) = lost_out_of_store();
        h.api.expect([
            get_claim(&c).fail(500, "InternalError"),
            get_claim(&c).answer(200, json),
        ]);
        let started = tokio::time::Instant::now();
        assert_eq!(through(&h, vec![r.clone()]).await, ["c1"], "the second try");
        assert_eq!(started.elapsed(), FETCH_RETRY);
        h.api.done();

        let h = out_of_store(&c, &[binding("b1", "5", &[("tenantName", "ga-2")])]);
        h.api
            .expect((0..FETCH_TRIES).map(|_| get_claim(&c).fail(500, "InternalError")));
        assert!(
            through(&h, vec![r.clone()]).await.is_empty(),
            "left to the sweep"
        );
        h.api.done();
        assert!(h.ctx.caches.claims.get(&r).is_none());
    }
}
