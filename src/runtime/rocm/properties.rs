//! Device properties, whose entry point and layout changed in ROCm 6.0: ROCm 6 exports
//! `hipGetDevicePropertiesR0600` (rocmrc's `hipDeviceProp_tR0600`), ROCm 5 exports
//! `hipGetDeviceProperties` with the older, shorter struct below.

use std::ffi::{c_char, c_int, c_void};
use std::mem::MaybeUninit;

use rocmrc::hip::sys::hipDeviceProp_tR0600;

use super::api::HipResult;
use crate::runtime::string_from_c_buffer;

type GetProperties = unsafe extern "C" fn(*mut c_void, c_int) -> HipResult;

/// The leading fields of ROCm 5's `hipDeviceProp_t` (hip_runtime_api.h of HIP 5.7), up
/// to the last one read here, followed by room for the rest and for any growth.
#[repr(C)]
struct LegacyProperties {
    name: [c_char; 256],
    total_global_mem: usize,
    shared_mem_per_block: usize,
    regs_per_block: c_int,
    warp_size: c_int,
    max_threads_per_block: c_int,
    max_threads_dim: [c_int; 3],
    max_grid_size: [c_int; 3],
    clock_rate: c_int,
    memory_clock_rate: c_int,
    memory_bus_width: c_int,
    total_const_mem: usize,
    major: c_int,
    minor: c_int,
    multi_processor_count: c_int,
    l2_cache_size: c_int,
    max_threads_per_multi_processor: c_int,
    compute_mode: c_int,
    clock_instruction_rate: c_int,
    /// `hipDeviceArch_t`: 32 bits of feature flags.
    arch: u32,
    concurrent_kernels: c_int,
    pci_domain_id: c_int,
    pci_bus_id: c_int,
    pci_device_id: c_int,
    max_shared_memory_per_multi_processor: usize,
    is_multi_gpu_board: c_int,
    can_map_host_memory: c_int,
    gcn_arch: c_int,
    gcn_arch_name: [c_char; 256],
    /// The struct is 792 bytes in HIP 5.7; the runtime writes all of it.
    rest: [u8; 4096],
}

/// Where HIP 5.7's header puts `gcnArchName` (as gcc lays the struct out on x86-64).
pub const LEGACY_GCN_ARCH_NAME_OFFSET: usize = 396;

/// The device-properties entry point this HIP runtime exports.
#[derive(Clone, Copy)]
pub enum DeviceProperties {
    /// `hipGetDevicePropertiesR0600`, ROCm 6's layout.
    R0600(GetProperties),
    /// `hipGetDeviceProperties` with HIP 5.7's layout (before ROCm 6.0).
    Legacy(GetProperties),
}

/// What tinyperf reads of a device's properties.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Properties {
    pub name: String,
    /// `gfx1100`: the compiler target, without the feature suffix (`:sramecc+:xnack-`).
    pub gfx_target: String,
    pub pci_address: String,
    pub total_memory_bytes: u64,
    pub multiprocessors: u32,
}

impl DeviceProperties {
    /// The entry point this runtime exports, or the names tinyperf looked for.
    pub fn resolve(library: &libloading::Library) -> Result<DeviceProperties, Vec<&'static str>> {
        // SAFETY: both symbols take a properties struct pointer and a device ordinal.
        let lookup = |symbol: &str| unsafe {
            library
                .get::<GetProperties>(symbol.as_bytes())
                .map(|f| *f)
                .ok()
        };
        if let Some(f) = lookup("hipGetDevicePropertiesR0600") {
            Ok(DeviceProperties::R0600(f))
        } else if let Some(f) = lookup("hipGetDeviceProperties") {
            Ok(DeviceProperties::Legacy(f))
        } else {
            Err(vec![
                "hipGetDevicePropertiesR0600 (ROCm 6) or hipGetDeviceProperties (ROCm 5)",
            ])
        }
    }

    /// Which layout, for reports.
    pub fn layout(&self) -> &'static str {
        match self {
            DeviceProperties::R0600(_) => "hipGetDevicePropertiesR0600",
            DeviceProperties::Legacy(_) => "hipGetDeviceProperties (before ROCm 6.0)",
        }
    }

    /// The properties of device `ordinal`, or the runtime's error code.
    pub fn get(&self, ordinal: c_int) -> Result<Properties, HipResult> {
        match *self {
            DeviceProperties::R0600(f) => {
                let mut raw = MaybeUninit::<hipDeviceProp_tR0600>::zeroed();
                // SAFETY: the runtime fills the struct of the layout its symbol names.
                check(unsafe { f(raw.as_mut_ptr().cast(), ordinal) })?;
                // SAFETY: zeroed first, so every byte is initialised; plain data.
                let p = unsafe { raw.assume_init() };
                Ok(Properties::from_parts(
                    &p.name,
                    &p.gcnArchName,
                    (p.pciDomainID, p.pciBusID, p.pciDeviceID),
                    p.totalGlobalMem,
                    p.multiProcessorCount,
                ))
            }
            DeviceProperties::Legacy(f) => {
                let mut raw = Box::new(MaybeUninit::<LegacyProperties>::zeroed());
                // SAFETY: as above, with room beyond the struct's 792 bytes.
                check(unsafe { f(raw.as_mut_ptr().cast(), ordinal) })?;
                // SAFETY: as above.
                let p = unsafe { raw.assume_init_ref() };
                Ok(Properties::from_parts(
                    &p.name,
                    &p.gcn_arch_name,
                    (p.pci_domain_id, p.pci_bus_id, p.pci_device_id),
                    p.total_global_mem,
                    p.multi_processor_count,
                ))
            }
        }
    }
}

fn check(result: HipResult) -> Result<(), HipResult> {
    if result == super::api::HIP_SUCCESS {
        Ok(())
    } else {
        Err(result)
    }
}

impl Properties {
    fn from_parts(
        name: &[c_char],
        arch: &[c_char],
        (domain, bus, device): (c_int, c_int, c_int),
        memory: usize,
        multiprocessors: c_int,
    ) -> Properties {
        let arch = string_from_c_buffer(arch);
        Properties {
            name: string_from_c_buffer(name),
            gfx_target: arch
                .split(':')
                .next()
                .unwrap_or_default()
                .trim()
                .to_string(),
            pci_address: format!("{domain:04x}:{bus:02x}:{device:02x}.0"),
            total_memory_bytes: memory as u64,
            multiprocessors: multiprocessors.max(0) as u32,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The offsets gcc gives HIP 5.7's `hipDeviceProp_t` on x86-64.
    #[test]
    fn the_legacy_layout_matches_hip_5_7() {
        assert_eq!(
            std::mem::offset_of!(LegacyProperties, total_global_mem),
            256
        );
        assert_eq!(
            std::mem::offset_of!(LegacyProperties, multi_processor_count),
            336
        );
        assert_eq!(std::mem::offset_of!(LegacyProperties, pci_domain_id), 364);
        assert_eq!(std::mem::offset_of!(LegacyProperties, pci_bus_id), 368);
        assert_eq!(std::mem::offset_of!(LegacyProperties, pci_device_id), 372);
        assert_eq!(
            std::mem::offset_of!(LegacyProperties, gcn_arch_name),
            LEGACY_GCN_ARCH_NAME_OFFSET
        );
        // The whole 792-byte struct, and more, fits.
        assert!(std::mem::size_of::<LegacyProperties>() >= 792 + 1024);
    }
}
