//! Moving a landscape shaped exactly as KEB leaves it onto hap-operator, on the real
//! kube-apiserver and gardener-apiserver: the HapConfig comes from KEB's values through
//! `hap migrate --keb-values`; observe (`hap migrate --report` reads the landscape and writes no
//! binding) → adopt (each KEB assignment recorded without a binding write) → cutover (new
//! requests served from free bindings, no account changes hands) → rollback (the operator gone,
//! the labels are KEB's own and KEB's selector finds exactly the free bindings).

use crate::support;

use std::collections::BTreeMap;
use std::process::Command;

use hap_operator::api::{ClaimPhase, Decision};
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams};
use serde_json::{Value, json};
use support::garden::{
    BindingRef, create_secret_binding, credentials_binding_resource, profile,
    secret_binding_resource, shoot_object, shoot_resource,
};
use support::platform::{RuntimeSpec, api, install_platform_crds, runtime, runtime_resource};
use support::{Hap, condition, eventually, namespace};

const GA_OLD: &str = "ga-3";

/// The report and the observation read every AccountClaim of the cluster: the tests of this file
/// run one after the other, so that neither sees the other's claims come and go between reads.
static ONE_LANDSCAPE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// `hap migrate ...` with KUBECONFIG; stdout, stderr and the exit code. `HAP_BIN` names another
/// copy of the binary, for checkouts that share one target directory.
fn hap_cli(args: &[&str]) -> (String, String, i32) {
    let bin = std::env::var_os("HAP_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_hap").into());
    let o = Command::new(bin).args(args).output().expect("run hap");
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
        o.status.code().unwrap_or(-1),
    )
}

/// Name → (resourceVersion, labels, finalizers) of every binding of both kinds.
async fn bindings(
    client: &Client,
    ns: &str,
) -> BTreeMap<String, (String, BTreeMap<String, String>, Vec<String>)> {
    let mut out = BTreeMap::new();
    for (kind, ar) in [
        ("CredentialsBinding", credentials_binding_resource()),
        ("SecretBinding", secret_binding_resource()),
    ] {
        let list = Api::<DynamicObject>::namespaced_with(client.clone(), ns, &ar)
            .list(&ListParams::default())
            .await
            .expect("list bindings");
        for b in list.items {
            out.insert(
                format!("{kind}/{}", b.metadata.name.clone().unwrap_or_default()),
                (
                    b.metadata.resource_version.clone().unwrap_or_default(),
                    b.metadata.labels.clone().unwrap_or_default(),
                    b.metadata.finalizers.clone().unwrap_or_default(),
                ),
            );
        }
    }
    out
}

/// The annotations of `Kind/name`.
async fn annotations(client: &Client, ns: &str, name: &str) -> BTreeMap<String, String> {
    let (kind, name) = name.split_once('/').expect("Kind/name");
    let ar = if kind == "SecretBinding" {
        secret_binding_resource()
    } else {
        credentials_binding_resource()
    };
    Api::<DynamicObject>::namespaced_with(client.clone(), ns, &ar)
        .get(name)
        .await
        .expect("get binding")
        .metadata
        .annotations
        .unwrap_or_default()
}

/// The names KEB's claim selector (`Claim` in its label_selector.go) lists for plain aws.
async fn keb_free(client: &Client, ns: &str) -> Vec<String> {
    let lp = ListParams::default()
        .labels("hyperscalerType=aws,!euAccess,shared!=true,!dirty,!tenantName");
    let mut names: Vec<String> =
        Api::<DynamicObject>::namespaced_with(client.clone(), ns, &credentials_binding_resource())
            .list(&lp)
            .await
            .expect("list")
            .items
            .into_iter()
            .filter_map(|b| b.metadata.name)
            .collect();
    names.sort();
    names
}

