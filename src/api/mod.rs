//! The agent's front ends: D-Bus interface, HTTP server and status page.

pub mod dbus;
pub mod http;
