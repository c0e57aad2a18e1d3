//! One operator replica on the request-source path: the claim controller's reconcile split into
//! its decision and its writes around the real ledger, selection and `decide_release`, as
//! `tests/it/simulation/operator.rs` does for AccountClaims, plus the source path's own rules for
//! each protocol (`Protocol`). Claim writes carry the claimed-by record, and a claim bound to a
//! binding it did not claim records itself there first (the real `before_use`), as the product
//! does. The source clean-up (GC) is the world's, since it reads the
//! request objects; its progress lives here so that a paused leader keeps it.

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Instant;

use hap_operator::api::PendingClaimWrite;
use hap_operator::api::ReleaseMode;
use hap_operator::ledger::{Ledger, Outcome};
use hap_operator::pools::{ClaimView, Inventory, Kind};
use hap_operator::release::{
    ClaimWriteNow, Origin, Presence, Release, claim_write_indexed, claim_write_now, decide_release,
};
use hap_operator::selection::claimant::recorded_writes;
use hap_operator::selection::{
    BeforeUse, Choice, MultiAccountPolicy, Request, WriteState, before_use, select, strays_of,
};

pub use super::api::trace;
use super::api::{
    Api, BINDINGS, CLAIMS, Change, Claim, Obj, Phase, RECORDED, Refused, SHOOTS, Writer, apply,
    claim_view, kind_of, pools,
};

/// Which source path runs: today's code, or the one issue 19 asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Old,
    New,
}