/// The landscape: what KEB's claim, release and Gardener's migration leave behind.
async fn landscape(hap: &Hap, rt_ns: &str) {
    let aws = [("hyperscalerType", "aws")];
    hap.binding("aws-1", "aws", &[aws[0], ("tenantName", "ga-1")])
        .await;
    hap.binding(
        "aws-2",
        "aws",
        &[aws[0], ("tenantName", "ga-2"), ("dirty", "true")],
    )
    .await;
    hap.binding("aws-3", "aws", &[aws[0], ("tenantName", GA_OLD)])
        .await;
    // The SecretBinding KEB used before 2026, beside the CredentialsBinding of the same Secret.
    create_secret_binding(
        &hap.garden,
        &hap.bindings_ns,
        "aws-3",
        "aws",
        &[aws[0], ("tenantName", GA_OLD)],
    )
    .await;
    hap.binding("aws-4", "aws", &aws).await;
    hap.binding("aws-5", "aws", &aws).await;
    hap.binding("trial-1", "aws", &[aws[0], ("shared", "true")])
        .await;
    hap.shoot("s-1", "aws-1").await;
    let p = profile(&hap.garden, "aws").await;
    let old = shoot_object(
        &hap.bindings_ns,
        "s-3",
        "aws-3",
        BindingRef::SecretBinding,
        &p,
    );
    api(&hap.garden, &hap.bindings_ns, &shoot_resource())
        .create(&Default::default(), &serde_json::from_value(old).unwrap())
        .await
        .expect("create the Shoot on the SecretBinding");
    let rts = api(&hap.client, rt_ns, &runtime_resource());
    for (name, ga, pr, binding) in [
        ("rt-1", "ga-1", "cf-eu10", "aws-1"),
        ("rt-3", GA_OLD, "cf-eu11", "aws-3"),
    ] {
        let spec = RuntimeSpec {
            name,
            global_account: Some(ga),
            plan: "aws",
            platform_region: pr,
            region: "eu-central-1",
            provider: "aws",
            binding,
            extra_labels: &[],
        };
        rts.create(&Default::default(), &runtime(rt_ns, "keb-mig", &spec))
            .await
            .expect("create Runtime");
    }
}

