//! The only module that talks to the API server: watch caches, status applies, compare-and-swap
//! label writes on bindings, finalizers and events. Everything here is a thin edge around
//! kube-rs; decisions live in the pure modules.

pub mod caches;
pub mod writes;

pub use caches::{BindingCache, BindingTarget, Caches, ChangeFeed, Retargetable};
pub use writes::Writer;

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
    /// as 422 Invalid and means the same as a resourceVersion conflict.
    pub fn classify(action: &'static str, what: impl Into<String>, source: kube::Error) -> Self {
        let what = what.into();
        if let kube::Error::Api(status) = &source {
            if status.is_conflict() || (status.code == 422 && status.message.contains("test")) {
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
