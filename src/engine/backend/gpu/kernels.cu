// The engine's GPU kernels, one source for CUDA (NVRTC) and HIP (hiprtc). The dialect
// prelude defines KERNEL and the few spellings that differ; everything here sticks to
// what both compilers accept: no warp-size assumptions, no intrinsics beyond atomics-free
// shared-memory reductions, and 64-bit element counts.

#define BLOCK 256

// ---------------------------------------------------------------- storage formats

// How a kernel reads and writes the elements of an activation buffer: f32, or the bits of
// an IEEE half or a bfloat16 in 16 bits. Arithmetic is always f32. The 16-bit formats
// round to nearest even on store, overflowing to infinity, as the CPU reference does. The
// conversions use integer arithmetic so that neither compiler needs its half headers.
__device__ float half_bits_to_float(unsigned short h) {
    unsigned int sign = ((unsigned int)h & 0x8000u) << 16;
    unsigned int exponent = ((unsigned int)h >> 10) & 0x1fu;
    unsigned int mantissa = (unsigned int)h & 0x3ffu;
    if (exponent == 0) {
        // Zero or subnormal: mantissa · 2^-24, exact in f32.
        float v = (float)mantissa * 5.9604644775390625e-8f;
        return __uint_as_float(__float_as_uint(v) | sign);
    }
    if (exponent == 31) return __uint_as_float(sign | 0x7f800000u | (mantissa << 13));
    return __uint_as_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

__device__ unsigned short float_to_half_bits(float f) {
    unsigned int x = __float_as_uint(f);
    unsigned int sign = (x >> 16) & 0x8000u;
    unsigned int ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return (unsigned short)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    // From 65520 up (halfway past the largest half, 65504, to an odd neighbour) rounds to
    // infinity.
    if (ax >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);
    if (ax < 0x38800000u) {
        // Below 2^-14: a subnormal half or zero, whose mantissa is value · 2^24 rounded.
        unsigned int m = (unsigned int)rintf(__uint_as_float(ax) * 16777216.0f);
        return (unsigned short)(sign | m);
    }
    unsigned int h = (ax >> 13) - (112u << 10);
    unsigned int rest = ax & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h += 1u;
    return (unsigned short)(sign | h);
}

__device__ float bf16_bits_to_float(unsigned short h) {
    return __uint_as_float((unsigned int)h << 16);
}

__device__ unsigned short float_to_bf16_bits(float f) {
    unsigned int x = __float_as_uint(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((x >> 16) | 0x40u);
    return (unsigned short)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// load4/store4 move the four elements from i, a multiple of four, in one access: 16 bytes
// of f32 or 8 of 16-bit values (every buffer starts 256-byte aligned).
struct F32 {
    typedef float T;
    static __device__ float load(const float* p, long long i) { return p[i]; }
    static __device__ void store(float* p, long long i, float v) { p[i] = v; }
    static __device__ float4 load4(const float* p, long long i) { return *(const float4*)(p + i); }
    static __device__ void store4(float* p, long long i, float4 v) { *(float4*)(p + i) = v; }
};

struct HalfBits {
    static __device__ float to_float(unsigned short h) { return half_bits_to_float(h); }
    static __device__ unsigned short from_float(float f) { return float_to_half_bits(f); }
};

struct Bf16Bits {
    static __device__ float to_float(unsigned short h) { return bf16_bits_to_float(h); }
    static __device__ unsigned short from_float(float f) { return float_to_bf16_bits(f); }
};

// A 16-bit format; of four packed elements the first is in the low bits (little-endian).
template <class Bits>
struct Packed16 {
    typedef unsigned short T;
    static __device__ float load(const unsigned short* p, long long i) {
        return Bits::to_float(p[i]);
    }
    static __device__ void store(unsigned short* p, long long i, float v) {
        p[i] = Bits::from_float(v);
    }
    static __device__ float4 load4(const unsigned short* p, long long i) {
        unsigned long long q = *(const unsigned long long*)(p + i);
        return make_float4(Bits::to_float((unsigned short)q),
                           Bits::to_float((unsigned short)(q >> 16)),
                           Bits::to_float((unsigned short)(q >> 32)),
                           Bits::to_float((unsigned short)(q >> 48)));
    }
    static __device__ void store4(unsigned short* p, long long i, float4 v) {
        *(unsigned long long*)(p + i) = (unsigned long long)Bits::from_float(v.x) |
                                        ((unsigned long long)Bits::from_float(v.y) << 16) |
                                        ((unsigned long long)Bits::from_float(v.z) << 32) |
                                        ((unsigned long long)Bits::from_float(v.w) << 48);
    }
};

typedef Packed16<HalfBits> F16;
typedef Packed16<Bf16Bits> BF16;

// Entry points for several formats come from one template each: a macro
// `#define X(NAME, ...)` defines the entry point NAME, and each `X(name, ...)` line below
// it is one entry point.

#define FOR_EACH_INDEX(n)                                                                  \
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n);          \
         i += (long long)gridDim.x * blockDim.x)

// dst := src in another format: into 16 bits, back to f32, or f32 rounded through 16 bits.
template <class In, class Out>
__device__ void convert_body(const typename In::T* src, typename Out::T* dst, long long n) {
    FOR_EACH_INDEX(n) Out::store(dst, i, In::load(src, i));
}
#define CONVERT(NAME, In, Out)                                                             \
    KERNEL void NAME(const In::T* src, Out::T* dst, long long n) {                        \
        convert_body<In, Out>(src, dst, n);                                                \
    }
CONVERT(store_f16, F32, F16)
CONVERT(store_bf16, F32, BF16)
CONVERT(load_f16, F16, F32)
CONVERT(load_bf16, BF16, F32)

template <class S>
__device__ void round_body(float* x, long long n) {
    FOR_EACH_INDEX(n) {
        typename S::T bits;
        S::store(&bits, 0, x[i]);
        x[i] = S::load(&bits, 0);
    }
}
#define ROUND(NAME, S)                                                                     \
    KERNEL void NAME(float* x, long long n) { round_body<S>(x, n); }
ROUND(round_f16, F16)
ROUND(round_bf16, BF16)

// ---------------------------------------------------------------- element-wise

// The element-wise kernels move four floats per access where they can (every buffer
// starts 256-byte aligned): the float4 body, then the tail of n % 4 elements.
#define FOR_EACH_VEC4(n)                                                                   \
    long long n4 = (n) / 4;                                                                \
    long long stride = (long long)gridDim.x * blockDim.x;                                  \
    long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;                    \
    for (long long i = first; i < n4; i += stride)
#define FOR_EACH_TAIL(n) for (long long i = n4 * 4 + first; i < (n); i += stride)

KERNEL void fill_f32(float* x, long long n, float value) {
    FOR_EACH_VEC4(n) ((float4*)x)[i] = make_float4(value, value, value, value);
    FOR_EACH_TAIL(n) x[i] = value;
}

KERNEL void scale_f32(float* x, long long n, float alpha) {
    FOR_EACH_VEC4(n) {
        float4 u = ((float4*)x)[i];
        ((float4*)x)[i] = make_float4(u.x * alpha, u.y * alpha, u.z * alpha, u.w * alpha);
    }
    FOR_EACH_TAIL(n) x[i] *= alpha;
}

KERNEL void axpy_f32(float alpha, const float* x, float* y, long long n) {
    FOR_EACH_VEC4(n) {
        float4 u = ((const float4*)x)[i], v = ((float4*)y)[i];
        ((float4*)y)[i] = make_float4(v.x + alpha * u.x, v.y + alpha * u.y, v.z + alpha * u.z,
                                      v.w + alpha * u.w);
    }
    FOR_EACH_TAIL(n) y[i] += alpha * x[i];
}

// The optimizer's momentum step, fused: b := momentum·b + step·g + step·decay·w; w -= b.
__device__ void momentum_one(float* w, float g, float* b, float momentum, float step,
                             float step_decay) {
    float nb = *b * momentum + step * g + step_decay * *w;
    *b = nb;
    *w -= nb;
}

KERNEL void momentum_update(float* w, const float* g, float* b, long long n, float momentum,
                            float step, float step_decay) {
    FOR_EACH_VEC4(n) {
        float4 wv = ((float4*)w)[i], gv = ((const float4*)g)[i], bv = ((float4*)b)[i];
        momentum_one(&wv.x, gv.x, &bv.x, momentum, step, step_decay);
        momentum_one(&wv.y, gv.y, &bv.y, momentum, step, step_decay);
        momentum_one(&wv.z, gv.z, &bv.z, momentum, step, step_decay);
        momentum_one(&wv.w, gv.w, &bv.w, momentum, step, step_decay);
        ((float4*)w)[i] = wv;
        ((float4*)b)[i] = bv;
    }
    FOR_EACH_TAIL(n) momentum_one(&w[i], g[i], &b[i], momentum, step, step_decay);
}

// ---------------------------------------------------------------- multi-tensor updates

// One launch over many parameter tensors: a table in device memory names each tensor
// (laid out as the host writes it: the pointers, a 64-bit count, then any floats),
// blockIdx.y picks the tensor and the blocks of a row stride over it.
struct MomentumEntry {
    float* w;
    const float* g;
    float* b;
    long long n;
    float step;
    float step_decay;
};

KERNEL void momentum_update_multi(const MomentumEntry* table, float momentum) {
    MomentumEntry e = table[blockIdx.y];
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < e.n; i += stride)
        momentum_one(&e.w[i], e.g[i], &e.b[i], momentum, e.step, e.step_decay);
}

