//! The Node authorizer of `--authorization-mode=Node,RBAC`
//! (k8s.io/kubernetes v1.36.3 plugin/pkg/auth/authorizer/node:
//! `node_authorizer.go`, `graph.go`, `graph_populator.go`).
//!
//! A node identity (`system:node:<name>` in `system:nodes`,
//! pkg/auth/nodeidentifier) may read a secret, configmap,
//! PersistentVolumeClaim, PersistentVolume, ResourceClaim,
//! VolumeAttachment, ResourceSlice, ServiceAccount (and create its token)
//! or pod only when upstream's graph relates the object to the node:
//!
//! ```text
//! node <- pod (spec.nodeName)
//! node <- pod <- secret | configmap | serviceaccount | pvc | resourceclaim
//! node <- pod <- pvc <- pv (pv.spec.claimRef) <- secret (kubelet-visible refs)
//! node <- volumeattachment | resourceslice (spec.nodeName)
//! ```
//!
//! Its own Node, Lease and CSINode by name, pods by a `spec.nodeName`
//! field selector, and everything else by the static rules of the
//! bootstrap ClusterRole `system:node` (`bootstrappolicy.NodeRules()`).
//! Upstream keeps the graph in memory, fed by informers (so it lags the
//! store by the informers' delay); kube-sim computes the same relations
//! from its store at each request, so its answers are upstream's once the
//! informers have caught up.

use std::sync::Arc;

use serde_json::Value;

use crate::http::State;
use crate::resources;
use crate::reviews::{Attributes, FieldOp, ResourceAttrs};

/// The Node authorizer's answer: allow, or no opinion with a reason (empty
/// for none), after which the union authorizer asks RBAC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NodeDecision {
    Allow,
    NoOpinion(String),
}

use NodeDecision::{Allow, NoOpinion};

fn no_opinion(reason: impl Into<String>) -> NodeDecision {
    NoOpinion(reason.into())
}

/// `nodeidentifier.NodeIdentity`: the node name of a `system:node:<name>`
/// user in `system:nodes` (`Some("")` for `system:node:` itself), `None`
/// for anyone else.
pub(crate) fn node_identity<'a>(user: &'a str, groups: &[String]) -> Option<&'a str> {
    let name = user.strip_prefix("system:node:")?;
    groups.iter().any(|g| g == "system:nodes").then_some(name)
}

/// Feature gates the authorizer reads, at their v1.36 defaults:
/// `AuthorizeNodeWithSelectors` (GA, locked on),
/// `KubeletServiceAccountTokenForCredentialProviders` (beta, on) and
/// `PodCertificateRequest` (beta, off).
const KUBELET_SA_TOKEN_FOR_CREDENTIAL_PROVIDERS: bool = true;
const POD_CERTIFICATE_REQUEST: bool = false;

/// The vertex types of the graph that requests start from (`vertexType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Vertex {
    ConfigMap,
    Slice,
    Pod,
    Pvc,
    Pv,
    ResourceClaim,
    Secret,
    VolumeAttachment,
    ServiceAccount,
}

/// `NodeAuthorizer.Authorize`.
pub(crate) fn authorize(
    state: &Arc<State>,
    user: &str,
    groups: &[String],
    attrs: &Attributes,
) -> NodeDecision {
    let Some(node) = node_identity(user, groups) else {
        return no_opinion("");
    };
    if node.is_empty() {
        return no_opinion(format!("unknown node for user {user:?}"));
    }
    if let Some(r) = &attrs.resource {
        let verb = attrs.verb.as_str();
        let a = Request {
            state,
            node,
            verb,
            r,
        };
        match (r.group.as_str(), r.resource.as_str()) {
            ("", "secrets") => return a.read_namespaced_object(Vertex::Secret),
            ("", "configmaps") => return a.read_namespaced_object(Vertex::ConfigMap),
            ("", "persistentvolumeclaims") => {
                if r.subresource == "status" {
                    return a.status_update(Vertex::Pvc);
                }
                return a.get(Vertex::Pvc);
            }
            ("", "persistentvolumes") => return a.get(Vertex::Pv),
            ("resource.k8s.io", "resourceclaims") => return a.get(Vertex::ResourceClaim),
            ("storage.k8s.io", "volumeattachments") => return a.get(Vertex::VolumeAttachment),
            ("", "serviceaccounts") => return a.service_account(),
            ("coordination.k8s.io", "leases") => return a.lease(),
            ("storage.k8s.io", "csinodes") => return a.csi_node(),
            ("resource.k8s.io", "resourceslices") => return a.resource_slice(),
            ("", "nodes") => return a.node(),
            ("", "pods") => return a.pod(),
            ("certificates.k8s.io", "podcertificaterequests") => {
                // Decided by the graph only with PodCertificateRequest
                // (off in 1.36; kube-sim does not serve them), and never
                // by the static rules.
                return no_opinion("");
            }
            _ => {}
        }
    }
    if crate::reviews::node_rules_allow(attrs) {
        Allow
    } else {
        no_opinion("")
    }
}

