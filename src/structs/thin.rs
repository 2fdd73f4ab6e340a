//! Strings and byte strings one pointer wide, their length on the heap.
//!
//! A server holds a million allocations, each with a name and a packed
//! metric. As `Box<str>` and `Arc<[u8]>` those are two words each in the
//! allocation; here they are one, and the block behind them carries a
//! 4-byte length (and for shared bytes a 4-byte count) instead of the
//! standard `Arc`'s 16 bytes of counts. Those words decide which of the
//! allocator's size classes an allocation and its metric fall in (see
//! `structs::alloc`'s size test), about 30 MB each at a million.
//!
//! The two types own raw heap blocks, so this is the one module with
//! `unsafe` code for them; every block is made by `block_for`/`write` and
//! freed with the same layout, and nothing hands out a pointer into it
//! that outlives the borrow of its owner.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::alloc::{self, Layout};
use std::borrow::Borrow;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::marker::PhantomData;
use std::ops::Deref;
use std::ptr::NonNull;
use std::sync::atomic::{self, AtomicU32, Ordering};

/// The layout of a block: a header of type `H` and then `len` bytes.
fn layout_of<H>(len: usize) -> Layout {
    let bytes = Layout::array::<u8>(len).unwrap_or_else(|_| capacity_overflow());
    match Layout::new::<H>().extend(bytes) {
        Ok((layout, _)) => layout.pad_to_align(),
        Err(_) => capacity_overflow(),
    }
}

/// Where the bytes start in a block with header `H` (the header's size:
/// both headers here are aligned to 4 and `u8` needs no padding).
const fn data_offset<H>() -> usize {
    std::mem::size_of::<H>()
}

/// As `Vec`: a length that cannot be represented is a programming error
/// (names and metrics are bounded far below 4 GiB by the job limits).
#[cold]
fn capacity_overflow() -> ! {
    panic!("capacity overflow")
}

fn len_u32(len: usize) -> u32 {
    u32::try_from(len).unwrap_or_else(|_| capacity_overflow())
}

/// A new block holding `header` and a copy of `bytes`.
///
/// # Safety of the result
/// The block has `layout_of::<H>(bytes.len())` and must be freed with it.
fn write<H>(header: H, bytes: &[u8]) -> NonNull<H> {
    let layout = layout_of::<H>(bytes.len());
    // SAFETY: the layout has a non-zero size (the headers are not
    // zero-sized); the header and the bytes are written inside it, the
    // bytes after the header at `data_offset`, which `extend` placed there.
    unsafe {
        let raw = alloc::alloc(layout);
        let Some(block) = NonNull::new(raw.cast::<H>()) else {
            alloc::handle_alloc_error(layout)
        };
        block.as_ptr().write(header);
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), raw.add(data_offset::<H>()), bytes.len());
        block
    }
}

/// A string owned alone, one pointer wide (the length, 4 bytes, leads the
/// block). Reads as `&str`; compares, orders, hashes and prints as it.
pub struct ThinStr {
    block: NonNull<u32>,
    _owns: PhantomData<u32>,
}

// SAFETY: a `ThinStr` owns its block alone and never changes it after it
// is written, as a `Box<str>` does.
unsafe impl Send for ThinStr {}
// SAFETY: as above: shared references only read.
unsafe impl Sync for ThinStr {}

impl ThinStr {
    pub fn new(text: &str) -> ThinStr {
        ThinStr {
            block: write(len_u32(text.len()), text.as_bytes()),
            _owns: PhantomData,
        }
    }

    fn len_in_block(&self) -> usize {
        // SAFETY: the block is alive while `self` is, and starts with the
        // length written by `new`.
        unsafe { *self.block.as_ptr() as usize }
    }

    pub fn as_str(&self) -> &str {
        let len = self.len_in_block();
        // SAFETY: `new` copied `len` bytes of a `str` after the header;
        // they stay unchanged and alive while `self` is borrowed.
        unsafe {
            let data = self.block.as_ptr().cast::<u8>().add(data_offset::<u32>());
            std::str::from_utf8_unchecked(std::slice::from_raw_parts(data, len))
        }
    }
}

