//! A task's `artifact` blocks: files fetched into its directory before it
//! starts, as Nomad's go-getter does for http(s) and local sources.
//!
//! A download goes to a temporary file in the task directory (bounded in
//! size), is checked against its `checksum` option (md5, sha1, sha256,
//! sha512), then either moved into place or, for a `.tar`, `.tar.gz`/`.tgz`
//! or `.zip` (unless `archive = "false"`), unpacked into the destination.
//! Everything written stays inside the destination: archive entries with
//! `..`, absolute paths, links that point out, or hard links are refused,
//! and the destination itself is confined to the task directory (a server
//! validated it; the client checks again because it must not trust one
//! with its disk). Network failures are retried with a backoff.

use herder::structs::task_files::{getter_mode, parse_checksum, ChecksumKind};
use herder::structs::TaskArtifact;
use sha2::Digest as _;
use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

/// How much one artifact may cost the node.
#[derive(Clone, Copy, Debug)]
pub struct ArtifactLimits {
    /// The download itself.
    pub max_download_bytes: u64,
    /// All the files an archive unpacks to, together.
    pub max_unpacked_bytes: u64,
    pub max_entries: u64,
    /// Tries of a download that failed on the network or with a 5xx.
    pub attempts: u32,
    pub first_backoff: Duration,
}

