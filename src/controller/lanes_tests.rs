use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ObjectMeta;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::{reflector, watcher};

use super::*;

fn object(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    }
}

struct Seen {
    lanes: Lanes,
    order: Mutex<Vec<String>>,
}

#[derive(Debug, thiserror::Error)]
#[error("never")]
struct Never;

/// One reconcile as the claim controller runs it: a slot in the lane first, then the work. A
/// "hot" object comes back at once every time (a claim waiting for its newer copy, or one that
/// lost a compare-and-swap); a "cold" one is done after one pass.
async fn reconcile(obj: Arc<ConfigMap>, seen: Arc<Seen>) -> Result<Action, Never> {
    let slot = seen.lanes.enter(Lane::Claims).await;
    assert!(slot.is_some(), "the lanes are never closed here");
    let name = obj.metadata.name.clone().unwrap_or_default();
    tokio::time::sleep(Duration::from_millis(10)).await;
    seen.order.lock().unwrap().push(name.clone());
    Ok(if name.starts_with("hot") {
        Action::requeue(Duration::ZERO)
    } else {
        Action::await_change()
    })
}

/// The claim controller's set-up (`claim_controller_config`, the lanes) over a store with many
/// objects that come back at once and a few that need one pass: every one of the latter is
/// reconciled within the first round of all of them. With kube-runtime's own limit
/// (`Config::concurrency(2)`, no lanes) 5 or 6 of the 8 were not, in three runs of three:
/// the test that failed before.
#[tokio::test(start_paused = true)]
async fn a_claim_that_comes_back_again_and_again_does_not_starve_the_others() {
    let hot: Vec<String> = (0..24).map(|i| format!("hot-{i:02}")).collect();
    let cold: Vec<String> = (0..8).map(|i| format!("cold-{i}")).collect();
    let all: Vec<ConfigMap> = hot.iter().chain(&cold).map(|n| object(n)).collect();
    let (reader, mut writer) = reflector::store::<ConfigMap>();
    writer.apply_watcher_event(&watcher::Event::Init);
    for o in &all {
        writer.apply_watcher_event(&watcher::Event::InitApply(o.clone()));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
    let triggers = futures::stream::iter(all.clone().into_iter().map(Ok::<_, watcher::Error>))
        .chain(futures::stream::pending());
    let seen = Arc::new(Seen {
        lanes: Lanes::new(2, 1),
        order: Mutex::new(Vec::new()),
    });
    Controller::for_stream(triggers, reader)
        .with_config(super::super::claim_controller_config())
        .run(reconcile, |_, _, _| Action::await_change(), seen.clone())
        .take(600)
        .for_each(|_| futures::future::ready(()))
        .await;
    let order = seen.order.lock().unwrap().clone();
    let first_round = &order[..all.len()];
    let missing: Vec<&String> = cold.iter().filter(|c| !first_round.contains(c)).collect();
    assert!(
        missing.is_empty(),
        "not reconciled in the first {} reconciles: {missing:?} (order: {order:?})",
        all.len()
    );
}

#[tokio::test(start_paused = true)]
async fn a_full_claims_lane_does_not_hold_up_a_source_claim() {
    let lanes = Lanes::new(1, 1);
    let _busy = lanes.enter(Lane::Claims).await.unwrap();
    let source = tokio::time::timeout(Duration::from_secs(1), lanes.enter(Lane::Source)).await;
    assert!(
        source.is_ok_and(|s| s.is_some()),
        "the source lane waited for the claims lane"
    );
    let claims = tokio::time::timeout(Duration::from_secs(1), lanes.enter(Lane::Claims)).await;
    assert!(
        claims.is_err(),
        "the claims lane gave out more slots than it has"
    );
}

#[tokio::test(start_paused = true)]
async fn slots_go_first_come_first_served() {
    let lanes = Lanes::new(1, 1);
    let order = Arc::new(Mutex::new(Vec::new()));
    let first = lanes.enter(Lane::Claims).await.unwrap();
    let mut waiting = Vec::new();
    for i in 0..5 {
        let (lanes, order) = (lanes.clone(), order.clone());
        waiting.push(tokio::spawn(async move {
            let _slot = lanes.enter(Lane::Claims).await.unwrap();
            order.lock().unwrap().push(i);
            tokio::time::sleep(Duration::from_millis(5)).await;
        }));
        // Each queues before the next one starts.
        tokio::task::yield_now().await;
    }
    drop(first);
    for w in waiting {
        w.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4]);
}

#[tokio::test(start_paused = true)]
async fn closed_lanes_send_queued_reconciles_away() {
    let lanes = Lanes::new(1, 1);
    let busy = lanes.enter(Lane::Claims).await.unwrap();
    let queued = tokio::spawn({
        let lanes = lanes.clone();
        async move { lanes.enter(Lane::Claims).await.is_some() }
    });
    tokio::task::yield_now().await;
    lanes.close();
    assert!(
        !queued.await.unwrap(),
        "a queued reconcile got a slot after the close"
    );
    drop(busy);
}