// Σ x² of many tensors in two deterministic stages: each block of row t writes its
// partial to partials[t·gridDim.x + blockIdx.x], then one block per tensor adds its row of
// partials in order into out[index[t]].
struct SquaresEntry {
    const float* x;
    long long n;
};

KERNEL void sum_squares_multi_partial(const SquaresEntry* table, float* partials) {
    __shared__ float acc[BLOCK];
    SquaresEntry e = table[blockIdx.y];
    float s = 0.0f;
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < e.n; i += stride)
        s += e.x[i] * e.x[i];
    acc[threadIdx.x] = s;
    __syncthreads();
    for (int half = BLOCK / 2; half > 0; half >>= 1) {
        if (threadIdx.x < half) acc[threadIdx.x] += acc[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) partials[(long long)blockIdx.y * gridDim.x + blockIdx.x] = acc[0];
}

KERNEL void sum_partials_multi(const float* partials, int count, const int* index, float* out) {
    __shared__ double acc[BLOCK];
    const float* row = partials + (long long)blockIdx.x * count;
    double s = 0.0;
    for (int i = threadIdx.x; i < count; i += BLOCK) s += (double)row[i];
    acc[threadIdx.x] = s;
    __syncthreads();
    for (int half = BLOCK / 2; half > 0; half >>= 1) {
        if (threadIdx.x < half) acc[threadIdx.x] += acc[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[index[blockIdx.x]] = (float)acc[0];
}

__device__ float relu(float v) { return v > 0.0f ? v : 0.0f; }
__device__ float relu_grad(float y, float g) { return y > 0.0f ? g : 0.0f; }

// The element-wise ops on activations, four elements per access in every format.
template <class S>
__device__ void add_body(const typename S::T* a, const typename S::T* b, typename S::T* out,
                         long long n) {
    FOR_EACH_VEC4(n) {
        float4 u = S::load4(a, 4 * i), v = S::load4(b, 4 * i);
        S::store4(out, 4 * i, make_float4(u.x + v.x, u.y + v.y, u.z + v.z, u.w + v.w));
    }
    FOR_EACH_TAIL(n) S::store(out, i, S::load(a, i) + S::load(b, i));
}
#define ADD(NAME, S)                                                                       \
    KERNEL void NAME(const S::T* a, const S::T* b, S::T* out, long long n) {              \
        add_body<S>(a, b, out, n);                                                         \
    }
ADD(add_f32, F32)
ADD(add_f16, F16)
ADD(add_bf16, BF16)

template <class S>
__device__ void add_assign_body(typename S::T* dst, const typename S::T* src, long long n) {
    FOR_EACH_VEC4(n) {
        float4 u = S::load4(dst, 4 * i), v = S::load4(src, 4 * i);
        S::store4(dst, 4 * i, make_float4(u.x + v.x, u.y + v.y, u.z + v.z, u.w + v.w));
    }
    FOR_EACH_TAIL(n) S::store(dst, i, S::load(dst, i) + S::load(src, i));
}
#define ADD_ASSIGN(NAME, S)                                                                \
    KERNEL void NAME(S::T* dst, const S::T* src, long long n) { add_assign_body<S>(dst, src, n); }
ADD_ASSIGN(add_assign_f32, F32)
ADD_ASSIGN(add_assign_f16, F16)
ADD_ASSIGN(add_assign_bf16, BF16)

template <class S>
__device__ void relu_forward_body(typename S::T* x, long long n) {
    FOR_EACH_VEC4(n) {
        float4 u = S::load4(x, 4 * i);
        S::store4(x, 4 * i, make_float4(relu(u.x), relu(u.y), relu(u.z), relu(u.w)));
    }
    FOR_EACH_TAIL(n) S::store(x, i, relu(S::load(x, i)));
}
#define RELU_FORWARD(NAME, S)                                                              \
    KERNEL void NAME(S::T* x, long long n) { relu_forward_body<S>(x, n); }
RELU_FORWARD(relu_forward, F32)
RELU_FORWARD(relu_forward_f16, F16)
RELU_FORWARD(relu_forward_bf16, BF16)

template <class S>
__device__ void relu_backward_body(const typename S::T* y, typename S::T* dy, long long n) {
    FOR_EACH_VEC4(n) {
        float4 u = S::load4(y, 4 * i), g = S::load4(dy, 4 * i);
        S::store4(dy, 4 * i, make_float4(relu_grad(u.x, g.x), relu_grad(u.y, g.y),
                                         relu_grad(u.z, g.z), relu_grad(u.w, g.w)));
    }
    FOR_EACH_TAIL(n) S::store(dy, i, relu_grad(S::load(y, i), S::load(dy, i)));
}
#define RELU_BACKWARD(NAME, S)                                                             \
    KERNEL void NAME(const S::T* y, S::T* dy, long long n) { relu_backward_body<S>(y, dy, n); }
RELU_BACKWARD(relu_backward, F32)
RELU_BACKWARD(relu_backward_f16, F16)
RELU_BACKWARD(relu_backward_bf16, BF16)

// Deterministic pseudo-random values in [-1, 1) for benchmark inputs: a hash of the index,
// so no two runs or devices need to share a generator.
__device__ float pattern_value(long long i, int seed) {
    unsigned int h = (unsigned int)(i * 2654435761ll) ^ (unsigned int)(seed * 40503);
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    h *= 3266489917u;
    h ^= h >> 16;
    return (float)(h >> 8) * (2.0f / 16777216.0f) - 1.0f;
}

KERNEL void fill_pattern_f32(float* x, long long n, int seed) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long stride = (long long)gridDim.x * blockDim.x;
    for (; i < n; i += stride) x[i] = pattern_value(i, seed);
}

// The same values as IEEE half bits (every value is normal or zero in this range, so the
// conversion only rounds the mantissa down).
KERNEL void fill_pattern_f16(unsigned short* x, long long n, int seed) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long stride = (long long)gridDim.x * blockDim.x;
    for (; i < n; i += stride) {
        unsigned int bits = (unsigned int)__float_as_int(pattern_value(i, seed));
        unsigned int sign = (bits >> 16) & 0x8000u;
        int exponent = (int)((bits >> 23) & 0xff) - 127 + 15;
        unsigned int mantissa = (bits >> 13) & 0x3ffu;
        x[i] = exponent <= 0 ? (unsigned short)sign
                             : (unsigned short)(sign | ((unsigned int)exponent << 10) | mantissa);
    }
}

// ---------------------------------------------------------------- reductions

