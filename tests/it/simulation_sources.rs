//! Deterministic simulation of the request-source path (issue 19): webhook calls for Shoots and
//! Runtimes with fixed names, each call one API round trip per step; calls cancelled at any step;
//! objects refused by an admission step after the webhook; names deleted and created again at
//! once; the leader's source clean-up (read, existence check, delete) and claim controller (the
//! real ledger, selection and `decide_release`); and a paused leader whose write is held in
//! flight while the next one takes over, for as long as the steps say: the product bounds neither
//! a sent write's time in flight nor starts a new leader with a quiet period, and neither does
//! the model. Two protocols run: today's (OLD), which the checker must catch, and the one issue
//! 19 asks for (NEW), which must hold.
//!
//! Checked after every step: (a) no binding is dirty while an object uses it; (f) nor while a
//! claim is Bound to it; (g) no binding of a multi-account tenant has more clusters than its
//! limit; (b) no binding is used by two tenants (its tenant label, every object naming it and
//! every claim Bound to it); (d) no binding is dirty
//! that no stored object ever used, unless a second claim was bound to it (then the operator
//! cannot know, and dirty is the safe side); (e) no binding a stored object used is released clean (the
//! next tenant would get an account someone ran clusters in). Once the faults stop and the
//! replicas settle: (c) every claimed binding serves a live object or is released, and no claim
//! is left behind. The API server's own checks (docs/design.md §5 at every commit) run as well.

use crate::simulation::api;
#[path = "simulation_sources/leader.rs"]
mod leader;
#[path = "simulation_sources/webhook.rs"]
mod webhook;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use api::{Api, BINDINGS, Binding, CLAIMS, Claim, Obj, SHOOTS, Shoot, TENANTS};
use hap_operator::api::MultiHyperscalerAccount;
use hap_operator::labels::CLAIMED_BY;
use hap_operator::selection::MultiAccountPolicy;
use leader::{Gc, GcPhase, Protocol, Replica, Sources, Write, recorded, trace, without_use_record};
use proptest::prelude::*;
use webhook::{Call, CallPhase, Ctx, Kind, OBJECTS, TIMEOUT, claim_name};

/// Ticks a claim is left alone by the source clean-up: from its creation (OLD) or from the
/// webhook's last stamp (NEW). Longer than a call can take plus its admission.
const GRACE: u64 = 8;
/// Ticks within which the API server stores or refuses an object it was answered for.
const ADMIT: u64 = 2;
/// The ledger's clock advances this much per tick (its in-flight records live 120 s).
const TICK: Duration = Duration::from_millis(100);

#[derive(Clone, Debug)]
enum Step {
    /// A user creates request object `obj` for tenant `tenant`: a webhook call starts.
    Create { obj: usize, tenant: usize },
    /// A user deletes object `obj` and at once creates it again.
    Recreate(usize),
    /// A user deletes object `obj`.
    Delete(usize),
    /// A webhook call takes its next round trip.
    Call(usize),
    /// The API server gives up on a webhook call (its time-out, a closed connection, a drain).
    Cancel(usize),
    /// The API server stores the object of a call answered Bound, or a later step refuses it.
    Admit { pick: usize, store: bool },
    /// `n` watch events of one kind reach the leader.
    Deliver { kind: usize, n: usize },
    /// The leader decides for one claim of its store.
    Reconcile(usize),
    /// The leader's watches catch up and it decides for every claim of its store.
    Sweep,
    /// The leader sends the next write of one reconcile.
    Execute(usize),
    /// The leader's source clean-up takes its next step (or starts on a claim).
    Gc(usize),
    /// The leader's source pass sees a stored object and records it on its claim.
    Pass(usize),
    /// The leader stops past its lease with one write in flight; the standby takes over.
    Failover,
    /// The paused leader's held write reaches the server.
    Zombie,
    /// Time passes: one tick of every clock and time-out.
    Tick,
}

fn step() -> impl Strategy<Value = Step> {
    let obj = 0..OBJECTS.len();
    // Weighted so that a call usually gets through (it needs the leader's delivery, decision
    // and writes in between its own round trips) and a leader change is rare.
    prop_oneof![
        6 => (obj.clone(), prop_oneof![3 => 0..2usize, 1 => 2..3usize])
            .prop_map(|(obj, tenant)| Step::Create { obj, tenant }),
        4 => obj.clone().prop_map(Step::Recreate),
        2 => obj.prop_map(Step::Delete),
        16 => (0..8usize).prop_map(Step::Call),
        2 => (0..8usize).prop_map(Step::Cancel),
        4 => (0..8usize, prop_oneof![3 => Just(true), 1 => Just(false)])
            .prop_map(|(pick, store)| Step::Admit { pick, store }),
        10 => (0..3usize, 1..6usize).prop_map(|(kind, n)| Step::Deliver { kind, n }),
        10 => (0..8usize).prop_map(Step::Reconcile),
        4 => Just(Step::Sweep),
        10 => (0..8usize).prop_map(Step::Execute),
        8 => (0..8usize).prop_map(Step::Gc),
        4 => (0..8usize).prop_map(Step::Pass),
        1 => Just(Step::Failover),
        2 => Just(Step::Zombie),
        10 => Just(Step::Tick),
    ]
}

/// A stored request object.
#[derive(Clone, Debug)]
struct Stored {
    tenant: String,
    binding: String,
    /// The leader's source pass has seen it. Users delete only such objects: Gardener's and the
    /// infrastructure manager's finalizers keep a Shoot or Runtime for minutes after its
    /// deletion starts, far longer than a source pass.
    seen: bool,
}

/// What the operator knows of one source claim besides the claim: its creation, the webhook's
/// last stamp and whether its object was ever seen.
#[derive(Clone, Debug, Default)]
struct Meta {
    obj: usize,
    created: u64,
    stamp: Option<u64>,
    served: bool,
}

/// A write of the paused leader that reaches the server late.
#[derive(Clone, Debug)]
enum Held {
    Write { uid: String, write: Write },
    GcDelete { uid: String, rv: Option<u64> },
}

/// A paused leader and the one write it had sent. Nothing bounds how long that write stays in
/// flight (the product has no time-out on a sent write) and the next leader starts deciding at
/// once (the product's take-over has no quiet period): it lands whenever a `Zombie` step says.
struct Zombie {
    replica: Replica,
    held: Option<Held>,
}

struct World {
    p: Protocol,
    api: Api,
    leader: Replica,
    zombie: Option<Zombie>,
    policy: MultiAccountPolicy,
    calls: Vec<Call>,
    objects: BTreeMap<String, Stored>,
    meta: BTreeMap<String, Meta>,
    /// Truth for the checks: every binding a stored object ever named.
    ever_used: BTreeSet<String>,
    /// Bindings a leader was claiming when it paused: its claim write may commit (or have
    /// committed) with the claim's status never written, which the next leader cannot know.
    interrupted: BTreeSet<String>,
    /// Tenant labels after the last step, to see a clean release happen.
    tenants: BTreeMap<String, Option<String>>,
    /// Claimed-by records as of the binding changes the checks have read (`logged`), to see one
    /// removed by a reuse.
    records: BTreeMap<String, Option<String>>,
    /// How many changes of the API server's binding log the checks have read.
    logged: usize,
    /// Bindings a second claim was bound to (their claimed-by record went, the tenant stayed):
    /// the operator cannot tell any more whether one of their objects existed, and releases
    /// them dirty (the price of (e)), so (d) does not hold them.
    shared: BTreeSet<String>,
    /// Dirty bindings after the last step.
    dirty: usize,
    tick: u64,
    start: Instant,
    /// How often each case that matters happened: proof that the steps reach it.
    events: BTreeMap<&'static str, usize>,
    uids: usize,
    violations: Vec<String>,
}

