//! Settings of `hap run`, from flags or environment.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, ValueEnum};

use crate::k8s::clients::ApiLimits;

/// Log output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// `hap run` settings.
#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    /// Name of the HapConfig in force; any other HapConfig reports Ready=False, reason Ignored.
    #[arg(long, env = "HAP_CONFIG_NAME", default_value = "default")]
    pub config_name: String,
    /// Watch AccountClaims only in this namespace (default: every namespace). Lets several
    /// operator instances, each with its own `--config-name`, share one cluster.
    #[arg(long, env = "HAP_CLAIM_NAMESPACE")]
    pub claim_namespace: Option<String>,
    /// Mark every HapConfig other than `--config-name` `Ready=False, reason Ignored` — except
    /// one another instance serves (its status was evaluated as a config in force), so instances
    /// sharing a cluster never overwrite each other. False: mark none.
    #[arg(long, env = "HAP_MARK_IGNORED_CONFIGS", default_value_t = true, action = ArgAction::Set)]
    pub mark_ignored_configs: bool,
    /// Kubeconfig of the garden (the cluster serving CredentialsBindings, SecretBindings and
    /// Shoots) when it is not the operator's own cluster. Bindings and Shoots are read and
    /// written through it; HapConfigs, AccountClaims, the Lease and events stay in the
    /// operator's cluster. Default: the operator's cluster is the garden.
    #[arg(long, env = "HAP_GARDEN_KUBECONFIG", value_name = "PATH")]
    pub garden_kubeconfig: Option<PathBuf>,
    /// Address of /livez and /readyz (plain HTTP, for the kubelet's probes), and of /metrics
    /// when `--metrics-secure=false`.
    #[arg(long, env = "HAP_HTTP_ADDR", default_value = "0.0.0.0:8080")]
    pub http_addr: SocketAddr,
    /// Serve /metrics over HTTPS on `--metrics-addr`, only to callers whose bearer token the API
    /// server authenticates (TokenReview) and allows `get` on the non-resource URL /metrics
    /// (SubjectAccessReview; the ClusterRole hap-operator-metrics-reader grants it). The metrics
    /// name every global account served. False: plain /metrics on `--http-addr` for anyone who
    /// reaches the port (then limit that with the NetworkPolicy).
    #[arg(long, env = "HAP_METRICS_SECURE", default_value_t = true, action = ArgAction::Set)]
    pub metrics_secure: bool,
    /// Address of the HTTPS /metrics (with `--metrics-secure`).
    #[arg(long, env = "HAP_METRICS_ADDR", default_value = "0.0.0.0:8443")]
    pub metrics_addr: SocketAddr,
    /// PEM certificate chain of the HTTPS /metrics, re-read when it changes. Unset: a
    /// certificate made at start and signed by itself (scrapers then skip verifying it, as for
    /// controller-runtime operators; what protects the metrics is the token check).
    #[arg(
        long,
        env = "HAP_METRICS_CERT_FILE",
        value_name = "PATH",
        requires = "metrics_key_file"
    )]
    pub metrics_cert_file: Option<PathBuf>,
    /// PEM private key of `--metrics-cert-file`.
    #[arg(
        long,
        env = "HAP_METRICS_KEY_FILE",
        value_name = "PATH",
        requires = "metrics_cert_file"
    )]
    pub metrics_key_file: Option<PathBuf>,
    /// Elect a leader through a Lease so that several replicas can run; only the leader writes.
    #[arg(long, env = "HAP_LEADER_ELECT", default_value_t = true, action = ArgAction::Set)]
    pub leader_elect: bool,
    /// Name of the leader Lease.
    #[arg(long, env = "HAP_LEASE_NAME", default_value = "hap-operator")]
    pub lease_name: String,
    /// Namespace of the leader Lease (the operator's own namespace).
    #[arg(long, env = "POD_NAMESPACE", default_value = "hap-system")]
    pub lease_namespace: String,
    /// Identity in the Lease and in events; defaults to the pod name. Without one, the host name
    /// (else the pid) and a random suffix: two replicas with one identity would both renew.
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// The random part of the fallback identity, drawn once per replica.
    #[arg(skip = crate::sources::naming::random_suffix())]
    pub identity_suffix: String,
    /// Seconds a leader lease lasts without renewal.
    #[arg(long, default_value_t = 15)]
    pub lease_duration_seconds: u64,
    /// Log format.
    #[arg(long, env = "HAP_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,
    /// Every claim is reconciled again this often (one sweep over all claims), as a safety net.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub resync: Duration,
    /// How often a claim waiting for a binding (pool exhausted) is retried, besides on pool changes.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub pending_retry: Duration,
    /// AccountClaims reconciled at once (claims of request sources have slots of their own,
    /// `--source-concurrency`). Claims wait for a slot in the order they came.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrency: u16,
    /// Claims of request sources (Shoots, Runtimes, Clusters admitted through the webhook)
    /// reconciled at once, apart from AccountClaims: an admission call may be waiting for their
    /// decision, so a backlog of AccountClaims (a takeover, a burst) must not hold them up. As
    /// many again for those of shared pools, which write no binding.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..))]
    pub source_concurrency: u16,
    /// Threads that run the operator. One keeps every wake-up on the thread that runs the work
    /// (a second one cost ~10 % more CPU per claim in `make bench`, and was not faster).
    #[arg(long, env = "HAP_WORKER_THREADS", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    pub worker_threads: u16,
    /// Serve the admission webhooks of request sources (HapConfig `requestSources`) on this
    /// address, over TLS, on every replica. Unset: no webhooks.
    #[arg(long, env = "HAP_WEBHOOK_ADDR")]
    pub webhook_addr: Option<SocketAddr>,
    /// PEM certificate chain of the webhook; re-read when it changes.
    #[arg(
        long,
        env = "HAP_WEBHOOK_CERT_FILE",
        default_value = "/etc/hap-operator/webhook/tls.crt"
    )]
    pub webhook_cert_file: PathBuf,
    /// PEM private key of the webhook; re-read when it changes.
    #[arg(
        long,
        env = "HAP_WEBHOOK_KEY_FILE",
        default_value = "/etc/hap-operator/webhook/tls.key"
    )]
    pub webhook_key_file: PathBuf,
    /// PEM CA of the client certificates the webhook's callers (kube-apiserver,
    /// gardener-apiserver) present through their `--admission-control-config-file`: a caller
    /// without one it signed is refused at TLS. Required with `--webhook-addr` unless
    /// `--webhook-allow-unauthenticated` says otherwise.
    #[arg(long, env = "HAP_WEBHOOK_CLIENT_CA", value_name = "PATH")]
    pub webhook_client_ca: Option<PathBuf>,
    /// Serve admission reviews from any caller that reaches the webhook's port, without a client
    /// certificate (no `--webhook-client-ca`). Anyone who reaches the port can then send a
    /// review with any user and groups, so tenant rules naming users or groups hold only as far
    /// as the NetworkPolicy keeps others out. Logged as a warning at start.
    #[arg(long, env = "HAP_WEBHOOK_ALLOW_UNAUTHENTICATED", default_value_t = false, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub webhook_allow_unauthenticated: bool,
    /// How long an admission call may take in all (find or create its AccountClaim, wait for
    /// the leader, stamp or take the claim back) before it is answered. Keep it at least 2 s
    /// below the webhook's timeoutSeconds: a call kube-apiserver gave up on fails the request.
    #[arg(long, default_value = "8s", value_parser = parse_duration)]
    pub webhook_decision_timeout: Duration,
    /// Connections the webhook keeps open at once; one more is closed at once. kube-apiserver
    /// opens one per call in progress, and a call may wait the whole decision timeout: keep it
    /// above the peak rate of Shoot, Runtime and Cluster CREATEs times that timeout (512 fits
    /// 50 a second at 8 s), and below the container's open-files limit.
    #[arg(long, default_value_t = crate::webhook::DEFAULT_MAX_CONNECTIONS as u32, value_parser = clap::value_parser!(u32).range(1..))]
    pub webhook_max_connections: u32,
    /// The webhook's timeoutSeconds as registered, if known (e.g. `10s`): the decision timeout
    /// in force is then at most this minus 2 s.
    #[arg(long, value_parser = parse_duration)]
    pub webhook_timeout: Option<Duration>,
    /// How long a claim a request source created may wait for its object to appear before the
    /// operator treats the object as never created (and deletes the claim). Never less than
    /// `--api-request-timeout` plus 15 s of clock skew, nor than the decision timeout plus 5 s:
    /// after the webhook answered, later admission steps may hold the request until the API
    /// server's request timeout, and an object stored after its claim went would use a binding
    /// released clean.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub source_grace: Duration,
    /// The API server's `--request-timeout` (60 s unless it was changed): the longest an
    /// admission may still run after this webhook answered. It sets the lowest
    /// `--source-grace`; lower it only when no other admission step can hold a request.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub api_request_timeout: Duration,
    /// Also export KEB's names of the pool gauges (`kcp_keb_v2_*_credentials_bindings`,
    /// `kcp_keb_v2_instances_per_credentials_binding`), so that dashboards built for Kyma
    /// Environment Broker keep working.
    #[arg(long, env = "HAP_KEB_METRICS", default_value_t = false, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub keb_metrics: bool,
    /// Requests a second the operator sends to each API server (its own cluster's, and the
    /// garden's when `--garden-kubeconfig` names another), on average; a request over the
    /// budget waits in the client's queue. 0: no limit (the API server's priority and fairness
    /// then decides; the chart ships a FlowSchema for the operator).
    #[arg(long, env = "HAP_KUBE_API_QPS", default_value_t = 0.0, value_parser = parse_qps)]
    pub kube_api_qps: f64,
    /// Requests sent at once after a quiet moment, above `--kube-api-qps`. 0: one second's worth.
    #[arg(long, env = "HAP_KUBE_API_BURST", default_value_t = 0)]
    pub kube_api_burst: u32,
}

