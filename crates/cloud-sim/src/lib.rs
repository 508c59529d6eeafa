//! cloud-sim: an emulated cloud load-balancer API implementing the
//! protection-manager HTTP provider contract
//! (`docs/lb-provider-http-contract.md`).
//!
//! It keeps its load balancers in a JSON state file that survives restarts,
//! allocates ingress addresses from an IPv4 range, authenticates callers with
//! a bearer token, injects faults (errors, latency, hangs, garbage replies)
//! deterministically from a seed, and exposes an inventory and call counters
//! so that tests can count orphaned load balancers.
//!
//! ```no_run
//! # async fn demo() -> Result<(), cloud_sim::SimError> {
//! use cloud_sim::{CloudSim, Config};
//! let sim = CloudSim::start(Config::default().with_token("s3cret")).await?;
//! println!("load-balancer API at {}", sim.url());
//! let orphans = sim.orphans(["uid-of-a-live-service"]);
//! sim.shutdown().await?;
//! # Ok(()) }
//! ```

mod auth;
pub mod faults;
pub mod ip;
pub mod model;
mod server;
pub mod stats;
mod store;

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use auth::{Auth, TokenError};
pub use faults::{
    ErrorFault, FaultError, FaultSet, Faults, GarbageFault, HangFault, LatencyFault, OpFaults,
    Operation, RetryAfterFormat,
};
pub use ip::{IpRange, IpRangeError};
pub use model::LoadBalancer;
pub use stats::{Outcome, Stats};
pub use store::StateError;

use server::Shared;
use stats::Counters;
use store::Store;

/// How long a shutdown waits for calls in flight before it stops the server.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// How to run a simulator.
#[derive(Debug, Clone)]
pub struct Config {
    /// Address to listen on; port 0 picks a free port.
    pub listen: SocketAddr,
    /// The JSON state file; `None` keeps the state in memory only.
    pub state_file: Option<PathBuf>,
    /// fsync the state file (and its directory) before acknowledging a
    /// change (default). Without it the file is still replaced atomically
    /// and survives a crash or kill of the process, but not of the machine;
    /// benchmarks may turn it off, since fsync dominates the cost of a call.
    pub fsync: bool,
    /// Where ingress addresses come from.
    pub ip_range: IpRange,
    /// The bearer token callers must present.
    pub auth: Auth,
    /// Faults active from the start.
    pub faults: FaultSet,
    /// The `ipMode` of each reported ingress: `Some("VIP")` by default,
    /// `None` for none (a provider that predates `ipMode`; the API server
    /// then defaults it).
    pub ingress_ip_mode: Option<String>,
}

impl Default for Config {
    /// Loopback, a free port, no state file, no token, no faults, addresses
    /// from 203.0.113.0/24 (TEST-NET-3, never routed).
    fn default() -> Self {
        Self {
            listen: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            state_file: None,
            fsync: true,
            ip_range: IpRange::TEST_NET_3,
            auth: Auth::None,
            faults: FaultSet::default(),
            ingress_ip_mode: Some("VIP".to_owned()),
        }
    }
}

impl Config {
    pub fn with_listen(mut self, listen: SocketAddr) -> Self {
        self.listen = listen;
        self
    }

    pub fn with_state_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.state_file = Some(path.into());
        self
    }

    pub fn with_fsync(mut self, fsync: bool) -> Self {
        self.fsync = fsync;
        self
    }

    pub fn with_ip_range(mut self, range: IpRange) -> Self {
        self.ip_range = range;
        self
    }

    pub fn with_token(mut self, token: impl Into<String>) -> Self {
        self.auth = Auth::Token(token.into());
        self
    }

    pub fn with_token_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.auth = Auth::TokenFile(path.into());
        self
    }

    pub fn with_faults(mut self, faults: FaultSet) -> Self {
        self.faults = faults;
        self
    }

    pub fn with_ingress_ip_mode(mut self, ip_mode: Option<&str>) -> Self {
        self.ingress_ip_mode = ip_mode.map(str::to_owned);
        self
    }
}

