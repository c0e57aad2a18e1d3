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
use std::path::PathBuf;

use kube::api::{Api, DynamicObject, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config, ResourceExt};

use super::clients::ApiLimits;
use super::writes::binding_resource;
use crate::api::{
    AccountClaim, BindingKind, CredentialsKind, HapConfig, HapConfigSpec, Shoot, SourceKind,
};
use crate::labels::ResolvedLabelKeys;
use crate::pools::{
    BindingView, ClaimView, Inventory, OtherBinding, ShootView, binding_view, claim_view,
    shoot_view,
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
    #[error("cannot load the kubeconfig{}", describe_target(.0))]
    Kubeconfig(Target, #[source] kube::config::KubeconfigError),
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

fn describe_target(t: &Target) -> String {
    let mut parts = Vec::new();
    if let Some(p) = &t.kubeconfig {
        parts.push(format!("--kubeconfig {}", p.display()));
    }
    if let Some(c) = &t.context {
        parts.push(format!("--context {c}"));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!(" ({})", parts.join(", "))
    }
}

/// Which clusters a CLI request reads, as kubectl's `--kubeconfig` and `--context` name them
/// (both unset: `KUBECONFIG` or the in-cluster config, as kubectl), and the garden's kubeconfig
/// when bindings and Shoots live elsewhere.
#[derive(Clone, Debug, Default)]
pub struct Target {
    pub kubeconfig: Option<PathBuf>,
    pub context: Option<String>,
    pub garden: Option<PathBuf>,
}

impl Target {
    /// The kubeconfig as this target reads it: the `--kubeconfig` file, else `KUBECONFIG`'s
    /// files merged (or `~/.kube/config`), as kubectl reads them.
    fn kubeconfig_file(&self) -> Result<Kubeconfig, kube::config::KubeconfigError> {
        match &self.kubeconfig {
            Some(p) => Kubeconfig::read_from(p),
            None => Kubeconfig::read(),
        }
    }

    /// The namespace of the context this target uses (`--context`, else the current one), as
    /// kubectl defaults `-n`.
    pub fn namespace(&self) -> Option<String> {
        let k = self.kubeconfig_file().ok()?;
        let name = self.context.clone().or_else(|| k.current_context.clone())?;
        k.contexts
            .iter()
            .find(|c| c.name == name)
            .and_then(|c| c.context.as_ref()?.namespace.clone())
    }

    async fn client(&self) -> Result<Client, LiveError> {
        if self.kubeconfig.is_none() && self.context.is_none() {
            return Client::try_default().await.map_err(LiveError::Client);
        }
        let options = KubeConfigOptions {
            context: self.context.clone(),
            ..KubeConfigOptions::default()
        };
        let fail = |e| LiveError::Kubeconfig(self.clone(), e);
        let file = self.kubeconfig_file().map_err(fail)?;
        let config = Config::from_custom_kubeconfig(file, &options)
            .await
            .map_err(fail)?;
        Client::try_from(config).map_err(LiveError::Client)
    }
}

fn api_error(action: impl Into<String>) -> impl FnOnce(kube::Error) -> LiveError {
    let action = action.into();
    move |source| LiveError::Api { action, source }
}

/// The operator's cluster (HapConfig, AccountClaims) and the garden (bindings, Shoots).
#[derive(Clone)]
struct Clients {
    own: Client,
    garden: Client,
}

/// Runs one CLI request against the clusters on a small runtime of its own.
fn block_on<T, F>(target: &Target, f: impl FnOnce(Clients) -> F) -> Result<T, LiveError>
where
    F: Future<Output = Result<T, LiveError>>,
{
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(LiveError::Runtime)?;
    runtime.block_on(async move { f(connect(target).await?).await })
}

async fn connect(target: &Target) -> Result<Clients, LiveError> {
    let own = target.client().await?;
    let garden = crate::k8s::clients::garden(
        &own.clone().into(),
        target.garden.as_deref(),
        ApiLimits::UNLIMITED,
    )
    .await
    .map_err(LiveError::Garden)?;
    let garden = garden.kube().clone();
    Ok(Clients { own, garden })
}

/// Reads with `read` and hands each result to `emit`; with `every`, again and again at that
/// interval until `emit` returns false or a read fails (`--watch`: the caller prints what
/// changed). Lists, not watches: a terminal's view needs the whole set each time, and one list
/// of each kind every few seconds is what kubectl's own polling costs.
fn repeat<T, F>(
    target: &Target,
    every: Option<std::time::Duration>,
    read: impl Fn(Clients) -> F,
    mut emit: impl FnMut(T) -> bool,
) -> Result<(), LiveError>
where
    F: Future<Output = Result<T, LiveError>>,
{
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(LiveError::Runtime)?;
    runtime.block_on(async move {
        let clients = connect(target).await?;
        loop {
            let again = emit(read(clients.clone()).await?);
            match every {
                Some(d) if again => tokio::time::sleep(d).await,
                _ => return Ok(()),
            }
        }
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
    Ok(binding_objects(client, spec, None)
        .await?
        .iter()
        .map(view_of)
        .collect())
}

/// The view of a binding as the operator's index keeps it, with the account its reference names
/// (the object's own namespace for a `secretRef` without one), so the CLI counts accounts as the
/// operator does.
fn view_of(b: &DynamicObject) -> BindingView {
    let account = crate::pools::Account::of_fields(&b.data, b.metadata.namespace.as_deref());
    binding_view(b, CredentialsKind::of_binding(&b.data)).with_account(account)
}

/// The bindings themselves, those `selector` selects (a label selector, as kubectl's `-l`).
async fn binding_objects(
    client: &Client,
    spec: &HapConfigSpec,
    selector: Option<&str>,
) -> Result<Vec<DynamicObject>, LiveError> {
    let kind = spec.binding_kind.unwrap_or_default();
    let ns = &spec.binding_namespace;
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &binding_resource(kind));
    let mut params = ListParams::default();
    if let Some(s) = selector {
        params = params.labels(s);
    }
    Ok(api
        .list(&params)
        .await
        .map_err(api_error(format!("list {}s in {ns}", kind.gvk().2)))?
        .items)
}

/// The bindings of the kind the pools are not made of, as the operator's second binding watch
/// keeps them: the name and the account each references.
async fn other_bindings(
    client: &Client,
    spec: &HapConfigSpec,
) -> Result<Vec<(String, OtherBinding)>, LiveError> {
    let kind = match spec.binding_kind.unwrap_or_default() {
        BindingKind::CredentialsBinding => BindingKind::SecretBinding,
        BindingKind::SecretBinding => BindingKind::CredentialsBinding,
    };
    let ns = &spec.binding_namespace;
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &binding_resource(kind));
    let list = api
        .list(&ListParams::default())
        .await
        .map_err(api_error(format!("list {}s in {ns}", kind.gvk().2)))?;
    Ok(list
        .items
        .iter()
        .map(|b| {
            let other = OtherBinding {
                resource_version: b.resource_version(),
                account: view_of(b).account,
            };
            (b.name_any(), other)
        })
        .collect())
}

/// `hap validate --live`: the current generation's spec (what was applied, valid or not) and the
/// labels of the bindings its rules need pools in.
pub fn validate_input(
    config: &str,
    target: &Target,
) -> Result<(HapConfigSpec, Vec<BTreeMap<String, String>>), LiveError> {
    block_on(target, |c| async move {
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
    /// The bindings of the other kind (`Inventory::apply_other_binding`).
    pub others: Vec<(String, OtherBinding)>,
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
        inv.set_binding_kind(self.binding_kind);
        for b in &self.bindings {
            inv.apply_binding(b.clone());
        }
        for (name, o) in &self.others {
            inv.apply_other_binding(name, o.clone());
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
pub fn pools_input(config: &str, target: &Target) -> Result<PoolsInput, LiveError> {
    block_on(target, |c| async move {
        Ok(read_pools(c, config, None).await?.pools)
    })
}

/// `hap migrate --report`: what `hap pools` reads, and every request of the landscape: the
/// Runtimes in `runtime_namespace` (none when the Runtime CRD is not installed), the Shoots of
/// the config's Shoot namespace and the AccountClaims in `claim_namespace` (every namespace when
/// `None`), as the operator reads them with its `--claim-namespace`. Reads only.
pub fn report_input(
    config: &str,
    target: &Target,
    runtime_namespace: &str,
    claim_namespace: Option<&str>,
) -> Result<(PoolsInput, Vec<Observed>, Option<String>), LiveError> {
    let input = pools_input(config, target)?;
    let (shoot_ns, rt_ns) = (input.shoot_namespace.clone(), runtime_namespace.to_string());
    let mut all_claims = Vec::new();
    claims(claim_namespace, target, None, |l| {
        all_claims = l;
        false
    })?;
    let (mut requests, note) = block_on(target, |c| async move {
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
    requests.extend(all_claims.iter().filter(here).map(from_claim));
    Ok((input, requests, note))
}

/// What `hap bindings` shows besides the pools' input: when each binding was created, and
/// when the oldest claim still holding it was made.
pub struct BindingsInput {
    pub pools: PoolsInput,
    pub created: BTreeMap<String, jiff::Timestamp>,
    pub claimed_at: BTreeMap<String, jiff::Timestamp>,
}

/// `hap bindings`: the pools' input with the bindings `selector` selects (all when `None`),
/// read once, or again every `every` (`--watch`) until `emit` returns false.
pub fn bindings(
    config: &str,
    selector: Option<&str>,
    target: &Target,
    every: Option<std::time::Duration>,
    emit: impl FnMut(BindingsInput) -> bool,
) -> Result<(), LiveError> {
    repeat(target, every, |c| read_pools(c, config, selector), emit)
}

fn created(meta: &kube::api::ObjectMeta) -> Option<jiff::Timestamp> {
    meta.creation_timestamp.as_ref().map(|t| t.0)
}

/// One list of each kind, with the times `hap bindings` shows.
async fn read_pools(
    c: Clients,
    config: &str,
    selector: Option<&str>,
) -> Result<BindingsInput, LiveError> {
    let (client, garden) = (c.own, c.garden);
    let cfg = get_config(&client, config).await?;
    let InForce { spec, note } = in_force(&cfg);
    let objects = binding_objects(&garden, &spec, selector).await?;
    let others = other_bindings(&garden, &spec).await?;
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
    let claims: Vec<(ClaimView, Option<jiff::Timestamp>)> = claims
        .items
        .iter()
        .map(|c| (claim_view(c), created(&c.metadata)))
        .collect();
    let ns = spec.binding_namespace.clone();
    let mut claimed_at: BTreeMap<String, jiff::Timestamp> = BTreeMap::new();
    for (v, at) in &claims {
        let here = v.binding_namespace.as_deref().is_none_or(|n| n == ns);
        if let (Some(b), Some(at), true) = (&v.bound_binding, at, here && !v.lost && !v.deleting) {
            let e = claimed_at.entry(b.clone()).or_insert(*at);
            *e = (*e).min(*at);
        }
    }
    let created = objects
        .iter()
        .filter_map(|b| Some((b.name_any(), created(&b.metadata)?)))
        .collect();
    let pools = PoolsInput {
        config: config.to_string(),
        note,
        binding_kind: spec.binding_kind.unwrap_or_default(),
        keys: ResolvedLabelKeys::from_spec(spec.label_keys.as_ref()),
        bindings: objects.iter().map(view_of).collect(),
        others,
        claims: claims.into_iter().map(|(v, _)| v).collect(),
        shoots: shoots.items.iter().map(shoot_view).collect(),
        binding_namespace: ns,
        shoot_namespace,
        spec,
    };
    Ok(BindingsInput {
        pools,
        created,
        claimed_at,
    })
}
/// Every AccountClaim in `namespace` (all namespaces when `None`), read once, with annotations
/// (the source annotation names objects whose names are too long for a label).
/// With `every`, read again at that interval (`--watch`) until `emit` returns false.
pub fn claims(
    namespace: Option<&str>,
    target: &Target,
    every: Option<std::time::Duration>,
    emit: impl FnMut(Vec<AccountClaim>) -> bool,
) -> Result<(), LiveError> {
    let read = |c: Clients| async move {
        let api: Api<AccountClaim> = match namespace {
            Some(ns) => Api::namespaced(c.own.clone(), ns),
            None => Api::all(c.own.clone()),
        };
        api.list(&ListParams::default())
            .await
            .map(|l| l.items)
            .map_err(api_error("list AccountClaims"))
    };
    repeat(target, every, read, emit)
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
    fn a_live_binding_view_carries_the_account_of_its_reference() {
        let object =
            |v: serde_json::Value| -> DynamicObject { serde_json::from_value(v).expect("binding") };
        let sb = object(
            json!({"apiVersion": "core.gardener.cloud/v1beta1", "kind": "SecretBinding",
            "metadata": {"name": "aws-01", "namespace": "garden-kyma"},
            "secretRef": {"name": "aws-01"}, "provider": {"type": "aws"}}),
        );
        let cb = object(
            json!({"apiVersion": "security.gardener.cloud/v1alpha1", "kind": "CredentialsBinding",
            "metadata": {"name": "force-migrated-aws-01", "namespace": "garden-kyma"},
            "credentialsRef": {"apiVersion": "v1", "kind": "Secret", "namespace": "garden-kyma", "name": "aws-01"},
            "provider": {"type": "aws"}}),
        );
        let (a, b) = (view_of(&sb).account, view_of(&cb).account);
        assert!(a.is_some(), "no account on {:?}", view_of(&sb));
        assert_eq!(a, b);
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
