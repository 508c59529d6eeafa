//! Where the scenarios run: the in-process simulation (default) or a real
//! cluster named by `E2E_KUBECONFIG`.

use std::path::PathBuf;

use crate::error::{Error, Result};

/// The default image of the user pods in cluster mode (any image whose
/// container keeps running works; kube-sim's kubelet runs unmapped images as
/// fake processes).
pub const DEFAULT_POD_IMAGE: &str = "registry.k8s.io/pause:3.10";

/// The chart's image repository; kube-sim's kubelet maps it to the manager
/// binary.
pub const MANAGER_REPOSITORY: &str = "ghcr.io/protection-manager/protection-manager";

/// Where the scenarios run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// kube-sim (with its cluster emulation) and cloud-sim in-process; the
    /// kubelet runs the manager image as the workspace's binary.
    Sim,
    /// A real cluster (kind, k3d, ...).
    Cluster(ClusterTarget),
}

/// What cluster mode needs (see e2e/README.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterTarget {
    /// `E2E_KUBECONFIG`: the cluster's kubeconfig (cluster-admin).
    pub kubeconfig: PathBuf,
    /// `E2E_CONTEXT`: a context of that kubeconfig (default: its current one).
    pub context: Option<String>,
    /// `E2E_IMAGE`: the manager image, loaded into the cluster
    /// (`kind load docker-image ...`), as `repository:tag`.
    pub image: ImageRef,
    /// `E2E_IMAGE_PULL_POLICY`: default `IfNotPresent` (`Never` for an image
    /// that exists only on the nodes).
    pub image_pull_policy: String,
    /// `E2E_CLOUD_SIM_URL`: cloud-sim's base URL, reachable both from the
    /// pods (the manager's provider endpoint) and from the machine running
    /// the tests (the invariant checks read its inventory).
    pub cloud_sim_url: String,
    /// `E2E_CLOUD_SIM_TOKEN`: cloud-sim's bearer token, if it has one.
    pub cloud_sim_token: Option<String>,
    /// `E2E_POD_IMAGE`: the image of the user pods that mount claims.
    pub pod_image: String,
    /// `E2E_IMAGE_ANY_TAG=1`: the nodes run every tag of `E2E_IMAGE`'s
    /// repository as the same build (the process kubelet of `make
    /// e2e-real` maps the repository), so steps that need a second tag of
    /// the image run.
    pub image_any_tag: bool,
}

/// An image reference split into repository and tag (digests are not
/// supported: the chart takes them separately).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageRef {
    pub repository: String,
    pub tag: String,
}

impl ImageRef {
    /// Parses `repository:tag`; the tag is required (`latest` would make
    /// `IfNotPresent` pull from a registry).
    pub fn parse(s: &str) -> Result<ImageRef> {
        let s = s.trim();
        if s.contains('@') {
            return Err(Error::Config(format!(
                "E2E_IMAGE={s:?}: digests are not supported; give repository:tag"
            )));
        }
        // The tag follows the last ':' after the last '/' (a registry port
        // such as localhost:5000/pm has a ':' before the '/').
        let slash = s.rfind('/').map_or(0, |i| i + 1);
        match s[slash..].rfind(':') {
            Some(i) if i + 1 < s[slash..].len() && slash + i > 0 => Ok(ImageRef {
                repository: s[..slash + i].to_string(),
                tag: s[slash + i + 1..].to_string(),
            }),
            _ => Err(Error::Config(format!(
                "E2E_IMAGE={s:?} has no tag; give repository:tag (e.g. {MANAGER_REPOSITORY}:e2e)"
            ))),
        }
    }
}

impl std::fmt::Display for ImageRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.repository, self.tag)
    }
}

impl Mode {
    /// From the process environment.
    pub fn from_env() -> Result<Mode> {
        Mode::from_vars(|k| std::env::var(k).ok())
    }

