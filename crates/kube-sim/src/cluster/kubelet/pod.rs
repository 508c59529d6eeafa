//! One pod on an emulated node: volumes, environment, containers, status
//! (`pods/status`), graceful deletion.

use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    ConfigMap, Container, KeyToPath, PersistentVolume, PersistentVolumeClaim, Pod, Secret,
    ServiceAccount,
};
use kube::Resource;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use super::container::{self, CState, Shared, Status, Term};
use super::probe;
use super::rewrite;
use super::{AgentCtx, TokenSource};
use crate::cluster::events::EventType;
use crate::cluster::runtime::PodProcess;

/// The service-account directory a real pod gets.
pub const SA_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

fn pod_key(p: &Pod) -> (String, String, String) {
    (
        p.metadata.namespace.clone().unwrap_or_default(),
        p.metadata.name.clone().unwrap_or_default(),
        p.metadata.uid.clone().unwrap_or_default(),
    )
}

/// What the kubelet keeps of a pod in its directory (`pod.json`), so that a
/// kubelet started after a crash reports the same sandbox: the pod's IP and
/// the host ports its containers' ports were given.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Sandbox {
    pod_ip: String,
    host_ports: BTreeMap<u16, u16>,
}

const SANDBOX_FILE: &str = "pod.json";

impl Sandbox {
    fn load(dir: &Path) -> Option<Sandbox> {
        serde_json::from_slice(&std::fs::read(dir.join(SANDBOX_FILE)).ok()?).ok()
    }

    fn save(&self, dir: &Path) {
        let r = std::fs::create_dir_all(dir).and_then(|()| {
            super::shim::write_atomic(
                &dir.join(SANDBOX_FILE),
                &serde_json::to_vec(self).unwrap_or_default(),
            )
        });
        if let Err(e) = r {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot save the pod sandbox");
        }
    }
}

/// The directory of a pod (volumes, logs, container states).
pub(crate) fn pod_dir(root: &Path, ns: &str, name: &str, uid: &str) -> PathBuf {
    root.join("pods").join(format!("{ns}_{name}_{uid}"))
}

/// Runs a pod until it is gone from the API (or the kubelet stops).
pub(crate) async fn run(ctx: Arc<AgentCtx>, mut rx: watch::Receiver<Option<Arc<Pod>>>) {
    let Some(first) = rx.borrow().clone() else {
        return;
    };
    let (ns, name, uid) = pod_key(&first);
    let dir = pod_dir(&ctx.root, &ns, &name, &uid);
    let terminal_at_start = matches!(crate::cluster::util::phase(&first), "Succeeded" | "Failed");
    let spec = first.spec.clone().unwrap_or_default();
    let sandbox_state = Sandbox::load(&dir);
    let pod_ip = match &sandbox_state {
        Some(s) if ctx.claim_ip(&s.pod_ip) => s.pod_ip.clone(),
        _ => ctx.alloc_ip(),
    };
    Sandbox {
        pod_ip: pod_ip.clone(),
        host_ports: sandbox_state
            .as_ref()
            .map(|s| s.host_ports.clone())
            .unwrap_or_default(),
    }
    .save(&dir);
    let start_time = first
        .status
        .as_ref()
        .and_then(|s| s.start_time.clone())
        .map(|t| crate::object::format_time(t.0))
        .unwrap_or_else(crate::object::now_string);
    ctx.runtimes.upsert(PodProcess {
        namespace: ns.clone(),
        name: name.clone(),
        uid: uid.clone(),
        node: ctx.node.clone(),
        dir: dir.clone(),
        containers: Vec::new(),
    });
    let inits = spec.init_containers.clone().unwrap_or_default();
    let apps = spec.containers.clone();
    let mut statuses = Vec::new();
    for c in &inits {
        statuses.push(Status::waiting(
            &c.name,
            c.image.as_deref().unwrap_or(""),
            true,
            "PodInitializing",
        ));
    }
    for c in &apps {
        let reason = if inits.is_empty() {
            "ContainerCreating"
        } else {
            "PodInitializing"
        };
        statuses.push(Status::waiting(
            &c.name,
            c.image.as_deref().unwrap_or(""),
            false,
            reason,
        ));
    }
    let shared = Arc::new(Shared {
        statuses: Mutex::new(statuses),
        changed: Notify::new(),
    });
    let sandbox = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (term_tx, term_rx) = watch::channel::<Option<Instant>>(None);
    let mut lifecycle = if terminal_at_start || first.metadata.deletion_timestamp.is_some() {
        None
    } else {
        Some(tokio::spawn(lifecycle(
            ctx.clone(),
            first.clone(),
            dir.clone(),
            pod_ip.clone(),
            shared.clone(),
            sandbox.clone(),
            term_rx,
        )))
    };
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let mut last_written: Option<Value> = None;
    let mut terminating = false;
    let mut deleted_final = false;
    let mut latest = first.clone();
    let mut write_failed = false;
    loop {
        let current = rx.borrow().clone();
        let Some(p) = current else {
            // Gone from the API (force deletion or after our final delete):
            // stop what still runs.
            let _ = term_tx.send(Some(Instant::now() + Duration::from_secs(2)));
            if let Some(h) = lifecycle.take() {
                let _ = tokio::time::timeout(Duration::from_secs(10), h).await;
            }
            break;
        };
        latest = p;
        if latest.metadata.deletion_timestamp.is_some() && !terminating {
            terminating = true;
            let grace = latest
                .metadata
                .deletion_grace_period_seconds
                .unwrap_or(30)
                .max(0) as u64;
            let _ = term_tx.send(Some(Instant::now() + Duration::from_secs(grace)));
        }
        let finished = lifecycle.as_ref().is_none_or(|h| h.is_finished());
        if !terminal_at_start {
            let status = compute_status(
                &latest,
                &shared.statuses.lock(),
                sandbox.load(std::sync::atomic::Ordering::Relaxed),
                &pod_ip,
                &ctx.node_ip,
                &start_time,
                terminating && finished,
            );
            write_failed = false;
            if last_written.as_ref() != Some(&status) && !deleted_final {
                let patch = json!({"status": status});
                match api
                    .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    Ok(_) => last_written = Some(status),
                    Err(kube::Error::Api(e)) if e.code == 404 => {}
                    Err(e) => {
                        write_failed = true;
                        tracing::debug!(pod = %name, error = %e, "status update failed");
                    }
                }
            }
        }
        if terminating && finished && !deleted_final && last_written.is_some()
            || (terminating && terminal_at_start && !deleted_final)
        {
            // The containers are stopped: the final delete (status manager's
            // canBeDeleted → Delete with grace 0).
            let dp = DeleteParams {
                grace_period_seconds: Some(0),
                preconditions: Some(kube::api::Preconditions {
                    uid: Some(uid.clone()),
                    resource_version: None,
                }),
                ..Default::default()
            };
            match api.delete(&name, &dp).await {
                Ok(_) => deleted_final = true,
                Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => deleted_final = true,
                Err(e) => tracing::debug!(pod = %name, error = %e, "final delete failed"),
            }
        }
        // Changes wake the loop; the timer only retries failed writes.
        let idle = if terminating && !deleted_final {
            Duration::from_millis(200)
        } else if write_failed {
            Duration::from_secs(1)
        } else {
            Duration::from_secs(10)
        };
        tokio::select! {
            _ = shared.changed.notified() => {
                // Batch bursts of container changes.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            r = rx.changed() => {
                if r.is_err() {
                    let _ = term_tx.send(Some(Instant::now()));
                }
            }
            _ = tokio::time::sleep(idle) => {}
            _ = ctx.stop.cancelled() => {
                let _ = term_tx.send(Some(Instant::now()));
                if let Some(h) = lifecycle.take() {
                    let _ = tokio::time::timeout(Duration::from_secs(5), h).await;
                }
                break;
            }
        }
    }
    let _ = latest;
    ctx.runtimes.remove(&uid);
    ctx.release_ip(&pod_ip);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Volumes, then init containers one by one, then the app containers.
