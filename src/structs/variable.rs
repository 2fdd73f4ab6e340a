//! Variables (Nomad 1.4+'s `nomad/structs/variables.go`): small maps of
//! secret strings under a path in a namespace, stored encrypted under a
//! root key of the keyring, and the root keys' metadata.
//!
//! Three shapes of a variable: [`VariableDecrypted`] is what users send
//! and read (`Items` in the clear), [`VariableEncrypted`] is the stored
//! row (the metadata and [`EncryptedData`]: the key's ID, a nonce and the
//! ciphertext; never the items), and [`VariableMetadata`] is what a list
//! answers. Encryption itself is the server's (`herder-server`'s
//! `keyring`): the core never sees key material used, only stored.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// The most a variable's items may weigh, encoded (Nomad's 64 KiB).
pub const MAX_VARIABLE_SIZE: usize = 64 * 1024;
/// The longest path (Nomad's 128 characters).
pub const MAX_PATH_LENGTH: usize = 128;
/// The reserved prefix of paths; only `nomad/jobs` and below may be used.
const RESERVED_PREFIX: &str = "nomad/";
const JOBS_PREFIX: &str = "nomad/jobs";

/// A variable's identity and bookkeeping (everything but its items).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct VariableMetadata {
    pub namespace: String,
    pub path: String,
    pub create_index: u64,
    pub modify_index: u64,
    /// Unix nanoseconds.
    pub create_time: i64,
    /// Unix nanoseconds.
    pub modify_time: i64,
    /// The lock held on the variable, if any (Nomad 1.7's locks).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lock: Option<VariableLock>,
}

/// A lock on a variable: held by whoever knows its ID until released or
/// until `TTL` passes without a renewal.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct VariableLock {
    #[serde(rename = "ID")]
    pub id: String,
    /// Go's duration text, as Nomad's API carries it ("15s").
    #[serde(rename = "TTL")]
    pub ttl: String,
    pub lock_delay: String,
    /// Unix nanoseconds after which the lock is free (TTL from the last
    /// acquire or renew); herder's own bookkeeping, kept in the row.
    #[serde(skip_serializing_if = "is_zero")]
    pub expires_at: i64,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

/// A variable as users write and read it: its items in the clear.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct VariableDecrypted {
    #[serde(flatten)]
    pub meta: VariableMetadata,
    pub items: BTreeMap<String, String>,
}

/// Never the items' values: a variable's Debug output must not leak them.
impl fmt::Debug for VariableDecrypted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VariableDecrypted")
            .field("meta", &self.meta)
            .field("items", &self.items.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// The stored form of a variable: its metadata and its encrypted items.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct VariableEncrypted {
    #[serde(flatten)]
    pub meta: VariableMetadata,
    pub data: EncryptedData,
}

/// Items sealed with AES-256-GCM under one root key.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct EncryptedData {
    /// The root key that sealed them.
    #[serde(rename = "KeyID")]
    pub key_id: String,
    /// The 96-bit nonce, unique per sealing.
    #[serde(with = "base64_bytes")]
    pub nonce: Vec<u8>,
    /// The sealed items (JSON of the map) with the GCM tag.
    #[serde(with = "base64_bytes")]
    pub ciphertext: Vec<u8>,
}

/// A root key's state in the keyring.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RootKeyState {
    /// The key new variables are sealed with (exactly one).
    #[default]
    Active,
    /// An older key: still opens what it sealed.
    Inactive,
    /// An older key nothing is sealed with any more after a full rotation.
    Deprecated,
}

impl RootKeyState {
    pub fn as_str(self) -> &'static str {
        match self {
            RootKeyState::Active => "active",
            RootKeyState::Inactive => "inactive",
            RootKeyState::Deprecated => "deprecated",
        }
    }
}

/// What the keyring API shows of a root key (Nomad's `RootKeyMeta`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct RootKeyMeta {
    #[serde(rename = "KeyID")]
    pub key_id: String,
    pub algorithm: String,
    /// Unix nanoseconds.
    pub create_time: i64,
    pub create_index: u64,
    pub modify_index: u64,
    pub state: RootKeyState,
}

/// The algorithm every root key uses.
pub const ALGORITHM_AES256_GCM: &str = "aes256-gcm";

/// A root key with its material, as the state replicates it.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct RootKey {
    #[serde(flatten)]
    pub meta: RootKeyMeta,
    pub key: KeyMaterial,
}

impl fmt::Debug for RootKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RootKey")
            .field("meta", &self.meta)
            .field("key", &self.key)
            .finish()
    }
}

/// The 32 bytes of an AES-256 key. Its Debug output is redacted so that a
/// logged command or row never shows it.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct KeyMaterial(#[serde(with = "base64_bytes")] pub Vec<u8>);

impl fmt::Debug for KeyMaterial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeyMaterial(<{} bytes redacted>)", self.0.len())
    }
}

