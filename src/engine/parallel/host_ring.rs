//! The ring all-reduce staged through host memory, for devices without a native
//! collective library: each rank downloads all buffers of a call into one host vector
//! (one collective per call, however many buffers), exchanges chunks with its ring
//! neighbours over channels between threads following [`RingSchedule`], and uploads the
//! sums back into the same buffers.
//!
//! It never waits forever: a failing rank aborts the group (directly or through
//! [`AbortOnPanic`](super::AbortOnPanic)), which wakes every waiting rank with an error
//! naming it, and a rank that hears nothing from its predecessor within the timeout
//! gives up and aborts the group itself.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Mutex, TryLockError};
use std::time::Duration;

use crate::engine::backend::Backend;

use super::collective::AllReduce;
use super::error::ParallelError;
use super::ring::{Combine, RingSchedule};

/// How long a rank waits for its predecessor's chunk before giving up: long enough for
/// ranks whose step times differ by a slow first step, short enough that a hung device
/// ends the run instead of stalling it.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

const NAME: &str = "host-ring";

enum Message {
    Chunk {
        /// Which call of the collective this belongs to, counted per rank.
        call: u64,
        step: usize,
        /// Elements of the whole all-reduce on the sender.
        total: usize,
        data: Vec<f32>,
    },
    /// Some rank failed; the failure is recorded in [`HostRing::failure`].
    Abort,
}

/// What only one rank's thread touches: its inbox and its staging memory.
struct Port {
    inbox: Receiver<Message>,
    calls: u64,
    staging: Vec<f32>,
}

/// An [`AllReduce`] over threads of one process, staged through host memory (see the
/// module documentation); works with any backend.
pub struct HostRing {
    ranks: usize,
    /// `inboxes[r]` delivers to rank `r`.
    inboxes: Vec<Sender<Message>>,
    ports: Vec<Mutex<Port>>,
    aborted: AtomicBool,
    failure: Mutex<Option<(usize, String)>>,
    timeout: Duration,
}

impl HostRing {
    /// A ring of `ranks` ranks (at least 1) with [`DEFAULT_TIMEOUT`].
    pub fn new(ranks: usize) -> Result<HostRing, ParallelError> {
        Self::with_timeout(ranks, DEFAULT_TIMEOUT)
    }

    /// A ring of `ranks` ranks (at least 1) in which a rank gives up after waiting
    /// `timeout` for its predecessor.
    pub fn with_timeout(ranks: usize, timeout: Duration) -> Result<HostRing, ParallelError> {
        if ranks == 0 {
            return Err(ParallelError::Setup {
                reason: "a ring needs at least one rank".into(),
            });
        }
        let (inboxes, ports) = (0..ranks)
            .map(|_| {
                let (tx, rx) = mpsc::channel();
                let port = Port {
                    inbox: rx,
                    calls: 0,
                    staging: Vec::new(),
                };
                (tx, Mutex::new(port))
            })
            .unzip();
        Ok(HostRing {
            ranks,
            inboxes,
            ports,
            aborted: AtomicBool::new(false),
            failure: Mutex::new(None),
            timeout,
        })
    }

    fn peer_failed(&self) -> ParallelError {
        let recorded = match self.failure.lock() {
            Ok(f) => f.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        };
        let (failed, reason) = recorded.unwrap_or((usize::MAX, "unknown".into()));
        ParallelError::PeerFailed { failed, reason }
    }

    fn check_not_aborted(&self) -> Result<(), ParallelError> {
        if self.aborted.load(Ordering::Acquire) {
            Err(self.peer_failed())
        } else {
            Ok(())
        }
    }

