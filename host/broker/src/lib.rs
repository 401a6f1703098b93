//! nimbus broker (placeholder; see DESIGN.md).