async fn lifecycle(
    ctx: Arc<AgentCtx>,
    pod: Arc<Pod>,
    dir: PathBuf,
    pod_ip: String,
    shared: Arc<Shared>,
    sandbox: Arc<std::sync::atomic::AtomicBool>,
    term: watch::Receiver<Option<Instant>>,
) {
    let (ns, name, _) = pod_key(&pod);
    let mut last_event: Option<(String, Instant)> = None;
    let volumes = loop {
        if term.borrow().is_some() || ctx.stop.is_cancelled() {
            mark_all_done(&shared);
            return;
        }
        match setup_volumes(&ctx, &pod, &dir).await {
            Ok((v, tokens)) => {
                if !tokens.is_empty() {
                    tokio::spawn(refresh_tokens(
                        ctx.clone(),
                        pod.clone(),
                        tokens,
                        term.clone(),
                    ));
                }
                break v;
            }
            Err(msg) => {
                let again = last_event
                    .as_ref()
                    .is_none_or(|(m, at)| *m != msg || at.elapsed() > Duration::from_secs(60));
                if again {
                    ctx.recorder.event(
                        &pod.object_ref(&()),
                        EventType::Warning,
                        "FailedMount",
                        &msg,
                    );
                    last_event = Some((msg, Instant::now()));
                }
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }
    };
    sandbox.store(true, std::sync::atomic::Ordering::Relaxed);
    shared.changed.notify_one();
    let spec = pod.spec.clone().unwrap_or_default();
    let ports = match Sandbox::load(&dir).filter(|s| !s.host_ports.is_empty()) {
        Some(s) => s.host_ports,
        None => {
            let ports = allocate_ports(
                &spec.containers,
                spec.init_containers.as_deref().unwrap_or(&[]),
            );
            Sandbox {
                pod_ip: pod_ip.clone(),
                host_ports: ports.clone(),
            }
            .save(&dir);
            ports
        }
    };
    let inits = spec.init_containers.clone().unwrap_or_default();
    let n_init = inits.len();
    for (i, c) in inits.iter().enumerate() {
        let Some(s) = build_spec(
            &ctx, &pod, c, i, true, &volumes, &ports, &pod_ip, &dir, &shared, &term,
        )
        .await
        else {
            mark_all_done(&shared);
            return;
        };
        container::run(s, ctl(&ctx, &shared, &term)).await;
        let ok = shared
            .statuses
            .lock()
            .get(i)
            .is_some_and(|st| matches!(&st.state, CState::Terminated(t) if t.exit_code == 0));
        if !ok {
            mark_all_done(&shared);
            return;
        }
    }
    let mut handles = Vec::new();
    for (j, c) in spec.containers.iter().enumerate() {
        let idx = n_init + j;
        let Some(s) = build_spec(
            &ctx, &pod, c, idx, false, &volumes, &ports, &pod_ip, &dir, &shared, &term,
        )
        .await
        else {
            mark_all_done(&shared);
            break;
        };
        handles.push(tokio::spawn(container::run(s, ctl(&ctx, &shared, &term))));
    }
    let _ = (&ns, &name);
    for h in handles {
        let _ = h.await;
    }
}

fn ctl(
    ctx: &AgentCtx,
    shared: &Arc<Shared>,
    term: &watch::Receiver<Option<Instant>>,
) -> container::Ctl {
    container::Ctl {
        shared: shared.clone(),
        term: term.clone(),
        stop: ctx.stop.clone(),
        recorder: ctx.recorder.clone(),
        runtimes: ctx.runtimes.clone(),
        backoff_initial: ctx.config.crash_loop_initial,
        backoff_max: ctx.config.crash_loop_max,
    }
}

fn mark_all_done(shared: &Shared) {
    for s in shared.statuses.lock().iter_mut() {
        s.done = true;
        s.ready = false;
    }
    shared.changed.notify_one();
}

/// A volume as materialised on the host.
struct HostVolume {
    name: String,
    path: PathBuf,
}

fn write_files(
    dir: &Path,
    entries: &BTreeMap<String, Vec<u8>>,
    items: Option<&Vec<KeyToPath>>,
    default_mode: Option<i32>,
) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let mode = default_mode.unwrap_or(0o644) as u32;
    let list: Vec<(String, String, u32)> = match items {
        Some(items) if !items.is_empty() => items
            .iter()
            .filter(|i| entries.contains_key(&i.key))
            .map(|i| {
                (
                    i.key.clone(),
                    i.path.clone(),
                    i.mode.map(|m| m as u32).unwrap_or(mode),
                )
            })
            .collect(),
        _ => entries
            .keys()
            .map(|k| (k.clone(), k.clone(), mode))
            .collect(),
    };
    for (key, rel, m) in list {
        let path = dir.join(rel.trim_start_matches('/'));
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("creating {}: {e}", parent.display()))?;
        }
        let data = entries.get(&key).cloned().unwrap_or_default();
        std::fs::write(&path, data).map_err(|e| format!("writing {}: {e}", path.display()))?;
        let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(m & 0o777));
    }
    Ok(())
}

