//! The operator snapshot's container, in Nomad's layout so that Nomad's
//! own `operator snapshot save|inspect` handle herder's files: a gzip'ed
//! tar of `meta.json` (hashicorp/raft's `SnapshotMeta`: Version, ID,
//! Index, Term, Size, ...), `state.bin` (the state) and `SHA256SUMS`
//! (one `<hex>  <name>` line per other member).
//!
//! Only the container is Nomad's: `state.bin` holds herder's own state
//! checkpoint (the store's archive), not Nomad's msgpack FSM stream, so a
//! snapshot moves between herder servers, not between herder and Nomad.
//!
//! Reading checks everything before anyone acts on the contents: the
//! unpacked size is bounded (a small gzip bomb cannot fill memory), the
//! gzip trailer's CRC and the tar structure must hold, exactly the three
//! members must be there once each, every checksum must match, meta.json
//! must parse with a version this build reads, and its Size must be
//! state.bin's. The server's HTTP side and the CLI's `inspect` share it.

use base64::Engine;
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::io::Read;

pub const META_FILE: &str = "meta.json";
pub const STATE_FILE: &str = "state.bin";
pub const SUMS_FILE: &str = "SHA256SUMS";

/// The snapshot format version written and read: hashicorp/raft's
/// `SnapshotVersionMax`, the one Nomad writes.
pub const SNAPSHOT_VERSION: u32 = 1;

/// meta.json: hashicorp/raft's `SnapshotMeta` in its JSON field names.
/// `Peers`, `Configuration` and `ConfigurationIndex` are written empty
/// (the state, not the membership, is what a restore replaces) and
/// ignored on read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct SnapshotMeta {
    pub version: u32,
    #[serde(rename = "ID")]
    pub id: String,
    pub index: u64,
    pub term: u64,
    #[serde(default)]
    pub peers: Option<String>,
    #[serde(default = "empty_configuration")]
    pub configuration: serde_json::Value,
    #[serde(default)]
    pub configuration_index: u64,
    /// Bytes of state.bin.
    pub size: u64,
}

fn empty_configuration() -> serde_json::Value {
    serde_json::json!({ "Servers": [] })
}

impl SnapshotMeta {
    /// The meta of a state taken at `index` in Raft `term` (0 without
    /// Raft), `size` bytes long; the ID is raft's `term-index-millis`.
    pub fn new(index: u64, term: u64, size: u64, unix_millis: u128) -> SnapshotMeta {
        SnapshotMeta {
            version: SNAPSHOT_VERSION,
            id: format!("{term}-{index}-{unix_millis}"),
            index,
            term,
            peers: None,
            configuration: empty_configuration(),
            configuration_index: 0,
            size,
        }
    }
}

/// A snapshot file, checked and unpacked.
#[derive(Debug)]
pub struct Archive {
    pub meta: SnapshotMeta,
    pub state: Vec<u8>,
}

/// Why a file is not a snapshot this build can use; each names what is
/// wrong in words an operator can act on.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    #[error("the snapshot is not a readable gzip stream (truncated or corrupted?): {0}")]
    Gzip(std::io::Error),
    #[error("the snapshot unpacks to more than {limit} bytes (limits.snapshot_max_bytes)")]
    TooLarge { limit: u64 },
    #[error("the snapshot's tar archive is malformed: {0}")]
    Tar(std::io::Error),
    #[error("unexpected file {0:?} in snapshot")]
    Unexpected(String),
    #[error("the snapshot holds {0} twice")]
    Duplicate(String),
    #[error("the snapshot has no {0}")]
    Missing(&'static str),
    #[error("failed checking integrity of snapshot: {0}")]
    Integrity(String),
    #[error("failed to decode snapshot metadata: {0}")]
    Meta(serde_json::Error),
    #[error(
        "snapshot format version {found} is not one this build reads (version {SNAPSHOT_VERSION})"
    )]
    Version { found: u32 },
    #[error("meta.json says state.bin is {declared} bytes, it is {actual}")]
    Size { declared: u64, actual: u64 },
    #[error("writing the snapshot: {0}")]
    Write(std::io::Error),
}

