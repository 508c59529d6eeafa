//! ValidatingAdmissionPolicy, differentially: every scenario runs on
//! kube-sim and on the real kube-apiserver v1.36.3 of the test bed
//! (`control-plane`, with kube-controller-manager), and what a user sees
//! must be the same: the status code, reason, message and details of each
//! refusal, `kubectl delete` (and `--dry-run=server`) output with its
//! warnings, which deletes the namespace controller and the garbage
//! collector get through, and the API's validation errors for policies and
//! bindings. The real server is the oracle: where they differ, kube-sim is
//! wrong.
//!
//! Policies are cluster-scoped and the control plane is shared by the
//! tests of this binary, so each scenario binds its policy to its own
//! namespace (a label) and names everything after one unique tag, the same
//! on both servers.

mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use common::unique;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use test_support::kubectl;

/// One server under test.
struct Server {
    name: &'static str,
    admin: Client,
    alice: Client,
    kubeconfig: PathBuf,
    alice_kubeconfig: PathBuf,
    _sim: Option<kube_sim::KubeSim>,
    _cp: Option<Arc<control_plane::ControlPlane>>,
}

/// A kube-sim kubeconfig for kubectl that names its user with `as:`
/// (kubectl sends no bearer token over kube-sim's plain HTTP, but it does
/// send impersonation headers).
fn kubectl_kubeconfig(sim: &kube_sim::KubeSim, user: &str, groups: &str) -> PathBuf {
    let path = sim
        .kubeconfig_for(user)
        .unwrap_or_else(|e| panic!("{user}'s kubeconfig: {e}"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let text = text.replace(
        &format!("    token: {user}\n"),
        &format!("    token: {user}\n    as: {user}\n    as-groups: {groups}\n"),
    );
    let out = path.with_extension("kubectl");
    std::fs::write(&out, text).unwrap_or_else(|e| panic!("writing {}: {e}", out.display()));
    out
}

async fn sim() -> Server {
    let sim = kube_sim::KubeSim::start(kube_sim::SimConfig::default())
        .await
        .unwrap_or_else(|e| panic!("starting kube-sim: {e}"));
    Server {
        name: "kube-sim",
        admin: sim.client().await,
        alice: sim.client_as("alice").await,
        kubeconfig: kubectl_kubeconfig(&sim, "admin", "[system:masters]"),
        alice_kubeconfig: kubectl_kubeconfig(&sim, "alice", "[]"),
        _sim: Some(sim),
        _cp: None,
    }
}

async fn real() -> Server {
    let cp = control_plane::ControlPlane::shared("validating-policy", || {
        control_plane::Config::default().with_kcm(["*"])
    })
    .await
    .unwrap_or_else(|e| panic!("starting the real control plane: {e}"));
    let admin = cp
        .client()
        .await
        .unwrap_or_else(|e| panic!("admin client: {e}"));
    // alice may do anything to ConfigMaps (kube-sim enforces no RBAC).
    let rbac = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: vap-test-alice}
rules:
- {apiGroups: [""], resources: [configmaps], verbs: ["*"]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: vap-test-alice}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: vap-test-alice}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: alice}
"#;
    static RBAC: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    RBAC.get_or_init(|| async {
        kubectl::ok(
            &kubectl_bin(),
            cp.kubeconfig_path(),
            &["apply", "-f", "-"],
            Some(rbac),
        )
        .await;
    })
    .await;
    Server {
        name: "kube-apiserver",
        admin,
        alice: cp
            .client_for("alice", &[])
            .await
            .unwrap_or_else(|e| panic!("alice's client: {e}")),
        kubeconfig: cp.kubeconfig_path().to_path_buf(),
        alice_kubeconfig: cp
            .write_kubeconfig_for("alice", "alice", &[])
            .unwrap_or_else(|e| panic!("alice's kubeconfig: {e}")),
        _sim: None,
        _cp: Some(cp),
    }
}

fn kubectl_bin() -> PathBuf {
    kubectl::tool("KUBECTL_PINNED", ".tools/bin/kubectl")
}

impl Server {
    async fn kubectl(&self, args: &[&str]) -> String {
        let (ok, text) = kubectl::run_text(&kubectl_bin(), &self.kubeconfig, args, None).await;
        format!("ok={ok} {}", text.trim())
    }

