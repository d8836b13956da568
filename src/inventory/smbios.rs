//! The SMBIOS tables as the kernel exposes them (`sys/firmware/dmi/tables`), parsed in
//! this process: firmware, system, baseboard, chassis, processors and memory devices.
//!
//! `sys/class/dmi/id` has only a few of these fields and none of the memory devices, so
//! the tables themselves are read. The table is outside input: every offset is checked,
//! and a truncated or corrupt table is an error that says where, never a panic.

use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Where the kernel puts the entry point and the structure table, under the root.
pub const ENTRY_POINT_PATH: &str = "sys/firmware/dmi/tables/smbios_entry_point";
/// The structure table, under the root.
pub const TABLE_PATH: &str = "sys/firmware/dmi/tables/DMI";

/// No real structure table comes near this; a larger file is not a table.
const MAX_TABLE_BYTES: u64 = 4 << 20;
/// The 3.x entry point is 24 bytes and the 2.x one 31; anything larger is not one.
const MAX_ENTRY_POINT_BYTES: u64 = 64;

const TYPE_BIOS: u8 = 0;
const TYPE_SYSTEM: u8 = 1;
const TYPE_BASEBOARD: u8 = 2;
const TYPE_CHASSIS: u8 = 3;
const TYPE_PROCESSOR: u8 = 4;
const TYPE_MEMORY_DEVICE: u8 = 17;
const TYPE_INACTIVE: u8 = 126;
const TYPE_END: u8 = 127;

/// Why the tables could not be used.
#[derive(Debug, thiserror::Error)]
pub enum SmbiosError {
    /// A file could not be read.
    #[error("{}: cannot read: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: io::Error,
    },
    /// A file is larger than any real table.
    #[error("{}: larger than {limit} bytes, not an SMBIOS table", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The bound it passed.
        limit: u64,
    },
    /// The entry point is shorter than its kind needs.
    #[error("the entry point is {len} bytes, too short for {what}")]
    EntryPointTooShort {
        /// Its length.
        len: usize,
        /// What it was read as.
        what: &'static str,
    },
    /// The entry point starts with neither `_SM_` nor `_SM3_`.
    #[error("the entry point starts with {found:?}, neither _SM_ nor _SM3_")]
    UnknownAnchor {
        /// Its first bytes, escaped.
        found: String,
    },
    /// The 2.x entry point lacks its intermediate `_DMI_` anchor.
    #[error("the SMBIOS 2.x entry point has no _DMI_ anchor at offset 16")]
    NoIntermediateAnchor,
    /// The entry point's bytes do not sum to zero.
    #[error("the {what} entry point's checksum is wrong: its bytes sum to {sum:#04x}, not 0")]
    BadChecksum {
        /// Which checksum.
        what: &'static str,
        /// What the bytes sum to.
        sum: u8,
    },
    /// The table holds no structure at all.
    #[error("the structure table is empty")]
    EmptyTable,
    /// A structure's header runs past the end of the table.
    #[error("structure at offset {offset}: its header runs past the table's end ({len} bytes)")]
    TruncatedHeader {
        /// Where the structure starts.
        offset: usize,
        /// The table's length.
        len: usize,
    },
    /// A structure's length is less than its own header.
    #[error("structure of type {kind} at offset {offset}: length {length} is less than its 4-byte header")]
    BadLength {
        /// The structure's type.
        kind: u8,
        /// Where it starts.
        offset: usize,
        /// The length it gives.
        length: u8,
    },
    /// A structure's formatted area runs past the end of the table.
    #[error("structure of type {kind} at offset {offset}: its {length} bytes run past the table's end ({len} bytes)")]
    TruncatedStructure {
        /// The structure's type.
        kind: u8,
        /// Where it starts.
        offset: usize,
        /// The length it gives.
        length: u8,
        /// The table's length.
        len: usize,
    },
    /// A structure's strings are not closed by a double zero before the table ends.
    #[error("structure of type {kind} at offset {offset}: its strings are not terminated before the table's end")]
    UnterminatedStrings {
        /// The structure's type.
        kind: u8,
        /// Where it starts.
        offset: usize,
    },
}

/// What the entry point says about the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryPoint {
    /// SMBIOS major version.
    pub major: u8,
    /// SMBIOS minor version.
    pub minor: u8,
    /// The table's length (2.x) or its maximum size (3.x), in bytes.
    pub table_length: u32,
    /// How many structures the table holds (2.x only).
    pub structure_count: Option<u16>,
}

