//! The resource types kube-sim serves, with the properties of their upstream
//! registry (`pkg/registry/<group>/<resource>/storage` and `strategy.go` in
//! kubernetes/kubernetes): scope, status subresource, name validation,
//! generation tracking, create-on-update, field selectors.

use crate::error::GroupResource;

/// Which upstream `ValidateNameFunc` a resource uses for `metadata.name`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameRule {
    /// `NameIsDNSSubdomain` (most kinds).
    DnsSubdomain,
    /// `NameIsDNSLabel` (namespaces).
    DnsLabel,
    /// `NameIsDNS1035Label` (services before RelaxedServiceNameValidation,
    /// which is on in 1.36: they use DNS labels now).
    Dns1035Label,
    /// `path.IsValidPathSegmentName` (RBAC kinds).
    PathSegment,
    /// `ValidateIPAddressName` (IPAddress): the canonical form of an IP.
    IpAddress,
}

/// One served resource.
#[derive(Debug, Clone, Copy)]
pub struct ResourceDef {
    pub group: &'static str,
    pub version: &'static str,
    /// Plural resource name (`pods`).
    pub resource: &'static str,
    pub kind: &'static str,
    pub singular: &'static str,
    pub namespaced: bool,
    pub short_names: &'static [&'static str],
    pub categories: &'static [&'static str],
    /// Whether `/status` exists and the spec/status split applies.
    pub has_status: bool,
    pub name_rule: NameRule,
    /// Whether the strategy maintains `metadata.generation`.
    pub generation: bool,
    /// `AllowCreateOnUpdate()` of the strategy.
    pub allow_create_on_update: bool,
    /// Field selector labels beyond `metadata.name`/`metadata.namespace`
    /// (the `AddFieldLabelConversionFunc` of pkg/apis/<group>/<v>/conversion.go).
    pub field_labels: &'static [&'static str],
    /// Whether the collection supports `deletecollection`.
    pub delete_collection: bool,
}

impl ResourceDef {
    /// The same resource served at another version.
    const fn at(self, version: &'static str) -> ResourceDef {
        ResourceDef { version, ..self }
    }
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
    pub fn group_resource(&self) -> GroupResource {
        GroupResource::new(self.group, self.resource)
    }
    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }
    /// The verbs discovery lists for the main resource (and the only ones
    /// it answers).
    pub fn verbs(&self) -> Vec<&'static str> {
        match (self.group, self.resource) {
            // BindingREST is only a Creater; ComponentStatus only a Getter and
            // Lister (pkg/registry/core/{pod/storage,componentstatus}).
            ("", "bindings") => return vec!["create"],
            ("", "componentstatuses") => return vec!["get", "list"],
            // The review resources are create-only (pkg/registry/authorization).
            ("authentication.k8s.io" | "authorization.k8s.io", _) => return vec!["create"],
            _ => {}
        }
        let mut v = vec!["create", "delete"];
        if self.delete_collection {
            v.push("deletecollection");
        }
        v.extend(["get", "list", "patch", "update", "watch"]);
        v
    }
}

const POD_FIELDS: &[&str] = &[
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.podIPs",
    "status.nominatedNodeName",
];
const EVENT_FIELDS: &[&str] = &[
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
];
const EVENTS_V1_FIELDS: &[&str] = &[
    "regarding.kind",
    "regarding.namespace",
    "regarding.name",
    "regarding.uid",
    "regarding.apiVersion",
    "regarding.resourceVersion",
    "regarding.fieldPath",
    "reason",
    "reportingController",
    "type",
    "deprecatedSource",
];

