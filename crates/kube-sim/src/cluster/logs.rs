//! `GET pods/<name>/log`: the API server's view of the emulated kubelets'
//! container logs (`container`, `previous`, `tailLines`, `limitBytes`,
//! `follow`). A real API server proxies this to the kubelet; here the
//! kubelets run in-process and the log files are read directly.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Response, StatusCode, header};
use serde_json::Value;

use tokio_util::sync::CancellationToken;

use super::runtime::PodRuntimes;
use crate::error::ApiError;
use crate::http::{Query, RespBody, State};

pub(crate) fn text(code: u16, body: Vec<u8>) -> Response<RespBody> {
    let mut r = Response::new(RespBody::Full(Some(Bytes::from(body))));
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::OK);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain"),
    );
    r
}

fn tail(data: &[u8], lines: Option<usize>, limit: Option<usize>) -> Vec<u8> {
    let mut out: &[u8] = data;
    if let Some(n) = lines {
        let mut count = 0;
        let mut start = out.len();
        let body = out.strip_suffix(b"\n").unwrap_or(out);
        for (i, b) in body.iter().enumerate().rev() {
            if *b == b'\n' {
                count += 1;
                if count == n {
                    start = i + 1;
                    break;
                }
            }
        }
        if count < n {
            start = 0;
        }
        if n == 0 {
            start = out.len();
        }
        out = &out[start..];
    }
    let mut v = out.to_vec();
    if let Some(l) = limit {
        v.truncate(l);
    }
    v
}

/// Serves `pods/log`.
pub(crate) async fn serve(
    state: &Arc<State>,
    method: &Method,
    ns: &str,
    name: &str,
    q: &Query,
) -> Result<Response<RespBody>, ApiError> {
    if *method != Method::GET && *method != Method::HEAD {
        return Err(ApiError::method_not_supported(
            &crate::error::GroupResource::new("", "pods/log"),
            &method.as_str().to_ascii_lowercase(),
        ));
    }
    let rid = crate::resources::find("", "v1", "pods").unwrap_or(0);
    let pod = state.store.get(rid, ns, name)?;
    let names = |key: &str| -> Vec<String> {
        pod.value
            .pointer(&format!("/spec/{key}"))
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|c| c.get("name").and_then(Value::as_str).map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let apps = names("containers");
    let inits = names("initContainers");
    let container = match q.get("container").filter(|c| !c.is_empty()) {
        Some(c) => c.to_string(),
        None if apps.len() == 1 => apps[0].clone(),
        None => {
            let mut msg = format!(
                "a container name must be specified for pod {name}, choose one of: [{}]",
                apps.join(" ")
            );
            if !inits.is_empty() {
                msg.push_str(&format!(
                    " or one of the init containers: [{}]",
                    inits.join(" ")
                ));
            }
            return Err(ApiError::bad_request(msg));
        }
    };
    if !apps.contains(&container) && !inits.contains(&container) {
        return Err(ApiError::bad_request(format!(
            "container {container} is not valid for pod {name}"
        )));
    }
    let uid = crate::object::meta_str(&pod.value, "uid").to_string();
    let opts = LogOptions {
        previous: q.flag("previous"),
        tail_lines: q.get("tailLines").and_then(|t| t.parse::<usize>().ok()),
        limit_bytes: q.get("limitBytes").and_then(|t| t.parse::<usize>().ok()),
        follow: q.flag("follow"),
    };
    match container_log(&state.runtimes, &uid, &container, &opts, &state.shutdown) {
        Ok(r) => Ok(r),
        Err(LogError::NotRunning) => {
            let reason = pod
                .value
                .pointer("/status/containerStatuses")
                .and_then(Value::as_array)
                .and_then(|cs| {
                    cs.iter()
                        .find(|c| c.get("name").and_then(Value::as_str) == Some(container.as_str()))
                })
                .and_then(|c| c.pointer("/state/waiting/reason"))
                .and_then(Value::as_str)
                .unwrap_or("ContainerCreating")
                .to_string();
            Err(ApiError::bad_request(format!(
                "container {container:?} in pod {name:?} is waiting to start: {reason}"
            )))
        }
        Err(LogError::NoPrevious) => Err(ApiError::bad_request(format!(
            "previous terminated container {container:?} in pod {name:?} not found"
        ))),
    }
}

/// What a log request asks for (`pods/log` and the kubelet's
/// `/containerLogs`).
#[derive(Debug, Clone, Default)]
pub struct LogOptions {
    pub previous: bool,
    pub tail_lines: Option<usize>,
    pub limit_bytes: Option<usize>,
    pub follow: bool,
}

/// Why a container has no log to serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogError {
    /// No kubelet runs the container (yet).
    NotRunning,
    /// `previous` was asked for a container that never restarted.
    NoPrevious,
}

/// The log of `container` of the pod `uid` that a kubelet runs, as
/// `text/plain`; with `follow`, what is appended is streamed until the pod
/// goes away or `shutdown`.
pub fn container_log(
    runtimes: &Arc<PodRuntimes>,
    uid: &str,
    container: &str,
    opts: &LogOptions,
    shutdown: &CancellationToken,
) -> Result<Response<RespBody>, LogError> {
    let rt = runtimes
        .list()
        .into_iter()
        .find(|p| p.uid == uid)
        .and_then(|p| p.containers.into_iter().find(|c| c.name == container))
        .ok_or(LogError::NotRunning)?;
    let path = if opts.previous {
        rt.previous_log_path.clone().ok_or(LogError::NoPrevious)?
    } else {
        rt.log_path.clone()
    };
    let data = std::fs::read(&path).unwrap_or_default();
    let first = tail(&data, opts.tail_lines, opts.limit_bytes);
    if !opts.follow || opts.previous {
        return Ok(text(200, first));
    }
    // follow: stream what is appended until the pod goes away.
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(16);
    let runtimes = runtimes.clone();
    let shutdown = shutdown.clone();
    let uid = uid.to_string();
    let mut offset = data.len();
    tokio::spawn(async move {
        if tx.send(Bytes::from(first)).await.is_err() {
            return;
        }
        loop {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(200)) => {}
                _ = shutdown.cancelled() => return,
                _ = tx.closed() => return,
            }
            let now = std::fs::read(&path).unwrap_or_default();
            if now.len() < offset {
                offset = 0;
            }
            if now.len() > offset {
                if tx
                    .send(Bytes::copy_from_slice(&now[offset..]))
                    .await
                    .is_err()
                {
                    return;
                }
                offset = now.len();
            }
            if !runtimes.list().iter().any(|p| p.uid == uid) {
                return;
            }
        }
    });
    let mut r = Response::new(RespBody::Chan(rx));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain"),
    );
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::tail;

    #[test]
    fn tail_lines() {
        assert_eq!(tail(b"a\nb\nc\n", Some(2), None), b"b\nc\n");
        assert_eq!(tail(b"a\nb\nc\n", Some(5), None), b"a\nb\nc\n");
        assert_eq!(tail(b"a\nb\nc", Some(1), None), b"c");
        assert_eq!(tail(b"a\nb\nc\n", None, Some(3)), b"a\nb");
    }
}