impl EntryPoint {
    /// `(major, minor)` at least `(major, minor)`.
    fn at_least(&self, major: u8, minor: u8) -> bool {
        (self.major, self.minor) >= (major, minor)
    }
}

/// Parses an SMBIOS 2.x (`_SM_`) or 3.x (`_SM3_`) entry point, checksums included.
pub fn parse_entry_point(bytes: &[u8]) -> Result<EntryPoint, SmbiosError> {
    if bytes.starts_with(b"_SM3_") {
        // _SM3_, checksum, length, major, minor, docrev, revision, reserved,
        // table maximum size (u32), table address (u64).
        let len = usize::from(*bytes.get(6).ok_or(SmbiosError::EntryPointTooShort {
            len: bytes.len(),
            what: "an SMBIOS 3.x entry point",
        })?);
        if len < 0x18 || bytes.len() < len {
            return Err(SmbiosError::EntryPointTooShort {
                len: bytes.len().min(len),
                what: "an SMBIOS 3.x entry point (24 bytes)",
            });
        }
        check_sum(&bytes[..len], "SMBIOS 3.x")?;
        Ok(EntryPoint {
            major: bytes[7],
            minor: bytes[8],
            table_length: u32::from_le_bytes([bytes[12], bytes[13], bytes[14], bytes[15]]),
            structure_count: None,
        })
    } else if bytes.starts_with(b"_SM_") {
        // _SM_, checksum, length, major, minor, max structure size, revision, formatted
        // area, _DMI_, intermediate checksum, table length (u16), address (u32),
        // structure count (u16), BCD revision. SMBIOS 2.1 firmware often says 0x1e.
        let len = usize::from(*bytes.get(5).ok_or(SmbiosError::EntryPointTooShort {
            len: bytes.len(),
            what: "an SMBIOS 2.x entry point",
        })?);
        if len < 0x1e || bytes.len() < 0x1f {
            return Err(SmbiosError::EntryPointTooShort {
                len: bytes.len(),
                what: "an SMBIOS 2.x entry point (31 bytes)",
            });
        }
        check_sum(&bytes[..len.min(bytes.len())], "SMBIOS 2.x")?;
        if &bytes[0x10..0x15] != b"_DMI_" {
            return Err(SmbiosError::NoIntermediateAnchor);
        }
        check_sum(&bytes[0x10..0x1f], "intermediate _DMI_")?;
        Ok(EntryPoint {
            major: bytes[6],
            minor: bytes[7],
            table_length: u32::from(u16::from_le_bytes([bytes[0x16], bytes[0x17]])),
            structure_count: Some(u16::from_le_bytes([bytes[0x1c], bytes[0x1d]])),
        })
    } else {
        Err(SmbiosError::UnknownAnchor {
            found: bytes
                .iter()
                .take(5)
                .flat_map(|b| std::ascii::escape_default(*b))
                .map(char::from)
                .collect(),
        })
    }
}

fn check_sum(bytes: &[u8], what: &'static str) -> Result<(), SmbiosError> {
    let sum = bytes.iter().fold(0u8, |s, b| s.wrapping_add(*b));
    if sum == 0 {
        Ok(())
    } else {
        Err(SmbiosError::BadChecksum { what, sum })
    }
}

/// One structure of the table: its formatted area and its strings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Structure<'a> {
    /// The structure's type (0 BIOS, 1 system, 17 memory device, …).
    pub kind: u8,
    /// Its handle, by which other structures refer to it.
    pub handle: u16,
    /// The formatted area, header included, so that offsets read as in the specification.
    pub formatted: &'a [u8],
    /// The strings, in order: string number 1 is the first.
    pub strings: Vec<&'a [u8]>,
}