/// One row of [`RESOURCES`]: group, version, plural, kind and singular,
/// then after `;` what differs from a namespaced kind with a DNS-subdomain
/// name, no status, no generation, no create-on-update, no field labels of
/// its own, and `deletecollection`: `cluster`, `status`, `generation`,
/// `create_on_update`, `no_deletecollection`, `name[rule]`, `short[..]`,
/// `cat[..]` and `fields[..]` (names, or a list constant).
macro_rules! res {
    ($g:literal, $v:literal, $r:literal, $k:literal, $s:literal
     $(; $($flag:ident $([$($arg:tt)*])?)*)?) => {{
        let d = ResourceDef {
            group: $g,
            version: $v,
            resource: $r,
            kind: $k,
            singular: $s,
            namespaced: true,
            short_names: &[],
            categories: &[],
            has_status: false,
            name_rule: NameRule::DnsSubdomain,
            generation: false,
            allow_create_on_update: false,
            field_labels: &[],
            delete_collection: true,
        };
        $($(let d = res!(@ d $flag $([$($arg)*])?);)*)?
        d
    }};
    (@ $d:ident cluster) => { ResourceDef { namespaced: false, ..$d } };
    (@ $d:ident status) => { ResourceDef { has_status: true, ..$d } };
    (@ $d:ident generation) => { ResourceDef { generation: true, ..$d } };
    (@ $d:ident create_on_update) => { ResourceDef { allow_create_on_update: true, ..$d } };
    (@ $d:ident no_deletecollection) => { ResourceDef { delete_collection: false, ..$d } };
    (@ $d:ident name[$rule:ident]) => { ResourceDef { name_rule: NameRule::$rule, ..$d } };
    (@ $d:ident short[$($x:literal),*]) => { ResourceDef { short_names: &[$($x),*], ..$d } };
    (@ $d:ident cat[$($x:literal),*]) => { ResourceDef { categories: &[$($x),*], ..$d } };
    (@ $d:ident fields[$list:ident]) => { ResourceDef { field_labels: $list, ..$d } };
    (@ $d:ident fields[$($x:literal),*]) => { ResourceDef { field_labels: &[$($x),*], ..$d } };
}

/// The kinds served at two versions, declared once.
#[rustfmt::skip]
const VAC: ResourceDef = res! { "storage.k8s.io", "v1", "volumeattributesclasses",
    "VolumeAttributesClass", "volumeattributesclass"; cluster short["vac"] };
#[rustfmt::skip]
const MAP: ResourceDef = res! { "admissionregistration.k8s.io", "v1",
    "mutatingadmissionpolicies", "MutatingAdmissionPolicy", "mutatingadmissionpolicy";
    cluster cat["api-extensions"] generation };
#[rustfmt::skip]
const MAP_BINDING: ResourceDef = res! { "admissionregistration.k8s.io", "v1",
    "mutatingadmissionpolicybindings", "MutatingAdmissionPolicyBinding",
    "mutatingadmissionpolicybinding"; cluster cat["api-extensions"] generation };

