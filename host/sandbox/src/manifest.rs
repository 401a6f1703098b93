//! The optional manifest beside a component (`<name>.toml`):
//!
//! ```toml
//! [limits]
//! memory = "64MiB"     # linear memory per event
//! timeout = "5s"       # wall-clock deadline per event
//! instances = 16       # core instances per store
//! tables = 16          # tables per store
//!
//! [config]             # what the handler reads through the `config` import
//! partner_url = "https://example.test"
//! ```
//!
//! Unknown keys are errors that name the key, so a typo never silently falls
//! back to a default.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use crate::config::{Limits, MAX_INSTANCES, MAX_TABLES, SandboxConfig};
use crate::error::ManifestError;

/// A parsed handler manifest; every field optional.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Manifest {
    /// `[limits] memory`, in bytes.
    pub memory_bytes: Option<u64>,
    /// `[limits] timeout`.
    pub timeout: Option<Duration>,
    /// `[limits] instances`.
    pub instances: Option<u32>,
    /// `[limits] tables`.
    pub tables: Option<u32>,
    /// `[config]`, sorted by key.
    pub config: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ManifestFile {
    #[serde(default)]
    limits: LimitsSection,
    /// Read as any TOML value, so a number or a boolean (appsettings
    /// habits) is refused with how to write it rather than serde's
    /// "invalid type".
    #[serde(default)]
    config: BTreeMap<String, toml::Value>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitsSection {
    memory: Option<String>,
    timeout: Option<String>,
    instances: Option<u32>,
    tables: Option<u32>,
}

/// The manifest text at `path`; `Ok(None)` if there is none. A symbolic link
/// whose target is missing is an error, not "no manifest": loading the
/// component with default settings would silently drop the limits and
/// config the link was meant to give.
pub(crate) fn read_text(path: &Path) -> Result<Option<String>, ManifestError> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(error)
            if error.kind() == std::io::ErrorKind::NotFound
                && std::fs::symlink_metadata(path).is_err() =>
        {
            Ok(None)
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Err(ManifestError::Read {
            path: path.to_owned(),
            source: std::io::Error::new(
                error.kind(),
                "it is a symbolic link whose target does not exist",
            ),
        }),
        Err(source) => Err(ManifestError::Read {
            path: path.to_owned(),
            source,
        }),
    }
}

/// The longest deadline a manifest may set: a handler that needs more should
/// hand off (pending handoff) rather than hold a session lock.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(300);

impl Manifest {
    /// Reads the manifest at `path`; `Ok(None)` if there is none.
    pub fn read_optional(path: &Path) -> Result<Option<Self>, ManifestError> {
        read_text(path)?
            .map(|text| Self::parse(path, &text))
            .transpose()
    }

    /// Parses manifest text; `path` is only used in errors.
    pub fn parse(path: &Path, text: &str) -> Result<Self, ManifestError> {
        let file: ManifestFile = toml::from_str(text).map_err(|error| ManifestError::Parse {
            path: path.to_owned(),
            message: error.to_string().trim_end().to_owned(),
        })?;
        let value_error = |key: &str, message: String| ManifestError::Value {
            path: path.to_owned(),
            key: key.to_owned(),
            message,
        };
        let memory_bytes = file
            .limits
            .memory
            .as_deref()
            .map(|text| parse_byte_size(text).map_err(|m| value_error("limits.memory", m)))
            .transpose()?;
        let timeout = file
            .limits
            .timeout
            .as_deref()
            .map(|text| {
                humantime::parse_duration(text)
                    .map_err(|e| {
                        format!("`{text}` is not a duration like \"5s\" or \"200ms\": {e}")
                    })
                    .and_then(|d| {
                        if d.is_zero() {
                            Err("must be more than zero".to_owned())
                        } else if d > MAX_TIMEOUT {
                            Err(format!(
                                "{} is over the maximum of {}",
                                humantime::format_duration(d),
                                humantime::format_duration(MAX_TIMEOUT)
                            ))
                        } else {
                            Ok(d)
                        }
                    })
                    .map_err(|m| value_error("limits.timeout", m))
            })
            .transpose()?;
        for (key, count, max) in [
            ("limits.instances", file.limits.instances, MAX_INSTANCES),
            ("limits.tables", file.limits.tables, MAX_TABLES),
        ] {
            match count {
                Some(0) => return Err(value_error(key, "must be at least 1".to_owned())),
                Some(n) if n > max => {
                    return Err(value_error(
                        key,
                        format!("{n} is over the maximum of {max}"),
                    ));
                }
                _ => {}
            }
        }
        let mut config = BTreeMap::new();
        for (key, value) in file.config {
            let toml::Value::String(text) = value else {
                let written = match &value {
                    toml::Value::Integer(n) => Some((n.to_string(), "a number")),
                    toml::Value::Float(x) => Some((x.to_string(), "a number")),
                    toml::Value::Boolean(b) => Some((b.to_string(), "a boolean")),
                    _ => None,
                };
                let message = match written {
                    Some((shown, what)) => format!(
                        "{shown} is {what}, not a string: [config] values are text the handler \
                         reads; write {key} = \"{shown}\""
                    ),
                    None => format!(
                        "a {}, not a string: [config] values are text the handler reads",
                        value.type_str()
                    ),
                };
                return Err(value_error(&format!("config.{key}"), message));
            };
            config.insert(key, text);
        }
        Ok(Self {
            memory_bytes,
            timeout,
            instances: file.limits.instances,
            tables: file.limits.tables,
            config,
        })
    }

