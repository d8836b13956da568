//! The ROCm libraries, opened by the names each ROCm release installs them under.
//!
//! rocmrc's own loader only tries ROCm 6 names (`libamdhip64.so{,.6,.0,.1}`), looks for
//! hiprtc in a library of its own, and reads device properties through the 6.0 entry
//! point. Debian 13 ships ROCm 5.7: `libamdhip64.so.5`, hiprtc exported by that same
//! library, and the pre-6.0 `hipGetDeviceProperties`. So tinyperf opens the libraries
//! itself, resolves every entry point it calls before calling any (a missing one is a
//! finding, never a panic), and keeps rocmrc for the ABI: enum values and the 6.0
//! properties layout.

pub mod api;
mod properties;

use std::path::PathBuf;
use std::sync::OnceLock;

pub use properties::{DeviceProperties, LEGACY_GCN_ARCH_NAME_OFFSET};

use api::{HipApi, HiprtcApi, RocblasApi};

/// The HIP runtime: ROCm 6's soname, ROCm 7's, ROCm 5's, and the development link.
const HIP_NAMES: &[&str] = &[
    "libamdhip64.so.6",
    "libamdhip64.so.7",
    "libamdhip64.so.5",
    "libamdhip64.so",
];
/// hiprtc's own library, from ROCm 6 on.
const HIPRTC_NAMES: &[&str] = &["libhiprtc.so.6", "libhiprtc.so.7", "libhiprtc.so"];
/// rocBLAS: ROCm 6's soname (`.4`), ROCm 5's (`.0`), ROCm 7's (`.5`), the link.
const ROCBLAS_NAMES: &[&str] = &[
    "librocblas.so.4",
    "librocblas.so.0",
    "librocblas.so.5",
    "librocblas.so",
];

/// One opened library: where it was found, and the handle that keeps its code mapped.
pub struct Opened {
    /// The name or path it was opened by.
    pub name: String,
    /// The file the loader mapped, when it can be told (symbolic links resolved).
    pub path: Option<PathBuf>,
    library: libloading::Library,
}

/// The names to try for `names`: each as the loader finds it (`LD_LIBRARY_PATH`, the
/// loader cache), then under `$ROCM_PATH/lib` and `/opt/rocm/lib`.
fn candidates(names: &[&str]) -> Vec<String> {
    let mut folders = Vec::new();
    if let Ok(root) = std::env::var("ROCM_PATH") {
        if !root.is_empty() {
            folders.push(format!("{root}/lib"));
        }
    }
    folders.push("/opt/rocm/lib".to_string());
    let mut out: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    for folder in &folders {
        out.extend(names.iter().map(|n| format!("{folder}/{n}")));
    }
    out
}

/// Opens the first of `names` that loads, or says where it looked and why each attempt
/// the loader made failed, when that was more than the file not being there.
pub fn open(names: &[&str]) -> Result<Opened, String> {
    let mut failures = Vec::new();
    for name in candidates(names) {
        // SAFETY: opening a library runs only its own initialisers.
        match unsafe { libloading::Library::new(&name) } {
            Ok(library) => {
                let path = crate::runtime::library_path::loaded_path(&name);
                return Ok(Opened {
                    name,
                    path,
                    library,
                });
            }
            Err(e) => {
                // libloading keeps the loader's own words, which name the file, in the source.
                let detail = std::error::Error::source(&e)
                    .map(|d| d.to_string())
                    .unwrap_or_else(|| format!("{name}: {e}"));
                if !detail.contains("No such file or directory") {
                    failures.push(detail);
                }
            }
        }
    }
    let mut tried = format!(
        "tried {} in the loader's path, $ROCM_PATH/lib and /opt/rocm/lib",
        names.join(", ")
    );
    if !failures.is_empty() {
        tried.push_str(": ");
        tried.push_str(&failures.join("; "));
    }
    Err(tried)
}

impl Opened {
    /// Where the library is, for reports: the mapped file, else the name it was opened by.
    pub fn location(&self) -> String {
        self.path
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| self.name.clone())
    }

    /// The loaded library, for resolving its symbols.
    pub fn library(&self) -> &libloading::Library {
        &self.library
    }
}

/// The HIP runtime with its entry points and the way this release reads device
/// properties.
pub struct Hip {
    /// The runtime's library.
    pub opened: Opened,
    /// Its entry points.
    pub api: HipApi,
    /// How this release's device properties are read.
    pub properties: DeviceProperties,
}

/// hiprtc, from its own library or from inside the HIP runtime.
pub struct Hiprtc {
    /// Where the entry points were found.
    pub location: String,
    /// Its entry points.
    pub api: HiprtcApi,
    /// Its own library, when it has one (otherwise the HIP runtime keeps it loaded).
    _own: Option<Opened>,
}

/// rocBLAS, for the GEMM checks.
pub struct Rocblas {
    /// Its library.
    pub opened: Opened,
    /// Its entry points.
    pub api: RocblasApi,
}

/// Why a library could not be used: not on this machine, or lacking entry points.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    /// No candidate name could be opened.
    #[error("{library} not found ({tried})")]
    NotFound {
        /// The library's name (`libamdhip64`).
        library: &'static str,
        /// The names and folders tried, and the loader's complaints.
        tried: String,
    },
    /// The library opened but lacks entry points tinyperf calls.
    #[error("{library} at {location} lacks {}", missing.join(", "))]
    MissingSymbols {
        /// The library's name.
        library: &'static str,
        /// The file it was opened from.
        location: String,
        /// The entry points it lacks.
        missing: Vec<&'static str>,
    },
}