impl Drop for ThinStr {
    fn drop(&mut self) {
        let layout = layout_of::<u32>(self.len_in_block());
        // SAFETY: the block was allocated by `write` with this layout and
        // is owned by `self` alone.
        unsafe { alloc::dealloc(self.block.as_ptr().cast::<u8>(), layout) }
    }
}

impl Clone for ThinStr {
    fn clone(&self) -> ThinStr {
        ThinStr::new(self.as_str())
    }
}

impl Default for ThinStr {
    fn default() -> ThinStr {
        ThinStr::new("")
    }
}

impl Deref for ThinStr {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl Borrow<str> for ThinStr {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for ThinStr {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl From<&str> for ThinStr {
    fn from(text: &str) -> ThinStr {
        ThinStr::new(text)
    }
}

impl From<String> for ThinStr {
    fn from(text: String) -> ThinStr {
        ThinStr::new(&text)
    }
}

impl PartialEq for ThinStr {
    fn eq(&self, other: &ThinStr) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for ThinStr {}

impl PartialEq<str> for ThinStr {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for ThinStr {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialOrd for ThinStr {
    fn partial_cmp(&self, other: &ThinStr) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ThinStr {
    fn cmp(&self, other: &ThinStr) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl Hash for ThinStr {
    fn hash<S: Hasher>(&self, state: &mut S) {
        self.as_str().hash(state)
    }
}

impl fmt::Debug for ThinStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for ThinStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for ThinStr {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ThinStr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ThinStr, D::Error> {
        struct Text;
        impl serde::de::Visitor<'_> for Text {
            type Value = ThinStr;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<ThinStr, E> {
                Ok(ThinStr::new(v))
            }
        }
        d.deserialize_str(Text)
    }
}

/// The header of a [`SharedBytes`] block.
#[repr(C)]
struct SharedHeader {
    owners: AtomicU32,
    len: u32,
}

/// Immutable bytes shared by reference count, one pointer wide (an 8-byte
/// header of count and length leads the block, where `Arc<[u8]>` has 16
/// bytes of counts and keeps the length beside its pointer).
pub struct SharedBytes {
    block: NonNull<SharedHeader>,
    _owns: PhantomData<SharedHeader>,
}

// SAFETY: the bytes never change after `new`; the count is atomic and the
// block is freed by the last owner only, as in `Arc<[u8]>`.
unsafe impl Send for SharedBytes {}
// SAFETY: as above.
unsafe impl Sync for SharedBytes {}

/// Past this many owners a clone aborts (as `Arc` does at `isize::MAX`):
/// far above any use, and well before the count could wrap.
const MAX_OWNERS: u32 = i32::MAX as u32;

impl SharedBytes {
    pub fn new(bytes: &[u8]) -> SharedBytes {
        let header = SharedHeader {
            owners: AtomicU32::new(1),
            len: len_u32(bytes.len()),
        };
        SharedBytes {
            block: write(header, bytes),
            _owns: PhantomData,
        }
    }

    fn header(&self) -> &SharedHeader {
        // SAFETY: the block lives while any owner does, `self` among them.
        unsafe { self.block.as_ref() }
    }