/// The HapConfig `hap migrate --keb-values` makes of KEB's values, applied to this test's names,
/// with `more` merged into its spec.
async fn config_from_keb_values(hap: &Hap, more: Value) {
    let (manifest, stderr, code) = hap_cli(&[
        "migrate",
        "--keb-values",
        "tests/data/keb/values.yaml",
        "--binding-namespace",
        &hap.bindings_ns,
    ]);
    assert_eq!(code, 0, "{stderr}");
    println!("$ hap migrate --keb-values values.yaml\n{manifest}{stderr}");
    let doc: Value = serde_saphyr::from_str(&manifest).expect("manifest");
    let spec = &doc["spec"];
    let rules: Vec<&str> = spec["rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let mut extra = spec.clone();
    extra.as_object_mut().unwrap().remove("rules");
    extra["plans"] = json!({"trial": {"providerFromRequest": true}});
    for (k, v) in more.as_object().into_iter().flatten() {
        extra[k] = v.clone();
    }
    hap.apply_config(&rules, extra).await;
}

fn rows(report: &Value) -> BTreeMap<String, (String, String)> {
    report["requests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["object"].as_str().unwrap().to_string(),
                (
                    r["verdict"].as_str().unwrap().to_string(),
                    r["message"].as_str().unwrap().to_string(),
                ),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keb_landscape_goes_through_observe_adopt_cutover_and_rollback() {
    let _one = ONE_LANDSCAPE_AT_A_TIME.lock().await;
    install_platform_crds().await;
    let mut hap = Hap::without_operator(&["aws"], json!({})).await;
    let rt_ns = namespace(&hap.client, "kcp").await;
    config_from_keb_values(&hap, json!({})).await;
    landscape(&hap, &rt_ns).await;
    let before = bindings(&hap.garden, &hap.bindings_ns).await;
    assert_eq!(
        keb_free(&hap.garden, &hap.bindings_ns).await,
        ["aws-4", "aws-5"]
    );

    // Observe: the report reads the landscape and writes no binding.
    let config = hap.config.clone();
    let report_args = [
        "migrate",
        "--report",
        "--config",
        &config,
        "--runtime-namespace",
        &rt_ns,
    ];
    let (text, stderr, code) = hap_cli(&report_args);
    assert_eq!(code, 0, "{stderr}");
    println!("$ hap migrate --report\n{text}");
    let mut json_args = report_args.to_vec();
    json_args.extend(["-o", "json"]);
    let (out, stderr, code) = hap_cli(&json_args);
    assert_eq!(code, 0, "{stderr}");
    let report: Value = serde_json::from_str(&out).expect("json report");
    assert_eq!(
        report["bindings"],
        json!({"total": 6, "free": 2, "claimed": 2, "dirty": 1, "shared": 1})
    );
    let r = rows(&report);
    assert_eq!(r[&format!("{rt_ns}/rt-1")].0, "Agrees", "{r:?}");
    assert_eq!(
        r[&format!("{}/s-1", hap.bindings_ns)].0,
        "TenancyOnly",
        "{r:?}"
    );
    // KEB put an EU request on a plain account: adopted as it is, reported.
    assert_eq!(r[&format!("{rt_ns}/rt-3")].0, "OtherPool", "{r:?}");
    assert!(r[&format!("{rt_ns}/rt-3")].1.contains("euAccess"), "{r:?}");
    assert_eq!(
        r[&format!("{}/s-3", hap.bindings_ns)].0,
        "TenancyOnly",
        "{r:?}"
    );
    let ga2 = report["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tenant"] == "ga-2")
        .expect("ga-2");
    assert_eq!(ga2["dirty"], json!(["aws-2"]));
    assert_eq!(
        bindings(&hap.garden, &hap.bindings_ns).await,
        before,
        "observe wrote a binding"
    );

    // Adopt: the operator records every KEB assignment; no binding is written.
    hap.start_operator().await;
    for (claim, ga, binding, pr) in [
        ("adopt-1", "ga-1", "aws-1", "cf-eu10"),
        ("adopt-3", GA_OLD, "aws-3", "cf-eu11"),
    ] {
        hap.claim(
            claim,
            json!({"globalAccount": ga, "plan": "aws", "platformRegion": pr, "adoptBinding": binding}),
        )
        .await;
        assert_eq!(hap.bound(claim).await, binding);
        let st = hap.claims().get(claim).await.unwrap().status.unwrap();
        assert_eq!(st.decision, Some(Decision::Adopted));
    }

    // Cutover: a new tenant's request is served from a free binding; nobody else's moves.
    hap.claim(
        "new-4",
        json!({"globalAccount": "ga-4", "plan": "aws", "platformRegion": "cf-eu10"}),
    )
    .await;
    let got = hap.bound("new-4").await;
    assert!(["aws-4", "aws-5"].contains(&got.as_str()), "{got}");
    let after = bindings(&hap.garden, &hap.bindings_ns).await;
    let adopted = ["CredentialsBinding/aws-1", "CredentialsBinding/aws-3"];
    let claimed = format!("CredentialsBinding/{got}");
    for (name, (rv, labels, finalizers)) in &after {
        let (rv0, labels0, _) = &before[name];
        assert!(
            finalizers.is_empty(),
            "{name} has finalizers {finalizers:?}"
        );
        if name == &claimed {
            assert_eq!(labels.get("tenantName").map(String::as_str), Some("ga-4"));
        } else if adopted.contains(&name.as_str()) {
            // Adoption records its claim in one `accountpool.io/` annotation; KEB's labels stay.
            assert_eq!(labels, labels0, "{name}: labels changed");
            let notes = annotations(&hap.garden, &hap.bindings_ns, name).await;
            assert!(
                notes.keys().all(|k| k.starts_with("accountpool.io/")),
                "{name}: {notes:?}"
            );
        } else {
            assert_eq!((rv, labels), (rv0, labels0), "{name} was written");
        }
    }
    let claim = hap.claims().get("new-4").await.unwrap();
    assert_eq!(claim.status.unwrap().phase, Some(ClaimPhase::Bound));
    // After cutover the report counts the operator's own claims with the landscape's.
    let (text, _, _) = hap_cli(&report_args);
    println!("$ hap migrate --report   # after cutover\n{text}");
    let (out, stderr, code) = hap_cli(&json_args);
    assert_eq!(code, 0, "{stderr}");
    let r = rows(&serde_json::from_str(&out).expect("json report"));
    assert_eq!(r[&format!("{}/new-4", hap.claims_ns)].0, "Agrees", "{r:?}");
    assert_eq!(
        r[&format!("{}/adopt-1", hap.claims_ns)].0,
        "Agrees",
        "{r:?}"
    );
    assert_eq!(
        r[&format!("{}/adopt-3", hap.claims_ns)].0,
        "OtherPool",
        "{r:?}"
    );

    // Rollback: the operator goes; KEB's own selector finds exactly the free bindings, and the
    // tenant labels are KEB's (`tenantName`), so KEB reuses ga-4's account as its own.
    hap.stop_operator().await;
    let free: Vec<String> = ["aws-4", "aws-5"]
        .into_iter()
        .filter(|b| *b != got)
        .map(str::to_string)
        .collect();
    assert_eq!(keb_free(&hap.garden, &hap.bindings_ns).await, free);
    let tenant_of =
        |t: &str| format!("hyperscalerType=aws,!euAccess,shared!=true,!dirty,tenantName={t}");
    let found = Api::<DynamicObject>::namespaced_with(
        hap.garden.clone(),
        &hap.bindings_ns,
        &credentials_binding_resource(),
    )
    .list(&ListParams::default().labels(&tenant_of("ga-4")))
    .await
    .unwrap();
    assert_eq!(found.items.len(), 1);
    assert_eq!(found.items[0].metadata.name.as_deref(), Some(got.as_str()));
}

/// The rows of the CLI report as the status counts them: verdict → count.
fn verdict_counts(report: &Value) -> BTreeMap<String, i64> {
    report["verdicts"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_i64().unwrap()))
        .collect()
}

/// Waits for the HapConfig's observation of generation `generation` and returns it.
async fn observation(hap: &Hap, generation: i64) -> hap_operator::api::ObservationStatus {
    let api = hap.configs();
    eventually(
        std::time::Duration::from_secs(60),
        "status.observation",
        || {
            let api = api.clone();
            let name = hap.config.clone();
            async move {
                let st = api.get(&name).await.ok()?.status?;
                st.observation
                    .filter(|o| o.observed_generation == Some(generation))
            }
        },
    )
    .await
}

async fn generation(hap: &Hap) -> i64 {
    let cfg = hap.configs().get(&hap.config).await.expect("HapConfig");
    cfg.metadata.generation.expect("generation")
}

/// A claim's `Released` condition reason, once it has one.
async fn released_reason(hap: &Hap, name: &str) -> (String, String) {
    let api = hap.claims();
    eventually(
        std::time::Duration::from_secs(60),
        &format!("claim {name} Released=False"),
        || {
            let api = api.clone();
            async move {
                let st = api.get(name).await.ok()?.status?;
                let c = condition(&st.conditions, "Released")?;
                (c.status == "False").then(|| (c.reason.clone(), c.message.clone()))
            }
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_observes_a_keb_landscape_for_weeks_then_cuts_over_and_rolls_back_by_a_spec_edit()
 {
    let _one = ONE_LANDSCAPE_AT_A_TIME.lock().await;
    install_platform_crds().await;
    let mut hap = Hap::without_operator(&["aws"], json!({})).await;
    let rt_ns = namespace(&hap.client, "kcp").await;
    let observe = json!({"mode": "Observe", "observeRuntimeNamespace": rt_ns});
    config_from_keb_values(&hap, observe.clone()).await;
    landscape(&hap, &rt_ns).await;
    let config = hap.config.clone();
    // The operator reads claims in its claim namespace; the report reads the same (claims of
    // other tests live in other namespaces of this cluster).
    let args = [
        "migrate",
        "--report",
        "--config",
        &config,
        "--runtime-namespace",
        &rt_ns,
        "--claim-namespace",
        &hap.claims_ns,
        "-o",
        "json",
    ];
    let (out, stderr, code) = hap_cli(&args);
    assert_eq!(code, 0, "{stderr}");
    let report: Value = serde_json::from_str(&out).expect("json report");
    let before = bindings(&hap.garden, &hap.bindings_ns).await;

    // Observe, in the operator beside KEB: it reports, and writes no binding.
    hap.start_operator().await;
    let o = observation(&hap, generation(&hap).await).await;
    println!(
        "$ kubectl get hapconfig {config} -o jsonpath='{{.status.observation}}'\n{}",
        serde_json::to_string_pretty(&o).unwrap()
    );
    assert_eq!(o.verdicts, verdict_counts(&report), "{o:?}\n{report}");
    let rows = report["requests"].as_array().unwrap().len();
    assert_eq!(o.requests, i64::try_from(rows).unwrap());
    let rt3 = format!("{rt_ns}/rt-3");
    let d = o
        .disagreements
        .iter()
        .find(|d| d.request == rt3)
        .expect("rt-3 disagrees");
    assert_eq!(
        (
            d.tenant.as_str(),
            d.binding_in_use.as_deref(),
            d.verdict.as_str()
        ),
        (GA_OLD, Some("aws-3"), "OtherPool")
    );
    assert!(!d.would_choose.is_empty(), "{d:?}");
    let cond = hap.config_condition("Observing", "True").await;
    assert_eq!(cond.reason, "Observing");
    assert!(cond.message.contains("OtherPool 1"), "{}", cond.message);
    // A request made while observing says what would be chosen, and is not served.
    hap.claim(
        "new-4",
        json!({"globalAccount": "ga-4", "plan": "aws", "platformRegion": "cf-eu10"}),
    )
    .await;
    let why = hap.ready_reason("new-4", "Observing").await;
    assert!(why.contains("it would serve the claim from"), "{why}");
    assert_eq!(
        bindings(&hap.garden, &hap.bindings_ns).await,
        before,
        "observe mode wrote a binding"
    );

    // Cutover: a spec edit. The waiting request is served; nobody else's account moves.
    config_from_keb_values(&hap, json!({"mode": "Enforce"})).await;
    let got = hap.bound("new-4").await;
    assert!(["aws-4", "aws-5"].contains(&got.as_str()), "{got}");
    let claimed = format!("CredentialsBinding/{got}");
    let after = bindings(&hap.garden, &hap.bindings_ns).await;
    for (name, (rv, labels, _)) in &after {
        let (rv0, labels0, _) = &before[name];
        if name == &claimed {
            assert_eq!(labels.get("tenantName").map(String::as_str), Some("ga-4"));
        } else {
            assert_eq!(
                (rv, labels),
                (rv0, labels0),
                "{name} was written at cutover"
            );
        }
    }
    eventually(
        std::time::Duration::from_secs(60),
        "Observing condition and status.observation gone",
        || async {
            let st = hap.config_status().await;
            (condition(&st.conditions, "Observing").is_none() && st.observation.is_none())
                .then_some(())
        },
    )
    .await;

    // Rollback: a spec edit back. No binding is written from then on: a new request waits,
    // a release waits, and KEB's selector finds exactly the free binding left.
    let mut observe_again = observe.clone();
    observe_again["mode"] = json!("Observe");
    config_from_keb_values(&hap, observe_again).await;
    observation(&hap, generation(&hap).await).await;
    let rolled_back = bindings(&hap.garden, &hap.bindings_ns).await;
    hap.claim(
        "new-5",
        json!({"globalAccount": "ga-5", "plan": "aws", "platformRegion": "cf-eu10"}),
    )
    .await;
    hap.ready_reason("new-5", "Observing").await;
    hap.claims()
        .delete("new-4", &Default::default())
        .await
        .expect("delete new-4");
    let (reason, message) = released_reason(&hap, "new-4").await;
    assert_eq!(reason, "Observing", "{message}");
    // The waiting release is counted for HapReleasesWaitingObserving.
    let series = format!(
        "hap_releases_held{{config=\"{}\",reason=\"Observing\"}} 1",
        hap.config
    );
    eventually(
        std::time::Duration::from_secs(60),
        "hap_releases_held 1 for Observing",
        || async {
            let m = hap.operator.as_ref()?.handle.metrics.encode();
            m.lines().any(|l| l == series).then_some(())
        },
    )
    .await;
    assert_eq!(
        bindings(&hap.garden, &hap.bindings_ns).await,
        rolled_back,
        "a binding was written after the rollback"
    );
    let free: Vec<String> = ["aws-4", "aws-5"]
        .into_iter()
        .filter(|b| *b != got)
        .map(str::to_string)
        .collect();
    assert_eq!(keb_free(&hap.garden, &hap.bindings_ns).await, free);
    hap.stop_operator().await;
}
