//! One admission call of the request-source webhook for a CREATE, one API round trip per step, so
//! that the leader, the clean-up, users and other calls interleave between any two of them. It
//! mirrors `webhook::admit::serve` (OLD) and the protocol issue 19 asks for (NEW).

use super::api::{Api, Claim, Phase, Refused, TENANTS};
use super::leader::Protocol;

/// Ticks the webhook waits for the leader's decision before it gives up (`--webhook-decision-timeout`).
pub const DECIDE: u64 = 3;
/// Ticks after which the API server gives up on a call (`timeoutSeconds`): the call is cancelled.
pub const TIMEOUT: u64 = DECIDE + 2;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Shoot,
    Runtime,
}

/// The request objects users create: fixed names, so that a name comes back the moment it is
/// gone (CI loops on fixed Shoot and Runtime names).
pub const OBJECTS: [(Kind, &str); 4] = [
    (Kind::Shoot, "s0"),
    (Kind::Shoot, "s1"),
    (Kind::Runtime, "r0"),
    (Kind::Runtime, "r1"),
];

/// The claim of object `obj`: `<kind>.<namespace>.<name>`.
pub fn claim_name(obj: usize) -> String {
    match OBJECTS[obj] {
        (Kind::Shoot, n) => format!("shoot.garden.{n}"),
        (Kind::Runtime, n) => format!("runtime.kcp.{n}"),
    }
}

/// The Shoot a claim names: the Shoot itself, or the one the infrastructure manager will create
/// for a Runtime (it does not exist in the model, as it does not while a Runtime is admitted).
pub fn claim_shoot(obj: usize) -> String {
    match OBJECTS[obj] {
        (Kind::Shoot, n) => n.to_string(),
        (Kind::Runtime, n) => format!("kim-{n}"),
    }
}

/// What a call does next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallPhase {
    /// Read the claim of the object's name.
    Lookup,
    /// Create it.
    Create,
    /// Read the claim until the leader decided or the decision time-out passed.
    Wait {
        uid: String,
        rv: u64,
    },
    /// NEW: stamp `admitted-at` on the claim, conditioned on the version that showed it Bound.
    Stamp {
        uid: String,
        rv: u64,
        binding: String,
    },
    /// NEW: an undecided claim kept for the retry, stamped after the answer (conditioned on
    /// `rv`), so that the clean-up's grace counts from this call.
    Keep {
        uid: String,
        rv: u64,
    },
    /// Delete the claim if it is unchanged since `rv` (a refused request; OLD: undecided too).
    Cleanup {
        uid: String,
        rv: u64,
    },
    /// Answered Bound: the API server stores the object, or a later admission step refuses it.
    Admitted {
        binding: String,
    },
    Done,
}

#[derive(Clone, Debug)]
pub struct Call {
    pub obj: usize,
    pub tenant: usize,
    pub started: u64,
    pub answered: Option<u64>,
    pub phase: CallPhase,
    /// The handler was dropped; only a detached clean-up (NEW) goes on.
    pub detached: bool,
}

/// What a claim's status tells the webhook.
enum State {
    Bound(String),
    Refused,
    /// NEW: the claim is being deleted; it never serves a new object.
    Going,
    Undecided,
}

fn state(p: Protocol, c: &Claim) -> State {
    match &c.phase {
        // OLD: `claim_state` ignores deletionTimestamp.
        Phase::Bound(b) if p == Protocol::Old || !c.deleting => State::Bound(b.clone()),
        _ if c.deleting && p == Protocol::New => State::Going,
        Phase::Pending(r) if r == "PoolExhausted" => State::Refused,
        Phase::Failed(_) => State::Refused,
        _ => State::Undecided,
    }
}

/// What a call step may touch besides the API server.
pub struct Ctx<'a> {
    pub api: &'a mut Api,
    pub p: Protocol,
    pub tick: u64,
    /// The uid of a claim this call creates.
    pub new_uid: String,
    /// Called with (uid, tick) when a claim is created, and with the stamp when stamped.
    pub created: &'a mut dyn FnMut(&str, u64),
    pub stamped: &'a mut dyn FnMut(&str, u64),
}

fn by_name<'a>(api: &'a Api, name: &str) -> Option<&'a Claim> {
    api.claims.values().find(|c| c.name == name)
}

impl Call {
    pub fn new(obj: usize, tenant: usize, tick: u64) -> Self {
        Call {
            obj,
            tenant,
            started: tick,
            answered: None,
            phase: CallPhase::Lookup,
            detached: false,
        }
    }

    /// Whether the API server still waits for the answer.
    pub fn waiting(&self) -> bool {
        !self.detached && !matches!(self.phase, CallPhase::Admitted { .. } | CallPhase::Done)
    }