struct View<'a> {
    objects: &'a BTreeMap<String, Stored>,
    meta: &'a BTreeMap<String, Meta>,
    bindings: &'a BTreeMap<String, Binding>,
}

impl Sources for View<'_> {
    fn exists(&self, claim: &Claim) -> bool {
        self.meta
            .get(&claim.uid)
            .is_some_and(|m| self.objects.contains_key(OBJECTS[m.obj].1))
    }
    fn existed(&self, claim: &Claim) -> bool {
        self.meta.get(&claim.uid).is_some_and(|m| m.served)
    }
    fn binding_now(&self, name: &str) -> Option<(u64, Option<String>)> {
        let b = self.bindings.get(name)?;
        Some((b.rv, b.label(CLAIMED_BY).map(str::to_string)))
    }
}

/// The scenario: free bindings, and whether a Shoot of another tenant already runs on one of
/// them without its tenant label (it names the binding itself).
#[derive(Clone, Debug)]
struct Setup {
    bindings: usize,
    direct: Option<usize>,
    multi: bool,
}

fn setup() -> impl Strategy<Value = Setup> {
    (1..5usize, prop::option::of(0..4usize), any::<bool>()).prop_map(|(bindings, direct, multi)| {
        Setup {
            bindings,
            direct: direct.map(|d| d % bindings),
            multi,
        }
    })
}

fn policy(multi: bool) -> MultiAccountPolicy {
    let spec = MultiHyperscalerAccount {
        allowed_global_accounts: if multi {
            vec![TENANTS[0].into(), TENANTS[1].into()]
        } else {
            vec![]
        },
        limits: [("aws".to_string(), 2)].into_iter().collect(),
    };
    MultiAccountPolicy::from_spec(Some(&spec))
}

fn pick_of<T: Clone>(items: &[T], pick: usize) -> Option<T> {
    (!items.is_empty()).then(|| items[pick % items.len()].clone())
}

impl World {
    fn new(p: Protocol, s: &Setup) -> Self {
        let pol = policy(s.multi);
        let bindings = (0..s.bindings)
            .map(|i| Binding {
                name: format!("cb-{i}"),
                labels: BTreeMap::from([("hyperscalerType".to_string(), "aws".to_string())]),
                annotations: BTreeMap::new(),
                rv: 0,
            })
            .collect();
        let mut objects = BTreeMap::new();
        let mut shoots = Vec::new();
        if let Some(d) = s.direct {
            let binding = format!("cb-{d}");
            shoots.push(Shoot {
                name: "direct".into(),
                binding: Some(binding.clone()),
                rv: 0,
            });
            let stored = Stored {
                tenant: TENANTS[3].into(),
                binding,
                seen: true,
            };
            objects.insert("direct".to_string(), stored);
        }
        let limit = s.multi.then_some(2);
        let api = Api::new(bindings, shoots, pol.clone(), limit);
        let leader = Replica::start(0, &api);
        let mut w = World {
            p,
            api,
            leader,
            zombie: None,
            policy: pol,
            calls: Vec::new(),
            ever_used: objects.values().map(|o| o.binding.clone()).collect(),
            objects,
            meta: BTreeMap::new(),
            interrupted: BTreeSet::new(),
            tenants: BTreeMap::new(),
            records: BTreeMap::new(),
            logged: 0,
            shared: BTreeSet::new(),
            dirty: 0,
            tick: 0,
            start: Instant::now(),
            events: BTreeMap::new(),
            uids: 0,
            violations: Vec::new(),
        };
        w.tenants = w.tenant_labels();
        w
    }

    fn now(&self) -> Instant {
        self.start + TICK * u32::try_from(self.tick).unwrap_or(u32::MAX)
    }

    fn event(&mut self, what: &'static str) {
        *self.events.entry(what).or_default() += 1;
    }

