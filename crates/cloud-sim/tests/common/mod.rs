#![allow(dead_code)]

use serde_json::{Value, json};

/// A PUT body for Service `ns/name` with UID `uid`.
pub fn ensure_body(ns: &str, name: &str, uid: &str) -> Value {
    json!({
        "name": format!("a{}", uid.replace('-', "")),
        "service": {"namespace": ns, "name": name, "uid": uid},
        "spec": {
            "ports": [{"name": "http", "protocol": "TCP", "port": 80, "nodePort": 30080}],
            "loadBalancerSourceRanges": [],
            "sessionAffinity": "None",
            "externalTrafficPolicy": "Cluster",
            "ipFamilies": ["IPv4"],
            "annotations": {}
        },
        "nodes": [
            {"name": "node-a", "providerID": "sim://node-a",
             "addresses": [{"type": "InternalIP", "address": "192.0.2.10"}]}
        ]
    })
}

pub struct Api {
    pub base: String,
    pub token: Option<String>,
    pub http: reqwest::Client,
}

impl Api {
    pub fn new(base: impl Into<String>, token: Option<&str>) -> Self {
        Self {
            base: base.into(),
            token: token.map(str::to_owned),
            http: reqwest::Client::new(),
        }
    }

    pub fn req(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let b = self.http.request(method, format!("{}{}", self.base, path));
        match &self.token {
            Some(t) => b.bearer_auth(t),
            None => b,
        }
    }

    pub async fn put(&self, uid: &str, body: &Value) -> (u16, Value) {
        let r = self
            .req(reqwest::Method::PUT, &format!("/v1/loadbalancers/{uid}"))
            .json(body)
            .send()
            .await
            .expect("PUT reaches cloud-sim");
        split(r).await
    }

    pub async fn get(&self, uid: &str) -> (u16, Value) {
        let r = self
            .req(reqwest::Method::GET, &format!("/v1/loadbalancers/{uid}"))
            .send()
            .await
            .expect("GET reaches cloud-sim");
        split(r).await
    }

    pub async fn delete(&self, uid: &str) -> (u16, Value) {
        let r = self
            .req(reqwest::Method::DELETE, &format!("/v1/loadbalancers/{uid}"))
            .send()
            .await
            .expect("DELETE reaches cloud-sim");
        split(r).await
    }

    pub async fn hosts(&self, uid: &str, nodes: Value) -> (u16, Value) {
        let r = self
            .req(
                reqwest::Method::PUT,
                &format!("/v1/loadbalancers/{uid}/hosts"),
            )
            .json(&json!({ "nodes": nodes }))
            .send()
            .await
            .expect("PUT hosts reaches cloud-sim");
        split(r).await
    }

    pub async fn list(&self) -> (u16, Value) {
        let r = self
            .req(reqwest::Method::GET, "/v1/loadbalancers")
            .send()
            .await
            .expect("list reaches cloud-sim");
        split(r).await
    }

    pub async fn admin(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut b = self.req(method, path);
        if let Some(body) = body {
            b = b.json(&body);
        }
        split(b.send().await.expect("admin call reaches cloud-sim")).await
    }
}

/// Status and JSON body (Null when empty or not JSON).
pub async fn split(r: reqwest::Response) -> (u16, Value) {
    let status = r.status().as_u16();
    let text = r.text().await.unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

pub fn ingress_ip(lb: &Value) -> String {
    lb["status"]["ingress"][0]["ip"]
        .as_str()
        .unwrap_or_else(|| panic!("no ingress ip in {lb}"))
        .to_owned()
}
