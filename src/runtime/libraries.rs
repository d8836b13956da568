//! Every GPU library a box's runtime needs, opened by the names the backends open it by,
//! with the version the library itself reports: what `tinyperf detect` lists, so an image
//! can be checked to carry each one (and a box to load each one) without a GPU.

use std::ffi::{c_char, c_int, c_uint};

use serde::Serialize;

use super::library_path::{loaded_path, version_from_file_name};
use super::rocm;

/// NCCL's runtime library, the versioned name first: the unversioned link only exists
/// where the development package is installed.
pub const NCCL_NAMES: &[&str] = &["libnccl.so.2", "libnccl.so"];
/// The same for RCCL, as ROCm installs it.
pub const RCCL_NAMES: &[&str] = &["librccl.so.1", "librccl.so"];
/// rocm-smi's library: `.so.1` in Debian's ROCm 5.7/6.1 build, `.so.7` in AMD's ROCm 6.
const ROCM_SMI_NAMES: &[&str] = &[
    "librocm_smi64.so.1",
    "librocm_smi64.so.7",
    "librocm_smi64.so",
];
/// nvml-wrapper's name.
const NVML_NAMES: &[&str] = &["libnvidia-ml.so.1"];

/// One GPU library: whether it loads, from where, and its version.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LibraryStatus {
    /// `cuda`, `hip` or `nvml`.
    pub runtime: &'static str,
    /// `driver`, `nvrtc`, `cublas`, `cublaslt`, `cudnn`, `nccl`, `nvml`, `hip`, `hiprtc`,
    /// `rocblas`, `rccl`, `rocm-smi`.
    pub name: &'static str,
    /// `loaded`, `not found` or `error` (found but unusable: see `detail`).
    pub status: &'static str,
    /// The file it was loaded from, when it loaded.
    pub path: Option<String>,
    /// Its version: what the library reports, else what its file name carries.
    pub version: Option<String>,
    /// Why it was not found or could not be used.
    pub detail: Option<String>,
}

impl LibraryStatus {
    fn loaded(
        runtime: &'static str,
        name: &'static str,
        path: Option<String>,
        version: Option<String>,
    ) -> LibraryStatus {
        LibraryStatus {
            runtime,
            name,
            status: "loaded",
            path,
            version,
            detail: None,
        }
    }

    fn not_found(runtime: &'static str, name: &'static str, detail: String) -> LibraryStatus {
        LibraryStatus {
            runtime,
            name,
            status: "not found",
            path: None,
            version: None,
            detail: Some(detail),
        }
    }
}

/// Every library, CUDA's first, then NVML, then ROCm's.
pub fn libraries() -> Vec<LibraryStatus> {
    let cuda_names = |stem: &str| cudarc::get_lib_name_candidates(stem);
    vec![
        versioned("cuda", "driver", &cuda_names("cuda"), cuda_driver_version),
        versioned("cuda", "nvrtc", &cuda_names("nvrtc"), nvrtc_version),
        versioned("cuda", "cublas", &cuda_names("cublas"), cublas_version),
        versioned(
            "cuda",
            "cublaslt",
            &cuda_names("cublasLt"),
            cublaslt_version,
        ),
        versioned("cuda", "cudnn", &cuda_names("cudnn"), cudnn_version),
        versioned("cuda", "nccl", &owned(NCCL_NAMES), nccl_version),
        versioned("nvml", "nvml", &owned(NVML_NAMES), |_| None),
        hip_runtime(),
        hiprtc(),
        rocblas(),
        versioned("hip", "rccl", &owned(RCCL_NAMES), nccl_version),
        versioned("hip", "rocm-smi", &owned(ROCM_SMI_NAMES), rocm_smi_version),
    ]
}

fn owned(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| n.to_string()).collect()
}

