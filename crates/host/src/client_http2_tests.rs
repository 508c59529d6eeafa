//! HTTP/2 against a TLS server that offers it by ALPN, as kube-apiserver
//! does: the calls in flight share a few connections, `DISABLE_HTTP2` keeps
//! HTTP/1.1, and a connection the network lost silently is dropped by its
//! pings (a call on it fails, a watch on it ends) and replaced.

use std::sync::atomic::AtomicUsize;

use super::*;

/// An HTTPS server offering HTTP/2 and HTTP/1.1 by ALPN, as
/// kube-apiserver does, behind a TCP relay that can turn the connections
/// open so far into black holes (a network that silently lost them: no
/// RST, no FIN, bytes go nowhere). It answers every GET with an empty
/// ConfigMap list and records each request's HTTP version.
struct Https {
    url: String,
    ca: Vec<u8>,
    /// TCP connections the relay accepted.
    connections: Arc<AtomicUsize>,
    versions: Arc<std::sync::Mutex<Vec<http::Version>>>,
    /// Bumped by [`Https::lose_connections`]; a relayed connection of an
    /// older generation drops everything it reads.
    generation: Arc<AtomicUsize>,
}

impl Https {
    async fn start() -> Https {
        Https::serving_as("127.0.0.1").await
    }

    /// With a certificate for `name` only.
    async fn serving_as(name: &str) -> Https {
        use hyper_util::rt::{TokioExecutor, TokioIo};
        let generated = rcgen::generate_simple_self_signed(vec![name.to_string()]).unwrap();
        let key =
            rustls_pki_types::PrivateKeyDer::Pkcs8(generated.signing_key.serialize_der().into());
        let mut tls = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![generated.cert.der().clone()], key)
        .unwrap();
        tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
        let versions = Arc::new(std::sync::Mutex::new(Vec::new()));

        // The server itself, on a port only the relay knows.
        let inner = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let inner_addr = inner.local_addr().unwrap();
        let seen = versions.clone();
        tokio::spawn(async move {
            loop {
                let (tcp, _) = inner.accept().await.unwrap();
                let (acceptor, seen) = (acceptor.clone(), seen.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let svc = hyper::service::service_fn(move |req: http::Request<_>| {
                        use http_body_util::BodyExt;
                        seen.lock().unwrap().push(req.version());
                        let _: &hyper::body::Incoming = req.body();
                        let watch = req.uri().query().is_some_and(|q| q.contains("watch=true"));
                        async move {
                            let body = if watch {
                                // A watch with nothing to say: open for good.
                                http_body_util::StreamBody::new(futures::stream::pending::<
                                    Result<
                                        hyper::body::Frame<bytes::Bytes>,
                                        std::convert::Infallible,
                                    >,
                                >())
                                .boxed()
                            } else {
                                let list = br#"{"apiVersion":"v1","kind":"ConfigMapList","metadata":{"resourceVersion":"1"},"items":[]}"#;
                                http_body_util::Full::new(bytes::Bytes::from_static(list)).boxed()
                            };
                            Ok::<_, std::convert::Infallible>(
                                http::Response::builder()
                                    .header("content-type", "application/json")
                                    .body(body)
                                    .unwrap(),
                            )
                        }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(tls), svc)
                        .await;
                });
            }
        });

        let relay = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("https://{}", relay.local_addr().unwrap());
        let connections = Arc::new(AtomicUsize::new(0));
        let generation = Arc::new(AtomicUsize::new(0));
        let (count, current) = (connections.clone(), generation.clone());
        tokio::spawn(async move {
            loop {
                let (client, _) = relay.accept().await.unwrap();
                count.fetch_add(1, Ordering::SeqCst);
                let server = tokio::net::TcpStream::connect(inner_addr).await.unwrap();
                let born = current.load(Ordering::SeqCst);
                let (cr, cw) = client.into_split();
                let (sr, sw) = server.into_split();
                tokio::spawn(pipe(cr, sw, born, current.clone()));
                tokio::spawn(pipe(sr, cw, born, current.clone()));
            }
        });
        Https {
            url,
            ca: generated.cert.der().to_vec(),
            connections,
            versions,
            generation,
        }
    }

    /// Every connection open now goes silent for good; new ones work.
    fn lose_connections(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    fn versions(&self) -> Vec<http::Version> {
        self.versions.lock().unwrap().clone()
    }

    fn config(&self) -> kube::Config {
        let mut config = kube::Config::new(self.url.parse().unwrap());
        config.root_cert = Some(vec![self.ca.clone()]);
        config
    }
}

/// Copies `from` to `to` while the connection's generation is current,
/// then swallows what it reads (the socket stays open).
async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    born: usize,
    current: Arc<AtomicUsize>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if current.load(Ordering::SeqCst) == born && to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

fn client_of(config: kube::Config, http2: Option<Http2>) -> kube::Client {
    let opts = ClientOptions::default();
    let builder = client_builder(config, retry_cap(opts.request_timeout), http2).unwrap();
    layered(builder, &opts, "test".into(), None).unwrap().0
}

async fn list_concurrently(client: &kube::Client, n: usize) {
    let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(client.clone(), "default");
    let lp = kube::api::ListParams::default();
    let lists = (0..n).map(|_| api.list(&lp));
    for r in futures::future::join_all(lists).await {
        assert!(r.unwrap().items.is_empty());
    }
}

