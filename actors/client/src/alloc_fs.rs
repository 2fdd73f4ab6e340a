//! An allocation's directory as `nomad alloc fs` sees it: listing, stat and
//! reading of the files under `<data_dir>/alloc/<alloc_id>/`, and nothing
//! outside it.
//!
//! A path is taken relative to the allocation directory whatever its form
//! (`/alloc/logs` and `alloc/logs` are the same file, as in Nomad), and is
//! refused with Nomad's "Path escapes the alloc directory" when `..` climbs
//! out of it or when a symlink on the way resolves outside it. Reading a
//! task's `secrets/` is refused as Nomad refuses it. The client's own
//! bookkeeping files (`.herder-*`, Nomad keeps its state elsewhere) are
//! neither listed nor read.

use std::fs::{File, Metadata};
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, SystemTime};

/// The prefix of the files the client keeps in an allocation's directory
/// for itself (its persisted state, task handles).
const BOOKKEEPING_PREFIX: &str = ".herder-";

/// Nomad's `AllocFileInfo`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct AllocFileInfo {
    pub name: String,
    pub is_dir: bool,
    pub size: i64,
    /// Go's `FileMode.String()`: `-rw-r--r--`, `drwxr-xr-x`, `Lrwxrwxrwx`.
    pub file_mode: String,
    /// RFC 3339 with nanoseconds, as Go encodes a `time.Time`.
    pub mod_time: String,
    /// Only `stat` fills it in (as Nomad's).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub content_type: String,
}

/// Why a file operation was refused or failed; the texts are Nomad's.
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    #[error("Path escapes the alloc directory")]
    Escapes,
    #[error("Reading secret file prohibited: {0}")]
    Secret(String),
    /// The path does not exist (or is the client's own bookkeeping).
    #[error("{op} {path}: no such file or directory")]
    NotFound { op: &'static str, path: String },
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: String,
        source: io::Error,
    },
}

impl FsError {
    fn io(op: &'static str, path: &str, source: io::Error) -> FsError {
        if source.kind() == io::ErrorKind::NotFound {
            FsError::NotFound {
                op,
                path: path.to_string(),
            }
        } else {
            FsError::Io {
                op,
                path: path.to_string(),
                source,
            }
        }
    }
}

/// The components of `path` inside the allocation directory, `..` applied;
/// `Escapes` when they climb above it.
fn relative_parts(path: &str) -> Result<Vec<String>, FsError> {
    let mut parts: Vec<String> = Vec::new();
    for component in Path::new(path).components() {
        match component {
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
            Component::ParentDir => {
                parts.pop().ok_or(FsError::Escapes)?;
            }
            Component::Normal(name) => parts.push(name.to_string_lossy().into_owned()),
        }
    }
    Ok(parts)
}

/// The host path of `path` inside the allocation directory `root`, checked
/// not to leave it, by `..` or by a symlink anywhere on the way.
pub fn resolve(root: &Path, path: &str) -> Result<PathBuf, FsError> {
    let parts = relative_parts(path)?;
    if parts.iter().any(|p| p.starts_with(BOOKKEEPING_PREFIX)) {
        return Err(FsError::NotFound {
            op: "stat",
            path: path.to_string(),
        });
    }
    let full = parts
        .iter()
        .fold(root.to_path_buf(), |p, part| p.join(part));
    let real_root = root
        .canonicalize()
        .map_err(|e| FsError::io("stat", "/", e))?;
    // The longest prefix that exists, with its symlinks resolved, must
    // still be inside; what does not exist yet cannot lead anywhere.
    let mut existing = full.as_path();
    loop {
        match existing.canonicalize() {
            Ok(real) if real.starts_with(&real_root) => break,
            Ok(_) => return Err(FsError::Escapes),
            Err(_) => match existing.parent() {
                Some(parent) if parent.starts_with(root) => existing = parent,
                _ => break,
            },
        }
    }
    Ok(full)
}

