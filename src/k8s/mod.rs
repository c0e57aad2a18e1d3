//! The only module that talks to an API server (the operator's cluster and the garden): watch
//! caches, the config in force, start-up and take-over reads, status applies, compare-and-swap
//! label writes on bindings, finalizers, events, the lease, TokenReview, request-source writes
//! and the CLI's read-only lists. A thin edge around kube-rs; decisions live in the pure modules.

pub mod access;
pub mod active;
pub mod caches;
pub mod claim_store;
pub mod clients;
pub mod gate;
pub mod last_good;
pub mod lean;
pub mod lease;
pub mod live;
pub mod namespaces;
pub mod observe;
pub mod params;
pub mod rate;
pub mod source_claims;
pub mod source_store;
pub mod sources;
pub mod startup;
pub mod writes;

pub use caches::{BindingCache, BindingTarget, Caches, ChangeFeed, Retargetable, SharedLedger};
pub use clients::{ClientError, Cluster};
pub use writes::Writer;

/// The message of kube-apiserver 1.35 when a JSON patch cannot be applied (a `test` failed).
const PATCH_REJECTED: &str = "the server rejected our request due to an error in our request";

/// Errors of API calls, classified once so callers can react by kind rather than by status code.
#[derive(Debug, thiserror::Error)]
pub enum K8sError {
    /// A compare-and-swap write lost: the object changed since it was read.
    #[error("conflict writing {what}: it changed since it was read")]
    Conflict { what: String },
    /// The object is gone.
    #[error("{what} not found")]
    NotFound { what: String },
    /// The API server (RBAC or an admission plugin) refused the operator's request. `message` is
    /// the server's, which names the verb, resource and namespace, or the admission rule.
    #[error("{action} {what} is forbidden: {message}")]
    Forbidden {
        action: &'static str,
        what: String,
        message: String,
    },
    /// Not sent: this replica is not (or no longer) the leader by its own clock.
    #[error("not writing {what}: {source}")]
    Fenced {
        what: String,
        #[source]
        source: crate::leadership::Fenced,
    },
    /// Any other failure of an API call.
    #[error("{action} {what} failed")]
    Api {
        action: &'static str,
        what: String,
        #[source]
        source: kube::Error,
    },
    /// A body could not be built (never expected; reported rather than panicking).
    #[error("cannot encode {what}")]
    Encode {
        what: String,
        #[source]
        source: serde_json::Error,
    },
}

/// Whether a 422 is a failed JSON-patch `test` (the write lost a compare-and-swap) rather than
/// an invalid object. kube-apiserver 1.35 answers a failed test with `PATCH_REJECTED` and no
/// causes; older servers (evanphx/json-patch) say "testing value <path> failed". A validation
/// failure always lists its fields as causes, whatever its message says — an object or a field
/// merely named "test" is no conflict.
fn is_failed_patch_test(status: &kube::core::Status) -> bool {
    let no_causes = status.details.as_ref().is_none_or(|d| d.causes.is_empty());
    let m = status.message.as_str();
    status.code == 422
        && no_causes
        && (m == PATCH_REJECTED || (m.starts_with("testing value ") && m.contains(" failed")))
}

/// Whether the request failed before it was sent: no connection could be made (refused, no
/// route, TLS handshake). Such a write certainly did not commit; treated as "outcome unknown", it
/// held the binding's ledger entry for up to two minutes after every API server restart (the
/// full chaos run: a refused Shoot's claim waited that long for its release).
fn never_sent(e: &kube::Error) -> bool {
    if gate::NotSent::of(e).is_some() {
        return true;
    }
    let kube::Error::Service(inner) = e else {
        return false;
    };
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(inner.as_ref());
    while let Some(c) = cause {
        if let Some(h) = c.downcast_ref::<hyper_util::client::legacy::Error>() {
            return h.is_connect();
        }
        cause = c.source();
    }
    false
}

impl K8sError {
    /// Sorts a kube error into Conflict / NotFound / Api.
    pub fn classify(action: &'static str, what: impl Into<String>, source: kube::Error) -> Self {
        let what = what.into();
        if let Some(gate::NotSent::Fenced(fenced)) = gate::NotSent::of(&source) {
            return K8sError::Fenced {
                what,
                source: *fenced,
            };
        }
        if let kube::Error::Api(status) = &source {
            if status.is_conflict() || is_failed_patch_test(status) {
                return K8sError::Conflict { what };
            }
            if status.is_not_found() {
                return K8sError::NotFound { what };
            }
            if status.code == 403 {
                return K8sError::Forbidden {
                    action,
                    what,
                    message: status.message.clone(),
                };
            }
        }
        K8sError::Api {
            action,
            what,
            source,
        }
    }

