//! The claim store's translation of watch events and its fetched inserts, against a real
//! reflector store and a real ledger.

use std::collections::BTreeMap;

use kube::runtime::reflector::ObjectRef;

use super::*;
use crate::api::{AccountClaim, AccountClaimSpec, AccountClaimStatus, CLAIM_FINALIZER, ClaimPhase};
use crate::pools::BindingView;

/// A claim of tenant `ga` with the release finalizer at resourceVersion `rv`, without status.
fn claim(name: &str, rv: u64) -> AccountClaim {
    let mut c = AccountClaim::new(
        name,
        AccountClaimSpec {
            global_account: "ga".into(),
            plan: "aws".into(),
            ..Default::default()
        },
    );
    c.metadata.namespace = Some("ns".into());
    c.metadata.uid = Some(format!("uid-{name}"));
    c.metadata.resource_version = Some(rv.to_string());
    c.metadata.generation = Some(1);
    c.metadata.finalizers = Some(vec![CLAIM_FINALIZER.into()]);
    c
}

/// Settled: recorded Bound to `binding` in namespace `garden` for the current generation.
fn bound(name: &str, rv: u64, binding: &str) -> StoredClaim {
    let mut c = claim(name, rv);
    c.status = Some(AccountClaimStatus {
        observed_generation: Some(1),
        phase: Some(ClaimPhase::Bound),
        credentials_binding_name: Some(binding.into()),
        binding_namespace: Some("garden".into()),
        hyperscaler_type: Some("aws".into()),
        ..Default::default()
    });
    c.into()
}

/// Not settled: no status yet.
fn new(name: &str, rv: u64) -> StoredClaim {
    claim(name, rv).into()
}

/// A binding of the aws pool held by `tenant`.
fn binding(name: &str, rv: u64, tenant: &str) -> BindingView {
    BindingView {
        name: name.into(),
        resource_version: Some(rv.to_string()),
        labels: [
            ("hyperscalerType".to_string(), "aws".to_string()),
            ("tenantName".to_string(), tenant.to_string()),
        ]
        .into(),
        ..Default::default()
    }
}

/// A ledger and an empty listed store; `follow` plays one watch event as the claim watch does.
struct Watch {
    ledger: Ledger,
    store: Store<StoredClaim>,
    writer: ClaimWriter,
}

impl Watch {
    fn new(bindings: &[BindingView]) -> Self {
        let mut ledger = Ledger::default();
        for b in bindings {
            ledger.apply_binding(b.clone());
        }
        let (store, writer) = ClaimWriter::listed(Vec::new());
        Self {
            ledger,
            store,
            writer,
        }
    }

    fn follow(&mut self, ev: Event<StoredClaim>) {
        match &ev {
            Event::Apply(c) | Event::InitApply(c) => self.ledger.apply_claim(c.view()),
            Event::Delete(c) => {
                let uid = c.meta().uid.clone().unwrap_or_default();
                self.ledger
                    .delete_claim(&uid, c.resource_version().as_deref());
            }
            _ => {}
        }
        self.writer.apply(&ev, &self.ledger, Instant::now());
    }

    /// The resourceVersion of the store's copy of claim `name`.
    fn stored(&self, name: &str) -> Option<String> {
        let key = ObjectRef::new(name).within("ns");
        self.store.get(&key).and_then(|c| c.resource_version())
    }
}

#[test]
fn the_translation_is_as_the_claim_says() {
    let (settled, unsettled) = (bound("a", 2, "b1"), new("b", 2));
    let holds = |c: &StoredClaim| !c.is_settled();
    assert_eq!(
        to_store(&Event::Apply(settled.clone()), holds),
        ToStore::Remove
    );
    assert_eq!(
        to_store(&Event::InitApply(settled.clone()), holds),
        ToStore::LeaveOut
    );
    assert_eq!(to_store(&Event::Delete(settled), holds), ToStore::AsIs);
    assert_eq!(
        to_store(&Event::Apply(unsettled.clone()), holds),
        ToStore::AsIs
    );
    assert_eq!(to_store(&Event::InitApply(unsettled), holds), ToStore::AsIs);
    assert_eq!(to_store::<StoredClaim>(&Event::Init, holds), ToStore::AsIs);
    assert_eq!(
        to_store::<StoredClaim>(&Event::InitDone, holds),
        ToStore::AsIs
    );
}

