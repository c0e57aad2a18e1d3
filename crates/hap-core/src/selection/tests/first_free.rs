//! Checking a pool's free bindings in rank order until one may be taken (`first_free`) chooses
//! the binding that checking every one and ranking the survivors (`free_candidates`, `spread`)
//! chooses, whatever the pool, the writes in flight, the bindings to try last, the cooldown, the
//! pins and a quarantine that keeps bindings from the request say; and when none may be taken,
//! both count the same reasons for the message.

use proptest::prelude::*;

use super::*;
use crate::api::{PinPool, QuarantineSpec};
use crate::pools::lifecycle::{CLEANUP_FAILED, CORDONED, Cooldown, RELEASED_AT, RELEASED_BY};
use crate::pools::quarantine::{Gate, creation_second};
use crate::rules::{PinRule, Pins};

/// The quarantine's `since`; the test's clock is an hour later.
const SINCE: i64 = 1_767_225_600;

fn clock() -> jiff::Timestamp {
    jiff::Timestamp::from_second(SINCE + 3_600).expect("time")
}

/// What one binding's labels, annotations, credential and Shoot say.
#[derive(Clone, Debug)]
struct Spec {
    tenant: Option<u8>,
    dirty: bool,
    cordoned: bool,
    cleanup_failed: bool,
    /// Released this many minutes before the clock, by `t0` or `t1`.
    released: Option<(i64, u8)>,
    /// Which Secret (two bindings may share one), or none known.
    account: Option<u8>,
    /// Created after the quarantine's `since`: new to it.
    new: bool,
    /// A Shoot on it.
    shoot: bool,
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        prop::option::weighted(0.2, 0..2u8),
        prop::bool::weighted(0.1),
        (prop::bool::weighted(0.1), prop::bool::weighted(0.1)),
        // Often the same minute, so that a rank holds several bindings.
        prop::option::weighted(0.5, (prop_oneof![0..3i64, 0..90i64], 0..2u8)),
        prop::option::weighted(0.8, 0..6u8),
        any::<bool>(),
        prop::bool::weighted(0.1),
    )
        .prop_map(
            |(tenant, dirty, (cordoned, cleanup_failed), released, account, new, shoot)| Spec {
                tenant,
                dirty,
                cordoned,
                cleanup_failed,
                released,
                account,
                new,
                shoot,
            },
        )
}

fn view(i: usize, s: &Spec) -> BindingView {
    let tenant = s.tenant.map(|t| format!("t{t}"));
    let mut labels = vec![("hyperscalerType", "aws")];
    if let Some(t) = &tenant {
        labels.push(("tenantName", t));
    }
    for (on, key) in [
        (s.dirty, "dirty"),
        (s.cordoned, CORDONED),
        (s.cleanup_failed, CLEANUP_FAILED),
    ] {
        if on {
            labels.push((key, "true"));
        }
    }
    let mut v = binding(&format!("b{i}"), &labels);
    if let Some((ago, by)) = s.released {
        let at = clock() - jiff::SignedDuration::from_mins(ago);
        v.annotations.insert(RELEASED_AT.into(), at.to_string());
        v.annotations.insert(RELEASED_BY.into(), format!("t{by}"));
    }
    v.account = s
        .account
        .and_then(|a| crate::pools::Account::of_secret(Some("garden"), None, &format!("a{a}")));
    v.created = creation_second(if s.new { SINCE + 60 } else { SINCE - 60 });
    v
}

/// A write in flight on a binding: another tenant's claim, a release, or a cluster placed on it.
#[derive(Clone, Copy, Debug)]
enum Write {
    Claim,
    Release,
    Assign,
}

fn write() -> impl Strategy<Value = Write> {
    prop_oneof![
        Just(Write::Claim),
        Just(Write::Release),
        Just(Write::Assign)
    ]
}

fn record(fl: &mut InFlight, p: &PoolKey, b: usize, w: Write, now: Instant) {
    let name = format!("b{b}");
    let other = claim(&format!("w{b}"), "someone", Some(&format!("ws{b}")), None);
    match w {
        Write::Claim => {
            let choice = Choice::Claim {
                binding: name,
                expected_resource_version: None,
            };
            fl.record(&other, p, &choice, now);
        }
        Write::Release => fl.release_started(&name, None, now),
        Write::Assign => fl.record(&other, p, &use_of(&name, UseReason::Reused), now),
    }
}

