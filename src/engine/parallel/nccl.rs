//! The all-reduce over NCCL for CUDA devices of one process, or over RCCL (AMD's build
//! of the same API for HIP) for HIP devices: one communicator per device from
//! `ncclCommInitAll`, each driven only by its own rank's thread, reducing device memory in
//! place on the driver's own stream.
//!
//! The library is opened at run time by its runtime name (`libnccl.so.2`, which cudarc's
//! loader does not try, or `librccl.so.1`), and every entry point is resolved before the
//! first call, so a missing library or symbol is an error instead of a panic.
//!
//! It never waits forever: a rank polls its stream for completion, checking the group's
//! abort flag, NCCL's asynchronous error and a timeout between polls. A rank that sees
//! the group aborted calls `ncclCommAbort` on its own communicator, which makes its
//! kernels stop waiting for the failed peer, and reports the rank that failed. Only the
//! owning thread ever touches a communicator, as NCCL requires.
//!
//! The one wait this cannot bound is inside NCCL's own host calls: the first time a
//! message size needs an algorithm whose connections are not set up yet, `ncclGroupEnd`
//! sets them up with every peer. The warm-up all-reduce at open sets up the ones bulk
//! transfers use while all ranks are known to be there.
//!
//! Ranks that pass buffers of different lengths break the collective's contract; NCCL
//! does not detect it, so such a call ends in wrong sums or the timeout.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, TryLockError};
use std::time::{Duration, Instant};

use cudarc::driver::sys as cuda;
use cudarc::nccl::sys;

use crate::engine::backend::gpu::GpuBackend;
use crate::engine::backend::Backend;

use super::collective::AllReduce;
use super::error::ParallelError;
use super::host_ring::{HostRing, DEFAULT_TIMEOUT};

/// The names NCCL's and RCCL's runtime libraries are installed under.
pub use crate::runtime::libraries::{
    NCCL_NAMES as LIBRARY_NAMES, RCCL_NAMES as RCCL_LIBRARY_NAMES,
};

/// The HIP runtime, for polling a stream: ROCm 6's soname, then ROCm 5's.
const HIP_LIBRARY_NAMES: &[&str] = &["libamdhip64.so.6", "libamdhip64.so.5", "libamdhip64.so"];

/// Which collective library: NCCL for CUDA devices, RCCL for HIP devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Collective {
    /// NVIDIA's NCCL, for CUDA devices.
    Nccl,
    /// AMD's RCCL, for HIP devices.
    Rccl,
}

impl Collective {
    /// The collective for devices of `runtime` (`cuda` or `hip`).
    pub fn for_runtime(runtime: &str) -> Option<Collective> {
        match runtime {
            "cuda" => Some(Collective::Nccl),
            "hip" => Some(Collective::Rccl),
            _ => None,
        }
    }

    /// `nccl` or `rccl`: the all-reduce's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Collective::Nccl => "nccl",
            Collective::Rccl => "rccl",
        }
    }

    /// `NCCL` or `RCCL`: the library's name in messages.
    fn library(self) -> &'static str {
        match self {
            Collective::Nccl => "NCCL",
            Collective::Rccl => "RCCL",
        }
    }

    /// The file names the library is looked for under, in the order they are tried.
    pub fn library_names(self) -> &'static [&'static str] {
        match self {
            Collective::Nccl => LIBRARY_NAMES,
            Collective::Rccl => RCCL_LIBRARY_NAMES,
        }
    }

    fn runtime(self) -> &'static str {
        match self {
            Collective::Nccl => "cuda",
            Collective::Rccl => "hip",
        }
    }

    /// `CUDA` or `HIP`, for messages about devices.
    fn devices(self) -> &'static str {
        match self {
            Collective::Nccl => "CUDA",
            Collective::Rccl => "HIP",
        }
    }

    fn error(self, reason: String) -> ParallelError {
        ParallelError::Collective {
            name: self.name().into(),
            reason,
        }
    }
}

/// Every NCCL entry point this module calls.
pub const SYMBOLS: &[&str] = &[
    "ncclGetVersion",
    "ncclGetErrorString",
    "ncclCommInitAll",
    "ncclCommDestroy",
    "ncclCommAbort",
    "ncclCommGetAsyncError",
    "ncclGroupStart",
    "ncclGroupEnd",
    "ncclAllReduce",
];

