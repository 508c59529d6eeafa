//! kube-sim: a Kubernetes API server emulator that real kubectl, helm and
//! kube-rs accept. Start it in-process with [`KubeSim::start`], get a
//! [`kube::Client`] or a kubeconfig, inject faults with [`KubeSim::faults`]
//! and read the request log with [`KubeSim::requests`]. Opt-in cluster
//! emulation ([`SimConfig::cluster`], [`ClusterConfig`]) adds a scheduler,
//! Deployment/ReplicaSet/Job controllers, a PV binder and kubelets that run
//! mapped images as local processes ([`KubeSim::pod_processes`],
//! [`KubeSim::signal_pod`]). See README.md for what it emulates and what it
//! does not.

// ApiError carries a whole Status body; errors are the uncommon path.
#![allow(clippy::result_large_err)]

pub mod admin;
pub mod admission;
pub mod authz;
mod bootstrap_rbac;
pub mod cluster;
pub mod controllers;
pub mod cost;
pub mod crd;
pub mod discovery;
pub mod error;
pub mod event_versions;
pub mod faults;
#[rustfmt::skip]
mod go_types;
pub mod gojson;
pub mod goquote;
pub mod http;
pub mod internal_diff;
pub mod negotiate;
pub mod netaddr;
pub mod networking;
mod node_authz;
pub mod object;
pub mod openapi;
pub mod patch;
pub mod protobuf;
pub mod quantity;
pub mod repairip;
pub mod requests;
pub mod resources;
pub mod reviews;
pub mod scale;
pub mod selector;
pub mod self_review;
pub mod spec_validation;
pub mod store;
pub mod strategy;
pub mod table;
mod tls;
pub mod validation;
pub mod watch;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use serde_json::json;
use tokio_util::sync::CancellationToken;

pub use crate::authz::Authorization;
pub use crate::cluster::{
    ClusterConfig, ImageMapping, KubeletConfig, PodProcess, PodRuntimes, Signal, SignalError,
};
pub use crate::error::ApiError;
pub use crate::faults::{FaultAction, FaultRule, Faults};
pub use crate::requests::{Counter, RequestFilter, RequestRecord, Requests};
pub use crate::store::{DeleteOptions, DeleteOutcome, ListOptions, Store, WriteOptions};

/// Errors starting or using the simulator.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("binding {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("writing kubeconfig {path}: {source}")]
    Kubeconfig {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("building a kube client: {0}")]
    Client(String),
    #[error("seeding built-in objects: {0}")]
    Seed(ApiError),
    #[error(
        "invalid user name {0:?}: must be non-empty and contain only printable ASCII without spaces"
    )]
    User(String),
    #[error("cluster emulation: {0}")]
    Cluster(String),
    #[error(
        "invalid service cluster IP range {0:?}: must be an IPv4 CIDR in canonical form with at least 4 addresses, e.g. 10.96.0.0/12"
    )]
    ServiceRange(String),
    #[error("invalid KUBE_SIM_AUTHORIZATION={0:?}: expected Node,RBAC or AlwaysAllow")]
    Authorization(String),
    #[error("client certificates: {0}")]
    Tls(String),
}

