//! The API server's audit log (policy: Metadata level for every request,
//! stage `ResponseComplete` only, JSON lines), read back by tests and
//! benchmarks: who asked for what, with which user agent, and the answer.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The audit policy the launcher installs.
pub const POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
";

/// One audit event, the fields tests read.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Event {
    pub audit_i_d: String,
    pub stage: String,
    pub verb: String,
    #[serde(rename = "requestURI")]
    pub request_uri: String,
    pub user: UserInfo,
    pub impersonated_user: Option<UserInfo>,
    pub user_agent: String,
    pub object_ref: Option<ObjectRef>,
    pub response_status: Option<ResponseStatus>,
    /// When the server received the request (RFC 3339, microseconds).
    pub request_received_timestamp: String,
    /// When the server reached `stage` (for `ResponseComplete`: the
    /// handler's answer was written).
    pub stage_timestamp: String,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct UserInfo {
    pub username: String,
    pub groups: Vec<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ObjectRef {
    pub resource: String,
    pub namespace: String,
    pub name: String,
    pub api_group: String,
    pub api_version: String,
    pub subresource: String,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct ResponseStatus {
    pub code: u16,
    pub reason: String,
}

impl Event {
    /// The response code (0 when the event carries none).
    pub fn code(&self) -> u16 {
        self.response_status.as_ref().map_or(0, |s| s.code)
    }

    /// How long the server held the request (received → `stage`), if
    /// both timestamps parse.
    pub fn served(&self) -> Option<(k8s_openapi::jiff::Timestamp, std::time::Duration)> {
        let from: k8s_openapi::jiff::Timestamp = self.request_received_timestamp.parse().ok()?;
        let to: k8s_openapi::jiff::Timestamp = self.stage_timestamp.parse().ok()?;
        Some((from, to.duration_since(from).unsigned_abs()))
    }

    /// `resource` or `resource/subresource`.
    pub fn resource(&self) -> String {
        match &self.object_ref {
            None => String::new(),
            Some(r) if r.subresource.is_empty() => r.resource.clone(),
            Some(r) => format!("{}/{}", r.resource, r.subresource),
        }
    }
}

/// The audit log of one control plane.
#[derive(Clone, Debug)]
pub struct AuditLog {
    path: PathBuf,
}

impl AuditLog {
    pub(crate) fn new(path: PathBuf) -> AuditLog {
        AuditLog { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every event written so far (lines that do not parse are skipped: the
    /// last one may be half-written).
    pub fn events(&self) -> Vec<Event> {
        let text = std::fs::read_to_string(&self.path).unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str::<Event>(l).ok())
            .filter(|e| e.stage == "ResponseComplete" || e.stage == "Panic")
            .collect()
    }

    /// The size of the log now; pass it to [`AuditLog::events_since`] to
    /// read only what comes later.
    pub fn mark(&self) -> u64 {
        std::fs::metadata(&self.path).map(|m| m.len()).unwrap_or(0)
    }

    /// Events written after `mark` (a byte offset from [`AuditLog::mark`]).
    pub fn events_since(&self, mark: u64) -> Vec<Event> {
        let bytes = std::fs::read(&self.path).unwrap_or_default();
        let start = (mark as usize).min(bytes.len());
        String::from_utf8_lossy(&bytes[start..])
            .lines()
            .filter_map(|l| serde_json::from_str::<Event>(l).ok())
            .filter(|e| e.stage == "ResponseComplete" || e.stage == "Panic")
            .collect()
    }
}

/// Requests counted by verb (`get`, `list`, `watch`, `create`, `update`,
/// `patch`, `delete`, ...) and resource, for events that `keep` selects.
pub fn count_by_verb<'a>(
    events: impl IntoIterator<Item = &'a Event>,
    keep: impl Fn(&Event) -> bool,
) -> BTreeMap<(String, String), u64> {
    let mut out = BTreeMap::new();
    for e in events {
        if keep(e) {
            *out.entry((e.verb.clone(), e.resource())).or_insert(0) += 1;
        }
    }
    out
}
