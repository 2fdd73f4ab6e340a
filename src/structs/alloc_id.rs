//! Allocation IDs: random-looking UUIDs (version 4, as Nomad's), made so
//! that the state's allocation table can keep them in the order they were
//! made.
//!
//! Why: the table is a persistent B-tree shared with every scheduler's
//! snapshot. Keyed by random IDs, a plan's thousand placements land in a
//! thousand different leaves, and each is copied (and its neighbours'
//! reference counts bumped) because a snapshot still holds it; that copying
//! and the freeing of the old leaves were about 13% of the server's CPU
//! placing a million allocations. Keyed in the order they were made, a
//! plan's placements fill a few leaves at the end of the tree.
//!
//! How: each thread numbers the IDs it makes (a random stream number, then
//! a counter), and an ID is that number put through a keyed permutation of
//! the UUID's 122 random bits (a Feistel network). The table's key,
//! [`AllocOrderKey`], is the permutation undone: the number again. Users
//! still see IDs as random as `Uuid::new_v4()`'s: their short prefixes
//! differ, and nothing in them counts. The permutation's key is drawn per
//! process, so the order is only a matter of speed: an ID made by another
//! process (a restored state, another server) is a random key like any.
//! The key maps every UUID, version 4 or not, to a distinct key.

use std::sync::OnceLock;

/// The 61-bit halves of the 122 permuted bits.
const HALF_BITS: u32 = 61;
const HALF_MASK: u64 = (1 << HALF_BITS) - 1;
/// Four rounds make a Feistel network a permutation no test of its outputs
/// tells from a random one (Luby-Rackoff); two more for margin, since the
/// round function is a fast mixer rather than a cipher.
const ROUNDS: usize = 6;
/// The counter's low bits are laid out so that the table's leaves fill
/// up: see [`spread_in_block`].
const BLOCK_BITS: u32 = 11;

/// An allocation ID's place in the allocation table: for IDs made by this
/// process, the order they were made in. A bijection of the UUID.
///
/// Two words, high first (their derived order is the number's), rather
/// than a `u128`: a `u128` is aligned to 16 bytes, which padded each
/// (key, row) entry of the table from 24 bytes to 32 (10 MiB at a million).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AllocOrderKey([u64; 2]);

impl AllocOrderKey {
    pub fn of(id: &uuid::Uuid) -> Self {
        let (random, fixed) = split_uuid(id.as_u128());
        let key = unpermute(random) << 6 | fixed as u128;
        AllocOrderKey([(key >> 64) as u64, key as u64])
    }

    #[cfg(test)]
    fn number(&self) -> u128 {
        (self.0[0] as u128) << 64 | self.0[1] as u128
    }
}

/// A fresh allocation ID. Unique as a version-4 UUID is: 58 random bits
/// name the thread's stream and a 64-bit counter numbers the stream's IDs,
/// and the permutation is a bijection.
///
/// An allocation ID names, it grants nothing (Nomad shows them to every
/// reader of the job), so it needs to be unique, not unpredictable. Secrets
/// (node and ACL secret IDs) are made elsewhere, from the OS's generator.
pub fn new_alloc_id() -> uuid::Uuid {
    use std::cell::Cell;
    thread_local! {
        static STREAM: (u64, Cell<u64>) = (rand::random::<u64>() >> 6, Cell::new(0));
    }
    let number = STREAM.with(|(stream, counter)| {
        let n = counter.get();
        counter.set(n.wrapping_add(1));
        (*stream as u128) << 64 | spread_in_block(n) as u128
    });
    // Version 4 (0100) over variant 1 (10).
    let version_4_variant_1 = 0b01_0010;
    uuid::Uuid::from_u128(join_uuid(permute(number), version_4_variant_1))
}

/// Lays out the counter's block of `2^BLOCK_BITS` IDs as every other key
/// first, then the keys between.
///
/// `imbl` splits a full leaf in half, so keys only ever appended leave
/// every leaf half empty (and the table twice its size). Here the first
/// half of a block leaves half-full leaves over the block's whole range, and
/// the second half fills exactly their gaps.
fn spread_in_block(n: u64) -> u64 {
    let half = 1u64 << (BLOCK_BITS - 1);
    let within = n & ((half << 1) - 1);
    let place = if within < half {
        within << 1
    } else {
        (within - half) << 1 | 1
    };
    (n & !((half << 1) - 1)) | place
}

