//! The GPU runtime probe against the libraries a GPU-less machine can have: none at all,
//! or small fake libraries built here with gcc from tests/fixtures/fake-*/ that answer
//! like a driver with no GPU, with a few GPUs, or with a symbol missing.
//!
//! Each probe runs in a child process (this test binary, started again with
//! `LD_LIBRARY_PATH` pointing at the fakes), because the dynamic loader and the bindings
//! keep a library once loaded, and because a probe that crashes must fail the test rather
//! than take the test runner down.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use serde_json::Value;

const CHILD_MARKER: &str = "TINYPERF-PROBE-REPORT ";
const CHILD_ENTRY: &str = "probe_child_entry";

/// Prints the report of `tinyperf::runtime::probe()` for the parent test to read.
#[test]
#[ignore = "entry point of the child process that the other tests start"]
fn probe_child_entry() {
    let started = Instant::now();
    let report = tinyperf::runtime::probe();
    let elapsed_ms = started.elapsed().as_secs_f64() * 1000.0;
    let line = serde_json::json!({ "report": report, "elapsed_ms": elapsed_ms });
    // The harness prints `test NAME ... ` on the same line, hence the marker.
    println!("{CHILD_MARKER}{line}");
}

/// What a child probe printed, and what it said on stderr.
struct ChildProbe {
    report: Value,
    elapsed_ms: f64,
    stderr: String,
}

/// Runs the probe in a child whose loader sees `lib_dir` first, and whose ROCm
/// install path is an empty directory.
fn probe_in_child(lib_dir: &Path, env: &[(&str, String)]) -> ChildProbe {
    let empty_rocm = tempfile::tempdir().unwrap();
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([CHILD_ENTRY, "--exact", "--ignored", "--nocapture"])
        .args(["--test-threads", "1"])
        .env("LD_LIBRARY_PATH", lib_dir)
        .env("ROCM_PATH", empty_rocm.path())
        .env_remove("FAKE_CUDA_DEVICES")
        .env_remove("FAKE_HIP_DEVICES")
        .env_remove("FAKE_HIP_ARCH_OFFSET")
        .env_remove("FAKE_NVML_DEVICES");
    for (key, value) in env {
        command.env(key, value);
    }
    let output = command.output().expect("the test binary starts again");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "the probe child failed: {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        output.status
    );
    let line = stdout
        .lines()
        .find_map(|line| line.split_once(CHILD_MARKER).map(|(_, report)| report))
        .unwrap_or_else(|| panic!("no report in the child's output:\n{stdout}\n{stderr}"));
    let parsed: Value = serde_json::from_str(line).expect("the report is JSON");
    ChildProbe {
        report: parsed["report"].clone(),
        elapsed_ms: parsed["elapsed_ms"].as_f64().expect("elapsed_ms"),
        stderr,
    }
}

/// Compiles one fake library from tests/fixtures into `dir` under each of `names`.
fn build_fake(dir: &Path, fixture: &str, names: &[&str], defines: &[&str]) {
    let source = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(fixture)
        .join(format!("{}.c", fixture.replace('-', "_")));
    let target = dir.join(names[0]);
    let output = Command::new("gcc")
        .args(["-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", "-o"])
        .arg(&target)
        .args(defines)
        .arg(&source)
        .output()
        .expect("gcc runs (apt-get install gcc)");
    assert!(
        output.status.success(),
        "gcc failed on {}: {}",
        source.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    for alias in &names[1..] {
        std::os::unix::fs::symlink(&target, dir.join(alias)).unwrap();
    }
}

// The bindings try the unversioned name first, so the fakes carry it too: on a machine
// with a real driver in the loader cache, LD_LIBRARY_PATH then still finds the fake first.
fn build_fake_libcuda(dir: &Path, defines: &[&str]) {
    build_fake(
        dir,
        "fake-libcuda",
        &["libcuda.so.1", "libcuda.so"],
        defines,
    );
}

fn build_fake_libamdhip64(dir: &Path) {
    build_fake(
        dir,
        "fake-libamdhip64",
        &["libamdhip64.so.6", "libamdhip64.so"],
        &[],
    );
}

/// Shaped like Debian 13's ROCm 5.7: only the `.so.5` soname, the pre-6.0 properties
/// entry point, and hiprtc inside the library.
fn build_fake_libamdhip64_rocm5(dir: &Path) {
    build_fake(
        dir,
        "fake-libamdhip64",
        &["libamdhip64.so.5"],
        &["-DFAKE_ROCM5"],
    );
}

fn build_fake_libnvidia_ml(dir: &Path) {
    build_fake(
        dir,
        "fake-libnvidia-ml",
        &["libnvidia-ml.so.1", "libnvidia-ml.so"],
        &[],
    );
}

/// Whether the loader cache of this machine holds a real copy of `library`.
fn system_has_library(library: &str) -> bool {
    Command::new("ldconfig")
        .arg("-p")
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).contains(library))
        .unwrap_or(false)
}

