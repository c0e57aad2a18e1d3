//! Evaluation cost: a 50-entry Seed rule set and KEB's shipped 20-entry rule set. Prints
//! ns/evaluation from a plain timing loop first, then the MissingPool check of the config status
//! (run each second while anything moves) at three landscape sizes side by side, by walking every
//! binding's labels and from the index's pools, then runs the criterion benchmarks.

use std::hint::black_box;
use std::time::Instant;

use criterion::{Criterion, Throughput};
use hap_operator::api::{HapConfigSpec, RuleSyntax};
use hap_operator::labels::ResolvedLabelKeys;
use hap_operator::pools::{BindingView, Inventory};
use hap_operator::rules::{CompiledRules, Request};

const PLANS: [&str; 10] = [
    "aws",
    "azure",
    "gcp",
    "sap-converged-cloud",
    "alicloud",
    "gdch",
    "preview",
    "azure_lite",
    "build-runtime-aws",
    "build-runtime-gcp",
];

fn fifty() -> HapConfigSpec {
    let rules = PLANS
        .iter()
        .flat_map(|p| {
            [
                p.to_string(),
                format!("{p}(PR=cf-r1)"),
                format!("{p}(PR=cf-r2, euAccess)"),
                format!("{p}(CR=*, shared)"),
                format!("{p}(PR=cf-r3, CR=*, euAccess=*)"),
            ]
        })
        .collect();
    HapConfigSpec {
        rules: Some(rules),
        binding_namespace: "garden-kyma".into(),
        ..Default::default()
    }
}

fn keb_tested() -> HapConfigSpec {
    let rules = [
        "aws",
        "build-runtime-aws",
        "aws(PR=cf-eu11) -> EU",
        "build-runtime-aws(PR=cf-eu11) -> EU",
        "azure",
        "build-runtime-azure",
        "azure(PR=cf-ch20) -> EU",
        "build-runtime-azure(PR=cf-ch20) -> EU",
        "gcp",
        "build-runtime-gcp",
        "gcp(PR=cf-sa30) -> PR",
        "build-runtime-gcp(PR=cf-sa30) -> PR",
        "trial -> S",
        "sap-converged-cloud -> HR,S",
        "azure_lite",
        "preview",
        "free",
        "alicloud",
        "build-runtime-alicloud",
        "gdch",
    ];
    HapConfigSpec {
        rule_syntax: Some(RuleSyntax::Keb),
        rules: Some(rules.iter().map(|s| s.to_string()).collect()),
        binding_namespace: "garden-kyma".into(),
        ..Default::default()
    }
}

fn requests_fifty() -> Vec<Request<'static>> {
    let regions = [
        Some("cf-r1"),
        Some("cf-r2"),
        Some("cf-r3"),
        Some("cf-eu10"),
        None,
    ];
    PLANS
        .iter()
        .flat_map(|p| {
            regions.iter().map(move |pr| Request {
                plan: p,
                platform_region: *pr,
                cluster_region: Some("eu-de-1"),
                provider: None,
                global_account: None,
            })
        })
        .collect()
}

fn requests_keb() -> Vec<Request<'static>> {
    let r = |plan, pr, cr, provider| Request {
        plan,
        platform_region: pr,
        cluster_region: cr,
        provider,
        global_account: None,
    };
    vec![
        r("aws", Some("cf-eu10"), Some("eu-central-1"), None),
        r("aws", Some("cf-eu11"), Some("eu-central-1"), None),
        r("azure", Some("cf-ch20"), Some("switzerlandnorth"), None),
        r("gcp", Some("cf-sa30"), Some("me-central2"), None),
        r("gcp", Some("cf-eu30"), Some("europe-west3"), None),
        r("trial", Some("cf-eu10"), Some("eu-central-1"), Some("aws")),
        r(
            "sap-converged-cloud",
            Some("cf-eu20"),
            Some("eu-de-1"),
            None,
        ),
        r(
            "build-runtime-azure",
            Some("cf-eu20"),
            Some("westeurope"),
            None,
        ),
        r("free", None, None, Some("azure")),
        r("gdch", None, None, None),
    ]
}