    async fn kubectl_as_alice(&self, args: &[&str]) -> String {
        let (ok, text) =
            kubectl::run_text(&kubectl_bin(), &self.alice_kubeconfig, args, None).await;
        format!("ok={ok} {}", text.trim())
    }

    async fn apply(&self, yaml: &str) {
        kubectl::ok(
            &kubectl_bin(),
            &self.kubeconfig,
            &["apply", "-f", "-"],
            Some(yaml),
        )
        .await;
    }

    /// A namespace named `tag`, labelled `vap-test: <tag>` for the
    /// bindings' namespaceSelector.
    async fn namespace(&self, tag: &str) {
        let api: Api<Namespace> = Api::all(self.admin.clone());
        let ns: Namespace =
            serde_json::from_value(json!({"metadata": {"name": tag, "labels": {"vap-test": tag}}}))
                .unwrap_or_else(|e| panic!("namespace literal: {e}"));
        api.create(&PostParams::default(), &ns)
            .await
            .unwrap_or_else(|e| panic!("{}: creating namespace {tag}: {e}", self.name));
    }

    async fn configmap(&self, ns: &str, v: Value) {
        let api: Api<ConfigMap> = Api::namespaced(self.admin.clone(), ns);
        let cm: ConfigMap =
            serde_json::from_value(v).unwrap_or_else(|e| panic!("configmap literal: {e}"));
        api.create(&PostParams::default(), &cm)
            .await
            .unwrap_or_else(|e| panic!("{}: creating a configmap: {e}", self.name));
    }

    /// Namespace `tag`, a ConfigMap `probe` in it, and a Deny policy `tag`
    /// on creates and deletes of ConfigMaps there with `validations` (YAML
    /// list items) after one that refuses deleting the probe; waits until
    /// the policy is in effect (the probe's delete is refused).
    async fn create_refusing_policy(&self, tag: &str, validations: &str) {
        self.namespace(tag).await;
        self.configmap(
            tag,
            json!({"metadata": {"name": "probe", "labels": {"probe": "x"}}}),
        )
        .await;
        self.apply(&policy_yaml(
            tag,
            "[CREATE, DELETE]",
            &format!(
                r#"  validations:
  - expression: "oldObject == null || !has(oldObject.metadata.labels) || !('probe' in oldObject.metadata.labels)"
    message: probe refused
{validations}"#
            ),
            "[Deny]",
        ))
        .await;
        self.until_refused(tag, "probe", tag).await;
    }

    /// Polls until a server-side dry-run delete of `ns/name` is refused
    /// by `policy` (the real API server picks policies up, and drops them,
    /// asynchronously).
    async fn until_refused(&self, ns: &str, name: &str, policy: &str) {
        let api: Api<ConfigMap> = Api::namespaced(self.admin.clone(), ns);
        let dp = DeleteParams {
            dry_run: true,
            ..DeleteParams::default()
        };
        let by = format!("ValidatingAdmissionPolicy '{policy}' ");
        test_support::eventually(
            Duration::from_secs(30),
            &format!("{}: {policy} refuses deleting {ns}/{name}", self.name),
            async || match api.delete(name, &dp).await {
                Err(kube::Error::Api(s)) if s.message.contains(&by) => Some(()),
                _ => None,
            },
        )
        .await;
    }
}

/// The parts of an API error a user sees.
fn seen(r: Result<impl std::fmt::Debug, kube::Error>) -> Value {
    match r {
        Ok(_) => json!("ok"),
        Err(kube::Error::Api(s)) => json!({
            "code": s.code, "reason": s.reason, "message": s.message,
            "details": serde_json::to_value(&s.details).unwrap_or(Value::Null),
        }),
        Err(other) => json!(format!("client error: {other}")),
    }
}

