//! End-to-end (real kube-apiserver and gardener-apiserver): the operator binary under the shipped
//! RBAC, with its own ServiceAccount tokens, in both topologies — one cluster (kustomize base,
//! Helm narrow mode) and a separate garden (kustomize `overlays/separate-garden` + `garden`, Helm
//! `garden.kubeconfigSecret` + `garden.rbacOnly`). Each runs the claim flow and the release
//! without a single RBAC error, for a binding of each credential kind gardener-apiserver v1.141
//! accepts (a Secret, a WorkloadIdentity, an InternalSecret) and one that references a Quota.
//! kube-apiserver's audit log (in the garden too) proves that the operator's identities never
//! requested any of those objects although gardener-apiserver's admission demands that they may
//! `get` the ones bindings reference. Without that permission a binding write is refused, and the
//! claim and the HapConfig say what to grant; a Quota outside the project namespace needs the
//! Role docs/install.md gives for it.

use crate::support;

use crate::support::deploy;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use deploy::*;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::{DeleteParams, ListParams};
use serde_json::{Value, json};
use support::garden::Credentials;
use support::*;

fn kubectl_with(kubeconfig: &Path, args: &[&str]) -> (bool, String, String) {
    run(Command::new(kubectl_path())
        .env("KUBECONFIG", kubeconfig)
        .args(args))
}

/// GET over HTTP/1.0 (no chunking): (status, body).
fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr.parse().ok()?, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    let status = buf.split_whitespace().nth(1)?.parse().ok()?;
    let body = buf.split_once("\r\n\r\n").map(|x| x.1.to_string())?;
    Some((status, body))
}

/// The address the operator serves HTTP on, from its JSON log (it binds port 0, so no two
/// tests can race for a port).
fn served_addr(log: &str) -> Option<String> {
    served(log, "serving /livez")
}

/// The address of the server whose start line begins with `message`.
fn served(log: &str, message: &str) -> Option<String> {
    log.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["msg"].as_str().is_some_and(|m| m.starts_with(message)))
        .and_then(|v| v["addr"].as_str().map(str::to_string))
}

