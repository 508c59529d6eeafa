//! The Helm chart without a cluster: `helm lint --strict`, `helm template`
//! with several value sets (rendered args equal the values, RBAC follows the
//! enabled controllers, hardened pod), the schema's messages for bad values,
//! and the chart's install-time checks compared with what the manager binary
//! itself accepts. Every test runs with helm 3.18 and helm 4.1.

mod chart_support;
mod support;

use std::collections::BTreeSet;

use chart_support::rbac::{Access, Authorizer};
use chart_support::{Helm, HelmVersion, Rendered, app_version, chart_dir, flags};
use serde_json::Value;

const ENDPOINT: &str = "loadBalancer.provider.endpoint=https://lb.example.com/api/";
const RELEASE_NS: &str = "protection";

fn helms() -> Vec<Helm> {
    HelmVersion::ALL.into_iter().map(Helm::new).collect()
}

/// `--set` pairs (plus the LB endpoint the default controllers need).
fn set(pairs: &[&str]) -> Vec<String> {
    let mut args = vec!["--set".to_string(), ENDPOINT.to_string()];
    for p in pairs {
        if let Some(s) = p.strip_prefix("string:") {
            args.extend(["--set-string".to_string(), s.to_string()]);
        } else {
            args.extend(["--set".to_string(), p.to_string()]);
        }
    }
    args
}

fn render(helm: &Helm, pairs: &[&str]) -> Rendered {
    let args = set(pairs);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    helm.render(&args)
}

fn render_err(helm: &Helm, pairs: &[&str]) -> String {
    let args = set(pairs);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match helm.template("pm", RELEASE_NS, &args) {
        Ok(r) => panic!(
            "{:?}: {pairs:?} should fail, rendered:\n{:#?}",
            helm.version,
            r.args()
        ),
        Err(e) => e,
    }
}

fn full_values_file() -> std::path::PathBuf {
    let dir = support::tempdir();
    let path = dir.join("full-values.yaml");
    std::fs::write(
        &path,
        r#"replicaCount: 3
image:
  digest: sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
imagePullSecrets: [{name: regcred}]
controllers: ["*"]
featureGates: {StorageObjectInUseProtection: false, ServiceLoadBalancerFinalizer: true}
emulatedVersion: "0.2"
finalizerProfile: upstream
loadBalancer:
  includeUnclassed: true
  provider:
    endpoint: https://lb.example.com/api/
    tokenSecret: {name: lb-token, key: bearer}
logging: {format: text, level: "info,kube=warn"}
leaderElection: {resourceName: pm-leader}
releaseGuard: {recordName: pm-record, skipCheck: true}
storageProtection: {resyncPeriod: 10m}
vacProtection: {resyncPeriod: 3m}
serviceCIDRProtection: {resyncPeriod: 2m}
extraArgs: ["--ping-interval=10s"]
extraEnv: [{name: RUST_BACKTRACE, value: "1"}]
extraVolumes: [{name: ca, configMap: {name: lb-ca}}]
extraVolumeMounts: [{name: ca, mountPath: /etc/lb-ca, readOnly: true}]
serviceAccount: {annotations: {example.com/role: pm}}
podAnnotations: {example.com/team: storage}
podLabels: {example.com/tier: control-plane}
tolerations: [{key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule}]
affinity:
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          topologyKey: kubernetes.io/hostname
          labelSelector: {matchLabels: {app.kubernetes.io/name: protection-manager}}
topologySpreadConstraints:
  - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: ScheduleAnyway}
priorityClassName: system-cluster-critical
metrics:
  serviceMonitor: {enabled: true, labels: {release: prometheus}}
  tlsSecret: pm-metrics-tls
"#,
    )
    .expect("write values");
    path
}

#[test]
fn helm_lint_strict_is_clean() {
    let full = full_values_file();
    for helm in helms() {
        let chart = chart_dir();
        let chart = chart.to_str().expect("utf-8 path");
        let cases: Vec<Vec<&str>> = vec![
            vec!["lint", "--strict", chart, "--set", ENDPOINT],
            vec![
                "lint",
                "--strict",
                chart,
                "-f",
                full.to_str().expect("utf-8"),
            ],
            vec![
                "lint",
                "--strict",
                chart,
                "--set",
                "controllers={*,-service-lb-cleanup}",
            ],
        ];
        for args in cases {
            let out = helm.run(&args);
            let stdout = String::from_utf8_lossy(&out.stdout);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                out.status.success()
                    && stdout.contains("1 chart(s) linted, 0 chart(s) failed")
                    && !stdout.contains("[WARNING]")
                    && !stdout.contains("[ERROR]"),
                "{:?} {args:?}:\n{stdout}{stderr}",
                helm.version
            );
        }
    }
}

#[test]
fn default_values_render_exactly_these_args() {
    for helm in helms() {
        let r = render(&helm, &[]);
        assert_eq!(
            r.args(),
            vec![
                "run",
                "--controllers=*",
                "--finalizer-profile=project",
                "--kube-api-qps=50",
                "--kube-api-burst=100",
                "--event-qps=10",
                "--event-burst=25",
                "--request-timeout=30s",
                "--concurrency=4",
                "--log-format=json",
                "--log-level=info",
                "--admin-address=0.0.0.0:8080",
                "--metrics-bind-address=0.0.0.0:8443",
                "--metrics-secure=true",
                "--leader-elect=false",
                "--leader-elect-resource-namespace=protection",
                "--release-record-name=pm-protection-manager-release",
                "--shutdown-grace-period=15s",
                "--storage-protection-resync-period=5m",
                "--vac-protection-resync-period=5m",
                "--service-cidr-resync-period=5m",
                "--lb-class=protection-manager.io/load-balancer",
                "--lb-include-unclassed=false",
                "--lb-resync-period=30s",
                "--lb-provider-endpoint=https://lb.example.com/api/",
                "--lb-provider-connect-timeout=5s",
                "--lb-provider-request-timeout=30s",
            ],
            "{:?}",
            helm.version
        );
    }
}

