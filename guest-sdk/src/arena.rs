//! The guest's global allocator: a per-instance arena for small blocks in
//! front of the system allocator (wasi-libc's dlmalloc).
//!
//! Why: the host runs every event in a fresh instance, so the allocator
//! starts from nothing on every event, and the event's strings arrive
//! through the canonical ABI as a handful of `cabi_realloc` calls before the
//! handler does its own allocating. dlmalloc's set-up and bookkeeping were
//! ~8 % of the instructions of a whole event
//! (docs/decisions/0003-dispatch-cost.md). Here a small block is a bump of a
//! pointer, and a freed one goes onto a free list for its size class.
//!
//! What stays sane:
//! - A handler that allocates and frees in a loop: freed small blocks are
//!   reused by later requests of the same size class, so memory stays
//!   bounded by the peak of live blocks (times at most 2 for the rounding to
//!   a power of two), never by the number of iterations.
//! - Large blocks (over [`MAX_SMALL`] bytes) and over-aligned ones are the
//!   system allocator's, as before: no rounding waste on big buffers, and
//!   their memory is given back to it when freed.
//! - The memory limit: the arena takes its chunks from the system allocator
//!   too, so growing linear memory (and the host refusing it, which a
//!   memory bomb runs into) happens in one place, unchanged; a refused
//!   growth is a null pointer, which Rust turns into a trap the host reports
//!   as `MemoryLimit`.
//!
//! The arena never returns a chunk: an instance lives for one event.

use core::alloc::Layout;
use core::ptr::{self, NonNull};

/// The largest block the arena serves; larger ones go to the backing
/// allocator.
pub(crate) const MAX_SMALL: usize = 4096;
/// Every block is at least this big and aligned to it (a free block holds
/// the free list's next pointer).
const MIN_BLOCK: usize = 16;
/// Size classes: 16, 32, ..., [`MAX_SMALL`].
const CLASSES: usize = (MAX_SMALL.trailing_zeros() - MIN_BLOCK.trailing_zeros() + 1) as usize;
/// Bytes taken from the backing allocator at a time, once the static region
/// is used up.
pub(crate) const CHUNK: usize = 32 << 10;
/// The arena's first region, a zeroed static (`.bss`, so not in the
/// component's bytes). Why static rather than a first chunk from the backing
/// allocator: the host resets every page an instance dirtied after each
/// event, so pages touched are the cost; a chunk from dlmalloc dirties
/// dlmalloc's own state and boundary tags on pages of their own, the
/// static region only the bytes the event uses.
pub(crate) const STATIC_REGION: usize = 16 << 10;

/// Where the arena's chunks and the large blocks come from.
pub(crate) trait Backing {
    /// Allocates `layout`, or returns null.
    fn alloc(&self, layout: Layout) -> *mut u8;
    /// Frees a block `alloc` returned for `layout`.
    fn dealloc(&self, ptr: *mut u8, layout: Layout);
    /// Resizes a block `alloc` returned for `layout`, or returns null.
    fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8;
}

/// The arena's state. Not thread-safe: the global allocator wraps it for a
/// single-threaded target only.
pub(crate) struct Arena {
    /// The next free byte of the current chunk, and its end.
    next: usize,
    end: usize,
    /// The heads of the free lists, one per size class.
    free: [*mut u8; CLASSES],
}

/// The size class of a small request, or `None` for the backing allocator.
fn class_of(layout: Layout) -> Option<usize> {
    if layout.size() > MAX_SMALL || layout.align() > MIN_BLOCK {
        return None;
    }
    let size = layout.size().max(MIN_BLOCK).next_power_of_two();
    Some((size.trailing_zeros() - MIN_BLOCK.trailing_zeros()) as usize)
}

fn class_size(class: usize) -> usize {
    MIN_BLOCK << class
}

impl Arena {
    /// An empty arena: no chunk yet.
    pub(crate) const fn new() -> Self {
        Self {
            next: 0,
            end: 0,
            free: [ptr::null_mut(); CLASSES],
        }
    }

    /// Gives the arena `len` bytes at `base` (aligned to [`MIN_BLOCK`]) to
    /// carve blocks from before it asks the backing allocator for chunks.
    /// The rest of a current chunk, if any, is abandoned.
    pub(crate) fn add_region(&mut self, base: *mut u8, len: usize) {
        self.next = base as usize;
        self.end = self.next + len;
    }

