//! End-to-end (real kube-apiserver and gardener-apiserver, the operator running): the Go client
//! module (clients/go) as a Go provisioner uses it. Its own tests (clients/go/hap/e2e_test.go,
//! built with the tag `e2e`) run against a HapConfig prepared here: bound, idempotent retries
//! and a re-created name, denied, tenant not allowed, pool exhausted with its message, the
//! context deadline with the last reason, paused then bound, and release. Then the example
//! provisioner does what KEB's steps do: claim, wait, read the binding, release.
//!
//! `make test` builds both Go binaries (e2e/build-goclient.sh) and exports HAP_GO_CLIENT_DIR; a
//! bare `cargo test` builds them here.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use serde_json::{Value, json};
use support::*;

/// The directory with `hap.test`, `types.test` and `provisioner`. Never skipped: without them every test of
/// this file fails.
fn go_client_dir() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        if let Some(p) = std::env::var_os("HAP_GO_CLIENT_DIR") {
            let p = PathBuf::from(p);
            assert!(
                ["hap.test", "types.test", "provisioner"]
                    .iter()
                    .all(|b| p.join(b).is_file()),
                "HAP_GO_CLIENT_DIR={} lacks hap.test, types.test or provisioner: run e2e/build-goclient.sh",
                p.display()
            );
            return p;
        }
        let out = Command::new(repo_root().join("e2e/build-goclient.sh"))
            .output()
            .expect("run e2e/build-goclient.sh");
        assert!(
            out.status.success(),
            "e2e/build-goclient.sh failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    })
}

const DENY: &str = r#"aws(GA=ga-denied) deny "plan {plan} is closed for {globalAccount}""#;

/// Every tenant the Go tests and the example use; ga-stranger is left out on purpose.
const TENANTS: [&str; 13] = [
    "ga-bound",
    "ga-twice",
    "ga-retry",
    "ga-lost",
    "ga-denied",
    "ga-exhausted",
    "ga-deadline",
    "ga-paused",
    "ga-release",
    "ga-held",
    "ga-norule",
    "ga-gone",
    "ga-example",
];

/// A HAP with a pool `aws` of ten free bindings, a pool `gcp` with none, the deny entry and the
/// tenant policy, its operator running.
async fn prepared() -> Hap {
    let hap = Hap::new(
        &["aws", "gcp", DENY],
        json!({"tenants": {"rules": [
            {"name": "go-provisioners", "kinds": ["AccountClaim"], "globalAccounts": TENANTS}
        ]}}),
    )
    .await;
    for i in 1..=10 {
        hap.binding(&format!("aws-{i}"), "aws", &[("hyperscalerType", "aws")])
            .await;
    }
    hap
}