/// The request's gate: none, or one that keeps bindings new to the quarantine from it.
fn gate(quarantined: bool) -> Gate {
    let spec = QuarantineSpec {
        pool: PinPool {
            hyperscaler_type: "aws".into(),
            eu_access: None,
        },
        since: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            jiff::Timestamp::from_second(SINCE).expect("time"),
        )),
        plans: Some(vec!["trial".into()]),
        global_accounts: None,
    };
    let specs = quarantined.then(|| vec![spec]);
    Gate::for_request(specs.as_deref(), "standard", "any")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]
    #[test]
    fn checking_in_rank_order_chooses_what_checking_every_free_binding_chooses(
        specs in prop::collection::vec(spec(), 1..8),
        tenant in prop::sample::select(vec!["t0", "t1", "new"]),
        writes in prop::collection::btree_map(0..8usize, write(), 0..4),
        exclude in prop::collection::btree_set(0..8usize, 0..6),
        pinned in prop::collection::btree_map(0..8usize, prop::sample::select(vec!["t0", "t1", "new"]), 0..3),
        cooldown in prop::option::of(prop::sample::select(vec![10u64, 60, 120])),
        quarantined in any::<bool>(),
    ) {
        let p = pool("aws", false, false);
        let bindings: Vec<BindingView> = specs.iter().enumerate().map(|(i, s)| view(i, s)).collect();
        let shoots = specs
            .iter()
            .enumerate()
            .filter(|(_, s)| s.shoot)
            .map(|(i, _)| shoot(&format!("s{i}"), Some(&format!("b{i}"))))
            .collect();
        let inv = inventory(bindings, vec![], shoots);
        let now = Instant::now();
        let mut fl = InFlight::default();
        for (b, w) in &writes {
            record(&mut fl, &p, *b, *w, now);
        }
        let cooldown = cooldown.map(|m| Cooldown {
            period: Duration::from_secs(m * 60),
            now: clock(),
        });
        let policy = policy(&[], &[]).with_cooldown(cooldown).with_quarantine(gate(quarantined));
        prop_assert!(!policy.quarantine.ranks_trials_first(&p));
        let pins = Pins::new(
            pinned
                .iter()
                .enumerate()
                .map(|(item, (b, ga))| PinRule {
                    item,
                    global_account: ga.to_string(),
                    binding: format!("b{b}"),
                    pool: None,
                })
                .collect(),
        );
        let reserved = Reserved { pins: &pins, tenant };
        let exclude: BTreeSet<String> = exclude.iter().map(|b| format!("b{b}")).collect();
        let limits = Limits { policy: &policy, exclude: &exclude, reserved: Some(&reserved) };
        let c = claim("c", tenant, Some("s-new"), None);
        let req = Request { claim: &c, pool: &p, provider_type: "aws" };
        let counts = Counts::new(&inv, &fl, now);

        let ranked = first_free(&inv, &fl, &req, &limits, now, &counts);
        let (candidates, skipped) = free_candidates(&inv, &fl, &req, &limits, now, &counts);
        let walked = spread(&inv, &exclude, tenant, candidates, |_| false).ok_or(skipped);
        prop_assert_eq!(ranked, walked);
    }
}

/// A pool of free bindings none of which may be taken: the ranked check finds nothing, and
/// selection still names why (the full walk counts the reasons).
#[test]
fn a_pool_with_nothing_to_take_is_exhausted_with_its_reasons() {
    let p = pool("aws", false, false);
    let inv = inventory(
        vec![
            binding("a", &[("hyperscalerType", "aws"), (CORDONED, "true")]),
            binding("b", AWS),
        ],
        vec![],
        vec![shoot("s", Some("b"))],
    );
    let c = claim("c", "ga", Some("s-new"), None);
    match pick(&inv, &InFlight::default(), &c, &p, &policy(&[], &[])) {
        Choice::Exhausted { message, .. } => {
            assert!(message.contains("1 free but cordoned"), "{message}");
            assert!(
                message.contains("1 without a tenant but used by a cluster"),
                "{message}"
            );
        }
        other => panic!("expected Exhausted, got {other:?}"),
    }
}