/// How to run the simulator.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// TCP port; 0 picks a free one.
    pub port: u16,
    /// Address to bind (default 127.0.0.1).
    pub bind: IpAddr,
    /// Events retained per resource for watch resumption; a watch or an
    /// Exact list from an older resourceVersion gets 410 Gone.
    pub history_window: usize,
    /// Emulate the StorageObjectInUseProtection admission plugin (adds
    /// `kubernetes.io/pv-protection`/`pvc-protection` on create).
    pub storage_protection_admission: bool,
    /// Emulate the ServiceAccount admission plugin's defaulting: a new pod
    /// without `serviceAccountName` gets `default` (and the deprecated
    /// `serviceAccount`). Off by default, as the test bed's real server
    /// runs without the plugin (no kube-controller-manager creates the
    /// `default` ServiceAccounts it requires); always on when the kubelet
    /// is emulated (its node asks for the pod's ServiceAccount's tokens,
    /// and the Node authorizer checks that the pod names it).
    pub service_account_admission: bool,
    /// Seed for every random choice (uids, generated names, cluster IPs,
    /// fault fractions).
    pub seed: u64,
    /// Where to write the admin kubeconfig; a temp file when None.
    pub kubeconfig_out: Option<PathBuf>,
    /// Requests kept in the request log ring (counters are unbounded).
    pub request_log_capacity: usize,
    /// How often watches with `allowWatchBookmarks` get a BOOKMARK.
    pub bookmark_interval: Duration,
    /// Pods bound to a node get graceful deletion (deletionTimestamp in the
    /// future, object kept) as with a kubelet; default false: pods go at once
    /// (finalizers still honoured). Always on when the kubelet is emulated.
    pub pod_graceful_deletion: bool,
    /// Emulated cluster components (scheduler, controllers, kubelets, PV
    /// binder); all off by default.
    pub cluster: ClusterConfig,
    /// What each request costs, as on a real API server (see [`cost`]);
    /// `None`: answer as fast as kube-sim can.
    pub cost_model: Option<cost::CostSpec>,
    /// Group versions not served, as `group/version` (kube-apiserver's
    /// `--runtime-config=storage.k8s.io/v1=false`): absent from discovery,
    /// 404 on their paths. E.g. `storage.k8s.io/v1` plays a Kubernetes 1.33
    /// cluster with VolumeAttributesClass at v1beta1 only; with
    /// `storage.k8s.io/v1beta1` too, a cluster without the API.
    pub disabled_group_versions: Vec<String>,
    /// kube-apiserver's `--service-cluster-ip-range` (IPv4): the CIDR of the
    /// default `kubernetes` ServiceCIDR; its first address is the
    /// `default/kubernetes` Service's cluster IP.
    pub service_cluster_ip_range: String,
    /// How requests are authorized ([`Authorization`]): `None` takes the
    /// mode from the environment variable `KUBE_SIM_AUTHORIZATION`
    /// (`Node,RBAC`; unset: [`Authorization::AlwaysAllow`]).
    pub authorization: Option<Authorization>,
    /// The resync period of the API server's ClusterIP repair loop
    /// ([`repairip`]): how long an IPAddress left without its Service may
    /// wait before the loop looks at it again (`repairLoopInterval`, 3 min,
    /// by default). Its 60 s and 5 s grace periods stay upstream's.
    pub ip_repair_interval: Duration,
    /// Serve HTTPS with a CA of kube-sim's own, and authenticate a client
    /// certificate it issued as a kube-apiserver's `--client-ca-file`
    /// does: the subject's CN is the user, its O's the groups, and `extra`
    /// holds the credential id (`X509SHA256=<SHA-256 of the certificate>`).
    /// [`KubeSim::kubeconfig_for`] then writes a client certificate, not a
    /// token (a token is still accepted without a certificate). Not with
    /// the cluster emulation (its clients speak plain HTTP).
    pub client_certificates: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            port: 0,
            bind: IpAddr::V4(Ipv4Addr::LOCALHOST),
            history_window: 10_000,
            storage_protection_admission: false,
            service_account_admission: false,
            seed: 0x6b75_6265,
            kubeconfig_out: None,
            request_log_capacity: 100_000,
            bookmark_interval: Duration::from_secs(60),
            pod_graceful_deletion: false,
            cluster: ClusterConfig::default(),
            cost_model: None,
            disabled_group_versions: Vec::new(),
            service_cluster_ip_range: DEFAULT_SERVICE_CLUSTER_IP_RANGE.to_string(),
            authorization: None,
            ip_repair_interval: repairip::DEFAULT_INTERVAL,
            client_certificates: false,
        }
    }
}

/// The service range of a kubeadm or kind cluster.
pub const DEFAULT_SERVICE_CLUSTER_IP_RANGE: &str = "10.96.0.0/12";