thread_local! {
    /// The use record switched off (`without_use_record`).
    static NO_USE_RECORD: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` with the binding-record protocol switched off, as the version before it ran: a use
/// writes nothing on the binding before its status, and a release does not count the records
/// (where it would wait for a recorded claim it marks the binding dirty). Only to show that the
/// late-write scenarios fail without the protocol.
pub fn without_use_record<T>(f: impl FnOnce() -> T) -> T {
    NO_USE_RECORD.with(|c| c.set(true));
    let out = f();
    NO_USE_RECORD.with(|c| c.set(false));
    out
}

fn use_record_off() -> bool {
    NO_USE_RECORD.with(Cell::get)
}

/// The next write of a reconcile in progress.
#[derive(Clone, Debug)]
pub enum Write {
    Claim {
        binding: String,
        base: u64,
        tenant: String,
    },
    /// The record of a use (`FILLING`: the claims being bound there), claimed-by removed, before
    /// its status.
    Record {
        binding: String,
        base: u64,
        claims: String,
    },
    Status {
        base: u64,
        phase: Phase,
    },
    /// A stray binding of this Bound claim given back clean (`selection::strays_of`).
    GiveBack {
        binding: String,
        base: u64,
    },
    /// `dirty=true`, or with `clean` the tenant and claimed-by labels removed (free again).
    Release {
        binding: String,
        base: u64,
        clean: bool,
    },
    Finalizer,
    /// The record of a claim write in the claim's status (`status.claimWrite`), before it.
    Intent {
        base: u64,
        binding: String,
        binding_base: u64,
    },
    /// The fence of an earlier recorded claim write that could still land
    /// (`controller::claim_write`).
    Fence {
        binding: String,
        base: u64,
        writer: String,
    },
}

/// What the release of a source claim reads beyond the index: the API server and the record of
/// what the claim served.
pub trait Sources {
    /// A live read: an object of the claim's kind and name exists now.
    fn exists(&self, claim: &Claim) -> bool;
    /// The claim carries its object's UID: the source pass saw the object stored.
    fn existed(&self, claim: &Claim) -> bool;
    /// A live read of a binding: its resourceVersion and claimed-by record.
    fn binding_now(&self, name: &str) -> Option<(u64, Option<String>)>;
}

/// The source clean-up of one claim in progress: read the claim, check its object, delete.
#[derive(Clone, Debug)]
pub struct Gc {
    pub uid: String,
    /// The resourceVersion the read took (NEW): the delete's precondition.
    pub rv: Option<u64>,
    pub phase: GcPhase,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GcPhase {
    Read,
    Check,
    Delete,
}

pub struct Replica {
    pub id: usize,
    /// The claim controller's store, as its watch delivered it.
    store: BTreeMap<String, Claim>,
    ledger: Ledger,
    /// How far each watch got in the API server's log of that kind.
    pub pos: [usize; 3],
    pub plans: BTreeMap<String, VecDeque<Write>>,
    pub gc: Option<Gc>,
    /// Releases that waited for a claim recorded on their binding (`Release::WaitForUse`).
    pub waited_for_use: usize,
}

/// The objects of one kind as of the first `pos` changes of its log.
fn state_at(api: &Api, kind: usize, pos: usize) -> BTreeMap<String, Obj> {
    let mut out = BTreeMap::new();
    for c in &api.logs[kind][..pos] {
        match &c.obj {
            Some(o) => out.insert(c.key.clone(), o.clone()),
            None => out.remove(&c.key),
        };
    }
    out
}

/// The release of a deleting source claim, as the claim controller takes it: the real
/// `decide_release` with the claim's origin (OLD: today's code read no object, so every source
/// claim is released as a user's, dirty); NEW: when the decision asks for the object, the live
/// read answers and the decision is taken again.
fn source_release(
    p: Protocol,
    view: &ClaimView,
    inv: &Inventory,
    inflight: &hap_operator::selection::InFlight,
    now: Instant,
    exists: bool,
    existed: bool,
) -> Release {
    let mode = ReleaseMode::MarkDirty;
    if p == Protocol::Old {
        return decide_release(view, inv, inflight, mode, Origin::User, now);
    }
    let unread = Origin::Source {
        existed,
        now: Presence::Unread,
    };
    let d = decide_release(view, inv, inflight, mode, unread, now);
    if !matches!(d, Release::ReadSource { .. }) {
        return d;
    }
    let now_is = if exists {
        Presence::Exists
    } else {
        Presence::Gone
    };
    let read = Origin::Source {
        existed,
        now: now_is,
    };
    decide_release(view, inv, inflight, mode, read, now)
}

/// NEW: bindings without a tenant that a Shoot already names are never claimable, whoever runs
/// the Shoot (issue 19, defect 3).
fn in_use_without_tenant(p: Protocol, inv: &Inventory) -> BTreeSet<String> {
    if p == Protocol::Old {
        return BTreeSet::new();
    }
    let tenant = &inv.keys().tenant_name;
    inv.bindings()
        .filter(|e| !e.view.labels.contains_key(tenant))
        .filter(|e| !inv.clusters_on(&e.view.name).is_empty())
        .map(|e| e.view.name.clone())
        .collect()
}

impl Replica {
    /// A replica started now (or taking over): it lists everything as the API server has it.
    pub fn start(id: usize, api: &Api) -> Self {
        let mut r = Replica {
            id,
            store: BTreeMap::new(),
            ledger: Ledger::default(),
            pos: [0; 3],
            plans: BTreeMap::new(),
            gc: None,
            waited_for_use: 0,
        };
        for kind in [BINDINGS, CLAIMS, SHOOTS] {
            let objects = state_at(api, kind, api.logs[kind].len());
            let relist = r.ledger.begin_relist(kind_of(kind));
            for o in objects.values() {
                apply(&mut r.ledger, o);
            }
            let rv = api.rv.to_string();
            r.ledger.end_relist(kind_of(kind), relist, Some(&rv));
            if kind == CLAIMS {
                r.store = objects
                    .into_iter()
                    .filter_map(|(k, o)| match o {
                        Obj::Claim(c) => Some((k, c)),
                        _ => None,
                    })
                    .collect();
            }
            r.pos[kind] = api.logs[kind].len();
        }
        r
    }

    /// Up to `n` watch events of one kind reach the replica: the ledger first, then the store.
    pub fn deliver(&mut self, api: &Api, kind: usize, n: usize) {
        let end = self.pos[kind].saturating_add(n).min(api.logs[kind].len());
        let changes: Vec<Change> = api.logs[kind][self.pos[kind]..end].to_vec();
        self.pos[kind] = end;
        for c in changes {
            match &c.obj {
                Some(o) => apply(&mut self.ledger, o),
                None => {
                    let rv = c.rv.to_string();
                    match kind {
                        BINDINGS => self.ledger.delete_binding(&c.key, Some(&rv)),
                        CLAIMS => self.ledger.delete_claim(&c.key, Some(&rv)),
                        _ => self.ledger.delete_shoot(&c.key, Some(&rv)),
                    }
                }
            }
            if kind == CLAIMS {
                match c.obj {
                    Some(Obj::Claim(claim)) => self.store.insert(c.key.clone(), claim),
                    _ => self.store.remove(&c.key),
                };
            }
        }
    }

    /// Claims the replica's store holds, by uid.
    pub fn claims(&self) -> Vec<Claim> {
        self.store.values().cloned().collect()
    }

    /// The reconcile's decision for one claim; its writes run in later steps.
    pub fn reconcile(
        &mut self,
        uid: &str,
        p: Protocol,
        policy: &MultiAccountPolicy,
        sources: &dyn Sources,
        now: Instant,
    ) {
        if self.plans.contains_key(uid) {
            return;
        }
        let Some(c) = self.store.get(uid).cloned() else {
            return;
        };
        let inv = &self.ledger.inventory;
        if inv.knows_later(Kind::Claim, uid, Some(&c.rv.to_string()))
            || self.ledger.inflight.is_finished(uid, now)
        {
            return;
        }
        let plan = if c.deleting {
            self.release(&c, p, sources, now)
        } else if let Some(b) = c.recorded() {
            // A stray of the claim goes back first (`selection::strays_of`), as in the product.
            let mut plan = give_backs(inv, &self.ledger.inflight, &c, now);
            let phase = Phase::Bound(b.to_string());
            if c.phase != phase {
                plan.push_back(Write::Status { base: c.rv, phase });
            }
            plan
        } else {
            self.select(&c, p, policy, sources, now)
        };
        if !plan.is_empty() {
            self.plans.insert(uid.to_string(), plan);
        }
    }

    fn release(
        &mut self,
        c: &Claim,
        p: Protocol,
        sources: &dyn Sources,
        now: Instant,
    ) -> VecDeque<Write> {
        if let Some(first) = self.settle(c, sources, now) {
            return first;
        }
        let view = claim_view(c);
        let (inv, inflight) = (&self.ledger.inventory, &mut self.ledger.inflight);
        let (exists, existed) = (sources.exists(c), sources.existed(c));
        let mut d = source_release(p, &view, inv, inflight, now, exists, existed);
        if let Release::WaitForUse { binding, .. } = &d
            && use_record_off()
        {
            // As then: an assignment this replica is writing there keeps the binding.
            let assigned = inflight.assigned(now);
            let others = assigned
                .get(binding.as_str())
                .map_or(0, |m| m.keys().filter(|u| **u != view.uid).count());
            let rv = inv
                .binding(binding)
                .and_then(|e| e.view.resource_version.clone());
            d = if others > 0 {
                Release::Keep(hap_operator::release::KeepReason::InUse { clusters: others })
            } else {
                Release::MarkDirty {
                    binding: binding.clone(),
                    expected_resource_version: rv,
                }
            };
        }
        trace(|| format!("  replica {} releases {}: {d:?}", self.id, c.uid));
        if matches!(d, Release::WaitForUse { .. }) {
            self.waited_for_use += 1;
        }
        // Before the claim goes, as in the product (`controller::strays`).
        let mut plan = give_backs(inv, inflight, c, now);
        match d {
            Release::MarkDirty {
                binding,
                expected_resource_version: Some(rv),
            } => release_write(inflight, &mut plan, binding, &rv, false, now),
            Release::ReleaseClean {
                binding,
                expected_resource_version: Some(rv),
            } => release_write(inflight, &mut plan, binding, &rv, true, now),
            Release::Resolve {
                binding,
                expected_resource_version,
            } => {
                let pool = inflight.claim_of(&binding, now).map(|p| p.pool.clone());
                if let (Some(pool), Some(base)) = (pool, expected_resource_version.clone()) {
                    let retry = Choice::Claim {
                        binding: binding.clone(),
                        expected_resource_version,
                    };
                    inflight.record(&view, &pool, &retry, now);
                    inflight.drop_assignment(&c.uid);
                    let base = base.parse().unwrap_or(0);
                    let tenant = c.tenant.clone();
                    plan.push_back(Write::Claim {
                        binding,
                        base,
                        tenant,
                    });
                }
            }
            Release::MarkDirty { .. }
            | Release::ReleaseClean { .. }
            | Release::ReadSource { .. }
            | Release::WaitForSource { .. }
            | Release::WaitForShoot { .. }
            | Release::WaitForSibling { .. }
            | Release::WaitForWrite { .. }
            | Release::WaitForUse { .. } => {}
            Release::Keep(_) => plan.push_back(Write::Finalizer),
        }
        plan
    }

    fn select(
        &mut self,
        c: &Claim,
        p: Protocol,
        policy: &MultiAccountPolicy,
        sources: &dyn Sources,
        now: Instant,
    ) -> VecDeque<Write> {
        let unsettled = self.settle(c, sources, now);
        let others = self.settle_for(c, sources, now);
        let view = claim_view(c);
        let (inv, inflight) = (&self.ledger.inventory, &mut self.ledger.inflight);
        if inflight
            .assignment_of(&c.uid, now)
            .is_some_and(|a| a.state == WriteState::Written)
        {
            return VecDeque::new();
        }
        let pool = &pools()[c.pool];
        let req = Request {
            claim: &view,
            pool,
            provider_type: "aws",
        };
        // A copy without them stands in for a selection that skips them itself.
        let in_use = in_use_without_tenant(p, inv);
        let mut shown = None;
        if !in_use.is_empty() {
            let mut copy = inv.clone();
            for b in &in_use {
                copy.delete_binding(b, None);
            }
            shown = Some(copy);
        }
        let inv = shown.as_ref().unwrap_or(inv);
        let choice = select(inv, inflight, &req, policy, &BTreeSet::new(), now);
        trace(|| format!("  replica {} decides {}: {choice:?}", self.id, c.uid));
        let before = before_use(inv, inflight, &c.uid, &choice, now);
        let mut plan = VecDeque::new();
        match before {
            BeforeUse::Wait { .. } => return plan,
            BeforeUse::Record { .. } if use_record_off() => {}
            BeforeUse::Record {
                binding,
                expected_resource_version,
                claims,
            } => {
                let base = expected_resource_version
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                plan.push_back(Write::Record {
                    binding,
                    base,
                    claims,
                });
            }
            BeforeUse::Bind => {}
        }
        if let (Choice::Wait { .. }, Some(first)) = (&choice, others) {
            // As `controller::claim`: a claim waiting for another's recorded write settles it.
            return first;
        }
        if let (Choice::Claim { binding, .. }, Some(first)) = (&choice, unsettled)
            && c.intent.as_ref().is_none_or(|(b, _)| b != binding)
        {
            // As `controller::claim_write::record`: the earlier write settles first.
            return first;
        }
        inflight.record(&view, pool, &choice, now);
        let phase = match choice {
            Choice::Use { binding, .. } | Choice::Bound { binding } => Phase::Bound(binding),
            Choice::Claim {
                binding,
                expected_resource_version,
            } => {
                let base = expected_resource_version
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                plan.push_back(Write::Intent {
                    base: c.rv,
                    binding: binding.clone(),
                    binding_base: base,
                });
                plan.push_back(Write::Claim {
                    binding: binding.clone(),
                    base,
                    tenant: c.tenant.clone(),
                });
                Phase::Bound(binding)
            }
            Choice::Wait { .. } => Phase::Pending("Progressing".into()),
            Choice::Exhausted { .. } => Phase::Pending("PoolExhausted".into()),
            Choice::Lost { binding, .. } => Phase::Failed(binding),
        };
        if phase != c.phase {
            plan.push_back(Write::Status { base: c.rv, phase });
        }
        plan
    }

    /// The claim write `c`'s status records, settled as `controller::claim_write::settle` does:
    /// `None` to go on, or the plan that comes first (the fence of a write that could still
    /// land; nothing while one that landed is still to reach the index).
    fn settle(&self, c: &Claim, sources: &dyn Sources, now: Instant) -> Option<VecDeque<Write>> {
        let (b, base) = c.intent.clone()?;
        let base = base.to_string();
        if c.recorded() == Some(b.as_str()) || self.own(&c.uid, (&b, &base), now) {
            return None;
        }
        let write = PendingClaimWrite {
            binding: b,
            resource_version: base,
            ..Default::default()
        };
        self.judge(&c.uid, &write, sources)
    }

    /// Another claim of `c`'s tenant's recorded write, settled by `c` as
    /// `controller::claim_write::settle_for` does.
    fn settle_for(
        &self,
        c: &Claim,
        sources: &dyn Sources,
        now: Instant,
    ) -> Option<VecDeque<Write>> {
        let view = claim_view(c);
        let pool = &pools()[c.pool];
        let (uid, w) = recorded_writes(&self.ledger.inventory, &view)
            .filter(|(_, _, p)| *p == pool)
            .find(|(o, w, _)| !self.own(&o.uid, (&w.binding, &w.resource_version), now))
            .map(|(o, w, _)| (o.uid.clone(), w.clone()))?;
        self.judge(&uid, &w, sources)
    }

    /// Whether this replica has `uid`'s claim write of `binding` at `base` in flight.
    fn own(&self, uid: &str, (binding, base): (&str, &str), now: Instant) -> bool {
        let made = self.ledger.inflight.claim_of(binding, now);
        made.is_some_and(|p| p.claim_uid == uid && p.base_resource_version.as_deref() == Some(base))
    }

    /// Claim `uid`'s recorded write `w` judged on a live read of its binding.
    fn judge(
        &self,
        uid: &str,
        w: &PendingClaimWrite,
        sources: &dyn Sources,
    ) -> Option<VecDeque<Write>> {
        let indexed = claim_write_indexed(&self.ledger.inventory, w, uid);
        if matches!(indexed, Some(ClaimWriteNow::Landed | ClaimWriteNow::Void)) {
            return None;
        }
        let live = sources.binding_now(&w.binding);
        let live = live.as_ref().map(|(rv, by)| (rv.to_string(), by.clone()));
        let live = live.as_ref().map(|(rv, by)| (rv.as_str(), by.as_deref()));
        match claim_write_now(w, uid, live) {
            ClaimWriteNow::Void => None,
            ClaimWriteNow::Landed => Some(VecDeque::new()),
            ClaimWriteNow::MayLand => Some(VecDeque::from([Write::Fence {
                binding: w.binding.clone(),
                base: w.resource_version.parse().unwrap_or(0),
                writer: uid.to_string(),
            }])),
        }
    }

    /// Bindings the HapConfig status reports as orphans (a tenant, no cluster), as this replica
    /// sees them.
    pub fn reported(&self) -> BTreeSet<String> {
        let inv = &self.ledger.inventory;
        inv.orphans(&BTreeSet::new())
            .into_iter()
            .map(|o| o.binding)
            .collect()
    }

    /// Takes the next write of the reconcile of `uid` out of its plan (a held write).
    pub fn take(&mut self, uid: &str) -> Option<Write> {
        let write = self.plans.get_mut(uid).and_then(VecDeque::pop_front);
        if self.plans.get(uid).is_some_and(VecDeque::is_empty) {
            self.plans.remove(uid);
        }
        write
    }

    /// Sends the next write of the reconcile of `uid`; a refusal ends the reconcile. The record
    /// of a claim write and the claim write go in one step (`next_unit`).
    pub fn execute(&mut self, uid: &str, api: &mut Api, now: Instant) {
        let Some(write) = self.next_unit(uid, api, now) else {
            self.plans.remove(uid);
            return;
        };
        if !self.send(uid, &write, api, now) {
            self.plans.remove(uid);
        }
    }

    /// The next write of `uid`'s plan to send; a record of a claim write ahead of it is sent
    /// first (`None` when it is refused: the claim write is never sent). One step, so that the
    /// scenarios count a claim write as one; the interleaving that matters, the record landed
    /// and the claim write held in flight, is what a failover holds (`World::failover`).
    pub fn next_unit(&mut self, uid: &str, api: &mut Api, now: Instant) -> Option<Write> {
        let write = self.take(uid)?;
        if !matches!(write, Write::Intent { .. }) {
            return Some(write);
        }
        if !self.send(uid, &write, api, now) {
            return None;
        }
        self.take(uid)
    }

    /// Sends one write and records its outcome; whether the server took it.
    pub fn send(&mut self, uid: &str, write: &Write, api: &mut Api, now: Instant) -> bool {
        let by = Writer {
            replica: self.id,
            claim: uid.to_string(),
        };
        let sent: Result<(), Refused> = match write {
            Write::Claim {
                binding,
                base,
                tenant,
            } => api.claim_binding(binding, *base, tenant, &by).map(drop),
            Write::Record {
                binding,
                base,
                claims,
            } => api.record_use(binding, *base, claims, &by).map(drop),
            Write::Status { base, phase } => {
                api.set_status(uid, *base, phase.clone(), &by).map(drop)
            }
            Write::Release {
                binding,
                base,
                clean: false,
            } => api
                .set_label(binding, *base, "dirty", "true", &by)
                .map(drop),
            Write::Release {
                binding,
                base,
                clean: true,
            } => api.release_clean(binding, *base, &by).map(drop),
            Write::GiveBack { binding, base } => api.release_clean(binding, *base, &by).map(drop),
            Write::Finalizer => api.remove_finalizer(uid),
            Write::Intent {
                base,
                binding,
                binding_base,
            } => api
                .record_claim_write(uid, *base, binding, *binding_base)
                .map(|rv| self.rebase(uid, *base, rv)),
            Write::Fence {
                binding,
                base,
                writer,
            } => api.fence(binding, *base, writer).map(drop),
        };
        let outcome = if sent.is_ok() {
            Outcome::Written
        } else {
            Outcome::Refused
        };
        let l = &mut self.ledger;
        match write {
            Write::Claim { binding, .. } => l.claim_outcome(binding, outcome, now),
            Write::Status {
                phase: Phase::Bound(_),
                ..
            } => l.assignment_outcome(uid, outcome, now),
            // No status was written: the claim is not being assigned any more.
            Write::Record { .. } if outcome == Outcome::Refused => {
                l.assignment_outcome(uid, outcome, now)
            }
            Write::Release { binding, .. } => l.release_outcome(binding, outcome, now),
            Write::Finalizer if outcome == Outcome::Written => l.inflight.forget_claim(uid, now),
            // The claim write is never sent.
            Write::Intent { binding, .. } if outcome == Outcome::Refused => {
                l.claim_outcome(binding, outcome, now)
            }
            _ => {}
        }
        sent.is_ok()
    }
}

impl Replica {
    /// The status writes planned on the claim's version `from` are made on `to`, the version the
    /// record of its claim write left (as the product carries the claim it wrote on).
    fn rebase(&mut self, uid: &str, from: u64, to: u64) {
        for w in self.plans.get_mut(uid).into_iter().flatten() {
            if let Write::Status { base, .. } = w
                && *base == from
            {
                *base = to;
            }
        }
    }
}

/// The strays of a claim given back clean (`selection::strays_of`).
fn give_backs(
    inv: &Inventory,
    inflight: &hap_operator::selection::InFlight,
    c: &Claim,
    now: Instant,
) -> VecDeque<Write> {
    strays_of(inv, inflight, &claim_view(c), now)
        .into_iter()
        .map(|(binding, rv)| Write::GiveBack {
            binding,
            base: rv.and_then(|v| v.parse().ok()).unwrap_or(0),
        })
        .collect()
}

/// A release write, recorded as started before it is sent, then the finalizer.
fn release_write(
    inflight: &mut hap_operator::selection::InFlight,
    plan: &mut VecDeque<Write>,
    binding: String,
    rv: &str,
    clean: bool,
    now: Instant,
) {
    inflight.release_started(&binding, Some(rv.to_string()), now);
    let base = rv.parse().unwrap_or(0);
    plan.push_back(Write::Release {
        binding,
        base,
        clean,
    });
    plan.push_back(Write::Finalizer);
}

/// Runs `f` with its trace kept, and returns the trace with its result.
pub fn recorded<T>(f: impl FnOnce() -> T) -> (T, Vec<String>) {
    RECORDED.set(Some(Vec::new()));
    let out = f();
    (out, RECORDED.take().unwrap_or_default())
}
