//! The Resizable BAR capability, read from a device's binary config space (the
//! sysfs `config` file). The extended capabilities start at offset 0x100 and form a
//! linked list; each header holds the capability id (bits 15:0), its version
//! (19:16) and the offset of the next one (31:20).

use serde::Serialize;

/// Extended capability id of Resizable BAR (PCIe base specification, 7.8.6).
const RESIZABLE_BAR_ID: u16 = 0x0015;
const EXTENDED_START: usize = 0x100;
/// More headers than fit in 4 KiB means the list loops.
const MAX_CAPABILITIES: usize = (4096 - EXTENDED_START) / 4;
/// BAR sizes are powers of two from 1 MiB: encoded size `n` is `1 MiB << n`.
const ONE_MIB: u64 = 1 << 20;

/// One BAR the capability can resize.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RebarEntry {
    pub bar: u8,
    pub current_size_bytes: u64,
    pub supported_sizes_bytes: Vec<u64>,
}

impl RebarEntry {
    pub fn largest_supported(&self) -> u64 {
        self.supported_sizes_bytes
            .iter()
            .copied()
            .max()
            .unwrap_or(0)
    }
}

/// Config space that cannot be walked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigSpaceError {
    #[error(
        "extended capability at {offset:#x} points to {next:#x}, outside extended config space"
    )]
    BadPointer { offset: usize, next: usize },
    #[error("extended capability list loops")]
    Loop,
    #[error("Resizable BAR capability at {offset:#x} is cut short")]
    Truncated { offset: usize },
}

