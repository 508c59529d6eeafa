//! The test bed's real Kubernetes control plane (this project's envtest):
//! etcd 3.6 and kube-apiserver v1.36.3 on random loopback ports, with PKI
//! generated in-process, `--authorization-mode=Node,RBAC` and an audit log the
//! tests read; optionally kube-controller-manager with a chosen
//! `--controllers` list and kube-scheduler beside it, so that built-in
//! controllers really run and upstream controllers can be measured beside
//! ours.
//!
//! ```no_run
//! # async fn demo() -> Result<(), control_plane::Error> {
//! use control_plane::{Config, ControlPlane};
//! let cp = ControlPlane::start(Config::default().with_kcm(["*"])).await?;
//! let client = cp.client().await?;
//! let kubeconfig = cp.kubeconfig_path(); // for kubectl, helm, the manager
//! # Ok(()) }
//! ```
//!
//! Every process stops when the [`ControlPlane`] is dropped, and no process
//! outlives the test binary, even one that panics or is killed (see
//! [`process`]). Tests isolated by namespace can share one control plane per
//! test binary with [`ControlPlane::shared`]. The binaries are built by
//! `hack/real-k8s/build.sh` (`make real-k8s`) into a cache outside the clone,
//! on first use.

pub mod audit;
pub mod binaries;
pub mod pki;
pub mod process;

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
pub use nix::sys::signal::Signal;

pub use audit::AuditLog;
pub use binaries::{Binaries, KUBERNETES_VERSION};
use pki::{CertPair, Pki};
use process::{Proc, Spec};

/// Errors starting or driving the control plane.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("control-plane binaries: {0}")]
    Binaries(String),
    #[error("control-plane PKI: {0}")]
    Pki(String),
    #[error("control-plane files in {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{name}: {message}")]
    Process { name: String, message: String },
    #[error(
        "{name} did not become ready within {after:?}: {why}\n--- last lines of {log} ---\n{tail}"
    )]
    NotReady {
        name: String,
        after: Duration,
        why: String,
        log: PathBuf,
        tail: String,
    },
    #[error("building a client for {server}: {message}")]
    Client { server: String, message: String },
    #[error("invalid control-plane configuration: {0}")]
    Config(String),
}

/// kube-controller-manager beside the API server.
#[derive(Clone, Debug)]
pub struct Kcm {
    /// `--controllers` (e.g. `["*", "-pv-protection"]`; `*` alone is KCM's
    /// default set).
    pub controllers: Vec<String>,
    /// `--kube-api-qps` / `--kube-api-burst` (KCM's defaults 20/30 when unset).
    pub kube_api_qps: Option<u32>,
    pub kube_api_burst: Option<u32>,
    /// More flags, verbatim.
    pub extra_args: Vec<String>,
}

/// What to start.
#[derive(Clone, Debug)]
pub struct Config {
    /// `--enable-admission-plugins` (beside the default set).
    pub enable_admission_plugins: Vec<String>,
    /// `--disable-admission-plugins`.
    pub disable_admission_plugins: Vec<String>,
    /// `--feature-gates` entries (`Name=true`).
    pub feature_gates: Vec<String>,
    /// `--runtime-config` entries (`group/version=true`).
    pub runtime_config: Vec<String>,
    /// `--service-cluster-ip-range`.
    pub service_cluster_ip_range: String,
    /// More kube-apiserver flags, verbatim.
    pub apiserver_args: Vec<String>,
    /// Start kube-controller-manager.
    pub kcm: Option<Kcm>,
    /// Start kube-scheduler.
    pub scheduler: bool,
    /// Go's pprof under `/debug/pprof` (for the admin; also on with
    /// `CONTROL_PLANE_PROFILING=1`): a benchmark reads profiles there and
    /// starts each measurement after a forced garbage collection
    /// (`/debug/pprof/heap?gc=1`).
    pub profiling: bool,
    /// A label for logs and the directory name.
    pub name: String,
}

