//! Shared informers (kube-runtime reflectors) and the wake-up signal of the
//! emulated loops.

use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::Clients;

/// A change counter: every informer event bumps it; loops wait on it.
#[derive(Clone)]
pub struct Changes(Arc<watch::Sender<u64>>);

impl Default for Changes {
    fn default() -> Self {
        Changes(Arc::new(watch::Sender::new(0)))
    }
}

impl Changes {
    pub fn bump(&self) {
        self.0.send_modify(|v| *v = v.wrapping_add(1));
    }
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.0.subscribe()
    }
}

/// Starts a reflector for `api`; every event bumps `changes`. Returns its
/// store (see [`ready`]).
pub fn spawn<K>(
    api: Api<K>,
    cfg: watcher::Config,
    changes: Changes,
    stop: CancellationToken,
) -> Store<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    let (reader, writer) = reflector::store();
    tokio::spawn(async move {
        let stream = reflector::reflector(writer, watcher(api, cfg).default_backoff());
        futures::pin_mut!(stream);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                ev = stream.next() => match ev {
                    Some(Ok(watcher::Event::Init | watcher::Event::InitApply(_))) => {}
                    Some(Ok(_)) => changes.bump(),
                    Some(Err(e)) => tracing::debug!(kind = %K::kind(&Default::default()), error = %e, "informer watch error (retrying)"),
                    None => return,
                },
            }
        }
    });
    reader
}

/// Waits until `store` has its first full list (or `stop`).
pub async fn ready<K>(store: &Store<K>, stop: &CancellationToken) -> bool
where
    K: Resource + Clone + 'static,
    K::DynamicType: Default + Eq + Hash + Clone,
{
    tokio::select! {
        r = store.wait_until_ready() => r.is_ok(),
        _ = stop.cancelled() => false,
    }
}

/// The shared informers of the emulated kube-controller-manager.
#[derive(Clone)]
pub struct ControllerManager {
    pub deployments: Store<Deployment>,
    pub replicasets: Store<ReplicaSet>,
    pub pods: Store<Pod>,
    pub jobs: Store<Job>,
    pub pvs: Store<PersistentVolume>,
    pub pvcs: Store<PersistentVolumeClaim>,
    pub storageclasses: Store<StorageClass>,
    pub changes: Changes,
    /// The controller manager's own identity, which its listers read as
    /// (a controller's own client writes as its ServiceAccount).
    pub lister: Client,
}

impl ControllerManager {
    /// Starts the informers the enabled controllers need and waits for them
    /// to sync.
    pub(crate) async fn start(
        clients: &Clients,
        deployments: bool,
        jobs: bool,
        pv_binder: bool,
        stop: CancellationToken,
    ) -> Result<ControllerManager, String> {
        let client: Client = clients.client(super::users::CONTROLLER_MANAGER).await?;
        let changes = Changes::default();
        let cfg = watcher::Config::default;
        let all = |c: &Client| c.clone();
        let (dep, rs) = if deployments {
            (
                spawn(Api::all(all(&client)), cfg(), changes.clone(), stop.clone()),
                spawn(Api::all(all(&client)), cfg(), changes.clone(), stop.clone()),
            )
        } else {
            (reflector::store().0, reflector::store().0)
        };
        let pods = if deployments || jobs {
            spawn(Api::all(all(&client)), cfg(), changes.clone(), stop.clone())
        } else {
            reflector::store().0
        };
        let job = if jobs {
            spawn(Api::all(all(&client)), cfg(), changes.clone(), stop.clone())
        } else {
            reflector::store().0
        };
        let (pvs, pvcs, scs) = if pv_binder {
            (
                spawn(Api::all(all(&client)), cfg(), changes.clone(), stop.clone()),
                spawn(Api::all(all(&client)), cfg(), changes.clone(), stop.clone()),
                spawn(Api::all(all(&client)), cfg(), changes.clone(), stop.clone()),
            )
        } else {
            (
                reflector::store().0,
                reflector::store().0,
                reflector::store().0,
            )
        };
        let kcm = ControllerManager {
            deployments: dep,
            replicasets: rs,
            pods,
            jobs: job,
            pvs,
            pvcs,
            storageclasses: scs,
            changes,
            lister: client.clone(),
        };
        let deadline = tokio::time::sleep(Duration::from_secs(60));
        tokio::pin!(deadline);
        let wait = async {
            if deployments {
                ready(&kcm.deployments, &stop).await;
                ready(&kcm.replicasets, &stop).await;
            }
            if deployments || jobs {
                ready(&kcm.pods, &stop).await;
            }
            if jobs {
                ready(&kcm.jobs, &stop).await;
            }
            if pv_binder {
                ready(&kcm.pvs, &stop).await;
                ready(&kcm.pvcs, &stop).await;
                ready(&kcm.storageclasses, &stop).await;
            }
        };
        tokio::select! {
            _ = wait => {}
            _ = &mut deadline => return Err("controller-manager informers did not sync within 60s".into()),
        }
        Ok(kcm)
    }
}

/// Waits for a change, `requeue` or `stop`; then a short pause that batches
/// bursts. Returns false when stopped.
pub async fn wait(
    rx: &mut watch::Receiver<u64>,
    requeue: Option<Duration>,
    stop: &CancellationToken,
) -> bool {
    let idle = requeue.unwrap_or(Duration::from_secs(30));
    tokio::select! {
        _ = stop.cancelled() => return false,
        r = rx.changed() => if r.is_err() { return false },
        _ = tokio::time::sleep(idle) => {}
    }
    tokio::time::sleep(Duration::from_millis(15)).await;
    !stop.is_cancelled()
}
