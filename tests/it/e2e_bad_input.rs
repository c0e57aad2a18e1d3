//! End-to-end (real kube-apiserver): the bad-input corpus of tests/data/bad/ (see cases.yaml and
//! generate.py there). Every case is applied against the control plane with a `hap run` process
//! serving a valid HapConfig:
//! - `apply` cases: `kubectl apply` must fail and its message must name the field;
//! - `status` cases: accepted, then the named reason appears in status — RulesValid=False naming
//!   the entry's index for HapConfigs (applied over the config in force, one after the other),
//!   the Ready reason for AccountClaims.
//!
//! Meanwhile valid claims keep arriving and must bind (the last valid generation keeps serving),
//! and at the end the operator must still be alive, answering /livez and /readyz, with no panic
//! in its log.
//!
//! Besides the corpus: Gardener objects the real gardener-apiserver accepts but no pool can use
//! (bindings without the pool labels, a Shoot naming a binding that is gone), and what the
//! operator shows for them.

use crate::support;

// private_env is self-contained (examples/load/main.rs includes it alone), so it brings its own copy
// of support's crd_wait module.
use crate::support::private_env;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use hap_operator::api::{AccountClaim, ClaimPhase, HapConfig};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde::Deserialize;
use serde_json::json;
use support::*;

const PLACEHOLDER_NS: &str = "garden-bad-input";
const IN_FORCE_PLACEHOLDER: &str = "bad-config-in-force";
const MANAGER: &str = "bad-input-test";

/// The config in force while the corpus is applied (claim status cases are written against it).
const RULES: &[&str] = &[
    "aws",
    "gcp",
    "gcp(PR=cf-sa30)",
    "trial(shared)",
    "free(shared)",
    "azure(PR=cf-eu10)",
    "sap-converged-cloud(CR=*, shared)",
];

#[derive(Debug, Deserialize)]
struct Index {
    cases: Vec<Case>,
}

#[derive(Clone, Debug, Deserialize)]
struct Case {
    id: String,
    file: String,
    kind: String,
    expect: String,
    field: Option<String>,
    condition: Option<String>,
    reason: Option<String>,
    index: Option<usize>,
    substring: Option<String>,
    setup: Option<String>,
}

fn corpus_dir() -> PathBuf {
    repo_root().join("tests/data/bad")
}

fn load_cases() -> Vec<Case> {
    let text = std::fs::read_to_string(corpus_dir().join("cases.yaml")).expect("cases.yaml");
    let index: Index = serde_saphyr::from_str(&text).expect("cases.yaml parses");
    index.cases
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.expect("blocking task")
}

/// `apply` cases: kubectl must refuse the file and name the field.
async fn apply_case(case: Case, claims_ns: String) -> Result<(), String> {
    let dir = corpus_dir();
    let ns_args: Vec<String> = if case.kind == "AccountClaim" {
        vec!["-n".into(), claims_ns]
    } else {
        vec![]
    };
    let run = move |file: String, verb: &'static str| {
        let path = dir.join(file).to_string_lossy().into_owned();
        let mut args: Vec<String> = vec![verb.into()];
        args.extend(ns_args.iter().cloned());
        args.extend(["-f".to_string(), path]);
        async move {
            blocking(move || {
                let refs: Vec<&str> = args.iter().map(String::as_str).collect();
                kubectl(&refs)
            })
            .await
        }
    };
    if let Some(setup) = &case.setup {
        let (ok, _, err) = run(setup.clone(), "apply").await;
        if !ok {
            return Err(format!("{}: setup {setup} was refused: {err}", case.id));
        }
    }
    let (ok, out, err) = run(case.file.clone(), "apply").await;
    if ok {
        // Never leave an accepted bad object behind in the shared control plane.
        let _ = run(case.file.clone(), "delete").await;
        return Err(format!("{}: {} was accepted: {out}", case.id, case.file));
    }
    let field = case.field.as_deref().unwrap_or_default();
    let sub = case.substring.as_deref().unwrap_or_default();
    if !err.contains(field) || !err.contains(sub) {
        return Err(format!(
            "{}: the refusal does not name `{field}`{}: {err}",
            case.id,
            if sub.is_empty() {
                String::new()
            } else {
                format!(" with `{sub}`")
            }
        ));
    }
    Ok(())
}

