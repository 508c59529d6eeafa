//! Bearer-token authentication of the simulator's API.

use std::convert::Infallible;
use std::path::PathBuf;

use token_file::TokenFile;

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
    /// The token file cannot be read, or is empty.
    #[error(transparent)]
    File(#[from] token_file::Error<Infallible>),
    #[error("the configured token is empty")]
    EmptyToken,
}

pub(crate) struct Authenticator {
    source: Source,
}

/// [`Auth`] with its token file opened.
enum Source {
    None,
    Token(String),
    File(TokenFile<String>),
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
        let source = match auth {
            Auth::None => Source::None,
            Auth::Token(t) => Source::Token(t),
            Auth::TokenFile(path) => Source::File(TokenFile::new(path)),
        };
        let me = Self { source };
        // Fail at start, not at the first call, on an unusable token.
        me.expected()?;
        Ok(me)
    }

    fn expected(&self) -> Result<Option<String>, TokenError> {
        match &self.source {
            Source::None => Ok(None),
            Source::Token(t) if t.trim().is_empty() => Err(TokenError::EmptyToken),
            Source::Token(t) => Ok(Some(t.trim().to_owned())),
            Source::File(file) => Ok(Some(file.get(|t| Ok::<_, Infallible>(t.to_owned()))?)),
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