    fn run<B: Backend>(
        &self,
        rank: usize,
        port: &mut Port,
        backend: &B,
        buffers: &mut [&mut B::Buffer],
    ) -> Result<(), ParallelError> {
        let call = port.calls;
        port.calls += 1;
        if self.ranks == 1 {
            return Ok(());
        }
        let lens: Vec<usize> = buffers.iter().map(|b| backend.buffer_len(b)).collect();
        let total: usize = lens.iter().sum();
        port.staging.resize(total, 0.0);
        let mut offset = 0;
        for (buf, &len) in buffers.iter().zip(&lens) {
            backend.download(buf, &mut port.staging[offset..offset + len])?;
            offset += len;
        }

        let schedule = RingSchedule::new(self.ranks, total).ok_or(ParallelError::Setup {
            reason: "a ring needs at least one rank".into(),
        })?;
        let next = (rank + 1) % self.ranks;
        let prev = (rank + self.ranks - 1) % self.ranks;
        for step in 0..schedule.steps() {
            self.check_not_aborted()?;
            let send = schedule.send(rank, step);
            let chunk = Message::Chunk {
                call,
                step,
                total,
                data: port.staging[schedule.chunk(send.chunk)].to_vec(),
            };
            if self.inboxes[next].send(chunk).is_err() {
                return Err(self.broken_channel(next));
            }

            let expect = schedule.receive(rank, step);
            let data = match port.inbox.recv_timeout(self.timeout) {
                Ok(Message::Chunk {
                    call: their_call,
                    step: their_step,
                    total: their_total,
                    data,
                }) => {
                    let mismatch = |reason: String| ParallelError::Mismatch {
                        rank,
                        peer: prev,
                        reason,
                    };
                    if (their_call, their_step) != (call, step) {
                        return Err(mismatch(format!(
                            "it sent call {their_call} step {their_step} while this rank is \
                             at call {call} step {step}"
                        )));
                    }
                    if their_total != total {
                        return Err(mismatch(format!(
                            "it reduces {their_total} elements, this rank {total} (buffer \
                             lengths {lens:?})"
                        )));
                    }
                    data
                }
                Ok(Message::Abort) => return Err(self.peer_failed()),
                Err(RecvTimeoutError::Timeout) => {
                    return Err(ParallelError::Timeout {
                        rank,
                        peer: prev,
                        waited: self.timeout,
                    })
                }
                Err(RecvTimeoutError::Disconnected) => return Err(self.broken_channel(rank)),
            };
            let own = &mut port.staging[schedule.chunk(expect.chunk)];
            if data.len() != own.len() {
                return Err(ParallelError::Mismatch {
                    rank,
                    peer: prev,
                    reason: format!(
                        "chunk {} holds {} elements, expected {}",
                        expect.chunk,
                        data.len(),
                        own.len()
                    ),
                });
            }
            match expect.combine {
                Combine::Reduce => own.iter_mut().zip(&data).for_each(|(o, d)| *o += d),
                Combine::Copy => own.copy_from_slice(&data),
            }
        }

        // Copied into the caller's buffers rather than replacing them, so each gradient
        // keeps the allocation its layer made.
        let mut offset = 0;
        for (buf, &len) in buffers.iter_mut().zip(&lens) {
            let summed = backend.upload(&port.staging[offset..offset + len])?;
            backend.copy(&summed, buf)?;
            offset += len;
        }
        Ok(())
    }

    fn broken_channel(&self, rank: usize) -> ParallelError {
        ParallelError::Collective {
            name: NAME.into(),
            reason: format!("the channel to rank {rank} is closed"),
        }
    }
}

impl<B: Backend> AllReduce<B> for HostRing {
    fn name(&self) -> &str {
        NAME
    }

    fn ranks(&self) -> usize {
        self.ranks
    }

    fn all_reduce_sum(
        &self,
        rank: usize,
        backend: &B,
        buffers: &mut [&mut B::Buffer],
    ) -> Result<(), ParallelError> {
        let Some(port) = self.ports.get(rank) else {
            return Err(ParallelError::InvalidRank {
                rank,
                ranks: self.ranks,
            });
        };
        self.check_not_aborted()?;
        let mut port = match port.try_lock() {
            Ok(port) => port,
            Err(TryLockError::WouldBlock) => return Err(ParallelError::Reentered { rank }),
            // A panic inside an earlier call: the group was aborted on its way out.
            Err(TryLockError::Poisoned(_)) => return Err(self.peer_failed()),
        };
        let result = self.run(rank, &mut port, backend, buffers);
        if let Err(e) = &result {
            if !e.is_consequence() {
                <Self as AllReduce<B>>::abort(self, rank, &e.to_string());
            }
        }
        result
    }

