//! API clients: the operator's own cluster, and the garden that serves bindings and Shoots.
//!
//! In a real landscape the garden (a virtual kube-apiserver with gardener-apiserver) is not the
//! cluster the operator, its HapConfig and its AccountClaims live in; the operator then reaches it
//! through a kubeconfig of its own (`--garden-kubeconfig`, usually a mounted Secret). Without one,
//! the operator's cluster is the garden.

use std::path::{Path, PathBuf};

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// Why a client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot read the garden kubeconfig {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("the garden kubeconfig {path} does not describe a usable cluster")]
    Config {
        path: PathBuf,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("cannot build a client from the garden kubeconfig {path}")]
    Build {
        path: PathBuf,
        #[source]
        source: kube::Error,
    },
}

/// A client for the cluster a kubeconfig file describes (its current context).
pub async fn from_kubeconfig(path: &Path) -> Result<Client, ClientError> {
    let kubeconfig = Kubeconfig::read_from(path).map_err(|source| ClientError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|source| ClientError::Config {
            path: path.to_path_buf(),
            source,
        })?;
    Client::try_from(config).map_err(|source| ClientError::Build {
        path: path.to_path_buf(),
        source,
    })
}

/// The garden client: from `garden_kubeconfig` when given, else the operator's own client.
pub async fn garden(own: &Client, garden_kubeconfig: Option<&Path>) -> Result<Client, ClientError> {
    match garden_kubeconfig {
        Some(path) => from_kubeconfig(path).await,
        None => Ok(own.clone()),
    }
}

/// The operator's own client: the in-cluster config, or `KUBECONFIG` as kubectl reads it.
pub async fn own() -> Result<Client, kube::Error> {
    Client::try_default().await
}

/// The namespace of the current kubeconfig context, if it names one (as kubectl defaults it).
pub fn kubeconfig_namespace() -> Option<String> {
    let k = Kubeconfig::read().ok()?;
    let current = k.current_context.clone()?;
    k.contexts
        .iter()
        .find(|c| c.name == current)
        .and_then(|c| c.context.as_ref()?.namespace.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_missing_garden_kubeconfig_is_named_in_the_error() {
        let path = Path::new("/nonexistent/garden.kubeconfig");
        let Err(err) = from_kubeconfig(path).await else {
            panic!("a client from a file that does not exist");
        };
        assert!(matches!(err, ClientError::Read { .. }), "{err:?}");
        assert!(err.to_string().contains("/nonexistent/garden.kubeconfig"));
    }

    #[tokio::test]
    async fn a_kubeconfig_without_a_context_is_rejected_with_its_path() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("empty.kubeconfig");
        std::fs::write(&path, "apiVersion: v1\nkind: Config\n").expect("write");
        let Err(err) = from_kubeconfig(&path).await else {
            panic!("a client from a kubeconfig without a context");
        };
        assert!(matches!(err, ClientError::Config { .. }), "{err:?}");
        assert!(err.to_string().contains("empty.kubeconfig"), "{err}");
    }
}