impl Default for Config {
    /// etcd and kube-apiserver alone, with the default admission plugins
    /// and NodeRestriction, but without `ServiceAccount` (no KCM creates the
    /// `default` ServiceAccounts a pod would need) and without
    /// `StorageObjectInUseProtection` (no KCM would ever remove its
    /// finalizers). [`Config::with_kcm`] turns both back on.
    fn default() -> Config {
        Config {
            enable_admission_plugins: vec!["NodeRestriction".into()],
            disable_admission_plugins: vec![
                "ServiceAccount".into(),
                "StorageObjectInUseProtection".into(),
            ],
            feature_gates: Vec::new(),
            runtime_config: Vec::new(),
            service_cluster_ip_range: "10.96.0.0/16".into(),
            apiserver_args: Vec::new(),
            kcm: None,
            scheduler: false,
            profiling: false,
            name: "cp".into(),
        }
    }
}

impl Config {
    /// With kube-controller-manager running `controllers`, and the admission
    /// plugins of a real cluster (`ServiceAccount`,
    /// `StorageObjectInUseProtection`) back on.
    pub fn with_kcm<S: Into<String>>(mut self, controllers: impl IntoIterator<Item = S>) -> Config {
        self.kcm = Some(Kcm {
            controllers: controllers.into_iter().map(Into::into).collect(),
            kube_api_qps: None,
            kube_api_burst: None,
            extra_args: Vec::new(),
        });
        self.disable_admission_plugins
            .retain(|p| p != "ServiceAccount" && p != "StorageObjectInUseProtection");
        self
    }

    /// With kube-scheduler.
    pub fn with_scheduler(mut self) -> Config {
        self.scheduler = true;
        self
    }

    /// Turns admission plugin `name` on (and off the disabled list).
    pub fn enable_admission(mut self, name: &str) -> Config {
        self.disable_admission_plugins.retain(|p| p != name);
        if !self.enable_admission_plugins.iter().any(|p| p == name) {
            self.enable_admission_plugins.push(name.into());
        }
        self
    }

    /// Turns admission plugin `name` off.
    pub fn disable_admission(mut self, name: &str) -> Config {
        self.enable_admission_plugins.retain(|p| p != name);
        if !self.disable_admission_plugins.iter().any(|p| p == name) {
            self.disable_admission_plugins.push(name.into());
        }
        self
    }

    pub fn named(mut self, name: &str) -> Config {
        self.name = name.into();
        self
    }

    /// The first address of the service range: the `kubernetes` Service's.
    fn service_ip(&self) -> Result<Ipv4Addr, Error> {
        let (net, bits) = self
            .service_cluster_ip_range
            .split_once('/')
            .ok_or_else(|| {
                Error::Config(format!(
                    "service_cluster_ip_range {:?} is not an IPv4 CIDR",
                    self.service_cluster_ip_range
                ))
            })?;
        let net: Ipv4Addr = net.parse().map_err(|_| {
            Error::Config(format!(
                "service_cluster_ip_range {:?} is not an IPv4 CIDR",
                self.service_cluster_ip_range
            ))
        })?;
        let _: u8 = bits.parse().map_err(|_| {
            Error::Config(format!(
                "service_cluster_ip_range {:?} has no prefix length",
                self.service_cluster_ip_range
            ))
        })?;
        Ok(Ipv4Addr::from(u32::from(net) + 1))
    }
}

/// The components, for [`ControlPlane::restart`] and
/// [`ControlPlane::signal`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Component {
    Etcd,
    ApiServer,
    ControllerManager,
    Scheduler,
}

impl Component {
    pub fn name(self) -> &'static str {
        match self {
            Component::Etcd => "etcd",
            Component::ApiServer => "kube-apiserver",
            Component::ControllerManager => "kube-controller-manager",
            Component::Scheduler => "kube-scheduler",
        }
    }
}

/// How long each component took from start to ready.
#[derive(Clone, Debug, Default)]
pub struct StartTimes {
    pub binaries: Duration,
    pub etcd: Duration,
    pub apiserver: Duration,
    pub kcm: Option<Duration>,
    pub scheduler: Option<Duration>,
    pub total: Duration,
}

/// A running control plane. Dropping it stops every process and removes its
/// directory (set `CONTROL_PLANE_KEEP=1` to keep the directory: logs, audit
/// log, kubeconfigs).
pub struct ControlPlane {
    config: Config,
    dir: PathBuf,
    pki: Pki,
    server: String,
    etcd_url: String,
    kubeconfig: PathBuf,
    admin: CertPair,
    admin_token: String,
    procs: Mutex<HashMap<Component, Arc<Proc>>>,
    ports: HashMap<Component, u16>,
    times: StartTimes,
}