    /// Whether the write may have been committed although it failed: no answer (timeout,
    /// connection lost) or a server error. A refusal (4xx) or a write never sent did not commit.
    pub fn outcome_unknown(&self) -> bool {
        match self {
            K8sError::Api {
                source: kube::Error::Api(status),
                ..
            } => status.code >= 500,
            K8sError::Api { source, .. } => !never_sent(source),
            _ => false,
        }
    }

    /// Short, bounded label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            K8sError::Conflict { .. } => "conflict",
            K8sError::NotFound { .. } => "not_found",
            K8sError::Forbidden { .. } => "forbidden",
            K8sError::Fenced { .. } => "fenced",
            K8sError::Api { .. } => "api",
            K8sError::Encode { .. } => "encode",
        }
    }
}

/// What a refused binding write needs, in words for the person who fixes it: the server's own
/// message (RBAC names the verb, resource and namespace) and, for gardener-apiserver's check of
/// what a binding references (its credentials and Quotas), the permission or object that check
/// wants.
pub fn forbidden_hint(message: &str, plural: &str, namespace: &str) -> String {
    let hint = if let Some(resource) = unreadable_reference(message) {
        format!(
            "gardener-apiserver lets only callers that may `get` what a binding references update the binding: grant the operator's identity in the garden `get` on {resource} in namespace {namespace}, or in the namespace the binding's reference names (docs/install.md, RBAC)"
        )
    } else if message.contains("not found") {
        "an object this binding references (its Secret, WorkloadIdentity, InternalSecret or a Quota) does not exist, so gardener-apiserver refuses every update of the binding: restore it, or take the binding out of the pool".to_string()
    } else if message.contains("cannot patch") {
        format!(
            "grant the operator's identity in the garden `patch` on {plural} in namespace {namespace} (docs/install.md, RBAC)"
        )
    } else {
        format!(
            "check the operator's permissions on {plural} in namespace {namespace} (docs/install.md, RBAC)"
        )
    };
    format!("the garden refused the write: {message}; {hint}")
}

/// The resource gardener-apiserver's ResourceReferenceManager wanted the caller to be allowed to
/// `get`, from its refusal "<binding kind> cannot reference a <Kind> you are not allowed to read"
/// (v1.141 words Quotas in lower case). An unknown kind is named as the server wrote it.
fn unreadable_reference(message: &str) -> Option<String> {
    let (head, _) = message.split_once(" you are not allowed to read")?;
    let (_, kind) = head.rsplit_once("cannot reference a ")?;
    let resource = match kind.trim() {
        "Secret" => "secrets",
        "WorkloadIdentity" => "workloadidentities.security.gardener.cloud",
        "InternalSecret" => "internalsecrets.core.gardener.cloud",
        "quota" | "Quota" => "quotas.core.gardener.cloud",
        other => return Some(format!("the {other} it references")),
    };
    Some(resource.to_string())
}