/// What a webhook call needs beyond its decision timeout before kube-apiserver's timeoutSeconds:
/// TLS, the network and kube-apiserver's own work.
pub const WEBHOOK_ANSWER_MARGIN: Duration = Duration::from_secs(2);

/// Who the admission webhook serves (`RunArgs::webhook_callers`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WebhookCallers {
    /// Only callers presenting a client certificate this CA signed.
    SignedBy(PathBuf),
    /// Anyone who reaches the port (`--webhook-allow-unauthenticated`).
    Anyone,
}

/// A webhook address without a client CA and without the explicit opt-out.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "the admission webhook (--webhook-addr) serves only callers with a client certificate: set \
     --webhook-client-ca (env HAP_WEBHOOK_CLIENT_CA) to the CA of the certificate kube-apiserver \
     and gardener-apiserver present (docs/install.md, \"Who may call the webhook\"), or set \
     --webhook-allow-unauthenticated (env HAP_WEBHOOK_ALLOW_UNAUTHENTICATED=true) to serve any \
     caller that reaches the port"
)]
pub struct UnauthenticatedCallers;

/// How far a replica's clock may be behind the API server's before the source clean-up deletes
/// a claim early: the webhook stamps with its own clock, the clean-up reads the API server's.
/// NTP keeps nodes within milliseconds; this covers a node whose sync has lapsed for a while.
pub const CLOCK_SKEW_ALLOWANCE: Duration = Duration::from_secs(15);