/// One resource request of node `node`.
struct Request<'a> {
    state: &'a Arc<State>,
    node: &'a str,
    verb: &'a str,
    r: &'a ResourceAttrs,
}

impl Request<'_> {
    /// `authorizeStatusUpdate`.
    fn status_update(&self, start: Vertex) -> NodeDecision {
        if !matches!(self.verb, "update" | "patch") {
            return no_opinion("can only get/update/patch this type");
        }
        if self.r.subresource != "status" {
            return no_opinion("can only update status subresource");
        }
        self.related(start)
    }

    /// `authorizeGet`.
    fn get(&self, start: Vertex) -> NodeDecision {
        if self.verb != "get" {
            return no_opinion("can only get individual resources of this type");
        }
        if !self.r.subresource.is_empty() {
            return no_opinion("cannot get subresource");
        }
        self.related(start)
    }

    /// `authorizeReadNamespacedObject`: get, list and watch of one named
    /// object (a list or watch names one by a `metadata.name` field
    /// selector).
    fn read_namespaced_object(&self, start: Vertex) -> NodeDecision {
        if !matches!(self.verb, "get" | "list" | "watch") {
            return no_opinion("can only read resources of this type");
        }
        if !self.r.subresource.is_empty() {
            return no_opinion("cannot read subresource");
        }
        if self.r.namespace.is_empty() {
            return no_opinion("can only read namespaced object of this type");
        }
        self.related(start)
    }

    /// `authorize`: a named object with a path to the node.
    fn related(&self, start: Vertex) -> NodeDecision {
        if self.r.name.is_empty() {
            return no_opinion("No Object name found");
        }
        self.path_from(start)
    }

    /// `hasPathFrom`, with its one reason for every way it fails.
    fn path_from(&self, start: Vertex) -> NodeDecision {
        if has_path(
            self.state,
            self.node,
            start,
            &self.r.namespace,
            &self.r.name,
        ) {
            Allow
        } else {
            no_opinion(format!(
                "no relationship found between node '{}' and this object",
                self.node
            ))
        }
    }

    /// `authorizeServiceAccount`: get (with the credential-provider or pod
    /// certificate gates), else `authorizeCreateToken`.
    fn service_account(&self) -> NodeDecision {
        if self.verb == "get" && self.r.subresource.is_empty() {
            if !(KUBELET_SA_TOKEN_FOR_CREDENTIAL_PROVIDERS || POD_CERTIFICATE_REQUEST) {
                return no_opinion("not allowed to get service accounts");
            }
            return self.read_namespaced_object(Vertex::ServiceAccount);
        }
        if self.verb != "create" || self.r.name.is_empty() {
            return no_opinion("can only create tokens for individual service accounts");
        }
        if self.r.subresource != "token" {
            return no_opinion("can only create token subresource of serviceaccount");
        }
        self.path_from(Vertex::ServiceAccount)
    }

    /// `authorizeLease`: the node's own Lease in `kube-node-lease`.
    fn lease(&self) -> NodeDecision {
        if !matches!(self.verb, "get" | "create" | "update" | "patch" | "delete") {
            return no_opinion("can only get, create, update, patch, or delete a node lease");
        }
        if self.r.namespace != "kube-node-lease" {
            return no_opinion(
                "can only access leases in the \"kube-node-lease\" system namespace",
            );
        }
        if self.verb != "create" && self.r.name != self.node {
            return no_opinion(
                "can only access node lease with the same name as the requesting node",
            );
        }
        Allow
    }

    /// `authorizeCSINode`: the node's own CSINode.
    fn csi_node(&self) -> NodeDecision {
        if !matches!(self.verb, "get" | "create" | "update" | "patch" | "delete") {
            return no_opinion("can only get, create, update, patch, or delete a CSINode");
        }
        if !self.r.subresource.is_empty() {
            return no_opinion("cannot authorize CSINode subresources");
        }
        if self.verb != "create" && self.r.name != self.node {
            return no_opinion("can only access CSINode with the same name as the requesting node");
        }
        Allow
    }

    /// Whether the request's field selector requires `field` to equal the
    /// node's name.
    fn selects_node(&self, field: &str) -> bool {
        self.r
            .field_selector
            .iter()
            .any(|f| f.field == field && f.op == FieldOp::Equals && f.value == self.node)
    }

    /// `authorizeResourceSlice` (with `AuthorizeNodeWithSelectors`).
    fn resource_slice(&self) -> NodeDecision {
        if !self.r.subresource.is_empty() {
            return no_opinion("cannot authorize ResourceSlice subresources");
        }
        match self.verb {
            "create" => Allow,
            "get" | "update" | "patch" | "delete" => self.related(Vertex::Slice),
            "watch" | "list" | "deletecollection" => {
                if self.selects_node("spec.nodeName") {
                    Allow
                } else {
                    no_opinion(
                        "can only list/watch/deletecollection resourceslices with nodeName field selector",
                    )
                }
            }
            _ => no_opinion(
                "only the following verbs are allowed for a ResourceSlice: get, watch, list, create, update, patch, delete, deletecollection",
            ),
        }
    }

    /// `authorizeNode`: its own Node object.
    fn node(&self) -> NodeDecision {
        match (self.r.subresource.as_str(), self.verb) {
            ("", "create" | "update" | "patch") => Allow,
            ("", "get" | "list" | "watch") => {
                if self.r.name == self.node {
                    Allow
                } else if self.r.name.is_empty() {
                    no_opinion(format!(
                        "node '{}' cannot read all nodes, only its own Node object",
                        self.node
                    ))
                } else {
                    no_opinion(format!(
                        "node '{}' cannot read '{}', only its own Node object",
                        self.node, self.r.name
                    ))
                }
            }
            ("status", "update" | "patch") => Allow,
            _ => no_opinion(""),
        }
    }

    /// `authorizePod`: its pods, by name or by a `spec.nodeName` selector;
    /// mirror pods' create and delete, status and eviction (which the
    /// NodeRestriction admission plugin narrows).
    fn pod(&self) -> NodeDecision {
        match (self.r.subresource.as_str(), self.verb) {
            ("", "get") => self.get(Vertex::Pod),
            ("", "list" | "watch") => {
                if self.selects_node("spec.nodeName") {
                    Allow
                } else if !self.r.name.is_empty() {
                    self.related(Vertex::Pod)
                } else {
                    no_opinion("can only list/watch pods with spec.nodeName field selector")
                }
            }
            ("", "create" | "delete") => Allow,
            ("status", "update" | "patch") => Allow,
            ("eviction", "create") => Allow,
            _ => no_opinion(""),
        }
    }
}