/// Each case: values, then flags that must have exactly these values (None:
/// the flag must be absent).
#[test]
fn every_value_maps_onto_its_flag() {
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, Option<&'a str>)]);
    let cases: &[Case] = &[
        // Gates are sorted by name whatever order the values give.
        (
            &[
                "featureGates.StorageObjectInUseProtection=false",
                "featureGates.AllBeta=true",
                "emulatedVersion=0.2",
            ],
            &[
                (
                    "feature-gates",
                    Some("AllBeta=true,StorageObjectInUseProtection=false"),
                ),
                ("emulated-version", Some("0.2")),
            ],
        ),
        (&[], &[("feature-gates", None), ("emulated-version", None)]),
        (
            &[
                "emulatedVersion=0.1",
                "featureGates.ServiceLoadBalancerFinalizer=true",
            ],
            &[
                ("feature-gates", Some("ServiceLoadBalancerFinalizer=true")),
                ("emulated-version", Some("0.1")),
            ],
        ),
        // Controllers: comma-joined in the given order; the LB flags go with
        // the LB controller.
        (
            &[
                "controllers={*,-service-lb-cleanup}",
                "loadBalancer.provider.endpoint=",
            ],
            &[
                ("controllers", Some("*,-service-lb-cleanup")),
                ("lb-provider-endpoint", None),
                ("lb-class", None),
                ("lb-resync-period", None),
                ("storage-protection-resync-period", Some("5m")),
            ],
        ),
        (
            &["controllers={service-lb-cleanup}"],
            &[
                ("storage-protection-resync-period", None),
                ("service-cidr-resync-period", None),
                ("lb-class", Some("protection-manager.io/load-balancer")),
            ],
        ),
        // Each controller's flags go with it: service-cidr-protection's
        // and vac-protection's resync periods only while each is on (before
        // 0.5 vac-protection read the storage controllers').
        (
            &[
                "controllers={*,-service-cidr-protection}",
                "serviceCIDRProtection.resyncPeriod=1m",
            ],
            &[
                ("service-cidr-resync-period", None),
                ("storage-protection-resync-period", Some("5m")),
            ],
        ),
        (
            &[
                "controllers={service-cidr-controller}",
                "serviceCIDRProtection.resyncPeriod=1m",
            ],
            &[
                ("service-cidr-resync-period", Some("1m")),
                ("storage-protection-resync-period", None),
                ("lb-class", None),
            ],
        ),
        (
            &[
                "controllers={vac-protection}",
                "storageProtection.resyncPeriod=2m",
                "vacProtection.resyncPeriod=1m",
            ],
            &[
                ("vac-protection-resync-period", Some("1m")),
                ("storage-protection-resync-period", None),
                ("service-cidr-resync-period", None),
            ],
        ),
        (
            &["controllers={*,-vac-protection}"],
            &[
                ("vac-protection-resync-period", None),
                ("storage-protection-resync-period", Some("5m")),
            ],
        ),
        // Before 0.5 there is no service-cidr-protection, so no flag of it;
        // before 0.4 no vac-protection.
        (
            &["emulatedVersion=0.4"],
            &[
                ("service-cidr-resync-period", None),
                ("vac-protection-resync-period", Some("5m")),
            ],
        ),
        (
            &["emulatedVersion=0.3"],
            &[
                ("vac-protection-resync-period", None),
                ("storage-protection-resync-period", Some("5m")),
            ],
        ),
        (
            &[
                "storageProtection.resyncPeriod=0",
                "loadBalancer.resyncPeriod=2m30s",
            ],
            &[
                ("storage-protection-resync-period", Some("0")),
                ("lb-resync-period", Some("2m30s")),
            ],
        ),
        // No endpoint: service-lb-cleanup idles, so no provider flags.
        (
            &[
                "loadBalancer.provider.endpoint=",
                "loadBalancer.provider.tokenSecret.name=lb-token",
            ],
            &[
                ("lb-provider-endpoint", None),
                ("lb-provider-token-file", None),
                ("lb-class", Some("protection-manager.io/load-balancer")),
            ],
        ),
        (
            &["controllers={service-lb-controller,pv-protection}"],
            &[
                ("controllers", Some("service-lb-controller,pv-protection")),
                ("lb-provider-endpoint", Some("https://lb.example.com/api/")),
            ],
        ),
        // Leader election: on above one replica, in the release namespace.
        (
            &["replicaCount=3"],
            &[
                ("leader-elect", Some("true")),
                ("leader-elect-lease-duration", Some("15s")),
                ("leader-elect-renew-deadline", Some("10s")),
                ("leader-elect-retry-period", Some("2s")),
                ("leader-elect-resource-name", Some("pm-protection-manager")),
                ("leader-elect-resource-namespace", Some(RELEASE_NS)),
            ],
        ),
        (
            &[
                "leaderElection.enabled=true",
                "leaderElection.leaseDuration=30s",
                "leaderElection.renewDeadline=20s",
                "leaderElection.retryPeriod=4s",
                "leaderElection.resourceName=pm-lease",
            ],
            &[
                ("leader-elect", Some("true")),
                ("leader-elect-lease-duration", Some("30s")),
                ("leader-elect-renew-deadline", Some("20s")),
                ("leader-elect-retry-period", Some("4s")),
                ("leader-elect-resource-name", Some("pm-lease")),
            ],
        ),
        (
            &["replicaCount=0"],
            &[
                ("leader-elect", Some("false")),
                ("leader-elect-resource-name", None),
                // The release record lives there even without a Lease.
                ("leader-elect-resource-namespace", Some(RELEASE_NS)),
            ],
        ),
        (
            &[
                "releaseGuard.recordName=pm-record",
                "releaseGuard.skipCheck=true",
            ],
            &[
                ("release-record-name", Some("pm-record")),
                ("skip-release-check", Some("")),
            ],
        ),
        (&[], &[("skip-release-check", None)]),
        (
            &["fullnameOverride=guard"],
            &[("release-record-name", Some("guard-release"))],
        ),
        (
            &[
                "finalizerProfile=upstream",
                "logging.format=text",
                "string:logging.level=debug\\,kube=warn",
                "kubeApi.qps=2.5",
                "kubeApi.burst=7",
                "concurrency=9",
                "shutdownGracePeriod=1m30s",
            ],
            &[
                ("finalizer-profile", Some("upstream")),
                ("log-format", Some("text")),
                ("log-level", Some("debug,kube=warn")),
                ("kube-api-qps", Some("2.5")),
                ("kube-api-burst", Some("7")),
                ("concurrency", Some("9")),
                ("shutdown-grace-period", Some("1m30s")),
            ],
        ),
        (
            &["kubeApi.qps=0", "kubeApi.burst=1000000"],
            &[
                ("kube-api-qps", Some("0")),
                ("kube-api-burst", Some("1000000")),
            ],
        ),
        (
            &["kubeApi.requestTimeout=0"],
            &[("request-timeout", Some("0"))],
        ),
        (
            &["kubeApi.requestTimeout=1m30s"],
            &[("request-timeout", Some("1m30s"))],
        ),
        (
            &["admin.port=9090", "admin.bindAddress=::"],
            &[("admin-address", Some("[::]:9090"))],
        ),
        (
            &[
                "loadBalancer.class=example.com/lb",
                "loadBalancer.includeUnclassed=true",
                "loadBalancer.provider.tokenSecret.name=lb-token",
                "loadBalancer.provider.tokenSecret.key=bearer",
                "loadBalancer.provider.connectTimeout=2s",
                "loadBalancer.provider.requestTimeout=1m",
            ],
            &[
                ("lb-class", Some("example.com/lb")),
                ("lb-include-unclassed", Some("true")),
                (
                    "lb-provider-token-file",
                    Some("/var/run/secrets/protection-manager/lb-provider/token"),
                ),
                ("lb-provider-connect-timeout", Some("2s")),
                ("lb-provider-request-timeout", Some("1m")),
            ],
        ),
        (&[], &[("lb-provider-token-file", None)]),
    ];
    for helm in helms() {
        for (values, want) in cases {
            let r = render(&helm, values);
            let args = r.args();
            assert_eq!(args[0], "run");
            let got = flags(&args);
            for (flag, value) in *want {
                assert_eq!(
                    got.get(*flag).map(String::as_str),
                    *value,
                    "{:?} values {values:?}: --{flag} in {args:?}",
                    helm.version
                );
            }
        }
    }
}

#[test]
fn extra_args_and_env_come_after_the_chart_own() {
    for helm in helms() {
        let r = render(
            &helm,
            &[
                "extraArgs={--leader-elect-retry-period=3s}",
                "extraEnv[0].name=RUST_BACKTRACE",
                "string:extraEnv[0].value=1",
            ],
        );
        let args = r.args();
        assert_eq!(
            args.last().map(String::as_str),
            Some("--leader-elect-retry-period=3s")
        );
        let c = chart_support::manager_container(r.deployment());
        let env: Vec<&str> = c["env"]
            .as_array()
            .expect("env")
            .iter()
            .map(|e| e["name"].as_str().unwrap_or_default())
            .collect();
        assert_eq!(env, vec!["POD_NAME", "POD_NAMESPACE", "RUST_BACKTRACE"]);
        assert_eq!(
            c["env"][0]["valueFrom"]["fieldRef"]["fieldPath"],
            "metadata.name"
        );
        assert_eq!(
            c["env"][1]["valueFrom"]["fieldRef"]["fieldPath"],
            "metadata.namespace"
        );
    }
}

/// The flags of a value set that sets everything are flags the binary has
/// (`protection-manager run --help` is the source of truth), and the binary
/// parses the rendered args (a bad value would fail before any connection).
#[test]
fn every_rendered_flag_is_a_flag_of_the_binary() {
    let known = chart_support::binary_run_flags();
    let full = full_values_file();
    let full = full.to_str().expect("utf-8");
    let helm = Helm::new(HelmVersion::V4);
    let r = helm.render(&["-f", full]);
    let args = r.args();
    // The last arg is extraArgs' (a hidden flag, so not in --help).
    assert_eq!(args.last().map(String::as_str), Some("--ping-interval=10s"));
    // The file emulates 0.2: the controllers that came later (and their
    // flags) exist at the binary's own version.
    let now = helm.render(&[
        "-f",
        full,
        "--set-string",
        "emulatedVersion=",
        "--set",
        "featureGates.StorageObjectInUseProtection=true",
    ]);
    let now_args = now.args();
    assert_eq!(
        now_args.last().map(String::as_str),
        Some("--ping-interval=10s")
    );
    let mut rendered = flags(&args[..args.len() - 1]);
    rendered.extend(flags(&now_args[..now_args.len() - 1]));
    assert_eq!(
        rendered
            .get("service-cidr-resync-period")
            .map(String::as_str),
        Some("2m")
    );
    assert_eq!(
        rendered
            .get("vac-protection-resync-period")
            .map(String::as_str),
        Some("3m")
    );
    let unknown: Vec<&String> = rendered.keys().filter(|f| !known.contains(*f)).collect();
    assert!(
        unknown.is_empty(),
        "the chart renders flags `protection-manager run` does not have: {unknown:?}\nknown: {known:?}"
    );
    // And the other way round: every flag of the binary has a value, but
    // for those a pod gets from the cluster.
    let not_values = ["kubeconfig", "context", "help"];
    let unmapped: Vec<&String> = known
        .iter()
        .filter(|f| !rendered.contains_key(*f) && !not_values.contains(&f.as_str()))
        .collect();
    assert!(
        unmapped.is_empty(),
        "flags of `protection-manager run` with no chart value: {unmapped:?} (add them to values.yaml, the schema and the args helper)"
    );
    // The args parse: run them with a kubeconfig that does not exist; the
    // manager must get past flag parsing and fail on the kubeconfig.
    // The mounted Secret a pod would have: a token file at another path.
    let token = support::tempdir().join("token");
    std::fs::write(&token, "s3cret\n").expect("write token");
    let mut run_args: Vec<String> = args
        .iter()
        .map(|a| {
            if a.starts_with("--lb-provider-token-file=") {
                format!("--lb-provider-token-file={}", token.display())
            } else {
                a.clone()
            }
        })
        .collect();
    run_args.push("--kubeconfig=/nonexistent/kubeconfig".into());
    let run_args: Vec<&str> = run_args.iter().map(String::as_str).collect();
    let out = support::run_to_end(&run_args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("/nonexistent/kubeconfig"),
        "the rendered args should fail only on the kubeconfig:\n{stderr}"
    );
}