/// A case file as JSON, with the placeholders replaced.
fn manifest(case: &Case, config: &str, bindings_ns: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(corpus_dir().join(&case.file)).expect("case file");
    let mut v: serde_json::Value =
        serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", case.file));
    if v["metadata"]["name"] == IN_FORCE_PLACEHOLDER {
        v["metadata"]["name"] = json!(config);
    }
    if v["spec"]["bindingNamespace"] == PLACEHOLDER_NS {
        v["spec"]["bindingNamespace"] = json!(bindings_ns);
    }
    v
}

/// `status` cases of HapConfig, applied one after the other over the config in force.
async fn config_status_case(
    api: &Api<HapConfig>,
    case: &Case,
    config: &str,
    bindings_ns: &str,
) -> Result<(), String> {
    let body = manifest(case, config, bindings_ns);
    let applied = api
        .patch(
            config,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(body),
        )
        .await
        .map_err(|e| format!("{}: refused at apply, expected accepted: {e}", case.id))?;
    let generation = applied.metadata.generation;
    let cond_type = case.condition.as_deref().unwrap_or("RulesValid");
    let start = Instant::now();
    let (cond, active) = loop {
        if start.elapsed() > Duration::from_secs(30) {
            return Err(format!(
                "{}: no {cond_type} condition for generation {generation:?} within 30s",
                case.id
            ));
        }
        if let Ok(cfg) = api.get(config).await
            && let Some(st) = cfg.status
            && st.observed_generation == generation
            && let Some(c) = condition(&st.conditions, cond_type)
        {
            break (c.clone(), st.active_generation);
        }
        tokio::time::sleep(Duration::from_millis(40)).await;
    };
    let mut problems = Vec::new();
    if cond.status != "False" {
        problems.push(format!("{cond_type} is {}", cond.status));
    }
    if let Some(reason) = &case.reason
        && &cond.reason != reason
    {
        problems.push(format!("reason {} instead of {reason}", cond.reason));
    }
    if let Some(i) = case.index
        && !cond.message.contains(&format!("rule {i} "))
    {
        problems.push(format!("the message does not name rule {i}"));
    }
    if let Some(sub) = &case.substring
        && !cond.message.contains(sub.as_str())
    {
        problems.push(format!("the message lacks `{sub}`"));
    }
    if active != Some(1) {
        problems.push(format!(
            "activeGeneration {active:?}: the last valid generation (1) must stay in force"
        ));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{}: {}; condition: {:?}",
            case.id,
            problems.join(", "),
            cond.message
        ))
    }
}

