//! The `hap` binary: the operator (`hap run`) and its tools (`crd`, `validate`, `explain`, `migrate`).

use std::process::ExitCode;

use clap::Parser;

// musl's malloc serializes allocations on one lock and returns freed memory eagerly; in the
// static build of the image it cost a third more CPU than glibc's (BENCHMARKS.md, Take-over).
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = hap_operator::cli::Cli::parse();
    hap_operator::cli::dispatch(cli)
}
