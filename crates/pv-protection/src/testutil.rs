//! Test fixtures shared by the unit tests: upstream's test helpers.
#![allow(dead_code)]

use serde_json::{Value, json};

use crate::pod::PodFacts;

/// Builder for test pods (upstream test helpers `pod()`, `withPVC`,
/// `unscheduled`, `withStatus`, `withUID`, `withEmptyDir`).
#[derive(Clone)]
pub struct P(pub Value);

/// upstream `pod()`: default/pod1, uid1, on node1, phase Pending.
pub fn pod() -> P {
    P(json!({
        "metadata": {"name": "pod1", "namespace": "default", "uid": "uid1"},
        "spec": {"nodeName": "node1", "volumes": []},
        "status": {"phase": "Pending"}
    }))
}

impl P {
    pub fn with_pvc(mut self, claim: &str) -> P {
        self.0["spec"]["volumes"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": claim, "persistentVolumeClaim": {"claimName": claim}}));
        self
    }
    pub fn with_ephemeral(mut self, volume: &str) -> P {
        self.0["spec"]["volumes"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": volume, "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}));
        self
    }
    pub fn with_empty_dir(mut self) -> P {
        self.0["spec"]["volumes"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "emptyDir", "emptyDir": {}}));
        self
    }
    pub fn unscheduled(mut self) -> P {
        self.0["spec"]["nodeName"] = json!("");
        self
    }
    pub fn status(mut self, phase: &str) -> P {
        self.0["status"]["phase"] = json!(phase);
        self
    }
    pub fn uid(mut self, uid: &str) -> P {
        self.0["metadata"]["uid"] = json!(uid);
        self
    }
    pub fn name(mut self, name: &str) -> P {
        self.0["metadata"]["name"] = json!(name);
        self
    }
    pub fn deleting(mut self, grace: i64) -> P {
        self.0["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        self.0["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
        self
    }
    pub fn running_container(mut self) -> P {
        self.0["status"]["containerStatuses"] = json!([{"state": {"running": {}}}]);
        self
    }
    pub fn f(&self) -> PodFacts {
        serde_json::from_value(self.0.clone()).unwrap()
    }
}