    fn abort(&self, rank: usize, reason: &str) {
        {
            let mut failure = match self.failure.lock() {
                Ok(f) => f,
                Err(poisoned) => poisoned.into_inner(),
            };
            if failure.is_some() {
                return;
            }
            *failure = Some((rank, reason.to_string()));
        }
        self.aborted.store(true, Ordering::Release);
        tracing::warn!(rank, reason, "host-ring all-reduce aborted");
        for inbox in &self.inboxes {
            // A rank's inbox lives as long as the ring, so sending cannot fail.
            let _ = inbox.send(Message::Abort);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::engine::backend::cpu::CpuBuffer;
    use crate::engine::parallel::AbortOnPanic;
    use crate::engine::CpuBackend;

    /// Runs `f(rank, backend)` on a thread per rank, each with its own CPU backend.
    fn on_ranks<T: Send>(
        ranks: usize,
        f: impl Fn(usize, &CpuBackend) -> T + Sync,
    ) -> Vec<std::thread::Result<T>> {
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..ranks)
                .map(|rank| {
                    let f = &f;
                    s.spawn(move || f(rank, &CpuBackend::new()))
                })
                .collect();
            handles.into_iter().map(|h| h.join()).collect()
        })
    }

    fn values(rank: usize, buffer: usize, len: usize) -> Vec<f32> {
        (0..len)
            .map(|i| ((rank * 7 + buffer * 3 + i) % 11) as f32 - 5.0)
            .collect()
    }

    fn reduce(
        ring: &HostRing,
        rank: usize,
        b: &CpuBackend,
        bufs: &mut [CpuBuffer],
    ) -> Result<(), ParallelError> {
        let mut refs: Vec<&mut CpuBuffer> = bufs.iter_mut().collect();
        ring.all_reduce_sum(rank, b, &mut refs)
    }

    fn download(b: &CpuBackend, buf: &CpuBuffer) -> Vec<f32> {
        let mut host = vec![0.0; b.buffer_len(buf)];
        b.download(buf, &mut host).unwrap();
        host
    }

    #[test]
    fn sums_uneven_buffers_over_one_to_six_ranks() {
        let lens = [0, 1, 5, 7, 13, 1000, 3];
        for ranks in 1..=6 {
            let ring = HostRing::new(ranks).unwrap();
            // Three calls in a row: the ring keeps its calls apart.
            let results = on_ranks(ranks, |rank, b| {
                let mut out = Vec::new();
                for call in 0..3 {
                    let mut bufs: Vec<CpuBuffer> = lens
                        .iter()
                        .enumerate()
                        .map(|(i, &len)| b.upload(&values(rank + call, i, len)).unwrap())
                        .collect();
                    reduce(&ring, rank, b, &mut bufs).unwrap();
                    out.push(bufs.iter().map(|buf| download(b, buf)).collect::<Vec<_>>());
                }
                out
            });
            for (rank, got) in results.into_iter().enumerate() {
                let got = got.unwrap();
                for (call, bufs) in got.iter().enumerate() {
                    for (i, &len) in lens.iter().enumerate() {
                        let want: Vec<f32> = (0..len)
                            .map(|e| (0..ranks).map(|r| values(r + call, i, len)[e]).sum())
                            .collect();
                        assert_eq!(bufs[i], want, "ranks {ranks} rank {rank} call {call}");
                    }
                }
            }
        }
    }

    #[test]
    fn every_rank_ends_with_bit_identical_sums() {
        let ranks = 5;
        let ring = HostRing::new(ranks).unwrap();
        let results = on_ranks(ranks, |rank, b| {
            // Values whose float sum depends on the order of additions.
            let host: Vec<f32> = (0..997)
                .map(|i| ((rank * 131 + i * 17) as f32).sin() * 10f32.powi((i % 7) as i32 - 3))
                .collect();
            let mut bufs = vec![b.upload(&host).unwrap()];
            reduce(&ring, rank, b, &mut bufs).unwrap();
            download(b, &bufs[0])
        });
        let results: Vec<Vec<f32>> = results.into_iter().map(|r| r.unwrap()).collect();
        for r in &results[1..] {
            let same = r
                .iter()
                .zip(&results[0])
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same);
        }
    }

    #[test]
    fn a_wrong_size_buffer_on_one_rank_fails_every_rank_naming_it() {
        let ranks = 4;
        let ring = HostRing::new(ranks).unwrap();
        let started = Instant::now();
        let results = on_ranks(ranks, |rank, b| {
            let len = if rank == 2 { 99 } else { 100 };
            let mut bufs = vec![b.upload(&vec![1.0; len]).unwrap()];
            reduce(&ring, rank, b, &mut bufs)
        });
        assert!(started.elapsed() < Duration::from_secs(10));
        for (rank, r) in results.into_iter().enumerate() {
            let err = r.unwrap().unwrap_err().to_string();
            assert!(err.contains("rank 2"), "rank {rank}: {err}");
            assert!(err.contains("99"), "rank {rank}: {err}");
        }
    }

    #[test]
    fn an_aborting_rank_releases_every_waiting_rank() {
        let ranks = 3;
        let ring = HostRing::new(ranks).unwrap();
        let started = Instant::now();
        let results = on_ranks(ranks, |rank, b| {
            if rank == 1 {
                std::thread::sleep(Duration::from_millis(100));
                AllReduce::<CpuBackend>::abort(&ring, 1, "out of memory");
                return Err(ParallelError::Setup {
                    reason: "out of memory".into(),
                });
            }
            let mut bufs = vec![b.upload(&[1.0; 10]).unwrap()];
            reduce(&ring, rank, b, &mut bufs)
        });
        assert!(started.elapsed() < Duration::from_secs(10));
        for rank in [0, 2] {
            let err = results[rank].as_ref().unwrap().as_ref().unwrap_err();
            assert!(
                matches!(err, ParallelError::PeerFailed { failed: 1, reason } if reason == "out of memory"),
                "rank {rank}: {err}"
            );
        }
        // The group stays failed.
        let b = CpuBackend::new();
        let mut bufs = vec![b.upload(&[1.0]).unwrap()];
        let err = reduce(&ring, 0, &b, &mut bufs).unwrap_err();
        assert!(matches!(err, ParallelError::PeerFailed { failed: 1, .. }));
    }

    #[test]
    fn a_panicking_rank_releases_every_waiting_rank() {
        let ranks = 3;
        let ring = HostRing::new(ranks).unwrap();
        let started = Instant::now();
        let results = on_ranks(ranks, |rank, b| {
            let _guard = AbortOnPanic::<CpuBackend>::new(&ring, rank);
            if rank == 0 {
                panic!("injected panic on rank 0");
            }
            let mut bufs = vec![b.upload(&[1.0; 10]).unwrap()];
            reduce(&ring, rank, b, &mut bufs)
        });
        assert!(started.elapsed() < Duration::from_secs(10));
        assert!(results[0].is_err());
        for rank in [1, 2] {
            let err = results[rank].as_ref().unwrap().as_ref().unwrap_err();
            assert!(
                matches!(err, ParallelError::PeerFailed { failed: 0, .. }),
                "rank {rank}: {err}"
            );
        }
    }

    #[test]
    fn a_silent_rank_times_out_its_successor() {
        let ring = HostRing::with_timeout(2, Duration::from_millis(200)).unwrap();
        let results = on_ranks(2, |rank, b| {
            if rank == 1 {
                return Ok(());
            }
            let mut bufs = vec![b.upload(&[1.0; 10]).unwrap()];
            reduce(&ring, rank, b, &mut bufs)
        });
        let err = results[0].as_ref().unwrap().as_ref().unwrap_err();
        assert!(
            matches!(
                err,
                ParallelError::Timeout {
                    rank: 0,
                    peer: 1,
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("200ms"), "{err}");
    }

    #[test]
    fn a_silent_rank_fails_every_waiting_rank_in_bounded_time() {
        let ranks = 3;
        let ring = HostRing::with_timeout(ranks, Duration::from_millis(200)).unwrap();
        let started = Instant::now();
        let results = on_ranks(ranks, |rank, b| {
            if rank == 2 {
                return Ok(());
            }
            let mut bufs = vec![b.upload(&[1.0; 10]).unwrap()];
            reduce(&ring, rank, b, &mut bufs)
        });
        assert!(started.elapsed() < Duration::from_secs(10));
        // Rank 0 waits on silent rank 2, rank 1 on rank 0: whichever times out first
        // aborts the group, and the other reports that abort.
        let errors: Vec<&ParallelError> = results[..2]
            .iter()
            .map(|r| r.as_ref().unwrap().as_ref().unwrap_err())
            .collect();
        assert!(errors
            .iter()
            .any(|e| matches!(e, ParallelError::Timeout { .. })));
        for err in errors {
            match err {
                ParallelError::Timeout { rank, peer, .. } => {
                    assert_eq!(*peer, (rank + ranks - 1) % ranks)
                }
                ParallelError::PeerFailed { reason, .. } => {
                    assert!(reason.contains("waited"), "{reason}")
                }
                other => panic!("unexpected error {other}"),
            }
        }
    }

    #[test]
    fn a_rank_entering_twice_at_once_is_an_error() {
        let ring = HostRing::with_timeout(2, Duration::from_secs(2)).unwrap();
        let results = on_ranks(2, |thread, b| {
            // Both threads claim rank 0; the second arrives while the first waits for
            // rank 1, which never comes.
            std::thread::sleep(Duration::from_millis(200 * thread as u64));
            let mut bufs = vec![b.upload(&[1.0; 4]).unwrap()];
            reduce(&ring, 0, b, &mut bufs)
        });
        let first = results[0].as_ref().unwrap().as_ref().unwrap_err();
        assert!(
            matches!(
                first,
                ParallelError::Timeout {
                    rank: 0,
                    peer: 1,
                    ..
                }
            ),
            "{first}"
        );
        let second = results[1].as_ref().unwrap().as_ref().unwrap_err();
        assert!(
            matches!(second, ParallelError::Reentered { rank: 0 }),
            "{second}"
        );
    }

    #[test]
    fn bad_ranks_are_errors() {
        assert!(HostRing::new(0).is_err());
        let ring = HostRing::new(2).unwrap();
        let b = CpuBackend::new();
        let mut bufs = vec![b.upload(&[1.0]).unwrap()];
        let err = reduce(&ring, 2, &b, &mut bufs).unwrap_err();
        assert!(matches!(
            err,
            ParallelError::InvalidRank { rank: 2, ranks: 2 }
        ));
        assert_eq!(AllReduce::<CpuBackend>::name(&ring), "host-ring");
        assert_eq!(AllReduce::<CpuBackend>::ranks(&ring), 2);
    }
}
