//! The account a binding stands for: the credential its reference names. Gardener's forced
//! migration off SecretBindings leaves two bindings on one Secret (the SecretBinding and a
//! CredentialsBinding, possibly an unlabelled `force-migrated-<name>` one), so tenancy, cluster
//! counts and release follow the credential, never the binding's name.
//!
//! The key is a 64-bit hash of the normalised reference, not its text: eight bytes a binding
//! instead of a string, and the operator keeps no credential names at all. Two credentials whose
//! hashes collide (about 3·10⁻¹² at 10k bindings) would be taken for one account, which only
//! holds an account back, never hands it out twice.

use std::num::NonZeroU64;

/// One credential (a Secret, WorkloadIdentity or InternalSecret), as a hash of its reference.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Account(NonZeroU64);

impl Account {
    /// The account of a reference. A SecretBinding's `secretRef` is a `v1` `Secret`; its missing
    /// namespace is the binding's own (`default_namespace`), as Gardener reads it. `None` when the
    /// reference names nothing.
    pub fn of_ref(
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        default_namespace: Option<&str>,
        name: &str,
    ) -> Option<Self> {
        if name.is_empty() {
            return None;
        }
        let namespace = namespace
            .filter(|n| !n.is_empty())
            .or(default_namespace)
            .unwrap_or_default();
        // The API group names the kind (gardener-apiserver tells the kinds apart by group); the
        // version does not: `v1` Secret and a later `v2` Secret are one object.
        let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
        let mut h = 0xcbf2_9ce4_8422_2325_u64;
        for part in [group, kind, namespace, name] {
            for b in part.bytes().chain([0xff]) {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
        }
        Some(Account(NonZeroU64::new(h).unwrap_or(NonZeroU64::MIN)))
    }

    /// The account of a SecretBinding's `secretRef`.
    pub fn of_secret(
        namespace: Option<&str>,
        default_namespace: Option<&str>,
        name: &str,
    ) -> Option<Self> {
        Self::of_ref("v1", "Secret", namespace, default_namespace, name)
    }

    /// The account of a binding as the API server sends it (either kind): its `credentialsRef`,
    /// else its `secretRef`.
    pub fn of_binding(binding: &serde_json::Value) -> Option<Self> {
        Self::of_fields(binding, binding["metadata"]["namespace"].as_str())
    }

    /// The account of a binding's fields other than its metadata (a `DynamicObject`'s `data`),
    /// with the binding's own namespace `own_ns`.
    pub fn of_fields(binding: &serde_json::Value, own_ns: Option<&str>) -> Option<Self> {
        let s = |r: &serde_json::Value, k: &str| r[k].as_str().map(str::to_string);
        let r = &binding["credentialsRef"];
        if r.is_object() {
            let (v, k) = (s(r, "apiVersion"), s(r, "kind"));
            return Self::of_ref(
                v.as_deref().unwrap_or_default(),
                k.as_deref().unwrap_or_default(),
                r["namespace"].as_str(),
                own_ns,
                r["name"].as_str().unwrap_or_default(),
            );
        }
        let r = &binding["secretRef"];
        Self::of_secret(
            r["namespace"].as_str(),
            own_ns,
            r["name"].as_str().unwrap_or_default(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_secret_binding_and_a_credentials_binding_on_one_secret_are_one_account() {
        let sb = json!({"kind": "SecretBinding", "metadata": {"name": "aws-01", "namespace": "garden-kyma"},
            "secretRef": {"name": "aws-01"}});
        let cb = json!({"kind": "CredentialsBinding",
            "metadata": {"name": "force-migrated-aws-01", "namespace": "garden-kyma"},
            "credentialsRef": {"apiVersion": "v1", "kind": "Secret", "namespace": "garden-kyma", "name": "aws-01"}});
        let a = Account::of_binding(&sb).expect("a reference");
        assert_eq!(Account::of_binding(&cb), Some(a));
        let sb_ns = json!({"metadata": {"name": "x", "namespace": "garden-kyma"},
            "secretRef": {"namespace": "garden-kyma", "name": "aws-01"}});
        assert_eq!(Account::of_binding(&sb_ns), Some(a));
    }

    #[test]
    fn another_name_namespace_or_kind_is_another_account() {
        let a = Account::of_ref("v1", "Secret", Some("ns"), None, "s1");
        for other in [
            Account::of_ref("v1", "Secret", Some("ns"), None, "s2"),
            Account::of_ref("v1", "Secret", Some("ns2"), None, "s1"),
            Account::of_ref(
                "security.gardener.cloud/v1alpha1",
                "WorkloadIdentity",
                Some("ns"),
                None,
                "s1",
            ),
            // Field boundaries count: "n"+"ss1" is not "ns"+"s1".
            Account::of_ref("v1", "Secret", Some("n"), None, "ss1"),
        ] {
            assert_ne!(a, other);
        }
        assert_eq!(Account::of_ref("v1", "Secret", None, None, ""), None);
        assert_eq!(
            Account::of_binding(&json!({"metadata": {"name": "b"}})),
            None
        );
    }
}