/// Whether the (resolved) `full` path lies in a task's `secrets/`.
fn in_secrets(root: &Path, full: &Path) -> bool {
    let real_root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let real = full.canonicalize().unwrap_or_else(|_| full.to_path_buf());
    for candidate in [
        full.strip_prefix(root).ok(),
        real.strip_prefix(&real_root).ok(),
    ]
    .into_iter()
    .flatten()
    {
        let mut parts = candidate.components();
        let task = parts.next();
        let second = parts.next();
        if task.is_some_and(|t| t.as_os_str() != "alloc")
            && second.is_some_and(|s| s.as_os_str() == "secrets")
        {
            return true;
        }
    }
    false
}

/// The entries of a directory, by name (Go's `ioutil.ReadDir` order).
pub fn list(root: &Path, path: &str) -> Result<Vec<AllocFileInfo>, FsError> {
    let dir = resolve(root, path)?;
    let entries = std::fs::read_dir(&dir).map_err(|e| FsError::io("open", path, e))?;
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| FsError::io("readdirent", path, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(BOOKKEEPING_PREFIX) {
            continue;
        }
        // As Go's ReadDir: the entry itself (lstat), symlinks not followed.
        let Ok(meta) = entry.path().symlink_metadata() else {
            continue;
        };
        files.push(file_info(name, &meta, String::new()));
    }
    files.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(files)
}

/// One file's information, with its sniffed content type.
pub fn stat(root: &Path, path: &str) -> Result<AllocFileInfo, FsError> {
    let full = resolve(root, path)?;
    let meta = std::fs::metadata(&full).map_err(|e| FsError::io("stat", path, e))?;
    let name = full
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "/".to_string());
    let content_type = if meta.is_dir() {
        "application/octet-stream".to_string()
    } else {
        sniff_file(&full)
    };
    let content_type = if path.ends_with(".json") {
        "application/json".to_string()
    } else {
        content_type
    };
    Ok(file_info(name, &meta, content_type))
}

/// Opens a file for reading from `offset` (secrets refused).
pub fn open_at(root: &Path, path: &str, offset: u64) -> Result<File, FsError> {
    let full = resolve(root, path)?;
    if in_secrets(root, &full) {
        return Err(FsError::Secret(path.to_string()));
    }
    let mut file = File::open(&full).map_err(|e| FsError::io("open", path, e))?;
    file.seek(SeekFrom::Start(offset))
        .map_err(|e| FsError::io("seek", path, e))?;
    Ok(file)
}

/// Reads at most `max` bytes (fewer at the end of the file).
pub fn read_chunk(file: &mut File, max: usize) -> io::Result<Vec<u8>> {
    let mut buf = Vec::with_capacity(max.min(64 * 1024));
    file.take(max as u64).read_to_end(&mut buf)?;
    Ok(buf)
}

fn file_info(name: String, meta: &Metadata, content_type: String) -> AllocFileInfo {
    AllocFileInfo {
        name,
        is_dir: meta.is_dir(),
        size: i64::try_from(meta.len()).unwrap_or(i64::MAX),
        file_mode: go_file_mode(meta),
        mod_time: go_time(meta),
        content_type,
    }
}

fn go_time(meta: &Metadata) -> String {
    let nanos = u32::try_from(meta.mtime_nsec()).unwrap_or(0);
    let when = u64::try_from(meta.mtime())
        .map(|s| SystemTime::UNIX_EPOCH + Duration::new(s, nanos))
        .unwrap_or(SystemTime::UNIX_EPOCH);
    humantime::format_rfc3339_nanos(when).to_string()
}

/// Go's `FileMode.String()`: type letters, then `rwxrwxrwx`.
pub fn go_file_mode(meta: &Metadata) -> String {
    let ft = meta.file_type();
    let mode = meta.permissions().mode();
    let mut out = String::new();
    use std::os::unix::fs::FileTypeExt;
    let kinds = [
        (ft.is_dir(), 'd'),
        (ft.is_symlink(), 'L'),
        (ft.is_block_device() || ft.is_char_device(), 'D'),
        (ft.is_fifo(), 'p'),
        (ft.is_socket(), 'S'),
        (mode & 0o4000 != 0, 'u'),
        (mode & 0o2000 != 0, 'g'),
        (ft.is_char_device(), 'c'),
        (mode & 0o1000 != 0, 't'),
    ];
    for (set, letter) in kinds {
        if set {
            out.push(letter);
        }
    }
    if out.is_empty() {
        out.push('-');
    }
    for (i, letter) in "rwxrwxrwx".chars().enumerate() {
        out.push(if mode & (1 << (8 - i)) != 0 {
            letter
        } else {
            '-'
        });
    }
    out
}

