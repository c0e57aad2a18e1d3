//! One operator replica as the simulation runs it: the controller's reconcile of a claim split
//! into its decision and its writes, so that other steps interleave, around the real inventory,
//! selection, in-flight and release code. This is the adapter for the code as it was before
//! issue 11: a snapshot rebuilt from reflector stores (possibly an older one), no lease fence.

use std::collections::{BTreeMap, VecDeque};
use std::time::Instant;

use hap_operator::api::ReleaseMode;
use hap_operator::labels::ResolvedLabelKeys;
use hap_operator::pools::{BindingView, ClaimView, Inventory, ShootView};
use hap_operator::release::{Release, decide_release};
use hap_operator::selection::{
    Choice, InFlight, MultiAccountPolicy, Request, WriteState, check_bound, select,
};

use super::api::{
    Api, BINDINGS, CLAIMS, Change, Claim, Obj, Phase, Refused, SHOOTS, Writer, pools,
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
    stores: [BTreeMap<String, Obj>; 3],
    snapshots: Vec<Inventory>,
    current: usize,
    inflight: InFlight,
    pub plans: BTreeMap<String, VecDeque<Write>>,
    /// The replica's local clock says its lease lasts until then (unused before issue 11).
    pub lease_until: Option<Instant>,
}

fn claim_view(c: &Claim) -> ClaimView {
    ClaimView {
        namespace: "kcp".into(),
        name: c.name.clone(),
        uid: c.uid.clone(),
        global_account: c.tenant.clone(),
        shoot_name: c.shoot.clone(),
        bound_binding: c.bound().map(str::to_string),
        deleting: c.deleting,
    }
}

impl Replica {
    /// A replica started now: it lists everything as the API server has it.
    pub fn start(id: usize, api: &Api) -> Self {
        let mut r = Replica {
            id,
            stores: Default::default(),
            snapshots: Vec::new(),
            current: 0,
            inflight: InFlight::default(),
            plans: BTreeMap::new(),
            lease_until: None,
        };
        for kind in [BINDINGS, CLAIMS, SHOOTS] {
            r.relist(kind, state_at(api, kind, api.logs[kind].len()), None);
        }
        r
    }

    /// Watch events of one kind reach the replica.
    pub fn deliver(&mut self, kind: usize, changes: &[Change]) {
        for c in changes {
            match &c.obj {
                Some(o) => self.stores[kind].insert(c.key.clone(), o.clone()),
                None => self.stores[kind].remove(&c.key),
            };
        }
        self.rebuild();
    }

    /// A re-list of one kind (possibly from a stale watch cache) replaces the store.
    pub fn relist(&mut self, kind: usize, objects: BTreeMap<String, Obj>, _list_rv: Option<u64>) {
        self.stores[kind] = objects;
        self.rebuild();
    }

    /// The next decisions read a snapshot `back` builds old (a slow rebuild replaced a newer one).
    pub fn lag(&mut self, back: usize) {
        self.current = self.snapshots.len().saturating_sub(1 + back);
    }

    /// Takeover: the replica becomes the leader.
    pub fn lead(&mut self, api: &Api) {
        // Before issue 11 a standby had no caches: it listed everything on takeover.
        *self = Replica::start(self.id, api);
    }

    fn rebuild(&mut self) {
        let bindings = self.stores[BINDINGS].values().filter_map(|o| match o {
            Obj::Binding(b) => Some(BindingView {
                name: b.name.clone(),
                resource_version: Some(b.rv.to_string()),
                labels: b.labels.clone(),
            }),
            _ => None,
        });
        let claims = self.stores[CLAIMS].values().filter_map(|o| match o {
            Obj::Claim(c) => Some(claim_view(c)),
            _ => None,
        });
        let shoots = self.stores[SHOOTS].values().filter_map(|o| match o {
            Obj::Shoot(s) => Some(ShootView {
                name: s.name.clone(),
                binding: s.binding.clone(),
            }),
            _ => None,
        });
        let inv = Inventory::build(ResolvedLabelKeys::default(), bindings, claims, shoots);
        self.snapshots.push(inv);
        self.current = self.snapshots.len() - 1;
    }

    /// Claims the replica's store holds, by uid.
    pub fn claims(&self) -> Vec<String> {
        self.stores[CLAIMS].keys().cloned().collect()
    }

    /// The reconcile's decision for one claim; its writes run in later steps.
    pub fn reconcile(&mut self, uid: &str, policy: &MultiAccountPolicy, now: Instant) {
        if self.plans.contains_key(uid) {
            return;
        }
        let Some(Obj::Claim(c)) = self.stores[CLAIMS].get(uid).cloned() else {
            return;
        };
        let inv = &self.snapshots[self.current];
        self.inflight.observe(inv, now);
        let view = claim_view(&c);
        let mut plan = VecDeque::new();
        if c.deleting {
            match decide_release(&view, inv, &self.inflight, ReleaseMode::MarkDirty, now) {
                Release::MarkDirty {
                    binding,
                    expected_resource_version: Some(rv),
                } => {
                    self.inflight
                        .release_started(&binding, Some(rv.clone()), now);
                    let base = rv.parse().unwrap_or(0);
                    plan.push_back(Write::Release { binding, base });
                    plan.push_back(Write::Finalizer);
                }
                Release::MarkDirty { .. } | Release::WaitForShoot { .. } => {}
                Release::Keep(_) => plan.push_back(Write::Finalizer),
            }
        } else if let Some(b) = c.recorded() {
            let pinned = ClaimView {
                bound_binding: Some(b.to_string()),
                ..view
            };
            let phase = match check_bound(inv, &self.inflight, &pinned, now) {
                Some(Choice::Lost { .. }) => Phase::Failed(b.to_string()),
                _ => Phase::Bound(b.to_string()),
            };
            if phase != c.phase {
                plan.push_back(Write::Status { base: c.rv, phase });
            }
        } else {
            if self
                .inflight
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
            let choice = select(inv, &self.inflight, &req, policy, &Default::default(), now);
            self.inflight.record(&view, pool, &choice, now);
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

    /// Sends the next write of the reconcile of `uid`.
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
        let ok = match net {
            Net::Answered => send(api).is_ok(),
            Net::LostAnswer => {
                let _ = send(api);
                false
            }
            Net::LostRequest => false,
        };
        match (&write, ok) {
            (Write::Claim { binding, .. }, true) => self.inflight.claim_written(binding, now),
            (Write::Claim { binding, .. }, false) => {
                self.inflight.claim_failed(binding);
                self.inflight.assignment_failed(uid);
            }
            (
                Write::Status {
                    phase: Phase::Bound(_),
                    ..
                },
                true,
            ) => self.inflight.assignment_written(uid, now),
            (
                Write::Status {
                    phase: Phase::Bound(_),
                    ..
                },
                false,
            ) => self.inflight.assignment_failed(uid),
            (Write::Release { binding, .. }, true) => self.inflight.release_written(binding, now),
            (Write::Release { binding, .. }, false) => self.inflight.release_failed(binding),
            (Write::Finalizer, true) => self.inflight.forget_claim(uid),
            _ => {}
        }
        if !ok || self.plans.get(uid).is_some_and(VecDeque::is_empty) {
            self.plans.remove(uid);
        }
    }

    /// Whether the replica may still write by its own clock (always, before issue 11).
    pub fn may_write(&self, _now: Instant) -> bool {
        true
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
