//! The NCCL and RCCL all-reduce on a machine without a GPU: the library missing, or a
//! small fake libnccl.so.2 (or librccl.so.1) built here with gcc from
//! tests/fixtures/fake-libnccl/, complete or lacking a symbol. Devices are fake drivers
//! that only describe themselves.
//!
//! Checks that load a library run in a child process (this test binary, started again
//! with `LD_LIBRARY_PATH` pointing at the fake), because the dynamic loader keeps a
//! library once loaded, and because a check that crashes must fail the test rather than
//! take the test runner down.

use std::ffi::c_void;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use serde_json::Value;
use tinyperf::engine::backend::gpu::driver::{
    DeviceInfo, DevicePtr, DriverError, Gemm, GpuDriver, KernelArg, LaunchShape, MatmulPrecision,
};
use tinyperf::engine::backend::gpu::GpuBackend;
use tinyperf::engine::parallel::nccl::{
    check_library, check_library_of, gpu_all_reduce, Collective, NcclAllReduce,
};

const CHILD_MARKER: &str = "TINYPERF-NCCL-REPORT ";
const CHILD_ENTRY: &str = "nccl_child_entry";

/// A device that can describe itself and nothing else: there is no GPU here.
#[derive(Debug)]
struct DescribedOnlyDevice {
    info: DeviceInfo,
    runtime: &'static str,
}

fn unavailable() -> DriverError {
    DriverError::InvalidArgument("a described-only test device has no memory or kernels".into())
}

impl GpuDriver for DescribedOnlyDevice {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }
    fn runtime(&self) -> &'static str {
        self.runtime
    }
    fn native_stream(&self) -> *mut c_void {
        std::ptr::null_mut()
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
    fn alloc(&self, _: usize) -> Result<DevicePtr, DriverError> {
        Err(unavailable())
    }
    unsafe fn free(&self, _: DevicePtr) {}
    fn copy_to_device(&self, _: DevicePtr, _: &[u8]) -> Result<(), DriverError> {
        Err(unavailable())
    }
    fn copy_to_host(&self, _: &mut [u8], _: DevicePtr) -> Result<(), DriverError> {
        Err(unavailable())
    }
    fn copy_on_device(&self, _: DevicePtr, _: DevicePtr, _: usize) -> Result<(), DriverError> {
        Err(unavailable())
    }
    fn zero(&self, _: DevicePtr, _: usize) -> Result<(), DriverError> {
        Err(unavailable())
    }
    fn launch(&self, _: &str, _: LaunchShape, _: &[KernelArg]) -> Result<(), DriverError> {
        Err(unavailable())
    }
    fn gemm(&self, _: &Gemm) -> Result<(), DriverError> {
        Err(unavailable())
    }
    fn synchronize(&self) -> Result<(), DriverError> {
        Ok(())
    }
    fn alloc_pinned(&self, _: usize) -> Result<*mut u8, DriverError> {
        Err(unavailable())
    }
    unsafe fn free_pinned(&self, _: *mut u8) {}
    unsafe fn copy_async(
        &self,
        _: bool,
        _: *mut u8,
        _: DevicePtr,
        _: usize,
    ) -> Result<(), DriverError> {
        Err(unavailable())
    }
    fn enable_peer_access(&self, _: &dyn GpuDriver) -> Result<(), DriverError> {
        Err(unavailable())
    }
    fn copy_to_peer_async(
        &self,
        _: &dyn GpuDriver,
        _: DevicePtr,
        _: DevicePtr,
        _: usize,
    ) -> Result<(), DriverError> {
        Err(unavailable())
    }
    fn matmul_square(
        &self,
        _: MatmulPrecision,
        _: usize,
        _: DevicePtr,
        _: DevicePtr,
        _: DevicePtr,
    ) -> Result<(), DriverError> {
        Err(unavailable())
    }
    fn time_ms(&self, _: &mut dyn FnMut() -> Result<(), DriverError>) -> Result<f64, DriverError> {
        Err(unavailable())
    }
}

fn device(runtime: &'static str, ordinal: usize) -> GpuBackend {
    GpuBackend::new(Arc::new(DescribedOnlyDevice {
        info: DeviceInfo {
            ordinal,
            name: format!("described-only {runtime} {ordinal}"),
            arch: "none".into(),
            pci_address: None,
            memory_bytes: 0,
            multiprocessors: 0,
        },
        runtime,
    }))
}