#[test]
fn a_claim_that_settles_leaves_the_store_and_an_unsettled_one_is_held() {
    let mut w = Watch::new(&[binding("b1", 1, "ga")]);
    w.follow(Event::Apply(new("a", 2)));
    assert_eq!(w.stored("a").as_deref(), Some("2"), "not settled: held");
    // Its reconcile recorded it Bound: the store's older copy goes.
    w.follow(Event::Apply(bound("a", 3, "b1")));
    assert_eq!(w.stored("a"), None, "settled: only the index keeps it");
    assert!(w.ledger.inventory.claim("uid-a").is_some());
    // A settled claim the store never held stays out.
    w.follow(Event::Apply(bound("c", 4, "b1")));
    assert_eq!(w.stored("c"), None);
    // A change that unsettles it (a new generation) brings it back.
    let mut changed = claim("a", 5);
    changed.metadata.generation = Some(2);
    changed.status = bound("a", 5, "b1").expand().status;
    w.follow(Event::Apply(changed.into()));
    assert_eq!(w.stored("a").as_deref(), Some("5"));
    w.follow(Event::Delete(new("a", 6)));
    assert_eq!(w.stored("a"), None);
}

#[test]
fn a_relist_keeps_only_the_claims_that_are_not_settled() {
    let mut w = Watch::new(&[binding("b1", 1, "ga")]);
    w.follow(Event::Apply(new("old", 1)));
    w.follow(Event::Init);
    w.follow(Event::InitApply(new("a", 2)));
    w.follow(Event::InitApply(bound("b", 3, "b1")));
    assert_eq!(w.stored("old").as_deref(), Some("1"), "until the list ends");
    w.follow(Event::InitDone);
    assert_eq!(w.stored("a").as_deref(), Some("2"));
    assert_eq!(w.stored("b"), None, "settled: left out");
    assert_eq!(w.stored("old"), None, "not listed: gone");
    assert_eq!(w.store.state().len(), 1);
    assert_eq!(w.ledger.inventory.len().1, 3, "the index keeps every claim");
}

#[test]
fn a_settled_claim_whose_binding_was_lost_is_held_until_its_verdict_is_recorded() {
    // The binding now carries another tenant: claim `a`, recorded Bound, must be told it lost it.
    let mut w = Watch::new(&[binding("b1", 1, "other")]);
    w.follow(Event::Init);
    w.follow(Event::InitApply(bound("a", 2, "b1")));
    w.follow(Event::InitDone);
    assert_eq!(w.stored("a").as_deref(), Some("2"), "a relist keeps it");
    // An event that says nothing new (a label of someone else's) keeps it, at its new version:
    // its visit must not be lost before the reconcile has run.
    w.follow(Event::Apply(bound("a", 3, "b1")));
    assert_eq!(w.stored("a").as_deref(), Some("3"));
    // The reconcile recorded the loss (phase Failed, the binding kept): nothing more to do.
    let mut failed = bound("a", 4, "b1").expand();
    failed.status.as_mut().expect("status").phase = Some(ClaimPhase::Failed);
    let failed = StoredClaim::from(failed);
    assert!(failed.is_settled());
    w.follow(Event::Apply(failed));
    assert_eq!(w.stored("a"), None);
}

#[test]
fn a_fetched_claim_goes_in_unless_a_newer_copy_is_known_or_the_index_lost_it() {
    let mut w = Watch::new(&[binding("b1", 1, "other")]);
    w.ledger.apply_claim(bound("a", 5, "b1").view());
    let ledger = &w.ledger;
    assert!(
        !w.writer
            .insert_fetched(bound("a", 4, "b1"), "uid-a", ledger, Instant::now()),
        "the index has a newer one"
    );
    assert_eq!(w.stored("a"), None);
    assert!(
        w.writer
            .insert_fetched(bound("a", 6, "b1"), "uid-a", ledger, Instant::now())
    );
    assert_eq!(w.stored("a").as_deref(), Some("6"));
    assert!(
        !w.writer
            .insert_fetched(bound("a", 5, "b1"), "uid-a", ledger, Instant::now()),
        "the store has a newer one"
    );
    assert_eq!(w.stored("a").as_deref(), Some("6"));
    assert!(
        !w.writer
            .insert_fetched(bound("gone", 9, "b1"), "uid-gone", ledger, Instant::now()),
        "not in the index: deleted meanwhile"
    );
    assert_eq!(w.stored("gone"), None);
}