async fn secret_entries(
    ctx: &AgentCtx,
    ns: &str,
    name: &str,
) -> Result<Option<BTreeMap<String, Vec<u8>>>, String> {
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    match api.get_opt(name).await {
        Ok(Some(s)) => Ok(Some(
            s.data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.0))
                .collect(),
        )),
        Ok(None) => Ok(None),
        Err(e) => Err(format!("getting secret {name:?}: {e}")),
    }
}

async fn configmap_entries(
    ctx: &AgentCtx,
    ns: &str,
    name: &str,
) -> Result<Option<BTreeMap<String, Vec<u8>>>, String> {
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), ns);
    match api.get_opt(name).await {
        Ok(Some(c)) => {
            let mut m: BTreeMap<String, Vec<u8>> = c
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.into_bytes()))
                .collect();
            for (k, v) in c.binary_data.unwrap_or_default() {
                m.insert(k, v.0);
            }
            Ok(Some(m))
        }
        Ok(None) => Ok(None),
        Err(e) => Err(format!("getting configmap {name:?}: {e}")),
    }
}

fn automount(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.automount_service_account_token)
        .unwrap_or(true)
}

fn service_account(pod: &Pod) -> String {
    pod.spec
        .as_ref()
        .and_then(|s| s.service_account_name.clone())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "default".into())
}

/// The user name of the pod's service account (kube-sim's token for it).
fn sa_user(pod: &Pod) -> String {
    let (ns, _, _) = pod_key(pod);
    format!("system:serviceaccount:{ns}:{}", service_account(pod))
}

/// A projected service-account token file the kubelet keeps fresh.
#[derive(Debug, Clone)]
struct TokenFile {
    path: PathBuf,
    audience: Option<String>,
    expiration_seconds: Option<i64>,
    mode: u32,
}

/// A token for the pod's service account: kube-sim's (the user name), or
/// from the TokenRequest API as the node, bound to the pod, as the
/// kubelet's token manager asks for one (pkg/volume/projected).
async fn service_account_token(
    ctx: &AgentCtx,
    pod: &Pod,
    audience: Option<&str>,
    expiration_seconds: Option<i64>,
) -> Result<String, String> {
    match ctx.api.tokens {
        TokenSource::SimUserName => Ok(sa_user(pod)),
        TokenSource::TokenRequest => {
            let (ns, name, uid) = pod_key(pod);
            let sa = service_account(pod);
            let mut spec = json!({
                "audiences": audience.map(|a| vec![a.to_string()]).unwrap_or_default(),
                "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid},
            });
            if let Some(e) = expiration_seconds {
                spec["expirationSeconds"] = json!(e);
            }
            let body = json!({
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": spec,
            });
            let api: Api<ServiceAccount> = Api::namespaced(ctx.client.clone(), &ns);
            let tr: Value = api
                .create_subresource("token", &sa, &PostParams::default(), &body)
                .await
                .map_err(|e| format!("failed to fetch token: {e}"))?;
            tr.pointer("/status/token")
                .and_then(Value::as_str)
                .map(str::to_string)
                .ok_or_else(|| "failed to fetch token: the TokenRequest has no token".to_string())
        }
    }
}

/// Writes `token` to `t.path` whole (a reader never sees half a token).
fn write_token(t: &TokenFile, token: &str) -> Result<(), String> {
    if let Some(parent) = t.path.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| format!("creating {}: {e}", parent.display()))?;
    }
    super::shim::write_atomic(&t.path, token.as_bytes())
        .map_err(|e| format!("writing {}: {e}", t.path.display()))?;
    let _ = std::fs::set_permissions(&t.path, std::fs::Permissions::from_mode(t.mode & 0o777));
    Ok(())
}

/// Renews the pod's projected tokens at 80% of their lifetime (the
/// kubelet's token manager), until the pod stops.
async fn refresh_tokens(
    ctx: Arc<AgentCtx>,
    pod: Arc<Pod>,
    tokens: Vec<TokenFile>,
    mut term: watch::Receiver<Option<Instant>>,
) {
    if ctx.api.tokens == TokenSource::SimUserName {
        return;
    }
    let every = tokens
        .iter()
        .map(|t| t.expiration_seconds.unwrap_or(3600).max(600) as u64 * 8 / 10)
        .min()
        .unwrap_or(2880);
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(every)) => {}
            _ = term.changed() => return,
            _ = ctx.stop.cancelled() => return,
        }
        if term.borrow().is_some() {
            return;
        }
        for t in &tokens {
            let r = service_account_token(&ctx, &pod, t.audience.as_deref(), t.expiration_seconds)
                .await
                .and_then(|tok| write_token(t, &tok));
            if let Err(e) = r {
                tracing::warn!(pod = ?pod.metadata.name, error = %e, "renewing a service account token failed");
            }
        }
    }
}