    pub fn as_bytes(&self) -> &[u8] {
        let len = self.header().len as usize;
        // SAFETY: `new` copied `len` bytes after the header; no owner
        // changes them, and they live while `self` is borrowed.
        unsafe {
            let data = self
                .block
                .as_ptr()
                .cast::<u8>()
                .add(data_offset::<SharedHeader>());
            std::slice::from_raw_parts(data, len)
        }
    }
}

impl Clone for SharedBytes {
    fn clone(&self) -> SharedBytes {
        // Relaxed, as `Arc::clone`: a new owner comes from an existing
        // one, which keeps the block alive meanwhile.
        let before = self.header().owners.fetch_add(1, Ordering::Relaxed);
        if before > MAX_OWNERS {
            std::process::abort();
        }
        SharedBytes {
            block: self.block,
            _owns: PhantomData,
        }
    }
}

impl Drop for SharedBytes {
    fn drop(&mut self) {
        // Release then Acquire, as `Arc`'s drop: every owner's reads
        // happen before the last one frees the block.
        if self.header().owners.fetch_sub(1, Ordering::Release) != 1 {
            return;
        }
        atomic::fence(Ordering::Acquire);
        let layout = layout_of::<SharedHeader>(self.header().len as usize);
        // SAFETY: this was the last owner; the block was allocated by
        // `write` with this layout.
        unsafe { alloc::dealloc(self.block.as_ptr().cast::<u8>(), layout) }
    }
}

impl Deref for SharedBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl PartialEq for SharedBytes {
    fn eq(&self, other: &SharedBytes) -> bool {
        self.block == other.block || self.as_bytes() == other.as_bytes()
    }
}

impl Eq for SharedBytes {}

impl fmt::Debug for SharedBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SharedBytes({} bytes)", self.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn thin_strings_read_compare_and_copy_as_their_text() {
        assert_eq!(std::mem::size_of::<ThinStr>(), 8);
        assert_eq!(std::mem::size_of::<Option<ThinStr>>(), 8);
        for text in [
            "",
            "a",
            "web.web[0]",
            "ünïcödé.group[12345]",
            &"x".repeat(1000),
        ] {
            let thin = ThinStr::from(text);
            assert_eq!(&*thin, text);
            let copy = thin.clone();
            drop(thin);
            assert_eq!(copy.as_str(), text);
            assert_eq!(format!("{copy}"), text);
            assert_eq!(format!("{copy:?}"), format!("{text:?}"));
        }
        let set: BTreeSet<ThinStr> = ["b", "a", "c", "a"]
            .into_iter()
            .map(ThinStr::from)
            .collect();
        let order: Vec<&str> = set.iter().map(|s| s.as_str()).collect();
        assert_eq!(order, ["a", "b", "c"]);
        let json = serde_json::to_string(&ThinStr::from("j.g[3]")).unwrap();
        assert_eq!(json, "\"j.g[3]\"");
        let back: ThinStr = serde_json::from_str(&json).unwrap();
        assert_eq!(back, "j.g[3]");
        assert!(serde_json::from_str::<ThinStr>("3").is_err());
    }

    #[test]
    fn shared_bytes_are_freed_by_their_last_owner_only() {
        assert_eq!(std::mem::size_of::<SharedBytes>(), 8);
        assert_eq!(std::mem::size_of::<Option<SharedBytes>>(), 8);
        let bytes: Vec<u8> = (0..=255).collect();
        let first = SharedBytes::new(&bytes);
        let owners: Vec<SharedBytes> = (0..64).map(|_| first.clone()).collect();
        assert_eq!(first.header().owners.load(Ordering::Relaxed), 65);
        drop(first);
        // Owners dropped across threads, reading as they go.
        let expected = &bytes;
        std::thread::scope(|scope| {
            for chunk in owners.chunks(16) {
                let chunk = chunk.to_vec();
                scope.spawn(move || {
                    for owner in chunk {
                        assert_eq!(owner.as_bytes(), &expected[..]);
                    }
                });
            }
        });
        let last = owners[0].clone();
        drop(owners);
        assert_eq!(last.header().owners.load(Ordering::Relaxed), 1);
        assert_eq!(&*last, &bytes[..]);
        assert_eq!(SharedBytes::new(b""), SharedBytes::new(&[]));
        assert_ne!(SharedBytes::new(b"a"), SharedBytes::new(b"b"));
    }

    /// The blocks are what the module says: a name of 20 bytes takes
    /// 24, a 150-byte metric 160 (the allocator's 160-byte class, where
    /// `Arc<[u8]>` asked 166 and took the 192-byte one).
    #[test]
    fn blocks_carry_small_headers() {
        assert_eq!(layout_of::<u32>(20).size(), 24);
        assert_eq!(layout_of::<SharedHeader>(150).size(), 160);
        assert_eq!(layout_of::<SharedHeader>(150).align(), 4);
        assert_eq!(data_offset::<SharedHeader>(), 8);
    }
}
