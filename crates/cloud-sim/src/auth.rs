//! Bearer-token authentication of the simulator's API.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use parking_lot::Mutex;

/// Where the simulator takes the token that clients must present.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Auth {
    /// No authentication: every call is accepted.
    #[default]
    None,
    /// A fixed token.
    Token(String),
    /// A token read from a file (surrounding whitespace ignored). The file is
    /// re-read when it changes, so a token can be rotated while running.
    TokenFile(PathBuf),
}

/// A token file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("cannot read the token file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the token file {} is empty", path.display())]
    Empty { path: PathBuf },
    #[error("the configured token is empty")]
    EmptyToken,
}

#[derive(Clone, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
    #[cfg(unix)]
    ino: u64,
}

fn stamp(path: &Path) -> std::io::Result<Stamp> {
    let md = std::fs::metadata(path)?;
    Ok(Stamp {
        modified: md.modified().ok(),
        len: md.len(),
        #[cfg(unix)]
        ino: std::os::unix::fs::MetadataExt::ino(&md),
    })
}

pub(crate) struct Authenticator {
    auth: Auth,
    cache: Mutex<Option<(Stamp, String)>>,
}

/// Compares without an early exit, so the time taken does not reveal how
/// much of the token matched.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Authenticator {
    pub fn new(auth: Auth) -> Result<Self, TokenError> {
        let me = Self {
            auth,
            cache: Mutex::new(None),
        };
        // Fail at start, not at the first call, on an unusable token.
        me.expected()?;
        Ok(me)
    }

    fn expected(&self) -> Result<Option<String>, TokenError> {
        match &self.auth {
            Auth::None => Ok(None),
            Auth::Token(t) if t.trim().is_empty() => Err(TokenError::EmptyToken),
            Auth::Token(t) => Ok(Some(t.trim().to_owned())),
            Auth::TokenFile(path) => {
                let read_err = |source| TokenError::Read {
                    path: path.clone(),
                    source,
                };
                let st = stamp(path).map_err(read_err)?;
                if let Some((cached, token)) = &*self.cache.lock()
                    && *cached == st
                {
                    return Ok(Some(token.clone()));
                }
                let token = std::fs::read_to_string(path).map_err(read_err)?;
                let token = token.trim().to_owned();
                if token.is_empty() {
                    return Err(TokenError::Empty { path: path.clone() });
                }
                *self.cache.lock() = Some((st, token.clone()));
                Ok(Some(token))
            }
        }
    }

    /// Checks an `Authorization` header value. `Ok(false)` means the caller
    /// is not authorized; `Err` means the server cannot tell (its token file
    /// is unusable).
    pub fn check(&self, header: Option<&str>) -> Result<bool, TokenError> {
        let Some(expected) = self.expected()? else {
            return Ok(true);
        };
        let presented = header
            .and_then(|h| {
                let (scheme, rest) = h.trim().split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then_some(rest.trim())
            })
            .unwrap_or("");
        Ok(constant_time_eq(presented.as_bytes(), expected.as_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_token() {
        let a = Authenticator::new(Auth::Token("s3cret".into())).unwrap();
        assert!(a.check(Some("Bearer s3cret")).unwrap());
        assert!(a.check(Some("bearer  s3cret ")).unwrap());
        assert!(!a.check(Some("Bearer s3cre")).unwrap());
        assert!(!a.check(Some("Basic s3cret")).unwrap());
        assert!(!a.check(None).unwrap());
        assert!(Authenticator::new(Auth::None).unwrap().check(None).unwrap());
        assert!(matches!(
            Authenticator::new(Auth::Token(" ".into())),
            Err(TokenError::EmptyToken)
        ));
    }

    #[test]
    fn token_file_is_reread_when_it_changes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "one\n").unwrap();
        let a = Authenticator::new(Auth::TokenFile(path.clone())).unwrap();
        assert!(a.check(Some("Bearer one")).unwrap());
        // Rotation the way a Secret volume does it: a new file renamed over.
        let tmp = dir.path().join("token.new");
        std::fs::write(&tmp, "two-longer").unwrap();
        std::fs::rename(&tmp, &path).unwrap();
        assert!(!a.check(Some("Bearer one")).unwrap());
        assert!(a.check(Some("Bearer two-longer")).unwrap());
        std::fs::remove_file(&path).unwrap();
        let e = a.check(Some("Bearer two-longer")).unwrap_err().to_string();
        assert!(e.contains(&path.display().to_string()), "{e}");
    }

    #[test]
    fn missing_or_empty_token_file_fails_at_start_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("absent");
        let e = Authenticator::new(Auth::TokenFile(path.clone()))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains(&path.display().to_string()), "{e}");
        std::fs::write(&path, "  \n").unwrap();
        let e = Authenticator::new(Auth::TokenFile(path.clone()))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("is empty"), "{e}");
    }
}
