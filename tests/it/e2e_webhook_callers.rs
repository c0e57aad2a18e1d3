//! Who may call the admission webhook (issue 20, item 2), on the real API servers: with
//! `--webhook-client-ca` naming the CA of the client certificate kube-apiserver and
//! gardener-apiserver present (the test environment's `pki/webhook-client-ca.crt`, given to them
//! through `--admission-control-config-file`), their calls are served — a Runtime through
//! kube-apiserver and a Shoot through gardener-apiserver get their bindings — while a hand-made
//! AdmissionReview POSTed with only the serving CA, the attack of the issue, is refused at TLS
//! and creates no AccountClaim — from this process and from another pod's network (a network
//! namespace with its own veth address).

use crate::support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use kube::api::PostParams;
use serde_json::{Value, json};
use support::garden::{BindingRef, profile, shoot_object, shoot_resource};
use support::platform::{
    Certs, RuntimeSpec, SCOPE_LABEL, WebhookRegistration, api, forged_review,
    install_platform_crds, runtime, runtime_binding, runtime_resource, scoped_namespace,
};
use support::{Hap, Operator, unique};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};

/// The CA of the client certificate the API servers of the control plane at `kubeconfig`
/// present to webhooks (written by `e2e/testenv up`).
fn client_ca(kubeconfig: &Path) -> PathBuf {
    let path = kubeconfig
        .parent()
        .expect("kubeconfig directory")
        .join("pki/webhook-client-ca.crt");
    assert!(
        path.exists(),
        "{} is missing: this control plane was started by a launcher that gives its API servers \
         no webhook client certificate; restart it (`e2e/testenv down && e2e/testenv up`)",
        path.display()
    );
    path
}

/// What a pod that reaches the port can do: POST a review over TLS trusting the serving CA,
/// without a client certificate. The webhook's answer, or why there was none.
async fn forge(
    addr: SocketAddr,
    ca_pem: &str,
    path: &str,
    review: &Value,
) -> Result<Value, String> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.expect("CA")).expect("root");
    }
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let name = ServerName::try_from("127.0.0.1").expect("server name");
    let mut tls = TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    let body = serde_json::to_vec(review).expect("review");
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: hap\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    // With TLS 1.3 the client's handshake ends before the server judged it; a refusal shows
    // as a failed write or read.
    tls.write_all(head.as_bytes())
        .await
        .map_err(|e| format!("write: {e}"))?;
    tls.write_all(&body)
        .await
        .map_err(|e| format!("write: {e}"))?;
    tls.flush().await.map_err(|e| format!("flush: {e}"))?;
    let mut raw = Vec::new();
    tls.read_to_end(&mut raw)
        .await
        .map_err(|e| format!("read: {e}"))?;
    let text = String::from_utf8_lossy(&raw);
    let (_, answer) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("no HTTP answer: {text:?}"))?;
    serde_json::from_str(answer).map_err(|e| format!("{e}: {text}"))
}

