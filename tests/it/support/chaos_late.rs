//! The late-write phase of the chaos test: a leader's API traffic is held in its hold proxy (its
//! own cluster's and, with a separate garden, the garden's) while it decides on a tenant's
//! binding; it then loses the lease — stopped (SIGSTOP) or starved (its renewals are held too) —
//! the standby takes over and decides on the same binding, and only then are the held requests
//! let through and the old leader resumed. Each round has a fresh tenant on a pool of its own
//! (plan `aws` in platform region `cf-late`, which no other request of the run uses) and one of
//! three shapes, the interleavings in which a write that passed the old leader's fence lands
//! after the new leader's decision:
//!
//! - **late release:** two claims share the binding (the second one's reuse took its claimed-by
//!   record away) and the second is deleted; then, while held, the first is deleted and the
//!   tenant's next claim created: the old leader's dirty mark is in flight while the new leader
//!   may reuse the binding by writing the claim's status only;
//! - **late reuse:** as for a late release, the binding has one claim and no claimed-by record
//!   (a reuse writes the claim's status only); the next claim is created while the old
//!   leader's own-cluster requests are held, then the first is deleted: the new leader may
//!   release the binding while the reuse's status is in flight, and the held requests are let
//!   through the moment it marks the binding dirty;
//! - **late fill:** the same for a tenant allowed several accounts, whose reuse is a fill that
//!   records itself on the binding: two claims arrive while held, one fills the binding up to
//!   its limit; every other fill round keeps the first claim, so the binding stays full.
//!
//! A round counts as conclusive only if the proxy held bytes of the old leader when the lease
//! changed hands (for a late release with a separate garden, the garden's proxy, which carries
//! no lease renewal); one in which nothing was held proves nothing and is counted as
//! inconclusive.
//!
//! The checker replays every change two watches saw (the phase's claims and bindings, in order
//! of arrival) together with the deletions the test sent and the state read at the end of each
//! round, and flags, at any point of that history:
//! - a claim Bound to a dirty binding, unless the test had asked to delete it before;
//! - a binding with more live claims of an allowlisted tenant than the provider's limit;
//! - a binding with live claims of two tenants, or a live claim of a tenant other than the
//!   binding's `tenantName`.
//!
//! Watches of two clusters are not ordered with each other, so a claim Bound is counted as live
//! from the moment it is seen until the test sends its delete: the moment a claim becomes
//! Bound and the moment its binding becomes dirty can arrive in either order, and either order
//! with both live is a violation.
//!
//! Self-contained (no `super::` items) so that `tests/it/chaos.rs` can include it by path.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use hap_operator::api::{AccountClaim, ClaimPhase};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::core::ApiResource;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;

const PLATFORM_REGION: &str = "cf-late";
/// The hyperscalerType of the phase's pool: the rule's platform region appended.
const POOL: &str = "aws_cf-late";
/// The provider's limit of clusters per account for allowlisted tenants (the run's `aws`).
const LIMIT: usize = 2;
const CLAIM_PREFIX: &str = "late-";
const TENANT_PREFIX: &str = "ga-late-";
const FINALIZER: &str = hap_operator::api::CLAIM_FINALIZER;
/// The longest the phase waits for one step (a leader, a take-over, claims to settle).
const STEP: Duration = Duration::from_secs(60);

/// The rule the phase adds; it goes before the run's own `aws` rule (the first match serves).
pub fn rules() -> [&'static str; 1] {
    ["aws(PR=cf-late)"]
}

/// Claims of the phase (the other checkers leave them to this one).
pub fn is_phase_claim(name: &str) -> bool {
    name.starts_with(CLAIM_PREFIX)
}

/// Bindings of the phase's pool.
pub fn is_phase_binding(labels: &BTreeMap<String, String>) -> bool {
    labels.get("hyperscalerType").map(String::as_str) == Some(POOL)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    Release,
    Reuse,
    Fill,
}

