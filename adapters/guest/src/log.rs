//! Structured log lines through the host, which tags them with the call's identifiers and
//! redacts secret values. Prefer these to printing: stdout and stderr are only captured raw.

pub use crate::bindings::common::docket::plugin0_3_0::log::Level;
use crate::bindings::common::docket::plugin0_3_0::log::write as host_write;

/// Writes one line at `level`.
pub fn write(level: Level, message: impl AsRef<str>) {
    host_write(level, message.as_ref());
}

/// Writes one line at trace level.
pub fn trace(message: impl AsRef<str>) {
    write(Level::Trace, message);
}

/// Writes one line at debug level.
pub fn debug(message: impl AsRef<str>) {
    write(Level::Debug, message);
}

/// Writes one line at info level.
pub fn info(message: impl AsRef<str>) {
    write(Level::Info, message);
}

/// Writes one line at warn level.
pub fn warn(message: impl AsRef<str>) {
    write(Level::Warn, message);
}

/// Writes one line at error level.
pub fn error(message: impl AsRef<str>) {
    write(Level::Error, message);
}