/// Prints what the NCCL checks found in this process, for the parent test to read.
#[test]
#[ignore = "entry point of the child process that the other tests start"]
fn nccl_child_entry() {
    let check = match check_library() {
        Ok(version) => serde_json::json!({ "ok": version }),
        Err(e) => serde_json::json!({ "err": e.to_string() }),
    };
    let (collective, note) = gpu_all_reduce(&[device("cuda", 0), device("cuda", 1)]);
    let rccl_check = match check_library_of(Collective::Rccl) {
        Ok(version) => serde_json::json!({ "ok": version }),
        Err(e) => serde_json::json!({ "err": e.to_string() }),
    };
    let (hip_collective, hip_note) = gpu_all_reduce(&[device("hip", 0), device("hip", 1)]);
    let line = serde_json::json!({
        "check": check,
        "chosen": collective.name(),
        "ranks": collective.ranks(),
        "note": note,
        "rccl_check": rccl_check,
        "hip_chosen": hip_collective.name(),
        "hip_note": hip_note,
    });
    // The harness prints `test NAME ... ` on the same line, hence the marker.
    println!("{CHILD_MARKER}{line}");
}

/// What a child printed, and what it said on stderr.
struct ChildReport {
    report: Value,
    stderr: String,
}

fn run_child(lib_dir: &Path) -> ChildReport {
    let output = Command::new(std::env::current_exe().unwrap())
        .args([CHILD_ENTRY, "--exact", "--ignored", "--nocapture"])
        .args(["--test-threads", "1"])
        .env("LD_LIBRARY_PATH", lib_dir)
        .output()
        .expect("the test binary starts again");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "the child failed: {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        output.status
    );
    let line = stdout
        .lines()
        .find_map(|line| line.split_once(CHILD_MARKER).map(|(_, report)| report))
        .unwrap_or_else(|| panic!("no report in the child's output:\n{stdout}\n{stderr}"));
    ChildReport {
        report: serde_json::from_str(line).expect("the report is JSON"),
        stderr,
    }
}

fn assert_no_panic(child: &ChildReport) {
    assert!(
        !child.stderr.contains("panicked"),
        "the child panicked inside:\n{}",
        child.stderr
    );
}

/// Compiles the fake NCCL into `dir` as libnccl.so.2, with libnccl.so beside it.
fn build_fake_libnccl(dir: &Path, defines: &[&str]) {
    build_fake(dir, defines, "libnccl.so.2", "libnccl.so");
}

/// The same fake as RCCL, whose API is NCCL's: librccl.so.1 and librccl.so.
fn build_fake_librccl(dir: &Path, defines: &[&str]) {
    build_fake(dir, defines, "librccl.so.1", "librccl.so");
}

fn build_fake(dir: &Path, defines: &[&str], soname: &str, link: &str) {
    let source =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fake-libnccl/fake_libnccl.c");
    let target = dir.join(soname);
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
    std::os::unix::fs::symlink(&target, dir.join(link)).unwrap();
}

/// Whether the loader cache of this machine holds a real NCCL.
fn system_has_nccl() -> bool {
    Command::new("ldconfig")
        .arg("-p")
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).contains("libnccl.so"))
        .unwrap_or(false)
}

#[test]
fn a_missing_libnccl_is_an_error_naming_it() {
    if system_has_nccl() {
        eprintln!("skipped: this machine has a real NCCL in its loader cache");
        return;
    }
    let empty = tempfile::tempdir().unwrap();
    let child = run_child(empty.path());
    assert_no_panic(&child);
    let err = child.report["check"]["err"]
        .as_str()
        .unwrap_or_else(|| panic!("NCCL loaded: {}", child.report));
    assert!(err.contains("NCCL not found"), "{err}");
    assert!(err.contains("libnccl.so.2"), "{err}");
    assert_eq!(child.report["chosen"], "host-ring");
    assert_eq!(child.report["ranks"], 2);
    let note = child.report["note"].as_str().unwrap();
    assert!(note.contains("NCCL not found"), "{note}");
    assert!(note.ends_with("host-staged ring"), "{note}");
}

#[test]
fn the_version_is_read_with_fake_libnccl() {
    let dir = tempfile::tempdir().unwrap();
    build_fake_libnccl(dir.path(), &[]);
    let child = run_child(dir.path());
    assert_no_panic(&child);
    assert_eq!(
        child.report["check"]["ok"], "NCCL 2.21.5",
        "{}",
        child.report
    );
}

#[test]
fn a_missing_symbol_is_an_error_naming_it_with_fake_libnccl() {
    let dir = tempfile::tempdir().unwrap();
    build_fake_libnccl(dir.path(), &["-DLACK_COMM_ABORT"]);
    let child = run_child(dir.path());
    assert_no_panic(&child);
    let err = child.report["check"]["err"]
        .as_str()
        .unwrap_or_else(|| panic!("the check passed: {}", child.report));
    assert!(err.contains("lacks ncclCommAbort"), "{err}");
    let note = child.report["note"].as_str().unwrap();
    assert!(note.contains("ncclCommAbort"), "{note}");
    assert_eq!(child.report["chosen"], "host-ring");
}

