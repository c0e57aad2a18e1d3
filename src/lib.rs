//! hap-operator: a Hyperscaler Account Pool for Gardener, as a Kubernetes operator.
//!
//! Pure core over plain data (`api` types, `small_map`, `diag`, `claim_state`, `pools`, `tenancy`, `sources`,
//! `rules`, `selection`, `ledger`, `status`, `release`, `decision`): no kube client, no kube
//! runtime, no tokio. `k8s` is the only module that talks to an API server; `webhook` and
//! `controller` read through it, decide in the core and write through it. The layer order and
//! these rules are checked by `tests/layering.rs`. Outside tests nothing unwraps: input and API
//! answers are handled or become typed errors (`clippy::unwrap_used` and `expect_used` deny it;
//! clippy.toml lets tests unwrap).

#![deny(clippy::unwrap_used, clippy::expect_used)]

pub mod api;
pub mod claim_state;
pub mod cli;
pub mod controller;
pub mod crd;
pub mod decision;
pub mod diag;
pub mod duration;
pub mod http;
pub mod k8s;
pub mod labels;
pub mod leadership;
pub mod ledger;
pub mod metrics;
pub mod metrics_keb;
pub mod pools;
pub mod release;
pub mod rules;
pub mod secure_metrics;
pub mod selection;
pub mod small_map;
pub mod sources;
pub mod status;
pub mod tenancy;
pub mod webhook;
