//! vac-protection against kube-sim and the real kube-apiserver v1.36.3
//! (`NAME::kube_sim`, `NAME::real`): the lifecycle (a class held by a
//! claim, by a volume, by a pending modification; released when the last
//! user goes), the release train (0.4 gate off adds nothing and still
//! removes; Alpha on back-fills), the rollback hazard (a release without the
//! controller strands the finalizers the Alpha gate added); the upstream
//! profile in place of KCM's volumeattributesclass-protection-controller
//! beside the real KCM and admission plugin; and, on kube-sim, the API
//! versions (v1, v1beta1 only, none).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::events::v1::Event;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams,
};
use kube::{Client, ResourceExt};
use kube_sim::SimConfig;
use kube_sim::{FaultAction, FaultRule};
use protection_core::release::gates_at;
use protection_core::{ControllerResult, FinalizerProfile, Metrics, ReadySignal, Version};
use serde_json::json;
use test_bed::{Bed, Options, Server};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use vac_protection::controller::{NAME, NO_API_NOTE};
use vac_protection::{GATES, INFO, Settings};

test_bed::on_both_beds!(
    a_class_is_held_by_a_claim_a_volume_or_a_pending_modification_until_the_last_user_goes,
    classes_confirmed_in_one_batch_keep_the_used_ones_and_release_the_others,
    upgrade_0_3_to_0_4_gate_off_then_alpha_on_then_off_and_the_rollback_that_strands,
);

const DEADLINE: Duration = Duration::from_secs(30);
const USER: &str = "protection-manager";

struct Env {
    server: Server,
    client: Client,
    metrics: Arc<Metrics>,
    finalizer: String,
}

struct Running {
    shutdown: CancellationToken,
    ready: ReadySignal,
    handle: JoinHandle<ControllerResult>,
}

impl Running {
    async fn stop(self) {
        self.shutdown.cancel();
        tokio::time::timeout(DEADLINE, self.handle)
            .await
            .expect("stops within the deadline")
            .expect("task")
            .expect("Ok on shutdown");
    }
}

impl Env {
    /// On kube-sim configured by `cfg`.
    async fn new(cfg: SimConfig) -> Env {
        Env::on(
            Bed::Sim,
            Options {
                sim: Some(cfg),
                ..Options::default()
            },
            FinalizerProfile::Project,
        )
        .await
    }

