//! Serde adapters that give herder's JSON the exact shapes Nomad's has.
//!
//! Nomad is written in Go, whose encoder prints an empty slice or map as
//! `null`, a `time.Duration` as integer nanoseconds and a `time.Time` as an
//! RFC 3339 string. Clients written for Nomad parse those shapes, and they
//! send them back to us, so every collection must also *accept* `null`.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::time::Duration;

/// Reads `bytes` as `T`, taking `null` anywhere as "not set", as Nomad's
/// Go API does (its request structs are pointers): a member whose value is
/// `null` reads as if it were left out, so it takes the field's default.
///
/// The bytes are read straight into `T` first, so the common case costs
/// nothing and a real type error keeps serde_json's line and column; only
/// a body that failed and holds a `null` is read again without them.
pub fn from_slice_nulls_unset<T: serde::de::DeserializeOwned>(
    bytes: &[u8],
) -> Result<T, serde_json::Error> {
    let first = match serde_json::from_slice(bytes) {
        Ok(value) => return Ok(value),
        Err(e) => e,
    };
    if !bytes.windows(4).any(|w| w == b"null") {
        return Err(first);
    }
    let Ok(mut value) = serde_json::from_slice::<serde_json::Value>(bytes) else {
        return Err(first);
    };
    strip_nulls(&mut value);
    serde_json::from_value(value).map_err(|_| first)
}

/// Removes every object member whose value is `null`, at every depth (see
/// [`from_slice_nulls_unset`]). serde_json bounds a `Value`'s depth, and so
/// this recursion.
pub fn strip_nulls(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            map.retain(|_, v| !v.is_null());
            map.values_mut().for_each(strip_nulls);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(strip_nulls),
        _ => {}
    }
}

/// `null` for an empty collection on output, `null` accepted as empty on input.
///
/// Use as `#[serde(default, with = "nullable")]` on Vec, map and VecMap fields.
pub mod nullable {
    use super::*;

    /// Collections that can say whether they are empty.
    pub trait IsEmpty {
        fn is_empty_collection(&self) -> bool;
    }
    impl<T> IsEmpty for Vec<T> {
        fn is_empty_collection(&self) -> bool {
            self.is_empty()
        }
    }
    impl<K, V> IsEmpty for std::collections::BTreeMap<K, V> {
        fn is_empty_collection(&self) -> bool {
            self.is_empty()
        }
    }
    impl<K, V, S> IsEmpty for std::collections::HashMap<K, V, S> {
        fn is_empty_collection(&self) -> bool {
            self.is_empty()
        }
    }
    impl<T: IsEmpty> IsEmpty for std::sync::Arc<T> {
        fn is_empty_collection(&self) -> bool {
            (**self).is_empty_collection()
        }
    }
    impl<K, V> IsEmpty for super::super::VecMap<K, V> {
        fn is_empty_collection(&self) -> bool {
            self.is_empty()
        }
    }

    pub fn serialize<T, S>(value: &T, s: S) -> Result<S::Ok, S::Error>
    where
        T: Serialize + IsEmpty,
        S: Serializer,
    {
        if value.is_empty_collection() {
            s.serialize_none()
        } else {
            value.serialize(s)
        }
    }

    pub fn deserialize<'de, T, D>(d: D) -> Result<T, D::Error>
    where
        T: Deserialize<'de> + Default,
        D: Deserializer<'de>,
    {
        Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
    }
}

/// A node's labels (attributes, meta, driver attributes): a string map
/// whose keys and values are [`SharedStr::interned`](super::SharedStr::interned)
/// as they are read, since every node of a fleet repeats most of them.
/// `null` for an empty map on output, `null` accepted as empty on input.
///
/// Use as `#[serde(with = "labels")]` on a [`Labels`](super::node::Labels) field.
pub mod labels {
    use super::super::node::Labels;
    use super::super::SharedStr;
    use serde::de::Visitor;
    use serde::{Deserializer, Serializer};
    use std::collections::BTreeMap;
    use std::fmt;

    pub fn serialize<S: Serializer>(value: &Labels, s: S) -> Result<S::Ok, S::Error> {
        super::nullable::serialize(value, s)
    }

