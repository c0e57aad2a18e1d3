//! The watch plumbing against event streams the tests control: re-lists that are interrupted
//! leave nothing open, and a refresh cycle shorter than one list never freezes the index.

use std::time::Duration;

use futures::channel::mpsc;

use super::*;
use crate::pools::BindingView;

fn bv(name: &str, rv: u64) -> BindingView {
    BindingView {
        name: name.into(),
        resource_version: Some(rv.to_string()),
        labels: [("hyperscalerType".to_string(), "aws".to_string())].into(),
        ..Default::default()
    }
}

type Ev = watcher::Event<BindingView>;

fn apply(l: &mut Ledger, b: &BindingView) {
    l.apply_binding(b.clone());
}

fn delete(l: &mut Ledger, b: &BindingView) {
    l.delete_binding(&b.name, b.resource_version.as_deref());
}

#[test]
fn a_list_the_watcher_starts_again_leaves_no_relist_open() {
    // kube's watcher emits `Init` again when a list fails mid-pagination, with no `InitDone`
    // for the first one.
    let mut l = Ledger::default();
    l.apply_binding(bv("a", 10));
    // Newer than anything the list will name: a list without it leaves it unconfirmed.
    l.apply_binding(bv("x", 100));
    let mut relist = None;
    let events: [Ev; 5] = [
        watcher::Event::Init,
        watcher::Event::InitApply(bv("a", 10)),
        watcher::Event::Init,
        watcher::Event::InitApply(bv("a", 10)),
        watcher::Event::InitDone,
    ];
    for ev in &events {
        follow(&mut l, Kind::Binding, &mut relist, ev, apply, delete);
    }
    assert_eq!(l.inventory.open_relists(Kind::Binding), 0);
    assert!(relist.is_none());
    assert!(
        l.inventory.binding("x").is_some(),
        "unconfirmed, not yet gone"
    );
    // The next event of the kind is later than x: x would have shown up had it still existed.
    follow(
        &mut l,
        Kind::Binding,
        &mut relist,
        &watcher::Event::Apply(bv("y", 101)),
        apply,
        delete,
    );
    assert!(l.inventory.binding("x").is_none(), "x lingers");
}

#[tokio::test]
async fn a_reader_that_fails_mid_list_leaves_no_relist_open() {
    // The take-over re-read: a page fails after the first one.
    let ledger: SharedLedger = Arc::default();
    lock(&ledger).apply_binding(bv("a", 10));
    lock(&ledger).apply_binding(bv("x", 100));
    let got: Result<(), &str> = relist_pages(
        &ledger,
        Kind::Binding,
        |token| async move {
            match token {
                None => Ok(Page {
                    items: vec![bv("a", 10)],
                    continue_token: Some("page-2".into()),
                    resource_version: None,
                }),
                Some(_) => Err("the server went away"),
            }
        },
        |l, b| l.apply_binding(b),
    )
    .await;
    assert_eq!(got, Err("the server went away"));
    assert_eq!(lock(&ledger).inventory.open_relists(Kind::Binding), 0);
    assert!(
        lock(&ledger).inventory.binding("x").is_some(),
        "a failed list deletes nothing"
    );
    // A complete one afterwards does its work.
    let got: Result<(), &str> = relist_pages(
        &ledger,
        Kind::Binding,
        |_| async {
            Ok(Page {
                items: vec![bv("a", 10)],
                continue_token: None,
                resource_version: Some("200".into()),
            })
        },
        |l, b| l.apply_binding(b),
    )
    .await;
    assert_eq!(got, Ok(()));
    let l = lock(&ledger);
    assert_eq!(l.inventory.open_relists(Kind::Binding), 0);
    assert!(
        l.inventory.binding("x").is_none(),
        "gone by the list's version"
    );
}

type Tx = mpsc::UnboundedSender<Result<Ev, watcher::Error>>;

