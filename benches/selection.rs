//! Inventory index and binding selection at landscape size: 5,000 bindings, 10,000 Bound claims,
//! 10,000 Shoots (the sizes of the load benchmark's scale phase), and a new tenant's selection in
//! free pools of 400 to 40,000 bindings beside 1.5 times as many held ones (a take-over's). Prints
//! µs per operation from a plain timing loop first, then runs the criterion benchmarks. Rule
//! evaluation is in benches/rules.rs.

use std::collections::{BTreeMap, BTreeSet};
use std::hint::black_box;
use std::time::Instant;

use criterion::Criterion;
use hap_operator::api::MultiHyperscalerAccount;
use hap_operator::labels::{PoolKey, ResolvedLabelKeys};
use hap_operator::pools::{BindingView, ClaimView, Inventory, ShootView};
use hap_operator::rules::{PinRule, Pins, Preference};
use hap_operator::selection::{
    Choice, InFlight, MultiAccountPolicy, OrderedRequest, Request, select, select_ordered,
};

const BINDINGS: usize = 5_000;
const OWNED: usize = 4_000;
const SHARED: usize = 50;
const CLAIMS: usize = 10_000;
const SHOOTS: usize = 10_000;

struct World {
    bindings: Vec<BindingView>,
    claims: Vec<ClaimView>,
    shoots: Vec<ShootView>,
}

/// 4,000 owned and 950 claimable dedicated aws bindings, 50 shared ones; two Bound claims and two
/// Shoots per owned binding (10,000 of each: 8,000 on owned bindings, the rest on shared ones).
fn world() -> World {
    let labels = |pairs: &[(&str, String)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    };
    let mut bindings = Vec::with_capacity(BINDINGS);
    for i in 0..BINDINGS {
        let mut l = vec![("hyperscalerType", "aws".to_string())];
        if i < OWNED {
            l.push(("tenantName", format!("ga-{i:05}")));
        } else if i >= BINDINGS - SHARED {
            l.push(("shared", "true".to_string()));
        }
        bindings.push(BindingView {
            name: format!("aws-{i:05}"),
            resource_version: Some(format!("{}", 1000 + i)),
            labels: labels(&l).into(),
            ..Default::default()
        });
    }
    let target = |i: usize| {
        if i < 2 * OWNED {
            format!("aws-{:05}", i / 2)
        } else {
            format!("aws-{:05}", BINDINGS - SHARED + i % SHARED)
        }
    };
    let claims = (0..CLAIMS)
        .map(|i| ClaimView {
            namespace: "claims".into(),
            name: format!("c-{i:05}"),
            uid: format!("uid-{i:05}"),
            global_account: format!("ga-{:05}", if i < 2 * OWNED { i / 2 } else { i }),
            shoot_name: Some(format!("claim-shoot-{i:05}")),
            bound_binding: Some(target(i)),
            ..Default::default()
        })
        .collect();
    let shoots = (0..SHOOTS)
        .map(|i| ShootView {
            name: format!("shoot-{i:05}"),
            binding: Some(target(i)),
            ..Default::default()
        })
        .collect();
    World {
        bindings,
        claims,
        shoots,
    }
}

fn build(w: &World) -> Inventory {
    Inventory::build(
        ResolvedLabelKeys::default(),
        w.bindings.iter().cloned(),
        w.claims.iter().cloned(),
        w.shoots.iter().cloned(),
    )
}

fn new_claim(ga: &str, n: usize) -> ClaimView {
    ClaimView {
        namespace: "claims".into(),
        name: format!("new-{n}"),
        uid: format!("new-uid-{n}"),
        global_account: ga.into(),
        shoot_name: Some(format!("new-shoot-{n}")),
        ..Default::default()
    }
}

