//! Per-kind registry strategies: what the real server does to an object on
//! create and update beyond the generic metadata rules (status/spec split,
//! generation, defaulting of the fields clients rely on).
//!
//! Upstream: pkg/registry/core/{pod,service,persistentvolume,
//! persistentvolumeclaim,namespace,node}/strategy.go,
//! pkg/registry/apps/{deployment,replicaset}/strategy.go,
//! pkg/registry/batch/job/strategy.go, pkg/registry/storage/storageclass,
//! pkg/registry/policy/poddisruptionbudget/strategy.go and the defaulters in
//! pkg/apis/<group>/<version>/defaults.go.

use serde_json::{Map, Value, json};

use crate::resources::ResourceDef;

fn obj_mut<'a>(v: &'a mut Value, key: &str) -> &'a mut Map<String, Value> {
    if !v.get(key).is_some_and(Value::is_object) {
        v[key] = json!({});
    }
    match v.get_mut(key) {
        Some(Value::Object(m)) => m,
        _ => unreachable!("just set to an object"),
    }
}

fn set_default(m: &mut Map<String, Value>, key: &str, value: Value) {
    if m.get(key).is_none_or(Value::is_null) {
        m.insert(key.to_string(), value);
    }
}

/// `SetDefaults_Container` (the parts clients see).
fn default_container(c: &mut Value) {
    let Some(m) = c.as_object_mut() else { return };
    set_default(m, "terminationMessagePath", json!("/dev/termination-log"));
    set_default(m, "terminationMessagePolicy", json!("File"));
    if !m.contains_key("imagePullPolicy") {
        let image = m.get("image").and_then(Value::as_str).unwrap_or("");
        let last = image.rsplit('/').next().unwrap_or(image);
        let tag = last.split_once(':').map(|(_, t)| t);
        let policy = if image.contains('@') {
            "IfNotPresent"
        } else if tag.is_none() || tag == Some("latest") {
            "Always"
        } else {
            "IfNotPresent"
        };
        m.insert("imagePullPolicy".into(), json!(policy));
    }
    set_default(m, "resources", json!({}));
    if let Some(Value::Array(ports)) = m.get_mut("ports") {
        for p in ports {
            if let Some(pm) = p.as_object_mut() {
                set_default(pm, "protocol", json!("TCP"));
            }
        }
    }
}

/// `SetDefaults_Service` for a LoadBalancer (pkg/apis/core/v1/defaults.go,
/// feature LoadBalancerIPMode, GA): every status ingress with an `ip` and no
/// `ipMode` gets `ipMode: VIP`.
fn default_ingress_ip_mode(svc: &mut Value) {
    let Some(Value::Array(ingress)) = svc.pointer_mut("/status/loadBalancer/ingress") else {
        return;
    };
    for ing in ingress {
        let Some(m) = ing.as_object_mut() else {
            continue;
        };
        let has_ip = m
            .get("ip")
            .and_then(Value::as_str)
            .is_some_and(|ip| !ip.is_empty());
        if has_ip && m.get("ipMode").is_none_or(Value::is_null) {
            m.insert("ipMode".into(), json!("VIP"));
        }
    }
}

/// `SetDefaults_PodSpec` and friends.
fn default_pod_spec(spec: &mut Value) {
    let Some(m) = spec.as_object_mut() else {
        return;
    };
    for list in ["containers", "initContainers"] {
        if let Some(Value::Array(cs)) = m.get_mut(list) {
            cs.iter_mut().for_each(default_container);
        }
    }
    if let Some(Value::Array(vols)) = m.get_mut("volumes") {
        for v in vols {
            if let Some(Value::Object(hp)) = v.get_mut("hostPath") {
                set_default(hp, "type", json!(""));
            }
        }
    }
    set_default(m, "restartPolicy", json!("Always"));
    set_default(m, "terminationGracePeriodSeconds", json!(30));
    set_default(m, "dnsPolicy", json!("ClusterFirst"));
    set_default(m, "securityContext", json!({}));
    set_default(m, "schedulerName", json!("default-scheduler"));
}

/// `SetDefaults_Pod`, what a Pod gets and a pod template does not: requests
/// defaulted from limits, `enableServiceLinks`.
fn default_pod(spec: &mut Value) {
    let Some(m) = spec.as_object_mut() else {
        return;
    };
    for list in ["containers", "initContainers"] {
        let Some(Value::Array(cs)) = m.get_mut(list) else {
            continue;
        };
        for c in cs {
            let Some(Value::Object(limits)) = c.pointer("/resources/limits").cloned() else {
                continue;
            };
            let Some(res) = c.get_mut("resources").and_then(Value::as_object_mut) else {
                continue;
            };
            let requests = res.entry("requests").or_insert_with(|| json!({}));
            if let Some(r) = requests.as_object_mut() {
                for (k, v) in limits {
                    r.entry(k).or_insert(v);
                }
            }
        }
    }
    set_default(m, "enableServiceLinks", json!(true));
}