// ------------------------------------------------------------------ graph

fn rid(group: &str, version: &str, resource: &str) -> Option<resources::ResId> {
    resources::find(group, version, resource)
}

/// The stored objects of a resource (in `ns`); none if kube-sim does not
/// serve it.
fn objects(state: &Arc<State>, res: Option<resources::ResId>, ns: Option<&str>) -> Vec<Value> {
    let Some(rid) = res else {
        return Vec::new();
    };
    let (items, _) = state.store.snapshot(rid, ns);
    items.into_iter().map(|s| s.value.clone()).collect()
}

fn text<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    let mut v = v;
    for k in path {
        v = &v[*k];
    }
    v.as_str().unwrap_or("")
}

fn list<'a>(v: &'a Value, key: &str) -> impl Iterator<Item = &'a Value> {
    v[key].as_array().into_iter().flatten()
}

/// The bound pods of `ns` in the graph with an edge to `node`
/// (`graphPopulator.updatePod`: only pods with `spec.nodeName`).
fn pods_on(state: &Arc<State>, ns: &str, node: &str) -> Vec<Value> {
    let mut pods = objects(state, rid("", "v1", "pods"), Some(ns));
    pods.retain(|p| text(p, &["spec", "nodeName"]) == node);
    pods
}

/// `AddPod` gives a mirror pod (annotation `kubernetes.io/config.mirror`)
/// no edges but its own to the node.
fn is_mirror(pod: &Value) -> bool {
    pod["metadata"]["annotations"]
        .get("kubernetes.io/config.mirror")
        .is_some()
}