/// The entry point used to poll a stream: the CUDA driver's (besides those the CUDA driver
/// checks for itself) or the HIP runtime's.
const STREAM_QUERY: &str = "cuStreamQuery";
const HIP_STREAM_QUERY: &str = "hipStreamQuery";

/// Elements of the warm-up all-reduce at open: large enough that NCCL sets up the
/// connections bulk transfers use, before any rank can be left waiting on a peer.
const WARMUP_ELEMENTS: usize = 1 << 22;

/// How long a waiting rank spins before it starts sleeping between polls: a short
/// all-reduce should not pay a sleep's latency.
const SPIN: Duration = Duration::from_millis(2);
const POLL_INTERVAL: Duration = Duration::from_micros(100);

// NCCL results are read as plain integers: a value outside cudarc's enum (a newer
// library's code) must not become an invalid enum value.
type NcclResult = c_int;
// Likewise for the result of polling a stream. CUDA and HIP share the two codes that
// matter: 0 for done, 600 for still running (hipErrorNotReady mirrors CUDA's).
type StreamQuery = unsafe extern "C" fn(*mut c_void) -> c_int;
const CUDA_SUCCESS: c_int = cuda::CUresult::CUDA_SUCCESS as c_int;
const CUDA_ERROR_NOT_READY: c_int = cuda::CUresult::CUDA_ERROR_NOT_READY as c_int;
const NCCL_SUCCESS: NcclResult = sys::ncclResult_t::ncclSuccess as NcclResult;
const NCCL_IN_PROGRESS: NcclResult = sys::ncclResult_t::ncclInProgress as NcclResult;

type GetVersion = unsafe extern "C" fn(*mut c_int) -> NcclResult;
type GetErrorString = unsafe extern "C" fn(NcclResult) -> *const c_char;
type CommInitAll = unsafe extern "C" fn(*mut sys::ncclComm_t, c_int, *const c_int) -> NcclResult;
type CommRelease = unsafe extern "C" fn(sys::ncclComm_t) -> NcclResult;
type CommGetAsyncError = unsafe extern "C" fn(sys::ncclComm_t, *mut NcclResult) -> NcclResult;
type Group = unsafe extern "C" fn() -> NcclResult;
type AllReduceFn = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    sys::ncclDataType_t,
    sys::ncclRedOp_t,
    sys::ncclComm_t,
    sys::cudaStream_t,
) -> NcclResult;

/// The library with every entry point this module calls already resolved.
struct NcclLibrary {
    collective: Collective,
    get_version: GetVersion,
    get_error_string: GetErrorString,
    comm_init_all: CommInitAll,
    comm_destroy: CommRelease,
    comm_abort: CommRelease,
    comm_get_async_error: CommGetAsyncError,
    group_start: Group,
    group_end: Group,
    all_reduce: AllReduceFn,
    /// Keeps the function pointers above valid.
    _library: libloading::Library,
}

/// Opens the first of `names` that loads, or says why none did.
fn open_first(names: &[&str]) -> Result<libloading::Library, String> {
    let mut failures = Vec::new();
    for &name in names {
        // SAFETY: opening the library runs only its own initialisers.
        match unsafe { libloading::Library::new(name) } {
            Ok(library) => return Ok(library),
            // libloading keeps the loader's own words, which name the file, in the source.
            Err(e) => failures.push(match std::error::Error::source(&e) {
                Some(detail) => detail.to_string(),
                None => format!("{name}: {e}"),
            }),
        }
    }
    Err(failures.join("; "))
}

