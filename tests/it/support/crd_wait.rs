//! Waiting for CRDs to be Established. `kubectl wait --for=condition=Established` fails at once
//! ("status.conditions accessor error: <nil>") instead of waiting when a CRD was created a moment
//! ago and has no conditions yet, which happens whenever tests create CRDs in parallel (seen in
//! `make test`). This polls each named CRD until it is Established or the deadline passes.
//!
//! Self-contained (no `super::` items) so that `private_env.rs` can include it by path.
#![allow(dead_code)]

use std::time::{Duration, Instant};

/// Polls until every CRD in `names` (e.g. `hapconfigs.accountpool.io`) is Established; panics
/// naming the ones that are not after `timeout`. `kubectl` runs kubectl against the cluster and
/// returns (success, stdout, stderr).
pub fn wait_established(
    kubectl: impl Fn(&[&str]) -> (bool, String, String),
    names: &[&str],
    timeout: Duration,
) {
    let deadline = Instant::now() + timeout;
    let mut pending: Vec<&str> = names.to_vec();
    loop {
        pending.retain(|name| {
            let (ok, out, _) = kubectl(&[
                "get",
                "crd",
                name,
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Established\")].status}",
            ]);
            !(ok && out.trim() == "True")
        });
        if pending.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "CRDs not Established after {timeout:?}: {pending:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The CRDs of `crds/` (what `hap crd` prints).
pub const PRODUCT_CRDS: &[&str] = &["hapconfigs.accountpool.io", "accountclaims.accountpool.io"];
