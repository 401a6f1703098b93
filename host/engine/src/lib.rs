//! nimbus engine (placeholder; see DESIGN.md).
