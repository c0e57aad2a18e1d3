//! hap-core: the decisions of hap-operator over plain data, with no way to call an API server.
//!
//! From the bottom up: plain data (`api` types, `duration`, `small_map`, `labels`), validation
//! diagnostics and what a claim's status says (`diag`, `claim_state`), the inventory and tenant
//! policy (`pools`, `tenancy`), request sources (`sources`), the rules engine (`rules`),
//! `selection`, the ledger of in-flight writes (`ledger`), desired statuses and release decisions
//! (`status`, `release`), and what one claim reconcile does (`decision`). This crate depends on
//! no kube client, no kube runtime and no tokio, so the compiler keeps the core from the client;
//! the operator crate reads and writes through its `k8s` module and decides here. Outside tests
//! nothing unwraps: input becomes typed errors.

#![deny(clippy::unwrap_used, clippy::expect_used)]

pub mod api;
pub mod claim_state;
pub mod decision;
pub mod diag;
pub mod duration;
pub mod labels;
pub mod ledger;
pub mod pools;
pub mod release;
pub mod rules;
pub mod selection;
pub mod small_map;
pub mod sources;
pub mod status;
pub mod tenancy;