impl Shape {
    /// Every other round is a late release, the shape that finds most with few rounds (the
    /// three rounds of `cargo test` are release, fill, release).
    fn of(round: usize) -> Self {
        match round % 4 {
            0 | 2 => Shape::Release,
            1 => Shape::Fill,
            _ => Shape::Reuse,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Shape::Release => "late release",
            Shape::Reuse => "late reuse",
            Shape::Fill => "late fill",
        }
    }
}

/// The tenant of round `r`.
fn tenant(r: usize) -> String {
    format!("{TENANT_PREFIX}{r:03}")
}

/// Tenants the HapConfig must allow several accounts per pool (the fill rounds').
pub fn multi_tenants(rounds: usize) -> Vec<String> {
    (0..rounds)
        .filter(|r| Shape::of(*r) == Shape::Fill)
        .map(tenant)
        .collect()
}

/// Some rounds stop the old leader (SIGSTOP), the others starve it: it keeps running while its
/// requests, lease renewals included, are held, and loses the lease by its own fence. Over
/// eight rounds every shape meets both.
fn stops(round: usize) -> bool {
    (round + round / 4).is_multiple_of(2)
}

/// A hold proxy as the phase uses it.
pub trait Hold: Send + Sync {
    fn hold(&self);
    fn release(&self);
    /// Bytes sent by clients while held and not yet passed on.
    fn pending(&self) -> usize;
}

/// The replicas as the phase drives them.
pub trait Fleet: Send + Sync {
    /// The slot of the live replica with this identity.
    fn slot_of(&self, identity: &str) -> Option<usize>;
    /// Sends `STOP` or `CONT` to the replica with this identity.
    fn signal(&self, identity: &str, sig: &str) -> bool;
}

/// A replica slot's proxies: in front of the operator's cluster and, with a separate garden,
/// the garden's.
pub struct SlotProxies<'a> {
    pub ops: &'a dyn Hold,
    pub garden: Option<&'a dyn Hold>,
}

impl SlotProxies<'_> {
    fn all(&self) -> Vec<&dyn Hold> {
        std::iter::once(self.ops).chain(self.garden).collect()
    }
}

pub struct Setup {
    pub ops: Client,
    pub garden: Client,
    pub bindings_ns: String,
    pub claims_ns: String,
    pub lease_ns: String,
    pub lease: String,
    pub one_cluster: bool,
}

#[derive(Clone, Debug)]
enum Seen {
    Claim {
        name: String,
        tenant: String,
        bound: Option<String>,
        deleting: bool,
    },
    ClaimGone {
        name: String,
    },
    Binding {
        name: String,
        tenant: Option<String>,
        dirty: bool,
    },
    /// The test sends a delete for this claim.
    DeleteSent {
        name: String,
    },
}

struct Entry {
    round: usize,
    at: Duration,
    seen: Seen,
}

#[derive(Default)]
struct Timeline {
    entries: Vec<Entry>,
}

/// What one round did.
#[derive(Clone, Debug)]
struct Round {
    shape: Shape,
    stopped: bool,
    leader: String,
    /// Bytes of the old leader held when another replica held the lease.
    held: usize,
    took_over: Option<Duration>,
    /// Until the new leader had decided every claim of the round, from the take-over.
    settled: Option<Duration>,
    /// At the end of the round: the binding, whether it is dirty, and where the claims created
    /// under the hold are Bound.
    outcome: String,
    note: String,
}

impl Round {
    fn conclusive(&self) -> bool {
        self.held > 0 && self.took_over.is_some()
    }
}

pub struct Phase {
    setup: Setup,
    rounds: usize,
    started: Instant,
    round_now: Arc<AtomicUsize>,
    timeline: Arc<Mutex<Timeline>>,
    done: Mutex<Vec<Round>>,
}

/// What the checker found.
#[derive(Debug, Default)]
pub struct Counts {
    pub rounds: usize,
    pub conclusive: usize,
    pub inconclusive: usize,
    /// Claims Bound to a dirty binding.
    pub dirty_under_claim: usize,
    /// Bindings over their limit.
    pub over_limit: usize,
    /// Bindings with two tenants.
    pub two_tenants: usize,
    /// Rounds with a violation (by the round in progress when it was seen).
    pub rounds_with_violations: BTreeSet<usize>,
    /// Figures: bindings of the pool with a tenant, not dirty, that no claim uses at the end.
    pub unused_claimed: usize,
    lines: Vec<String>,
    violations: Vec<String>,
    /// Per round with a violation, what the watches saw of its claims and the bindings involved.
    traces: Vec<String>,
}