    fn view(&self) -> View<'_> {
        View {
            objects: &self.objects,
            meta: &self.meta,
            bindings: &self.api.bindings,
        }
    }

    fn apply(&mut self, s: &Step) {
        match *s {
            Step::Create { obj, tenant } => self.create(obj, tenant),
            Step::Recreate(obj) => {
                if let Some(o) = self.objects.get(OBJECTS[obj].1).cloned()
                    && self.delete(obj)
                {
                    let tenant = TENANTS.iter().position(|t| *t == o.tenant).unwrap_or(0);
                    self.create(obj, tenant);
                    self.event("an object deleted and created again");
                }
            }
            Step::Delete(obj) => {
                self.delete(obj);
            }
            Step::Call(pick) => {
                let live: Vec<usize> = (0..self.calls.len())
                    .filter(|i| !matches!(self.calls[*i].phase, CallPhase::Admitted { .. }))
                    .collect();
                if let Some(i) = pick_of(&live, pick) {
                    self.call_step(i);
                }
            }
            Step::Cancel(pick) => {
                let waiting: Vec<usize> = (0..self.calls.len())
                    .filter(|i| self.calls[*i].waiting())
                    .collect();
                if let Some(i) = pick_of(&waiting, pick) {
                    self.calls[i].cancel(self.p);
                    self.event("a call cancelled");
                }
            }
            Step::Admit { pick, store } => {
                let admitted: Vec<usize> = (0..self.calls.len())
                    .filter(|i| matches!(self.calls[*i].phase, CallPhase::Admitted { .. }))
                    .collect();
                if let Some(i) = pick_of(&admitted, pick) {
                    self.admit(i, store);
                }
            }
            Step::Deliver { kind, n } => self.leader.deliver(&self.api, kind, n),
            Step::Reconcile(pick) => {
                let claims = self.leader.claims();
                if let Some(c) = pick_of(&claims, pick) {
                    self.reconcile(&c.uid);
                }
            }
            Step::Sweep => {
                for kind in [BINDINGS, CLAIMS, SHOOTS] {
                    self.leader.deliver(&self.api, kind, usize::MAX);
                }
                for c in self.leader.claims() {
                    self.reconcile(&c.uid);
                }
            }
            Step::Execute(pick) => {
                let plans: Vec<String> = self.leader.plans.keys().cloned().collect();
                if let Some(uid) = pick_of(&plans, pick) {
                    let now = self.now();
                    self.leader.execute(&uid, &mut self.api, now);
                }
            }
            Step::Gc(pick) => self.gc(pick),
            Step::Pass(pick) => self.pass(pick),
            Step::Failover => self.failover(),
            Step::Zombie => self.zombie_write(),
            Step::Tick => self.time_passes(),
        }
    }

    fn create(&mut self, obj: usize, tenant: usize) {
        if self.calls.len() < 4 {
            self.calls.push(Call::new(obj, tenant, self.tick));
        }
    }

    /// Whether the object was there to delete.
    fn delete(&mut self, obj: usize) -> bool {
        let name = OBJECTS[obj].1;
        if !self.objects.get(name).is_some_and(|o| o.seen) {
            return false;
        }
        self.objects.remove(name);
        if OBJECTS[obj].0 == Kind::Shoot {
            self.api.delete_shoot(name);
        }
        true
    }

    fn call_step(&mut self, i: usize) {
        self.uids += 1;
        let meta = &mut self.meta;
        let obj = self.calls[i].obj;
        let mut created = |uid: &str, tick: u64| {
            meta.insert(
                uid.to_string(),
                Meta {
                    obj,
                    created: tick,
                    ..Meta::default()
                },
            );
        };
        let mut stamps = Vec::new();
        let mut stamped = |uid: &str, tick: u64| stamps.push((uid.to_string(), tick));
        let mut cx = Ctx {
            api: &mut self.api,
            p: self.p,
            tick: self.tick,
            new_uid: format!("w{}", self.uids),
            created: &mut created,
            stamped: &mut stamped,
        };
        let before = self.calls[i].phase.clone();
        self.calls[i].step(&mut cx);
        let (after, detached) = (&self.calls[i].phase, self.calls[i].detached);
        let what = match (&before, after) {
            (CallPhase::Lookup, CallPhase::Stamp { .. } | CallPhase::Admitted { .. }) => {
                Some("a call handed out an existing Bound claim")
            }
            (CallPhase::Stamp { .. }, CallPhase::Wait { .. }) => Some("a stamp met a conflict"),
            (CallPhase::Cleanup { .. }, CallPhase::Cleanup { .. }) => {
                Some("a clean-up retried its delete")
            }
            (CallPhase::Cleanup { .. }, CallPhase::Done) if detached => {
                Some("a detached clean-up ended")
            }
            (CallPhase::Wait { uid, .. }, CallPhase::Keep { .. })
                if self.api.claims.get(uid).is_some_and(|c| !c.deleting) =>
            {
                Some("a call left its claim for a retry")
            }
            (CallPhase::Keep { uid, .. }, CallPhase::Done)
                if stamps.iter().any(|(u, _)| u == uid) =>
            {
                Some("a kept claim was stamped")
            }
            _ => None,
        };
        if let Some(what) = what {
            self.event(what);
        }
        for (uid, tick) in stamps {
            if let Some(m) = self.meta.get_mut(&uid) {
                m.stamp = Some(tick);
            }
        }
        trace(|| format!("  call {i}: {:?}", self.calls[i]));
        if self.calls[i].phase == CallPhase::Done {
            self.calls.remove(i);
        }
    }

    /// The API server stores the object it was answered for, or refuses it (a validation, a
    /// quota, a later webhook — or a name that exists already).
    fn admit(&mut self, i: usize, store: bool) {
        let call = self.calls.remove(i);
        let CallPhase::Admitted { binding } = call.phase else {
            return;
        };
        let (kind, name) = OBJECTS[call.obj];
        if !store || self.objects.contains_key(name) {
            self.event("an object refused after admission");
            return;
        }
        self.event("an object stored");
        if kind == Kind::Shoot {
            self.api.put_shoot(Shoot {
                name: name.into(),
                binding: Some(binding.clone()),
                rv: 0,
            });
        }
        self.ever_used.insert(binding.clone());
        let stored = Stored {
            tenant: TENANTS[call.tenant].into(),
            binding,
            seen: false,
        };
        self.objects.insert(name.into(), stored);
    }

    fn reconcile(&mut self, uid: &str) {
        let now = self.now();
        let view = View {
            objects: &self.objects,
            meta: &self.meta,
            bindings: &self.api.bindings,
        };
        let waited = self.leader.waited_for_use;
        self.leader.reconcile(uid, self.p, &self.policy, &view, now);
        if self.leader.waited_for_use > waited {
            self.event("a release waited for a claim recorded on its binding");
        }
    }

    /// The source pass: a stored object is seen, and its claim records that it served one.
    fn pass(&mut self, pick: usize) {
        let names: Vec<String> = self.objects.keys().cloned().collect();
        let Some(name) = pick_of(&names, pick) else {
            return;
        };
        let Some(o) = self.objects.get_mut(&name) else {
            return;
        };
        o.seen = true;
        let Some(obj) = OBJECTS.iter().position(|(_, n)| *n == name) else {
            return;
        };
        let claim = self
            .api
            .claims
            .values()
            .find(|c| c.name == claim_name(obj) && !c.deleting);
        if let Some(m) = claim.and_then(|c| self.meta.get_mut(&c.uid)) {
            m.served = true;
        }
    }

    /// The source clean-up: one step of the claim in progress, or a new claim to look at.
    fn gc(&mut self, pick: usize) {
        let Some(g) = self.leader.gc.take() else {
            let claims: Vec<Claim> = self
                .leader
                .claims()
                .into_iter()
                .filter(|c| !c.deleting && self.meta.contains_key(&c.uid))
                .collect();
            let Some(c) = pick_of(&claims, pick) else {
                return;
            };
            // OLD: the grace runs from the claim's creation, read from the cache.
            let created = self.meta.get(&c.uid).map_or(0, |m| m.created);
            if self.p == Protocol::Old && self.tick < created + GRACE {
                return;
            }
            let phase = match self.p {
                Protocol::Old => GcPhase::Check,
                Protocol::New => GcPhase::Read,
            };
            self.leader.gc = Some(Gc {
                uid: c.uid,
                rv: None,
                phase,
            });
            return;
        };
        let next = match g.phase {
            // NEW: the claim read first; its version is the delete's precondition, and a stamp
            // younger than the grace means a webhook handed it out a moment ago.
            GcPhase::Read => match self.api.claims.get(&g.uid).cloned() {
                Some(c) if !c.deleting => {
                    let m = self.meta.get(&g.uid).cloned().unwrap_or_default();
                    let since = m.stamp.unwrap_or(m.created);
                    if self.tick < since + GRACE && self.tick >= m.created + GRACE {
                        self.event("the clean-up spared a claim for its fresh stamp");
                    }
                    (self.tick >= since + GRACE).then_some(Gc {
                        rv: Some(c.rv),
                        phase: GcPhase::Check,
                        ..g
                    })
                }
                _ => None,
            },
            GcPhase::Check => {
                let exists = self
                    .api
                    .claims
                    .get(&g.uid)
                    .is_some_and(|c| self.view().exists(c));
                if exists {
                    self.event("the clean-up found the object");
                }
                (!exists).then_some(Gc {
                    phase: GcPhase::Delete,
                    ..g
                })
            }
            GcPhase::Delete => {
                match self.api.delete_claim_if(&g.uid, g.rv) {
                    Ok(()) => self.event("the clean-up deleted a claim"),
                    Err(_) => self.event("the clean-up's delete was refused"),
                }
                None
            }
        };
        self.leader.gc = next;
    }

    /// The leader pauses past its lease with one write sent; the standby lists and takes over.
    fn failover(&mut self) {
        if self.zombie.is_some() {
            return;
        }
        // Before the standby lists: a record of a claim write ahead of the held write landed
        // while the lease was held.
        let now = self.now();
        let held = match self.leader.gc.take() {
            Some(g) if g.phase == GcPhase::Delete => Some(Held::GcDelete {
                uid: g.uid,
                rv: g.rv,
            }),
            _ => {
                let uid = self.leader.plans.keys().next().cloned();
                uid.and_then(|uid| {
                    Some(Held::Write {
                        write: self.leader.next_unit(&uid, &mut self.api, now)?,
                        uid,
                    })
                })
            }
        };
        let mut old = std::mem::replace(&mut self.leader, Replica::start(0, &self.api));
        self.leader.id = 1 - old.id;
        let planned = old.plans.values().flatten();
        let pending = held.iter().filter_map(|h| match h {
            Held::Write { write, .. } => Some(write),
            Held::GcDelete { .. } => None,
        });
        for w in planned.chain(pending) {
            if let Write::Claim { binding, .. }
            | Write::Status {
                phase: api::Phase::Bound(binding),
                ..
            } = w
            {
                self.interrupted.insert(binding.clone());
            }
        }
        old.gc = None;
        trace(|| format!("  failover; held {held:?}"));
        self.event("failover");
        self.zombie = Some(Zombie { replica: old, held });
    }

    fn zombie_write(&mut self) {
        let now = self.now();
        let Some(mut z) = self.zombie.take() else {
            return;
        };
        match z.held.take() {
            Some(Held::Write { uid, write }) => {
                self.api.late = true;
                let landed = z.replica.send(&uid, &write, &mut self.api, now);
                self.api.late = false;
                if landed {
                    self.event("a paused leader's write landed late");
                } else {
                    self.event("a paused leader's late write was refused");
                }
            }
            Some(Held::GcDelete { uid, rv }) if self.api.delete_claim_if(&uid, rv).is_ok() => {
                self.event("a paused leader's clean-up delete landed late");
            }
            _ => {}
        }
    }

    /// Time passes: calls the API server gave up on are cancelled, objects answered for are
    /// stored in time. A held write stays held: nothing in the product gives up on it.
    fn time_passes(&mut self) {
        self.tick += 1;
        let (p, tick) = (self.p, self.tick);
        for c in self.calls.iter_mut() {
            if c.waiting() && tick >= c.started + TIMEOUT {
                c.cancel(p);
                *self.events.entry("a call timed out").or_default() += 1;
            }
        }
        let late: Vec<usize> = (0..self.calls.len())
            .filter(|i| self.calls[*i].answered.is_some_and(|a| tick >= a + ADMIT))
            .collect();
        for i in late.into_iter().rev() {
            self.admit(i, true);
        }
    }

    fn tenant_labels(&self) -> BTreeMap<String, Option<String>> {
        self.api
            .bindings
            .values()
            .map(|b| (b.name.clone(), b.label("tenantName").map(str::to_string)))
            .collect()
    }

    /// Bindings whose claimed-by record a write removed while their tenant stayed (a second
    /// claim was bound to them), read from every binding change since the last check: one step
    /// can put a record and take it away again (a settling round; a paused leader's claim write
    /// landing and the next leader's reuse), and a check that compared only the states after two
    /// steps missed it and held such a binding's dirty release against (d).
    fn records_removed(&mut self) -> BTreeSet<String> {
        let log = &self.api.logs[BINDINGS];
        let mut removed = BTreeSet::new();
        for change in &log[self.logged..] {
            let Some(Obj::Binding(b)) = &change.obj else {
                self.records.remove(&change.key);
                continue;
            };
            let record = b.label(CLAIMED_BY).map(str::to_string);
            let before = self.records.insert(b.name.clone(), record).flatten();
            if before.is_some() && b.label(CLAIMED_BY).is_none() && b.label("tenantName").is_some()
            {
                removed.insert(b.name.clone());
            }
        }
        self.logged = log.len();
        removed
    }

    /// (a), (b), (d) and (e), on the state after a step.
    fn check(&mut self, step: usize) {
        let mut found = Vec::new();
        let mut seen = Vec::new();
        for b in self.records_removed() {
            self.shared.insert(b);
            seen.push("a reuse removed another claim's record");
        }
        for b in self.api.bindings.values() {
            let users: Vec<(&String, &Stored)> = self
                .objects
                .iter()
                .filter(|(_, o)| o.binding == b.name)
                .collect();
            if b.label("dirty").is_some() && !users.is_empty() {
                found.push(format!("(a) {} is dirty while {users:?} use it", b.name));
            }
            let bound: Vec<&Claim> = self
                .api
                .claims
                .values()
                .filter(|c| !c.deleting && c.bound() == Some(b.name.as_str()))
                .collect();
            if b.label("dirty").is_some() && !bound.is_empty() {
                let uids: Vec<&str> = bound.iter().map(|c| c.uid.as_str()).collect();
                found.push(format!(
                    "(f) {} is dirty while claims {uids:?} are Bound to it",
                    b.name
                ));
            }
            let clusters = self.api.clusters_on(&b.name);
            let limited = self.api.limit.filter(|_| {
                b.dedicated_pool().is_some()
                    && b.label("tenantName")
                        .is_some_and(|t| self.api.policy.allows(t))
            });
            if let Some(limit) = limited
                && clusters.len() > limit as usize
            {
                found.push(format!(
                    "(g) {} has {} clusters {clusters:?}, limit {limit}",
                    b.name,
                    clusters.len()
                ));
            }
            let mut tenants: BTreeSet<&str> =
                users.iter().map(|(_, o)| o.tenant.as_str()).collect();
            tenants.extend(b.label("tenantName"));
            if b.dedicated_pool().is_some() {
                tenants.extend(bound.iter().map(|c| c.tenant.as_str()));
            }
            if tenants.len() > 1 {
                found.push(format!("(b) {} is used by tenants {tenants:?}", b.name));
            }
            if b.label("dirty").is_some()
                && !self.ever_used.contains(&b.name)
                && !self.shared.contains(&b.name)
            {
                found.push(format!(
                    "(d) {} is dirty, and no object ever used it",
                    b.name
                ));
            }
            let before = self.tenants.get(&b.name).cloned().flatten();
            if before.is_some() && b.label("tenantName").is_none() {
                seen.push("a binding released clean");
            }
            if before.is_some()
                && b.label("tenantName").is_none()
                && self.ever_used.contains(&b.name)
            {
                found.push(format!(
                    "(e) {} was released clean after an object used it",
                    b.name
                ));
            }
        }
        let dirty = self
            .api
            .bindings
            .values()
            .filter(|b| b.label("dirty").is_some())
            .count();
        if dirty > self.dirty {
            seen.push("a binding released dirty");
        }
        self.dirty = dirty;
        for what in seen {
            self.event(what);
        }
        self.tenants = self.tenant_labels();
        self.violations
            .extend(found.into_iter().map(|v| match step {
                usize::MAX => format!("settling: {v}"),
                _ => format!("step {step}: {v}"),
            }));
        let api = std::mem::take(&mut self.api.violations);
        self.violations.extend(api);
    }

    /// Faults stop: every call ends (nobody cancels, everything answered is stored), the grace
    /// passes, and the leader cleans up and reconciles until nothing changes.
    fn settle(&mut self) {
        self.zombie_write();
        for _ in 0..100 {
            let before = (self.api.rv, self.calls.len());
            self.round();
            for i in (0..self.calls.len()).rev() {
                if matches!(self.calls[i].phase, CallPhase::Admitted { .. }) {
                    self.admit(i, true);
                } else {
                    self.call_step(i);
                }
            }
            self.tick += 1;
            self.check(usize::MAX);
            if self.calls.is_empty() && before == (self.api.rv, 0) {
                break;
            }
        }
        for i in 0..self.objects.len() {
            self.pass(i);
        }
        self.tick += GRACE + 1;
        for _ in 0..100 {
            let before = self.api.rv;
            self.round();
            for pick in 0..=self.leader.claims().len() {
                while self.leader.gc.is_some() {
                    self.gc(0);
                }
                self.gc(pick);
            }
            self.tick += 1;
            self.check(usize::MAX);
            if before == self.api.rv && self.leader.plans.is_empty() {
                return;
            }
        }
        self.violations.push("the leader never settled".into());
    }

    /// The leader catches up and does all it decides.
    fn round(&mut self) {
        for kind in [BINDINGS, CLAIMS, SHOOTS] {
            self.leader.deliver(&self.api, kind, usize::MAX);
        }
        for c in self.leader.claims() {
            self.reconcile(&c.uid);
        }
        let now = self.now();
        for uid in self.leader.plans.keys().cloned().collect::<Vec<_>>() {
            while self.leader.plans.contains_key(&uid) {
                self.leader.execute(&uid, &mut self.api, now);
            }
        }
    }

    /// (c): every claimed binding serves a live object, was released, or is reported as an
    /// orphan by the HapConfig status (the real `Inventory::orphans` on the leader's settled
    /// view). No claim is left over.
    fn check_settled(&mut self) {
        let reported = self.leader.reported();
        for b in self.api.bindings.values() {
            let claimed = b.label("tenantName").is_some() && b.label("dirty").is_none();
            let serves = self.objects.values().any(|o| o.binding == b.name);
            if claimed && !serves && !reported.contains(&b.name) {
                let v = format!(
                    "(c) {} is claimed, serves no object and is not reported",
                    b.name
                );
                self.violations.push(v);
            }
            if claimed && !serves && !self.interrupted.contains(&b.name) {
                // Not a leader change: a claim write whose claim went before its status did,
                // while a sibling's assignment held the release (see the report test).
                *self
                    .events
                    .entry("an orphan left without a leader change")
                    .or_default() += 1;
            }
        }
        // §5.2 once settled: a stray a paused leader's late claim write left is given back.
        let mut held: BTreeMap<(&str, usize), Vec<&str>> = BTreeMap::new();
        for b in self.api.bindings.values() {
            if let (Some(t), Some(pool)) = (b.label("tenantName"), b.dedicated_pool()) {
                held.entry((t, pool)).or_default().push(&b.name);
            }
        }
        for ((tenant, pool), names) in held {
            if names.len() > 1 && !self.api.policy.allows(tenant) {
                let v = format!("§5.2 {tenant} holds {names:?} in pool {pool} once settled");
                self.violations.push(v);
            }
        }
        for c in self.api.claims.values() {
            let live = self.view().exists(c);
            if c.deleting || !live || c.bound().is_none() {
                let v = format!(
                    "(c) claim {} ({}) is left as {:?}, deleting {}",
                    c.uid, c.name, c.phase, c.deleting
                );
                self.violations.push(v);
            }
        }
        let api = std::mem::take(&mut self.api.violations);
        self.violations.extend(api);
    }
}

