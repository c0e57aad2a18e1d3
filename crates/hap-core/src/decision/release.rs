//! What one reconcile of a deleted AccountClaim does, decided from plain facts (pure): the
//! release protocol's guard order, from the finalizer down to the binding's release write.
//!
//! The shape is the claim's (`super::next`): the reconcile (`controller::release`) reads a fact
//! only when [`next`] asks for it ([`Read`]), and carries out the one [`ReleaseDecision`] with
//! one match. Three steps must have been done, not only read, before the binding can be decided
//! on ([`Before`]): the tenant's strays given back, the claim write its status records settled,
//! and a trial a Shoot proved ended. Their outcome is a fact like any other, so the order in
//! which they happen is decided here too. Reads write nothing on the API; the release read
//! records a write about to start in the ledger under its lock, as a selection does.

use std::time::{Duration, Instant};

use super::InForce;
use crate::release::{Presence, Release};

/// How long a release waits when the index is about to show a write (a trial ended, a version).
const INDEX_CATCHING_UP: Duration = Duration::from_millis(300);
/// How long a release waits for the caches, or for strays that did not all go back.
const LOOK_AGAIN: Duration = Duration::from_secs(1);

/// Everything one release decision may look at. `None`: not read (or not done) yet; [`next`]
/// asks for it when a guard needs it.
#[derive(Clone, Debug)]
pub struct ReleaseFacts<C> {
    /// The release finalizer is in place: without it there is nothing to release.
    pub finalized: bool,
    pub config: Option<InForce<C>>,
    /// Every cache the decision needs listed the config in force's targets (and after a take-over
    /// the re-read is in).
    pub decidable: Option<bool>,
    /// The claim holds a binding: recorded in its status, its claim write landed, or this
    /// replica's records give it one.
    pub holds_binding: Option<bool>,
    /// Every stray of the tenant went back (`false`: one could not, yet).
    pub strays_back: Option<bool>,
    /// The claim write the status records, settled or not.
    pub record: Option<Record>,
    /// A proven trial was ended by a write this pass: the index shows the new version later.
    pub trial_ended: Option<bool>,
    /// The live read of the object a source claim serves, once asked for.
    pub source: Option<Presence>,
    /// The release decision on the index, taken with [`Self::source`] as it was then.
    pub judged: Option<Judged>,
}

impl<C> ReleaseFacts<C> {
    /// The claim's finalizer, nothing read yet.
    pub fn new(finalized: bool) -> Self {
        Self {
            finalized,
            config: None,
            decidable: None,
            holds_binding: None,
            strays_back: None,
            record: None,
            trial_ended: None,
            source: None,
            judged: None,
        }
    }

    /// Records the live read of the source object: the decision taken before it is stale, so it
    /// is asked for again, with the read.
    pub fn read_source(&mut self, presence: Presence) {
        self.source = Some(presence);
        self.judged = None;
    }
}

/// The claim write recorded in the claim's status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    /// None, or it landed and the index shows it, or it never can: go on.
    Settled,
    /// It may still land: look again then (a fence was sent, or the index is to show it).
    MayLand { after: Duration },
    /// The garden refuses the fence (or the read) that would settle it.
    Refused { cause: String, retry_at: Instant },
}

/// The release decision on the index (`crate::release::decide_release`), and whether its write
/// can go now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Judged {
    /// As decided; a release write is recorded as started.
    Go(Release),
    /// The garden refused the last write of the binding: its writes pause until `retry_at`.
    Refused { cause: String, retry_at: Instant },
    /// The index has no resourceVersion of the binding to condition the write on.
    NoVersion,
}

/// A fact to read. Nothing is written on the API.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Read<C> {
    Config,
    Inventory {
        config: C,
    },
    HoldsBinding,
    /// Decide the release on the index, the source object as `source` says.
    Release {
        config: C,
        source: Presence,
    },
    /// Read the object the source claim serves, live.
    Source,
}

/// A write that must have happened before the binding is decided on; its outcome is the fact.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Before<C> {
    /// Give back the bindings claimed for the tenant beside its recorded one (`strays_back`):
    /// after the claim goes, a stray would be an ordinary binding of the tenant.
    GiveStraysBack { config: C },
    /// Settle the recorded claim write (`record`): else it could label the account for a claim
    /// that no longer exists. `may_write`: the fence may be sent.
    SettleRecord { config: C, may_write: bool },
    /// End the trial a Shoot proved (`trial_ended`): else the binding would come back on trial.
    EndTrial { config: C },
}

/// Why a release waits, writing nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wait {
    /// The caches have not listed the config's targets (or the re-read after a take-over).
    Inventory,
    /// A stray could not go back yet.
    Strays,
    /// The recorded claim write may still land.
    Record { after: Duration },
    /// A trial was ended: the index is to show the binding's new version.
    TrialEnded,
    /// The index has no version of the binding to condition the write on.
    NoVersion,
}

impl Wait {
    pub fn after(&self) -> Duration {
        match self {
            Wait::Inventory | Wait::Strays => LOOK_AGAIN,
            Wait::Record { after } => *after,
            Wait::TrialEnded | Wait::NoVersion => INDEX_CATCHING_UP,
        }
    }
}

