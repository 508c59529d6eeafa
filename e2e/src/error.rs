//! The harness's errors. A scenario that finds the system misbehaving
//! returns [`Error::Check`] (or [`Error::Invariant`]) with the evidence; the
//! test prints it and fails.

use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The environment or a setting is wrong (a missing tool, a bad variable).
    #[error("configuration: {0}")]
    Config(String),
    /// A command (helm, kubectl, the manager binary) failed unexpectedly.
    #[error("{command} failed ({status}):\n{output}")]
    Command {
        command: String,
        status: String,
        output: String,
    },
    #[error("{context}: {source}")]
    Kube {
        context: String,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("kube-sim: {0}")]
    Sim(String),
    #[error("cloud-sim: {0}")]
    Cloud(String),
    /// The real cluster of [`crate::real`] (control plane, kubelets).
    #[error("real cluster: {0}")]
    Real(String),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error("timed out after {after:?} waiting until {what}\n{diagnostics}")]
    Timeout {
        what: String,
        after: Duration,
        diagnostics: String,
    },
    /// A scenario's expectation does not hold.
    #[error("check failed: {0}")]
    Check(String),
    /// A chaos invariant was violated (the evidence is in the message).
    #[error("invariant violated:\n{0}")]
    Invariant(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Adds context to kube errors.
pub trait KubeContext<T> {
    fn ctx(self, context: impl FnOnce() -> String) -> Result<T>;
}

impl<T> KubeContext<T> for std::result::Result<T, kube::Error> {
    fn ctx(self, context: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|source| Error::Kube {
            context: context(),
            source: Box::new(source),
        })
    }
}

/// Adds context to I/O errors.
pub trait IoContext<T> {
    fn io_ctx(self, context: impl FnOnce() -> String) -> Result<T>;
}

impl<T> IoContext<T> for std::result::Result<T, std::io::Error> {
    fn io_ctx(self, context: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|source| Error::Io {
            context: context(),
            source,
        })
    }
}

/// `ensure!(cond, "format", args...)`: returns [`Error::Check`] when `cond`
/// is false.
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            return Err($crate::error::Error::Check(format!($($arg)+)));
        }
    };
}