impl NcclLibrary {
    fn load(collective: Collective) -> Result<NcclLibrary, ParallelError> {
        let lib_name = collective.library();
        let setup_error = |reason| collective.error(reason);
        let library = open_first(collective.library_names())
            .map_err(|why| setup_error(format!("{lib_name} not found: {why}")))?;
        let symbol_error =
            |e: libloading::Error| setup_error(format!("{lib_name} symbol lookup failed: {e}"));
        let missing: Vec<&str> = SYMBOLS
            .iter()
            // SAFETY: looks the symbol up without calling it.
            .filter(|s| unsafe { library.get::<*const c_void>(s.as_bytes()) }.is_err())
            .copied()
            .collect();
        if !missing.is_empty() {
            return Err(setup_error(format!(
                "the {lib_name} library lacks {}",
                missing.join(", ")
            )));
        }
        // SAFETY: every symbol is present (checked above) and has the C signature of
        // nccl.h (which RCCL's rccl.h keeps), transcribed above from cudarc's bindings.
        unsafe {
            Ok(NcclLibrary {
                collective,
                get_version: *library.get(b"ncclGetVersion").map_err(symbol_error)?,
                get_error_string: *library.get(b"ncclGetErrorString").map_err(symbol_error)?,
                comm_init_all: *library.get(b"ncclCommInitAll").map_err(symbol_error)?,
                comm_destroy: *library.get(b"ncclCommDestroy").map_err(symbol_error)?,
                comm_abort: *library.get(b"ncclCommAbort").map_err(symbol_error)?,
                comm_get_async_error: *library
                    .get(b"ncclCommGetAsyncError")
                    .map_err(symbol_error)?,
                group_start: *library.get(b"ncclGroupStart").map_err(symbol_error)?,
                group_end: *library.get(b"ncclGroupEnd").map_err(symbol_error)?,
                all_reduce: *library.get(b"ncclAllReduce").map_err(symbol_error)?,
                _library: library,
            })
        }
    }

    /// `NCCL 2.21.5` (or `RCCL …`), from the library's own version code.
    fn version(&self) -> Result<String, ParallelError> {
        let mut code: c_int = 0;
        // SAFETY: writes one int.
        self.check("ncclGetVersion", unsafe { (self.get_version)(&mut code) })?;
        // Codes from 2.9 on are major·10000 + minor·100 + patch; before, major·1000 + …
        let (major, rest) = if code >= 20900 {
            (code / 10000, code % 10000)
        } else {
            (code / 1000, code % 1000)
        };
        Ok(format!(
            "{} {major}.{}.{}",
            self.collective.library(),
            rest / 100,
            rest % 100
        ))
    }

    fn describe(&self, result: NcclResult) -> String {
        // SAFETY: NCCL returns a static string for any code.
        let text = unsafe { (self.get_error_string)(result) };
        let lib_name = self.collective.library();
        if text.is_null() {
            format!("{lib_name} error {result}")
        } else {
            // SAFETY: a NUL-terminated static string.
            let text = unsafe { CStr::from_ptr(text) }.to_string_lossy();
            format!("{text} ({lib_name} error {result})")
        }
    }

    /// One group of in-place f32 sum all-reduces, each `(buffer, len, comm, stream)`. The
    /// group is closed even after a failed call, so the calling thread leaves it.
    ///
    /// # Safety
    /// Every buffer is a live allocation of `len` f32 on the device of the communicator
    /// and stream it is reduced with.
    unsafe fn grouped_sum(
        &self,
        calls: impl IntoIterator<Item = (*mut c_void, usize, sys::ncclComm_t, sys::cudaStream_t)>,
    ) -> Result<(), ParallelError> {
        self.check("ncclGroupStart", (self.group_start)())?;
        let mut enqueued = Ok(());
        for (ptr, len, comm, stream) in calls {
            enqueued = enqueued.and_then(|()| {
                self.check(
                    "ncclAllReduce",
                    (self.all_reduce)(
                        ptr,
                        ptr,
                        len,
                        sys::ncclDataType_t::ncclFloat32,
                        sys::ncclRedOp_t::ncclSum,
                        comm,
                        stream,
                    ),
                )
            });
        }
        let ended = self.check("ncclGroupEnd", (self.group_end)());
        enqueued.and(ended)
    }

    fn check(&self, call: &str, result: NcclResult) -> Result<(), ParallelError> {
        if result == NCCL_SUCCESS {
            Ok(())
        } else {
            Err(self
                .collective
                .error(format!("{call} failed: {}", self.describe(result))))
        }
    }
}

/// Whether NCCL can be loaded with every entry point this module calls; `Ok` carries its
/// version, `Err` names the missing library or symbols.
pub fn check_library() -> Result<String, ParallelError> {
    check_library_of(Collective::Nccl)
}

/// The same for NCCL or RCCL.
pub fn check_library_of(collective: Collective) -> Result<String, ParallelError> {
    crate::runtime::guard::catch(|| NcclLibrary::load(collective)?.version()).unwrap_or_else(
        |panic| Err(collective.error(format!("{} failed to load: {panic}", collective.library()))),
    )
}

/// One rank's communicator; `None` once aborted or destroyed.
struct RankComm {
    comm: Option<sys::ncclComm_t>,
}