/// Runs `scenario` on both servers with the same tag and compares what
/// they showed, observation by observation.
async fn differential<F>(prefix: &str, scenario: F)
where
    F: AsyncFn(&Server, &str) -> Vec<(&'static str, Value)>,
{
    let tag = unique(prefix);
    let (sim, real) = tokio::join!(sim(), real());
    let (on_sim, on_real) = tokio::join!(scenario(&sim, &tag), scenario(&real, &tag));
    assert_eq!(on_sim.len(), on_real.len());
    for ((what, s), (_, r)) in on_sim.iter().zip(&on_real) {
        eprintln!("--- {what}\n{s}");
        assert_eq!(
            s, r,
            "{what}: kube-sim (left) and kube-apiserver v1.36.3 (right) differ"
        );
    }
}

fn policy_yaml(tag: &str, operations: &str, body: &str, actions: &str) -> String {
    format!(
        r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {{name: {tag}}}
spec:
  matchConstraints:
    resourceRules:
    - {{apiGroups: [""], apiVersions: [v1], resources: [configmaps], operations: {operations}}}
{body}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {{name: {tag}}}
spec:
  policyName: {tag}
  validationActions: {actions}
  matchResources:
    namespaceSelector:
      matchLabels: {{vap-test: {tag}}}
"#
    )
}

async fn cleanup(s: &Server, tag: &str) {
    let _ = s
        .kubectl(&[
            "delete",
            "validatingadmissionpolicybinding,validatingadmissionpolicy",
            tag,
            "--ignore-not-found",
        ])
        .await;
    let _ = s
        .kubectl(&["delete", "namespace", tag, "--wait=false"])
        .await;
}

/// The Deny-mode refusal: a DELETE of a ConfigMap in use is refused with a
/// messageExpression over `oldObject`, `variables` and
/// `request.userInfo`, as the API error and in kubectl's output (with and
/// without `--dry-run=server`); once not in use it deletes.
#[tokio::test(flavor = "multi_thread")]
async fn a_delete_in_use_is_refused_with_the_message_expression_on_both_servers() {
    differential("vap-deny", async |s, tag| {
        s.namespace(tag).await;
        s.configmap(
            tag,
            json!({"metadata": {"name": "db", "labels": {"group": "db"}, "annotations": {"example.com/users": "pods/web"}}}),
        )
        .await;
        s.configmap(tag, json!({"metadata": {"name": "free"}}))
            .await;
        s.apply(&policy_yaml(
            tag,
            "[DELETE]",
            r#"  variables:
  - name: users
    expression: "oldObject.metadata.?annotations['example.com/users'].orValue('')"
  validations:
  - expression: "variables.users == ''"
    reason: Forbidden
    messageExpression: >-
      'configmaps "' + oldObject.metadata.name + '" is in use by ' + variables.users +
      ' (asked by ' + request.userInfo.username + ', ' + request.operation + ' ' +
      request.options.kind + ', object is null: ' + string(object == null) + ')'"#,
            "[Deny]",
        ))
        .await;
        s.until_refused(tag, "db", tag).await;
        let admin: Api<ConfigMap> = Api::namespaced(s.admin.clone(), tag);
        let alice: Api<ConfigMap> = Api::namespaced(s.alice.clone(), tag);
        let mut out = vec![
            (
                "admin's delete",
                seen(admin.delete("db", &DeleteParams::default()).await),
            ),
            (
                "alice's delete",
                seen(alice.delete("db", &DeleteParams::default()).await),
            ),
            (
                "kubectl delete --dry-run=server",
                json!(
                    s.kubectl(&["delete", "configmap", "db", "-n", tag, "--dry-run=server"])
                        .await
                ),
            ),
            (
                "kubectl delete as alice",
                json!(
                    s.kubectl_as_alice(&["delete", "configmap", "db", "-n", tag])
                        .await
                ),
            ),
            (
                "a delete of the collection (no name: \"Unknown\")",
                seen(
                    admin
                        .delete_collection(
                            &DeleteParams::default(),
                            &kube::api::ListParams::default().labels("group=db"),
                        )
                        .await,
                ),
            ),
            (
                "a free object deletes",
                json!(s.kubectl(&["delete", "configmap", "free", "-n", tag]).await),
            ),
        ];
        admin
            .patch(
                "db",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {"example.com/users": null}}})),
            )
            .await
            .unwrap_or_else(|e| panic!("{}: freeing db: {e}", s.name));
        out.push((
            "no longer in use, it deletes",
            json!(s.kubectl(&["delete", "configmap", "db", "-n", tag]).await),
        ));
        cleanup(s, tag).await;
        out
    })
    .await;
}

