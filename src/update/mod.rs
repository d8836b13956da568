//! The OS image as firmware, seen from inside: the running version and the A/B slots,
//! whether the root is verified, the state partition, updates into the other slot
//! (systemd-sysupdate), the boot gate that keeps or rejects a new version, and factory
//! reset.
//!
//! Everything is read below a root folder (`/` on the box) in the kernel's own formats
//! (`os-release`, `proc/cmdline`, `sys/class/block/*/uevent`, `sys/block/dm-*`,
//! `proc/self/mountinfo`, systemd-boot's EFI variables), so a tree on disk stands in
//! for a machine in tests. Nothing here knows the agent or its front ends.

pub mod boot_check;
pub mod boot_entries;
pub mod cmdline;
pub mod error;
pub mod fixture;
pub mod gate;
pub mod install;
pub mod os_release;
pub mod partitions;
pub mod progress;
pub mod reset;
pub mod source;
pub mod status;
pub mod sysupdate;
pub mod verity;

#[cfg(test)]
mod tests;

pub use error::UpdateError;
pub use reset::{ResetError, ResetRequest};
pub use status::{ImageStatus, OsImage, Slot, StatePartition};