/// Opens the first of `names` that loads and asks it its version; a library whose own
/// answer is unavailable gives the version its file name carries.
fn versioned(
    runtime: &'static str,
    name: &'static str,
    names: &[String],
    version: fn(&libloading::Library) -> Option<String>,
) -> LibraryStatus {
    let mut failures = Vec::new();
    for candidate in names {
        // SAFETY: opening a library runs only its own initialisers.
        let library = match unsafe { libloading::Library::new(candidate) } {
            Ok(library) => library,
            Err(error) => {
                // A file that is there but does not load (a newer C library, a missing
                // dependency) is an error, not an absence: keep the loader's words.
                let detail = std::error::Error::source(&error)
                    .map(|d| d.to_string())
                    .unwrap_or_else(|| error.to_string());
                if !detail.contains("No such file or directory") {
                    failures.push(detail);
                }
                continue;
            }
        };
        let path = loaded_path(candidate);
        let reported = super::guard::catch(|| version(&library)).ok().flatten();
        let from_file = path.as_deref().and_then(version_from_file_name);
        return LibraryStatus::loaded(
            runtime,
            name,
            path.map(|p| p.display().to_string()),
            reported.or(from_file),
        );
    }
    if !failures.is_empty() {
        failures.dedup();
        return LibraryStatus {
            status: "error",
            ..LibraryStatus::not_found(runtime, name, failures.join("; "))
        };
    }
    LibraryStatus::not_found(
        runtime,
        name,
        // cudarc's list also holds Windows-style names (`libcuda64_12.so`), left out here.
        format!(
            "tried {}",
            names
                .iter()
                .filter(|n| !n.contains("64"))
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        ),
    )
}

/// Looks `symbol` up in `library` as a function of type `F`.
///
/// # Safety
/// `F` must be the symbol's C signature.
unsafe fn function<F: Copy>(library: &libloading::Library, symbol: &str) -> Option<F> {
    library.get::<F>(symbol.as_bytes()).ok().map(|f| *f)
}

/// `12040` → `12.4`: CUDA's `major * 1000 + minor * 10` encoding.
fn cuda_version(version: c_int) -> String {
    format!("{}.{}", version / 1000, (version % 1000) / 10)
}

/// `major * 10000 + minor * 100 + patch` (cuBLASLt, cuDNN 9, NCCL 2.9 and later).
fn decimal_version(version: u64) -> String {
    format!(
        "{}.{}.{}",
        version / 10_000,
        (version / 100) % 100,
        version % 100
    )
}

fn cuda_driver_version(library: &libloading::Library) -> Option<String> {
    type F = unsafe extern "C" fn(*mut c_int) -> c_int;
    // SAFETY: cuDriverGetVersion writes one int, and needs no cuInit.
    let f = unsafe { function::<F>(library, "cuDriverGetVersion") }?;
    let mut version = 0;
    (unsafe { f(&mut version) } == 0).then(|| cuda_version(version))
}

fn nvrtc_version(library: &libloading::Library) -> Option<String> {
    type F = unsafe extern "C" fn(*mut c_int, *mut c_int) -> c_int;
    // SAFETY: nvrtcVersion writes two ints.
    let f = unsafe { function::<F>(library, "nvrtcVersion") }?;
    let (mut major, mut minor) = (0, 0);
    (unsafe { f(&mut major, &mut minor) } == 0).then(|| format!("{major}.{minor}"))
}

fn cublas_version(library: &libloading::Library) -> Option<String> {
    type F = unsafe extern "C" fn(c_int, *mut c_int) -> c_int;
    // SAFETY: cublasGetProperty(MAJOR_VERSION=0, MINOR_VERSION=1, PATCH_LEVEL=2) writes one
    // int and needs no handle.
    let f = unsafe { function::<F>(library, "cublasGetProperty") }?;
    let mut parts = [0; 3];
    for (property, part) in parts.iter_mut().enumerate() {
        if unsafe { f(property as c_int, part) } != 0 {
            return None;
        }
    }
    Some(format!("{}.{}.{}", parts[0], parts[1], parts[2]))
}

fn cublaslt_version(library: &libloading::Library) -> Option<String> {
    type F = unsafe extern "C" fn() -> usize;
    // SAFETY: cublasLtGetVersion takes nothing and returns the encoded version.
    let f = unsafe { function::<F>(library, "cublasLtGetVersion") }?;
    Some(decimal_version(unsafe { f() } as u64))
}

fn cudnn_version(library: &libloading::Library) -> Option<String> {
    type F = unsafe extern "C" fn() -> usize;
    // SAFETY: cudnnGetVersion takes nothing and returns the encoded version.
    let f = unsafe { function::<F>(library, "cudnnGetVersion") }?;
    Some(decimal_version(unsafe { f() } as u64))
}