impl Default for ArtifactLimits {
    fn default() -> Self {
        ArtifactLimits {
            max_download_bytes: 2 << 30,
            max_unpacked_bytes: 8 << 30,
            max_entries: 100_000,
            attempts: 3,
            first_backoff: Duration::from_secs(1),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    #[error("{0}")]
    Fetch(String),
    #[error("bad response code: {0}")]
    Status(u16),
    #[error("checksums did not match: expected {kind} {expected}, got {got}")]
    Checksum {
        kind: &'static str,
        expected: String,
        got: String,
    },
    #[error("{0}")]
    Refused(String),
    #[error("{0}")]
    Io(#[from] io::Error),
}

impl ArtifactError {
    /// Whether another try may succeed (the network or the server failed).
    fn retryable(&self) -> bool {
        match self {
            ArtifactError::Fetch(_) => true,
            ArtifactError::Status(code) => *code >= 500 || *code == 429,
            _ => false,
        }
    }
}

/// Where an artifact comes from.
#[derive(Debug, PartialEq, Eq)]
enum Source {
    Http(String),
    File(PathBuf),
}

/// Fetches one artifact (its fields already interpolated) into `task_dir`.
/// Blocking: runs on the blocking pool.
pub fn fetch(
    artifact: &TaskArtifact,
    task_dir: &Path,
    limits: &ArtifactLimits,
) -> Result<(), ArtifactError> {
    let source = parse_source(&artifact.getter_source, task_dir)?;
    let checksum = match artifact.getter_options.get("checksum") {
        Some(c) => Some(parse_checksum(c).map_err(ArtifactError::Refused)?),
        None => None,
    };
    let dest = confined(task_dir, &artifact.relative_dest)?;
    let name = source_file_name(&source);
    std::fs::create_dir_all(task_dir)?;
    if let Source::File(path) = &source {
        if path.is_dir() {
            return copy_dir(path, &dest, limits);
        }
    }
    let tmp = task_dir.join(format!(".herder-artifact-{}", uuid::Uuid::new_v4()));
    let result = download_verified(&source, artifact, &tmp, checksum.as_ref(), limits)
        .and_then(|()| place(&tmp, &dest, &name, artifact, limits));
    let _ = std::fs::remove_file(&tmp);
    result
}

fn download_verified(
    source: &Source,
    artifact: &TaskArtifact,
    tmp: &Path,
    checksum: Option<&(ChecksumKind, Vec<u8>)>,
    limits: &ArtifactLimits,
) -> Result<(), ArtifactError> {
    let mut backoff = limits.first_backoff;
    let mut attempt = 1;
    loop {
        match download(source, &artifact.getter_headers, tmp, limits) {
            Err(e) if e.retryable() && attempt < limits.attempts => {
                tracing::warn!(source = %artifact.getter_source, attempt, error = %e, "artifact download failed; retrying");
                std::thread::sleep(backoff);
                backoff *= 2;
                attempt += 1;
            }
            other => break other,
        }
    }?;
    if let Some((kind, expected)) = checksum {
        verify(tmp, *kind, expected)?;
    }
    Ok(())
}

fn parse_source(raw: &str, task_dir: &Path) -> Result<Source, ArtifactError> {
    // go-getter's forced getter: `http::https://...`, `file::/path`.
    let (forced, rest) = match raw.split_once("::") {
        Some((f, rest)) if !f.contains('/') => (Some(f), rest),
        _ => (None, raw),
    };
    let unsupported = || {
        ArtifactError::Refused(format!(
            "unsupported artifact source {raw:?} (herder fetches http, https and file sources)"
        ))
    };
    match forced {
        Some("http" | "https") | None
            if rest.starts_with("http://") || rest.starts_with("https://") =>
        {
            Ok(Source::Http(rest.to_string()))
        }
        Some("file") | None => {
            let path = rest.strip_prefix("file://").unwrap_or(rest);
            if path.contains("://") {
                return Err(unsupported());
            }
            Ok(Source::File(task_dir.join(path)))
        }
        _ => Err(unsupported()),
    }
}

/// The last path segment of the source, without query or fragment.
fn source_file_name(source: &Source) -> String {
    let text = match source {
        Source::Http(u) => u.split(['?', '#']).next().unwrap_or("").to_string(),
        Source::File(p) => p.to_string_lossy().into_owned(),
    };
    text.rsplit('/')
        .find(|s| !s.is_empty())
        .unwrap_or("artifact")
        .to_string()
}

/// `rel` under `task_dir`, refused if it climbs out of the task's
/// allocation directory (`../alloc/x` is the shared directory and allowed,
/// as in Nomad).
fn confined(task_dir: &Path, rel: &str) -> Result<PathBuf, ArtifactError> {
    if herder::structs::task_files::path_escapes_alloc_dir("task", rel) {
        return Err(ArtifactError::Refused(format!(
            "destination {rel:?} escapes the allocation directory"
        )));
    }
    let mut out = task_dir.to_path_buf();
    for part in Path::new(rel).components() {
        match part {
            Component::Normal(p) => out.push(p),
            Component::ParentDir => {
                out.pop();
            }
            _ => {}
        }
    }
    Ok(out)
}

fn download(
    source: &Source,
    headers: &std::collections::BTreeMap<String, String>,
    tmp: &Path,
    limits: &ArtifactLimits,
) -> Result<(), ArtifactError> {
    let reader: Box<dyn Read> =
        match source {
            Source::Http(url) => {
                let agent = ureq::AgentBuilder::new()
                    .timeout_connect(Duration::from_secs(10))
                    .timeout_read(Duration::from_secs(60))
                    .build();
                let mut req = agent.get(url);
                for (k, v) in headers {
                    req = req.set(k, v);
                }
                match req.call() {
                    Ok(r) => Box::new(r.into_reader()),
                    Err(ureq::Error::Status(code, _)) => return Err(ArtifactError::Status(code)),
                    Err(e) => return Err(ArtifactError::Fetch(e.to_string())),
                }
            }
            Source::File(path) => Box::new(File::open(path).map_err(|e| {
                ArtifactError::Refused(format!("cannot open {}: {e}", path.display()))
            })?),
        };
    let mut out = File::create(tmp)?;
    let copied = io::copy(&mut reader.take(limits.max_download_bytes + 1), &mut out)
        .map_err(|e| ArtifactError::Fetch(e.to_string()))?;
    if copied > limits.max_download_bytes {
        return Err(ArtifactError::Refused(format!(
            "artifact is larger than {} bytes",
            limits.max_download_bytes
        )));
    }
    Ok(())
}

fn verify(file: &Path, kind: ChecksumKind, expected: &[u8]) -> Result<(), ArtifactError> {
    let got = digest_file(file, kind)?;
    if got != expected {
        return Err(ArtifactError::Checksum {
            kind: kind.name(),
            expected: hex(expected),
            got: hex(&got),
        });
    }
    Ok(())
}

/// A file's digest with the algorithm named.
pub fn digest_file(file: &Path, kind: ChecksumKind) -> io::Result<Vec<u8>> {
    let mut f = File::open(file)?;
    fn run<D: sha2::Digest>(mut d: D, f: &mut File) -> io::Result<Vec<u8>> {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = f.read(&mut buf)?;
            if n == 0 {
                return Ok(d.finalize().to_vec());
            }
            d.update(&buf[..n]);
        }
    }
    match kind {
        ChecksumKind::Md5 => run(md5::Md5::new(), &mut f),
        ChecksumKind::Sha1 => run(sha1::Sha1::new(), &mut f),
        ChecksumKind::Sha256 => run(sha2::Sha256::new(), &mut f),
        ChecksumKind::Sha512 => run(sha2::Sha512::new(), &mut f),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Archive {
    Tar,
    TarGz,
    Zip,
}

fn archive_kind(name: &str) -> Option<Archive> {
    let lower = name.to_ascii_lowercase();
    if lower.ends_with(".tar.gz") || lower.ends_with(".tgz") {
        Some(Archive::TarGz)
    } else if lower.ends_with(".tar") {
        Some(Archive::Tar)
    } else if lower.ends_with(".zip") {
        Some(Archive::Zip)
    } else {
        None
    }
}

/// Moves the verified download into place: unpacked when it is an archive
/// (and not asked otherwise), else as `dest` (mode `file`) or as
/// `dest/<name>`.
fn place(
    tmp: &Path,
    dest: &Path,
    name: &str,
    artifact: &TaskArtifact,
    limits: &ArtifactLimits,
) -> Result<(), ArtifactError> {
    let unpack = artifact.getter_options.get("archive").map(String::as_str) != Some("false");
    let file_mode = artifact.getter_mode == getter_mode::FILE;
    match archive_kind(name).filter(|_| unpack && !file_mode) {
        Some(kind) => {
            std::fs::create_dir_all(dest)?;
            let mut budget = Budget::new(limits);
            match kind {
                Archive::Tar => untar(File::open(tmp)?, dest, &mut budget),
                Archive::TarGz => untar(
                    flate2::read::GzDecoder::new(File::open(tmp)?),
                    dest,
                    &mut budget,
                ),
                Archive::Zip => unzip(tmp, dest, &mut budget),
            }
        }
        None if artifact.getter_mode == getter_mode::DIR => Err(ArtifactError::Refused(format!(
            "mode \"dir\" needs an archive, and {name:?} is not one"
        ))),
        None => {
            let target = if file_mode {
                dest.to_path_buf()
            } else {
                dest.join(name)
            };
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::copy(tmp, &target)?;
            Ok(())
        }
    }
}

/// What an archive may still unpack.
struct Budget {
    bytes: u64,
    entries: u64,
}

impl Budget {
    fn new(limits: &ArtifactLimits) -> Self {
        Budget {
            bytes: limits.max_unpacked_bytes,
            entries: limits.max_entries,
        }
    }

    fn entry(&mut self) -> Result<(), ArtifactError> {
        self.entries = self
            .entries
            .checked_sub(1)
            .ok_or_else(|| ArtifactError::Refused("archive has too many entries".into()))?;
        Ok(())
    }

    /// Copies `from` to a new file at `to`, charging its bytes.
    fn copy(&mut self, from: &mut dyn Read, to: &Path) -> Result<(), ArtifactError> {
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let mut out = File::create(to)?;
        let copied = io::copy(&mut from.take(self.bytes + 1), &mut out)?;
        out.flush()?;
        self.bytes = self.bytes.checked_sub(copied).ok_or_else(|| {
            ArtifactError::Refused("archive unpacks to more bytes than allowed".into())
        })?;
        Ok(())
    }
}

/// An archive entry's path as a plain relative path, or why not.
fn entry_path(raw: &Path) -> Result<PathBuf, ArtifactError> {
    let mut out = PathBuf::new();
    for part in raw.components() {
        match part {
            Component::Normal(p) => out.push(p),
            Component::CurDir => {}
            _ => {
                return Err(ArtifactError::Refused(format!(
                    "archive entry {:?} would be written outside the destination",
                    raw.display().to_string()
                )))
            }
        }
    }
    Ok(out)
}

/// Whether a symbolic link at `entry` (relative to the destination) pointing
/// at `target` stays inside the destination.
fn link_stays_inside(entry: &Path, target: &Path) -> bool {
    if target.is_absolute() {
        return false;
    }
    let mut depth = entry.components().count() as i64 - 1;
    for part in target.components() {
        match part {
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
            Component::ParentDir => {
                depth -= 1;
                if depth < 0 {
                    return false;
                }
            }
            _ => return false,
        }
    }
    true
}

fn untar(reader: impl Read, dest: &Path, budget: &mut Budget) -> Result<(), ArtifactError> {
    let mut archive = tar::Archive::new(reader);
    for entry in archive.entries()? {
        let mut entry = entry?;
        budget.entry()?;
        let rel = entry_path(&entry.path()?)?;
        if rel.as_os_str().is_empty() {
            continue;
        }
        let target = dest.join(&rel);
        let kind = entry.header().entry_type();
        if kind.is_dir() {
            std::fs::create_dir_all(&target)?;
        } else if kind.is_symlink() {
            let link = entry
                .link_name()?
                .map(|l| l.into_owned())
                .unwrap_or_default();
            if !link_stays_inside(&rel, &link) {
                return Err(ArtifactError::Refused(format!(
                    "archive link {:?} points outside the destination",
                    rel.display().to_string()
                )));
            }
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::os::unix::fs::symlink(&link, &target)?;
        } else if kind.is_file() || kind == tar::EntryType::Continuous {
            refuse_through_links(dest, &rel)?;
            budget.copy(&mut entry, &target)?;
            if let Ok(mode) = entry.header().mode() {
                set_mode(&target, mode & 0o777)?;
            }
        } else {
            return Err(ArtifactError::Refused(format!(
                "archive entry {:?} is a {kind:?}, which herder does not unpack",
                rel.display().to_string()
            )));
        }
    }
    Ok(())
}

/// A file entry must not be written through a link an earlier entry made
/// (links stay inside, but a later entry could reuse one to replace a file
/// the link names): every parent must be a real directory.
fn refuse_through_links(dest: &Path, rel: &Path) -> Result<(), ArtifactError> {
    let mut at = dest.to_path_buf();
    for part in rel.components() {
        at.push(part);
        if std::fs::symlink_metadata(&at).is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(ArtifactError::Refused(format!(
                "archive entry {:?} is written through a link",
                rel.display().to_string()
            )));
        }
    }
    Ok(())
}

fn set_mode(path: &Path, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

fn unzip(file: &Path, dest: &Path, budget: &mut Budget) -> Result<(), ArtifactError> {
    let mut archive = zip::ZipArchive::new(File::open(file)?)
        .map_err(|e| ArtifactError::Refused(format!("not a zip archive: {e}")))?;
    for i in 0..archive.len() {
        budget.entry()?;
        let mut entry = archive
            .by_index(i)
            .map_err(|e| ArtifactError::Refused(format!("zip entry {i}: {e}")))?;
        let rel = entry_path(Path::new(entry.name()))?;
        if rel.as_os_str().is_empty() {
            continue;
        }
        let target = dest.join(&rel);
        let is_link = entry.unix_mode().is_some_and(|m| m & 0o170000 == 0o120000);
        if is_link {
            return Err(ArtifactError::Refused(format!(
                "zip entry {:?} is a link, which herder does not unpack",
                entry.name()
            )));
        }
        if entry.is_dir() {
            std::fs::create_dir_all(&target)?;
            continue;
        }
        refuse_through_links(dest, &rel)?;
        budget.copy(&mut entry, &target)?;
        if let Some(mode) = entry.unix_mode() {
            set_mode(&target, mode & 0o777)?;
        }
    }
    Ok(())
}

/// A local directory source is copied (regular files and directories
/// only), within the same budget as an archive.
fn copy_dir(from: &Path, to: &Path, limits: &ArtifactLimits) -> Result<(), ArtifactError> {
    let mut budget = Budget::new(limits);
    let mut stack = vec![(from.to_path_buf(), to.to_path_buf())];
    while let Some((src, dst)) = stack.pop() {
        std::fs::create_dir_all(&dst)?;
        for entry in std::fs::read_dir(&src)? {
            let entry = entry?;
            budget.entry()?;
            let kind = entry.file_type()?;
            let target = dst.join(entry.file_name());
            if kind.is_dir() {
                stack.push((entry.path(), target));
            } else if kind.is_file() {
                budget.copy(&mut File::open(entry.path())?, &target)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "artifact_tests.rs"]
mod tests;