impl Counts {
    pub fn violations(&self) -> usize {
        self.dirty_under_claim + self.over_limit + self.two_tenants
    }

    pub fn print(&self) {
        println!("  ---- late-write phase ----");
        for l in &self.lines {
            println!("  {l}");
        }
        for v in &self.violations {
            println!("  VIOLATION {v}");
        }
        for t in &self.traces {
            println!("    {t}");
        }
        println!(
            "  late-write rounds: {} conclusive / {} inconclusive / {} violations ({} rounds with one)",
            self.conclusive,
            self.inconclusive,
            self.violations(),
            self.rounds_with_violations.len()
        );
        println!(
            "  claims Bound to a dirty binding (late writes)  {}",
            self.dirty_under_claim
        );
        println!(
            "  bindings over their limit (late writes)        {}",
            self.over_limit
        );
        println!(
            "  bindings with two tenants (late writes)        {}",
            self.two_tenants
        );
        println!(
            "  (figures) late-write pool: bindings claimed that no claim uses at the end {}",
            self.unused_claimed
        );
    }
}

fn bindings_api(client: &Client, ns: &str) -> Api<DynamicObject> {
    let ar = ApiResource {
        group: "security.gardener.cloud".into(),
        version: "v1alpha1".into(),
        api_version: "security.gardener.cloud/v1alpha1".into(),
        kind: "CredentialsBinding".into(),
        plural: "credentialsbindings".into(),
    };
    Api::namespaced_with(client.clone(), ns, &ar)
}

fn binding_seen(b: &DynamicObject) -> Seen {
    Seen::Binding {
        name: b.name_any(),
        tenant: b.labels().get("tenantName").cloned(),
        dirty: b.labels().contains_key("dirty"),
    }
}

fn claim_seen(c: &AccountClaim) -> Seen {
    let st = c.status.as_ref();
    let bound = st
        .filter(|s| s.phase == Some(ClaimPhase::Bound))
        .and_then(|s| s.credentials_binding_name.clone());
    Seen::Claim {
        name: c.name_any(),
        tenant: c.spec.global_account.clone(),
        bound,
        deleting: c.metadata.deletion_timestamp.is_some(),
    }
}

/// Decided: Bound, or waiting with a reason.
fn decided(c: &AccountClaim) -> bool {
    c.status.as_ref().is_some_and(|s| {
        s.phase == Some(ClaimPhase::Bound)
            || s.conditions
                .iter()
                .any(|r| r.type_ == "Ready" && !r.reason.is_empty())
    })
}

impl Phase {
    /// Creates the phase's bindings (free, in its own pool): per round as many as its claims
    /// could need, so that no round waits on an exhausted pool.
    pub async fn prepare(setup: Setup, rounds: usize) -> Self {
        for k in 0..rounds * 4 + 2 {
            let name = format!("late-{k:03}");
            create_binding(&setup.garden, &setup.bindings_ns, &name).await;
        }
        Self {
            setup,
            rounds,
            started: Instant::now(),
            round_now: Arc::new(AtomicUsize::new(0)),
            timeline: Arc::new(Mutex::new(Timeline::default())),
            done: Mutex::new(Vec::new()),
        }
    }

    fn record(&self, seen: Seen) {
        record(&self.timeline, &self.round_now, self.started, seen);
    }