    /// The effective limits: the manifest's values over the sandbox defaults,
    /// checked against the sandbox's maximums.
    pub fn limits(&self, path: &Path, config: &SandboxConfig) -> Result<Limits, ManifestError> {
        let defaults = config.default_limits;
        let limits = Limits {
            memory_bytes: self.memory_bytes.unwrap_or(defaults.memory_bytes),
            timeout: self.timeout.unwrap_or(defaults.timeout),
            instances: self.instances.unwrap_or(defaults.instances),
            tables: self.tables.unwrap_or(defaults.tables),
        };
        if limits.memory_bytes > config.max_memory_bytes {
            return Err(ManifestError::Value {
                path: path.to_owned(),
                key: "limits.memory".to_owned(),
                message: format!(
                    "{} bytes is over the sandbox maximum of {} bytes",
                    limits.memory_bytes, config.max_memory_bytes
                ),
            });
        }
        Ok(limits)
    }
}

/// Parses a byte size such as `"64MiB"`, `"512 KiB"`, `"1GiB"`, `"10MB"` or
/// `"65536"` (bytes).
pub fn parse_byte_size(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let split = trimmed
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(trimmed.len());
    let (digits, unit) = trimmed.split_at(split);
    let number: u64 = digits
        .parse()
        .map_err(|_| format!("`{text}` is not a size like \"64MiB\""))?;
    let multiplier: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "KB" | "kB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        other => {
            return Err(format!(
                "unknown unit `{other}` in `{text}`: use B, KiB, MiB, GiB, KB, MB or GB"
            ));
        }
    };
    let bytes = number
        .checked_mul(multiplier)
        .ok_or_else(|| format!("`{text}` is too large"))?;
    if bytes == 0 {
        return Err("must be more than zero".to_owned());
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Manifest, ManifestError> {
        Manifest::parse(Path::new("orders.toml"), text)
    }

    #[test]
    fn a_full_manifest_parses() {
        let manifest = parse(
            "[limits]\nmemory = \"32MiB\"\ntimeout = \"200ms\"\ninstances = 8\ntables = 4\n\
             [config]\nb = \"2\"\na = \"1\"\n",
        )
        .expect("valid manifest");
        assert_eq!(manifest.memory_bytes, Some(32 << 20));
        assert_eq!(manifest.timeout, Some(Duration::from_millis(200)));
        assert_eq!(manifest.instances, Some(8));
        assert_eq!(manifest.tables, Some(4));
        let keys: Vec<_> = manifest.config.keys().cloned().collect();
        assert_eq!(keys, ["a", "b"]);
    }

    #[test]
    fn an_empty_manifest_keeps_the_defaults() {
        let manifest = parse("").expect("empty is valid");
        let limits = manifest
            .limits(Path::new("x.toml"), &SandboxConfig::default())
            .expect("defaults fit");
        assert_eq!(limits, Limits::default());
    }

    #[test]
    fn an_unknown_key_is_an_error_naming_it() {
        let error = parse("[limits]\nmemroy = \"1MiB\"\n").expect_err("typo must fail");
        assert!(error.to_string().contains("memroy"), "{error}");
        let error = parse("[limitz]\n").expect_err("unknown table must fail");
        assert!(error.to_string().contains("limitz"), "{error}");
    }

    #[test]
    fn a_bad_value_names_its_key() {
        let error = parse("[limits]\nmemory = \"lots\"\n").expect_err("bad size");
        assert!(error.to_string().contains("limits.memory"), "{error}");
        let error = parse("[limits]\ntimeout = \"soon\"\n").expect_err("bad duration");
        assert!(error.to_string().contains("limits.timeout"), "{error}");
        let error = parse("[limits]\ninstances = 0\n").expect_err("zero instances");
        assert!(error.to_string().contains("limits.instances"), "{error}");
        let error = parse("[limits]\ntables = 33\n").expect_err("too many tables");
        assert!(error.to_string().contains("limits.tables"), "{error}");
        let error = parse("[config]\nretries = 3\n").expect_err("config values are strings");
        assert!(
            error.to_string().contains("config.retries")
                && error.to_string().contains("3 is a number, not a string")
                && error.to_string().contains("write retries = \"3\""),
            "{error}"
        );
        let error = parse("[config]\nhosts = [\"a\"]\n").expect_err("config values are strings");
        assert!(error.to_string().contains("config.hosts"), "{error}");
    }

    #[test]
    fn memory_over_the_sandbox_maximum_is_refused() {
        let manifest = parse("[limits]\nmemory = \"2GiB\"\n").expect("parses");
        let error = manifest
            .limits(Path::new("x.toml"), &SandboxConfig::default())
            .expect_err("over the maximum");
        assert!(error.to_string().contains("limits.memory"), "{error}");
    }

    #[test]
    fn byte_sizes_parse_with_binary_and_decimal_units() {
        assert_eq!(parse_byte_size("65536"), Ok(65536));
        assert_eq!(parse_byte_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_byte_size("512 KiB"), Ok(512 << 10));
        assert_eq!(parse_byte_size("10MB"), Ok(10_000_000));
        assert!(parse_byte_size("10 furlongs").is_err());
        assert!(parse_byte_size("0").is_err());
        assert!(parse_byte_size("99999999999999999999GiB").is_err());
    }
}