/// A field of the pod for the downward API.
fn field_value(pod: &Pod, path: &str, pod_ip: &str, host_ip: &str) -> Option<String> {
    let m = &pod.metadata;
    let subscript = |p: &str, prefix: &str| -> Option<String> {
        p.strip_prefix(prefix)?
            .strip_suffix("']")
            .map(str::to_string)
    };
    Some(match path {
        "metadata.name" => m.name.clone().unwrap_or_default(),
        "metadata.namespace" => m.namespace.clone().unwrap_or_default(),
        "metadata.uid" => m.uid.clone().unwrap_or_default(),
        "spec.nodeName" => pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default(),
        "spec.serviceAccountName" => service_account(pod),
        "status.podIP" | "status.podIPs" => pod_ip.to_string(),
        "status.hostIP" | "status.hostIPs" => host_ip.to_string(),
        "metadata.labels" | "metadata.annotations" => {
            let map = if path == "metadata.labels" {
                &m.labels
            } else {
                &m.annotations
            };
            map.clone()
                .unwrap_or_default()
                .iter()
                .map(|(k, v)| format!("{k}={v:?}"))
                .collect::<Vec<_>>()
                .join("\n")
        }
        p if p.starts_with("metadata.labels['") => {
            let k = subscript(p, "metadata.labels['")?;
            m.labels.as_ref()?.get(&k).cloned().unwrap_or_default()
        }
        p if p.starts_with("metadata.annotations['") => {
            let k = subscript(p, "metadata.annotations['")?;
            m.annotations.as_ref()?.get(&k).cloned().unwrap_or_default()
        }
        _ => return None,
    })
}

/// Whether some container of the pod mounts a volume at the
/// service-account directory (the API server's ServiceAccount admission
/// plugin adds a `kube-api-access-*` projected volume there; kube-sim has
/// no such plugin, and the kubelet then provides the directory itself).
fn mounts_service_account_dir(pod: &Pod) -> bool {
    let spec = pod.spec.as_ref();
    spec.into_iter()
        .flat_map(|s| {
            s.containers
                .iter()
                .chain(s.init_containers.iter().flatten())
        })
        .flat_map(|c| c.volume_mounts.iter().flatten())
        .any(|m| m.mount_path.trim_end_matches('/') == SA_DIR)
}

/// The host directory the pod's containers see as [`SA_DIR`].
fn service_account_dir(pod: &Pod, dir: &Path, volumes: &[HostVolume]) -> Option<PathBuf> {
    let spec = pod.spec.as_ref()?;
    let mount = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .flat_map(|c| c.volume_mounts.iter().flatten())
        .find(|m| m.mount_path.trim_end_matches('/') == SA_DIR);
    match mount {
        Some(m) => volumes
            .iter()
            .find(|v| v.name == m.name)
            .map(|v| v.path.clone()),
        None => automount(pod).then(|| dir.join("serviceaccount")),
    }
}