fn assert_no_panic(probe: &ChildProbe) {
    assert!(
        !probe.stderr.contains("panicked"),
        "the probe panicked inside:\n{}",
        probe.stderr
    );
}

fn gcn_arch_name_offset() -> usize {
    std::mem::offset_of!(rocmrc::hip::sys::hipDeviceProp_tR0600, gcnArchName)
}

#[test]
fn with_no_library_present_all_three_runtimes_are_absent() {
    let empty = tempfile::tempdir().unwrap();
    let probe = probe_in_child(empty.path(), &[]);
    assert_no_panic(&probe);
    let report = &probe.report;
    let expectations = [
        ("cuda", "libcuda.so", "CUDA driver library not found"),
        ("hip", "libamdhip64.so", "HIP runtime library not found"),
        ("nvml", "libnvidia-ml.so", "NVML library not found"),
    ];
    for (runtime, library, finding) in expectations {
        if system_has_library(library) {
            // A machine with the real driver can only show that the probe survives it.
            eprintln!("{library} is installed here; {runtime} cannot be seen absent");
            continue;
        }
        let status = &report[runtime];
        assert_eq!(status["loaded"], false, "{runtime}: {status}");
        assert_eq!(status["finding"], finding, "{runtime}: {status}");
        assert_eq!(status["devices"], serde_json::json!([]), "{runtime}");
        assert_eq!(status["driver_version"], Value::Null, "{runtime}");
    }
    assert!(
        probe.elapsed_ms < 1000.0,
        "probing absent libraries took {} ms",
        probe.elapsed_ms
    );
}

#[test]
fn with_fake_libcuda_and_no_gpu_cuda_is_loaded_and_says_no_device() {
    let libs = tempfile::tempdir().unwrap();
    build_fake_libcuda(libs.path(), &[]);
    let probe = probe_in_child(libs.path(), &[]);
    assert_no_panic(&probe);
    let cuda = &probe.report["cuda"];
    assert_eq!(cuda["loaded"], true, "{cuda}");
    assert_eq!(cuda["finding"], "no device", "{cuda}");
    assert_eq!(cuda["devices"], serde_json::json!([]));
}

#[test]
fn with_fake_libcuda_reporting_two_gpus_each_is_listed_in_sysfs_spelling() {
    let libs = tempfile::tempdir().unwrap();
    build_fake_libcuda(libs.path(), &[]);
    let probe = probe_in_child(libs.path(), &[("FAKE_CUDA_DEVICES", "2".into())]);
    assert_no_panic(&probe);
    let cuda = &probe.report["cuda"];
    assert_eq!(cuda["loaded"], true, "{cuda}");
    assert_eq!(cuda["finding"], Value::Null, "{cuda}");
    assert_eq!(cuda["driver_version"], "12.8");
    assert_eq!(
        cuda["devices"],
        serde_json::json!([
            {"index": 0, "name": "NVIDIA GeForce RTX 4090", "pci_address": "0000:0a:00.0",
             "memory_bytes": 25386352640u64, "arch": "8.9"},
            {"index": 1, "name": "NVIDIA GeForce RTX 4090", "pci_address": "0000:0b:00.0",
             "memory_bytes": 25386352640u64, "arch": "8.9"},
        ])
    );
}

