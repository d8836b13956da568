//! Byte sizes as people read them.

pub const KIB: u64 = 1 << 10;
pub const MIB: u64 = 1 << 20;
pub const GIB: u64 = 1 << 30;

/// `32 GiB` for exact powers, `24.0 GiB` or `125.8 GiB` otherwise.
pub fn format_bytes(bytes: u64) -> String {
    for (unit, name) in [(GIB, "GiB"), (MIB, "MiB"), (KIB, "KiB")] {
        if bytes >= unit {
            return if bytes.is_multiple_of(unit) {
                format!("{} {name}", bytes / unit)
            } else {
                format!("{:.1} {name}", bytes as f64 / unit as f64)
            };
        }
    }
    format!("{bytes} B")
}

pub fn gib(bytes: u64) -> f64 {
    bytes as f64 / GIB as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_naturally() {
        assert_eq!(format_bytes(32 * GIB), "32 GiB");
        assert_eq!(format_bytes(256 * MIB), "256 MiB");
        assert_eq!(format_bytes(25_753_026_560), "24.0 GiB");
        assert_eq!(format_bytes(131_889_436 * KIB), "125.8 GiB");
        assert_eq!(format_bytes(128), "128 B");
    }
}