async fn setup_volumes(
    ctx: &AgentCtx,
    pod: &Pod,
    dir: &Path,
) -> Result<(Vec<HostVolume>, Vec<TokenFile>), String> {
    let (ns, _, _) = pod_key(pod);
    let spec = pod.spec.clone().unwrap_or_default();
    let mut out = Vec::new();
    let mut tokens = Vec::new();
    let mk =
        |p: &Path| std::fs::create_dir_all(p).map_err(|e| format!("creating {}: {e}", p.display()));
    mk(&dir.join("logs"))?;
    for v in spec.volumes.clone().unwrap_or_default() {
        let host = dir.join("volumes").join(&v.name);
        let fail =
            |what: &str| format!("MountVolume.SetUp failed for volume {:?} : {what}", v.name);
        let path = if let Some(s) = &v.secret {
            let sname = s.secret_name.clone().unwrap_or_default();
            match secret_entries(ctx, &ns, &sname).await? {
                Some(e) => write_files(&host, &e, s.items.as_ref(), s.default_mode)?,
                None if s.optional == Some(true) => mk(&host)?,
                None => return Err(fail(&format!("secret {sname:?} not found"))),
            }
            host
        } else if let Some(c) = &v.config_map {
            match configmap_entries(ctx, &ns, &c.name).await? {
                Some(e) => write_files(&host, &e, c.items.as_ref(), c.default_mode)?,
                None if c.optional == Some(true) => mk(&host)?,
                None => return Err(fail(&format!("configmap {:?} not found", c.name))),
            }
            host
        } else if let Some(h) = &v.host_path {
            let p = PathBuf::from(&h.path);
            if matches!(
                h.type_.as_deref(),
                None | Some("") | Some("DirectoryOrCreate")
            ) && !p.exists()
            {
                let _ = std::fs::create_dir_all(&p);
            }
            p
        } else if let Some(c) = &v.persistent_volume_claim {
            let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &ns);
            let pvc = pvcs
                .get_opt(&c.claim_name)
                .await
                .map_err(|e| format!("getting claim {:?}: {e}", c.claim_name))?
                .ok_or_else(|| {
                    fail(&format!(
                        "persistentvolumeclaim {:?} not found",
                        c.claim_name
                    ))
                })?;
            let volume = pvc.spec.and_then(|s| s.volume_name).unwrap_or_default();
            let pv = if volume.is_empty() {
                None
            } else {
                let pvs: Api<PersistentVolume> = Api::all(ctx.client.clone());
                pvs.get_opt(&volume).await.ok().flatten()
            };
            let src = pv.and_then(|pv| pv.spec).and_then(|s| {
                s.host_path
                    .map(|h| h.path)
                    .or_else(|| s.local.map(|l| l.path))
            });
            match src {
                Some(p) => {
                    let p = PathBuf::from(p);
                    let _ = std::fs::create_dir_all(&p);
                    p
                }
                None => {
                    mk(&host)?;
                    host
                }
            }
        } else if let Some(d) = &v.downward_api {
            mk(&host)?;
            let mut entries = BTreeMap::new();
            let mut items = Vec::new();
            for f in d.items.clone().unwrap_or_default() {
                if let Some(fr) = &f.field_ref
                    && let Some(val) = field_value(pod, &fr.field_path, "", "")
                {
                    entries.insert(f.path.clone(), val.into_bytes());
                    items.push(KeyToPath {
                        key: f.path.clone(),
                        path: f.path.clone(),
                        mode: f.mode,
                    });
                }
            }
            write_files(&host, &entries, Some(&items), d.default_mode)?;
            host
        } else if let Some(p) = &v.projected {
            mk(&host)?;
            for src in p.sources.clone().unwrap_or_default() {
                if let Some(s) = &src.secret {
                    match secret_entries(ctx, &ns, &s.name).await? {
                        Some(e) => write_files(&host, &e, s.items.as_ref(), p.default_mode)?,
                        None if s.optional == Some(true) => {}
                        None => return Err(fail(&format!("secret {:?} not found", s.name))),
                    }
                }
                if let Some(c) = &src.config_map {
                    match configmap_entries(ctx, &ns, &c.name).await? {
                        Some(e) => write_files(&host, &e, c.items.as_ref(), p.default_mode)?,
                        None if c.optional == Some(true) => {}
                        None => return Err(fail(&format!("configmap {:?} not found", c.name))),
                    }
                }
                if let Some(t) = &src.service_account_token {
                    let file = TokenFile {
                        path: host.join(t.path.trim_start_matches('/')),
                        audience: t.audience.clone().filter(|a| !a.is_empty()),
                        expiration_seconds: t.expiration_seconds,
                        mode: p.default_mode.unwrap_or(0o644) as u32,
                    };
                    let token = service_account_token(
                        ctx,
                        pod,
                        file.audience.as_deref(),
                        file.expiration_seconds,
                    )
                    .await
                    .map_err(|e| fail(&e))?;
                    write_token(&file, &token)?;
                    tokens.push(file);
                }
                if let Some(d) = &src.downward_api {
                    let mut entries = BTreeMap::new();
                    for f in d.items.clone().unwrap_or_default() {
                        if let Some(fr) = &f.field_ref
                            && let Some(val) = field_value(pod, &fr.field_path, "", "")
                        {
                            entries.insert(f.path.clone(), val.into_bytes());
                        }
                    }
                    write_files(&host, &entries, None, p.default_mode)?;
                }
            }
            host
        } else {
            mk(&host)?;
            host
        };
        out.push(HostVolume {
            name: v.name.clone(),
            path,
        });
    }
    if automount(pod) && !mounts_service_account_dir(pod) {
        // What the ServiceAccount admission plugin's projected volume holds.
        let sa = dir.join("serviceaccount");
        let entries: BTreeMap<String, Vec<u8>> = [
            ("namespace".to_string(), ns.clone().into_bytes()),
            (
                "ca.crt".to_string(),
                ctx.api.ca_pem.clone().unwrap_or_default().into_bytes(),
            ),
        ]
        .into_iter()
        .collect();
        write_files(&sa, &entries, None, None)?;
        let file = TokenFile {
            path: sa.join("token"),
            audience: None,
            expiration_seconds: Some(3607),
            mode: 0o644,
        };
        let token = service_account_token(ctx, pod, None, file.expiration_seconds).await?;
        write_token(&file, &token)?;
        tokens.push(file);
    }
    if let Some(sa) = service_account_dir(pod, dir, &out) {
        // The in-cluster configuration's files are at fixed paths a process
        // on a shared host cannot have to itself; the same token and CA,
        // named by a kubeconfig (KUBECONFIG), reach the same server.
        let ca = sa.join("ca.crt");
        let ca_line = if std::fs::metadata(&ca).is_ok_and(|m| m.len() > 0) {
            format!("    certificate-authority: {}\n", ca.display())
        } else {
            String::new()
        };
        let kubeconfig = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: cluster\n  cluster:\n    server: {}\n{ca_line}users:\n- name: sa\n  user:\n    tokenFile: {}\ncontexts:\n- name: cluster\n  context:\n    cluster: cluster\n    user: sa\n    namespace: {ns}\ncurrent-context: cluster\n",
            ctx.api.server_url,
            sa.join("token").display(),
        );
        std::fs::write(dir.join("kubeconfig"), kubeconfig)
            .map_err(|e| format!("writing the pod kubeconfig: {e}"))?;
    }
    Ok((out, tokens))
}

/// containerPort → free host port for every declared port of the pod.
///
/// The pod's processes share the host's network, so each declared port gets
/// a host port of its own, kept for the pod's life: a restarted container
/// binds the same one. So the ports come from outside the range outgoing
/// connections take theirs from (`free_port`): a client there could hold
/// the port while the container restarts, and the container would exit
/// with "Address already in use".
fn allocate_ports(containers: &[Container], inits: &[Container]) -> BTreeMap<u16, u16> {
    let mut out = BTreeMap::new();
    for c in containers.iter().chain(inits) {
        for p in c.ports.iter().flatten() {
            let Ok(cp) = u16::try_from(p.container_port) else {
                continue;
            };
            if out.contains_key(&cp) {
                continue;
            }
            if let Ok(hp) = free_port::free_port() {
                out.insert(cp, hp);
            }
        }
    }
    out
}