impl Structure<'_> {
    /// The byte at `offset`; `None` when the structure is too short to hold it (a field
    /// of a later version of the specification).
    pub fn byte(&self, offset: usize) -> Option<u8> {
        self.formatted.get(offset).copied()
    }

    /// The little-endian word at `offset`.
    pub fn word(&self, offset: usize) -> Option<u16> {
        let bytes = self.formatted.get(offset..offset.checked_add(2)?)?;
        Some(u16::from_le_bytes([bytes[0], bytes[1]]))
    }

    /// The little-endian double word at `offset`.
    pub fn dword(&self, offset: usize) -> Option<u32> {
        let bytes = self.formatted.get(offset..offset.checked_add(4)?)?;
        Some(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
    }

    /// The string the byte at `offset` numbers, trimmed; `None` for string 0, a number
    /// past the strings there are, or a string of only blanks.
    pub fn string(&self, offset: usize) -> Option<String> {
        let number = usize::from(self.byte(offset)?);
        let raw = self.strings.get(number.checked_sub(1)?)?;
        let text = String::from_utf8_lossy(raw).trim().to_string();
        (!text.is_empty()).then_some(text)
    }
}

/// Splits `table` into its structures, up to the end-of-table structure, the end of the
/// bytes, or `count` structures when the entry point gives a count.
pub fn structures(table: &[u8], count: Option<u16>) -> Result<Vec<Structure<'_>>, SmbiosError> {
    let mut out = Vec::new();
    let mut offset = 0usize;
    let len = table.len();
    while offset < len {
        if count.is_some_and(|c| out.len() >= usize::from(c)) {
            break;
        }
        let header = table
            .get(offset..offset + 4)
            .ok_or(SmbiosError::TruncatedHeader { offset, len })?;
        let (kind, length) = (header[0], header[1]);
        let handle = u16::from_le_bytes([header[2], header[3]]);
        if length < 4 {
            return Err(SmbiosError::BadLength {
                kind,
                offset,
                length,
            });
        }
        let strings_at = offset + usize::from(length);
        let formatted = table
            .get(offset..strings_at)
            .ok_or(SmbiosError::TruncatedStructure {
                kind,
                offset,
                length,
                len,
            })?;
        // Strings are never empty, so the first double zero closes the set (an empty set
        // is the double zero alone).
        let end = table
            .get(strings_at..)
            .and_then(|rest| rest.windows(2).position(|w| w == [0, 0]))
            .map(|at| strings_at + at)
            .ok_or(SmbiosError::UnterminatedStrings { kind, offset })?;
        let strings = table[strings_at..end]
            .split(|b| *b == 0)
            .filter(|s| !s.is_empty())
            .collect();
        out.push(Structure {
            kind,
            handle,
            formatted,
            strings,
        });
        offset = end + 2;
        if kind == TYPE_END {
            break;
        }
    }
    if out.is_empty() {
        return Err(SmbiosError::EmptyTable);
    }
    Ok(out)
}

/// The firmware (type 0).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BiosInfo {
    /// Who wrote the firmware (`American Megatrends International, LLC.`).
    pub vendor: Option<String>,
    /// Its version (`P3.50`).
    pub version: Option<String>,
    /// Its release date as the firmware writes it (`08/22/2023`).
    pub release_date: Option<String>,
}

/// The system (type 1).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SystemInfo {
    /// Who made the system.
    pub manufacturer: Option<String>,
    /// Its model.
    pub product: Option<String>,
    /// Its version.
    pub version: Option<String>,
    /// Its serial number.
    pub serial: Option<String>,
    /// Its UUID, as `dmidecode` writes it; `None` when unset (all zeros or all ones).
    pub uuid: Option<String>,
}

/// The mainboard (type 2).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BaseboardInfo {
    /// Who made the board.
    pub manufacturer: Option<String>,
    /// Its model.
    pub product: Option<String>,
    /// Its version.
    pub version: Option<String>,
    /// Its serial number: what the box is known by.
    pub serial: Option<String>,
}

/// The enclosure (type 3).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChassisInfo {
    /// Who made the chassis.
    pub manufacturer: Option<String>,
    /// Its kind (`Rack Mount Chassis`), from the type byte.
    pub kind: Option<String>,
    /// Its version.
    pub version: Option<String>,
    /// Its serial number.
    pub serial: Option<String>,
}

/// One processor socket (type 4).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessorInfo {
    /// The socket's name on the board (`CPU1`).
    pub socket: Option<String>,
    /// The processor's maker.
    pub manufacturer: Option<String>,
    /// The processor's name (`AMD EPYC 7532 32-Core Processor`).
    pub version: Option<String>,
    /// Its cores, when the firmware says.
    pub cores: Option<u16>,
    /// Its threads, when the firmware says.
    pub threads: Option<u16>,
    /// Whether the socket holds a processor.
    pub populated: bool,
}

