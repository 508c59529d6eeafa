//! Client certificates, opt-in ([`crate::SimConfig::client_certificates`]):
//! kube-sim serves HTTPS with a CA of its own, and the kubeconfigs it
//! writes ([`crate::KubeSim::kubeconfig_for`]) carry a client certificate
//! it issued instead of a user-name token. The certificate's subject names
//! the user (CN) and its groups (O), as for a kube-apiserver's
//! `--client-ca-file` authenticator, which also gives the user its
//! credential id: `authentication.kubernetes.io/credential-id` in `extra`,
//! `X509SHA256=<hex SHA-256 of the certificate>` (k8s.io/apiserver
//! authentication/request/x509 `CommonNameUserConversion`). A bearer token
//! is still accepted on a connection without a certificate.
//!
//! kube-sim only knows the certificates it issued: a connection's
//! certificate is verified against its CA, then looked up by its SHA-256.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use parking_lot::Mutex;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};

/// upstream's `user.CredentialIDKey`.
pub(crate) const CREDENTIAL_ID_KEY: &str = "authentication.kubernetes.io/credential-id";

/// Who a verified client certificate names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PeerCert {
    pub(crate) user: String,
    /// The subject's organizations.
    pub(crate) groups: Vec<String>,
    /// `X509SHA256=<hex>`.
    pub(crate) credential_id: String,
}

/// A certificate and its key, PEM.
#[derive(Clone, Debug)]
pub(crate) struct Pair {
    pub(crate) cert_pem: String,
    pub(crate) key_pem: String,
}

/// kube-sim's CA, its serving configuration and the client certificates
/// it issued.
pub(crate) struct Pki {
    ca_params: CertificateParams,
    ca_key: KeyPair,
    pub(crate) ca_pem: String,
    pub(crate) server: Arc<rustls::ServerConfig>,
    /// By the hex SHA-256 of the certificate's DER.
    issued: Mutex<HashMap<String, PeerCert>>,
    /// One certificate per user (a kubeconfig is written once).
    by_user: Mutex<HashMap<String, Pair>>,
}

fn err(what: &str, e: impl std::fmt::Display) -> String {
    format!("{what}: {e}")
}

/// The hex SHA-256 of `der`.
pub(crate) fn sha256_hex(der: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, der)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl Pki {
    /// A new CA and a serving certificate for `127.0.0.1`, `localhost` and
    /// `ip`; clients may present a certificate the CA signed (or none).
    pub(crate) fn generate(ip: IpAddr) -> Result<Pki, String> {
        let ca_key = KeyPair::generate().map_err(|e| err("CA key", e))?;
        let mut ca_params =
            CertificateParams::new(Vec::<String>::new()).map_err(|e| err("CA parameters", e))?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, "kube-sim CA");
        ca_params.distinguished_name = dn;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca_params
            .self_signed(&ca_key)
            .map_err(|e| err("CA certificate", e))?;
        let ca_der = ca_cert.der().clone();

        let key = KeyPair::generate().map_err(|e| err("serving key", e))?;
        let mut params = CertificateParams::new(vec!["localhost".to_string()])
            .map_err(|e| err("serving parameters", e))?;
        params
            .subject_alt_names
            .push(SanType::IpAddress(IpAddr::from([127, 0, 0, 1])));
        if !ip.is_unspecified() && ip != IpAddr::from([127, 0, 0, 1]) {
            params.subject_alt_names.push(SanType::IpAddress(ip));
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let issuer = Issuer::from_params(&ca_params, &ca_key);
        let serving = params
            .signed_by(&key, &issuer)
            .map_err(|e| err("serving certificate", e))?;
        let serving_key = rustls_pki_types::PrivateKeyDer::Pkcs8(
            rustls_pki_types::PrivatePkcs8KeyDer::from(key.serialize_der()),
        );

        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(ca_der)
            .map_err(|e| err("CA certificate as a root", e))?;
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            provider.clone(),
        )
        .allow_unauthenticated()
        .build()
        .map_err(|e| err("client certificate verifier", e))?;
        let mut server = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| err("TLS versions", e))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(vec![serving.der().clone()], serving_key)
            .map_err(|e| err("serving certificate", e))?;
        server.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Pki {
            ca_pem: ca_cert.pem(),
            ca_params,
            ca_key,
            server: Arc::new(server),
            issued: Mutex::new(HashMap::new()),
            by_user: Mutex::new(HashMap::new()),
        })
    }

    /// The client certificate of `user` in `groups` (the subject's CN and
    /// O's; at most two O's are written, all are remembered), issued once.
    pub(crate) fn client(&self, user: &str, groups: &[String]) -> Result<Pair, String> {
        if let Some(p) = self.by_user.lock().get(user) {
            return Ok(p.clone());
        }
        let key = KeyPair::generate().map_err(|e| err("client key", e))?;
        let mut params = CertificateParams::new(Vec::<String>::new())
            .map_err(|e| err("client parameters", e))?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, user);
        // rcgen keeps one value per attribute type: the second group goes
        // in under the same OID (2.5.4.10, O) spelled as a custom type.
        if let Some(g) = groups.first() {
            dn.push(DnType::OrganizationName, g.as_str());
        }
        if let Some(g) = groups.get(1) {
            dn.push(DnType::CustomDnType(vec![2, 5, 4, 10]), g.as_str());
        }
        params.distinguished_name = dn;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.use_authority_key_identifier_extension = true;
        let issuer = Issuer::from_params(&self.ca_params, &self.ca_key);
        let cert = params
            .signed_by(&key, &issuer)
            .map_err(|e| err(&format!("client certificate for {user:?}"), e))?;
        let fingerprint = sha256_hex(cert.der());
        self.issued.lock().insert(
            fingerprint.clone(),
            PeerCert {
                user: user.to_string(),
                groups: groups.to_vec(),
                credential_id: format!("X509SHA256={fingerprint}"),
            },
        );
        let pair = Pair {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        };
        self.by_user.lock().insert(user.to_string(), pair.clone());
        Ok(pair)
    }

    /// Who the verified certificate `der` names (`None`: not one kube-sim
    /// issued).
    pub(crate) fn peer(&self, der: &[u8]) -> Option<PeerCert> {
        self.issued.lock().get(&sha256_hex(der)).cloned()
    }
}