/// The manager's ClusterRole (the other is the scrapers' metrics-reader).
fn manager_cluster_role(r: &Rendered) -> &Value {
    r.of_kind("ClusterRole")
        .into_iter()
        .find(|c| c["metadata"]["name"] == "pm-protection-manager")
        .expect("the manager's ClusterRole")
}

/// `verb group/resource` strings granted by the ClusterRole.
fn cluster_grants(r: &Rendered) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for rule in manager_cluster_role(r)["rules"].as_array().expect("rules") {
        for verb in rule["verbs"].as_array().expect("verbs") {
            for g in rule["apiGroups"].as_array().expect("apiGroups") {
                for res in rule["resources"].as_array().expect("resources") {
                    let g = g.as_str().unwrap_or_default();
                    let g = if g.is_empty() { "core" } else { g };
                    out.insert(format!(
                        "{} {g}/{}",
                        verb.as_str().unwrap_or_default(),
                        res.as_str().unwrap_or_default()
                    ));
                }
            }
        }
    }
    out
}

fn grants(sets: &[&[&str]]) -> BTreeSet<String> {
    sets.iter()
        .flat_map(|s| s.iter().map(|x| x.to_string()))
        .collect()
}

const PV: &[&str] = &[
    "get core/persistentvolumes",
    "list core/persistentvolumes",
    "watch core/persistentvolumes",
    "patch core/persistentvolumes",
];
const PVC: &[&str] = &[
    "get core/persistentvolumeclaims",
    "list core/persistentvolumeclaims",
    "watch core/persistentvolumeclaims",
    "patch core/persistentvolumeclaims",
    "list core/pods",
    "watch core/pods",
];
const LB: &[&str] = &[
    "get core/services",
    "list core/services",
    "watch core/services",
    "patch core/services/status",
    "list core/nodes",
    "watch core/nodes",
];
const VAC: &[&str] = &[
    "get storage.k8s.io/volumeattributesclasses",
    "list storage.k8s.io/volumeattributesclasses",
    "watch storage.k8s.io/volumeattributesclasses",
    "patch storage.k8s.io/volumeattributesclasses",
    "list core/persistentvolumeclaims",
    "watch core/persistentvolumeclaims",
    "list core/persistentvolumes",
    "watch core/persistentvolumes",
];
const SCIDR: &[&str] = &[
    "get networking.k8s.io/servicecidrs",
    "list networking.k8s.io/servicecidrs",
    "watch networking.k8s.io/servicecidrs",
    "patch networking.k8s.io/servicecidrs",
    "patch networking.k8s.io/servicecidrs/status",
    "list networking.k8s.io/ipaddresses",
    "watch networking.k8s.io/ipaddresses",
];
const RULES: &[&str] = &[
    "get protection-manager.io/protectionrules",
    "list protection-manager.io/protectionrules",
    "watch protection-manager.io/protectionrules",
    "patch protection-manager.io/protectionrules",
    // The uninstall hook deletes the rules (uninstall.hook.enabled).
    "delete protection-manager.io/protectionrules",
    "patch protection-manager.io/protectionrules/status",
    "create authorization.k8s.io/selfsubjectaccessreviews",
];
const EVENTS: &[&str] = &[
    "create events.k8s.io/events",
    "patch events.k8s.io/events",
    // The secure metrics server's reviews (metrics.secure, on by default).
    "create authentication.k8s.io/tokenreviews",
    "create authorization.k8s.io/subjectaccessreviews",
];

#[test]
fn rbac_rules_follow_the_enabled_controllers() {
    type Case<'a> = (&'a [&'a str], &'a [&'a [&'a str]], &'a str);
    let cases: &[Case] = &[
        (
            &[],
            &[PV, PVC, LB, VAC, SCIDR, RULES, EVENTS],
            "pv-protection,pvc-protection,rules,service-cidr-protection,service-lb-cleanup,vac-protection",
        ),
        (
            &["controllers={*,-service-lb-cleanup}"],
            &[PV, PVC, VAC, SCIDR, RULES, EVENTS],
            "pv-protection,pvc-protection,rules,service-cidr-protection,vac-protection",
        ),
        // service-cidr-protection appeared in 0.5.
        (
            &["emulatedVersion=0.4"],
            &[PV, PVC, LB, VAC, RULES, EVENTS],
            "pv-protection,pvc-protection,rules,service-lb-cleanup,vac-protection",
        ),
        (
            &["controllers={service-cidr-controller}"],
            &[SCIDR, EVENTS],
            "service-cidr-protection",
        ),
        // vac-protection and rules appeared in 0.4: at 0.3 `*` does not
        // include them.
        (
            &["emulatedVersion=0.3"],
            &[PV, PVC, LB, EVENTS],
            "pv-protection,pvc-protection,service-lb-cleanup",
        ),
        (
            &["controllers={vac-protection}"],
            &[VAC, EVENTS],
            "vac-protection",
        ),
        (
            &["controllers={pv-protection}"],
            &[PV, EVENTS],
            "pv-protection",
        ),
        (
            &["controllers={-pvc-protection,*}"],
            &[PV, LB, VAC, SCIDR, RULES, EVENTS],
            "pv-protection,rules,service-cidr-protection,service-lb-cleanup,vac-protection",
        ),
        (
            &["controllers={persistentvolumeclaim-protection-controller,service-lb-controller}"],
            &[PVC, LB, EVENTS],
            "pvc-protection,service-lb-cleanup",
        ),
        // The first entry naming a controller wins.
        (
            &["controllers={-pv-protection,pv-protection}"],
            &[EVENTS],
            "",
        ),
        // service-lb-cleanup without a provider makes no API call.
        (
            &["loadBalancer.provider.endpoint="],
            &[PV, PVC, VAC, SCIDR, RULES, EVENTS],
            "pv-protection,pvc-protection,rules,service-cidr-protection,vac-protection",
        ),
        // At release 0.0 no controller exists yet.
        (&["emulatedVersion=0.0"], &[EVENTS], ""),
    ];
    for helm in helms() {
        for (values, want, names) in cases {
            let r = render(&helm, values);
            assert_eq!(
                cluster_grants(&r),
                grants(want),
                "{:?} values {values:?}",
                helm.version
            );
            assert_eq!(
                manager_cluster_role(&r)["metadata"]["annotations"]["protection-manager.io/controllers"],
                *names,
                "{:?} values {values:?}",
                helm.version
            );
            // The namespaced Role is the same whatever runs.
            let role = r.one("Role");
            assert_eq!(role["metadata"]["namespace"], RELEASE_NS);
            let rules: Vec<(String, String, String, String)> = role["rules"]
                .as_array()
                .expect("rules")
                .iter()
                .map(|r| {
                    let j = |k: &str| {
                        r[k].as_array()
                            .map(|a| {
                                a.iter()
                                    .map(|s| s.as_str().unwrap_or_default())
                                    .collect::<Vec<_>>()
                                    .join(",")
                            })
                            .unwrap_or_default()
                    };
                    (
                        j("apiGroups"),
                        j("resources"),
                        j("resourceNames"),
                        j("verbs"),
                    )
                })
                .collect();
            let s = |a: &str, b: &str, c: &str, d: &str| {
                (a.to_string(), b.to_string(), c.to_string(), d.to_string())
            };
            assert_eq!(
                rules,
                vec![
                    s("coordination.k8s.io", "leases", "", "create"),
                    s(
                        "coordination.k8s.io",
                        "leases",
                        "pm-protection-manager",
                        "get,update,patch"
                    ),
                    s("", "configmaps", "", "create"),
                    s(
                        "",
                        "configmaps",
                        "pm-protection-manager-release",
                        "get,update,patch"
                    ),
                    // The uninstall hook scales the manager to zero.
                    s("apps", "deployments", "pm-protection-manager", "get,patch"),
                ]
            );
        }
    }
}