/// A best effort at Go's `http.DetectContentType` over a file's first 512
/// bytes: the common signatures, text, else binary.
fn sniff_file(path: &Path) -> String {
    let mut head = Vec::with_capacity(512);
    let read = File::open(path).and_then(|f| f.take(512).read_to_end(&mut head));
    match read {
        Ok(_) => sniff(&head).to_string(),
        Err(_) => "application/octet-stream".to_string(),
    }
}

/// The content type of a file starting with `head`.
pub fn sniff(head: &[u8]) -> &'static str {
    const SIGNATURES: &[(&[u8], &str)] = &[
        (b"%PDF-", "application/pdf"),
        (b"\x1f\x8b\x08", "application/x-gzip"),
        (b"PK\x03\x04", "application/zip"),
        (b"\x89PNG\r\n\x1a\n", "image/png"),
        (b"\xff\xd8\xff", "image/jpeg"),
        (b"GIF87a", "image/gif"),
        (b"GIF89a", "image/gif"),
        (b"\x7fELF", "application/octet-stream"),
    ];
    if head.is_empty() {
        return "text/plain; charset=utf-8";
    }
    if let Some((_, kind)) = SIGNATURES.iter().find(|(sig, _)| head.starts_with(sig)) {
        return kind;
    }
    let trimmed = head.trim_ascii_start().to_ascii_lowercase();
    if trimmed.starts_with(b"<!doctype html") || trimmed.starts_with(b"<html") {
        return "text/html; charset=utf-8";
    }
    // Go's rule: text unless a byte no text holds appears.
    let binary = head
        .iter()
        .any(|b| matches!(b, 0x00..=0x08 | 0x0b | 0x0e..=0x1a | 0x1c..=0x1f));
    if binary {
        "application/octet-stream"
    } else {
        "text/plain; charset=utf-8"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn alloc_dir() -> (tempfile::TempDir, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("alloc").join("a1");
        std::fs::create_dir_all(root.join("alloc/logs")).unwrap();
        std::fs::create_dir_all(root.join("web/local")).unwrap();
        std::fs::create_dir_all(root.join("web/secrets")).unwrap();
        std::fs::write(root.join("web/local/out.txt"), "hello\n").unwrap();
        std::fs::write(root.join("web/secrets/token"), "s3cret").unwrap();
        std::fs::write(root.join(".herder-alloc.json"), "{}").unwrap();
        std::fs::write(tmp.path().join("outside.txt"), "host file").unwrap();
        (tmp, root)
    }

    #[test]
    fn paths_are_relative_to_the_alloc_dir_and_never_climb_out_of_it() {
        let (_tmp, root) = alloc_dir();
        assert_eq!(
            resolve(&root, "/web/local/out.txt").unwrap(),
            root.join("web/local/out.txt")
        );
        assert_eq!(
            resolve(&root, "web/../web/local").unwrap(),
            root.join("web/local")
        );
        assert_eq!(resolve(&root, "/").unwrap(), root);
        for bad in [
            "..",
            "../outside.txt",
            "web/../../outside.txt",
            "/../../etc",
        ] {
            let err = resolve(&root, bad).unwrap_err();
            assert_eq!(err.to_string(), "Path escapes the alloc directory", "{bad}");
        }
        // An absolute path names a file of the allocation, not of the host.
        assert!(matches!(
            stat(&root, "/etc/passwd"),
            Err(FsError::NotFound { .. })
        ));
    }

    #[test]
    fn a_symlink_that_leads_outside_is_refused() {
        let (tmp, root) = alloc_dir();
        symlink(tmp.path().join("outside.txt"), root.join("web/local/esc")).unwrap();
        symlink("/etc", root.join("web/local/etc")).unwrap();
        symlink("out.txt", root.join("web/local/fine")).unwrap();
        for bad in ["web/local/esc", "web/local/etc/passwd", "web/local/etc"] {
            assert_eq!(
                stat(&root, bad).unwrap_err().to_string(),
                "Path escapes the alloc directory",
                "{bad}"
            );
            assert!(matches!(open_at(&root, bad, 0), Err(FsError::Escapes)));
        }
        let mut inside = open_at(&root, "web/local/fine", 0).unwrap();
        assert_eq!(read_chunk(&mut inside, 100).unwrap(), b"hello\n");
        // Listed as a link, never followed.
        let listed = list(&root, "web/local").unwrap();
        let esc = listed.iter().find(|f| f.name == "esc").unwrap();
        assert!(esc.file_mode.starts_with('L'), "{esc:?}");
    }

    #[test]
    fn secrets_and_bookkeeping_stay_unread() {
        let (_tmp, root) = alloc_dir();
        assert_eq!(
            open_at(&root, "web/secrets/token", 0)
                .unwrap_err()
                .to_string(),
            "Reading secret file prohibited: web/secrets/token"
        );
        let names: Vec<String> = list(&root, "/")
            .unwrap()
            .into_iter()
            .map(|f| f.name)
            .collect();
        assert_eq!(names, ["alloc", "web"]);
        assert!(matches!(
            open_at(&root, ".herder-alloc.json", 0),
            Err(FsError::NotFound { .. })
        ));
    }

    #[test]
    fn stat_and_list_answer_nomads_file_info() {
        let (_tmp, root) = alloc_dir();
        let info = stat(&root, "web/local/out.txt").unwrap();
        assert_eq!(info.name, "out.txt");
        assert_eq!((info.is_dir, info.size), (false, 6));
        assert_eq!(info.content_type, "text/plain; charset=utf-8");
        assert!(info.file_mode.starts_with('-') && info.file_mode.len() == 10);
        assert!(info.mod_time.ends_with('Z') && info.mod_time.contains('T'));
        let json = serde_json::to_value(&info).unwrap();
        for key in [
            "Name",
            "IsDir",
            "Size",
            "FileMode",
            "ModTime",
            "ContentType",
        ] {
            assert!(json.get(key).is_some(), "{key} in {json}");
        }
        let dir = stat(&root, "web").unwrap();
        assert!(dir.is_dir && dir.file_mode.starts_with('d'));
        let listed = list(&root, "web").unwrap();
        assert_eq!(listed.len(), 2);
        assert!(serde_json::to_value(&listed[0])
            .unwrap()
            .get("ContentType")
            .is_none());
    }

    #[test]
    fn reads_start_at_the_offset_and_stop_at_the_limit() {
        let (_tmp, root) = alloc_dir();
        let mut f = open_at(&root, "web/local/out.txt", 2).unwrap();
        assert_eq!(read_chunk(&mut f, 2).unwrap(), b"ll");
        assert_eq!(read_chunk(&mut f, 100).unwrap(), b"o\n");
        assert_eq!(read_chunk(&mut f, 100).unwrap(), b"");
        let mut past = open_at(&root, "web/local/out.txt", 100).unwrap();
        assert_eq!(read_chunk(&mut past, 10).unwrap(), b"");
    }

    #[test]
    fn content_is_sniffed_as_go_does_for_the_common_cases() {
        assert_eq!(sniff(b"plain text\n"), "text/plain; charset=utf-8");
        assert_eq!(sniff(b"\x7fELF\x02\x01"), "application/octet-stream");
        assert_eq!(sniff(b"\x00\x01\x02"), "application/octet-stream");
        assert_eq!(sniff(b"\x1f\x8b\x08\x00"), "application/x-gzip");
        assert_eq!(sniff(b"  <html><body>"), "text/html; charset=utf-8");
    }
}