/// The QoS class the server stamps on a new pod (pkg/apis/core/helper/qos).
fn qos_class(spec: &Value) -> &'static str {
    let mut any = false;
    let mut guaranteed = true;
    // Init containers count too (ComputePodQOS's allContainers).
    for c in ["containers", "initContainers"]
        .into_iter()
        .filter_map(|k| spec.get(k).and_then(Value::as_array))
        .flatten()
    {
        let req = c.pointer("/resources/requests").and_then(Value::as_object);
        let lim = c.pointer("/resources/limits").and_then(Value::as_object);
        if req.is_some_and(|r| !r.is_empty()) || lim.is_some_and(|l| !l.is_empty()) {
            any = true;
        }
        for res in ["cpu", "memory"] {
            let l = lim.and_then(|l| l.get(res));
            let r = req.and_then(|r| r.get(res)).or(l);
            if l.is_none() || r != l {
                guaranteed = false;
            }
        }
    }
    if !any {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// A `metav1.Condition` as the typed object serialises it: the fields
/// without `omitempty` are always there (an applied condition without a
/// reason is stored with `reason: ""`).
fn condition_zero_values(c: &mut Value) {
    let Some(m) = c.as_object_mut() else { return };
    for key in ["type", "status", "reason", "message"] {
        set_default(m, key, json!(""));
    }
    if !m.contains_key("lastTransitionTime") {
        m.insert("lastTransitionTime".into(), Value::Null);
    }
}

/// Defaulting applied on every write (the decoder runs defaulters on create
/// and update alike).
pub fn apply_defaults(def: &ResourceDef, obj: &mut Value) {
    defaults(def, obj, true);
}

/// The decoder's defaults alone, as the create, update and patch handlers
/// see the object when they record managedFields: without what the
/// registry does on read (an ExternalName Service keeps the
/// `internalTrafficPolicy` it had, and its writer's ownership of it).
pub fn decode_defaults(def: &ResourceDef, obj: &mut Value) {
    defaults(def, obj, false);
}

fn defaults(def: &ResourceDef, obj: &mut Value, on_read: bool) {
    crate::admission::apply_defaults(def, obj);
    match (def.group, def.resource) {
        ("", "pods") => {
            let spec = obj_mut(obj, "spec");
            let mut s = Value::Object(std::mem::take(spec));
            default_pod_spec(&mut s);
            default_pod(&mut s);
            if let Value::Object(m) = s {
                *obj_mut(obj, "spec") = m;
            }
        }
        ("apps", "deployments") => {
            let spec = obj_mut(obj, "spec");
            set_default(spec, "replicas", json!(1));
            set_default(spec, "revisionHistoryLimit", json!(10));
            set_default(spec, "progressDeadlineSeconds", json!(600));
            let strategy = spec.entry("strategy").or_insert_with(|| json!({}));
            if let Some(sm) = strategy.as_object_mut() {
                set_default(sm, "type", json!("RollingUpdate"));
                if sm.get("type").and_then(Value::as_str) == Some("RollingUpdate") {
                    let ru = sm.entry("rollingUpdate").or_insert_with(|| json!({}));
                    if let Some(rm) = ru.as_object_mut() {
                        set_default(rm, "maxUnavailable", json!("25%"));
                        set_default(rm, "maxSurge", json!("25%"));
                    }
                }
            }
            if let Some(ps) = spec.get_mut("template").and_then(|t| t.get_mut("spec")) {
                default_pod_spec(ps);
            }
        }
        ("", "podtemplates") => {
            if let Some(ps) = obj.get_mut("template").and_then(|t| t.get_mut("spec")) {
                default_pod_spec(ps);
            }
        }
        ("", "replicationcontrollers") => {
            // SetDefaults_ReplicationController: the selector and the
            // labels from the template's labels where empty.
            let labels = obj
                .pointer("/spec/template/metadata/labels")
                .filter(|l| l.is_object())
                .cloned();
            if let Some(labels) = &labels {
                let meta = obj_mut(obj, "metadata");
                if meta
                    .get("labels")
                    .and_then(Value::as_object)
                    .is_none_or(|l| l.is_empty())
                {
                    meta.insert("labels".into(), labels.clone());
                }
            }
            let spec = obj_mut(obj, "spec");
            if let Some(labels) = labels
                && spec
                    .get("selector")
                    .and_then(Value::as_object)
                    .is_none_or(|s| s.is_empty())
            {
                spec.insert("selector".into(), labels);
            }
            set_default(spec, "replicas", json!(1));
            if let Some(ps) = spec.get_mut("template").and_then(|t| t.get_mut("spec")) {
                default_pod_spec(ps);
            }
        }
        ("apps", "replicasets") => {
            let spec = obj_mut(obj, "spec");
            set_default(spec, "replicas", json!(1));
            if let Some(ps) = spec.get_mut("template").and_then(|t| t.get_mut("spec")) {
                default_pod_spec(ps);
            }
        }
        ("batch", "jobs") => {
            // SetDefaults_Job (pkg/apis/batch/v1/defaults.go).
            let spec = obj_mut(obj, "spec");
            if spec.get("completions").is_none_or(Value::is_null)
                && spec.get("parallelism").is_none_or(Value::is_null)
            {
                spec.insert("completions".into(), json!(1));
            }
            set_default(spec, "parallelism", json!(1));
            set_default(spec, "backoffLimit", json!(6));
            set_default(spec, "completionMode", json!("NonIndexed"));
            set_default(spec, "suspend", json!(false));
            let replacement = if spec.get("podFailurePolicy").is_some_and(|p| !p.is_null()) {
                "Failed"
            } else {
                "TerminatingOrFailed"
            };
            set_default(spec, "podReplacementPolicy", json!(replacement));
            set_default(spec, "manualSelector", json!(false));
            if let Some(ps) = spec.get_mut("template").and_then(|t| t.get_mut("spec")) {
                default_pod_spec(ps);
            }
        }
        ("storage.k8s.io", "storageclasses") => {
            if let Some(m) = obj.as_object_mut() {
                set_default(m, "reclaimPolicy", json!("Delete"));
                set_default(m, "volumeBindingMode", json!("Immediate"));
            }
        }
        ("", "services") => {
            let spec = obj_mut(obj, "spec");
            set_default(spec, "type", json!("ClusterIP"));
            let ty = spec
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or("ClusterIP")
                .to_string();
            if ty != "ExternalName" {
                set_default(spec, "sessionAffinity", json!("None"));
                set_default(spec, "internalTrafficPolicy", json!("Cluster"));
            } else if on_read {
                // defaultOnReadInternalTrafficPolicy: an ExternalName Service
                // is read without it (what a type change left behind).
                spec.remove("internalTrafficPolicy");
            }
            if ty == "NodePort" || ty == "LoadBalancer" {
                set_default(spec, "externalTrafficPolicy", json!("Cluster"));
            }
            if ty == "LoadBalancer" {
                set_default(spec, "allocateLoadBalancerNodePorts", json!(true));
            }
            if let Some(Value::Array(ports)) = spec.get_mut("ports") {
                for p in ports {
                    if let Some(pm) = p.as_object_mut() {
                        set_default(pm, "protocol", json!("TCP"));
                        if !pm.contains_key("targetPort")
                            && let Some(port) = pm.get("port").cloned()
                        {
                            pm.insert("targetPort".into(), port);
                        }
                    }
                }
            }
            if ty == "LoadBalancer" {
                default_ingress_ip_mode(obj);
            }
        }
        ("", "persistentvolumes") => {
            let spec = obj_mut(obj, "spec");
            set_default(spec, "persistentVolumeReclaimPolicy", json!("Retain"));
            set_default(spec, "volumeMode", json!("Filesystem"));
            // SetDefaults_HostPathVolumeSource: type "" (HostPathUnset).
            if let Some(Value::Object(hp)) = spec.get_mut("hostPath") {
                set_default(hp, "type", json!(""));
            }
        }
        ("", "persistentvolumeclaims") => {
            let spec = obj_mut(obj, "spec");
            set_default(spec, "volumeMode", json!("Filesystem"));
        }
        ("", "secrets") => {
            if let Some(m) = obj.as_object_mut() {
                set_default(m, "type", json!("Opaque"));
                // stringData is write-only: the v1 conversion merges it into
                // data (pkg/apis/core/v1/conversion.go
                // Convert_v1_Secret_To_core_Secret).
                if let Some(Value::Object(sd)) = m.remove("stringData") {
                    use base64::Engine;
                    let data = m.entry("data").or_insert_with(|| json!({}));
                    if !data.is_object() {
                        *data = json!({});
                    }
                    if let Some(d) = data.as_object_mut() {
                        for (k, v) in sd {
                            let text = v.as_str().unwrap_or_default().to_string();
                            d.insert(
                                k,
                                json!(base64::engine::general_purpose::STANDARD.encode(text)),
                            );
                        }
                    }
                }
            }
        }
        ("networking.k8s.io", "servicecidrs") => {
            if let Some(Value::Array(conds)) = obj.pointer_mut("/status/conditions") {
                conds.iter_mut().for_each(condition_zero_values);
            }
        }
        ("", "namespaces") => {
            // SetDefaults_Namespace: the immutable name label.
            let name = obj
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            if !name.is_empty() {
                let meta = obj_mut(obj, "metadata");
                let labels = meta.entry("labels").or_insert_with(|| json!({}));
                if let Some(l) = labels.as_object_mut() {
                    l.insert("kubernetes.io/metadata.name".into(), json!(name));
                }
            }
        }
        _ => {}
    }
}

/// The ServiceAccount admission plugin's defaulting of a new pod
/// (plugin/pkg/admission/serviceaccount): `serviceAccountName` `default`
/// when unset (the deprecated `serviceAccount` follows, as conversion fills
/// it). Not its check that the ServiceAccount exists, nor the
/// `kube-api-access-*` volume it adds.
pub fn service_account_admission(def: &ResourceDef, obj: &mut Value) {
    if (def.group, def.resource) != ("", "pods") {
        return;
    }
    let spec = obj_mut(obj, "spec");
    let name = spec
        .get("serviceAccountName")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .unwrap_or("default")
        .to_string();
    spec.insert("serviceAccountName".into(), json!(name));
    spec.insert("serviceAccount".into(), json!(name));
}

/// `PrepareForCreate`: reset status where the strategy does and stamp what
/// the server owns.
pub fn prepare_for_create(def: &ResourceDef, obj: &mut Value, now: &str) {
    match (def.group, def.resource) {
        ("", "pods") => {
            let qos = qos_class(obj.get("spec").unwrap_or(&Value::Null));
            obj["status"] = json!({"phase": "Pending", "qosClass": qos});
            // Priority admission, without a PriorityClass: priority 0,
            // PreemptLowerPriority (plugin/pkg/admission/priority,
            // getDefaultPriority).
            let spec = obj_mut(obj, "spec");
            set_default(spec, "priority", json!(0));
            set_default(spec, "preemptionPolicy", json!("PreemptLowerPriority"));
            default_toleration_seconds(obj);
            mutate_pod_affinity(obj);
        }
        ("", "services") => {
            obj["status"] = json!({"loadBalancer": {}});
        }
        ("", "persistentvolumes") => {
            obj["status"] = json!({"phase": "Pending", "lastPhaseTransitionTime": now});
        }
        ("", "persistentvolumeclaims") => {
            obj["status"] = json!({"phase": "Pending"});
            claim_data_sources(obj, None);
        }
        ("apps", "deployments") => {
            obj["status"] = json!({});
        }
        ("apps", "replicasets") => {
            // ReplicaSetStatus.replicas has no omitempty.
            obj["status"] = json!({"replicas": 0});
        }
        ("batch", "jobs") => {
            obj["status"] = json!({});
            generate_job_selector(obj);
        }
        ("policy", "poddisruptionbudgets") => {
            obj["status"] = json!({"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0});
        }
        ("networking.k8s.io", "servicecidrs") => {
            // ServiceCIDRStatusFieldWiping (on by default in 1.36).
            obj["status"] = json!({});
        }
        ("", "namespaces") => {
            obj["status"] = json!({"phase": "Active"});
            let spec = obj_mut(obj, "spec");
            let fins = spec.entry("finalizers").or_insert_with(|| json!([]));
            if let Some(f) = fins.as_array_mut()
                && !f.iter().any(|x| x == "kubernetes")
            {
                f.push(json!("kubernetes"));
            }
        }
        _ => {}
    }
    if def.generation {
        obj["metadata"]["generation"] = json!(1);
    } else if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("generation");
    }
}

/// `mutatePodAffinity` (pkg/registry/core/pod/strategy.go, the
/// MatchLabelKeysInPodAffinity gate is GA): for each pod (anti-)affinity
/// term with a label selector, an `In` requirement on the pod's value of
/// each of its matchLabelKeys the pod has, then a `NotIn` one for each of
/// its mismatchLabelKeys, appended to the selector's match expressions.
fn mutate_pod_affinity(pod: &mut Value) {
    let labels = pod
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let Some(affinity) = pod.pointer_mut("/spec/affinity") else {
        return;
    };
    let keys = |t: &Value, k: &str| -> Vec<String> {
        t.get(k)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect()
    };
    let apply = |term: &mut Value| {
        let (matching, mismatching) = (
            keys(term, "matchLabelKeys"),
            keys(term, "mismatchLabelKeys"),
        );
        if matching.is_empty() && mismatching.is_empty() {
            return;
        }
        let Some(sel) = term.get_mut("labelSelector").and_then(Value::as_object_mut) else {
            return;
        };
        let mut added = Vec::new();
        for (list, op) in [(&matching, "In"), (&mismatching, "NotIn")] {
            for key in list {
                if let Some(v) = labels.get(key) {
                    added.push(json!({"key": key, "operator": op, "values": [v]}));
                }
            }
        }
        if added.is_empty() {
            return;
        }
        let exprs = sel.entry("matchExpressions").or_insert_with(|| json!([]));
        if !exprs.is_array() {
            *exprs = json!([]);
        }
        if let Some(e) = exprs.as_array_mut() {
            e.extend(added);
        }
    };
    for kind in ["podAffinity", "podAntiAffinity"] {
        let Some(a) = affinity.get_mut(kind).filter(|a| a.is_object()) else {
            continue;
        };
        if let Some(Value::Array(terms)) =
            a.get_mut("preferredDuringSchedulingIgnoredDuringExecution")
        {
            for t in terms {
                if let Some(term) = t.get_mut("podAffinityTerm").filter(|t| t.is_object()) {
                    apply(term);
                }
            }
        }
        if let Some(Value::Array(terms)) =
            a.get_mut("requiredDuringSchedulingIgnoredDuringExecution")
        {
            for t in terms.iter_mut().filter(|t| t.is_object()) {
                apply(t);
            }
        }
    }
}

/// `generateSelector` (pkg/registry/batch/job/strategy.go): unless
/// `spec.manualSelector` is true, the selector is the job's uid label and the
/// template gets the uid and job-name labels (new and legacy forms).
fn generate_job_selector(obj: &mut Value) {
    if obj.pointer("/spec/manualSelector").and_then(Value::as_bool) == Some(true) {
        return;
    }
    let uid = obj
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let spec = obj_mut(obj, "spec");
    let template = spec.entry("template").or_insert_with(|| json!({}));
    if !template.is_object() {
        *template = json!({});
    }
    let tmeta = obj_mut(template, "metadata");
    let labels = tmeta.entry("labels").or_insert_with(|| json!({}));
    if !labels.is_object() {
        *labels = json!({});
    }
    if let Some(l) = labels.as_object_mut() {
        for (k, v) in [
            ("batch.kubernetes.io/controller-uid", &uid),
            ("batch.kubernetes.io/job-name", &name),
            ("controller-uid", &uid),
            ("job-name", &name),
        ] {
            l.entry(k).or_insert_with(|| json!(v));
        }
    }
    spec.insert(
        "selector".into(),
        json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}),
    );
}