const READY_TIMEOUT: Duration = Duration::from_secs(180);

impl ControlPlane {
    /// Starts the control plane `config` describes and waits until it is
    /// ready; prints how long each part took.
    pub async fn start(config: Config) -> Result<ControlPlane, Error> {
        let t0 = Instant::now();
        let bins = tokio::task::spawn_blocking(binaries::binaries)
            .await
            .map_err(|e| Error::Binaries(e.to_string()))??;
        let t_bins = t0.elapsed();
        let dir = new_dir(&config.name)?;
        let service_ip = config.service_ip()?;
        let pki = Pki::generate(Some(IpAddr::V4(service_ip)))?;
        let admin = pki.client("admin", &["system:masters"])?;

        let write = |name: &str, text: &str| -> Result<PathBuf, Error> {
            let p = dir.join(name);
            std::fs::write(&p, text).map_err(|source| Error::Io {
                path: p.clone(),
                source,
            })?;
            Ok(p)
        };
        let ca = pki.ca();
        let ca_crt = write("ca.crt", &ca.cert_pem)?;
        let ca_key = write("ca.key", &ca.key_pem)?;
        let srv_crt = write("apiserver.crt", &pki.serving.cert_pem)?;
        let srv_key = write("apiserver.key", &pki.serving.key_pem)?;
        let sa_key = write("sa.key", &pki.sa_key_pem)?;
        let sa_pub = write("sa.pub", &pki.sa_public_pem)?;
        let audit_policy = write("audit-policy.yaml", audit::POLICY)?;
        // The aggregation layer's front proxy, as kubeadm sets it up: the
        // API server publishes this CA in kube-system's
        // extension-apiserver-authentication, which KCM and the scheduler read.
        let proxy = pki.client("front-proxy-client", &[])?;
        let proxy_crt = write("front-proxy-client.crt", &proxy.cert_pem)?;
        let proxy_key = write("front-proxy-client.key", &proxy.key_pem)?;
        // The admin again, by a static bearer token: what a client costs the
        // server when its credentials are a token (checked once, then
        // cached) rather than a certificate (its chain verified on every
        // request).
        let admin_token = random_token()?;
        let tokens = write(
            "tokens.csv",
            &format!("{admin_token},admin-token,admin-token,\"system:masters\"\n"),
        )?;
        let s = |p: &Path| p.display().to_string();

        let mut ports = HashMap::new();
        let etcd_port = free_port()?;
        let etcd_peer = free_port()?;
        let api_port = free_port()?;
        ports.insert(Component::Etcd, etcd_port);
        ports.insert(Component::ApiServer, api_port);
        let etcd_url = format!("http://127.0.0.1:{etcd_port}");
        let server = format!("https://127.0.0.1:{api_port}");

        let mut cp = ControlPlane {
            kubeconfig: dir.join("admin.kubeconfig"),
            config: config.clone(),
            pki,
            server: server.clone(),
            etcd_url: etcd_url.clone(),
            admin,
            admin_token,
            procs: Mutex::new(HashMap::new()),
            ports: HashMap::new(),
            times: StartTimes {
                binaries: t_bins,
                ..Default::default()
            },
            dir: dir.clone(),
        };
        std::fs::write(&cp.kubeconfig, cp.kubeconfig_yaml("admin", &cp.admin, None)).map_err(
            |source| Error::Io {
                path: cp.kubeconfig.clone(),
                source,
            },
        )?;

        // etcd
        let t = Instant::now();
        let peer = format!("http://127.0.0.1:{etcd_peer}");
        let etcd = Proc::start(Spec {
            name: "etcd".into(),
            program: bins.etcd(),
            args: vec![
                "--name=default".into(),
                format!("--data-dir={}", s(&dir.join("etcd-data"))),
                format!("--listen-client-urls={etcd_url}"),
                format!("--advertise-client-urls={etcd_url}"),
                format!("--listen-peer-urls={peer}"),
                format!("--initial-advertise-peer-urls={peer}"),
                format!("--initial-cluster=default={peer}"),
                // A test bed: no fsync (etcd's own test setting), small logs.
                "--unsafe-no-fsync=true".into(),
                "--log-level=warn".into(),
                "--quota-backend-bytes=8589934592".into(),
            ],
            env: vec![("ETCD_UNSUPPORTED_ARCH".into(), String::new())],
            log: dir.join("etcd.log"),
        })?;
        let etcd = Arc::new(etcd);
        cp.insert(Component::Etcd, etcd.clone());
        wait_http(&etcd, &format!("{etcd_url}/health"), None, |body| {
            body.contains("\"health\":\"true\"")
        })
        .await?;
        cp.times.etcd = t.elapsed();

        // kube-apiserver
        let t = Instant::now();
        let mut args = vec![
            format!("--etcd-servers={etcd_url}"),
            "--bind-address=127.0.0.1".into(),
            "--advertise-address=127.0.0.1".into(),
            format!("--secure-port={api_port}"),
            format!("--tls-cert-file={}", s(&srv_crt)),
            format!("--tls-private-key-file={}", s(&srv_key)),
            format!("--client-ca-file={}", s(&ca_crt)),
            "--authorization-mode=Node,RBAC".into(),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
            format!("--service-account-key-file={}", s(&sa_pub)),
            format!("--token-auth-file={}", s(&tokens)),
            format!("--service-account-signing-key-file={}", s(&sa_key)),
            format!(
                "--service-cluster-ip-range={}",
                config.service_cluster_ip_range
            ),
            format!("--audit-policy-file={}", s(&audit_policy)),
            format!("--audit-log-path={}", s(&dir.join("audit.log"))),
            "--audit-log-format=json".into(),
            "--audit-log-mode=blocking".into(),
            "--audit-log-maxsize=0".into(),
            "--allow-privileged=true".into(),
            format!("--requestheader-client-ca-file={}", s(&ca_crt)),
            "--requestheader-allowed-names=front-proxy-client".into(),
            "--requestheader-username-headers=X-Remote-User".into(),
            "--requestheader-group-headers=X-Remote-Group".into(),
            "--requestheader-extra-headers-prefix=X-Remote-Extra-".into(),
            format!("--proxy-client-cert-file={}", s(&proxy_crt)),
            format!("--proxy-client-key-file={}", s(&proxy_key)),
            // The `kubernetes` Service cannot have a loopback endpoint
            // (Endpoints validation refuses 127.0.0.0/8); pods of the process
            // kubelet reach the server at its loopback address directly.
            "--endpoint-reconciler-type=none".into(),
            format!("--cert-dir={}", s(&dir.join("apiserver-certs"))),
            // `Config::profiling` or `CONTROL_PLANE_PROFILING=1`: Go's pprof
            // under /debug/pprof (for the admin), to see where the server's
            // time goes in a benchmark.
            format!(
                "--profiling={}",
                config.profiling || std::env::var_os("CONTROL_PLANE_PROFILING").is_some()
            ),
        ];
        if !config.enable_admission_plugins.is_empty() {
            args.push(format!(
                "--enable-admission-plugins={}",
                config.enable_admission_plugins.join(",")
            ));
        }
        if !config.disable_admission_plugins.is_empty() {
            args.push(format!(
                "--disable-admission-plugins={}",
                config.disable_admission_plugins.join(",")
            ));
        }
        if !config.feature_gates.is_empty() {
            args.push(format!(
                "--feature-gates={}",
                config.feature_gates.join(",")
            ));
        }
        if !config.runtime_config.is_empty() {
            args.push(format!(
                "--runtime-config={}",
                config.runtime_config.join(",")
            ));
        }
        args.extend(config.apiserver_args.iter().cloned());
        let api = Arc::new(Proc::start(Spec {
            name: "kube-apiserver".into(),
            program: bins.kube_apiserver(),
            args,
            env: Vec::new(),
            log: dir.join("kube-apiserver.log"),
        })?);
        cp.insert(Component::ApiServer, api.clone());
        cp.wait_apiserver_ready(&api).await?;
        cp.times.apiserver = t.elapsed();

        // kube-controller-manager
        if let Some(kcm) = &config.kcm {
            let t = Instant::now();
            let port = free_port()?;
            ports.insert(Component::ControllerManager, port);
            let kc = cp.write_kubeconfig_for(
                "kube-controller-manager",
                "system:kube-controller-manager",
                &[],
            )?;
            let mut args = vec![
                format!("--kubeconfig={}", s(&kc)),
                format!("--authentication-kubeconfig={}", s(&kc)),
                format!("--authorization-kubeconfig={}", s(&kc)),
                "--bind-address=127.0.0.1".into(),
                format!("--secure-port={port}"),
                format!("--cert-dir={}", s(&dir.join("kcm-certs"))),
                "--leader-elect=false".into(),
                format!("--controllers={}", kcm.controllers.join(",")),
                "--use-service-account-credentials=true".into(),
                format!("--service-account-private-key-file={}", s(&sa_key)),
                format!("--root-ca-file={}", s(&ca_crt)),
                format!("--cluster-signing-cert-file={}", s(&ca_crt)),
                format!("--cluster-signing-key-file={}", s(&ca_key)),
                format!(
                    "--service-cluster-ip-range={}",
                    config.service_cluster_ip_range
                ),
            ];
            if let Some(q) = kcm.kube_api_qps {
                args.push(format!("--kube-api-qps={q}"));
            }
            if let Some(b) = kcm.kube_api_burst {
                args.push(format!("--kube-api-burst={b}"));
            }
            args.extend(kcm.extra_args.iter().cloned());
            let p = Arc::new(Proc::start(Spec {
                name: "kube-controller-manager".into(),
                program: bins.kube_controller_manager(),
                args,
                env: Vec::new(),
                log: dir.join("kube-controller-manager.log"),
            })?);
            cp.insert(Component::ControllerManager, p.clone());
            wait_http(
                &p,
                &format!("https://127.0.0.1:{port}/healthz"),
                None,
                |b| b.trim() == "ok",
            )
            .await?;
            if runs_service_accounts(&kcm.controllers) {
                cp.wait_default_service_account(&p).await?;
            }
            cp.times.kcm = Some(t.elapsed());
        }

        // kube-scheduler
        if config.scheduler {
            let t = Instant::now();
            let port = free_port()?;
            ports.insert(Component::Scheduler, port);
            let kc = cp.write_kubeconfig_for("kube-scheduler", "system:kube-scheduler", &[])?;
            let p = Arc::new(Proc::start(Spec {
                name: "kube-scheduler".into(),
                program: bins.kube_scheduler(),
                args: vec![
                    format!("--kubeconfig={}", s(&kc)),
                    format!("--authentication-kubeconfig={}", s(&kc)),
                    format!("--authorization-kubeconfig={}", s(&kc)),
                    "--bind-address=127.0.0.1".into(),
                    format!("--secure-port={port}"),
                    format!("--cert-dir={}", s(&dir.join("scheduler-certs"))),
                    "--leader-elect=false".into(),
                ],
                env: Vec::new(),
                log: dir.join("kube-scheduler.log"),
            })?);
            cp.insert(Component::Scheduler, p.clone());
            wait_http(
                &p,
                &format!("https://127.0.0.1:{port}/healthz"),
                None,
                |b| b.trim() == "ok",
            )
            .await?;
            cp.times.scheduler = Some(t.elapsed());
        }
        cp.ports = ports;
        cp.times.total = t0.elapsed();
        eprintln!("control-plane: {}", cp.describe_start());
        Ok(cp)
    }

