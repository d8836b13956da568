//! The GPU kernel source built by the host C++ compiler into a shared library and run one
//! thread at a time (no GPU here, so the launch is emulated; the kernel code is the real
//! one). Checks the 16-bit conversions bit for bit against the `half` crate, every 16-bit
//! activation kernel that needs no shared memory against the CPU reference with 16-bit
//! storage, and the f32 forms of the same templates against the CPU backend.

use std::path::Path;
use std::process::Command;

use libloading::{Library, Symbol};
use tinyperf::engine::backend::gpu::source::{assemble, format_suffix as suffix, Dialect};
use tinyperf::engine::backend::half_storage::HalfStorageCpu;
use tinyperf::engine::{Backend, CpuBackend, GlobalPoolParams, PoolParams, Precision};

#[repr(C)]
struct Dim3 {
    x: u32,
    y: u32,
    z: u32,
}

/// The kernels as host functions, with the launch coordinates they read.
struct HostKernels {
    library: Library,
    _dir: tempfile::TempDir,
}

const BLOCK: u32 = 32;

impl HostKernels {
    fn build() -> HostKernels {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("kernels.cpp");
        std::fs::write(&source, assemble(Dialect::Cuda)).unwrap();
        let library = dir.path().join("libkernels.so");
        let shim = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gpu/host_run.h");
        let out = Command::new("g++")
            // The kernels read four 16-bit values as one 64-bit word: the host build assumes
            // nothing about such accesses.
            .args([
                "-std=c++17",
                "-O1",
                "-fno-strict-aliasing",
                "-shared",
                "-fPIC",
                "-w",
                "-include",
            ])
            .arg(&shim)
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
        // SAFETY: a library this test just built from the kernel source; loading runs no
        // initialisers besides the C++ runtime's.
        let library = unsafe { Library::new(&library) }.unwrap();
        HostKernels { library, _dir: dir }
    }

    fn coordinate(&self, name: &[u8]) -> *mut Dim3 {
        // SAFETY: the shim defines these four globals as `dim3`.
        unsafe { *self.library.get::<*mut Dim3>(name).unwrap() }
    }

    /// Runs `call` once per thread of enough blocks of `BLOCK` threads to give `threads`
    /// threads, in order.
    fn launch(&self, threads: usize, mut call: impl FnMut()) {
        let grid = (threads as u32).div_ceil(BLOCK).max(1);
        let (block_idx, thread_idx) = (self.coordinate(b"blockIdx"), self.coordinate(b"threadIdx"));
        // SAFETY: the globals are plain data, and only this thread runs kernels.
        unsafe {
            *self.coordinate(b"gridDim") = Dim3 {
                x: grid,
                y: 1,
                z: 1,
            };
            *self.coordinate(b"blockDim") = Dim3 {
                x: BLOCK,
                y: 1,
                z: 1,
            };
            for b in 0..grid {
                for t in 0..BLOCK {
                    *block_idx = Dim3 { x: b, y: 0, z: 0 };
                    *thread_idx = Dim3 { x: t, y: 0, z: 0 };
                    call();
                }
            }
        }
    }

    fn kernel<T>(&self, name: &str) -> Symbol<'_, T> {
        // SAFETY: the caller names the entry point's C signature in T.
        unsafe { self.library.get(name.as_bytes()) }
            .unwrap_or_else(|e| panic!("kernel {name}: {e}"))
    }
}

type Convert<I, O> = unsafe extern "C" fn(*const I, *mut O, i64);

fn to_bits(p: Precision, v: f32) -> u16 {
    match p {
        Precision::Fp16 => half::f16::from_f32(v).to_bits(),
        Precision::Bf16 => half::bf16::from_f32(v).to_bits(),
        Precision::Fp32 => unreachable!(),
    }
}

fn from_bits(p: Precision, b: u16) -> f32 {
    match p {
        Precision::Fp16 => half::f16::from_bits(b).to_f32(),
        Precision::Bf16 => half::bf16::from_bits(b).to_f32(),
        Precision::Fp32 => unreachable!(),
    }
}

