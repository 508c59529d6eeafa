//! The kubelet's TLS bootstrap
//! (pkg/kubelet/certificate/bootstrap): with the credentials of a bootstrap
//! kubeconfig, a node asks for its own client certificate through a
//! CertificateSigningRequest for the signer
//! `kubernetes.io/kube-apiserver-client-kubelet` (subject
//! `CN=system:node:<node>, O=system:nodes`), which kube-controller-manager's
//! `csrapproving` controller approves (the requester may `create
//! certificatesigningrequests/nodeclient`) and `csrsigning` signs with the
//! cluster CA. From then on the node acts as `system:node:<node>`, which
//! the Node authorizer and NodeRestriction know. The certificate and key
//! are kept as `<dir>/<node>.kubeconfig` and reused after a restart, as the
//! kubelet keeps `kubelet-client-current.pem`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use kube::api::{Api, DynamicObject, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

/// The signer of kubelet client certificates.
pub const KUBELET_CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";

/// How long to wait for the CSR to be approved and signed.
const SIGN_TIMEOUT: Duration = Duration::from_secs(120);

/// The API server a bootstrap kubeconfig names: its URL and CA (PEM).
#[derive(Debug, Clone)]
pub struct Server {
    pub url: String,
    pub ca_pem: Option<String>,
}

/// Reads the server and CA of the current context of `kubeconfig`.
pub fn server_of(kubeconfig: &Path) -> Result<Server, String> {
    let kc = Kubeconfig::read_from(kubeconfig)
        .map_err(|e| format!("reading {}: {e}", kubeconfig.display()))?;
    let ctx_name = kc
        .current_context
        .clone()
        .ok_or_else(|| format!("{}: no current-context", kubeconfig.display()))?;
    let ctx = kc
        .contexts
        .iter()
        .find(|c| c.name == ctx_name)
        .and_then(|c| c.context.clone())
        .ok_or_else(|| format!("{}: no context {ctx_name:?}", kubeconfig.display()))?;
    let cluster = kc
        .clusters
        .iter()
        .find(|c| c.name == ctx.cluster)
        .and_then(|c| c.cluster.clone())
        .ok_or_else(|| format!("{}: no cluster {:?}", kubeconfig.display(), ctx.cluster))?;
    let url = cluster
        .server
        .clone()
        .ok_or_else(|| format!("{}: cluster without a server", kubeconfig.display()))?;
    let ca_pem = match (
        &cluster.certificate_authority_data,
        &cluster.certificate_authority,
    ) {
        (Some(data), _) => Some(
            B64.decode(data.trim())
                .ok()
                .and_then(|b| String::from_utf8(b).ok())
                .ok_or_else(|| {
                    format!(
                        "{}: certificate-authority-data is not base64 PEM",
                        kubeconfig.display()
                    )
                })?,
        ),
        (None, Some(file)) => {
            let p = kubeconfig
                .parent()
                .map_or_else(|| PathBuf::from(file), |d| d.join(file));
            Some(std::fs::read_to_string(&p).map_err(|e| format!("reading {}: {e}", p.display()))?)
        }
        (None, None) => None,
    };
    Ok(Server { url, ca_pem })
}

/// A kubeconfig for a client certificate.
pub fn cert_kubeconfig(server: &Server, user: &str, cert_pem: &str, key_pem: &str) -> String {
    let ca = server
        .ca_pem
        .as_ref()
        .map(|c| format!("    certificate-authority-data: {}\n", B64.encode(c)))
        .unwrap_or_default();
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: cluster\n  cluster:\n    server: {}\n{ca}users:\n- name: {user:?}\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\ncontexts:\n- name: default\n  context:\n    cluster: cluster\n    user: {user:?}\ncurrent-context: default\n",
        server.url,
        B64.encode(cert_pem),
        B64.encode(key_pem),
    )
}

/// A client from a kubeconfig file.
pub async fn client_from(path: &Path) -> Result<kube::Client, String> {
    let kc = Kubeconfig::read_from(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|e| format!("{}: {e}", path.display()))?;
    kube::Client::try_from(cfg).map_err(|e| format!("{}: {e}", path.display()))
}