    /// One control plane per test binary and `name`, started by the first
    /// test that asks with `config()`; tests sharing it isolate themselves by
    /// namespace. Its processes end with the test binary.
    pub async fn shared(
        name: &str,
        config: impl FnOnce() -> Config,
    ) -> Result<Arc<ControlPlane>, Error> {
        type Cell = Arc<tokio::sync::OnceCell<Arc<ControlPlane>>>;
        static SHARED: OnceLock<Mutex<HashMap<String, Cell>>> = OnceLock::new();
        let cell: Cell = SHARED
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(name.to_string())
            .or_default()
            .clone();
        cell.get_or_try_init(|| async {
            ControlPlane::start(config().named(name))
                .await
                .map(Arc::new)
        })
        .await
        .cloned()
    }

    /// The API server's URL (`https://127.0.0.1:PORT`).
    pub fn server_url(&self) -> &str {
        &self.server
    }

    /// etcd's client URL.
    pub fn etcd_url(&self) -> &str {
        &self.etcd_url
    }

    /// The admin kubeconfig (user `admin` in `system:masters`).
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// The control plane's directory: logs, audit log, kubeconfigs, certs.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The CA certificate (PEM) every certificate chains to.
    pub fn ca_pem(&self) -> &str {
        &self.pki.ca_cert_pem
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn start_times(&self) -> &StartTimes {
        &self.times
    }

    /// The API server's audit log.
    pub fn audit_log(&self) -> AuditLog {
        AuditLog::new(self.dir.join("audit.log"))
    }

    /// The log file of `component`.
    pub fn log_path(&self, component: Component) -> PathBuf {
        self.dir.join(format!("{}.log", component.name()))
    }

    /// The port `component` serves on (etcd: its client port).
    pub fn port(&self, component: Component) -> Option<u16> {
        self.ports.get(&component).copied()
    }

    /// The process id of `component`, while it runs.
    pub fn pid(&self, component: Component) -> Option<u32> {
        self.proc(component).and_then(|p| p.pid())
    }

    /// An admin client (`system:masters`). Each call builds a new client, so
    /// that tests on their own runtimes never share connections.
    pub async fn client(&self) -> Result<kube::Client, Error> {
        self.client_from(&self.kubeconfig_yaml("admin", &self.admin, None))
            .await
    }

    /// An admin client (`system:masters`, as `admin-token`) that
    /// authenticates with a static bearer token instead of a certificate.
    pub async fn token_client(&self) -> Result<kube::Client, Error> {
        self.client_with_token(&self.admin_token).await
    }

    /// A client that authenticates with the bearer `token` (e.g. a
    /// ServiceAccount's, from the TokenRequest API).
    pub async fn client_with_token(&self, token: &str) -> Result<kube::Client, Error> {
        self.client_from(&self.kubeconfig_yaml("token", &self.admin, Some(token)))
            .await
    }

    /// A client authenticated by a client certificate as `user` in `groups`
    /// (at most two: e.g. `system:node:n1` in `system:nodes`).
    pub async fn client_for(&self, user: &str, groups: &[&str]) -> Result<kube::Client, Error> {
        let pair = self.pki.client(user, groups)?;
        self.client_from(&self.kubeconfig_yaml(user, &pair, None))
            .await
    }

    /// Writes a kubeconfig for `user` in `groups` (a client certificate) and
    /// returns its path (`<dir>/<file>.kubeconfig`).
    pub fn write_kubeconfig_for(
        &self,
        file: &str,
        user: &str,
        groups: &[&str],
    ) -> Result<PathBuf, Error> {
        let pair = self.pki.client(user, groups)?;
        let path = self.dir.join(format!("{file}.kubeconfig"));
        std::fs::write(&path, self.kubeconfig_yaml(user, &pair, None)).map_err(|source| {
            Error::Io {
                path: path.clone(),
                source,
            }
        })?;
        Ok(path)
    }

    /// Writes a kubeconfig that authenticates with a bearer `token` (e.g. a
    /// ServiceAccount token from the TokenRequest API).
    pub fn write_token_kubeconfig(&self, file: &str, token: &str) -> Result<PathBuf, Error> {
        let path = self.dir.join(format!("{file}.kubeconfig"));
        let yaml = self.kubeconfig_yaml(file, &self.admin, Some(token));
        std::fs::write(&path, yaml).map_err(|source| Error::Io {
            path: path.clone(),
            source,
        })?;
        Ok(path)
    }

    /// Sends `signal` to `component` (SIGSTOP/SIGCONT for a stall, SIGKILL
    /// for a crash).
    pub fn signal(&self, component: Component, signal: Signal) -> Result<(), Error> {
        self.proc(component)
            .ok_or_else(|| not_started(component))?
            .signal(signal)
    }

    /// Stops `component` (SIGTERM, then SIGKILL after 10 s).
    pub fn stop(&self, component: Component) -> Result<(), Error> {
        self.proc(component)
            .ok_or_else(|| not_started(component))?
            .stop(Duration::from_secs(10));
        Ok(())
    }

    /// Restarts `component` with the same flags and port (etcd keeps its
    /// data) and waits until it is ready again.
    pub async fn restart(&self, component: Component) -> Result<Duration, Error> {
        let t = Instant::now();
        let p = self.proc(component).ok_or_else(|| not_started(component))?;
        p.restart()?;
        match component {
            Component::Etcd => {
                wait_http(&p, &format!("{}/health", self.etcd_url), None, |b| {
                    b.contains("\"health\":\"true\"")
                })
                .await?
            }
            Component::ApiServer => self.wait_apiserver_ready(&p).await?,
            Component::ControllerManager | Component::Scheduler => {
                let port = self.port(component).unwrap_or_default();
                wait_http(
                    &p,
                    &format!("https://127.0.0.1:{port}/healthz"),
                    None,
                    |b| b.trim() == "ok",
                )
                .await?
            }
        }
        Ok(t.elapsed())
    }

    /// `Some(status)` if `component` has exited on its own.
    pub fn exited(&self, component: Component) -> Option<String> {
        self.proc(component).and_then(|p| p.exited())
    }

    fn describe_start(&self) -> String {
        let t = &self.times;
        let mut s = format!(
            "{} ready in {:.1}s (binaries {:.1}s, etcd {:.1}s, kube-apiserver {:.1}s",
            self.config.name,
            t.total.as_secs_f64(),
            t.binaries.as_secs_f64(),
            t.etcd.as_secs_f64(),
            t.apiserver.as_secs_f64()
        );
        if let Some(k) = t.kcm {
            s += &format!(", kube-controller-manager {:.1}s", k.as_secs_f64());
        }
        if let Some(k) = t.scheduler {
            s += &format!(", kube-scheduler {:.1}s", k.as_secs_f64());
        }
        s += &format!(") at {} in {}", self.server, self.dir.display());
        s
    }

    fn insert(&self, c: Component, p: Arc<Proc>) {
        self.procs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(c, p);
    }

    fn proc(&self, c: Component) -> Option<Arc<Proc>> {
        self.procs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&c)
            .cloned()
    }

