//! The release protocol's guard order as a table (facts in, step out), the steps it asks for in
//! order, and properties over random answers: nothing that writes is asked for while binding
//! writes are held, the binding is never released before its strays went back and its recorded
//! claim write settled, and no step is asked for twice.

use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::*;
use crate::release::KeepReason;

fn active(paused: bool, observing: bool) -> Option<InForce<()>> {
    Some(InForce::Active {
        config: (),
        name: "default".into(),
        paused,
        observing,
        binding_namespace: "garden-hap".into(),
    })
}

fn dirty() -> Release {
    Release::MarkDirty {
        binding: "b1".into(),
        expected_resource_version: Some("5".into()),
    }
}

/// Facts of a finalized claim, config enforcing, every step up to the release done and clear.
fn clear() -> ReleaseFacts<()> {
    ReleaseFacts {
        config: active(false, false),
        decidable: Some(true),
        strays_back: Some(true),
        record: Some(Record::Settled),
        trial_ended: Some(false),
        ..ReleaseFacts::new(true)
    }
}

fn decided(d: ReleaseDecision<()>) -> Next<()> {
    Next::Decided(d)
}

#[test]
fn the_guards_in_order() {
    let at = Instant::now();
    let held = |observing: bool| ReleaseFacts {
        config: active(!observing, observing),
        decidable: Some(true),
        ..ReleaseFacts::new(true)
    };
    let cases: Vec<(&str, ReleaseFacts<()>, Next<()>)> = vec![
        (
            "no finalizer",
            ReleaseFacts::new(false),
            decided(ReleaseDecision::Done),
        ),
        (
            "config first",
            ReleaseFacts::new(true),
            Next::Read(Read::Config),
        ),
        (
            "missing config",
            ReleaseFacts {
                config: Some(InForce::Missing {
                    name: "default".into(),
                }),
                ..ReleaseFacts::new(true)
            },
            decided(ReleaseDecision::ConfigWait { invalid: false }),
        ),
        (
            "invalid config",
            ReleaseFacts {
                config: Some(InForce::Invalid {
                    name: "default".into(),
                    generation: 2,
                    summary: "rules[0]: bad".into(),
                }),
                ..ReleaseFacts::new(true)
            },
            decided(ReleaseDecision::ConfigWait { invalid: true }),
        ),
        (
            "inventory next",
            ReleaseFacts {
                config: active(false, false),
                ..ReleaseFacts::new(true)
            },
            Next::Read(Read::Inventory { config: () }),
        ),
        (
            "caches not listed",
            ReleaseFacts {
                config: active(false, false),
                decidable: Some(false),
                ..ReleaseFacts::new(true)
            },
            decided(ReleaseDecision::Wait(Wait::Inventory)),
        ),
        (
            "paused: does it hold a binding?",
            held(false),
            Next::Read(Read::HoldsBinding),
        ),
        (
            "paused, holding one",
            ReleaseFacts {
                holds_binding: Some(true),
                ..held(false)
            },
            decided(ReleaseDecision::Held { observing: false }),
        ),
        (
            "observing, holding one",
            ReleaseFacts {
                holds_binding: Some(true),
                ..held(true)
            },
            decided(ReleaseDecision::Held { observing: true }),
        ),
        (
            "paused, holding none: the record settles without a fence, no strays",
            ReleaseFacts {
                holds_binding: Some(false),
                ..held(false)
            },
            Next::Do(Before::SettleRecord {
                config: (),
                may_write: false,
            }),
        ),
        (
            "paused, a record that may land",
            ReleaseFacts {
                holds_binding: Some(false),
                record: Some(Record::MayLand {
                    after: Duration::from_secs(1),
                }),
                ..held(false)
            },
            decided(ReleaseDecision::Held { observing: false }),
        ),
        (
            "paused, settled: straight to the release, no trial ended",
            ReleaseFacts {
                holds_binding: Some(false),
                record: Some(Record::Settled),
                ..held(false)
            },
            Next::Read(Read::Release {
                config: (),
                source: Presence::Unread,
            }),
        ),
        (
            "enforcing: strays first, holding not asked",
            ReleaseFacts {
                strays_back: None,
                ..clear()
            },
            Next::Do(Before::GiveStraysBack { config: () }),
        ),
        (
            "a stray still out",
            ReleaseFacts {
                strays_back: Some(false),
                ..clear()
            },
            decided(ReleaseDecision::Wait(Wait::Strays)),
        ),
        (
            "then the record, with a fence allowed",
            ReleaseFacts {
                record: None,
                ..clear()
            },
            Next::Do(Before::SettleRecord {
                config: (),
                may_write: true,
            }),
        ),
        (
            "a record that may land",
            ReleaseFacts {
                record: Some(Record::MayLand {
                    after: Duration::from_millis(300),
                }),
                ..clear()
            },
            decided(ReleaseDecision::Wait(Wait::Record {
                after: Duration::from_millis(300),
            })),
        ),
        (
            "a refused fence",
            ReleaseFacts {
                record: Some(Record::Refused {
                    cause: "forbidden".into(),
                    retry_at: at,
                }),
                ..clear()
            },
            decided(ReleaseDecision::Refused {
                cause: "forbidden".into(),
                retry_at: at,
            }),
        ),
        (
            "then the trial",
            ReleaseFacts {
                trial_ended: None,
                ..clear()
            },
            Next::Do(Before::EndTrial { config: () }),
        ),
        (
            "a trial just ended",
            ReleaseFacts {
                trial_ended: Some(true),
                ..clear()
            },
            decided(ReleaseDecision::Wait(Wait::TrialEnded)),
        ),
        (
            "then the release",
            clear(),
            Next::Read(Read::Release {
                config: (),
                source: Presence::Unread,
            }),
        ),
        (
            "released",
            ReleaseFacts {
                judged: Some(Judged::Go(dirty())),
                ..clear()
            },
            decided(ReleaseDecision::Carry {
                config: (),
                release: dirty(),
            }),
        ),
        (
            "kept",
            ReleaseFacts {
                judged: Some(Judged::Go(Release::Keep(KeepReason::Shared))),
                ..clear()
            },
            decided(ReleaseDecision::Carry {
                config: (),
                release: Release::Keep(KeepReason::Shared),
            }),
        ),
        (
            "the binding's writes are refused",
            ReleaseFacts {
                judged: Some(Judged::Refused {
                    cause: "quota".into(),
                    retry_at: at,
                }),
                ..clear()
            },
            decided(ReleaseDecision::Refused {
                cause: "quota".into(),
                retry_at: at,
            }),
        ),
        (
            "no version to condition on",
            ReleaseFacts {
                judged: Some(Judged::NoVersion),
                ..clear()
            },
            decided(ReleaseDecision::Wait(Wait::NoVersion)),
        ),
        (
            "a source claim's object is read live",
            ReleaseFacts {
                judged: Some(Judged::Go(Release::ReadSource {
                    binding: "b1".into(),
                })),
                ..clear()
            },
            Next::Read(Read::Source),
        ),
    ];
    for (name, facts, want) in cases {
        assert_eq!(next(&facts), want, "{name}");
    }
}

