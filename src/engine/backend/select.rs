//! Choosing and opening a backend by name: `cpu`, `cuda`, `hip`, or `auto` for the best
//! one the machine has.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use super::cpu::CpuBackend;
use super::gpu::cache::KernelCache;
use super::gpu::cuda::{self, CudaDriver, MathMode};
use super::gpu::driver::{DriverError, GpuDriver};
use super::gpu::hip::{self, HipDriver};
use super::gpu::GpuBackend;

/// Which backend a run asks for, as options and the CLI name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// CUDA when it has a device, else HIP when it has one, else the CPU.
    #[default]
    Auto,
    /// The CPU backend, which every machine has.
    Cpu,
    /// NVIDIA GPUs through the CUDA runtime; an error when it finds no device.
    Cuda,
    /// AMD GPUs through HIP; an error when it finds no device.
    Hip,
}

impl BackendKind {
    /// Every name parsing accepts, in the order options list them.
    pub const NAMES: &'static [&'static str] = &["auto", "cpu", "cuda", "hip"];

    /// The name options and the CLI use for this kind.
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Auto => "auto",
            BackendKind::Cpu => "cpu",
            BackendKind::Cuda => "cuda",
            BackendKind::Hip => "hip",
        }
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for BackendKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(BackendKind::Auto),
            "cpu" => Ok(BackendKind::Cpu),
            "cuda" => Ok(BackendKind::Cuda),
            "hip" => Ok(BackendKind::Hip),
            other => Err(format!(
                "unknown backend {other:?}; expected one of {}",
                BackendKind::NAMES.join(", ")
            )),
        }
    }
}

/// A GPU runtime with at least one device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuRuntime {
    /// NVIDIA's CUDA runtime.
    Cuda,
    /// AMD's HIP runtime (ROCm).
    Hip,
}

impl GpuRuntime {
    /// The runtime's lowercase name: `cuda` or `hip`.
    pub fn name(self) -> &'static str {
        match self {
            GpuRuntime::Cuda => "cuda",
            GpuRuntime::Hip => "hip",
        }
    }

    /// Devices the runtime sees, or why it cannot be used.
    pub fn device_count(self) -> Result<usize, DriverError> {
        match self {
            GpuRuntime::Cuda => cuda::device_count(),
            GpuRuntime::Hip => hip::device_count(),
        }
    }

    /// The driver of device `ordinal`, kernels loaded, GEMMs on TF32 tensor cores where
    /// the device has them.
    pub fn open(
        self,
        ordinal: usize,
        cache: &KernelCache,
    ) -> Result<Arc<dyn GpuDriver>, DriverError> {
        Ok(match self {
            GpuRuntime::Cuda => Arc::new(CudaDriver::open(ordinal, cache, MathMode::Tf32)?),
            GpuRuntime::Hip => Arc::new(HipDriver::open(ordinal, cache)?),
        })
    }
}

/// The GPU runtime `kind` asks for: `Ok(None)` means the CPU. An explicit `cuda` or `hip`
/// without a usable device is an error that says why; `auto` falls back to the CPU.
pub fn resolve(kind: BackendKind) -> Result<Option<(GpuRuntime, usize)>, DriverError> {
    let usable = |runtime: GpuRuntime| -> Result<(GpuRuntime, usize), DriverError> {
        match runtime.device_count()? {
            0 => Err(DriverError::NoDevice {
                runtime: match runtime {
                    GpuRuntime::Cuda => "CUDA",
                    GpuRuntime::Hip => "HIP",
                },
                ordinal: 0,
                count: 0,
            }),
            n => Ok((runtime, n)),
        }
    };
    match kind {
        BackendKind::Cpu => Ok(None),
        BackendKind::Cuda => usable(GpuRuntime::Cuda).map(Some),
        BackendKind::Hip => usable(GpuRuntime::Hip).map(Some),
        BackendKind::Auto => Ok(usable(GpuRuntime::Cuda)
            .or_else(|_| usable(GpuRuntime::Hip))
            .ok()),
    }
}

/// An opened backend of either family, for code that picks one at run time and then
/// calls generic engine code with it.
pub enum AnyBackend {
    /// The CPU backend.
    Cpu(CpuBackend),
    /// A device of either GPU runtime.
    Gpu(GpuBackend),
}

impl AnyBackend {
    /// The opened backend's name for logs, e.g. `cpu` or `cuda:0`.
    pub fn name(&self) -> String {
        use super::Backend;
        match self {
            AnyBackend::Cpu(b) => b.name(),
            AnyBackend::Gpu(b) => b.name(),
        }
    }

    /// Whether this is the CPU backend.
    pub fn is_cpu(&self) -> bool {
        matches!(self, AnyBackend::Cpu(_))
    }
}

/// Opens device 0 of the backend `kind` resolves to.
pub fn open(kind: BackendKind) -> Result<AnyBackend, DriverError> {
    match resolve(kind)? {
        None => Ok(AnyBackend::Cpu(CpuBackend::new())),
        Some((runtime, _)) => {
            let driver = runtime.open(0, &KernelCache::from_environment())?;
            Ok(AnyBackend::Gpu(GpuBackend::new(driver)))
        }
    }
}

/// Every device of `runtime`, each with its own backend.
pub fn open_all(runtime: GpuRuntime) -> Result<Vec<GpuBackend>, DriverError> {
    let cache = KernelCache::from_environment();
    (0..runtime.device_count()?)
        .map(|i| runtime.open(i, &cache).map(GpuBackend::new))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_are_rejected() {
        for name in BackendKind::NAMES {
            assert_eq!(name.parse::<BackendKind>().unwrap().name(), *name);
        }
        let err = "opencl".parse::<BackendKind>().unwrap_err();
        assert!(err.contains("auto, cpu, cuda, hip"), "{err}");
    }

    #[test]
    fn cpu_needs_no_runtime_and_auto_never_fails() {
        assert_eq!(resolve(BackendKind::Cpu), Ok(None));
        // On a machine with no GPU runtime `auto` is the CPU; with one, a GPU. Either way
        // it answers instead of failing.
        let auto = resolve(BackendKind::Auto).unwrap();
        if let Some((_, count)) = auto {
            assert!(count > 0);
        }
    }
}