/// Every kind of f32 the conversions meet: specials, the edges of both formats' ranges
/// and rounding boundaries, and a spread of pseudo-random bit patterns.
fn test_floats() -> Vec<f32> {
    let mut v = vec![
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::MAX,
        f32::MIN_POSITIVE,
        1e-45,
        65504.0,
        65519.996,
        65520.0,
        -65520.0,
        2f32.powi(-14),
        2f32.powi(-24),
        2f32.powi(-25),
        3.0 * 2f32.powi(-26),
        1.0 + 2f32.powi(-11),
        1.0 + 3.0 * 2f32.powi(-11),
        1.0 + 2f32.powi(-8),
        1.0 + 3.0 * 2f32.powi(-8),
        3.389_531_4e38,
    ];
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..200_000 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        v.push(f32::from_bits(state as u32));
        // Values in the range activations have, where most roundings happen.
        v.push(((state >> 32) as i32 as f32) * 2f32.powi(-28));
    }
    v
}

fn same(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

#[test]
fn conversions_run_on_the_host_match_the_half_crate_bit_for_bit() {
    let k = HostKernels::build();
    let floats = test_floats();
    let n = floats.len();
    for p in [Precision::Fp16, Precision::Bf16] {
        let store = k.kernel::<Convert<f32, u16>>(&format!("store_{}", suffix(p)));
        let mut bits = vec![0u16; n];
        k.launch(n, || unsafe {
            store(floats.as_ptr(), bits.as_mut_ptr(), n as i64)
        });
        for (v, b) in floats.iter().zip(&bits) {
            let want = to_bits(p, *v);
            let both_nan = from_bits(p, *b).is_nan() && v.is_nan();
            assert!(
                *b == want || both_nan,
                "{p} store of {v:e}: {b:#06x}, want {want:#06x}"
            );
        }

        let every: Vec<u16> = (0..=u16::MAX).collect();
        let load = k.kernel::<Convert<u16, f32>>(&format!("load_{}", suffix(p)));
        let mut wide = vec![0f32; every.len()];
        k.launch(every.len(), || unsafe {
            load(every.as_ptr(), wide.as_mut_ptr(), every.len() as i64)
        });
        for (b, w) in every.iter().zip(&wide) {
            assert!(same(*w, from_bits(p, *b)), "{p} load of {b:#06x}: {w:e}");
        }

        let round =
            k.kernel::<unsafe extern "C" fn(*mut f32, i64)>(&format!("round_{}", suffix(p)));
        let mut rounded = floats.clone();
        k.launch(n, || unsafe { round(rounded.as_mut_ptr(), n as i64) });
        for (v, r) in floats.iter().zip(&rounded) {
            assert!(same(*r, p.round(*v)), "{p} round of {v:e}: {r:e}");
        }
    }
}

fn activations(len: usize, seed: f32) -> Vec<f32> {
    (0..len)
        .map(|i| (i as f32 * 0.7548 + seed).sin() * 3.0 + (i % 7) as f32 * 0.01)
        .collect()
}

fn narrow(p: Precision, values: &[f32]) -> Vec<u16> {
    values.iter().map(|v| to_bits(p, *v)).collect()
}

fn widen(p: Precision, bits: &[u16]) -> Vec<f32> {
    bits.iter().map(|b| from_bits(p, *b)).collect()
}

fn host<B: Backend>(b: &B, buf: &B::Buffer) -> Vec<f32> {
    let mut out = vec![0.0; b.buffer_len(buf)];
    b.download(buf, &mut out).unwrap();
    out
}

type PoolKernel<I, O> =
    unsafe extern "C" fn(*const I, *mut O, i32, i32, i32, i32, i32, i32, i32, i32, i32);
type PoolBackward<T> =
    unsafe extern "C" fn(*const i32, *const T, *mut T, i32, i32, i32, i32, i32, i32, i32, i32, i32);

#[test]
fn max_pooling_in_16_bits_matches_the_cpu_reference() {
    let k = HostKernels::build();
    let p = PoolParams {
        batch: 2,
        in_h: 7,
        in_w: 6,
        channels: 3,
        kernel: 3,
        stride: 2,
        padding: 1,
    };
    let (oh, ow) = (p.out_h(), p.out_w());
    let shape = [2, 7, 6, 3, 3, 2, 1, oh as i32, ow as i32];
    let x = activations(p.input_len(), 0.4);
    let dy = activations(p.output_len(), 2.0);
    for precision in [Precision::Fp16, Precision::Bf16] {
        let cpu = HalfStorageCpu::new(CpuBackend::new(), precision).unwrap();
        let (xb, dyb) = (cpu.upload(&x).unwrap(), cpu.upload(&dy).unwrap());
        let mut want_y = cpu.alloc(p.output_len()).unwrap();
        cpu.max_pool_forward(&p, &xb, &mut want_y).unwrap();
        let mut want_dx = cpu.alloc(p.input_len()).unwrap();
        cpu.max_pool_backward(&p, &xb, &dyb, &mut want_dx).unwrap();

        let sfx = suffix(precision);
        let (x16, dy16) = (narrow(precision, &x), narrow(precision, &dy));
        let forward = k.kernel::<PoolKernel<u16, u16>>(&format!("max_pool_forward_{sfx}"));
        let mut y16 = vec![0u16; p.output_len()];
        k.launch(p.output_len(), || unsafe {
            let [b, h, w, c, kk, s, pad, oh, ow] = shape;
            forward(
                x16.as_ptr(),
                y16.as_mut_ptr(),
                b,
                h,
                w,
                c,
                kk,
                s,
                pad,
                oh,
                ow,
            )
        });
        assert_eq!(
            widen(precision, &y16),
            host(&cpu, &want_y),
            "{precision} forward"
        );

        let argmax = k.kernel::<PoolKernel<u16, i32>>(&format!("max_pool_argmax_{sfx}"));
        let mut arg = vec![0i32; p.output_len()];
        k.launch(p.output_len(), || unsafe {
            let [b, h, w, c, kk, s, pad, oh, ow] = shape;
            argmax(
                x16.as_ptr(),
                arg.as_mut_ptr(),
                b,
                h,
                w,
                c,
                kk,
                s,
                pad,
                oh,
                ow,
            )
        });
        let backward = k.kernel::<PoolBackward<u16>>(&format!("max_pool_backward_{sfx}"));
        let mut dx16 = vec![0u16; p.input_len()];
        k.launch(p.input_len(), || unsafe {
            let [b, h, w, c, kk, s, pad, oh, ow] = shape;
            backward(
                arg.as_ptr(),
                dy16.as_ptr(),
                dx16.as_mut_ptr(),
                b,
                h,
                w,
                c,
                kk,
                s,
                pad,
                oh,
                ow,
            )
        });
        assert_eq!(
            widen(precision, &dx16),
            host(&cpu, &want_dx),
            "{precision} backward"
        );
    }

    // The f32 forms of the same templates against the CPU backend.
    let cpu = CpuBackend::new();
    let xb = cpu.upload(&x).unwrap();
    let mut want = cpu.alloc(p.output_len()).unwrap();
    cpu.max_pool_forward(&p, &xb, &mut want).unwrap();
    let forward = k.kernel::<PoolKernel<f32, f32>>("max_pool_forward");
    let mut y = vec![0f32; p.output_len()];
    k.launch(p.output_len(), || unsafe {
        let [b, h, w, c, kk, s, pad, oh, ow] = shape;
        forward(x.as_ptr(), y.as_mut_ptr(), b, h, w, c, kk, s, pad, oh, ow)
    });
    assert_eq!(y, host(&cpu, &want));
}

type GlobalPool<T> = unsafe extern "C" fn(*const T, *mut T, i32, i32, i32);

#[test]
fn global_average_pooling_in_16_bits_matches_the_cpu_reference() {
    let k = HostKernels::build();
    let p = GlobalPoolParams {
        batch: 3,
        spatial: 10,
        channels: 5,
    };
    let x = activations(p.batch * p.spatial * p.channels, 1.3);
    let dy = activations(p.batch * p.channels, 0.2);
    for precision in [Precision::Fp16, Precision::Bf16] {
        let cpu = HalfStorageCpu::new(CpuBackend::new(), precision).unwrap();
        let mut want_y = cpu.alloc(dy.len()).unwrap();
        cpu.global_avg_pool_forward(&p, &cpu.upload(&x).unwrap(), &mut want_y)
            .unwrap();
        let mut want_dx = cpu.alloc(x.len()).unwrap();
        cpu.global_avg_pool_backward(&p, &cpu.upload(&dy).unwrap(), &mut want_dx)
            .unwrap();
        let sfx = suffix(precision);
        let (x16, dy16) = (narrow(precision, &x), narrow(precision, &dy));
        let dims = (p.batch as i32, p.spatial as i32, p.channels as i32);
        let forward = k.kernel::<GlobalPool<u16>>(&format!("global_avg_forward_{sfx}"));
        let mut y16 = vec![0u16; dy.len()];
        k.launch(dy.len(), || unsafe {
            forward(x16.as_ptr(), y16.as_mut_ptr(), dims.0, dims.1, dims.2)
        });
        let backward = k.kernel::<GlobalPool<u16>>(&format!("global_avg_backward_{sfx}"));
        let mut dx16 = vec![0u16; x.len()];
        k.launch(x.len(), || unsafe {
            backward(dy16.as_ptr(), dx16.as_mut_ptr(), dims.0, dims.1, dims.2)
        });
        // Same sums in the same order, then one rounding: equal, or one unit apart where
        // the CPU sums in another order.
        for (got, want) in [
            (widen(precision, &y16), host(&cpu, &want_y)),
            (widen(precision, &dx16), host(&cpu, &want_dx)),
        ] {
            for (g, w) in got.iter().zip(&want) {
                assert!(
                    (g - w).abs() <= 2f32.powi(-7) * w.abs().max(1e-3),
                    "{precision}: {g} vs {w}"
                );
            }
        }
    }
}

type Affine<T> = unsafe extern "C" fn(*const T, *const f32, *const f32, *mut T, i32, i32);
type DxRelu<T> = unsafe extern "C" fn(
    *const T,
    *const T,
    *const T,
    *const f32,
    *const f32,
    *const f32,
    *mut T,
    i32,
    i32,
);

#[test]
fn batch_norm_element_kernels_in_16_bits_round_the_f32_result_once() {
    let k = HostKernels::build();
    // Four channels take the kernels' four-at-a-time path, five the one-at-a-time one.
    for (rows, c) in [(9usize, 4usize), (7, 5)] {
        check_batch_norm_rounding(&k, rows, c);
    }
}

fn check_batch_norm_rounding(k: &HostKernels, rows: usize, c: usize) {
    let total = rows * c;
    let scale = &[1.5f32, -0.25, 0.75, 2.0, -1.25][..c];
    let shift = &[0.1f32, -0.3, 0.0, 1.0, 0.4][..c];
    let (a, g, b) = (
        &[0.01f32, -0.02, 0.03, 0.5, -0.07][..c],
        &[1.0f32, 0.5, -2.0, 0.25, 0.75][..c],
        &[0.0f32, 0.1, -0.1, 0.2, -0.2][..c],
    );
    for precision in [Precision::Fp16, Precision::Bf16] {
        let sfx = suffix(precision);
        let x = widen(precision, &narrow(precision, &activations(total, 0.9)));
        let dy = widen(precision, &narrow(precision, &activations(total, 3.1)));
        let relu_out = widen(precision, &narrow(precision, &activations(total, 5.0)));
        let (x16, dy16, r16) = (
            narrow(precision, &x),
            narrow(precision, &dy),
            narrow(precision, &relu_out),
        );

        let affine = k.kernel::<Affine<u16>>(&format!("channel_affine_relu_{sfx}"));
        let mut y16 = vec![0u16; total];
        k.launch(total, || unsafe {
            affine(
                x16.as_ptr(),
                scale.as_ptr(),
                shift.as_ptr(),
                y16.as_mut_ptr(),
                total as i32,
                c as i32,
            )
        });
        let want: Vec<f32> = (0..total)
            .map(|i| precision.round((x[i] * scale[i % c] + shift[i % c]).max(0.0)))
            .collect();
        assert_eq!(
            widen(precision, &y16),
            want,
            "{precision} affine, {c} channels"
        );

        let dx_relu = k.kernel::<DxRelu<u16>>(&format!("bn_backward_dx_relu_{sfx}"));
        let mut dx16 = vec![0u16; total];
        k.launch(total, || unsafe {
            dx_relu(
                x16.as_ptr(),
                dy16.as_ptr(),
                r16.as_ptr(),
                a.as_ptr(),
                g.as_ptr(),
                b.as_ptr(),
                dx16.as_mut_ptr(),
                total as i32,
                c as i32,
            )
        });
        let want: Vec<f32> = (0..total)
            .map(|i| {
                let masked = if relu_out[i] > 0.0 { dy[i] } else { 0.0 };
                precision.round(x[i] * a[i % c] + masked * g[i % c] + b[i % c])
            })
            .collect();
        assert_eq!(
            widen(precision, &dx16),
            want,
            "{precision} dx through ReLU, {c} channels"
        );
    }
}

type Binary<T> = unsafe extern "C" fn(*const T, *const T, *mut T, i64);
type ReluBackward<T> = unsafe extern "C" fn(*const T, *mut T, i64);

#[test]
fn residual_sums_and_relu_in_16_bits_match_the_cpu_reference() {
    let k = HostKernels::build();
    let n = 101;
    let (a, b) = (activations(n, 0.1), activations(n, 4.2));
    for precision in [Precision::Fp16, Precision::Bf16] {
        let cpu = HalfStorageCpu::new(CpuBackend::new(), precision).unwrap();
        let (ab, bb) = (cpu.upload(&a).unwrap(), cpu.upload(&b).unwrap());
        let mut sum = cpu.alloc(n).unwrap();
        cpu.add(&ab, &bb, &mut sum).unwrap();
        let mut grad = cpu
            .upload(&widen(precision, &narrow(precision, &b)))
            .unwrap();
        let stored_a = cpu
            .upload(&widen(precision, &narrow(precision, &a)))
            .unwrap();
        cpu.relu_backward(&stored_a, &mut grad).unwrap();

        let sfx = suffix(precision);
        let (a16, b16) = (narrow(precision, &a), narrow(precision, &b));
        let add = k.kernel::<Binary<u16>>(&format!("add_{sfx}"));
        let mut out = vec![0u16; n];
        k.launch(n, || unsafe {
            add(a16.as_ptr(), b16.as_ptr(), out.as_mut_ptr(), n as i64)
        });
        assert_eq!(widen(precision, &out), host(&cpu, &sum), "{precision} add");

        let relu_backward = k.kernel::<ReluBackward<u16>>(&format!("relu_backward_{sfx}"));
        let mut dy = b16.clone();
        k.launch(n, || unsafe {
            relu_backward(a16.as_ptr(), dy.as_mut_ptr(), n as i64)
        });
        assert_eq!(
            widen(precision, &dy),
            host(&cpu, &grad),
            "{precision} relu backward"
        );
    }
}

type Im2col<I, O> =
    unsafe extern "C" fn(*const I, *mut O, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32);
type Layout<I, O> = unsafe extern "C" fn(*const I, *mut O, i32, i32, i32);

#[test]
fn convolution_layout_kernels_in_16_bits_move_values_and_round_once() {
    let k = HostKernels::build();
    // Two images 5×4×3, a 3×3 kernel at stride 2 and padding 1: a 3×2 output.
    let (h, w, c, kh, kw, stride, pad) = (5, 4, 3, 3, 3, 2, 1);
    let (oh, ow) = (
        (h + 2 * pad - kh) / stride + 1,
        (w + 2 * pad - kw) / stride + 1,
    );
    let args = [0, 2, h, w, c, kh, kw, stride, pad, oh, ow].map(|v| v as i32);
    let x = activations(2 * h * w * c, 0.7);
    let cols = 2 * oh * ow * kh * kw * c;
    let dcol = activations(cols, 1.9);
    let f32_im2col = k.kernel::<Im2col<f32, f32>>("im2col");
    let f32_col2im = k.kernel::<Im2col<f32, f32>>("col2im");
    for precision in [Precision::Fp16, Precision::Bf16] {
        let sfx = suffix(precision);
        let x16 = narrow(precision, &x);
        let stored = widen(precision, &x16);
        let mut want = vec![0f32; cols];
        let run = |f: &Symbol<Im2col<f32, f32>>, src: &[f32], dst: &mut [f32], n: usize| {
            k.launch(n, || unsafe {
                let [a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10] = args;
                f(
                    src.as_ptr(),
                    dst.as_mut_ptr(),
                    a0,
                    a1,
                    a2,
                    a3,
                    a4,
                    a5,
                    a6,
                    a7,
                    a8,
                    a9,
                    a10,
                )
            })
        };
        run(&f32_im2col, &stored, &mut want, cols);
        let im2col = k.kernel::<Im2col<u16, u16>>(&format!("im2col_{sfx}"));
        let mut col16 = vec![0u16; cols];
        k.launch(cols, || unsafe {
            let [a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10] = args;
            im2col(
                x16.as_ptr(),
                col16.as_mut_ptr(),
                a0,
                a1,
                a2,
                a3,
                a4,
                a5,
                a6,
                a7,
                a8,
                a9,
                a10,
            )
        });
        assert_eq!(widen(precision, &col16), want, "{precision} im2col");

        let mut wide_dx = vec![0f32; x.len()];
        run(&f32_col2im, &dcol, &mut wide_dx, x.len());
        let col2im = k.kernel::<Im2col<f32, u16>>(&format!("col2im_{sfx}"));
        let mut dx16 = vec![0u16; x.len()];
        k.launch(x.len(), || unsafe {
            let [a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10] = args;
            col2im(
                dcol.as_ptr(),
                dx16.as_mut_ptr(),
                a0,
                a1,
                a2,
                a3,
                a4,
                a5,
                a6,
                a7,
                a8,
                a9,
                a10,
            )
        });
        let rounded: Vec<f32> = wide_dx.iter().map(|v| precision.round(*v)).collect();
        assert_eq!(widen(precision, &dx16), rounded, "{precision} col2im");

        // Weights [3·3, cin 3, cout 4] to the DNN order in 16 bits, and a gradient back.
        let (spatial, cin, cout) = (9i32, 3i32, 4i32);
        let weights = activations((spatial * cin * cout) as usize, 0.3);
        let to_ohwi = k.kernel::<Layout<f32, f32>>("hwio_to_ohwi");
        let mut ohwi = vec![0f32; weights.len()];
        k.launch(weights.len(), || unsafe {
            to_ohwi(weights.as_ptr(), ohwi.as_mut_ptr(), spatial, cin, cout)
        });
        let to_ohwi16 = k.kernel::<Layout<f32, u16>>(&format!("hwio_to_ohwi_{sfx}"));
        let mut ohwi16 = vec![0u16; weights.len()];
        k.launch(weights.len(), || unsafe {
            to_ohwi16(weights.as_ptr(), ohwi16.as_mut_ptr(), spatial, cin, cout)
        });
        let rounded: Vec<f32> = ohwi.iter().map(|v| precision.round(*v)).collect();
        assert_eq!(
            widen(precision, &ohwi16),
            rounded,
            "{precision} weights out"
        );
        let to_hwio16 = k.kernel::<Layout<u16, f32>>(&format!("ohwi_to_hwio_{sfx}"));
        let mut back = vec![0f32; weights.len()];
        k.launch(weights.len(), || unsafe {
            to_hwio16(ohwi16.as_ptr(), back.as_mut_ptr(), spatial, cin, cout)
        });
        let rounded: Vec<f32> = weights.iter().map(|v| precision.round(*v)).collect();
        assert_eq!(back, rounded, "{precision} gradient back");
    }
}