/// Runs a Go binary of the client module with the environment naming this HAP.
async fn run(hap: &Hap, bin: &str, args: &[&str]) -> Output {
    let mut cmd = Command::new(go_client_dir().join(bin));
    cmd.args(args)
        .env("KUBECONFIG", kubeconfig())
        .env("HAP_GO_CLAIM_NAMESPACE", &hap.claims_ns)
        .env("HAP_GO_BINDING_NAMESPACE", &hap.bindings_ns)
        .env("HAP_GO_CONFIG", &hap.config);
    // The operator runs on this process's runtime: the Go program must not block it.
    tokio::task::spawn_blocking(move || cmd.output().expect("run the Go binary"))
        .await
        .expect("join")
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\n{}{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_go_client_claims_waits_and_releases_on_the_real_api() {
    let hap = prepared().await;
    let out = run(
        &hap,
        "hap.test",
        &["-test.v", "-test.count=1", "-test.timeout=8m"],
    )
    .await;
    let log = text(&out);
    assert!(out.status.success(), "{log}");
    for t in [
        "TestClaimAndWaitReturnsTheBinding",
        "TestClaimAndWaitIsIdempotentOnTheName",
        "TestAClaimOfAnotherCallerIsNotAdopted",
        "TestADeniedClaimIsATypedError",
        "TestATenantThePolicyDoesNotAllowIsATypedError",
        "TestAnExhaustedPoolIsATypedErrorWithTheOperatorsMessage",
        "TestTheContextDeadlineEndsTheWaitWithTheLastReason",
        "TestAPausedConfigIsATypedErrorThenTheClaimBinds",
        "TestReleaseMarksTheBindingDirtyAndTheClaimGoes",
        "TestAClaimBeingDeletedIsWaitedOutThenCreatedAnew",
        "TestAClaimNoRuleMatchesIsATypedErrorAtOnce",
        "TestAClaimDeletedWhileWaitingEndsTheWait",
        "TestTheServersObjectsDecodeIntoTheTypesWithNothingLeftOver",
        "TestDecideReadsTheOperatorsStatus",
        "TestOnlyTheSameRequestsClaimIsAdopted",
        "TestAWaitErrorIsBothTheContextErrorAndTheLastReason",
    ] {
        assert!(
            log.contains(&format!("--- PASS: {t} ")),
            "{t} did not pass:\n{log}"
        );
    }
    // What the Go side saw is what the API server has.
    let denied = hap.ready_reason("go-denied", "Denied").await;
    assert!(
        denied.contains("plan aws is closed for ga-denied"),
        "{denied}"
    );
    hap.ready_reason("go-stranger", "TenantNotAllowed").await;
    assert!(
        hap.claims()
            .get_opt("go-release")
            .await
            .expect("get")
            .is_none()
    );
}

/// The one JSON object the example provisioner prints.
fn json_of(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: not the provisioner's JSON: {}", text(out)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_provisioner_does_what_kebs_steps_do() {
    let hap = prepared().await;
    let common = ["-claim-namespace", &hap.claims_ns, "-timeout", "1m"];
    let provision = |instance: &'static str, ga: &'static str, plan: &'static str| {
        let mut a: Vec<&str> = vec!["provision", "-instance", instance, "-global-account", ga];
        a.extend([
            "-plan",
            plan,
            "-platform-region",
            "cf-eu11",
            "-fail-when-exhausted",
        ]);
        a.extend(common);
        a
    };
    let out = run(
        &hap,
        "provisioner",
        &provision("inst-1", "ga-example", "aws"),
    )
    .await;
    // Shown with --nocapture: the output docs/integrating.md quotes.
    println!("provision: {}", text(&out));
    assert!(out.status.success(), "{}", text(&out));
    let res = json_of(&out);
    let binding = res["binding"].as_str().expect("binding").to_string();
    assert_eq!(res["namespace"], json!(hap.bindings_ns), "{res}");
    assert_eq!(res["providerType"], json!("aws"), "{res}");
    assert_eq!(res["credentialsRef"]["kind"], json!("Secret"), "{res}");
    assert_eq!(
        hap.labels(&binding)
            .await
            .get("tenantName")
            .map(String::as_str),
        Some("ga-example")
    );
    // The step retried (its answer lost): the same claim, the same binding.
    let again = run(
        &hap,
        "provisioner",
        &provision("inst-1", "ga-example", "aws"),
    )
    .await;
    let again = json_of(&again);
    assert_eq!(again["claimUID"], res["claimUID"]);
    assert_eq!(again["binding"], json!(binding));
    // No account in the pool: a refusal with the operator's message, exit code 2.
    let out = run(
        &hap,
        "provisioner",
        &provision("inst-2", "ga-exhausted", "gcp"),
    )
    .await;
    println!("exhausted: {}", text(&out));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let res = json_of(&out);
    assert_eq!(res["reason"], json!("PoolExhausted"), "{res}");
    assert!(
        res["message"]
            .as_str()
            .is_some_and(|m| m.contains("hyperscalerType=gcp")),
        "{res}"
    );
    // Deprovisioning: the claim goes, the binding is dirty for the cleanup job.
    let mut args = vec!["deprovision", "-instance", "inst-1"];
    args.extend(common);
    let out = run(&hap, "provisioner", &args).await;
    assert!(out.status.success(), "{}", text(&out));
    assert!(hap.claims().get_opt("inst-1").await.expect("get").is_none());
    let labels = hap.labels(&binding).await;
    assert_eq!(
        labels.get("dirty").map(String::as_str),
        Some("true"),
        "{labels:?}"
    );
}

/// The Go types are what the generator makes of crds/accountpool.io.yaml in this checkout, and
/// decode a claim as the operator writes it (clients/go/apis/v1alpha1/drift_test.go). After a
/// CRD change: `make crds go-types`.
#[test]
fn the_go_types_match_the_crds() {
    let dir = repo_root().join("clients/go/apis/v1alpha1");
    let out = Command::new(go_client_dir().join("types.test"))
        .args(["-test.v", "-test.count=1"])
        .current_dir(&dir)
        .output()
        .expect("run types.test");
    let log = text(&out);
    assert!(out.status.success(), "{log}");
    for t in ["TestGeneratedTypesMatchTheCRDs", "TestAClaimRoundTrips"] {
        assert!(
            log.contains(&format!("--- PASS: {t} ")),
            "{t} did not pass:\n{log}"
        );
    }
}