#[test]
fn the_source_read_makes_the_decision_stale() {
    let mut facts = ReleaseFacts {
        judged: Some(Judged::Go(Release::ReadSource {
            binding: "b1".into(),
        })),
        ..clear()
    };
    facts.read_source(Presence::Exists);
    assert_eq!(
        next(&facts),
        Next::Read(Read::Release {
            config: (),
            source: Presence::Exists
        }),
        "decided again, with the read"
    );
    let wait = Release::WaitForSource {
        binding: "b1".into(),
    };
    facts.judged = Some(Judged::Go(wait.clone()));
    assert_eq!(
        next(&facts),
        decided(ReleaseDecision::Carry {
            config: (),
            release: wait
        })
    );
}

/// What a step is, without its payload, to count how often each is asked for.
fn kind(n: &Next<()>) -> &'static str {
    match n {
        Next::Read(Read::Config) => "config",
        Next::Read(Read::Inventory { .. }) => "inventory",
        Next::Read(Read::HoldsBinding) => "holds",
        Next::Read(Read::Release { .. }) => "release",
        Next::Read(Read::Source) => "source",
        Next::Do(Before::GiveStraysBack { .. }) => "strays",
        Next::Do(Before::SettleRecord { .. }) => "record",
        Next::Do(Before::EndTrial { .. }) => "trial",
        Next::Decided(_) => "decided",
    }
}

/// The answers one run gives, each drawn once.
#[derive(Clone, Debug)]
struct Answers {
    paused: bool,
    observing: bool,
    decidable: bool,
    holds: bool,
    strays_back: bool,
    record: u8,
    trial_ended: bool,
    judged: u8,
    source_exists: bool,
}

