//! nimbus sqlfilter (placeholder; see DESIGN.md).
