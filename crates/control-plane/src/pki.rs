//! The control plane's PKI, generated in-process: one CA that signs the
//! kube-apiserver's serving certificate and every client certificate (the
//! admin in `system:masters`, the controller manager, the scheduler, nodes
//! and any test user), and the service-account signing key.

use std::net::IpAddr;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};

use crate::Error;

/// A certificate and its private key, both PEM.
#[derive(Clone, Debug)]
pub struct CertPair {
    pub cert_pem: String,
    pub key_pem: String,
}

/// The CA and the keys every component needs.
pub struct Pki {
    ca_params: CertificateParams,
    ca_key: KeyPair,
    /// The CA certificate (PEM): `--client-ca-file`, the kubeconfigs'
    /// `certificate-authority-data`, KCM's `--root-ca-file`.
    pub ca_cert_pem: String,
    /// kube-apiserver's serving certificate for loopback and the in-cluster
    /// names of the `kubernetes` Service.
    pub serving: CertPair,
    /// The service-account token signing key (PKCS#8 PEM) and its public key.
    pub sa_key_pem: String,
    pub sa_public_pem: String,
}

fn pki_err(what: &str, e: rcgen::Error) -> Error {
    Error::Pki(format!("{what}: {e}"))
}

impl Pki {
    /// A new CA, serving certificate (for `127.0.0.1`, `localhost` and the
    /// `kubernetes` Service's names and `service_ip`) and service-account key.
    pub fn generate(service_ip: Option<IpAddr>) -> Result<Pki, Error> {
        let ca_key = KeyPair::generate().map_err(|e| pki_err("CA key", e))?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())
            .map_err(|e| pki_err("CA parameters", e))?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, "protection-manager test-bed CA");
        ca_params.distinguished_name = dn;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca_params
            .self_signed(&ca_key)
            .map_err(|e| pki_err("CA certificate", e))?;
        let mut pki = Pki {
            ca_cert_pem: ca_cert.pem(),
            ca_params,
            ca_key,
            serving: CertPair {
                cert_pem: String::new(),
                key_pem: String::new(),
            },
            sa_key_pem: String::new(),
            sa_public_pem: String::new(),
        };
        let mut names: Vec<String> = [
            "127.0.0.1",
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if let Some(ip) = service_ip {
            names.push(ip.to_string());
        }
        pki.serving = pki.sign("kube-apiserver", &[], names, true)?;
        let sa = KeyPair::generate().map_err(|e| pki_err("service-account key", e))?;
        pki.sa_key_pem = sa.serialize_pem();
        pki.sa_public_pem = sa.public_key_pem();
        Ok(pki)
    }

    /// A client certificate for `user` in `groups` (the API server maps the
    /// subject's CN to the user name and each O to a group).
    pub fn client(&self, user: &str, groups: &[&str]) -> Result<CertPair, Error> {
        self.sign(user, groups, Vec::new(), false)
    }

    /// The CA certificate and key (KCM's `--cluster-signing-*` files).
    pub fn ca(&self) -> CertPair {
        CertPair {
            cert_pem: self.ca_cert_pem.clone(),
            key_pem: self.ca_key.serialize_pem(),
        }
    }

    fn sign(
        &self,
        cn: &str,
        orgs: &[&str],
        sans: Vec<String>,
        server: bool,
    ) -> Result<CertPair, Error> {
        let key = KeyPair::generate().map_err(|e| pki_err("key", e))?;
        let mut params =
            CertificateParams::new(sans).map_err(|e| pki_err("certificate parameters", e))?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, cn);
        // rcgen keeps one value per attribute type; the second group goes in
        // under the same OID (2.5.4.10, O) spelled as a custom type, which
        // the API server reads as a second Organization.
        match orgs {
            [] => {}
            [o] => dn.push(DnType::OrganizationName, *o),
            [o1, o2] => {
                dn.push(DnType::OrganizationName, *o1);
                dn.push(DnType::CustomDnType(vec![2, 5, 4, 10]), *o2);
            }
            _ => {
                return Err(Error::Pki(format!(
                    "a client certificate for {cn:?} can carry at most two groups, {} asked: {orgs:?}",
                    orgs.len()
                )));
            }
        }
        params.distinguished_name = dn;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![if server {
            ExtendedKeyUsagePurpose::ServerAuth
        } else {
            ExtendedKeyUsagePurpose::ClientAuth
        }];
        params.use_authority_key_identifier_extension = true;
        let issuer = Issuer::from_params(&self.ca_params, &self.ca_key);
        let cert = params
            .signed_by(&key, &issuer)
            .map_err(|e| pki_err(&format!("certificate for {cn:?}"), e))?;
        Ok(CertPair {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}
