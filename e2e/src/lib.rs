//! protection-e2e: the end-to-end suite of protection-manager.
//!
//! A [`harness::Harness`] brings up a cluster (kube-sim with its cluster
//! emulation and cloud-sim in-process, or a real cluster named by
//! `E2E_KUBECONFIG`), installs the chart with real helm so that the manager
//! runs exactly as the rendered Deployment says, and records what happens.
//! The scenarios in [`scenarios`] drive it the way a user would (helm,
//! kubectl, kube-rs) and return what they verified; [`chaos`] runs a churn
//! under faults while [`invariants`] are checked on the API server's event
//! order reconstructed by [`observer`].

pub mod binaries;
pub mod chaos;
pub mod cloud;
pub mod error;
pub mod harness;
pub mod invariants;
pub mod mode;
pub mod monitor;
pub mod objects;
pub mod observer;
pub mod real;
pub mod release;
pub mod scenarios;
pub mod suite;
pub mod tools;
pub mod wait;

pub use error::{Error, Result};
