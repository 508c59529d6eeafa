//! The chart against kube-sim with real helm 3.18 and 4.1: install, upgrade
//! (flipping a feature gate), rollback and uninstall, checking the Deployment
//! kube-sim stores after each step; then the manager binary started exactly as
//! the stored Deployment says (a stand-in for the kubelet), which must become
//! ready, do its work, and make only requests the chart's RBAC allows.

mod chart_support;
mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use chart_support::rbac::{Access, Authorizer};
use chart_support::{Helm, HelmVersion, Process, chart_dir, container_args, flags};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{
    Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod, Secret, Service, ServiceAccount,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use kube_sim::{KubeSim, RequestFilter, SimConfig};
use serde_json::{Value, json};

const NS: &str = "pm-system";
const RELEASE: &str = "pm";
const FULLNAME: &str = "pm-protection-manager";
const LB_CLASS: &str = "protection-manager.io/load-balancer";

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

fn chart() -> String {
    chart_dir().to_string_lossy().into_owned()
}

/// helm with the given args (off the runtime's workers, which serve
/// kube-sim); panics with helm's output on failure.
async fn helm_ok(helm: &Helm, args: &[&str]) -> String {
    let out = helm_run(helm, args).await;
    assert!(
        out.status.success(),
        "{:?} {args:?} failed:\n{}{}",
        helm.version,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// helm's stderr for a command that must fail.
async fn helm_err(helm: &Helm, args: &[&str]) -> String {
    let out = helm_run(helm, args).await;
    assert!(
        !out.status.success(),
        "{:?} {args:?} should fail",
        helm.version
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

async fn helm_run(helm: &Helm, args: &[&str]) -> std::process::Output {
    let helm = helm.clone();
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    tokio::task::spawn_blocking(move || helm.run(&args))
        .await
        .expect("helm task")
}

async fn deployment(client: &Client) -> Option<Deployment> {
    Api::<Deployment>::namespaced(client.clone(), NS)
        .get_opt(FULLNAME)
        .await
        .expect("get deployment")
}

async fn stored_args(client: &Client) -> Vec<String> {
    let d = deployment(client).await.expect("the Deployment exists");
    container_args(&serde_json::to_value(&d).expect("deployment json"))
}

/// What `helm template` renders for the same values: the stored Deployment
/// must carry exactly these args.
fn rendered_args(helm: &Helm, values: &[&str]) -> Vec<String> {
    let mut args = vec!["--set".to_string(), values.join(",")];
    if values.is_empty() {
        args.clear();
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    helm.template(RELEASE, NS, &args)
        .unwrap_or_else(|e| panic!("template {values:?}: {e}"))
        .args()
}

fn lifecycle(version: HelmVersion) {
    let rt = runtime();
    rt.block_on(async {
        let sim = KubeSim::start(SimConfig::default())
            .await
            .expect("start kube-sim");
        let client = sim.client().await;
        let helm = Helm::new(version).with_kubeconfig(sim.kubeconfig_path());
        let chart = chart();
        let endpoint = "loadBalancer.provider.endpoint=http://lb.example.com/api/";

        // Install at release 0.2 (the KEP's Beta: the gate is on by default
        // and may still be turned off), two replicas.
        let install = [endpoint, "emulatedVersion=0.2", "replicaCount=2"];
        let out = helm_ok(
            &helm,
            &[
                "install",
                RELEASE,
                &chart,
                "--namespace",
                NS,
                "--create-namespace",
                "--set",
                &install.join(","),
            ],
        )
        .await;
        assert!(out.contains("STATUS: deployed"), "{out}");
        for want in [
            "Controllers:      pv-protection, pvc-protection, service-lb-cleanup",
            "Emulated release: 0.2",
            "Leader election:  on (Lease pm-system/pm-protection-manager)",
            "Release record:   ConfigMap pm-system/pm-protection-manager-release",
            "kubectl --namespace pm-system rollout status deployment/pm-protection-manager",
            "curl -s 'http://127.0.0.1:8080/readyz?verbose'",
        ] {
            assert!(out.contains(want), "{version:?}: want {want:?} in the NOTES:\n{out}");
        }
        let v1 = stored_args(&client).await;
        assert_eq!(v1, rendered_args(&helm, &install), "{version:?} revision 1");
        let f = flags(&v1);
        assert_eq!(f.get("emulated-version").map(String::as_str), Some("0.2"));
        assert_eq!(f.get("feature-gates"), None);
        assert_eq!(f.get("leader-elect").map(String::as_str), Some("true"));
        assert_eq!(
            f.get("leader-elect-resource-namespace").map(String::as_str),
            Some(NS)
        );
        let d = deployment(&client).await.expect("deployment");
        assert_eq!(d.spec.as_ref().and_then(|s| s.replicas), Some(2));
        // Every object of the chart is in kube-sim.
        assert!(
            Api::<ServiceAccount>::namespaced(client.clone(), NS)
                .get_opt(FULLNAME)
                .await
                .expect("get sa")
                .is_some()
        );
        assert!(
            Api::<PodDisruptionBudget>::namespaced(client.clone(), NS)
                .get_opt(FULLNAME)
                .await
                .expect("get pdb")
                .is_some()
        );
        assert!(
            Api::<ClusterRole>::all(client.clone())
                .get_opt(FULLNAME)
                .await
                .expect("get clusterrole")
                .is_some()
        );

        // Upgrade: flip the gate off, keeping the other values. (No hooks:
        // this kube-sim runs no Job controller for the release-check hook;
        // the e2e suite runs the hooks.)
        let out = helm_ok(
            &helm,
            &[
                "upgrade",
                "--no-hooks",
                RELEASE,
                &chart,
                "--namespace",
                NS,
                "--reset-then-reuse-values",
                "--set",
                "featureGates.ServiceLoadBalancerFinalizer=false",
            ],
        )
        .await;
        assert!(out.contains("STATUS: deployed") && out.contains("REVISION: 2"), "{out}");
        let v2 = stored_args(&client).await;
        let upgraded = [
            endpoint,
            "emulatedVersion=0.2",
            "replicaCount=2",
            "featureGates.ServiceLoadBalancerFinalizer=false",
        ];
        assert_eq!(v2, rendered_args(&helm, &upgraded), "{version:?} revision 2");
        assert_eq!(
            flags(&v2).get("feature-gates").map(String::as_str),
            Some("ServiceLoadBalancerFinalizer=false")
        );

        // An upgrade the manager would refuse fails in helm, and nothing
        // changes in the cluster: at 0.3 the gate is GA and locked on.
        let e = helm_err(
            &helm,
            &[
                "upgrade",
                "--no-hooks",
                RELEASE,
                &chart,
                "--namespace",
                NS,
                "--reset-then-reuse-values",
                "--set",
                "emulatedVersion=0.3",
            ],
        )
        .await;
        assert!(
            e.contains(
                "cannot set feature gate ServiceLoadBalancerFinalizer to false, feature is locked to true"
            ),
            "{e}"
        );
        assert_eq!(stored_args(&client).await, v2);

        // Rollback to the install.
        let out = helm_ok(&helm, &["rollback", "--no-hooks", RELEASE, "1", "--namespace", NS]).await;
        assert!(out.contains("Rollback was a success"), "{out}");
        assert_eq!(stored_args(&client).await, v1, "{version:?} after rollback");
        let history = helm_ok(&helm, &["history", RELEASE, "--namespace", NS, "-o", "json"]).await;
        let history: Value = serde_json::from_str(&history).expect("history json");
        let rows: Vec<(i64, String, String)> = history
            .as_array()
            .expect("history rows")
            .iter()
            .map(|r| {
                (
                    r["revision"].as_i64().unwrap_or_default(),
                    r["status"].as_str().unwrap_or_default().to_string(),
                    r["description"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect();
        assert_eq!(
            rows,
            vec![
                (1, "superseded".into(), "Install complete".into()),
                (2, "superseded".into(), "Upgrade complete".into()),
                (3, "deployed".into(), "Rollback to 1".into()),
            ],
            "{version:?}"
        );

        // Uninstall removes every object, cluster-scoped ones included, and
        // the release records. (`--no-hooks` as for the upgrades: this
        // kube-sim runs no Job controller for the pre-delete hook that strips
        // the finalizers; e2e/tests/lifecycle.rs runs it on the cluster
        // emulation.)
        let out = helm_ok(
            &helm,
            &["uninstall", "--no-hooks", RELEASE, "--namespace", NS],
        )
        .await;
        assert!(out.contains("release \"pm\" uninstalled"), "{out}");
        assert!(deployment(&client).await.is_none());
        let gone = |kind: &str, present: bool| {
            assert!(!present, "{version:?}: {kind} {FULLNAME} survived the uninstall");
        };
        gone(
            "ServiceAccount",
            Api::<ServiceAccount>::namespaced(client.clone(), NS)
                .get_opt(FULLNAME)
                .await
                .expect("get")
                .is_some(),
        );
        gone(
            "Service",
            Api::<Service>::namespaced(client.clone(), NS)
                .get_opt(&format!("{FULLNAME}-metrics"))
                .await
                .expect("get")
                .is_some(),
        );
        gone(
            "PodDisruptionBudget",
            Api::<PodDisruptionBudget>::namespaced(client.clone(), NS)
                .get_opt(FULLNAME)
                .await
                .expect("get")
                .is_some(),
        );
        gone(
            "Role",
            Api::<Role>::namespaced(client.clone(), NS)
                .get_opt(FULLNAME)
                .await
                .expect("get")
                .is_some(),
        );
        gone(
            "RoleBinding",
            Api::<RoleBinding>::namespaced(client.clone(), NS)
                .get_opt(FULLNAME)
                .await
                .expect("get")
                .is_some(),
        );
        gone(
            "ClusterRole",
            Api::<ClusterRole>::all(client.clone())
                .get_opt(FULLNAME)
                .await
                .expect("get")
                .is_some(),
        );
        gone(
            "ClusterRoleBinding",
            Api::<ClusterRoleBinding>::all(client.clone())
                .get_opt(FULLNAME)
                .await
                .expect("get")
                .is_some(),
        );
        let releases = Api::<Secret>::namespaced(client.clone(), NS)
            .list(&ListParams::default().labels("owner=helm"))
            .await
            .expect("list release secrets");
        assert!(releases.items.is_empty(), "{version:?}: helm release records left");
        sim.shutdown().await;
    });
}

#[test]
fn helm3_install_upgrade_rollback_uninstall() {
    lifecycle(HelmVersion::V3);
}

#[test]
fn helm4_install_upgrade_rollback_uninstall() {
    lifecycle(HelmVersion::V4);
}

async fn create<K>(api: &Api<K>, obj: Value) -> K
where
    K: kube::Resource
        + Clone
        + k8s_openapi::serde::de::DeserializeOwned
        + k8s_openapi::serde::Serialize
        + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(obj).expect("object json");
    api.create(&PostParams::default(), &obj)
        .await
        .expect("create object")
}

/// Polls `f` for up to 60 s; on timeout panics with `what` and `diag()`.
async fn wait_for(what: &str, mut f: impl AsyncFnMut() -> bool, diag: impl Fn() -> String) {
    let timeout = Duration::from_secs(60);
    let start = std::time::Instant::now();
    while start.elapsed() < timeout {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!(
        "timed out after {timeout:?} waiting until {what}\n{}",
        diag()
    );
}

fn finalizers(meta: &kube::api::ObjectMeta) -> Vec<String> {
    meta.finalizers.clone().unwrap_or_default()
}

/// The kubelet's part: the container's env with the downward API resolved.
fn container_env(container: &Value, pod_name: &str) -> Vec<(String, String)> {
    container["env"]
        .as_array()
        .map(|env| {
            env.iter()
                .map(|e| {
                    let name = e["name"].as_str().expect("env name").to_string();
                    let value = if let Some(v) = e["value"].as_str() {
                        v.to_string()
                    } else {
                        match e["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
                            Some("metadata.name") => pod_name.to_string(),
                            Some("metadata.namespace") => NS.to_string(),
                            other => panic!("env {name}: unsupported source {other:?}"),
                        }
                    };
                    (name, value)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The manager runs with exactly the args and env of the Deployment helm
/// stored, as the chart's ServiceAccount; it becomes ready, protects a PV,
/// a PVC and a LoadBalancer Service (cloud-sim behind the token from the
/// Secret the chart mounts), and every request it makes is allowed by the
/// RBAC objects helm stored. SIGTERM ends it within the pod's grace period.
#[test]
fn manager_started_from_the_installed_deployment_stays_within_its_rbac() {
    let rt = runtime();
    rt.block_on(async {
        let sim = KubeSim::start(SimConfig::default())
            .await
            .expect("start kube-sim");
        let client = sim.client().await;
        let cloud = cloud_sim::CloudSim::start(cloud_sim::Config::default().with_token("s3cret"))
            .await
            .expect("start cloud-sim");

        // What the user prepares: the namespace and the provider's Secret.
        create(
            &Api::<Namespace>::all(client.clone()),
            json!({"metadata": {"name": NS}}),
        )
        .await;
        create(
            &Api::<Secret>::namespaced(client.clone(), NS),
            // `data` (base64 of "s3cret"), as `kubectl create secret` sends.
            json!({"metadata": {"name": "lb-token"}, "data": {"token": "czNjcmV0"}}),
        )
        .await;

        let helm = Helm::new(HelmVersion::V4).with_kubeconfig(sim.kubeconfig_path());
        let chart = chart();
        let endpoint = format!("loadBalancer.provider.endpoint={}/", cloud.url());
        helm_ok(
            &helm,
            &[
                "install",
                RELEASE,
                &chart,
                "--namespace",
                NS,
                "--set",
                &endpoint,
                "--set",
                "loadBalancer.provider.tokenSecret.name=lb-token",
                "--set",
                "replicaCount=2",
                // The manager's own add path (back-fill) must be seen at
                // work under its RBAC: without the create-time policy
                // (kube-sim serves the API) the manager adds the finalizers.
                "--set",
                "createTimeProtection.enabled=false",
            ],
        )
        .await;

        // Work for every controller: a node, a PV, a claim used by a
        // scheduled pod, and a LoadBalancer Service of the manager's class.
        create(
            &Api::<Namespace>::all(client.clone()),
            json!({"metadata": {"name": "shop"}}),
        )
        .await;
        create(
            &Api::<Node>::all(client.clone()),
            json!({"metadata": {"name": "node-1"}}),
        )
        .await;
        let pvs = Api::<PersistentVolume>::all(client.clone());
        create(
            &pvs,
            json!({"metadata": {"name": "pv-1"}, "spec": {
                "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                "hostPath": {"path": "/data/pv-1"}}}),
        )
        .await;
        let pvcs = Api::<PersistentVolumeClaim>::namespaced(client.clone(), "shop");
        create(
            &pvcs,
            json!({"metadata": {"name": "data"}, "spec": {
                "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}),
        )
        .await;
        create(
            &Api::<Pod>::namespaced(client.clone(), "shop"),
            json!({"metadata": {"name": "db"}, "spec": {
                "nodeName": "node-1",
                "containers": [{"name": "db", "image": "postgres:17"}],
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]}}),
        )
        .await;
        let services = Api::<Service>::namespaced(client.clone(), "shop");
        create(
            &services,
            json!({"metadata": {"name": "web"}, "spec": {
                "type": "LoadBalancer", "loadBalancerClass": LB_CLASS,
                "selector": {"app": "web"},
                "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]}}),
        )
        .await;

        // The kubelet's part, from the stored Deployment.
        let d = deployment(&client).await.expect("deployment");
        let d = serde_json::to_value(&d).expect("deployment json");
        let pod_spec = &d["spec"]["template"]["spec"];
        let sa = pod_spec["serviceAccountName"]
            .as_str()
            .expect("serviceAccountName");
        assert_eq!(pod_spec["automountServiceAccountToken"], true);
        let container = chart_support::manager_container(&d);
        let token_mount = container["volumeMounts"]
            .as_array()
            .and_then(|m| m.iter().find(|m| m["name"] == "lb-provider-token"))
            .and_then(|m| m["mountPath"].as_str())
            .expect("token mount")
            .to_string();
        let token_volume = pod_spec["volumes"]
            .as_array()
            .and_then(|v| v.iter().find(|v| v["name"] == "lb-provider-token"))
            .expect("token volume");
        assert_eq!(token_volume["secret"]["secretName"], "lb-token");
        // The projected Secret: its key `token` under the mount path.
        let mounted = support::tempdir();
        let secret = Api::<Secret>::namespaced(client.clone(), NS)
            .get("lb-token")
            .await
            .expect("get secret");
        for item in token_volume["secret"]["items"].as_array().expect("items") {
            let key = item["key"].as_str().expect("key");
            let path = item["path"].as_str().expect("path");
            let data = secret
                .data
                .as_ref()
                .and_then(|d| d.get(key))
                .unwrap_or_else(|| panic!("Secret lb-token has no key {key}"));
            std::fs::write(mounted.join(path), &data.0).expect("write token");
        }
        let admin = support::free_port();
        let admin_port = container["ports"][0]["containerPort"]
            .as_u64()
            .expect("port");
        let args: Vec<String> = container_args(&d)
            .into_iter()
            .map(|a| {
                if let Some(addr) = a.strip_prefix("--admin-address=") {
                    // A pod has its own network namespace; here the port
                    // may be taken.
                    assert!(addr.ends_with(&format!(":{admin_port}")), "{addr}");
                    format!("--admin-address=127.0.0.1:{admin}")
                } else if a.starts_with("--metrics-bind-address=") {
                    format!("--metrics-bind-address=127.0.0.1:{}", support::free_port())
                } else if let Some(file) = a.strip_prefix("--lb-provider-token-file=") {
                    let rel = file
                        .strip_prefix(&format!("{token_mount}/"))
                        .unwrap_or_else(|| panic!("token file {file} is not under {token_mount}"));
                    format!("--lb-provider-token-file={}", mounted.join(rel).display())
                } else {
                    a
                }
            })
            .collect();
        let pod_name = format!("{FULLNAME}-7d9c8b6f5-x2x7q");
        let user = format!("system:serviceaccount:{NS}:{sa}");
        let kubeconfig = sim.kubeconfig_for(&user).expect("kubeconfig");
        let mut env = container_env(container, &pod_name);
        env.push(("HOSTNAME".into(), pod_name.clone()));
        // Stands in for the in-cluster config of the pod's ServiceAccount.
        env.push(("KUBECONFIG".into(), kubeconfig.display().to_string()));
        let since = sim.requests().last_seq();
        let mut m = Process::spawn(&args, &env);

        let ready_url = format!("http://127.0.0.1:{admin}/readyz?verbose");
        let stderr_path = m.stderr_path().to_path_buf();
        let log = sim.requests();
        let log_user = user.clone();
        let diag = move || {
            let requests: Vec<String> = log
                .records(&RequestFilter {
                    user: Some(log_user.clone()),
                    since: Some(since),
                    ..RequestFilter::default()
                })
                .iter()
                .map(|r| format!("{} {} -> {}", r.method, r.path, r.code))
                .collect();
            format!(
                "/readyz: {:?}\nmanager requests:\n{}\nmanager stderr:\n{}",
                support::http_get(&format!("http://127.0.0.1:{admin}/readyz?verbose")),
                requests.join("\n"),
                std::fs::read_to_string(&stderr_path).unwrap_or_default()
            )
        };
        wait_for(
            "the manager is ready",
            async || {
                assert!(m.exited().is_none(), "the manager exited:\n{}", m.stderr());
                let url = ready_url.clone();
                tokio::task::spawn_blocking(move || support::http_get(&url))
                    .await
                    .ok()
                    .flatten()
                    .is_some_and(|(code, _)| code == 200)
            },
            &diag,
        )
        .await;
        let lease =
            Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(client.clone(), NS)
                .get(FULLNAME)
                .await
                .expect("the Lease named by the chart exists");
        let holder = lease
            .spec
            .and_then(|s| s.holder_identity)
            .unwrap_or_default();
        assert!(holder.starts_with(&pod_name), "holder {holder}");

        wait_for(
            "the finalizers are added and the LB is provisioned",
            async || {
                let pv = pvs.get("pv-1").await.expect("pv");
                let pvc = pvcs.get("data").await.expect("pvc");
                let svc = services.get("web").await.expect("svc");
                let ingress = svc
                    .status
                    .as_ref()
                    .and_then(|s| s.load_balancer.as_ref())
                    .and_then(|l| l.ingress.as_ref())
                    .is_some_and(|i| !i.is_empty());
                finalizers(&pv.metadata)
                    .contains(&"protection-manager.io/pv-protection".to_string())
                    && finalizers(&pvc.metadata)
                        .contains(&"protection-manager.io/pvc-protection".to_string())
                    && finalizers(&svc.metadata)
                        .contains(&"protection-manager.io/load-balancer-cleanup".to_string())
                    && ingress
            },
            &diag,
        )
        .await;
        assert_eq!(cloud.inventory().len(), 1, "one load balancer in cloud-sim");

        // The cleanup path: deleting the Service deletes its load balancer,
        // then the finalizer goes.
        services
            .delete("web", &DeleteParams::default())
            .await
            .expect("delete service");
        wait_for(
            "the Service is gone",
            async || services.get_opt("web").await.expect("get svc").is_none(),
            &diag,
        )
        .await;
        assert!(cloud.inventory().is_empty(), "the load balancer is deleted");

        // Every request of the manager, against the RBAC helm stored.
        let mut rbac_objects: Vec<Value> = Vec::new();
        let to_values = |items: Vec<Value>, kind: &str| -> Vec<Value> {
            items
                .into_iter()
                .map(|mut v| {
                    v["kind"] = json!(kind);
                    v
                })
                .collect()
        };
        macro_rules! collect {
            ($t:ty, $api:expr, $kind:literal) => {
                rbac_objects.extend(to_values(
                    $api.list(&ListParams::default())
                        .await
                        .expect("list rbac")
                        .items
                        .iter()
                        .map(|o: &$t| serde_json::to_value(o).expect("json"))
                        .collect(),
                    $kind,
                ))
            };
        }
        collect!(
            ClusterRole,
            Api::<ClusterRole>::all(client.clone()),
            "ClusterRole"
        );
        collect!(
            ClusterRoleBinding,
            Api::<ClusterRoleBinding>::all(client.clone()),
            "ClusterRoleBinding"
        );
        collect!(Role, Api::<Role>::all(client.clone()), "Role");
        collect!(
            RoleBinding,
            Api::<RoleBinding>::all(client.clone()),
            "RoleBinding"
        );
        let authz = Authorizer::for_service_account(&rbac_objects, NS, sa);
        let requests = sim.requests().records(&RequestFilter {
            user: Some(user.clone()),
            since: Some(since),
            ..RequestFilter::default()
        });
        let mut denied = BTreeSet::new();
        let mut seen = BTreeSet::new();
        for r in &requests {
            let a = Access::from_record(r);
            if !authz.allows(&a) {
                denied.insert(format!("{a} ({} {})", r.method, r.path));
            }
            let mut key = Access {
                name: String::new(),
                path: String::new(),
                ..a
            };
            if !key.is_resource_request() {
                key.path = r.path.split('?').next().unwrap_or_default().to_string();
            }
            seen.insert(key.to_string());
        }
        assert!(
            denied.is_empty(),
            "requests the chart's RBAC does not allow:\n{}\nall requests:\n{}",
            denied.iter().cloned().collect::<Vec<_>>().join("\n"),
            seen.iter().cloned().collect::<Vec<_>>().join("\n")
        );
        // The check saw the controllers at work, not an idle process.
        for want in [
            "watch core/persistentvolumes (cluster scope)",
            "patch core/persistentvolumes (cluster scope)",
            "watch core/persistentvolumeclaims (cluster scope)",
            "patch core/persistentvolumeclaims in namespace shop",
            "watch core/pods (cluster scope)",
            "watch core/services (cluster scope)",
            "patch core/services/status in namespace shop",
            "watch core/nodes (cluster scope)",
            "create events.k8s.io/events in namespace shop",
            "get coordination.k8s.io/leases in namespace pm-system",
            "get core/configmaps in namespace pm-system",
        ] {
            assert!(
                seen.contains(want),
                "no {want:?} among the manager's requests:\n{}",
                seen.iter().cloned().collect::<Vec<_>>().join("\n")
            );
        }

        let grace = pod_spec["terminationGracePeriodSeconds"]
            .as_u64()
            .expect("terminationGracePeriodSeconds");
        let status = m.terminate(Duration::from_secs(grace));
        assert_eq!(status.code(), Some(0), "stderr:\n{}", m.stderr());
        cloud.shutdown().await.expect("stop cloud-sim");
        sim.shutdown().await;
    });
}