    async fn on(bed: Bed, options: Options, profile: FinalizerProfile) -> Env {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
            )
            .with_test_writer()
            .try_init();
        let server = Server::start(
            bed,
            Options {
                name: "vac-protection".into(),
                ..options
            },
        )
        .await
        .unwrap_or_else(|e| panic!("start {}: {e:#}", bed.name()));
        let client = server.client().await.expect("admin client");
        Env {
            server,
            client,
            metrics: Metrics::new().expect("metrics"),
            finalizer: INFO.finalizer.get(profile).to_string(),
        }
    }

    /// Starts vac-protection as release `emulated` with `gates` and waits
    /// until it is ready.
    async fn start(&self, emulated: Version, feature_gates: &str) -> Running {
        let mut gates = gates_at(emulated, GATES).expect("emulated version");
        gates.set_from_flag(feature_gates).expect("--feature-gates");
        let t = test_support::controller_context(
            NAME,
            self.server
                .controller_client(USER, INFO.rbac)
                .await
                .expect("controller client"),
            gates,
            &self.metrics,
            4,
        );
        let settings = Settings {
            finalizer: self.finalizer.clone(),
            resync_period: Duration::ZERO,
        };
        let handle = tokio::spawn(vac_protection::controller::run(t.ctx, settings));
        let ready = t.ready.clone();
        test_support::until(DEADLINE, "vac-protection reports ready", async || {
            ready.is_ready()
        })
        .await;
        Running {
            shutdown: t.shutdown,
            ready: t.ready,
            handle,
        }
    }

    fn vacs(&self, version: &str) -> Api<DynamicObject> {
        let gvk = GroupVersionKind::gvk("storage.k8s.io", version, "VolumeAttributesClass");
        Api::all_with(
            self.client.clone(),
            &ApiResource::from_gvk_with_plural(&gvk, "volumeattributesclasses"),
        )
    }

    async fn create_class(&self, name: &str) {
        let v: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttributesClass",
            "metadata": {"name": name}, "driverName": "csi.example.com",
            "parameters": {"iops": "3000"}
        }))
        .unwrap();
        self.vacs("v1")
            .create(&PostParams::default(), &v)
            .await
            .unwrap();
    }

    async fn finalizers(&self, name: &str) -> Option<Vec<String>> {
        self.vacs("v1")
            .get_opt(name)
            .await
            .unwrap()
            .map(|v| v.finalizers().to_vec())
    }

    async fn wait_finalizer(&self, name: &str) {
        test_support::until(
            DEADLINE,
            &format!("class {name} has our finalizer"),
            async || {
                self.finalizers(name)
                    .await
                    .is_some_and(|f| f.contains(&self.finalizer))
            },
        )
        .await;
    }

    async fn wait_gone(&self, name: &str) {
        test_support::until(DEADLINE, &format!("class {name} is deleted"), async || {
            self.finalizers(name).await.is_none()
        })
        .await;
    }

    /// Waits for the FinalizerHeld event of class `name` and returns its note.
    async fn wait_held(&self, name: &str) -> String {
        let events: Api<Event> = Api::all(self.client.clone());
        test_support::eventually(DEADLINE, &format!("class {name} is held"), async || {
            events
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .find(|e| {
                    e.reason.as_deref() == Some("FinalizerHeld")
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                })
                .and_then(|e| e.note)
        })
        .await
    }

    async fn delete_class(&self, name: &str) {
        self.vacs("v1")
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }

    fn pvcs(&self) -> Api<PersistentVolumeClaim> {
        Api::namespaced(self.client.clone(), "default")
    }

    async fn create_pvc(&self, name: &str, class: Option<&str>) {
        let pvc: PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": "1Gi"}},
                     "volumeAttributesClassName": class}
        }))
        .unwrap();
        self.pvcs()
            .create(&PostParams::default(), &pvc)
            .await
            .unwrap();
    }

    async fn create_pv(&self, name: &str, class: &str) {
        let pv: PersistentVolume = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                     // A class is only for CSI volumes (the API server's validation).
                     "csi": {"driver": "csi.example.com", "volumeHandle": name},
                     "volumeAttributesClassName": class}
        }))
        .unwrap();
        Api::<PersistentVolume>::all(self.client.clone())
            .create(&PostParams::default(), &pv)
            .await
            .unwrap();
    }
}

async fn a_class_is_held_by_a_claim_a_volume_or_a_pending_modification_until_the_last_user_goes(
    bed: Bed,
) {
    let env = Env::on(bed, Options::default(), FinalizerProfile::Project).await;
    for c in ["gold", "silver", "bronze"] {
        env.create_class(c).await;
    }
    let ctl = env
        .start(Version::new(0, 4), "VolumeAttributesClass=true")
        .await;
    for c in ["gold", "silver", "bronze"] {
        env.wait_finalizer(c).await;
    }
    println!("verified: 0.4 with the Alpha gate on back-fills the finalizer on existing classes");

    env.create_pvc("data", Some("gold")).await;
    env.create_pv("pv-1", "silver").await;
    // A claim moving from gold to bronze: the modification is pending.
    env.create_pvc("moving", None).await;
    env.pvcs()
        .patch_status(
            "moving",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"modifyVolumeStatus": {
                "targetVolumeAttributesClassName": "bronze", "status": "InProgress"}}})),
        )
        .await
        .unwrap();
    for c in ["gold", "silver", "bronze"] {
        env.delete_class(c).await;
    }
    let gold = env.wait_held("gold").await;
    assert!(
        gold.contains("PersistentVolumeClaim default/data (spec.volumeAttributesClassName)"),
        "{gold}"
    );
    let silver = env.wait_held("silver").await;
    assert!(
        silver.contains("PersistentVolume pv-1 (spec.volumeAttributesClassName)"),
        "{silver}"
    );
    let bronze = env.wait_held("bronze").await;
    assert!(
        bronze
            .contains("default/moving (status.modifyVolumeStatus.targetVolumeAttributesClassName)"),
        "{bronze}"
    );
    println!("verified: deletions held by a claim, a volume and a pending modification: {gold}");

    // The last user goes: the class goes.
    env.pvcs()
        .delete("data", &DeleteParams::default())
        .await
        .unwrap();
    env.wait_gone("gold").await;
    // A volume's class cannot be unset (the API server forbids the update
    // from a value to nil): the volume goes.
    Api::<PersistentVolume>::all(env.client.clone())
        .delete("pv-1", &DeleteParams::default())
        .await
        .unwrap();
    env.wait_gone("silver").await;
    env.pvcs()
        .patch_status(
            "moving",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"modifyVolumeStatus": null}})),
        )
        .await
        .unwrap();
    env.wait_gone("bronze").await;
    println!("verified: each class released when its last user went");
    // Each removal was confirmed by a live list before it was made.
    let text = env.metrics.encode().unwrap();
    assert!(
        text.lines().any(|l| l
            .starts_with("protection_manager_live_lists_total{controller=\"vac-protection\"} ")
            && !l.ends_with(" 0")),
        "{text}"
    );
    ctl.stop().await;
}

