//! The kernel source handed to the run-time compiler: one file of kernels shared by CUDA
//! and HIP, behind a short prelude per dialect.

/// The run-time compiler a source is assembled for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// NVRTC.
    Cuda,
    /// hiprtc.
    Hip,
}

const KERNELS: &str = include_str!("kernels.cu");

const CUDA_PRELUDE: &str = "#define KERNEL extern \"C\" __global__\n";

// hiprtc includes the HIP device headers itself; only the entry-point spelling is needed.
const HIP_PRELUDE: &str = "#define KERNEL extern \"C\" __global__\n";

/// Every kernel the backend launches, so a module is checked for all of them when loaded
/// and a misspelt launch fails at start instead of mid-step.
pub const KERNEL_NAMES: &[&str] = &[
    "fill_f32",
    "add_f32",
    "add_assign_f32",
    "scale_f32",
    "axpy_f32",
    "momentum_update",
    "relu_forward",
    "relu_backward",
    "fill_pattern_f32",
    "fill_pattern_f16",
    "sum_squares_partial",
    "sum_partials",
    "non_finite_flag",
    "im2col",
    "im2col_rows",
    "col2im",
    "hwio_to_ohwi",
    "ohwi_to_hwio",
    "bn_partial_sums",
    "bn_forward_finalize",
    "bn_eval_coefficients",
    "channel_affine",
    "channel_affine_relu",
    "bn_backward_finalize",
    "bn_backward_dx",
    "bn_backward_dx_relu",
    "max_pool_forward",
    "max_pool_argmax",
    "max_pool_backward",
    "global_avg_forward",
    "global_avg_backward",
    "broadcast_rows",
    "column_sums",
    "ce_count_valid",
    "ce_forward",
    "ce_mean",
    "ce_backward",
];

/// The complete translation unit for `dialect`.
pub fn assemble(dialect: Dialect) -> String {
    let prelude = match dialect {
        Dialect::Cuda => CUDA_PRELUDE,
        Dialect::Hip => HIP_PRELUDE,
    };
    format!("{prelude}#line 1 \"kernels.cu\"\n{KERNELS}")
}

/// The names of the entry points the source defines, in order of appearance.
pub fn defined_kernels(source: &str) -> Vec<&str> {
    source
        .split("KERNEL void ")
        .skip(1)
        .filter_map(|rest| rest.split('(').next())
        .map(str::trim)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_launched_kernel_is_defined_exactly_once() {
        let source = assemble(Dialect::Cuda);
        let defined = defined_kernels(&source);
        for name in KERNEL_NAMES {
            let count = defined.iter().filter(|d| *d == name).count();
            assert_eq!(count, 1, "{name} defined {count} times");
        }
        for name in &defined {
            assert!(
                KERNEL_NAMES.contains(name),
                "{name} is defined but never launched"
            );
        }
    }

    #[test]
    fn both_dialects_share_the_kernels_and_define_the_entry_macro() {
        for dialect in [Dialect::Cuda, Dialect::Hip] {
            let source = assemble(dialect);
            assert!(source.starts_with("#define KERNEL extern \"C\" __global__"));
            assert!(source.contains("#line 1 \"kernels.cu\""));
            assert!(source.ends_with(KERNELS));
        }
    }

    #[test]
    fn kernels_avoid_what_one_dialect_lacks() {
        // Warp-size assumptions break on 64-wide AMD wavefronts; host math macros are not
        // defined under either run-time compiler.
        for forbidden in ["__shfl", "warpSize", "INFINITY", "NAN", "#include"] {
            assert!(!KERNELS.contains(forbidden), "kernels use {forbidden}");
        }
    }

    #[test]
    fn kernels_have_balanced_braces() {
        let open = KERNELS.matches('{').count();
        let close = KERNELS.matches('}').count();
        assert_eq!(open, close);
    }
}

#[cfg(test)]
mod host_compiler_tests {
    use super::*;
    use std::process::Command;

    /// The kernel source parses as C++ under a host shim of the device dialect, so a typo
    /// fails here rather than in the run-time compiler on a GPU box.
    #[test]
    fn kernel_source_parses_under_a_host_cxx_compiler() {
        let dir = tempfile::tempdir().unwrap();
        let shim = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/gpu/host_shim.h"
        );
        for dialect in [Dialect::Cuda, Dialect::Hip] {
            let path = dir.path().join("kernels.cpp");
            std::fs::write(&path, assemble(dialect)).unwrap();
            let output = Command::new("g++")
                .args([
                    "-std=c++17",
                    "-fsyntax-only",
                    "-Wall",
                    "-Werror",
                    "-Wno-unused-function",
                    "-Wno-sign-compare",
                ])
                .arg("-include")
                .arg(shim)
                .arg(&path)
                .output()
                .expect("g++ is installed by `make test-deps`");
            assert!(
                output.status.success(),
                "{dialect:?} kernels do not parse:\n{}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
    }
}
