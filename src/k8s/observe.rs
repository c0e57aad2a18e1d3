//! The reads of observe mode: the requests of the landscape — Shoots in the shoot namespace,
//! KEB's Runtimes, AccountClaims — listed once per HapConfig resync, as `hap migrate --report`
//! lists them, for `status::observe`. Reads only; a list that fails becomes a note, so that the
//! observation of what could be read still stands.

use kube::Api;
use kube::api::{DynamicObject, ListParams};

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
/// operator's cluster, and the binding namespace a recorded claim must name to count here.
pub struct Where<'a> {
    pub shoot_namespace: &'a str,
    pub runtime_namespace: &'a str,
    pub binding_namespace: &'a str,
}

/// Lists the requests (Shoots, Runtimes, AccountClaims in every namespace).
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
    let claims = Api::<AccountClaim>::all(writer.own().kube().clone())
        .list(&ListParams::default())
        .await;
    match claims {
        // A claim recorded in another binding namespace runs in an account of another config.
        Ok(list) => out.requests.extend(
            list.items
                .iter()
                .filter(|c| {
                    c.status
                        .as_ref()
                        .and_then(|s| s.binding_namespace.as_deref())
                        .is_none_or(|ns| ns == at.binding_namespace)
                })
                .map(from_claim),
        ),
        Err(e) => out
            .notes
            .push(format!("AccountClaims could not be listed: {e}")),
    }
    out
}

async fn list(
    client: &kube::Client,
    namespace: &str,
    kind: SourceKind,
) -> Result<Vec<DynamicObject>, kube::Error> {
    Api::<DynamicObject>::namespaced_with(client.clone(), namespace, &kind.resource())
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
}

fn read_into(
    out: &mut ObservedRequests,
    kind: SourceKind,
    namespace: &str,
    read: Result<Vec<DynamicObject>, kube::Error>,
) {
    match read {
        Ok(items) => out.requests.extend(
            items
                .iter()
                .filter_map(|o| serde_json::to_value(o).ok())
                .map(|v| from_object(kind, &v)),
        ),
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