    /// Whether the arena has had a region or chunk yet.
    pub(crate) fn is_fresh(&self) -> bool {
        self.end == 0
    }

    /// Allocates `layout`.
    pub(crate) fn alloc(&mut self, layout: Layout, backing: &impl Backing) -> *mut u8 {
        let Some(class) = class_of(layout) else {
            return backing.alloc(layout);
        };
        let head = self.free[class];
        if !head.is_null() {
            // SAFETY: a free block of this class holds the next free
            // block's address in its first word (written by `dealloc`),
            // and every block is aligned to MIN_BLOCK.
            self.free[class] = unsafe { head.cast::<*mut u8>().read() };
            return head;
        }
        self.bump(class_size(class), backing)
    }

    fn bump(&mut self, size: usize, backing: &impl Backing) -> *mut u8 {
        if self.end - self.next < size {
            // The rest of the chunk (less than one small block) is left
            // unused: an instance lives for one event.
            let Ok(chunk) = Layout::from_size_align(CHUNK, MIN_BLOCK) else {
                return ptr::null_mut();
            };
            let base = backing.alloc(chunk);
            if base.is_null() {
                return base;
            }
            self.next = base as usize;
            self.end = self.next + CHUNK;
        }
        let block = self.next;
        self.next += size;
        block as *mut u8
    }

    /// Frees a block `alloc` returned for `layout`.
    pub(crate) fn dealloc(&mut self, ptr: *mut u8, layout: Layout, backing: &impl Backing) {
        let Some(class) = class_of(layout) else {
            return backing.dealloc(ptr, layout);
        };
        // SAFETY: the block is at least MIN_BLOCK bytes, aligned to
        // MIN_BLOCK, and no longer in use: its first word may hold the link.
        unsafe { ptr.cast::<*mut u8>().write(self.free[class]) };
        self.free[class] = ptr;
    }

    /// Resizes a block `alloc` returned for `layout` to `new_size` bytes.
    pub(crate) fn realloc(
        &mut self,
        ptr: *mut u8,
        layout: Layout,
        new_size: usize,
        backing: &impl Backing,
    ) -> *mut u8 {
        let Ok(new_layout) = Layout::from_size_align(new_size, layout.align()) else {
            return ptr::null_mut();
        };
        match (class_of(layout), class_of(new_layout)) {
            (None, None) => return backing.realloc(ptr, layout, new_size),
            // Same class: the block already has the room.
            (Some(old), Some(new)) if old == new => return ptr,
            _ => {}
        }
        let moved = self.alloc(new_layout, backing);
        if let Some(moved) = NonNull::new(moved) {
            // SAFETY: both blocks are valid for the smaller of the two
            // sizes, and distinct (the old one is still allocated).
            unsafe {
                ptr::copy_nonoverlapping(ptr, moved.as_ptr(), layout.size().min(new_size));
            }
            self.dealloc(ptr, layout, backing);
        }
        moved
    }
}

/// The global allocator on the (single-threaded) wasm32 target: the arena
/// over `std::alloc::System`.
#[cfg(all(target_arch = "wasm32", not(target_feature = "atomics")))]
mod global {
    use core::alloc::{GlobalAlloc, Layout};
    use core::cell::UnsafeCell;
    use std::alloc::System;

    use super::{Arena, Backing, MIN_BLOCK, STATIC_REGION};

