//! The CLI's reads of a live cluster (`hap pools`, `hap validate --live`, `hap explain --live`),
//! here in `k8s` because only `k8s` talks to an API server (`cli::live` names this module). It
//! lists once, turns what it read into the plain views the pure core takes (`HapConfigSpec`,
//! label maps, `pools::*View`), and decides nothing itself.
//!
//! It reads the HapConfig, bindings (their labels and the kind of their credentials reference,
//! never the credentials), Shoots, Runtimes and AccountClaims, and never Secrets; it writes nothing. The client comes from `KUBECONFIG`
//! or the in-cluster config, as kubectl's does, so `kubectl hap ...` talks to kubectl's cluster;
//! bindings and Shoots are read from the garden (`--garden-kubeconfig`) when that is another one.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::Path;

use kube::api::{Api, DynamicObject, ListParams};
use kube::{Client, ResourceExt};

use super::clients::ApiLimits;
use super::writes::binding_resource;
use crate::api::{
    AccountClaim, BindingKind, CredentialsKind, HapConfig, HapConfigSpec, Shoot, SourceKind,
};
use crate::labels::ResolvedLabelKeys;
use crate::pools::{
    BindingView, ClaimView, Inventory, ShootView, binding_view, claim_view, shoot_view,
};
use crate::rules::CompiledRules;
use crate::status::observe::{Observed, from_claim, from_object};

/// The HapConfig read when `--config` is not given: the operator's default `--config-name`.
pub const DEFAULT_CONFIG: &str = "default";

/// Why the live cluster could not be read.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    #[error("cannot start the async runtime")]
    Runtime(#[source] std::io::Error),
    #[error("cannot build a Kubernetes client from KUBECONFIG or the in-cluster config")]
    Client(#[source] kube::Error),
    #[error("cannot build the garden client")]
    Garden(#[source] crate::k8s::ClientError),
    #[error(
        "HapConfig `{0}` does not exist in this cluster (name it with --config; `kubectl get hapconfig` lists them)"
    )]
    ConfigNotFound(String),
    #[error("cannot {action}")]
    Api {
        action: String,
        #[source]
        source: kube::Error,
    },
}

impl LiveError {
    /// The error with its causes, on one line, for the terminal.
    pub fn report(&self) -> String {
        let mut out = self.to_string();
        let mut cause = std::error::Error::source(self);
        while let Some(c) = cause {
            out.push_str(": ");
            out.push_str(&c.to_string());
            cause = c.source();
        }
        out
    }
}

fn api_error(action: impl Into<String>) -> impl FnOnce(kube::Error) -> LiveError {
    let action = action.into();
    move |source| LiveError::Api { action, source }
}

/// The operator's cluster (HapConfig, AccountClaims) and the garden (bindings, Shoots).
struct Clients {
    own: Client,
    garden: Client,
}

/// Runs one CLI request against the clusters on a small runtime of its own.
fn block_on<T, F>(garden: Option<&Path>, f: impl FnOnce(Clients) -> F) -> Result<T, LiveError>
where
    F: Future<Output = Result<T, LiveError>>,
{
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(LiveError::Runtime)?;
    runtime.block_on(async move {
        let own = Client::try_default().await.map_err(LiveError::Client)?;
        let garden = crate::k8s::clients::garden(&own.clone().into(), garden, ApiLimits::UNLIMITED)
            .await
            .map_err(LiveError::Garden)?;
        let garden = garden.kube().clone();
        f(Clients { own, garden }).await
    })
}

async fn get_config(client: &Client, name: &str) -> Result<HapConfig, LiveError> {
    Api::<HapConfig>::all(client.clone())
        .get_opt(name)
        .await
        .map_err(api_error(format!("read HapConfig {name}")))?
        .ok_or_else(|| LiveError::ConfigNotFound(name.to_string()))
}

/// The spec whose rules are in force, as the operator decides it: the current generation when
/// its rules are valid, else the last valid one the operator recorded in `status.activeSpec`
/// (last-known-good). `note` says when the second applies.
pub struct InForce {
    pub spec: HapConfigSpec,
    pub note: Option<String>,
}

pub fn in_force(cfg: &HapConfig) -> InForce {
    let current = || InForce {
        spec: cfg.spec.clone(),
        note: None,
    };
    if CompiledRules::from_spec(&cfg.spec).is_ok() {
        return current();
    }
    let status = cfg.status.as_ref();
    match status.and_then(|s| s.active_spec.as_deref()) {
        Some(active) => InForce {
            spec: active.clone(),
            note: Some(format!(
                "HapConfig {} generation {} is invalid; using generation {}, which the operator keeps in force",
                cfg.name_any(),
                cfg.metadata.generation.unwrap_or(0),
                status
                    .and_then(|s| s.active_generation)
                    .map_or_else(|| "?".into(), |g| g.to_string()),
            )),
        },
        None => current(),
    }
}