/// Deletions confirmed together: the confirmer decides a batch of classes
/// from one live list; the used ones among them stay held, the others go.
async fn classes_confirmed_in_one_batch_keep_the_used_ones_and_release_the_others(bed: Bed) {
    let env = Env::on(bed, Options::default(), FinalizerProfile::Project).await;
    let names: Vec<String> = (0..24).map(|i| format!("c{i:02}")).collect();
    for n in &names {
        env.create_class(n).await;
    }
    // Every third class is named by a claim.
    let used: Vec<&String> = names.iter().step_by(3).collect();
    for (i, n) in used.iter().enumerate() {
        env.create_pvc(&format!("claim-{i}"), Some(n)).await;
    }
    let ctl = env
        .start(Version::new(0, 4), "VolumeAttributesClass=true")
        .await;
    for n in &names {
        env.wait_finalizer(n).await;
    }
    for n in &names {
        env.delete_class(n).await;
    }
    for n in names.iter().filter(|n| !used.contains(n)) {
        env.wait_gone(n).await;
    }
    for n in &used {
        let held = env.wait_held(n).await;
        assert!(
            held.contains("PersistentVolumeClaim default/claim-"),
            "{held}"
        );
        let f = env.finalizers(n).await.expect("a used class stays");
        assert!(f.contains(&env.finalizer), "{n}: {f:?}");
    }
    let text = env.metrics.encode().unwrap();
    let lists = text
        .lines()
        .find(|l| {
            l.starts_with("protection_manager_live_lists_total{controller=\"vac-protection\"} ")
        })
        .unwrap_or_default()
        .to_string();
    println!(
        "verified: {} unused classes released, {} used ones held; {lists}",
        names.len() - used.len(),
        used.len()
    );
    ctl.stop().await;
}

/// A claim written while the live round is in flight (after the claims'
/// LIST answered, before the volumes' LIST does) holds the class: the
/// decision reads the cache again once the round is in, so a user the watch
/// brought meanwhile is not missed. Found by the real-cluster chaos (seed
/// 1795710912: a class deleted while a claim named it).
#[tokio::test]
async fn a_claim_written_while_the_live_round_is_in_flight_holds_the_class() {
    let env = Env::new(SimConfig::default()).await;
    env.create_class("late").await;
    let ctl = env
        .start(Version::new(0, 4), "VolumeAttributesClass=true")
        .await;
    env.wait_finalizer("late").await;
    let faults = env.server.sim().faults();
    let slow_volumes = faults.add(
        FaultRule::new(FaultAction::Latency { millis: 3000 })
            .verb("list")
            .resource("persistentvolumes")
            .user(USER)
            .times(1),
    );
    env.delete_class("late").await;
    test_support::until(DEADLINE, "the round's volumes LIST is held", async || {
        faults
            .rules()
            .iter()
            .any(|r| r.id == slow_volumes && r.injected == 1)
    })
    .await;
    // The claims' LIST went out beside it and has answered by now.
    tokio::time::sleep(Duration::from_millis(300)).await;
    env.create_pvc("late-claim", Some("late")).await;
    let held = env.wait_held("late").await;
    assert!(
        held.contains("PersistentVolumeClaim default/late-claim"),
        "{held}"
    );
    let f = env.finalizers("late").await.expect("the class stays");
    assert!(f.contains(&env.finalizer), "{f:?}");
    ctl.stop().await;
}

