//! The only module that talks to the API server: watch caches, status applies, compare-and-swap
//! label writes on bindings, finalizers and events. Everything here is a thin edge around
//! kube-rs; decisions live in the pure modules.

pub mod caches;
pub mod writes;

pub use caches::{BindingCache, BindingTarget, Caches, ChangeFeed, Retargetable};
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

impl K8sError {
    /// Sorts a kube error into Conflict / NotFound / Api. A failed JSON-patch `test` comes back
    /// as 422 Invalid and means the same as a resourceVersion conflict. Older servers name the
    /// test in the message; kube-apiserver 1.35 answers with the generic message below and no
    /// causes (a validation failure of the patched object always lists its fields).
    pub fn classify(action: &'static str, what: impl Into<String>, source: kube::Error) -> Self {
        let what = what.into();
        if let kube::Error::Api(status) = &source {
            let failed_patch_test = status.code == 422
                && (status.message.contains("test")
                    || (status.message == PATCH_REJECTED
                        && status.details.as_ref().is_none_or(|d| d.causes.is_empty())));
            if status.is_conflict() || failed_patch_test {
                return K8sError::Conflict { what };
            }
            if status.is_not_found() {
                return K8sError::NotFound { what };
            }
        }
        K8sError::Api {
            action,
            what,
            source,
        }
    }

    /// Short, bounded label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            K8sError::Conflict { .. } => "conflict",
            K8sError::NotFound { .. } => "not_found",
            K8sError::Api { .. } => "api",
            K8sError::Encode { .. } => "encode",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
