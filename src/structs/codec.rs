//! A small binary codec: the building blocks of herder's compact
//! encodings (allocation rows on disk, allocation metrics in memory).
//!
//! Varints (LEB128) for counts and indexes, zigzag for signed numbers, raw
//! little-endian floats and 16-byte IDs, length-prefixed strings, and JSON
//! (length first, 0 for empty) for the rare open-ended parts, which then
//! follow the structs' serde rules. Readers never trust a length: a count
//! larger than the bytes left is an error, so damaged input cannot make a
//! reader allocate more than it holds.

use serde::de::DeserializeOwned;
use serde::Serialize;

/// Why encoded bytes could not be read back.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    #[error("the bytes end early")]
    Truncated,
    #[error("unknown encoding {0}")]
    UnknownTag(u8),
    #[error("a string is not UTF-8")]
    NotUtf8,
    #[error("{field} has no value {value}")]
    BadCode { field: &'static str, value: u64 },
    #[error("a varint is too long")]
    BadVarint,
    #[error("embedded JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("{0} trailing bytes")]
    Trailing(usize),
}

pub(crate) struct Writer<'a>(pub(crate) &'a mut Vec<u8>);

impl Writer<'_> {
    pub(crate) fn u8(&mut self, b: u8) {
        self.0.push(b);
    }

    pub(crate) fn bytes(&mut self, b: &[u8]) {
        self.0.extend_from_slice(b);
    }

    /// LEB128: seven bits per byte, low bits first.
    pub(crate) fn varint(&mut self, mut n: u64) {
        while n >= 0x80 {
            self.0.push((n as u8) | 0x80);
            n >>= 7;
        }
        self.0.push(n as u8);
    }

    /// Zigzag, so small negative numbers stay short.
    pub(crate) fn signed(&mut self, n: i64) {
        self.varint(((n << 1) ^ (n >> 63)) as u64);
    }

    pub(crate) fn f64(&mut self, v: f64) {
        self.bytes(&v.to_le_bytes());
    }

    pub(crate) fn str(&mut self, s: &str) {
        self.varint(s.len() as u64);
        self.bytes(s.as_bytes());
    }

    pub(crate) fn opt_id(&mut self, id: Option<uuid::Uuid>) {
        match id {
            Some(id) => {
                self.u8(1);
                self.bytes(id.as_bytes());
            }
            None => self.u8(0),
        }
    }

    pub(crate) fn counts<'k>(&mut self, entries: impl Iterator<Item = (&'k str, u64)>, len: usize) {
        self.varint(len as u64);
        for (name, n) in entries {
            self.str(name);
            self.varint(n);
        }
    }

    pub(crate) fn json<T: Serialize + ?Sized>(
        &mut self,
        value: &T,
    ) -> Result<(), serde_json::Error> {
        let encoded = serde_json::to_vec(value)?;
        self.varint(encoded.len() as u64);
        self.bytes(&encoded);
        Ok(())
    }

    /// Length 0 when `empty`, read back as the type's default.
    pub(crate) fn json_unless<T: Serialize + ?Sized>(
        &mut self,
        empty: bool,
        value: &T,
    ) -> Result<(), serde_json::Error> {
        if empty {
            self.varint(0);
            Ok(())
        } else {
            self.json(value)
        }
    }
}

pub(crate) struct Reader<'a> {
    pub(crate) rest: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], CodecError> {
        if self.rest.len() < n {
            return Err(CodecError::Truncated);
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, CodecError> {
        Ok(self.take(1)?[0])
    }

    pub(crate) fn varint(&mut self) -> Result<u64, CodecError> {
        let mut n = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.u8()?;
            n |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(n);
            }
        }
        Err(CodecError::BadVarint)
    }

    /// A count of things that follow; each takes at least a byte, so a
    /// corrupt count cannot make a reader allocate more than the row holds.
    pub(crate) fn len(&mut self) -> Result<usize, CodecError> {
        let n = self.varint()?;
        match usize::try_from(n) {
            Ok(n) if n <= self.rest.len() => Ok(n),
            _ => Err(CodecError::Truncated),
        }
    }

    pub(crate) fn signed(&mut self) -> Result<i64, CodecError> {
        let z = self.varint()?;
        Ok((z >> 1) as i64 ^ -((z & 1) as i64))
    }

    pub(crate) fn f64(&mut self) -> Result<f64, CodecError> {
        let mut raw = [0u8; 8];
        raw.copy_from_slice(self.take(8)?);
        Ok(f64::from_le_bytes(raw))
    }

    pub(crate) fn id(&mut self) -> Result<uuid::Uuid, CodecError> {
        let mut raw = [0u8; 16];
        raw.copy_from_slice(self.take(16)?);
        Ok(uuid::Uuid::from_bytes(raw))
    }

    pub(crate) fn opt_id(&mut self) -> Result<Option<uuid::Uuid>, CodecError> {
        Ok(match self.u8()? {
            0 => None,
            _ => Some(self.id()?),
        })
    }

    pub(crate) fn str(&mut self) -> Result<&'a str, CodecError> {
        let n = self.len()?;
        std::str::from_utf8(self.take(n)?).map_err(|_| CodecError::NotUtf8)
    }

    pub(crate) fn string(&mut self) -> Result<String, CodecError> {
        self.str().map(str::to_string)
    }

    pub(crate) fn counts<M: FromIterator<(String, u64)>>(&mut self) -> Result<M, CodecError> {
        let n = self.len()?;
        (0..n)
            .map(|_| Ok((self.string()?, self.varint()?)))
            .collect()
    }

    pub(crate) fn json<T: DeserializeOwned>(&mut self) -> Result<T, CodecError> {
        let n = self.len()?;
        Ok(serde_json::from_slice(self.take(n)?)?)
    }

    /// Past embedded JSON, unread (bytes this process wrote itself).
    pub(crate) fn skip_json(&mut self) -> Result<(), CodecError> {
        let n = self.len()?;
        self.take(n).map(drop)
    }

    pub(crate) fn json_or_default<T: DeserializeOwned + Default>(
        &mut self,
    ) -> Result<T, CodecError> {
        let n = self.len()?;
        if n == 0 {
            return Ok(T::default());
        }
        Ok(serde_json::from_slice(self.take(n)?)?)
    }
}