    /// A map of strings, keys and values interned; `null` is empty.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Labels, D::Error> {
        let read = <Option<BTreeMap<Interned, Interned>> as serde::Deserialize>::deserialize(d)?;
        Ok(read
            .unwrap_or_default()
            .into_iter()
            .map(|(Interned(k), Interned(v))| (k, v))
            .collect())
    }

    /// A map whose keys are interned as they are read (a node's drivers
    /// by name); `null` is empty. Output as [`nullable`](super::nullable).
    pub fn deserialize_keyed<'de, V, D>(d: D) -> Result<BTreeMap<SharedStr, V>, D::Error>
    where
        V: serde::Deserialize<'de>,
        D: Deserializer<'de>,
    {
        let read = <Option<BTreeMap<Interned, V>> as serde::Deserialize>::deserialize(d)?;
        Ok(read
            .unwrap_or_default()
            .into_iter()
            .map(|(Interned(k), v)| (k, v))
            .collect())
    }

    /// One string interned as it is read (`null` is empty), for a
    /// label-like field outside the maps.
    pub fn deserialize_one<'de, D: Deserializer<'de>>(d: D) -> Result<SharedStr, D::Error> {
        let text = <Option<Interned> as serde::Deserialize>::deserialize(d)?;
        Ok(text.map(|Interned(s)| s).unwrap_or_default())
    }

    /// One interned string, read without an owned copy when the input
    /// lends it.
    #[derive(PartialEq, Eq, PartialOrd, Ord)]
    struct Interned(SharedStr);

    impl<'de> serde::Deserialize<'de> for Interned {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct Text;
            impl Visitor<'_> for Text {
                type Value = Interned;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("a string")
                }
                fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Interned, E> {
                    Ok(Interned(SharedStr::interned(v)))
                }
            }
            d.deserialize_str(Text)
        }
    }
}

/// `null` accepted as the type's default on input; normal output.
pub mod null_default {
    use super::*;
    pub fn deserialize<'de, T, D>(d: D) -> Result<T, D::Error>
    where
        T: Deserialize<'de> + Default,
        D: Deserializer<'de>,
    {
        Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
    }
}

/// A `Duration` as integer nanoseconds, as Go's `time.Duration`.
pub mod nanos {
    use super::*;
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_i64(i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let n = Option::<i64>::deserialize(d)?.unwrap_or(0);
        if n < 0 {
            return Err(serde::de::Error::custom(format!(
                "duration must not be negative, got {n}ns"
            )));
        }
        Ok(Duration::from_nanos(n as u64))
    }
}

/// An optional `Duration` as integer nanoseconds or `null`.
pub mod nanos_opt {
    use super::*;
    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => super::nanos::serialize(d, s),
            None => s.serialize_none(),
        }
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        match Option::<i64>::deserialize(d)? {
            None => Ok(None),
            Some(n) if n < 0 => Err(serde::de::Error::custom(format!(
                "duration must not be negative, got {n}ns"
            ))),
            Some(n) => Ok(Some(Duration::from_nanos(n as u64))),
        }
    }
}

/// Unix nanoseconds (`i64`) printed as an RFC 3339 string, as Go's `time.Time`;
/// `None` prints as `null`. Go's zero time is read back as `None`.
pub mod rfc3339_opt {
    use super::*;
    use chrono::{DateTime, SecondsFormat, Utc};

    pub fn serialize<S: Serializer>(t: &Option<i64>, s: S) -> Result<S::Ok, S::Error> {
        match t {
            Some(ns) => s.serialize_str(&format_nanos(*ns)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
        let Some(text) = Option::<String>::deserialize(d)? else {
            return Ok(None);
        };
        if text.starts_with("0001-01-01") {
            return Ok(None);
        }
        let t = DateTime::parse_from_rfc3339(&text)
            .map_err(|e| serde::de::Error::custom(format!("bad RFC 3339 time {text:?}: {e}")))?;
        Ok(t.with_timezone(&Utc).timestamp_nanos_opt())
    }

    /// Formats Unix nanoseconds as RFC 3339 with nanoseconds, UTC (`Z`).
    pub fn format_nanos(ns: i64) -> String {
        DateTime::<Utc>::from_timestamp_nanos(ns).to_rfc3339_opts(SecondsFormat::AutoSi, true)
    }
}

pub(crate) fn is_zero_i64(v: &i64) -> bool {
    *v == 0
}
pub(crate) fn is_zero_u64(v: &u64) -> bool {
    *v == 0
}
pub(crate) fn is_false(v: &bool) -> bool {
    !*v
}
pub(crate) fn is_zero_duration(v: &Duration) -> bool {
    v.is_zero()
}

/// An optional UUID: Nomad writes a missing ID as `""`, so `""` and `null`
/// both read as `None`; `None` is written as `null` (or left out with
/// `skip_serializing_if = "Option::is_none"`, as Nomad's omitempty does).
pub mod opt_id {
    use super::*;
    use uuid::Uuid;

    pub fn serialize<S: Serializer>(id: &Option<Uuid>, s: S) -> Result<S::Ok, S::Error> {
        match id {
            Some(id) => id.serialize(s),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Uuid>, D::Error> {
        match Option::<String>::deserialize(d)? {
            None => Ok(None),
            Some(t) if t.is_empty() => Ok(None),
            Some(t) => Uuid::parse_str(&t)
                .map(Some)
                .map_err(|e| serde::de::Error::custom(format!("bad ID {t:?}: {e}"))),
        }
    }
}

/// A required UUID that also reads `""`/`null` as the nil UUID (the
/// caller validates it).
pub mod id_or_nil {
    use super::*;
    use uuid::Uuid;

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Uuid, D::Error> {
        Ok(super::opt_id::deserialize(d)?.unwrap_or(Uuid::nil()))
    }
}
