//! The agent's front ends: D-Bus interface, HTTP server and status page, and the
//! agent process that serves them.

pub mod daemon;
pub mod dbus;
pub mod http;
mod large_buffers;
pub mod token_file;
