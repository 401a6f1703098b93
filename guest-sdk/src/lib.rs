//! nimbus guest SDK (placeholder).