/// The default reason (Invalid, 422), the message fallbacks
/// (messageExpression blank: `failed expression: ...`), another reason's
/// code (RequestEntityTooLarge, 413), `namespaceObject` in a validation,
/// and kubectl's wording of each, on create.
#[tokio::test(flavor = "multi_thread")]
async fn reasons_codes_and_message_fallbacks_match_on_create() {
    differential("vap-msg", async |s, tag| {
        s.create_refusing_policy(
            tag,
            r#"  - expression: "object == null || !has(object.data) || !('a' in object.data)"
    message: no key a
  - expression: "object == null || !has(object.data) || !('b' in object.data)"
    messageExpression: "'   '"
  - expression: "object == null || !has(object.data) || !('c' in object.data)"
    messageExpression: "'key c in namespace ' + namespaceObject.metadata.name + ' labelled ' + namespaceObject.metadata.labels['vap-test']"
    reason: RequestEntityTooLarge
  - expression: "object == null || !has(object.data) || !('d' in object.data)"
    messageExpression: "'multi\\nline'"
    message: one line"#,
        )
        .await;
        let api: Api<ConfigMap> = Api::namespaced(s.admin.clone(), tag);
        let mut out = Vec::new();
        for key in ["a", "b", "c", "d", "e"] {
            let cm: ConfigMap = serde_json::from_value(
                json!({"metadata": {"name": format!("has-{key}")}, "data": {key: "1"}}),
            )
            .unwrap_or_else(|e| panic!("literal: {e}"));
            out.push(("create", seen(api.create(&PostParams::default(), &cm).await)));
        }
        out.push((
            "kubectl create",
            json!(
                s.kubectl(&[
                    "create",
                    "configmap",
                    "kc",
                    "-n",
                    tag,
                    "--from-literal=a=1"
                ])
                .await
            ),
        ));
        cleanup(s, tag).await;
        out
    })
    .await;
}

/// `request.userInfo` of an impersonated request is the user it acts as,
/// with the groups upstream's impersonation filter gives it: a service
/// account's own groups when none are asked for, a node's `system:nodes`
/// (1.36's constrained impersonation, Beta and on) unless legacy
/// impersonation last served the requester, the asked-for groups
/// otherwise, and `system:authenticated` (`system:unauthenticated` for
/// `system:anonymous`).
#[tokio::test(flavor = "multi_thread")]
async fn an_impersonated_request_is_admitted_as_the_impersonated_user() {
    differential("vap-imp", async |s, tag| {
        s.create_refusing_policy(
            tag,
            r#"  - expression: "object == null"
    messageExpression: "'created by ' + request.userInfo.username + ' in ' + request.userInfo.groups.join(',')""#,
        )
        .await;
        // Everyone may create ConfigMaps here (for the real server's RBAC).
        s.apply(&format!(
            r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: {tag}, namespace: {tag}}}
rules:
- {{apiGroups: [""], resources: [configmaps], verbs: [create]}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: {tag}, namespace: {tag}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: {tag}}}
subjects:
- {{apiGroup: rbac.authorization.k8s.io, kind: Group, name: system:authenticated}}
- {{apiGroup: rbac.authorization.k8s.io, kind: Group, name: system:unauthenticated}}
"#
        ))
        .await;
        let robot = format!("system:serviceaccount:{tag}:robot");
        // In this order: upstream tries the mode that last succeeded for
        // the requester first, so a node impersonated after a legacy
        // success (a service account with a group) gets no system:nodes.
        let cases: [(&'static str, &str, &[&str]); 7] = [
            ("a node (arbitrary-node)", "system:node:n1", &[]),
            ("a service account, no groups", &robot, &[]),
            ("a service account with a group (legacy)", &robot, &["team"]),
            ("a node after a legacy success", "system:node:n1", &[]),
            ("a user with groups, system:masters among them", "bob", &["team", "system:masters"]),
            ("a user, no groups", "bob", &[]),
            ("the anonymous user", "system:anonymous", &[]),
        ];
        let mut out = Vec::new();
        for (what, user, groups) in cases {
            let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "made"}});
            let mut req = http::Request::post(format!("/api/v1/namespaces/{tag}/configmaps"))
                .header("Content-Type", "application/json")
                .header("Impersonate-User", user);
            for g in groups {
                req = req.header("Impersonate-Group", *g);
            }
            let req = req
                .body(serde_json::to_vec(&body).unwrap_or_default())
                .unwrap_or_else(|e| panic!("request: {e}"));
            out.push((what, seen(s.admin.request::<ConfigMap>(req).await)));
        }
        cleanup(s, tag).await;
        out
    })
    .await;
}

