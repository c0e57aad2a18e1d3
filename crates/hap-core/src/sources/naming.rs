//! Names and labels that tie a request object to the AccountClaim the operator creates for it,
//! and to the openmcp ClusterConfig and Shoot that follow from it.
//!
//! An AccountClaim is named `<kind>.<namespace>.<name>` (`runtime.kcp-system.9c1f…`), so that
//! finding the claim of an object needs no lookup and two objects never share one. A name longer
//! than an object name may be is cut and ends in a hash of the whole. An openmcp Cluster whose
//! name is still to be generated at admission is known by the ClusterConfig name chosen for it.

use std::collections::BTreeMap;

use sha3::Shake128;
use sha3::digest::{ExtendableOutput, Update, XofReader};

use crate::api::SourceKind;
use crate::claim_state::SourceRef;

/// The whole identity of the object (`Runtime kcp-system/name`), whatever its length.
pub const ANNOTATION_SOURCE: &str = "accountpool.io/source";
/// On a source claim: when the webhook last created or handed it back for an admission (RFC 3339,
/// UTC). Written with a compare-and-swap on the claim's resourceVersion before the webhook
/// answers `Bound`, so a clean-up that read the claim earlier fails its precondition; the
/// clean-up's grace period runs from here, not from the claim's creation.
pub const ANNOTATION_ADMITTED_AT: &str = "accountpool.io/admitted-at";

/// On a served object and on the claim made for it: the `spec.tenants` rule under which the
/// webhook found the requesting user allowed (the user is known at admission only). The webhook
/// writes it on every CREATE and UPDATE of a source kind it sees, whatever the request carried,
/// and only the operator writes claims in its claim namespace; so the operator can check a claim
/// the source pass creates against the user's rule without knowing the user.
pub const ANNOTATION_TENANT_RULE: &str = "accountpool.io/tenant-rule";

/// On a served object: the AccountClaim that serves it (`<namespace>/<name>`).
pub const ANNOTATION_ACCOUNT_CLAIM: &str = "accountpool.io/account-claim";
/// On a served openmcp Cluster: the ClusterConfig that carries its binding.
pub const ANNOTATION_CLUSTER_CONFIG: &str = "accountpool.io/cluster-config";

/// On the ClusterConfigs the operator creates (openmcp's ownership labels, plus the source).
pub const LABEL_MANAGED_BY: &str = "openmcp.cloud/managed-by";
pub const LABEL_MANAGED_PURPOSE: &str = "openmcp.cloud/managed-purpose";
pub const MANAGED_BY: &str = "hap-operator";
pub const MANAGED_PURPOSE: &str = "hyperscaler-account";

/// openmcp's Gardener provider: a Cluster label that overrides the Shoot name it derives.
pub const OPENMCP_SHOOT_NAME_LABEL: &str = "gardener.clusters.openmcp.cloud/shoot-name";

/// Eight random lowercase letters and digits: valid in any name or label value, and unlikely to
/// collide (a generated ClusterConfig's name, a replica's lease identity).
pub fn random_suffix() -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    (0..8)
        .map(|_| char::from(ALPHABET[rng.random_range(0..ALPHABET.len())]))
        .collect()
}

/// Longest object name Kubernetes accepts (a DNS subdomain).
pub const MAX_NAME: usize = 253;

/// SHAKE128 of the parts joined with `/`, 5 bytes, base32 with the lowercase alphabet and no
/// padding: 8 characters. The same hash openmcp uses for Shoot names and shortened names.
pub fn short_hash(parts: &[&str]) -> String {
    let mut h = Shake128::default();
    h.update(parts.join("/").as_bytes());
    let mut out = [0u8; 5];
    h.finalize_xof().read(&mut out);
    base32_lower(&out)
}

fn base32_lower(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";
    let mut out = String::new();
    let (mut acc, mut bits) = (0u32, 0u32);
    for &b in bytes {
        acc = (acc << 8) | u32::from(b);
        bits += 8;
        while bits >= 5 {
            bits -= 5;
            out.push(char::from(ALPHABET[((acc >> bits) & 31) as usize]));
        }
    }
    if bits > 0 {
        out.push(char::from(ALPHABET[((acc << (5 - bits)) & 31) as usize]));
    }
    out
}

/// `name` if it fits in `max` characters, else its first part and `-<hash of name>`.
pub fn shorten(name: &str, max: usize) -> String {
    if name.len() <= max {
        return name.to_string();
    }
    let hash = short_hash(&[name]);
    let keep = max.saturating_sub(hash.len() + 1);
    let mut cut = keep.min(name.len());
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    let head = name[..cut].trim_end_matches(['-', '.']);
    format!("{head}-{hash}")
}

/// The AccountClaim of an object: `<kind>.<namespace>.<name>`, shortened to a valid name.
pub fn claim_name(kind: SourceKind, namespace: &str, name: &str) -> String {
    shorten(
        &format!("{}.{namespace}.{name}", kind.claim_prefix()),
        MAX_NAME,
    )
}