// Sums of squares, deterministic in two stages: each block writes its partial sum, then
// one block adds the partials in a fixed order.
KERNEL void sum_squares_partial(const float* x, long long n, float* partials) {
    __shared__ float acc[BLOCK];
    float s = 0.0f;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long stride = (long long)gridDim.x * blockDim.x;
    for (; i < n; i += stride) s += x[i] * x[i];
    acc[threadIdx.x] = s;
    __syncthreads();
    for (int half = BLOCK / 2; half > 0; half >>= 1) {
        if (threadIdx.x < half) acc[threadIdx.x] += acc[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) partials[blockIdx.x] = acc[0];
}

KERNEL void sum_partials(const float* partials, int count, float* out, int index) {
    __shared__ double acc[BLOCK];
    double s = 0.0;
    for (int i = threadIdx.x; i < count; i += BLOCK) s += (double)partials[i];
    acc[threadIdx.x] = s;
    __syncthreads();
    for (int half = BLOCK / 2; half > 0; half >>= 1) {
        if (threadIdx.x < half) acc[threadIdx.x] += acc[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[index] = (float)acc[0];
}

// Sets *flag to 1 when any element is NaN or infinite (every writer writes the same value).
KERNEL void non_finite_flag(const float* x, long long n, float* flag) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long stride = (long long)gridDim.x * blockDim.x;
    for (; i < n; i += stride) {
        if ((__float_as_int(x[i]) & 0x7f800000) == 0x7f800000) flag[0] = 1.0f;
    }
}

// ---------------------------------------------------------------- convolution

// im2col over `images` images starting at `first_image`: col is [images·OH·OW, KH·KW·C]
// with (kh, kw, c) ordering; padding reads as zero. One thread per column element, for
// few channels (the 3-channel stem); the host keeps the chunk under 2^31 elements so the
// index arithmetic stays 32-bit.
template <class S>
__device__ void im2col_body(const typename S::T* x, typename S::T* col, int first_image,
                            int images, int h, int w, int c, int kh_n, int kw_n, int stride,
                            int pad, int oh_n, int ow_n) {
    int k = kh_n * kw_n * c;
    int total = images * oh_n * ow_n * k;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        int row = i / k;
        int kk = i - row * k;
        int ci = kk % c;
        int r = kk / c;
        int kw = r % kw_n;
        int kh = r / kw_n;
        int ow = row % ow_n;
        int t = row / ow_n;
        int oh = t % oh_n;
        int n = first_image + t / oh_n;
        int ih = oh * stride + kh - pad;
        int iw = ow * stride + kw - pad;
        float v = 0.0f;
        if (ih >= 0 && ih < h && iw >= 0 && iw < w)
            v = S::load(x, (((long long)n * h + ih) * w + iw) * c + ci);
        S::store(col, i, v);
    }
}
#define IM2COL(NAME, S)                                                                    \
    KERNEL void NAME(const S::T* x, S::T* col, int first_image, int images, int h, int w,  \
                     int c, int kh_n, int kw_n, int stride, int pad, int oh_n, int ow_n) { \
        im2col_body<S>(x, col, first_image, images, h, w, c, kh_n, kw_n, stride, pad, oh_n, \
                       ow_n);                                                              \
    }
IM2COL(im2col, F32)
IM2COL(im2col_f16, F16)
IM2COL(im2col_bf16, BF16)

// The same by rows: a block per output pixel. For a fixed kh the KW·C column entries read
// consecutive input (consecutive kw read consecutive iw at any stride), so each is one
// contiguous copy with the padded ends zeroed, and no thread divides.
template <class S>
__device__ void im2col_rows_body(const typename S::T* x, typename S::T* col, int first_image,
                                 int rows, int h, int w, int c, int kh_n, int kw_n, int stride,
                                 int pad, int oh_n, int ow_n) {
    int k = kh_n * kw_n * c;
    int segment = kw_n * c;
    for (int row = blockIdx.x; row < rows; row += gridDim.x) {
        int ow = row % ow_n;
        int t = row / ow_n;
        int oh = t % oh_n;
        int n = first_image + t / oh_n;
        int iw0 = ow * stride - pad;
        // Valid kw are those with 0 <= iw0 + kw < w.
        int lo = (iw0 < 0 ? -iw0 : 0) * c;
        int hi = (w - iw0 < kw_n ? w - iw0 : kw_n) * c;
        long long dst = (long long)row * k;
        for (int kh = 0; kh < kh_n; ++kh) {
            int ih = oh * stride + kh - pad;
            bool row_inside = ih >= 0 && ih < h;
            // Where kw = 0 would read; only the valid part [lo, hi) of the segment is read.
            long long src = (((long long)n * h + (row_inside ? ih : 0)) * w + iw0) * c;
            long long d = dst + (long long)kh * segment;
            for (int j = threadIdx.x; j < segment; j += blockDim.x)
                S::store(col, d + j,
                         (row_inside && j >= lo && j < hi) ? S::load(x, src + j) : 0.0f);
        }
    }
}
#define IM2COL_ROWS(NAME, S)                                                               \
    KERNEL void NAME(const S::T* x, S::T* col, int first_image, int rows, int h, int w,    \
                     int c, int kh_n, int kw_n, int stride, int pad, int oh_n, int ow_n) { \
        im2col_rows_body<S>(x, col, first_image, rows, h, w, c, kh_n, kw_n, stride, pad,   \
                            oh_n, ow_n);                                                   \
    }
IM2COL_ROWS(im2col_rows, F32)
IM2COL_ROWS(im2col_rows_f16, F16)
IM2COL_ROWS(im2col_rows_bf16, BF16)

// The adjoint of im2col as a gather: each input-gradient element of the chunk's images
// sums the column entries that read it, so no two threads write one address. The chunk
// is under 2^31 elements.
// The column gradient is f32 (the GEMM's output); dx is stored in the activation format.
template <class Out>
__device__ void col2im_body(const float* dcol, typename Out::T* dx, int first_image, int images,
                            int h, int w, int c, int kh_n, int kw_n, int stride, int pad,
                            int oh_n, int ow_n) {
    int k = kh_n * kw_n * c;
    int total = images * h * w * c;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        int ci = i % c;
        int t = i / c;
        int iw = t % w;
        t /= w;
        int ih = t % h;
        int n_local = t / h;
        float s = 0.0f;
        for (int kh = 0; kh < kh_n; ++kh) {
            int oh_s = ih + pad - kh;
            if (oh_s < 0 || oh_s % stride != 0) continue;
            int oh = oh_s / stride;
            if (oh >= oh_n) continue;
            for (int kw = 0; kw < kw_n; ++kw) {
                int ow_s = iw + pad - kw;
                if (ow_s < 0 || ow_s % stride != 0) continue;
                int ow = ow_s / stride;
                if (ow >= ow_n) continue;
                long long row = ((long long)n_local * oh_n + oh) * ow_n + ow;
                s += dcol[row * k + (kh * kw_n + kw) * c + ci];
            }
        }
        Out::store(dx, (long long)first_image * h * w * c + i, s);
    }
}
#define COL2IM(NAME, Out)                                                                  \
    KERNEL void NAME(const float* dcol, Out::T* dx, int first_image, int images, int h,    \
                     int w, int c, int kh_n, int kw_n, int stride, int pad, int oh_n,      \
                     int ow_n) {                                                           \
        col2im_body<Out>(dcol, dx, first_image, images, h, w, c, kh_n, kw_n, stride, pad,  \
                         oh_n, ow_n);                                                      \
    }
COL2IM(col2im, F32)
COL2IM(col2im_f16, F16)
COL2IM(col2im_bf16, BF16)

// Filter layouts for DNN libraries: HWIO [s, cin, cout] (s = kh·kw) to OHWI
// [cout, s, cin] and back. One thread per element, under 2^31 elements.
// With 16-bit activations the f32 master weights go to the library converted, and its
// 16-bit weight gradient comes back as f32.
template <class In, class Out>
__device__ void hwio_to_ohwi_body(const typename In::T* src, typename Out::T* dst, int spatial,
                                  int cin, int cout) {
    int total = spatial * cin * cout;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        int ci = i % cin;
        int t = i / cin;
        int s = t % spatial;
        int co = t / spatial;
        Out::store(dst, i, In::load(src, (s * cin + ci) * cout + co));
    }
}
#define HWIO_TO_OHWI(NAME, In, Out)                                                        \
    KERNEL void NAME(const In::T* src, Out::T* dst, int spatial, int cin, int cout) {      \
        hwio_to_ohwi_body<In, Out>(src, dst, spatial, cin, cout);                          \
    }
HWIO_TO_OHWI(hwio_to_ohwi, F32, F32)
HWIO_TO_OHWI(hwio_to_ohwi_f16, F32, F16)
HWIO_TO_OHWI(hwio_to_ohwi_bf16, F32, BF16)

template <class In, class Out>
__device__ void ohwi_to_hwio_body(const typename In::T* src, typename Out::T* dst, int spatial,
                                  int cin, int cout) {
    int total = spatial * cin * cout;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        int co = i % cout;
        int t = i / cout;
        int ci = t % cin;
        int s = t / cin;
        Out::store(dst, i, In::load(src, (co * spatial + s) * cin + ci));
    }
}
#define OHWI_TO_HWIO(NAME, In, Out)                                                        \
    KERNEL void NAME(const In::T* src, Out::T* dst, int spatial, int cin, int cout) {      \
        ohwi_to_hwio_body<In, Out>(src, dst, spatial, cin, cout);                          \
    }
OHWI_TO_HWIO(ohwi_to_hwio, F32, F32)
OHWI_TO_HWIO(ohwi_to_hwio_f16, F16, F32)
OHWI_TO_HWIO(ohwi_to_hwio_bf16, BF16, F32)

// ---------------------------------------------------------------- implicit-GEMM convolution

// Each convolution pass as a GEMM C[M, N] = A[M, K] · B[K, N] whose operands are read
// straight from the tensors, the im2col matrix never written: a block computes a 64×64
// tile of C over 16-deep slices of K staged in shared memory. A problem (forward, data
// gradient, filter gradient) says where each operand element lives, or that it is a
// padding zero; a tile's math (a portable FMA loop, or tensor cores where the compiler
// targets them) says how the staged slices are stored and multiplied. Every math runs on
// the same addressing, and C is row-major [M, N] for all three passes: y [pixels, Cout],
// dx [pixels, Cin], dW [KH·KW·Cin, Cout]. Index arithmetic is 32-bit (the host checks
// that every tensor has fewer than 2^31 elements); offsets are 64-bit.

#define IG_BM 64
#define IG_BN 64
#define IG_BK 16
#define IG_THREADS 128

struct IgShape {
    int batch, h, w, c, cout, kh_n, kw_n, stride, pad, oh_n, ow_n;
};

// Forward: rows are output pixels, depth is (kh, kw, ci), columns output channels.
struct IgForward {
    IgShape s;
    struct Row {
        long long image;
        int ih0, iw0;
        bool valid;
    };
    __device__ int rows() const { return s.batch * s.oh_n * s.ow_n; }
    __device__ int cols() const { return s.cout; }
    __device__ int depth() const { return s.kh_n * s.kw_n * s.c; }
    __device__ Row row(int m) const {
        Row r;
        r.valid = m < rows();
        int ow = m % s.ow_n, t = m / s.ow_n;
        int oh = t % s.oh_n, n = t / s.oh_n;
        r.image = (long long)n * s.h * s.w * s.c;
        r.ih0 = oh * s.stride - s.pad;
        r.iw0 = ow * s.stride - s.pad;
        return r;
    }
    __device__ long long a_at(const Row& r, int k) const {
        if (!r.valid || k >= depth()) return -1;
        int ci = k % s.c, t = k / s.c;
        int ih = r.ih0 + t / s.kw_n, iw = r.iw0 + t % s.kw_n;
        if (ih < 0 || ih >= s.h || iw < 0 || iw >= s.w) return -1;
        return r.image + ((long long)ih * s.w + iw) * s.c + ci;
    }
    __device__ long long b_at(int k, int n) const {
        if (k >= depth() || n >= cols()) return -1;
        return (long long)k * s.cout + n;
    }
};

