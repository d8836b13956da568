//! The GPU backend over an emulated device, since no GPU can run here: a `GpuDriver` whose
//! kernels are the real kernel source built by g++ and run on the host (an OS thread per
//! GPU thread of a block, `__syncthreads` a barrier), whose GEMM is a plain loop over the
//! GEMM's element formats, and whose memory is host memory. Every launch is checked
//! against the kernel's C signature. What it cannot stand in for is the vendor libraries
//! (cuBLAS, cuDNN, rocBLAS) and the run-time compilers: `make gpu-check` covers those on a
//! GPU. The backend's own logic, formats, offsets and kernels are checked here, op by op
//! and over a training step, against the CPU backend in f32 and the 16-bit CPU reference.

use std::collections::{BTreeSet, HashMap};
use std::ffi::{c_void, CString};
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};

use libloading::Library;
use tinyperf::engine::backend::crosscheck::{
    self, OpComparison, StepShape, StepTolerances, Tolerances, SIXTEEN_BIT_STEP,
};
use tinyperf::engine::backend::gpu::driver::{
    argument_slots, DeviceInfo, DevicePtr, DriverError, Gemm, GpuDriver, KernelArg, LaunchShape,
    MatmulPrecision, Transpose,
};
use tinyperf::engine::backend::gpu::source::{assemble, Dialect, KERNEL_NAMES};
use tinyperf::engine::backend::gpu::GpuBackend;
use tinyperf::engine::backend::half_storage::HalfStorageCpu;
use tinyperf::engine::{CpuBackend, Precision};

type LaunchFn = unsafe extern "C" fn(
    *const std::ffi::c_char,
    u32,
    u32,
    u32,
    u32,
    *mut *mut c_void,
    *const std::ffi::c_char,
) -> i32;
type GemmFn = unsafe extern "C" fn(
    i64,
    i64,
    i64,
    *const c_void,
    i64,
    i32,
    *const c_void,
    i64,
    i32,
    *mut c_void,
    i64,
    f32,
    f32,
    i32,
    i32,
);

/// A device emulated on the host (see the module comment).
#[derive(Debug)]
struct EmulatedDevice {
    info: DeviceInfo,
    library: Library,
    _dir: tempfile::TempDir,
    blocks: Mutex<HashMap<u64, std::alloc::Layout>>,
    /// One launch at a time: the kernels' block barrier is one global.
    launches: Mutex<BTreeSet<String>>,
    gemm_formats: Mutex<BTreeSet<String>>,
}

impl EmulatedDevice {
    /// `defines` are extra `-D` options of the host build.
    fn build(defines: &[&str]) -> EmulatedDevice {
        let dir = tempfile::tempdir().unwrap();
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gpu");
        let list: String = KERNEL_NAMES.iter().map(|n| format!("K({n}) ")).collect();
        let launch = std::fs::read_to_string(fixtures.join("emulated_device_launch.inc")).unwrap();
        let source = dir.path().join("kernels.cpp");
        std::fs::write(
            &source,
            format!(
                "{}\n#define KERNEL_LIST {list}\n{launch}",
                assemble(Dialect::Cuda)
            ),
        )
        .unwrap();
        let library = dir.path().join("libemulated.so");
        // The kernels read four 16-bit values as one 64-bit word (never bytes another
        // access of the same thread reads as 16-bit values); the host build assumes nothing
        // about such accesses. A misaligned float4 or 64-bit access, a fault on a GPU,
        // stops the test here too. Two builds (with and without EMULATED_MMA_SYNC) load
        // into one test process: without -fno-gnu-unique the dynamic loader would make
        // them share the block barrier and the kernels' shared-memory statics, which
        // differ in size between the two.
        let out = Command::new("g++")
            .args([
                "-std=c++20",
                "-O2",
                "-fno-strict-aliasing",
                "-fno-gnu-unique",
                "-fsanitize=alignment",
                "-fno-sanitize-recover=alignment",
                "-shared",
                "-fPIC",
                "-w",
                "-pthread",
                "-include",
            ])
            .arg(fixtures.join("emulated_device.h"))
            .args(defines.iter().map(|d| format!("-D{d}")))
            .arg(&source)
            .arg("-o")
            .arg(&library)
            .output()
            .expect("g++ is installed by `make test-deps`");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // SAFETY: a library this test just built; loading it runs the C++ runtime's
        // initialisers only.
        let library = unsafe { Library::new(&library) }.unwrap();
        EmulatedDevice {
            info: DeviceInfo {
                ordinal: 0,
                name: "emulated device".into(),
                arch: "host".into(),
                pci_address: None,
                memory_bytes: 64 << 30,
                multiprocessors: 1,
            },
            library,
            _dir: dir,
            blocks: Mutex::new(HashMap::new()),
            launches: Mutex::new(BTreeSet::new()),
            gemm_formats: Mutex::new(BTreeSet::new()),
        }
    }

    fn shared() -> Arc<EmulatedDevice> {
        static DEVICE: OnceLock<Arc<EmulatedDevice>> = OnceLock::new();
        DEVICE
            .get_or_init(|| Arc::new(EmulatedDevice::build(&[])))
            .clone()
    }

    /// One whose kernels take the tensor-core path a GPU from Ampere on compiles, with
    /// each warp's mma.sync product done on the host.
    fn with_tensor_cores() -> Arc<EmulatedDevice> {
        static DEVICE: OnceLock<Arc<EmulatedDevice>> = OnceLock::new();
        DEVICE
            .get_or_init(|| Arc::new(EmulatedDevice::build(&["EMULATED_MMA_SYNC"])))
            .clone()
    }
}

fn kind(arg: &KernelArg) -> char {
    match arg {
        KernelArg::Ptr(_) => 'P',
        KernelArg::I32(_) => 'i',
        KernelArg::I64(_) => 'l',
        KernelArg::F32(_) => 'f',
    }
}

fn format_code(p: Precision) -> i32 {
    match p {
        Precision::Fp32 => 0,
        Precision::Fp16 => 1,
        Precision::Bf16 => 2,
    }
}