/// `podutil.VisitContainers(AllContainers)`: init, regular and ephemeral
/// containers.
fn containers(pod: &Value) -> impl Iterator<Item = &Value> {
    let spec = &pod["spec"];
    list(spec, "initContainers")
        .chain(list(spec, "containers"))
        .chain(list(spec, "ephemeralContainers"))
}

/// The names a container's `envFrom[].<from>.name` and
/// `env[].valueFrom.<key_ref>.name` refer to.
fn container_refs<'a>(
    c: &'a Value,
    from: &'a str,
    key_ref: &'a str,
) -> impl Iterator<Item = &'a str> {
    list(c, "envFrom")
        .map(move |e| text(e, &[from, "name"]))
        .chain(list(c, "env").map(move |e| text(e, &["valueFrom", key_ref, "name"])))
}

/// The source of a volume among `keys`, the first present in that order
/// (the `switch` of `VisitPodSecretNames` and `VisitPVSecretNames`).
fn first_source<'a>(v: &'a Value, keys: &[&'a str]) -> Option<(&'a str, &'a Value)> {
    keys.iter()
        .find_map(|k| v.get(*k).filter(|s| !s.is_null()).map(|s| (*k, s)))
}

/// `podutil.VisitPodSecretNames`: image pull secrets, the containers'
/// env and envFrom, and the volumes' secret references (`secret`,
/// projected secrets, the secret refs of in-tree and inline CSI volumes).
fn pod_secret_names(pod: &Value) -> Vec<&str> {
    let mut out: Vec<&str> = list(&pod["spec"], "imagePullSecrets")
        .map(|r| text(r, &["name"]))
        .collect();
    out.extend(containers(pod).flat_map(|c| container_refs(c, "secretRef", "secretKeyRef")));
    const SOURCES: [&str; 11] = [
        "azureFile",
        "cephfs",
        "cinder",
        "flexVolume",
        "projected",
        "rbd",
        "secret",
        "scaleIO",
        "iscsi",
        "storageos",
        "csi",
    ];
    for v in list(&pod["spec"], "volumes") {
        match first_source(v, &SOURCES) {
            Some(("azureFile", s)) => out.push(text(s, &["secretName"])),
            Some(("projected", s)) => {
                out.extend(list(s, "sources").map(|p| text(p, &["secret", "name"])));
            }
            Some(("secret", s)) => out.push(text(s, &["secretName"])),
            Some(("csi", s)) => out.push(text(s, &["nodePublishSecretRef", "name"])),
            Some((_, s)) => out.push(text(s, &["secretRef", "name"])),
            None => {}
        }
    }
    out.retain(|n| !n.is_empty());
    out
}

/// `podutil.VisitPodConfigmapNames`: the containers' env and envFrom, and
/// `configMap` and projected configMap volumes.
fn pod_configmap_names(pod: &Value) -> Vec<&str> {
    let mut out: Vec<&str> = containers(pod)
        .flat_map(|c| container_refs(c, "configMapRef", "configMapKeyRef"))
        .collect();
    for v in list(&pod["spec"], "volumes") {
        match first_source(v, &["projected", "configMap"]) {
            Some(("projected", s)) => {
                out.extend(list(s, "sources").map(|p| text(p, &["configMap", "name"])));
            }
            Some((_, s)) => out.push(text(s, &["name"])),
            None => {}
        }
    }
    out.retain(|n| !n.is_empty());
    out
}

/// The claims of a pod's volumes: `persistentVolumeClaim.claimName`, or an
/// ephemeral volume's generated claim `<pod>-<volume>`
/// (`ephemeral.VolumeClaimName`).
fn pod_claim_names(pod: &Value) -> Vec<String> {
    let pod_name = text(pod, &["metadata", "name"]);
    list(&pod["spec"], "volumes")
        .filter_map(|v| {
            if let Some(c) = v.get("persistentVolumeClaim").filter(|c| !c.is_null()) {
                Some(text(c, &["claimName"]).to_string())
            } else if v.get("ephemeral").is_some_and(|e| !e.is_null()) {
                Some(format!("{pod_name}-{}", text(v, &["name"])))
            } else {
                None
            }
        })
        .filter(|n| !n.is_empty())
        .collect()
}