/// What a run found, and which cases it went through.
struct Report {
    violations: Vec<String>,
    events: BTreeMap<&'static str, usize>,
    /// At the end: every claim recorded Bound, with its binding and whether that is dirty.
    bound: BTreeMap<String, (String, bool)>,
    /// The interleaving step by step (each step, the calls' phases, the leader's decisions and
    /// every commit), kept when the run found a violation.
    trace: Vec<String>,
}

impl Report {
    /// The violations, then the trace that led to them.
    fn show(&self) -> String {
        format!("{:#?}\n{}", self.violations, self.trace.join("\n"))
    }
}

/// Runs the steps, stopping at the first violation, then the settling. A run that found a
/// violation runs again (it is deterministic) with its trace kept.
fn run(p: Protocol, setup: &Setup, steps: &[Step]) -> Report {
    let first = run_once(p, setup, steps);
    if first.violations.is_empty() {
        return first;
    }
    let (again, trace) = recorded(|| run_once(p, setup, steps));
    Report { trace, ..again }
}

fn run_once(p: Protocol, setup: &Setup, steps: &[Step]) -> Report {
    let mut w = World::new(p, setup);
    for (i, s) in steps.iter().enumerate() {
        w.api.step = i;
        trace(|| format!("step {i} (tick {}): {s:?}", w.tick));
        w.apply(s);
        w.check(i);
        if !w.violations.is_empty() {
            break;
        }
    }
    if w.violations.is_empty() {
        w.api.step = steps.len();
        trace(|| format!("settling (tick {})", w.tick));
        w.settle();
        w.check_settled();
    }
    w.violations.dedup();
    let bound = w
        .api
        .claims
        .values()
        .filter_map(|c| {
            let b = c.bound()?;
            let dirty = w
                .api
                .bindings
                .get(b)
                .is_some_and(|e| e.label("dirty").is_some());
            Some((c.uid.clone(), (b.to_string(), dirty)))
        })
        .collect();
    Report {
        violations: w.violations,
        events: w.events,
        bound,
        trace: Vec::new(),
    }
}

