//! The GPU backends on a machine without a GPU: every way a CUDA or HIP run can find no
//! usable device ends with the reason and an exit status, never a panic, and the
//! acceptance suite runs its CPU stages and skips the GPU ones saying why. Library
//! lookups run in `tinyperf` child processes whose loader path holds only what the test
//! puts there (nothing, or a fake libcuda built with gcc).

mod common;

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

fn tinyperf(lib_dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(common::tinyperf_exe());
    command
        .args(args)
        .env("LD_LIBRARY_PATH", lib_dir)
        .env("ROCM_PATH", lib_dir)
        .env_remove("FAKE_CUDA_DEVICES");
    for (k, v) in env {
        command.env(k, v);
    }
    command.output().expect("tinyperf starts")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn assert_no_panic(output: &Output) {
    let stderr = text(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// Builds tests/fixtures/FIXTURE/FIXTURE.c into `dir` under the first name, the others
/// being links to it.
fn build_fake(dir: &Path, fixture: &str, names: &[&str]) {
    build_fake_with(dir, fixture, names, &[]);
}

fn build_fake_with(dir: &Path, fixture: &str, names: &[&str], defines: &[&str]) {
    let source = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(fixture)
        .join(format!("{}.c", fixture.replace('-', "_")));
    let target = dir.join(names[0]);
    let gcc = Command::new("gcc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&target)
        .args(defines)
        .arg(&source)
        .output()
        .expect("gcc runs");
    assert!(gcc.status.success(), "{}", text(&gcc.stderr));
    for alias in &names[1..] {
        std::os::unix::fs::symlink(&target, dir.join(alias)).unwrap();
    }
}

/// Whether the loader cache of this machine holds a real copy of `library`.
fn system_has_library(library: &str) -> bool {
    Command::new("ldconfig")
        .arg("-p")
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).contains(library))
        .unwrap_or(false)
}

fn runs_in(state: &Path) -> usize {
    std::fs::read_dir(state.join("runs")).map_or(0, |d| d.count())
}

#[test]
fn a_cuda_run_without_a_driver_stops_with_the_reason_and_records_nothing() {
    let libs = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let state_arg = state.path().to_str().unwrap();
    let out = tinyperf(
        libs.path(),
        &[
            "run",
            "--suite",
            "smoke",
            "--backend",
            "cuda",
            "--state-dir",
            state_arg,
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("backend cuda cannot be used"), "{stderr}");
    assert!(stderr.contains("libcuda.so.1"), "{stderr}");
    assert_no_panic(&out);
    assert_eq!(runs_in(state.path()), 0);
}

#[test]
fn a_hip_run_without_rocm_stops_with_the_reason() {
    let libs = tempfile::tempdir().unwrap();
    let out = tinyperf(
        libs.path(),
        &["run", "--suite", "smoke", "--backend", "hip"],
        &[],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("backend hip cannot be used"), "{stderr}");
    // make test-deps installs Debian's HIP runtime (for its hiprtc), but no rocBLAS.
    let missing = if system_has_library("libamdhip64.so") {
        "librocblas"
    } else {
        "libamdhip64"
    };
    assert!(stderr.contains(missing), "{stderr}");
    assert_no_panic(&out);
}

#[test]
fn an_unknown_backend_is_a_usage_error() {
    let libs = tempfile::tempdir().unwrap();
    let out = tinyperf(libs.path(), &["run", "smoke", "--backend", "opencl"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("auto, cpu, cuda, hip"));
}

#[test]
fn a_cuda_run_with_fake_libcuda_but_no_nvrtc_names_the_missing_library() {
    let libs = tempfile::tempdir().unwrap();
    build_fake(libs.path(), "fake-libcuda", &["libcuda.so.1", "libcuda.so"]);
    let out = tinyperf(
        libs.path(),
        &["run", "--suite", "smoke", "--backend", "cuda"],
        &[("FAKE_CUDA_DEVICES", "2")],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("NVRTC library (libnvrtc.so) not found"),
        "{stderr}"
    );
    assert_no_panic(&out);
}

#[test]
fn a_hip_run_with_fake_libamdhip64_but_no_hiprtc_names_the_missing_library() {
    let libs = tempfile::tempdir().unwrap();
    build_fake(
        libs.path(),
        "fake-libamdhip64",
        &["libamdhip64.so.6", "libamdhip64.so"],
    );
    let out = tinyperf(
        libs.path(),
        &["run", "--suite", "smoke", "--backend", "hip"],
        &[("FAKE_HIP_DEVICES", "2")],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(
            "hiprtc library (libhiprtc.so, or inside libamdhip64 before ROCm 6) not found"
        ),
        "{stderr}"
    );
    assert!(stderr.contains("has no hiprtc either"), "{stderr}");
    assert_no_panic(&out);
}

#[test]
fn a_hip_run_with_a_rocm_5_7_shaped_libamdhip64_finds_hiprtc_inside_it_and_names_rocblas() {
    let libs = tempfile::tempdir().unwrap();
    build_fake_with(
        libs.path(),
        "fake-libamdhip64",
        &["libamdhip64.so.5"],
        &["-DFAKE_ROCM5"],
    );
    let out = tinyperf(
        libs.path(),
        &["run", "--suite", "smoke", "--backend", "hip"],
        &[("FAKE_HIP_DEVICES", "2")],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(
        !stderr.contains("hiprtc"),
        "hiprtc was found inside: {stderr}"
    );
    assert!(
        stderr.contains("rocBLAS library (librocblas) not found"),
        "{stderr}"
    );
    assert_no_panic(&out);
}

#[test]
fn gpu_check_without_a_gpu_says_why_for_each_runtime() {
    let libs = tempfile::tempdir().unwrap();
    let out = tinyperf(libs.path(), &["gpu", "check"], &[]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("no GPU to check"), "{stderr}");
    assert!(stderr.contains("CUDA: CUDA driver library"), "{stderr}");
    let hip_missing = if system_has_library("libamdhip64.so") {
        "HIP: rocBLAS library"
    } else {
        "HIP: HIP runtime library"
    };
    assert!(stderr.contains(hip_missing), "{stderr}");
    assert_no_panic(&out);
    let out = tinyperf(libs.path(), &["gpu", "check", "--backend", "cpu"], &[]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn acceptance_without_a_gpu_skips_the_gpu_stages_saying_why() {
    let libs = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let out = tinyperf(
        libs.path(),
        &[
            "run",
            "acceptance",
            "--state-dir",
            state.path().to_str().unwrap(),
            "-o",
            "gemm_size=64",
            "-o",
            "gemm_seconds=0.05",
            "-o",
            "gemm_min_fraction=0",
            "-o",
            "train_steps=1",
            "-o",
            "train_warmup=0",
            "-o",
            "train_batch=2",
            "-o",
            "train_image_size=32",
        ],
        &[],
    );
    assert_no_panic(&out);
    let run_dir = std::fs::read_dir(state.path().join("runs"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let record: Value =
        serde_json::from_str(&std::fs::read_to_string(run_dir.join("run.json")).unwrap()).unwrap();
    let stages = record["stages"].as_array().unwrap();
    let names: Vec<&str> = stages.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "inventory",
            "cpu-gemm",
            "gpu-gemm",
            "gpu-bandwidth",
            "gpu-p2p",
            "gpu-allreduce",
            "gpu-corruption",
            "train-throughput"
        ]
    );
    for stage in &stages[2..7] {
        assert_eq!(stage["verdict"], "skip", "{stage}");
        let message = stage["message"].as_str().unwrap();
        assert!(
            message.contains("no GPU runtime with a device"),
            "{message}"
        );
        assert!(message.contains("libcuda.so.1"), "{message}");
    }
    let train = &stages[7];
    assert_ne!(train["verdict"], "error", "{train}");
    let findings = train["findings"].to_string();
    assert!(findings.contains("measured on the CPU"), "{findings}");
}
