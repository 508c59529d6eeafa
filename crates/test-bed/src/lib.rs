//! The two test beds behind one handle (dev-only, never published).
//!
//! kube-sim is fast, faultable and countable; the real control plane
//! (etcd, kube-apiserver v1.36.3 and, when asked, kube-controller-manager,
//! started by `control-plane`) is the judge. A lifecycle test written against
//! a [`Server`] runs on both with [`on_both_beds!`], so that what it asserts a
//! user sees holds on the server users run, not only on our emulator.
//!
//! What differs between the two, and how a test sees it through this crate:
//! - **Identity and RBAC.** Both beds authorize as `Node,RBAC` (kube-sim
//!   with `Authorization::NodeRbac`, unless [`Options::sim`] sets another
//!   mode). [`Server::controller_client`]
//!   grants a controller's user exactly the rules its descriptor declares
//!   (plus Events, as the chart does) on both beds, so a missing rule fails
//!   the run.
//! - **Pods.** No kubelet runs beside the real server: a pod is "scheduled,
//!   not finished" when `spec.nodeName` is set and its phase is neither
//!   Succeeded nor Failed, and deleting a scheduled pod leaves it Terminating
//!   for its grace period. [`Server::delete_pod`] deletes as a user does and
//!   then, as the kubelet would once the containers stopped, with grace 0.
//! - **Request accounting.** kube-sim's request log, or the API server's
//!   audit log, read back as the same [`Request`] rows ([`Server::mark`],
//!   [`Server::requests_since`]).

pub mod bench;

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Api, DeleteParams, PostParams};
use protection_core::controllers::PolicyRule;
use serde_json::{Value, json};

pub use control_plane;
pub use kube_sim;

use control_plane::{Config, ControlPlane};
use kube_sim::{Authorization, KubeSim, RequestFilter, SimConfig};

/// Which server a test runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bed {
    /// kube-sim, in-process.
    Sim,
    /// The real control plane: etcd + kube-apiserver v1.36.3 (+ KCM when
    /// [`Options::kcm`] says so).
    Real,
}

impl Bed {
    pub fn name(self) -> &'static str {
        match self {
            Bed::Sim => "kube-sim",
            Bed::Real => "kube-apiserver v1.36.3",
        }
    }
}

/// What to start; each field says what it means on each bed.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// The `StorageObjectInUseProtection` admission plugin: kube-sim's
    /// emulation, or the real plugin (off on the real server otherwise, as
    /// nothing would remove its finalizers without KCM).
    pub storage_protection_admission: bool,
    /// kube-sim keeps a deleted scheduled pod Terminating for its grace
    /// period, as the real server always does.
    pub pod_graceful_deletion: bool,
    /// Real server only: kube-controller-manager with these `--controllers`
    /// (which also turns the `ServiceAccount` and
    /// `StorageObjectInUseProtection` admission plugins on). A test that
    /// needs KCM runs on the real server only.
    pub kcm: Option<Vec<String>>,
    /// kube-sim settings beyond the two above (its defaults otherwise, but
    /// for `authorization`: `Authorization::NodeRbac` unless set here).
    pub sim: Option<SimConfig>,
    /// Real server only: kube-apiserver's pprof (`Config::profiling`).
    pub profiling: bool,
    /// A label for the control plane's logs and directory.
    pub name: String,
}

impl Options {
    pub fn named(name: &str) -> Options {
        Options {
            name: name.into(),
            ..Options::default()
        }
    }
}

/// One request as a server recorded it (kube-sim's request log or the
/// audit log).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Request {
    pub user: String,
    pub user_agent: String,
    pub verb: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
    pub code: u16,
    /// On the real server: when it received the request (microseconds
    /// since the Unix epoch) and how long it held it (microseconds; the
    /// audit log's received and `ResponseComplete` timestamps). kube-sim
    /// records no times.
    pub served: Option<(i64, u64)>,
}

impl Request {
    /// A write: create, update, patch, delete or deletecollection.
    pub fn is_write(&self) -> bool {
        matches!(
            self.verb.as_str(),
            "create" | "update" | "patch" | "delete" | "deletecollection"
        )
    }
}

/// A point in a server's request record ([`Server::requests_since`]):
/// kube-sim's last sequence number, or the audit log's length in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mark(pub u64);

/// A running server of either bed.
pub struct Server {
    inner: Inner,
    options: Options,
    /// Grants made so far (each is its own ClusterRole and binding).
    grants: std::sync::atomic::AtomicU32,
}