/// `metav1.ResetObjectMetaForStatus`: a status write keeps the stored
/// deletionTimestamp, generation, labels, annotations, finalizers and
/// ownerReferences.
fn reset_meta_for_status(new: &mut Value, old: &Value) {
    let old_meta = old.get("metadata").and_then(Value::as_object);
    let m = obj_mut(new, "metadata");
    for key in [
        "deletionTimestamp",
        "generation",
        "selfLink",
        "labels",
        "annotations",
        "finalizers",
        "ownerReferences",
    ] {
        match old_meta.and_then(|o| o.get(key)) {
            Some(v) => {
                m.insert(key.to_string(), v.clone());
            }
            None => {
                m.remove(key);
            }
        }
    }
}

/// The DefaultTolerationSeconds admission plugin, on a pod's create and
/// update (not a subresource's): a pod that does not tolerate the
/// `NoExecute` taint of a not-ready or an unreachable node (a toleration of
/// that key or of none, with that effect or none) gets a toleration of it
/// for 300 seconds, at the end of its list.
pub fn default_toleration_seconds(pod: &mut Value) {
    let spec = obj_mut(pod, "spec");
    let tolerations = spec.entry("tolerations").or_insert_with(|| json!([]));
    if tolerations.is_null() {
        *tolerations = json!([]);
    }
    let Some(ts) = tolerations.as_array_mut() else {
        return;
    };
    for key in [
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    ] {
        let tolerates = ts.iter().any(|t| {
            let s = |k: &str| t.get(k).and_then(Value::as_str).unwrap_or("");
            (s("key") == key || s("key").is_empty())
                && (s("effect") == "NoExecute" || s("effect").is_empty())
        });
        if !tolerates {
            ts.push(json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}));
        }
    }
}