    /// Watches of the phase's claims and bindings; every change goes into the timeline.
    pub fn spawn_watches(&self) -> Vec<tokio::task::JoinHandle<()>> {
        let claims = Api::<AccountClaim>::namespaced(self.setup.ops.clone(), &self.setup.claims_ns);
        let (t, r, s) = (self.timeline.clone(), self.round_now.clone(), self.started);
        let claim_task = tokio::spawn(async move {
            let stream = watcher(claims, watcher::Config::default()).default_backoff();
            futures::pin_mut!(stream);
            while let Some(ev) = stream.next().await {
                match ev {
                    Ok(watcher::Event::Apply(c) | watcher::Event::InitApply(c))
                        if is_phase_claim(&c.name_any()) =>
                    {
                        record(&t, &r, s, claim_seen(&c));
                    }
                    Ok(watcher::Event::Delete(c)) if is_phase_claim(&c.name_any()) => {
                        record(&t, &r, s, Seen::ClaimGone { name: c.name_any() });
                    }
                    _ => {}
                }
            }
        });
        let bindings = bindings_api(&self.setup.garden, &self.setup.bindings_ns);
        let (t, r, s) = (self.timeline.clone(), self.round_now.clone(), self.started);
        let binding_task = tokio::spawn(async move {
            let config = watcher::Config::default().labels(&format!("hyperscalerType={POOL}"));
            let stream = watcher(bindings, config).default_backoff();
            futures::pin_mut!(stream);
            while let Some(ev) = stream.next().await {
                if let Ok(watcher::Event::Apply(b) | watcher::Event::InitApply(b)) = ev {
                    record(&t, &r, s, binding_seen(&b));
                }
            }
        });
        vec![claim_task, binding_task]
    }

    fn claims(&self) -> Api<AccountClaim> {
        Api::namespaced(self.setup.ops.clone(), &self.setup.claims_ns)
    }

    async fn lease_holder(&self) -> Option<String> {
        let lease = Api::<Lease>::namespaced(self.setup.ops.clone(), &self.setup.lease_ns)
            .get(&self.setup.lease)
            .await
            .ok()?;
        lease.spec?.holder_identity.filter(|h| !h.is_empty())
    }

    /// Creates a claim of `tenant`; `finalized`: with the operator's finalizer already in place,
    /// so that the operator's first write for it is its decision.
    async fn create_claim(&self, name: &str, tenant: &str, finalized: bool) {
        let mut meta = json!({"name": name});
        if finalized {
            meta["finalizers"] = json!([FINALIZER]);
        }
        let obj: AccountClaim = serde_json::from_value(json!({
            "apiVersion": "accountpool.io/v1alpha1",
            "kind": "AccountClaim",
            "metadata": meta,
            "spec": {"plan": "aws", "platformRegion": PLATFORM_REGION, "clusterRegion": "us-east-1",
                     "globalAccount": tenant, "subaccount": format!("sa-{name}"), "shootName": name},
        }))
        .expect("claim");
        let start = Instant::now();
        loop {
            match self.claims().create(&PostParams::default(), &obj).await {
                Ok(_) => return,
                Err(kube::Error::Api(e)) if e.code == 409 => return,
                Err(e) if start.elapsed() > STEP => panic!("create claim {name}: {e}"),
                Err(_) => tokio::time::sleep(Duration::from_millis(300)).await,
            }
        }
    }

    async fn delete_claim(&self, name: &str) {
        self.record(Seen::DeleteSent {
            name: name.to_string(),
        });
        let start = Instant::now();
        loop {
            match self.claims().delete(name, &Default::default()).await {
                Ok(_) => return,
                Err(kube::Error::Api(e)) if e.code == 404 => return,
                Err(e) if start.elapsed() > STEP => panic!("delete claim {name}: {e}"),
                Err(_) => tokio::time::sleep(Duration::from_millis(300)).await,
            }
        }
    }

