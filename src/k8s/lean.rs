//! What the watches decode. Every object the API server sends carries its `managedFields`, which
//! serde would build into nested JSON maps only for the caches to drop them again: at 10k claims
//! that was most of the allocations of a list and a third of the peak heap. These types skip
//! them (and annotations other than the operator's own `accountpool.io/` ones, which no decision
//! reads) while decoding and hand on the ordinary typed objects (a binding: its metadata and the
//! kind of its credentials only); the claim cache keeps a compact form of each claim
//! (`StoredClaim`).

use std::collections::BTreeMap;
use std::fmt::Debug;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::Resource;
use kube::core::{ApiResource, DynamicResourceScope};
use kube::runtime::watcher::Event;
use serde::{Deserialize, Deserializer};

use crate::api::{
    AccountClaim, AccountClaimSpec, AccountClaimStatus, CredentialsKind, Shoot, ShootSpec,
    ShootStatus,
};
use crate::claim_state::settled;
use crate::pools::{Account, ClaimView, claim_view_of};
use crate::status::CompactStatus;

/// The metadata fields anything downstream reads; the rest is skipped without being built.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Meta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    generation: Option<i64>,
    creation_timestamp: Option<Time>,
    deletion_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
    labels: Option<BTreeMap<String, String>>,
    #[serde(default, deserialize_with = "own_annotations")]
    annotations: Option<BTreeMap<String, String>>,
    finalizers: Option<Vec<String>>,
    owner_references: Option<Vec<OwnerReference>>,
}

/// The `accountpool.io/` annotations; the values of the others (a last-applied configuration can
/// be large) are skipped without being built. `None` when there are none.
fn own_annotations<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<BTreeMap<String, String>>, D::Error> {
    struct Own;
    impl<'de> serde::de::Visitor<'de> for Own {
        type Value = Option<BTreeMap<String, String>>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a map of annotations")
        }
        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<Self::Value, D2::Error> {
            d.deserialize_map(Own)
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut m: A,
        ) -> Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            while let Some(k) = m.next_key::<String>()? {
                if crate::labels::is_own(&k) {
                    out.insert(k, m.next_value::<String>()?);
                } else {
                    m.next_value::<serde::de::IgnoredAny>()?;
                }
            }
            Ok((!out.is_empty()).then_some(out))
        }
    }
    d.deserialize_option(Own)
}

/// Decodes `metadata` without `managedFields` and without foreign annotations.
pub fn lean_meta<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    let m = Meta::deserialize(d)?;
    Ok(ObjectMeta {
        name: m.name,
        namespace: m.namespace,
        uid: m.uid,
        resource_version: m.resource_version,
        generation: m.generation,
        creation_timestamp: m.creation_timestamp,
        deletion_timestamp: m.deletion_timestamp,
        deletion_grace_period_seconds: m.deletion_grace_period_seconds,
        labels: m.labels,
        annotations: m.annotations,
        finalizers: m.finalizers,
        owner_references: m.owner_references,
        ..ObjectMeta::default()
    })
}

/// Implements `Resource` for a namespaced lean type by borrowing the type information of the full
/// one, and (given the fields) turns a lean object into the full one (the named fields move
/// across, metadata too).
macro_rules! lean_resource {
    ($lean:ident => $full:ident { $($field:ident),* }) => {
        impl From<$lean> for $full {
            fn from(o: $lean) -> Self {
                $full {
                    metadata: o.metadata,
                    $($field: o.$field),*
                }
            }
        }
        lean_resource!($lean => $full);
    };
    ($lean:ident => $full:ident) => {
        impl Resource for $lean {
            type DynamicType = ();
            type Scope = NamespaceResourceScope;
            fn kind(_: &()) -> std::borrow::Cow<'_, str> {
                <$full>::kind(&())
            }
            fn group(_: &()) -> std::borrow::Cow<'_, str> {
                <$full>::group(&())
            }
            fn version(_: &()) -> std::borrow::Cow<'_, str> {
                <$full>::version(&())
            }
            fn plural(_: &()) -> std::borrow::Cow<'_, str> {
                <$full>::plural(&())
            }
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

