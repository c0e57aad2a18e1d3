//! The one integration-test binary: every file here was a test binary of its own, each linking
//! the whole operator crate and compiling `support` again. One binary is built and linked once;
//! `scripts/test.sh` runs it one module at a time (`it -- <module>::`), so the tests of one
//! module still never run beside another module's, as when they were binaries of their own.
//!
//! Run one module: `cargo test --test it -- e2e_claims::`; one test: add its name after `::`.

pub mod support;

mod alerts;
mod cel_entries;
mod chaos;
mod cli;
mod cli_policy;
mod crds;
mod e2e_api_budget;
mod e2e_bad_input;
mod e2e_bindings_in_use;
mod e2e_cert_manager;
mod e2e_claims;
mod e2e_config;
mod e2e_credentials;
mod e2e_deny_tenants;
mod e2e_deploy;
mod e2e_deploy_sources;
mod e2e_dist;
mod e2e_flux;
mod e2e_gitops;
mod e2e_go_client;
mod e2e_keb_migration;
mod e2e_leader_fence;
mod e2e_lifecycle;
mod e2e_lifecycle_takeover;
mod e2e_metrics_auth;
mod e2e_plugin;
mod e2e_pods;
mod e2e_pods_callers;
mod e2e_pods_sources;
mod e2e_policy;
mod e2e_process;
mod e2e_prometheus;
mod e2e_quarantine;
mod e2e_rbac;
mod e2e_release;
mod e2e_relist;
mod e2e_safety;
mod e2e_shutdown_order;
mod e2e_singleton;
mod e2e_sources_gc;
mod e2e_sources_kyma;
mod e2e_sources_openmcp;
mod e2e_sources_paused;
mod e2e_sources_replicas;
mod e2e_sources_safety;
mod e2e_sources_shoots;
mod e2e_tenants;
mod e2e_webhook_callers;
mod keb_compat;
mod layering;
mod ordered_props;
mod rules_props;
mod seeds;
mod selection_props;
mod simulation;
mod simulation_sources;
mod sources_examples;
mod sources_props;
mod testenv;