    impl Backing for System {
        fn alloc(&self, layout: Layout) -> *mut u8 {
            // SAFETY: callers pass non-zero sizes (the arena's chunk, or a
            // layout GlobalAlloc received, which is never zero-sized).
            unsafe { GlobalAlloc::alloc(self, layout) }
        }
        fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            // SAFETY: `ptr` came from `alloc` with this layout.
            unsafe { GlobalAlloc::dealloc(self, ptr, layout) }
        }
        fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            // SAFETY: `ptr` came from `alloc` with this layout.
            unsafe { GlobalAlloc::realloc(self, ptr, layout, new_size) }
        }
    }

    #[repr(C, align(16))]
    struct Region([u8; STATIC_REGION]);
    const _: () = assert!(align_of::<Region>() == MIN_BLOCK);

    struct GuestAllocator {
        arena: UnsafeCell<Arena>,
        region: UnsafeCell<Region>,
    }

    impl GuestAllocator {
        /// The arena, given the static region on first use.
        ///
        /// # Safety
        ///
        /// Single-threaded and not re-entrant (see the `GlobalAlloc` impl),
        /// so this is the only reference to the arena while it lives.
        #[allow(
            clippy::mut_from_ref,
            reason = "the allocator's interior state; see # Safety"
        )]
        unsafe fn arena(&self) -> &mut Arena {
            // SAFETY: see # Safety.
            let arena = unsafe { &mut *self.arena.get() };
            if arena.is_fresh() {
                arena.add_region(self.region.get().cast::<u8>(), STATIC_REGION);
            }
            arena
        }
    }

    // SAFETY: this module is compiled only for wasm32 without the atomics
    // feature, where there is exactly one thread.
    unsafe impl Sync for GuestAllocator {}

    // SAFETY: the arena hands out distinct blocks of at least the requested
    // size and alignment (see `Arena`), and the allocator is never entered
    // re-entrantly: the arena calls only `System`, never itself.
    unsafe impl GlobalAlloc for GuestAllocator {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            // SAFETY: single-threaded and not re-entrant (above).
            unsafe { self.arena().alloc(layout, &System) }
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            // SAFETY: as above.
            unsafe { self.arena().dealloc(ptr, layout, &System) }
        }
        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            // SAFETY: as above.
            unsafe { self.arena().realloc(ptr, layout, new_size, &System) }
        }
    }

    #[global_allocator]
    static ALLOCATOR: GuestAllocator = GuestAllocator {
        arena: UnsafeCell::new(Arena::new()),
        region: UnsafeCell::new(Region([0; STATIC_REGION])),
    };
}

#[cfg(test)]
mod tests {
    use std::alloc::System;
    use std::cell::Cell;

    use super::*;

    /// The system allocator, counting what the arena asks of it.
    #[derive(Default)]
    struct Counting {
        allocs: Cell<usize>,
        live_bytes: Cell<usize>,
        peak_bytes: Cell<usize>,
    }

