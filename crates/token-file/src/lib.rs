//! A bearer token kept in a file (a mounted Secret) and re-read whenever the
//! file's metadata changes, so a token can be rotated while the program runs.
//! Kubernetes swaps a Secret volume's symlink on update, which changes the
//! inode; a rewrite in place changes the length or the modification time.
//! Between changes the derived value (a header, a trimmed string) is cached,
//! so a request costs one `stat(2)`.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use parking_lot::Mutex;

/// Why the token file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum Error<E> {
    #[error("cannot read the token file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the token file {} is empty", path.display())]
    Empty { path: PathBuf },
    /// The caller's conversion of the token refused it.
    #[error("{0}")]
    Convert(E),
}

#[derive(Clone, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
    #[cfg(unix)]
    ino: u64,
}

impl Stamp {
    fn of(path: &Path) -> std::io::Result<Stamp> {
        let md = std::fs::metadata(path)?;
        Ok(Stamp {
            modified: md.modified().ok(),
            len: md.len(),
            #[cfg(unix)]
            ino: std::os::unix::fs::MetadataExt::ino(&md),
        })
    }
}

/// A token file and the value last derived from it.
pub struct TokenFile<T> {
    path: PathBuf,
    cache: Mutex<Option<(Stamp, T)>>,
}

impl<T: Clone> TokenFile<T> {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        TokenFile {
            path: path.into(),
            cache: Mutex::new(None),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The value of the current token (whitespace around it ignored),
    /// derived by `convert` when the file changed since the last call and
    /// from the cache otherwise. An empty file is an error, never "no token".
    pub fn get<E>(&self, convert: impl FnOnce(&str) -> Result<T, E>) -> Result<T, Error<E>> {
        let read = |source| Error::Read {
            path: self.path.clone(),
            source,
        };
        let stamp = Stamp::of(&self.path).map_err(read)?;
        if let Some((cached, value)) = &*self.cache.lock()
            && *cached == stamp
        {
            return Ok(value.clone());
        }
        let text = std::fs::read_to_string(&self.path).map_err(read)?;
        let token = text.trim();
        if token.is_empty() {
            return Err(Error::Empty {
                path: self.path.clone(),
            });
        }
        let value = convert(token).map_err(Error::Convert)?;
        *self.cache.lock() = Some((stamp, value.clone()));
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;

    fn plain(t: &str) -> Result<String, Infallible> {
        Ok(t.to_owned())
    }

    #[test]
    fn reads_trims_and_follows_a_rotation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "  first\n").unwrap();
        let f = TokenFile::new(&path);
        assert_eq!(f.get(plain).unwrap(), "first");
        // A Secret update swaps the file (new inode), as the kubelet does.
        let next = dir.path().join("token.new");
        std::fs::write(&next, "second-token").unwrap();
        std::fs::rename(&next, &path).unwrap();
        assert_eq!(f.get(plain).unwrap(), "second-token");
    }

    #[test]
    fn a_missing_or_empty_file_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        let f: TokenFile<String> = TokenFile::new(&path);
        let e = f.get(plain).unwrap_err().to_string();
        assert!(e.starts_with("cannot read the token file "), "{e}");
        assert!(e.contains("token"), "{e}");
        std::fs::write(&path, " \n").unwrap();
        assert_eq!(
            f.get(plain).unwrap_err().to_string(),
            format!("the token file {} is empty", path.display())
        );
    }

    #[test]
    fn a_refused_conversion_is_passed_through_and_not_cached() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "bad\u{7f}").unwrap();
        let f = TokenFile::new(&path);
        let r = f.get(|t| {
            if t.contains('\u{7f}') {
                Err("not a header value")
            } else {
                Ok(t.len())
            }
        });
        assert!(matches!(r, Err(Error::Convert("not a header value"))));
        std::fs::write(&path, "good").unwrap();
        assert_eq!(f.get(|t| Ok::<_, &str>(t.len())).unwrap(), 4);
    }
}
