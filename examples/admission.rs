//! Admission latency of request sources (`make bench`, i.e. scripts/bench.sh; or
//! `cargo run --release --example admission`): Shoot CREATEs through the real gardener-apiserver,
//! which calls hap-operator's webhook, on a control plane of its own. Prints figures, asserts
//! nothing about time.
//!
//! Phases, each N Shoots (default 100) issued at a fixed rate (default 2/s), every CREATE timed
//! from request to response, each started once the leader has nothing queued (at each rate the
//! shared pool first, then the first claims and their reuses):
//! 1. `first claim`: N tenants' first Shoots — the leader claims a free binding for each (a
//!    compare-and-swap label write on the binding) before the webhook answers.
//! 2. `warm pool`: a second Shoot of each tenant — the tenant's binding is reused.
//! 3. `shared pool`: new tenants' Shoots the rules send to the shared pool — a use of a shared
//!    binding writes nothing on it, so the webhook waits only for the claim's Bound status.
//! 4. `no decision`: Shoots that name their binding and do not opt in (the webhook is not
//!    called): what gardener-apiserver takes for the CREATE alone.
//!
//! Each phase also prints its window (`support/window.rs`): each process's CPU per call, API
//! servers included, how busy the machine was, and kube-apiserver's requests per call.
//!
//! For scale, it also times 10 conditional label patches of a binding (the write that claims
//! one) straight against gardener-apiserver, one after the other.
//!
//! At scale: HAP_BENCH_BACKGROUND=K first creates K Shoots dressed as a landscape's (labels, a
//! status of a few KB; `load/landscape.rs`) on K/2 bindings held by their tenants, so that the
//! webhook decides against a full cache; HAP_BENCH_RATES=10,50 runs phases 1 to 3 at each rate
//! (new tenants, reuses and the shared pool apart), with fresh tenants per rate.
//!
//! Behind a backlog: HAP_BENCH_BACKLOG=1 adds, at each rate, N more shared-pool Shoots sent
//! right after the first claims, without waiting for the leader: the claims kept for the first
//! Shoots' retries are still being decided at the garden's rate, and the shared-pool requests
//! must not wait behind them.
//!
//! Environment: HAP_BENCH_SHOOTS (N), HAP_BENCH_RATE (Shoots per second; HAP_BENCH_RATES, a
//! comma-separated list, overrides it), HAP_BENCH_BACKGROUND (K), HAP_BENCH_BACKLOG,
//! HAP_BENCH_RESYNC (the operator's `--resync`; the sweeps it counts are printed),
//! HAP_BENCH_PHASES=shared (the shared pool's phase alone at each rate), HAP_BENCH_SERIES (a
//! directory for each call's send time and latency, as CSV, a file a phase), HAP_BENCH_DIR
//! (control-plane state), HAP_BIN (the operator binary; default: `hap` next to this example's
//! directory), HAP_K8S_BIN, HAP_GARDENER_APISERVER.

#[path = "../tests/it/support/garden.rs"]
mod garden;
#[path = "load/landscape.rs"]
mod landscape;
#[path = "../tests/it/support/private_env.rs"]
mod private_env;
#[path = "support/window.rs"]
mod window;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use private_env::{OperatorProcess, PrivateEnv, env_num, free_port, hap_binary};
use serde_json::{Value, json};

const PROJECT: &str = "bench";
const CONFIG: &str = "bench";
const CLAIMS_NS: &str = "hap-bench";
/// Requests from this platform region go to the shared pool (rule `aws(PR=…, shared)`).
const SHARED_REGION: &str = "cf-shared";
const SHARED_TYPE: &str = "aws_cf-shared";
const SHARED_BINDINGS: usize = 10;
/// The phases, as their rows name them.
const SHARED: &str = "shared pool (no binding write)";
const FIRST: &str = "first claim (binding claimed)";
const BEHIND: &str = "shared pool, right after the first claims";
const WARM: &str = "warm pool (binding reused)";
const PLAIN: &str = "no decision (webhook not called)";