/// A pretend API server: every watch task the cache starts gets a stream the server feeds one
/// step per tick, a list of `objects` (one object per page) and then the watch `changes`.
#[derive(Default)]
struct Server {
    objects: Mutex<Vec<BindingView>>,
    changes: Mutex<Vec<Ev>>,
    /// Per task: its stream, how far its list came, whether it has had the changes.
    tasks: Mutex<Vec<(Tx, usize, bool)>>,
}

impl Server {
    fn start(
        self: &Arc<Self>,
    ) -> impl Fn(&Cluster, &String, Feed) -> futures::future::BoxFuture<'static, ()>
    + Send
    + Sync
    + 'static {
        let server = self.clone();
        move |_: &Cluster, _: &String, feed: Feed| -> futures::future::BoxFuture<'static, ()> {
            let (tx, rx) = mpsc::unbounded();
            server.tasks.lock().unwrap().push((tx, 0, false));
            Box::pin(drive(rx, feed, Kind::Binding, apply, delete))
        }
    }

    /// A cache of this server's objects into `ledger`, not started yet.
    fn cache(self: &Arc<Self>, ledger: &SharedLedger) -> Retargetable<String> {
        Retargetable::new(
            client(),
            ledger.clone(),
            ChangeFeed::default(),
            self.start(),
        )
    }

    /// Ticks until `done`; fails, saying `what` did not happen, after ten seconds.
    async fn tick_until(&self, what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(Instant::now() < deadline, "{what}");
            self.tick();
            settle().await;
        }
    }

    /// Each task one step further: `Init`, one page per object, `InitDone`, then the changes.
    fn tick(&self) {
        let objects = self.objects.lock().unwrap().clone();
        let changes = self.changes.lock().unwrap().clone();
        for (tx, step, watched) in self.tasks.lock().unwrap().iter_mut() {
            let send = |ev: Ev| {
                let _ = tx.unbounded_send(Ok(ev));
            };
            match *step {
                0 => send(watcher::Event::Init),
                n if n <= objects.len() => send(watcher::Event::InitApply(objects[n - 1].clone())),
                n if n == objects.len() + 1 => send(watcher::Event::InitDone),
                _ if !*watched => {
                    changes.iter().cloned().for_each(send);
                    *watched = true;
                }
                _ => {}
            }
            *step += 1;
        }
    }
}

/// Lets the watch tasks (on this test's single thread) take what was sent to them.
async fn settle() {
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
}

fn client() -> Cluster {
    let url = "http://127.0.0.1:9".parse().expect("url");
    kube::Client::try_from(kube::Config::new(url))
        .expect("client")
        .into()
}

fn holds(ledger: &SharedLedger, name: &str) -> bool {
    lock(ledger).inventory.binding(name).is_some()
}

#[tokio::test]
async fn a_refresh_cycle_shorter_than_one_list_never_freezes_the_index() {
    // Every refresh aborted the list it had started, while the cache still
    // said it was synced; new and deleted objects were never seen again.
    let server = Arc::new(Server::default());
    *server.objects.lock().unwrap() = vec![bv("f1", 1), bv("f2", 1), bv("f3", 1), bv("a", 2)];
    let ledger: SharedLedger = Arc::default();
    let cache = server.cache(&ledger);
    cache.retarget(&"garden".to_string(), |_| {});
    server
        .tick_until("the first list never ended", || cache.is_ready())
        .await;
    let deadline = Instant::now() + Duration::from_secs(10);
    assert!(holds(&ledger, "a"));
    // The cluster moves on: b is created, a deleted.
    *server.objects.lock().unwrap() = vec![bv("f1", 1), bv("f2", 1), bv("f3", 1), bv("b", 5)];
    *server.changes.lock().unwrap() = vec![
        watcher::Event::Apply(bv("b", 5)),
        watcher::Event::Delete(bv("a", 6)),
    ];
    // A refresh before every step of a list: the cycle is shorter than one list.
    let mut lists_started = 0;
    while holds(&ledger, "a") || !holds(&ledger, "b") {
        assert!(
            Instant::now() < deadline,
            "the index froze: a={} b={} after {lists_started} lists started",
            holds(&ledger, "a"),
            holds(&ledger, "b")
        );
        lists_started += usize::from(cache.restart());
        assert!(cache.is_ready());
        server.tick();
        settle().await;
    }
    // And the lists the refreshes start do end, one at a time.
    let before = lists_started;
    while lists_started < before + 3 {
        assert!(Instant::now() < deadline, "no list ends");
        lists_started += usize::from(cache.restart());
        server.tick();
        settle().await;
        assert!(lock(&ledger).inventory.open_relists(Kind::Binding) <= 1);
    }
}