/// `PrepareForUpdate` of the main resource or of `/status`.
pub fn prepare_for_update(
    def: &ResourceDef,
    new: &mut Value,
    old: &Value,
    subresource: Option<&str>,
    now: &str,
) {
    let copy = |new: &mut Value, key: &str| match old.get(key) {
        Some(v) => new[key] = v.clone(),
        None => {
            if let Some(m) = new.as_object_mut() {
                m.remove(key);
            }
        }
    };
    match subresource {
        Some("status") => {
            copy(new, "spec");
            match (def.group, def.resource) {
                ("", "pods") => match old.pointer("/metadata/ownerReferences") {
                    Some(v) => new["metadata"]["ownerReferences"] = v.clone(),
                    None => {
                        if let Some(m) = new.get_mut("metadata").and_then(Value::as_object_mut) {
                            m.remove("ownerReferences");
                        }
                    }
                },
                ("apps", "deployments") => match old.pointer("/metadata/labels") {
                    Some(v) => new["metadata"]["labels"] = v.clone(),
                    None => {
                        if let Some(m) = new.get_mut("metadata").and_then(Value::as_object_mut) {
                            m.remove("labels");
                        }
                    }
                },
                ("networking.k8s.io", "servicecidrs") => reset_meta_for_status(new, old),
                ("", "persistentvolumes")
                    if new.pointer("/status/phase") != old.pointer("/status/phase") =>
                {
                    new["status"]["lastPhaseTransitionTime"] = json!(now);
                }
                _ => {}
            }
        }
        Some("finalize") => {
            // namespaces/finalize only changes spec.finalizers.
            let fins = new.pointer("/spec/finalizers").cloned();
            let meta = new.get("metadata").cloned();
            *new = old.clone();
            if let Some(m) = meta {
                new["metadata"] = m;
            }
            match fins {
                Some(f) => new["spec"]["finalizers"] = f,
                None => {
                    if let Some(s) = new.get_mut("spec").and_then(Value::as_object_mut) {
                        s.remove("finalizers");
                    }
                }
            }
        }
        _ => {
            if def.has_status {
                copy(new, "status");
            }
            if def.resource == "namespaces" && def.group.is_empty() {
                match old.pointer("/spec/finalizers") {
                    Some(f) => new["spec"]["finalizers"] = f.clone(),
                    None => {
                        if let Some(s) = new.get_mut("spec").and_then(Value::as_object_mut) {
                            s.remove("finalizers");
                        }
                    }
                }
            }
            if def.resource == "services" && def.group.is_empty() {
                service_update(new, old);
            }
            if def.resource == "persistentvolumeclaims" && def.group.is_empty() {
                claim_data_sources(new, old.get("spec"));
            }
        }
    }
    let old_gen = old.pointer("/metadata/generation").cloned();
    match old_gen {
        Some(g) => new["metadata"]["generation"] = g,
        None => {
            if let Some(m) = new.get_mut("metadata").and_then(Value::as_object_mut) {
                m.remove("generation");
            }
        }
    }
    if def.generation && subresource.is_none() {
        let mut changed = new.get("spec") != old.get("spec");
        if def.resource == "deployments" {
            changed |= new.pointer("/metadata/annotations") != old.pointer("/metadata/annotations");
        }
        if changed {
            let g = old
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            new["metadata"]["generation"] = json!(g + 1);
        }
    }
}

