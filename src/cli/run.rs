//! `hap run`: logging, the Kubernetes client, signal handling, then the operator.

use std::process::ExitCode;

use crate::controller::{self, LogFormat, RunArgs};

/// Runs the operator until SIGTERM/SIGINT; exit code 1 on a fatal error (including a lost
/// leader lease, so that the pod restarts as a standby).
pub fn run(args: RunArgs) -> ExitCode {
    init_tracing(args.log_format);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(usize::from(args.worker_threads))
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("hap run: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    // The operator runs as a task of the runtime rather than in `block_on`: a future driven by
    // `block_on` stays on the main thread, so every event the controllers wait for crossed
    // threads (a wake-up and a context switch each; ~25 % of the CPU per claim in `perf`).
    let operator = async move {
        let own = match crate::k8s::clients::own(args.api_limits()).await {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(error = %e, "cannot build a Kubernetes client (in-cluster config or KUBECONFIG)");
                return ExitCode::from(1);
            }
        };
        let handle = controller::Handle {
            ready: Default::default(),
            metrics: std::sync::Arc::new(crate::metrics::Metrics::with_keb_names(args.keb_metrics)),
            webhook: Default::default(),
            metrics_addr: Default::default(),
        };
        let webhook = handle.webhook.clone();
        let result = controller::run_with(own, args, handle, shutdown_signal()).await;
        // The controllers and the Lease are handed over; the webhook drains last, so that
        // object creations arriving while the pod leaves the Service are still answered.
        webhook.stop_and_drain().await;
        match result {
            Ok(()) => {
                tracing::info!("stopped");
                ExitCode::SUCCESS
            }
            Err(e) => {
                tracing::error!(error = %e, cause = ?std::error::Error::source(&e).map(ToString::to_string), "operator stopped");
                ExitCode::from(1)
            }
        }
    };
    runtime.block_on(async move {
        match tokio::spawn(operator).await {
            Ok(code) => code,
            Err(e) => {
                tracing::error!(error = %e, "the operator task ended abnormally");
                ExitCode::from(1)
            }
        }
    })
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {},
            _ = term.recv() => {},
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
    tracing::info!("shutdown signal received; draining");
}

fn init_tracing(format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,kube=warn,hap_operator=info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    let _ = match format {
        LogFormat::Json => builder
            .fmt_fields(tracing_subscriber::fmt::format::JsonFields::new())
            .event_format(crate::logs::GardenerJson)
            .try_init(),
        LogFormat::Text => builder.try_init(),
    };
}