fn compile(spec: &HapConfigSpec) -> CompiledRules {
    match CompiledRules::from_spec(spec) {
        Ok((r, _)) => r,
        Err(v) => panic!("benchmark rules are invalid:\n{}", v.summary()),
    }
}

/// µs per MissingPool check over `n` bindings (a third of them each aws, gcp and azure; every
/// fourth one owned, every tenth dirty): walking the labels, and from the index's pools.
fn missing_pool_check(rules: &CompiledRules, n: usize) -> (f64, f64) {
    let keys = ResolvedLabelKeys::default();
    let bindings = (0..n).map(|i| {
        let mut labels = std::collections::BTreeMap::new();
        let t = ["aws", "gcp", "azure"][i % 3];
        labels.insert(keys.hyperscaler_type.clone(), t.to_string());
        if i % 4 == 0 {
            labels.insert(keys.tenant_name.clone(), format!("ga-{i}"));
        }
        if i % 10 == 0 {
            labels.insert(keys.dirty.clone(), "true".to_string());
        }
        BindingView {
            name: format!("b-{i:06}"),
            labels: labels.into(),
            ..Default::default()
        }
    });
    let inv = Inventory::build(keys.clone(), bindings, [], []);
    let walk = || rules.missing_pools(inv.bindings().map(|b| &b.view.labels));
    let pools = || rules.missing_pools_in(inv.usable_pools());
    assert_eq!(walk(), pools(), "both checks find the same missing pools");
    let time = |f: &dyn Fn() -> Vec<hap_operator::diag::Diagnostic>, rounds: u32| {
        let start = Instant::now();
        for _ in 0..rounds {
            black_box(f());
        }
        start.elapsed().as_secs_f64() * 1e6 / f64::from(rounds)
    };
    (time(&walk, 20), time(&pools, 2_000))
}

/// ns per evaluation over `rounds` passes of the request list.
fn ns_per_eval(rules: &CompiledRules, reqs: &[Request<'_>], rounds: usize) -> f64 {
    let start = Instant::now();
    for _ in 0..rounds {
        for r in reqs {
            let _ = black_box(rules.evaluate(black_box(r)));
        }
    }
    start.elapsed().as_nanos() as f64 / (rounds * reqs.len()) as f64
}

fn main() {
    let sets = [
        ("50-entry Seed set", compile(&fifty()), requests_fifty()),
        (
            "KEB 20-entry tested set",
            compile(&keb_tested()),
            requests_keb(),
        ),
    ];
    for (name, rules, reqs) in &sets {
        assert_eq!(
            reqs.iter().filter(|r| rules.evaluate(r).is_ok()).count(),
            reqs.len(),
            "{name}: every request matches"
        );
        let _ = ns_per_eval(rules, reqs, 10_000);
        println!(
            "{name}: {:.0} ns/evaluation",
            ns_per_eval(rules, reqs, 200_000)
        );
    }
    let keb = compile(&keb_tested());
    for n in [5_000, 15_000, 50_000] {
        let (walk, pools) = missing_pool_check(&keb, n);
        println!(
            "MissingPool check, KEB set, {n} bindings: {walk:.1} µs walking the labels, {pools:.2} µs from the index's pools"
        );
    }
    let mut c = Criterion::default().configure_from_args();
    let mut group = c.benchmark_group("evaluate");
    for (name, rules, reqs) in &sets {
        group.throughput(Throughput::Elements(reqs.len() as u64));
        group.bench_function(*name, |b| {
            b.iter(|| {
                for r in reqs {
                    let _ = black_box(rules.evaluate(black_box(r)));
                }
            })
        });
    }
    group.finish();
    c.bench_function("compile 50-entry Seed set", |b| {
        b.iter(|| CompiledRules::from_spec(black_box(&fifty())))
    });
    c.final_summary();
}