#[tokio::test]
async fn a_new_target_is_ready_only_when_its_own_list_has_ended() {
    let server = Arc::new(Server::default());
    *server.objects.lock().unwrap() = vec![bv("a", 1), bv("b", 2)];
    let ledger: SharedLedger = Arc::default();
    let cache = server.cache(&ledger);
    cache.retarget(&"one".to_string(), |_| {});
    server
        .tick_until("the first list never ended", || cache.is_ready())
        .await;
    cache.retarget(&"two".to_string(), |l| l.inventory.clear_bindings());
    // Init and the first page only.
    for _ in 0..2 {
        server.tick();
        settle().await;
        assert!(!cache.is_ready(), "ready before the new list ended");
        assert!(!cache.restart(), "a refresh would abort the running list");
    }
    server
        .tick_until("the new list never ended", || cache.is_ready())
        .await;
    assert!(holds(&ledger, "a") && holds(&ledger, "b"));
    assert_eq!(lock(&ledger).inventory.open_relists(Kind::Binding), 0);
}

/// A ConfigMap stands for any watched kind: the reflector needs a real resource.
fn cm(name: &str, rv: u64) -> k8s_openapi::api::core::v1::ConfigMap {
    let mut c = k8s_openapi::api::core::v1::ConfigMap::default();
    c.metadata.name = Some(name.into());
    c.metadata.namespace = Some("ns".into());
    c.metadata.resource_version = Some(rv.to_string());
    c
}

type CmEvent = Result<watcher::Event<k8s_openapi::api::core::v1::ConfigMap>, watcher::Error>;

/// Each object handed on is in the store as handed on, at that moment.
fn in_store(
    store: &Store<k8s_openapi::api::core::v1::ConfigMap>,
    o: &k8s_openapi::api::core::v1::ConfigMap,
) -> bool {
    store
        .get(&reflector::ObjectRef::from_obj(o))
        .is_some_and(|held| held.resource_version() == o.resource_version())
}

#[tokio::test]
async fn a_listed_object_is_handed_on_only_once_the_store_holds_it() {
    // The stall of the full chaos run: after an API server restart the claim watch
    // lists again, and its objects reached the controller while the store still held the old
    // list: a claim created and deleted while the watch was away was "not found" (dropped), one
    // deleted meanwhile was read as still Bound; nothing brought either back before the sweep.
    let (store, writer) = reflector::store();
    let (tx, rx) = mpsc::unbounded::<CmEvent>();
    let mut out = Box::pin(stored_objects(reflector::reflector(writer, rx), Some));
    let send = |ev| tx.unbounded_send(Ok(ev)).expect("send");
    send(watcher::Event::Init);
    send(watcher::Event::InitApply(cm("a", 1)));
    send(watcher::Event::InitDone);
    let first = out.next().await.expect("a").expect("ok");
    assert!(in_store(&store, &first));
    // Away: a changed, b created; the watch lists again.
    send(watcher::Event::Init);
    send(watcher::Event::InitApply(cm("a", 2)));
    send(watcher::Event::InitApply(cm("b", 3)));
    use futures::FutureExt;
    assert!(
        out.next().now_or_never().is_none(),
        "nothing is handed on while the store holds the old list"
    );
    send(watcher::Event::InitDone);
    let mut names = Vec::new();
    for _ in 0..2 {
        let o = out.next().await.expect("listed").expect("ok");
        assert!(
            in_store(&store, &o),
            "{} handed on before the store held it",
            o.name_any()
        );
        names.push(o.name_any());
    }
    assert_eq!(names, ["a", "b"]);
    // Watch events come out at once, after the store took them.
    send(watcher::Event::Apply(cm("b", 4)));
    let o = out.next().await.expect("b").expect("ok");
    assert!(in_store(&store, &o));
}