fn parse_duration(s: &str) -> Result<Duration, String> {
    crate::duration::parse(s).map_err(|e| e.to_string())
}

/// The slowest budget accepted: one request every 100 s. Below it a "budget" only wedges the
/// operator (a lease renewal alone would wait longer than the lease lasts).
const MIN_QPS: f64 = 0.01;

fn parse_qps(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(q) if q == 0.0 || (q.is_finite() && q >= MIN_QPS) => Ok(q),
        _ => Err(format!(
            "`{s}` is not a number of requests a second ({MIN_QPS} or more; 0 is no limit)"
        )),
    }
}

impl RunArgs {
    /// Settings for running the operator in-process (tests, demos): no leader election, an
    /// ephemeral HTTP port with plain /metrics (tests read it there; the secure endpoint is
    /// turned on by the tests of it).
    pub fn for_config(config_name: &str) -> Self {
        Self {
            config_name: config_name.to_string(),
            claim_namespace: None,
            mark_ignored_configs: true,
            garden_kubeconfig: None,
            http_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            metrics_secure: false,
            metrics_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            metrics_cert_file: None,
            metrics_key_file: None,
            leader_elect: false,
            lease_name: "hap-operator".into(),
            lease_namespace: "default".into(),
            identity: None,
            identity_suffix: crate::sources::naming::random_suffix(),
            lease_duration_seconds: 15,
            log_format: LogFormat::Text,
            resync: Duration::from_secs(300),
            pending_retry: Duration::from_secs(30),
            concurrency: 16,
            source_concurrency: 4,
            worker_threads: 1,
            webhook_addr: None,
            webhook_cert_file: PathBuf::from("/etc/hap-operator/webhook/tls.crt"),
            webhook_key_file: PathBuf::from("/etc/hap-operator/webhook/tls.key"),
            webhook_client_ca: None,
            webhook_allow_unauthenticated: false,
            webhook_decision_timeout: Duration::from_secs(8),
            webhook_max_connections: crate::webhook::DEFAULT_MAX_CONNECTIONS as u32,
            webhook_timeout: None,
            source_grace: Duration::from_secs(60),
            api_request_timeout: Duration::from_secs(60),
            keb_metrics: false,
            kube_api_qps: 0.0,
            kube_api_burst: 0,
        }
    }

