//! A kube-rs reflector over 1,000 pods converges, and stays converged while
//! watches are cut, watch requests fail and 410 Gone is forced.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube_sim::{FaultRule, KubeSim, RequestFilter, SimConfig};
use serde_json::json;

fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": "bulk"}},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}
    }))
    .unwrap()
}

async fn server_names(api: &Api<Pod>) -> BTreeSet<String> {
    api.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect()
}

async fn converge(reader: &reflector::Store<Pod>, api: &Api<Pod>, what: &str) {
    let want = server_names(api).await;
    common::eventually(what, || {
        let want = want.clone();
        async move {
            let have: BTreeSet<String> = reader
                .state()
                .iter()
                .filter_map(|p| p.metadata.name.clone())
                .collect();
            (have == want).then_some(())
        }
    })
    .await;
}

async fn create_many(api: &Api<Pod>, names: impl Iterator<Item = String>) {
    let names: Vec<String> = names.collect();
    futures::stream::iter(names)
        .for_each_concurrent(16, |n| async move {
            api.create(&PostParams::default(), &pod(&n)).await.unwrap();
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflector_over_1000_pods_survives_cuts_and_410() {
    // A small history window makes re-watches after a gap hit 410 for real.
    let sim = KubeSim::start(SimConfig {
        history_window: 200,
        ..Default::default()
    })
    .await
    .unwrap();
    let client = sim.client().await;
    let api: Api<Pod> = Api::namespaced(client.clone(), "default");
    create_many(&api, (0..1000).map(|i| format!("p{i:04}"))).await;

    let (reader, writer) = reflector::store::<Pod>();
    let stream = reflector(writer, watcher(api.clone(), watcher::Config::default()))
        .default_backoff()
        .touched_objects();
    let task = tokio::spawn(async move {
        futures::pin_mut!(stream);
        while stream.next().await.is_some() {}
    });
    tokio::time::timeout(Duration::from_secs(60), reader.wait_until_ready())
        .await
        .unwrap()
        .unwrap();
    converge(&reader, &api, "initial 1000 pods").await;
    assert_eq!(reader.len(), 1000);

    // Changes with the watch cut in between.
    for round in 0..3 {
        for i in (round * 50)..(round * 50 + 50) {
            api.delete(&format!("p{i:04}"), &DeleteParams::default())
                .await
                .unwrap();
        }
        sim.faults().cut_watches();
        create_many(&api, (0..20).map(|i| format!("r{round}-{i}"))).await;
        api.patch(
            "p0999",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"round": round.to_string()}}})),
        )
        .await
        .unwrap();
        converge(&reader, &api, &format!("after cut {round}")).await;
    }

    // A gap: watches fail while more than the history window changes, and the
    // next watch is forced to 410; the reflector must re-list.
    let lists_before = sim
        .requests()
        .count(&RequestFilter::default().verb("list").resource("pods"));
    sim.faults().add(
        FaultRule::error(500)
            .verb("watch")
            .resource("pods")
            .times(2),
    );
    sim.faults().gone_next_watches(1);
    sim.faults().cut_watches();
    for i in 300..600 {
        api.delete(&format!("p{i:04}"), &DeleteParams::default())
            .await
            .unwrap();
    }
    converge(&reader, &api, "after a 410 gap").await;
    let lists_after = sim
        .requests()
        .count(&RequestFilter::default().verb("list").resource("pods"));
    assert!(
        lists_after > lists_before,
        "the reflector re-listed after 410 ({lists_before} -> {lists_after})"
    );
    let p = reader
        .get(&reflector::ObjectRef::new("p0999").within("default"))
        .unwrap();
    assert_eq!(
        p.metadata
            .labels
            .as_ref()
            .unwrap()
            .get("round")
            .map(String::as_str),
        Some("2")
    );
    assert_eq!(reader.len(), server_names(&api).await.len());
    task.abort();
    sim.shutdown().await;
}

/// The same with kube-rs' streaming lists (watch-list: sendInitialEvents).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_list_reflector_converges_and_survives_a_cut() {
    let sim = KubeSim::start(SimConfig::default()).await.unwrap();
    let client = sim.client().await;
    let api: Api<Pod> = Api::namespaced(client.clone(), "default");
    create_many(&api, (0..200).map(|i| format!("s{i:03}"))).await;
    let (reader, writer) = reflector::store::<Pod>();
    let watched: Api<Pod> = Api::namespaced(sim.client_as("reflector").await, "default");
    let stream = reflector(
        writer,
        watcher(watched, watcher::Config::default().streaming_lists()),
    )
    .default_backoff()
    .touched_objects();
    let task = tokio::spawn(async move {
        futures::pin_mut!(stream);
        while stream.next().await.is_some() {}
    });
    tokio::time::timeout(Duration::from_secs(60), reader.wait_until_ready())
        .await
        .unwrap()
        .unwrap();
    converge(&reader, &api, "streaming initial list").await;
    assert_eq!(reader.len(), 200);
    let by_reflector = RequestFilter::default().user("reflector").resource("pods");
    assert_eq!(
        sim.requests().count(&by_reflector.clone().verb("list")),
        0,
        "watch-list makes no list requests"
    );
    assert!(sim.requests().count(&by_reflector.verb("watch")) >= 1);
    sim.faults().cut_watches();
    for i in 0..20 {
        api.delete(&format!("s{i:03}"), &DeleteParams::default())
            .await
            .unwrap();
    }
    converge(&reader, &api, "after a cut").await;
    assert_eq!(reader.len(), 180);
    task.abort();
    sim.shutdown().await;
}