// SAFETY: a communicator is only used by one thread at a time, the one holding its rank's
// lock, which NCCL allows for a communicator created in another thread.
unsafe impl Send for RankComm {}

/// An [`AllReduce`] over NCCL or RCCL with one communicator per device of this process,
/// reducing device memory in place (see the module documentation).
pub struct NcclAllReduce {
    collective: Collective,
    library: Arc<NcclLibrary>,
    version: String,
    /// Ordinal of each rank's device in its runtime.
    ordinals: Vec<usize>,
    comms: Vec<Mutex<RankComm>>,
    aborted: AtomicBool,
    failure: Mutex<Option<(usize, String)>>,
    timeout: Duration,
    stream_query: StreamQuery,
    /// Keeps `stream_query` valid when it comes from the HIP runtime.
    _stream_library: Option<libloading::Library>,
}

impl std::fmt::Debug for NcclAllReduce {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NcclAllReduce")
            .field("collective", &self.collective)
            .field("version", &self.version)
            .field("ordinals", &self.ordinals)
            .finish()
    }
}

impl NcclAllReduce {
    /// A group with rank `r` on `backends[r]`, with [`DEFAULT_TIMEOUT`]: NCCL for CUDA
    /// devices, RCCL for HIP devices.
    pub fn open(backends: &[GpuBackend]) -> Result<NcclAllReduce, ParallelError> {
        Self::open_with_timeout(backends, DEFAULT_TIMEOUT)
    }

    /// Loads the library, creates one communicator per device and runs one all-reduce over
    /// all of them from this thread, checking its sums, so a group that opens has worked
    /// once.
    pub fn open_with_timeout(
        backends: &[GpuBackend],
        timeout: Duration,
    ) -> Result<NcclAllReduce, ParallelError> {
        let (collective, ordinals) = device_ordinals(backends)?;
        crate::runtime::guard::catch(|| Self::open_checked(collective, backends, ordinals, timeout))
            .unwrap_or_else(|panic| {
                Err(collective.error(format!("{} setup failed: {panic}", collective.library())))
            })
    }

    fn open_checked(
        collective: Collective,
        backends: &[GpuBackend],
        ordinals: Vec<usize>,
        timeout: Duration,
    ) -> Result<NcclAllReduce, ParallelError> {
        let setup_error = |reason| collective.error(reason);
        let library = Arc::new(NcclLibrary::load(collective)?);
        let version = library.version()?;
        let (stream_query, stream_library) = stream_query(collective)?;
        let devices: Vec<c_int> = ordinals
            .iter()
            .map(|&o| c_int::try_from(o).map_err(|_| setup_error(format!("device ordinal {o}"))))
            .collect::<Result<_, _>>()?;
        let count = c_int::try_from(devices.len())
            .map_err(|_| setup_error(format!("{} devices", devices.len())))?;
        let mut raw: Vec<sys::ncclComm_t> = vec![std::ptr::null_mut(); devices.len()];
        // SAFETY: `raw` has room for one communicator per device in `devices`.
        library.check("ncclCommInitAll", unsafe {
            (library.comm_init_all)(raw.as_mut_ptr(), count, devices.as_ptr())
        })?;
        let group = NcclAllReduce {
            collective,
            library,
            version,
            ordinals,
            comms: raw
                .into_iter()
                .map(|comm| Mutex::new(RankComm { comm: Some(comm) }))
                .collect(),
            aborted: AtomicBool::new(false),
            failure: Mutex::new(None),
            timeout,
            stream_query,
            _stream_library: stream_library,
        };
        group.warm_up(backends)?;
        Ok(group)
    }

