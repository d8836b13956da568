//! The command line: argument definitions and the D-Bus client commands.

pub mod args;
pub mod client;