#[test]
fn rbac_binds_the_chart_service_account_and_can_be_turned_off() {
    for helm in helms() {
        let r = render(&helm, &[]);
        let sa = r.one("ServiceAccount");
        assert_eq!(sa["metadata"]["name"], "pm-protection-manager");
        assert_eq!(sa["automountServiceAccountToken"], false);
        let pod = &r.deployment()["spec"]["template"]["spec"];
        assert_eq!(pod["serviceAccountName"], "pm-protection-manager");
        assert_eq!(pod["automountServiceAccountToken"], true);
        for kind in ["ClusterRoleBinding", "RoleBinding"] {
            let b = r.one(kind);
            assert_eq!(
                b["subjects"],
                serde_json::json!([{"kind": "ServiceAccount", "name": "pm-protection-manager", "namespace": RELEASE_NS}])
            );
            assert_eq!(b["roleRef"]["name"], "pm-protection-manager");
        }

        let r = render(
            &helm,
            &[
                "rbac.create=false",
                "serviceAccount.create=false",
                "serviceAccount.name=existing",
            ],
        );
        assert!(r.of_kind("ClusterRole").is_empty() && r.of_kind("Role").is_empty());
        assert!(r.of_kind("ClusterRoleBinding").is_empty() && r.of_kind("RoleBinding").is_empty());
        assert!(r.of_kind("ServiceAccount").is_empty());
        assert_eq!(
            r.deployment()["spec"]["template"]["spec"]["serviceAccountName"],
            "existing"
        );
        let e = render_err(&helm, &["serviceAccount.create=false"]);
        assert!(
            e.contains("serviceAccount.name is required when serviceAccount.create is false"),
            "{e}"
        );
    }
}

/// The authorizer the install test relies on: it must deny what the rules do
/// not grant, or that test could not fail.
#[test]
fn rbac_authorizer_allows_exactly_the_rendered_rules() {
    let helm = Helm::new(HelmVersion::V4);
    let r = render(&helm, &["controllers={*,-pv-protection,-vac-protection}"]);
    let authz = Authorizer::for_service_account(&r.objects, RELEASE_NS, "pm-protection-manager");
    let other = Authorizer::for_service_account(&r.objects, RELEASE_NS, "someone-else");
    let yes = [
        Access::resource("patch", "", "services/status", "shop", "web"),
        Access::resource("watch", "", "services", "", ""),
        Access::resource("list", "", "pods", "", ""),
        Access::resource("patch", "", "persistentvolumeclaims", "shop", "data"),
        Access::resource("create", "events.k8s.io", "events", "default", ""),
        Access::resource("create", "coordination.k8s.io", "leases", RELEASE_NS, ""),
        Access::resource(
            "update",
            "coordination.k8s.io",
            "leases",
            RELEASE_NS,
            "pm-protection-manager",
        ),
        Access::resource(
            "patch",
            "",
            "configmaps",
            RELEASE_NS,
            "pm-protection-manager-release",
        ),
        Access::resource("create", "", "configmaps", RELEASE_NS, ""),
        Access::non_resource("get", "/version"),
        Access::non_resource("get", "/apis/coordination.k8s.io/v1"),
    ];
    let no = [
        // No write on services themselves, no other subresource.
        Access::resource("patch", "", "services", "shop", "web"),
        Access::resource("update", "", "services", "shop", "web"),
        Access::resource("delete", "", "services", "shop", "web"),
        Access::resource("patch", "", "services/proxy", "shop", "web"),
        // pv-protection is off.
        Access::resource("patch", "", "persistentvolumes", "", "pv1"),
        Access::resource("list", "", "persistentvolumes", "", ""),
        // Nothing on secrets, pods beyond list/watch, nodes beyond list/watch.
        Access::resource("get", "", "secrets", RELEASE_NS, "lb-token"),
        Access::resource("get", "", "pods", "shop", "p"),
        Access::resource("patch", "", "nodes", "", "n1"),
        // Leases: another name, another namespace.
        Access::resource(
            "update",
            "coordination.k8s.io",
            "leases",
            RELEASE_NS,
            "kube-scheduler",
        ),
        Access::resource(
            "get",
            "coordination.k8s.io",
            "leases",
            "kube-system",
            "pm-protection-manager",
        ),
        Access::resource("list", "coordination.k8s.io", "leases", RELEASE_NS, ""),
        Access::resource("get", "", "configmaps", RELEASE_NS, "kube-root-ca.crt"),
        Access::resource(
            "get",
            "",
            "configmaps",
            "kube-system",
            "pm-protection-manager-release",
        ),
        Access::resource(
            "delete",
            "",
            "configmaps",
            RELEASE_NS,
            "pm-protection-manager-release",
        ),
        Access::resource("create", "", "events", "default", ""),
        Access::non_resource("get", "/metrics"),
    ];
    for a in &yes {
        assert!(authz.allows(a), "should allow {a}");
        let by_bootstrap = !a.is_resource_request();
        assert_eq!(other.allows(a), by_bootstrap, "another account and {a}");
    }
    for a in &no {
        assert!(
            !authz.allows(a),
            "should deny {a} (allowed by {:?})",
            authz.allowed_by(a)
        );
    }
}

#[test]
fn bad_values_fail_with_the_schema_message() {
    // (values, helm 3 message part, helm 4 message part)
    let cases: &[(&[&str], &str, &str)] = &[
        (
            &["string:featureGates.ServiceLoadBalancerFinalizer=yes"],
            "featureGates.ServiceLoadBalancerFinalizer: Invalid type. Expected: boolean, given: string",
            "at '/featureGates/ServiceLoadBalancerFinalizer': got string, want boolean",
        ),
        (
            &["replicaCount=-1"],
            "replicaCount: Must be greater than or equal to 0",
            "at '/replicaCount': minimum: got -1, want 0",
        ),
        (
            &["string:replicaCount=two"],
            "replicaCount: Invalid type. Expected: integer, given: string",
            "at '/replicaCount': got string, want integer",
        ),
        (
            &["replicaCont=2"],
            "(root): Additional property replicaCont is not allowed",
            "at '': additional properties 'replicaCont' not allowed",
        ),
        (
            &["image.tga=latest"],
            "image: Additional property tga is not allowed",
            "at '/image': additional properties 'tga' not allowed",
        ),
        (
            &["featureGates.StorageObjectInUseProtecton=true"],
            "featureGates: Additional property StorageObjectInUseProtecton is not allowed",
            "at '/featureGates': additional properties 'StorageObjectInUseProtecton' not allowed",
        ),
        (
            &["controllers={pv-protecton}"],
            "controllers.0: controllers.0 must be one of the following: \"*\", \"pv-protection\"",
            "at '/controllers/0': value must be one of '*', 'pv-protection'",
        ),
        (
            &["finalizerProfile=kubernetes"],
            "finalizerProfile: finalizerProfile must be one of the following: \"project\", \"upstream\"",
            "at '/finalizerProfile': value must be one of 'project', 'upstream'",
        ),
        (
            &["string:shutdownGracePeriod=15sec"],
            "shutdownGracePeriod: Does not match pattern",
            "at '/shutdownGracePeriod': '15sec' does not match pattern",
        ),
        (
            &["string:image.digest=sha256:abc"],
            "image.digest: Does not match pattern",
            "at '/image/digest': 'sha256:abc' does not match pattern",
        ),
        (
            &["kubeApi.burst=1000001"],
            "kubeApi.burst: Must be less than or equal to 1e+06",
            "at '/kubeApi/burst': maximum: got 1.000001×10⁰⁶, want 1×10⁰⁶",
        ),
        (
            &["string:kubeApi.requestTimeout=soon"],
            "kubeApi.requestTimeout: Does not match pattern",
            "at '/kubeApi/requestTimeout': 'soon' does not match pattern",
        ),
        (
            &["logging.format=xml"],
            "logging.format: logging.format must be one of the following: \"json\", \"text\"",
            "at '/logging/format': value must be one of 'json', 'text'",
        ),
        (
            &["string:leaderElection.enabled=yes"],
            "leaderElection.enabled: Invalid type. Expected: [boolean,null], given: string",
            "at '/leaderElection/enabled': got string, want null or boolean",
        ),
    ];
    for helm in helms() {
        for (values, v3, v4) in cases {
            let e = render_err(&helm, values);
            let want = match helm.version {
                HelmVersion::V3 => v3,
                HelmVersion::V4 => v4,
            };
            assert!(
                e.contains("values don't meet the specifications of the schema")
                    && e.contains(want),
                "{:?} values {values:?}: want {want:?} in:\n{e}",
                helm.version
            );
        }
    }
}