fn answers() -> impl Strategy<Value = Answers> {
    (
        (
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
        ),
        (0u8..3, any::<bool>(), 0u8..6, any::<bool>()),
    )
        .prop_map(
            |(
                (paused, observing, decidable, holds, strays_back),
                (record, trial_ended, judged, source_exists),
            )| {
                Answers {
                    paused,
                    observing,
                    decidable,
                    holds,
                    strays_back,
                    record,
                    trial_ended,
                    judged,
                    source_exists,
                }
            },
        )
}

/// Runs the protocol to its decision, answering each step from `a`; the steps in order.
fn run(a: &Answers) -> (Vec<Next<()>>, ReleaseDecision<()>) {
    let mut f = ReleaseFacts::new(true);
    let mut steps = Vec::new();
    loop {
        let step = next(&f);
        match &step {
            Next::Decided(d) => return (steps, d.clone()),
            Next::Read(Read::Config) => f.config = active(a.paused, a.observing),
            Next::Read(Read::Inventory { .. }) => f.decidable = Some(a.decidable),
            Next::Read(Read::HoldsBinding) => f.holds_binding = Some(a.holds),
            Next::Do(Before::GiveStraysBack { .. }) => f.strays_back = Some(a.strays_back),
            Next::Do(Before::SettleRecord { .. }) => {
                f.record = Some(match a.record {
                    0 => Record::Settled,
                    1 => Record::MayLand {
                        after: Duration::from_millis(300),
                    },
                    _ => Record::Refused {
                        cause: "no".into(),
                        retry_at: Instant::now(),
                    },
                })
            }
            Next::Do(Before::EndTrial { .. }) => f.trial_ended = Some(a.trial_ended),
            Next::Read(Read::Release { .. }) => {
                f.judged = Some(match a.judged {
                    0 => Judged::Go(dirty()),
                    1 => Judged::Go(Release::ReadSource {
                        binding: "b1".into(),
                    }),
                    2 => Judged::Go(Release::Keep(KeepReason::InUse { clusters: 1 })),
                    3 => Judged::NoVersion,
                    4 => Judged::Refused {
                        cause: "no".into(),
                        retry_at: Instant::now(),
                    },
                    _ => Judged::Go(Release::WaitForSource {
                        binding: "b1".into(),
                    }),
                })
            }
            Next::Read(Read::Source) => f.read_source(if a.source_exists {
                Presence::Exists
            } else {
                Presence::Gone
            }),
        }
        steps.push(step);
        assert!(steps.len() < 20, "the protocol ends: {steps:?}");
    }
}

proptest! {
    #[test]
    fn writes_held_ask_for_no_write_and_release_nothing_held(a in answers()) {
        prop_assume!(a.paused || a.observing);
        let (steps, decision) = run(&a);
        for s in &steps {
            prop_assert!(
                !matches!(
                    s,
                    Next::Do(Before::GiveStraysBack { .. } | Before::EndTrial { .. })
                        | Next::Do(Before::SettleRecord { may_write: true, .. })
                ),
                "a write asked for while writes are held: {steps:?}"
            );
        }
        if a.decidable && a.holds {
            prop_assert_eq!(decision, ReleaseDecision::Held { observing: a.observing });
        }
    }

    #[test]
    fn the_binding_is_released_only_after_its_strays_and_record(a in answers()) {
        let (steps, decision) = run(&a);
        if let ReleaseDecision::Carry { .. } = decision {
            let held = a.paused || a.observing;
            let names: Vec<&str> = steps.iter().map(kind).collect();
            prop_assert!(a.decidable && a.record == 0, "{names:?}");
            if !held {
                prop_assert!(a.strays_back && !a.trial_ended, "{names:?}");
                let at = |k| names.iter().position(|n| *n == k);
                prop_assert!(at("strays") < at("record") && at("record") < at("trial"));
                prop_assert!(at("trial") < at("release"), "{names:?}");
            } else {
                prop_assert!(!a.holds, "{names:?}");
            }
        }
    }

    #[test]
    fn no_step_is_asked_for_twice_but_the_release_after_a_source_read(a in answers()) {
        let (steps, _) = run(&a);
        let names: Vec<&str> = steps.iter().map(kind).collect();
        for k in ["config", "inventory", "holds", "source", "strays", "record", "trial"] {
            prop_assert!(names.iter().filter(|n| **n == k).count() <= 1, "{k}: {names:?}");
        }
        let releases = names.iter().filter(|n| **n == "release").count();
        let sourced = names.contains(&"source");
        prop_assert!(releases <= 1 + usize::from(sourced), "{names:?}");
    }
}