/// Everything one release reconcile may do; carried out by one match
/// (`controller::release::carry_out`), the only place that writes after the [`Before`] steps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReleaseDecision<C> {
    /// No finalizer: nothing is released here.
    Done,
    /// No valid config: the binding's labels are unknown. `invalid`: one exists but no
    /// generation of it was valid (else it is missing).
    ConfigWait {
        invalid: bool,
    },
    /// Binding writes are held (paused or observing) and the release would need one.
    Held {
        observing: bool,
    },
    /// The garden refuses a write the release needs: it says so and comes back at `retry_at`.
    Refused {
        cause: String,
        retry_at: Instant,
    },
    Wait(Wait),
    /// Carry out the release decision on the index; the finalizer goes once it settles.
    Carry {
        config: C,
        release: Release,
    },
}

/// A fact to read, a write to do first, or the decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Next<C> {
    Read(Read<C>),
    Do(Before<C>),
    Decided(ReleaseDecision<C>),
}

/// The next step of one release reconcile. The guards in order: the finalizer, the config in
/// force, the inventory, held writes on a held binding, the strays (not while writes are held),
/// the recorded claim write, a proven trial (not while writes are held), then the binding's
/// release, with a live read of a source claim's object when that decision asks for it.
pub fn next<C: Clone>(f: &ReleaseFacts<C>) -> Next<C> {
    match steps(f) {
        Ok(decision) | Err(Next::Decided(decision)) => Next::Decided(decision),
        Err(step) => step,
    }
}

/// `Err`: stop here, with a decision, a read or a write to do first.
type Step<T, C> = Result<T, Next<C>>;

fn steps<C: Clone>(f: &ReleaseFacts<C>) -> Step<ReleaseDecision<C>, C> {
    if !f.finalized {
        return Ok(ReleaseDecision::Done);
    }
    let (config, observing, held) = config_in_force(f)?;
    if !*known(&f.decidable, || {
        Next::Read(Read::Inventory {
            config: config.clone(),
        })
    })? {
        return Ok(ReleaseDecision::Wait(Wait::Inventory));
    }
    if held && *known(&f.holds_binding, || Next::Read(Read::HoldsBinding))? {
        return Ok(ReleaseDecision::Held { observing });
    }
    if !held {
        let give_back = || {
            Next::Do(Before::GiveStraysBack {
                config: config.clone(),
            })
        };
        if !*known(&f.strays_back, give_back)? {
            return Ok(ReleaseDecision::Wait(Wait::Strays));
        }
    }
    let settle = || {
        Next::Do(Before::SettleRecord {
            config: config.clone(),
            may_write: !held,
        })
    };
    match known(&f.record, settle)? {
        Record::Settled => {}
        // Only a fence (a write) settles it, and writes are held: the release says so.
        Record::MayLand { .. } if held => return Ok(ReleaseDecision::Held { observing }),
        Record::MayLand { after } => {
            return Ok(ReleaseDecision::Wait(Wait::Record { after: *after }));
        }
        Record::Refused { cause, retry_at } => return Ok(refused(cause, *retry_at)),
    }
    if !held
        && *known(&f.trial_ended, || {
            Next::Do(Before::EndTrial {
                config: config.clone(),
            })
        })?
    {
        return Ok(ReleaseDecision::Wait(Wait::TrialEnded));
    }
    release(f, config)
}

/// The config in force, whether it observes, and whether binding writes are held.
fn config_in_force<C: Clone>(f: &ReleaseFacts<C>) -> Step<(C, bool, bool), C> {
    match known(&f.config, || Next::Read(Read::Config))? {
        InForce::Missing { .. } => Err(Next::Decided(ReleaseDecision::ConfigWait {
            invalid: false,
        })),
        InForce::Invalid { .. } => {
            Err(Next::Decided(ReleaseDecision::ConfigWait { invalid: true }))
        }
        InForce::Active {
            config,
            paused,
            observing,
            ..
        } => Ok((config.clone(), *observing, *paused || *observing)),
    }
}

/// The binding's release: decided on the index; a decision that asks for the source object's
/// live read gets it, and is taken again with it.
fn release<C: Clone>(f: &ReleaseFacts<C>, config: C) -> Step<ReleaseDecision<C>, C> {
    let source = f.source.unwrap_or(Presence::Unread);
    let ask = || {
        Next::Read(Read::Release {
            config: config.clone(),
            source,
        })
    };
    match known(&f.judged, ask)? {
        Judged::Go(Release::ReadSource { .. }) if f.source.is_none() => {
            Err(Next::Read(Read::Source))
        }
        Judged::Go(release) => Ok(ReleaseDecision::Carry {
            config,
            release: release.clone(),
        }),
        Judged::Refused { cause, retry_at } => Ok(refused(cause, *retry_at)),
        Judged::NoVersion => Ok(ReleaseDecision::Wait(Wait::NoVersion)),
    }
}

fn refused<C>(cause: &str, retry_at: Instant) -> ReleaseDecision<C> {
    ReleaseDecision::Refused {
        cause: cause.to_string(),
        retry_at,
    }
}

/// The fact, or the step that gets it.
fn known<T, C>(fact: &Option<T>, get: impl FnOnce() -> Next<C>) -> Step<&T, C> {
    fact.as_ref().ok_or_else(get)
}

#[cfg(test)]
#[path = "release_tests.rs"]
mod tests;