    fn kubeconfig_yaml(&self, user: &str, pair: &CertPair, token: Option<&str>) -> String {
        let auth = match token {
            Some(t) => format!("    token: {t}\n"),
            None => format!(
                "    client-certificate-data: {}\n    client-key-data: {}\n",
                B64.encode(&pair.cert_pem),
                B64.encode(&pair.key_pem)
            ),
        };
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: real-k8s\n  cluster:\n    server: {}\n    certificate-authority-data: {}\nusers:\n- name: {user:?}\n  user:\n{auth}contexts:\n- name: real-k8s\n  context:\n    cluster: real-k8s\n    user: {user:?}\n    namespace: default\ncurrent-context: real-k8s\n",
            self.server,
            B64.encode(&self.pki.ca_cert_pem),
        )
    }

    async fn client_from(&self, yaml: &str) -> Result<kube::Client, Error> {
        let err = |message: String| Error::Client {
            server: self.server.clone(),
            message,
        };
        let kc = kube::config::Kubeconfig::from_yaml(yaml).map_err(|e| err(e.to_string()))?;
        let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .map_err(|e| err(e.to_string()))?;
        kube::Client::try_from(config).map_err(|e| err(e.to_string()))
    }

    fn reqwest_admin(&self) -> Result<reqwest::Client, Error> {
        let err = |m: String| Error::Client {
            server: self.server.clone(),
            message: m,
        };
        let id = reqwest::Identity::from_pem(
            format!("{}{}", self.admin.cert_pem, self.admin.key_pem).as_bytes(),
        )
        .map_err(|e| err(e.to_string()))?;
        let ca = reqwest::Certificate::from_pem(self.pki.ca_cert_pem.as_bytes())
            .map_err(|e| err(e.to_string()))?;
        reqwest::Client::builder()
            .use_rustls_tls()
            .identity(id)
            .add_root_certificate(ca)
            .timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| err(e.to_string()))
    }

    async fn wait_apiserver_ready(&self, p: &Proc) -> Result<(), Error> {
        let client = self.reqwest_admin()?;
        wait_http(p, &format!("{}/readyz", self.server), Some(client), |b| {
            b.trim() == "ok"
        })
        .await
    }

    async fn wait_default_service_account(&self, p: &Proc) -> Result<(), Error> {
        let client = self.reqwest_admin()?;
        wait_http(
            p,
            &format!(
                "{}/api/v1/namespaces/default/serviceaccounts/default",
                self.server
            ),
            Some(client),
            |b| b.contains("\"kind\":\"ServiceAccount\""),
        )
        .await
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        let procs: Vec<(Component, Arc<Proc>)> = self
            .procs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain()
            .collect();
        // The clients first, the servers last.
        for c in [
            Component::Scheduler,
            Component::ControllerManager,
            Component::ApiServer,
            Component::Etcd,
        ] {
            if let Some((_, p)) = procs.iter().find(|(k, _)| *k == c) {
                p.stop(Duration::from_secs(5));
            }
        }
        if std::env::var_os("CONTROL_PLANE_KEEP").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        } else {
            eprintln!("control-plane: kept {}", self.dir.display());
        }
    }
}