#[test]
fn the_chart_refuses_unsafe_combinations_with_a_clear_message() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["replicaCount=2", "leaderElection.enabled=false"],
            "leaderElection.enabled is false but replicaCount is 2: several active managers would fight over the same finalizers",
        ),
        (
            &["terminationGracePeriodSeconds=15"],
            "terminationGracePeriodSeconds (15) must be greater than shutdownGracePeriod (15s, 15 seconds rounded up)",
        ),
        (
            &[
                "shutdownGracePeriod=1m0.5s",
                "terminationGracePeriodSeconds=61",
            ],
            "terminationGracePeriodSeconds (61) must be greater than shutdownGracePeriod (1m0.5s, 61 seconds rounded up)",
        ),
        (
            &[
                "metrics.serviceMonitor.enabled=true",
                "metrics.service.enabled=false",
            ],
            "metrics.serviceMonitor.enabled needs metrics.service.enabled",
        ),
        (
            &["extraArgs={--concurrency=3}"],
            "extraArgs: --concurrency is already set from the chart's values (--concurrency=4)",
        ),
        (
            &["emulatedVersion=0.6"],
            "emulatedVersion: emulation version 0.6 is not between [0.0, 0.5]",
        ),
        (
            &["string:storageProtection.resyncPeriod=500ms"],
            "storageProtection.resyncPeriod: invalid value \"500ms\" for --storage-protection-resync-period: \"500ms\" is out of range: must be 0 (off) or at least 1s",
        ),
        (
            &["string:serviceCIDRProtection.resyncPeriod=500ms"],
            "serviceCIDRProtection.resyncPeriod: invalid value \"500ms\" for --service-cidr-resync-period: \"500ms\" is out of range: must be 0 (off) or at least 1s",
        ),
        (
            &["string:vacProtection.resyncPeriod=999ms"],
            "vacProtection.resyncPeriod: invalid value \"999ms\" for --vac-protection-resync-period: \"999ms\" is out of range: must be 0 (off) or at least 1s",
        ),
        (
            &["string:serviceCIDRProtection.resyncPeriod=1ns"],
            "serviceCIDRProtection.resyncPeriod: invalid value \"1ns\" for --service-cidr-resync-period: \"1ns\" is out of range: must be 0 (off) or at least 1s",
        ),
        (
            &["string:kubeApi.requestTimeout=2562048h"],
            "kubeApi.requestTimeout: invalid value \"2562048h\" for --request-timeout: invalid timeout value \"2562048h\"",
        ),
        (
            &["string:loadBalancer.provider.connectTimeout=0"],
            "--lb-provider-connect-timeout must be more than 0",
        ),
        (
            &["string:admin.bindAddress=1.2.3"],
            "admin.bindAddress: \"1.2.3\" is not an IP address",
        ),
        (
            &["rules.allowedResources[0].resource=*"],
            "rules.allowedResources: {\"resource\":\"*\"}: a wildcard would let every ProtectionRule hold any kind",
        ),
        (
            &[
                "rules.allowedResources[0].apiGroup=*",
                "rules.allowedResources[0].resource=secrets",
            ],
            "rules.allowedResources: {\"apiGroup\":\"*\",\"resource\":\"secrets\"}: a wildcard",
        ),
    ];
    for helm in helms() {
        for (values, want) in cases {
            let e = render_err(&helm, values);
            assert!(
                e.contains(want),
                "{:?} {values:?}: want {want:?} in:\n{e}",
                helm.version
            );
        }
        // And the boundary cases that are fine.
        let r = render(&helm, &["terminationGracePeriodSeconds=16"]);
        assert_eq!(
            r.deployment()["spec"]["template"]["spec"]["terminationGracePeriodSeconds"],
            16
        );
        let r = render(&helm, &["shutdownGracePeriod=1m0.5s"]);
        assert_eq!(
            r.deployment()["spec"]["template"]["spec"]["terminationGracePeriodSeconds"],
            76
        );
    }
}

/// The gate settings the chart refuses are exactly those the manager refuses
/// at every release it can emulate, with the manager's message.
#[test]
fn gate_checks_match_the_binary_at_every_emulated_version() {
    let helm = Helm::new(HelmVersion::V4);
    let gates = [
        "StorageObjectInUseProtection",
        "ServiceLoadBalancerFinalizer",
        "VolumeAttributesClass",
        "MultiCIDRServiceAllocator",
    ];
    for version in ["0.0", "0.1", "0.2", "0.3", "0.4", "0.5"] {
        for gate in gates {
            for value in [true, false] {
                let out = support::run_to_end(&[
                    "run",
                    &format!("--emulated-version={version}"),
                    &format!("--feature-gates={gate}={value}"),
                    "--kubeconfig=/nonexistent/kubeconfig",
                ]);
                let stderr = String::from_utf8_lossy(&out.stderr);
                let binary_err = if stderr.contains("/nonexistent/kubeconfig") {
                    None
                } else {
                    let msg = stderr
                        .split("flag: ")
                        .nth(1)
                        .unwrap_or_else(|| panic!("unexpected manager error: {stderr}"))
                        .trim()
                        .to_string();
                    Some(msg)
                };
                let values = [
                    format!("emulatedVersion={version}"),
                    format!("featureGates.{gate}={value}"),
                ];
                let values: Vec<&str> = values.iter().map(String::as_str).collect();
                let chart = helm.template(
                    "pm",
                    RELEASE_NS,
                    &set(&values).iter().map(String::as_str).collect::<Vec<_>>(),
                );
                match (&binary_err, chart) {
                    (None, Ok(_)) => {}
                    (Some(b), Err(c)) => assert!(
                        c.contains(b.as_str()),
                        "{version} {gate}={value}: the chart's message should contain the manager's {b:?}:\n{c}"
                    ),
                    (b, c) => panic!(
                        "{version} {gate}={value}: manager says {b:?}, chart says {:?}",
                        c.map(|r| r.args())
                    ),
                }
            }
        }
    }
}