/// A cluster whose every request is checked against a script (`hap_testkit`): the reconcile
/// unit tests' API server.
#[cfg(test)]
pub fn scripted() -> (Cluster, hap_testkit::Script) {
    let (client, script) = hap_testkit::client();
    (Cluster::from(client), script)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A write to `url` through a real client, classified as the writers classify it.
    async fn write_to(url: &str) -> K8sError {
        let config = kube::Config::new(url.parse().expect("url"));
        let client = kube::Client::try_from(config).expect("client");
        let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
            kube::Api::namespaced(client, "default");
        let patch = kube::api::Patch::Merge(serde_json::json!({"data": {"a": "b"}}));
        let err = api
            .patch("c", &kube::api::PatchParams::default(), &patch)
            .await
            .expect_err("nothing answers");
        K8sError::classify("patch", "ConfigMap default/c", err)
    }

    #[tokio::test]
    async fn a_write_no_connection_was_made_for_did_not_commit() {
        // A port nothing listens on (an API server restarting): refused before anything was sent.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("port")
            .port();
        let refused = write_to(&format!("http://127.0.0.1:{port}")).await;
        assert!(!refused.outcome_unknown(), "{refused:?}");

        // A server that reads the request and hangs up: it may have committed.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("listener");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            use tokio::io::AsyncReadExt;
            while let Ok((mut s, _)) = listener.accept().await {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
            }
        });
        let cut = write_to(&format!("http://{addr}")).await;
        assert!(cut.outcome_unknown(), "{cut:?}");
    }

    #[test]
    fn forbidden_hints_name_what_is_missing() {
        let rbac = r#"credentialsbindings.security.gardener.cloud "b1" is forbidden: User "system:serviceaccount:hap-system:hap-operator" cannot patch resource "credentialsbindings" in API group "security.gardener.cloud" in the namespace "garden-kyma""#;
        let h = forbidden_hint(rbac, "credentialsbindings", "garden-kyma");
        assert!(
            h.contains(rbac)
                && h.contains("`patch` on credentialsbindings in namespace garden-kyma"),
            "{h}"
        );
        let secret = "admission webhook \"x\" denied: CredentialsBinding cannot reference a Secret you are not allowed to read";
        let h = forbidden_hint(secret, "credentialsbindings", "garden-kyma");
        assert!(
            h.contains("`get` on secrets in namespace garden-kyma"),
            "{h}"
        );
        for (kind, resource) in [
            (
                "WorkloadIdentity",
                "workloadidentities.security.gardener.cloud",
            ),
            ("InternalSecret", "internalsecrets.core.gardener.cloud"),
            ("quota", "quotas.core.gardener.cloud"),
        ] {
            // gardener-apiserver v1.141's words, as the operator receives them.
            let refused = format!(
                r#"credentialsbindings.security.gardener.cloud "b1" is forbidden:  cannot reference a {kind} you are not allowed to read"#
            );
            let h = forbidden_hint(&refused, "credentialsbindings", "garden-kyma");
            assert!(
                h.contains(&format!("`get` on {resource} in namespace garden-kyma"))
                    && !h.contains("secrets in"),
                "{h}"
            );
        }
        let odd = "CredentialsBinding cannot reference a Token you are not allowed to read";
        let h = forbidden_hint(odd, "credentialsbindings", "g");
        assert!(h.contains("`get` on the Token it references"), "{h}");
        let gone = r#"secrets "aws-1" not found"#;
        assert!(forbidden_hint(gone, "credentialsbindings", "g").contains("does not exist"));
    }

    fn status(code: u16, message: &str, causes: usize) -> kube::Error {
        let body = serde_json::json!({
            "status": "Failure", "code": code, "reason": "Invalid", "message": message,
            "details": {"causes": (0..causes).map(|i| serde_json::json!({"field": format!("f{i}")})).collect::<Vec<_>>()},
        });
        kube::Error::Api(Box::new(serde_json::from_value(body).expect("status")))
    }

    #[test]
    fn a_failed_json_patch_test_is_a_conflict_as_kube_apiserver_1_35_words_it() {
        // Found by the chaos test: after a failover the finalizer patch's `test` failed with this
        // exact body, was taken for an API failure (warning, growing backoff) instead of a lost
        // compare-and-swap.
        let e = K8sError::classify("add finalizer to", "claim", status(422, PATCH_REJECTED, 0));
        assert!(matches!(e, K8sError::Conflict { .. }), "{e:?}");
        let e = K8sError::classify("patch", "x", status(422, "testing value /a failed", 0));
        assert!(matches!(e, K8sError::Conflict { .. }), "{e:?}");
        // A validation failure of the object stays an API error.
        let e = K8sError::classify("patch", "x", status(422, PATCH_REJECTED, 1));
        assert!(matches!(e, K8sError::Api { .. }), "{e:?}");
        let e = K8sError::classify("patch", "x", status(422, "AccountClaim is invalid", 0));
        assert!(matches!(e, K8sError::Api { .. }), "{e:?}");
    }

    #[test]
    fn a_422_that_merely_mentions_test_is_no_conflict() {
        // Any 422 whose message contained "test" was taken for a lost
        // compare-and-swap and retried at once, forever, without backoff.
        for message in [
            r#"AccountClaim.accountpool.io "test" is invalid: spec.plan: Invalid value"#,
            "latest test of the admission webhook failed",
            r#"HapConfig.accountpool.io "contest" is invalid"#,
        ] {
            for causes in [0, 1] {
                let e = K8sError::classify("patch", "x", status(422, message, causes));
                assert!(
                    matches!(e, K8sError::Api { .. }),
                    "{message} ({causes}): {e:?}"
                );
            }
        }
        // A failed test with field causes is a validation failure too.
        let e = K8sError::classify("patch", "x", status(422, "testing value /a failed", 1));
        assert!(matches!(e, K8sError::Api { .. }), "{e:?}");
    }

    #[test]
    fn only_unanswered_writes_and_server_errors_have_an_unknown_outcome() {
        let api = |code| K8sError::classify("patch", "x", status(code, "boom", 0));
        assert!(api(500).outcome_unknown() && api(504).outcome_unknown());
        assert!(!api(403).outcome_unknown() && !api(422).outcome_unknown());
        assert!(!api(409).outcome_unknown() && !api(404).outcome_unknown());
        let fenced = K8sError::Fenced {
            what: "x".into(),
            source: crate::leadership::Fenced,
        };
        assert!(!fenced.outcome_unknown());
        let io = K8sError::Api {
            action: "patch",
            what: "x".into(),
            source: kube::Error::ReadEvents(std::io::Error::other("connection reset")),
        };
        assert!(io.outcome_unknown());
    }
}