/// Every resource kube-sim serves, in discovery order.
#[rustfmt::skip]
pub static RESOURCES: &[ResourceDef] = &[
    res! { "", "v1", "bindings", "Binding", "binding"; no_deletecollection },
    res! { "", "v1", "componentstatuses", "ComponentStatus", "componentstatus";
        cluster short["cs"] no_deletecollection },
    res! { "", "v1", "configmaps", "ConfigMap", "configmap"; short["cm"] },
    res! { "", "v1", "endpoints", "Endpoints", "endpoints"; short["ep"] create_on_update },
    res! { "", "v1", "events", "Event", "event";
        short["ev"] create_on_update fields[EVENT_FIELDS] },
    res! { "", "v1", "limitranges", "LimitRange", "limitrange"; short["limits"] },
    res! { "", "v1", "namespaces", "Namespace", "namespace";
        cluster short["ns"] status name[DnsLabel] fields["status.phase"] no_deletecollection },
    res! { "", "v1", "nodes", "Node", "node";
        cluster short["no"] status fields["spec.unschedulable"] },
    res! { "", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", "persistentvolumeclaim";
        short["pvc"] status },
    res! { "", "v1", "persistentvolumes", "PersistentVolume", "persistentvolume";
        cluster short["pv"] status },
    res! { "", "v1", "pods", "Pod", "pod";
        short["po"] cat["all"] status generation fields[POD_FIELDS] },
    res! { "", "v1", "podtemplates", "PodTemplate", "podtemplate" },
    res! { "", "v1", "replicationcontrollers", "ReplicationController", "replicationcontroller";
        short["rc"] cat["all"] status generation fields["status.replicas"] },
    res! { "", "v1", "resourcequotas", "ResourceQuota", "resourcequota"; short["quota"] status },
    res! { "", "v1", "secrets", "Secret", "secret"; fields["type"] },
    res! { "", "v1", "serviceaccounts", "ServiceAccount", "serviceaccount"; short["sa"] },
    res! { "", "v1", "services", "Service", "service";
        short["svc"] cat["all"] status name[DnsLabel] fields["spec.clusterIP", "spec.type"] },
    res! { "apps", "v1", "deployments", "Deployment", "deployment";
        short["deploy"] cat["all"] status generation },
    res! { "apps", "v1", "replicasets", "ReplicaSet", "replicaset";
        short["rs"] cat["all"] status generation fields["status.replicas"] },
    res! { "batch", "v1", "jobs", "Job", "job";
        cat["all"] status generation fields["status.successful"] },
    res! { "coordination.k8s.io", "v1", "leases", "Lease", "lease"; create_on_update },
    res! { "events.k8s.io", "v1", "events", "Event", "event";
        short["ev"] create_on_update fields[EVENTS_V1_FIELDS] },
    res! { "networking.k8s.io", "v1", "servicecidrs", "ServiceCIDR", "servicecidr";
        cluster status },
    res! { "networking.k8s.io", "v1", "ipaddresses", "IPAddress", "ipaddress";
        cluster short["ip"] name[IpAddress] },
    res! { "policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", "poddisruptionbudget";
        short["pdb"] status generation },
    res! { "rbac.authorization.k8s.io", "v1", "clusterrolebindings",
        "ClusterRoleBinding", "clusterrolebinding"; cluster name[PathSegment] create_on_update },
    res! { "rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", "clusterrole";
        cluster name[PathSegment] create_on_update },
    res! { "rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", "rolebinding";
        name[PathSegment] create_on_update },
    res! { "rbac.authorization.k8s.io", "v1", "roles", "Role", "role";
        name[PathSegment] create_on_update },
    res! { "storage.k8s.io", "v1", "storageclasses", "StorageClass", "storageclass";
        cluster short["sc"] },
    VAC,
    VAC.at("v1beta1"),
    MAP,
    MAP_BINDING,
    MAP.at("v1beta1"),
    MAP_BINDING.at("v1beta1"),
    res! { "admissionregistration.k8s.io", "v1", "validatingadmissionpolicies",
        "ValidatingAdmissionPolicy", "validatingadmissionpolicy";
        cluster cat["api-extensions"] status generation },
    res! { "admissionregistration.k8s.io", "v1", "validatingadmissionpolicybindings",
        "ValidatingAdmissionPolicyBinding", "validatingadmissionpolicybinding";
        cluster cat["api-extensions"] generation },
    res! { "apiextensions.k8s.io", "v1", "customresourcedefinitions",
        "CustomResourceDefinition", "customresourcedefinition";
        cluster short["crd", "crds"] cat["api-extensions"] status generation },
];

/// Index of a resource: below `RESOURCES.len()` a built-in one, above it a
/// custom resource registered by [`register`] (see [`crate::crd`]).
pub type ResId = usize;

/// Custom resources of every store of the process, append-only. A store
/// serves only the ids its own CustomResourceDefinitions registered; two
/// stores declaring the same resource identically share one id.
static CUSTOM: parking_lot::RwLock<Vec<&'static ResourceDef>> =
    parking_lot::RwLock::new(Vec::new());

