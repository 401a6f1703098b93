//! nimbus sandbox (placeholder; see DESIGN.md).