/// A CA and a serving certificate for 127.0.0.1; returns the CA's PEM.
fn certificates(dir: &Path) -> String {
    let ca_key = rcgen::KeyPair::generate().expect("key");
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_pem = ca.self_signed(&ca_key).expect("ca").pem();
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let key = rcgen::KeyPair::generate().expect("key");
    let mut p = rcgen::CertificateParams::new(vec!["localhost".to_string()]).expect("params");
    p.subject_alt_names
        .push(rcgen::SanType::IpAddress("127.0.0.1".parse().expect("ip")));
    let cert = p.signed_by(&key, &issuer).expect("cert");
    std::fs::write(dir.join("tls.key"), key.serialize_pem()).expect("key");
    std::fs::write(dir.join("tls.crt"), cert.pem()).expect("cert");
    ca_pem
}

fn base64(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            out.push(if i <= chunk.len() {
                char::from(T[((n >> (18 - 6 * i)) & 63) as usize])
            } else {
                '='
            });
        }
    }
    out
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

/// Creates `objs` at `rate` per second, each on its own task; returns every admitted CREATE's
/// latency, the number refused, and which were admitted.
/// What one paced phase gave: the admitted CREATEs' times (sorted), the refusals, of which the
/// webhook did not answer in time (the API server's call to it timed out), and per object
/// whether it was admitted.
struct Paced {
    times: Vec<Duration>,
    refused: usize,
    timed_out: usize,
    admitted: Vec<bool>,
}

/// A refusal because kube-apiserver's (or gardener-apiserver's) call to the webhook ran past its
/// `timeoutSeconds`, as opposed to the webhook's own answer (a denial saying why).
fn timed_out(error: &str) -> bool {
    let e = error.to_ascii_lowercase();
    e.contains("failed calling webhook") && (e.contains("deadline") || e.contains("timeout"))
}

/// What the phases send through, and what their windows are read from.
struct Bench {
    shoots: Api<DynamicObject>,
    client: kube::Client,
    /// The benchmark's directory: every process it started names it on its command line.
    dir: String,
}

