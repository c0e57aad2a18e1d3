//! Who a bearer token belongs to and whether that user may read a non-resource URL, asked of
//! the API server (TokenReview, then SubjectAccessReview) — the delegated check of `/metrics`.

use std::sync::Arc;

use futures::future::BoxFuture;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Client;
use kube::api::{Api, PostParams};

/// What the API server says about a token and a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Access {
    /// The token is unknown, expired or not a token.
    Unauthenticated,
    /// The user is known and may not do it.
    Forbidden {
        user: String,
    },
    Allowed {
        user: String,
    },
}

/// The review itself failed (the API server is unreachable or refused the operator).
#[derive(Debug, thiserror::Error)]
#[error("cannot {what}")]
pub struct AccessError {
    what: &'static str,
    #[source]
    source: kube::Error,
}

/// Reviews `token`, then whether its user may `verb` the non-resource `path`.
pub async fn review(
    client: &Client,
    token: &str,
    path: &str,
    verb: &str,
) -> Result<Access, AccessError> {
    let tr = TokenReview {
        spec: TokenReviewSpec {
            token: Some(token.to_string()),
            ..Default::default()
        },
        ..Default::default()
    };
    let tr = Api::<TokenReview>::all(client.clone())
        .create(&PostParams::default(), &tr)
        .await
        .map_err(|source| AccessError {
            what: "review the token (create tokenreviews)",
            source,
        })?;
    let status = tr.status.unwrap_or_default();
    let Some(user) = status.user.filter(|_| status.authenticated == Some(true)) else {
        return Ok(Access::Unauthenticated);
    };
    let name = user.username.clone().unwrap_or_default();
    let sar = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: user.username,
            groups: user.groups,
            uid: user.uid,
            extra: user.extra,
            non_resource_attributes: Some(NonResourceAttributes {
                path: Some(path.to_string()),
                verb: Some(verb.to_string()),
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let sar = Api::<SubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &sar)
        .await
        .map_err(|source| AccessError {
            what: "review the access (create subjectaccessreviews)",
            source,
        })?;
    Ok(match sar.status.map(|s| s.allowed) {
        Some(true) => Access::Allowed { user: name },
        _ => Access::Forbidden { user: name },
    })
}

/// Asks the API server about a token (the production one is [`review`]).
pub type Reviewer =
    Arc<dyn Fn(String) -> BoxFuture<'static, Result<Access, AccessError>> + Send + Sync>;

/// The reviewer backed by the API server of `cluster`.
pub fn api_reviewer(cluster: &super::Cluster) -> Reviewer {
    let client = cluster.kube().clone();
    Arc::new(move |token: String| {
        let client = client.clone();
        Box::pin(async move { review(&client, &token, "/metrics", "get").await })
    })
}
