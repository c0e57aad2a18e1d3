//! hap-operator: a Hyperscaler Account Pool for Gardener, as a Kubernetes operator.
//!
//! The pure core is the crate `hap-core` (crates/hap-core): types, rules, selection, pools, the
//! claim and release decisions, with no kube client, no kube runtime and no tokio in its
//! dependencies. Here, `k8s` is the only module that talks to an API server; `webhook` and
//! `controller` read through it, decide in the core and write through it. The layer order of
//! this crate and what the compiler cannot say are checked by `tests/it/layering.rs`. Outside tests
//! nothing unwraps: input and API answers are handled or become typed errors
//! (`clippy::unwrap_used` and `expect_used` deny it; clippy.toml lets tests unwrap).

#![deny(clippy::unwrap_used, clippy::expect_used)]

// The core's modules under the paths the operator and its users name (`hap_operator::rules`).
pub use hap_core::{
    api, claim_state, decision, diag, duration, labels, ledger, pools, release, rules, selection,
    small_map, sources, status, tenancy,
};

pub mod cli;
pub mod connections;
pub mod controller;
pub mod crd;
pub mod http;
pub mod k8s;
pub mod leadership;
pub mod logs;
pub mod metrics;
pub mod metrics_keb;
pub mod secure_metrics;
pub mod webhook;
