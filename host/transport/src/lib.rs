//! nimbus transport (placeholder; see DESIGN.md).
