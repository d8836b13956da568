//! The ROCm release a box would run HIP work on, and the oldest release each Radeon needs.
//! A GPU the installed ROCm cannot drive is a finding naming both versions: otherwise HIP
//! fails at the first kernel (`invalid device function`), or a framework quietly falls
//! back to the CPU.

use std::path::Path;

use super::gpu::Gpu;
use super::read::{self, Findings, Presence};
use crate::runtime::library_path::version_from_file_name;
use crate::runtime::RuntimeReport;

/// What the GPUs of one compiler target need of ROCm.
struct RocmRequirement {
    /// The models (names from the GPU model table) of this target.
    models: &'static [&'static str],
    /// Their compiler target.
    gfx_target: &'static str,
    /// The oldest ROCm release, as (major, minor), that drives them.
    minimum: (u32, u32),
}

/// Navi 48 (RDNA 4) is gfx1201 (LLVM's AMDGPU processor table); ROCm 6.4.1's system
/// requirements are the first to list the Radeon RX 9000 series, and ROCm 5.7 (Debian 13's)
/// has no gfx1201 code objects at all.
const ROCM_MINIMUM: &[RocmRequirement] = &[RocmRequirement {
    models: &[
        "Radeon RX 9070 XT",
        "Radeon RX 9070 GRE",
        "Radeon RX 9070",
        "Radeon RX 9070 series (Navi 48)",
    ],
    gfx_target: "gfx1201",
    minimum: (6, 4),
}];

/// Where Debian installs its HIP runtime (`libamdhip64-5`), outside `/opt/rocm`.
const SYSTEM_LIBRARY_DIR: &str = "usr/lib/x86_64-linux-gnu";

/// A ROCm release found on the box.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RocmRelease {
    /// The release's numbers (`[6, 4, 1]`); a HIP runtime gives only major and minor,
    /// since its third number is a build number, not ROCm's patch release.
    pub numbers: Vec<u32>,
    /// Where it was seen: a version file, or the HIP runtime library and its version.
    pub source: String,
}

impl RocmRelease {
    fn major_minor(&self) -> (u32, u32) {
        (
            self.numbers.first().copied().unwrap_or(0),
            self.numbers.get(1).copied().unwrap_or(0),
        )
    }

    /// `ROCm 5.7.1 (/opt/rocm/.info/version)`.
    pub fn describe(&self) -> String {
        let version: Vec<String> = self.numbers.iter().map(u32::to_string).collect();
        format!("ROCm {} ({})", version.join("."), self.source)
    }
}

/// The numbers of a ROCm version (`6.4.1-120`: the release, then the build after the
/// dash) or a HIP version (`5.7.31921`); at least major and minor.
fn parse_numbers(text: &str) -> Option<Vec<u32>> {
    let release = text.trim().split('-').next()?;
    let numbers: Vec<u32> = release
        .split('.')
        .map(|part| part.parse().ok())
        .collect::<Option<_>>()?;
    (numbers.len() >= 2).then_some(numbers)
}

/// A HIP runtime's version as the ROCm release it belongs to: HIP 5.7.31921 is ROCm 5.7.
fn from_hip_version(version: &str, source: String) -> Option<RocmRelease> {
    let numbers = parse_numbers(version)?;
    Some(RocmRelease {
        numbers: numbers[..2].to_vec(),
        source,
    })
}

/// The HIP runtime the probe loaded, which is the one GPU work would use.
fn from_runtime(runtime: &RuntimeReport) -> Option<RocmRelease> {
    let library = runtime
        .libraries
        .iter()
        .find(|l| l.runtime == "hip" && l.name == "hip" && l.status == "loaded");
    if let Some(library) = library {
        let version = library.version.as_deref()?;
        let at = library.path.as_deref().unwrap_or("an unknown path");
        return from_hip_version(version, format!("HIP runtime {version} at {at}"));
    }
    let hip = &runtime.hip;
    let version = hip.driver_version.as_deref().filter(|_| hip.loaded)?;
    from_hip_version(version, format!("HIP runtime {version}"))
}

/// One `.info/version` file under `root`, read as `shown` (its path on the box).
fn version_file(root: &Path, shown: &str, findings: &mut Findings) -> Option<RocmRelease> {
    let numbers = read::parsed(
        &root.join(shown.trim_start_matches('/')),
        "ROCm version",
        Presence::Optional,
        findings,
        parse_numbers,
    )?;
    Some(RocmRelease {
        numbers,
        source: shown.to_string(),
    })
}

/// The newest of the side-by-side installs (`/opt/rocm-6.4.1`), for a box whose
/// `/opt/rocm` link is missing.
fn newest_versioned_install(root: &Path, findings: &mut Findings) -> Option<RocmRelease> {
    let entries = std::fs::read_dir(root.join("opt")).ok()?;
    let mut names: Vec<String> = entries
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|name| name.starts_with("rocm-"))
        .collect();
    names.sort();
    names
        .iter()
        .filter_map(|name| version_file(root, &format!("/opt/{name}/.info/version"), findings))
        .max_by(|a, b| a.numbers.cmp(&b.numbers))
}

/// A HIP runtime installed outside `/opt` (Debian's `libamdhip64.so.5.7.31921`), by the
/// version its file name carries.
fn system_hip_library(root: &Path) -> Option<RocmRelease> {
    let entries = std::fs::read_dir(root.join(SYSTEM_LIBRARY_DIR)).ok()?;
    entries
        .flatten()
        .map(|e| e.path())
        .filter(|path| {
            path.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libamdhip64.so."))
        })
        .filter_map(|path| {
            let version = version_from_file_name(&path)?;
            let shown = Path::new("/").join(path.strip_prefix(root).ok()?);
            from_hip_version(&version, format!("HIP runtime library {}", shown.display()))
        })
        .max_by(|a, b| a.numbers.cmp(&b.numbers))
}