fn dword(config: &[u8], offset: usize) -> Option<u32> {
    let bytes = config.get(offset..offset + 4)?;
    Some(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
}

/// The Resizable BAR entries, `Ok(None)` when the device has no such capability or
/// the file holds no extended config space (conventional PCI, or read without root,
/// which shows only the first 64 bytes).
pub fn resizable_bars(config: &[u8]) -> Result<Option<Vec<RebarEntry>>, ConfigSpaceError> {
    let mut offset = EXTENDED_START;
    for _ in 0..MAX_CAPABILITIES {
        let Some(header) = dword(config, offset) else {
            return Ok(None);
        };
        if header == 0 || header == u32::MAX {
            return Ok(None);
        }
        if (header & 0xffff) as u16 == RESIZABLE_BAR_ID {
            return parse_resizable_bar(config, offset).map(Some);
        }
        let next = ((header >> 20) & 0xffc) as usize;
        if next == 0 {
            return Ok(None);
        }
        if next < EXTENDED_START {
            return Err(ConfigSpaceError::BadPointer { offset, next });
        }
        offset = next;
    }
    Err(ConfigSpaceError::Loop)
}

/// After the header, one (capability, control) register pair per resizable BAR. The
/// first control register also says how many BARs there are (bits 7:5).
fn parse_resizable_bar(config: &[u8], offset: usize) -> Result<Vec<RebarEntry>, ConfigSpaceError> {
    let truncated = ConfigSpaceError::Truncated { offset };
    let first_control = dword(config, offset + 8).ok_or(truncated.clone())?;
    let count = ((first_control >> 5) & 0x7).clamp(1, 6) as usize;
    let mut entries = Vec::with_capacity(count);
    for i in 0..count {
        let capability = dword(config, offset + 4 + 8 * i).ok_or(truncated.clone())?;
        let control = dword(config, offset + 8 + 8 * i).ok_or(truncated.clone())?;
        let encoded_current = (control >> 8) & 0x3f;
        // Capability bits 31:4 advertise 1 MiB .. 128 TiB; control bits 31:16 continue
        // from 256 TiB.
        let supported = (4..32)
            .filter(|bit| capability & (1 << bit) != 0)
            .map(|bit| bit - 4)
            .chain(
                (16..32)
                    .filter(|bit| control & (1 << bit) != 0)
                    .map(|bit| bit + 12),
            )
            .filter_map(|n| ONE_MIB.checked_shl(n))
            .collect();
        entries.push(RebarEntry {
            bar: (control & 0x7) as u8,
            current_size_bytes: ONE_MIB.checked_shl(encoded_current).unwrap_or(0),
            supported_sizes_bytes: supported,
        });
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(config: &mut [u8], offset: usize, value: u32) {
        config[offset..offset + 4].copy_from_slice(&value.to_le_bytes());
    }

    fn header(id: u16, next: usize) -> u32 {
        u32::from(id) | (1 << 16) | ((next as u32) << 20)
    }

    /// An RTX 4090's list: capabilities out of address order, Resizable BAR late.
    fn nvidia_like(bar1_size_code: u32) -> Vec<u8> {
        let mut config = vec![0u8; 4096];
        put(&mut config, 0x100, header(0x0002, 0x250));
        put(&mut config, 0x250, header(0x0018, 0x258));
        put(&mut config, 0x258, header(0x001e, 0x128));
        put(&mut config, 0x128, header(0x0004, 0x420));
        put(&mut config, 0x420, header(0x0001, 0xbb0));
        put(&mut config, 0xbb0, header(RESIZABLE_BAR_ID, 0));
        // BAR0: 16 MiB only.
        put(&mut config, 0xbb4, 1 << 8);
        put(&mut config, 0xbb8, (3 << 5) | (4 << 8));
        // BAR1: 64 MiB .. 32 GiB.
        put(&mut config, 0xbbc, (10..=19).map(|b| 1u32 << b).sum());
        put(&mut config, 0xbc0, 1 | (bar1_size_code << 8));
        // BAR3: 32 MiB only.
        put(&mut config, 0xbc4, 1 << 9);
        put(&mut config, 0xbc8, 3 | (5 << 8));
        config
    }

    #[test]
    fn finds_resizable_bar_and_reads_current_sizes() {
        let entries = resizable_bars(&nvidia_like(15)).unwrap().unwrap();
        assert_eq!(entries.len(), 3);
        assert_eq!(entries[0].bar, 0);
        assert_eq!(entries[0].current_size_bytes, 16 << 20);
        assert_eq!(entries[1].bar, 1);
        assert_eq!(entries[1].current_size_bytes, 32 << 30);
        assert_eq!(entries[1].supported_sizes_bytes.first(), Some(&(64 << 20)));
        assert_eq!(entries[1].largest_supported(), 32 << 30);
        assert_eq!(entries[2].bar, 3);
        assert_eq!(entries[2].current_size_bytes, 32 << 20);
    }

    #[test]
    fn small_bar_reads_as_256_mib() {
        let entries = resizable_bars(&nvidia_like(8)).unwrap().unwrap();
        assert_eq!(entries[1].current_size_bytes, 256 << 20);
    }

    #[test]
    fn no_extended_space_or_no_capability_is_none() {
        assert_eq!(resizable_bars(&[0u8; 64]), Ok(None));
        assert_eq!(resizable_bars(&[0u8; 256]), Ok(None));
        assert_eq!(resizable_bars(&vec![0u8; 4096]), Ok(None));
        let mut config = vec![0u8; 4096];
        put(&mut config, 0x100, header(0x0001, 0));
        assert_eq!(resizable_bars(&config), Ok(None));
    }

    #[test]
    fn loops_and_bad_pointers_are_errors() {
        let mut config = vec![0u8; 4096];
        put(&mut config, 0x100, header(0x0001, 0x140));
        put(&mut config, 0x140, header(0x0002, 0x100));
        assert_eq!(resizable_bars(&config), Err(ConfigSpaceError::Loop));
        put(&mut config, 0x140, header(0x0002, 0x40));
        assert!(matches!(
            resizable_bars(&config),
            Err(ConfigSpaceError::BadPointer { .. })
        ));
    }

    #[test]
    fn capability_at_the_end_of_a_short_file_is_truncated() {
        let mut config = nvidia_like(15);
        config.truncate(0xbbc);
        assert!(matches!(
            resizable_bars(&config),
            Err(ConfigSpaceError::Truncated { .. })
        ));
    }
}
