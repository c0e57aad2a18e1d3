//! One operator replica as the simulation runs it: the controller's reconcile of a claim split
//! into its decision and its writes, so that other steps interleave, around the real ledger
//! (index and in-flight records), selection, release and leadership fence. It mirrors
//! `controller::claim` and `controller::release` step for step; only the API calls are the
//! simulated server's.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use hap_operator::api::ReleaseMode;
use hap_operator::leadership::Fence;
use hap_operator::ledger::{Ledger, Outcome};
use hap_operator::pools::Kind;
use hap_operator::release::{Origin, Release, decide_release};
use hap_operator::selection::{
    Choice, MultiAccountPolicy, Request, WriteState, check_bound, select,
};

use super::api::{
    Api, BINDINGS, CLAIMS, Change, Claim, Obj, Phase, Refused, SHOOTS, Writer, apply, claim_view,
    kind_of, pools,
};

/// The next write of a reconcile in progress.
#[derive(Clone, Debug)]
pub enum Write {
    Claim {
        binding: String,
        base: u64,
        tenant: String,
    },
    Status {
        base: u64,
        phase: Phase,
    },
    Release {
        binding: String,
        base: u64,
    },
    Finalizer,
}

/// How the simulated network treats one write.
#[derive(Clone, Copy, Debug)]
pub enum Net {
    /// The answer arrives.
    Answered,
    /// The server commits (or refuses) it but the answer is lost: a timeout.
    LostAnswer,
    /// The request never reaches the server, and the client cannot tell.
    LostRequest,
}

pub struct Replica {
    pub id: usize,
    /// The claim controller's store (a reflector: a re-list replaces it, stale or not).
    store: BTreeMap<String, Claim>,
    ledger: Ledger,
    fence: Fence,
    pub plans: BTreeMap<String, VecDeque<Write>>,
    /// A watch restarted and has not listed yet: nothing can be decided (`decidable()`).
    unready: bool,
}

impl Replica {
    /// A replica started now: it lists everything as the API server has it; writes nothing
    /// until it leads.
    pub fn start(id: usize, api: &Api) -> Self {
        let mut r = Replica {
            id,
            store: BTreeMap::new(),
            ledger: Ledger::default(),
            fence: Fence::closed(),
            plans: BTreeMap::new(),
            unready: false,
        };
        for kind in [BINDINGS, CLAIMS, SHOOTS] {
            r.relist(
                kind,
                state_at(api, kind, api.logs[kind].len()),
                Some(api.rv),
            );
        }
        r
    }