    impl Backing for Counting {
        fn alloc(&self, layout: Layout) -> *mut u8 {
            self.allocs.set(self.allocs.get() + 1);
            self.live_bytes.set(self.live_bytes.get() + layout.size());
            self.peak_bytes
                .set(self.peak_bytes.get().max(self.live_bytes.get()));
            // SAFETY: tests pass non-zero sizes.
            unsafe { std::alloc::GlobalAlloc::alloc(&System, layout) }
        }
        fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            self.live_bytes.set(self.live_bytes.get() - layout.size());
            // SAFETY: `ptr` came from `alloc` with this layout.
            unsafe { std::alloc::GlobalAlloc::dealloc(&System, ptr, layout) }
        }
        fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            self.live_bytes
                .set(self.live_bytes.get() - layout.size() + new_size);
            self.peak_bytes
                .set(self.peak_bytes.get().max(self.live_bytes.get()));
            // SAFETY: `ptr` came from `alloc` with this layout.
            unsafe { std::alloc::GlobalAlloc::realloc(&System, ptr, layout, new_size) }
        }
    }

    fn layout(size: usize, align: usize) -> Layout {
        Layout::from_size_align(size, align).unwrap()
    }

    #[test]
    fn small_blocks_are_distinct_aligned_and_hold_their_bytes() {
        let backing = Counting::default();
        let mut arena = Arena::new();
        let mut blocks = Vec::new();
        for (i, size) in (1..=600).map(|i| (i, (i * 7) % MAX_SMALL + 1)) {
            let l = layout(size, [1, 2, 4, 8, 16][i % 5]);
            let p = arena.alloc(l, &backing);
            assert!(!p.is_null());
            assert_eq!(p as usize % l.align(), 0, "alignment of {l:?}");
            // SAFETY: the block is `size` bytes.
            unsafe { ptr::write_bytes(p, (i % 251) as u8, size) };
            blocks.push((p, l, (i % 251) as u8));
        }
        for &(p, l, fill) in &blocks {
            // SAFETY: the block is still allocated and was filled above.
            let bytes = unsafe { std::slice::from_raw_parts(p, l.size()) };
            assert!(bytes.iter().all(|&b| b == fill), "a block was overwritten");
        }
        for (p, l, _) in blocks {
            arena.dealloc(p, l, &backing);
        }
    }

    #[test]
    fn allocating_and_freeing_in_a_loop_reuses_the_blocks() {
        let backing = Counting::default();
        let mut arena = Arena::new();
        for i in 0..100_000 {
            let a = layout(24 + i % 40, 8);
            let b = layout(300 + i % 500, 1);
            let pa = arena.alloc(a, &backing);
            let pb = arena.alloc(b, &backing);
            arena.dealloc(pa, a, &backing);
            arena.dealloc(pb, b, &backing);
        }
        assert_eq!(backing.allocs.get(), 1, "one chunk serves the whole loop");
        assert_eq!(backing.peak_bytes.get(), CHUNK);
    }

    #[test]
    fn large_and_over_aligned_blocks_go_to_the_backing_allocator_and_back() {
        let backing = Counting::default();
        let mut arena = Arena::new();
        for l in [layout(MAX_SMALL + 1, 8), layout(1 << 20, 1), layout(64, 64)] {
            let p = arena.alloc(l, &backing);
            assert!(!p.is_null());
            assert_eq!(p as usize % l.align(), 0);
            assert_eq!(backing.live_bytes.get(), l.size(), "{l:?}");
            arena.dealloc(p, l, &backing);
            assert_eq!(backing.live_bytes.get(), 0, "{l:?} was given back");
        }
    }

    #[test]
    fn realloc_keeps_the_bytes_across_classes_and_into_the_backing_allocator() {
        let backing = Counting::default();
        let mut arena = Arena::new();
        let mut l = layout(10, 1);
        let mut p = arena.alloc(l, &backing);
        // SAFETY: the block is 10 bytes.
        unsafe { ptr::copy_nonoverlapping(b"0123456789".as_ptr(), p, 10) };
        for new_size in [12, 16, 17, 100, MAX_SMALL, MAX_SMALL + 1, 1 << 16, 11] {
            p = arena.realloc(p, l, new_size, &backing);
            assert!(!p.is_null());
            l = layout(new_size, 1);
            // SAFETY: the block holds at least 10 bytes.
            let bytes = unsafe { std::slice::from_raw_parts(p, 10) };
            assert_eq!(bytes, b"0123456789", "after growing to {new_size}");
        }
        arena.dealloc(p, l, &backing);
    }

    #[test]
    fn the_region_is_used_before_any_chunk_is_asked_for() {
        #[repr(C, align(16))]
        struct Region([u8; STATIC_REGION]);
        let mut region = Box::new(Region([0; STATIC_REGION]));
        let range = region.0.as_mut_ptr_range();
        let in_region = |p: *mut u8| range.start <= p && p < range.end;
        let backing = Counting::default();
        let mut arena = Arena::new();
        assert!(arena.is_fresh());
        arena.add_region(range.start, STATIC_REGION);
        assert!(!arena.is_fresh());
        let l = layout(MAX_SMALL, 8);
        let blocks: Vec<_> = (0..STATIC_REGION / MAX_SMALL)
            .map(|_| arena.alloc(l, &backing))
            .collect();
        assert!(blocks.iter().all(|&p| in_region(p)));
        assert_eq!(backing.allocs.get(), 0, "the region alone served them");
        let beyond = arena.alloc(l, &backing);
        assert!(!in_region(beyond));
        assert_eq!(backing.allocs.get(), 1, "then one chunk");
        for p in blocks.into_iter().chain([beyond]) {
            arena.dealloc(p, l, &backing);
        }
    }

    #[test]
    fn a_refused_chunk_is_a_null_pointer_not_a_crash() {
        struct Refusing;
        impl Backing for Refusing {
            fn alloc(&self, _: Layout) -> *mut u8 {
                ptr::null_mut()
            }
            fn dealloc(&self, _: *mut u8, _: Layout) {
                unreachable!("nothing was allocated")
            }
            fn realloc(&self, _: *mut u8, _: Layout, _: usize) -> *mut u8 {
                ptr::null_mut()
            }
        }
        let mut arena = Arena::new();
        assert!(arena.alloc(layout(32, 8), &Refusing).is_null());
        assert!(arena.alloc(layout(1 << 20, 8), &Refusing).is_null());
    }
}