/// A UUID's 122 bits other than its version and variant, and those six.
fn split_uuid(v: u128) -> (u128, u8) {
    let version = (v >> 76) & 0xF;
    let variant = (v >> 62) & 0x3;
    let high = v >> 80;
    let middle = (v >> 64) & 0xFFF;
    let low = v & ((1 << 62) - 1);
    (
        high << 74 | middle << 62 | low,
        (version << 2 | variant) as u8,
    )
}

fn join_uuid(random: u128, fixed: u8) -> u128 {
    let (version, variant) = ((fixed >> 2) as u128 & 0xF, fixed as u128 & 0x3);
    let high = random >> 74;
    let middle = (random >> 62) & 0xFFF;
    let low = random & ((1 << 62) - 1);
    high << 80 | version << 76 | middle << 64 | variant << 62 | low
}

fn round_keys() -> &'static [u64; ROUNDS] {
    static KEYS: OnceLock<[u64; ROUNDS]> = OnceLock::new();
    KEYS.get_or_init(rand::random)
}

/// The round function: the 64-bit finaliser of MurmurHash3, keyed.
fn mix(key: u64, half: u64) -> u64 {
    let mut x = half ^ key;
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^= x >> 33;
    x & HALF_MASK
}

fn permute(number: u128) -> u128 {
    let (mut left, mut right) = ((number >> HALF_BITS) as u64, number as u64 & HALF_MASK);
    for key in round_keys() {
        (left, right) = (right, left ^ mix(*key, right));
    }
    (left as u128) << HALF_BITS | right as u128
}

fn unpermute(random: u128) -> u128 {
    let (mut left, mut right) = ((random >> HALF_BITS) as u64, random as u64 & HALF_MASK);
    for key in round_keys().iter().rev() {
        (left, right) = (right ^ mix(*key, left), left);
    }
    (left as u128) << HALF_BITS | right as u128
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn a_table_entry_is_three_words() {
        let entry = std::mem::size_of::<(AllocOrderKey, std::sync::Arc<()>)>();
        assert_eq!(entry, 24);
    }

    #[test]
    fn every_uuid_has_its_own_key() {
        // Version-4 or not, nil and max: the key gives the UUID back.
        let mut seen = HashSet::new();
        let odd = [0u128, u128::MAX, 1, 1 << 76, 1 << 62, 0xF << 76, 0x3 << 62];
        let random = (0..10_000).map(|_| rand::random::<u128>());
        for v in odd.into_iter().chain(random) {
            let (bits, fixed) = split_uuid(v);
            assert_eq!(join_uuid(bits, fixed), v);
            assert_eq!(permute(unpermute(bits)), bits);
            assert!(seen.insert(AllocOrderKey::of(&uuid::Uuid::from_u128(v))));
        }
    }

    #[test]
    fn made_ids_are_version_4_and_look_random() {
        let ids: Vec<_> = (0..4096).map(|_| new_alloc_id()).collect();
        assert!(ids.iter().all(|id| id.get_version_num() == 4));
        assert!(ids
            .iter()
            .all(|id| id.get_variant() == uuid::Variant::RFC4122));
        // The short IDs users type (8 hex digits) stay distinct.
        let short: HashSet<_> = ids
            .iter()
            .map(|id| id.to_string()[..8].to_string())
            .collect();
        assert!(short.len() > 4090, "{} distinct short IDs", short.len());
    }

    #[test]
    fn the_order_key_is_the_order_they_were_made_in_a_block_spread() {
        // On a thread of its own: its counter starts at a block's start.
        let made = || {
            (0..4096)
                .map(|_| AllocOrderKey::of(&new_alloc_id()))
                .collect()
        };
        let keys: Vec<AllocOrderKey> = std::thread::spawn(made).join().unwrap();
        // Consecutive IDs are neighbours in the table: a block of 2048 keys
        // spans exactly 2048 places (times the six fixed bits).
        let (first, last) = (keys[..2048].iter().min(), keys[..2048].iter().max());
        let span = last.unwrap().number() - first.unwrap().number();
        assert_eq!(span, 2047 << 6);
        // The next block follows it.
        assert!(keys[2048..].iter().all(|k| k > last.unwrap()));
        // Within a block: every other place first, then the ones between.
        assert_eq!(keys[1].number() - keys[0].number(), 2 << 6);
        assert_eq!(keys[1024].number() - keys[0].number(), 1 << 6);
    }
}