    /// The request budget of each client, from `--kube-api-qps` and `--kube-api-burst`.
    pub fn api_limits(&self) -> ApiLimits {
        ApiLimits {
            qps: self.kube_api_qps,
            burst: self.kube_api_burst,
        }
    }

    /// The grace in force: `--source-grace`, but at least the API server's request timeout plus
    /// [`CLOCK_SKEW_ALLOWANCE`] (the claim is created or stamped during the request, which the
    /// API server stores or gives up on within its request timeout; the clean-up compares the
    /// stamp, a replica's clock, with the API server's), and at least the decision timeout plus
    /// 5 s (the webhook waits that long before the object can be stored).
    pub fn effective_source_grace(&self) -> Duration {
        self.source_grace
            .max(self.webhook_decision_timeout + Duration::from_secs(5))
            .max(self.api_request_timeout + CLOCK_SKEW_ALLOWANCE)
    }

    /// Who the webhook serves: callers with a client certificate the CA signed, or (explicitly)
    /// anyone. Neither: the webhook must not start, since a forged review would be served.
    pub fn webhook_callers(&self) -> Result<WebhookCallers, UnauthenticatedCallers> {
        match (&self.webhook_client_ca, self.webhook_allow_unauthenticated) {
            (Some(ca), _) => Ok(WebhookCallers::SignedBy(ca.clone())),
            (None, true) => Ok(WebhookCallers::Anyone),
            (None, false) => Err(UnauthenticatedCallers),
        }
    }