/// The release train for a controller added at 0.4, and the rollback hazard.
async fn upgrade_0_3_to_0_4_gate_off_then_alpha_on_then_off_and_the_rollback_that_strands(
    bed: Bed,
) {
    let env = Env::on(bed, Options::default(), FinalizerProfile::Project).await;
    // 0.3 has no vac-protection: a class lives without a finalizer.
    env.create_class("pre-existing").await;
    env.create_class("doomed").await;

    // 0.4, gate off (the default): nothing added; removal still works.
    let ctl = env.start(Version::new(0, 4), "").await;
    env.vacs("v1")
        .patch(
            "doomed",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": [env.finalizer]}})),
        )
        .await
        .unwrap();
    env.delete_class("doomed").await;
    env.wait_gone("doomed").await;
    env.create_class("created-at-0-4-off").await;
    env.create_class("sentinel").await;
    env.vacs("v1")
        .patch(
            "sentinel",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": [env.finalizer]}})),
        )
        .await
        .unwrap();
    env.delete_class("sentinel").await;
    env.wait_gone("sentinel").await;
    assert_eq!(env.finalizers("pre-existing").await, Some(vec![]));
    assert_eq!(env.finalizers("created-at-0-4-off").await, Some(vec![]));
    println!("verified: 0.4 gate off adds nothing and still removes the finalizer on delete");
    ctl.stop().await;

    // 0.4 with the Alpha gate on: back-fill.
    let ctl = env
        .start(Version::new(0, 4), "VolumeAttributesClass=true")
        .await;
    env.wait_finalizer("pre-existing").await;
    env.wait_finalizer("created-at-0-4-off").await;
    println!("verified: 0.4 Alpha on back-fills");
    ctl.stop().await;

    // Rollback to 0.3 while the finalizers are on: 0.3 has no controller to
    // remove them, so a deleted class stays Terminating (the KEP's accepted
    // Alpha risk; docs/upgrade.md, "Rolling back from 0.4").
    env.delete_class("pre-existing").await;
    let stuck = env.vacs("v1").get("pre-existing").await.unwrap();
    assert!(stuck.metadata.deletion_timestamp.is_some());
    assert!(stuck.finalizers().contains(&env.finalizer));
    println!("verified: at 0.3 (no vac-protection) a deleted class keeps the finalizer: stranded");

    // Forward to 0.4 with the gate off: removal is never gated.
    let ctl = env
        .start(Version::new(0, 4), "VolumeAttributesClass=false")
        .await;
    env.wait_gone("pre-existing").await;
    env.delete_class("created-at-0-4-off").await;
    env.wait_gone("created-at-0-4-off").await;
    println!("verified: 0.4 gate off again releases the stranded class and removes on delete");
    ctl.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_with_only_v1beta1_is_served_at_v1beta1() {
    let env = Env::new(SimConfig {
        disabled_group_versions: vec!["storage.k8s.io/v1".into()],
        ..SimConfig::default()
    })
    .await;
    let v: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "storage.k8s.io/v1beta1", "kind": "VolumeAttributesClass",
        "metadata": {"name": "beta"}, "driverName": "csi.example.com", "parameters": {"a": "b"}
    }))
    .unwrap();
    env.vacs("v1beta1")
        .create(&PostParams::default(), &v)
        .await
        .unwrap();
    let ctl = env
        .start(Version::new(0, 4), "VolumeAttributesClass=true")
        .await;
    test_support::until(
        DEADLINE,
        "the v1beta1 class has our finalizer",
        async || {
            env.vacs("v1beta1")
                .get("beta")
                .await
                .is_ok_and(|v| v.finalizers().contains(&env.finalizer))
        },
    )
    .await;
    assert_eq!(
        ctl.ready.note().as_deref(),
        Some("serving storage.k8s.io/v1beta1 (the cluster has no v1)")
    );
    ctl.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_without_the_api_leaves_the_controller_idle_and_saying_why() {
    let env = Env::new(SimConfig {
        disabled_group_versions: vec!["storage.k8s.io/v1".into(), "storage.k8s.io/v1beta1".into()],
        ..SimConfig::default()
    })
    .await;
    let ctl = env
        .start(Version::new(0, 4), "VolumeAttributesClass=true")
        .await;
    assert!(ctl.ready.is_ready(), "idle is not unready");
    assert_eq!(ctl.ready.note().as_deref(), Some(NO_API_NOTE));
    ctl.stop().await;
}

