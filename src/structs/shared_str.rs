//! A string many allocations share, one pointer wide.
//!
//! An allocation names its namespace, job, group and node, and most say
//! why the servers stopped them; the same few strings repeat across a
//! million allocations, so each is shared (the scheduler hands the same
//! string to one evaluation's placements, the loader to equal rows). An
//! `Arc<str>` is two words in every allocation; this is one, the string's
//! length living beside it on the heap. That second pointer to follow is
//! paid on reads that are rare next to the memory: at a million
//! allocations each word is 8 MB, and the allocation struct has to fit
//! the allocator's 256-byte class (see `structs::alloc`).

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::borrow::Borrow;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;
use std::sync::{Arc, LazyLock, Mutex};

/// A shared, immutable string (compares, orders and hashes as its text).
#[derive(Clone)]
pub struct SharedStr(Arc<Box<str>>);

impl SharedStr {
    /// The same string, not merely an equal one.
    pub fn ptr_eq(a: &SharedStr, b: &SharedStr) -> bool {
        Arc::ptr_eq(&a.0, &b.0)
    }

    /// Where it lives: equal addresses are the same string while both
    /// are alive (for grouping by string without hashing the text).
    pub fn as_ptr(&self) -> *const u8 {
        Arc::as_ptr(&self.0).cast::<u8>()
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Strings longer than this are not worth a table entry: a fleet's shared
/// labels (attribute names, versions, datacenters) are short, and a long
/// value is rarely another node's too.
const INTERN_MAX_LEN: usize = 256;

/// The strings handed out by [`SharedStr::interned`], each held here once.
/// An entry nobody else holds any more is dropped by the next sweep, which
/// runs when the table has doubled since the last one: the table stays
/// within twice the strings still in use, whatever clients send.
struct InternTable {
    strings: fxhash::FxHashSet<SharedStr>,
    sweep_at: usize,
}

/// Fewer entries than this are never swept (a sweep walks them all).
const INTERN_MIN_SWEEP: usize = 4096;

static INTERNED: LazyLock<Mutex<InternTable>> = LazyLock::new(|| {
    Mutex::new(InternTable {
        strings: fxhash::FxHashSet::default(),
        sweep_at: INTERN_MIN_SWEEP,
    })
});

impl SharedStr {
    /// The process's one copy of `text`. For the labels every node of a
    /// fleet repeats (its attributes, meta and drivers: the same keys and
    /// mostly the same values on ten thousand nodes), so that a node holds
    /// pointers rather than copies. Not for hot paths: it takes a lock.
    pub fn interned(text: &str) -> SharedStr {
        if text.len() > INTERN_MAX_LEN {
            return SharedStr::from(text);
        }
        // A poisoned lock only means a panic elsewhere mid-insert; the set
        // is still a set of strings, so go on with it.
        let mut table = INTERNED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(found) = table.strings.get(text) {
            return found.clone();
        }
        if table.strings.len() >= table.sweep_at {
            // Held only here: no node uses it any more. Nothing else can
            // clone it meanwhile, as the lock guards the one holder.
            table.strings.retain(|s| Arc::strong_count(&s.0) > 1);
            table.sweep_at = (table.strings.len() * 2).max(INTERN_MIN_SWEEP);
        }
        let fresh = SharedStr::from(text);
        table.strings.insert(fresh.clone());
        fresh
    }
}

/// The empty string, shared: every new allocation's desired description.
static EMPTY: LazyLock<SharedStr> = LazyLock::new(|| SharedStr(Arc::new(Box::default())));

impl Default for SharedStr {
    fn default() -> Self {
        EMPTY.clone()
    }
}

impl Deref for SharedStr {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for SharedStr {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for SharedStr {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl From<&str> for SharedStr {
    fn from(s: &str) -> Self {
        SharedStr(Arc::new(Box::from(s)))
    }
}

impl From<String> for SharedStr {
    fn from(s: String) -> Self {
        SharedStr(Arc::new(s.into_boxed_str()))
    }
}

impl From<&String> for SharedStr {
    fn from(s: &String) -> Self {
        SharedStr::from(s.as_str())
    }
}

impl From<Box<str>> for SharedStr {
    fn from(s: Box<str>) -> Self {
        SharedStr(Arc::new(s))
    }
}

impl PartialEq for SharedStr {
    fn eq(&self, other: &Self) -> bool {
        SharedStr::ptr_eq(self, other) || *self.0 == *other.0
    }
}

impl Eq for SharedStr {}

impl PartialEq<str> for SharedStr {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for SharedStr {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for SharedStr {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other.as_str()
    }
}

impl PartialEq<SharedStr> for str {
    fn eq(&self, other: &SharedStr) -> bool {
        self == other.as_str()
    }
}

impl PartialEq<SharedStr> for &str {
    fn eq(&self, other: &SharedStr) -> bool {
        *self == other.as_str()
    }
}

impl PartialEq<SharedStr> for String {
    fn eq(&self, other: &SharedStr) -> bool {
        self.as_str() == other.as_str()
    }
}

impl PartialOrd for SharedStr {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for SharedStr {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.cmp(&other.0)
    }
}

impl Hash for SharedStr {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // As `str` hashes, so that `Borrow<str>` lookups find it.
        (**self.0).hash(state);
    }
}

impl fmt::Debug for SharedStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self.0, f)
    }
}

impl fmt::Display for SharedStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&**self.0, f)
    }
}

