//! The `hap` binary: the operator (`hap run`) and its tools (`crd`, `validate`, `explain`, `migrate`).

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = hap_operator::cli::Cli::parse();
    hap_operator::cli::dispatch(cli)
}