/// A running simulator.
pub struct KubeSim {
    state: Arc<crate::http::State>,
    addr: SocketAddr,
    kubeconfig: PathBuf,
    dir: PathBuf,
    server: Option<tokio::task::JoinHandle<()>>,
    /// With [`SimConfig::client_certificates`].
    pki: Option<Arc<crate::tls::Pki>>,
}

pub(crate) fn kubeconfig_yaml(url: &str, user: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: kube-sim\n  cluster:\n    server: {url}\nusers:\n- name: {user}\n  user:\n    token: {user}\ncontexts:\n- name: kube-sim\n  context:\n    cluster: kube-sim\n    user: {user}\n    namespace: default\ncurrent-context: kube-sim\n"
    )
}

/// A kubeconfig for `url` (HTTPS) that trusts kube-sim's CA `ca_pem` and
/// authenticates with the client certificate `pair` of `user`.
fn cert_kubeconfig_yaml(url: &str, user: &str, ca_pem: &str, pair: &crate::tls::Pair) -> String {
    use base64::Engine as _;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: kube-sim\n  cluster:\n    server: {url}\n    certificate-authority-data: {}\nusers:\n- name: {user:?}\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\ncontexts:\n- name: kube-sim\n  context:\n    cluster: kube-sim\n    user: {user:?}\n    namespace: default\ncurrent-context: kube-sim\n",
        b64(ca_pem),
        b64(&pair.cert_pem),
        b64(&pair.key_pem),
    )
}

/// The kubeconfig of `user`: a token, or with `pki` the client certificate
/// kube-sim issues `user` with the groups its token would have.
fn user_kubeconfig(
    url: &str,
    user: &str,
    pki: Option<&crate::tls::Pki>,
) -> Result<String, SimError> {
    let Some(pki) = pki else {
        return Ok(kubeconfig_yaml(url, user));
    };
    let groups: Vec<String> = crate::reviews::authenticate(user)
        .map(|(_, g)| g)
        .unwrap_or_default()
        .into_iter()
        .filter(|g| g != "system:authenticated")
        .collect();
    let pair = pki.client(user, &groups).map_err(SimError::Tls)?;
    Ok(cert_kubeconfig_yaml(url, user, &pki.ca_pem, &pair))
}