fn not_started(c: Component) -> Error {
    Error::Process {
        name: c.name().into(),
        message: "not started in this control plane".into(),
    }
}

fn runs_service_accounts(controllers: &[String]) -> bool {
    let on = |n: &str| controllers.iter().any(|c| c == n);
    let off = |n: &str| controllers.iter().any(|c| c == &format!("-{n}"));
    (on("*") && !off("serviceaccount-controller") && !off("serviceaccount"))
        || on("serviceaccount-controller")
        || on("serviceaccount")
}

/// Polls `url` until `ok(body)` on a 200, failing early when the process
/// exits, and with its log's tail after [`READY_TIMEOUT`].
async fn wait_http(
    p: &Proc,
    url: &str,
    client: Option<reqwest::Client>,
    ok: impl Fn(&str) -> bool,
) -> Result<(), Error> {
    let client = match client {
        Some(c) => c,
        None => reqwest::Client::builder()
            .use_rustls_tls()
            .danger_accept_invalid_certs(true)
            .timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| Error::Client {
                server: url.into(),
                message: e.to_string(),
            })?,
    };
    let start = Instant::now();
    let mut last = String::from("no answer yet");
    loop {
        if let Some(status) = p.exited() {
            return Err(Error::NotReady {
                name: p.spec.name.clone(),
                after: start.elapsed(),
                why: format!("it exited ({status}); last answer from {url}: {last}"),
                log: p.spec.log.clone(),
                tail: p.log_tail(40),
            });
        }
        match client.get(url).send().await {
            Ok(r) => {
                let code = r.status();
                let body = r.text().await.unwrap_or_default();
                if code.is_success() && ok(&body) {
                    return Ok(());
                }
                last = format!("{code}: {}", body.chars().take(400).collect::<String>());
            }
            Err(e) => last = e.to_string(),
        }
        if start.elapsed() > READY_TIMEOUT {
            return Err(Error::NotReady {
                name: p.spec.name.clone(),
                after: start.elapsed(),
                why: format!("last answer from {url}: {last}"),
                log: p.spec.log.clone(),
                tail: p.log_tail(40),
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A port nobody listens on now, outside the range outgoing connections
/// take theirs from: a component restarts on its port (`restart`), and
/// kube-apiserver's own reconnections to a restarting etcd could otherwise
/// hold it then.
fn free_port() -> Result<u16, Error> {
    free_port::free_port().map_err(|source| Error::Io {
        path: "a free port".into(),
        source,
    })
}

/// A new directory for one control plane: `$TMPDIR/real-k8s-<pid>-<name>-<n>`.
/// Directories left by test binaries that no longer run are removed first.
fn new_dir(name: &str) -> Result<PathBuf, Error> {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let tmp = std::env::temp_dir();
    remove_stale_dirs(&tmp);
    let pid = std::process::id();
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let safe: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let dir = tmp.join(format!("real-k8s-{pid}-{safe}-{n}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|source| Error::Io {
        path: dir.clone(),
        source,
    })?;
    Ok(dir)
}

fn remove_stale_dirs(tmp: &Path) {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let Some(rest) = name.strip_prefix("real-k8s-") else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// 32 random bytes from the kernel, hex: a bearer token.
fn random_token() -> Result<String, Error> {
    use std::io::Read;
    let path = PathBuf::from("/dev/urandom");
    let mut bytes = [0u8; 32];
    std::fs::File::open(&path)
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|source| Error::Io { path, source })?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}
