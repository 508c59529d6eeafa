//! pv-protection and pvc-protection against kube-sim: the ported upstream
//! storage e2e scenarios, gates, request accounting, live-LIST batching,
//! watch gaps, events, retries and the upstream profile. The e2e scenarios,
//! the accounting of writes and both profiles also run against the real
//! kube-apiserver v1.36.3 (`::real`), and `upstream_kcm` runs ours in place of
//! KCM's own controllers beside the real KCM.

mod support;

mod accounting;
mod batching;
mod e2e;
mod fight;
mod gates;
mod lifecycle;
mod profile;
mod retries;
mod upstream_kcm;
mod watch_gap;
