//! The kernel source handed to the run-time compiler: one file of kernels shared by CUDA
//! and HIP, behind a short prelude per dialect.

use crate::engine::Precision;

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
    "momentum_update_multi",
    "sum_squares_multi_partial",
    "sum_partials_multi",
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
    "conv_implicit_forward",
    "conv_implicit_backward_data",
    "conv_implicit_backward_filter",
    "conv_split_sum",
    "bn_partial_sums",
    "bn_forward_finalize",
    "bn_eval_coefficients",
    "channel_affine",
    "channel_affine_relu",
    "bn_backward_finalize",
    "bn_backward_dx",
    "bn_backward_dx_relu",
    "channel_affine_add_relu",
    "bn_backward_dx_relu_residual",
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
    // 16-bit activations: conversions, then a form of each activation kernel per format.
    "store_f16",
    "store_bf16",
    "load_f16",
    "load_bf16",
    "round_f16",
    "round_bf16",
    "add_f16",
    "add_bf16",
    "add_assign_f16",
    "add_assign_bf16",
    "relu_forward_f16",
    "relu_forward_bf16",
    "relu_backward_f16",
    "relu_backward_bf16",
    "im2col_f16",
    "im2col_bf16",
    "im2col_rows_f16",
    "im2col_rows_bf16",
    "col2im_f16",
    "col2im_bf16",
    "hwio_to_ohwi_f16",
    "hwio_to_ohwi_bf16",
    "ohwi_to_hwio_f16",
    "ohwi_to_hwio_bf16",
    "conv_implicit_forward_f16",
    "conv_implicit_forward_bf16",
    "conv_implicit_backward_data_f16",
    "conv_implicit_backward_data_bf16",
    "conv_implicit_backward_filter_f16",
    "conv_implicit_backward_filter_bf16",
    "bn_partial_sums_f16",
    "bn_partial_sums_bf16",
    "bn_forward_finalize_f16",
    "bn_forward_finalize_bf16",
    "channel_affine_f16",
    "channel_affine_bf16",
    "channel_affine_relu_f16",
    "channel_affine_relu_bf16",
    "bn_backward_dx_f16",
    "bn_backward_dx_bf16",
    "bn_backward_dx_relu_f16",
    "bn_backward_dx_relu_bf16",
    "channel_affine_add_relu_f16",
    "channel_affine_add_relu_bf16",
    "bn_backward_dx_relu_residual_f16",
    "bn_backward_dx_relu_residual_bf16",
    "max_pool_forward_f16",
    "max_pool_forward_bf16",
    "max_pool_argmax_f16",
    "max_pool_argmax_bf16",
    "max_pool_backward_f16",
    "max_pool_backward_bf16",
    "global_avg_forward_f16",
    "global_avg_forward_bf16",
    "global_avg_backward_f16",
    "global_avg_backward_bf16",
    "health_integer_mix",
    "health_transcendental",
    "health_memory_write",
    "health_memory_check",
];

/// The complete translation unit for `dialect`.
pub fn assemble(dialect: Dialect) -> String {
    let prelude = match dialect {
        Dialect::Cuda => CUDA_PRELUDE,
        Dialect::Hip => HIP_PRELUDE,
    };
    format!("{prelude}#line 1 \"kernels.cu\"\n{KERNELS}")
}

/// The names of the entry points the source defines, in order of appearance: each
/// `KERNEL void name(`, and each line `X(name, …)` invoking an entry macro, one defined as
/// `#define X(NAME, …)` whose body is `KERNEL void NAME(…)`.
pub fn defined_kernels(source: &str) -> Vec<&str> {
    let entry_macros: Vec<&str> = source
        .lines()
        .filter_map(|line| line.trim_start().strip_prefix("#define "))
        .filter_map(|rest| rest.split_once("(NAME,").map(|(name, _)| name.trim()))
        .collect();
    let mut names = Vec::new();
    for line in source.lines() {
        let line = line.trim_start();
        if let Some(rest) = line.strip_prefix("KERNEL void ") {
            if let Some(name) = rest.split('(').next().map(str::trim) {
                if name != "NAME" {
                    names.push(name);
                }
            }
            continue;
        }
        for entry in &entry_macros {
            let invoked = line
                .strip_prefix(entry)
                .and_then(|rest| rest.strip_prefix('('))
                .and_then(|rest| rest.split(',').next());
            if let Some(name) = invoked {
                names.push(name.trim());
            }
        }
    }
    names
}