async fn paced(b: &Bench, label: &str, objs: Vec<DynamicObject>, rate: usize) -> Paced {
    let api = &b.shoots;
    let every = Duration::from_secs_f64(1.0 / rate.max(1) as f64);
    let calls = objs.len();
    // A line to start a profiler on, for this phase's window.
    println!("paced: {label}: {calls} CREATEs at {rate}/s starting");
    let before = window::sample(&b.client, &b.dir).await;
    let start = tokio::time::Instant::now();
    let mut tasks = Vec::new();
    for (i, obj) in objs.into_iter().enumerate() {
        tokio::time::sleep_until(start + every * i as u32).await;
        let api = api.clone();
        let sent = start.elapsed();
        tasks.push(tokio::spawn(async move {
            let t = Instant::now();
            let r = api.create(&PostParams::default(), &obj).await;
            (sent, t.elapsed(), r.map_err(|e| e.to_string()))
        }));
    }
    let mut p = Paced {
        times: Vec::new(),
        refused: 0,
        timed_out: 0,
        admitted: Vec::new(),
    };
    let mut series = String::new();
    for t in tasks {
        let (sent, d, r) = t.await.expect("task");
        series += &format!(
            "{:.3},{:.1},{}\n",
            sent.as_secs_f64(),
            d.as_secs_f64() * 1e3,
            r.is_ok()
        );
        p.admitted.push(r.is_ok());
        match r {
            Ok(_) => p.times.push(d),
            Err(e) => {
                p.refused += 1;
                if timed_out(&e) {
                    p.timed_out += 1;
                    if p.timed_out == 1 {
                        eprintln!("first time-out: {e}");
                    }
                } else if p.refused - p.timed_out == 1 {
                    eprintln!("first refusal: {e}");
                }
            }
        }
    }
    p.times.sort();
    println!("paced: {label}: done after {:.1?}", start.elapsed());
    window::report(
        label,
        rate,
        calls,
        &before,
        &window::sample(&b.client, &b.dir).await,
    );
    // HAP_BENCH_SERIES=DIR: each call's send time, latency and outcome, a file a phase, to see
    // whether latency comes in waves (something periodic) or grows (a queue).
    if let Some(dir) = std::env::var_os("HAP_BENCH_SERIES") {
        let slug: String = label
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        let file = Path::new(&dir).join(format!("{slug}-{rate}-{}.csv", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let csv = format!("sent_s,latency_ms,admitted\n{series}");
        std::fs::write(&file, csv).expect("write HAP_BENCH_SERIES");
    }
    p
}

/// Waits until the operator has no claim queued for a reconcile slot (two looks a second apart),
/// at most three minutes; says how long it took.
async fn drained(op: &OperatorProcess) {
    let t = Instant::now();
    let mut quiet = 0;
    while quiet < 2 && t.elapsed() < Duration::from_secs(180) {
        let queued: f64 = op
            .get("/metrics")
            .map(|(_, m)| {
                m.lines()
                    .filter(|l| l.starts_with("hap_claim_reconciles_queued"))
                    .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                    .sum()
            })
            .unwrap_or(1.0);
        quiet = if queued == 0.0 { quiet + 1 } else { 0 };
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    println!("queue drained after {:.1?}", t.elapsed());
}

/// Shoots that name their binding and do not opt in: the webhook is not called for them.
fn plain(ns: &str, n: usize, profile: &garden::Profile) -> Vec<DynamicObject> {
    (0..n)
        .map(|i| {
            let o = garden::shoot_object(
                ns,
                &format!("p-{i:04}"),
                &format!("aws-{:04}", i % n),
                garden::BindingRef::CredentialsBinding,
                profile,
            );
            serde_json::from_value(o).expect("shoot")
        })
        .collect()
}

/// `k` Shoots dressed as a landscape's on `k/2` bindings, each held by the tenant of its Shoots:
/// what the webhook decides against on a landscape. Created 32 at a time.
async fn background(client: &kube::Client, ns: &str, k: usize, profile: &garden::Profile) {
    use futures::StreamExt;
    let bindings = k.div_ceil(2);
    futures::stream::iter(0..bindings)
        .for_each_concurrent(32, |i| async move {
            let (name, tenant) = (format!("bg-{i:06}"), format!("bg-ga-{i:06}"));
            let labels = [("hyperscalerType", "aws"), ("tenantName", tenant.as_str())];
            garden::create_binding(client, ns, &name, "aws", &labels).await;
        })
        .await;
    let shoots: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &garden::shoot_resource());
    futures::stream::iter(0..k)
        .for_each_concurrent(32, |i| {
            let shoots = &shoots;
            async move {
                let name = format!("bg-{i:06}");
                let b = i % bindings;
                let mut o = garden::shoot_object(
                    ns,
                    &name,
                    &format!("bg-{b:06}"),
                    garden::BindingRef::CredentialsBinding,
                    profile,
                );
                if landscape::on() {
                    landscape::dress(&mut o, i, &format!("bg-ga-{b:06}"));
                }
                let obj: DynamicObject = serde_json::from_value(o).expect("shoot");
                shoots
                    .create(&PostParams::default(), &obj)
                    .await
                    .expect("create background Shoot");
                landscape::set_status(
                    shoots,
                    &name,
                    landscape::status(i, "aws-eu1", PROJECT, &name),
                )
                .await;
            }
        })
        .await;
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n = env_num("HAP_BENCH_SHOOTS", 100);
    let rates: Vec<usize> = std::env::var("HAP_BENCH_RATES")
        .unwrap_or_else(|_| env_num("HAP_BENCH_RATE", 2).to_string())
        .split(',')
        .filter_map(|r| r.trim().parse().ok())
        .filter(|r| *r > 0)
        .collect();
    assert!(!rates.is_empty(), "HAP_BENCH_RATES: no rate above 0");
    let k = env_num("HAP_BENCH_BACKGROUND", 0);
    let backlog = env_num("HAP_BENCH_BACKLOG", 0) > 0;
    // HAP_BENCH_PHASES=shared: the shared pool's phase alone at each rate (for a long burst of
    // it, whose first claims would otherwise keep the garden busy for minutes).
    let shared_only = match std::env::var("HAP_BENCH_PHASES").as_deref() {
        Err(_) | Ok("all") => false,
        Ok("shared") => true,
        Ok(other) => panic!("HAP_BENCH_PHASES={other}: `shared` or `all`"),
    };
    let free = n * rates.len();
    let dir = std::env::var_os("HAP_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            std::env::temp_dir().join(format!("hap-admission-bench-{}", std::process::id()))
        });
    std::fs::create_dir_all(&dir).expect("bench dir");
    println!(
        "admission benchmark: {n} Shoots per phase at {rates:?}/s, {k} background Shoots, control plane in {}",
        dir.display()
    );
    let started = Instant::now();
    // The control plane in a directory of its own (`down` removes it); the operator's log beside.
    let env = PrivateEnv::up(&dir.join("testenv"));
    println!(
        "control plane with gardener-apiserver up in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let client = env.client().await;
    let ns = garden::create_project(&client, PROJECT).await;
    env.kubectl(&["create", "namespace", CLAIMS_NS]);
    // Pools and the background are a landscape's past, built with ResourceReferenceManager off
    // (it admits ~2.5 binding writes a second); gardener-apiserver restarts with it on before
    // anything is measured.
    let t = Instant::now();
    env.disable_gardener_admission("ResourceReferenceManager");
    for i in 0..(free + 10) {
        garden::create_binding(
            &client,
            &ns,
            &format!("aws-{i:04}"),
            "aws",
            &[("hyperscalerType", "aws")],
        )
        .await;
    }
    // The shared pool: a use of a shared binding writes nothing on it (docs/design-notes.md),
    // so these are the requests that need no binding write at all.
    for i in 0..SHARED_BINDINGS {
        garden::create_binding(
            &client,
            &ns,
            &format!("shared-{i:02}"),
            "aws",
            &[("hyperscalerType", SHARED_TYPE), ("shared", "true")],
        )
        .await;
    }
    let source = json!([{"id": "shoots", "kind": "Shoot", "matchLabels": {"accountpool.io/request": "true"}}]);
    let profile = garden::profile(&client, "aws").await;
    background(&client, &ns, k, &profile).await;
    env.restart_gardener_apiserver(Duration::ZERO);
    println!(
        "pools and background: {} free bindings, {k} Shoots on {} bindings in {:.1?} (ResourceReferenceManager back on)",
        free + 10,
        k.div_ceil(2),
        t.elapsed()
    );
    let cfg = json!({"apiVersion": "accountpool.io/v1alpha1", "kind": "HapConfig", "metadata": {"name": CONFIG},
        "spec": {"bindingNamespace": ns, "rules": ["aws", format!("aws(PR={SHARED_REGION}, shared)")], "requestSources": source}});
    Api::<DynamicObject>::all_with(
        client.clone(),
        &kube::core::ApiResource {
            group: "accountpool.io".into(),
            version: "v1alpha1".into(),
            api_version: "accountpool.io/v1alpha1".into(),
            kind: "HapConfig".into(),
            plural: "hapconfigs".into(),
        },
    )
    .patch(
        CONFIG,
        &PatchParams::apply("bench").force(),
        &Patch::Apply(cfg),
    )
    .await
    .expect("HapConfig");

    let ca = certificates(&dir);
    let port = free_port();
    let args: Vec<String> = [
        "--config-name",
        CONFIG,
        "--claim-namespace",
        CLAIMS_NS,
        // The last-known-good record goes there too: the default (hap-system) does not exist
        // here, and each config reconcile then tried (and failed) to write it.
        "--lease-namespace",
        CLAIMS_NS,
        "--leader-elect=false",
        "--log-format",
        "json",
        "--webhook-addr",
        &format!("127.0.0.1:{port}"),
        "--webhook-cert-file",
        dir.join("tls.crt").to_str().expect("path"),
        "--webhook-key-file",
        dir.join("tls.key").to_str().expect("path"),
        "--webhook-allow-unauthenticated",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain(
        resync()
            .into_iter()
            .flat_map(|r| ["--resync".to_string(), r]),
    )
    .collect();
    let mut op = OperatorProcess::spawn(
        &hap_binary(),
        &env.kubeconfig,
        "bench",
        &args,
        &dir.join("hap.log"),
    );
    let t = Instant::now();
    // Its caches list every background Shoot first: at 100k dressed ones, minutes.
    let limit = Duration::from_secs(60 + k as u64 / 200);
    while op.get("/readyz").map(|(c, _)| c) != Some(200) {
        assert!(
            t.elapsed() < limit,
            "operator not ready after {limit:?}: see {}",
            dir.join("hap.log").display()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!("operator ready after {:.1?}", t.elapsed());
    let webhook = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "hap-bench-shoots"},
        "webhooks": [{"name": "shoots.accountpool.io", "admissionReviewVersions": ["v1"],
            "sideEffects": "NoneOnDryRun", "failurePolicy": "Fail", "timeoutSeconds": 10,
            "clientConfig": {"url": format!("https://127.0.0.1:{port}/mutate/shoots"), "caBundle": base64(ca.as_bytes())},
            "rules": [{"apiGroups": ["core.gardener.cloud"], "apiVersions": ["v1beta1"], "resources": ["shoots"], "operations": ["CREATE", "UPDATE"]}],
            "objectSelector": {"matchLabels": {"accountpool.io/request": "true"}}}],
    });
    let file = dir.join("webhook.json");
    std::fs::write(&file, webhook.to_string()).expect("write webhook");
    let (ok, _, err) = env.kubectl(&["apply", "-f", file.to_str().expect("path")]);
    assert!(ok, "webhook: {err}");

    // Pools exist long before requests arrive in a landscape; give gardener-apiserver's caches
    // (Secrets, authorization decisions) the time to see the bindings just created.
    tokio::time::sleep(Duration::from_secs(15)).await;
    // The cost of one binding write on this gardener-apiserver (a claim makes one).
    let bindings: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &garden::credentials_binding_resource());
    let mut patches = Vec::new();
    for i in 0..10 {
        let name = format!("aws-{:04}", free + i);
        let rv = bindings
            .get(&name)
            .await
            .expect("binding")
            .metadata
            .resource_version;
        let body = json!({"metadata": {"resourceVersion": rv, "labels": {"bench/probe": "1"}}});
        let t = Instant::now();
        bindings
            .patch_metadata(&name, &PatchParams::default(), &Patch::Merge(body))
            .await
            .expect("patch");
        patches.push(t.elapsed());
    }
    patches.sort();
    let shoots: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &garden::shoot_resource());
    let request = |name: String, tenant: String, shared: bool| -> DynamicObject {
        let mut o: Value = garden::shoot_object(
            &ns,
            &name,
            "",
            garden::BindingRef::CredentialsBinding,
            &profile,
        );
        o["spec"]
            .as_object_mut()
            .expect("spec")
            .remove("credentialsBindingName");
        o["metadata"]["labels"] = json!({"accountpool.io/request": "true",
            "accountpool.io/global-account": tenant, "accountpool.io/plan": "aws"});
        if shared {
            o["metadata"]["labels"]["accountpool.io/platform-region"] = json!(SHARED_REGION);
        }
        serde_json::from_value(o).expect("shoot")
    };
    let bench = Bench {
        shoots: shoots.clone(),
        client: client.clone(),
        dir: dir.display().to_string(),
    };
    // Warm the connection and the caches with one request before measuring.
    let _ = shoots
        .create(
            &PostParams::default(),
            &request("warm".into(), "ga-warm".into(), false),
        )
        .await;

    // Each phase starts on a leader with nothing queued: a phase that outran the garden leaves
    // claims kept for their callers' retries, which the leader still decides, and the next
    // phase would measure that backlog (its requests wait behind it for a reconcile slot).
    let mut rows = Vec::new();
    for &rate in &rates {
        let tenant = |i: usize| format!("ga-{rate}-{i:04}");
        let shared: Vec<DynamicObject> = (0..n)
            .map(|i| request(format!("s{rate}-{i:04}"), format!("gs-{rate}-{i:04}"), true))
            .collect();
        drained(&op).await;
        let p0 = paced(&bench, SHARED, shared, rate).await;
        if shared_only {
            rows.push((SHARED, rate, p0));
            continue;
        }
        let first: Vec<DynamicObject> = (0..n)
            .map(|i| request(format!("f{rate}-{i:04}"), tenant(i), false))
            .collect();
        drained(&op).await;
        let p1 = paced(&bench, FIRST, first, rate).await;
        if backlog {
            let behind: Vec<DynamicObject> = (0..n)
                .map(|i| request(format!("b{rate}-{i:04}"), format!("gb-{rate}-{i:04}"), true))
                .collect();
            let p = paced(&bench, BEHIND, behind, rate).await;
            rows.push((BEHIND, rate, p));
        }
        // Second Shoots of the tenants whose first one was admitted (they hold a binding now).
        let warm: Vec<DynamicObject> = (0..n)
            .filter(|i| p1.admitted[*i])
            .map(|i| request(format!("w{rate}-{i:04}"), tenant(i), false))
            .collect();
        drained(&op).await;
        let p2 = paced(&bench, WARM, warm, rate).await;
        rows.push((SHARED, rate, p0));
        rows.push((FIRST, rate, p1));
        rows.push((WARM, rate, p2));
    }
    drained(&op).await;
    let rate = rates[0];
    let plain: Vec<DynamicObject> = if shared_only {
        Vec::new()
    } else {
        plain(&ns, n, &profile)
    };
    if !plain.is_empty() {
        let p4 = paced(&bench, PLAIN, plain, rate).await;
        rows.push((PLAIN, rate, p4));
    }

    println!();
    println!(
        "| phase | background Shoots | sent | admitted | rate | p50 | p99 | max | refused (of which the webhook call timed out) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for (name, rate, p) in &rows {
        let t = &p.times;
        println!(
            "BENCH-ROW admission | {name} | {k} | {} | {} | {rate}/s | {} | {} | {} | {} ({}) |",
            p.admitted.len(),
            t.len(),
            ms(percentile(t, 0.5)),
            ms(percentile(t, 0.99)),
            ms(t.last().copied().unwrap_or_default()),
            p.refused,
            p.timed_out,
        );
    }
    println!(
        "BENCH-ROW admission | (reference) binding label patch, conditional, sequential | {k} | {} | {} | - | {} | {} | {} | 0 (0) |",
        patches.len(),
        patches.len(),
        ms(percentile(&patches, 0.5)),
        ms(percentile(&patches, 0.99)),
        ms(patches.last().copied().unwrap_or_default()),
    );
    if let Some((_, metrics)) = op.get("/metrics") {
        for l in metrics.lines().filter(|l| {
            (l.starts_with("hap_admission_duration_seconds_") && !l.contains("_bucket"))
                || l.starts_with("hap_resync_sweeps_total")
        }) {
            println!("{l}");
        }
    }
    println!();
    println!(
        "reproduce: cargo build --release --bin hap --example admission && HAP_BENCH_SHOOTS={n} HAP_BENCH_RATES={} HAP_BENCH_BACKGROUND={k} HAP_BENCH_BACKLOG={}{} $CARGO_TARGET_DIR/release/examples/admission",
        rates
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(","),
        u8::from(backlog),
        resync().map_or(String::new(), |r| format!(" HAP_BENCH_RESYNC={r}"))
            + if shared_only {
                " HAP_BENCH_PHASES=shared"
            } else {
                ""
            },
    );
    if let Some((rss, hwm)) = op.memory_kib() {
        println!(
            "operator memory at the end: VmRSS {:.0} MiB, VmHWM {:.0} MiB",
            rss as f64 / 1024.0,
            hwm as f64 / 1024.0
        );
    }
    op.kill();
    env.down();
}

/// The operator's `--resync` when HAP_BENCH_RESYNC sets it: a short period puts sweeps of the
/// whole background inside the measured phases.
fn resync() -> Option<String> {
    std::env::var("HAP_BENCH_RESYNC").ok()
}
