//! Evaluating NimBus's filters on a message whose properties are lent (not
//! copied) allocates nothing: the broker runs every rule on every publish.
//!
//! A counting global allocator measures it; this file holds one test so no
//! other test's allocations are counted.

#![allow(
    unsafe_code,
    reason = "a counting GlobalAlloc must implement an unsafe trait"
)]
#![allow(clippy::unwrap_used, reason = "tests")]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use nimbus_sqlfilter::{PropertyBag, SqlFilter};

struct Counting;

thread_local! {
    // Per thread, so the test harness's own threads are not counted. A
    // `const` initialiser with no destructor: touching it never allocates.
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

fn count() {
    let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
}

fn allocations() -> usize {
    ALLOCATIONS.with(Cell::get)
}

// SAFETY: every call is forwarded unchanged to the system allocator; the
// counter is a thread-local cell.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn evaluating_topology_filters_allocates_nothing() {
    let filters: Vec<SqlFilter> = [
        "user.To = 'billing'",
        "user.EventTypeId = 'OrderPlaced' AND user.From IS NULL",
        "MessageType = 'EventRequest' AND From IS NULL",
        "user.To = 'Deferred' AND user.OriginalSessionId IS NOT NULL",
        "sys.MessageId LIKE 'OrderPlaced-%' AND user.Attempt IN (1, 2, 3) AND NOT EXISTS(user.Skip)",
        "1=1",
    ]
    .iter()
    .map(|text| SqlFilter::parse(text).unwrap())
    .collect();
    let mut msg = PropertyBag::new();
    msg.insert_user("To", "billing");
    msg.insert_user("EventTypeId", "OrderPlaced");
    msg.insert_user("MessageType", "EventRequest");
    msg.insert_user("Attempt", 2);
    msg.insert_system("MessageId", "OrderPlaced-4f1c").unwrap();

    let before = allocations();
    let mut matched = 0;
    for _ in 0..100 {
        for filter in &filters {
            matched += usize::from(filter.evaluate(&msg).unwrap());
        }
    }
    let allocated = allocations() - before;

    assert_eq!(matched, 100 * 5, "all but the Deferred filter match");
    assert_eq!(allocated, 0, "600 evaluations allocated {allocated} times");
}