    /// One all-reduce of ones over every device, enqueued from this thread in one group
    /// (NCCL's pattern for one thread driving several devices), then checked.
    fn warm_up(&self, backends: &[GpuBackend]) -> Result<(), ParallelError> {
        let mut buffers = Vec::with_capacity(backends.len());
        for backend in backends {
            buffers.push(backend.upload(&vec![1.0; WARMUP_ELEMENTS])?);
        }
        let mut comms = Vec::with_capacity(self.comms.len());
        for slot in &self.comms {
            comms.push(
                lock(slot)
                    .comm
                    .ok_or_else(|| self.collective.error("no communicator".into()))?,
            );
        }
        let ptrs = buffers
            .iter()
            .map(|b| {
                b.f32_device_ptr().ok_or_else(|| {
                    self.collective
                        .error("a warm-up buffer holds no f32".into())
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let lib = &self.library;
        // SAFETY: each buffer is a live allocation of WARMUP_ELEMENTS f32 on the device of
        // the communicator and stream it is reduced with.
        unsafe {
            lib.grouped_sum(backends.iter().zip(&ptrs).zip(&comms).map(
                |((backend, device_ptr), &comm)| {
                    let stream = backend.driver().native_stream() as sys::cudaStream_t;
                    (device_ptr.0 as *mut c_void, WARMUP_ELEMENTS, comm, stream)
                },
            ))?;
        }
        let want = backends.len() as f32;
        let mut host = vec![0.0f32; WARMUP_ELEMENTS];
        for (rank, (backend, buffer)) in backends.iter().zip(&buffers).enumerate() {
            backend.download(buffer, &mut host)?;
            if let Some(bad) = host.iter().position(|&v| v != want) {
                return Err(self.collective.error(format!(
                    "the warm-up all-reduce left {} at element {bad} on rank {rank}, \
                     expected {want}",
                    host[bad]
                )));
            }
        }
        Ok(())
    }

    /// The library's version, e.g. `NCCL 2.21.5`.
    pub fn version(&self) -> &str {
        &self.version
    }

    fn peer_failed(&self) -> ParallelError {
        let recorded = lock(&self.failure).clone();
        let (failed, reason) = recorded.unwrap_or((usize::MAX, "unknown".into()));
        ParallelError::PeerFailed { failed, reason }
    }

    fn is_aborted(&self) -> bool {
        self.aborted.load(Ordering::Acquire)
    }

    /// Aborts this rank's communicator, which stops its kernels waiting on peers, and
    /// waits for its stream so nothing writes into the buffers afterwards.
    fn abort_own(&self, slot: &mut RankComm, backend: &GpuBackend) {
        if let Some(comm) = slot.comm.take() {
            // SAFETY: the communicator is live and only this thread uses it.
            let _ = unsafe { (self.library.comm_abort)(comm) };
            let _ = backend.driver().synchronize();
        }
    }

    fn run(
        &self,
        rank: usize,
        comm: sys::ncclComm_t,
        backend: &GpuBackend,
        buffers: &mut [&mut <GpuBackend as Backend>::Buffer],
    ) -> Result<(), ParallelError> {
        let driver = backend.driver();
        let info = driver.info();
        if driver.runtime() != self.collective.runtime() || info.ordinal != self.ordinals[rank] {
            return Err(ParallelError::Setup {
                reason: format!(
                    "rank {rank} belongs to {} device {}, called with {} device {}",
                    self.collective.devices(),
                    self.ordinals[rank],
                    driver.runtime(),
                    info.ordinal
                ),
            });
        }
        if buffers.iter().all(|b| b.is_empty()) {
            return Ok(());
        }
        let mut targets = Vec::with_capacity(buffers.len());
        for (index, buffer) in buffers.iter().enumerate().filter(|(_, b)| !b.is_empty()) {
            let ptr = buffer
                .f32_device_ptr()
                .ok_or_else(|| ParallelError::Setup {
                    reason: format!(
                        "rank {rank}: buffer {index} holds no f32 values (unwritten or 16-bit)"
                    ),
                })?;
            targets.push((ptr, buffer.len()));
        }
        let stream = driver.native_stream();
        let lib = &self.library;
        // SAFETY: every buffer is a live device allocation of `len` f32 on this rank's
        // device (the backend's own buffers), reduced in place on that device's stream.
        unsafe {
            lib.grouped_sum(targets.iter().map(|&(device_ptr, len)| {
                let ptr = device_ptr.0 as *mut c_void;
                (ptr, len, comm, stream as sys::cudaStream_t)
            }))?;
        }
        self.wait(rank, comm, stream)
    }

    /// Polls `stream` until the all-reduce completes, the group is aborted, NCCL reports
    /// an asynchronous error, or the timeout passes.
    fn wait(
        &self,
        rank: usize,
        comm: sys::ncclComm_t,
        stream: *mut c_void,
    ) -> Result<(), ParallelError> {
        let started = Instant::now();
        loop {
            // SAFETY: the stream lives as long as the rank's driver, which the caller holds.
            let status = unsafe { (self.stream_query)(stream) };
            match status {
                CUDA_SUCCESS => return Ok(()),
                CUDA_ERROR_NOT_READY => {}
                other => {
                    return Err(self.collective.error(format!(
                        "rank {rank}: polling the stream failed with {} error {other}",
                        self.collective.devices()
                    )))
                }
            }
            if self.is_aborted() {
                return Err(self.peer_failed());
            }
            let mut async_error: NcclResult = NCCL_SUCCESS;
            // SAFETY: the communicator is live and only this thread uses it.
            let lib = &self.library;
            lib.check("ncclCommGetAsyncError", unsafe {
                (lib.comm_get_async_error)(comm, &mut async_error)
            })?;
            if async_error != NCCL_SUCCESS && async_error != NCCL_IN_PROGRESS {
                return Err(self
                    .collective
                    .error(format!("rank {rank}: {}", lib.describe(async_error))));
            }
            let waited = started.elapsed();
            if waited >= self.timeout {
                return Err(self.collective.error(format!(
                    "rank {rank} waited {waited:?} for the all-reduce to complete"
                )));
            }
            if waited < SPIN {
                std::thread::yield_now();
            } else {
                std::thread::sleep(POLL_INTERVAL);
            }
        }
    }
}

impl AllReduce<GpuBackend> for NcclAllReduce {
    fn name(&self) -> &str {
        self.collective.name()
    }

    fn ranks(&self) -> usize {
        self.comms.len()
    }

    fn all_reduce_sum(
        &self,
        rank: usize,
        backend: &GpuBackend,
        buffers: &mut [&mut <GpuBackend as Backend>::Buffer],
    ) -> Result<(), ParallelError> {
        let Some(slot) = self.comms.get(rank) else {
            return Err(ParallelError::InvalidRank {
                rank,
                ranks: self.comms.len(),
            });
        };
        let mut slot = match slot.try_lock() {
            Ok(slot) => slot,
            Err(TryLockError::WouldBlock) => return Err(ParallelError::Reentered { rank }),
            Err(TryLockError::Poisoned(_)) => return Err(self.peer_failed()),
        };
        if self.is_aborted() {
            self.abort_own(&mut slot, backend);
            return Err(self.peer_failed());
        }
        let Some(comm) = slot.comm else {
            return Err(self.peer_failed());
        };
        let result = self.run(rank, comm, backend, buffers);
        if let Err(e) = &result {
            if !e.is_consequence() {
                self.abort(rank, &e.to_string());
            }
            self.abort_own(&mut slot, backend);
        }
        result
    }

    fn abort(&self, rank: usize, reason: &str) {
        {
            let mut failure = lock(&self.failure);
            if failure.is_some() {
                return;
            }
            *failure = Some((rank, reason.to_string()));
        }
        // Each rank aborts its own communicator when it sees this flag: NCCL does not
        // allow one communicator to be used from two threads at once.
        self.aborted.store(true, Ordering::Release);
        tracing::warn!(
            rank,
            reason,
            library = self.collective.library(),
            "all-reduce aborted"
        );
    }
}

impl Drop for NcclAllReduce {
    fn drop(&mut self) {
        let aborted = self.is_aborted();
        for slot in &mut self.comms {
            let slot = slot.get_mut().unwrap_or_else(|p| p.into_inner());
            if let Some(comm) = slot.comm.take() {
                // SAFETY: no rank is inside a call (`&mut self`); an aborted group may
                // have work that never completes, which `ncclCommDestroy` would wait for.
                unsafe {
                    if aborted {
                        let _ = (self.library.comm_abort)(comm);
                    } else {
                        let _ = (self.library.comm_destroy)(comm);
                    }
                }
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// The collective for `backends` and the ordinal of each one's device: all of one runtime
/// that has a collective, all distinct, at least one.
fn device_ordinals(backends: &[GpuBackend]) -> Result<(Collective, Vec<usize>), ParallelError> {
    let Some(first) = backends.first() else {
        return Err(
            Collective::Nccl.error("an NCCL or RCCL group needs at least one device".into())
        );
    };
    let runtime = first.driver().runtime();
    let Some(collective) = Collective::for_runtime(runtime) else {
        return Err(Collective::Nccl.error(format!(
            "rank 0 is a {runtime} device; NCCL needs CUDA devices and RCCL HIP devices"
        )));
    };
    let mut ordinals = Vec::with_capacity(backends.len());
    for (rank, backend) in backends.iter().enumerate() {
        let driver = backend.driver();
        if driver.runtime() != collective.runtime() {
            return Err(collective.error(format!(
                "rank {rank} is a {} device; {} needs {} devices",
                driver.runtime(),
                collective.library(),
                collective.devices()
            )));
        }
        let ordinal = driver.info().ordinal;
        if let Some(first) = ordinals.iter().position(|&o| o == ordinal) {
            return Err(collective.error(format!(
                "ranks {first} and {rank} are both {} device {ordinal}; {} needs one rank \
                 per device",
                collective.devices(),
                collective.library()
            )));
        }
        ordinals.push(ordinal);
    }
    Ok((collective, ordinals))
}

/// The function that polls a stream of the collective's runtime: `cuStreamQuery` from the
/// CUDA driver library (resolved without cudarc's panicking loader), or `hipStreamQuery`
/// from the HIP runtime, with the library that keeps it valid.
fn stream_query(
    collective: Collective,
) -> Result<(StreamQuery, Option<libloading::Library>), ParallelError> {
    match collective {
        Collective::Nccl => {
            // SAFETY: only opens the library by its candidate names.
            if !unsafe { cuda::is_culib_present() } {
                return Err(collective.error("CUDA driver library (libcuda.so.1) not found".into()));
            }
            // SAFETY: the library was found just now; `culib` opens it by the same names,
            // and cuStreamQuery takes a stream handle (a pointer) and returns a CUresult.
            let query = unsafe {
                cuda::culib()
                    .get::<StreamQuery>(STREAM_QUERY.as_bytes())
                    .map(|f| *f)
                    .map_err(|e| {
                        collective
                            .error(format!("the CUDA driver library lacks {STREAM_QUERY}: {e}"))
                    })?
            };
            Ok((query, None))
        }
        Collective::Rccl => {
            let library = open_first(HIP_LIBRARY_NAMES)
                .map_err(|why| collective.error(format!("HIP runtime library not found: {why}")))?;
            // SAFETY: hipStreamQuery takes a stream handle (a pointer) and returns a
            // hipError_t (an int); the library is kept with the pointer.
            let query = unsafe {
                library
                    .get::<StreamQuery>(HIP_STREAM_QUERY.as_bytes())
                    .map(|f| *f)
                    .map_err(|e| {
                        collective.error(format!(
                            "the HIP runtime library lacks {HIP_STREAM_QUERY}: {e}"
                        ))
                    })?
            };
            Ok((query, Some(library)))
        }
    }
}

/// The all-reduce for data-parallel training over `backends`, and what was chosen and
/// why: NCCL for CUDA devices, RCCL for HIP devices, when the library loads and its first
/// all-reduce works; otherwise the host-staged ring.
pub fn gpu_all_reduce(backends: &[GpuBackend]) -> (Box<dyn AllReduce<GpuBackend>>, String) {
    let runtimes: Vec<&str> = backends.iter().map(|b| b.driver().runtime()).collect();
    let why_not = if backends.is_empty() {
        "no GPU devices".to_string()
    } else if runtimes.iter().any(|&r| r != runtimes[0]) {
        format!("devices of different runtimes ({})", runtimes.join(", "))
    } else {
        let library = Collective::for_runtime(runtimes[0]).map_or("NCCL", |c| c.library());
        match NcclAllReduce::open(backends) {
            Ok(group) => {
                let note = format!(
                    "{} over {} {} devices",
                    group.version(),
                    backends.len(),
                    group.collective.devices()
                );
                return (Box::new(group), note);
            }
            Err(ParallelError::Collective { reason, .. }) if reason.starts_with(library) => reason,
            Err(ParallelError::Collective { reason, .. }) => {
                format!("{library} not used: {reason}")
            }
            Err(e) => format!("{library} not used: {e}"),
        }
    };
    (
        host_ring(backends.len()),
        format!("{why_not}: host-staged ring"),
    )
}

fn host_ring(ranks: usize) -> Box<dyn AllReduce<GpuBackend>> {
    // A ring of at least one rank always builds; a group of zero devices gets one rank,
    // which data-parallel setup then rejects for not matching its replicas.
    match HostRing::new(ranks.max(1)) {
        Ok(ring) => Box::new(ring),
        Err(_) => unreachable!("a ring of at least one rank always builds"),
    }
}
