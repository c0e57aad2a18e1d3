//! The openmcp ClusterConfig that carries a served Cluster's binding into its Shoot: openmcp's
//! Gardener provider applies the patches of every referenced ClusterConfig, in reference order
//! and after the ProviderConfig's Shoot template, so this patch (referenced last) decides the
//! binding. Gardener forbids both binding names at once, so the other one is removed.

use serde_json::{Value, json};

use super::naming::{
    ANNOTATION_ACCOUNT_CLAIM, LABEL_MANAGED_BY, LABEL_MANAGED_PURPOSE, MANAGED_BY, MANAGED_PURPOSE,
};
use crate::api::BindingKind;
use crate::labels;

/// The `spec.patches` that set the binding of the Shoot.
pub fn binding_patches(binding: &str, kind: BindingKind) -> Value {
    let (set, other) = match kind {
        BindingKind::CredentialsBinding => ("credentialsBindingName", "secretBindingName"),
        BindingKind::SecretBinding => ("secretBindingName", "credentialsBindingName"),
    };
    json!([
        {"op": "remove", "path": format!("/spec/{other}")},
        {"op": "add", "path": format!("/spec/{set}"), "value": binding},
    ])
}

/// What the operator needs to write one ClusterConfig.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterConfigFor<'a> {
    pub name: &'a str,
    pub namespace: &'a str,
    pub binding: &'a str,
    pub binding_kind: BindingKind,
    pub source_id: &'a str,
    /// `<namespace>/<name>` of the AccountClaim.
    pub claim: &'a str,
}

/// The whole object to create.
pub fn cluster_config(c: &ClusterConfigFor<'_>) -> Value {
    json!({
        "apiVersion": "gardener.clusters.openmcp.cloud/v1alpha1",
        "kind": "ClusterConfig",
        "metadata": {
            "name": c.name,
            "namespace": c.namespace,
            "labels": {
                LABEL_MANAGED_BY: MANAGED_BY,
                LABEL_MANAGED_PURPOSE: MANAGED_PURPOSE,
                labels::SOURCE_ID: c.source_id,
            },
            "annotations": {ANNOTATION_ACCOUNT_CLAIM: c.claim},
        },
        "spec": {
            "patchOptions": {"ignoreMissingOnRemove": true, "createMissingOnAdd": true},
            "patches": binding_patches(c.binding, c.binding_kind),
        },
    })
}

/// Whether an existing ClusterConfig still sets exactly this binding (someone may have edited
/// it; the operator owns it and puts it back).
pub fn sets_binding(existing: &Value, binding: &str, kind: BindingKind) -> bool {
    existing.pointer("/spec/patches") == Some(&binding_patches(binding, kind))
        && existing.pointer("/spec/patchOptions/ignoreMissingOnRemove") == Some(&json!(true))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_patch_sets_one_binding_name_and_removes_the_other() {
        let c = ClusterConfigFor {
            name: "c--hap",
            namespace: "p",
            binding: "aws-01",
            binding_kind: BindingKind::CredentialsBinding,
            source_id: "mcp",
            claim: "hap-system/cluster.p.c",
        };
        let obj = cluster_config(&c);
        assert_eq!(
            obj.pointer("/spec/patches/1"),
            Some(&json!({"op": "add", "path": "/spec/credentialsBindingName", "value": "aws-01"}))
        );
        assert_eq!(
            obj.pointer("/spec/patches/0/path"),
            Some(&json!("/spec/secretBindingName"))
        );
        assert!(sets_binding(
            &obj,
            "aws-01",
            BindingKind::CredentialsBinding
        ));
        assert!(!sets_binding(
            &obj,
            "aws-02",
            BindingKind::CredentialsBinding
        ));
        assert!(!sets_binding(&obj, "aws-01", BindingKind::SecretBinding));
    }
}