/// `Warn` answers with a `Warning` header and lets the request through;
/// matchConditions over `request.userInfo` skip a user; an expression
/// error under `failurePolicy: Ignore` admits.
#[tokio::test(flavor = "multi_thread")]
async fn warn_match_conditions_on_the_user_and_ignored_errors() {
    differential("vap-warn", async |s, tag| {
        s.namespace(tag).await;
        for name in ["one", "two", "three", "sentinel"] {
            s.configmap(tag, json!({"metadata": {"name": name}})).await;
        }
        s.apply(&policy_yaml(
            tag,
            "[DELETE]",
            r#"  matchConditions:
  - name: not-alice
    expression: "request.userInfo.username != 'alice'"
  validations:
  - expression: "false"
    messageExpression: "oldObject.metadata.name + ' deleted by ' + request.userInfo.username"
"#,
            "[Warn]",
        ))
        .await;
        // Warn refuses nothing: wait for the warning instead.
        let probe = format!("{tag}-probe");
        test_support::eventually(
            Duration::from_secs(30),
            &format!("{}: the Warn binding is in force", s.name),
            async || {
                s.configmap(tag, json!({"metadata": {"name": probe}})).await;
                let out = s.kubectl(&["delete", "configmap", &probe, "-n", tag]).await;
                out.contains("Warning").then_some(())
            },
        )
        .await;
        let mut out = vec![
            (
                "admin is warned",
                json!(s.kubectl(&["delete", "configmap", "one", "-n", tag]).await),
            ),
            (
                "alice is not",
                json!(
                    s.kubectl_as_alice(&["delete", "configmap", "two", "-n", tag])
                        .await
                ),
            ),
        ];
        s.apply(&format!(
            r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {{name: {tag}-ignore}}
spec:
  failurePolicy: Ignore
  matchConstraints:
    resourceRules:
    - {{apiGroups: [""], apiVersions: [v1], resources: [configmaps], operations: [DELETE]}}
  validations:
  - expression: "oldObject.metadata.annotations['missing'] == 'x'"
  - expression: "oldObject.metadata.name != 'sentinel'"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {{name: {tag}-ignore}}
spec:
  policyName: {tag}-ignore
  validationActions: [Deny]
  matchResources:
    namespaceSelector:
      matchLabels: {{vap-test: {tag}}}
"#
        ))
        .await;
        s.until_refused(tag, "sentinel", &format!("{tag}-ignore"))
            .await;
        out.push((
            "an error under Ignore admits",
            json!(
                s.kubectl_as_alice(&["delete", "configmap", "three", "-n", tag])
                    .await
            ),
        ));
        let _ = s
            .kubectl(&[
                "delete",
                "validatingadmissionpolicybinding,validatingadmissionpolicy",
                &format!("{tag}-ignore"),
            ])
            .await;
        cleanup(s, tag).await;
        out
    })
    .await;
}