/// kube-apiserver takes HTTP/2 as it does from client-go: the calls in
/// flight are streams of a few connections, not a connection each.
#[tokio::test]
async fn calls_in_flight_share_a_few_http2_connections() {
    let server = Https::start().await;
    let client = client_of(server.config(), Some(Http2::CLIENT_GO));
    // Until a connection has said "h2" (ALPN), calls racing for the
    // first one each open their own, and all but one are closed: warm
    // each connection up with one call first.
    for _ in 0..HTTP2_CONNECTIONS {
        list_concurrently(&client, 1).await;
    }
    list_concurrently(&client, 24).await;
    assert_eq!(
        server.versions(),
        vec![http::Version::HTTP_2; HTTP2_CONNECTIONS + 24]
    );
    assert_eq!(server.connections(), HTTP2_CONNECTIONS);
}

/// A client built with fewer connections (the manager's Events client:
/// one) keeps its calls on that many.
#[tokio::test]
async fn a_client_keeps_its_calls_on_the_connections_it_was_given() {
    let server = Https::start().await;
    let opts = ClientOptions {
        http2: true,
        http2_connections: 1,
        ..ClientOptions::default()
    };
    let (client, _) = build_client_observed(server.config(), &opts, None).unwrap();
    list_concurrently(&client, 1).await;
    list_concurrently(&client, 24).await;
    assert_eq!(server.versions(), vec![http::Version::HTTP_2; 25]);
    assert_eq!(server.connections(), 1);
}

/// `DISABLE_HTTP2` (as client-go reads it) keeps the client on HTTP/1.1.
#[test]
fn disable_http2_set_to_anything_turns_http2_off() {
    assert!(http2_unless(None));
    assert!(http2_unless(Some("".into())));
    assert!(!http2_unless(Some("1".into())));
    assert!(!http2_unless(Some("true".into())));
}

#[tokio::test]
async fn without_http2_the_client_speaks_http1() {
    let server = Https::start().await;
    let client = client_of(server.config(), None);
    list_concurrently(&client, 8).await;
    assert_eq!(server.versions(), vec![http::Version::HTTP_11; 8]);
    assert!(server.connections() > 1, "{}", server.connections());
}

/// A connection the network lost without a word is noticed by its
/// unanswered ping: the call on it fails with a connection error (not
/// after the request timeout), and the next call works on a new
/// connection. Without the pings every call would go to the dead
/// connection until its request timeout, forever.
#[tokio::test]
async fn a_silently_lost_http2_connection_is_dropped_by_its_pings() {
    let server = Https::start().await;
    let pings = Http2 {
        ping_interval: Duration::from_millis(300),
        ping_timeout: Duration::from_millis(300),
        connections: 1,
    };
    let client = client_of(server.config(), Some(pings));
    list_concurrently(&client, 1).await;
    let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(client.clone(), "default");
    let watch = api.watch(&Default::default(), "1").await.unwrap();
    assert_eq!(server.connections(), 1);

    server.lose_connections();
    // A call on the lost connection fails, and the watch on it ends
    // (kube's watcher then re-watches on a new one), instead of going
    // quiet for good.
    let watch_ended = tokio::time::timeout(Duration::from_secs(20), async {
        use futures::StreamExt;
        let mut watch = std::pin::pin!(watch);
        while let Some(event) = watch.next().await {
            if event.is_err() {
                break;
            }
        }
    });
    let lp = kube::api::ListParams::default();
    let (call, watch_ended) = tokio::join!(api.list(&lp), watch_ended);
    assert!(
        watch_ended.is_ok(),
        "the watch on the lost connection stayed open"
    );
    let err = call.unwrap_err();
    let text = format!("{err:?}");
    assert!(
        !text.contains("--request-timeout") && !text.contains("RequestTimeout"),
        "failed by the request timeout, not the pings: {text}"
    );
    eprintln!("the call on the lost connection: {err}");

    list_concurrently(&client, 1).await;
    assert_eq!(server.connections(), 2);
}

/// The kubeconfig's `tls-server-name` is what the server's certificate is
/// checked against (and sent as SNI) when the URL names another host, as
/// with kube's own connector, which the HTTP/2 one replaces.
#[tokio::test]
async fn the_tls_server_name_is_what_the_certificate_is_checked_against() {
    let server = Https::serving_as("apiserver.test").await;
    let plain = client_of(server.config(), Some(Http2::CLIENT_GO));
    let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(plain, "default");
    let err = api.list(&Default::default()).await.unwrap_err();
    assert!(format!("{err:?}").contains("NotValidForName"), "{err:?}");

    let mut config = server.config();
    config.tls_server_name = Some("apiserver.test".into());
    let named = client_of(config, Some(Http2::CLIENT_GO));
    list_concurrently(&named, 1).await;
    assert_eq!(server.versions(), vec![http::Version::HTTP_2]);

    let mut config = server.config();
    config.tls_server_name = Some("not a name".into());
    let Err(err) = client_builder(config, retry_cap(None), Some(Http2::CLIENT_GO)) else {
        panic!("an invalid tls-server-name must be refused");
    };
    assert!(format!("{err}").contains("server name"), "{err}");
}