/// Why a simulator could not start or stop cleanly.
#[derive(Debug, Error)]
pub enum SimError {
    #[error(transparent)]
    State(#[from] StateError),
    #[error(transparent)]
    Token(#[from] TokenError),
    #[error(transparent)]
    Faults(#[from] FaultError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("the HTTP server failed: {0}")]
    Serve(#[source] std::io::Error),
}

/// A running simulator. Dropping it stops the server too; `shutdown` does so
/// gracefully and reports errors.
pub struct CloudSim {
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown_tx: watch::Sender<bool>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl std::fmt::Debug for CloudSim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CloudSim")
            .field("addr", &self.addr)
            .finish()
    }
}

impl CloudSim {
    /// Loads the state, binds the listener and starts serving.
    pub async fn start(config: Config) -> Result<Self, SimError> {
        let mut store = Store::open(config.state_file.clone(), config.ip_range, config.fsync)?;
        store.set_ip_mode(config.ingress_ip_mode.clone());
        let auth = auth::Authenticator::new(config.auth.clone())?;
        let faults = Faults::new(config.faults.clone())?;
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|source| SimError::Bind {
                addr: config.listen,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| SimError::Bind {
            addr: config.listen,
            source,
        })?;
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let shared = Arc::new(Shared {
            store,
            faults,
            counters: Counters::default(),
            auth,
            shutdown: shutdown_rx.clone(),
        });
        let app = server::router(shared.clone());
        let mut signal = shutdown_rx;
        let task = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = signal.wait_for(|down| *down).await;
                })
                .await
        });
        tracing::info!(
            %addr,
            range = %config.ip_range,
            state_file = ?config.state_file,
            load_balancers = shared.store.list().len(),
            "cloud-sim listening"
        );
        Ok(Self {
            addr,
            shared,
            shutdown_tx,
            task: Some(task),
        })
    }

    /// The address the API listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL of the API, e.g. `http://127.0.0.1:41234`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The state file, if any.
    pub fn state_file(&self) -> Option<&Path> {
        self.shared.store.state_file()
    }

    /// Every load balancer, oldest first.
    pub fn inventory(&self) -> Vec<LoadBalancer> {
        self.shared.store.list()
    }

    /// One load balancer by Service UID.
    pub fn get(&self, uid: &str) -> Option<LoadBalancer> {
        self.shared.store.get(uid)
    }

    /// Load balancers whose Service UID is not among `live_service_uids`.
    pub fn orphans<'a>(
        &self,
        live_service_uids: impl IntoIterator<Item = &'a str>,
    ) -> Vec<LoadBalancer> {
        let live: BTreeSet<&str> = live_service_uids.into_iter().collect();
        self.inventory()
            .into_iter()
            .filter(|lb| !live.contains(lb.service.uid.as_str()))
            .collect()
    }

    /// The live fault configuration.
    pub fn faults(&self) -> &Faults {
        &self.shared.faults
    }

    /// Call counters, load balancer count and address pool figures.
    pub fn stats(&self) -> Stats {
        self.shared.stats()
    }

    /// Sets every call counter back to zero.
    pub fn reset_stats(&self) {
        self.shared.counters.reset();
    }

    /// Stops accepting calls, releases hanging calls, waits up to 10 s for
    /// calls in flight, and stops. Every acknowledged change is already in
    /// the state file.
    pub async fn shutdown(mut self) -> Result<(), SimError> {
        self.shutdown_tx.send_replace(true);
        let Some(mut task) = self.task.take() else {
            return Ok(());
        };
        match tokio::time::timeout(SHUTDOWN_GRACE, &mut task).await {
            Ok(Ok(Ok(()))) => Ok(()),
            Ok(Ok(Err(e))) => Err(SimError::Serve(e)),
            Ok(Err(join)) => Err(SimError::Serve(std::io::Error::other(join.to_string()))),
            Err(_) => {
                tracing::warn!("calls still running after {SHUTDOWN_GRACE:?}; stopping anyway");
                task.abort();
                Ok(())
            }
        }
    }
}

impl Drop for CloudSim {
    fn drop(&mut self) {
        self.shutdown_tx.send_replace(true);
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// Compiles the README's Rust example as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