#[test]
fn with_fake_libcuda_lacking_a_symbol_the_probe_names_it_and_does_not_panic() {
    let libs = tempfile::tempdir().unwrap();
    build_fake_libcuda(libs.path(), &["-DFAKE_WITHOUT_PCI_BUS_ID"]);
    let probe = probe_in_child(libs.path(), &[("FAKE_CUDA_DEVICES", "1".into())]);
    assert_no_panic(&probe);
    let cuda = &probe.report["cuda"];
    assert_eq!(cuda["loaded"], true, "{cuda}");
    assert_eq!(
        cuda["finding"], "the CUDA driver library lacks cuDeviceGetPCIBusId",
        "{cuda}"
    );
}

#[test]
fn with_fake_libamdhip64_and_no_gpu_hip_is_loaded_and_says_no_device() {
    let libs = tempfile::tempdir().unwrap();
    build_fake_libamdhip64(libs.path());
    let probe = probe_in_child(libs.path(), &[]);
    assert_no_panic(&probe);
    let hip = &probe.report["hip"];
    assert_eq!(hip["loaded"], true, "{hip}");
    assert_eq!(hip["finding"], "no device", "{hip}");
}

#[test]
fn with_fake_libamdhip64_reporting_a_gpu_it_is_listed_with_its_gfx_target() {
    let libs = tempfile::tempdir().unwrap();
    build_fake_libamdhip64(libs.path());
    let probe = probe_in_child(
        libs.path(),
        &[
            ("FAKE_HIP_DEVICES", "1".into()),
            ("FAKE_HIP_ARCH_OFFSET", gcn_arch_name_offset().to_string()),
        ],
    );
    assert_no_panic(&probe);
    let hip = &probe.report["hip"];
    assert_eq!(hip["loaded"], true, "{hip}");
    assert_eq!(hip["finding"], Value::Null, "{hip}");
    assert_eq!(hip["driver_version"], "6.4.43483");
    assert_eq!(
        hip["devices"],
        serde_json::json!([
            {"index": 0, "name": "Radeon RX 7900 XTX", "pci_address": "0000:c3:00.0",
             "memory_bytes": 25753026560u64, "arch": "gfx1100"},
        ])
    );
}

#[test]
fn with_fake_libnvidia_ml_and_no_driver_nvml_is_loaded_and_says_so() {
    let libs = tempfile::tempdir().unwrap();
    build_fake_libnvidia_ml(libs.path());
    let probe = probe_in_child(libs.path(), &[]);
    assert_no_panic(&probe);
    let nvml = &probe.report["nvml"];
    assert_eq!(nvml["loaded"], true, "{nvml}");
    assert_eq!(nvml["finding"], "the NVIDIA driver is not loaded", "{nvml}");
}

#[test]
fn with_fake_libnvidia_ml_reporting_a_gpu_it_is_listed_in_sysfs_spelling() {
    let libs = tempfile::tempdir().unwrap();
    build_fake_libnvidia_ml(libs.path());
    let probe = probe_in_child(libs.path(), &[("FAKE_NVML_DEVICES", "1".into())]);
    assert_no_panic(&probe);
    let nvml = &probe.report["nvml"];
    assert_eq!(nvml["loaded"], true, "{nvml}");
    assert_eq!(nvml["finding"], Value::Null, "{nvml}");
    assert_eq!(nvml["driver_version"], "570.86.15");
    assert_eq!(
        nvml["devices"],
        serde_json::json!([
            {"index": 0, "name": "NVIDIA GeForce RTX 4090", "pci_address": "0000:0a:00.0",
             "memory_bytes": 25757220864u64, "arch": "8.9"},
        ])
    );
}

#[test]
fn with_all_three_fake_libraries_and_no_gpu_every_runtime_reports_a_finding() {
    let libs = tempfile::tempdir().unwrap();
    build_fake_libcuda(libs.path(), &[]);
    build_fake_libamdhip64(libs.path());
    build_fake_libnvidia_ml(libs.path());
    let probe = probe_in_child(libs.path(), &[]);
    assert_no_panic(&probe);
    for runtime in ["cuda", "hip", "nvml"] {
        assert_eq!(probe.report[runtime]["loaded"], true, "{runtime}");
        assert_eq!(
            probe.report[runtime]["devices"],
            serde_json::json!([]),
            "{runtime}"
        );
    }
}

