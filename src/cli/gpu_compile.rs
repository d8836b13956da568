//! `tinyperf gpu compile`: the kernel source through the run-time compiler the backend
//! uses (NVRTC or hiprtc) for chosen architectures, on any machine with the compiler's
//! library and no GPU: a check that a toolkit compiles the kernels before a box needs them,
//! and into an image its driver loads (the image's format and target are read back).

use std::time::Instant;

use serde::Serialize;

use super::args::GpuCompileArgs;
use super::UsageError;
use crate::engine::backend::gpu::code_object::{self, CodeObject};
use crate::engine::backend::gpu::driver::DriverError;
use crate::engine::backend::gpu::source::{missing_from_image, KERNEL_NAMES};
use crate::engine::backend::gpu::{cuda, hip};

/// RTX 4090 (tinybox green) and H100/H200.
const CUDA_ARCHS: &[&str] = &["sm_89", "sm_90"];
/// RX 7900 XTX (tinybox red) and MI300X.
const HIP_ARCHS: &[&str] = &["gfx1100", "gfx942"];

type Compiler = fn(&str) -> Result<(Vec<u8>, String), DriverError>;

#[derive(Debug, Serialize)]
struct CompilerReport {
    name: &'static str,
    /// `12.4`, from the compiler itself.
    version: Option<String>,
    /// The library file it was loaded from.
    path: Option<String>,
}

#[derive(Debug, Serialize)]
struct TargetReport {
    arch: String,
    ok: bool,
    #[serde(flatten)]
    object: Option<CodeObject>,
    bytes: usize,
    kernels: usize,
    missing: Vec<String>,
    seconds: f64,
    error: Option<String>,
}

#[derive(Debug, Serialize)]
struct CompileReport {
    runtime: String,
    compiler: CompilerReport,
    targets: Vec<TargetReport>,
}

pub fn compile(args: &GpuCompileArgs) -> anyhow::Result<i32> {
    let (compiler, defaults, name): (Compiler, &[&str], &'static str) = match args.runtime.as_str()
    {
        "cuda" => (cuda::compile_kernels, CUDA_ARCHS, "nvrtc"),
        "hip" => (hip::compile_kernels, HIP_ARCHS, "hiprtc"),
        other => {
            return Err(UsageError(format!("unknown runtime {other:?}: cuda or hip")).into());
        }
    };
    let archs: Vec<&str> = if args.archs.is_empty() {
        defaults.to_vec()
    } else {
        args.archs.iter().map(String::as_str).collect()
    };
    let mut targets = Vec::new();
    let mut compiler_version = None;
    for arch in &archs {
        let started = Instant::now();
        let result = compiler(arch);
        let seconds = started.elapsed().as_secs_f64();
        let report = match result {
            Ok((image, version)) => {
                compiler_version.get_or_insert(version);
                let missing: Vec<String> = missing_from_image(&image)
                    .into_iter()
                    .map(str::to_string)
                    .collect();
                TargetReport {
                    arch: arch.to_string(),
                    ok: missing.is_empty(),
                    object: Some(code_object::inspect(&image)),
                    bytes: image.len(),
                    kernels: KERNEL_NAMES.len() - missing.len(),
                    missing,
                    seconds,
                    error: None,
                }
            }
            Err(DriverError::Compile { log, .. }) => TargetReport {
                arch: arch.to_string(),
                ok: false,
                object: None,
                bytes: 0,
                kernels: 0,
                missing: Vec::new(),
                seconds,
                error: Some(log),
            },
            // The library is missing for every architecture alike.
            Err(e) => anyhow::bail!("cannot compile the {} kernels: {e}", args.runtime),
        };
        targets.push(report);
    }
    let failed = targets.iter().filter(|t| !t.ok).count();
    let report = CompileReport {
        runtime: args.runtime.clone(),
        compiler: CompilerReport {
            name,
            version: compiler_version
                .as_deref()
                .and_then(|v| v.strip_prefix(name))
                .map(|v| v.split_whitespace().next().unwrap_or_default().to_string()),
            path: match name {
                "nvrtc" => cuda::nvrtc_location(),
                _ => hip::hiprtc_location(),
            },
        },
        targets,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_lines(&report, compiler_version.as_deref().unwrap_or(name));
    }
    Ok(if failed == 0 { 0 } else { 1 })
}

fn print_lines(report: &CompileReport, version: &str) {
    for target in &report.targets {
        let arch = &target.arch;
        match (&target.error, &target.object) {
            (Some(log), _) => {
                println!("{arch}: compile failed");
                for line in log.lines() {
                    println!("  {line}");
                }
            }
            (None, object) => {
                let kind = object.as_ref().map_or(String::new(), |o| {
                    let target = o
                        .elf_arch
                        .as_deref()
                        .or(o.ptx_isa.as_deref())
                        .unwrap_or("?");
                    format!(", {} {target}", o.format)
                });
                println!(
                    "{arch}: {} of {} kernels in a {}-byte image{kind}, {:.1} s ({version})",
                    target.kernels,
                    KERNEL_NAMES.len(),
                    target.bytes,
                    target.seconds
                );
                if !target.missing.is_empty() {
                    println!("  missing: {}", target.missing.join(", "));
                }
            }
        }
    }
    let failed = report.targets.iter().filter(|t| !t.ok).count();
    if failed == 0 {
        println!("compiled for all {} architectures", report.targets.len());
    } else {
        println!(
            "failed for {failed} of {} architectures",
            report.targets.len()
        );
    }
}