// Data gradient: rows are input pixels, depth is (kh, kw, co) over the output pixels that
// read the row's pixel (none where the stride skips it), columns input channels; B is the
// HWIO filter read transposed.
struct IgBackwardData {
    IgShape s;
    struct Row {
        long long image;
        int ih, iw;
        bool valid;
    };
    __device__ int rows() const { return s.batch * s.h * s.w; }
    __device__ int cols() const { return s.c; }
    __device__ int depth() const { return s.kh_n * s.kw_n * s.cout; }
    __device__ Row row(int m) const {
        Row r;
        r.valid = m < rows();
        int iw = m % s.w, t = m / s.w;
        r.iw = iw + s.pad;
        r.ih = t % s.h + s.pad;
        r.image = (long long)(t / s.h) * s.oh_n * s.ow_n * s.cout;
        return r;
    }
    __device__ long long a_at(const Row& r, int k) const {
        if (!r.valid || k >= depth()) return -1;
        int co = k % s.cout, t = k / s.cout;
        int oh_s = r.ih - t / s.kw_n, ow_s = r.iw - t % s.kw_n;
        if (oh_s < 0 || ow_s < 0 || oh_s % s.stride != 0 || ow_s % s.stride != 0) return -1;
        int oh = oh_s / s.stride, ow = ow_s / s.stride;
        if (oh >= s.oh_n || ow >= s.ow_n) return -1;
        return r.image + ((long long)oh * s.ow_n + ow) * s.cout + co;
    }
    __device__ long long b_at(int k, int n) const {
        if (k >= depth() || n >= cols()) return -1;
        int co = k % s.cout, spatial = k / s.cout;
        return ((long long)spatial * s.c + n) * s.cout + co;
    }
};

// Filter gradient: rows are filter taps (kh, kw, ci), depth is the output pixels, columns
// output channels; A is the im2col matrix read transposed.
struct IgBackwardFilter {
    IgShape s;
    struct Row {
        int dh, dw, ci;
        bool valid;
    };
    __device__ int rows() const { return s.kh_n * s.kw_n * s.c; }
    __device__ int cols() const { return s.cout; }
    __device__ int depth() const { return s.batch * s.oh_n * s.ow_n; }
    __device__ Row row(int m) const {
        Row r;
        r.valid = m < rows();
        r.ci = m % s.c;
        int t = m / s.c;
        r.dw = t % s.kw_n - s.pad;
        r.dh = t / s.kw_n - s.pad;
        return r;
    }
    __device__ long long a_at(const Row& r, int k) const {
        if (!r.valid || k >= depth()) return -1;
        int ow = k % s.ow_n, t = k / s.ow_n;
        int oh = t % s.oh_n, n = t / s.oh_n;
        int ih = oh * s.stride + r.dh, iw = ow * s.stride + r.dw;
        if (ih < 0 || ih >= s.h || iw < 0 || iw >= s.w) return -1;
        return (((long long)n * s.h + ih) * s.w + iw) * s.c + r.ci;
    }
    __device__ long long b_at(int k, int n) const {
        if (k >= depth() || n >= cols()) return -1;
        return (long long)k * s.cout + n;
    }
};

// The portable math: slices staged as f32, K-major so that a thread's eight rows and
// four columns are contiguous; each thread sums an 8×4 patch of the tile in f32.
template <class S>
struct IgPortable {
    struct Tiles {
        float a[IG_BK][IG_BM + 4];
        float b[IG_BK][IG_BN + 4];
    };
    struct Acc {
        float v[8][4];
    };
    static __device__ void put_a(Tiles& t, int m, int k, const typename S::T* src, long long at) {
        t.a[k][m] = at < 0 ? 0.0f : S::load(src, at);
    }
    static __device__ void put_b(Tiles& t, int k, int n, const typename S::T* src, long long at) {
        t.b[k][n] = at < 0 ? 0.0f : S::load(src, at);
    }
    static __device__ void clear(Acc& acc) {
        for (int i = 0; i < 8; ++i)
            for (int j = 0; j < 4; ++j) acc.v[i][j] = 0.0f;
    }
    static __device__ void multiply(const Tiles& t, Acc& acc) {
        int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
        for (int k = 0; k < IG_BK; ++k) {
            float a[8], b[4];
            for (int i = 0; i < 8; ++i) a[i] = t.a[k][ty * 8 + i];
            for (int j = 0; j < 4; ++j) b[j] = t.b[k][tx * 4 + j];
            for (int i = 0; i < 8; ++i)
                for (int j = 0; j < 4; ++j) acc.v[i][j] += a[i] * b[j];
        }
    }
    // Calls put(row, column, value) for each element of the tile this thread summed.
    template <class Put>
    static __device__ void each(const Acc& acc, Put put) {
        int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
        for (int i = 0; i < 8; ++i)
            for (int j = 0; j < 4; ++j) put(ty * 8 + i, tx * 4 + j, acc.v[i][j]);
    }
};

template <class S>
struct IgMath : IgPortable<S> {};

// NVIDIA from Ampere on: 16-bit slices stay in their bits, row-major (K contiguous) for
// A and column-major for B, as mma.sync's fragments read them; four warps of 32×32 each
// issue two by four m16n8k16 products per slice, accumulating in f32. An emulated device
// built with EMULATED_MMA_SYNC runs this path with the warp's product done on the host
// (emulated_mma_m16n8k16, from the fragment layouts of the PTX ISA).
#if defined(EMULATED_MMA_SYNC)
struct MmaF16 {
    static __device__ void mma(float* d, const unsigned int* a, const unsigned int* b) {
        emulated_mma_m16n8k16(d, a, b, 0);
    }
};
struct MmaBf16 {
    static __device__ void mma(float* d, const unsigned int* a, const unsigned int* b) {
        emulated_mma_m16n8k16(d, a, b, 1);
    }
};
#define IG_MMA_SYNC 1
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
struct MmaF16 {
    static __device__ void mma(float* d, const unsigned int* a, const unsigned int* b) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
            "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
};
struct MmaBf16 {
    static __device__ void mma(float* d, const unsigned int* a, const unsigned int* b) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
            "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
};
#define IG_MMA_SYNC 1
#endif

#if defined(IG_MMA_SYNC)
template <class Op>
struct IgMmaSync {
    // Rows of 24 halves: 48 bytes keep each 32-bit fragment read aligned and spread the
    // eight rows a fragment reads over the banks.
    struct alignas(16) Tiles {
        unsigned short a[IG_BM][IG_BK + 8];
        unsigned short b[IG_BN][IG_BK + 8];
    };
    struct Acc {
        float v[2][4][4];
    };
    static __device__ void put_a(Tiles& t, int m, int k, const unsigned short* src, long long at) {
        t.a[m][k] = at < 0 ? (unsigned short)0 : src[at];
    }
    static __device__ void put_b(Tiles& t, int k, int n, const unsigned short* src, long long at) {
        t.b[n][k] = at < 0 ? (unsigned short)0 : src[at];
    }
    static __device__ void clear(Acc& acc) {
        for (int i = 0; i < 2; ++i)
            for (int j = 0; j < 4; ++j)
                for (int r = 0; r < 4; ++r) acc.v[i][j][r] = 0.0f;
    }
    static __device__ unsigned int pair(const unsigned short* p) {
        return *(const unsigned int*)p;
    }
    static __device__ void multiply(const Tiles& t, Acc& acc) {
        int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
        int wm = (warp % 2) * 32, wn = (warp / 2) * 32;
        int g = lane / 4, q = (lane % 4) * 2;
        unsigned int a[2][4], b[4][2];
        for (int i = 0; i < 2; ++i) {
            int r = wm + i * 16 + g;
            a[i][0] = pair(&t.a[r][q]);
            a[i][1] = pair(&t.a[r + 8][q]);
            a[i][2] = pair(&t.a[r][q + 8]);
            a[i][3] = pair(&t.a[r + 8][q + 8]);
        }
        for (int j = 0; j < 4; ++j) {
            int n = wn + j * 8 + g;
            b[j][0] = pair(&t.b[n][q]);
            b[j][1] = pair(&t.b[n][q + 8]);
        }
        for (int i = 0; i < 2; ++i)
            for (int j = 0; j < 4; ++j) Op::mma(acc.v[i][j], a[i], b[j]);
    }
    template <class Put>
    static __device__ void each(const Acc& acc, Put put) {
        int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
        int wm = (warp % 2) * 32, wn = (warp / 2) * 32;
        int g = lane / 4, q = (lane % 4) * 2;
        for (int i = 0; i < 2; ++i)
            for (int j = 0; j < 4; ++j)
                for (int r = 0; r < 4; ++r)
                    put(wm + i * 16 + g + (r / 2) * 8, wn + j * 8 + q + r % 2, acc.v[i][j][r]);
    }
};
template <>
struct IgMath<F16> : IgMmaSync<MmaF16> {};
template <>
struct IgMath<BF16> : IgMmaSync<MmaBf16> {};
#endif