    /// One round trip.
    pub fn step(&mut self, cx: &mut Ctx<'_>) {
        let next = match std::mem::replace(&mut self.phase, CallPhase::Done) {
            CallPhase::Lookup => match by_name(cx.api, &claim_name(self.obj)) {
                None => CallPhase::Create,
                // Another request's claim, or one being deleted: denied (a Conflict).
                Some(c) if c.deleting || c.tenant != TENANTS[self.tenant] => CallPhase::Done,
                Some(c) => self.observe(cx, &c.clone()),
            },
            CallPhase::Create => {
                let shoot = Some(claim_shoot(self.obj));
                let name = claim_name(self.obj);
                match cx
                    .api
                    .create_named_claim(cx.new_uid.clone(), &name, self.tenant, shoot)
                {
                    Ok(rv) => {
                        (cx.created)(&cx.new_uid, cx.tick);
                        CallPhase::Wait {
                            uid: cx.new_uid.clone(),
                            rv,
                        }
                    }
                    Err(_) => CallPhase::Lookup,
                }
            }
            CallPhase::Wait { uid, .. } => match cx.api.claims.get(&uid).cloned() {
                Some(c) => self.observe(cx, &c),
                None => CallPhase::Done,
            },
            CallPhase::Stamp { uid, rv, binding } => match cx.api.touch_claim(&uid, rv) {
                Ok(_) => {
                    (cx.stamped)(&uid, cx.tick);
                    self.answer(cx, binding)
                }
                Err(Refused::Conflict) => CallPhase::Wait { uid, rv },
                Err(Refused::NotFound) => CallPhase::Done,
            },
            CallPhase::Keep { uid, rv } => {
                if cx.api.touch_claim(&uid, rv).is_ok() {
                    (cx.stamped)(&uid, cx.tick);
                }
                CallPhase::Done
            }
            CallPhase::Cleanup { uid, rv } => match cx.api.delete_claim_if(&uid, Some(rv)) {
                Ok(()) | Err(Refused::NotFound) => CallPhase::Done,
                Err(Refused::Conflict) => self.after_conflict(cx, uid),
            },
            other => other,
        };
        self.phase = next;
    }

    fn answer(&mut self, cx: &Ctx<'_>, binding: String) -> CallPhase {
        self.answered = Some(cx.tick);
        CallPhase::Admitted { binding }
    }

    /// The claim as read: answer, clean up, or wait on.
    fn observe(&mut self, cx: &Ctx<'_>, c: &Claim) -> CallPhase {
        let (uid, rv) = (c.uid.clone(), c.rv);
        match state(cx.p, c) {
            // OLD answers Bound from the claim as it is, writing nothing on it.
            State::Bound(b) if cx.p == Protocol::Old => self.answer(cx, b),
            // NEW: nobody to answer; the source clean-up takes it after the grace.
            State::Bound(_) if self.detached => CallPhase::Done,
            State::Bound(binding) => CallPhase::Stamp { uid, rv, binding },
            State::Going => CallPhase::Done,
            State::Refused => CallPhase::Cleanup { uid, rv },
            State::Undecided if cx.tick >= self.started + DECIDE && cx.p == Protocol::Old => {
                CallPhase::Cleanup { uid, rv }
            }
            // NEW: an undecided claim stays for the caller's retry, stamped.
            State::Undecided if cx.tick >= self.started + DECIDE => CallPhase::Keep { uid, rv },
            State::Undecided => CallPhase::Wait { uid, rv },
        }
    }

    /// The clean-up's delete met a changed claim.
    fn after_conflict(&mut self, cx: &Ctx<'_>, uid: String) -> CallPhase {
        if cx.p == Protocol::Old {
            // Today: the claim of that name is read again, whoever's it is; Bound is answered,
            // anything else is denied without deleting.
            return match by_name(cx.api, &claim_name(self.obj)).map(|c| state(cx.p, c)) {
                Some(State::Bound(b)) => self.answer(cx, b),
                _ => CallPhase::Done,
            };
        }
        // NEW: the same claim, still not Bound: delete again; Bound: stamp and answer (if anyone
        // still listens; otherwise the source clean-up takes it after the grace).
        match cx.api.claims.get(&uid).cloned() {
            Some(c) => match state(cx.p, &c) {
                State::Bound(binding) if !self.detached => CallPhase::Stamp {
                    uid,
                    rv: c.rv,
                    binding,
                },
                State::Refused => CallPhase::Cleanup { uid, rv: c.rv },
                _ => CallPhase::Done,
            },
            None => CallPhase::Done,
        }
    }

    /// The API server gives up on the call and closes the connection: the handler is dropped.
    /// NEW: the call's task survives, detached: it waits on for the decision, takes a refused
    /// claim back and leaves an undecided one for the caller's retry.
    pub fn cancel(&mut self, p: Protocol) {
        if !self.waiting() {
            return;
        }
        self.detached = true;
        self.phase = match std::mem::replace(&mut self.phase, CallPhase::Done) {
            phase @ (CallPhase::Wait { .. }
            | CallPhase::Cleanup { .. }
            | CallPhase::Keep { .. })
                if p == Protocol::New =>
            {
                phase
            }
            _ => CallPhase::Done,
        };
    }
}