enum Inner {
    Sim(KubeSim),
    Real(Box<ControlPlane>),
}

/// helm and kubectl send no credentials over kube-sim's plain HTTP (they
/// are `system:anonymous`), where on the real bed they use the admin's
/// certificate: on an authorizing kube-sim, the group
/// `system:unauthenticated` is bound to `cluster-admin` so that they act
/// as the admin there too. Every kube-rs client sends its user's token.
async fn admin_for_go_tools(sim: &KubeSim) -> anyhow::Result<()> {
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "test-bed:helm-and-kubectl"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "system:unauthenticated"}],
    }))?;
    Api::<ClusterRoleBinding>::all(sim.try_client_as("admin").await?)
        .create(&PostParams::default(), &binding)
        .await?;
    Ok(())
}

/// How long [`Server`] waits for the real server to take up an RBAC grant
/// or create a namespace's `default` ServiceAccount.
const SETTLE: Duration = Duration::from_secs(60);

impl Server {
    /// Starts the server `bed` names, configured by `options`.
    pub async fn start(bed: Bed, options: Options) -> anyhow::Result<Server> {
        let inner = match bed {
            Bed::Sim => {
                if options.kcm.is_some() {
                    anyhow::bail!(
                        "test-bed: kube-controller-manager runs beside the real server only"
                    );
                }
                let mut cfg = SimConfig {
                    storage_protection_admission: options.storage_protection_admission,
                    pod_graceful_deletion: options.pod_graceful_deletion,
                    ..options.sim.clone().unwrap_or_default()
                };
                // As the real server: Node,RBAC, unless the test says otherwise.
                cfg.authorization.get_or_insert(Authorization::NodeRbac);
                let sim = KubeSim::start(cfg).await?;
                if sim.authorization() == Authorization::NodeRbac {
                    admin_for_go_tools(&sim).await?;
                }
                Inner::Sim(sim)
            }
            Bed::Real => {
                let name = if options.name.is_empty() {
                    "test-bed"
                } else {
                    options.name.as_str()
                };
                let mut cfg = Config::default().named(name);
                cfg.profiling = options.profiling;
                if let Some(controllers) = &options.kcm {
                    cfg = cfg.with_kcm(controllers.iter().cloned());
                }
                cfg = if options.storage_protection_admission {
                    cfg.enable_admission("StorageObjectInUseProtection")
                } else {
                    cfg.disable_admission("StorageObjectInUseProtection")
                };
                Inner::Real(Box::new(ControlPlane::start(cfg).await?))
            }
        };
        Ok(Server {
            inner,
            options,
            grants: Default::default(),
        })
    }

    pub fn bed(&self) -> Bed {
        match self.inner {
            Inner::Sim(_) => Bed::Sim,
            Inner::Real(_) => Bed::Real,
        }
    }

    pub fn is_real(&self) -> bool {
        self.bed() == Bed::Real
    }

    /// kube-sim, for what only it can do (faults, its request log's
    /// latencies, its store).
    ///
    /// # Panics
    /// On the real server: a test that calls it runs on kube-sim only.
    pub fn sim(&self) -> &KubeSim {
        match &self.inner {
            Inner::Sim(s) => s,
            Inner::Real(_) => panic!("test-bed: this step needs kube-sim, not the real server"),
        }
    }

    /// The real control plane (KCM, the audit log, restarts).
    ///
    /// # Panics
    /// On kube-sim.
    pub fn real(&self) -> &ControlPlane {
        match &self.inner {
            Inner::Real(c) => c,
            Inner::Sim(_) => panic!("test-bed: this step needs the real server, not kube-sim"),
        }
    }

    /// The admin's kubeconfig (kube-sim's `admin`; the real server's
    /// `system:masters` client certificate).
    pub fn kubeconfig_path(&self) -> &Path {
        match &self.inner {
            Inner::Sim(s) => s.kubeconfig_path(),
            Inner::Real(c) => c.kubeconfig_path(),
        }
    }

    /// An admin client.
    pub async fn client(&self) -> anyhow::Result<kube::Client> {
        Ok(match &self.inner {
            Inner::Sim(s) => s.try_client_as("admin").await?,
            Inner::Real(c) => c.client().await?,
        })
    }