#[test]
fn a_prune_takes_out_the_settled_claims_that_need_nothing_any_more() {
    let mut w = Watch::new(&[binding("b1", 1, "other")]);
    w.follow(Event::Apply(bound("a", 2, "b1")));
    w.follow(Event::Apply(new("n", 3)));
    assert_eq!(
        w.stored("a").as_deref(),
        Some("2"),
        "lost: held for its visit"
    );
    assert_eq!(
        w.writer.prune(&w.ledger, Instant::now()),
        0,
        "both still held"
    );
    // The binding is the tenant's again: the visit is no longer needed.
    w.ledger.apply_binding(binding("b1", 7, "ga"));
    assert_eq!(w.writer.prune(&w.ledger, Instant::now()), 1);
    assert_eq!(w.stored("a"), None);
    assert_eq!(w.stored("n").as_deref(), Some("3"), "not settled: kept");
}

#[test]
fn until_the_index_can_judge_no_settled_claim_is_held() {
    // Before the bindings are listed every recorded binding looks lost.
    let mut w = Watch::new(&[]);
    w.writer.judge(false);
    w.follow(Event::Init);
    w.follow(Event::InitApply(bound("a", 2, "b1")));
    w.follow(Event::InitApply(new("n", 3)));
    w.follow(Event::InitDone);
    assert_eq!(w.stored("a"), None);
    assert_eq!(w.stored("n").as_deref(), Some("3"));
    w.writer.judge(true);
    w.follow(Event::Apply(bound("a", 4, "b1")));
    assert_eq!(w.stored("a").as_deref(), Some("4"), "judged: lost, held");
}

#[test]
fn a_settled_claim_a_request_source_made_is_left_to_the_index() {
    let mut w = Watch::new(&[binding("b1", 1, "ga")]);
    let mut c = bound("a", 2, "b1").expand();
    c.metadata.labels = Some(BTreeMap::from([
        (crate::labels::SOURCE_ID.to_string(), "shoots".to_string()),
        (crate::labels::SOURCE_KIND.to_string(), "Shoot".to_string()),
        (
            crate::labels::SOURCE_NAMESPACE.to_string(),
            "garden".to_string(),
        ),
    ]));
    let c = StoredClaim::from(c);
    assert!(c.is_settled());
    w.follow(Event::Apply(c.clone()));
    assert_eq!(w.stored("a"), None, "the source pass reads the index");
    assert!(
        w.ledger
            .inventory
            .claim("uid-a")
            .is_some_and(|v| v.source.is_some())
    );
    // Nor does a re-list keep it.
    w.follow(Event::Init);
    w.follow(Event::InitApply(c));
    w.follow(Event::InitDone);
    assert_eq!(w.stored("a"), None);
}

#[test]
fn a_claim_fetched_during_a_relist_is_still_held_when_the_list_ends() {
    // `x` is the tenant's when the list reaches it: left out.
    let mut w = Watch::new(&[binding("b1", 1, "ga")]);
    w.follow(Event::Init);
    w.follow(Event::InitApply(bound("x", 2, "b1")));
    // The binding goes to another tenant; the revisit fetches `x` while the list is still open.
    w.ledger.apply_binding(binding("b1", 3, "other"));
    assert!(
        w.writer
            .insert_fetched(bound("x", 2, "b1"), "uid-x", &w.ledger, Instant::now())
    );
    assert_eq!(w.stored("x").as_deref(), Some("2"));
    w.follow(Event::InitDone);
    assert_eq!(
        w.stored("x").as_deref(),
        Some("2"),
        "the list's end keeps the fetched claim"
    );
    // Outside a re-list the buffer is not touched: the next list starts empty.
    w.follow(Event::Init);
    w.follow(Event::InitDone);
    assert_eq!(w.stored("x"), None, "not listed: gone");
}