    /// Watch events of one kind reach the replica: the ledger first, then the claim store.
    pub fn deliver(&mut self, kind: usize, changes: &[Change]) {
        self.unready = false;
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
                match &c.obj {
                    Some(Obj::Claim(claim)) => self.store.insert(c.key.clone(), claim.clone()),
                    _ => self.store.remove(&c.key),
                };
            }
        }
    }

    /// A re-list of one kind, possibly from a stale watch cache.
    pub fn relist(&mut self, kind: usize, objects: BTreeMap<String, Obj>, list_rv: Option<u64>) {
        let relist = self.ledger.begin_relist(kind_of(kind));
        for o in objects.values() {
            apply(&mut self.ledger, o);
        }
        let rv = list_rv.map(|v| v.to_string());
        self.ledger.end_relist(kind_of(kind), relist, rv.as_deref());
        if kind == CLAIMS {
            self.store = objects
                .into_iter()
                .filter_map(|(k, o)| match o {
                    Obj::Claim(c) => Some((k, c)),
                    _ => None,
                })
                .collect();
        }
    }

    /// Older views than the last one do not exist any more (the index is kept, not rebuilt); what
    /// can happen is a watch that restarted and has not listed yet: until the next delivery the
    /// replica cannot decide.
    pub fn lag(&mut self, _back: usize) {
        self.unready = true;
    }

    /// Takeover: one consistent list of bindings and claims into the ledger (not the store).
    pub fn lead(&mut self, api: &Api) {
        for kind in [BINDINGS, CLAIMS] {
            let objects = state_at(api, kind, api.logs[kind].len());
            let relist = self.ledger.begin_relist(kind_of(kind));
            for o in objects.values() {
                apply(&mut self.ledger, o);
            }
            self.ledger
                .end_relist(kind_of(kind), relist, Some(&api.rv.to_string()));
        }
    }

    /// The lease was renewed at `now` (by a request sent then).
    pub fn renew(&mut self, now: Instant, lease: Duration) {
        self.fence.renewed(now, lease, Duration::ZERO);
    }

    /// Claims the replica's store holds, by uid.
    pub fn claims(&self) -> Vec<String> {
        self.store.keys().cloned().collect()
    }

    /// The reconcile's decision for one claim; its writes run in later steps.
    pub fn reconcile(&mut self, uid: &str, policy: &MultiAccountPolicy, now: Instant) {
        if self.plans.contains_key(uid) {
            return;
        }
        let Some(c) = self.store.get(uid).cloned() else {
            return;
        };
        if self
            .ledger
            .inventory
            .knows_later(Kind::Claim, uid, Some(&c.rv.to_string()))
            || self.ledger.inflight.is_finished(uid, now)
        {
            return;
        }
        let view = claim_view(&c);
        let mut plan = VecDeque::new();
        if self.unready {
            // As controller::claim: a recorded binding is left alone, a deletion waits, others
            // say why.
            let phase = Phase::Pending("InventoryUnavailable".into());
            if !c.deleting && c.recorded().is_none() && c.phase != phase {
                let write = Write::Status { base: c.rv, phase };
                self.plans.insert(uid.to_string(), VecDeque::from([write]));
            }
            return;
        }
        let (inv, inflight) = (&self.ledger.inventory, &mut self.ledger.inflight);
        if c.deleting {
            // The simulated claims are users' AccountClaims.
            let d = decide_release(
                &view,
                inv,
                inflight,
                ReleaseMode::MarkDirty,
                Origin::User,
                now,
            );
            if std::env::var("HAP_SIM_TRACE").is_ok() {
                eprintln!("  replica {} releases {uid}: {d:?}", self.id);
            }
            match d {
                Release::MarkDirty {
                    binding,
                    expected_resource_version: Some(rv),
                } => {
                    inflight.release_started(&binding, Some(rv.clone()), now);
                    let base = rv.parse().unwrap_or(0);
                    plan.push_back(Write::Release { binding, base });
                    plan.push_back(Write::Finalizer);
                }
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
                        inflight.drop_assignment(uid);
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
                | Release::WaitForShoot { .. }
                | Release::WaitForSibling { .. }
                | Release::WaitForWrite { .. }
                | Release::WaitForUse { .. }
                | Release::ReleaseClean { .. }
                | Release::ReadSource { .. }
                | Release::WaitForSource { .. } => {}
                Release::Keep(_) => plan.push_back(Write::Finalizer),
            }
        } else if let Some(b) = c.recorded() {
            let phase = match check_bound(inv, inflight, &view, now) {
                Some(Choice::Lost { .. }) => Phase::Failed(b.to_string()),
                _ => Phase::Bound(b.to_string()),
            };
            if phase != c.phase {
                plan.push_back(Write::Status { base: c.rv, phase });
            }
        } else {
            if inflight
                .assignment_of(uid, now)
                .is_some_and(|a| a.state == WriteState::Written)
            {
                return;
            }
            let pool = &pools()[c.pool];
            let req = Request {
                claim: &view,
                pool,
                provider_type: "aws",
            };
            let choice = select(inv, inflight, &req, policy, &Default::default(), now);
            if std::env::var("HAP_SIM_TRACE").is_ok() {
                let owned = inv.owned_by(pool, &c.tenant);
                let b: Vec<_> = inv
                    .bindings()
                    .map(|e| (e.view.name.clone(), e.view.resource_version.clone()))
                    .collect();
                eprintln!(
                    "  replica {} decides {uid}: {choice:?}; owned {owned:?}; bindings {b:?}; {:?}",
                    self.id, inflight
                );
            }
            inflight.record(&view, pool, &choice, now);
            let pending = |reason: &str| Phase::Pending(reason.to_string());
            let phase = match choice {
                Choice::Use { binding, .. } => Phase::Bound(binding),
                Choice::Claim {
                    binding,
                    expected_resource_version,
                } => {
                    let base = expected_resource_version
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0);
                    let tenant = c.tenant.clone();
                    plan.push_back(Write::Claim {
                        binding: binding.clone(),
                        base,
                        tenant,
                    });
                    Phase::Bound(binding)
                }
                Choice::Wait { .. } => pending("Progressing"),
                Choice::Exhausted { .. } => pending("PoolExhausted"),
                Choice::Bound { binding } => Phase::Bound(binding),
                Choice::Lost { binding, .. } => Phase::Failed(binding),
            };
            if phase != c.phase {
                plan.push_back(Write::Status { base: c.rv, phase });
            }
        }
        if !plan.is_empty() {
            self.plans.insert(uid.to_string(), plan);
        }
    }

    /// Sends the next write of the reconcile of `uid` (the caller checked the fence).
    pub fn execute(&mut self, uid: &str, api: &mut Api, net: Net, now: Instant) {
        let Some(write) = self.plans.get_mut(uid).and_then(VecDeque::pop_front) else {
            return;
        };
        let by = Writer {
            replica: self.id,
            claim: uid.to_string(),
        };
        let send = |api: &mut Api| -> Result<(), Refused> {
            match &write {
                Write::Claim {
                    binding,
                    base,
                    tenant,
                } => api
                    .set_label(binding, *base, "tenantName", tenant, &by)
                    .map(drop),
                Write::Status { base, phase } => {
                    api.set_status(uid, *base, phase.clone(), &by).map(drop)
                }
                Write::Release { binding, base } => api
                    .set_label(binding, *base, "dirty", "true", &by)
                    .map(drop),
                Write::Finalizer => api.remove_finalizer(uid),
            }
        };
        // Some(true): written; Some(false): refused; None: no answer.
        let answer = match net {
            Net::Answered => Some(send(api).is_ok()),
            Net::LostAnswer => {
                let _ = send(api);
                None
            }
            Net::LostRequest => None,
        };
        let outcome = match answer {
            Some(true) => Outcome::Written,
            Some(false) => Outcome::Refused,
            None => Outcome::Unknown,
        };
        let l = &mut self.ledger;
        match &write {
            Write::Claim { binding, .. } => l.claim_outcome(binding, outcome, now),
            Write::Status {
                phase: Phase::Bound(_),
                ..
            } => l.assignment_outcome(uid, outcome, now),
            Write::Release { binding, .. } => l.release_outcome(binding, outcome, now),
            Write::Finalizer if outcome == Outcome::Written => l.inflight.forget_claim(uid, now),
            _ => {}
        }
        if answer != Some(true) || self.plans.get(uid).is_some_and(VecDeque::is_empty) {
            self.plans.remove(uid);
        }
    }

    pub fn debug(&self) -> String {
        format!("{:?} plans {:?}", self.ledger.inflight, self.plans)
    }

    /// Whether the replica may write by its own clock: the leadership fence.
    pub fn may_write(&self, now: Instant) -> bool {
        self.fence.check(now).is_ok()
    }
}

/// The objects of one kind as of the first `pos` changes of its log.
pub fn state_at(api: &Api, kind: usize, pos: usize) -> BTreeMap<String, Obj> {
    let mut out = BTreeMap::new();
    for c in &api.logs[kind][..pos] {
        match &c.obj {
            Some(o) => out.insert(c.key.clone(), o.clone()),
            None => out.remove(&c.key),
        };
    }
    out
}