    /// The decision timeout in force: `--webhook-decision-timeout`, but at most
    /// `--webhook-timeout` minus [`WEBHOOK_ANSWER_MARGIN`] (never below 1 s), so a call is
    /// answered before kube-apiserver gives up on it.
    pub fn effective_decision_timeout(&self) -> Duration {
        match self.webhook_timeout {
            Some(t) => self
                .webhook_decision_timeout
                .min(t.saturating_sub(WEBHOOK_ANSWER_MARGIN))
                .max(Duration::from_secs(1)),
            None => self.webhook_decision_timeout,
        }
    }

    /// Where request sources create their AccountClaims: `--claim-namespace` when set (the
    /// claim controller watches only there), else the operator's own namespace.
    pub fn source_claim_namespace(&self) -> String {
        self.claim_namespace
            .clone()
            .unwrap_or_else(|| self.lease_namespace.clone())
    }

    /// The replica's identity: `--identity` (the pod name), else the host name or pid with this
    /// replica's random suffix — a host name alone is shared by two processes on one host, or by
    /// pods that lost their POD_NAME, and two holders of one identity both renew the Lease.
    pub fn identity(&self) -> String {
        self.identity.clone().unwrap_or_else(|| {
            let host = std::env::var("HOSTNAME")
                .ok()
                .filter(|h| !h.is_empty())
                .unwrap_or_else(|| format!("hap-operator-{}", std::process::id()));
            format!("{host}-{}", self.identity_suffix)
        })
    }
}

#[cfg(test)]
mod source_grace_tests {
    use super::*;

    #[test]
    fn the_source_grace_outlasts_the_api_servers_request_timeout() {
        // Found by review: a grace of the decision timeout plus 5 s let the clean-up release a
        // binding clean while a later admission step (a validating webhook that waits) still
        // held the request, which the API server then stored naming that binding.
        let mut args = RunArgs::for_config("x");
        args.source_grace = Duration::from_secs(13);
        args.webhook_decision_timeout = Duration::from_secs(8);
        assert_eq!(args.effective_source_grace(), Duration::from_secs(75));
        args.api_request_timeout = Duration::from_secs(120);
        assert_eq!(args.effective_source_grace(), Duration::from_secs(135));
        args.api_request_timeout = Duration::from_secs(1);
        assert_eq!(args.effective_source_grace(), Duration::from_secs(16));
        args.source_grace = Duration::from_secs(300);
        assert_eq!(args.effective_source_grace(), Duration::from_secs(300));
    }

    #[test]
    fn the_source_grace_outlasts_the_webhooks_wait() {
        // Found by the admission benchmark: with a grace shorter than the decision timeout the
        // leader deleted claims whose admission call was still waiting for its decision.
        let mut args = RunArgs::for_config("x");
        args.source_grace = Duration::from_secs(3);
        args.webhook_decision_timeout = Duration::from_secs(8);
        args.api_request_timeout = Duration::ZERO;
        assert_eq!(args.effective_source_grace(), Duration::from_secs(15));
        args.webhook_decision_timeout = Duration::from_secs(28);
        assert_eq!(args.effective_source_grace(), Duration::from_secs(33));
        args.source_grace = Duration::from_secs(60);
        assert_eq!(args.effective_source_grace(), Duration::from_secs(60));
    }

    #[test]
    fn the_decision_timeout_leaves_room_below_the_webhook_timeout() {
        // Nothing checked the decision timeout against timeoutSeconds, and
        // a call kube-apiserver gave up on left its claim behind.
        let mut args = RunArgs::for_config("x");
        args.webhook_decision_timeout = Duration::from_secs(8);
        assert_eq!(args.effective_decision_timeout(), Duration::from_secs(8));
        args.webhook_timeout = Some(Duration::from_secs(10));
        assert_eq!(args.effective_decision_timeout(), Duration::from_secs(8));
        args.webhook_timeout = Some(Duration::from_secs(5));
        assert_eq!(args.effective_decision_timeout(), Duration::from_secs(3));
        args.webhook_timeout = Some(Duration::from_secs(1));
        assert_eq!(args.effective_decision_timeout(), Duration::from_secs(1));
    }
}