fn nccl_version(library: &libloading::Library) -> Option<String> {
    type F = unsafe extern "C" fn(*mut c_int) -> c_int;
    // SAFETY: ncclGetVersion writes one int (RCCL exports the same call).
    let f = unsafe { function::<F>(library, "ncclGetVersion") }?;
    let mut version = 0;
    (unsafe { f(&mut version) } == 0).then(|| decimal_version(version.max(0) as u64))
}

/// `rsmi_version_t`: three numbers and a build string.
#[repr(C)]
struct RsmiVersion {
    major: c_uint,
    minor: c_uint,
    patch: c_uint,
    build: *const c_char,
}

fn rocm_smi_version(library: &libloading::Library) -> Option<String> {
    type F = unsafe extern "C" fn(*mut RsmiVersion) -> c_int;
    // SAFETY: rsmi_version_get fills the struct and needs no rsmi_init.
    let f = unsafe { function::<F>(library, "rsmi_version_get") }?;
    let mut version = RsmiVersion {
        major: 0,
        minor: 0,
        patch: 0,
        build: std::ptr::null(),
    };
    (unsafe { f(&mut version) } == 0)
        .then(|| format!("{}.{}.{}", version.major, version.minor, version.patch))
}

fn from_load_error(name: &'static str, error: rocm::LoadError) -> LibraryStatus {
    let status = if error.is_not_found() {
        "not found"
    } else {
        "error"
    };
    LibraryStatus {
        status,
        ..LibraryStatus::not_found("hip", name, error.to_string())
    }
}

fn hip_runtime() -> LibraryStatus {
    match rocm::hip() {
        Ok(hip) => {
            let mut version = 0;
            // SAFETY: writes one int; needs no device.
            let answer = unsafe { (hip.api.hipRuntimeGetVersion)(&mut version) };
            LibraryStatus {
                detail: Some(format!(
                    "device properties through {}",
                    hip.properties.layout()
                )),
                ..LibraryStatus::loaded(
                    "hip",
                    "hip",
                    Some(hip.opened.location()),
                    (answer == rocm::api::HIP_SUCCESS).then(|| rocm::format_hip_version(version)),
                )
            }
        }
        Err(error) => from_load_error("hip", error),
    }
}

fn hiprtc() -> LibraryStatus {
    match rocm::hiprtc() {
        Ok(rtc) => {
            let (mut major, mut minor) = (0, 0);
            // SAFETY: writes two ints.
            let answer = unsafe { (rtc.api.hiprtcVersion)(&mut major, &mut minor) };
            LibraryStatus::loaded(
                "hip",
                "hiprtc",
                Some(rtc.location.clone()),
                (answer == rocm::api::HIPRTC_SUCCESS).then(|| format!("{major}.{minor}")),
            )
        }
        Err(error) => from_load_error("hiprtc", error),
    }
}

fn rocblas() -> LibraryStatus {
    match rocm::rocblas() {
        Ok(blas) => {
            let mut buffer = [0 as c_char; 128];
            // SAFETY: writes at most `len` bytes; needs no handle or device.
            let answer =
                unsafe { (blas.api.rocblas_get_version_string)(buffer.as_mut_ptr(), buffer.len()) };
            LibraryStatus::loaded(
                "hip",
                "rocblas",
                Some(blas.opened.location()),
                (answer == rocm::api::ROCBLAS_SUCCESS)
                    .then(|| super::string_from_c_buffer(&buffer)),
            )
        }
        Err(error) => from_load_error("rocblas", error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_the_vendors_version_encodings() {
        assert_eq!(cuda_version(12040), "12.4");
        assert_eq!(decimal_version(22203), "2.22.3");
        assert_eq!(decimal_version(91001), "9.10.1");
    }

    #[test]
    fn lists_every_library_once_whether_or_not_it_is_here() {
        let names: Vec<&str> = libraries().iter().map(|l| l.name).collect();
        assert_eq!(
            names,
            [
                "driver", "nvrtc", "cublas", "cublaslt", "cudnn", "nccl", "nvml", "hip", "hiprtc",
                "rocblas", "rccl", "rocm-smi"
            ]
        );
    }
}
