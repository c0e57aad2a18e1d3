//! Shoots as a landscape has them: the labels and annotations a provisioner puts on them (KIM's
//! account, subaccount and runtime keys), a maintenance block, and a status of a few KB —
//! conditions, constraints, `lastOperation`, `lastErrors` on some, the seed and technical IDs —
//! which a Shoot without gardenlet never gets. The operator's watch decodes all of it and keeps
//! only what it needs, so the figures with it show what decoding real objects costs.
//!
//! `HAP_BENCH_LANDSCAPE=0` turns it off (the bare Shoots of earlier records).

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

use super::private_env::env_num;

pub fn on() -> bool {
    env_num("HAP_BENCH_LANDSCAPE", 1) > 0
}

/// Adds a provisioner's labels, annotations and maintenance settings to a Shoot object.
pub fn dress(shoot: &mut Value, i: usize, tenant: &str) {
    let runtime = format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        i,
        i % 65536,
        i % 4096,
        i % 4096,
        i
    );
    shoot["metadata"]["labels"] = json!({
        "account": tenant,
        "subaccount": format!("sa-{i:06}-{tenant}"),
        "kyma-project.io/runtime-id": runtime,
    });
    shoot["metadata"]["annotations"] = json!({
        "infrastructuremanager.kyma-project.io/runtime-id": runtime,
        "infrastructuremanager.kyma-project.io/runtime-generation": "3",
        "infrastructuremanager.kyma-project.io/licence-type": "",
        "gardener.cloud/created-by": "kyma-infrastructure-manager",
        "shoot.gardener.cloud/cloud-config-execution-max-delay-seconds": "300",
    });
    shoot["spec"]["purpose"] = json!("production");
    shoot["spec"]["maintenance"] = json!({
        "autoUpdate": {"kubernetesVersion": true, "machineImageVersion": true},
        "timeWindow": {"begin": "030000+0000", "end": "040000+0000"},
    });
}

fn condition(kind: &str, i: usize) -> Value {
    let healthy = !i.is_multiple_of(17);
    json!({
        "type": kind,
        "status": if healthy { "True" } else { "False" },
        "lastTransitionTime": "2026-11-30T08:14:02Z",
        "lastUpdateTime": "2026-12-05T21:02:47Z",
        "reason": if healthy { format!("{kind}Healthy") } else { format!("{kind}Unhealthy") },
        "message": if healthy {
            format!("All {kind} checks passed; the last probe of the control plane answered within its deadline.")
        } else {
            format!("{kind}: deployment kube-system/metrics-server has 0/2 ready replicas (pod metrics-server-7d9c4c5f8-x2k9q: CrashLoopBackOff, back-off 5m0s restarting failed container)")
        },
        "codes": if healthy { json!([]) } else { json!(["ERR_INFRA_DEPENDENCIES"]) },
    })
}

/// A status of a reconciled Shoot; every 17th one unhealthy with an error, as on a landscape.
pub fn status(i: usize, seed: &str, project: &str, name: &str) -> Value {
    let conditions: Vec<Value> = [
        "APIServerAvailable",
        "ControlPlaneHealthy",
        "ObservabilityComponentsHealthy",
        "EveryNodeReady",
        "SystemComponentsHealthy",
    ]
    .iter()
    .map(|k| condition(k, i))
    .collect();
    let errors = if i.is_multiple_of(17) {
        json!([{
            "description": "task \"Waiting until shoot worker nodes have been reconciled\" failed: Error while waiting for Worker shoot--kyma--c-1234/c-1234 to become ready: machine(s) failed: 1 error occurred: * Cloud provider message - machine codes error: code = [Internal] message = [InsufficientInstanceCapacity: We currently do not have sufficient m6i.large capacity in the Availability Zone you requested]",
            "taskID": "Waiting until shoot worker nodes have been reconciled",
            "codes": ["ERR_INFRA_RESOURCES_DEPLETED"],
            "lastUpdateTime": "2026-12-05T20:41:09Z",
        }])
    } else {
        json!([])
    };
    json!({
        "conditions": conditions,
        "constraints": [
            {"type": "HibernationPossible", "status": "True", "lastTransitionTime": "2026-11-30T08:14:02Z", "lastUpdateTime": "2026-12-05T21:02:47Z", "reason": "NoProblematicWebhooks", "message": "All webhooks are properly configured."},
            {"type": "MaintenancePreconditionsSatisfied", "status": "True", "lastTransitionTime": "2026-11-30T08:14:02Z", "lastUpdateTime": "2026-12-05T21:02:47Z", "reason": "NoProblematicWebhooks", "message": "All webhooks are properly configured."},
        ],
        "gardener": {"id": "gardener-controller-manager-5f7d8b9c6-2xk4l", "name": "gardener-controller-manager-5f7d8b9c6-2xk4l", "version": "v1.141.0"},
        "hibernated": false,
        "lastOperation": {"description": "Shoot cluster has been successfully reconciled.", "lastUpdateTime": "2026-12-05T21:02:47Z", "progress": 100, "state": "Succeeded", "type": "Reconcile"},
        "lastErrors": errors,
        "observedGeneration": 7,
        "seedName": seed,
        "technicalID": format!("shoot--{project}--{name}"),
        "uid": format!("{:08x}-7f3e-4c1a-9b2d-{:012x}", i, i),
        "clusterIdentity": format!("shoot--{project}--{name}-{:08x}-aws-eu", i),
        "advertisedAddresses": [
            {"name": "external", "url": format!("https://api.{name}.{project}.shoot.example.com")},
            {"name": "internal", "url": format!("https://api.{name}.{project}.internal.shoot.example.com")},
        ],
        "networking": {"nodes": ["10.250.0.0/16"], "pods": ["100.64.0.0/12"], "services": ["100.104.0.0/13"]},
    })
}

/// Writes `status` to a Shoot's status subresource.
pub async fn set_status(api: &Api<DynamicObject>, name: &str, status: Value) {
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": status})),
    )
    .await
    .unwrap_or_else(|e| panic!("Shoot {name} status: {e}"));
}