#[test]
fn a_fetched_claim_of_another_uid_stays_out_and_an_unknown_version_does_not_block() {
    let mut w = Watch::new(&[binding("b1", 1, "other")]);
    w.ledger.apply_claim(bound("a", 5, "b1").view());
    // Re-created under the same name: not the claim the visit was for.
    let mut again = bound("a", 8, "b1").expand();
    again.metadata.uid = Some("uid-a2".into());
    assert!(
        !w.writer
            .insert_fetched(StoredClaim::from(again), "uid-a", &w.ledger, Instant::now())
    );
    assert_eq!(w.stored("a"), None);
    // The index's view has no version: the fetched copy goes in.
    let mut view = bound("b", 5, "b1").view();
    view.resource_version = None;
    w.ledger.apply_claim(view);
    assert!(
        w.writer
            .insert_fetched(bound("b", 6, "b1"), "uid-b", &w.ledger, Instant::now())
    );
    assert_eq!(w.stored("b").as_deref(), Some("6"));
}

#[test]
fn a_lagging_watch_event_does_not_overwrite_a_newer_fetched_copy() {
    let mut w = Watch::new(&[binding("b1", 1, "other")]);
    w.ledger.apply_claim(bound("a", 5, "b1").view());
    assert!(
        w.writer
            .insert_fetched(bound("a", 7, "b1"), "uid-a", &w.ledger, Instant::now())
    );
    w.follow(Event::Apply(bound("a", 6, "b1")));
    assert_eq!(w.stored("a").as_deref(), Some("7"), "the newer copy stays");
    w.follow(Event::Apply(bound("a", 8, "b1")));
    assert_eq!(w.stored("a").as_deref(), Some("8"));
}

#[test]
fn a_fetched_claim_whose_visit_is_no_longer_needed_stays_out() {
    // The binding was lost when the visit was asked for; by the time the GET answers it is the
    // tenant's again (or another pass has visited): the copy would stay until the next sweep.
    let mut w = Watch::new(&[binding("b1", 1, "other")]);
    w.ledger.apply_claim(bound("a", 5, "b1").view());
    w.ledger.apply_binding(binding("b1", 7, "ga"));
    assert!(
        !w.writer
            .insert_fetched(bound("a", 5, "b1"), "uid-a", &w.ledger, Instant::now()),
        "needs no visit any more"
    );
    assert_eq!(w.stored("a"), None);
    // Until the index can judge nothing settled is held, fetched or not.
    w.ledger.apply_binding(binding("b1", 8, "other"));
    w.writer.judge(false);
    assert!(
        !w.writer
            .insert_fetched(bound("a", 5, "b1"), "uid-a", &w.ledger, Instant::now())
    );
    w.writer.judge(true);
    assert!(
        w.writer
            .insert_fetched(bound("a", 5, "b1"), "uid-a", &w.ledger, Instant::now())
    );
}

#[tokio::test]
async fn the_claim_watch_hands_on_references_by_name_of_unsettled_claims_only() {
    use futures::StreamExt;
    use kube::runtime::watcher::{Error, Event};
    let events = futures::stream::iter(vec![
        Ok(Event::Init),
        Ok(Event::InitApply(new("listed", 3))),
        Ok(Event::InitApply(bound("listed-bound", 4, "b1"))),
        Ok(Event::InitDone),
        Ok(Event::Apply(bound("now-bound", 5, "b2"))),
        Ok(Event::Apply(new("created", 6))),
        Err(Error::NoResourceVersion),
    ]);
    let out: Vec<_> = crate::k8s::caches::stored_objects(events, crate::k8s::caches::unsettled_ref)
        .collect()
        .await;
    let refs: Vec<_> = out.iter().filter_map(|r| r.as_ref().ok()).collect();
    let names: Vec<_> = refs.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["listed", "created"]);
    assert!(refs.iter().all(|r| r.namespace.as_deref() == Some("ns")
        && r.extra.uid.is_none()
        && r.extra.resource_version.is_none()));
    assert!(matches!(out.last(), Some(Err(Error::NoResourceVersion))));
}
