//! The keyring's cryptography (Nomad's `nomad/encrypter.go`): new root
//! keys from the system's CSPRNG, and variables' items sealed and opened
//! with AES-256-GCM (ring's implementation, already built for rustls).
//!
//! Each sealing draws a fresh random 96-bit nonce; the variable's
//! namespace and path are the additional authenticated data, so sealed
//! items moved to another variable's row do not open. Key material lives
//! only in `RootKey::key`, whose Debug output is redacted, and in the
//! ring key built for one call; nothing here logs.

use herder::structs::variable::ALGORITHM_AES256_GCM;
use herder::structs::{EncryptedData, KeyMaterial, RootKey, RootKeyMeta, RootKeyState};
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};
use std::collections::BTreeMap;

/// Why sealing or opening failed. Never carries key bytes or plaintext.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KeyringError {
    #[error("the system's random number generator failed")]
    Random,
    #[error("root key {0} is not a valid AES-256 key")]
    BadKey(String),
    #[error("variable data sealed with key {0} could not be decrypted")]
    Open(String),
    #[error("variable items could not be encoded: {0}")]
    Encode(String),
}

/// A fresh active root key, 32 random bytes under a random ID, dated
/// `now` (unix nanoseconds).
pub fn new_root_key(now: i64) -> Result<RootKey, KeyringError> {
    let rng = SystemRandom::new();
    let mut material = vec![0u8; 32];
    rng.fill(&mut material).map_err(|_| KeyringError::Random)?;
    let mut id = [0u8; 16];
    rng.fill(&mut id).map_err(|_| KeyringError::Random)?;
    Ok(RootKey {
        meta: RootKeyMeta {
            key_id: uuid::Builder::from_random_bytes(id).into_uuid().to_string(),
            algorithm: ALGORITHM_AES256_GCM.to_string(),
            create_time: now,
            state: RootKeyState::Active,
            ..Default::default()
        },
        key: KeyMaterial(material),
    })
}

/// Seals `items` of the variable at (`namespace`, `path`) under `key`.
pub fn seal(
    key: &RootKey,
    namespace: &str,
    path: &str,
    items: &BTreeMap<String, String>,
) -> Result<EncryptedData, KeyringError> {
    let mut buffer = serde_json::to_vec(items).map_err(|e| KeyringError::Encode(e.to_string()))?;
    let mut nonce = [0u8; NONCE_LEN];
    SystemRandom::new()
        .fill(&mut nonce)
        .map_err(|_| KeyringError::Random)?;
    cipher(key)?
        .seal_in_place_append_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(aad(namespace, path)),
            &mut buffer,
        )
        .map_err(|_| KeyringError::BadKey(key.meta.key_id.clone()))?;
    Ok(EncryptedData {
        key_id: key.meta.key_id.clone(),
        nonce: nonce.to_vec(),
        ciphertext: buffer,
    })
}

/// Opens what [`seal`] sealed for the same variable under the same key.
pub fn open(
    key: &RootKey,
    namespace: &str,
    path: &str,
    data: &EncryptedData,
) -> Result<BTreeMap<String, String>, KeyringError> {
    let failed = || KeyringError::Open(data.key_id.clone());
    let nonce = Nonce::try_assume_unique_for_key(&data.nonce).map_err(|_| failed())?;
    let mut buffer = data.ciphertext.clone();
    let plain = cipher(key)?
        .open_in_place(nonce, Aad::from(aad(namespace, path)), &mut buffer)
        .map_err(|_| failed())?;
    serde_json::from_slice(plain).map_err(|_| failed())
}

fn cipher(key: &RootKey) -> Result<LessSafeKey, KeyringError> {
    UnboundKey::new(&AES_256_GCM, &key.key.0)
        .map(LessSafeKey::new)
        .map_err(|_| KeyringError::BadKey(key.meta.key_id.clone()))
}

/// The variable's identity, bound to its sealed items.
fn aad(namespace: &str, path: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(namespace.len() + path.len() + 1);
    out.extend_from_slice(namespace.as_bytes());
    out.push(0);
    out.extend_from_slice(path.as_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items() -> BTreeMap<String, String> {
        BTreeMap::from([("password".to_string(), "hunter2-secret".to_string())])
    }

    #[test]
    fn sealed_items_open_under_their_key_and_hide_the_plaintext() {
        let key = new_root_key(1).unwrap();
        assert_eq!(key.key.0.len(), 32);
        let data = seal(&key, "default", "app/db", &items()).unwrap();
        assert_eq!(data.key_id, key.meta.key_id);
        assert_eq!(data.nonce.len(), 12);
        let needle = b"hunter2-secret";
        assert!(!data.ciphertext.windows(needle.len()).any(|w| w == needle));
        assert_eq!(open(&key, "default", "app/db", &data).unwrap(), items());
    }

    #[test]
    fn each_sealing_draws_a_new_nonce() {
        let key = new_root_key(1).unwrap();
        let a = seal(&key, "default", "p", &items()).unwrap();
        let b = seal(&key, "default", "p", &items()).unwrap();
        assert_ne!(a.nonce, b.nonce);
        assert_ne!(a.ciphertext, b.ciphertext);
    }

    #[test]
    fn the_wrong_key_or_another_variable_does_not_open() {
        let key = new_root_key(1).unwrap();
        let other = new_root_key(2).unwrap();
        assert_ne!(key.meta.key_id, other.meta.key_id);
        let data = seal(&key, "default", "app/db", &items()).unwrap();
        assert!(matches!(
            open(&other, "default", "app/db", &data),
            Err(KeyringError::Open(_))
        ));
        assert!(open(&key, "default", "app/other", &data).is_err());
        assert!(open(&key, "prod", "app/db", &data).is_err());
        let mut tampered = data.clone();
        tampered.ciphertext[0] ^= 1;
        assert!(open(&key, "default", "app/db", &tampered).is_err());
    }
}