/// The bearer token of a kubeconfig `sa_kubeconfig` wrote.
fn sa_token(kubeconfig: &Path) -> String {
    let cfg: Value = serde_json::from_str(&std::fs::read_to_string(kubeconfig).unwrap()).unwrap();
    cfg["users"][0]["user"]["token"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The `hap` binary as a process; killed if the test fails before stopping it.
struct Process {
    child: Option<Child>,
    log: PathBuf,
}

impl Process {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM, then wait for a clean exit.
    fn terminate(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("running");
        let (ok, _, err) = run(Command::new("kill").args(["-TERM", &child.id().to_string()]));
        assert!(ok, "kill -TERM: {err}");
        for _ in 0..300 {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = child.kill();
        panic!(
            "the operator did not stop within 30 s of SIGTERM:\n{}",
            self.log()
        );
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The operator's ServiceAccount in a separate garden.
struct GardenIdentity {
    ns: String,
    sa: String,
}

struct Run<'a> {
    hap: &'a Hap,
    /// The operator's namespace (Lease) and ServiceAccount, as the RBAC names them.
    ns: String,
    sa: String,
    lease: String,
    /// The shipped ClusterRole that lets scrapers read /metrics, as this test named it.
    metrics_reader: String,
    /// With a separate garden: the operator's identity there.
    garden: Option<GardenIdentity>,
}

impl Run<'_> {
    fn user(&self) -> String {
        format!("system:serviceaccount:{}:{}", self.ns, self.sa)
    }
}

/// What the operator must never request: the objects bindings reference, whose `get` the shipped
/// RBAC grants only because gardener-apiserver's admission asks whether the caller could.
const NEVER_REQUESTED: [&str; 4] = ["secrets", "workloadidentities", "internalsecrets", "quotas"];

/// One binding per credential kind (and one with a Quota), each in a pool of its own: (binding,
/// provider type = plan's provider, claim's plan, credentials, quota).
const BINDINGS: [(&str, &str, &str, Credentials, Option<&str>); 4] = [
    ("aws-1", "aws", "aws", Credentials::Secret, None),
    (
        "azure-wi",
        "azure",
        "azure",
        Credentials::WorkloadIdentity,
        None,
    ),
    ("gcp-is", "gcp", "gcp", Credentials::InternalSecret, None),
    (
        "ali-quota",
        "alicloud",
        "alicloud",
        Credentials::Secret,
        Some("ali-quota"),
    ),
];

/// The HapConfig rules the flow runs with: one pool per entry of [`BINDINGS`].
const RULES: [&str; 4] = ["aws", "azure", "gcp", "alicloud"];

/// kube-apiserver's audit log of each cluster: the operator's identities made requests (the
/// garden one: label patches of every binding, which went through the aggregator to
/// gardener-apiserver and were admitted; SecretBindings, the other kind, only listed and
/// watched), none of them touched Secrets, WorkloadIdentities,
/// InternalSecrets or Quotas, and with a separate garden the operator's cluster saw no binding
/// request and the garden no claim request.
fn audit_proves_no_credentials_were_requested(r: &Run<'_>, garden_user: &str) {
    let resource = |e: &Value| {
        e["objectRef"]["resource"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    let ops = audit_events(&audit_log(&kubeconfig()), &r.user());
    let garden = match &r.garden {
        Some(_) => audit_events(&audit_log(&garden_kubeconfig()), garden_user),
        None => ops.clone(),
    };
    assert!(!ops.is_empty(), "the audit log records {}", r.user());
    for (events, who) in [(&ops, r.user()), (&garden, garden_user.to_string())] {
        let read: Vec<&Value> = events
            .iter()
            .filter(|e| NEVER_REQUESTED.contains(&resource(e).as_str()))
            .collect();
        assert!(read.is_empty(), "{who} requested credentials: {read:#?}");
    }
    // The kind the pools are not made of is listed and watched (a Shoot on one counts with its
    // account), never written.
    let other: Vec<&Value> = garden
        .iter()
        .filter(|e| resource(e) == "secretbindings")
        .collect();
    let read_only = |e: &&Value| e["verb"] == "list" || e["verb"] == "watch";
    assert!(
        other.iter().any(read_only),
        "{garden_user} lists and watches SecretBindings"
    );
    let written: Vec<&&Value> = other.iter().filter(|e| !read_only(e)).collect();
    assert!(
        written.is_empty(),
        "{garden_user} wrote SecretBindings: {written:#?}"
    );
    for (binding, ..) in BINDINGS {
        let patches = garden
            .iter()
            .filter(|e| {
                resource(e) == "credentialsbindings"
                    && e["objectRef"]["name"] == binding
                    && e["verb"] == "patch"
                    && e["responseStatus"]["code"] == 200
            })
            .count();
        assert!(
            patches >= 2,
            "{garden_user} patched {binding} (claim, release) through gardener-apiserver: {patches} admitted patches in the audit log"
        );
    }
    if r.garden.is_some() {
        let resources =
            |events: &[Value]| -> BTreeSet<String> { events.iter().map(resource).collect() };
        let (ops_res, garden_res) = (resources(&ops), resources(&garden));
        for r in ["credentialsbindings", "secretbindings", "shoots"] {
            assert!(
                !ops_res.contains(r),
                "the operator's cluster saw {r} requests: {ops_res:?}"
            );
        }
        for r in ["accountclaims", "hapconfigs", "leases", "events"] {
            assert!(
                !garden_res.contains(r),
                "the garden saw {r} requests: {garden_res:?}"
            );
        }
    }
}

/// The binding a claim is bound to, or the message of its refusal (`Forbidden`: the garden
/// refused the label patch), whichever comes first.
async fn bound_or_refused(hap: &Hap, claim: &str) -> Result<String, String> {
    eventually(
        Duration::from_secs(60),
        &format!("claim {claim} Bound or Forbidden"),
        || async {
            let s = hap.claims().get(claim).await.ok()?.status?;
            if s.phase == Some(hap_operator::api::ClaimPhase::Bound) {
                return Some(Ok(s.credentials_binding_name?));
            }
            let ready = condition(&s.conditions, "Ready")?;
            (ready.reason == "Forbidden").then(|| Err(ready.message.clone()))
        },
    )
    .await
}

/// The main claim flow with the operator binary under the ServiceAccount's token: HapConfig
/// Ready, a claim Bound and its binding labelled for each binding of [`BINDINGS`] (every
/// credential kind, and a Quota), a HapConfig event in `default`, the claims deleted and the
/// bindings marked dirty, events published, leader Lease held and handed back — no RBAC error
/// anywhere in the operator's log, and no credentials request in the audit logs.
async fn claim_flow_under_shipped_rbac(r: Run<'_>) {
    let hap = r.hap;
    for (name, provider, _, creds, quota) in BINDINGS {
        hap.binding_with(
            name,
            provider,
            &[("hyperscalerType", provider)],
            creds,
            quota,
        )
        .await;
    }
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = sa_kubeconfig(&kubeconfig(), dir.path(), &r.ns, &r.sa, "sa.kubeconfig");
    let (garden_kubeconfig, garden_user) = match &r.garden {
        Some(g) => (
            Some(sa_kubeconfig(
                &garden_kubeconfig(),
                dir.path(),
                &g.ns,
                &g.sa,
                "garden.kubeconfig",
            )),
            format!("system:serviceaccount:{}:{}", g.ns, g.sa),
        ),
        None => (None, r.user()),
    };
    let garden_side = garden_kubeconfig.clone().unwrap_or(kubeconfig.clone());
    let identity = unique("hap-operator-pod");
    let log = dir.path().join("operator.log");
    let logfile = std::fs::File::create(&log).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_hap"))
        .args([
            "run",
            &format!("--config-name={}", hap.config),
            &format!("--claim-namespace={}", hap.claims_ns),
            "--mark-ignored-configs=false",
            "--http-addr=127.0.0.1:0",
            "--metrics-addr=127.0.0.1:0",
            "--leader-elect=true",
            &format!("--lease-name={}", r.lease),
            "--log-format=json",
            "--pending-retry=2s",
        ])
        .args(
            garden_kubeconfig
                .iter()
                .map(|g| format!("--garden-kubeconfig={}", g.display())),
        )
        .env("KUBECONFIG", &kubeconfig)
        .env_remove("HAP_GARDEN_KUBECONFIG")
        .env("POD_NAMESPACE", &r.ns)
        .env("POD_NAME", &identity)
        .env("RUST_LOG", "info,kube=warn,hap_operator=info")
        .stdin(Stdio::null())
        .stdout(logfile.try_clone().unwrap())
        .stderr(logfile)
        .spawn()
        .expect("spawn hap run");
    let mut op = Process {
        child: Some(child),
        log,
    };
    let addr = eventually(
        Duration::from_secs(30),
        "the HTTP address in the log",
        || async { served_addr(&op.log()) },
    )
    .await;
    eventually(Duration::from_secs(60), "/readyz 200", || async {
        http_get(&addr, "/readyz").filter(|(s, _)| *s == 200)
    })
    .await;
    assert_eq!(http_get(&addr, "/livez").map(|x| x.0), Some(200));

    // Leader election on, in the operator's namespace.
    let leases: Api<Lease> = Api::namespaced(hap.client.clone(), &r.ns);
    eventually(
        Duration::from_secs(30),
        "Lease held by the operator",
        || {
            let (leases, lease, identity) = (leases.clone(), r.lease.clone(), identity.clone());
            async move {
                let l = leases.get(&lease).await.ok()?;
                (l.spec?.holder_identity? == identity).then_some(())
            }
        },
    )
    .await;
    // The HTTPS /metrics: the operator reviews tokens under the shipped RBAC (a 503 would say it
    // may not); its own token is no reader's, a scraper bound to the shipped role is.
    let metrics = eventually(
        Duration::from_secs(30),
        "the HTTPS /metrics address",
        || async { served(&op.log(), "serving /metrics over TLS") },
    )
    .await;
    let own = sa_token(&kubeconfig);
    let (code, body) = support::scrape::https_get(&metrics, "/metrics", Some(&own))
        .await
        .expect("answer");
    assert_eq!(code, 403, "the operator's own token: {body}");
    let (reader, _binding) = support::scrape::scraper(&r.ns, Some(&r.metrics_reader));
    eventually(Duration::from_secs(30), "hap_leader 1", || async {
        let (_, body) = support::scrape::https_get(&metrics, "/metrics", Some(&reader)).await?;
        body.lines()
            .any(|l| l.trim() == "hap_leader 1")
            .then_some(())
    })
    .await;

    hap.config_condition("Ready", "True").await;
    // One claim per binding: each kind's label patch is admitted.
    for (binding, _, plan, creds, quota) in BINDINGS {
        let claim = format!("c-{binding}");
        hap.claim(
            &claim,
            json!({"globalAccount": "ga-rbac", "plan": plan, "shootName": format!("s-{binding}")}),
        )
        .await;
        assert_eq!(
            bound_or_refused(hap, &claim).await,
            Ok(binding.to_string()),
            "{creds:?}, quota {quota:?}"
        );
        assert_eq!(
            hap.labels(binding)
                .await
                .get("tenantName")
                .map(String::as_str),
            Some("ga-rbac"),
            "{binding} ({creds:?}, quota {quota:?}) is labelled through the Role in the binding namespace (in the garden)"
        );
    }

    // A valid config turned invalid: an event about the cluster-scoped HapConfig, in `default`.
    hap.apply_config(&["aws", "aws"], json!({})).await;
    hap.config_condition("RulesValid", "False").await;
    let default_events: Api<Event> = Api::namespaced(hap.client.clone(), "default");
    eventually(
        Duration::from_secs(30),
        "ConfigInvalid event in default",
        || {
            let (api, cfg) = (default_events.clone(), hap.config.clone());
            async move {
                let evs = api.list(&ListParams::default()).await.ok()?;
                evs.items
                    .iter()
                    .any(|e| {
                        e.reason.as_deref() == Some("ConfigInvalid")
                            && e.regarding.as_ref().and_then(|r| r.name.as_deref())
                                == Some(cfg.as_str())
                            && e.reporting_controller.as_deref() == Some("hap-operator")
                    })
                    .then_some(())
            }
        },
    )
    .await;
    hap.apply_config(&RULES, json!({})).await;
    hap.config_condition("Ready", "True").await;

    // Deleting the claims releases the bindings (finalizer removed by JSON patch).
    for (binding, ..) in BINDINGS {
        hap.claims()
            .delete(&format!("c-{binding}"), &DeleteParams::default())
            .await
            .unwrap();
    }
    for (binding, _, _, creds, quota) in BINDINGS {
        let claim = format!("c-{binding}");
        eventually(
            Duration::from_secs(60),
            &format!("claim {claim} gone"),
            || async {
                hap.claims()
                    .get_opt(&claim)
                    .await
                    .ok()?
                    .is_none()
                    .then_some(())
            },
        )
        .await;
        let labels = eventually(
            Duration::from_secs(60),
            &format!("{binding} dirty"),
            || async {
                let l = hap.labels(binding).await;
                (l.get("dirty").map(String::as_str) == Some("true")).then_some(l)
            },
        )
        .await;
        assert_eq!(
            labels.get("tenantName").map(String::as_str),
            Some("ga-rbac"),
            "{binding} ({creds:?}, quota {quota:?}) released"
        );
    }

    let claim_events: Api<Event> = Api::namespaced(hap.client.clone(), &hap.claims_ns);
    let reasons: BTreeSet<String> = claim_events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reporting_controller.as_deref() == Some("hap-operator"))
        .filter_map(|e| e.reason)
        .collect();
    for reason in ["Claimed", "Released"] {
        assert!(
            reasons.contains(reason),
            "{reason} event in the claim namespace: {reasons:?}"
        );
    }

    // Observe mode reads the landscape under the same rules: the claims where the operator
    // watches them (its claim namespace), the Shoots through the bindings Role.
    hap.apply_config(&RULES, json!({"mode": "Observe"})).await;
    hap.config_condition("Observing", "True").await;
    let observed = eventually(Duration::from_secs(60), "status.observation", || async {
        hap.config_status().await.observation
    })
    .await;
    let note = observed.note.unwrap_or_default();
    assert!(
        !note.contains("AccountClaims could not") && !note.contains("Shoots in"),
        "observe reads refused under the shipped rules: {note}"
    );
    hap.apply_config(&RULES, json!({})).await;
    hap.config_condition("Ready", "True").await;

    // A clean stop. Whether the Lease is handed back before exit is not asserted: leader.rs
    // releases it in a task that `controller::run` does not await, so the process may exit first.
    let status = op.terminate();
    let log = op.log();
    assert!(
        status.success(),
        "the operator exits 0 on SIGTERM: {status}\n{log}"
    );
    assert!(
        log.contains("acquired the leader lease"),
        "leader election ran:\n{log}"
    );
    for bad in ["forbidden", "cannot publish event", "Unauthorized"] {
        let lines: Vec<&str> = log
            .lines()
            .filter(|l| l.to_lowercase().contains(&bad.to_lowercase()))
            .collect();
        assert!(
            lines.is_empty(),
            "RBAC trouble ({bad}) in the operator log:\n{}",
            lines.join("\n")
        );
    }
    // JSON logs, as the Deployment asks for.
    assert!(
        log.lines()
            .filter(|l| !l.trim().is_empty())
            .all(|l| serde_json::from_str::<Value>(l).is_ok()),
        "--log-format=json: every line is JSON:\n{log}"
    );

    // The garden identity may `get` the credentials and Quotas bindings reference (admission
    // asks that), but not list or watch them; checked with the very token the operator runs
    // with. (A SelfSubjectAccessReview: asking must not itself be a request for them.)
    for resource in [
        "secrets",
        "workloadidentities.security.gardener.cloud",
        "internalsecrets.core.gardener.cloud",
        "quotas.core.gardener.cloud",
    ] {
        for (verb, expect) in [("list", "no"), ("watch", "no"), ("get", "yes")] {
            let (_, out, err) = kubectl_with(
                &garden_side,
                &["auth", "can-i", verb, resource, "-n", &hap.bindings_ns],
            );
            assert_eq!(out.trim(), expect, "can-i {verb} {resource}: {err}");
        }
    }

    audit_proves_no_credentials_were_requested(&r, &garden_user);
}
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kustomize_rbac_is_sufficient_for_the_claim_flow() {
    let hap = Hap::without_operator(&RULES, json!({})).await;
    let place = Place {
        ns: unique("hapsys"),
        bindings_ns: hap.bindings_ns.clone(),
        suffix: unique("flow"),
    };
    let objs: Vec<Value> = for_config(
        relocate(&kustomize("deploy/kustomize/base"), &place),
        &hap.config,
    )
    .into_iter()
    .filter(|o| kind(o) == "Namespace" || is_rbac_or_sa(o))
    .collect();
    let mut cleanup = cleanup_for(&objs);
    cleanup.push(vec![
        "delete".into(),
        "hapconfig".into(),
        hap.config.clone(),
        "--ignore-not-found".into(),
        "--wait=false".into(),
    ]);
    let _cleanup = Cleanup(cleanup);
    apply(&objs, "kustomize RBAC");
    claim_flow_under_shipped_rbac(Run {
        hap: &hap,
        ns: place.ns.clone(),
        sa: "hap-operator".into(),
        lease: "hap-operator".into(),
        metrics_reader: format!("hap-operator-metrics-reader-{}", place.suffix),
        garden: None,
    })
    .await;
}

/// The Helm chart's narrow mode (claimNamespace): claims and events through Roles, HapConfig
/// events through a Role in `default`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_claim_namespace_rbac_is_sufficient_for_the_claim_flow() {
    let hap = Hap::without_operator(&RULES, json!({})).await;
    let ns = namespace(&hap.client, "hapsys").await;
    let release = unique("hap");
    let objs: Vec<Value> = helm_template(
        &release,
        &ns,
        &[
            "--set",
            &format!("bindingNamespace={}", hap.bindings_ns),
            "--set",
            &format!("claimNamespace={}", hap.claims_ns),
            "--set",
            &format!("config.name={}", hap.config),
        ],
    )
    .into_iter()
    .filter(is_rbac_or_sa)
    .collect();
    let cluster_role = find(&objs, "ClusterRole", &format!("{release}-hap-operator"));
    assert!(
        !cluster_role.to_string().contains("accountclaims")
            && !cluster_role.to_string().contains("events"),
        "narrow mode: no cluster-wide claim or event rights: {cluster_role}"
    );
    let mut cleanup = cleanup_for(&objs);
    cleanup.extend([
        vec![
            "delete".into(),
            "-n".into(),
            "default".into(),
            "role,rolebinding".into(),
            format!("{release}-hap-operator-events"),
            "--ignore-not-found".into(),
        ],
        vec![
            "delete".into(),
            "hapconfig".into(),
            hap.config.clone(),
            "--ignore-not-found".into(),
            "--wait=false".into(),
        ],
        vec![
            "delete".into(),
            "namespace".into(),
            ns.clone(),
            "--wait=false".into(),
        ],
    ]);
    let _cleanup = Cleanup(cleanup);
    apply(&objs, "helm RBAC");
    claim_flow_under_shipped_rbac(Run {
        hap: &hap,
        ns,
        sa: format!("{release}-hap-operator"),
        lease: format!("{release}-hap-operator"),
        metrics_reader: format!("{release}-hap-operator-metrics-reader"),
        garden: None,
    })
    .await;
}

/// A separate garden with the kustomize packaging: the operator's cluster gets
/// `overlays/separate-garden` (no garden-side Role there), the garden gets `garden` (the
/// operator's ServiceAccount in the project namespace and the garden-side Role).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kustomize_rbac_is_sufficient_with_a_separate_garden() {
    let hap = Hap::without_operator_with_separate_garden(&RULES, json!({})).await;
    let place = Place {
        ns: unique("hapsys"),
        bindings_ns: hap.bindings_ns.clone(),
        suffix: unique("gflow"),
    };
    let ops: Vec<Value> = for_config(
        relocate(
            &kustomize("deploy/kustomize/overlays/separate-garden"),
            &place,
        ),
        &hap.config,
    )
    .into_iter()
    .filter(|o| kind(o) == "Namespace" || is_rbac_or_sa(o))
    .collect();
    assert!(
        !ops.iter()
            .any(|o| o.to_string().contains("credentialsbindings")),
        "no garden-side rule in the operator's cluster: {:?}",
        summary(&ops)
    );
    let garden: Vec<Value> = relocate(&kustomize("deploy/kustomize/garden"), &place);
    let mut cleanup = cleanup_for(&ops);
    cleanup.push(vec![
        "delete".into(),
        "hapconfig".into(),
        hap.config.clone(),
        "--ignore-not-found".into(),
        "--wait=false".into(),
    ]);
    let _cleanup = Cleanup(cleanup);
    apply(&ops, "kustomize separate-garden overlay RBAC");
    apply_to(&garden_kubeconfig(), &garden, "kustomize garden side");
    claim_flow_under_shipped_rbac(Run {
        hap: &hap,
        ns: place.ns.clone(),
        sa: "hap-operator".into(),
        lease: "hap-operator".into(),
        metrics_reader: format!("hap-operator-metrics-reader-{}", place.suffix),
        garden: Some(GardenIdentity {
            ns: hap.bindings_ns.clone(),
            sa: "hap-operator".into(),
        }),
    })
    .await;
}

/// A separate garden with the Helm chart: `garden.kubeconfigSecret` in the operator's cluster,
/// `garden.rbacOnly` in the garden.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_rbac_is_sufficient_with_a_separate_garden() {
    let hap = Hap::without_operator_with_separate_garden(&RULES, json!({})).await;
    let ns = namespace(&hap.client, "hapsys").await;
    let release = unique("hap");
    let binding_ns = format!("bindingNamespace={}", hap.bindings_ns);
    let ops: Vec<Value> = helm_template(
        &release,
        &ns,
        &[
            "--set",
            &binding_ns,
            "--set",
            "garden.kubeconfigSecret=hap-garden",
            "--set",
            &format!("config.name={}", hap.config),
        ],
    )
    .into_iter()
    .filter(is_rbac_or_sa)
    .collect();
    assert!(
        !ops.iter()
            .any(|o| o.to_string().contains("credentialsbindings")),
        "no garden-side rule in the operator's cluster: {:?}",
        summary(&ops)
    );
    let garden = helm_template(
        &release,
        &ns,
        &["--set", &binding_ns, "--set", "garden.rbacOnly=true"],
    );
    assert!(
        garden
            .iter()
            .all(|o| is_rbac_or_sa(o) && o["metadata"]["namespace"] == json!(hap.bindings_ns)),
        "garden.rbacOnly renders the garden side only, in the project namespace: {:?}",
        summary(&garden)
    );
    let mut cleanup = cleanup_for(&ops);
    cleanup.extend([
        vec![
            "delete".into(),
            "hapconfig".into(),
            hap.config.clone(),
            "--ignore-not-found".into(),
            "--wait=false".into(),
        ],
        vec![
            "delete".into(),
            "namespace".into(),
            ns.clone(),
            "--wait=false".into(),
        ],
    ]);
    let _cleanup = Cleanup(cleanup);
    apply(&ops, "helm RBAC, separate garden");
    apply_to(&garden_kubeconfig(), &garden, "helm garden side");
    claim_flow_under_shipped_rbac(Run {
        hap: &hap,
        ns,
        sa: format!("{release}-hap-operator"),
        lease: format!("{release}-hap-operator"),
        metrics_reader: format!("{release}-hap-operator-metrics-reader"),
        garden: Some(GardenIdentity {
            ns: hap.bindings_ns.clone(),
            sa: format!("{release}-hap-operator"),
        }),
    })
    .await;
}

/// Without the Secret `get`, gardener-apiserver refuses the operator's label patch (403
/// "cannot reference a Secret you are not allowed to read"). The claim waits with reason
/// `Forbidden` naming what to grant, the HapConfig says so too, the binding is not retried in a
/// hot loop (the audit log counts the refused patches against the pause schedule), and once the
/// rule is granted the claim binds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_secret_get_the_claim_says_what_to_grant() {
    let hap = Hap::without_operator(&["aws"], json!({})).await;
    hap.binding("aws-1", "aws", &[("hyperscalerType", "aws")])
        .await;
    let place = Place {
        ns: unique("hapsys"),
        bindings_ns: hap.bindings_ns.clone(),
        suffix: unique("deny"),
    };
    let shipped: Vec<Value> = for_config(
        relocate(&kustomize("deploy/kustomize/base"), &place),
        &hap.config,
    )
    .into_iter()
    .filter(|o| kind(o) == "Namespace" || is_rbac_or_sa(o))
    .collect();
    let without_get: Vec<Value> = shipped
        .iter()
        .map(|o| {
            let mut o = o.clone();
            if let Some(rules) = o["rules"].as_array_mut() {
                rules.retain(|r| r["resources"] != json!(["secrets"]));
            }
            o
        })
        .collect();
    assert_ne!(
        stream(&shipped),
        stream(&without_get),
        "the base grants the Secret get"
    );
    let mut cleanup = cleanup_for(&shipped);
    cleanup.push(vec![
        "delete".into(),
        "hapconfig".into(),
        hap.config.clone(),
        "--ignore-not-found".into(),
        "--wait=false".into(),
    ]);
    let _cleanup = Cleanup(cleanup);
    apply(&without_get, "kustomize RBAC without the Secret get");

    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = sa_kubeconfig(
        &kubeconfig(),
        dir.path(),
        &place.ns,
        "hap-operator",
        "sa.kubeconfig",
    );
    let log = dir.path().join("operator.log");
    let logfile = std::fs::File::create(&log).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_hap"))
        .args([
            "run",
            &format!("--config-name={}", hap.config),
            &format!("--claim-namespace={}", hap.claims_ns),
            "--mark-ignored-configs=false",
            "--http-addr=127.0.0.1:0",
            "--metrics-addr=127.0.0.1:0",
            "--leader-elect=false",
            "--log-format=json",
            "--pending-retry=2s",
        ])
        .env("KUBECONFIG", &kubeconfig)
        .env_remove("HAP_GARDEN_KUBECONFIG")
        .env("RUST_LOG", "info,kube=warn")
        .stdin(Stdio::null())
        .stdout(logfile.try_clone().unwrap())
        .stderr(logfile)
        .spawn()
        .expect("spawn hap run");
    let _op = Process {
        child: Some(child),
        log,
    };
    hap.claim("c1", json!({"globalAccount": "ga-deny", "plan": "aws"}))
        .await;
    let first = Instant::now();
    let msg = hap.ready_reason("c1", "Forbidden").await;
    assert!(
        msg.contains("`get` on secrets") && msg.contains(&hap.bindings_ns),
        "the claim names the permission to grant: {msg}"
    );
    let cfg = hap.config_condition("Ready", "False").await;
    assert!(
        cfg.reason == "Forbidden" && cfg.message.contains("aws-1"),
        "the HapConfig names the refused binding: {cfg:?}"
    );
    assert!(!hap.labels("aws-1").await.contains_key("tenantName"));

    // Paused, not hammered: attempts within `t` seconds of the first refusal are bounded by
    // the doubling pause (2 s, 4 s, ... capped at 60 s); a slower operator makes fewer.
    let user = format!("system:serviceaccount:{}:hap-operator", place.ns);
    let refused = |events: &[Value]| {
        events
            .iter()
            .filter(|e| {
                e["objectRef"]["resource"] == "credentialsbindings"
                    && e["verb"] == "patch"
                    && e["responseStatus"]["code"] == 403
            })
            .count()
    };
    let attempts = refused(&audit_events(&audit_log(&support::kubeconfig()), &user));
    let secs = first.elapsed().as_secs_f64();
    let bound = 2 + (secs / 2.0).max(1.0).log2().ceil() as usize + (secs / 60.0) as usize;
    assert!(
        (1..=bound).contains(&attempts),
        "{attempts} refused patches in about {secs:.0} s (at most {bound} with the pause)"
    );

    // Granted: the next attempt after the pause goes through (gardener-apiserver caches
    // authorization decisions for 10 s).
    apply(&shipped, "kustomize RBAC as shipped");
    eventually(
        Duration::from_secs(120),
        "c1 Bound once the get is granted",
        || async {
            let c = hap.claims().get("c1").await.ok()?;
            (c.status?.phase == Some(hap_operator::api::ClaimPhase::Bound)).then_some(())
        },
    )
    .await;
    assert_eq!(
        hap.labels("aws-1")
            .await
            .get("tenantName")
            .map(String::as_str),
        Some("ga-deny")
    );
    hap.config_condition("Ready", "True").await;
}

