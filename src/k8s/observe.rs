//! The reads of observe mode: the requests of the landscape — Shoots in the shoot namespace,
//! KEB's Runtimes, AccountClaims — listed once per HapConfig resync, as `hap migrate --report`
//! lists them, in pages, for `status::observe`. Reads only; a list that fails becomes a note, so that the
//! observation of what could be read still stands.

use kube::Api;
use kube::api::{DynamicObject, ListParams};
use serde::de::DeserializeOwned;

use super::Writer;
use crate::api::{AccountClaim, SourceKind};
use crate::status::observe::{Observed, from_claim, from_object};

/// The requests read, and why some could not be.
#[derive(Debug, Default)]
pub struct ObservedRequests {
    pub requests: Vec<Observed>,
    pub notes: Vec<String>,
}

/// Where the requests are: the garden's shoot namespace, the Runtimes' namespace in the
/// operator's cluster, the binding namespace a recorded claim must name to count here, and the
/// namespace the operator watches claims in (`--claim-namespace`; `None`: every namespace).
pub struct Where<'a> {
    pub shoot_namespace: &'a str,
    pub runtime_namespace: &'a str,
    pub binding_namespace: &'a str,
    pub claim_namespace: Option<&'a str>,
}

/// Lists the requests (Shoots, Runtimes, AccountClaims where the operator watches them: a
/// narrow install may list claims in its claim namespace only, and serves no other).
pub async fn observed_requests(writer: &Writer, at: &Where<'_>) -> ObservedRequests {
    let mut out = ObservedRequests::default();
    let shoots = list(
        writer.garden().kube(),
        at.shoot_namespace,
        SourceKind::Shoot,
    )
    .await;
    read_into(&mut out, SourceKind::Shoot, at.shoot_namespace, shoots);
    let rts = list(
        writer.own().kube(),
        at.runtime_namespace,
        SourceKind::Runtime,
    )
    .await;
    read_into(&mut out, SourceKind::Runtime, at.runtime_namespace, rts);
    // A claim recorded in another binding namespace runs in an account of another config.
    let here = |c: &AccountClaim| {
        c.status
            .as_ref()
            .and_then(|s| s.binding_namespace.as_deref())
            .is_none_or(|ns| ns == at.binding_namespace)
    };
    let claims = claims_api(writer.own().kube(), at.claim_namespace);
    match paged(&claims, |c| here(c).then(|| from_claim(c))).await {
        Ok(read) => out.requests.extend(read),
        Err(e) => out
            .notes
            .push(format!("AccountClaims could not be listed: {e}")),
    }
    out
}

/// The claims the operator serves: in its claim namespace when it has one, else everywhere.
fn claims_api(client: &kube::Client, namespace: Option<&str>) -> Api<AccountClaim> {
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// Objects per page of a list: a landscape's 100k Shoots or claims, listed whole at once, would
/// hold gigabytes of JSON in the leader; a page is turned into what the report needs before the
/// next one is read.
const PAGE: u32 = 500;

async fn paged<K, T>(
    api: &Api<K>,
    mut keep: impl FnMut(&K) -> Option<T>,
) -> Result<Vec<T>, kube::Error>
where
    K: Clone + DeserializeOwned + std::fmt::Debug,
{
    let mut out = Vec::new();
    let mut params = ListParams::default().limit(PAGE);
    loop {
        let page = api.list(&params).await?;
        out.extend(page.items.iter().filter_map(&mut keep));
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(out),
        }
    }
}

async fn list(
    client: &kube::Client,
    namespace: &str,
    kind: SourceKind,
) -> Result<Vec<Observed>, kube::Error> {
    let api = Api::<DynamicObject>::namespaced_with(client.clone(), namespace, &kind.resource());
    paged(&api, |o| {
        serde_json::to_value(o).ok().map(|v| from_object(kind, &v))
    })
    .await
}

fn read_into(
    out: &mut ObservedRequests,
    kind: SourceKind,
    namespace: &str,
    read: Result<Vec<Observed>, kube::Error>,
) {
    match read {
        Ok(items) => out.requests.extend(items),
        Err(kube::Error::Api(e)) if e.code == 404 => out.notes.push(format!(
            "no {} read in {namespace}: the {} CRD is not installed ({})",
            kind.as_str(),
            kind.as_str(),
            e.message
        )),
        Err(e) => out.notes.push(format!(
            "{}s in {namespace} could not be listed: {e}",
            kind.as_str()
        )),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use hap_testkit::Call;

    fn shoot(name: &str) -> serde_json::Value {
        json!({"apiVersion": "core.gardener.cloud/v1beta1", "kind": "Shoot",
               "metadata": {"name": name, "namespace": "garden-p"},
               "spec": {"credentialsBindingName": "b1"}})
    }

    /// A landscape's lists come in pages of `PAGE`, each turned into report rows before the next
    /// is asked for (one unpaginated LIST before: every Shoot held whole at once).
    #[tokio::test]
    async fn requests_are_listed_in_pages() {
        let (cluster, api) = crate::k8s::scripted();
        let path = "/apis/core.gardener.cloud/v1beta1/namespaces/garden-p/shoots";
        let page = |items: Vec<serde_json::Value>, cont: &str| {
            json!({"apiVersion": "v1", "kind": "List", "items": items,
                   "metadata": {"continue": cont}})
        };
        api.expect([
            Call::get(path)
                .query(&[("limit", "500")])
                .answer(200, page(vec![shoot("s1"), shoot("s2")], "t1")),
            Call::get(path)
                .query(&[("limit", "500"), ("continue", "t1")])
                .answer(200, page(vec![shoot("s3")], "")),
        ]);
        let read = list(cluster.kube(), "garden-p", SourceKind::Shoot)
            .await
            .expect("listed");
        assert_eq!(read.len(), 3);
        api.done();
    }
}