/// One memory slot (type 17); an empty slot has `installed` false and no module fields.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryDevice {
    /// The slot's name on the board (`DIMM_A1`, `P0-DIMMB1`).
    pub locator: Option<String>,
    /// The bank's name (`P0_Node0_Channel1_Dimm0`).
    pub bank: Option<String>,
    /// Whether a module is in the slot.
    pub installed: bool,
    /// The module's size in bytes; `None` when empty or unknown.
    pub size_bytes: Option<u64>,
    /// The memory type (`DDR4`, `DDR5`), when known.
    pub memory_type: Option<String>,
    /// The module's rated speed, in MT/s.
    pub speed_mts: Option<u32>,
    /// The speed the firmware set, in MT/s.
    pub configured_speed_mts: Option<u32>,
    /// The module's maker.
    pub manufacturer: Option<String>,
    /// The module's serial number.
    pub serial: Option<String>,
    /// The module's part number.
    pub part_number: Option<String>,
}

/// What the tables say about the box.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Smbios {
    /// The SMBIOS version (`3.3`).
    pub version: String,
    /// The firmware, from the first type 0 structure.
    pub bios: Option<BiosInfo>,
    /// The system, from the first type 1 structure.
    pub system: Option<SystemInfo>,
    /// The mainboard, from the first type 2 structure.
    pub baseboard: Option<BaseboardInfo>,
    /// The enclosure, from the first type 3 structure.
    pub chassis: Option<ChassisInfo>,
    /// Every processor socket, in table order.
    pub processors: Vec<ProcessorInfo>,
    /// Every memory slot, in table order, empty ones included.
    pub memory_devices: Vec<MemoryDevice>,
}

/// Parses the entry point and the structure table.
pub fn parse(entry_point: &[u8], table: &[u8]) -> Result<Smbios, SmbiosError> {
    let entry = parse_entry_point(entry_point)?;
    let mut smbios = Smbios {
        version: format!("{}.{}", entry.major, entry.minor),
        ..Smbios::default()
    };
    for s in structures(table, entry.structure_count)? {
        match s.kind {
            TYPE_BIOS if smbios.bios.is_none() => smbios.bios = Some(bios(&s)),
            TYPE_SYSTEM if smbios.system.is_none() => smbios.system = Some(system(&s, &entry)),
            TYPE_BASEBOARD if smbios.baseboard.is_none() => smbios.baseboard = Some(board(&s)),
            TYPE_CHASSIS if smbios.chassis.is_none() => smbios.chassis = Some(chassis(&s)),
            TYPE_PROCESSOR => smbios.processors.push(processor(&s)),
            TYPE_MEMORY_DEVICE => smbios.memory_devices.push(memory_device(&s)),
            TYPE_INACTIVE | TYPE_END => {}
            _ => {}
        }
    }
    Ok(smbios)
}

/// Reads and parses the tables under `root`.
pub fn read(root: &Path) -> Result<Smbios, SmbiosError> {
    let entry_point = read_bounded(&root.join(ENTRY_POINT_PATH), MAX_ENTRY_POINT_BYTES)?;
    let table = read_bounded(&root.join(TABLE_PATH), MAX_TABLE_BYTES)?;
    parse(&entry_point, &table)
}

fn read_bounded(path: &Path, limit: u64) -> Result<Vec<u8>, SmbiosError> {
    let io_error = |source| SmbiosError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut bytes = Vec::new();
    File::open(path)
        .map_err(io_error)?
        .take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(io_error)?;
    if bytes.len() as u64 > limit {
        return Err(SmbiosError::TooLarge {
            path: path.to_path_buf(),
            limit,
        });
    }
    Ok(bytes)
}

fn bios(s: &Structure<'_>) -> BiosInfo {
    BiosInfo {
        vendor: s.string(0x04),
        version: s.string(0x05),
        release_date: s.string(0x08),
    }
}

fn system(s: &Structure<'_>, entry: &EntryPoint) -> SystemInfo {
    SystemInfo {
        manufacturer: s.string(0x04),
        product: s.string(0x05),
        version: s.string(0x06),
        serial: s.string(0x07),
        uuid: s
            .formatted
            .get(0x08..0x18)
            .and_then(|bytes| uuid(bytes, entry.at_least(2, 6))),
    }
}

