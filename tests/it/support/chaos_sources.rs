//! Webhook-created requests in the chaos test: every fourth request with a rule arrives as a Kyma
//! Runtime, admitted through the admission webhook of one of the two `hap run` replicas (which one
//! is chosen by a label, switched on every retry), while the leader is killed and the API servers
//! restart. A Runtime whose webhook call fails (replica restarting, no leader yet, pool exhausted
//! until a refill) is retried until admitted. The checker then proves that every admitted Runtime
//! carries exactly the binding its AccountClaim is Bound to.
//!
//! Self-contained (no `super::` items) so that `tests/it/chaos.rs` can include it by path.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject, PostParams};
use kube::core::ApiResource;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

/// Where the Runtimes live (the operator's cluster).
pub const RUNTIMES_NS: &str = "kcp-chaos";
const REPLICA_LABEL: &str = "chaos/replica";

/// Whether request `i` (with a rule) comes as a Runtime.
pub fn is_runtime(i: usize) -> bool {
    i % 4 == 1
}

/// The AccountClaim the webhook creates for Runtime `name`.
pub fn claim_name(name: &str) -> String {
    format!("runtime.{RUNTIMES_NS}.{name}")
}

/// The request source of the run: every Runtime, the platform region optional (the
/// sap-converged-cloud requests have none).
pub fn source() -> Value {
    json!({"id": "chaos-runtimes", "kind": "Runtime",
        "request": {"platformRegion": {"label": "kyma-project.io/platform-region", "optional": true}}})
}

pub fn runtime_resource() -> ApiResource {
    ApiResource {
        group: "infrastructuremanager.kyma-project.io".into(),
        version: "v1".into(),
        api_version: "infrastructuremanager.kyma-project.io/v1".into(),
        kind: "Runtime".into(),
        plural: "runtimes".into(),
    }
}

/// The Runtime of a request whose AccountClaim spec would be `spec`.
pub fn runtime(name: &str, spec: &Value, replica: char) -> DynamicObject {
    let s = |k: &str| spec.get(k).and_then(Value::as_str);
    let plan = s("plan").unwrap_or_default();
    let provider = s("provider").unwrap_or(match plan {
        "azure" => "azure",
        "gcp" => "gcp",
        "sap-converged-cloud" => "openstack",
        _ => "aws",
    });
    let mut labels = json!({
        "kyma-project.io/global-account-id": s("globalAccount"),
        "kyma-project.io/subaccount-id": s("subaccount"),
        "kyma-project.io/broker-plan-name": plan,
        REPLICA_LABEL: replica.to_string(),
    });
    if let Some(pr) = s("platformRegion") {
        labels["kyma-project.io/platform-region"] = json!(pr);
    }
    serde_json::from_value(json!({
        "apiVersion": "infrastructuremanager.kyma-project.io/v1", "kind": "Runtime",
        "metadata": {"name": name, "namespace": RUNTIMES_NS, "labels": labels},
        "spec": {
            "shoot": {
                "name": s("shootName"), "purpose": "production",
                "platformRegion": s("platformRegion").unwrap_or_default(),
                "region": s("clusterRegion").unwrap_or("eu-central-1"),
                "secretBindingName": "",
                "provider": {"type": provider, "workers": [{"name": "w"}]},
                "networking": {"pods": "100.64.0.0/12", "nodes": "10.250.0.0/16", "services": "100.104.0.0/13"},
            },
            "security": {"administrators": ["a@example.com"], "networking": {"filter": {"egress": {"enabled": false}}}},
        },
    }))
    .expect("runtime")
}

/// The webhooks of the two replica slots: a serving certificate, one port per slot (kept across
/// restarts, so the registrations stay valid), one registration per slot.
pub struct Webhooks {
    dir: PathBuf,
    ca_pem: String,
    ports: [u16; 2],
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

impl Webhooks {
    pub fn new(dir: &Path) -> Self {
        std::fs::create_dir_all(dir).expect("webhook dir");
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
        Self {
            dir: dir.to_path_buf(),
            ca_pem,
            ports: [free_port(), free_port()],
        }
    }

    fn slot(replica: char) -> usize {
        usize::from(replica != 'a')
    }

    /// The `hap run` flags of a replica in this slot.
    pub fn args(&self, replica: char) -> Vec<String> {
        vec![
            format!(
                "--webhook-addr=127.0.0.1:{}",
                self.ports[Self::slot(replica)]
            ),
            format!("--webhook-cert-file={}", self.dir.join("tls.crt").display()),
            format!("--webhook-key-file={}", self.dir.join("tls.key").display()),
            "--webhook-allow-unauthenticated".into(),
        ]
    }

    /// The namespace of the Runtimes and one webhook registration per replica slot.
    pub fn registrations(&self) -> Vec<Value> {
        let ca = base64(self.ca_pem.as_bytes());
        let mut out = vec![
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": RUNTIMES_NS}}),
        ];
        for (i, replica) in ['a', 'b'].iter().enumerate() {
            out.push(json!({
                "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
                "metadata": {"name": format!("hap-chaos-runtimes-{replica}")},
                "webhooks": [{
                    "name": "runtimes.accountpool.io", "admissionReviewVersions": ["v1"],
                    "sideEffects": "NoneOnDryRun", "failurePolicy": "Fail", "timeoutSeconds": 10,
                    "clientConfig": {"url": format!("https://127.0.0.1:{}/mutate/runtimes", self.ports[i]), "caBundle": ca},
                    "rules": [{"apiGroups": ["infrastructuremanager.kyma-project.io"], "apiVersions": ["v1"],
                        "resources": ["runtimes"], "operations": ["CREATE", "UPDATE"]}],
                    "objectSelector": {"matchLabels": {REPLICA_LABEL: replica.to_string()}},
                }],
            }));
        }
        out
    }