/// The kernels the backend launches whose names a compiled image (an ELF CUBIN or code
/// object, whose string tables hold each symbol between NUL bytes) does not contain.
pub fn missing_from_image(image: &[u8]) -> Vec<&'static str> {
    KERNEL_NAMES
        .iter()
        .copied()
        .filter(|name| {
            let symbol = [&[0u8][..], name.as_bytes(), &[0u8][..]].concat();
            !image.windows(symbol.len()).any(|w| w == symbol.as_slice())
        })
        .collect()
}

/// The suffix kernel names give a storage format (`store_f16`, `load_bf16`, `add_f32`).
pub fn format_suffix(format: Precision) -> &'static str {
    match format {
        Precision::Fp32 => "f32",
        Precision::Fp16 => "f16",
        Precision::Bf16 => "bf16",
    }
}

/// The name of the kernel `f32_name` for activations stored as `precision`: the f32 kernel
/// itself, or its 16-bit form (`relu_forward` → `relu_forward_f16`, `add_f32` → `add_bf16`).
pub fn storage_kernel(f32_name: &str, precision: Precision) -> String {
    if precision == Precision::Fp32 {
        return f32_name.to_string();
    }
    let base = f32_name.strip_suffix("_f32").unwrap_or(f32_name);
    format!("{base}_{}", format_suffix(precision))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_lacks_a_kernel_whose_name_appears_only_inside_a_longer_one() {
        let mut table = vec![0u8];
        for name in KERNEL_NAMES {
            table.extend_from_slice(name.as_bytes());
            table.push(0);
        }
        assert!(missing_from_image(&table).is_empty());
        let without_relu: Vec<u8> = table
            .split(|&b| b == 0)
            .filter(|name| *name != b"relu_forward")
            .flat_map(|name| name.iter().copied().chain([0]))
            .collect();
        // relu_forward_f16 and relu_forward_bf16 are still there.
        assert_eq!(
            missing_from_image(&[&[0u8][..], &without_relu].concat()),
            ["relu_forward"]
        );
    }

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
    fn every_16_bit_form_is_named_after_its_f32_kernel() {
        use crate::engine::Precision;
        assert_eq!(
            storage_kernel("relu_forward", Precision::Fp32),
            "relu_forward"
        );
        assert_eq!(storage_kernel("add_f32", Precision::Fp16), "add_f16");
        assert_eq!(storage_kernel("im2col", Precision::Bf16), "im2col_bf16");
        let sixteen: Vec<&&str> = KERNEL_NAMES
            .iter()
            .filter(|n| n.ends_with("_f16") || n.ends_with("_bf16"))
            .collect();
        for precision in [Precision::Fp16, Precision::Bf16] {
            for name in &sixteen {
                let Some(base) = name
                    .strip_suffix("_bf16")
                    .or_else(|| name.strip_suffix("_f16"))
                else {
                    continue;
                };
                if ["store", "load", "round", "fill_pattern"].contains(&base) {
                    continue;
                }
                let f32_name = KERNEL_NAMES
                    .iter()
                    .find(|n| **n == base || **n == format!("{base}_f32"))
                    .unwrap_or_else(|| panic!("{name} has no f32 kernel"));
                assert!(KERNEL_NAMES.contains(&storage_kernel(f32_name, precision).as_str()));
            }
        }
    }

    #[test]
    fn entry_macros_and_plain_entry_points_are_both_found() {
        let source = "#define TWICE(NAME, S) \\\n    KERNEL void NAME(S::T* x) { body<S>(x); }\n\
                      TWICE(first_f16, F16)\nTWICE(first_bf16, BF16)\n\
                      KERNEL void plain(float* x) {}\n";
        assert_eq!(
            defined_kernels(source),
            ["first_f16", "first_bf16", "plain"]
        );
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