/// An expression error under `failurePolicy: Fail` refuses with the
/// expression named and CEL's error (a missing key: cel-go's wording), and a
/// policy whose
/// paramRef finds nothing under `parameterNotFoundAction: Deny` refuses
/// with upstream's configuration error; with the param it validates
/// against `params`.
#[tokio::test(flavor = "multi_thread")]
async fn evaluation_errors_and_params() {
    differential("vap-err", async |s, tag| {
        s.namespace(tag).await;
        let params_ns = format!("{tag}-params");
        s.namespace(&params_ns).await;
        s.configmap(tag, json!({"metadata": {"name": "target"}}))
            .await;
        s.apply(&policy_yaml(
            tag,
            "[DELETE]",
            r#"  validations:
  - expression: "oldObject.metadata.annotations['missing'] == 'x'""#,
            "[Deny]",
        ))
        .await;
        s.until_refused(tag, "target", tag).await;
        let api: Api<ConfigMap> = Api::namespaced(s.admin.clone(), tag);
        let err = seen(api.delete("target", &DeleteParams::default()).await);
        let mut out = vec![("an evaluation error under Fail", err)];
        let _ = s
            .kubectl(&[
                "delete",
                "validatingadmissionpolicybinding,validatingadmissionpolicy",
                tag,
            ])
            .await;
        s.apply(&format!(
            r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {{name: {tag}-params}}
spec:
  paramKind: {{apiVersion: v1, kind: ConfigMap}}
  matchConstraints:
    resourceRules:
    - {{apiGroups: [""], apiVersions: [v1], resources: [configmaps], operations: [DELETE]}}
  validations:
  - expression: "oldObject.metadata.name != params.data.protected"
    messageExpression: "'protected by ' + params.metadata.name"
    reason: Forbidden
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {{name: {tag}-params}}
spec:
  policyName: {tag}-params
  validationActions: [Deny]
  paramRef: {{name: limits, namespace: {params_ns}, parameterNotFoundAction: Deny}}
  matchResources:
    namespaceSelector:
      matchLabels: {{vap-test: {tag}}}
"#
        ))
        .await;
        s.until_refused(tag, "target", &format!("{tag}-params"))
            .await;
        out.push((
            "no param under Deny",
            seen(api.delete("target", &DeleteParams::default()).await),
        ));
        s.configmap(
            &params_ns,
            json!({"metadata": {"name": "limits"}, "data": {"protected": "target"}}),
        )
        .await;
        let refusal = test_support::eventually(
            Duration::from_secs(30),
            &format!("{}: the param is found", s.name),
            async || {
                let r = seen(
                    api.delete(
                        "target",
                        &DeleteParams {
                            dry_run: true,
                            ..DeleteParams::default()
                        },
                    )
                    .await,
                );
                (r["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("protected by")))
                .then_some(r)
            },
        )
        .await;
        out.push(("validated against the param", refusal));
        let _ = s
            .kubectl(&[
                "delete",
                "validatingadmissionpolicybinding,validatingadmissionpolicy",
                &format!("{tag}-params"),
            ])
            .await;
        let _ = s
            .kubectl(&["delete", "namespace", &params_ns, "--wait=false"])
            .await;
        cleanup(s, tag).await;
        out
    })
    .await;
}

/// A policy that refuses every DELETE of ConfigMaps in its namespace
/// unless the namespace is being deleted (`namespaceObject`) or the
/// garbage collector asks: deleting the namespace gets through (the
/// namespace controller's deletes see the terminating namespace), and so
/// does the garbage collector's delete of a dependent.
#[tokio::test(flavor = "multi_thread")]
async fn namespace_controller_and_garbage_collector_deletes_get_through() {
    differential("vap-ns", async |s, tag| {
        s.namespace(tag).await;
        s.configmap(tag, json!({"metadata": {"name": "owner"}}))
            .await;
        let owner: ConfigMap = Api::namespaced(s.admin.clone(), tag)
            .get("owner")
            .await
            .unwrap_or_else(|e| panic!("{}: owner: {e}", s.name));
        let uid = owner.metadata.uid.unwrap_or_default();
        s.configmap(
            tag,
            json!({"metadata": {"name": "dependent", "ownerReferences": [
                {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid}
            ]}}),
        )
        .await;
        s.configmap(tag, json!({"metadata": {"name": "kept"}}))
            .await;
        s.apply(&policy_yaml(
            tag,
            "[DELETE]",
            r#"  validations:
  - expression: >-
      has(namespaceObject.metadata.deletionTimestamp) ||
      request.userInfo.username == 'system:serviceaccount:kube-system:generic-garbage-collector' ||
      oldObject.metadata.name == 'owner'
    messageExpression: "'refused for ' + request.userInfo.username""#,
            "[Deny]",
        ))
        .await;
        s.until_refused(tag, "kept", tag).await;
        let api: Api<ConfigMap> = Api::namespaced(s.admin.clone(), tag);
        let mut out = vec![(
            "a user's delete",
            seen(api.delete("kept", &DeleteParams::default()).await),
        )];
        api.delete("owner", &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("{}: deleting the owner: {e}", s.name));
        test_support::eventually(
            Duration::from_secs(60),
            &format!("{}: the garbage collector deletes the dependent", s.name),
            async || {
                api.get_opt("dependent")
                    .await
                    .ok()
                    .flatten()
                    .is_none()
                    .then_some(())
            },
        )
        .await;
        out.push(("the dependent is gone", json!("yes")));
        let namespaces: Api<Namespace> = Api::all(s.admin.clone());
        namespaces
            .delete(tag, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("{}: deleting the namespace: {e}", s.name));
        test_support::eventually(
            Duration::from_secs(60),
            &format!("{}: the namespace goes", s.name),
            async || {
                namespaces
                    .get_opt(tag)
                    .await
                    .ok()
                    .flatten()
                    .is_none()
                    .then_some(())
            },
        )
        .await;
        out.push(("the namespace is gone", json!("yes")));
        cleanup(s, tag).await;
        out
    })
    .await;
}

/// The API's own validation of policies and bindings: the same errors, in
/// the same order, for the same mistakes.
#[tokio::test(flavor = "multi_thread")]
async fn invalid_policies_and_bindings_get_the_same_errors() {
    differential("vap-invalid", async |s, tag| {
        let mut out = Vec::new();
        for (what, yaml) in [
            (
                "binding",
                format!(
                    "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicyBinding\nmetadata: {{name: {tag}-a}}\nspec:\n  policyName: p\n  validationActions: [Deny, Warn, Deny, Log]\n"
                ),
            ),
            (
                "binding without policy or actions",
                format!(
                    "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicyBinding\nmetadata: {{name: {tag}-b}}\nspec:\n  paramRef: {{name: x}}\n"
                ),
            ),
            (
                "policy",
                format!(
                    "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\nmetadata: {{name: {tag}-c}}\nspec:\n  failurePolicy: Sometimes\n  matchConstraints:\n    resourceRules:\n    - {{apiGroups: [\"\"], apiVersions: [v1], resources: [configmaps], operations: [DELETE, PATCH]}}\n  validations:\n  - {{expression: \"true\", message: \"a\\nb\", reason: Conflict}}\n  - {{expression: \"true\", messageExpression: \" \", message: \" \"}}\n"
                ),
            ),
            (
                "policy without validations",
                format!(
                    "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\nmetadata: {{name: {tag}-d}}\nspec:\n  matchConstraints:\n    resourceRules:\n    - {{apiGroups: [\"\"], apiVersions: [v1], resources: [configmaps], operations: [\"*\"]}}\n"
                ),
            ),
        ] {
            let (ok, text) =
                kubectl::run_text(&kubectl_bin(), &s.kubeconfig, &["create", "-f", "-"], Some(&yaml))
                    .await;
            out.push((what, json!(format!("ok={ok} {}", text.trim()))));
        }
        s.apply(&policy_yaml(
            tag,
            "[DELETE]",
            "  validations:\n  - expression: \"true\"",
            "[Audit]",
        ))
        .await;
        out.push((
            "the defaults",
            json!(
                s.kubectl(&[
                    "get",
                    "validatingadmissionpolicy",
                    tag,
                    "-o",
                    "custom-columns=NAME:.metadata.name,FAIL:.spec.failurePolicy,POLICY:.spec.matchConstraints.matchPolicy,SCOPE:.spec.matchConstraints.resourceRules[0].scope,STATUS:.status"
                ])
                .await
            ),
        ));
        out.push((
            "the binding",
            json!(
                s.kubectl(&[
                    "get",
                    "validatingadmissionpolicybinding",
                    tag,
                    "-o",
                    "jsonpath={.spec}"
                ])
                .await
            ),
        ));
        // The printer columns, without AGE (the last).
        let table = s
            .kubectl(&[
                "get",
                "validatingadmissionpolicy,validatingadmissionpolicybinding",
                tag,
            ])
            .await;
        let rows: Vec<String> = table
            .lines()
            .map(|l| {
                let mut w: Vec<&str> = l.split_whitespace().collect();
                w.pop();
                w.join(" ")
            })
            .collect();
        out.push(("kubectl get", json!(rows)));
        cleanup(s, tag).await;
        out
    })
    .await;
}