/// An AccountClaim as the claim watch decodes it.
#[derive(Deserialize, Clone, Debug)]
pub struct LeanClaim {
    #[serde(deserialize_with = "lean_meta")]
    metadata: ObjectMeta,
    spec: AccountClaimSpec,
    #[serde(default)]
    status: Option<AccountClaimStatus>,
}
lean_resource!(LeanClaim => AccountClaim { spec, status });

/// An AccountClaim as the claim cache keeps it: lean metadata with the operator's own labels
/// only (`own_labels`), and a compact status (a Bound status as the operator writes it keeps no
/// conditions, see `CompactStatus`), boxed: the store holds mostly claims not decided yet, which
/// have none. A reconcile gets the claim back with `expand`; the index and the controller's
/// filters read the fields.
#[derive(Deserialize, Clone, Debug)]
#[serde(from = "LeanClaim")]
pub struct StoredClaim {
    metadata: ObjectMeta,
    spec: AccountClaimSpec,
    status: Option<Box<CompactStatus>>,
}
lean_resource!(StoredClaim => AccountClaim);

impl From<LeanClaim> for StoredClaim {
    fn from(c: LeanClaim) -> Self {
        AccountClaim::from(c).into()
    }
}

impl From<AccountClaim> for StoredClaim {
    fn from(mut c: AccountClaim) -> Self {
        c.metadata.labels = own_labels(c.metadata.labels.take());
        StoredClaim {
            metadata: c.metadata,
            spec: c.spec,
            status: c.status.map(|s| Box::new(CompactStatus::new(s))),
        }
    }
}

/// The `accountpool.io/` labels of a claim (the request source's link), `None` when there are
/// none. No decision reads another label of a claim, and no write of the operator's sends a
/// claim's labels back (a JSON patch of its finalizers, an apply of its status), so the labels
/// GitOps tools and users put on claims stay on the server and out of the cache: at a take-over
/// the store holds every claim not decided yet, and one foreign label took ~600 bytes of each.
fn own_labels(labels: Option<BTreeMap<String, String>>) -> Option<BTreeMap<String, String>> {
    let mut labels = labels?;
    labels.retain(|k, _| crate::labels::is_own(k));
    (!labels.is_empty()).then_some(labels)
}

impl StoredClaim {
    /// The claim's reference by namespace and name, without its uid and version: what the claim
    /// controller's triggers and the lanes' line hold per claim.
    pub fn ref_by_name(&self) -> kube::runtime::reflector::ObjectRef<StoredClaim> {
        let mut key = kube::runtime::reflector::ObjectRef::from_obj(self);
        key.extra = Default::default();
        key
    }

    /// The claim as it was written, but for labels other than the operator's own.
    pub fn expand(&self) -> AccountClaim {
        AccountClaim {
            metadata: self.metadata.clone(),
            spec: self.spec.clone(),
            status: self.status.as_deref().map(CompactStatus::expand),
        }
    }

    pub fn spec(&self) -> &AccountClaimSpec {
        &self.spec
    }

    /// The index's view of the claim.
    pub fn view(&self) -> ClaimView {
        claim_view_of(&self.metadata, &self.spec, self.status_fields())
    }

    /// Whether the claim needs no reconcile until something else moves (`claim_state::is_settled`).
    pub fn is_settled(&self) -> bool {
        settled(&self.metadata, self.status_fields())
    }

    /// The status without a folded Bound pair of conditions (`CompactStatus::fields`).
    pub fn status_fields(&self) -> Option<&AccountClaimStatus> {
        self.status.as_deref().map(CompactStatus::fields)
    }
}

/// A Shoot as the Shoot watch decodes it (its spec is trimmed to the binding it names).
#[derive(Deserialize, Clone, Debug)]
pub struct LeanShoot {
    #[serde(deserialize_with = "lean_meta")]
    metadata: ObjectMeta,
    #[serde(default)]
    spec: ShootSpec,
    /// Only `lastErrors[].codes` and `lastOperation`'s type and state (`ShootStatus`): the rest
    /// of the status is skipped.
    #[serde(default)]
    status: Option<ShootStatus>,
}
lean_resource!(LeanShoot => Shoot { spec, status });