/// The ResourceClaims of a pod (`resourceclaim.Name`): a claim it names,
/// or the one `status.resourceClaimStatuses` says was made from its
/// template; and `status.extendedResourceClaimStatus.resourceClaimName`.
fn pod_resource_claim_names(pod: &Value) -> Vec<&str> {
    let statuses: Vec<&Value> = list(&pod["status"], "resourceClaimStatuses").collect();
    let mut out: Vec<&str> = list(&pod["spec"], "resourceClaims")
        .filter_map(|c| {
            if let Some(n) = c["resourceClaimName"].as_str() {
                return Some(n);
            }
            c["resourceClaimTemplateName"].as_str()?;
            let name = c["name"].as_str().unwrap_or("");
            statuses
                .iter()
                .find(|s| s["name"].as_str().unwrap_or("") == name)
                .and_then(|s| s["resourceClaimName"].as_str())
        })
        .collect();
    let extended = text(
        &pod["status"],
        &["extendedResourceClaimStatus", "resourceClaimName"],
    );
    if !extended.is_empty() {
        out.push(extended);
    }
    out
}

/// The pod's ServiceAccount (`serviceAccountName`; the deprecated
/// `serviceAccount` is what conversion fills it from).
fn pod_service_account(pod: &Value) -> &str {
    match text(pod, &["spec", "serviceAccountName"]) {
        "" => text(pod, &["spec", "serviceAccount"]),
        n => n,
    }
}

/// `pvutil.VisitPVSecretNames`, the kubelet-visible references only (not
/// CSI's controller publish and expand secrets): `(namespace, name)`, the
/// namespace of the claim where the reference names none.
fn pv_kubelet_secrets(pv: &Value) -> Vec<(String, String)> {
    let src = &pv["spec"];
    let claim_ns = text(src, &["claimRef", "namespace"]);
    let or_claim = |ns: &str| {
        if ns.is_empty() {
            claim_ns.to_string()
        } else {
            ns.to_string()
        }
    };
    let mut out: Vec<(String, String)> = Vec::new();
    const SOURCES: [&str; 9] = [
        "azureFile",
        "cephfs",
        "cinder",
        "flexVolume",
        "rbd",
        "scaleIO",
        "iscsi",
        "storageos",
        "csi",
    ];
    match first_source(src, &SOURCES) {
        Some(("azureFile", s)) => {
            out.push((
                or_claim(text(s, &["secretNamespace"])),
                text(s, &["secretName"]).into(),
            ));
        }
        Some(("cinder" | "storageos", s)) => out.push((
            text(s, &["secretRef", "namespace"]).into(),
            text(s, &["secretRef", "name"]).into(),
        )),
        Some(("csi", s)) => {
            for k in [
                "nodePublishSecretRef",
                "nodeStageSecretRef",
                "nodeExpandSecretRef",
            ] {
                out.push((
                    text(s, &[k, "namespace"]).into(),
                    text(s, &[k, "name"]).into(),
                ));
            }
        }
        Some((_, s)) if s.get("secretRef").is_some_and(|r| !r.is_null()) => out.push((
            or_claim(text(s, &["secretRef", "namespace"])),
            text(s, &["secretRef", "name"]).into(),
        )),
        _ => {}
    }
    out.retain(|(_, n)| !n.is_empty());
    out
}

/// Whether a non-mirror pod of `ns` bound to `node` relates `uses`.
fn used_on(state: &Arc<State>, ns: &str, node: &str, uses: impl Fn(&Value) -> bool) -> bool {
    pods_on(state, ns, node)
        .iter()
        .any(|p| !is_mirror(p) && uses(p))
}

/// Whether the claim `ns/name` is a volume of a pod on `node`.
fn claim_on(state: &Arc<State>, ns: &str, name: &str, node: &str) -> bool {
    used_on(state, ns, node, |p| {
        pod_claim_names(p).iter().any(|c| c == name)
    })
}

/// Whether a PersistentVolume has a path to `node`: it names a claim
/// (`spec.claimRef`) that a pod on the node uses (`AddPV`: a PV without
/// a claimRef is not in the graph).
fn pv_on(state: &Arc<State>, pv: &Value, node: &str) -> bool {
    let claim = &pv["spec"]["claimRef"];
    claim.is_object()
        && claim_on(
            state,
            text(claim, &["namespace"]),
            text(claim, &["name"]),
            node,
        )
}