/// Cases of the property test: `HAP_SIM_CASES`, else 5,000 (what `make test` runs).
fn cases() -> u32 {
    cases_or(5_000)
}

fn cases_or(default: u32) -> u32 {
    std::env::var("HAP_SIM_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Every case the NEW protocol has to survive, each reached by the random steps at least once:
/// without this, a model change that made one unreachable would leave its test passing on
/// nothing.
const MUST_REACH: [&str; 21] = [
    "an object stored",
    "an object refused after admission",
    "an object deleted and created again",
    "a call handed out an existing Bound claim",
    "a stamp met a conflict",
    "a call cancelled",
    "a call timed out",
    "a detached clean-up ended",
    // A delete that meets a conflict and is retried now needs a refused claim to change again
    // before the delete lands, which the model's leader rarely does; the retry is covered
    // deterministically by webhook::serve_tests::a_delete_that_meets_a_conflict_is_retried_…
    "a call left its claim for a retry",
    "a kept claim was stamped",
    "the clean-up spared a claim for its fresh stamp",
    "the clean-up found the object",
    "the clean-up deleted a claim",
    "the clean-up's delete was refused",
    "a binding released dirty",
    "a binding released clean",
    "a paused leader's late write was refused",
    "a release waited for a claim recorded on its binding",
    "a reuse removed another claim's record",
    "failover",
    "a paused leader's write landed late",
];

fn scenario() -> impl Strategy<Value = (Setup, Vec<Step>)> {
    (setup(), prop::collection::vec(step(), 1..200))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    /// The protocol issue 19 asks for keeps every invariant under every fault at once.
    #[test]
    fn the_new_source_protocol_keeps_every_invariant((setup, steps) in scenario()) {
        let found = run(Protocol::New, &setup, &steps);
        prop_assert!(
            found.violations.is_empty(),
            "{}\nsetup {setup:?}\nsteps {steps:?}",
            found.show()
        );
    }
}

#[test]
fn the_random_steps_reach_every_case_that_matters() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::{Config, TestRunner};
    let mut runner = TestRunner::new(Config::default());
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for _ in 0..cases_or(500) {
        let Ok(tree) = scenario().new_tree(&mut runner) else {
            continue;
        };
        let (setup, steps) = tree.current();
        for (what, n) in run(Protocol::New, &setup, &steps).events {
            *seen.entry(what).or_default() += n;
        }
    }
    let missing: Vec<&str> = MUST_REACH
        .iter()
        .copied()
        .filter(|w| !seen.contains_key(w))
        .collect();
    assert!(
        missing.is_empty(),
        "never reached: {missing:?}; reached {seen:#?}"
    );
}

/// Steps written out: `n` ticks.
fn ticks(n: usize) -> Vec<Step> {
    vec![Step::Tick; n]
}

fn one_binding(direct: bool) -> Setup {
    Setup {
        bindings: 1,
        direct: direct.then_some(0),
        multi: false,
    }
}

/// Runs a written-out scenario under both protocols: OLD must show the violation `class`
/// (proof that the checker can fail), NEW none.
fn old_fails_new_holds(setup: &Setup, steps: &[Step], class: &str) {
    let old = run(Protocol::Old, setup, steps).violations;
    assert!(
        old.iter().any(|v| v.contains(class)),
        "OLD should break {class}, found {old:#?}"
    );
    trace(|| format!("OLD found {old:#?}"));
    let new = run(Protocol::New, setup, steps);
    assert!(
        new.violations.is_empty(),
        "NEW should hold, found {}",
        new.show()
    );
}

/// Runs a written-out scenario with the binding-record protocol switched off
/// (`leader::without_use_record`): it must show the violation `class` (proof that the scenario
/// and the checker can fail), and none with it on. `steps`: without and with the protocol (a
/// use without its record has one write less before its status).
fn fails_without_the_use_record(setup: &Setup, steps: (&[Step], &[Step]), class: &str) -> Report {
    let (without, steps) = steps;
    let off = without_use_record(|| run(Protocol::New, setup, without)).violations;
    assert!(
        off.iter().any(|v| v.contains(class)),
        "without the use record the scenario should break {class}, found {off:#?}"
    );
    trace(|| format!("without the use record: {off:#?}"));
    let on = run(Protocol::New, setup, steps);
    assert!(on.violations.is_empty(), "{}", on.show());
    on
}

/// The first call for Runtime `r0`: created, bound to `cb-0` by the leader, admitted, stored
/// and seen by the source pass.
fn runtime_served() -> Vec<Step> {
    use Step::*;
    vec![
        Create { obj: 2, tenant: 0 },
        Call(0), // lookup
        Call(0), // create the claim
        Sweep,   // the leader claims cb-0
        Execute(0),
        Execute(0),
        Call(0), // Bound (NEW: stamp next)
        Call(0), // NEW: the stamp; OLD: nothing left to do
        Admit {
            pick: 0,
            store: true,
        },
        Pass(0),
    ]
}

/// Issue 19, defect 1: the clean-up finds the object gone, the same name is created again and
/// today's webhook hands out the existing claim without writing on it; the clean-up's delete
/// (uid precondition only) goes through and the release marks dirty the binding the new Runtime
/// runs on.
#[test]
fn old_delete_and_recreate_dirties_a_binding_under_a_live_object() {
    use Step::*;
    let mut steps = runtime_served();
    steps.extend(ticks(GRACE as usize + 1));
    steps.extend([
        Sweep,
        Gc(0),       // OLD: old enough, check next; NEW: read the claim
        Gc(0),       // OLD: the Runtime is gone; NEW: check next
        Recreate(2), // deleted and created again at once
        Call(0),     // lookup: the existing claim, Bound (NEW: stamp next)
        Call(0),     // NEW: the stamp moves the claim's version
        Gc(0),       // OLD: deletes with a uid precondition; NEW: refused, or nothing to do
        Gc(0),
        Admit {
            pick: 0,
            store: true,
        },
        Sweep, // the release
        Execute(0),
        Execute(0),
    ]);
    old_fails_new_holds(&one_binding(false), &steps, "(a)");
}

/// Issue 19, defect 2: the API server gives up on the call; the handler and its clean-up are
/// dropped, the leader binds the claim anyway, and after the grace the clean-up deletes it and
/// the release marks dirty an account no cluster ever used.
#[test]
fn old_cancelled_request_dirties_a_binding_nobody_used() {
    use Step::*;
    let mut steps = vec![
        Create { obj: 2, tenant: 0 },
        Call(0),
        Call(0),
        Cancel(0), // NEW: the call's task goes on, detached
        Call(0),   // NEW: it leaves the undecided claim for a retry; the leader binds it
        Sweep,
        Execute(0),
        Execute(0),
    ];
    steps.extend(ticks(GRACE as usize + 1));
    steps.extend([
        Sweep,
        Gc(0),
        Gc(0),
        Gc(0),
        Gc(0),
        Sweep,
        Execute(0),
        Execute(0),
    ]);
    old_fails_new_holds(&one_binding(false), &steps, "(d)");
}

/// Issue 19, defect 2, refused after admission: the webhook answered Bound, a later admission
/// step refused the object; after the grace the binding is marked dirty though nothing ran.
#[test]
fn old_object_refused_after_admission_dirties_a_binding_nobody_used() {
    use Step::*;
    let mut steps = runtime_served();
    steps[8] = Admit {
        pick: 0,
        store: false,
    };
    steps.extend(ticks(GRACE as usize + 1));
    steps.extend([
        Sweep,
        Gc(0),
        Gc(0),
        Gc(0),
        Gc(0),
        Sweep,
        Execute(0),
        Execute(0),
    ]);
    old_fails_new_holds(&one_binding(false), &steps, "(d)");
}

/// Issue 19, defect 3: a Shoot of another tenant names the free binding itself. The selection
/// used to claim it for the next tenant; the real selection both protocols run now skips it
/// (5edf068), so OLD no longer shows (b) here and only NEW is held to it.
#[test]
fn selection_never_hands_an_untenanted_binding_in_use_to_a_second_tenant() {
    use Step::*;
    let steps = [
        Create { obj: 2, tenant: 0 },
        Call(0),
        Call(0),
        Sweep,
        Execute(0),
        Execute(0),
    ];
    let new = run(Protocol::New, &one_binding(true), &steps).violations;
    assert!(new.is_empty(), "found {new:#?}");
}

/// Steps: Runtime r0 served on cb-0 (its claim Claimed it), then Runtime r1 of the same tenant
/// gets cb-0 by Reuse and is refused after admission, and r0 is deleted.
fn reused_by_a_refused_runtime() -> Vec<Step> {
    use Step::*;
    let mut steps = runtime_served();
    steps.extend([
        Create { obj: 3, tenant: 0 },
        Call(0),
        Call(0),
        Sweep, // r1's claim reuses cb-0
        Execute(0),
        Execute(0),
        Call(0),
        Call(0),
        Admit {
            pick: 0,
            store: false,
        },
        Delete(2),
    ]);
    steps.extend(ticks(GRACE as usize + 1));
    steps
}

/// The clean-up of one claim (read, check, delete) and the release that follows.
fn clean_up_and_release() -> Vec<Step> {
    use Step::*;
    vec![
        Sweep,
        Gc(0),
        Gc(0),
        Gc(0),
        Gc(0),
        Sweep,
        Execute(0),
        Execute(0),
        Execute(0),
    ]
}

/// Found by this simulation: "clean when the releasing claim never had a stored object" is not
/// enough. Runtime r0 runs on cb-0; r1 of the same tenant reuses cb-0 and is refused after
/// admission. r0's claim goes first and its release keeps cb-0 for r1's claim; r1's claim goes
/// last, never served anything, and must not release cb-0 clean: the next tenant would get an
/// account r0 ran in. (e) on the real `decide_release`.
#[test]
fn a_binding_a_reused_claim_shared_is_never_released_clean() {
    let mut steps = reused_by_a_refused_runtime();
    // r0's claim (the first by uid) goes first; then r1's.
    steps.extend(clean_up_and_release());
    steps.extend(clean_up_and_release());
    let report = run(Protocol::New, &one_binding(false), &steps);
    assert!(
        report.violations.is_empty(),
        "found {:#?}",
        report.violations
    );
    assert!(
        report.events.contains_key("a binding released dirty"),
        "the scenario must reach the release: {:#?}",
        report.events
    );
}

/// The reverse: r1's claim Claimed cb-0 and r1 was refused; r0 of the same tenant reused cb-0
/// and ran. r0's claim goes first (its release keeps cb-0 for r1's claim), r1's claim last.
#[test]
fn a_binding_claimed_by_a_refused_runtime_and_reused_is_never_released_clean() {
    use Step::*;
    let mut steps = vec![
        Create { obj: 3, tenant: 0 },
        Call(0),
        Call(0),
        Sweep, // r1's claim claims cb-0
        Execute(0),
        Execute(0),
        Call(0),
        Call(0),
        Admit {
            pick: 0,
            store: false,
        },
        Create { obj: 2, tenant: 0 },
        Call(0),
        Call(0),
        Sweep, // r0's claim reuses cb-0
        Execute(0),
        Execute(0),
        Call(0),
        Call(0),
        Admit {
            pick: 0,
            store: true,
        },
        Pass(0),
        Delete(2),
    ];
    steps.extend(ticks(GRACE as usize + 1));
    // r0's claim (the second by uid) goes first.
    steps.extend([Sweep, Gc(1), Gc(0), Gc(0), Gc(0), Sweep, Execute(0)]);
    steps.extend(clean_up_and_release());
    let report = run(Protocol::New, &one_binding(false), &steps);
    assert!(
        report.violations.is_empty(),
        "found {:#?}",
        report.violations
    );
    assert!(
        report.events.contains_key("a binding released dirty"),
        "the scenario must reach the release: {:#?}",
        report.events
    );
}

/// Found by the simulation with the undecided claims kept for the retry. Runtime r0 and Shoot s0
/// of tenant t1 are requested at once; the leader decides to claim cb-0 for r0's claim and lets
/// s0's claim wait for that claim write (Progressing), then pauses with the claim write in
/// flight. Both calls are cut off undecided, and both claims are kept. The paused leader's claim
/// write lands (cb-0: tenant t1, claimed-by r0's claim); the next leader, whose list predates it,
/// binds s0's claim to cb-0 by reuse (removing r0's record first) and r0's claim after it, in one
/// settling round. Neither object ever appears; the clean-up deletes both claims and cb-0 is
/// released dirty: two claims were bound to it, and the operator cannot tell that neither ran a
/// cluster, so dirty is the safe side. The checker used to see the record only in the states
/// after two steps, missed the one that came and went within the round, and reported (d).
#[test]
fn a_binding_two_kept_claims_shared_within_one_step_may_be_released_dirty() {
    use Step::*;
    let mut steps = vec![
        Create { obj: 2, tenant: 1 },
        Call(0), // r0: lookup
        Call(0), // r0: its claim created
        Create { obj: 0, tenant: 1 },
        Call(1), // s0: lookup
        Call(1), // s0: its claim created
    ];
    steps.extend(ticks(webhook::DECIDE as usize));
    steps.extend([
        Call(0),    // r0: no decision in time; the claim stays for a retry
        Call(0),    // r0: ... stamped
        Call(0),    // s0: the same
        Call(0),    // s0: ... stamped
        Sweep,      // r0's claim: claim cb-0; s0's claim: wait for that write
        Execute(1), // s0's claim: Progressing
        Failover,   // r0's claim write held in flight; the settling begins with it landing
    ]);
    let report = run(Protocol::New, &one_binding(false), &steps);
    assert!(report.violations.is_empty(), "{}", report.show());
    for case in [
        "a call left its claim for a retry",
        "a paused leader's write landed late",
        "a reuse removed another claim's record",
        "a binding released dirty",
    ] {
        assert!(
            report.events.contains_key(case),
            "the scenario must reach {case:?}: {:#?}",
            report.events
        );
    }
}

/// Found by the property test with the undecided claims kept, but older than that: it needs no
/// kept claim. Runtime r0 of multi-account tenant t0 runs on cb-0 (limit 2). Shoot s1's claim is
/// decided onto cb-0; its record on cb-0 (`accountpool.io/filling`, claimed-by removed) lands,
/// then the leader pauses with the status write `Bound(cb-0)` in flight. The next leader lists
/// (cb-0: one cluster, and the record of s1's claim, whose status it does not see), the held
/// status write lands, and the new leader decides s0's claim on its list. A use that wrote only
/// the claim's status left nothing on cb-0 to count, and put three clusters on a binding whose
/// limit is 2 (docs/design.md §5.3). The record is counted as a cluster of cb-0 until the status shows
/// (`selection::claimant::pending_claims`), so s0 goes elsewhere or waits, whenever the late
/// write lands: no time bound and no quiet period is part of the argument.
#[test]
fn a_paused_leaders_late_reuse_never_puts_a_binding_over_its_limit() {
    use Step::*;
    let mut steps = runtime_served();
    steps.extend([
        Create { obj: 1, tenant: 0 },
        Call(0), // s1: lookup
        Call(0), // s1: its claim created
        Create { obj: 0, tenant: 0 },
        Call(1), // s0: lookup
        Call(1), // s0: its claim created
        Deliver {
            kind: BINDINGS,
            n: 10,
        },
        Deliver {
            kind: CLAIMS,
            n: 10,
        },
        Deliver {
            kind: SHOOTS,
            n: 10,
        },
        Reconcile(1), // s1's claim: reuse cb-0 (remove r0's record, then Bound)
        Execute(0),   // the record removed
        Failover,     // s1's status write held in flight
        Zombie,       // ... and landing after the next leader listed
        Tick,
        Tick,
        Reconcile(2), // s0's claim: reuse cb-0, which the new leader sees with one cluster
        Execute(0),
    ]);
    let setup = Setup {
        bindings: 1,
        direct: None,
        multi: true,
    };
    let report = run(Protocol::New, &setup, &steps);
    assert!(report.violations.is_empty(), "{}", report.show());
}

/// Found by the property test (older than the fill record; it needs no reuse): a previous
/// leader's claim write of cb-2 for tenant t1 lands after the next leader listed (takeover
/// re-read), and before its watch shows it; deciding on its list, the new leader claims cb-1 for
/// the same claim: one single-account tenant, two bindings in one pool (docs/design.md §5.2). The
/// compare-and-swap cannot stop it: the two writes go to two bindings, and Kubernetes has no
/// write conditioned on another object. Before, cb-2 stayed t1's for good, an orphan, and t1's
/// next claim could be put on it (clusters in two accounts). Then cb-2 became a stray
/// (`selection::stray_claimant`) that w2's reconcile gave back clean. Now w2's status records
/// the write before it is sent (`status.claimWrite`): deciding again, the new leader reads cb-2
/// live, finds the write landed, and waits for its watch to show it; w2 is bound to cb-2 and no
/// second binding is ever claimed. The checker holds the settled state to one binding per
/// tenant and pool.
#[test]
fn a_paused_leaders_late_claim_write_never_gives_a_tenant_a_second_binding() {
    use Step::*;
    let steps = [
        Create { obj: 0, tenant: 1 },
        Call(0),
        Create { obj: 1, tenant: 0 },
        Call(6),
        Call(1),
        Call(5),
        Sweep,    // w2: claim cb-2; w4: claim cb-0
        Failover, // w2's claim write of cb-2 held in flight
        Zombie,   // ... landing after the next leader listed
        Tick,
        Tick,
        Reconcile(5),
        Reconcile(2), // w2 decided again on the list, which lacks the late write
    ];
    let setup = Setup {
        bindings: 3,
        direct: None,
        multi: false,
    };
    let report = run(Protocol::New, &setup, &steps);
    assert!(report.violations.is_empty(), "{}", report.show());
    assert!(
        report
            .events
            .contains_key("a paused leader's write landed late")
            && !report.events.contains_key("a binding released clean"),
        "the late write lands and is w2's only binding, no stray to give back: {:#?}",
        report.events
    );
}

/// Runtimes r0 and r1 of tenant t0 served on cb-0 (r1's claim reused it), r1 deleted and its
/// claim cleaned up and released (kept: r0 still runs there), then r0 deleted and its claim
/// cleaned up: the next step decides r0's claim's release.
fn two_runtimes_served_then_both_deleted() -> Vec<Step> {
    use Step::*;
    let mut steps = runtime_served();
    steps.extend([
        Create { obj: 3, tenant: 0 },
        Call(0),
        Call(0),
        Sweep, // r1's claim reuses cb-0
        Execute(0),
        Execute(0),
        Call(0),
        Call(0),
        Admit {
            pick: 0,
            store: true,
        },
        Pass(1),
        Delete(3),
    ]);
    steps.extend(ticks(GRACE as usize + 1));
    steps.extend([
        Sweep,
        Gc(1),
        Gc(0),
        Gc(0),
        Gc(0),
        Sweep,
        Execute(0),
        Execute(0),
    ]);
    steps.extend([Delete(2)]);
    steps.extend(ticks(GRACE as usize + 1));
    steps.extend([Sweep, Gc(0), Gc(0), Gc(0), Gc(0)]);
    steps
}

/// Late dirty mark against a reuse that wrote nothing on the binding: the leader decides to
/// release r0's claim, the last on cb-0 (dirty, compare-and-swap on the version it read), and
/// pauses with that write in flight. The next leader reuses cb-0 for the tenant's next Runtime
/// r1 before it gets to r0's claim. Were the reuse a status write alone, cb-0's version would
/// not move, the late dirty mark would land, and the cleanup job would wipe the account under
/// r1. The reuse records its claim on cb-0 with a compare-and-swap first, so it does not.
#[test]
fn a_paused_leaders_late_dirty_mark_never_lands_after_the_next_leaders_reuse() {
    use Step::*;
    let mut steps = two_runtimes_served_then_both_deleted();
    steps.extend([
        Sweep,    // r0's claim: dirty cb-0, then the finalizer
        Failover, // the dirty mark held in flight
        Create { obj: 3, tenant: 0 },
        Call(0), // lookup
        Call(0), // r1's new claim created
        Deliver {
            kind: CLAIMS,
            n: 10,
        },
        Reconcile(0), // the new claim (w10, first by uid): reuse cb-0
        Execute(0),
        Execute(0),
        Zombie, // the dirty mark lands, or is refused
        Call(0),
        Call(0),
        Admit {
            pick: 0,
            store: true,
        },
    ]);
    let report = fails_without_the_use_record(&one_binding(false), (&steps, &steps), "dirty while");
    assert!(
        report
            .events
            .contains_key("a paused leader's late write was refused")
            && !report
                .events
                .contains_key("a paused leader's write landed late"),
        "the held dirty mark must be refused: {:#?}",
        report.events
    );
    assert_eq!(
        report.bound.get("w10"),
        Some(&("cb-0".to_string(), false)),
        "w10 ends Bound to cb-0, not dirty: {:#?}",
        report.bound
    );
    assert!(
        report.events.contains_key("failover"),
        "the scenario must reach the take-over: {:#?}",
        report.events
    );
}

/// Runtime r0 served on cb-0; Runtime r1 of the same tenant is decided onto cb-0 by reuse and
/// whatever the reuse writes on cb-0 before the status lands; then the leader pauses with r1's
/// status write `Bound(cb-0)` in flight. r0 is deleted, and the next leader cleans up r0's claim
/// and decides its release; the held status lands after that.
/// `record`: the use writes its record first (one more write before the held status).
fn late_reuse_status_after_the_next_leaders_release(record: bool) -> Vec<Step> {
    use Step::*;
    let mut steps = runtime_served();
    steps.extend([
        Create { obj: 3, tenant: 0 },
        Call(0), // r1: lookup
        Call(0), // r1: its claim (w6) created
        Sweep,   // w6: reuse (or fill) cb-0
    ]);
    if record {
        steps.push(Execute(0)); // the write on cb-0 before the status
    }
    steps.extend([
        Failover, // w6's status write held in flight
        Delete(2),
    ]);
    steps.extend(ticks(GRACE as usize + 1));
    steps.extend([
        Deliver {
            kind: CLAIMS,
            n: 10,
        },
        Gc(0), // w2, r0's claim
        Gc(0),
        Gc(0),
        Gc(0), // deleted
        Deliver {
            kind: CLAIMS,
            n: 10,
        },
        Reconcile(0), // w2's release: cb-0 is still in use by w6, whose status is in flight
        Execute(0),
        Execute(0),
        Zombie, // w6's status lands
    ]);
    steps
}

/// The mirror of the late dirty mark: a paused leader's late reuse status lands after the next
/// leader released the tenant's other claim on the binding. A release that counted only Bound
/// claims and Shoots saw nobody on cb-0 and marked it dirty; r1's claim then lands Bound on a
/// dirty binding. The reuse's record on cb-0 is counted by the release, which keeps it.
#[test]
fn a_paused_leaders_late_reuse_status_never_lands_on_a_binding_the_next_leader_released() {
    let steps = late_reuse_status_after_the_next_leaders_release(true);
    let without = late_reuse_status_after_the_next_leaders_release(false);
    let report =
        fails_without_the_use_record(&one_binding(false), (&without, &steps), "dirty while");
    for case in [
        "a paused leader's write landed late",
        "a release waited for a claim recorded on its binding",
    ] {
        assert!(
            report.events.contains_key(case),
            "the scenario must reach {case:?}: {:#?}",
            report.events
        );
    }
}

/// The same for a multi-account tenant: r1's claim fills cb-0 (limit 2), and the fill's record
/// (`accountpool.io/filling`) is on cb-0 when the next leader lists it. A release that ignored
/// the record marked cb-0 dirty under the fill whose status was still in flight.
#[test]
fn a_paused_leaders_late_fill_status_never_lands_on_a_binding_the_next_leader_released() {
    let steps = late_reuse_status_after_the_next_leaders_release(true);
    let without = late_reuse_status_after_the_next_leaders_release(false);
    let setup = Setup {
        bindings: 1,
        direct: None,
        multi: true,
    };
    let report = fails_without_the_use_record(&setup, (&without, &steps), "dirty while");
    for case in [
        "a paused leader's write landed late",
        "a release waited for a claim recorded on its binding",
    ] {
        assert!(
            report.events.contains_key(case),
            "the scenario must reach {case:?}: {:#?}",
            report.events
        );
    }
}

/// Found by the property test in CI after the account-race work: the clean-up deletes claim w2
/// (no object stored in time) while the leader's claim write of cb-0 for it is decided; the
/// leader pauses with that write in flight, the next leader finds w2 deleting and Bound to
/// nothing and lets it go, and the paused write lands on a binding whose version nothing moved.
#[test]
fn a_paused_claim_write_landing_after_its_claim_went_is_given_back() {
    use Step::*;
    let mut steps = vec![Create { obj: 0, tenant: 0 }; 5];
    steps.extend([Call(6), Call(2)]);
    steps.extend(ticks(4));
    steps.extend([Create { obj: 0, tenant: 0 }, Create { obj: 0, tenant: 0 }]);
    steps.extend(ticks(4));
    steps.extend([
        Sweep,
        Gc(0),
        Gc(0),
        Gc(0),
        Gc(0),
        Failover,
        Reconcile(0),
        Execute(0),
    ]);
    let setup = Setup {
        bindings: 2,
        direct: None,
        multi: false,
    };
    let report = run(Protocol::New, &setup, &steps);
    assert!(report.violations.is_empty(), "{}", report.show());
}

/// Found by the property test (40 000 cases) once claim writes were recorded: w4 (tenant t0)
/// is decided onto cb-2 and its leader pauses with the claim write in flight (its record
/// landed); the next leader, whose list lacks the write, decides w7 of the same single-account
/// tenant onto cb-0; the late write lands and w4 uses cb-2: t0 runs clusters in two accounts of
/// one pool (§5.2). Now a claim of the tenant waits while another claim of it records a write
/// that may still land on a free binding of the pool (`selection::claimant::recorded_write_in`),
/// and settles it (`controller::claim_write::settle_for`).
#[test]
fn a_tenants_claim_waits_for_another_claims_recorded_write_that_may_still_land() {
    use Step::*;
    let steps = [
        Create { obj: 1, tenant: 1 },
        Tick,
        Call(0),
        Create { obj: 3, tenant: 0 },
        Call(1),
        Create { obj: 0, tenant: 0 },
        Call(2),
        Call(7),
        Call(3),
        Tick,
        Tick,
        Create { obj: 0, tenant: 0 },
        Create { obj: 0, tenant: 0 },
        Call(4),
        Zombie,
        Call(2),
        Create { obj: 0, tenant: 0 },
        Deliver { kind: 1, n: 3 },
        Create { obj: 0, tenant: 0 },
        Reconcile(3), // w4: claim cb-2
        Failover,     // its record lands; the claim write is held in flight
        Reconcile(1),
        Create { obj: 0, tenant: 0 },
        Create { obj: 0, tenant: 0 },
        Reconcile(2), // w7, same tenant: waits for w4's recorded write (was: claim cb-0)
    ];
    let setup = Setup {
        bindings: 3,
        direct: None,
        multi: false,
    };
    let report = run(Protocol::New, &setup, &steps);
    assert!(report.violations.is_empty(), "{}", report.show());
}