/// A binding's metadata (labels and resourceVersion are all selection reads), the kind of its
/// credentials, which status and `hap pools` show, and the account its reference names (a hash:
/// bindings on one credential are one account, `pools::Account`); of either binding kind. The
/// reference's name and namespace are not kept: the operator never reads the credentials.
#[derive(Deserialize, Clone, Debug)]
#[serde(from = "RawBinding")]
pub struct LeanObject {
    metadata: ObjectMeta,
    credentials: CredentialsKind,
    account: Option<Account>,
}

impl LeanObject {
    pub fn credentials(&self) -> CredentialsKind {
        self.credentials
    }

    /// The credential the binding references, as an account key.
    pub fn account(&self) -> Option<Account> {
        self.account
    }
}

/// A binding as it is decoded, before its reference becomes an account key.
#[derive(Deserialize)]
struct RawBinding {
    #[serde(deserialize_with = "lean_meta")]
    metadata: ObjectMeta,
    #[serde(default, rename = "credentialsRef")]
    credentials_ref: Option<CredentialsRef>,
    /// A SecretBinding has no `credentialsRef`: its `secretRef` is a Secret.
    #[serde(default, rename = "secretRef")]
    secret_ref: Option<CredentialsRef>,
}

/// A `credentialsRef` or `secretRef`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CredentialsRef {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    name: String,
}

impl From<RawBinding> for LeanObject {
    fn from(b: RawBinding) -> Self {
        let own = b.metadata.namespace.as_deref();
        let (credentials, account) = match (&b.credentials_ref, &b.secret_ref) {
            (Some(r), _) => (
                CredentialsKind::from_ref(&r.api_version, &r.kind),
                Account::of_ref(
                    &r.api_version,
                    &r.kind,
                    r.namespace.as_deref(),
                    own,
                    &r.name,
                ),
            ),
            (None, Some(r)) => (
                CredentialsKind::Secret,
                Account::of_secret(r.namespace.as_deref(), own, &r.name),
            ),
            (None, None) => (CredentialsKind::Secret, None),
        };
        LeanObject {
            metadata: b.metadata,
            credentials,
            account,
        }
    }
}

impl Resource for LeanObject {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;
    fn kind(dt: &ApiResource) -> std::borrow::Cow<'_, str> {
        dt.kind.as_str().into()
    }
    fn group(dt: &ApiResource) -> std::borrow::Cow<'_, str> {
        dt.group.as_str().into()
    }
    fn version(dt: &ApiResource) -> std::borrow::Cow<'_, str> {
        dt.version.as_str().into()
    }
    fn api_version(dt: &ApiResource) -> std::borrow::Cow<'_, str> {
        dt.api_version.as_str().into()
    }
    fn plural(dt: &ApiResource) -> std::borrow::Cow<'_, str> {
        dt.plural.as_str().into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// A watch event of a lean type as the event of the full type.
