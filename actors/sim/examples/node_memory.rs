//! What a registered node costs the server's heap: builds the simulator's
//! fleet (the fingerprint `bench cluster` registers), writes each node as
//! its client sends it, reads it back as the server does, and counts the
//! bytes and heap blocks the read nodes hold, in all and per map
//! (docs/PERFORMANCE.md, session 25).
//!
//! ```sh
//! cargo run --release -p herder-sim --example node_memory
//! ```

use herder::structs::Node;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The system allocator, counting what is live (requested sizes, before
/// any allocator's rounding).
struct Counting;

static LIVE_BYTES: AtomicUsize = AtomicUsize::new(0);
static LIVE_BLOCKS: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE_BYTES.fetch_add(layout.size(), Ordering::Relaxed);
        LIVE_BLOCKS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's layout, passed on unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
        LIVE_BLOCKS.fetch_sub(1, Ordering::Relaxed);
        // SAFETY: as allocated above, with the same layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live() -> (usize, usize) {
    (
        LIVE_BYTES.load(Ordering::Relaxed),
        LIVE_BLOCKS.load(Ordering::Relaxed),
    )
}

/// Bytes `make` leaves allocated, and what it made.
fn cost<T>(make: impl FnOnce() -> T) -> (usize, T) {
    let before = live().0;
    let made = make();
    (live().0.saturating_sub(before), made)
}

fn main() -> Result<(), serde_json::Error> {
    let config = herder_sim::SimConfig {
        count: 10_000,
        racks: 25,
        ..Default::default()
    };
    let bodies = herder_sim::build_nodes(&config)
        .iter()
        .map(serde_json::to_vec)
        .collect::<Result<Vec<_>, _>>()?;
    let (bytes, blocks) = live();
    let nodes = bodies
        .iter()
        .map(|body| serde_json::from_slice::<Node>(body))
        .collect::<Result<Vec<_>, _>>()?;
    let (after_bytes, after_blocks) = live();
    let count = nodes.len().max(1);
    println!(
        "{count} nodes read: {} bytes in {} heap blocks per node ({} bytes of JSON each)",
        (after_bytes - bytes) / count,
        (after_blocks - blocks) / count,
        bodies.first().map_or(0, Vec::len),
    );
    if let Some(node) = nodes.first() {
        let (attributes, _) = cost(|| node.attributes.clone());
        let (meta, _) = cost(|| node.meta.clone());
        let (drivers, _) = cost(|| node.drivers.clone());
        let (resources, _) = cost(|| node.node_resources.clone());
        println!(
            "one node's maps, as a copy costs: attributes {attributes} bytes ({} entries), \
             meta {meta}, drivers {drivers}, resources {resources}",
            node.attributes.len()
        );
    }
    Ok(())
}