    /// From any variable source (unit-tested without touching the process
    /// environment). Empty values count as unset.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Mode> {
        let get = |k: &str| get(k).filter(|v| !v.trim().is_empty());
        let Some(kubeconfig) = get("E2E_KUBECONFIG") else {
            for k in ["E2E_IMAGE", "E2E_CLOUD_SIM_URL"] {
                if get(k).is_some() {
                    return Err(Error::Config(format!(
                        "{k} is set but E2E_KUBECONFIG is not: set E2E_KUBECONFIG to run against a cluster, or unset {k} to run on kube-sim"
                    )));
                }
            }
            return Ok(Mode::Sim);
        };
        let kubeconfig = PathBuf::from(kubeconfig);
        if !kubeconfig.is_file() {
            return Err(Error::Config(format!(
                "E2E_KUBECONFIG={} is not a file",
                kubeconfig.display()
            )));
        }
        let image = get("E2E_IMAGE").ok_or_else(|| {
            Error::Config(
                "E2E_KUBECONFIG is set but E2E_IMAGE is not: build and load the manager image (make image; kind load docker-image <image>) and set E2E_IMAGE=<repository:tag>".into(),
            )
        })?;
        let image = ImageRef::parse(&image)?;
        let cloud_sim_url = get("E2E_CLOUD_SIM_URL").ok_or_else(|| {
            Error::Config(
                "E2E_KUBECONFIG is set but E2E_CLOUD_SIM_URL is not: start cloud-sim where both the pods and this machine reach it and set E2E_CLOUD_SIM_URL (see e2e/README.md)".into(),
            )
        })?;
        let cloud_sim_url = cloud_sim_url.trim().trim_end_matches('/').to_string();
        if !(cloud_sim_url.starts_with("http://") || cloud_sim_url.starts_with("https://")) {
            return Err(Error::Config(format!(
                "E2E_CLOUD_SIM_URL={cloud_sim_url:?} is not an http(s) URL"
            )));
        }
        let image_pull_policy =
            get("E2E_IMAGE_PULL_POLICY").unwrap_or_else(|| "IfNotPresent".into());
        if !["Always", "IfNotPresent", "Never"].contains(&image_pull_policy.as_str()) {
            return Err(Error::Config(format!(
                "E2E_IMAGE_PULL_POLICY={image_pull_policy:?}: want Always, IfNotPresent or Never"
            )));
        }
        Ok(Mode::Cluster(ClusterTarget {
            kubeconfig,
            context: get("E2E_CONTEXT"),
            image,
            image_pull_policy,
            cloud_sim_url,
            cloud_sim_token: get("E2E_CLOUD_SIM_TOKEN"),
            pod_image: get("E2E_POD_IMAGE").unwrap_or_else(|| DEFAULT_POD_IMAGE.into()),
            image_any_tag: get("E2E_IMAGE_ANY_TAG").is_some_and(|v| v == "1" || v == "true"),
        }))
    }

    pub fn is_sim(&self) -> bool {
        matches!(self, Mode::Sim)
    }

    /// `sim` or `cluster`, for messages.
    pub fn name(&self) -> &'static str {
        match self {
            Mode::Sim => "sim",
            Mode::Cluster(_) => "cluster",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    fn kubeconfig_file() -> PathBuf {
        let dir = std::env::temp_dir().join(format!("e2e-mode-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("kubeconfig");
        std::fs::write(&path, "apiVersion: v1\nkind: Config\n").expect("write");
        path
    }

    #[test]
    fn no_kubeconfig_means_sim() {
        assert_eq!(Mode::from_vars(vars(&[])).expect("mode"), Mode::Sim);
        assert_eq!(
            Mode::from_vars(vars(&[("E2E_KUBECONFIG", "  ")])).expect("mode"),
            Mode::Sim,
            "an empty value counts as unset"
        );
    }

    #[test]
    fn cluster_settings_without_a_kubeconfig_are_an_error() {
        let e = Mode::from_vars(vars(&[("E2E_IMAGE", "pm:1")])).unwrap_err();
        assert!(
            e.to_string()
                .contains("E2E_IMAGE is set but E2E_KUBECONFIG is not"),
            "{e}"
        );
    }

    #[test]
    fn cluster_mode_needs_an_image_and_cloud_sim() {
        let kc = kubeconfig_file();
        let kc = kc.to_str().expect("utf-8");
        let e = Mode::from_vars(vars(&[("E2E_KUBECONFIG", kc)])).unwrap_err();
        assert!(e.to_string().contains("E2E_IMAGE is not"), "{e}");
        let e =
            Mode::from_vars(vars(&[("E2E_KUBECONFIG", kc), ("E2E_IMAGE", "pm:e2e")])).unwrap_err();
        assert!(e.to_string().contains("E2E_CLOUD_SIM_URL is not"), "{e}");
        let e = Mode::from_vars(vars(&[
            ("E2E_KUBECONFIG", kc),
            ("E2E_IMAGE", "pm:e2e"),
            ("E2E_CLOUD_SIM_URL", "172.18.0.1:9000"),
        ]))
        .unwrap_err();
        assert!(e.to_string().contains("not an http(s) URL"), "{e}");
        let e =
            Mode::from_vars(vars(&[("E2E_KUBECONFIG", "/nonexistent/kubeconfig")])).unwrap_err();
        assert!(e.to_string().contains("is not a file"), "{e}");
    }

    #[test]
    fn cluster_mode_reads_every_setting() {
        let kc = kubeconfig_file();
        let m = Mode::from_vars(vars(&[
            ("E2E_KUBECONFIG", kc.to_str().expect("utf-8")),
            ("E2E_CONTEXT", "kind-pm"),
            ("E2E_IMAGE", "localhost:5000/protection-manager:e2e"),
            ("E2E_IMAGE_PULL_POLICY", "Never"),
            ("E2E_CLOUD_SIM_URL", "http://172.18.0.1:9000/"),
            ("E2E_CLOUD_SIM_TOKEN", "s3cret"),
        ]))
        .expect("mode");
        let Mode::Cluster(t) = m else {
            panic!("want cluster mode, got {m:?}")
        };
        assert_eq!(t.kubeconfig, kc);
        assert_eq!(t.context.as_deref(), Some("kind-pm"));
        assert_eq!(t.image.repository, "localhost:5000/protection-manager");
        assert_eq!(t.image.tag, "e2e");
        assert_eq!(t.image_pull_policy, "Never");
        assert_eq!(
            t.cloud_sim_url, "http://172.18.0.1:9000",
            "trailing slash dropped"
        );
        assert_eq!(t.cloud_sim_token.as_deref(), Some("s3cret"));
        assert_eq!(t.pod_image, DEFAULT_POD_IMAGE);
        let e = Mode::from_vars(vars(&[
            ("E2E_KUBECONFIG", kc.to_str().expect("utf-8")),
            ("E2E_IMAGE", "pm:e2e"),
            ("E2E_CLOUD_SIM_URL", "http://x"),
            ("E2E_IMAGE_PULL_POLICY", "Sometimes"),
        ]))
        .unwrap_err();
        assert!(
            e.to_string().contains("want Always, IfNotPresent or Never"),
            "{e}"
        );
    }

    #[test]
    fn image_references_need_a_tag() {
        let r =
            ImageRef::parse("ghcr.io/protection-manager/protection-manager:0.3.0").expect("parse");
        assert_eq!(r.repository, MANAGER_REPOSITORY);
        assert_eq!(r.tag, "0.3.0");
        assert_eq!(r.to_string(), format!("{MANAGER_REPOSITORY}:0.3.0"));
        for bad in [
            "protection-manager",
            "localhost:5000/pm",
            "pm:",
            ":tag",
            "pm@sha256:00",
        ] {
            assert!(ImageRef::parse(bad).is_err(), "{bad} should be refused");
        }
    }
}
