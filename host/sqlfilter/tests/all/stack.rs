//! The nesting limit keeps parsing and evaluation within a small stack, so
//! no filter can overflow a broker thread's stack, even in a debug build.

#![allow(clippy::unwrap_used, reason = "tests")]

use nimbus_sqlfilter::{MAX_NESTING_DEPTH, PropertyBag, SqlFilter};

/// Half the 2 MiB of a tokio worker or test thread. Measured need at the
/// limit: about 0.75 MiB in a debug build (each nesting level passes through
/// every precedence level, about 24 KiB of unoptimised frames), 0.25 MiB in
/// a release build.
const STACK_BYTES: usize = 1024 * 1024;

fn on_small_stack(f: impl FnOnce() + Send + 'static) {
    std::thread::Builder::new()
        .stack_size(STACK_BYTES)
        .spawn(f)
        .unwrap()
        .join()
        .expect("ran within the small stack");
}

#[test]
fn deepest_accepted_filters_fit_a_small_stack() {
    on_small_stack(|| {
        let depth = MAX_NESTING_DEPTH;
        let parens = format!("{}a = 1{}", "(".repeat(depth), ")".repeat(depth));
        // The comparison itself is two levels of tree.
        let nots = format!("{}a = 1", "NOT ".repeat(depth - 2));
        let signs = format!("{}1{} = -1", "-(".repeat(depth / 2), ")".repeat(depth / 2));
        let sum = format!("a{} = 1", " + a".repeat(depth - 2));
        let mut msg = PropertyBag::new();
        msg.insert_user("a", 1);
        for text in [parens, nots, signs, sum] {
            let filter = SqlFilter::parse(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
            filter.evaluate(&msg).unwrap();
            SqlFilter::parse(&filter.canonical()).unwrap();
        }
    });
}

#[test]
fn too_deep_filters_are_refused_without_exhausting_a_small_stack() {
    on_small_stack(|| {
        let deep = format!("{}a = 1{}", "(".repeat(10_000), ")".repeat(10_000));
        assert!(SqlFilter::parse(&deep).is_err());
        let deep = format!("{}a = 1", "NOT ".repeat(200));
        assert!(SqlFilter::parse(&deep).is_err());
    });
}
