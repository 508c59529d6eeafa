//! A small core/v1 Event recorder with client-go's correlation: a repeat of
//! the same (object, type, reason, message) from the same component patches
//! `count` and `lastTimestamp` of the existing Event instead of creating one.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use parking_lot::Mutex;
use serde_json::json;

/// `Normal` or `Warning`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

type Key = (String, &'static str, String, String);
/// Where an event went: (namespace, name, count).
type Seen = Arc<Mutex<HashMap<Key, (String, String, i32)>>>;

/// Records events as one component (`source.component`), optionally on a
/// host (kubelets).
#[derive(Clone)]
pub struct Recorder {
    client: Client,
    component: String,
    host: Option<String>,
    seen: Seen,
}

fn api(client: &Client, ns: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("", "v1", "Event"), "events");
    Api::namespaced_with(client.clone(), ns, &ar)
}

impl Recorder {
    pub fn new(client: Client, component: &str, host: Option<&str>) -> Recorder {
        Recorder {
            client,
            component: component.to_string(),
            host: host.map(str::to_string),
            seen: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// Records an event about `obj` in the background.
    pub fn event(&self, obj: &ObjectReference, ty: EventType, reason: &str, message: &str) {
        let r = self.clone();
        let obj = obj.clone();
        let reason = reason.to_string();
        let message = message.to_string();
        tokio::spawn(async move {
            if let Err(e) = r.record(&obj, ty, &reason, &message).await {
                tracing::debug!(component = %r.component, reason = %reason, error = %e, "recording an event failed");
            }
        });
    }

    async fn record(
        &self,
        obj: &ObjectReference,
        ty: EventType,
        reason: &str,
        message: &str,
    ) -> Result<(), kube::Error> {
        let ns = obj
            .namespace
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "default".to_string());
        let key: Key = (
            obj.uid.clone().unwrap_or_default(),
            ty.as_str(),
            reason.to_string(),
            message.to_string(),
        );
        let now = crate::object::now_string();
        let existing = self.seen.lock().get(&key).cloned();
        let events = api(&self.client, &ns);
        if let Some((ens, name, count)) = existing {
            let p = json!({"count": count + 1, "lastTimestamp": now});
            match api(&self.client, &ens)
                .patch(&name, &PatchParams::default(), &Patch::Merge(&p))
                .await
            {
                Ok(_) => {
                    self.seen.lock().insert(key, (ens, name, count + 1));
                    return Ok(());
                }
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        let nanos = jiff::Timestamp::now().as_nanosecond();
        let base = obj.name.clone().unwrap_or_default();
        let name = format!("{base}.{:x}", nanos as u64);
        let mut source = json!({"component": self.component});
        if let Some(h) = &self.host {
            source["host"] = json!(h);
        }
        let body = json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": ns},
            "involvedObject": obj,
            "reason": reason,
            "message": message,
            "type": ty.as_str(),
            "source": source,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "reportingComponent": self.component,
            "reportingInstance": self.host.clone().unwrap_or_default(),
        });
        let obj: DynamicObject = serde_json::from_value(body).map_err(kube::Error::SerdeError)?;
        events.create(&PostParams::default(), &obj).await?;
        let mut seen = self.seen.lock();
        if seen.len() > 4096 {
            seen.clear();
        }
        seen.insert(key, (ns, name, 1));
        Ok(())
    }
}
