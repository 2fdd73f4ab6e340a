//! What every upgrade step shares: the meta row (its key, reading it,
//! writing it back at a new format version), the error a step fails with,
//! and how a raw key is printed in messages. Apart from `lib.rs`, which
//! runs the steps, so that the steps need nothing of it.

use serde_json::Value;

/// The key of the meta row (the same in every format).
pub const META_KEY: &[u8] = b"m";

/// The meta row's field holding the format version.
pub const FORMAT_VERSION_FIELD: &str = "FormatVersion";

#[derive(Debug, thiserror::Error)]
pub enum MigrationError {
    #[error("sled: {0}")]
    Sled(#[from] sled::Error),
    #[error("row {key} cannot be migrated: {reason}")]
    BadRow { key: String, reason: String },
    #[error("no upgrade path from format version {from} to {to}")]
    NoPath { from: u32, to: u32 },
}

/// A printable form of a raw key: the table prefix and the rest, as text
/// where it is text and hex where it is not.
pub fn describe_key(key: &[u8]) -> String {
    let Some((prefix, rest)) = key.split_first() else {
        return "<empty key>".to_string();
    };
    if matches!(prefix, b'a' | b'e' | b'n') && rest.len() == 16 {
        return format!("{}:{}", *prefix as char, uuid_text(rest));
    }
    if *prefix == b'a' && rest.len() == 24 {
        let (index, id) = rest.split_at(8);
        let mut be = [0u8; 8];
        be.copy_from_slice(index);
        return format!("a:{}/{}", u64::from_be_bytes(be), uuid_text(id));
    }
    let rest_text = match std::str::from_utf8(rest) {
        Ok(s) if !s.chars().any(|c| c.is_control() && c != '\0') => s.replace('\0', "/"),
        _ => rest.iter().map(|b| format!("{b:02x}")).collect(),
    };
    format!("{}:{}", *prefix as char, rest_text)
}

/// The 8-4-4-4-12 hex form of 16 UUID bytes.
fn uuid_text(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(36);
    for (i, b) in bytes.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            out.push('-');
        }
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// Reads the meta row as JSON.
pub(crate) fn read_meta(db: &sled::Db) -> Result<Value, MigrationError> {
    let raw = db.get(META_KEY)?.ok_or_else(|| MigrationError::BadRow {
        key: describe_key(META_KEY),
        reason: "the meta row is missing".into(),
    })?;
    serde_json::from_slice(&raw).map_err(|e| MigrationError::BadRow {
        key: describe_key(META_KEY),
        reason: e.to_string(),
    })
}

/// The meta row with its format version set to `version`.
pub(crate) fn meta_with_version(mut meta: Value, version: u32) -> Result<Vec<u8>, MigrationError> {
    let bad = |reason: &str| MigrationError::BadRow {
        key: describe_key(META_KEY),
        reason: reason.to_string(),
    };
    let object = meta
        .as_object_mut()
        .ok_or_else(|| bad("the meta row is not a JSON object"))?;
    object.insert(FORMAT_VERSION_FIELD.to_string(), Value::from(version));
    serde_json::to_vec(&meta).map_err(|e| bad(&e.to_string()))
}