#[tokio::test]
async fn a_list_begun_again_hands_on_only_the_objects_of_the_list_that_ended() {
    let (store, writer) = reflector::store();
    let (tx, rx) = mpsc::unbounded::<CmEvent>();
    // `to` leaves out what needs no reconcile (settled claims).
    let mut out = Box::pin(stored_objects(reflector::reflector(writer, rx), |c| {
        (c.name_any() != "settled").then_some(c)
    }));
    let send = |ev| tx.unbounded_send(Ok(ev)).expect("send");
    send(watcher::Event::Init);
    send(watcher::Event::InitApply(cm("gone", 1)));
    // The list failed mid-pagination: the watcher lists again; "gone" was deleted meanwhile.
    send(watcher::Event::Init);
    send(watcher::Event::InitApply(cm("settled", 2)));
    send(watcher::Event::InitApply(cm("x", 3)));
    send(watcher::Event::InitDone);
    drop(tx);
    let mut names = Vec::new();
    while let Some(o) = out.next().await {
        let o = o.expect("ok");
        assert!(in_store(&store, &o));
        names.push(o.name_any());
    }
    assert_eq!(names, ["x"]);
}

#[tokio::test]
async fn a_refresh_under_way_does_not_unsay_that_the_target_is_listed() {
    // Second review of the claim store: `listed` tried the watch's own lock, which every refresh
    // takes; during one the index could not judge, and a settled claim fetched for a visit left
    // the store again unvisited.
    let server = Arc::new(Server::default());
    *server.objects.lock().unwrap() = vec![bv("a", 1)];
    let ledger: SharedLedger = Arc::default();
    let cache = server.cache(&ledger);
    let (one, two) = ("one".to_string(), "two".to_string());
    assert!(!cache.listed(&one), "listed before any watch");
    cache.retarget(&one, |_| {});
    server
        .tick_until("the first list never ended", || cache.listed(&one))
        .await;
    {
        // Where a refresh stands between its two steps: it holds the watch's lock.
        let _refresh = cache.running.write().unwrap();
        assert!(
            cache.listed(&one),
            "a refresh made the listed target look unlisted"
        );
        assert!(!cache.listed(&two));
    }
    assert!(cache.restart());
    assert!(
        cache.listed(&one),
        "a refresh's new list is not a new target"
    );
    cache.retarget(&two, |l| l.inventory.clear_bindings());
    assert!(
        !cache.listed(&one),
        "the ledger no longer holds the old target's objects"
    );
    assert!(!cache.listed(&two), "listed before its own list ended");
    server
        .tick_until("the new list never ended", || cache.listed(&two))
        .await;
}

#[tokio::test]
async fn a_retarget_whose_reset_fails_leaves_no_target_listed() {
    let server = Arc::new(Server::default());
    *server.objects.lock().unwrap() = vec![bv("a", 1)];
    let ledger: SharedLedger = Arc::default();
    let cache = Arc::new(server.cache(&ledger));
    let one = "one".to_string();
    cache.retarget(&one, |_| {});
    server
        .tick_until("the first list never ended", || cache.listed(&one))
        .await;
    let panicked = std::thread::spawn({
        let cache = cache.clone();
        move || cache.retarget(&"two".to_string(), |_| panic!("reset failed"))
    })
    .join();
    assert!(panicked.is_err());
    assert!(
        !cache.listed(&one),
        "the old watch is stopped and the ledger half reset"
    );
    assert!(!cache.listed(&"two".to_string()));
}