#[cfg(test)]
mod callers_tests {
    use super::*;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        run: RunArgs,
    }

    fn parse(flags: &[&str]) -> RunArgs {
        <Cli as clap::Parser>::try_parse_from(std::iter::once("hap").chain(flags.iter().copied()))
            .map(|c| c.run)
            .expect("flags parse")
    }

    #[test]
    fn a_webhook_serves_unauthenticated_callers_only_when_told_to() {
        // Found by review: the shipped webhook served forged reviews by default, so tenant
        // rules naming users or groups meant nothing unless the installer added the client CA.
        let open = parse(&["--webhook-addr", "0.0.0.0:9443"]);
        let Err(e) = open.webhook_callers() else {
            panic!("a webhook without a client CA starts");
        };
        let msg = e.to_string();
        assert!(
            msg.contains("--webhook-client-ca") && msg.contains("--webhook-allow-unauthenticated"),
            "{msg}"
        );
        let opted_out = parse(&[
            "--webhook-addr",
            "0.0.0.0:9443",
            "--webhook-allow-unauthenticated",
        ]);
        assert_eq!(opted_out.webhook_callers(), Ok(WebhookCallers::Anyone));
        let signed = parse(&["--webhook-client-ca", "/ca.crt"]);
        assert_eq!(
            signed.webhook_callers(),
            Ok(WebhookCallers::SignedBy("/ca.crt".into()))
        );
    }
}

#[cfg(test)]
mod identity_tests {
    use super::*;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        run: RunArgs,
    }

    #[test]
    fn the_request_budget_flags_become_the_clients_limits() {
        let parse = |flags: &[&str]| {
            <Cli as clap::Parser>::try_parse_from(
                std::iter::once("hap").chain(flags.iter().copied()),
            )
            .map(|c| c.run)
        };
        let default = parse(&[]).expect("no flags");
        assert_eq!(default.api_limits(), ApiLimits::UNLIMITED);
        assert_eq!(RunArgs::for_config("x").api_limits(), ApiLimits::UNLIMITED);
        let set = parse(&["--kube-api-qps", "50.5", "--kube-api-burst", "100"]).expect("flags");
        assert_eq!(
            set.api_limits(),
            ApiLimits {
                qps: 50.5,
                burst: 100
            }
        );
        for bad in ["-1", "many", "inf", "NaN", "1e-20", "0.001"] {
            let flag = format!("--kube-api-qps={bad}");
            let Err(e) = parse(&[&flag]) else {
                panic!("--kube-api-qps {bad} accepted");
            };
            let msg = e.to_string();
            assert!(
                msg.contains("--kube-api-qps") && msg.contains(bad),
                "{bad}: {msg}"
            );
        }
        assert!(parse(&["--kube-api-burst=-3"]).is_err());
    }

    #[test]
    fn two_replicas_without_an_identity_never_share_one() {
        // Found by review: both replicas fell back to the same host name (a pod without
        // POD_NAME, two processes on one host) and both renewed the Lease as its holder.
        let parse = || <Cli as clap::Parser>::try_parse_from(["hap"]).map(|c| c.run);
        let (Ok(a), Ok(b)) = (parse(), parse()) else {
            panic!("default flags parse");
        };
        if a.identity.is_none() {
            assert_ne!(a.identity(), b.identity());
            assert_eq!(a.identity(), a.clone().identity(), "stable for one replica");
        }
        let (c, d) = (RunArgs::for_config("x"), RunArgs::for_config("x"));
        assert_ne!(c.identity(), d.identity());
        let mut named = RunArgs::for_config("x");
        named.identity = Some("hap-operator-7f9c".into());
        assert_eq!(
            named.identity(),
            "hap-operator-7f9c",
            "an explicit one is kept"
        );
    }
}