/// The UUID as text; from SMBIOS 2.6 its first three fields are little-endian.
fn uuid(bytes: &[u8], little_endian_fields: bool) -> Option<String> {
    if bytes.iter().all(|b| *b == 0) || bytes.iter().all(|b| *b == 0xff) {
        return None;
    }
    let mut b = bytes.to_vec();
    if little_endian_fields {
        b[0..4].reverse();
        b[4..6].reverse();
        b[6..8].reverse();
    }
    let hex = |range: std::ops::Range<usize>| -> String {
        b[range].iter().map(|x| format!("{x:02X}")).collect()
    };
    Some(format!(
        "{}-{}-{}-{}-{}",
        hex(0..4),
        hex(4..6),
        hex(6..8),
        hex(8..10),
        hex(10..16)
    ))
}

fn board(s: &Structure<'_>) -> BaseboardInfo {
    BaseboardInfo {
        manufacturer: s.string(0x04),
        product: s.string(0x05),
        version: s.string(0x06),
        serial: s.string(0x07),
    }
}

fn chassis(s: &Structure<'_>) -> ChassisInfo {
    ChassisInfo {
        manufacturer: s.string(0x04),
        kind: s.byte(0x05).and_then(|t| chassis_kind(t & 0x7f)),
        version: s.string(0x06),
        serial: s.string(0x07),
    }
}

fn chassis_kind(code: u8) -> Option<String> {
    let name = match code {
        0x01 => "Other",
        0x03 => "Desktop",
        0x04 => "Low Profile Desktop",
        0x06 => "Mini Tower",
        0x07 => "Tower",
        0x11 => "Main Server Chassis",
        0x17 => "Rack Mount Chassis",
        0x1d => "Blade",
        0x23 => "Mini PC",
        _ => return None,
    };
    Some(name.to_string())
}

fn processor(s: &Structure<'_>) -> ProcessorInfo {
    // A count of 0xff says "see the word field" (SMBIOS 3.0); 0 means unknown.
    let count = |byte: usize, word: usize| match s.byte(byte)? {
        0 => None,
        0xff => s.word(word).filter(|w| *w != 0 && *w != 0xffff),
        n => Some(u16::from(n)),
    };
    ProcessorInfo {
        socket: s.string(0x04),
        manufacturer: s.string(0x07),
        version: s.string(0x10),
        cores: count(0x23, 0x2a),
        threads: count(0x25, 0x2e),
        populated: s.byte(0x18).is_some_and(|status| status & 0x40 != 0),
    }
}

fn memory_device(s: &Structure<'_>) -> MemoryDevice {
    const MIB: u64 = 1 << 20;
    const KIB: u64 = 1 << 10;
    let (installed, size_bytes) = match s.word(0x0c) {
        None | Some(0) => (false, None),
        Some(0xffff) => (true, None),
        Some(0x7fff) => (
            true,
            s.dword(0x1c)
                .map(|mib| u64::from(mib & 0x7fff_ffff) * MIB)
                .filter(|b| *b > 0),
        ),
        Some(size) if size & 0x8000 != 0 => (
            true,
            Some(u64::from(size & 0x7fff) * KIB).filter(|b| *b > 0),
        ),
        Some(size) => (true, Some(u64::from(size) * MIB)),
    };
    // 0 is unknown; 0xffff says the speed is in the extended field (SMBIOS 3.3).
    let speed = |word: usize, extended: usize| match s.word(word)? {
        0 => None,
        0xffff => s.dword(extended).filter(|v| *v != 0),
        v => Some(u32::from(v)),
    };
    let module = |offset: usize| installed.then(|| s.string(offset)).flatten();
    MemoryDevice {
        locator: s.string(0x10),
        bank: s.string(0x11),
        installed,
        size_bytes,
        memory_type: installed
            .then(|| s.byte(0x12).and_then(memory_type))
            .flatten(),
        speed_mts: installed.then(|| speed(0x15, 0x54)).flatten(),
        configured_speed_mts: installed.then(|| speed(0x20, 0x58)).flatten(),
        manufacturer: module(0x17),
        serial: module(0x18),
        part_number: module(0x1a),
    }
}