    /// Runtimes labelled `chaos/replica: t<slot>` go to that slot with `timeoutSeconds: 1`,
    /// below the decision time: the API server gives up while the webhook still waits.
    pub fn timeout_registrations(&self) -> Vec<Value> {
        let ca = base64(self.ca_pem.as_bytes());
        ['a', 'b']
            .iter()
            .enumerate()
            .map(|(i, replica)| json!({
                "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
                "metadata": {"name": format!("hap-chaos-runtimes-timeout-{replica}")},
                "webhooks": [{
                    "name": "runtimes.accountpool.io", "admissionReviewVersions": ["v1"],
                    "sideEffects": "NoneOnDryRun", "failurePolicy": "Fail", "timeoutSeconds": 1,
                    "clientConfig": {"url": format!("https://127.0.0.1:{}/mutate/runtimes", self.ports[i]), "caBundle": ca},
                    "rules": [{"apiGroups": ["infrastructuremanager.kyma-project.io"], "apiVersions": ["v1"],
                        "resources": ["runtimes"], "operations": ["CREATE", "UPDATE"]}],
                    "objectSelector": {"matchLabels": {REPLICA_LABEL: format!("t{replica}")}},
                }],
            }))
            .collect()
    }

    /// One Shoot registration per replica slot, for the garden's kube-apiserver (which
    /// gardener-apiserver asks): opted-in Shoots labelled with the slot.
    pub fn shoot_registrations(&self) -> Vec<Value> {
        let ca = base64(self.ca_pem.as_bytes());
        ['a', 'b']
            .iter()
            .enumerate()
            .map(|(i, replica)| json!({
                "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
                "metadata": {"name": format!("hap-chaos-shoots-{replica}")},
                "webhooks": [{
                    "name": "shoots.accountpool.io", "admissionReviewVersions": ["v1"],
                    "sideEffects": "NoneOnDryRun", "failurePolicy": "Fail", "timeoutSeconds": 10,
                    "reinvocationPolicy": "Never",
                    "clientConfig": {"url": format!("https://127.0.0.1:{}/mutate/shoots", self.ports[i]), "caBundle": ca},
                    "rules": [{"apiGroups": ["core.gardener.cloud"], "apiVersions": ["v1beta1"],
                        "resources": ["shoots"], "operations": ["CREATE", "UPDATE"], "scope": "Namespaced"}],
                    "objectSelector": {"matchLabels": {"accountpool.io/request": "true", REPLICA_LABEL: replica.to_string()}},
                }],
            }))
            .collect()
    }
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

/// Webhook calls refused before their Runtime was admitted, over the run (denials while a pool was
/// exhausted, calls to a replica that was restarting or had no leader to decide).
pub static REFUSED: AtomicUsize = AtomicUsize::new(0);

/// Creates the Runtime of request `name` until it is admitted, through replica a and b in turn.
/// Returns how many calls were refused before (denials and unreachable webhooks).
pub async fn create_until_admitted(
    client: &Client,
    name: &str,
    spec: &Value,
    deadline: Duration,
) -> usize {
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), RUNTIMES_NS, &runtime_resource());
    let start = Instant::now();
    let mut refused = 0;
    loop {
        let replica = if refused % 2 == 0 { 'a' } else { 'b' };
        match api
            .create(&PostParams::default(), &runtime(name, spec, replica))
            .await
        {
            Ok(_) => return refused,
            Err(kube::Error::Api(s)) if s.code == 409 && s.reason == "AlreadyExists" => {
                return refused;
            }
            Err(e) => {
                refused += 1;
                REFUSED.fetch_add(1, Ordering::Relaxed);
                assert!(
                    start.elapsed() < deadline,
                    "Runtime {name} never admitted; last: {e}"
                );
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

/// What the checker found about the Runtimes.
#[derive(Debug, Default)]
pub struct RuntimeCounts {
    pub admitted: usize,
    /// Admitted Runtimes whose binding differs from their claim's (or whose claim is missing or
    /// not Bound): a request served with a binding the operator did not decide.
    pub mismatched: usize,
}

/// Every admitted Runtime carries its claim's binding.
pub async fn check(client: &Client, claims: &[hap_operator::api::AccountClaim]) -> RuntimeCounts {
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), RUNTIMES_NS, &runtime_resource());
    let start = Instant::now();
    let runtimes = loop {
        match api.list(&Default::default()).await {
            Ok(l) => break l.items,
            Err(e) => {
                assert!(
                    start.elapsed() < Duration::from_secs(120),
                    "list Runtimes: {e}"
                );
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        }
    };
    let mut c = RuntimeCounts::default();
    for rt in &runtimes {
        c.admitted += 1;
        let name = rt.name_any();
        let have = rt
            .data
            .pointer("/spec/shoot/secretBindingName")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let claim = claims
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(claim_name(&name).as_str()));
        let bound = claim
            .and_then(|c| c.status.as_ref())
            .filter(|s| s.phase == Some(hap_operator::api::ClaimPhase::Bound))
            .and_then(|s| s.credentials_binding_name.clone());
        if bound.as_deref() != Some(have) {
            c.mismatched += 1;
            eprintln!("Runtime {name} carries `{have}`, its claim is bound to {bound:?}");
        }
    }
    c
}