/// Packs `state` with `meta` (whose Size must be `state.len()`).
pub fn write(meta: &SnapshotMeta, state: &[u8]) -> Result<Vec<u8>, ArchiveError> {
    let mut meta_json = serde_json::to_vec(meta).map_err(ArchiveError::Meta)?;
    meta_json.push(b'\n');
    let sums = format!(
        "{}  {META_FILE}\n{}  {STATE_FILE}\n",
        hex_sha256(&meta_json),
        hex_sha256(state)
    );
    let mtime = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let gzip = GzEncoder::new(Vec::new(), flate2::Compression::default());
    let mut tar = tar::Builder::new(gzip);
    for (name, data) in [
        (META_FILE, &meta_json[..]),
        (STATE_FILE, state),
        (SUMS_FILE, sums.as_bytes()),
    ] {
        let mut header = tar::Header::new_ustar();
        header.set_size(data.len() as u64);
        header.set_mode(0o600);
        header.set_mtime(mtime);
        tar.append_data(&mut header, name, data)
            .map_err(ArchiveError::Write)?;
    }
    let gzip = tar.into_inner().map_err(ArchiveError::Write)?;
    gzip.finish().map_err(ArchiveError::Write)
}

/// Unpacks and checks a snapshot file (see the module comment), holding
/// at most `max_unpacked` bytes.
pub fn read(file: &[u8], max_unpacked: u64) -> Result<Archive, ArchiveError> {
    let mut unpacked = Vec::new();
    GzDecoder::new(file)
        .take(max_unpacked.saturating_add(1))
        .read_to_end(&mut unpacked)
        .map_err(ArchiveError::Gzip)?;
    if unpacked.len() as u64 > max_unpacked {
        return Err(ArchiveError::TooLarge {
            limit: max_unpacked,
        });
    }
    let members = tar_members(&unpacked)?;
    let member = |name: &'static str| {
        members
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, data)| data)
            .ok_or(ArchiveError::Missing(name))
    };
    let (meta_json, state, sums) = (member(META_FILE)?, member(STATE_FILE)?, member(SUMS_FILE)?);
    verify_sums(sums, &[(META_FILE, meta_json), (STATE_FILE, state)])?;
    let meta: SnapshotMeta = serde_json::from_slice(meta_json).map_err(ArchiveError::Meta)?;
    if meta.version != SNAPSHOT_VERSION {
        return Err(ArchiveError::Version {
            found: meta.version,
        });
    }
    if meta.size != state.len() as u64 {
        return Err(ArchiveError::Size {
            declared: meta.size,
            actual: state.len() as u64,
        });
    }
    let state = state.clone();
    Ok(Archive { meta, state })
}

/// Every member of a tar archive by name; only the snapshot's three, once.
fn tar_members(tar_bytes: &[u8]) -> Result<Vec<(String, Vec<u8>)>, ArchiveError> {
    let mut archive = tar::Archive::new(tar_bytes);
    let mut members: Vec<(String, Vec<u8>)> = Vec::new();
    for entry in archive.entries().map_err(ArchiveError::Tar)? {
        let mut entry = entry.map_err(ArchiveError::Tar)?;
        let name = entry
            .path()
            .map_err(ArchiveError::Tar)?
            .to_string_lossy()
            .into_owned();
        if ![META_FILE, STATE_FILE, SUMS_FILE].contains(&name.as_str()) {
            return Err(ArchiveError::Unexpected(name));
        }
        if members.iter().any(|(n, _)| *n == name) {
            return Err(ArchiveError::Duplicate(name));
        }
        let mut data = Vec::new();
        entry.read_to_end(&mut data).map_err(ArchiveError::Tar)?;
        members.push((name, data));
    }
    Ok(members)
}

/// SHA256SUMS must list every member once with its sum, and nothing else.
fn verify_sums(sums: &[u8], members: &[(&str, &Vec<u8>)]) -> Result<(), ArchiveError> {
    let text = std::str::from_utf8(sums)
        .map_err(|_| ArchiveError::Integrity("SHA256SUMS is not text".into()))?;
    let mut seen = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let Some((sum, name)) = line.split_once("  ") else {
            return Err(ArchiveError::Integrity(format!(
                "SHA256SUMS line {line:?} is not `<sha256>  <file>`"
            )));
        };
        let Some((_, data)) = members.iter().find(|(n, _)| *n == name) else {
            return Err(ArchiveError::Integrity(format!(
                "SHA256SUMS lists {name:?}, which the snapshot does not hold"
            )));
        };
        if !sum.eq_ignore_ascii_case(&hex_sha256(data)) {
            return Err(ArchiveError::Integrity(format!(
                "hash check failed for {name:?}"
            )));
        }
        seen.push(name);
    }
    match members.iter().find(|(n, _)| !seen.contains(n)) {
        Some((name, _)) => Err(ArchiveError::Integrity(format!(
            "SHA256SUMS has no sum for {name:?}"
        ))),
        None => Ok(()),
    }
}