fn main() {
    let w = world();
    let dedicated = PoolKey {
        hyperscaler_type: "aws".into(),
        eu_access: false,
        shared: false,
    };
    let shared = PoolKey {
        shared: true,
        ..dedicated.clone()
    };
    let policy = MultiAccountPolicy::from_spec(Some(&MultiHyperscalerAccount {
        allowed_global_accounts: vec!["ga-00042".into()],
        limits: BTreeMap::from([("aws".to_string(), 3)]),
    }));
    let inv = build(&w);
    let inflight = InFlight::default();
    let none = BTreeSet::new();
    let cases: Vec<(&str, ClaimView, &PoolKey)> = vec![
        (
            "reuse (tenant holds a binding)",
            new_claim("ga-00017", 1),
            &dedicated,
        ),
        (
            "claim (new tenant, 950 claimable)",
            new_claim("ga-new", 2),
            &dedicated,
        ),
        (
            "multi-account (fill below the limit)",
            new_claim("ga-00042", 3),
            &dedicated,
        ),
        (
            "shared (least used of 50)",
            new_claim("ga-trial", 4),
            &shared,
        ),
    ];
    for (name, claim, pool) in &cases {
        let req = Request {
            claim,
            pool,
            provider_type: "aws",
        };
        let choice = select(&inv, &inflight, &req, &policy, &none, Instant::now());
        assert!(
            matches!(choice, Choice::Use { .. } | Choice::Claim { .. }),
            "{name}: {choice:?}"
        );
    }

    // Under `cargo test` (no `--bench`) the timing loops and criterion run once, unoptimised.
    let bench = std::env::args().any(|a| a == "--bench");
    let start = Instant::now();
    let rounds = if bench { 20 } else { 1 };
    for _ in 0..rounds {
        black_box(build(black_box(&w)));
    }
    println!(
        "Inventory::build ({BINDINGS} bindings, {CLAIMS} claims, {SHOOTS} Shoots): {:.2} ms",
        start.elapsed().as_secs_f64() * 1e3 / rounds as f64
    );
    for (name, claim, pool) in &cases {
        let req = Request {
            claim,
            pool,
            provider_type: "aws",
        };
        let rounds = if bench { 2_000 } else { 1 };
        let start = Instant::now();
        for _ in 0..rounds {
            black_box(select(
                &inv,
                &inflight,
                black_box(&req),
                &policy,
                &none,
                Instant::now(),
            ));
        }
        println!(
            "select, {name}: {:.1} µs",
            start.elapsed().as_secs_f64() * 1e6 / rounds as f64
        );
    }

    events(&w, &inv, bench);
    ordered(&inv, &inflight, &policy, &dedicated, &shared, bench);
    free_pools(&dedicated, &policy, bench);

    let mut c = Criterion::default().configure_from_args();
    c.bench_function(
        "Inventory::build 5k bindings, 10k claims, 10k Shoots",
        |b| b.iter(|| build(black_box(&w))),
    );
    let mut group = c.benchmark_group("select at 5k bindings, 10k claims, 10k Shoots");
    for (name, claim, pool) in &cases {
        let req = Request {
            claim,
            pool,
            provider_type: "aws",
        };
        group.bench_function(*name, |b| {
            b.iter(|| {
                select(
                    &inv,
                    &inflight,
                    black_box(&req),
                    &policy,
                    &none,
                    Instant::now(),
                )
            })
        });
    }
    group.finish();
    c.final_summary();
}

/// Selection over an entry's ordered pools (issue 13): two empty pools before the one with
/// room, then a shared fallback; without pins and with 1,000 pins of other tenants (the
/// bindings they reserve are skipped).
fn ordered(
    inv: &Inventory,
    inflight: &InFlight,
    policy: &MultiAccountPolicy,
    dedicated: &PoolKey,
    shared: &PoolKey,
    bench: bool,
) {
    let empty = |t: &str| PoolKey {
        hyperscaler_type: t.into(),
        eu_access: false,
        shared: false,
    };
    let preferences: Vec<Preference> = [
        empty("aws_ksa"),
        empty("aws_x"),
        dedicated.clone(),
        shared.clone(),
    ]
    .into_iter()
    .enumerate()
    .map(|(i, pool)| Preference { index: i + 1, pool })
    .collect();
    let pins = Pins::new(
        (0..1_000)
            .map(|i| PinRule {
                item: i,
                global_account: format!("ga-pinned-{i}"),
                binding: format!("aws-{:05}", OWNED + i / 2),
                pool: None,
            })
            .collect(),
    );
    let no_pins = Pins::default();
    let none = BTreeSet::new();
    for (name, pins) in [
        ("ordered, 4 pools, the 3rd serves", &no_pins),
        (
            "ordered, 4 pools, the 3rd serves, 1,000 pins of others",
            &pins,
        ),
    ] {
        let claim = new_claim("ga-ordered", 9);
        let req = OrderedRequest {
            claim: &claim,
            preferences: &preferences,
            provider_type: "aws",
            pins,
        };
        let p = select_ordered(inv, inflight, &req, policy, &none, Instant::now());
        assert!(
            matches!(p.choice, Choice::Claim { .. }) && p.preference == 3,
            "{name}: {p:?}"
        );
        let rounds = if bench { 2_000 } else { 1 };
        let start = Instant::now();
        for _ in 0..rounds {
            black_box(select_ordered(
                inv,
                inflight,
                black_box(&req),
                policy,
                &none,
                Instant::now(),
            ));
        }
        println!(
            "select_ordered, {name}: {:.1} µs",
            start.elapsed().as_secs_f64() * 1e6 / rounds as f64
        );
    }
}