fn memory_type(code: u8) -> Option<String> {
    let name = match code {
        0x12 => "DDR",
        0x13 => "DDR2",
        0x18 => "DDR3",
        0x1a => "DDR4",
        0x1b => "LPDDR",
        0x1c => "LPDDR2",
        0x1d => "LPDDR3",
        0x1e => "LPDDR4",
        0x20 => "HBM",
        0x21 => "HBM2",
        0x22 => "DDR5",
        0x23 => "LPDDR5",
        0x24 => "HBM3",
        _ => return None,
    };
    Some(name.to_string())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Builds a structure: header, the formatted bytes after it, and the strings.
    pub(crate) fn structure(kind: u8, handle: u16, body: &[u8], strings: &[&str]) -> Vec<u8> {
        let mut out = vec![kind, (body.len() + 4) as u8];
        out.extend_from_slice(&handle.to_le_bytes());
        out.extend_from_slice(body);
        if strings.is_empty() {
            out.extend_from_slice(&[0, 0]);
        } else {
            for s in strings {
                out.extend_from_slice(s.as_bytes());
                out.push(0);
            }
            out.push(0);
        }
        out
    }

    pub(crate) fn entry_point_3(major: u8, minor: u8, table_len: u32) -> Vec<u8> {
        let mut ep = vec![0u8; 24];
        ep[..5].copy_from_slice(b"_SM3_");
        ep[6] = 24;
        ep[7] = major;
        ep[8] = minor;
        ep[10] = 1;
        ep[12..16].copy_from_slice(&table_len.to_le_bytes());
        ep[16..24].copy_from_slice(&0x000e_0000u64.to_le_bytes());
        let sum = ep.iter().fold(0u8, |s, b| s.wrapping_add(*b));
        ep[5] = 0u8.wrapping_sub(sum);
        ep
    }

    fn entry_point_2(table_len: u16, count: u16) -> Vec<u8> {
        let mut ep = vec![0u8; 31];
        ep[..4].copy_from_slice(b"_SM_");
        ep[5] = 0x1f;
        ep[6] = 2;
        ep[7] = 8;
        ep[0x10..0x15].copy_from_slice(b"_DMI_");
        ep[0x16..0x18].copy_from_slice(&table_len.to_le_bytes());
        ep[0x18..0x1c].copy_from_slice(&0x000f_0000u32.to_le_bytes());
        ep[0x1c..0x1e].copy_from_slice(&count.to_le_bytes());
        ep[0x1e] = 0x28;
        let sum = ep[0x10..0x1f].iter().fold(0u8, |s, b| s.wrapping_add(*b));
        ep[0x15] = 0u8.wrapping_sub(sum);
        let sum = ep.iter().fold(0u8, |s, b| s.wrapping_add(*b));
        ep[4] = 0u8.wrapping_sub(sum);
        ep
    }

    /// A type 17 body (SMBIOS 3.3 layout, 0x5c bytes with the header).
    pub(crate) fn dimm_body(size_mib: u16, extended_mib: u32, speed: u16) -> Vec<u8> {
        let mut b = vec![0u8; 0x5c - 4];
        let mut put16 = |off: usize, v: u16| b[off - 4..off - 2].copy_from_slice(&v.to_le_bytes());
        put16(0x08, 72);
        put16(0x0a, 64);
        put16(0x0c, size_mib);
        put16(0x15, speed);
        put16(0x20, speed);
        b[0x0e - 4] = 0x09;
        b[0x10 - 4] = 1;
        b[0x11 - 4] = 2;
        b[0x12 - 4] = 0x1a;
        b[0x17 - 4] = 3;
        b[0x18 - 4] = 4;
        b[0x19 - 4] = 0;
        b[0x1a - 4] = 5;
        b[0x1c - 4..0x20 - 4].copy_from_slice(&extended_mib.to_le_bytes());
        b
    }

    fn table() -> Vec<u8> {
        let mut t = Vec::new();
        let mut bios = vec![1, 2, 0x00, 0xf0, 3, 0xff];
        bios.resize(0x1a - 4, 0);
        t.extend(structure(
            0,
            0,
            &bios,
            &[
                "American Megatrends International, LLC.",
                "P3.50",
                "08/22/2023",
            ],
        ));
        let mut sys = vec![1, 2, 3, 4];
        sys.extend_from_slice(&[
            0x33, 0x22, 0x11, 0x00, 0x55, 0x44, 0x77, 0x66, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd,
            0xee, 0xff,
        ]);
        sys.extend_from_slice(&[6, 0, 0]);
        t.extend(structure(
            1,
            1,
            &sys,
            &["ASRockRack", "ROMED8-2T", "Default string", "SYS-0001"],
        ));
        t.extend(structure(
            2,
            2,
            &[1, 2, 3, 4, 0, 0x09, 0, 0x03, 0x00, 0x0a, 0],
            &["ASRockRack", "ROMED8-2T", "1.02", "M80-F4012300561"],
        ));
        t.extend(structure(
            3,
            3,
            &[1, 0x17, 0, 2, 0],
            &["ASRockRack", "CH-9"],
        ));
        // Offsets as the specification gives them, header included.
        let mut cpu = [0u8; 0x30];
        cpu[0x04] = 1;
        cpu[0x07] = 2;
        cpu[0x10] = 3;
        cpu[0x18] = 0x41;
        cpu[0x23] = 0xff;
        cpu[0x2a..0x2c].copy_from_slice(&300u16.to_le_bytes());
        cpu[0x25] = 64;
        t.extend(structure(
            4,
            4,
            &cpu[4..],
            &[
                "CPU1",
                "Advanced Micro Devices, Inc.",
                "AMD EPYC 7532 32-Core Processor",
            ],
        ));
        t.extend(structure(
            17,
            0x11,
            &dimm_body(16384, 0, 3200),
            &[
                "DIMM_A1",
                "P0_Node0_Channel0_Dimm0",
                "Samsung",
                "1234ABCD",
                "M393A4K40EB3-CWE",
            ],
        ));
        t.extend(structure(
            17,
            0x12,
            &dimm_body(0x7fff, 65536, 0xffff),
            &["DIMM_B1", "BANK 1", "Micron", "55AA", "MTC40F2046S1RC48BA1"],
        ));
        t.extend(structure(
            17,
            0x13,
            &dimm_body(0, 0, 0),
            &["DIMM_C1", "BANK 2", "NO DIMM", "NO DIMM", "NO DIMM"],
        ));
        t.extend(structure(127, 0xfeff, &[], &[]));
        t
    }

    #[test]
    fn a_3x_table_reads_whole() {
        let table = table();
        let s = parse(&entry_point_3(3, 3, table.len() as u32), &table).unwrap();
        assert_eq!(s.version, "3.3");
        let bios = s.bios.unwrap();
        assert_eq!(bios.version.as_deref(), Some("P3.50"));
        assert_eq!(bios.release_date.as_deref(), Some("08/22/2023"));
        let system = s.system.unwrap();
        assert_eq!(system.serial.as_deref(), Some("SYS-0001"));
        assert_eq!(
            system.uuid.as_deref(),
            Some("00112233-4455-6677-8899-AABBCCDDEEFF")
        );
        assert_eq!(
            s.baseboard.unwrap().serial.as_deref(),
            Some("M80-F4012300561")
        );
        let chassis = s.chassis.unwrap();
        assert_eq!(chassis.kind.as_deref(), Some("Rack Mount Chassis"));
        assert_eq!(chassis.version.as_deref(), None);
        assert_eq!(chassis.serial.as_deref(), Some("CH-9"));
        let cpu = &s.processors[0];
        assert_eq!(
            (cpu.cores, cpu.threads, cpu.populated),
            (Some(300), Some(64), true)
        );
        assert_eq!(cpu.socket.as_deref(), Some("CPU1"));
        let [a1, b1, c1] = &s.memory_devices[..] else {
            panic!("{:?}", s.memory_devices)
        };
        assert_eq!(a1.locator.as_deref(), Some("DIMM_A1"));
        assert_eq!(a1.size_bytes, Some(16 << 30));
        assert_eq!(a1.speed_mts, Some(3200));
        assert_eq!(a1.memory_type.as_deref(), Some("DDR4"));
        assert_eq!(a1.part_number.as_deref(), Some("M393A4K40EB3-CWE"));
        assert_eq!(a1.serial.as_deref(), Some("1234ABCD"));
        assert_eq!(b1.size_bytes, Some(64 << 30), "extended size");
        assert_eq!(b1.speed_mts, None, "0xffff with a zero extended speed");
        assert!(!c1.installed);
        assert_eq!(c1.size_bytes, None);
        assert_eq!(
            (c1.manufacturer.as_deref(), c1.part_number.as_deref()),
            (None, None)
        );
    }

    #[test]
    fn a_2x_entry_point_counts_structures() {
        let mut table = structure(2, 0, &[1, 2, 0, 3], &["Vendor", "Board", "SER"]);
        // Garbage after the counted structures is never read.
        table.extend_from_slice(&[0xde, 0xad]);
        let s = parse(&entry_point_2(table.len() as u16, 1), &table).unwrap();
        assert_eq!(s.version, "2.8");
        assert_eq!(s.baseboard.unwrap().serial.as_deref(), Some("SER"));
    }

    #[test]
    fn a_short_structure_lacks_later_fields_without_error() {
        // A type 17 of SMBIOS 2.3: 0x1b bytes, no extended size nor configured speed.
        let body = &dimm_body(0x7fff, 8192, 2400)[..0x1b - 4];
        let table = structure(17, 1, body, &["DIMM0", "B", "M", "S", "P"]);
        let s = parse(&entry_point_3(3, 0, 0), &table).unwrap();
        let d = &s.memory_devices[0];
        assert!(d.installed);
        assert_eq!(d.size_bytes, None);
        assert_eq!(d.configured_speed_mts, None);
        assert_eq!(d.speed_mts, Some(2400));
    }

    #[test]
    fn bad_entry_points_are_errors() {
        let table = table();
        let mut ep = entry_point_3(3, 3, table.len() as u32);
        ep[9] ^= 1;
        assert!(matches!(
            parse(&ep, &table),
            Err(SmbiosError::BadChecksum { .. })
        ));
        assert!(matches!(
            parse(b"_SM3_", &table),
            Err(SmbiosError::EntryPointTooShort { .. })
        ));
        assert!(matches!(
            parse(b"MZ\x90\x00", &table),
            Err(SmbiosError::UnknownAnchor { .. })
        ));
        let mut ep2 = entry_point_2(10, 1);
        ep2[0x10] = b'X';
        assert!(parse(&ep2, &table).is_err());
        assert!(parse(&[], &table).is_err());
    }

    #[test]
    fn every_truncation_of_a_table_is_an_error_or_a_shorter_table() {
        let table = table();
        let ep = entry_point_3(3, 3, table.len() as u32);
        for cut in 0..table.len() {
            match parse(&ep, &table[..cut]) {
                Ok(s) => assert!(s.memory_devices.len() <= 3),
                Err(e) => assert!(!e.to_string().is_empty()),
            }
        }
        assert!(matches!(
            structures(&table[..3], None),
            Err(SmbiosError::TruncatedHeader { offset: 0, len: 3 })
        ));
        assert!(matches!(
            structures(&[0, 2, 0, 0, 0, 0], None),
            Err(SmbiosError::BadLength { length: 2, .. })
        ));
        assert!(matches!(
            structures(&[0, 0x20, 0, 0, 0, 0], None),
            Err(SmbiosError::TruncatedStructure { length: 0x20, .. })
        ));
        assert!(matches!(
            structures(&[0, 4, 0, 0, b'a', 0], None),
            Err(SmbiosError::UnterminatedStrings { kind: 0, offset: 0 })
        ));
        assert!(matches!(
            structures(&[], None),
            Err(SmbiosError::EmptyTable)
        ));
    }

    #[test]
    fn string_numbers_past_the_set_and_odd_bytes_are_none_or_lossy() {
        let table = structure(2, 0, &[1, 9, 0, 2], &["\u{e9}cole", "  "]);
        let s = &structures(&table, None).unwrap()[0];
        assert_eq!(s.string(0x04).as_deref(), Some("\u{e9}cole"));
        assert_eq!(s.string(0x05), None);
        assert_eq!(s.string(0x06), None);
        assert_eq!(s.string(0x07), None, "blank");
        assert_eq!(s.string(0x40), None, "past the structure");
        let raw = [2u8, 5, 0, 0, 1, 0xff, b'x', 0, 0];
        let s = &structures(&raw, None).unwrap()[0];
        assert_eq!(s.string(0x04).as_deref(), Some("\u{fffd}x"));
    }

    #[test]
    fn reading_a_missing_tree_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let e = read(dir.path()).unwrap_err().to_string();
        assert!(e.contains("smbios_entry_point: cannot read"), "{e}");
    }
}