fn hex_sha256(data: &[u8]) -> String {
    Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The `Digest` header of a snapshot file: `sha-256=<base64 of its SHA-256>`,
/// which Nomad's API client checks a saved file against.
pub fn digest_header(file: &[u8]) -> String {
    let sum = Sha256::digest(file);
    format!(
        "sha-256={}",
        base64::engine::general_purpose::STANDARD.encode(sum)
    )
}

/// Checks a file against the `Digest` header it came with.
pub fn check_digest(header: &str, file: &[u8]) -> Result<(), ArchiveError> {
    if header.trim() == digest_header(file) {
        Ok(())
    } else {
        Err(ArchiveError::Integrity(format!(
            "the file does not match its Digest header {header:?} (truncated in transit?)"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: u64 = 1 << 20;

    fn sample() -> Vec<u8> {
        let state = b"herder state bytes".repeat(100);
        write(
            &SnapshotMeta::new(42, 3, state.len() as u64, 1_700_000_000_000),
            &state,
        )
        .unwrap()
    }

    #[test]
    fn a_written_snapshot_reads_back_with_its_meta() {
        let archive = read(&sample(), LIMIT).unwrap();
        assert_eq!(archive.meta.index, 42);
        assert_eq!(archive.meta.term, 3);
        assert_eq!(archive.meta.version, 1);
        assert_eq!(archive.meta.id, "3-42-1700000000000");
        assert_eq!(archive.state, b"herder state bytes".repeat(100));
    }

    #[test]
    fn truncated_flipped_foreign_and_oversized_files_are_refused() {
        let file = sample();
        assert!(matches!(
            read(&file[..file.len() - 9], LIMIT),
            Err(ArchiveError::Gzip(_))
        ));
        let mut flipped = file.clone();
        let middle = flipped.len() / 2;
        flipped[middle] ^= 0x01;
        assert!(read(&flipped, LIMIT).is_err());
        assert!(matches!(
            read(b"{\"not\": \"a snapshot\"}", LIMIT),
            Err(ArchiveError::Gzip(_))
        ));
        assert!(matches!(
            read(&file, 100),
            Err(ArchiveError::TooLarge { limit: 100 })
        ));
    }

    #[test]
    fn a_member_changed_after_its_sum_was_taken_fails_the_integrity_check() {
        let state = b"abc".to_vec();
        let meta = SnapshotMeta::new(1, 0, 3, 0);
        let file = write(&meta, &state).unwrap();
        let Archive { .. } = read(&file, LIMIT).unwrap();
        // Rebuild the tar with state.bin replaced but the old SHA256SUMS.
        let mut unpacked = Vec::new();
        GzDecoder::new(&file[..])
            .read_to_end(&mut unpacked)
            .unwrap();
        let members = tar_members(&unpacked).unwrap();
        let gzip = GzEncoder::new(Vec::new(), flate2::Compression::default());
        let mut tar = tar::Builder::new(gzip);
        for (name, data) in members {
            let data = if name == STATE_FILE {
                b"abd".to_vec()
            } else {
                data
            };
            let mut header = tar::Header::new_ustar();
            header.set_size(data.len() as u64);
            tar.append_data(&mut header, name, &data[..]).unwrap();
        }
        let forged = tar.into_inner().unwrap().finish().unwrap();
        let refused = read(&forged, LIMIT).unwrap_err().to_string();
        assert!(
            refused.contains("hash check failed for \"state.bin\""),
            "{refused}"
        );
    }

    #[test]
    fn the_digest_header_is_base64_sha256_and_catches_a_changed_file() {
        let file = sample();
        let header = digest_header(&file);
        assert!(header.starts_with("sha-256="));
        assert_eq!(header.len(), "sha-256=".len() + 44);
        assert!(check_digest(&header, &file).is_ok());
        assert!(check_digest(&header, &file[1..]).is_err());
    }
}
