//! hap-operator: a Hyperscaler Account Pool for Gardener, as a Kubernetes operator.
//!
//! Pure core (`rules`, `selection`, `pools`, `status`) over plain data; `k8s` is the only module
//! that talks to the API server; `controller` wires watch caches to the core and writes results.

pub mod api;
pub mod cli;
pub mod controller;
pub mod crd;
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
pub mod sources;
pub mod status;
pub mod tenancy;
pub mod webhook;
