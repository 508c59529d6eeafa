//! pv-protection and pvc-protection against kube-sim: the ported upstream
//! storage e2e scenarios, gates, request accounting, live-LIST batching,
//! watch gaps, events, retries and the upstream profile.

mod support;

mod accounting;
mod batching;
mod e2e;
mod fight;
mod gates;
mod lifecycle;
mod profile;
mod retries;
mod watch_gap;
