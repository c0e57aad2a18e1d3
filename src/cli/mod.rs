//! Command-line surface of the `hap` binary: argument parsing and dispatch to the subcommands.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub mod bindings;
pub mod claims;
pub mod explain;
pub mod migrate;
pub mod pools;
pub mod report;
pub mod run;
pub mod serving;
pub mod validate;

/// hap — Hyperscaler Account Pool operator and tools.
#[derive(Parser, Debug)]
#[command(name = "hap", version, about, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the operator.
    Run(Box<crate::controller::RunArgs>),
    /// Print the CustomResourceDefinitions (what `crds/` holds).
    Crd,
    /// Check rules: every error at once, with entry, index and column.
    Validate(validate::Args),
    /// Show which rule a request matches, its pool and selectors.
    Explain(explain::Args),
    /// Turn KEB Helm values or the legacy properties into a HapConfig manifest.
    Migrate(migrate::Args),
    /// Show every pool of the live cluster with its free, claimed and dirty bindings.
    Pools(pools::Args),
    /// List AccountClaims with their binding and the request source each came from.
    Claims(claims::Args),
    /// One line per binding: pool, lifecycle state, tenant, clusters, credentials, since, reason.
    Bindings(bindings::Args),
}

/// kubectl's flags naming the cluster: the kubeconfig file and its context.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct KubeFlags {
    /// Path to the kubeconfig file, as kubectl's (default: KUBECONFIG, else ~/.kube/config, else
    /// the in-cluster config).
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<std::path::PathBuf>,
    /// The kubeconfig context to use, as kubectl's (default: the current context).
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
}

impl KubeFlags {
    /// The clusters to read: these flags', with the garden's kubeconfig when it is another.
    pub fn target(&self, garden: Option<&std::path::Path>) -> crate::k8s::live::Target {
        crate::k8s::live::Target {
            kubeconfig: self.kubeconfig.clone(),
            context: self.context.clone(),
            garden: garden.map(std::path::Path::to_path_buf),
        }
    }
}

/// `--watch-interval`: a duration such as `2s` or `1m`.
pub(crate) fn interval(text: &str) -> Result<std::time::Duration, String> {
    match crate::duration::parse(text) {
        Ok(d) if !d.is_zero() => Ok(d),
        Ok(_) => Err("must be longer than zero".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// Runs the chosen subcommand and maps its outcome to the process exit code.
pub fn dispatch(cli: Cli) -> ExitCode {
    match cli.command {
        Command::Crd => match crate::crd::render_yaml() {
            Ok(yaml) => {
                print!("{yaml}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("hap crd: cannot render the CRDs: {e}");
                ExitCode::from(1)
            }
        },
        Command::Run(args) => run::run(*args),
        Command::Validate(args) => validate::run(args),
        Command::Explain(args) => explain::run(args),
        Command::Migrate(args) => migrate::run(args),
        Command::Pools(args) => pools::run(args),
        Command::Claims(args) => claims::run(args),
        Command::Bindings(args) => bindings::run(args),
    }
}