/// The chart's controller table (names, aliases, on by default, the release
/// each appeared in) matches the binary's: for each `controllers` value and
/// release, the controllers the chart grants RBAC for are the ones the
/// manager starts (its "starting protection-manager" log line).
#[test]
fn controller_selection_matches_the_binary() {
    let helm = Helm::new(HelmVersion::V4);
    let cases: &[(&str, &str)] = &[
        ("*", "0.3"),
        ("*", "0.0"),
        ("*,-service-lb-cleanup", "0.3"),
        ("-pvc-protection,*", "0.2"),
        ("persistentvolume-protection-controller", "0.1"),
        (
            "persistentvolumeclaim-protection-controller,service-lb-controller",
            "0.3",
        ),
        ("-pv-protection,pv-protection", "0.3"),
        ("*", "0.4"),
        ("*,-vac-protection", "0.4"),
        ("volumeattributesclass-protection-controller", "0.4"),
        ("*", "0.5"),
        ("*,-service-cidr-protection", "0.5"),
        ("service-cidr-controller", "0.5"),
    ];
    let dir = support::tempdir();
    let dead = support::free_port();
    let kubeconfig = support::write_kubeconfig(&dir, &format!("http://127.0.0.1:{dead}"), "nobody");
    for (controllers, version) in cases {
        let values = [
            format!("controllers={{{controllers}}}"),
            format!("emulatedVersion={version}"),
        ];
        let values: Vec<&str> = values.iter().map(String::as_str).collect();
        let r = render(&helm, &values);
        let chart: Vec<String> =
            manager_cluster_role(&r)["metadata"]["annotations"]["protection-manager.io/controllers"]
                .as_str()
                .unwrap_or_default()
                .split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect();

        // Exactly the rendered args, but for the admin port (a pod has its
        // own network namespace) and the kubeconfig (a pod has its account).
        let admin = support::free_port();
        let mut args: Vec<String> = r
            .args()
            .into_iter()
            .map(|a| {
                if a.starts_with("--admin-address=") {
                    format!("--admin-address=127.0.0.1:{admin}")
                } else {
                    a
                }
            })
            .collect();
        args.push(format!("--kubeconfig={}", kubeconfig.display()));
        let mut m = chart_support::Process::spawn(&args, &[]);
        let mut line = String::new();
        support::wait_until(
            std::time::Duration::from_secs(30),
            "the manager logs the controllers it starts (or exits)",
            || {
                line = m
                    .stderr()
                    .lines()
                    .find(|l| l.contains("starting protection-manager"))
                    .unwrap_or_default()
                    .to_string();
                !line.is_empty() || m.exited().is_some()
            },
        );
        assert!(
            !line.is_empty(),
            "the manager refused the chart's args {args:?}:\n{}",
            m.stderr()
        );
        let log: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
        let fields = if log["fields"].is_object() {
            &log["fields"]
        } else {
            &log
        };
        // `controllers` is logged with Debug formatting: ["a", "b"].
        let binary: Vec<String> = fields["controllers"]
            .as_str()
            .map(|s| {
                s.trim_matches(|c| c == '[' || c == ']')
                    .split(',')
                    .map(|x| x.trim().trim_matches('"').to_string())
                    .filter(|x| !x.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        let mut binary_sorted = binary.clone();
        binary_sorted.sort();
        assert_eq!(
            chart, binary_sorted,
            "--controllers={controllers} at {version}: chart RBAC is for {chart:?}, the manager runs {binary:?} ({line})"
        );
    }
}

#[test]
fn the_pod_is_hardened() {
    for helm in helms() {
        let r = render(&helm, &[]);
        let pod = &r.deployment()["spec"]["template"]["spec"];
        let psc = &pod["securityContext"];
        assert_eq!(psc["runAsNonRoot"], true);
        assert!(psc["runAsUser"].as_i64().is_some_and(|u| u > 0), "{psc}");
        assert_eq!(psc["seccompProfile"]["type"], "RuntimeDefault");
        assert_eq!(pod["enableServiceLinks"], false);
        let c = chart_support::manager_container(r.deployment());
        let sc = &c["securityContext"];
        assert_eq!(sc["allowPrivilegeEscalation"], false);
        assert_eq!(sc["readOnlyRootFilesystem"], true);
        assert_eq!(sc["privileged"], false);
        assert_eq!(sc["runAsNonRoot"], true);
        assert_eq!(sc["capabilities"]["drop"], serde_json::json!(["ALL"]));
        assert!(sc["capabilities"]["add"].is_null());
        assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault");
        assert!(c["resources"]["requests"]["memory"].is_string());
        assert!(c["resources"]["limits"]["memory"].is_string());

        // Probes on the admin port, which is the --admin-address port.
        assert_eq!(
            c["ports"],
            serde_json::json!([
                {"name": "admin", "containerPort": 8080, "protocol": "TCP"},
                {"name": "metrics", "containerPort": 8443, "protocol": "TCP"}
            ])
        );
        assert_eq!(
            c["livenessProbe"]["httpGet"],
            serde_json::json!({"path": "/healthz", "port": "admin"})
        );
        assert_eq!(
            c["readinessProbe"]["httpGet"],
            serde_json::json!({"path": "/readyz", "port": "admin"})
        );
        let args = flags(&r.args());
        assert!(args["admin-address"].ends_with(":8080"));

        // The kubelet's grace is longer than the manager's shutdown bound.
        assert_eq!(args["shutdown-grace-period"], "15s");
        assert_eq!(pod["terminationGracePeriodSeconds"], 30);
        let r = render(&helm, &["shutdownGracePeriod=45s", "admin.port=9443"]);
        let pod = &r.deployment()["spec"]["template"]["spec"];
        assert_eq!(pod["terminationGracePeriodSeconds"], 60);
        let c = chart_support::manager_container(r.deployment());
        assert_eq!(c["ports"][0]["containerPort"], 9443);
        assert_eq!(flags(&r.args())["admin-address"], "0.0.0.0:9443");
    }
}

#[test]
fn image_reference_defaults_to_the_app_version_and_takes_a_digest() {
    let app = app_version();
    let digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    for helm in helms() {
        let image = |values: &[&str]| {
            let r = render(&helm, values);
            chart_support::manager_container(r.deployment())["image"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        };
        assert_eq!(
            image(&[]),
            format!("ghcr.io/protection-manager/protection-manager:{app}")
        );
        assert_eq!(
            image(&[
                "image.tag=0.2.1",
                "image.repository=registry.example.com/pm"
            ]),
            "registry.example.com/pm:0.2.1"
        );
        let with_digest = format!("image.digest={digest}");
        assert_eq!(
            image(&[&with_digest]),
            format!("ghcr.io/protection-manager/protection-manager:{app}@{digest}")
        );
        let r = render(&helm, &[]);
        assert_eq!(
            chart_support::manager_container(r.deployment())["imagePullPolicy"],
            "IfNotPresent"
        );
        assert_eq!(
            r.deployment()["metadata"]["labels"]["app.kubernetes.io/version"],
            app
        );
    }
}

#[test]
fn every_object_carries_the_standard_labels() {
    let full = full_values_file();
    for helm in helms() {
        let r = helm.render(&["-f", full.to_str().expect("utf-8")]);
        assert_eq!(
            r.kinds(),
            vec![
                "ClusterRole",
                "ClusterRole",
                "ClusterRoleBinding",
                "Deployment",
                "Job",
                "PodDisruptionBudget",
                "Role",
                "RoleBinding",
                "Service",
                "ServiceAccount",
                "ServiceMonitor"
            ]
        );
        for o in &r.objects {
            let l = &o["metadata"]["labels"];
            let what = format!("{:?} {} {}", helm.version, o["kind"], o["metadata"]["name"]);
            assert_eq!(l["app.kubernetes.io/name"], "protection-manager", "{what}");
            assert_eq!(l["app.kubernetes.io/instance"], "pm", "{what}");
            assert_eq!(l["app.kubernetes.io/managed-by"], "Helm", "{what}");
            assert_eq!(
                l["app.kubernetes.io/part-of"], "protection-manager",
                "{what}"
            );
            assert_eq!(
                l["app.kubernetes.io/component"], "controller-manager",
                "{what}"
            );
            assert_eq!(l["app.kubernetes.io/version"], app_version(), "{what}");
            assert_eq!(
                l["helm.sh/chart"],
                format!("protection-manager-{}", app_version()),
                "{what}"
            );
            let ns = &o["metadata"]["namespace"];
            match o["kind"].as_str() {
                Some("ClusterRole" | "ClusterRoleBinding") => assert!(ns.is_null(), "{what}"),
                _ => assert_eq!(ns, RELEASE_NS, "{what}"),
            }
        }
        // The pod template keeps the selector labels and adds the user's.
        let d = r.deployment();
        let selector = &d["spec"]["selector"]["matchLabels"];
        assert_eq!(
            selector,
            &serde_json::json!({"app.kubernetes.io/name": "protection-manager", "app.kubernetes.io/instance": "pm"})
        );
        let pod_labels = &d["spec"]["template"]["metadata"]["labels"];
        for (k, v) in selector.as_object().expect("selector") {
            assert_eq!(&pod_labels[k], v);
        }
        assert_eq!(pod_labels["example.com/tier"], "control-plane");
        assert_eq!(
            d["spec"]["template"]["metadata"]["annotations"]["example.com/team"],
            "storage"
        );
    }
}

#[test]
fn availability_objects_follow_the_replica_count() {
    for helm in helms() {
        // One replica: no PDB (it would block every drain), no leader
        // election, and the old pod stops before the new one starts.
        let r = render(&helm, &[]);
        assert!(r.of_kind("PodDisruptionBudget").is_empty());
        assert_eq!(r.deployment()["spec"]["strategy"]["type"], "Recreate");
        // More: a PDB over the same pods, leader election, rolling updates
        // that keep a ready manager.
        let r = render(&helm, &["replicaCount=3"]);
        let pdb = r.one("PodDisruptionBudget");
        assert_eq!(pdb["spec"]["maxUnavailable"], 1);
        assert_eq!(
            pdb["spec"]["selector"]["matchLabels"],
            r.deployment()["spec"]["selector"]["matchLabels"]
        );
        assert_eq!(r.deployment()["spec"]["replicas"], 3);
        assert_eq!(
            r.deployment()["spec"]["strategy"],
            serde_json::json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}})
        );
        let r = render(
            &helm,
            &[
                "replicaCount=2",
                "string:podDisruptionBudget.maxUnavailable=50%",
            ],
        );
        assert_eq!(
            r.one("PodDisruptionBudget")["spec"]["maxUnavailable"],
            "50%"
        );
        // Forced leader election with one replica: rolling, no PDB.
        let r = render(&helm, &["leaderElection.enabled=true"]);
        assert!(r.of_kind("PodDisruptionBudget").is_empty());
        assert_eq!(r.deployment()["spec"]["strategy"]["type"], "RollingUpdate");
    }
}

#[test]
fn metrics_service_and_optional_service_monitor() {
    for helm in helms() {
        let r = render(&helm, &[]);
        assert!(
            r.of_kind("ServiceMonitor").is_empty(),
            "ServiceMonitor only when enabled"
        );
        let svc = r.one("Service");
        assert_eq!(svc["metadata"]["name"], "pm-protection-manager-metrics");
        assert_eq!(svc["spec"]["type"], "ClusterIP");
        assert_eq!(
            svc["spec"]["ports"],
            serde_json::json!([{"name": "metrics", "port": 8443, "targetPort": "metrics", "protocol": "TCP", "appProtocol": "https"}])
        );
        assert_eq!(
            svc["spec"]["selector"],
            r.deployment()["spec"]["selector"]["matchLabels"]
        );

        let r = render(
            &helm,
            &[
                "metrics.serviceMonitor.enabled=true",
                "metrics.serviceMonitor.labels.release=prometheus",
                "metrics.serviceMonitor.interval=15s",
                "metrics.service.port=9100",
            ],
        );
        let sm = r.one("ServiceMonitor");
        assert_eq!(sm["apiVersion"], "monitoring.coreos.com/v1");
        assert_eq!(sm["metadata"]["labels"]["release"], "prometheus");
        assert_eq!(
            sm["spec"]["endpoints"],
            serde_json::json!([{
                "port": "metrics", "path": "/metrics", "interval": "15s", "scrapeTimeout": "10s",
                "scheme": "https",
                "bearerTokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token",
                "tlsConfig": {"insecureSkipVerify": true}
            }])
        );
        // It selects the metrics Service by that Service's labels.
        let svc = r.one("Service");
        for (k, v) in sm["spec"]["selector"]["matchLabels"]
            .as_object()
            .expect("matchLabels")
        {
            assert_eq!(&svc["metadata"]["labels"][k], v, "{k}");
        }
        assert_eq!(
            sm["spec"]["namespaceSelector"]["matchNames"],
            serde_json::json!([RELEASE_NS])
        );
        assert_eq!(svc["spec"]["ports"][0]["port"], 9100);

        let r = render(&helm, &["metrics.service.enabled=false"]);
        assert!(r.of_kind("Service").is_empty());
    }
}

#[test]
fn provider_token_comes_from_the_named_secret_as_a_file() {
    for helm in helms() {
        let r = render(
            &helm,
            &[
                "loadBalancer.provider.tokenSecret.name=lb-token",
                "loadBalancer.provider.tokenSecret.key=bearer",
            ],
        );
        let pod = &r.deployment()["spec"]["template"]["spec"];
        let vol = pod["volumes"]
            .as_array()
            .and_then(|v| v.iter().find(|v| v["name"] == "lb-provider-token"))
            .expect("token volume");
        assert_eq!(vol["secret"]["secretName"], "lb-token");
        assert_eq!(
            vol["secret"]["items"],
            serde_json::json!([{"key": "bearer", "path": "token"}])
        );
        let c = chart_support::manager_container(r.deployment());
        let mount = c["volumeMounts"]
            .as_array()
            .and_then(|m| m.iter().find(|m| m["name"] == "lb-provider-token"))
            .expect("token mount");
        assert_eq!(mount["readOnly"], true);
        assert!(
            mount["subPath"].is_null(),
            "a subPath mount never sees a rotated Secret"
        );
        let file = flags(&r.args())["lb-provider-token-file"].clone();
        assert_eq!(
            file,
            format!("{}/token", mount["mountPath"].as_str().unwrap_or_default())
        );
        // The token never appears in the pod spec.
        let spec = serde_json::to_string(pod).unwrap_or_default();
        assert!(!spec.contains("secretKeyRef"), "{spec}");
        // The LB controller off: no mount, no flag.
        let r = render(
            &helm,
            &[
                "loadBalancer.provider.tokenSecret.name=lb-token",
                "controllers={*,-service-lb-cleanup}",
            ],
        );
        assert!(r.deployment()["spec"]["template"]["spec"]["volumes"].is_null());
        assert!(!flags(&r.args()).contains_key("lb-provider-token-file"));
    }
}

/// What the manager refuses at start-up, the chart refuses at render time
/// with the manager's message (issue 15 item 5): leader-election durations
/// out of order or zero, and a log level that is not one. Each case runs the
/// binary first: the chart must refuse exactly what it refuses.
#[test]
fn leader_election_and_log_level_checks_match_the_binary() {
    // (lease, renew, retry)
    let durations: &[(&str, &str, &str)] = &[
        ("15s", "10s", "2s"),
        ("10s", "15s", "2s"),
        ("15s", "15s", "2s"),
        ("15s", "10s", "10s"),
        ("15s", "10s", "9s"),
        ("0", "10s", "2s"),
        ("15s", "0", "2s"),
        ("15s", "10s", "0"),
        ("1m", "1m30s", "2s"),
        ("15.5s", "10s", "2s"),
        ("1500ms", "1s", "100ms"),
        ("2m", "1m0.5s", "500ms"),
    ];
    let levels = [
        "info",
        "DEBUG",
        "info,kube=warn",
        "verbose",
        "info,kube=loud",
        "protection_manager=trace",
        "warn,",
    ];
    let helm = Helm::new(HelmVersion::V4);
    let manager_error = |args: &[String]| -> Option<String> {
        let mut all: Vec<&str> = vec!["run", "--kubeconfig=/nonexistent/kubeconfig"];
        all.extend(args.iter().map(String::as_str));
        let out = support::run_to_end(&all);
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        if stderr.contains("/nonexistent/kubeconfig") {
            return None;
        }
        // clap: "invalid value '...' for '--flag <X>': <message>"; run: "Error: <message>".
        let msg = match stderr.split_once(">': ") {
            Some((_, m)) => m,
            None => stderr
                .split_once("Error: ")
                .map_or(stderr.as_str(), |(_, m)| m),
        };
        Some(msg.lines().next().unwrap_or_default().trim().to_string())
    };
    let compare = |what: &str, binary: Option<String>, values: &[String]| {
        let mut pairs: Vec<&str> = vec![];
        pairs.extend(values.iter().map(String::as_str));
        let args = set(&pairs);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        match (&binary, helm.template("pm", RELEASE_NS, &args)) {
            (None, Ok(_)) => {}
            (Some(b), Err(c)) => assert!(
                c.contains(b.as_str()),
                "{what}: the chart's message should contain the manager's {b:?}:\n{c}"
            ),
            (b, c) => panic!(
                "{what}: manager says {b:?}, chart says {:?}",
                c.map(|r| r.args())
            ),
        }
    };
    let mut refused = 0;
    for (lease, renew, retry) in durations {
        let binary = manager_error(&[
            "--leader-elect=true".into(),
            format!("--leader-elect-lease-duration={lease}"),
            format!("--leader-elect-renew-deadline={renew}"),
            format!("--leader-elect-retry-period={retry}"),
        ]);
        refused += usize::from(binary.is_some());
        compare(
            &format!("lease {lease}, renew {renew}, retry {retry}"),
            binary,
            &[
                "leaderElection.enabled=true".into(),
                format!("leaderElection.leaseDuration={lease}"),
                format!("leaderElection.renewDeadline={renew}"),
                format!("leaderElection.retryPeriod={retry}"),
            ],
        );
    }
    for level in levels {
        let binary = manager_error(&[format!("--log-level={level}")]);
        refused += usize::from(binary.is_some());
        // `--set` splits on commas: pass the level as one string.
        compare(
            &format!("log level {level:?}"),
            binary,
            &[format!(
                "string:logging.level={}",
                level.replace(',', "\\,")
            )],
        );
    }
    // The cases cover both outcomes.
    assert!(refused >= 8, "{refused} refused");
    // Without leader election the durations are not used, and not checked.
    render(
        &helm,
        &[
            "leaderElection.enabled=false",
            "leaderElection.renewDeadline=1m",
        ],
    );
}

/// Names stay within Kubernetes' 63 characters: a full name that would make
/// the metrics Service longer is refused (not silently cut, so that two
/// releases can never end up sharing a truncated name).
#[test]
fn a_full_name_too_long_for_the_metrics_service_is_refused() {
    let ok = "a".repeat(55);
    let long = "a".repeat(56);
    for helm in helms() {
        let r = render(&helm, &[&format!("fullnameOverride={ok}")]);
        let svc = r.one("Service");
        let name = svc["metadata"]["name"].as_str().expect("name");
        assert_eq!(name, format!("{ok}-metrics"));
        assert_eq!(name.len(), 63);
        for obj in &r.objects {
            let n = obj["metadata"]["name"].as_str().unwrap_or_default();
            // Services (DNS-1035 labels) and Jobs (their name becomes the
            // pods' `job-name` label value) are limited to 63 characters;
            // RBAC names are path segments (the `-metrics-reader`
            // ClusterRole may be longer) and other names DNS subdomains.
            let limit = match obj["kind"].as_str().unwrap_or_default() {
                "Service" | "Job" => 63,
                _ => 253,
            };
            assert!(n.len() <= limit, "{n}");
        }

        let e = render_err(&helm, &[&format!("fullnameOverride={long}")]);
        assert!(
            e.contains(&format!(
                "the full name \"{long}\" (from fullnameOverride) is 56 characters: the metrics Service would be \"{long}-metrics\" (64 characters), longer than the 63 Kubernetes allows"
            )),
            "{:?}: {e}",
            helm.version
        );
        // Without the metrics Service the name fits.
        render(
            &helm,
            &[
                &format!("fullnameOverride={long}"),
                "metrics.service.enabled=false",
            ],
        );
    }
}

/// The uninstall hook: a pre-delete Job running `strip-finalizers --all`
/// against the release's Deployment, as the chart's ServiceAccount, with the
/// RBAC it needs (delete rules, scale the named Deployment); none of it with
/// `uninstall.hook.enabled=false`.
#[test]
fn the_uninstall_hook_strips_every_finalizer_with_the_release_rbac() {
    for helm in helms() {
        let r = render(&helm, &["uninstall.hook.wait=7s"]);
        let jobs = r.of_kind("Job");
        let job = jobs
            .iter()
            .find(|j| j["metadata"]["annotations"]["helm.sh/hook"] == "pre-delete")
            .unwrap_or_else(|| panic!("{:?}: no pre-delete Job", helm.version));
        assert_eq!(job["metadata"]["name"], "pm-protection-manager-uninstall");
        let pod = &job["spec"]["template"]["spec"];
        assert_eq!(pod["serviceAccountName"], "pm-protection-manager");
        let args: Vec<&str> = pod["containers"][0]["args"]
            .as_array()
            .expect("args")
            .iter()
            .filter_map(|a| a.as_str())
            .collect();
        assert_eq!(
            args,
            [
                "strip-finalizers",
                "--all",
                &format!("--namespace={RELEASE_NS}"),
                "--deployment=pm-protection-manager",
                "--finalizer-profile=project",
                "--wait=7s",
            ],
            "{:?}",
            helm.version
        );
        assert!(cluster_grants(&r).contains("delete protection-manager.io/protectionrules"));
        let role = r.one("Role");
        let scale = role["rules"]
            .as_array()
            .expect("rules")
            .iter()
            .find(|rule| rule["resources"][0] == "deployments")
            .expect("the Role lets the hook scale the Deployment");
        assert_eq!(scale["resourceNames"][0], "pm-protection-manager");
        assert_eq!(scale["verbs"], serde_json::json!(["get", "patch"]));

        let off = render(&helm, &["uninstall.hook.enabled=false"]);
        assert!(
            !off.of_kind("Job")
                .iter()
                .any(|j| j["metadata"]["annotations"]["helm.sh/hook"] == "pre-delete"),
            "{:?}",
            helm.version
        );
        assert!(!cluster_grants(&off).contains("delete protection-manager.io/protectionrules"));
        assert!(
            !off.one("Role")["rules"]
                .as_array()
                .expect("rules")
                .iter()
                .any(|rule| rule["resources"][0] == "deployments")
        );
    }
}

/// No value passes `helm template` and then fails at start (issue 27): for
/// each value at the edges its schema allows (durations from 0 to past what
/// a Go duration or an int32 of seconds holds, integers at their bounds,
/// addresses that are no IP), either the chart refuses it or the binary's
/// own `validate-config`, run on the rendered args, accepts them. The
/// binary is the judge: the chart mirrors its checks.
#[test]
fn every_value_the_chart_renders_the_binary_starts_with() {
    let helm = Helm::new(HelmVersion::V4);
    let token = support::tempdir().join("token");
    std::fs::write(&token, "s3cret\n").expect("write token");
    let durations = [
        "0",
        "1ns",
        "999ms",
        "1s",
        "1.5s",
        "2s",
        "15s",
        "1h",
        "596523h14m7s",
        "596523h14m8s",
        "2562047h47m16s",
        "2562048h",
        "99999999999h",
    ];
    let duration_values = [
        "storageProtection.resyncPeriod",
        "loadBalancer.resyncPeriod",
        "serviceCIDRProtection.resyncPeriod",
        "vacProtection.resyncPeriod",
        "loadBalancer.provider.connectTimeout",
        "loadBalancer.provider.requestTimeout",
        "kubeApi.requestTimeout",
        "leaderElection.leaseDuration",
        "leaderElection.renewDeadline",
        "leaderElection.retryPeriod",
        "shutdownGracePeriod",
    ];
    let mut cases: Vec<Vec<String>> = Vec::new();
    for v in duration_values {
        for d in durations {
            let mut case = vec![format!("string:{v}={d}")];
            // The shortest grace the kubelet gets must stay above it.
            if v == "shutdownGracePeriod" {
                case.push("terminationGracePeriodSeconds=null".into());
            }
            cases.push(case);
        }
    }
    let others: &[&str] = &[
        "concurrency=1",
        "concurrency=65535",
        "kubeApi.burst=1",
        "kubeApi.burst=1000000",
        "kubeApi.eventBurst=1",
        "kubeApi.eventBurst=1000000",
        "kubeApi.qps=0",
        "string:kubeApi.qps=0.001",
        "string:kubeApi.requestTimeout=99999999999",
        "string:kubeApi.requestTimeout=9223372036",
        "kubeApi.qps=1000000000",
        "string:kubeApi.qps=1e400",
        "string:kubeApi.eventQPS=-1",
        "admin.port=1",
        "admin.port=65535",
        "string:admin.bindAddress=::",
        "string:admin.bindAddress=1.2.3",
        "string:admin.bindAddress=abc",
        "string:admin.bindAddress=0.0.0.0.0",
        "metrics.port=65535",
        "string:loadBalancer.class=a",
        "string:logging.level=debug,kube=info",
        "string:leaderElection.resourceName=a",
        "string:releaseGuard.recordName=a",
    ];
    cases.extend(others.iter().map(|o| vec![o.to_string()]));
    let mut mismatches = Vec::new();
    let mut refused = 0;
    for case in &cases {
        let pairs: Vec<&str> = case.iter().map(String::as_str).collect();
        let args = set(&pairs);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let Ok(r) = helm.template("pm", RELEASE_NS, &args) else {
            refused += 1;
            continue;
        };
        let rendered = r.args();
        assert_eq!(rendered.first().map(String::as_str), Some("run"));
        let mut run_args = vec!["validate-config".to_string()];
        run_args.extend(rendered[1..].iter().map(|a| {
            if a.starts_with("--lb-provider-token-file=") {
                format!("--lb-provider-token-file={}", token.display())
            } else {
                a.clone()
            }
        }));
        let run_args: Vec<&str> = run_args.iter().map(String::as_str).collect();
        let out = support::run_to_end(&run_args);
        if !out.status.success() {
            mismatches.push(format!(
                "{case:?}: helm renders it, the binary refuses: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
    }
    assert!(
        mismatches.is_empty(),
        "values that render and then fail at start:\n{}",
        mismatches.join("\n")
    );
    println!(
        "verified: {} edge values, {refused} refused by the chart, the rest accepted by validate-config",
        cases.len()
    );
}