/// Finds a built-in resource by group, version and plural name.
pub fn find(group: &str, version: &str, resource: &str) -> Option<ResId> {
    RESOURCES
        .iter()
        .position(|r| r.group == group && r.version == version && r.resource == resource)
}

/// Finds a built-in resource by group and kind (any served version).
pub fn find_kind(group: &str, kind: &str) -> Option<ResId> {
    RESOURCES
        .iter()
        .position(|r| r.group == group && r.kind == kind)
}

/// Whether kind `kind` of `group` has a `status` subresource (a built-in
/// one, or a custom resource whose CRD declares it).
pub fn has_status_subresource(group: &str, kind: &str) -> bool {
    RESOURCES
        .iter()
        .chain(CUSTOM.read().iter().copied())
        .any(|r| r.group == group && r.kind == kind && r.has_status)
}

/// The API groups (non-core) of `defs` in discovery order, each with its
/// versions.
pub fn groups_of<'a>(
    defs: impl Iterator<Item = &'a ResourceDef>,
) -> Vec<(&'static str, Vec<&'static str>)> {
    let mut out: Vec<(&'static str, Vec<&'static str>)> = Vec::new();
    for r in defs.filter(|r| !r.group.is_empty()) {
        match out.iter_mut().find(|(g, _)| *g == r.group) {
            Some((_, vs)) => {
                if !vs.contains(&r.version) {
                    vs.push(r.version)
                }
            }
            None => out.push((r.group, vec![r.version])),
        }
    }
    out
}

/// The built-in API groups (non-core) in discovery order.
pub fn groups() -> Vec<(&'static str, Vec<&'static str>)> {
    groups_of(RESOURCES.iter())
}

/// Whether `def` is a built-in resource (not a custom one).
pub fn is_builtin(def: &ResourceDef) -> bool {
    RESOURCES.iter().any(|d| std::ptr::eq(d, def))
}

pub fn def(id: ResId) -> &'static ResourceDef {
    match RESOURCES.get(id) {
        Some(d) => d,
        None => CUSTOM.read()[id - RESOURCES.len()],
    }
}

fn same(a: &ResourceDef, b: &ResourceDef) -> bool {
    a.group == b.group
        && a.version == b.version
        && a.resource == b.resource
        && a.kind == b.kind
        && a.singular == b.singular
        && a.namespaced == b.namespaced
        && a.short_names == b.short_names
        && a.categories == b.categories
        && a.has_status == b.has_status
}

fn leak(s: &str) -> &'static str {
    Box::leak(s.to_string().into_boxed_str())
}

fn leak_list(l: &[String]) -> &'static [&'static str] {
    Box::leak(
        l.iter()
            .map(|s| leak(s))
            .collect::<Vec<_>>()
            .into_boxed_slice(),
    )
}

/// What a CustomResourceDefinition version declares about its resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CustomResource {
    pub group: String,
    pub version: String,
    pub plural: String,
    pub singular: String,
    pub kind: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    pub status: bool,
}

/// Registers a custom resource (or finds the identical one registered
/// before) and returns its id. The strings live for the process: a test
/// server declares a handful of kinds.
pub fn register(c: &CustomResource) -> ResId {
    let probe = ResourceDef {
        group: leak(&c.group),
        version: leak(&c.version),
        resource: leak(&c.plural),
        kind: leak(&c.kind),
        singular: leak(&c.singular),
        namespaced: c.namespaced,
        short_names: leak_list(&c.short_names),
        categories: leak_list(&c.categories),
        has_status: c.status,
        name_rule: NameRule::DnsSubdomain,
        generation: true,
        allow_create_on_update: false,
        field_labels: &[],
        delete_collection: true,
    };
    let mut custom = CUSTOM.write();
    if let Some(i) = custom.iter().position(|d| same(d, &probe)) {
        return RESOURCES.len() + i;
    }
    custom.push(Box::leak(Box::new(probe)));
    RESOURCES.len() + custom.len() - 1
}