#[test]
fn with_a_rocm_5_7_shaped_libamdhip64_the_gpu_is_listed_with_its_gfx_target() {
    let libs = tempfile::tempdir().unwrap();
    build_fake_libamdhip64_rocm5(libs.path());
    let probe = probe_in_child(libs.path(), &[("FAKE_HIP_DEVICES", "2".into())]);
    assert_no_panic(&probe);
    let hip = &probe.report["hip"];
    assert_eq!(hip["loaded"], true, "{hip}");
    assert_eq!(hip["finding"], Value::Null, "{hip}");
    assert_eq!(hip["driver_version"], "5.7.31921");
    let devices = hip["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 2, "{hip}");
    assert_eq!(devices[0]["arch"], "gfx1100", "{hip}");
    assert_eq!(devices[1]["pci_address"], "0000:c4:00.0", "{hip}");
}

#[test]
fn with_a_rocm_5_7_shaped_libamdhip64_and_no_gpu_hip_says_no_device() {
    let libs = tempfile::tempdir().unwrap();
    build_fake_libamdhip64_rocm5(libs.path());
    let probe = probe_in_child(libs.path(), &[]);
    assert_no_panic(&probe);
    assert_eq!(probe.report["hip"]["loaded"], true);
    assert_eq!(probe.report["hip"]["finding"], "no device");
}

#[test]
fn cudnn_in_tinyperfs_private_folder_is_found_without_a_library_path() {
    let private = tempfile::tempdir().unwrap();
    // The loader answers a request by name with a loaded copy whose soname matches, as
    // the real library's does.
    build_fake(
        private.path(),
        "fake-libcudnn",
        &["libcudnn.so.9"],
        &["-Wl,-soname,libcudnn.so.9"],
    );
    let nothing = tempfile::tempdir().unwrap();
    let probe = probe_in_child(
        nothing.path(),
        &[(
            "TINYPERF_NVIDIA_LIBRARY_DIR",
            private.path().display().to_string(),
        )],
    );
    assert_no_panic(&probe);
    let cudnn = probe.report["libraries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == "cudnn")
        .unwrap()
        .clone();
    assert_eq!(cudnn["status"], "loaded", "{cudnn}");
    assert_eq!(cudnn["version"], "9.10.1", "{cudnn}");
    let path = cudnn["path"].as_str().unwrap();
    assert!(
        path.starts_with(
            &std::fs::canonicalize(private.path())
                .unwrap()
                .display()
                .to_string()
        ),
        "{path}"
    );
}

#[test]
fn every_library_is_listed_with_a_status_and_a_missing_one_says_what_was_tried() {
    let nothing = tempfile::tempdir().unwrap();
    let probe = probe_in_child(nothing.path(), &[]);
    let libraries = probe.report["libraries"].as_array().unwrap();
    assert_eq!(libraries.len(), 12, "{libraries:?}");
    for library in libraries {
        let status = library["status"].as_str().unwrap();
        assert!(
            ["loaded", "not found", "error"].contains(&status),
            "{library}"
        );
        if status == "not found" {
            assert!(
                library["detail"].as_str().unwrap().contains("tried"),
                "{library}"
            );
        }
    }
    let nccl = libraries.iter().find(|l| l["name"] == "nccl").unwrap();
    if !system_has_library("libnccl.so.2") {
        assert_eq!(nccl["status"], "not found", "{nccl}");
    }
}

#[test]
fn a_library_that_is_there_but_does_not_load_is_an_error_with_the_loaders_words() {
    let libs = tempfile::tempdir().unwrap();
    std::fs::write(libs.path().join("libnccl.so.2"), "not a shared object\n").unwrap();
    let probe = probe_in_child(libs.path(), &[]);
    assert_no_panic(&probe);
    let nccl = probe.report["libraries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == "nccl")
        .unwrap()
        .clone();
    assert_eq!(nccl["status"], "error", "{nccl}");
    let detail = nccl["detail"].as_str().unwrap();
    assert!(detail.contains("libnccl.so.2"), "{detail}");
}
