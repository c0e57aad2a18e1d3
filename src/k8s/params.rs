//! The request parameters that name a field manager, built in one place: server-side apply
//! (always forced: the operator owns what it applies), merge and JSON patches, and creates.
//! Callers pass the manager (`api::FIELD_MANAGER`, `api::SOURCE_FIELD_MANAGER`, the lease's).

use kube::api::{PatchParams, PostParams};

/// A forced server-side apply as `manager`.
pub fn apply(manager: &str) -> PatchParams {
    PatchParams::apply(manager).force()
}

/// A merge or JSON patch as `manager`.
pub fn patch(manager: &str) -> PatchParams {
    PatchParams {
        field_manager: Some(manager.into()),
        ..Default::default()
    }
}

/// A create as `manager`.
pub fn post(manager: &str) -> PostParams {
    PostParams {
        dry_run: false,
        field_manager: Some(manager.into()),
    }
}
