//! Canonical text for literals (shared by `Value`'s `Display` and the AST
//! renderer).

use std::fmt;

/// Writes `s` as a SQL string literal, doubling single quotes.
pub(crate) fn write_string_literal(f: &mut fmt::Formatter<'_>, s: &str) -> fmt::Result {
    f.write_str("'")?;
    for (i, part) in s.split('\'').enumerate() {
        if i > 0 {
            f.write_str("''")?;
        }
        f.write_str(part)?;
    }
    f.write_str("'")
}

/// Writes a float so that it reads back as the same float, and as a float
/// (never as an integer literal: `1` would come back as an `Int`).
pub(crate) fn write_float(f: &mut fmt::Formatter<'_>, x: f64) -> fmt::Result {
    // `{:?}` is the shortest text that round-trips, and always has a `.` or
    // an exponent (`1.0`, `1e300`, `1.5e-7`).
    write!(f, "{x:?}")
}
