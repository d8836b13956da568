//! `tinyperf gpu compile`: the kernel source through the run-time compiler the backend
//! uses (NVRTC or hiprtc) for chosen architectures, on any machine with the compiler's
//! library and no GPU: a check that a toolkit compiles the kernels before a box needs them.

use std::time::Instant;

use super::args::GpuCompileArgs;
use super::UsageError;
use crate::engine::backend::gpu::driver::DriverError;
use crate::engine::backend::gpu::source::{missing_from_image, KERNEL_NAMES};
use crate::engine::backend::gpu::{cuda, hip};

/// RTX 4090 (tinybox green) and H100/H200.
const CUDA_ARCHS: &[&str] = &["sm_89", "sm_90"];
/// RX 7900 XTX (tinybox red) and MI300X.
const HIP_ARCHS: &[&str] = &["gfx1100", "gfx942"];

type Compiler = fn(&str) -> Result<(Vec<u8>, String), DriverError>;

pub fn compile(args: &GpuCompileArgs) -> anyhow::Result<i32> {
    let (compiler, defaults): (Compiler, &[&str]) = match args.runtime.as_str() {
        "cuda" => (cuda::compile_kernels, CUDA_ARCHS),
        "hip" => (hip::compile_kernels, HIP_ARCHS),
        other => {
            return Err(UsageError(format!("unknown runtime {other:?}: cuda or hip")).into());
        }
    };
    let archs: Vec<&str> = if args.archs.is_empty() {
        defaults.to_vec()
    } else {
        args.archs.iter().map(String::as_str).collect()
    };
    let mut failed = 0;
    for arch in &archs {
        let started = Instant::now();
        match compiler(arch) {
            Ok((image, version)) => {
                let missing = missing_from_image(&image);
                println!(
                    "{arch}: {} of {} kernels in a {}-byte image, {:.1} s ({version})",
                    KERNEL_NAMES.len() - missing.len(),
                    KERNEL_NAMES.len(),
                    image.len(),
                    started.elapsed().as_secs_f64()
                );
                if !missing.is_empty() {
                    println!("  missing: {}", missing.join(", "));
                    failed += 1;
                }
            }
            Err(DriverError::Compile { log, .. }) => {
                println!("{arch}: compile failed");
                for line in log.lines() {
                    println!("  {line}");
                }
                failed += 1;
            }
            // The library is missing for every architecture alike.
            Err(e) => anyhow::bail!("cannot compile the {} kernels: {e}", args.runtime),
        }
    }
    if failed == 0 {
        println!("compiled for all {} architectures", archs.len());
        Ok(0)
    } else {
        println!("failed for {failed} of {} architectures", archs.len());
        Ok(1)
    }
}