fn csr_api(client: &kube::Client) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("certificates.k8s.io", "v1", "CertificateSigningRequest"),
        "certificatesigningrequests",
    );
    Api::all_with(client.clone(), &ar)
}

/// The node's client: from `<dir>/<node>.kubeconfig` when a previous run
/// left one that the server still accepts, else through a new CSR made with
/// `bootstrap` (see the module docs).
pub async fn node_client(
    bootstrap: &kube::Client,
    server: &Server,
    node: &str,
    dir: &Path,
) -> Result<kube::Client, String> {
    let path = dir.join(format!("{node}.kubeconfig"));
    if path.is_file() {
        let client = client_from(&path).await?;
        let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
        match nodes.get_opt(node).await {
            Ok(_) => return Ok(client),
            Err(kube::Error::Api(e)) if e.code == 401 => {
                tracing::info!(
                    node,
                    "the kept node certificate is not accepted; bootstrapping a new one"
                );
            }
            // The server may be down for a moment; the certificate is fine.
            Err(_) => return Ok(client),
        }
    }
    let user = format!("system:node:{node}");
    let (cert_pem, key_pem) = request_certificate(bootstrap, node, &user).await?;
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let text = cert_kubeconfig(server, &user, &cert_pem, &key_pem);
    super::shim::write_atomic(&path, text.as_bytes())
        .map_err(|e| format!("writing {}: {e}", path.display()))?;
    client_from(&path).await
}

/// Creates the CSR and waits until it is signed; the certificate and key
/// (PEM).
async fn request_certificate(
    bootstrap: &kube::Client,
    node: &str,
    user: &str,
) -> Result<(String, String), String> {
    let key = rcgen::KeyPair::generate().map_err(|e| format!("generating a key: {e}"))?;
    let mut params = rcgen::CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, user);
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "system:nodes");
    let csr = params
        .serialize_request(&key)
        .and_then(|c| c.pem())
        .map_err(|e| format!("building the CSR: {e}"))?;
    let name = format!(
        "node-csr-{node}-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {
            "request": B64.encode(csr.as_bytes()),
            "signerName": KUBELET_CLIENT_SIGNER,
            // An ECDSA key: no key encipherment (ValidateKubeletClientCSR).
            "usages": ["digital signature", "client auth"],
        },
    }))
    .map_err(|e| e.to_string())?;
    let api = csr_api(bootstrap);
    api.create(&PostParams::default(), &obj)
        .await
        .map_err(|e| format!("creating CertificateSigningRequest {name}: {e}"))?;
    let start = tokio::time::Instant::now();
    loop {
        match api.get_opt(&name).await {
            Ok(Some(o)) => {
                if let Some(cert) = o
                    .data
                    .pointer("/status/certificate")
                    .and_then(|c| c.as_str())
                    && !cert.is_empty()
                {
                    let pem = B64
                        .decode(cert)
                        .ok()
                        .and_then(|b| String::from_utf8(b).ok())
                        .ok_or_else(|| format!("CertificateSigningRequest {name}: the certificate is not base64 PEM"))?;
                    return Ok((pem, key.serialize_pem()));
                }
                let conds = o
                    .data
                    .pointer("/status/conditions")
                    .and_then(|c| c.as_array())
                    .cloned()
                    .unwrap_or_default();
                if let Some(c) = conds
                    .iter()
                    .find(|c| matches!(c["type"].as_str(), Some("Denied") | Some("Failed")))
                {
                    return Err(format!(
                        "CertificateSigningRequest {name} {}: {}",
                        c["type"].as_str().unwrap_or(""),
                        c["message"].as_str().unwrap_or("")
                    ));
                }
            }
            Ok(None) => return Err(format!("CertificateSigningRequest {name} disappeared")),
            Err(e) => tracing::debug!(csr = %name, error = %e, "reading the CSR"),
        }
        if start.elapsed() > SIGN_TIMEOUT {
            return Err(format!(
                "CertificateSigningRequest {name} was not signed within {SIGN_TIMEOUT:?}: the node certificate needs kube-controller-manager's csrapproving and csrsigning controllers (--cluster-signing-cert-file) and a bootstrap user allowed to create certificatesigningrequests/nodeclient"
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