/// A claim's `DropDisabledFields`, `EnforceDataSourceBackwardsCompatibility`
/// and `NormalizeDataSources` (pkg/api/persistentvolumeclaim): a
/// `dataSourceRef` to another namespace is dropped (its gate is off), a `dataSource`
/// other than a claim or a VolumeSnapshot is dropped (unless the old claim
/// had one or `dataSourceRef` is set), and either of `dataSource` and
/// `dataSourceRef` fills the other (not a `dataSourceRef` to another
/// namespace).
fn claim_data_sources(obj: &mut Value, old_spec: Option<&Value>) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let set =
        |spec: &serde_json::Map<String, Value>, k: &str| spec.get(k).is_some_and(|v| !v.is_null());
    let old_in_use = |k: &str| {
        old_spec
            .and_then(|o| o.get(k))
            .is_some_and(|v| !v.is_null())
    };
    // DropDisabledFields: CrossNamespaceVolumeDataSource (alpha) is off.
    let cross_namespace = spec
        .get("dataSourceRef")
        .and_then(|r| r.get("namespace"))
        .and_then(Value::as_str)
        .is_some_and(|n| !n.is_empty());
    if cross_namespace && !old_in_use("dataSourceRef") {
        spec.remove("dataSourceRef");
    }
    let old_in_use = old_in_use("dataSource");
    if !old_in_use && !set(spec, "dataSourceRef") && set(spec, "dataSource") {
        let ds = &spec["dataSource"];
        let group = ds.get("apiGroup").and_then(Value::as_str).unwrap_or("");
        let kind = ds.get("kind").and_then(Value::as_str).unwrap_or("");
        let allowed = (kind == "PersistentVolumeClaim" && group.is_empty())
            || (kind == "VolumeSnapshot" && group == "snapshot.storage.k8s.io");
        if !allowed {
            spec.remove("dataSource");
        }
    }
    // Both types' apiGroup has no omitempty: a nil one is written as null.
    let copy = |from: &Value| {
        let mut m = serde_json::Map::new();
        m.insert(
            "apiGroup".into(),
            from.get("apiGroup").cloned().unwrap_or(Value::Null),
        );
        m.insert(
            "kind".into(),
            from.get("kind").cloned().unwrap_or(json!("")),
        );
        m.insert(
            "name".into(),
            from.get("name").cloned().unwrap_or(json!("")),
        );
        Value::Object(m)
    };
    for k in ["dataSource", "dataSourceRef"] {
        if let Some(Value::Object(r)) = spec.get_mut(k) {
            r.entry("apiGroup").or_insert(Value::Null);
        }
    }
    if set(spec, "dataSource") && !set(spec, "dataSourceRef") {
        let r = copy(&spec["dataSource"]);
        spec.insert("dataSourceRef".into(), r);
    } else if set(spec, "dataSourceRef") && !set(spec, "dataSource") {
        let r = &spec["dataSourceRef"];
        if r.get("namespace")
            .and_then(Value::as_str)
            .unwrap_or("")
            .is_empty()
        {
            let ds = copy(r);
            spec.insert("dataSource".into(), ds);
        }
    }
}