/// `user` as a file name: what is not an ASCII letter, digit or `-` as `_`.
pub(crate) fn file_safe(user: &str) -> String {
    user.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// A client from the kubeconfig file at `path`.
pub(crate) async fn client_from_kubeconfig(path: &Path) -> Result<kube::Client, String> {
    let kc = kube::config::Kubeconfig::read_from(path).map_err(|e| e.to_string())?;
    let config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .map_err(|e| e.to_string())?;
    kube::Client::try_from(config).map_err(|e| e.to_string())
}

/// The first address of an IPv4 service range (the `kubernetes` Service's
/// cluster IP), or None for a range kube-sim cannot serve.
fn first_service_ip(range: &str) -> Option<String> {
    let c = netaddr::parse_cidr_sloppy(range)?;
    if !c.is_ipv4() || c.bits > 30 || netaddr::cidr_string(&c) != range {
        return None;
    }
    let net = u32::from_be_bytes(c.ip.to4()?);
    Some(std::net::Ipv4Addr::from(net + 1).to_string())
}

fn seed_objects(
    store: &Store,
    service_range: &str,
    kubernetes_ip: &str,
    provisioner: bool,
) -> Result<(), ApiError> {
    let ns = resources::find("", "v1", "namespaces").unwrap_or(0);
    for n in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        store.seed(ns, json!({"metadata": {"name": n}}))?;
    }
    // The default ServiceCIDR exists before the first Service is allocated
    // (the controller blocks the apiserver's start until it does).
    networking::sync_default_service_cidr(store, service_range)?;
    let svc = resources::find("", "v1", "services").unwrap_or(0);
    store.seed(
        svc,
        json!({
            "metadata": {"name": "kubernetes", "namespace": "default", "labels": {"component": "apiserver", "provider": "kubernetes"}},
            "spec": {"clusterIP": kubernetes_ip, "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}]}
        }),
    )?;
    // The rbac/bootstrap-roles post-start hook.
    bootstrap_rbac::seed(store)?;
    if provisioner {
        bootstrap_rbac::seed_provisioner(store)?;
    }
    Ok(())
}

static NEXT_DIR: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl KubeSim {
    /// Binds, seeds the built-in namespaces and starts serving.
    pub async fn start(cfg: SimConfig) -> Result<KubeSim, SimError> {
        let store = Arc::new(Store::new(crate::store::StoreConfig {
            history_window: cfg.history_window,
            storage_protection: AtomicBool::new(cfg.storage_protection_admission),
            service_account_admission: cfg.service_account_admission || cfg.cluster.kubelet,
            pod_graceful_deletion: cfg.pod_graceful_deletion || cfg.cluster.kubelet,
            seed: cfg.seed,
        }));
        cfg.cluster
            .validate()
            .map_err(|e| SimError::Cluster(e.to_string()))?;
        let authorization = match cfg.authorization {
            Some(a) => a,
            None => Authorization::from_env().map_err(SimError::Authorization)?,
        };
        let kubernetes_ip = first_service_ip(&cfg.service_cluster_ip_range)
            .ok_or_else(|| SimError::ServiceRange(cfg.service_cluster_ip_range.clone()))?;
        seed_objects(
            &store,
            &cfg.service_cluster_ip_range,
            &kubernetes_ip,
            cfg.cluster.provisioner,
        )
        .map_err(SimError::Seed)?;
        let addr = SocketAddr::new(cfg.bind, cfg.port);
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| SimError::Bind { addr, source })?;
        let addr = listener
            .local_addr()
            .map_err(|source| SimError::Bind { addr, source })?;
        let state = Arc::new(crate::http::State {
            store,
            faults: Faults::new(cfg.seed),
            cost: cfg.cost_model.clone().map(cost::CostModel::new),
            requests: Requests::new(cfg.request_log_capacity),
            server_address: parking_lot::Mutex::new(addr.to_string()),
            bookmark_interval: cfg.bookmark_interval,
            shutdown: CancellationToken::new(),
            runtimes: Arc::new(PodRuntimes::default()),
            disabled_group_versions: cfg.disabled_group_versions.clone(),
            authorization,
            impersonation_modes: Default::default(),
        });
        let dir = std::env::temp_dir().join(format!(
            "kube-sim-{}-{}-{}",
            std::process::id(),
            addr.port(),
            NEXT_DIR.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).map_err(|source| SimError::Kubeconfig {
            path: dir.clone(),
            source,
        })?;
        let kubeconfig = cfg
            .kubeconfig_out
            .clone()
            .unwrap_or_else(|| dir.join("kubeconfig"));
        let pki = if cfg.client_certificates {
            if cfg.cluster.any() {
                return Err(SimError::Tls(
                    "not with the cluster emulation, whose clients speak plain HTTP".to_string(),
                ));
            }
            Some(Arc::new(
                crate::tls::Pki::generate(addr.ip()).map_err(SimError::Tls)?,
            ))
        } else {
            None
        };
        let url = if pki.is_some() {
            format!("https://{addr}")
        } else {
            format!("http://{addr}")
        };
        write_file(
            &kubeconfig,
            &user_kubeconfig(&url, "admin", pki.as_deref())?,
        )?;
        let server = tokio::spawn(serve(listener, state.clone(), pki.clone()));
        tokio::spawn(crate::controllers::run(
            state.store.clone(),
            state.shutdown.clone(),
        ));
        tokio::spawn(crate::repairip::run(
            state.store.clone(),
            cfg.ip_repair_interval,
            state.shutdown.clone(),
        ));
        tokio::spawn(crate::controllers::run_default_service_cidr(
            state.store.clone(),
            cfg.service_cluster_ip_range.clone(),
            state.shutdown.clone(),
        ));
        if cfg.cluster.any() {
            let root = cfg
                .cluster
                .kubelet_config
                .root_dir
                .clone()
                .unwrap_or_else(|| dir.join("kubelet"));
            let clients = crate::cluster::Clients {
                url: url.clone(),
                dir: dir.clone(),
            };
            if let Err(e) = crate::cluster::start(
                &cfg.cluster,
                clients,
                state.runtimes.clone(),
                root,
                state.shutdown.clone(),
            )
            .await
            {
                state.shutdown.cancel();
                return Err(SimError::Cluster(e));
            }
        }
        tracing::info!(%url, kubeconfig = %kubeconfig.display(), "kube-sim listening");
        Ok(KubeSim {
            state,
            addr,
            kubeconfig,
            dir,
            server: Some(server),
            pki,
        })
    }

    /// How this simulator authorizes requests (its config's mode, or the
    /// environment's).
    pub fn authorization(&self) -> Authorization {
        self.state.authorization
    }

    /// `http://127.0.0.1:PORT` (`https://` with
    /// [`SimConfig::client_certificates`]).
    pub fn url(&self) -> String {
        let scheme = if self.pki.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The admin kubeconfig (user "admin").
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// Writes (once) and returns a kubeconfig whose token is `user`, so that
    /// requests are attributed to that user.
    pub fn kubeconfig_for(&self, user: &str) -> Result<PathBuf, SimError> {
        if user.is_empty() || !user.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(SimError::User(user.to_string()));
        }
        let path = self.dir.join(format!("kubeconfig-{}", file_safe(user)));
        write_file(
            &path,
            &user_kubeconfig(&self.url(), user, self.pki.as_deref())?,
        )?;
        Ok(path)
    }

    /// A client authenticated as `user`.
    pub async fn try_client_as(&self, user: &str) -> Result<kube::Client, SimError> {
        let path = self.kubeconfig_for(user)?;
        client_from_kubeconfig(&path)
            .await
            .map_err(SimError::Client)
    }

    /// A client as user "admin".
    ///
    /// # Panics
    /// Only if kube-rs cannot build a client for a plain-HTTP loopback URL
    /// and a kubeconfig this crate just wrote, which is a bug, not an input
    /// condition; use [`KubeSim::try_client_as`] to handle it.
    pub async fn client(&self) -> kube::Client {
        self.client_as("admin").await
    }

    /// A client authenticated as `user` (see [`KubeSim::client`] on panics).
    pub async fn client_as(&self, user: &str) -> kube::Client {
        match self.try_client_as(user).await {
            Ok(c) => c,
            Err(e) => panic!("kube-sim: cannot build a client for {}: {e}", self.url()),
        }
    }

    pub fn faults(&self) -> Faults {
        self.state.faults.clone()
    }

    pub fn requests(&self) -> Requests {
        self.state.requests.clone()
    }

    /// In-process access to the store with full API semantics (validation,
    /// finalizers, resourceVersion, watch events), for emulated controllers
    /// such as a kubelet or scheduler. Writes made here are seen by watchers
    /// exactly like API requests (but are not in the request log).
    ///
    /// ```no_run
    /// # async fn f(sim: &kube_sim::KubeSim) -> Result<(), kube_sim::ApiError> {
    /// use kube_sim::{patch::PatchKind, resources, WriteOptions};
    /// let store = sim.store();
    /// let pods = resources::find("", "v1", "pods").expect("pods are served");
    /// // An emulated kubelet reports a pod running...
    /// store.patch(pods, "default", "web", Some("status"), PatchKind::Merge,
    ///     br#"{"status":{"phase":"Running"}}"#, &WriteOptions::manager("kubelet"))?;
    /// // ...and follows changes from a resourceVersion.
    /// let mut changed = store.subscribe(pods);
    /// let mut cursor = store.current_rv();
    /// loop {
    ///     let _ = changed.changed().await;
    ///     let Ok((events, _latest)) = store.events_since(pods, cursor) else { break };
    ///     for ev in events {
    ///         cursor = ev.rv; // ev.ty, ev.obj.value, ev.prev
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn store(&self) -> Arc<Store> {
        self.state.store.clone()
    }

    pub fn set_storage_protection_admission(&self, on: bool) {
        self.state.store.set_storage_protection(on)
    }

    /// What the emulated kubelets run (empty without kubelet emulation).
    pub fn runtimes(&self) -> Arc<PodRuntimes> {
        self.state.runtimes.clone()
    }

    /// Every pod the emulated kubelets run, with container pids, restart
    /// counts, host ports and log paths (also `GET /_sim/pods`).
    pub fn pod_processes(&self) -> Vec<PodProcess> {
        self.state.runtimes.list()
    }

    /// The pod `ns/name` as its kubelet runs it.
    pub fn pod_process(&self, ns: &str, name: &str) -> Option<PodProcess> {
        self.state.runtimes.get(ns, name)
    }

    /// The chaos hook: sends `sig` to the process of `container` (all
    /// containers when None) of pod `ns/name`; returns the pids signalled
    /// (also `POST /_sim/pods/{ns}/{name}/signal?sig=KILL&container=c`).
    pub fn signal_pod(
        &self,
        ns: &str,
        name: &str,
        container: Option<&str>,
        sig: Signal,
    ) -> Result<Vec<u32>, SignalError> {
        self.state.runtimes.signal(ns, name, container, sig)
    }

    /// Stops serving and ends every open connection and watch; emulated
    /// kubelets kill their processes.
    pub async fn shutdown(mut self) {
        self.state.shutdown.cancel();
        self.state.faults.resume();
        if let Some(s) = self.server.take() {
            let _ = s.await;
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !self.state.runtimes.list().is_empty() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Drop for KubeSim {
    fn drop(&mut self) {
        self.state.shutdown.cancel();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn write_file(path: &Path, content: &str) -> Result<(), SimError> {
    if let Some(parent) = path.parent()
        && !parent.as_os_str().is_empty()
    {
        std::fs::create_dir_all(parent).map_err(|source| SimError::Kubeconfig {
            path: path.to_path_buf(),
            source,
        })?;
    }
    std::fs::write(path, content).map_err(|source| SimError::Kubeconfig {
        path: path.to_path_buf(),
        source,
    })
}

async fn serve(
    listener: tokio::net::TcpListener,
    state: Arc<crate::http::State>,
    pki: Option<Arc<crate::tls::Pki>>,
) {
    let shutdown = state.shutdown.clone();
    let acceptor = pki
        .as_ref()
        .map(|p| tokio_rustls::TlsAcceptor::from(p.server.clone()));
    loop {
        let (stream, _) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
            _ = shutdown.cancelled() => return,
        };
        let _ = stream.set_nodelay(true);
        let st = state.clone();
        let token = shutdown.clone();
        let (acceptor, pki) = (acceptor.clone(), pki.clone());
        tokio::spawn(async move {
            let (Some(acceptor), Some(pki)) = (acceptor, pki) else {
                serve_connection(stream, st, token, None).await;
                return;
            };
            match acceptor.accept(stream).await {
                Ok(tls) => {
                    // x509's authenticator: the leaf certificate, verified
                    // against kube-sim's CA by the handshake.
                    let peer = tls
                        .get_ref()
                        .1
                        .peer_certificates()
                        .and_then(|c| c.first())
                        .and_then(|c| pki.peer(c.as_ref()));
                    serve_connection(tls, st, token, peer).await;
                }
                Err(e) => tracing::debug!(error = %e, "TLS handshake failed"),
            }
        });
    }
}

/// Serves one connection; every request carries the client certificate's
/// identity, if any.
async fn serve_connection<S>(
    stream: S,
    st: Arc<crate::http::State>,
    token: CancellationToken,
    peer: Option<crate::tls::PeerCert>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let svc = hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
        let st = st.clone();
        if let Some(p) = &peer {
            req.extensions_mut().insert(p.clone());
        }
        async move { Ok::<_, std::convert::Infallible>(crate::http::handle(st, req).await) }
    });
    let builder =
        hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
    let conn = builder.serve_connection(hyper_util::rt::TokioIo::new(stream), svc);
    tokio::select! {
        r = conn => {
            if let Err(e) = r {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        }
        _ = token.cancelled() => {}
    }
}