/// `$(VAR)` expansion (third_party/forked/golang/expansion): `$$` is a `$`,
/// unknown references stay as written.
pub fn expand(s: &str, vars: &HashMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(a) = after.strip_prefix('$') {
            out.push('$');
            rest = a;
        } else if let Some(body) = after.strip_prefix('(')
            && let Some(end) = body.find(')')
        {
            let name = &body[..end];
            match vars.get(name) {
                Some(v) => out.push_str(v),
                None => out.push_str(&format!("$({name})")),
            }
            rest = &body[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

#[allow(clippy::too_many_arguments)]
async fn build_spec(
    ctx: &AgentCtx,
    pod: &Pod,
    c: &Container,
    index: usize,
    init: bool,
    volumes: &[HostVolume],
    ports: &BTreeMap<u16, u16>,
    pod_ip: &str,
    dir: &Path,
    shared: &Shared,
    term: &watch::Receiver<Option<Instant>>,
) -> Option<container::Spec> {
    let (ns, name, uid) = pod_key(pod);
    let spec = pod.spec.clone().unwrap_or_default();
    let image = c.image.clone().unwrap_or_default();
    let binary = crate::cluster::binary_for(&ctx.config.images, &image).map(|m| m.binary.clone());
    // Mounts (mountPath → host path), for path rewriting.
    let mut mounts: Vec<(String, String)> = Vec::new();
    for m in c.volume_mounts.iter().flatten() {
        if let Some(v) = volumes.iter().find(|v| v.name == m.name) {
            let mut p = v.path.clone();
            if let Some(sp) = m.sub_path.as_deref().filter(|s| !s.is_empty()) {
                p = p.join(sp);
            }
            mounts.push((m.mount_path.clone(), p.display().to_string()));
        }
    }
    if automount(pod) && !mounts_service_account_dir(pod) {
        mounts.push((
            SA_DIR.to_string(),
            dir.join("serviceaccount").display().to_string(),
        ));
    }
    let rewrite_value = |name: &str, v: &str| {
        let v = rewrite::paths(v, &mounts);
        rewrite::port_value(&v, name.to_ascii_lowercase().ends_with("port"), ports)
    };
    // Environment, retried while a referenced object is missing.
    let env = loop {
        match resolve_env(ctx, pod, c, pod_ip).await {
            Ok(e) => break e,
            Err(msg) => {
                {
                    let mut st = shared.statuses.lock();
                    if let Some(s) = st.get_mut(index) {
                        s.state = CState::Waiting {
                            reason: "CreateContainerConfigError".into(),
                            message: Some(msg.clone()),
                        };
                    }
                }
                shared.changed.notify_one();
                ctx.recorder.event(
                    &pod.object_ref(&()),
                    EventType::Warning,
                    "Failed",
                    &format!("Error: {msg}"),
                );
                for _ in 0..20 {
                    if term.borrow().is_some() || ctx.stop.is_cancelled() {
                        return None;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    };
    let vars: HashMap<String, String> = env.iter().cloned().collect();
    let mut full_env: Vec<(String, String)> = vec![
        (
            "PATH".into(),
            std::env::var("PATH").unwrap_or_else(|_| {
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into()
            }),
        ),
        (
            "HOSTNAME".into(),
            spec.hostname.clone().unwrap_or_else(|| name.clone()),
        ),
        ("HOME".into(), dir.display().to_string()),
    ];
    if let Some((host, port)) = &ctx.api.service {
        // What the kubelet derives from the `kubernetes` Service; the
        // server's own address here (nothing routes its ClusterIP).
        full_env.push(("KUBERNETES_SERVICE_HOST".into(), host.clone()));
        full_env.push(("KUBERNETES_SERVICE_PORT".into(), port.to_string()));
        full_env.push(("KUBERNETES_SERVICE_PORT_HTTPS".into(), port.to_string()));
    }
    if dir.join("kubeconfig").is_file() {
        full_env.push((
            "KUBECONFIG".into(),
            dir.join("kubeconfig").display().to_string(),
        ));
    }
    for (k, v) in &env {
        full_env.retain(|(x, _)| x != k);
        full_env.push((k.clone(), rewrite_value(k, v)));
    }
    let argv = binary.map(|bin| {
        let mut argv = vec![bin.display().to_string()];
        let command = c.command.clone().unwrap_or_default();
        let rest: Vec<String> = command
            .iter()
            .skip(1)
            .chain(c.args.iter().flatten())
            .map(|a| rewrite::paths(&expand(a, &vars), &mounts))
            .collect();
        argv.extend(rewrite::port_args(&rest, ports));
        argv
    });
    let named: BTreeMap<String, u16> = c
        .ports
        .iter()
        .flatten()
        .filter_map(|p| Some((p.name.clone()?, u16::try_from(p.container_port).ok()?)))
        .collect();
    let cwd = rewrite::working_dir(c.working_dir.as_deref().unwrap_or(""), &mounts, dir);
    let grace =
        Duration::from_secs(spec.termination_grace_period_seconds.unwrap_or(30).max(0) as u64);
    let ports_of_pod = ports.clone();
    Some(container::Spec {
        index,
        name: c.name.clone(),
        init,
        restart_policy: spec
            .restart_policy
            .clone()
            .unwrap_or_else(|| "Always".into()),
        argv,
        target: probe::Target {
            ports: ports_of_pod,
            named,
            env: full_env.clone(),
            mounts: mounts.clone(),
            cwd: cwd.clone(),
        },
        env: full_env,
        cwd,
        log_dir: dir.join("logs"),
        startup: c.startup_probe.clone(),
        readiness: c.readiness_probe.clone(),
        liveness: c.liveness_probe.clone(),
        grace,
        pod_ref: pod.object_ref(&()),
        pod_desc: format!("{name}_{ns}({uid})"),
        state_dir: dir.join("containers").join(&c.name),
        launcher: ctx.config.launcher.clone(),
        uid,
        image,
    })
}

/// A ConfigMap or a Secret, as env and envFrom refer to them.
#[derive(Clone, Copy)]
enum Data {
    ConfigMap,
    Secret,
}

impl Data {
    fn kind(self) -> &'static str {
        match self {
            Data::ConfigMap => "ConfigMap",
            Data::Secret => "Secret",
        }
    }
}

/// The entries of the ConfigMap or Secret an env var or envFrom refers to:
/// `None` where an optional one does not exist, the kubelet's
/// "configmap/secret "name" not found" where a required one does not.
async fn env_data(
    ctx: &AgentCtx,
    ns: &str,
    kind: Data,
    name: &str,
    optional: Option<bool>,
) -> Result<Option<BTreeMap<String, Vec<u8>>>, String> {
    let entries = match kind {
        Data::ConfigMap => configmap_entries(ctx, ns, name).await?,
        Data::Secret => secret_entries(ctx, ns, name).await?,
    };
    match entries {
        Some(e) => Ok(Some(e)),
        None if optional == Some(true) => Ok(None),
        None => Err(format!("{} {name:?} not found", kind.kind().to_lowercase())),
    }
}

async fn resolve_env(
    ctx: &AgentCtx,
    pod: &Pod,
    c: &Container,
    pod_ip: &str,
) -> Result<Vec<(String, String)>, String> {
    let (ns, _, _) = pod_key(pod);
    let mut out: Vec<(String, String)> = Vec::new();
    let set = |out: &mut Vec<(String, String)>, k: String, v: String| {
        out.retain(|(x, _)| *x != k);
        out.push((k, v));
    };
    for from in c.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        let refs = [
            (
                Data::ConfigMap,
                from.config_map_ref.as_ref().map(|r| (&r.name, r.optional)),
            ),
            (
                Data::Secret,
                from.secret_ref.as_ref().map(|r| (&r.name, r.optional)),
            ),
        ];
        for (kind, r) in refs {
            let Some((name, optional)) = r else { continue };
            for (k, v) in env_data(ctx, &ns, kind, name, optional)
                .await?
                .unwrap_or_default()
            {
                set(
                    &mut out,
                    format!("{prefix}{k}"),
                    String::from_utf8_lossy(&v).to_string(),
                );
            }
        }
    }
    for e in c.env.iter().flatten() {
        let vars: HashMap<String, String> = out.iter().cloned().collect();
        let value = if let Some(v) = &e.value {
            expand(v, &vars)
        } else if let Some(src) = &e.value_from {
            if let Some(f) = &src.field_ref {
                field_value(pod, &f.field_path, pod_ip, &ctx.node_ip)
                    .ok_or_else(|| format!("unsupported fieldPath {:?}", f.field_path))?
            } else if let Some((kind, name, key, optional)) = src
                .config_map_key_ref
                .as_ref()
                .map(|r| (Data::ConfigMap, &r.name, &r.key, r.optional))
                .or_else(|| {
                    (src.secret_key_ref.as_ref())
                        .map(|r| (Data::Secret, &r.name, &r.key, r.optional))
                })
            {
                let Some(m) = env_data(ctx, &ns, kind, name, optional).await? else {
                    continue;
                };
                match m.get(key) {
                    Some(v) => String::from_utf8_lossy(v).to_string(),
                    None if optional == Some(true) => continue,
                    None => {
                        return Err(format!(
                            "couldn't find key {key} in {} {ns}/{name}",
                            kind.kind()
                        ));
                    }
                }
            } else if let Some(r) = &src.resource_field_ref {
                // The node's allocatable when no limit is set.
                match r.resource.as_str() {
                    "limits.cpu" | "requests.cpu" => "8".into(),
                    "limits.memory" | "requests.memory" => (16u64 << 30).to_string(),
                    _ => "0".into(),
                }
            } else {
                String::new()
            }
        } else {
            String::new()
        };
        set(&mut out, e.name.clone(), value);
    }
    Ok(out)
}

/// `docker.io/library/` and `:latest` as a container runtime reports them.
pub fn normalize_image(image: &str) -> String {
    let (name, digest) = match image.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (image, None),
    };
    let (repo, tag) = crate::cluster::split_image(name);
    let first = repo.split('/').next().unwrap_or("");
    let has_domain =
        repo.contains('/') && (first.contains('.') || first.contains(':') || first == "localhost");
    let repo = if has_domain {
        repo.to_string()
    } else if repo.contains('/') {
        format!("docker.io/{repo}")
    } else {
        format!("docker.io/library/{repo}")
    };
    match (tag, digest) {
        (Some(t), Some(d)) => format!("{repo}:{t}@{d}"),
        (None, Some(d)) => format!("{repo}@{d}"),
        (Some(t), None) => format!("{repo}:{t}"),
        (None, None) => format!("{repo}:latest"),
    }
}

fn term_json(t: &Term) -> Value {
    let mut v = json!({
        "exitCode": t.exit_code,
        "reason": t.reason,
        "startedAt": t.started_at,
        "finishedAt": t.finished_at,
    });
    if !t.container_id.is_empty() {
        v["containerID"] = json!(t.container_id);
    }
    if let Some(m) = &t.message {
        v["message"] = json!(m);
    }
    v
}

fn container_json(s: &Status) -> Value {
    let state = match &s.state {
        CState::Waiting { reason, message } => {
            let mut w = json!({"reason": reason});
            if let Some(m) = message {
                w["message"] = json!(m);
            }
            json!({"waiting": w})
        }
        CState::Running { started_at } => json!({"running": {"startedAt": started_at}}),
        CState::Terminated(t) => json!({"terminated": term_json(t)}),
    };
    let image = normalize_image(&s.image);
    let (repo, _) = crate::cluster::split_image(&image);
    let mut v = json!({
        "name": s.name,
        "state": state,
        "lastState": match &s.last { Some(t) => json!({"terminated": term_json(t)}), None => json!({}) },
        "ready": s.ready,
        "restartCount": s.restart_count,
        "image": image,
        "imageID": format!("{repo}@sha256:{:08x}{:056x}", crate::cluster::util::fnv32a(s.image.as_bytes()), 0),
        "started": s.started,
    });
    if let Some(id) = &s.container_id {
        v["containerID"] = json!(id);
    }
    v
}

/// The pod status the kubelet reports (generateAPIPodStatus).
fn compute_status(
    pod: &Pod,
    statuses: &[Status],
    sandbox: bool,
    pod_ip: &str,
    host_ip: &str,
    start_time: &str,
    stopped: bool,
) -> Value {
    let inits: Vec<&Status> = statuses.iter().filter(|s| s.init).collect();
    let apps: Vec<&Status> = statuses.iter().filter(|s| !s.init).collect();
    let exit0 = |s: &Status| matches!(&s.state, CState::Terminated(t) if t.exit_code == 0);
    let init_done = inits.iter().all(|s| exit0(s));
    let init_failed = inits.iter().any(|s| s.done && !exit0(s));
    let all_done = !apps.is_empty() && apps.iter().all(|s| s.done);
    let phase = if init_failed && !stopped {
        "Failed"
    } else if all_done {
        if apps.iter().all(|s| exit0(s)) {
            "Succeeded"
        } else {
            "Failed"
        }
    } else if !init_done {
        "Pending"
    } else if apps.iter().any(|s| {
        matches!(s.state, CState::Running { .. })
            || s.restart_count > 0
            || s.last.is_some()
            || matches!(s.state, CState::Terminated(_))
    }) {
        "Running"
    } else {
        "Pending"
    };
    let terminal = phase == "Succeeded" || phase == "Failed";
    let unready: Vec<&str> = apps
        .iter()
        .filter(|s| !s.ready)
        .map(|s| s.name.as_str())
        .collect();
    let incomplete: Vec<&str> = inits
        .iter()
        .filter(|s| !exit0(s))
        .map(|s| s.name.as_str())
        .collect();
    let existing = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let cond = |ty: &str, ok: bool, reason: Option<&str>, message: Option<String>| {
        let status = if ok { "True" } else { "False" };
        let prev = existing.iter().find(|c| c.type_ == ty);
        let transition = match prev {
            Some(p) if p.status == status => p
                .last_transition_time
                .as_ref()
                .map(|t| crate::object::format_time(t.0))
                .unwrap_or_else(crate::object::now_string),
            _ => crate::object::now_string(),
        };
        let mut c = json!({"type": ty, "status": status, "lastProbeTime": null, "lastTransitionTime": transition});
        if let Some(r) = reason {
            c["reason"] = json!(r);
        }
        if let Some(m) = message {
            c["message"] = json!(m);
        }
        c
    };
    let list = |v: &[&str]| format!("[{}]", v.join(" "));
    let mut conds = vec![
        cond(
            "PodReadyToStartContainers",
            sandbox && !terminal,
            None,
            None,
        ),
        if init_done {
            cond(
                "Initialized",
                true,
                (terminal && !inits.is_empty()).then_some("PodCompleted"),
                None,
            )
        } else {
            cond(
                "Initialized",
                false,
                Some("ContainersNotInitialized"),
                Some(format!(
                    "containers with incomplete status: {}",
                    list(&incomplete)
                )),
            )
        },
    ];
    let (ready, reason, message) = if terminal {
        (false, Some("PodCompleted"), None)
    } else if unready.is_empty() && init_done && !apps.is_empty() {
        (true, None, None)
    } else if !init_done {
        (
            false,
            Some("ContainersNotInitialized"),
            Some(format!(
                "containers with incomplete status: {}",
                list(&incomplete)
            )),
        )
    } else {
        (
            false,
            Some("ContainersNotReady"),
            Some(format!(
                "containers with unready status: {}",
                list(&unready)
            )),
        )
    };
    conds.push(cond("Ready", ready, reason, message.clone()));
    conds.push(cond("ContainersReady", ready, reason, message));
    for c in &existing {
        if !matches!(
            c.type_.as_str(),
            "PodReadyToStartContainers" | "Initialized" | "Ready" | "ContainersReady"
        ) {
            conds.push(serde_json::to_value(c).unwrap_or(Value::Null));
        }
    }
    let mut sorted_apps = apps.clone();
    sorted_apps.sort_by(|a, b| a.name.cmp(&b.name));
    let mut st = json!({
        "phase": phase,
        "conditions": conds,
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "startTime": start_time,
        "containerStatuses": sorted_apps.iter().map(|s| container_json(s)).collect::<Vec<_>>(),
    });
    if sandbox {
        st["podIP"] = json!(pod_ip);
        st["podIPs"] = json!([{"ip": pod_ip}]);
    }
    if !inits.is_empty() {
        st["initContainerStatuses"] =
            json!(inits.iter().map(|s| container_json(s)).collect::<Vec<_>>());
    }
    st
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ContainerPort;

    /// A pod gets one host port per declared container port, outside the
    /// range the kernel takes outgoing connections' ports from, and two
    /// pods get different ones.
    #[test]
    fn one_host_port_per_container_port_outside_the_ephemeral_range() {
        let c = |ports: &[i32]| Container {
            ports: Some(
                ports
                    .iter()
                    .map(|&p| ContainerPort {
                        container_port: p,
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        };
        let ours = allocate_ports(&[c(&[8080, 9443]), c(&[8080])], &[c(&[7000])]);
        assert_eq!(ours.keys().copied().collect::<Vec<_>>(), [7000, 8080, 9443]);
        let theirs = allocate_ports(&[c(&[8080])], &[]);
        let mut all: Vec<u16> = ours.values().chain(theirs.values()).copied().collect();
        let range = free_port::range();
        assert!(all.iter().all(|p| range.contains(p)), "{all:?}, {range:?}");
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 4, "{ours:?} {theirs:?}");
    }

    #[test]
    fn expansion_and_images() {
        let vars: HashMap<String, String> =
            [("A".to_string(), "x".to_string())].into_iter().collect();
        assert_eq!(expand("$(A)-$(B)-$$(A)-$", &vars), "x-$(B)-$(A)-$");
        assert_eq!(normalize_image("nginx"), "docker.io/library/nginx:latest");
        assert_eq!(normalize_image("acme/web:1"), "docker.io/acme/web:1");
        assert_eq!(normalize_image("ghcr.io/a/b:2"), "ghcr.io/a/b:2");
        assert_eq!(
            normalize_image("localhost:5000/b"),
            "localhost:5000/b:latest"
        );
        assert_eq!(
            normalize_image("nginx@sha256:ab"),
            "docker.io/library/nginx@sha256:ab"
        );
        assert_eq!(
            normalize_image("a/b:1@sha256:ab"),
            "docker.io/a/b:1@sha256:ab"
        );
    }
}