impl LoadError {
    /// Whether the library is absent, rather than unusable.
    pub fn is_not_found(&self) -> bool {
        matches!(self, LoadError::NotFound { .. })
    }
}

fn load_hip() -> Result<Hip, LoadError> {
    let opened = open(HIP_NAMES).map_err(|tried| LoadError::NotFound {
        library: "HIP runtime library (libamdhip64)",
        tried,
    })?;
    let missing_in = |missing| LoadError::MissingSymbols {
        library: "HIP runtime library",
        location: opened.location(),
        missing,
    };
    let api = HipApi::resolve(opened.library()).map_err(missing_in)?;
    let properties = DeviceProperties::resolve(opened.library()).map_err(|missing| {
        LoadError::MissingSymbols {
            library: "HIP runtime library",
            location: opened.location(),
            missing,
        }
    })?;
    Ok(Hip {
        opened,
        api,
        properties,
    })
}

fn load_hiprtc() -> Result<Hiprtc, LoadError> {
    if let Ok(own) = open(HIPRTC_NAMES) {
        let api =
            HiprtcApi::resolve(own.library()).map_err(|missing| LoadError::MissingSymbols {
                library: "hiprtc library",
                location: own.location(),
                missing,
            })?;
        return Ok(Hiprtc {
            location: own.location(),
            api,
            _own: Some(own),
        });
    }
    // Before ROCm 6, hiprtc is part of the HIP runtime.
    let not_found = |tried: String| LoadError::NotFound {
        library: "hiprtc library (libhiprtc.so, or inside libamdhip64 before ROCm 6)",
        tried,
    };
    let hip = hip().map_err(|error| match error {
        LoadError::NotFound { tried, .. } => not_found(tried),
        other => other,
    })?;
    match HiprtcApi::resolve(hip.opened.library()) {
        Ok(api) => Ok(Hiprtc {
            location: hip.opened.location(),
            api,
            _own: None,
        }),
        Err(missing) if missing.len() == HiprtcApi::SYMBOLS.len() => Err(not_found(format!(
            "{}; the HIP runtime at {} has no hiprtc either",
            HIPRTC_NAMES.join(", "),
            hip.opened.location()
        ))),
        Err(missing) => Err(LoadError::MissingSymbols {
            library: "hiprtc (inside the HIP runtime library)",
            location: hip.opened.location(),
            missing,
        }),
    }
}

fn load_rocblas() -> Result<Rocblas, LoadError> {
    let opened = open(ROCBLAS_NAMES).map_err(|tried| LoadError::NotFound {
        library: "rocBLAS library (librocblas)",
        tried,
    })?;
    let api =
        RocblasApi::resolve(opened.library()).map_err(|missing| LoadError::MissingSymbols {
            library: "rocBLAS library",
            location: opened.location(),
            missing,
        })?;
    Ok(Rocblas { opened, api })
}

/// The HIP runtime, opened once per process.
pub fn hip() -> Result<&'static Hip, LoadError> {
    static HIP: OnceLock<Result<Hip, LoadError>> = OnceLock::new();
    HIP.get_or_init(load_hip).as_ref().map_err(Clone::clone)
}

/// hiprtc, opened once per process.
pub fn hiprtc() -> Result<&'static Hiprtc, LoadError> {
    static HIPRTC: OnceLock<Result<Hiprtc, LoadError>> = OnceLock::new();
    HIPRTC
        .get_or_init(load_hiprtc)
        .as_ref()
        .map_err(Clone::clone)
}

/// rocBLAS, opened once per process.
pub fn rocblas() -> Result<&'static Rocblas, LoadError> {
    static ROCBLAS: OnceLock<Result<Rocblas, LoadError>> = OnceLock::new();
    ROCBLAS
        .get_or_init(load_rocblas)
        .as_ref()
        .map_err(Clone::clone)
}

/// HIP encodes versions as `major * 10_000_000 + minor * 100_000 + patch`:
/// `60443483` → `6.4.43483`.
pub fn format_hip_version(version: i32) -> String {
    format!(
        "{}.{}.{}",
        version / 10_000_000,
        (version / 100_000) % 100,
        version % 100_000
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_the_hip_version_encoding() {
        assert_eq!(format_hip_version(60443483), "6.4.43483");
        assert_eq!(format_hip_version(50_731_921), "5.7.31921");
    }

    #[test]
    fn tries_rocm_5_names_and_the_install_folders() {
        let names = candidates(HIP_NAMES);
        assert!(names.contains(&"libamdhip64.so.5".to_string()));
        assert!(names.contains(&"/opt/rocm/lib/libamdhip64.so.6".to_string()));
        assert_eq!(names[0], "libamdhip64.so.6");
    }

    #[test]
    fn a_library_that_is_not_there_is_not_found_with_what_was_tried() {
        let error = open(&["libtinyperf-no-such-library.so.9"]).err().unwrap();
        assert!(
            error.contains("libtinyperf-no-such-library.so.9"),
            "{error}"
        );
    }
}