    /// A client authenticated as `user`, granted nothing by this call
    /// (RBAC decides, on both beds).
    pub async fn client_as(&self, user: &str) -> anyhow::Result<kube::Client> {
        Ok(match &self.inner {
            Inner::Sim(s) => s.try_client_as(user).await?,
            Inner::Real(c) => c.client_for(user, &[]).await?,
        })
    }

    /// A client authenticated as a controller's `user`, granted `rules`
    /// cluster-wide and Events (create, patch), what the chart's ClusterRole
    /// gives a controller, and nothing else (on both beds).
    pub async fn controller_client(
        &self,
        user: &str,
        rules: &[PolicyRule],
    ) -> anyhow::Result<kube::Client> {
        let mut rules: Vec<Value> = rules
            .iter()
            .map(|r| json!({"apiGroups": r.api_groups, "resources": r.resources, "verbs": r.verbs}))
            .collect();
        rules.push(json!({"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]}));
        self.grant(user, &Value::Array(rules)).await?;
        self.client_as(user).await
    }

    /// Grants `user` the RBAC `rules` (a JSON array of PolicyRules)
    /// cluster-wide, beside what it was granted before (a ClusterRole and
    /// its ClusterRoleBinding, created through the API on both beds), and
    /// waits until the server's authorizer allows the first of them.
    pub async fn grant(&self, user: &str, rules: &Value) -> anyhow::Result<()> {
        let admin = self.client().await?;
        let n = self
            .grants
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("test-bed:{user}:{n}");
        let role: ClusterRole =
            serde_json::from_value(json!({"metadata": {"name": name}, "rules": rules}))?;
        let binding: ClusterRoleBinding = serde_json::from_value(json!({
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": user}],
        }))?;
        let roles: Api<ClusterRole> = Api::all(admin.clone());
        let bindings: Api<ClusterRoleBinding> = Api::all(admin.clone());
        roles.create(&PostParams::default(), &role).await?;
        bindings.create(&PostParams::default(), &binding).await?;
        let Some(first) = rules.as_array().and_then(|r| r.first()) else {
            return Ok(());
        };
        let text = |k: &str| first[k][0].as_str().unwrap_or_default().to_string();
        self.wait_allowed(user, &text("apiGroups"), &text("resources"), &text("verbs"))
            .await
    }

    /// Waits until the real server's authorizer allows `user` to `verb`
    /// `resource` (`plural` or `plural/subresource`) of `group` cluster-wide:
    /// RBAC takes a new binding up from its informers shortly after the
    /// write (kube-sim at once).
    pub async fn wait_allowed(
        &self,
        user: &str,
        group: &str,
        resource: &str,
        verb: &str,
    ) -> anyhow::Result<()> {
        let (resource, subresource) = resource.split_once('/').unwrap_or((resource, ""));
        let review: SubjectAccessReview = serde_json::from_value(json!({
            "spec": {"user": user, "resourceAttributes": {
                "group": group, "resource": resource, "subresource": subresource, "verb": verb,
            }}
        }))?;
        let reviews: Api<SubjectAccessReview> = Api::all(self.client().await?);
        let start = std::time::Instant::now();
        loop {
            let r = reviews.create(&PostParams::default(), &review).await?;
            if r.status.is_some_and(|s| s.allowed) {
                return Ok(());
            }
            if start.elapsed() > SETTLE {
                anyhow::bail!(
                    "test-bed: {user} is still not allowed to {verb} {resource} of group {group:?}"
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Creates namespace `ns`; where the `ServiceAccount` admission plugin
    /// runs (the real server with KCM), waits for its `default`
    /// ServiceAccount, without which no pod can be created there.
    pub async fn namespace(&self, ns: &str) -> anyhow::Result<()> {
        let client = self.client().await?;
        let api: Api<Namespace> = Api::all(client.clone());
        api.create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}}))?,
        )
        .await?;
        if self.is_real() && self.options.kcm.is_some() {
            let sas: Api<ServiceAccount> = Api::namespaced(client, ns);
            let start = std::time::Instant::now();
            while sas.get_opt("default").await?.is_none() {
                if start.elapsed() > SETTLE {
                    anyhow::bail!("test-bed: KCM never created {ns}/default");
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        Ok(())
    }

    /// Creates Node `name` (KCM's pod garbage collector deletes pods bound
    /// to a node that does not exist).
    pub async fn node(&self, name: &str) -> anyhow::Result<()> {
        let api: Api<Node> = Api::all(self.client().await?);
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"providerID": format!("sim://{name}")},
        }))?;
        api.create(&PostParams::default(), &node).await?;
        Ok(())
    }

    /// Deletes pod `ns/name` as a user does (`kubectl delete pod`) and,
    /// where it is left Terminating (a scheduled pod on the real server, or
    /// on kube-sim with graceful deletion), finishes it as the kubelet does
    /// once its containers stopped: DELETE with grace period 0.
    pub async fn delete_pod(&self, ns: &str, name: &str) -> anyhow::Result<()> {
        let pods: Api<Pod> = Api::namespaced(self.client().await?, ns);
        pods.delete(name, &DeleteParams::default()).await?;
        if pods
            .get_opt(name)
            .await?
            .is_some_and(|p| p.metadata.deletion_timestamp.is_some())
        {
            match pods
                .delete(name, &DeleteParams::default().grace_period(0))
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// The present end of the request record.
    pub fn mark(&self) -> Mark {
        match &self.inner {
            Inner::Sim(s) => Mark(s.requests().last_seq()),
            Inner::Real(c) => Mark(c.audit_log().mark()),
        }
    }

    /// Every request recorded after `mark` (resource requests and others).
    pub fn requests_since(&self, mark: Mark) -> Vec<Request> {
        match &self.inner {
            Inner::Sim(s) => s
                .requests()
                .records(&RequestFilter::default().since(mark.0))
                .into_iter()
                .map(|r| Request {
                    user: r.user,
                    user_agent: r.user_agent,
                    verb: r.verb,
                    resource: r.resource,
                    subresource: r.subresource,
                    namespace: r.namespace,
                    name: r.name,
                    code: r.code,
                    served: None,
                })
                .collect(),
            Inner::Real(c) => c
                .audit_log()
                .events_since(mark.0)
                .into_iter()
                .map(request_of)
                .collect(),
        }
    }

    /// Every request recorded after `from` and up to `to`.
    pub fn requests_between(&self, from: Mark, to: Mark) -> Vec<Request> {
        match &self.inner {
            Inner::Sim(_) => self
                .requests_since(from)
                .into_iter()
                .take((to.0.saturating_sub(from.0)) as usize)
                .collect(),
            Inner::Real(c) => {
                let bytes = std::fs::read(c.audit_log().path()).unwrap_or_default();
                let end = (to.0 as usize).min(bytes.len());
                let start = (from.0 as usize).min(end);
                String::from_utf8_lossy(&bytes[start..end])
                    .lines()
                    .filter_map(|l| serde_json::from_str::<control_plane::audit::Event>(l).ok())
                    .filter(|e| e.stage == "ResponseComplete")
                    .map(request_of)
                    .collect()
            }
        }
    }

    /// Requests by `user` after `mark` with `verb` on `resource` (no
    /// subresource).
    pub fn count(&self, user: &str, verb: &str, resource: &str, mark: Mark) -> usize {
        self.requests_since(mark)
            .iter()
            .filter(|r| {
                r.user == user
                    && r.verb == verb
                    && r.resource == resource
                    && r.subresource.is_empty()
            })
            .count()
    }

    /// Stops the server (kube-sim gracefully; the real control plane's
    /// processes are stopped when it is dropped).
    pub async fn shutdown(self) {
        match self.inner {
            Inner::Sim(s) => s.shutdown().await,
            Inner::Real(c) => drop(c),
        }
    }
}

fn request_of(e: control_plane::audit::Event) -> Request {
    let code = e.code();
    let served = e
        .served()
        .map(|(at, took)| (at.as_microsecond(), took.as_micros() as u64));
    let o = e.object_ref.unwrap_or_default();
    Request {
        user: e.user.username,
        user_agent: e.user_agent,
        verb: e.verb,
        resource: o.resource,
        subresource: o.subresource,
        namespace: o.namespace,
        name: o.name,
        code,
        served,
    }
}

/// Runs each named `async fn NAME(bed: Bed)` as two tests,
/// `NAME::kube_sim` and `NAME::real`. `cargo test ::real` runs the real
/// server's half, `cargo test -- --skip ::real` kube-sim's.
///
/// ```ignore
/// async fn a_claim_in_use_is_kept(bed: Bed) { /* ... */ }
/// test_bed::on_both_beds!(a_claim_in_use_is_kept);
/// ```
#[macro_export]
macro_rules! on_both_beds {
    ($($name:ident),+ $(,)?) => {$(
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn kube_sim() {
                super::$name($crate::Bed::Sim).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn real() {
                super::$name($crate::Bed::Real).await
            }
        }
    )+};
}
