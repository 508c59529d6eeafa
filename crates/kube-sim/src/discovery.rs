//! Discovery documents: `/version`, `/api`, `/apis`, `/api/v1`,
//! `/apis/<g>[/<v>]`, in both the legacy (APIResourceList) and the aggregated
//! (apidiscovery.k8s.io/v2 APIGroupDiscoveryList) forms, as
//! staging/src/k8s.io/apiserver/pkg/endpoints/discovery serves them.

use serde_json::{Value, json};

use crate::resources::{RESOURCES, ResourceDef, groups_of};

/// The Kubernetes version kube-sim reports.
pub const KUBE_MAJOR: &str = "1";
pub const KUBE_MINOR: &str = "33";
pub const KUBE_GIT_VERSION: &str = "v1.33.0";

pub fn version() -> Value {
    json!({
        "major": KUBE_MAJOR,
        "minor": KUBE_MINOR,
        "emulationMajor": KUBE_MAJOR,
        "emulationMinor": KUBE_MINOR,
        "minCompatibilityMajor": KUBE_MAJOR,
        "minCompatibilityMinor": "32",
        "gitVersion": KUBE_GIT_VERSION,
        "gitCommit": "kube-sim",
        "gitTreeState": "clean",
        "buildDate": "2025-04-23T00:00:00Z",
        "goVersion": "go1.24.2",
        "compiler": "gc",
        "platform": "linux/amd64"
    })
}

pub fn api_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]
    })
}

fn group_doc(name: &str, versions: &[&str]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
        .collect();
    json!({
        "name": name,
        "versions": vs,
        "preferredVersion": {"groupVersion": format!("{name}/{}", versions[0]), "version": versions[0]}
    })
}