impl Serialize for SharedStr {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for SharedStr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<SharedStr, D::Error> {
        Ok(SharedStr::from(String::deserialize(d)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn it_is_one_word_and_behaves_as_its_text() {
        assert_eq!(std::mem::size_of::<SharedStr>(), 8);
        let a = SharedStr::from("web");
        let b = SharedStr::from("web".to_string());
        assert!(!SharedStr::ptr_eq(&a, &b));
        assert_eq!(a, b);
        assert_eq!(a, "web");
        let api = SharedStr::from("api");
        assert!(api < a, "ordered as its text");
        let set: HashSet<SharedStr> = [a.clone()].into();
        assert!(set.contains("web"), "found by its text");
        assert_eq!(serde_json::to_string(&a).unwrap(), r#""web""#);
        let back: SharedStr = serde_json::from_str(r#""web""#).unwrap();
        assert_eq!(back, a);
        assert_eq!(format!("{a} {a:?}"), r#"web "web""#);
    }

    #[test]
    fn interned_strings_are_one_copy_and_are_let_go_when_unused() {
        let a = SharedStr::interned("kernel.name-interning-test");
        let b = SharedStr::interned(&String::from("kernel.name-interning-test"));
        assert!(
            SharedStr::ptr_eq(&a, &b),
            "the same text is the same string"
        );
        assert_eq!(a, "kernel.name-interning-test");
        let long = "x".repeat(INTERN_MAX_LEN + 1);
        assert!(!SharedStr::ptr_eq(
            &SharedStr::interned(&long),
            &SharedStr::interned(&long)
        ));
        // Strings nobody holds do not pile up: fill past several sweeps
        // with strings dropped at once; the table stays bounded.
        for i in 0..(INTERN_MIN_SWEEP * 8) {
            drop(SharedStr::interned(&format!("unique.hostname-test-{i}")));
        }
        let table = INTERNED.lock().unwrap();
        assert!(
            table.strings.len() <= table.sweep_at && table.sweep_at <= INTERN_MIN_SWEEP * 2,
            "{} entries, next sweep at {}",
            table.strings.len(),
            table.sweep_at
        );
        drop(table);
        // And a string still held survives the sweeps, still the one copy.
        assert!(SharedStr::ptr_eq(
            &a,
            &SharedStr::interned("kernel.name-interning-test")
        ));
    }
}
