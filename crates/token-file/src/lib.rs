//! A bearer token kept in a file (a mounted Secret) and re-read whenever the
//! file's metadata changes, so a token can be rotated while the program runs.
//! Kubernetes swaps a Secret volume's symlink on update, which changes the
//! inode; a rewrite in place changes the length or the modification time.
//! Between changes the derived value (a header, a trimmed string) is cached,
//! so a request costs one `stat(2)`.
//!
//! Every file is read with [`read_bounded`]: only a regular file (a FIFO
//! would hang the reader before its first log line, `/dev/zero` grow it to
//! gigabytes in seconds), and never more than a size that fits what it
//! holds. [`check_file`] applies the same checks to a file another library
//! reads (a kubeconfig and the certificates it names).

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use parking_lot::Mutex;

/// The most a token file may hold (a service account token is about a
/// kilobyte; an OIDC token a few).
pub const MAX_TOKEN_BYTES: u64 = 64 * 1024;

/// A file that is refused before (or while) reading it.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("cannot read the {what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the {what} {} is not a regular file (it is {kind}); refusing to read it", path.display())]
    NotRegular {
        what: &'static str,
        path: PathBuf,
        kind: &'static str,
    },
    #[error("the {what} {} is larger than {max} bytes, more than a {what} holds; refusing to read it", path.display())]
    TooLarge {
        what: &'static str,
        path: PathBuf,
        max: u64,
    },
}

fn kind_of(ft: &std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if ft.is_fifo() {
            return "a FIFO";
        }
        if ft.is_char_device() {
            return "a character device";
        }
        if ft.is_block_device() {
            return "a block device";
        }
        if ft.is_socket() {
            return "a socket";
        }
    }
    if ft.is_dir() {
        "a directory"
    } else {
        "not a file"
    }
}

/// Checks that `path` (the `what`, e.g. "kubeconfig") is a regular file of
/// at most `max` bytes, symlinks followed, without opening it.
pub fn check_file(path: &Path, max: u64, what: &'static str) -> Result<(), FileError> {
    let md = std::fs::metadata(path).map_err(|source| FileError::Io {
        what,
        path: path.into(),
        source,
    })?;
    check_metadata(path, &md, max, what)
}

fn check_metadata(
    path: &Path,
    md: &std::fs::Metadata,
    max: u64,
    what: &'static str,
) -> Result<(), FileError> {
    if !md.is_file() {
        return Err(FileError::NotRegular {
            what,
            path: path.into(),
            kind: kind_of(&md.file_type()),
        });
    }
    if md.len() > max {
        return Err(FileError::TooLarge {
            what,
            path: path.into(),
            max,
        });
    }
    Ok(())
}

/// Reads `path` (the `what`): only a regular file, at most `max` bytes
/// (checked before opening, on the opened file, and while reading, so a
/// file swapped or growing meanwhile is refused too). The file is opened
/// non-blocking: a FIFO put there after the check does not hang it.
pub fn read_bounded(path: &Path, max: u64, what: &'static str) -> Result<Vec<u8>, FileError> {
    check_file(path, max, what)?;
    let io = |source| FileError::Io {
        what,
        path: path.into(),
        source,
    };
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // O_NONBLOCK (Linux and the BSDs agree on neither value nor name
        // in std; libc's constant).
        opts.custom_flags(O_NONBLOCK);
    }
    let f = opts.open(path).map_err(io)?;
    check_metadata(path, &f.metadata().map_err(io)?, max, what)?;
    let mut out = Vec::new();
    f.take(max + 1).read_to_end(&mut out).map_err(io)?;
    if out.len() as u64 > max {
        return Err(FileError::TooLarge {
            what,
            path: path.into(),
            max,
        });
    }
    Ok(out)
}

#[cfg(all(unix, any(target_os = "linux", target_os = "android")))]
const O_NONBLOCK: i32 = 0o4000;
#[cfg(all(unix, not(any(target_os = "linux", target_os = "android"))))]
const O_NONBLOCK: i32 = 0x0004;

/// Why the token file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum Error<E> {
    #[error("cannot read the token file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Not a regular file, or too large for a token.
    #[error(transparent)]
    File(FileError),
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
        let bytes =
            read_bounded(&self.path, MAX_TOKEN_BYTES, "token file").map_err(|e| match e {
                FileError::Io { source, .. } => read(source),
                other => Error::File(other),
            })?;
        let text = String::from_utf8(bytes)
            .map_err(|e| read(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))?;
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

    /// Issue 27, bug 7: `/dev/zero` grew the process to gigabytes, a FIFO
    /// hung it before its first log line. Both are refused, naming the file
    /// and why; so is a file larger than a token.
    #[test]
    fn a_device_a_fifo_or_a_huge_file_is_refused_naming_it() {
        let f: TokenFile<String> = TokenFile::new("/dev/zero");
        let e = f.get(plain).unwrap_err().to_string();
        assert_eq!(
            e,
            "the token file /dev/zero is not a regular file (it is a character device); refusing to read it"
        );
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if made.is_ok_and(|s| s.success()) {
            let f: TokenFile<String> = TokenFile::new(&fifo);
            let e = f.get(plain).unwrap_err().to_string();
            assert!(e.contains("is not a regular file (it is a FIFO)"), "{e}");
        }
        let big = dir.path().join("big");
        std::fs::write(&big, vec![b'a'; MAX_TOKEN_BYTES as usize + 1]).unwrap();
        let f: TokenFile<String> = TokenFile::new(&big);
        let e = f.get(plain).unwrap_err().to_string();
        assert!(e.contains("is larger than 65536 bytes"), "{e}");
        let e = check_file(dir.path(), 10, "kubeconfig")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("the kubeconfig") && e.contains("(it is a directory)"),
            "{e}"
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
