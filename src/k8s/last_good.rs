//! The last-known-good record: the spec of the last valid HapConfig generation, kept in a
//! ConfigMap of the operator's own namespace that only the operator's RBAC may write, so that a
//! restarted operator can keep serving it while the current spec is invalid without trusting
//! `status.activeSpec` (which anyone allowed to patch `hapconfigs/status` can write).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::Patch;
use serde_json::json;
use sha3::{Digest, Sha3_256};

use super::{Cluster, K8sError};
use crate::api::HapConfigSpec;

const UID_KEY: &str = "uid";
const GENERATION_KEY: &str = "generation";
const SPEC_KEY: &str = "spec.json";
/// The prefix of the record's name; the rest is the HapConfig's name.
pub const NAME_PREFIX: &str = "hap-last-known-good.";

/// The record's name for a HapConfig: the prefix and the config's name, or (for names that would
/// exceed the 253 characters of an object name) a digest of it.
pub fn record_name(config: &str) -> String {
    let name = format!("{NAME_PREFIX}{config}");
    if name.len() <= 253 {
        return name;
    }
    let digest = Sha3_256::digest(config.as_bytes());
    let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("{NAME_PREFIX}{hex}")
}

/// The last valid generation of one HapConfig object, as the operator recorded it.
#[derive(Clone, Debug, PartialEq)]
pub struct LastGood {
    /// The HapConfig's uid: a record of a deleted and recreated object is never used.
    pub uid: String,
    pub generation: i64,
    pub spec: HapConfigSpec,
}

pub struct LastGoodApi {
    api: Api<ConfigMap>,
    name: String,
    namespace: String,
}

impl LastGoodApi {
    pub fn new(cluster: &Cluster, namespace: &str, config: &str) -> Self {
        Self {
            api: Api::namespaced(cluster.kube().clone(), namespace),
            name: record_name(config),
            namespace: namespace.to_string(),
        }
    }

    pub(super) fn what(&self) -> String {
        format!("ConfigMap {}/{}", self.namespace, self.name)
    }

    /// The record, if it exists and decodes; one that does not decode is reported and ignored
    /// (the operator then keeps nothing in force while the current spec is invalid).
    pub async fn get(&self) -> Result<Option<LastGood>, K8sError> {
        let cm = self
            .api
            .get_opt(&self.name)
            .await
            .map_err(|e| K8sError::classify("read", self.what(), e))?;
        Ok(cm.and_then(|cm| match decode(cm.data.unwrap_or_default()) {
            Ok(good) => Some(good),
            Err(reason) => {
                tracing::warn!(record = %self.what(), %reason, "ignoring the last-known-good record");
                None
            }
        }))
    }

    /// Writes the record (server-side apply: creates it or replaces its data), conditioned on
    /// the version read just before: a paused ex-leader's write that lands late conflicts
    /// instead of putting back an older generation over the new leader's. A record of the same
    /// object at this generation or a later one is left as it is. Only through
    /// `Writer::put_last_good`, whose fenced handle (`via`) sends the write.
    pub(super) async fn put(&self, via: &Cluster, good: &LastGood) -> Result<(), K8sError> {
        let current = self
            .api
            .get_opt(&self.name)
            .await
            .map_err(|e| K8sError::classify("read", self.what(), e))?;
        let rv = current
            .as_ref()
            .and_then(|cm| cm.metadata.resource_version.clone());
        let recorded = current.and_then(|cm| decode(cm.data.unwrap_or_default()).ok());
        if recorded.is_some_and(|r| r.uid == good.uid && r.generation >= good.generation) {
            return Ok(());
        }
        let spec = serde_json::to_string(&good.spec).map_err(|source| K8sError::Encode {
            what: self.what(),
            source,
        })?;
        let mut body = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "labels": {"app.kubernetes.io/part-of": "hap-operator"},
            },
            "data": {UID_KEY: good.uid, GENERATION_KEY: good.generation.to_string(), SPEC_KEY: spec},
        });
        if let Some(rv) = rv {
            body["metadata"]["resourceVersion"] = rv.into();
        }
        let pp = super::params::apply(crate::api::FIELD_MANAGER);
        Api::<ConfigMap>::namespaced(via.kube().clone(), &self.namespace)
            .patch(&self.name, &pp, &Patch::Apply(body))
            .await
            .map(drop)
            .map_err(|e| K8sError::classify("write", self.what(), e))
    }
}

fn decode(data: BTreeMap<String, String>) -> Result<LastGood, String> {
    let field = |k: &str| data.get(k).ok_or_else(|| format!("data.{k} is missing"));
    let generation = field(GENERATION_KEY)?
        .parse::<i64>()
        .map_err(|e| format!("data.{GENERATION_KEY}: {e}"))?;
    let spec =
        serde_json::from_str(field(SPEC_KEY)?).map_err(|e| format!("data.{SPEC_KEY}: {e}"))?;
    Ok(LastGood {
        uid: field(UID_KEY)?.clone(),
        generation,
        spec,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_names_stay_valid_object_names() {
        assert_eq!(record_name("default"), "hap-last-known-good.default");
        let long = "a".repeat(253);
        let name = record_name(&long);
        assert!(name.len() <= 253 && name.starts_with(NAME_PREFIX), "{name}");
        assert_ne!(record_name(&"b".repeat(253)), name);
    }

    #[test]
    fn a_damaged_record_is_refused_with_the_field_named() {
        let mut data = BTreeMap::new();
        data.insert(UID_KEY.to_string(), "u".to_string());
        data.insert(GENERATION_KEY.to_string(), "x".to_string());
        assert!(
            decode(data.clone())
                .unwrap_err()
                .contains("data.generation")
        );
        data.insert(GENERATION_KEY.to_string(), "3".to_string());
        assert!(decode(data.clone()).unwrap_err().contains("data.spec.json"));
        data.insert(
            SPEC_KEY.to_string(),
            r#"{"bindingNamespace":"garden","rules":["aws"]}"#.to_string(),
        );
        let good = decode(data).expect("decodes");
        assert_eq!((good.uid.as_str(), good.generation), ("u", 3));
    }
}