fn no_such_thing() -> DriverError {
    DriverError::InvalidArgument("the emulated device has no pinned memory or peers".into())
}

impl GpuDriver for EmulatedDevice {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }
    fn runtime(&self) -> &'static str {
        "cuda"
    }
    fn native_stream(&self) -> *mut c_void {
        std::ptr::null_mut()
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
    fn alloc(&self, bytes: usize) -> Result<DevicePtr, DriverError> {
        let layout = std::alloc::Layout::from_size_align(bytes.max(1), 256).unwrap();
        // SAFETY: a non-zero size; filled with 0xff so that reading memory no op wrote
        // shows as NaN.
        let block = unsafe {
            let block = std::alloc::alloc(layout);
            assert!(!block.is_null());
            std::ptr::write_bytes(block, 0xff, layout.size());
            block
        };
        self.blocks.lock().unwrap().insert(block as u64, layout);
        Ok(DevicePtr(block as u64))
    }
    unsafe fn free(&self, ptr: DevicePtr) {
        if let Some(layout) = self.blocks.lock().unwrap().remove(&ptr.0) {
            // SAFETY: allocated above with this layout.
            unsafe { std::alloc::dealloc(ptr.0 as *mut u8, layout) };
        }
    }
    fn copy_to_device(&self, dst: DevicePtr, src: &[u8]) -> Result<(), DriverError> {
        // SAFETY: the backend sized dst for src.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst.0 as *mut u8, src.len()) };
        Ok(())
    }
    fn copy_to_host(&self, dst: &mut [u8], src: DevicePtr) -> Result<(), DriverError> {
        // SAFETY: the backend sized src for dst.
        unsafe { std::ptr::copy_nonoverlapping(src.0 as *const u8, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }
    fn copy_on_device(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: usize,
    ) -> Result<(), DriverError> {
        // SAFETY: both blocks hold `bytes`.
        unsafe { std::ptr::copy(src.0 as *const u8, dst.0 as *mut u8, bytes) };
        Ok(())
    }
    fn zero(&self, dst: DevicePtr, bytes: usize) -> Result<(), DriverError> {
        // SAFETY: the block holds `bytes`.
        unsafe { std::ptr::write_bytes(dst.0 as *mut u8, 0, bytes) };
        Ok(())
    }
    fn launch(
        &self,
        kernel: &str,
        shape: LaunchShape,
        args: &[KernelArg],
    ) -> Result<(), DriverError> {
        assert_eq!(
            (shape.grid.2, shape.block.2),
            (1, 1),
            "{kernel}: 3-D launch"
        );
        let mut launches = self.launches.lock().unwrap();
        launches.insert(kernel.to_string());
        let mut slots = argument_slots(args);
        let mut pointers: Vec<*mut c_void> =
            slots.iter_mut().map(|s| s.as_mut_ptr().cast()).collect();
        let kinds: String = args.iter().map(kind).collect();
        let (name, kinds_c) = (
            CString::new(kernel).unwrap(),
            CString::new(kinds.clone()).unwrap(),
        );
        // SAFETY: the entry point the launch fixture defines, with its C signature.
        let run = unsafe { self.library.get::<LaunchFn>(b"emulated_launch") }.unwrap();
        // SAFETY: each slot holds one argument in its declared width, and the fixture
        // checks the kinds against the kernel's signature before calling it.
        let status = unsafe {
            run(
                name.as_ptr(),
                shape.grid.0,
                shape.grid.1,
                shape.block.0,
                shape.block.1,
                pointers.as_mut_ptr(),
                kinds_c.as_ptr(),
            )
        };
        match status {
            0 => Ok(()),
            1 => Err(DriverError::UnknownKernel(kernel.into())),
            _ => Err(DriverError::InvalidArgument(format!(
                "{kernel}: arguments {kinds} do not match its signature"
            ))),
        }
    }
    fn gemm(&self, g: &Gemm) -> Result<(), DriverError> {
        g.validate()?;
        self.gemm_formats
            .lock()
            .unwrap()
            .insert(format!("{}→{}", g.types.operands, g.types.output));
        // SAFETY: the entry point the launch fixture defines, with its C signature; the
        // shapes were validated against the blocks the backend sized.
        unsafe {
            let gemm = self.library.get::<GemmFn>(b"emulated_gemm").unwrap();
            gemm(
                g.m as i64,
                g.n as i64,
                g.k as i64,
                g.a.0 as *const c_void,
                g.lda as i64,
                (g.trans_a == Transpose::Yes) as i32,
                g.b.0 as *const c_void,
                g.ldb as i64,
                (g.trans_b == Transpose::Yes) as i32,
                g.c.0 as *mut c_void,
                g.ldc as i64,
                g.alpha,
                g.beta,
                format_code(g.types.operands),
                format_code(g.types.output),
            )
        };
        Ok(())
    }
    fn synchronize(&self) -> Result<(), DriverError> {
        Ok(())
    }
    fn alloc_pinned(&self, _: usize) -> Result<*mut u8, DriverError> {
        Err(no_such_thing())
    }
    unsafe fn free_pinned(&self, _: *mut u8) {}
    unsafe fn copy_async(
        &self,
        _: bool,
        _: *mut u8,
        _: DevicePtr,
        _: usize,
    ) -> Result<(), DriverError> {
        Err(no_such_thing())
    }
    fn enable_peer_access(&self, _: &dyn GpuDriver) -> Result<(), DriverError> {
        Err(no_such_thing())
    }
    fn copy_to_peer_async(
        &self,
        _: &dyn GpuDriver,
        _: DevicePtr,
        _: DevicePtr,
        _: usize,
    ) -> Result<(), DriverError> {
        Err(no_such_thing())
    }
    fn matmul_square(
        &self,
        _: MatmulPrecision,
        _: usize,
        _: DevicePtr,
        _: DevicePtr,
        _: DevicePtr,
    ) -> Result<(), DriverError> {
        Err(no_such_thing())
    }
    fn time_ms(
        &self,
        work: &mut dyn FnMut() -> Result<(), DriverError>,
    ) -> Result<f64, DriverError> {
        work()?;
        Ok(1.0)
    }
}

fn assert_all_passed(label: &str, results: &[OpComparison]) {
    assert!(!results.is_empty(), "{label}: nothing compared");
    for r in results {
        assert!(r.passed, "{label}: {r:?}");
    }
}

#[test]
fn every_op_matches_the_cpu_in_f32_and_in_16_bits_on_an_emulated_device() {
    let device = EmulatedDevice::shared();
    let gpu = GpuBackend::new(device.clone());
    let exact = Tolerances {
        exact: 1e-5,
        gemm: 1e-5,
    };
    let f32_results = crosscheck::check_ops(&gpu, &CpuBackend::new(), 2024, exact).unwrap();
    assert!(f32_results.len() > 30, "{} comparisons", f32_results.len());
    assert_all_passed("f32", &f32_results);
    for precision in [Precision::Fp16, Precision::Bf16] {
        let reference = HalfStorageCpu::new(CpuBackend::new(), precision).unwrap();
        let results = crosscheck::check_ops(
            &gpu.with_precision(precision),
            &reference,
            2024,
            Tolerances::sixteen_bit(precision),
        )
        .unwrap();
        assert_eq!(results.len(), f32_results.len());
        assert_all_passed(precision.name(), &results);
    }
    let launched = device.launches.lock().unwrap().clone();
    for kernel in [
        "im2col_f16",
        "bn_partial_sums_bf16",
        "store_f16",
        "load_bf16",
    ] {
        assert!(
            launched.contains(kernel),
            "{kernel} never ran: {launched:?}"
        );
    }
    let formats = device.gemm_formats.lock().unwrap().clone();
    for wanted in ["fp32→fp32", "fp16→fp16", "fp16→fp32", "bf16→bf16"] {
        assert!(formats.contains(wanted), "no {wanted} GEMM: {formats:?}");
    }
}

#[test]
fn a_training_step_matches_the_cpu_in_f32_and_in_16_bits_on_an_emulated_device() {
    let gpu = GpuBackend::new(EmulatedDevice::shared());
    let StepShape {
        model,
        batch,
        image_size,
        classes,
    } = SIXTEEN_BIT_STEP;
    let results = crosscheck::check_training_step(
        &gpu,
        &CpuBackend::new(),
        model,
        batch,
        image_size,
        classes,
        StepTolerances::default(),
    )
    .unwrap();
    assert_all_passed("f32 step", &results);
    for precision in [Precision::Fp16, Precision::Bf16] {
        let reference = HalfStorageCpu::new(CpuBackend::new(), precision).unwrap();
        let results = crosscheck::check_training_step(
            &gpu.with_precision(precision),
            &reference,
            model,
            batch,
            image_size,
            classes,
            StepTolerances::sixteen_bit(),
        )
        .unwrap();
        assert_all_passed(precision.name(), &results);
    }
}

#[test]
fn fp16_replicas_train_together_through_the_host_ring_on_an_emulated_device() {
    use tinyperf::engine::data::Batch;
    use tinyperf::engine::init::standard_normal;
    use tinyperf::engine::layers::SoftmaxCrossEntropy;
    use tinyperf::engine::model::resnet::ResNet;
    use tinyperf::engine::model::Model;
    use tinyperf::engine::optim::LarsConfig;
    use tinyperf::engine::parallel::{gpu_all_reduce, DataParallel, Replica};
    use tinyperf::engine::train::{DeviceOptimizer, ModelChoice, StepOutcome};
    use tinyperf::engine::Backend;

    let (image, classes, n) = (16, 10, 4);
    let backends: Vec<GpuBackend> = (0..2)
        .map(|_| GpuBackend::new(EmulatedDevice::shared()).with_precision(Precision::Fp16))
        .collect();
    // The emulated device has no NCCL: the chooser falls back to the host-staged ring.
    let (collective, chosen) = gpu_all_reduce(&backends);
    assert_eq!(collective.name(), "host-ring", "{chosen}");
    let replicas = backends
        .into_iter()
        .map(|backend| Replica {
            model: ModelChoice::ResNet20
                .build(&backend, classes, image, 3)
                .unwrap(),
            backend,
            optimizer: DeviceOptimizer::new(LarsConfig::default()),
        })
        .collect();
    let loss = SoftmaxCrossEntropy {
        label_smoothing: 0.1,
    };
    let mut dp = DataParallel::new(replicas, collective, loss).unwrap();
    let batch = Batch {
        epoch: 0,
        index: 0,
        image_size: image,
        images: standard_normal(5, 3, n * image * image * 3),
        labels: (0..n as u32).map(|i| i % classes as u32).collect(),
        valid: vec![true; n],
        sample_ids: (0..n).collect(),
        replaced: 0,
    };
    let weights = |dp: &mut DataParallel<GpuBackend, ResNet<GpuBackend>>| -> Vec<Vec<f32>> {
        dp.replicas_mut()
            .iter_mut()
            .map(|r| {
                let mut all = Vec::new();
                for p in r.model.parameters() {
                    let mut v = vec![0.0; r.backend.buffer_len(p.param.value)];
                    r.backend.download(p.param.value, &mut v).unwrap();
                    all.extend(v);
                }
                all
            })
            .collect()
    };
    let before = weights(&mut dp);
    // A scale past fp16's range overflows on both replicas, which skip together.
    let outcome = dp.train_step(&batch, 0.5, 1e30, &|| false).unwrap();
    assert!(
        matches!(outcome, StepOutcome::NonFiniteGradients(_)),
        "{outcome:?}"
    );
    assert_eq!(weights(&mut dp), before);
    // The reference's static scale applies, and both replicas end with the same weights.
    let outcome = dp.train_step(&batch, 0.5, 128.0, &|| false).unwrap();
    let StepOutcome::Updated(result) = outcome else {
        panic!("{outcome:?}");
    };
    assert!(result.loss.is_finite() && result.valid == n);
    let after = weights(&mut dp);
    assert_ne!(after[0], before[0]);
    assert_eq!(after[0], after[1]);
}

/// A stand-in for a GPU that silently corrupts, for the corruption check: the emulated
/// device, except that after `kernel` (or a GEMM, for `"gemm"`) one bit of word `index` of
/// the output flips.
#[derive(Debug)]
struct BitFlippingDevice {
    inner: Arc<EmulatedDevice>,
    kernel: &'static str,
    index: usize,
    bit: u32,
}

impl BitFlippingDevice {
    /// # Safety
    /// `output` holds more than `index` 32-bit words.
    unsafe fn flip(&self, output: DevicePtr) {
        let word = (output.0 as *mut u32).add(self.index);
        *word ^= 1 << self.bit;
    }
}

impl GpuDriver for BitFlippingDevice {
    fn info(&self) -> &DeviceInfo {
        self.inner.info()
    }
    fn runtime(&self) -> &'static str {
        self.inner.runtime()
    }
    fn native_stream(&self) -> *mut c_void {
        self.inner.native_stream()
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
    fn alloc(&self, bytes: usize) -> Result<DevicePtr, DriverError> {
        self.inner.alloc(bytes)
    }
    unsafe fn free(&self, ptr: DevicePtr) {
        unsafe { self.inner.free(ptr) }
    }
    fn copy_to_device(&self, dst: DevicePtr, src: &[u8]) -> Result<(), DriverError> {
        self.inner.copy_to_device(dst, src)
    }
    fn copy_to_host(&self, dst: &mut [u8], src: DevicePtr) -> Result<(), DriverError> {
        self.inner.copy_to_host(dst, src)
    }
    fn copy_on_device(&self, dst: DevicePtr, src: DevicePtr, n: usize) -> Result<(), DriverError> {
        self.inner.copy_on_device(dst, src, n)
    }
    fn zero(&self, dst: DevicePtr, bytes: usize) -> Result<(), DriverError> {
        self.inner.zero(dst, bytes)
    }
    fn launch(
        &self,
        kernel: &str,
        shape: LaunchShape,
        args: &[KernelArg],
    ) -> Result<(), DriverError> {
        self.inner.launch(kernel, shape, args)?;
        if let (true, Some(KernelArg::Ptr(output))) = (kernel == self.kernel, args.first()) {
            // SAFETY: the health kernels write at least `index` words to their first argument.
            unsafe { self.flip(*output) };
        }
        Ok(())
    }
    fn gemm(&self, g: &Gemm) -> Result<(), DriverError> {
        self.inner.gemm(g)?;
        if self.kernel == "gemm" && g.types.operands == Precision::Fp16 {
            // SAFETY: C holds m·n f32 words, more than `index`.
            unsafe { self.flip(g.c) };
        }
        Ok(())
    }
    fn synchronize(&self) -> Result<(), DriverError> {
        self.inner.synchronize()
    }
    fn alloc_pinned(&self, bytes: usize) -> Result<*mut u8, DriverError> {
        self.inner.alloc_pinned(bytes)
    }
    unsafe fn free_pinned(&self, ptr: *mut u8) {
        unsafe { self.inner.free_pinned(ptr) }
    }
    unsafe fn copy_async(
        &self,
        up: bool,
        host: *mut u8,
        d: DevicePtr,
        n: usize,
    ) -> Result<(), DriverError> {
        unsafe { self.inner.copy_async(up, host, d, n) }
    }
    fn enable_peer_access(&self, peer: &dyn GpuDriver) -> Result<(), DriverError> {
        self.inner.enable_peer_access(peer)
    }
    fn copy_to_peer_async(
        &self,
        peer: &dyn GpuDriver,
        dst: DevicePtr,
        src: DevicePtr,
        n: usize,
    ) -> Result<(), DriverError> {
        self.inner.copy_to_peer_async(peer, dst, src, n)
    }
    fn matmul_square(
        &self,
        p: MatmulPrecision,
        n: usize,
        a: DevicePtr,
        b: DevicePtr,
        c: DevicePtr,
    ) -> Result<(), DriverError> {
        self.inner.matmul_square(p, n, a, b, c)
    }
    fn time_ms(
        &self,
        work: &mut dyn FnMut() -> Result<(), DriverError>,
    ) -> Result<f64, DriverError> {
        self.inner.time_ms(work)
    }
}

mod corruption_check {
    use super::*;
    use std::time::Duration;
    use tinyperf::suite::health::corruption::{check, Sizes, Workload};
    use tinyperf::suite::health::Outcome;

    const SIZES: Sizes = Sizes {
        gemm: 24,
        elements: 4096,
    };

    /// Four replicas of the emulated device, the last one `faulty` when given.
    fn replicas(faulty: Option<BitFlippingDevice>) -> Vec<Arc<dyn GpuDriver>> {
        let mut drivers: Vec<Arc<dyn GpuDriver>> = Vec::new();
        for _ in 0..3 {
            drivers.push(EmulatedDevice::shared());
        }
        drivers.push(match faulty {
            Some(device) => Arc::new(device),
            None => EmulatedDevice::shared(),
        });
        drivers
    }

    fn run_check(
        drivers: &[Arc<dyn GpuDriver>],
    ) -> tinyperf::suite::health::corruption::CorruptionReport {
        let refs: Vec<&dyn GpuDriver> = drivers.iter().map(|d| d.as_ref()).collect();
        check(&refs, SIZES, Duration::ZERO, &|| false)
    }

    #[test]
    fn every_replica_passes_the_corruption_check_when_none_corrupts_on_an_emulated_device() {
        let report = run_check(&replicas(None));
        assert_eq!(report.rounds, 1);
        for (gpu, found) in report.per_gpu.iter().enumerate() {
            assert_eq!(found.outcome(), Outcome::Pass, "GPU {gpu}: {found:?}");
        }
    }

    #[test]
    fn the_corruption_check_fails_exactly_the_replica_that_flips_a_bit_on_an_emulated_device() {
        // The lowest mantissa bit: within any tolerance, so only the comparison across
        // GPUs can see it.
        let faulty = BitFlippingDevice {
            inner: EmulatedDevice::shared(),
            kernel: "health_transcendental",
            index: 123,
            bit: 0,
        };
        let report = run_check(&replicas(Some(faulty)));
        let outcomes: Vec<Outcome> = report.per_gpu.iter().map(|g| g.outcome()).collect();
        assert_eq!(
            outcomes,
            [Outcome::Pass, Outcome::Pass, Outcome::Pass, Outcome::Fail]
        );
        let bad = &report.per_gpu[3];
        assert_eq!(
            bad.mismatches.keys().copied().collect::<Vec<_>>(),
            [Workload::Transcendental]
        );
        let (workload, round, difference) = bad.first.clone().unwrap();
        assert_eq!(
            (workload, round, difference.index),
            (Workload::Transcendental, 0, 123)
        );
        let reason = bad.reason().unwrap();
        assert!(
            reason.contains("transcendental differs in round 0 at element 123"),
            "{reason}"
        );
    }

    #[test]
    fn a_flipped_bit_in_a_16_bit_gemm_fails_that_replica_and_names_the_workload() {
        let faulty = BitFlippingDevice {
            inner: EmulatedDevice::shared(),
            kernel: "gemm",
            index: 7,
            bit: 30,
        };
        let report = run_check(&replicas(Some(faulty)));
        let bad = &report.per_gpu[3];
        assert_eq!(bad.outcome(), Outcome::Fail);
        assert_eq!(bad.first.as_ref().unwrap().0, Workload::GemmF16);
        assert_eq!(bad.first.as_ref().unwrap().2.index, 7);
        assert!(report.per_gpu[..3]
            .iter()
            .all(|g| g.outcome() == Outcome::Pass));
    }
}

mod memory_test {
    use super::*;
    use tinyperf::suite::health::memory;

    const CHUNK: usize = 32 * 1024;

    #[test]
    fn the_memory_test_passes_good_memory_on_an_emulated_device() {
        let device = EmulatedDevice::shared();
        let found = memory::test(device.as_ref(), 2 * CHUNK as u64, CHUNK, 7).unwrap();
        assert_eq!(found.tested_bytes, 2 * CHUNK as u64);
        assert!(found.bad.is_empty(), "{found:?}");
        assert!(found.gbps > 0.0);
    }

    #[test]
    fn the_memory_test_finds_a_bit_that_does_not_hold_and_names_its_range_on_an_emulated_device() {
        // A word whose bit 5 flips after every write: memory that does not hold.
        let faulty = BitFlippingDevice {
            inner: EmulatedDevice::shared(),
            kernel: "health_memory_write",
            index: 100,
            bit: 5,
        };
        let found = memory::test(&faulty, 2 * CHUNK as u64, CHUNK, 7).unwrap();
        // The word is wrong after each of the six writes, in both chunks.
        assert_eq!(found.bad.len(), 2, "{found:?}");
        let first = &found.bad[0];
        assert_eq!(first.offset, 0);
        assert_eq!(first.errors, 6);
        assert_eq!(first.first_bad_offset, 400);
        assert_eq!(found.bad[1].offset, CHUNK as u64);
    }
}

#[test]
fn gpus_pulsed_together_all_finish_even_when_one_cannot_load_on_an_emulated_device() {
    use std::sync::Barrier;
    use std::time::{Duration, Instant};
    use tinyperf::suite::health::pulse_stage::pulse;

    // The emulated device has no vendor BLAS, so its products fail: each GPU thread must
    // still meet every barrier and end, never leaving the others waiting.
    let drivers: Vec<Arc<EmulatedDevice>> = vec![EmulatedDevice::shared(); 3];
    let barrier = Barrier::new(drivers.len());
    let started = Instant::now();
    let results: Vec<_> = std::thread::scope(|scope| {
        let handles: Vec<_> = drivers
            .iter()
            .map(|d| {
                let barrier = &barrier;
                scope.spawn(move || pulse(d.as_ref(), barrier, Duration::from_millis(200)))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(results.iter().all(|r| r.is_err()), "{results:?}");
    // Four frequencies of 0.2 s each, idle halves included, and no more.
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

mod implicit_gemm_convolution {
    use super::*;
    use tinyperf::engine::backend::gpu::options::{ConvAlgorithm, ConvPath, GpuOptions};
    use tinyperf::engine::backend::Conv2dParams;

    fn on(device: Arc<EmulatedDevice>, conv: ConvAlgorithm) -> GpuBackend {
        let options = GpuOptions {
            conv,
            ..GpuOptions::default()
        };
        GpuBackend::with_options(device, options)
    }

    fn backend(conv: ConvAlgorithm) -> GpuBackend {
        on(EmulatedDevice::shared(), conv)
    }

    /// Every distinct convolution of ResNet-50 v1.5 (the stride on the bottleneck's 3×3)
    /// with its real kernel, stride, padding and channel counts, at batch 2 on a few
    /// pixels: (kernel, stride, in_c, out_c, input side). The side keeps each stage's
    /// stride-2 windows overlapping the padding and the image edge as they do at 224².
    const RESNET50: &[(usize, usize, usize, usize, usize)] = &[
        // The stem, at 32² so that its filter gradient's depth is split.
        (7, 2, 3, 64, 32),
        // 1×1 at stride 1: a plain GEMM whatever the switch, checked all the same.
        (1, 1, 64, 64, 5),
        (1, 1, 64, 256, 5),
        (1, 1, 256, 64, 5),
        (1, 1, 256, 128, 5),
        (1, 1, 128, 512, 5),
        (1, 1, 512, 128, 5),
        (1, 1, 512, 256, 5),
        (1, 1, 256, 1024, 5),
        (1, 1, 1024, 256, 5),
        (1, 1, 1024, 512, 5),
        (1, 1, 512, 2048, 3),
        (1, 1, 2048, 512, 3),
        // The 3×3 of each stage, and the first block's strided one of stages 2 to 4.
        (3, 1, 64, 64, 5),
        (3, 1, 128, 128, 5),
        (3, 1, 256, 256, 5),
        (3, 1, 512, 512, 3),
        (3, 2, 128, 128, 6),
        (3, 2, 256, 256, 6),
        (3, 2, 512, 512, 6),
        // The projection shortcuts: 1×1 at stride 1 (stage 1), then at stride 2.
        (1, 2, 256, 512, 6),
        (1, 2, 512, 1024, 6),
        (1, 2, 1024, 2048, 6),
    ];

    fn shapes() -> Vec<(String, Conv2dParams)> {
        RESNET50
            .iter()
            .map(|&(k, stride, in_c, out_c, side)| {
                (
                    format!("{k}x{k} s{stride} {in_c}→{out_c}"),
                    Conv2dParams {
                        batch: 2,
                        in_h: side,
                        in_w: side,
                        in_c,
                        out_c,
                        kernel_h: k,
                        kernel_w: k,
                        stride,
                        padding: k / 2,
                    },
                )
            })
            .collect()
    }

    /// Forward, data and filter gradient of every one of `shapes` on `gpu` in fp16 and
    /// bf16 storage, against the CPU storing the same, from inputs of `seed`.
    fn check_in_sixteen_bits(gpu: &GpuBackend, seed: u64, shapes: &[(String, Conv2dParams)]) {
        for precision in [Precision::Fp16, Precision::Bf16] {
            let reference = HalfStorageCpu::new(CpuBackend::new(), precision).unwrap();
            let results = crosscheck::check_convolutions(
                &gpu.with_precision(precision),
                &reference,
                seed,
                Tolerances::sixteen_bit(precision),
                shapes,
            )
            .unwrap();
            assert_eq!(results.len(), 3 * shapes.len());
            assert_all_passed(precision.name(), &results);
        }
    }

    #[test]
    fn every_resnet50_convolution_by_implicit_gemm_matches_the_cpu_on_an_emulated_device() {
        let device = EmulatedDevice::shared();
        let gpu = backend(ConvAlgorithm::ImplicitGemm);
        assert_eq!(gpu.conv_path(), ConvPath::ImplicitGemm);
        let shapes = shapes();
        let exact = Tolerances {
            exact: 1e-5,
            gemm: 1e-5,
        };
        let results =
            crosscheck::check_convolutions(&gpu, &CpuBackend::new(), 50, exact, &shapes).unwrap();
        assert_eq!(results.len(), 3 * shapes.len());
        assert_all_passed("f32", &results);
        check_in_sixteen_bits(&gpu, 50, &shapes);
        let launched = device.launches.lock().unwrap().clone();
        for pass in ["forward", "backward_data", "backward_filter"] {
            for suffix in ["", "_f16", "_bf16"] {
                let kernel = format!("conv_implicit_{pass}{suffix}");
                assert!(launched.contains(&kernel), "{kernel} never ran");
            }
        }
        assert!(
            launched.contains("conv_split_sum"),
            "no split filter gradient"
        );
    }

    #[test]
    fn every_resnet50_convolution_on_tensor_cores_matches_the_cpu_in_16_bits_on_an_emulated_device()
    {
        // The mma.sync fragments' own layout of the tiles and of the sums, on one shape
        // of each kind (every warp's share of a whole tile and of edge tiles, a split
        // filter gradient): the addressing is the portable path's, checked above on all.
        let shapes: Vec<_> = shapes()
            .into_iter()
            .filter(|(label, _)| {
                [
                    "7x7 s2 3→64",
                    "3x3 s1 64→64",
                    "3x3 s2 128→128",
                    "1x1 s2 256→512",
                ]
                .contains(&label.as_str())
            })
            .collect();
        assert_eq!(shapes.len(), 4);
        let gpu = on(
            EmulatedDevice::with_tensor_cores(),
            ConvAlgorithm::ImplicitGemm,
        );
        check_in_sixteen_bits(&gpu, 51, &shapes);
    }

    #[test]
    fn the_bounds_fail_a_convolution_that_reads_the_neighbouring_pixel() {
        // A kernel off by one pixel in its addressing computes the convolution of the
        // input shifted by one column; on random inputs that lies far outside every
        // bound above (1e-5 in f32, 2⁻⁶ in bf16).
        use tinyperf::engine::Backend;
        let cpu = CpuBackend::new();
        for (label, p) in shapes().into_iter().filter(|(_, p)| p.kernel_h > 1) {
            let x: Vec<f32> = (0..p.input_len())
                .map(|i| ((i * 7919 % 1009) as f32) / 504.5 - 1.0)
                .collect();
            let c = p.in_c;
            let shifted: Vec<f32> = (0..p.input_len())
                .map(|i| {
                    let column = (i / c) % p.in_w;
                    if column + 1 < p.in_w {
                        x[i + c]
                    } else {
                        0.0
                    }
                })
                .collect();
            let w: Vec<f32> = (0..p.weight_len())
                .map(|i| ((i * 104_729 % 997) as f32) / 2492.5 - 0.2)
                .collect();
            let conv = |x: &[f32]| {
                let (xb, wb) = (cpu.upload(x).unwrap(), cpu.upload(&w).unwrap());
                let mut y = cpu.alloc(p.output_len()).unwrap();
                cpu.conv2d_forward(&p, &xb, &wb, &mut y).unwrap();
                let mut out = vec![0.0; p.output_len()];
                cpu.download(&y, &mut out).unwrap();
                out
            };
            let off_by_one = crosscheck::compare(&label, "y", &conv(&shifted), &conv(&x), 0.0);
            assert!(off_by_one.relative > 0.3, "{label}: {off_by_one:?}");
        }
    }

    #[test]
    fn a_training_step_by_implicit_gemm_matches_im2col_on_an_emulated_device() {
        let implicit = backend(ConvAlgorithm::ImplicitGemm);
        let im2col = backend(ConvAlgorithm::Im2col);
        assert_eq!(im2col.conv_path(), ConvPath::Im2col);
        // No DNN library on the emulated device: auto is im2col, as TINYPERF_CUDNN=0 is.
        assert_eq!(backend(ConvAlgorithm::Auto).conv_path(), ConvPath::Im2col);
        let StepShape {
            model,
            batch,
            image_size,
            classes,
        } = SIXTEEN_BIT_STEP;
        let results = crosscheck::check_training_step(
            &implicit,
            &im2col,
            model,
            batch,
            image_size,
            classes,
            StepTolerances::default(),
        )
        .unwrap();
        assert_all_passed("f32 step", &results);
        for precision in [Precision::Fp16, Precision::Bf16] {
            let results = crosscheck::check_training_step(
                &implicit.with_precision(precision),
                &im2col.with_precision(precision),
                model,
                batch,
                image_size,
                classes,
                StepTolerances::sixteen_bit(),
            )
            .unwrap();
            assert_all_passed(precision.name(), &results);
        }
    }
}

mod fused_batch_norm {
    use super::*;
    use tinyperf::engine::backend::gpu::options::GpuOptions;
    use tinyperf::engine::backend::{
        BatchNormBuffers, BatchNormGrads, BatchNormParams, BatchNormSaved,
    };
    use tinyperf::engine::Backend;

    fn backend(fused_bn: bool) -> GpuBackend {
        let options = GpuOptions {
            fused_bn,
            ..GpuOptions::default()
        };
        GpuBackend::with_options(EmulatedDevice::shared(), options)
    }

    fn values(len: usize, seed: usize, scale: f32, offset: f32) -> Vec<f32> {
        (0..len)
            .map(|i| (((i * 7919 + seed * 104_729) % 2003) as f32 / 1001.5 - 1.0) * scale + offset)
            .collect()
    }

    fn host<B: Backend>(b: &B, buf: &B::Buffer) -> Vec<f32> {
        let mut out = vec![0.0; b.buffer_len(buf)];
        b.download(buf, &mut out).unwrap();
        out
    }

    /// The end of a residual block on `b`, forward in training and in eval mode and
    /// backward: each output by name. The backward masks by `y_for_backward` when given,
    /// else by the forward's own output.
    fn block_end<B: Backend>(
        b: &B,
        rows: usize,
        c: usize,
        y_for_backward: Option<&[f32]>,
    ) -> Vec<(&'static str, Vec<f32>)> {
        let p = BatchNormParams {
            rows,
            channels: c,
            eps: 1e-5,
            momentum: 0.1,
        };
        let n = rows * c;
        let x = b.upload(&values(n, 1, 2.0, 0.5)).unwrap();
        let residual = b.upload(&values(n, 2, 1.0, 0.0)).unwrap();
        let mut bn = BatchNormBuffers {
            gamma: b.upload(&values(c, 3, 0.5, 1.0)).unwrap(),
            beta: b.upload(&values(c, 4, 0.3, 0.0)).unwrap(),
            running_mean: b.zeros(c).unwrap(),
            running_var: b.upload(&vec![1.0; c]).unwrap(),
        };
        let mut saved = BatchNormSaved {
            mean: b.alloc(c).unwrap(),
            inv_std: b.alloc(c).unwrap(),
        };
        let mut y = b.alloc(n).unwrap();
        b.batch_norm_add_relu_forward_train(&p, &x, &residual, &mut bn, &mut saved, &mut y)
            .unwrap();
        let mut y_eval = b.alloc(n).unwrap();
        b.batch_norm_add_relu_forward_eval(&p, &x, &residual, &bn, &mut y_eval)
            .unwrap();
        let y_out = host(b, &y);
        if let Some(given) = y_for_backward {
            y = b.upload(given).unwrap();
        }
        let mut dy = b.upload(&values(n, 5, 1.0, 0.0)).unwrap();
        let mut dx = b.alloc(n).unwrap();
        let mut grads = BatchNormGrads {
            gamma: b.alloc(c).unwrap(),
            beta: b.alloc(c).unwrap(),
        };
        b.batch_norm_add_relu_backward(&p, &x, &y, &mut dy, &bn.gamma, &saved, &mut dx, &mut grads)
            .unwrap();
        vec![
            ("y", y_out),
            ("running mean", host(b, &bn.running_mean)),
            ("running var", host(b, &bn.running_var)),
            ("y (eval)", host(b, &y_eval)),
            ("dx", host(b, &dx)),
            ("residual gradient", host(b, &dy)),
            ("dgamma", host(b, &grads.gamma)),
            ("dbeta", host(b, &grads.beta)),
        ]
    }

    fn compare_all(
        label: &str,
        got: &[(&'static str, Vec<f32>)],
        want: &[(&'static str, Vec<f32>)],
        tolerance: f64,
    ) {
        assert_eq!(got.len(), want.len());
        for ((name, g), (_, w)) in got.iter().zip(want) {
            let result = crosscheck::compare(label, name, g, w, tolerance);
            assert!(result.passed, "{label}: {result:?}");
        }
    }

    #[test]
    fn fused_batch_norm_add_relu_matches_the_unfused_ops_on_an_emulated_device() {
        let device = EmulatedDevice::shared();
        let (fused, unfused) = (backend(true), backend(false));
        // 45 channels take the kernels' one-at-a-time path, 64 their four-at-a-time one;
        // over 1,024 rows the statistics come from several slabs.
        for (rows, c) in [(2 * 1024 + 37, 45), (3 * 128 + 5, 64)] {
            let on_cpu = block_end(&CpuBackend::new(), rows, c, None);
            let want = block_end(&unfused, rows, c, None);
            compare_all(&format!("unfused c{c}"), &want, &on_cpu, 1e-5);
            let got = block_end(&fused, rows, c, None);
            compare_all(&format!("f32 c{c}"), &got, &want, 1e-6);
            for precision in [Precision::Fp16, Precision::Bf16] {
                // The fused kernel rounds the sum once where the ops round three times,
                // so a sum within rounding of zero may pass the ReLU in one and not the
                // other: both backwards mask by the unfused output.
                let unfused = unfused.with_precision(precision);
                let want = block_end(&unfused, rows, c, None);
                let got = block_end(&fused.with_precision(precision), rows, c, Some(&want[0].1));
                compare_all(
                    &format!("{precision} c{c}"),
                    &got,
                    &want,
                    Tolerances::sixteen_bit(precision).gemm,
                );
            }
        }
        let launched = device.launches.lock().unwrap().clone();
        for kernel in [
            "channel_affine_add_relu",
            "channel_affine_add_relu_f16",
            "channel_affine_add_relu_bf16",
            "bn_backward_dx_relu_residual",
            "bn_backward_dx_relu_residual_f16",
            "bn_backward_dx_relu_residual_bf16",
        ] {
            assert!(launched.contains(kernel), "{kernel} never ran");
        }
    }

    #[test]
    fn a_resnet_training_step_with_fused_batch_norm_matches_it_unfused_on_an_emulated_device() {
        let (fused, unfused) = (backend(true), backend(false));
        // ResNet-50's bottlenecks and projection shortcuts at a few pixels, and
        // ResNet-20's basic blocks with identity shortcuts in 16 bits too.
        let results = crosscheck::check_training_step(
            &fused,
            &unfused,
            tinyperf::engine::train::ModelChoice::ResNet50,
            2,
            32,
            10,
            StepTolerances::default(),
        )
        .unwrap();
        assert_all_passed("ResNet-50 f32 step", &results);
        let StepShape {
            model,
            batch,
            image_size,
            classes,
        } = SIXTEEN_BIT_STEP;
        for precision in [Precision::Fp32, Precision::Fp16, Precision::Bf16] {
            let tolerances = match precision {
                Precision::Fp32 => StepTolerances::default(),
                _ => StepTolerances::sixteen_bit(),
            };
            let results = crosscheck::check_training_step(
                &fused.with_precision(precision),
                &unfused.with_precision(precision),
                model,
                batch,
                image_size,
                classes,
                tolerances,
            )
            .unwrap();
            assert_all_passed(precision.name(), &results);
        }
    }
}

mod multi_tensor_optimizer {
    use super::*;
    use tinyperf::engine::backend::gpu::options::GpuOptions;
    use tinyperf::engine::data::Batch;
    use tinyperf::engine::init::standard_normal;
    use tinyperf::engine::layers::SoftmaxCrossEntropy;
    use tinyperf::engine::model::Model;
    use tinyperf::engine::optim::LarsConfig;
    use tinyperf::engine::train::step::{train_step, DeviceBatch};
    use tinyperf::engine::train::{DeviceOptimizer, ModelChoice, StepOutcome};
    use tinyperf::engine::Backend;

    /// Every weight after two LARS steps of ResNet-20 on `backend`, the last step's
    /// trust ratios, and the loss of each step.
    fn train(backend: &GpuBackend) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        let (image, classes, n) = (8, 10, 4);
        let mut model = ModelChoice::ResNet20
            .build(backend, classes, image, 3)
            .unwrap();
        let mut optimizer = DeviceOptimizer::new(LarsConfig::default());
        let batch = Batch {
            epoch: 0,
            index: 0,
            image_size: image,
            images: standard_normal(9, 3, n * image * image * 3),
            labels: (0..n as u32).map(|i| i % classes as u32).collect(),
            valid: vec![true; n],
            sample_ids: (0..n).collect(),
            replaced: 0,
        };
        let batch = DeviceBatch::upload(backend, &batch).unwrap();
        let loss_fn = SoftmaxCrossEntropy {
            label_smoothing: 0.1,
        };
        let mut losses = Vec::new();
        for _ in 0..2 {
            // A loss scale, divided out inside the update, as mixed precision runs do.
            let outcome = train_step(
                backend,
                &mut model,
                &mut optimizer,
                &loss_fn,
                &batch,
                0.5,
                8.0,
                &|| false,
            )
            .unwrap();
            let StepOutcome::Updated(result) = outcome else {
                panic!("{outcome:?}");
            };
            losses.push(result.loss);
        }
        let mut weights = Vec::new();
        for p in model.parameters() {
            let mut v = vec![0.0; backend.buffer_len(p.param.value)];
            backend.download(p.param.value, &mut v).unwrap();
            weights.extend(v);
        }
        (weights, optimizer.last_trust_ratios().to_vec(), losses)
    }

    #[test]
    fn one_launch_for_every_parameter_updates_as_one_per_parameter_on_an_emulated_device() {
        let device = EmulatedDevice::shared();
        let on = |multi_tensor_optimizer| {
            let options = GpuOptions {
                multi_tensor_optimizer,
                ..GpuOptions::default()
            };
            GpuBackend::with_options(device.clone(), options)
        };
        let (w_multi, trust_multi, loss_multi) = train(&on(true));
        let (w_single, trust_single, loss_single) = train(&on(false));
        // The norms sum in another order (a row of partials per tensor), so the trust
        // ratios, and the weights through them, agree to rounding.
        let trust = crosscheck::compare("LARS", "trust ratios", &trust_multi, &trust_single, 1e-5);
        assert!(trust.passed, "{trust:?}");
        assert!(trust_single.iter().any(|&t| t != 1.0), "LARS ran");
        let weights = crosscheck::compare("LARS", "weights", &w_multi, &w_single, 1e-5);
        assert!(weights.passed, "{weights:?}");
        let losses = crosscheck::compare("LARS", "losses", &loss_multi, &loss_single, 1e-4);
        assert!(losses.passed, "{losses:?}");
        assert!(
            loss_single[1] < loss_single[0],
            "it trained: {loss_single:?}"
        );
        let launched = device.launches.lock().unwrap().clone();
        for kernel in [
            "momentum_update_multi",
            "sum_squares_multi_partial",
            "sum_partials_multi",
        ] {
            assert!(launched.contains(kernel), "{kernel} never ran");
        }
    }
}