    /// Waits (at most STEP) until every claim in `live` is decided and every one in `gone` is
    /// gone. Returns whether they were.
    async fn settle(&self, live: &[String], gone: &[String]) -> bool {
        let start = Instant::now();
        while start.elapsed() < STEP {
            let mut ok = true;
            for name in live {
                ok &= matches!(self.claims().get(name).await, Ok(c) if decided(&c));
            }
            for name in gone {
                ok &= matches!(self.claims().get_opt(name).await, Ok(None));
            }
            if ok {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        false
    }

    /// Waits (at most STEP) until `binding` is dirty or the claims are settled as in `settle`.
    async fn dirty_or_settled(&self, binding: &str, live: &[String], gone: &[String]) -> bool {
        let bindings = bindings_api(&self.setup.garden, &self.setup.bindings_ns);
        let start = Instant::now();
        let mut last_settle = Instant::now();
        while start.elapsed() < STEP {
            if let Ok(b) = bindings.get(binding).await
                && b.labels().contains_key("dirty")
            {
                return true;
            }
            if last_settle.elapsed() > Duration::from_millis(200) {
                last_settle = Instant::now();
                let mut ok = true;
                for name in live {
                    ok &= matches!(self.claims().get(name).await, Ok(c) if decided(&c));
                }
                for name in gone {
                    ok &= matches!(self.claims().get_opt(name).await, Ok(None));
                }
                if ok {
                    return true;
                }
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        false
    }

    /// The claim's Ready reason and message, or why there is none.
    async fn reason(&self, name: &str) -> String {
        match self.claims().get_opt(name).await {
            Ok(Some(c)) => c
                .status
                .and_then(|s| s.conditions.into_iter().find(|r| r.type_ == "Ready"))
                .map_or("no Ready condition".into(), |r| {
                    format!("{}: {}", r.reason, r.message)
                }),
            Ok(None) => "gone".into(),
            Err(e) => format!("unreadable: {e}"),
        }
    }

    async fn bound_to(&self, name: &str) -> Option<String> {
        let c = self.claims().get(name).await.ok()?;
        let st = c.status?;
        (st.phase == Some(ClaimPhase::Bound)).then_some(())?;
        st.credentials_binding_name
    }

    /// The state as read now, for the timeline: the round's claims and the pool's bindings.
    async fn read_state(&self, names: &[String]) {
        for name in names {
            match self.claims().get_opt(name).await {
                Ok(Some(c)) => self.record(claim_seen(&c)),
                Ok(None) => self.record(Seen::ClaimGone { name: name.clone() }),
                Err(_) => {}
            }
        }
        let lp = ListParams::default().labels(&format!("hyperscalerType={POOL}"));
        if let Ok(list) = bindings_api(&self.setup.garden, &self.setup.bindings_ns)
            .list(&lp)
            .await
        {
            for b in &list {
                self.record(binding_seen(b));
            }
        }
    }

    /// Runs every round, one after the other.
    pub async fn drive(&self, fleet: &dyn Fleet, proxies: &[SlotProxies<'_>]) {
        for r in 0..self.rounds {
            self.round_now.store(r, Ordering::Relaxed);
            let round = self.round(r, fleet, proxies).await;
            eprintln!("late-write round {r}: {round:?}");
            self.done.lock().unwrap().push(round);
        }
    }

    async fn round(&self, r: usize, fleet: &dyn Fleet, proxies: &[SlotProxies<'_>]) -> Round {
        let shape = Shape::of(r);
        let stopped = stops(r);
        let t = tenant(r);
        let name = |k: usize| format!("{CLAIM_PREFIX}{r:03}-{k}");
        let mut round = Round {
            shape,
            stopped,
            leader: String::new(),
            held: 0,
            took_over: None,
            settled: None,
            outcome: String::new(),
            note: String::new(),
        };
        // Before the hold: the tenant's claims on its binding. Two for a late release or reuse:
        // the second one's reuse takes the binding's claimed-by record away, so that the next
        // reuse writes the claim only; the second is then deleted (the binding stays, the first
        // still uses it), so that the first one's release is the binding's last.
        let mut before: Vec<String> = match shape {
            Shape::Release | Shape::Reuse => vec![name(0), name(1)],
            Shape::Fill => vec![name(0)],
        };
        let mut binding = None;
        for c in &before {
            self.create_claim(c, &t, false).await;
            self.settle(std::slice::from_ref(c), &[]).await;
            binding = self.bound_to(c).await;
            if binding.is_none() {
                round.note = format!("{c} not Bound before the hold");
                return round;
            }
        }
        let Some(binding) = binding else {
            return round;
        };
        if shape != Shape::Fill {
            let second = before.pop().expect("two claims");
            self.delete_claim(&second).await;
            self.settle(&[], std::slice::from_ref(&second)).await;
        }
        // The leader, and its proxies.
        let start = Instant::now();
        let (leader, slot) = loop {
            if let Some(h) = self.lease_holder().await
                && let Some(slot) = fleet.slot_of(&h)
            {
                break (h, slot);
            }
            if start.elapsed() > STEP {
                round.note = "no leader".into();
                return round;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        round.leader = leader.clone();
        let slot = &proxies[slot];
        // A late release holds all of the leader's traffic (its dirty mark is a garden write);
        // a late reuse or fill only its own cluster's (with a separate garden, a fill's record
        // on the binding goes through, its claim's status is held).
        let held: Vec<&dyn Hold> = match shape {
            Shape::Release => slot.all(),
            Shape::Reuse | Shape::Fill => vec![slot.ops],
        };
        for p in &held {
            p.hold();
        }
        // Under the hold: the claims the old leader decides on (a fill round two, so that the
        // binding is full and the second goes elsewhere).
        let next: Vec<String> = match shape {
            Shape::Release | Shape::Reuse => vec![name(2)],
            Shape::Fill => vec![name(1), name(2)],
        };
        let mut gone: Vec<String> = Vec::new();
        if shape == Shape::Release {
            self.delete_claim(&name(0)).await;
            gone.push(name(0));
        }
        for c in &next {
            self.create_claim(c, &t, true).await;
        }
        // The leader decides within milliseconds of seeing the change; give its write the time
        // to be sent into the hold before the leader is stopped.
        // The proxy whose held bytes are the evidence: a late release's dirty mark goes to the
        // garden, which (with a separate garden) carries no lease renewal.
        let evidence: &dyn Hold = match (shape, slot.garden) {
            (Shape::Release, Some(garden)) => garden,
            _ => slot.ops,
        };
        let sent = Instant::now();
        while evidence.pending() == 0 && sent.elapsed() < Duration::from_secs(5) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        if stopped {
            fleet.signal(&leader, "STOP");
        }
        // After the stop, the claims the new leader releases the binding for (every other fill
        // round keeps them: the binding stays full, its limit in play).
        let releases = match shape {
            Shape::Release => false,
            Shape::Reuse => true,
            Shape::Fill => (r / 4).is_multiple_of(2),
        };
        if releases {
            for c in &before {
                self.delete_claim(c).await;
                gone.push(c.clone());
            }
        }
        // The take-over.
        let lost = Instant::now();
        loop {
            if self.lease_holder().await.is_some_and(|h| h != leader) {
                round.took_over = Some(lost.elapsed());
                round.held = evidence.pending();
                break;
            }
            if lost.elapsed() > STEP {
                round.note = "no take-over".into();
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // The new leader decides while the old leader's requests are held. A late release's
        // dirty mark is let through once the new leader has decided the next claim; a late reuse
        // or fill's status the moment the new leader marks the binding dirty, before it writes the
        // held claim's status itself (which would make the held one conflict), or once it has
        // decided everything.
        if round.took_over.is_some() {
            let since = Instant::now();
            let done = match shape {
                Shape::Release => self.settle(&next, &gone).await,
                Shape::Reuse | Shape::Fill => self.dirty_or_settled(&binding, &next, &gone).await,
            };
            if done {
                round.settled = Some(since.elapsed());
            } else {
                round.note = "the new leader did not decide the round's claims".into();
            }
        }
        for p in &held {
            p.release();
        }
        if stopped {
            fleet.signal(&leader, "CONT");
        }
        // The held requests reach the server now; then the claims settle again.
        let released = Instant::now();
        while held.iter().any(|p| p.pending() > 0) && released.elapsed() < Duration::from_secs(10) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let _ = self.settle(&next, &gone).await;
        self.read_state(&[before, next.clone()].concat()).await;
        let dirty = bindings_api(&self.setup.garden, &self.setup.bindings_ns)
            .get(&binding)
            .await
            .is_ok_and(|b| b.labels().contains_key("dirty"));
        let mut on = Vec::new();
        for c in &next {
            on.push(match self.bound_to(c).await {
                Some(b) => format!("{c} Bound to {b}"),
                None => format!("{c} not Bound ({})", self.reason(c).await),
            });
        }
        round.outcome = format!(
            "{binding} {}; {}",
            if dirty { "dirty" } else { "not dirty" },
            on.join(", ")
        );
        round
    }

    /// Replays the timeline and counts.
    pub async fn check(&self) -> Counts {
        // The end state, read once more.
        let names: Vec<String> = (0..self.rounds)
            .flat_map(|r| (0..3).map(move |k| format!("{CLAIM_PREFIX}{r:03}-{k}")))
            .collect();
        self.read_state(&names).await;
        let done = self.done.lock().unwrap().clone();
        let timeline = self.timeline.lock().unwrap();
        let multi: BTreeSet<String> = multi_tenants(self.rounds).into_iter().collect();
        let mut c = Counts {
            rounds: done.len(),
            ..Default::default()
        };
        for (r, round) in done.iter().enumerate() {
            let verdict = if round.conclusive() {
                c.conclusive += 1;
                "conclusive"
            } else if round.took_over.is_some() {
                c.inconclusive += 1;
                "INCONCLUSIVE (nothing held at the take-over)"
            } else {
                c.inconclusive += 1;
                "INCONCLUSIVE (no take-over)"
            };
            c.lines.push(format!(
                "round {r:>2} {:<12} {:<8} leader {:<14} held {:>6} B at the take-over ({:.1?} after the stop), new leader decided in {:.1?}; {}: {verdict}{}",
                round.shape.name(),
                if round.stopped { "stopped" } else { "starved" },
                round.leader,
                round.held,
                round.took_over.unwrap_or_default(),
                round.settled.unwrap_or_default(),
                round.outcome,
                if round.note.is_empty() {
                    String::new()
                } else {
                    format!("; {}", round.note)
                }
            ));
        }
        // Replay.
        #[derive(Default)]
        struct ClaimState {
            tenant: String,
            bound: Option<String>,
            deleting: bool,
        }
        let mut claims: BTreeMap<String, ClaimState> = BTreeMap::new();
        let mut bindings: BTreeMap<String, (Option<String>, bool)> = BTreeMap::new();
        let mut delete_sent: BTreeSet<String> = BTreeSet::new();
        let mut flagged: BTreeSet<String> = BTreeSet::new();
        let mut involved: BTreeMap<usize, BTreeSet<String>> = BTreeMap::new();
        for e in &timeline.entries {
            let touched: Option<String> = match &e.seen {
                Seen::Claim {
                    name,
                    tenant,
                    bound,
                    deleting,
                } => {
                    let s = claims.entry(name.clone()).or_default();
                    s.tenant = tenant.clone();
                    // A Bound claim stays on its binding; a status seen earlier is not undone
                    // by a later event that shows none.
                    if bound.is_some() {
                        s.bound = bound.clone();
                    }
                    s.deleting |= *deleting;
                    s.bound.clone()
                }
                Seen::ClaimGone { name } => {
                    claims.remove(name);
                    None
                }
                Seen::Binding {
                    name,
                    tenant,
                    dirty,
                } => {
                    let b = bindings.entry(name.clone()).or_default();
                    b.0 = tenant.clone();
                    // Nothing in the run cleans a binding: dirty stays.
                    b.1 |= *dirty;
                    Some(name.clone())
                }
                Seen::DeleteSent { name } => {
                    delete_sent.insert(name.clone());
                    None
                }
            };
            let Some(b) = touched else { continue };
            let live: Vec<(&String, &ClaimState)> = claims
                .iter()
                .filter(|(n, s)| {
                    s.bound.as_deref() == Some(b.as_str())
                        && !s.deleting
                        && !delete_sent.contains(*n)
                })
                .collect();
            if live.is_empty() {
                continue;
            }
            let (label, dirty) = bindings.get(&b).cloned().unwrap_or_default();
            let names: Vec<&str> = live.iter().map(|(n, _)| n.as_str()).collect();
            let mut found = Vec::new();
            if dirty {
                found.push((
                    "dirty",
                    format!("claims {names:?} Bound to dirty binding {b}"),
                ));
            }
            let tenants: BTreeSet<&str> = live
                .iter()
                .map(|(_, s)| s.tenant.as_str())
                .chain(label.as_deref())
                .collect();
            if tenants.len() > 1 {
                found.push((
                    "tenants",
                    format!(
                        "binding {b} (tenantName {label:?}) used by claims {names:?} of tenants {tenants:?}"
                    ),
                ));
            }
            if live.iter().all(|(_, s)| multi.contains(&s.tenant)) && live.len() > LIMIT {
                found.push((
                    "limit",
                    format!(
                        "binding {b} has {} live claims {names:?}, limit {LIMIT}",
                        live.len()
                    ),
                ));
            }
            for (kind, text) in found {
                let key = format!("{kind} {b} {names:?}");
                if !flagged.insert(key) {
                    continue;
                }
                match kind {
                    "dirty" => c.dirty_under_claim += 1,
                    "tenants" => c.two_tenants += 1,
                    _ => c.over_limit += 1,
                }
                c.rounds_with_violations.insert(e.round);
                involved.entry(e.round).or_default().insert(b.clone());
                c.violations.push(format!(
                    "{text} (seen {:.1?} into the phase, during round {})",
                    e.at, e.round
                ));
            }
        }
        for r in &c.rounds_with_violations {
            let prefix = format!("{CLAIM_PREFIX}{r:03}-");
            c.traces
                .push(format!("trace of round {r} (arrival order):"));
            let bindings = involved.get(r).cloned().unwrap_or_default();
            // The state read after each round repeats what the watches saw: one line per change.
            let mut last: BTreeMap<String, String> = BTreeMap::new();
            for e in timeline.entries.iter().filter(|e| e.round >= *r) {
                let (name, keep) = match &e.seen {
                    Seen::Claim { name, .. }
                    | Seen::ClaimGone { name }
                    | Seen::DeleteSent { name } => (name, name.starts_with(&prefix)),
                    Seen::Binding { name, .. } => (name, bindings.contains(name)),
                };
                let text = format!("{:?}", e.seen);
                if keep && last.get(name) != Some(&text) {
                    c.traces
                        .push(format!("{:>8.2?} round {} {text}", e.at, e.round));
                    last.insert(name.clone(), text);
                }
            }
        }
        for (b, (tenant, dirty)) in &bindings {
            if tenant.is_some()
                && !dirty
                && !claims
                    .values()
                    .any(|s| s.bound.as_deref() == Some(b.as_str()))
            {
                c.unused_claimed += 1;
                c.lines.push(format!(
                    "binding {b} claimed for {tenant:?}, used by no claim"
                ));
            }
        }
        c
    }
}

fn record(timeline: &Mutex<Timeline>, round: &AtomicUsize, started: Instant, seen: Seen) {
    let entry = Entry {
        round: round.load(Ordering::Relaxed),
        at: started.elapsed(),
        seen,
    };
    timeline.lock().unwrap().entries.push(entry);
}

/// A free binding of the phase's pool, and its Secret.
async fn create_binding(garden: &Client, ns: &str, name: &str) {
    let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": name, "namespace": ns},
        "stringData": {"provider": "aws", "credentials": format!("test credentials of {name}")},
    }))
    .expect("secret");
    let binding: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "security.gardener.cloud/v1alpha1", "kind": "CredentialsBinding",
        "metadata": {"name": name, "namespace": ns, "labels": {"hyperscalerType": POOL}},
        "provider": {"type": "aws"},
        "credentialsRef": {"apiVersion": "v1", "kind": "Secret", "name": name, "namespace": ns},
    }))
    .expect("binding");
    let secrets = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(garden.clone(), ns);
    let bindings = bindings_api(garden, ns);
    let start = Instant::now();
    loop {
        let s = secrets.create(&PostParams::default(), &secret).await;
        let ok = s.is_ok() || matches!(&s, Err(kube::Error::Api(e)) if e.code == 409);
        if ok {
            let b = bindings.create(&PostParams::default(), &binding).await;
            if b.is_ok() || matches!(&b, Err(kube::Error::Api(e)) if e.code == 409) {
                return;
            }
        }
        assert!(start.elapsed() < STEP, "cannot create binding {name}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