fn svc_type(svc: &Value) -> &str {
    svc.pointer("/spec/type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP")
}

use crate::networking::needs_cluster_ip;

/// `needsNodePort`.
fn needs_node_port(svc: &Value) -> bool {
    match svc_type(svc) {
        "NodePort" => true,
        "LoadBalancer" => svc
            .pointer("/spec/allocateLoadBalancerNodePorts")
            .and_then(Value::as_bool)
            .unwrap_or(true),
        _ => false,
    }
}

/// `needsHCNodePort`: LoadBalancer with externalTrafficPolicy Local.
fn needs_hc_node_port(svc: &Value) -> bool {
    svc_type(svc) == "LoadBalancer"
        && svc
            .pointer("/spec/externalTrafficPolicy")
            .and_then(Value::as_str)
            == Some("Local")
}

fn externally_accessible(svc: &Value) -> bool {
    matches!(svc_type(svc), "NodePort" | "LoadBalancer")
        || svc
            .pointer("/spec/externalIPs")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty())
}

fn node_ports(svc: &Value) -> Vec<Value> {
    svc.pointer("/spec/ports")
        .and_then(Value::as_array)
        .map(|ps| {
            ps.iter()
                .map(|p| p.get("nodePort").cloned().unwrap_or(Value::Null))
                .collect()
        })
        .unwrap_or_default()
}