/// The ROCm release GPU work on this box would use: the HIP runtime the probe loaded;
/// without a probe, `/opt/rocm`, else the newest `/opt/rocm-*`, else a HIP runtime
/// library of the system's own.
pub fn installed(
    root: &Path,
    runtime: Option<&RuntimeReport>,
    findings: &mut Findings,
) -> Option<RocmRelease> {
    runtime
        .and_then(from_runtime)
        .or_else(|| version_file(root, "/opt/rocm/.info/version", findings))
        .or_else(|| newest_versioned_install(root, findings))
        .or_else(|| system_hip_library(root))
}

/// A finding for every GPU that `rocm` (the release found, if any) cannot drive, naming
/// the release it needs and the one the box has.
pub fn judge(gpus: &[Gpu], rocm: Option<&RocmRelease>, findings: &mut Findings) {
    for gpu in gpus {
        let Some(needs) = requirement(&gpu.model) else {
            continue;
        };
        let (major, minor) = needs.minimum;
        let has = match rocm {
            Some(release) if release.major_minor() >= needs.minimum => continue,
            Some(release) => format!("this system has {}", release.describe()),
            None => "no ROCm found (no /opt/rocm*/.info/version, no HIP runtime library)".into(),
        };
        findings.push(format!(
            "GPU {}: {} ({}) needs ROCm {major}.{minor} or later; {has}",
            gpu.address, gpu.model, needs.gfx_target
        ));
    }
}

fn requirement(model: &str) -> Option<&'static RocmRequirement> {
    ROCM_MINIMUM.iter().find(|r| r.models.contains(&model))
}

/// Reads the box's ROCm only where a GPU has a requirement of it, so that a box
/// without such GPUs draws no finding about files it does not need.
pub fn check(root: &Path, gpus: &[Gpu], runtime: Option<&RuntimeReport>, findings: &mut Findings) {
    if !gpus.iter().any(|g| requirement(&g.model).is_some()) {
        return;
    }
    let rocm = installed(root, runtime, findings);
    judge(gpus, rocm.as_ref(), findings);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::libraries::LibraryStatus;

    #[test]
    fn rocm_and_hip_versions_parse() {
        assert_eq!(parse_numbers("6.4.1-120\n"), Some(vec![6, 4, 1]));
        assert_eq!(parse_numbers("5.7.1"), Some(vec![5, 7, 1]));
        assert_eq!(parse_numbers("6"), None);
        assert_eq!(parse_numbers("six.four"), None);
        let hip = from_hip_version("5.7.31921", "x".into()).unwrap();
        assert_eq!(hip.numbers, [5, 7]);
    }

    fn write(root: &Path, rel: &str, text: &str) {
        let path = root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn opt_rocm_comes_before_side_by_side_installs_and_the_systems_hip() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let mut findings = Findings::default();
        assert_eq!(installed(root, None, &mut findings), None);
        write(
            root,
            "usr/lib/x86_64-linux-gnu/libamdhip64.so.5.7.31921",
            "",
        );
        let debian = installed(root, None, &mut findings).unwrap();
        assert_eq!(
            debian.describe(),
            "ROCm 5.7 (HIP runtime library /usr/lib/x86_64-linux-gnu/libamdhip64.so.5.7.31921)"
        );
        write(root, "opt/rocm-6.3.3/.info/version", "6.3.3-74\n");
        write(root, "opt/rocm-6.4.1/.info/version", "6.4.1-120\n");
        let newest = installed(root, None, &mut findings).unwrap();
        assert_eq!(
            newest.describe(),
            "ROCm 6.4.1 (/opt/rocm-6.4.1/.info/version)"
        );
        write(root, "opt/rocm/.info/version", "6.3.3-74\n");
        let linked = installed(root, None, &mut findings).unwrap();
        assert_eq!(linked.describe(), "ROCm 6.3.3 (/opt/rocm/.info/version)");
        assert!(findings.into_vec().is_empty());
    }

    #[test]
    fn the_loaded_hip_runtime_outranks_every_file() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "opt/rocm/.info/version", "6.4.1-120\n");
        let mut runtime = RuntimeReport::default();
        runtime.libraries.push(LibraryStatus {
            runtime: "hip",
            name: "hip",
            status: "loaded",
            path: Some("/usr/lib/x86_64-linux-gnu/libamdhip64.so.5.7.31921".into()),
            version: Some("5.7.31921".into()),
            detail: None,
        });
        let mut findings = Findings::default();
        let rocm = installed(dir.path(), Some(&runtime), &mut findings).unwrap();
        assert_eq!(
            rocm.describe(),
            "ROCm 5.7 (HIP runtime 5.7.31921 at /usr/lib/x86_64-linux-gnu/libamdhip64.so.5.7.31921)"
        );
    }

    #[test]
    fn a_malformed_version_file_is_a_finding() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "opt/rocm/.info/version", "latest\n");
        let mut findings = Findings::default();
        assert_eq!(installed(dir.path(), None, &mut findings), None);
        let findings = findings.into_vec();
        assert_eq!(findings.len(), 1);
        assert!(
            findings[0].contains("malformed ROCm version"),
            "{findings:?}"
        );
    }
}