#[tokio::test(start_paused = true)]
async fn accountclaims_step_back_while_a_source_claim_is_queued_or_running() {
    let lanes = Lanes::new(16, 1);
    let source = lanes.enter(Lane::Source).await.unwrap();
    let wait = Duration::from_secs(1);
    let first = lanes.enter(Lane::Claims).await.unwrap();
    let second = lanes.enter(Lane::Claims).await.unwrap();
    let third = tokio::time::timeout(wait, lanes.enter(Lane::Claims)).await;
    assert!(
        third.is_err(),
        "a third AccountClaim ran beside a source claim (floor 2)"
    );
    // A second source claim queues behind the first: AccountClaims still wait.
    let queued_source = tokio::spawn({
        let lanes = lanes.clone();
        async move { lanes.enter(Lane::Source).await.is_some() }
    });
    tokio::task::yield_now().await;
    drop(source);
    assert!(queued_source.await.unwrap());
    // No source claim left: the claims lane has its sixteen slots again.
    let more: Vec<_> = futures::future::join_all((0..14).map(|_| lanes.enter(Lane::Claims))).await;
    assert!(more.iter().all(Option::is_some));
    drop((first, second));
}

#[tokio::test(start_paused = true)]
async fn a_reconcile_dropped_while_it_queues_takes_no_slot_with_it() {
    let lanes = Lanes::new(1, 1);
    let busy = lanes.enter(Lane::Claims).await.unwrap();
    let gone = tokio::spawn({
        let lanes = lanes.clone();
        async move { lanes.enter(Lane::Claims).await.map(|_| ()) }
    });
    tokio::task::yield_now().await;
    gone.abort();
    let _ = gone.await;
    drop(busy);
    let next = tokio::time::timeout(Duration::from_secs(1), lanes.enter(Lane::Claims)).await;
    assert!(
        next.is_ok_and(|s| s.is_some()),
        "the slot went with the dropped reconcile"
    );
}

#[test]
fn only_unsettled_webhook_claims_in_the_source_namespace_go_to_the_source_lane() {
    let source: BTreeMap<String, String> = [(SOURCE_ID, "kyma"), (SOURCE_KIND, "Runtime")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let facts = |namespace, labels, settled| LaneFacts {
        namespace: Some(namespace),
        labels,
        settled,
    };
    assert_eq!(lane_of(facts("hap", &source, false), "hap"), Lane::Source);
    // A tenant's AccountClaim labelled like one, in its own namespace.
    assert_eq!(
        lane_of(facts("team-a", &source, false), "hap"),
        Lane::Claims
    );
    // Settled: the sweep's check, nobody waits.
    assert_eq!(lane_of(facts("hap", &source, true), "hap"), Lane::Claims);
    let mut id_only = source.clone();
    id_only.remove(SOURCE_KIND);
    assert_eq!(lane_of(facts("hap", &id_only, false), "hap"), Lane::Claims);
    assert_eq!(
        lane_of(facts("hap", &BTreeMap::new(), false), "hap"),
        Lane::Claims
    );
}

#[tokio::test(start_paused = true)]
async fn the_queue_lengths_are_exported_per_lane() {
    let gauge: Family<LaneLabels, Gauge> = Family::default();
    let lanes = Lanes::with_gauge(1, 1, gauge.clone());
    let queued = |lane: &str| gauge.get_or_create(&LaneLabels { lane: lane.into() }).get();
    let busy = lanes.enter(Lane::Claims).await.unwrap();
    let waiting = tokio::spawn({
        let lanes = lanes.clone();
        async move { lanes.enter(Lane::Claims).await.is_some() }
    });
    tokio::task::yield_now().await;
    assert_eq!((queued("claims"), queued("source")), (1, 0));
    drop(busy);
    assert!(waiting.await.unwrap());
    assert_eq!(queued("claims"), 0);
}

#[tokio::test]
async fn a_queued_claim_reconcile_is_a_small_future() {
    // A takeover may queue one reconcile per unsettled claim; each waits as this future
    // (6,616 bytes in a test build before the reconcile's work was boxed behind the slot).
    use crate::controller::fixtures::{Harness, aws_spec, claim, hap_config};
    let h = Harness::new(hap_config(aws_spec()), &[], &[]);
    let claim = Arc::new(crate::k8s::lean::StoredClaim::from(claim("c")));
    let fut = super::super::claim::reconcile(claim, h.ctx.clone());
    let size = std::mem::size_of_val(&fut);
    assert!(size <= 512, "a queued reconcile holds {size} bytes");
}