// Stores one f32 sum into C in Out's format.
template <class Out>
struct IgStore {
    typename Out::T* c;
    int rows, cols;
    int m0, n0;
    __device__ void operator()(int m, int n, float v) const {
        if (m0 + m < rows && n0 + n < cols) Out::store(c, (long long)(m0 + m) * cols + n0 + n, v);
    }
};

// A block's tile: blockIdx.x walks the tiles (columns fastest), blockIdx.y the slices of
// K the filter gradient splits its long depth into (`split_depth` deep, a multiple of
// IG_BK; each split writes its own [M, N] of c). Each thread stages one row of A and one
// column of B, eight deep, per slice, so it decodes its row once.
template <class S, class Out, class P>
__device__ void implicit_gemm_body(const typename S::T* a, const typename S::T* b,
                                   typename Out::T* c, P p, int split_depth) {
    typedef IgMath<S> Math;
    __shared__ typename Math::Tiles tiles;
    int rows = p.rows(), cols = p.cols();
    int n_tiles = (cols + IG_BN - 1) / IG_BN;
    int m0 = (int)(blockIdx.x / n_tiles) * IG_BM, n0 = (int)(blockIdx.x % n_tiles) * IG_BN;
    int k_first = (int)blockIdx.y * split_depth;
    int k_last = k_first + split_depth < p.depth() ? k_first + split_depth : p.depth();
    int lane = threadIdx.x % IG_BM, half = (threadIdx.x / IG_BM) * (IG_BK / 2);
    typename P::Row row = p.row(m0 + lane);
    typename Math::Acc acc;
    Math::clear(acc);
    for (int k0 = k_first; k0 < k_last; k0 += IG_BK) {
        for (int j = 0; j < IG_BK / 2; ++j) {
            int k = k0 + half + j;
            bool inside = k < k_last;
            Math::put_a(tiles, lane, half + j, a, inside ? p.a_at(row, k) : -1);
            Math::put_b(tiles, half + j, lane, b, inside ? p.b_at(k, n0 + lane) : -1);
        }
        __syncthreads();
        Math::multiply(tiles, acc);
        __syncthreads();
    }
    IgStore<Out> store = {c + (long long)blockIdx.y * rows * cols, rows, cols, m0, n0};
    Math::each(acc, store);
}

#define IMPLICIT_GEMM(NAME, S, Out, P)                                                     \
    KERNEL void NAME(const S::T* a, const S::T* b, Out::T* c, int batch, int h, int w,     \
                     int ch, int cout, int kh_n, int kw_n, int stride, int pad, int oh_n,  \
                     int ow_n, int split_depth) {                                          \
        P p = {{batch, h, w, ch, cout, kh_n, kw_n, stride, pad, oh_n, ow_n}};              \
        implicit_gemm_body<S, Out, P>(a, b, c, p, split_depth);                            \
    }
IMPLICIT_GEMM(conv_implicit_forward, F32, F32, IgForward)
IMPLICIT_GEMM(conv_implicit_forward_f16, F16, F16, IgForward)
IMPLICIT_GEMM(conv_implicit_forward_bf16, BF16, BF16, IgForward)
IMPLICIT_GEMM(conv_implicit_backward_data, F32, F32, IgBackwardData)
IMPLICIT_GEMM(conv_implicit_backward_data_f16, F16, F16, IgBackwardData)
IMPLICIT_GEMM(conv_implicit_backward_data_bf16, BF16, BF16, IgBackwardData)
IMPLICIT_GEMM(conv_implicit_backward_filter, F32, F32, IgBackwardFilter)
IMPLICIT_GEMM(conv_implicit_backward_filter_f16, F16, F32, IgBackwardFilter)
IMPLICIT_GEMM(conv_implicit_backward_filter_bf16, BF16, F32, IgBackwardFilter)

// dW := the sum of the filter gradient's splits, in split order (deterministic).
KERNEL void conv_split_sum(const float* partial, float* out, int splits, long long n) {
    FOR_EACH_INDEX(n) {
        float s = 0.0f;
        for (int j = 0; j < splits; ++j) s += partial[(long long)j * n + i];
        out[i] = s;
    }
}

// ---------------------------------------------------------------- batch norm over [rows, C]

// Per-channel partial sums over a slab of rows: block (32, 8) covers 32 channels; blockIdx.y
// picks the slab. Writes partial1/partial2[blockIdx.y·C + c] for the finalize kernels.
// mode 0 (statistics): sums of (x − x[0,c]) and its square, shifted for accuracy.
// mode 1 (gradients):  sums of dy and dy·(x − mean[c]).
// mode 2 (gradients through a ReLU): as mode 1 with dy masked by relu_out > 0.
template <class S>
__device__ void bn_partial_sums_body(const typename S::T* x, const typename S::T* dy,
                                     const float* mean, const typename S::T* relu_out,
                                     long long rows, int channels, int rows_per_slab, int mode,
                                     float* partial1, float* partial2) {
    __shared__ float s1[8][33];
    __shared__ float s2[8][33];
    int c = blockIdx.x * 32 + threadIdx.x;
    long long first = (long long)blockIdx.y * rows_per_slab;
    long long last = first + rows_per_slab;
    if (last > rows) last = rows;
    float a1 = 0.0f, a2 = 0.0f;
    if (c < channels) {
        float center = mode == 0 ? S::load(x, c) : mean[c];
        long long r = first + threadIdx.y;
        // Four rows per iteration keep more loads in flight.
        for (; r + 24 < last; r += 32) {
            float d[4], g[4];
            for (int u = 0; u < 4; ++u) {
                long long at = (r + 8 * u) * channels + c;
                d[u] = S::load(x, at) - center;
                g[u] = mode == 0 ? d[u] : S::load(dy, at);
                if (mode == 2 && !(S::load(relu_out, at) > 0.0f)) g[u] = 0.0f;
            }
            for (int u = 0; u < 4; ++u) {
                a1 += g[u];
                a2 += g[u] * d[u];
            }
        }
        for (; r < last; r += 8) {
            long long at = r * channels + c;
            float d = S::load(x, at) - center;
            float g = mode == 0 ? d : S::load(dy, at);
            if (mode == 2 && !(S::load(relu_out, at) > 0.0f)) g = 0.0f;
            a1 += g;
            a2 += g * d;
        }
    }
    s1[threadIdx.y][threadIdx.x] = a1;
    s2[threadIdx.y][threadIdx.x] = a2;
    __syncthreads();
    if (threadIdx.y == 0 && c < channels) {
        float t1 = 0.0f, t2 = 0.0f;
        for (int j = 0; j < 8; ++j) {
            t1 += s1[j][threadIdx.x];
            t2 += s2[j][threadIdx.x];
        }
        partial1[(long long)blockIdx.y * channels + c] = t1;
        partial2[(long long)blockIdx.y * channels + c] = t2;
    }
}
#define BN_PARTIAL_SUMS(NAME, S)                                                           \
    KERNEL void NAME(const S::T* x, const S::T* dy, const float* mean, const S::T* relu_out, \
                     long long rows, int channels, int rows_per_slab, int mode,            \
                     float* partial1, float* partial2) {                                   \
        bn_partial_sums_body<S>(x, dy, mean, relu_out, rows, channels, rows_per_slab, mode, \
                                partial1, partial2);                                       \
    }
BN_PARTIAL_SUMS(bn_partial_sums, F32)
BN_PARTIAL_SUMS(bn_partial_sums_f16, F16)
BN_PARTIAL_SUMS(bn_partial_sums_bf16, BF16)

// Batch statistics, running statistics and the affine coefficients y = x·scale + shift.
// x is only read for the shift the partial sums used: its first row.
template <class S>
__device__ void bn_forward_finalize_body(const float* partial1, const float* partial2,
                                         int slabs, long long rows, int channels,
                                         const typename S::T* x, const float* gamma,
                                         const float* beta, float* running_mean,
                                         float* running_var, float eps, float momentum,
                                         float* saved_mean, float* saved_inv_std, float* scale,
                                         float* shift) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= channels) return;
    double sum_d = 0.0, sum_d2 = 0.0;
    for (int s = 0; s < slabs; ++s) {
        sum_d += (double)partial1[(long long)s * channels + c];
        sum_d2 += (double)partial2[(long long)s * channels + c];
    }
    double n = (double)rows;
    double mean_d = sum_d / n;
    double var = sum_d2 / n - mean_d * mean_d;
    if (var < 0.0) var = 0.0;
    double mean = (double)S::load(x, c) + mean_d;
    double inv_std = 1.0 / sqrt(var + (double)eps);
    saved_mean[c] = (float)mean;
    saved_inv_std[c] = (float)inv_std;
    scale[c] = (float)((double)gamma[c] * inv_std);
    shift[c] = (float)((double)beta[c] - mean * (double)gamma[c] * inv_std);
    double unbiased = var * n / (n - 1.0);
    double m = (double)momentum;
    running_mean[c] = (float)((1.0 - m) * (double)running_mean[c] + m * mean);
    running_var[c] = (float)((1.0 - m) * (double)running_var[c] + m * unbiased);
}
#define BN_FORWARD_FINALIZE(NAME, S)                                                       \
    KERNEL void NAME(const float* partial1, const float* partial2, int slabs, long long rows, \
                     int channels, const S::T* x, const float* gamma, const float* beta,   \
                     float* running_mean, float* running_var, float eps, float momentum,   \
                     float* saved_mean, float* saved_inv_std, float* scale, float* shift) { \
        bn_forward_finalize_body<S>(partial1, partial2, slabs, rows, channels, x, gamma, beta, \
                                    running_mean, running_var, eps, momentum, saved_mean,  \
                                    saved_inv_std, scale, shift);                          \
    }
