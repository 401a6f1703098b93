//! The `nimbus` command (placeholder).
fn main() {}
