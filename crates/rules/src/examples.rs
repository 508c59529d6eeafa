//! The example rules the chart ships (`charts/protection-manager/files/rules`,
//! rendered by `templates/protection-rules.yaml`, one value each).

use serde_json::Value;

/// (name, spec without the finalizer) of each shipped example.
pub const EXAMPLES: &[(&str, &str)] = &[
    (
        "secrets-used-by-pods",
        include_str!("../../../charts/protection-manager/files/rules/secrets-used-by-pods.yaml"),
    ),
    (
        "configmaps-used-by-pods",
        include_str!("../../../charts/protection-manager/files/rules/configmaps-used-by-pods.yaml"),
    ),
    (
        "pvcs-used-by-pods",
        include_str!("../../../charts/protection-manager/files/rules/pvcs-used-by-pods.yaml"),
    ),
];

/// The spec of example `name` with `finalizer`, as the chart renders it.
pub fn spec(name: &str, finalizer: &str) -> Option<Value> {
    let (_, text) = EXAMPLES.iter().find(|(n, _)| *n == name)?;
    let mut v: Value = serde_yaml::from_str(text).ok()?;
    v["finalizer"] = Value::String(finalizer.to_string());
    v["mode"] = Value::String("Enforce".into());
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cel::to_cel;
    use serde_json::json;

    fn refs(example: &str, pod: &Value) -> Vec<String> {
        let (_, users) = crate::spec::compile(&spec(example, "example.com/x").unwrap()).unwrap();
        let u = &users[0];
        let o = to_cel(pod);
        if let Some(w) = &u.while_
            && !w.eval_bool(&o).unwrap()
        {
            return vec![];
        }
        u.reference
            .eval_refs(&o, "ns")
            .unwrap()
            .into_iter()
            .map(|(_, n)| n)
            .collect()
    }

    #[test]
    fn every_example_compiles() {
        for (name, _) in EXAMPLES {
            crate::spec::compile(&spec(name, "example.com/x").unwrap()).expect(name);
        }
    }

    #[test]
    fn configmaps_used_by_pods_finds_every_way_a_pod_names_one() {
        let pod = json!({"metadata": {"name": "p"}, "spec": {
            "containers": [{"name": "c", "env": [{"name": "A", "valueFrom": {"configMapKeyRef": {"name": "env", "key": "k"}}}, {"name": "B", "value": "x"}],
                "envFrom": [{"configMapRef": {"name": "from"}}, {"secretRef": {"name": "secret"}}]}],
            "initContainers": [{"name": "i", "envFrom": [{"configMapRef": {"name": "init"}}]}],
            "volumes": [{"name": "a", "configMap": {"name": "vol"}},
                        {"name": "b", "projected": {"sources": [{"configMap": {"name": "proj"}}, {"secret": {"name": "s"}}]}}]},
            "status": {"phase": "Running"}});
        assert_eq!(
            refs("configmaps-used-by-pods", &pod),
            ["env", "from", "init", "proj", "vol"]
        );
        let mut done = pod.clone();
        done["status"]["phase"] = json!("Succeeded");
        assert!(refs("configmaps-used-by-pods", &done).is_empty());
        // A pod with nothing optional set refers to nothing, without error.
        let bare = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}});
        assert!(refs("configmaps-used-by-pods", &bare).is_empty());
    }

    #[test]
    fn secrets_used_by_pods_finds_every_way_a_pod_names_one() {
        let pod = json!({"metadata": {"name": "p"}, "spec": {
            "containers": [{"name": "c", "env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "env", "key": "k"}}}],
                "envFrom": [{"secretRef": {"name": "from"}}]}],
            "ephemeralContainers": [{"name": "e", "envFrom": [{"secretRef": {"name": "debug"}}]}],
            "imagePullSecrets": [{"name": "pull"}],
            "volumes": [{"name": "a", "secret": {"secretName": "vol"}},
                        {"name": "b", "projected": {"sources": [{"secret": {"name": "proj"}}, {"serviceAccountToken": {"path": "t"}}]}}]}});
        assert_eq!(
            refs("secrets-used-by-pods", &pod),
            ["debug", "env", "from", "proj", "pull", "vol"]
        );
    }

    /// The PVC-style rule and pvc-protection's `podUsesPVC` agree on the
    /// same table of pods and claims (claims of ephemeral volumes owned by
    /// their pod; the rule cannot see the owner, docs/upstream-semantics.md
    /// §11.6).
    #[test]
    fn the_pvc_rule_agrees_with_pvc_protection() {
        use pv_protection::index::PodEntry;
        use pv_protection::pod::PodFacts;
        let volumes = json!([
            {"name": "data", "persistentVolumeClaim": {"claimName": "claim"}},
            {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}
        ]);
        // (node, phase, deletionTimestamp, grace)
        let pods = [
            (None, "Pending", false, None),
            (Some("n1"), "Pending", false, None),
            (Some("n1"), "Running", false, None),
            (Some("n1"), "Succeeded", false, None),
            (Some("n1"), "Failed", false, None),
            (Some("n1"), "Running", true, Some(30)),
            (Some("n1"), "Running", true, Some(0)),
            (Some("n1"), "Succeeded", true, Some(0)),
            (None, "Failed", true, Some(0)),
        ];
        for (i, (node, phase, deleting, grace)) in pods.into_iter().enumerate() {
            let mut pod = json!({
                "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
                "spec": {"containers": [{"name": "c"}], "volumes": volumes},
                "status": {"phase": phase}
            });
            if let Some(n) = node {
                pod["spec"]["nodeName"] = json!(n);
            }
            if deleting {
                pod["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
            }
            if let Some(g) = grace {
                pod["metadata"]["deletionGracePeriodSeconds"] = json!(g);
            }
            let facts: PodFacts = serde_json::from_value(pod.clone()).unwrap();
            let entry = PodEntry::from_facts(&facts);
            let rule = refs("pvcs-used-by-pods", &pod);
            for (claim, owner) in [("claim", None), ("p-scratch", Some("u1"))] {
                assert_eq!(
                    rule.iter().any(|r| r == claim),
                    entry.uses(claim, owner).is_some(),
                    "row {i}: pod {pod} and claim {claim}"
                );
            }
        }
    }
}