BN_FORWARD_FINALIZE(bn_forward_finalize, F32)
BN_FORWARD_FINALIZE(bn_forward_finalize_f16, F16)
BN_FORWARD_FINALIZE(bn_forward_finalize_bf16, BF16)

KERNEL void bn_eval_coefficients(const float* gamma, const float* beta,
                                 const float* running_mean, const float* running_var,
                                 float eps, int channels, float* scale, float* shift) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= channels) return;
    double inv_std = 1.0 / sqrt((double)running_var[c] + (double)eps);
    scale[c] = (float)((double)gamma[c] * inv_std);
    shift[c] = (float)((double)beta[c] - (double)running_mean[c] * (double)gamma[c] * inv_std);
}

// rows·channels is under 2^31 (the host checks), so the channel index is 32-bit. The
// batch-norm element-wise kernels take four elements per thread (a launch of
// ceil(total/4) threads): with a channel count that is a multiple of four, those are four
// channels of one row, moved in one access each way; otherwise one at a time.
#define FOR_EACH_QUAD(total)                                                               \
    for (int quad = blockIdx.x * blockDim.x + threadIdx.x; (long long)quad * 4 < (total);  \
         quad += gridDim.x * blockDim.x)

template <class S, bool Relu>
__device__ void channel_affine_body(const typename S::T* x, const float* scale,
                                    const float* shift, typename S::T* y, int total,
                                    int channels) {
    FOR_EACH_QUAD(total) {
        int first = quad * 4;
        if (channels % 4 == 0) {
            int c = first % channels;
            float4 v = S::load4(x, first);
            float4 a = *(const float4*)(scale + c), b = *(const float4*)(shift + c);
            v = make_float4(v.x * a.x + b.x, v.y * a.y + b.y, v.z * a.z + b.z, v.w * a.w + b.w);
            if (Relu) v = make_float4(relu(v.x), relu(v.y), relu(v.z), relu(v.w));
            S::store4(y, first, v);
            continue;
        }
        // Counting to four, not to first + 4, which could pass INT_MAX in the last quad.
        for (int lane = 0; lane < 4 && first + lane < total; ++lane) {
            int i = first + lane;
            int c = i % channels;
            float v = S::load(x, i) * scale[c] + shift[c];
            S::store(y, i, Relu ? relu(v) : v);
        }
    }
}
#define CHANNEL_AFFINE(NAME, S, Relu)                                                      \
    KERNEL void NAME(const S::T* x, const float* scale, const float* shift, S::T* y,       \
                     int total, int channels) {                                            \
        channel_affine_body<S, Relu>(x, scale, shift, y, total, channels);                 \
    }
CHANNEL_AFFINE(channel_affine_relu, F32, true)
CHANNEL_AFFINE(channel_affine, F32, false)
CHANNEL_AFFINE(channel_affine_relu_f16, F16, true)
CHANNEL_AFFINE(channel_affine_f16, F16, false)
CHANNEL_AFFINE(channel_affine_relu_bf16, BF16, true)
CHANNEL_AFFINE(channel_affine_bf16, BF16, false)

// The end of a residual block in one pass: y = ReLU(x·scale + shift + residual), summed
// in f32 and stored once (the unfused ops write and reread y twice more).
template <class S>
__device__ void channel_affine_add_relu_body(const typename S::T* x, const float* scale,
                                             const float* shift, const typename S::T* residual,
                                             typename S::T* y, int total, int channels) {
    FOR_EACH_QUAD(total) {
        int first = quad * 4;
        if (channels % 4 == 0) {
            int c = first % channels;
            float4 v = S::load4(x, first), r = S::load4(residual, first);
            float4 a = *(const float4*)(scale + c), b = *(const float4*)(shift + c);
            S::store4(y, first,
                      make_float4(relu(v.x * a.x + b.x + r.x), relu(v.y * a.y + b.y + r.y),
                                  relu(v.z * a.z + b.z + r.z), relu(v.w * a.w + b.w + r.w)));
            continue;
        }
        for (int lane = 0; lane < 4 && first + lane < total; ++lane) {
            int i = first + lane;
            int c = i % channels;
            S::store(y, i, relu(S::load(x, i) * scale[c] + shift[c] + S::load(residual, i)));
        }
    }
}
#define CHANNEL_AFFINE_ADD_RELU(NAME, S)                                                   \
    KERNEL void NAME(const S::T* x, const float* scale, const float* shift,                \
                     const S::T* residual, S::T* y, int total, int channels) {             \
        channel_affine_add_relu_body<S>(x, scale, shift, residual, y, total, channels);    \
    }
CHANNEL_AFFINE_ADD_RELU(channel_affine_add_relu, F32)
CHANNEL_AFFINE_ADD_RELU(channel_affine_add_relu_f16, F16)
CHANNEL_AFFINE_ADD_RELU(channel_affine_add_relu_bf16, BF16)

// dγ, dβ and the coefficients of dx = x·a + dy·g + b.
KERNEL void bn_backward_finalize(const float* partial1, const float* partial2, int slabs,
                                 long long rows, int channels, const float* gamma,
                                 const float* saved_mean, const float* saved_inv_std,
                                 float* dgamma, float* dbeta, float* coef_a, float* coef_g,
                                 float* coef_b) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= channels) return;
    double sum_dy = 0.0, sum_dy_xc = 0.0;
    for (int s = 0; s < slabs; ++s) {
        sum_dy += (double)partial1[(long long)s * channels + c];
        sum_dy_xc += (double)partial2[(long long)s * channels + c];
    }
    double n = (double)rows;
    double inv_std = (double)saved_inv_std[c];
    double db = sum_dy;
    double dg = sum_dy_xc * inv_std;
    dbeta[c] = (float)db;
    dgamma[c] = (float)dg;
    double k = (double)gamma[c] * inv_std;
    double xa = -k * inv_std * dg / n;
    coef_g[c] = (float)k;
    coef_a[c] = (float)xa;
    coef_b[c] = (float)(-k * db / n - xa * (double)saved_mean[c]);
}

// dx = x·a + dy·g + b, with dy masked by relu_out > 0 for the form through a ReLU. The
// form at the end of a residual block also stores the masked dy (the residual's
// gradient) into `masked`, which may be dy itself: each thread reads its elements before
// it writes them.
template <class S>
__device__ void bn_backward_dx_body(const typename S::T* x, const typename S::T* dy,
                                    const typename S::T* relu_out, const float* coef_a,
                                    const float* coef_g, const float* coef_b,
                                    typename S::T* dx, typename S::T* masked, int total,
                                    int channels) {
    FOR_EACH_QUAD(total) {
        int first = quad * 4;
        if (channels % 4 == 0) {
            int c = first % channels;
            float4 xv = S::load4(x, first), g = S::load4(dy, first);
            if (relu_out) {
                float4 r = S::load4(relu_out, first);
                g = make_float4(relu_grad(r.x, g.x), relu_grad(r.y, g.y), relu_grad(r.z, g.z),
                                relu_grad(r.w, g.w));
            }
            if (masked) S::store4(masked, first, g);
            float4 a = *(const float4*)(coef_a + c), k = *(const float4*)(coef_g + c),
                   b = *(const float4*)(coef_b + c);
            S::store4(dx, first,
                      make_float4(xv.x * a.x + g.x * k.x + b.x, xv.y * a.y + g.y * k.y + b.y,
                                  xv.z * a.z + g.z * k.z + b.z, xv.w * a.w + g.w * k.w + b.w));
            continue;
        }
        for (int lane = 0; lane < 4 && first + lane < total; ++lane) {
            int i = first + lane;
            int c = i % channels;
            float g = S::load(dy, i);
            if (relu_out) g = relu_grad(S::load(relu_out, i), g);
            if (masked) S::store(masked, i, g);
            S::store(dx, i, S::load(x, i) * coef_a[c] + g * coef_g[c] + coef_b[c]);
        }
    }
}
#define BN_BACKWARD_DX_RELU(NAME, S)                                                       \
    KERNEL void NAME(const S::T* x, const S::T* dy, const S::T* relu_out, const float* coef_a, \
                     const float* coef_g, const float* coef_b, S::T* dx, int total,        \
                     int channels) {                                                       \
        bn_backward_dx_body<S>(x, dy, relu_out, coef_a, coef_g, coef_b, dx, 0, total,      \
                               channels);                                                  \
    }