/// Whether the graph has a path from the object `start` `ns/name` to
/// `node` (`hasPathFrom`, computed from the store).
fn has_path(state: &Arc<State>, node: &str, start: Vertex, ns: &str, name: &str) -> bool {
    match start {
        Vertex::Pod => pods_on(state, ns, node)
            .iter()
            .any(|p| text(p, &["metadata", "name"]) == name),
        Vertex::Secret => {
            used_on(state, ns, node, |p| pod_secret_names(p).contains(&name))
                || objects(state, rid("", "v1", "persistentvolumes"), None)
                    .iter()
                    .any(|pv| {
                        pv["spec"]["claimRef"].is_object()
                            && pv_kubelet_secrets(pv)
                                .iter()
                                .any(|(sns, sname)| sns == ns && sname == name)
                            && pv_on(state, pv, node)
                    })
        }
        Vertex::ConfigMap => used_on(state, ns, node, |p| pod_configmap_names(p).contains(&name)),
        Vertex::ServiceAccount => used_on(state, ns, node, |p| pod_service_account(p) == name),
        Vertex::Pvc => claim_on(state, ns, name, node),
        Vertex::ResourceClaim => used_on(state, ns, node, |p| {
            pod_resource_claim_names(p).contains(&name)
        }),
        Vertex::Pv => {
            ns.is_empty()
                && objects(state, rid("", "v1", "persistentvolumes"), None)
                    .iter()
                    .any(|pv| text(pv, &["metadata", "name"]) == name && pv_on(state, pv, node))
        }
        Vertex::VolumeAttachment | Vertex::Slice => {
            let res = match start {
                Vertex::Slice => rid("resource.k8s.io", "v1", "resourceslices"),
                _ => rid("storage.k8s.io", "v1", "volumeattachments"),
            };
            ns.is_empty()
                && objects(state, res, None).iter().any(|o| {
                    text(o, &["metadata", "name"]) == name && text(o, &["spec", "nodeName"]) == node
                })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_pod_relates_what_upstream_visits() {
        let pod = json!({
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {
                "nodeName": "n1",
                "imagePullSecrets": [{"name": "pull"}, {"name": ""}],
                "initContainers": [{"env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "init-env", "key": "k"}}}]}],
                "containers": [{
                    "envFrom": [{"secretRef": {"name": "env-from"}}, {"configMapRef": {"name": "cm-from"}}],
                    "env": [{"name": "B", "valueFrom": {"configMapKeyRef": {"name": "cm-env", "key": "k"}}}]
                }],
                "ephemeralContainers": [{"envFrom": [{"secretRef": {"name": "debug"}}]}],
                "volumes": [
                    {"name": "s", "secret": {"secretName": "vol"}},
                    {"name": "p", "projected": {"sources": [{"secret": {"name": "proj"}}, {"configMap": {"name": "cm-proj"}}]}},
                    {"name": "c", "csi": {"driver": "d", "nodePublishSecretRef": {"name": "csi"}}},
                    {"name": "r", "rbd": {"monitors": ["m"], "image": "i", "secretRef": {"name": "rbd"}}},
                    {"name": "cm", "configMap": {"name": "cm-vol"}},
                    {"name": "data", "persistentVolumeClaim": {"claimName": "claim"}},
                    {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}
                ]
            }
        });
        assert_eq!(
            pod_secret_names(&pod),
            [
                "pull", "init-env", "env-from", "debug", "vol", "proj", "csi", "rbd"
            ]
        );
        assert_eq!(
            pod_configmap_names(&pod),
            ["cm-from", "cm-env", "cm-proj", "cm-vol"]
        );
        assert_eq!(pod_claim_names(&pod), ["claim", "web-scratch"]);
    }

    #[test]
    fn a_pv_relates_its_kubelet_visible_secrets() {
        let pv = json!({"spec": {
            "claimRef": {"namespace": "shop", "name": "claim"},
            "csi": {
                "driver": "d", "volumeHandle": "h",
                "controllerPublishSecretRef": {"namespace": "a", "name": "ctrl"},
                "nodePublishSecretRef": {"namespace": "b", "name": "publish"},
                "nodeStageSecretRef": {"namespace": "c", "name": "stage"}
            }
        }});
        assert_eq!(
            pv_kubelet_secrets(&pv),
            [("b".into(), "publish".into()), ("c".into(), "stage".into())]
        );
        let rbd = json!({"spec": {
            "claimRef": {"namespace": "shop", "name": "claim"},
            "rbd": {"secretRef": {"name": "key"}}
        }});
        assert_eq!(pv_kubelet_secrets(&rbd), [("shop".into(), "key".into())]);
    }
}