fn remove_spec(svc: &mut Value, key: &str) {
    if let Some(spec) = svc.get_mut("spec").and_then(Value::as_object_mut) {
        spec.remove(key);
    }
}

/// Service updates: `patchAllocatedValues` (an omitted clusterIP or nodePort
/// keeps the allocated one) and `dropTypeDependentFields`
/// (pkg/registry/core/service/strategy.go: a type change clears the fields
/// the new type does not use, when the client left them unchanged, and the
/// load-balancer status of a Service that is no longer a LoadBalancer).
fn service_update(new: &mut Value, old: &Value) {
    let same = |new: &Value, key: &str| {
        new.pointer(&format!("/spec/{key}")) == old.pointer(&format!("/spec/{key}"))
    };
    // patchAllocatedValues
    if needs_cluster_ip(old) && needs_cluster_ip(new) {
        for key in ["clusterIP", "clusterIPs"] {
            let missing = new.pointer(&format!("/spec/{key}")).is_none_or(|v| {
                v.is_null() || v.as_str() == Some("") || v.as_array().is_some_and(Vec::is_empty)
            });
            if missing && let Some(v) = old.pointer(&format!("/spec/{key}")) {
                new["spec"][key] = v.clone();
            }
        }
        for key in ["ipFamilies", "ipFamilyPolicy"] {
            if new.pointer(&format!("/spec/{key}")).is_none()
                && let Some(v) = old.pointer(&format!("/spec/{key}"))
            {
                new["spec"][key] = v.clone();
            }
        }
    }
    if needs_node_port(old) && needs_node_port(new) {
        let old_ports: Vec<(String, Value)> = old
            .pointer("/spec/ports")
            .and_then(Value::as_array)
            .map(|ps| {
                ps.iter()
                    .map(|p| {
                        (
                            p.get("name")
                                .and_then(Value::as_str)
                                .unwrap_or_default()
                                .to_string(),
                            p.get("nodePort").cloned().unwrap_or(Value::Null),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        let used: Vec<Value> = node_ports(new)
            .into_iter()
            .filter(|v| !v.is_null())
            .collect();
        if let Some(Value::Array(ps)) = new.pointer_mut("/spec/ports") {
            for p in ps.iter_mut() {
                if p.get("nodePort")
                    .is_none_or(|v| v.is_null() || v.as_i64() == Some(0))
                {
                    let name = p.get("name").and_then(Value::as_str).unwrap_or_default();
                    if let Some((_, np)) = old_ports.iter().find(|(n, _)| n == name)
                        && !np.is_null()
                        && !used.contains(np)
                    {
                        p["nodePort"] = np.clone();
                    }
                }
            }
        }
    }
    if needs_hc_node_port(old)
        && needs_hc_node_port(new)
        && new.pointer("/spec/healthCheckNodePort").is_none()
        && let Some(v) = old.pointer("/spec/healthCheckNodePort")
    {
        new["spec"]["healthCheckNodePort"] = v.clone();
    }
    // dropTypeDependentFields
    if needs_cluster_ip(old) && !needs_cluster_ip(new) {
        if same(new, "clusterIP") && same(new, "clusterIPs") {
            remove_spec(new, "clusterIP");
            remove_spec(new, "clusterIPs");
        }
        if same(new, "ipFamilies") {
            remove_spec(new, "ipFamilies");
        }
        if same(new, "ipFamilyPolicy") {
            remove_spec(new, "ipFamilyPolicy");
        }
    }
    if needs_node_port(old)
        && !needs_node_port(new)
        && node_ports(new) == node_ports(old)
        && let Some(Value::Array(ps)) = new.pointer_mut("/spec/ports")
    {
        for p in ps.iter_mut() {
            if let Some(m) = p.as_object_mut() {
                m.remove("nodePort");
            }
        }
    }
    if needs_hc_node_port(old) && !needs_hc_node_port(new) && same(new, "healthCheckNodePort") {
        remove_spec(new, "healthCheckNodePort");
    }
    if svc_type(old) == "LoadBalancer"
        && svc_type(new) != "LoadBalancer"
        && same(new, "allocateLoadBalancerNodePorts")
    {
        remove_spec(new, "allocateLoadBalancerNodePorts");
    }
    if svc_type(old) == "LoadBalancer"
        && svc_type(new) != "LoadBalancer"
        && same(new, "loadBalancerClass")
    {
        remove_spec(new, "loadBalancerClass");
    }
    if externally_accessible(old)
        && !externally_accessible(new)
        && same(new, "externalTrafficPolicy")
    {
        remove_spec(new, "externalTrafficPolicy");
    }
    if svc_type(new) != "LoadBalancer" {
        new["status"] = json!({"loadBalancer": {}});
    }
}

/// The default service node-port range.
const NODE_PORTS: std::ops::RangeInclusive<u16> = 30000..=32767;

/// Server-side node-port allocation for Services (cluster IPs come from the
/// ServiceCIDRs: see [`crate::networking`]).
pub struct Allocator {
    rng: rand::rngs::StdRng,
    used_ports: std::collections::HashSet<u16>,
}

impl Allocator {
    pub fn new(seed: u64) -> Self {
        use rand::SeedableRng;
        Allocator {
            rng: rand::rngs::StdRng::seed_from_u64(seed ^ 0x5eed_a110),
            used_ports: Default::default(),
        }
    }

    /// A free port of 30000-32767, as the node-port allocator's
    /// `AllocateNext`; "range is full" once all 2,768 are taken.
    fn node_port(&mut self) -> Result<u16, String> {
        use rand::Rng;
        if self.used_ports.len() >= NODE_PORTS.len() {
            return Err("failed to allocate a nodePort: range is full".into());
        }
        loop {
            let p: u16 = self.rng.random_range(NODE_PORTS);
            if self.used_ports.insert(p) {
                return Ok(p);
            }
        }
    }

    /// The node ports `svc` holds.
    fn held(svc: &Value) -> Vec<u16> {
        let mut ports: Vec<u16> = node_ports(svc)
            .iter()
            .chain(svc.pointer("/spec/healthCheckNodePort"))
            .filter_map(Value::as_u64)
            .filter_map(|p| u16::try_from(p).ok())
            .collect();
        ports.sort_unstable();
        ports.dedup();
        ports
    }

    /// Frees what a Service held once it is gone from storage (the
    /// registry's delete releases its node ports).
    pub fn release_service(&mut self, svc: &Value) {
        for p in Self::held(svc) {
            self.used_ports.remove(&p);
        }
    }

    /// Fills in the node ports of a new Service (or one an update made need
    /// them); marks the ones it names as used. Errors with upstream's
    /// "range is full" text.
    pub fn allocate_service(&mut self, obj: &mut Value) -> Result<(), String> {
        self.used_ports.extend(Self::held(obj));
        // `allocateLoadBalancerNodePorts: false` asks for none.
        if !needs_node_port(obj) {
            return Ok(());
        }
        let spec = obj_mut(obj, "spec");
        let missing: Vec<bool> = match spec.get("ports") {
            Some(Value::Array(ps)) => ps.iter().map(|p| p.get("nodePort").is_none()).collect(),
            _ => Vec::new(),
        };
        let mut allocated: Vec<Option<u16>> = Vec::with_capacity(missing.len());
        for m in missing {
            allocated.push(if m { Some(self.node_port()?) } else { None });
        }
        if let Some(Value::Array(ps)) = spec.get_mut("ports") {
            for (p, np) in ps.iter_mut().zip(allocated) {
                if let Some(np) = np {
                    p["nodePort"] = json!(np);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod allocator_tests {
    use super::*;

    fn lb() -> Value {
        json!({"spec": {"type": "LoadBalancer", "ports": [{"port": 80}]}})
    }

    #[test]
    fn node_ports_are_freed_by_deletion_and_a_full_range_is_an_error_not_a_hang() {
        let mut a = Allocator::new(1);
        let mut held = Vec::new();
        for _ in NODE_PORTS {
            let mut s = lb();
            a.allocate_service(&mut s).expect("a free port");
            held.push(s);
        }
        let mut extra = lb();
        assert_eq!(
            a.allocate_service(&mut extra).unwrap_err(),
            "failed to allocate a nodePort: range is full"
        );
        // Deleting one Service frees its port for the next.
        let gone = held.pop().expect("one");
        a.release_service(&gone);
        let mut next = lb();
        a.allocate_service(&mut next).expect("the freed port");
        assert_eq!(
            next.pointer("/spec/ports/0/nodePort"),
            gone.pointer("/spec/ports/0/nodePort")
        );
        // A LoadBalancer that asks for no node ports gets none.
        let mut none = json!({"spec": {"type": "LoadBalancer", "allocateLoadBalancerNodePorts": false, "ports": [{"port": 80}]}});
        a.allocate_service(&mut none).expect("no port needed");
        assert_eq!(none.pointer("/spec/ports/0/nodePort"), None);
        // A port a Service names itself is taken from the range.
        let mut a = Allocator::new(2);
        let mut named =
            json!({"spec": {"type": "NodePort", "ports": [{"port": 80, "nodePort": 30080}]}});
        a.allocate_service(&mut named).expect("named");
        assert!(a.used_ports.contains(&30080));
    }
}