pub fn widen<A, B: From<A>>(ev: Event<A>) -> Event<B> {
    match ev {
        Event::Apply(o) => Event::Apply(o.into()),
        Event::Delete(o) => Event::Delete(o.into()),
        Event::Init => Event::Init,
        Event::InitApply(o) => Event::InitApply(o.into()),
        Event::InitDone => Event::InitDone,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::ResourceExt;

    #[test]
    fn decodes_without_managed_fields_and_annotations() {
        let json = serde_json::json!({
            "apiVersion": "accountpool.io/v1alpha1",
            "kind": "AccountClaim",
            "metadata": {
                "name": "c1", "namespace": "ns", "uid": "u1", "resourceVersion": "7",
                "generation": 1, "labels": {"a": "b"}, "finalizers": ["f"],
                "annotations": {"big": "x"},
                "deletionTimestamp": "2026-01-01T00:00:00Z",
                "managedFields": [{"manager": "m", "operation": "Apply",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:phase": {}}}}]
            },
            "spec": {"globalAccount": "ga", "plan": "aws"},
            "status": {"phase": "Bound", "credentialsBindingName": "b1"}
        });
        let lean: LeanClaim = serde_json::from_value(json).expect("decodes");
        let claim: AccountClaim = lean.into();
        assert_eq!(claim.name_any(), "c1");
        assert_eq!(claim.namespace().as_deref(), Some("ns"));
        assert_eq!(claim.uid().as_deref(), Some("u1"));
        assert_eq!(claim.resource_version().as_deref(), Some("7"));
        assert_eq!(claim.labels().get("a").map(String::as_str), Some("b"));
        assert_eq!(claim.finalizers(), ["f".to_string()]);
        assert!(claim.metadata.deletion_timestamp.is_some());
        assert!(claim.metadata.managed_fields.is_none());
        assert!(claim.metadata.annotations.is_none());
        assert_eq!(claim.spec.global_account, "ga");
        assert_eq!(
            claim
                .status
                .and_then(|s| s.credentials_binding_name)
                .as_deref(),
            Some("b1")
        );
    }

    #[test]
    fn the_claim_cache_keeps_only_the_operators_own_labels() {
        let claim = |labels: serde_json::Value| -> StoredClaim {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "c1", "namespace": "ns", "labels": labels},
                "spec": {"globalAccount": "ga", "plan": "aws"}
            }))
            .expect("decodes")
        };
        let linked = claim(serde_json::json!({
            "kustomize.toolkit.fluxcd.io/name": "claims",
            "accountpool.io/source-kind": "Shoot",
            "accountpool.io/source-name": "s1"
        }));
        let kept: Vec<&str> = linked.labels().keys().map(String::as_str).collect();
        assert_eq!(
            kept,
            ["accountpool.io/source-kind", "accountpool.io/source-name"]
        );
        assert_eq!(linked.expand().labels().len(), 2);
        let foreign = claim(serde_json::json!({"app.kubernetes.io/part-of": "kyma"}));
        assert!(foreign.meta().labels.is_none());
        assert!(foreign.status_fields().is_none());
    }

    #[test]
    fn a_binding_keeps_only_the_operators_own_annotations() {
        let json = serde_json::json!({
            "apiVersion": "security.gardener.cloud/v1alpha1",
            "kind": "CredentialsBinding",
            "metadata": {"name": "b1", "namespace": "garden", "resourceVersion": "3",
                "labels": {"accountpool.io/cordoned": "true"},
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{\"big\": 1}",
                    "accountpool.io/cordon-reason": "quota ticket 42"}}
        });
        let lean: LeanObject = serde_json::from_value(json).expect("decodes");
        let view = crate::pools::binding_view(&lean, lean.credentials());
        assert_eq!(
            view.annotations,
            BTreeMap::from([(
                "accountpool.io/cordon-reason".into(),
                "quota ticket 42".into()
            )])
        );
        let none: LeanObject = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "b2", "annotations": null}
        }))
        .expect("decodes a null map");
        assert!(none.metadata.annotations.is_none());
    }

    #[test]
    fn a_shoot_keeps_the_binding_it_names() {
        let json = serde_json::json!({
            "metadata": {"name": "s1", "resourceVersion": "3",
                "managedFields": [{"manager": "m", "fieldsV1": {"f:spec": {}}}]},
            "spec": {"credentialsBindingName": "b9", "provider": {"type": "aws", "workers": []}}
        });
        let shoot: Shoot = serde_json::from_value::<LeanShoot>(json)
            .expect("decodes")
            .into();
        assert_eq!(shoot.spec.binding_name(), Some("b9"));
        assert!(shoot.metadata.managed_fields.is_none());
    }

    #[test]
    fn a_binding_keeps_the_account_of_its_reference_and_not_the_reference() {
        let decode =
            |v: serde_json::Value| serde_json::from_value::<LeanObject>(v).expect("decodes");
        let cb = decode(serde_json::json!({
            "apiVersion": "security.gardener.cloud/v1alpha1", "kind": "CredentialsBinding",
            "metadata": {"name": "force-migrated-aws-01", "namespace": "garden-kyma"},
            "provider": {"type": "aws"},
            "credentialsRef": {"apiVersion": "v1", "kind": "Secret", "name": "aws-01", "namespace": "garden-kyma"},
        }));
        let sb = decode(serde_json::json!({
            "apiVersion": "core.gardener.cloud/v1beta1", "kind": "SecretBinding",
            "metadata": {"name": "aws-01", "namespace": "garden-kyma"},
            "provider": {"type": "aws"},
            "secretRef": {"name": "aws-01"},
        }));
        assert!(cb.account().is_some());
        assert_eq!(cb.account(), sb.account());
        assert_eq!(sb.credentials(), CredentialsKind::Secret);
        let view = crate::pools::binding_view(&cb, cb.credentials()).with_account(cb.account());
        assert_eq!(view.account, cb.account());
    }

    #[test]
    fn a_binding_keeps_the_kind_of_its_credentials_only() {
        let binding = |r: serde_json::Value| {
            let json = serde_json::json!({
                "apiVersion": "security.gardener.cloud/v1alpha1", "kind": "CredentialsBinding",
                "metadata": {"name": "b1", "resourceVersion": "4", "labels": {"hyperscalerType": "aws"}},
                "provider": {"type": "aws"},
                "credentialsRef": r,
            });
            serde_json::from_value::<LeanObject>(json).expect("decodes")
        };
        let cases = [
            ("v1", "Secret", CredentialsKind::Secret),
            (
                "security.gardener.cloud/v1alpha1",
                "WorkloadIdentity",
                CredentialsKind::WorkloadIdentity,
            ),
            (
                "core.gardener.cloud/v1beta1",
                "InternalSecret",
                CredentialsKind::InternalSecret,
            ),
            // A kind a later Gardener may add, or one in an unexpected group: kept, not dropped.
            (
                "security.gardener.cloud/v1beta1",
                "Token",
                CredentialsKind::Other,
            ),
            ("v1", "WorkloadIdentity", CredentialsKind::Other),
        ];
        for (api_version, kind, expected) in cases {
            let b = binding(serde_json::json!({"apiVersion": api_version, "kind": kind,
                "name": "b1", "namespace": "garden-kyma"}));
            assert_eq!(b.credentials(), expected, "{api_version} {kind}");
            assert_eq!(
                b.labels().get("hyperscalerType").map(String::as_str),
                Some("aws")
            );
        }
        // A SecretBinding has no credentialsRef: its secretRef is a Secret.
        let json = serde_json::json!({"apiVersion": "core.gardener.cloud/v1beta1",
            "kind": "SecretBinding", "metadata": {"name": "s1"},
            "secretRef": {"name": "s1", "namespace": "garden-kyma"}});
        let sb: LeanObject = serde_json::from_value(json).expect("decodes");
        assert_eq!(sb.credentials(), CredentialsKind::Secret);
        // The same rule for the CLI, which reads bindings as dynamic objects.
        for (api_version, kind, expected) in cases {
            let data =
                serde_json::json!({"credentialsRef": {"apiVersion": api_version, "kind": kind}});
            assert_eq!(CredentialsKind::of_binding(&data), expected);
        }
        assert_eq!(
            CredentialsKind::of_binding(&serde_json::json!({"secretRef": {}})),
            CredentialsKind::Secret
        );
        // A malformed reference is an error of the object, not a panic.
        assert!(
            serde_json::from_value::<LeanObject>(serde_json::json!({
            "metadata": {"name": "b"}, "credentialsRef": {"kind": 3}}))
            .is_err()
        );
    }

    #[test]
    fn wrong_types_are_errors_not_panics() {
        let json = serde_json::json!({"metadata": {"name": 5}, "spec": {}});
        assert!(serde_json::from_value::<LeanShoot>(json).is_err());
    }
}