/// Why a variable was refused, in Nomad's words where it has them.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VariableError {
    #[error("variable requires path")]
    NoPath,
    #[error("invalid path {0:?}")]
    InvalidPath(String),
    #[error("path \"nomad/\" is reserved; only \"nomad/jobs\" and below may be used")]
    ReservedPath,
    #[error("variable missing Items")]
    NoItems,
    #[error("variable cannot contain empty keys")]
    EmptyKey,
    #[error("variables are limited to {MAX_VARIABLE_SIZE} bytes; this one is {0}")]
    TooLarge(usize),
}

/// Nomad's path rules: 1 to 128 of `[a-zA-Z0-9-_~/]`, no `..` and no
/// empty segment at either end, the `nomad/` prefix reserved but for
/// `nomad/jobs` and below.
pub fn validate_path(path: &str) -> Result<(), VariableError> {
    if path.is_empty() {
        return Err(VariableError::NoPath);
    }
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '~' | '/');
    if path.len() > MAX_PATH_LENGTH
        || !path.chars().all(allowed)
        || path.contains("..")
        || path.starts_with('/')
        || path.ends_with('/')
    {
        return Err(VariableError::InvalidPath(path.to_string()));
    }
    if path == "nomad" {
        return Err(VariableError::ReservedPath);
    }
    if path.starts_with(RESERVED_PREFIX) {
        let jobs = path == JOBS_PREFIX || path.starts_with("nomad/jobs/");
        if !jobs {
            return Err(VariableError::ReservedPath);
        }
    }
    Ok(())
}

impl VariableDecrypted {
    /// The path rules and the items' presence and size, before anything is
    /// sealed.
    pub fn validate(&self) -> Result<(), VariableError> {
        validate_path(&self.meta.path)?;
        if self.items.is_empty() {
            return Err(VariableError::NoItems);
        }
        if self.items.keys().any(String::is_empty) {
            return Err(VariableError::EmptyKey);
        }
        let size = self.items_size();
        if size > MAX_VARIABLE_SIZE {
            return Err(VariableError::TooLarge(size));
        }
        Ok(())
    }

    /// The bytes the items weigh: keys and values.
    pub fn items_size(&self) -> usize {
        self.items.iter().map(|(k, v)| k.len() + v.len()).sum()
    }
}

/// Byte strings as base64 text in JSON (as Go encodes `[]byte`).
mod base64_bytes {
    use base64::Engine;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        base64::engine::general_purpose::STANDARD
            .decode(text.as_bytes())
            .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_rules_follow_nomads() {
        for good in [
            "a",
            "example/first",
            "nomad/jobs",
            "nomad/jobs/web/db",
            "a-b_c~d",
        ] {
            assert_eq!(validate_path(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "a b",
            "a/../b",
            "/a",
            "a/",
            "ä",
            "a.b",
            &"x".repeat(129),
        ] {
            assert!(validate_path(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            validate_path("nomad/other"),
            Err(VariableError::ReservedPath)
        );
        assert_eq!(validate_path("nomad"), Err(VariableError::ReservedPath));
        assert_eq!(
            validate_path("nomad/jobsx"),
            Err(VariableError::ReservedPath)
        );
        assert_eq!(validate_path(&"x".repeat(128)), Ok(()));
    }

    #[test]
    fn items_are_required_bounded_and_hidden_from_debug() {
        let mut v = VariableDecrypted {
            meta: VariableMetadata {
                path: "app/db".into(),
                ..Default::default()
            },
            ..Default::default()
        };
        assert_eq!(v.validate(), Err(VariableError::NoItems));
        v.items.insert("password".into(), "hunter2".into());
        assert_eq!(v.validate(), Ok(()));
        assert!(!format!("{v:?}").contains("hunter2"));
        v.items.insert("big".into(), "x".repeat(MAX_VARIABLE_SIZE));
        assert!(matches!(v.validate(), Err(VariableError::TooLarge(_))));
    }

    #[test]
    fn key_material_never_shows_in_debug_and_round_trips_as_base64() {
        let key = RootKey {
            meta: RootKeyMeta {
                key_id: "k1".into(),
                ..Default::default()
            },
            key: KeyMaterial(vec![0xAB; 32]),
        };
        let debug = format!("{key:?}");
        assert!(debug.contains("redacted"), "{debug}");
        assert!(!debug.contains("171"), "{debug}");
        let json = serde_json::to_string(&key).unwrap();
        assert!(json.contains(r#""KeyID":"k1""#), "{json}");
        assert!(json.contains(r#""State":"active""#), "{json}");
        let back: RootKey = serde_json::from_str(&json).unwrap();
        assert_eq!(back, key);
    }

    #[test]
    fn the_wire_shape_has_nomads_names() {
        let v = VariableDecrypted {
            meta: VariableMetadata {
                namespace: "default".into(),
                path: "a/b".into(),
                create_index: 3,
                ..Default::default()
            },
            items: BTreeMap::from([("k".into(), "v".into())]),
        };
        let json = serde_json::to_value(&v).unwrap();
        assert_eq!(json["Path"], "a/b");
        assert_eq!(json["Namespace"], "default");
        assert_eq!(json["CreateIndex"], 3);
        assert_eq!(json["Items"]["k"], "v");
        assert!(json.get("Lock").is_none());
    }
}
