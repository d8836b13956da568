//! What a compiled kernel image is, read from its own header: a CUDA cubin and the SM it
//! is for, PTX and its ISA version (which decides the oldest driver that loads it), or an
//! AMD GPU code object and its gfx target. `tinyperf gpu compile` reports it, so a check
//! of an image can tell whether the box's driver would load what its compiler makes.

use serde::Serialize;

const ELF_MAGIC: &[u8] = b"\x7fELF";
const EM_CUDA: u16 = 190;
const EM_AMDGPU: u16 = 224;
const AMDGPU_TARGET_MARKER: &[u8] = b"amdgcn-amd-amdhsa--";

/// The kind of image and the target it was built for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CodeObject {
    /// `cubin`, `ptx`, `hsaco` or `unknown`.
    pub format: &'static str,
    /// `sm_89`, `gfx1100`: the architecture the machine code is for (none for PTX).
    pub elf_arch: Option<String>,
    /// `8.4`: the PTX ISA version (PTX only).
    pub ptx_isa: Option<String>,
}

/// Reads `image`'s header.
pub fn inspect(image: &[u8]) -> CodeObject {
    if image.starts_with(ELF_MAGIC) && image.len() >= 52 {
        let machine = u16::from_le_bytes([image[18], image[19]]);
        let flags = u32::from_le_bytes([image[48], image[49], image[50], image[51]]);
        match machine {
            EM_CUDA => {
                return CodeObject {
                    format: "cubin",
                    elf_arch: Some(format!("sm_{}", flags & 0xff)),
                    ptx_isa: None,
                }
            }
            EM_AMDGPU => {
                return CodeObject {
                    format: "hsaco",
                    elf_arch: amdgpu_target(flags & 0xff).map(str::to_string),
                    ptx_isa: None,
                }
            }
            _ => {}
        }
    }
    if let Some(version) = ptx_version(image) {
        return CodeObject {
            format: "ptx",
            elf_arch: None,
            ptx_isa: Some(version),
        };
    }
    // An offload bundle (ROCm 6 can return one) names its code objects' targets.
    if let Some(target) = bundled_amdgpu_target(image) {
        return CodeObject {
            format: "hsaco",
            elf_arch: Some(target),
            ptx_isa: None,
        };
    }
    CodeObject {
        format: "unknown",
        elf_arch: None,
        ptx_isa: None,
    }
}

/// `EF_AMDGPU_MACH` values (LLVM's AMDGPUUsage) of the targets tinyperf meets.
fn amdgpu_target(mach: u32) -> Option<&'static str> {
    Some(match mach {
        0x02c => "gfx900",
        0x02f => "gfx906",
        0x030 => "gfx908",
        0x033 => "gfx1010",
        0x036 => "gfx1030",
        0x03f => "gfx90a",
        0x040 => "gfx940",
        0x041 => "gfx1100",
        0x046 => "gfx1101",
        0x047 => "gfx1102",
        0x048 => "gfx1200",
        0x04b => "gfx941",
        0x04c => "gfx942",
        0x04e => "gfx1201",
        _ => return None,
    })
}

fn ptx_version(image: &[u8]) -> Option<String> {
    let head = &image[..image.len().min(4096)];
    let text = std::str::from_utf8(head).ok()?;
    text.lines()
        .map(str::trim)
        .find_map(|line| line.strip_prefix(".version "))
        .map(|v| v.trim().to_string())
}

fn bundled_amdgpu_target(image: &[u8]) -> Option<String> {
    let at = image
        .windows(AMDGPU_TARGET_MARKER.len())
        .position(|w| w == AMDGPU_TARGET_MARKER)?;
    let rest = &image[at + AMDGPU_TARGET_MARKER.len()..];
    let target: String = rest
        .iter()
        .take_while(|b| b.is_ascii_alphanumeric())
        .map(|&b| b as char)
        .collect();
    target.starts_with("gfx").then_some(target)
}

/// Whether a driver that JIT-compiles PTX up to ISA `limit` (`8.4` for driver 550) takes
/// PTX of ISA `version`.
pub fn ptx_isa_at_most(version: &str, limit: &str) -> bool {
    let parse = |v: &str| -> Option<(u32, u32)> {
        let (major, minor) = v.split_once('.')?;
        Some((major.parse().ok()?, minor.parse().ok()?))
    };
    matches!((parse(version), parse(limit)), (Some(v), Some(l)) if v <= l)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn elf(machine: u16, flags: u32) -> Vec<u8> {
        let mut image = vec![0u8; 64];
        image[..4].copy_from_slice(ELF_MAGIC);
        image[18..20].copy_from_slice(&machine.to_le_bytes());
        image[48..52].copy_from_slice(&flags.to_le_bytes());
        image
    }

    #[test]
    fn a_cubin_names_its_sm() {
        // NVRTC 12.9's cubin for sm_89 carries these flags.
        let object = inspect(&elf(EM_CUDA, 0x0059_0559));
        assert_eq!(object.format, "cubin");
        assert_eq!(object.elf_arch.as_deref(), Some("sm_89"));
    }

    #[test]
    fn an_amdgpu_code_object_names_its_gfx_target() {
        let object = inspect(&elf(EM_AMDGPU, 0x41));
        assert_eq!(object.format, "hsaco");
        assert_eq!(object.elf_arch.as_deref(), Some("gfx1100"));
        assert_eq!(inspect(&elf(EM_AMDGPU, 0x99)).elf_arch, None);
    }

    #[test]
    fn ptx_names_its_isa_version() {
        let ptx = b"//\n// Generated by NVIDIA NVVM Compiler\n.version 8.8\n.target sm_89\n";
        let object = inspect(ptx);
        assert_eq!(object.format, "ptx");
        assert_eq!(object.ptx_isa.as_deref(), Some("8.8"));
        assert!(!ptx_isa_at_most("8.8", "8.4"));
        assert!(ptx_isa_at_most("8.4", "8.4"));
        assert!(ptx_isa_at_most("7.8", "8.4"));
        assert!(!ptx_isa_at_most("garbage", "8.4"));
    }

    #[test]
    fn an_offload_bundle_names_its_target() {
        let bundle = b"__CLANG_OFFLOAD_BUNDLE__\x02\0\0\0hipv4-amdgcn-amd-amdhsa--gfx1100\0";
        assert_eq!(inspect(bundle).elf_arch.as_deref(), Some("gfx1100"));
        assert_eq!(inspect(b"nothing").format, "unknown");
    }
}