/// Every claim in the test's claim namespace.
async fn claim_names(hap: &Hap) -> Vec<String> {
    hap.claims()
        .list(&Default::default())
        .await
        .expect("list claims")
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_review_without_a_client_certificate_creates_no_claim() {
    install_platform_crds().await;
    let scope = unique("callers");
    let mut hap = Hap::without_operator(
        &["aws"],
        json!({"requestSources": [{"id": "kyma", "kind": "Runtime", "matchLabels": {SCOPE_LABEL: scope}}]}),
    )
    .await;
    hap.binding("aws-1", "aws", &[("hyperscalerType", "aws")])
        .await;
    hap.binding("aws-2", "aws", &[("hyperscalerType", "aws")])
        .await;
    let certs = Certs::new();
    let mut args = certs.args(hap.run_args());
    args.webhook_client_ca = Some(client_ca(&support::kubeconfig()));
    hap.operator = Some(Operator::start_with(&hap.client, args).await);
    let addr = hap
        .operator
        .as_ref()
        .and_then(|o| o.handle.webhook.get())
        .expect("webhook address");

    // The attack: a made-up tenant in a namespace that does not exist.
    let spec = RuntimeSpec {
        name: "rt-forged",
        global_account: Some("ga-forged"),
        plan: "aws",
        platform_region: "cf-eu10",
        region: "eu-central-1",
        provider: "aws",
        binding: "",
        extra_labels: &[],
    };
    let ghost_ns = unique("no-such-ns");
    let object = serde_json::to_value(runtime(&ghost_ns, &scope, &spec)).expect("runtime");
    let forged = forged_review(
        json!({"group": "infrastructuremanager.kyma-project.io", "version": "v1", "kind": "Runtime"}),
        json!({"group": "infrastructuremanager.kyma-project.io", "version": "v1", "resource": "runtimes"}),
        &ghost_ns,
        "rt-forged",
        object,
    );
    let answer = forge(addr, &certs.ca_pem, "/mutate/runtimes", &forged).await;

    // The configured caller is served: kube-apiserver presents its client certificate.
    let ns = scoped_namespace(&hap.client, "kcp", &scope).await;
    let _hook = WebhookRegistration::register(
        "Runtime",
        &format!("https://{addr}/mutate/runtimes"),
        &certs.ca_bundle(),
        &scope,
        json!({}),
    );
    let legit = RuntimeSpec {
        name: "rt-real",
        global_account: Some("ga-real"),
        ..spec
    };
    api(&hap.client, &ns, &runtime_resource())
        .create(&PostParams::default(), &runtime(&ns, &scope, &legit))
        .await
        .expect("kube-apiserver's call is served");
    let bound = runtime_binding(&hap.client, &ns, "rt-real").await;
    assert!(bound.starts_with("aws-"), "rt-real got {bound:?}");
    assert_eq!(hap.bound(&format!("runtime.{ns}.rt-real")).await, bound);

    // Every request the webhook handled has been answered by now (the forged one came first):
    // only the real Runtime's claim exists.
    assert_eq!(
        claim_names(&hap).await,
        vec![format!("runtime.{ns}.rt-real")],
        "the forged review made the operator claim (its answer: {answer:?})"
    );
    assert!(
        answer.is_err(),
        "a caller without a client certificate was answered: {answer:?}"
    );
}

/// A Shoot created through gardener-apiserver is admitted and gets its binding; a forged Shoot
/// review is refused. With a separate garden, the operator trusts the garden's client CA too
/// (one PEM bundle), as a separate-garden `webhook.url` setup does.
async fn shoot_callers(separate_garden: bool) {
    let scope = unique("callers-shoot");
    let spec = json!({"requestSources": [{"id": "shoots", "kind": "Shoot",
        "matchLabels": {"accountpool.io/request": "true", SCOPE_LABEL: scope}}]});
    let mut hap = if separate_garden {
        Hap::without_operator_with_separate_garden(&["aws"], spec).await
    } else {
        Hap::without_operator(&["aws"], spec).await
    };
    let garden_kubeconfig = hap
        .garden_kubeconfig
        .clone()
        .unwrap_or_else(support::kubeconfig);
    hap.binding("aws-1", "aws", &[("hyperscalerType", "aws")])
        .await;
    let certs = Certs::new();
    let bundle = certs.dir.path().join("callers-ca.crt");
    let mut pem = std::fs::read_to_string(client_ca(&support::kubeconfig())).expect("CA");
    pem.push_str(&std::fs::read_to_string(client_ca(&garden_kubeconfig)).expect("garden CA"));
    std::fs::write(&bundle, pem).expect("bundle");
    let mut args = certs.args(hap.run_args());
    args.webhook_client_ca = Some(bundle);
    hap.operator = Some(Operator::start_with(&hap.client, args).await);
    let addr = hap
        .operator
        .as_ref()
        .and_then(|o| o.handle.webhook.get())
        .expect("webhook address");
    let (ok, _, err) = support::platform::kubectl_at(
        &garden_kubeconfig,
        &[
            "label",
            "namespace",
            &hap.bindings_ns,
            &format!("{SCOPE_LABEL}={scope}"),
        ],
        None,
    );
    assert!(ok, "{err}");
    let _hook = WebhookRegistration::register_in(
        &garden_kubeconfig,
        "Shoot",
        &format!("https://{addr}/mutate/shoots"),
        &certs.ca_bundle(),
        &scope,
        json!({"matchLabels": {"accountpool.io/request": "true"}}),
    );
    let p = profile(&hap.garden, "aws").await;
    let shoot = |name: &str, ga: &str| {
        let mut obj = shoot_object(
            &hap.bindings_ns,
            name,
            "",
            BindingRef::CredentialsBinding,
            &p,
        );
        obj["spec"]
            .as_object_mut()
            .expect("spec")
            .remove("credentialsBindingName");
        obj["metadata"]["labels"] = json!({"accountpool.io/request": "true", SCOPE_LABEL: scope,
            "accountpool.io/global-account": ga, "accountpool.io/plan": "aws",
            "accountpool.io/platform-region": "cf-us10"});
        obj
    };

    let forged = forged_review(
        json!({"group": "core.gardener.cloud", "version": "v1beta1", "kind": "Shoot"}),
        json!({"group": "core.gardener.cloud", "version": "v1beta1", "resource": "shoots"}),
        &hap.bindings_ns,
        "s-forged",
        shoot("s-forged", "ga-forged"),
    );
    let answer = forge(addr, &certs.ca_pem, "/mutate/shoots", &forged).await;

    let obj: kube::api::DynamicObject =
        serde_json::from_value(shoot("s-real", "ga-real")).expect("shoot");
    let created = api(&hap.garden, &hap.bindings_ns, &shoot_resource())
        .create(&PostParams::default(), &obj)
        .await
        .expect("gardener-apiserver's call is served");
    let bound = created
        .data
        .pointer("/spec/credentialsBindingName")
        .and_then(Value::as_str)
        .map(String::from);
    assert_eq!(bound.as_deref(), Some("aws-1"));
    let real = format!("shoot.{}.s-real", hap.bindings_ns);
    assert_eq!(hap.bound(&real).await, "aws-1");
    assert_eq!(
        claim_names(&hap).await,
        vec![real],
        "the forged review made the operator claim (its answer: {answer:?})"
    );
    assert!(
        answer.is_err(),
        "a caller without a client certificate was answered: {answer:?}"
    );
    hap.delete_shoot("s-real").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gardener_apiserver_is_served_and_a_forged_shoot_review_is_refused() {
    shoot_callers(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_separate_gardens_gardener_apiserver_is_served_with_its_client_ca() {
    shoot_callers(true).await;
}

/// Another pod on the node network, as the kernel makes one: a network namespace joined to the
/// host by a veth pair, with its own address. It reaches the webhook only over that network and
/// holds no client certificate. Removed (with its veth pair) on drop.
struct PodNetwork {
    name: String,
    host: std::net::Ipv4Addr,
}

impl PodNetwork {
    fn ip(args: &[&str]) {
        let out = std::process::Command::new("ip")
            .args(args)
            .output()
            .expect("run ip");
        assert!(
            out.status.success(),
            "ip {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn create() -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .subsec_nanos();
        let tag = format!("{:06x}", (std::process::id() ^ nanos) & 0xff_ffff);
        // A /30 of 10.231.0.0/16 that no other test uses at the same time (random third octet).
        let (third, fourth) = ((nanos >> 8) % 250, 4 * ((nanos >> 16) % 60));
        let host = std::net::Ipv4Addr::new(10, 231, third as u8, fourth as u8 + 1);
        let pod = std::net::Ipv4Addr::new(10, 231, third as u8, fourth as u8 + 2);
        let net = Self {
            name: format!("hap-pod-{tag}"),
            host,
        };
        let (h, p) = (format!("hapvh{tag}"), format!("hapvp{tag}"));
        Self::ip(&["netns", "add", &net.name]);
        Self::ip(&["link", "add", &h, "type", "veth", "peer", "name", &p]);
        Self::ip(&["link", "set", &p, "netns", &net.name]);
        Self::ip(&["addr", "add", &format!("{host}/30"), "dev", &h]);
        Self::ip(&["link", "set", &h, "up"]);
        let inside = |args: &[&str]| {
            let mut all = vec!["netns", "exec", net.name.as_str(), "ip"];
            all.extend_from_slice(args);
            Self::ip(&all);
        };
        inside(&["addr", "add", &format!("{pod}/30"), "dev", &p]);
        inside(&["link", "set", &p, "up"]);
        inside(&["link", "set", "lo", "up"]);
        net
    }

    /// POSTs `review` to `url` from inside the namespace, as a forging pod would: no client
    /// certificate, and the server's certificate not checked (the forger needs no trust in it).
    /// The answer's body, or curl's error.
    async fn post(&self, url: String, review: &Value) -> Result<Value, String> {
        let name = self.name.clone();
        let body = serde_json::to_string(review).expect("review");
        tokio::task::spawn_blocking(move || {
            let out = std::process::Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    &name,
                    "curl",
                    "-sS",
                    "-k",
                    "--max-time",
                    "20",
                ])
                .args([
                    "-H",
                    "Content-Type: application/json",
                    "--data-binary",
                    &body,
                    &url,
                ])
                .output()
                .map_err(|e| format!("run curl: {e}"))?;
            if !out.status.success() {
                return Err(format!(
                    "curl exit {:?}: {}",
                    out.status.code(),
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
            serde_json::from_slice(&out.stdout)
                .map_err(|e| format!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
        })
        .await
        .expect("curl task")
    }
}

impl Drop for PodNetwork {
    fn drop(&mut self) {
        // Deleting the namespace deletes the veth end inside it, and so the pair.
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

/// The forged review of issue 20, sent from another pod's network: with `--webhook-client-ca`
/// the TLS handshake refuses it and no claim or binding label changes. The same request against
/// the webhook without the client CA is answered and claims a binding: that is the attack, and it
/// shows the pod really reaches the webhook.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_review_from_another_pods_network_is_refused_at_tls() {
    install_platform_crds().await;
    let scope = unique("podnet");
    // Bindings in the separate garden, as in a real landscape (and where the test
    // environment's gardener-apiserver runs); claims here.
    let mut hap = Hap::without_operator_with_separate_garden(
        &["aws"],
        json!({"requestSources": [{"id": "kyma", "kind": "Runtime", "matchLabels": {SCOPE_LABEL: scope}}]}),
    )
    .await;
    for b in ["aws-1", "aws-2"] {
        hap.binding(b, "aws", &[("hyperscalerType", "aws")]).await;
    }
    let pod = PodNetwork::create();
    let certs = Certs::new();
    let forged = |name: &str, ga: &str| {
        let spec = RuntimeSpec {
            name,
            global_account: Some(ga),
            plan: "aws",
            platform_region: "cf-eu10",
            region: "eu-central-1",
            provider: "aws",
            binding: "",
            extra_labels: &[],
        };
        let ns = unique("no-such-ns");
        let object = serde_json::to_value(runtime(&ns, &scope, &spec)).expect("runtime");
        forged_review(
            json!({"group": "infrastructuremanager.kyma-project.io", "version": "v1", "kind": "Runtime"}),
            json!({"group": "infrastructuremanager.kyma-project.io", "version": "v1", "resource": "runtimes"}),
            &ns,
            name,
            object,
        )
    };
    let start = |with_ca: bool| {
        let mut args = certs.args(hap.run_args());
        args.webhook_addr = Some(SocketAddr::new(pod.host.into(), 0));
        if with_ca {
            args.webhook_client_ca = Some(client_ca(&support::kubeconfig()));
        }
        args
    };
    let url = |op: &Operator| {
        format!(
            "https://{}/mutate/runtimes",
            op.handle.webhook.get().expect("webhook address")
        )
    };

    // Without the client CA (before item 2): the pod's forgery is served and claims a binding.
    let open = Operator::start_with(&hap.client, start(false)).await;
    let answer = pod.post(url(&open), &forged("rt-a", "ga-forged-a")).await;
    assert_eq!(
        answer.as_ref().ok().map(|a| &a["response"]["allowed"]),
        Some(&json!(true)),
        "the pod must reach the webhook for this test to mean anything: {answer:?}"
    );
    let claims_before = claim_names(&hap).await;
    assert_eq!(claims_before.len(), 1, "{claims_before:?}");
    open.stop().await;

    // With it: refused at TLS, nothing created or claimed.
    let mut labels_before = Vec::new();
    for b in ["aws-1", "aws-2"] {
        labels_before.push(hap.labels(b).await);
    }
    hap.operator = Some(Operator::start_with(&hap.client, start(true)).await);
    let answer = pod
        .post(
            url(hap.operator.as_ref().expect("operator")),
            &forged("rt-b", "ga-forged-b"),
        )
        .await;
    let err = answer.expect_err("a pod without a client certificate was answered");
    assert!(
        err.contains("alert") || err.contains("certificate") || err.contains("SSL"),
        "refused, but not at TLS: {err}"
    );
    // The handshake failed, so no request reached a handler: nothing is in flight to wait for.
    assert_eq!(claim_names(&hap).await, claims_before);
    let mut labels_after = Vec::new();
    for b in ["aws-1", "aws-2"] {
        labels_after.push(hap.labels(b).await);
    }
    assert_eq!(labels_after, labels_before);
}