#define BN_BACKWARD_DX(NAME, S)                                                            \
    KERNEL void NAME(const S::T* x, const S::T* dy, const float* coef_a, const float* coef_g, \
                     const float* coef_b, S::T* dx, int total, int channels) {             \
        bn_backward_dx_body<S>(x, dy, 0, coef_a, coef_g, coef_b, dx, 0, total, channels);  \
    }
#define BN_BACKWARD_DX_RELU_RESIDUAL(NAME, S)                                              \
    KERNEL void NAME(const S::T* x, S::T* dy, const S::T* relu_out, const float* coef_a,   \
                     const float* coef_g, const float* coef_b, S::T* dx, int total,        \
                     int channels) {                                                       \
        bn_backward_dx_body<S>(x, dy, relu_out, coef_a, coef_g, coef_b, dx, dy, total,     \
                               channels);                                                  \
    }
BN_BACKWARD_DX_RELU(bn_backward_dx_relu, F32)
BN_BACKWARD_DX(bn_backward_dx, F32)
BN_BACKWARD_DX_RELU(bn_backward_dx_relu_f16, F16)
BN_BACKWARD_DX(bn_backward_dx_f16, F16)
BN_BACKWARD_DX_RELU(bn_backward_dx_relu_bf16, BF16)
BN_BACKWARD_DX(bn_backward_dx_bf16, BF16)
BN_BACKWARD_DX_RELU_RESIDUAL(bn_backward_dx_relu_residual, F32)
BN_BACKWARD_DX_RELU_RESIDUAL(bn_backward_dx_relu_residual_f16, F16)
BN_BACKWARD_DX_RELU_RESIDUAL(bn_backward_dx_relu_residual_bf16, BF16)

// ---------------------------------------------------------------- pooling

template <class S>
__device__ void max_pool_forward_body(const typename S::T* x, typename S::T* y, int batch,
                                      int h, int w, int c, int kernel, int stride, int pad,
                                      int oh_n, int ow_n) {
    long long total = (long long)batch * oh_n * ow_n * c;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long step = (long long)gridDim.x * blockDim.x;
    for (; i < total; i += step) {
        int ci = (int)(i % c);
        int ow = (int)((i / c) % ow_n);
        int oh = (int)((i / ((long long)c * ow_n)) % oh_n);
        long long n = i / ((long long)c * ow_n * oh_n);
        float best = -__int_as_float(0x7f800000);
        for (int kh = 0; kh < kernel; ++kh) {
            int ih = oh * stride + kh - pad;
            if (ih < 0 || ih >= h) continue;
            for (int kw = 0; kw < kernel; ++kw) {
                int iw = ow * stride + kw - pad;
                if (iw < 0 || iw >= w) continue;
                float v = S::load(x, ((n * h + ih) * w + iw) * c + ci);
                if (v > best || v != v) best = v;
            }
        }
        S::store(y, i, best);
    }
}
#define MAX_POOL_FORWARD(NAME, S)                                                          \
    KERNEL void NAME(const S::T* x, S::T* y, int batch, int h, int w, int c, int kernel,   \
                     int stride, int pad, int oh_n, int ow_n) {                            \
        max_pool_forward_body<S>(x, y, batch, h, w, c, kernel, stride, pad, oh_n, ow_n);   \
    }
MAX_POOL_FORWARD(max_pool_forward, F32)
MAX_POOL_FORWARD(max_pool_forward_f16, F16)
MAX_POOL_FORWARD(max_pool_forward_bf16, BF16)

// The backward in two gathers, so no two threads write one address: first the position
// (ih·W + iw) of each window's first maximum, in the CPU backend's scan order; then each
// input element sums the gradients of the windows that chose it. Under 2^31 elements.
template <class S>
__device__ void max_pool_argmax_body(const typename S::T* x, int* argmax, int batch, int h,
                                     int w, int c, int kernel, int stride, int pad, int oh_n,
                                     int ow_n) {
    int total = batch * oh_n * ow_n * c;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        int ci = i % c;
        int t = i / c;
        int ow = t % ow_n;
        t /= ow_n;
        int oh = t % oh_n;
        int n = t / oh_n;
        const typename S::T* image = x + (long long)n * h * w * c + ci;
        float best = -__int_as_float(0x7f800000);
        int best_at = -1;
        for (int kh = 0; kh < kernel; ++kh) {
            int ih = oh * stride + kh - pad;
            if (ih < 0 || ih >= h) continue;
            for (int kw = 0; kw < kernel; ++kw) {
                int iw = ow * stride + kw - pad;
                if (iw < 0 || iw >= w) continue;
                float v = S::load(image, (ih * w + iw) * c);
                if (v > best || best_at < 0) {
                    best = v;
                    best_at = ih * w + iw;
                }
            }
        }
        argmax[i] = best_at;
    }
}
#define MAX_POOL_ARGMAX(NAME, S)                                                           \
    KERNEL void NAME(const S::T* x, int* argmax, int batch, int h, int w, int c, int kernel, \
                     int stride, int pad, int oh_n, int ow_n) {                            \
        max_pool_argmax_body<S>(x, argmax, batch, h, w, c, kernel, stride, pad, oh_n, ow_n); \
    }
MAX_POOL_ARGMAX(max_pool_argmax, F32)
MAX_POOL_ARGMAX(max_pool_argmax_f16, F16)
MAX_POOL_ARGMAX(max_pool_argmax_bf16, BF16)

template <class S>
__device__ void max_pool_backward_body(const int* argmax, const typename S::T* dy,
                                       typename S::T* dx, int batch, int h, int w, int c,
                                       int kernel, int stride, int pad, int oh_n, int ow_n) {
    int total = batch * h * w * c;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        int ci = i % c;
        int t = i / c;
        int iw = t % w;
        t /= w;
        int ih = t % h;
        int n = t / h;
        int here = ih * w + iw;
        float g = 0.0f;
        for (int kh = 0; kh < kernel; ++kh) {
            int oh_s = ih + pad - kh;
            if (oh_s < 0 || oh_s % stride != 0) continue;
            int oh = oh_s / stride;
            if (oh >= oh_n) continue;
            for (int kw = 0; kw < kernel; ++kw) {
                int ow_s = iw + pad - kw;
                if (ow_s < 0 || ow_s % stride != 0) continue;
                int ow = ow_s / stride;
                if (ow >= ow_n) continue;
                int o = ((n * oh_n + oh) * ow_n + ow) * c + ci;
                if (argmax[o] == here) g += S::load(dy, o);
            }
        }
        S::store(dx, i, g);
    }
}
#define MAX_POOL_BACKWARD(NAME, S)                                                         \
    KERNEL void NAME(const int* argmax, const S::T* dy, S::T* dx, int batch, int h, int w, \
                     int c, int kernel, int stride, int pad, int oh_n, int ow_n) {         \
        max_pool_backward_body<S>(argmax, dy, dx, batch, h, w, c, kernel, stride, pad, oh_n, \
                                  ow_n);                                                   \
    }
MAX_POOL_BACKWARD(max_pool_backward, F32)
MAX_POOL_BACKWARD(max_pool_backward_f16, F16)
MAX_POOL_BACKWARD(max_pool_backward_bf16, BF16)

template <class S>
__device__ void global_avg_forward_body(const typename S::T* x, typename S::T* y, int batch,
                                        int spatial, int c) {
    long long total = (long long)batch * c;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    int ci = (int)(i % c);
    long long n = i / c;
    float s = 0.0f;
    for (int p = 0; p < spatial; ++p) s += S::load(x, (n * spatial + p) * c + ci);
    S::store(y, i, s / (float)spatial);
}
#define GLOBAL_AVG_FORWARD(NAME, S)                                                        \
    KERNEL void NAME(const S::T* x, S::T* y, int batch, int spatial, int c) {              \
        global_avg_forward_body<S>(x, y, batch, spatial, c);                               \
    }
GLOBAL_AVG_FORWARD(global_avg_forward, F32)
GLOBAL_AVG_FORWARD(global_avg_forward_f16, F16)
GLOBAL_AVG_FORWARD(global_avg_forward_bf16, BF16)

template <class S>
__device__ void global_avg_backward_body(const typename S::T* dy, typename S::T* dx, int batch,
                                         int spatial, int c) {
    long long total = (long long)batch * spatial * c;
    float inv = 1.0f / (float)spatial;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long step = (long long)gridDim.x * blockDim.x;
    for (; i < total; i += step) {
        int ci = (int)(i % c);
        long long n = i / ((long long)spatial * c);
        S::store(dx, i, S::load(dy, n * c + ci) * inv);
    }
}
#define GLOBAL_AVG_BACKWARD(NAME, S)                                                       \
    KERNEL void NAME(const S::T* dy, S::T* dx, int batch, int spatial, int c) {            \
        global_avg_backward_body<S>(dy, dx, batch, spatial, c);                            \
    }
GLOBAL_AVG_BACKWARD(global_avg_backward, F32)
GLOBAL_AVG_BACKWARD(global_avg_backward_f16, F16)
GLOBAL_AVG_BACKWARD(global_avg_backward_bf16, BF16)

// ---------------------------------------------------------------- fully connected helpers

KERNEL void broadcast_rows(const float* row, float* y, long long rows, int cols) {
    long long total = rows * cols;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long step = (long long)gridDim.x * blockDim.x;
    for (; i < total; i += step) y[i] = row[i % cols];
}