#[test]
fn a_group_that_fails_to_open_falls_back_to_the_host_ring_with_fake_libnccl() {
    // The fake loads, but there is no CUDA driver (or no device for the fake NCCL to
    // create communicators on), so the chooser must explain and fall back.
    let dir = tempfile::tempdir().unwrap();
    build_fake_libnccl(dir.path(), &[]);
    let child = run_child(dir.path());
    assert_no_panic(&child);
    assert_eq!(child.report["chosen"], "host-ring");
    assert_eq!(child.report["ranks"], 2);
    let note = child.report["note"].as_str().unwrap();
    assert!(note.starts_with("NCCL not used"), "{note}");
    assert!(note.ends_with("host-staged ring"), "{note}");
}

#[test]
fn the_chooser_without_devices_falls_back_to_the_host_ring() {
    let (collective, note) = gpu_all_reduce(&[]);
    assert_eq!(collective.name(), "host-ring");
    assert_eq!(note, "no GPU devices: host-staged ring");
}

/// Whether the loader cache of this machine holds a real RCCL.
fn system_has_rccl() -> bool {
    Command::new("ldconfig")
        .arg("-p")
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).contains("librccl.so"))
        .unwrap_or(false)
}

#[test]
fn hip_devices_without_rccl_get_the_host_ring_saying_why_with_fake_driver() {
    if system_has_rccl() {
        eprintln!("skipped: this machine has a real RCCL in its loader cache");
        return;
    }
    let empty = tempfile::tempdir().unwrap();
    let child = run_child(empty.path());
    assert_no_panic(&child);
    let err = child.report["rccl_check"]["err"]
        .as_str()
        .unwrap_or_else(|| panic!("RCCL loaded: {}", child.report));
    assert!(
        err.contains("RCCL not found") && err.contains("librccl.so.1"),
        "{err}"
    );
    assert_eq!(child.report["hip_chosen"], "host-ring");
    let note = child.report["hip_note"].as_str().unwrap();
    assert!(note.starts_with("RCCL not found"), "{note}");
    assert!(note.ends_with("host-staged ring"), "{note}");
}

#[test]
fn rccl_is_loaded_by_its_own_name_with_fake_librccl() {
    let dir = tempfile::tempdir().unwrap();
    build_fake_librccl(dir.path(), &[]);
    let child = run_child(dir.path());
    assert_no_panic(&child);
    assert_eq!(
        child.report["rccl_check"]["ok"], "RCCL 2.21.5",
        "{}",
        child.report
    );
    // Without a HIP runtime (or devices) the group cannot open: the chooser says so and
    // falls back, and the NCCL side is untouched by a librccl.
    assert_eq!(child.report["hip_chosen"], "host-ring");
    let note = child.report["hip_note"].as_str().unwrap();
    assert!(note.starts_with("RCCL not used"), "{note}");
    assert!(note.ends_with("host-staged ring"), "{note}");
    assert!(child.report["check"]["err"].is_string() || system_has_nccl());

    let lacking = tempfile::tempdir().unwrap();
    build_fake_librccl(lacking.path(), &["-DLACK_COMM_ABORT"]);
    let child = run_child(lacking.path());
    let err = child.report["rccl_check"]["err"].as_str().unwrap();
    assert!(
        err.contains("the RCCL library lacks ncclCommAbort"),
        "{err}"
    );
}

#[test]
fn mixed_runtimes_get_the_host_ring_with_fake_driver() {
    let (collective, note) = gpu_all_reduce(&[device("cuda", 0), device("hip", 0)]);
    assert_eq!(collective.name(), "host-ring");
    assert!(note.contains("cuda, hip"), "{note}");
}

#[test]
fn open_rejects_bad_groups_before_loading_nccl_with_fake_driver() {
    let err = NcclAllReduce::open(&[]).unwrap_err().to_string();
    assert!(err.contains("at least one device"), "{err}");

    let err = NcclAllReduce::open(&[device("cuda", 0), device("hip", 1)])
        .unwrap_err()
        .to_string();
    assert!(err.contains("rank 1 is a hip device"), "{err}");

    let err = NcclAllReduce::open(&[device("hip", 2), device("hip", 2)])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("ranks 0 and 1 are both HIP device 2; RCCL needs one rank per device"),
        "{err}"
    );

    let err = NcclAllReduce::open(&[device("cuda", 3), device("cuda", 1), device("cuda", 3)])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("ranks 0 and 2 are both CUDA device 3"),
        "{err}"
    );
}