/// One watch event applied to the index (issue 11: the index is kept per event, not rebuilt):
/// a claim's status changes binding, a binding's tenant label flips, a Shoot moves. Each event
/// carries a newer resourceVersion than the one before, as a watch delivers them.
fn events(w: &World, inv: &Inventory, bench: bool) {
    let mut inv = inv.clone();
    let rounds: u64 = if bench { 200_000 } else { 10 };
    let claim = |i: u64| {
        let mut c = w.claims[(i as usize * 7919) % w.claims.len()].clone();
        c.bound_binding = Some(format!("aws-{:05}", i % 4_000));
        c.resource_version = Some((1_000_000 + i).to_string());
        c
    };
    let binding = |i: u64| {
        let mut b = w.bindings[(i as usize * 104_729) % w.bindings.len()].clone();
        if i.is_multiple_of(2) {
            b.labels.remove("tenantName");
        } else {
            b.labels.insert("tenantName".into(), format!("ga-{i}"));
        }
        b.resource_version = Some((1_000_000 + i).to_string());
        b
    };
    let shoot = |i: u64| ShootView {
        name: format!("shoot-{:05}", (i as usize * 31) % SHOOTS),
        binding: Some(format!("aws-{:05}", i % 4_000)),
        resource_version: Some((1_000_000 + i).to_string()),
        error_codes: Vec::new(),
        ..Default::default()
    };
    let mut n = 0u64;
    let mut time = |what: &str, apply: &mut dyn FnMut(u64)| {
        let start = Instant::now();
        for _ in 0..rounds {
            n += 1;
            apply(n);
        }
        println!(
            "index, one {what} event: {:.2} µs",
            start.elapsed().as_secs_f64() * 1e6 / rounds as f64
        );
    };
    time("claim", &mut |i| {
        black_box(inv.apply_claim(claim(i)));
    });
    time("binding", &mut |i| {
        black_box(inv.apply_binding(binding(i)));
    });
    time("Shoot", &mut |i| {
        black_box(inv.apply_shoot(shoot(i)));
    });
    black_box(inv.take_changes());
}

/// A new tenant's selection in a free pool of `free` bindings beside 1.5 times as many held ones,
/// each held one with a Bound claim and a Shoot, every binding on a Secret of its own: the
/// landscape of a take-over (BENCHMARKS.md, Take-over at 100k), where selection walked the free
/// pool. Sizes side by side in one run; under `cargo test` one small size, once.
fn free_pools(pool: &PoolKey, policy: &MultiAccountPolicy, bench: bool) {
    let sizes: &[usize] = if bench { &[400, 4_000, 40_000] } else { &[400] };
    for &free in sizes {
        let held = free * 3 / 2;
        let account =
            |name: &str| hap_operator::pools::Account::of_secret(Some("garden"), None, name);
        let bindings = (0..held + free).map(|i| {
            let name = format!("acct-{i:06}");
            let mut labels = vec![("hyperscalerType".to_string(), "aws".to_string())];
            if i < held {
                labels.push(("tenantName".to_string(), format!("ga-{i:06}")));
            }
            BindingView {
                account: account(&name),
                resource_version: Some(format!("{}", 1000 + i)),
                labels: labels.into_iter().collect::<BTreeMap<_, _>>().into(),
                name,
                ..Default::default()
            }
        });
        let claims = (0..held).map(|i| ClaimView {
            namespace: "claims".into(),
            name: format!("c-{i:06}"),
            uid: format!("uid-{i:06}"),
            global_account: format!("ga-{i:06}"),
            shoot_name: Some(format!("shoot-{i:06}")),
            bound_binding: Some(format!("acct-{i:06}")),
            ..Default::default()
        });
        let shoots = (0..held).map(|i| ShootView {
            name: format!("shoot-{i:06}"),
            binding: Some(format!("acct-{i:06}")),
            ..Default::default()
        });
        let inv = Inventory::build(ResolvedLabelKeys::default(), bindings, claims, shoots);
        let inflight = InFlight::default();
        let none = BTreeSet::new();
        let rounds = if bench {
            (4_000_000 / free).clamp(20, 2_000)
        } else {
            1
        };
        let claims: Vec<ClaimView> = (0..rounds)
            .map(|n| new_claim(&format!("ga-new-{n}"), n))
            .collect();
        let start = Instant::now();
        for claim in &claims {
            let req = Request {
                claim,
                pool,
                provider_type: "aws",
            };
            let choice = select(
                &inv,
                &inflight,
                black_box(&req),
                policy,
                &none,
                Instant::now(),
            );
            assert!(matches!(choice, Choice::Claim { .. }), "{choice:?}");
        }
        println!(
            "select, claim (new tenant, {free} free beside {held} held): {:.1} µs",
            start.elapsed().as_secs_f64() * 1e6 / rounds as f64
        );
    }
}