KERNEL void column_sums(const float* m, float* out, long long rows, int cols) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= cols) return;
    float s = 0.0f;
    for (long long r = 0; r < rows; ++r) s += m[r * cols + j];
    out[j] = s;
}

// ---------------------------------------------------------------- softmax cross-entropy

// count[0] := number of samples whose label is not negative (padding).
KERNEL void ce_count_valid(const float* labels, int batch, float* count) {
    __shared__ float acc[BLOCK];
    float s = 0.0f;
    for (int i = threadIdx.x; i < batch; i += BLOCK) s += labels[i] >= 0.0f ? 1.0f : 0.0f;
    acc[threadIdx.x] = s;
    __syncthreads();
    for (int half = BLOCK / 2; half > 0; half >>= 1) {
        if (threadIdx.x < half) acc[threadIdx.x] += acc[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) count[0] = acc[0];
}

// Block reduction helpers over BLOCK threads: each returns the result to every thread.
__device__ float block_max(float v, float* scratch) {
    scratch[threadIdx.x] = v;
    __syncthreads();
    for (int half = BLOCK / 2; half > 0; half >>= 1) {
        if (threadIdx.x < half) {
            float o = scratch[threadIdx.x + half];
            if (o > scratch[threadIdx.x]) scratch[threadIdx.x] = o;
        }
        __syncthreads();
    }
    float r = scratch[0];
    __syncthreads();
    return r;
}

__device__ float block_sum(float v, float* scratch) {
    scratch[threadIdx.x] = v;
    __syncthreads();
    for (int half = BLOCK / 2; half > 0; half >>= 1) {
        if (threadIdx.x < half) scratch[threadIdx.x] += scratch[threadIdx.x + half];
        __syncthreads();
    }
    float r = scratch[0];
    __syncthreads();
    return r;
}

// The log-sum-exp of one row, by a whole block.
__device__ float row_log_sum_exp(const float* z, int classes, float* scratch) {
    float m = -__int_as_float(0x7f800000);
    for (int k = threadIdx.x; k < classes; k += BLOCK) m = z[k] > m ? z[k] : m;
    m = block_max(m, scratch);
    float s = 0.0f;
    for (int k = threadIdx.x; k < classes; k += BLOCK) s += expf(z[k] - m);
    s = block_sum(s, scratch);
    return m + logf(s);
}

// One block per sample: its smoothed loss (NaN for a label that is no class) and whether
// its first arg-max is the label. Padding samples (negative label) give 0 and 0.
KERNEL void ce_forward(const float* logits, const float* labels, int classes, float smoothing,
                       float* sample_loss, float* correct) {
    __shared__ float scratch[BLOCK];
    __shared__ int best_index[BLOCK];
    __shared__ float best_value[BLOCK];
    int n = blockIdx.x;
    const float* z = logits + (long long)n * classes;
    float label = labels[n];
    float lse = row_log_sum_exp(z, classes, scratch);
    float sum_z = 0.0f;
    for (int k = threadIdx.x; k < classes; k += BLOCK) sum_z += z[k];
    sum_z = block_sum(sum_z, scratch);
    float bv = -__int_as_float(0x7f800000);
    int bi = classes;
    for (int k = threadIdx.x; k < classes; k += BLOCK) {
        if (z[k] > bv) {
            bv = z[k];
            bi = k;
        }
    }
    best_value[threadIdx.x] = bv;
    best_index[threadIdx.x] = bi;
    __syncthreads();
    for (int half = BLOCK / 2; half > 0; half >>= 1) {
        if (threadIdx.x < half) {
            float ov = best_value[threadIdx.x + half];
            int oi = best_index[threadIdx.x + half];
            if (ov > best_value[threadIdx.x] ||
                (ov == best_value[threadIdx.x] && oi < best_index[threadIdx.x])) {
                best_value[threadIdx.x] = ov;
                best_index[threadIdx.x] = oi;
            }
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        if (label < 0.0f) {
            sample_loss[n] = 0.0f;
            correct[n] = 0.0f;
        } else if (label != floorf(label) || label >= (float)classes) {
            sample_loss[n] = __int_as_float(0x7fc00000);
            correct[n] = 0.0f;
        } else {
            int y = (int)label;
            float mean_z = sum_z / (float)classes;
            sample_loss[n] = (1.0f - smoothing) * (lse - z[y]) + smoothing * (lse - mean_z);
            correct[n] = best_index[0] == y ? 1.0f : 0.0f;
        }
    }
}

// loss[0] := Σ sample_loss / count[0] (NaN when every sample is padding).
KERNEL void ce_mean(const float* sample_loss, int batch, const float* count, float* loss) {
    __shared__ float scratch[BLOCK];
    float s = 0.0f;
    for (int i = threadIdx.x; i < batch; i += BLOCK) s += sample_loss[i];
    s = block_sum(s, scratch);
    if (threadIdx.x == 0)
        loss[0] = count[0] > 0.0f ? s / count[0] : __int_as_float(0x7fc00000);
}

KERNEL void ce_backward(const float* logits, const float* labels, int classes,
                        float smoothing, const float* count, float* dlogits) {
    __shared__ float scratch[BLOCK];
    int n = blockIdx.x;
    const float* z = logits + (long long)n * classes;
    float* dz = dlogits + (long long)n * classes;
    float label = labels[n];
    float lse = row_log_sum_exp(z, classes, scratch);
    float valid = count[0];
    float uniform = smoothing / (float)classes;
    bool is_class = label >= 0.0f && label == floorf(label) && label < (float)classes;
    int y = is_class ? (int)label : -1;
    for (int k = threadIdx.x; k < classes; k += BLOCK) {
        if (label < 0.0f) {
            dz[k] = 0.0f;
        } else if (!is_class) {
            dz[k] = __int_as_float(0x7fc00000);
        } else {
            float target = (k == y ? 1.0f - smoothing : 0.0f) + uniform;
            dz[k] = (expf(z[k] - lse) - target) / valid;
        }
    }
}

// ---------------------------------------------------------------- health

// Integer arithmetic, deterministic by construction: rounds of xorshift and an odd
// multiplier over each index and the seed. Every GPU must give every bit the same.
KERNEL void health_integer_mix(int* out, long long n, int seed, int rounds) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long stride = (long long)gridDim.x * blockDim.x;
    for (; i < n; i += stride) {
        unsigned int x = ((unsigned int)i * 2654435769u) ^ (unsigned int)seed;
        for (int r = 0; r < rounds; ++r) {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x = x * 2891336453u + (unsigned int)r;
        }
        out[i] = (int)x;
    }
}

// Transcendental functions over a spread of arguments: the special-function units
// and their rounding, the same code on every GPU of a box.
KERNEL void health_transcendental(float* out, long long n, float scale) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long stride = (long long)gridDim.x * blockDim.x;
    for (; i < n; i += stride) {
        float x = ((float)(i % 4093) - 2046.0f) * scale;
        float y = sinf(x) + cosf(x * 0.5f);
        y = expf(y * 0.5f);
        out[i] = logf(y + 1.0f) + sqrtf(fabsf(x));
    }
}

// Device memory patterns: 0 the element's own address, 1 walking ones, 2 a seeded
// pseudo-random word; `invert` flips every bit (the second half of moving inversions).
__device__ unsigned int memory_pattern(long long i, int pattern, int seed, int invert) {
    unsigned int v;
    if (pattern == 0) {
        v = (unsigned int)i ^ (unsigned int)(i >> 32);
    } else if (pattern == 1) {
        v = 1u << (unsigned int)((i + seed) & 31);
    } else {
        v = (unsigned int)(i * 2654435761ll) ^ (unsigned int)seed;
        v ^= v >> 15;
        v *= 2246822519u;
        v ^= v >> 13;
    }
    return invert ? ~v : v;
}

KERNEL void health_memory_write(int* x, long long n, int pattern, int seed, int invert) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long stride = (long long)gridDim.x * blockDim.x;
    for (; i < n; i += stride) x[i] = (int)memory_pattern(i, pattern, seed, invert);
}

// Counts the words that do not hold their pattern, per block, with the lowest such index
// (n when none): the host adds the blocks up. No atomics, so every run counts alike.
KERNEL void health_memory_check(const int* x, long long n, int pattern, int seed, int invert,
                                int* block_errors, long long* block_first) {
    __shared__ int count[BLOCK];
    __shared__ long long first[BLOCK];
    int errors = 0;
    long long lowest = n;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long stride = (long long)gridDim.x * blockDim.x;
    for (; i < n; i += stride) {
        if ((unsigned int)x[i] != memory_pattern(i, pattern, seed, invert)) {
            errors += 1;
            if (i < lowest) lowest = i;
        }
    }
    count[threadIdx.x] = errors;
    first[threadIdx.x] = lowest;
    __syncthreads();
    for (int half = BLOCK / 2; half > 0; half >>= 1) {
        if (threadIdx.x < half) {
            count[threadIdx.x] += count[threadIdx.x + half];
            if (first[threadIdx.x + half] < first[threadIdx.x])
                first[threadIdx.x] = first[threadIdx.x + half];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        block_errors[blockIdx.x] = count[0];
        block_first[blockIdx.x] = first[0];
    }
}