/// The labels and credential kind of every binding in the namespace and kind the spec names
/// (the bindings themselves; what they reference is never read).
async fn binding_views(
    client: &Client,
    spec: &HapConfigSpec,
) -> Result<Vec<BindingView>, LiveError> {
    let kind = spec.binding_kind.unwrap_or_default();
    let ns = &spec.binding_namespace;
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &binding_resource(kind));
    let list = api
        .list(&ListParams::default())
        .await
        .map_err(api_error(format!("list {}s in {ns}", kind.gvk().2)))?;
    Ok(list
        .items
        .into_iter()
        .map(|b| binding_view(&b, CredentialsKind::of_binding(&b.data)))
        .collect())
}

/// `hap validate --live`: the current generation's spec (what was applied, valid or not) and the
/// labels of the bindings its rules need pools in.
pub fn validate_input(
    config: &str,
    garden: Option<&Path>,
) -> Result<(HapConfigSpec, Vec<BTreeMap<String, String>>), LiveError> {
    block_on(garden, |c| async move {
        let cfg = get_config(&c.own, config).await?;
        let bindings = binding_views(&c.garden, &cfg.spec).await?;
        Ok((
            cfg.spec,
            bindings
                .into_iter()
                .map(|b| {
                    b.labels
                        .iter()
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect()
                })
                .collect(),
        ))
    })
}

/// Everything `hap pools` counts (and `hap explain --live` decides on), read once.
pub struct PoolsInput {
    pub config: String,
    /// The spec in force (last-known-good included).
    pub spec: HapConfigSpec,
    pub note: Option<String>,
    pub binding_namespace: String,
    pub binding_kind: BindingKind,
    pub shoot_namespace: String,
    pub keys: ResolvedLabelKeys,
    pub bindings: Vec<BindingView>,
    pub claims: Vec<ClaimView>,
    pub shoots: Vec<ShootView>,
}

impl PoolsInput {
    /// The index the operator would keep of what was read: claims count only for the binding
    /// namespace in force (a claim bound to a binding of the same name in another namespace runs
    /// in another account), as in the operator.
    pub fn inventory(&self) -> Inventory {
        let mut inv = Inventory::new(self.keys.clone());
        inv.set_namespace(Some(self.binding_namespace.clone()));
        for b in &self.bindings {
            inv.apply_binding(b.clone());
        }
        for c in &self.claims {
            inv.apply_claim(c.clone());
        }
        for s in &self.shoots {
            inv.apply_shoot(s.clone());
        }
        inv
    }
}

/// `hap pools`: the bindings, Shoots and claims of the pools the HapConfig in force describes.
pub fn pools_input(config: &str, garden: Option<&Path>) -> Result<PoolsInput, LiveError> {
    block_on(garden, |c| async move {
        let (client, garden) = (c.own, c.garden);
        let cfg = get_config(&client, config).await?;
        let InForce { spec, note } = in_force(&cfg);
        let bindings = binding_views(&garden, &spec).await?;
        let shoot_namespace = spec
            .shoot_namespace
            .clone()
            .unwrap_or_else(|| spec.binding_namespace.clone());
        let shoots = Api::<Shoot>::namespaced(garden.clone(), &shoot_namespace)
            .list(&ListParams::default())
            .await
            .map_err(api_error(format!("list Shoots in {shoot_namespace}")))?;
        let claims = Api::<AccountClaim>::all(client.clone())
            .list(&ListParams::default())
            .await
            .map_err(api_error("list AccountClaims"))?;
        Ok(PoolsInput {
            config: config.to_string(),
            note,
            binding_kind: spec.binding_kind.unwrap_or_default(),
            keys: ResolvedLabelKeys::from_spec(spec.label_keys.as_ref()),
            bindings,
            claims: claims.items.iter().map(claim_view).collect(),
            shoots: shoots.items.iter().map(shoot_view).collect(),
            binding_namespace: spec.binding_namespace.clone(),
            shoot_namespace,
            spec,
        })
    })
}

/// `hap migrate --report`: what `hap pools` reads, and every request of the landscape: the
/// Runtimes in `runtime_namespace` (none when the Runtime CRD is not installed), the Shoots of
/// the config's Shoot namespace and every AccountClaim. Reads only.
pub fn report_input(
    config: &str,
    garden: Option<&Path>,
    runtime_namespace: &str,
) -> Result<(PoolsInput, Vec<Observed>, Option<String>), LiveError> {
    let input = pools_input(config, garden)?;
    let (shoot_ns, rt_ns) = (input.shoot_namespace.clone(), runtime_namespace.to_string());
    let claims = claims(None)?;
    let (mut requests, note) = block_on(garden, |c| async move {
        let list = |client: Client, ns: String, kind: SourceKind| async move {
            Api::<DynamicObject>::namespaced_with(client, &ns, &kind.resource())
                .list(&ListParams::default())
                .await
        };
        let shoots = list(c.garden, shoot_ns.clone(), SourceKind::Shoot)
            .await
            .map_err(api_error(format!("list Shoots in {shoot_ns}")))?;
        let mut out: Vec<Observed> = shoots
            .items
            .iter()
            .filter_map(|o| serde_json::to_value(o).ok())
            .map(|v| from_object(SourceKind::Shoot, &v))
            .collect();
        let note = match list(c.own, rt_ns.clone(), SourceKind::Runtime).await {
            Ok(rts) => {
                out.extend(
                    rts.items
                        .iter()
                        .filter_map(|o| serde_json::to_value(o).ok())
                        .map(|v| from_object(SourceKind::Runtime, &v)),
                );
                None
            }
            Err(kube::Error::Api(e)) if e.code == 404 => Some(format!(
                "no Runtimes read: the Runtime CRD is not installed in this cluster ({})",
                e.message
            )),
            Err(e) => return Err(api_error(format!("list Runtimes in {rt_ns}"))(e)),
        };
        Ok((out, note))
    })?;
    // A claim recorded in another binding namespace runs in an account of another config.
    let here = |c: &&AccountClaim| {
        c.status
            .as_ref()
            .and_then(|s| s.binding_namespace.as_deref())
            .is_none_or(|ns| ns == input.binding_namespace)
    };
    requests.extend(claims.iter().filter(here).map(from_claim));
    Ok((input, requests, note))
}

