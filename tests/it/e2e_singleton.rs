//! End-to-end (real kube-apiserver): only the HapConfig named by `--config-name` is in force;
//! the operator marks every other one Ignored. In a binary of its own, because an operator that
//! marks others Ignored would touch the HapConfigs of tests running beside it.

use crate::support;

use serde_json::json;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_configs_are_marked_ignored() {
    let hap = Hap::without_operator(&["aws"], json!({})).await;
    let mut args = hap.run_args();
    args.mark_ignored_configs = true;
    // A second HapConfig the operator is not configured for.
    let other = Hap {
        client: hap.client.clone(),
        garden: hap.garden.clone(),
        garden_kubeconfig: hap.garden_kubeconfig.clone(),
        config: unique("other"),
        bindings_ns: hap.bindings_ns.clone(),
        claims_ns: hap.claims_ns.clone(),
        operator: None,
    };
    other.apply_config(&["aws"], json!({})).await;
    let op = Operator::start_with(&hap.client, args).await;
    let ignored = other.config_condition("Ready", "False").await;
    assert_eq!(ignored.reason, "Ignored");
    assert!(ignored.message.contains(&hap.config));
    hap.config_condition("Ready", "True").await;
    op.stop().await;
    let (ok, _, _) = kubectl(&["delete", "hapconfig", &other.config, "--wait=false"]);
    assert!(ok);
}
