//! `tinyperf gpu compile` with the vendors' real run-time compilers, which need no GPU:
//! NVRTC from the nvidia-cuda-nvrtc-cu12 wheel (through scripts/nvrtc-lib.sh) and the
//! hiprtc of Debian's ROCm 5.2 (libamdhip64-5). The kernel source, f32 and 16-bit, in both
//! dialects compiles into images holding every kernel, and a compiler error or a missing
//! compiler is reported with a non-zero status, never a panic.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn nvrtc_dir() -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/nvrtc-lib.sh");
    let output = Command::new(&script)
        .output()
        .expect("run scripts/nvrtc-lib.sh");
    assert!(
        output.status.success(),
        "scripts/nvrtc-lib.sh: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    PathBuf::from(String::from_utf8(output.stdout).unwrap().trim())
}

fn gpu_compile(lib_dir: &Path, args: &[&str]) -> Output {
    let output = Command::new(common::tinyperf_exe())
        .args(["gpu", "compile"])
        .args(args)
        .env("LD_LIBRARY_PATH", lib_dir)
        .env("ROCM_PATH", lib_dir)
        .output()
        .expect("tinyperf starts");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    output
}

fn all_kernels() -> String {
    let n = tinyperf::engine::backend::gpu::source::KERNEL_NAMES.len();
    format!("{n} of {n} kernels")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Exit status 0, and for each of `archs` a line saying every kernel is in the image, made
/// by `compiler` (as the line names it).
fn assert_all_compiled(output: &Output, archs: &[&str], compiler: &str) {
    let stdout = text(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{stdout}{}",
        text(&output.stderr)
    );
    for arch in archs {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("{arch}: ")))
            .unwrap_or_else(|| panic!("no line for {arch}: {stdout}"));
        assert!(line.contains(&all_kernels()), "{line}");
        assert!(line.contains(&format!("({compiler}")), "{line}");
    }
    let summary = format!("compiled for all {} architectures", archs.len());
    assert!(stdout.contains(&summary), "{stdout}");
}

#[test]
fn nvrtc_compiles_every_kernel_for_the_rtx_4090_and_h100_architectures() {
    let output = gpu_compile(&nvrtc_dir(), &[]);
    assert_all_compiled(&output, &["sm_89", "sm_90"], "nvrtc 12.");
}

#[test]
fn an_architecture_nvrtc_rejects_prints_its_log_and_fails_while_the_others_compile() {
    let output = gpu_compile(&nvrtc_dir(), &["--arch", "sm_1", "--arch", "sm_80"]);
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("sm_1: compile failed"), "{stdout}");
    assert!(
        stdout.contains("--gpu-architecture"),
        "the compiler's log: {stdout}"
    );
    assert!(
        stdout.contains(&format!("sm_80: {}", all_kernels())),
        "{stdout}"
    );
    assert!(
        stdout.contains("failed for 1 of 2 architectures"),
        "{stdout}"
    );
}

/// Debian 12's ROCm 5.2 builds hiprtc into libamdhip64.so.5, as Debian 13's ROCm 5.7 does:
/// the backend finds it there. A folder holding only that library, by that name.
fn debian_hiprtc_dir() -> tempfile::TempDir {
    let library = Path::new("/usr/lib/x86_64-linux-gnu/libamdhip64.so.5");
    assert!(
        library.exists(),
        "no {} (make test-deps installs libamdhip64-5 and libhiprtc-builtins5)",
        library.display()
    );
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(library, dir.path().join("libamdhip64.so.5")).unwrap();
    dir
}

#[test]
fn hiprtc_compiles_every_kernel_in_the_hip_dialect_for_rdna2_and_cdna2() {
    // Debian's ROCm 5.2 predates gfx1100 (RX 7900 XTX): its compiler aborts on it.
    let dir = debian_hiprtc_dir();
    let output = gpu_compile(
        dir.path(),
        &["--runtime", "hip", "--arch", "gfx1030", "--arch", "gfx90a"],
    );
    assert_all_compiled(&output, &["gfx1030", "gfx90a"], "hiprtc");
}

/// tests/fixtures/fake-libamdhip64 as ROCm 6 names it: no hiprtc inside.
fn build_rocm6_shaped_hip_runtime(dir: &Path) {
    let source = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/fake-libamdhip64/fake_libamdhip64.c");
    let output = Command::new("gcc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(dir.join("libamdhip64.so.6"))
        .arg(&source)
        .output()
        .expect("gcc runs");
    assert!(output.status.success(), "{}", text(&output.stderr));
}

#[test]
fn without_the_compilers_gpu_compile_names_the_missing_library() {
    let empty = tempfile::tempdir().unwrap();
    let cuda = gpu_compile(empty.path(), &["--runtime", "cuda"]);
    assert_eq!(cuda.status.code(), Some(1));
    assert!(text(&cuda.stderr).contains("NVRTC library (libnvrtc.so) not found"));
    // make test-deps installs Debian's HIP runtime, which holds a hiprtc; a ROCm 6-shaped
    // HIP runtime found first, with no libhiprtc beside it, leaves no compiler.
    let rocm6 = tempfile::tempdir().unwrap();
    build_rocm6_shaped_hip_runtime(rocm6.path());
    let hip = gpu_compile(rocm6.path(), &["--runtime", "hip"]);
    assert_eq!(hip.status.code(), Some(1), "{}", text(&hip.stderr));
    assert!(text(&hip.stderr)
        .contains("hiprtc library (libhiprtc.so, or inside libamdhip64 before ROCm 6) not found"));
    let unknown = gpu_compile(empty.path(), &["--runtime", "opencl"]);
    assert_eq!(unknown.status.code(), Some(2), "a usage error");
}
