//! The device-memory pattern test: most of a GPU's free memory, taken in chunks, written
//! and read back with the element's own address, walking ones and a seeded pattern, each
//! then inverted (moving inversions), counting the words that do not hold what was
//! written, by address range, with a bandwidth figure.

use std::time::Instant;

use crate::engine::backend::gpu::driver::{DevicePtr, DriverError, GpuDriver, KernelArg};
use crate::engine::backend::gpu::launch;

/// (pattern number of the kernel, name).
pub const PATTERNS: &[(i32, &str)] = &[(0, "own address"), (1, "walking ones"), (2, "seeded")];

/// Errors found in one chunk of memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadRange {
    /// Byte offset of the chunk within what the test took, and its length.
    pub offset: u64,
    /// The chunk's length in bytes.
    pub bytes: u64,
    /// Words (4 bytes each) of the chunk that did not read back as written, over every
    /// pattern and its inverse.
    pub errors: u64,
    /// The first bad word's byte offset within the chunk, and the pattern it failed.
    pub first_bad_offset: u64,
    /// The name of that pattern in [`PATTERNS`].
    pub pattern: &'static str,
}

/// What one GPU's memory test found.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryReport {
    /// Bytes of device memory taken and tested.
    pub tested_bytes: u64,
    /// The chunks that held errors, in address order; empty for healthy memory.
    pub bad: Vec<BadRange>,
    /// Bytes written and read, over the time taken, GB/s.
    pub gbps: f64,
}

/// Takes chunks of `chunk_bytes` until `budget_bytes` or the device's memory runs out,
/// then tests each. `Err` only when not one chunk could be taken or a kernel failed.
pub fn test(
    driver: &dyn GpuDriver,
    budget_bytes: u64,
    chunk_bytes: usize,
    seed: i32,
) -> Result<MemoryReport, DriverError> {
    let chunk_bytes = chunk_bytes.max(4) / 4 * 4;
    let mut chunks: Vec<DevicePtr> = Vec::new();
    let mut taken = 0u64;
    while taken + chunk_bytes as u64 <= budget_bytes.max(chunk_bytes as u64) {
        match driver.alloc(chunk_bytes) {
            Ok(ptr) => {
                chunks.push(ptr);
                taken += chunk_bytes as u64;
            }
            Err(DriverError::OutOfMemory { .. }) if !chunks.is_empty() => break,
            Err(e) => {
                free_all(driver, &chunks);
                return Err(e);
            }
        }
    }
    let result = test_chunks(driver, &chunks, chunk_bytes, seed);
    free_all(driver, &chunks);
    result.map(|(bad, seconds)| MemoryReport {
        tested_bytes: taken,
        bad,
        // Each pattern writes and reads every word twice (as is, then inverted).
        gbps: (taken as f64 * PATTERNS.len() as f64 * 4.0) / seconds.max(1e-9) / 1e9,
    })
}

fn free_all(driver: &dyn GpuDriver, chunks: &[DevicePtr]) {
    for &ptr in chunks {
        // SAFETY: allocated above; the stream has drained when this runs.
        unsafe { driver.free(ptr) };
    }
}

fn test_chunks(
    driver: &dyn GpuDriver,
    chunks: &[DevicePtr],
    chunk_bytes: usize,
    seed: i32,
) -> Result<(Vec<BadRange>, f64), DriverError> {
    let words = chunk_bytes / 4;
    let shape = launch::reduction(words);
    let blocks = shape.grid.0 as usize;
    let counts = driver.alloc(blocks * 4)?;
    let firsts = driver.alloc(blocks * 8)?;
    let started = Instant::now();
    let mut bad = Vec::new();
    let result = (|| {
        for (c, &chunk) in chunks.iter().enumerate() {
            let mut errors = 0u64;
            let mut first: Option<(u64, &'static str)> = None;
            for &(pattern, name) in PATTERNS {
                for invert in [0, 1] {
                    let args = |extra: &[KernelArg]| {
                        let mut all = vec![
                            KernelArg::Ptr(chunk),
                            KernelArg::I64(words as i64),
                            KernelArg::I32(pattern),
                            KernelArg::I32(seed.wrapping_add(c as i32)),
                            KernelArg::I32(invert),
                        ];
                        all.extend_from_slice(extra);
                        all
                    };
                    driver.launch(
                        "health_memory_write",
                        launch::elementwise(words),
                        &args(&[]),
                    )?;
                    driver.launch(
                        "health_memory_check",
                        shape,
                        &args(&[KernelArg::Ptr(counts), KernelArg::Ptr(firsts)]),
                    )?;
                    let (found, lowest) = read_blocks(driver, counts, firsts, blocks)?;
                    errors += found;
                    if found > 0 && first.is_none_or(|(at, _)| lowest < at) {
                        first = Some((lowest, name));
                    }
                }
            }
            if let Some((word, pattern)) = first {
                bad.push(BadRange {
                    offset: c as u64 * chunk_bytes as u64,
                    bytes: chunk_bytes as u64,
                    errors,
                    first_bad_offset: word * 4,
                    pattern,
                });
            }
        }
        Ok(())
    })();
    // SAFETY: allocated above; the copies back have drained the stream.
    unsafe {
        driver.free(counts);
        driver.free(firsts);
    }
    result.map(|()| (bad, started.elapsed().as_secs_f64()))
}

fn read_blocks(
    driver: &dyn GpuDriver,
    counts: DevicePtr,
    firsts: DevicePtr,
    blocks: usize,
) -> Result<(u64, u64), DriverError> {
    let mut count_bytes = vec![0u8; blocks * 4];
    let mut first_bytes = vec![0u8; blocks * 8];
    driver.copy_to_host(&mut count_bytes, counts)?;
    driver.copy_to_host(&mut first_bytes, firsts)?;
    let errors = count_bytes
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]).max(0) as u64)
        .sum();
    let lowest = first_bytes
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().expect("eight bytes")).max(0) as u64)
        .min()
        .unwrap_or(u64::MAX);
    Ok((errors, lowest))
}