/// The Role docs/install.md tells to add when a binding's Quota lives outside the project
/// namespace (Gardener's example keeps trial Quotas in `garden-trial`): the YAML block of that
/// paragraph, moved into `quota_ns` and bound to the operator's ServiceAccount in `ops_ns`.
fn documented_quota_role(quota_ns: &str, ops_ns: &str) -> Vec<Value> {
    let doc = std::fs::read_to_string(repo_root().join("docs/install.md")).unwrap();
    let from = doc
        .find("keeps trial Quotas in `garden-trial`")
        .expect("docs/install.md: the trial Quota paragraph");
    let block = &doc[from..];
    let start = block.find("```yaml\n").expect("its YAML block") + "```yaml\n".len();
    let end = start + block[start..].find("```").expect("end of the block");
    let yaml: String = block[start..end]
        .lines()
        .map(|l| l.strip_prefix("  ").unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n");
    let mut objs = parse_stream(&yaml);
    assert_eq!(objs.len(), 2, "a Role and a RoleBinding: {objs:?}");
    for o in &mut objs {
        assert_eq!(o["metadata"]["namespace"], "garden-trial", "{o}");
        o["metadata"]["namespace"] = json!(quota_ns);
        if let Some(subjects) = o["subjects"].as_array_mut() {
            for s in subjects {
                s["namespace"] = json!(ops_ns);
            }
        }
    }
    objs
}

/// A binding whose Quota lives in another namespace: under the shipped RBAC alone its claim is
/// refused and says to grant `get` on quotas; with the Role docs/install.md gives for that layout
/// it binds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quota_in_another_namespace_needs_the_documented_role() {
    let hap = Hap::without_operator(&["alicloud"], json!({})).await;
    let quota_ns = namespace(&hap.client, "trial").await;
    let ns = &hap.bindings_ns;
    support::garden::create_secret(&hap.garden, ns, "ali-trial", "alicloud").await;
    let quota = support::garden::quota_object(&quota_ns, "trial-quota");
    support::garden::create_dynamic(
        &hap.garden,
        &quota_ns,
        &support::garden::quota_resource(),
        quota,
    )
    .await;
    let labels = BTreeMap::from([("hyperscalerType".to_string(), "alicloud".to_string())]);
    let mut binding = support::garden::binding_object_with(
        ns,
        "ali-trial",
        "alicloud",
        &labels,
        Credentials::Secret,
        Some("trial-quota"),
    );
    binding["quotas"][0]["namespace"] = json!(quota_ns);
    support::garden::create_dynamic(&hap.garden, ns, &credentials_binding_resource(), binding)
        .await;

    let place = Place {
        ns: unique("hapsys"),
        bindings_ns: ns.clone(),
        suffix: unique("quota"),
    };
    let shipped: Vec<Value> = for_config(
        relocate(&kustomize("deploy/kustomize/base"), &place),
        &hap.config,
    )
    .into_iter()
    .filter(|o| kind(o) == "Namespace" || is_rbac_or_sa(o))
    .collect();
    let mut cleanup = cleanup_for(&shipped);
    cleanup.push(vec![
        "delete".into(),
        "hapconfig".into(),
        hap.config.clone(),
        "--ignore-not-found".into(),
        "--wait=false".into(),
    ]);
    let _cleanup = Cleanup(cleanup);
    apply(&shipped, "kustomize RBAC as shipped");

    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = sa_kubeconfig(
        &kubeconfig(),
        dir.path(),
        &place.ns,
        "hap-operator",
        "sa.kubeconfig",
    );
    let log = dir.path().join("operator.log");
    let logfile = std::fs::File::create(&log).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_hap"))
        .args([
            "run",
            &format!("--config-name={}", hap.config),
            &format!("--claim-namespace={}", hap.claims_ns),
            "--mark-ignored-configs=false",
            "--http-addr=127.0.0.1:0",
            // Not the default 0.0.0.0:8443: any other process there must not stop this one.
            "--metrics-addr=127.0.0.1:0",
            "--leader-elect=false",
            "--log-format=json",
            "--pending-retry=2s",
        ])
        .env("KUBECONFIG", &kubeconfig)
        .env_remove("HAP_GARDEN_KUBECONFIG")
        .env("RUST_LOG", "info,kube=warn")
        .stdin(Stdio::null())
        .stdout(logfile.try_clone().unwrap())
        .stderr(logfile)
        .spawn()
        .expect("spawn hap run");
    let _op = Process {
        child: Some(child),
        log,
    };
    hap.claim(
        "c1",
        json!({"globalAccount": "ga-trial", "plan": "alicloud"}),
    )
    .await;
    let refused = bound_or_refused(&hap, "c1").await;
    let msg = refused.expect_err("the shipped Role alone does not cover a Quota elsewhere");
    assert!(
        msg.contains("cannot reference a quota you are not allowed to read")
            && msg.contains("`get` on quotas.core.gardener.cloud"),
        "the claim names the permission to grant: {msg}"
    );

    let role = documented_quota_role(&quota_ns, &place.ns);
    apply(&role, "the Role docs/install.md gives for Quotas elsewhere");
    // gardener-apiserver caches authorization decisions for 10 s; the claim retries after its
    // pause.
    eventually(
        Duration::from_secs(120),
        "c1 Bound once the documented Role is applied",
        || async {
            let c = hap.claims().get("c1").await.ok()?;
            (c.status?.phase == Some(hap_operator::api::ClaimPhase::Bound)).then_some(())
        },
    )
    .await;
    assert_eq!(
        hap.labels("ali-trial")
            .await
            .get("tenantName")
            .map(String::as_str),
        Some("ga-trial")
    );
}

/// The shipped RBAC names the last-known-good record of `--config-name=default`; these tests run
/// the operator for a HapConfig of their own, so the record's name follows it.
fn for_config(objs: Vec<Value>, config: &str) -> Vec<Value> {
    let record = format!("hap-last-known-good.{config}");
    objs.into_iter()
        .map(|mut o| {
            for rule in o["rules"].as_array_mut().into_iter().flatten() {
                if rule["resourceNames"] == json!(["hap-last-known-good.default"]) {
                    rule["resourceNames"] = json!([record]);
                }
            }
            o
        })
        .collect()
}
