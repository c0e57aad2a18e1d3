//! The reads of the operator's start and of a take-over: whether its CRDs are served, the watch
//! streams of HapConfigs (one per replica, shared by the webhook and the controllers) and claims, and the pages of the
//! consistent re-list a new leader makes of bindings and claims. Here, so that no module above
//! `k8s` builds an `Api`.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use futures::Stream;
use kube::api::ListParams;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;
use kube::{Api, Client};

use super::caches::{LIST_PAGE, Page, SharedLedger, claim_stream, controller_stream};
use super::claim_store::ClaimWriter;
use super::lean::{LeanClaim, LeanObject, StoredClaim};
use super::writes::binding_resource;
use super::{BindingTarget, ChangeFeed, Cluster};
use crate::api::{AccountClaim, HapConfig};

/// AccountClaims in the watched namespace, or in all namespaces.
fn claims_api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// One LIST of each CRD the operator serves: the CRD (`HapConfig`, `AccountClaim`) the API
/// server could not list, with its error.
pub async fn crds_served(
    cluster: &Cluster,
    claim_namespace: Option<&str>,
) -> Result<(), (&'static str, kube::Error)> {
    let client = cluster.kube();
    let lp = ListParams::default().limit(1);
    Api::<HapConfig>::all(client.clone())
        .list_metadata(&lp)
        .await
        .map_err(|e| ("HapConfig", e))?;
    claims_api::<AccountClaim>(client, claim_namespace)
        .list_metadata(&lp)
        .await
        .map(drop)
        .map_err(|e| ("AccountClaim", e))
}

/// The one HapConfig watch of a replica: its store, which the config resolver, the webhook and
/// the controllers share, and the stream that fills it (the config controller's trigger).
pub fn config_watch(
    cluster: &Cluster,
    feed: ChangeFeed,
) -> (
    Store<HapConfig>,
    impl Stream<Item = Result<HapConfig, watcher::Error>> + Send + use<>,
) {
    let client = cluster.kube();
    let (store, writer) = reflector::store();
    let stream = controller_stream(Api::<HapConfig>::all(client.clone()), writer, feed);
    (store, stream)
}

/// The claim watch of the controllers (see `caches::claim_stream`): their store, its writer
/// (shared with the fetch of settled claims, `claim_store`), and the stream that fills it and
/// the ledger.
pub fn claims_stream(
    cluster: &Cluster,
    namespace: Option<&str>,
    (ledger, feed, synced): (SharedLedger, ChangeFeed, Arc<AtomicBool>),
) -> (
    Store<StoredClaim>,
    ClaimWriter,
    impl Stream<Item = Result<kube::runtime::reflector::ObjectRef<StoredClaim>, watcher::Error>>
    + Send
    + use<>,
) {
    let client = cluster.kube();
    let (store, writer) = ClaimWriter::new();
    let api = claims_api(client, namespace);
    let stream = claim_stream(api, writer.clone(), ledger, feed, synced);
    (store, writer, stream)
}

/// One page of a consistent list of the bindings of `target`, from `token` on.
pub async fn binding_page(
    garden: &Cluster,
    target: &BindingTarget,
    token: Option<String>,
) -> Result<Page<LeanObject>, kube::Error> {
    let garden = garden.kube();
    let ar = binding_resource(target.kind);
    list_page(
        &Api::namespaced_with(garden.clone(), &target.namespace, &ar),
        token,
    )
    .await
}

/// One page of a consistent list of the watched claims, from `token` on.
pub async fn claim_page(
    cluster: &Cluster,
    namespace: Option<&str>,
    token: Option<String>,
) -> Result<Page<LeanClaim>, kube::Error> {
    list_page(&claims_api(cluster.kube(), namespace), token).await
}

async fn list_page<K>(api: &Api<K>, token: Option<String>) -> Result<Page<K>, kube::Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut lp = ListParams::default().limit(LIST_PAGE);
    if let Some(c) = &token {
        lp = lp.continue_token(c);
    }
    let page = api.list(&lp).await?;
    Ok(Page {
        items: page.items,
        continue_token: page.metadata.continue_,
        resource_version: page.metadata.resource_version,
    })
}