/// While the Alpha gate is on, the controller warns at start that a
/// rollback to 0.3 strands its finalizers, and says what to do first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_alpha_gate_warns_about_the_rollback_that_strands() {
    let env = Env::new(SimConfig::default()).await;
    let ctx = |flag: &str| {
        let mut gates = gates_at(Version::new(0, 4), GATES).unwrap();
        gates.set_from_flag(flag).unwrap();
        test_support::controller_context(NAME, env.client.clone(), gates, &env.metrics, 1).ctx
    };
    let w = vac_protection::controller::rollback_warning(
        &ctx("VolumeAttributesClass=true"),
        true,
        &env.finalizer,
    )
    .expect("a warning while Alpha is on");
    assert!(w.contains("Release 0.3 has no vac-protection"), "{w}");
    assert!(w.contains("turn VolumeAttributesClass off"), "{w}");
    assert!(w.contains("the release guard refuses it"), "{w}");
    assert!(
        w.contains("protection-manager strip-finalizers --controller vac-protection"),
        "{w}"
    );
    assert!(w.contains(&env.finalizer), "{w}");
    assert_eq!(
        vac_protection::controller::rollback_warning(&ctx(""), false, &env.finalizer),
        None
    );
}

/// The upstream profile in place of KCM's own controller, on the real
/// control plane: KCM v1.36.3 runs every controller but
/// volumeattributesclass-protection-controller (its pvc-protection removes
/// the claims' finalizers), the real admission plugin adds
/// `kubernetes.io/vac-protection` on create, and ours hold and remove it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_profile_in_place_of_kcms_controller_beside_the_real_admission_plugin() {
    let env = Env::on(
        Bed::Real,
        Options {
            storage_protection_admission: true,
            kcm: Some(vec![
                "*".into(),
                "-volumeattributesclass-protection-controller".into(),
            ]),
            ..Options::default()
        },
        FinalizerProfile::Upstream,
    )
    .await;
    assert_eq!(env.finalizer, "kubernetes.io/vac-protection");
    let since = env.server.mark();
    env.create_class("gold").await;
    assert_eq!(
        env.finalizers("gold").await,
        Some(vec!["kubernetes.io/vac-protection".to_string()]),
        "added by the admission plugin"
    );
    let ctl = env.start(Version::new(0, 4), "").await;
    env.create_pvc("data", Some("gold")).await;
    env.delete_class("gold").await;
    let held = env.wait_held("gold").await;
    assert!(
        held.contains("PersistentVolumeClaim default/data (spec.volumeAttributesClassName)"),
        "{held}"
    );
    // KCM's pvc-protection releases the claim; ours then the class.
    env.pvcs()
        .delete("data", &DeleteParams::default())
        .await
        .unwrap();
    env.wait_gone("gold").await;
    let requests = env.server.requests_since(since);
    let ours: Vec<_> = requests
        .iter()
        .filter(|r| r.user == USER && r.resource == "volumeattributesclasses" && r.is_write())
        .map(|r| (r.verb.as_str(), r.name.as_str()))
        .collect();
    assert_eq!(ours, [("patch", "gold")], "one write: the removal");
    let kcm: Vec<_> = requests
        .iter()
        .filter(|r| {
            r.user
                .ends_with(":volumeattributesclass-protection-controller")
        })
        .collect();
    assert!(kcm.is_empty(), "KCM's own controller is off: {kcm:?}");
    ctl.stop().await;
}
