//! Large buffers go back to the system when freed. glibc serves an allocation from its
//! heap once a freed one of that size has raised its mmap threshold (up to 32 MiB), and
//! keeps what it freed there: a caller sending a 20 MB D-Bus message a few times left
//! the agent 120 MB larger for good. With the threshold fixed, every allocation over it
//! is a mapping of its own, unmapped on free.

/// Allocations of at least this size are mapped on their own.
const MMAP_THRESHOLD_BYTES: libc::c_int = 1024 * 1024;

/// Fixes the threshold for this process; says so when the C library refuses.
pub fn give_back_when_freed() {
    // SAFETY: mallopt only sets an allocator parameter; any value is accepted or refused.
    let accepted = unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) };
    if accepted != 1 {
        tracing::warn!(
            "the C library refused a fixed mmap threshold; large buffers may be kept after use"
        );
    }
}
