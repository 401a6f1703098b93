//! nimbus wire (placeholder; see DESIGN.md).