/// The ClusterConfig of a named openmcp Cluster: `<cluster>--hap`.
pub fn cluster_config_name(cluster: &str) -> String {
    shorten(&format!("{cluster}--hap"), MAX_NAME)
}

/// The ClusterConfig of a Cluster whose name is still to be generated: its `generateName`,
/// `hap-` and a random suffix (the caller draws it), so that it cannot collide with the
/// `<cluster>--hap` of a named Cluster.
pub fn generated_cluster_config_name(generate_name: &str, random: &str) -> String {
    shorten(&format!("{generate_name}hap-{random}"), MAX_NAME)
}

/// The Shoot openmcp's Gardener provider creates for a Cluster: the shoot-name label when set,
/// else `s-` and the hash of namespace and name.
pub fn openmcp_shoot_name(
    namespace: &str,
    name: &str,
    labels: &BTreeMap<String, String>,
) -> String {
    match labels.get(OPENMCP_SHOOT_NAME_LABEL) {
        Some(n) if !n.is_empty() => n.clone(),
        _ => format!("s-{}", short_hash(&[namespace, name])),
    }
}

/// The AccountClaim the operator creates for an object, with the release finalizer already in
/// place (which saves the leader a write before it can decide), and the rule admission allowed
/// its user under, if one did.
pub fn claim_object(
    source: &SourceRef,
    namespace: &str,
    name: &str,
    spec: &crate::api::AccountClaimSpec,
    tenant_rule: Option<&str>,
) -> serde_json::Value {
    let mut annotations = serde_json::Map::new();
    annotations.insert(ANNOTATION_SOURCE.into(), source.describe().into());
    if let Some(rule) = tenant_rule {
        annotations.insert(ANNOTATION_TENANT_RULE.into(), rule.into());
    }
    serde_json::json!({
        "apiVersion": "accountpool.io/v1alpha1",
        "kind": "AccountClaim",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": source.labels(),
            "annotations": annotations,
            "finalizers": [crate::api::CLAIM_FINALIZER],
        },
        "spec": spec,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base32_matches_the_rfc_4648_vectors_in_lowercase() {
        assert_eq!(base32_lower(b"f"), "my");
        assert_eq!(base32_lower(b"fooba"), "mzxw6ytb");
        assert_eq!(base32_lower(b"foobar"), "mzxw6ytboi");
    }

    #[test]
    fn shake128_is_the_standard_function() {
        // SHAKE128("") starts 7f 9c 2b a4 e8 (FIPS 202 test vector).
        assert_eq!(
            short_hash(&[""]),
            base32_lower(&[0x7f, 0x9c, 0x2b, 0xa4, 0xe8])
        );
    }

    #[test]
    fn claim_names_are_valid_and_unique_per_object() {
        let n = claim_name(SourceKind::Runtime, "kcp-system", "r-1");
        assert_eq!(n, "runtime.kcp-system.r-1");
        let long = "a".repeat(253);
        let a = claim_name(SourceKind::Cluster, "ns", &long);
        let b = claim_name(SourceKind::Cluster, "ns", &format!("{}b", "a".repeat(252)));
        assert!(a.len() <= MAX_NAME && b.len() <= MAX_NAME);
        assert_ne!(a, b);
        assert!(a.starts_with("cluster.ns.aaa"));
        // Namespaces have no dots, so `<kind>.<namespace>.` always ends where the name begins.
        assert_ne!(
            claim_name(SourceKind::Shoot, "a", "b.c"),
            claim_name(SourceKind::Runtime, "a", "b.c")
        );
    }

    #[test]
    fn openmcp_shoot_names_follow_the_provider() {
        let none = BTreeMap::new();
        // Vectors computed with Go's crypto/sha3.SumSHAKE128 and the same base32 alphabet, as
        // controller-utils' NameHashSHAKE128Base32 does.
        assert_eq!(openmcp_shoot_name("p", "c", &none), "s-acdvktuc");
        assert_eq!(short_hash(&["kcp-system", "my-cluster"]), "6l2cs7u4");
        let set = BTreeMap::from([(OPENMCP_SHOOT_NAME_LABEL.to_string(), "mine".to_string())]);
        assert_eq!(openmcp_shoot_name("p", "c", &set), "mine");
    }

    #[test]
    fn source_refs_round_trip_through_labels() {
        let r = SourceRef {
            source_id: "kyma".into(),
            kind: SourceKind::Runtime,
            namespace: "kcp-system".into(),
            name: Some("r1".into()),
            uid: Some("u-1".into()),
        };
        assert_eq!(SourceRef::from_labels(&r.labels()), Some(r.clone()));
        let long = SourceRef {
            name: Some("x".repeat(64)),
            ..r
        };
        assert_eq!(
            SourceRef::from_labels(&long.labels()).and_then(|r| r.name),
            None
        );
    }
}