/// `status` cases of AccountClaim: accepted, then the Ready reason.
async fn claim_status_cases(
    client: &kube::Client,
    cases: Vec<Case>,
    claims_ns: &str,
) -> Vec<Result<(), String>> {
    let api: Api<AccountClaim> = Api::namespaced(client.clone(), claims_ns);
    let mut names = Vec::new();
    let mut out = Vec::new();
    for case in &cases {
        let body = manifest(case, "", "");
        let name = body["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let claim: AccountClaim = match serde_json::from_value(body) {
            Ok(c) => c,
            Err(e) => {
                out.push(Err(format!("{}: not an AccountClaim: {e}", case.id)));
                continue;
            }
        };
        match api.create(&PostParams::default(), &claim).await {
            Ok(_) => names.push((case.clone(), name)),
            Err(e) => out.push(Err(format!(
                "{}: refused at apply, expected accepted: {e}",
                case.id
            ))),
        }
    }
    let start = Instant::now();
    let mut pending: BTreeMap<String, (Case, String)> = names
        .into_iter()
        .map(|(c, n)| (n.clone(), (c, n)))
        .collect();
    while !pending.is_empty() && start.elapsed() < Duration::from_secs(60) {
        for (name, (case, _)) in pending.clone() {
            let Ok(c) = api.get(&name).await else {
                continue;
            };
            let Some(ready) = c
                .status
                .as_ref()
                .and_then(|s| condition(&s.conditions, "Ready").cloned())
            else {
                continue;
            };
            let want = case.reason.as_deref().unwrap_or_default();
            if ready.reason != want {
                continue;
            }
            pending.remove(&name);
            let sub = case.substring.as_deref().unwrap_or_default();
            let phase = c.status.as_ref().and_then(|s| s.phase);
            out.push(if !ready.message.contains(sub) {
                Err(format!(
                    "{}: Ready {want}, but the message lacks `{sub}`: {}",
                    case.id, ready.message
                ))
            } else if phase == Some(ClaimPhase::Bound) {
                Err(format!("{}: Bound although refused", case.id))
            } else {
                Ok(())
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for (name, (case, _)) in pending {
        let got = api
            .get(&name)
            .await
            .ok()
            .and_then(|c| c.status)
            .and_then(|s| condition(&s.conditions, "Ready").cloned())
            .map(|c| format!("{}: {}", c.reason, c.message));
        out.push(Err(format!(
            "{}: no Ready reason {:?} within 60s (got {got:?})",
            case.id, case.reason
        )));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_bad_input_is_rejected_where_the_corpus_says_and_the_operator_keeps_serving() {
    let cases = load_cases();
    assert!(cases.len() >= 200, "the corpus has {} cases", cases.len());
    let client = client().await;
    let bindings_ns = project(&client).await;
    let claims_ns = namespace(&client, "bad-claims").await;
    let config = unique("bad-input");

    // The config in force: generation 1, valid, serving claims of plan aws.
    let configs: Api<HapConfig> = Api::all(client.clone());
    let body = json!({"apiVersion": "accountpool.io/v1alpha1", "kind": "HapConfig", "metadata": {"name": config},
        "spec": {"bindingNamespace": bindings_ns, "rules": RULES}});
    configs
        .patch(
            &config,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(body),
        )
        .await
        .expect("apply the valid HapConfig");
    for i in 0..20 {
        create_binding(
            &client,
            &bindings_ns,
            &format!("aws-{i:02}"),
            "aws",
            &[("hyperscalerType", "aws")],
        )
        .await;
    }
    create_binding(
        &client,
        &bindings_ns,
        "trial-aws",
        "aws",
        &[("hyperscalerType", "aws"), ("shared", "true")],
    )
    .await;

    let log = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{config}.log"));
    let _ = std::fs::remove_file(&log);
    let args: Vec<String> = [
        "--config-name",
        &config,
        "--claim-namespace",
        &claims_ns,
        "--mark-ignored-configs=false",
        "--leader-elect=false",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut operator = private_env::OperatorProcess::spawn(
        std::path::Path::new(env!("CARGO_BIN_EXE_hap")),
        &kubeconfig(),
        "bad-input",
        &args,
        &log,
    );
    let port = operator.port;
    eventually(Duration::from_secs(60), "operator /readyz", || async move {
        blocking(move || private_env::http_get(port, "/readyz"))
            .await
            .filter(|(code, _)| *code == 200)
    })
    .await;
    eventually(Duration::from_secs(60), "HapConfig Ready", || {
        let (configs, config) = (configs.clone(), config.clone());
        async move {
            let st = configs.get(&config).await.ok()?.status?;
            let c = condition(&st.conditions, "RulesValid")?;
            (c.status == "True" && st.active_generation == Some(1)).then_some(())
        }
    })
    .await;

    let started = Instant::now();
    let by = |kind: &str, expect: &str| -> Vec<Case> {
        cases
            .iter()
            .filter(|c| c.kind == kind && c.expect == expect)
            .cloned()
            .collect()
    };
    let config_status = by("HapConfig", "status");
    let claim_status = by("AccountClaim", "status");
    let applies: Vec<Case> = cases
        .iter()
        .filter(|c| c.expect == "apply")
        .cloned()
        .collect();
    let unknown: Vec<&Case> = cases
        .iter()
        .filter(|c| {
            !matches!(c.expect.as_str(), "apply" | "status")
                || !matches!(c.kind.as_str(), "HapConfig" | "AccountClaim")
        })
        .collect();
    assert!(
        unknown.is_empty(),
        "cases of no known kind or expectation: {unknown:?}"
    );

    // Valid claims keep arriving while the corpus is applied; every one must bind.
    let done = Arc::new(AtomicBool::new(false));
    let valid = {
        let (done, claims) = (
            done.clone(),
            Api::<AccountClaim>::namespaced(client.clone(), &claims_ns),
        );
        tokio::spawn(async move {
            let mut bound = Vec::new();
            let mut k = 0;
            while !done.load(Ordering::SeqCst) || k < 3 {
                let name = format!("valid-{k:03}");
                let claim: AccountClaim = serde_json::from_value(json!({
                    "apiVersion": "accountpool.io/v1alpha1", "kind": "AccountClaim",
                    "metadata": {"name": name},
                    "spec": {"globalAccount": format!("ga-valid-{}", k % 10), "plan": "aws", "shootName": format!("valid-{k:03}")},
                }))
                .expect("claim");
                claims
                    .create(&PostParams::default(), &claim)
                    .await
                    .expect("create a valid claim");
                let start = Instant::now();
                let binding = loop {
                    let c = claims.get(&name).await.expect("get valid claim");
                    if let Some(st) = c.status
                        && st.phase == Some(ClaimPhase::Bound)
                    {
                        break st.credentials_binding_name;
                    }
                    assert!(
                        start.elapsed() < Duration::from_secs(60),
                        "valid claim {name} did not bind within 60s while bad input was applied"
                    );
                    tokio::time::sleep(Duration::from_millis(100)).await;
                };
                let livez = blocking(move || private_env::http_get(port, "/livez")).await;
                assert_eq!(
                    livez.map(|l| l.0),
                    Some(200),
                    "/livez while bad input was applied"
                );
                bound.push((name, binding, start.elapsed()));
                k += 1;
                tokio::time::sleep(Duration::from_millis(700)).await;
            }
            bound
        })
    };

    // Lane 1: HapConfig status cases, one after the other over the config in force.
    let lane_config = {
        let (configs, config, bindings_ns) = (configs.clone(), config.clone(), bindings_ns.clone());
        tokio::spawn(async move {
            let mut out = Vec::new();
            for case in &config_status {
                out.push(config_status_case(&configs, case, &config, &bindings_ns).await);
            }
            out
        })
    };
    // Lane 2: AccountClaim status cases.
    let lane_claims = {
        let (client, claims_ns) = (client.clone(), claims_ns.clone());
        tokio::spawn(async move { claim_status_cases(&client, claim_status, &claims_ns).await })
    };
    // Lane 3: everything the API server must refuse, three kubectl processes at a time.
    let apply_results: Vec<Result<(), String>> = futures::stream::iter(applies)
        .map(|c| apply_case(c, claims_ns.clone()))
        .buffer_unordered(3)
        .collect()
        .await;
    let apply_time = started.elapsed();
    let claim_results = lane_claims.await.expect("claim lane");
    let config_results = lane_config.await.expect("config lane");
    let config_time = started.elapsed();
    done.store(true, Ordering::SeqCst);
    let bound = valid.await.expect("valid claims keep binding");

    // The operator is still up and well.
    let alive = operator.exited().is_none();
    let livez = blocking(move || private_env::http_get(port, "/livez"))
        .await
        .map(|r| r.0);
    let readyz = blocking(move || private_env::http_get(port, "/readyz"))
        .await
        .map(|r| r.0);
    let log_text = std::fs::read_to_string(&log).unwrap_or_default();
    let panics: Vec<&str> = log_text
        .lines()
        .filter(|l| l.contains("panicked"))
        .collect();
    let active = configs
        .get(&config)
        .await
        .expect("HapConfig")
        .status
        .and_then(|s| s.active_generation);
    operator.kill();

    let mut failures: Vec<String> = Vec::new();
    let mut tally: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for (results, group) in [
        (&apply_results, "apply"),
        (&config_results, "HapConfig status"),
        (&claim_results, "AccountClaim status"),
    ] {
        for r in results {
            let t = tally.entry(group.to_string()).or_default();
            t.0 += 1;
            if let Err(e) = r {
                t.1 += 1;
                failures.push(e.clone());
            }
        }
    }
    let total: usize = tally.values().map(|t| t.0).sum();
    println!("bad-input corpus: {total} cases");
    for (group, (n, failed)) in &tally {
        println!("  {group:<20} {n:>4} cases, {failed} not rejected as the corpus says");
    }
    println!(
        "  apply lane {apply_time:.1?}, all lanes {config_time:.1?}; {} valid claims bound meanwhile (slowest {:.1?})",
        bound.len(),
        bound.iter().map(|b| b.2).max().unwrap_or_default()
    );
    println!(
        "  operator alive {alive}, /livez {livez:?}, /readyz {readyz:?}, panics {}, activeGeneration {active:?}",
        panics.len()
    );
    assert_eq!(total, cases.len(), "every case ran");
    assert!(
        failures.is_empty(),
        "{} of {total} cases misbehaved:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(
        alive && livez == Some(200) && readyz == Some(200),
        "the operator must stay up"
    );
    assert!(panics.is_empty(), "panics in the operator log: {panics:?}");
    assert_eq!(active, Some(1), "the valid generation stays in force");
    assert!(bound.len() >= 3 && bound.iter().all(|b| b.1.is_some()));
    let _ = configs.delete(&config, &Default::default()).await;
    let _ = std::fs::remove_file(&log);
}

/// Gardener objects the real gardener-apiserver accepts but no pool can use:
/// - a binding without the pool labels, and one whose `hyperscalerType` no rule names. They are
///   in no pool: the operator never writes them, the pool figures do not count them, and a claim
///   for the pool waits with `PoolExhausted` naming the selector that matched nothing;
/// - a Shoot naming a binding that does not exist. gardener-apiserver refuses such a Shoot at
///   creation, but the binding can be deleted under a running Shoot (in a landscape a
///   gardener-controller-manager finalizer holds it back; none runs here). The Shoot counts on no
///   binding: the pool figures ignore it, the claim bound to the deleted binding reports
///   `BindingLost`, and claims of the pool bind to the bindings that exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gardener_objects_no_pool_can_use_are_left_alone() {
    let hap = Hap::new(&["aws", "gcp"], json!({})).await;
    hap.binding("nolabels", "aws", &[]).await;
    hap.binding("aws-typo", "aws", &[("hyperscalerType", "aws_typo")])
        .await;
    hap.binding("gcp-1", "gcp", &[("hyperscalerType", "gcp")])
        .await;
    let bindings = bindings_api(&hap.garden, &hap.bindings_ns);
    let version = |b: &str| {
        let bindings = bindings.clone();
        let b = b.to_string();
        async move {
            bindings
                .get(&b)
                .await
                .expect("binding")
                .metadata
                .resource_version
        }
    };
    let before = (version("nolabels").await, version("aws-typo").await);

    // The Shoot's binding goes away under it.
    hap.claim(
        "gcp-a",
        json!({"globalAccount": "ga-1", "plan": "gcp", "shootName": "s-gcp"}),
    )
    .await;
    assert_eq!(hap.bound("gcp-a").await, "gcp-1");
    hap.shoot("s-gcp", "gcp-1").await;
    bindings
        .delete("gcp-1", &Default::default())
        .await
        .expect("the API lets the binding go while a Shoot names it");
    let lost = hap.ready_reason("gcp-a", "BindingLost").await;
    assert!(lost.contains("gcp-1"), "{lost}");

    // No binding of the aws pool exists; the unlabelled ones are not taken instead.
    hap.claim("aws-a", json!({"globalAccount": "ga-2", "plan": "aws"}))
        .await;
    let msg = hap.ready_reason("aws-a", "PoolExhausted").await;
    assert!(msg.contains("hyperscalerType=aws"), "{msg}");

    // A new gcp binding serves the pool; the orphaned Shoot counts on nothing.
    hap.binding("gcp-2", "gcp", &[("hyperscalerType", "gcp")])
        .await;
    hap.claim("gcp-b", json!({"globalAccount": "ga-3", "plan": "gcp"}))
        .await;
    assert_eq!(hap.bound("gcp-b").await, "gcp-2");
    let gcp = eventually(
        Duration::from_secs(30),
        "pool figures with gcp-2",
        || async {
            let st = hap.config_status().await;
            let pools: Vec<_> = st.rules.iter().flat_map(|r| r.pools.clone()).collect();
            assert!(
                !pools.iter().any(|p| p.hyperscaler_type != "gcp"),
                "bindings without the pool labels form no pool: {pools:?}"
            );
            let gcp = pools.iter().find(|p| p.hyperscaler_type == "gcp")?.clone();
            (gcp.total == 1 && gcp.claimed == 1).then_some(gcp)
        },
    )
    .await;
    assert_eq!(gcp.clusters, 1, "only gcp-b's cluster: {gcp:?}");
    // The HapConfig says the aws entry has no pool, although two aws bindings exist.
    let missing = hap.config_condition("PoolsAvailable", "False").await;
    assert!(
        missing.reason == "MissingPool" && missing.message.contains("`aws`"),
        "{missing:?}"
    );
    assert_eq!(
        (version("nolabels").await, version("aws-typo").await),
        before,
        "bindings in no pool are never written"
    );
    for b in ["nolabels", "aws-typo"] {
        assert!(!hap.labels(b).await.contains_key("tenantName"));
    }
}