/// The built-in resources, the review resources, then a store's custom ones.
fn all<'a>(custom: &'a [&'static ResourceDef]) -> impl Iterator<Item = &'a ResourceDef> + Clone {
    RESOURCES
        .iter()
        .chain(crate::self_review::REVIEW_RESOURCES)
        .chain(custom.iter().copied())
}

/// Whether `group/version` is switched off (`SimConfig::disabled_group_versions`,
/// kube-apiserver's `--runtime-config=<group>/<version>=false`).
pub fn is_off(off: &[String], group: &str, version: &str) -> bool {
    off.iter()
        .any(|gv| gv.split_once('/') == Some((group, version)))
}

/// The served groups (built-in and custom) with their versions, less those
/// switched off.
fn groups(
    custom: &[&'static ResourceDef],
    off: &[String],
) -> Vec<(&'static str, Vec<&'static str>)> {
    groups_of(all(custom))
        .into_iter()
        .filter_map(|(g, vs)| {
            let vs: Vec<&'static str> = vs.into_iter().filter(|v| !is_off(off, g, v)).collect();
            (!vs.is_empty()).then_some((g, vs))
        })
        .collect()
}

pub fn api_group_list(custom: &[&'static ResourceDef], off: &[String]) -> Value {
    let gs: Vec<Value> = groups(custom, off)
        .iter()
        .map(|(g, vs)| group_doc(g, vs))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": gs})
}

pub fn api_group(group: &str, custom: &[&'static ResourceDef], off: &[String]) -> Option<Value> {
    let (g, vs) = groups(custom, off).into_iter().find(|(g, _)| *g == group)?;
    let mut doc = group_doc(g, &vs);
    let m = doc.as_object_mut()?;
    m.insert("kind".into(), json!("APIGroup"));
    m.insert("apiVersion".into(), json!("v1"));
    Some(doc)
}

fn subresources(r: &ResourceDef) -> Vec<(&'static str, Vec<&'static str>)> {
    let mut out = Vec::new();
    if r.group.is_empty() && r.resource == "namespaces" {
        out.push(("finalize", vec!["update"]));
    }
    if r.group.is_empty() && r.resource == "pods" {
        out.push(("binding", vec!["create"]));
        out.push(("log", vec!["get"]));
    }
    if r.group == "apps" && matches!(r.resource, "deployments" | "replicasets") {
        out.push(("scale", vec!["get", "patch", "update"]));
    }
    if r.has_status {
        out.push(("status", vec!["get", "patch", "update"]));
    }
    out
}

/// (group, version, kind) a subresource answers with.
fn sub_kind(r: &ResourceDef, sub: &str) -> (&'static str, &'static str, &'static str) {
    if sub == "scale" {
        ("autoscaling", "v1", "Scale")
    } else if sub == "binding" {
        ("", "v1", "Binding")
    } else {
        (r.group, r.version, r.kind)
    }
}

/// A short, stable hash standing in for upstream's storageVersionHash.
fn storage_version_hash(r: &ResourceDef) -> String {
    use base64::Engine;
    let mut h: u64 = 0xcbf29ce484222325;
    for b in format!("{}/{}/{}", r.group, r.version, r.kind).bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    base64::engine::general_purpose::STANDARD.encode(h.to_be_bytes())
}

/// The legacy APIResourceList of one group-version; None if not served.
pub fn resource_list(
    group: &str,
    version: &str,
    custom: &[&'static ResourceDef],
    off: &[String],
) -> Option<Value> {
    if is_off(off, group, version) {
        return None;
    }
    let rs: Vec<&ResourceDef> = all(custom)
        .filter(|r| r.group == group && r.version == version)
        .collect();
    if rs.is_empty() {
        return None;
    }
    let mut out = Vec::new();
    for r in rs {
        let mut e = json!({
            "name": r.resource,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": r.verbs(),
        });
        if !r.short_names.is_empty() {
            e["shortNames"] = json!(r.short_names);
        }
        if !r.categories.is_empty() {
            e["categories"] = json!(r.categories);
        }
        // Only a stored resource (every stored one is watchable) has a
        // storage version: not the reviews, bindings or componentstatuses.
        if r.verbs().contains(&"watch") {
            e["storageVersionHash"] = json!(storage_version_hash(r));
        }
        out.push(e);
        for (sub, verbs) in subresources(r) {
            let (g, v, k) = sub_kind(r, sub);
            let mut e = json!({
                "name": format!("{}/{}", r.resource, sub),
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": k,
                "verbs": verbs,
            });
            if (g, v) != (r.group, r.version) {
                e["group"] = json!(g);
                e["version"] = json!(v);
            }
            out.push(e);
        }
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    let mut doc = json!({"kind": "APIResourceList", "groupVersion": gv, "resources": out});
    if !group.is_empty()
        && let Some(m) = doc.as_object_mut()
    {
        m.insert("apiVersion".into(), json!("v1"));
    }
    Some(doc)
}

fn aggregated_version(group: &str, version: &str, custom: &[&'static ResourceDef]) -> Value {
    let mut resources = Vec::new();
    for r in all(custom).filter(|r| r.group == group && r.version == version) {
        let kind = json!({"group": r.group, "version": r.version, "kind": r.kind});
        let mut e = json!({
            "resource": r.resource,
            "responseKind": kind,
            "scope": if r.namespaced { "Namespaced" } else { "Cluster" },
            "singularResource": r.singular,
            "verbs": r.verbs(),
        });
        if !r.short_names.is_empty() {
            e["shortNames"] = json!(r.short_names);
        }
        if !r.categories.is_empty() {
            e["categories"] = json!(r.categories);
        }
        let subs: Vec<Value> = subresources(r)
            .into_iter()
            .map(|(s, verbs)| {
                let (g, v, k) = sub_kind(r, s);
                json!({"subresource": s, "responseKind": {"group": g, "version": v, "kind": k}, "verbs": verbs})
            })
            .collect();
        if !subs.is_empty() {
            e["subresources"] = json!(subs);
        }
        resources.push(e);
    }
    json!({"version": version, "resources": resources, "freshness": "Current"})
}

/// The aggregated discovery document for `/api` (core) or `/apis`.
pub fn aggregated(
    core: bool,
    api_version: &str,
    custom: &[&'static ResourceDef],
    off: &[String],
) -> Value {
    let items: Vec<Value> =
        if core {
            vec![json!({
                "metadata": {"creationTimestamp": null},
                "versions": [aggregated_version("", "v1", &[])]
            })]
        } else {
            groups(custom, off)
            .iter()
            .map(|(g, vs)| {
                let versions: Vec<Value> =
                    vs.iter().map(|v| aggregated_version(g, v, custom)).collect();
                json!({"metadata": {"name": g, "creationTimestamp": null}, "versions": versions})
            })
            .collect()
        };
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": format!("apidiscovery.k8s.io/{api_version}"),
        "metadata": {},
        "items": items
    })
}