/// Every AccountClaim in `namespace` (all namespaces when `None`), read once, with annotations
/// (the source annotation names objects whose names are too long for a label).
pub fn claims(namespace: Option<&str>) -> Result<Vec<AccountClaim>, LiveError> {
    block_on(None, |c| async move {
        let api: Api<AccountClaim> = match namespace {
            Some(ns) => Api::namespaced(c.own.clone(), ns),
            None => Api::all(c.own.clone()),
        };
        api.list(&ListParams::default())
            .await
            .map(|l| l.items)
            .map_err(api_error("list AccountClaims"))
    })
}

#[cfg(test)]
mod tests {
    //! The pure parts: which spec is in force, and which claims count.

    use serde_json::json;

    use super::*;

    fn config(rules: &[&str], status: serde_json::Value) -> HapConfig {
        serde_json::from_value(json!({
            "apiVersion": "accountpool.io/v1alpha1",
            "kind": "HapConfig",
            "metadata": {"name": "default", "generation": 3},
            "spec": {"bindingNamespace": "garden-now", "rules": rules},
            "status": status,
        }))
        .expect("HapConfig")
    }

    #[test]
    fn a_valid_current_generation_is_in_force() {
        let cfg = config(
            &["aws"],
            json!({"activeGeneration": 2, "activeSpec": {"bindingNamespace": "garden-old", "rules": ["gcp"]}}),
        );
        let f = in_force(&cfg);
        assert_eq!(f.spec.binding_namespace, "garden-now");
        assert!(f.note.is_none());
    }

    #[test]
    fn an_invalid_current_generation_falls_back_to_the_active_spec() {
        let cfg = config(
            &["aws(PR=)"],
            json!({"activeGeneration": 2, "activeSpec": {"bindingNamespace": "garden-old", "rules": ["gcp"]}}),
        );
        let f = in_force(&cfg);
        assert_eq!(f.spec.binding_namespace, "garden-old");
        let note = f.note.expect("note");
        assert!(
            note.contains("generation 3") && note.contains("generation 2"),
            "{note}"
        );
    }

    #[test]
    fn an_invalid_config_without_an_active_spec_stays_as_applied() {
        let f = in_force(&config(&["aws(PR=)"], json!({})));
        assert_eq!(f.spec.rules, Some(vec!["aws(PR=)".to_string()]));
        assert!(f.note.is_none());
    }

    fn claim(phase: &str, ns: Option<&str>, deleting: bool) -> AccountClaim {
        let mut meta = json!({"name": "c", "namespace": "claims", "uid": "u1"});
        if deleting {
            meta["deletionTimestamp"] = json!("2025-01-01T00:00:00Z");
        }
        serde_json::from_value(json!({
            "apiVersion": "accountpool.io/v1alpha1",
            "kind": "AccountClaim",
            "metadata": meta,
            "spec": {"globalAccount": "ga", "plan": "aws"},
            "status": {"phase": phase, "credentialsBindingName": "b1", "bindingNamespace": ns},
        }))
        .expect("AccountClaim")
    }

    #[test]
    fn only_claims_bound_in_this_binding_namespace_count() {
        // One definition of where a claim's binding lives: the shared claim view, counted by an
        // index that knows the binding namespace in force.
        let count = |c: AccountClaim| {
            let mut inv = crate::pools::Inventory::default();
            inv.set_namespace(Some("garden".into()));
            inv.apply_claim(claim_view(&c));
            inv.clusters_on("b1").len()
        };
        assert_eq!(count(claim("Bound", Some("garden"), false)), 1);
        assert_eq!(
            count(claim("Bound", None, false)),
            1,
            "no namespace: the one in force"
        );
        assert_eq!(count(claim("Bound", Some("garden-other"), false)), 0);
        assert_eq!(
            count(claim("Failed", Some("garden"), false)),
            0,
            "a lost binding is not a cluster"
        );
        assert_eq!(
            count(claim("Bound", Some("garden"), true)),
            0,
            "a deleting claim no longer counts"
        );
        assert_eq!(
            claim_view(&claim("Failed", Some("garden"), false))
                .bound_binding
                .as_deref(),
            Some("b1")
        );
    }
}
