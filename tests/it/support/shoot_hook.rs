//! The Shoot request source of the webhook tests, set up once: the binding namespace scoped to
//! one test, the operator started with its webhook and the Shoot webhook registered where
//! Shoots live (the test control plane or the separate garden), request Shoots that name no
//! binding, and the refusal a create gets.

use std::path::PathBuf;

use kube::api::DynamicObject;
use serde_json::{Value, json};

use super::garden::{BindingRef, profile, shoot_object};
use super::platform::{Certs, SCOPE_LABEL, WebhookRegistration, kubectl_at};
use super::{Hap, Operator};

/// The label that makes a Shoot a request of the test's source.
pub const REQUEST: &str = "accountpool.io/request";

/// `spec.requestSources` with one Shoot source for the Shoots labelled for `scope`.
pub fn shoot_source(scope: &str) -> Value {
    json!([{"id": "shoots", "kind": "Shoot", "matchLabels": {REQUEST: "true", SCOPE_LABEL: scope}}])
}

/// The labels of a request Shoot of tenant `ga` (plan aws, platform region cf-us10).
pub fn request_labels(scope: &str, ga: &str) -> Value {
    json!({REQUEST: "true", SCOPE_LABEL: scope,
        "accountpool.io/plan": "aws", "accountpool.io/platform-region": "cf-us10",
        "accountpool.io/global-account": ga})
}

/// Where Shoots live: the separate garden's kubeconfig, else the test control plane's.
pub fn garden_kubeconfig(hap: &Hap) -> PathBuf {
    hap.garden_kubeconfig
        .clone()
        .unwrap_or_else(super::kubeconfig)
}

/// Labels the binding namespace with `scope`, so that only this test's webhook is called for it.
pub fn scope_bindings_namespace(hap: &Hap, scope: &str) {
    let (ok, _, err) = kubectl_at(
        &garden_kubeconfig(hap),
        &[
            "label",
            "namespace",
            &hap.bindings_ns,
            &format!("{SCOPE_LABEL}={scope}"),
        ],
        None,
    );
    assert!(ok, "{err}");
}

/// The operator's webhook serving Shoots: its certificates and address (to register more kinds)
/// and the Shoot registration, removed when dropped.
pub struct ServedShoots {
    pub certs: Certs,
    /// `host:port` of the webhook.
    pub addr: String,
    pub shoots: WebhookRegistration,
}

impl ServedShoots {
    /// Registers the webhook for `kind` (in the test control plane) at `path`, for `scope`.
    pub fn register(
        &self,
        kind: &str,
        path: &str,
        scope: &str,
        selector: Value,
    ) -> WebhookRegistration {
        WebhookRegistration::register(
            kind,
            &format!("https://{}{path}", self.addr),
            &self.certs.ca_bundle(),
            scope,
            selector,
        )
    }
}

/// Scopes the binding namespace, starts the operator of `hap` with its webhook and registers the
/// Shoot webhook (for Shoots labelled `accountpool.io/request=true`) where Shoots live.
pub async fn serve_shoots(hap: &mut Hap, scope: &str) -> ServedShoots {
    scope_bindings_namespace(hap, scope);
    let certs = Certs::new();
    let op = Operator::start_with(&hap.client, certs.args(hap.run_args())).await;
    let addr = op.handle.webhook.get().expect("webhook").to_string();
    hap.operator = Some(op);
    let shoots = WebhookRegistration::register_in(
        &garden_kubeconfig(hap),
        "Shoot",
        &format!("https://{addr}/mutate/shoots"),
        &certs.ca_bundle(),
        scope,
        json!({"matchLabels": {REQUEST: "true"}}),
    );
    ServedShoots {
        certs,
        addr,
        shoots,
    }
}

/// A Shoot in the binding namespace with `labels`, naming `binding` (a CredentialsBinding), or no
/// binding at all: a request the webhook is to serve.
pub async fn request_shoot(
    hap: &Hap,
    name: &str,
    binding: Option<&str>,
    labels: Value,
) -> DynamicObject {
    let p = profile(&hap.garden, "aws").await;
    let mut obj = shoot_object(
        &hap.bindings_ns,
        name,
        binding.unwrap_or_default(),
        BindingRef::CredentialsBinding,
        &p,
    );
    if binding.is_none() {
        obj["spec"]
            .as_object_mut()
            .expect("spec")
            .remove("credentialsBindingName");
    }
    obj["metadata"]["labels"] = labels;
    serde_json::from_value(obj).expect("shoot")
}

/// The refusal of a create by the webhook: 403 with `reason`; its message.
pub fn refused(result: Result<DynamicObject, kube::Error>, reason: &str) -> String {
    match result {
        Err(kube::Error::Api(s)) => {
            // 403, not 503: client libraries retry a 503 by themselves for minutes.
            assert_eq!((s.code, s.reason.as_str()), (403, reason), "{s:?}");
            s.message
        }
        other => panic!("expected a refusal `{reason}`, got {other:?}"),
    }
}
