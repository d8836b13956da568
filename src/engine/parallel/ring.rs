//! The ring all-reduce schedule as plain data.
//!
//! A buffer of `len` elements is cut into one chunk per rank. In the reduce-scatter half
//! (steps `0..n-1`) rank `r` sends chunk `r - s` to rank `r + 1`, which adds it into its
//! own copy; after `n - 1` steps rank `r` holds the complete sum of chunk `r + 1`. In the
//! all-gather half (steps `n-1..2(n-1)`) each rank passes its complete chunks on around
//! the ring and the receiver overwrites its copy. Every element is summed by exactly one
//! rank in one fixed order and then copied, so all ranks end with bit-identical sums.
//!
//! Each rank sends every chunk except two, so it moves `2(n-1)/n · len` elements: the
//! bus-bandwidth factor of a ring.

use std::ops::Range;

/// What the receiver of a chunk does with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Combine {
    /// Adds it elementwise into its own copy of the chunk (reduce-scatter).
    Reduce,
    /// Overwrites its own copy of the chunk (all-gather).
    Copy,
}

/// One message of a step: `from` sends its copy of `chunk` to `to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transfer {
    /// The step it belongs to, in `0..steps()`.
    pub step: usize,
    /// The sending rank.
    pub from: usize,
    /// The receiving rank, the sender's successor in the ring.
    pub to: usize,
    /// The index of the chunk sent ([`RingSchedule::chunk`]).
    pub chunk: usize,
    /// What the receiver does with it.
    pub combine: Combine,
}

/// The chunks and steps of a ring all-reduce of `len` elements over `ranks` ranks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RingSchedule {
    ranks: usize,
    len: usize,
}

impl RingSchedule {
    /// `ranks` is at least 1 (a single rank has nothing to do: no steps).
    pub fn new(ranks: usize, len: usize) -> Option<RingSchedule> {
        (ranks > 0).then_some(RingSchedule { ranks, len })
    }

    /// Ranks in the ring.
    pub fn ranks(&self) -> usize {
        self.ranks
    }

    /// Elements of the buffer being reduced.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Element range of chunk `index` (`< ranks`): the first `len % ranks` chunks hold
    /// one element more than the rest, so chunks are empty only when `len < ranks`.
    pub fn chunk(&self, index: usize) -> Range<usize> {
        let base = self.len / self.ranks;
        let extra = self.len % self.ranks;
        let start = index * base + index.min(extra);
        let end = start + base + usize::from(index < extra);
        start..end
    }

    /// Number of steps: `2(ranks - 1)`.
    pub fn steps(&self) -> usize {
        2 * (self.ranks - 1)
    }

    /// What `rank` sends at `step`.
    pub fn send(&self, rank: usize, step: usize) -> Transfer {
        let n = self.ranks;
        let reduce = step < n - 1;
        // Reduce-scatter sends chunk r - s; all-gather starts from the chunk completed
        // by the reduce-scatter, r + 1, and walks back the same way.
        let chunk = if reduce {
            (rank + n - step) % n
        } else {
            (rank + 1 + n - (step - (n - 1))) % n
        };
        Transfer {
            step,
            from: rank,
            to: (rank + 1) % n,
            chunk,
            combine: if reduce {
                Combine::Reduce
            } else {
                Combine::Copy
            },
        }
    }

    /// What `rank` receives at `step`: the send of its predecessor in the ring.
    pub fn receive(&self, rank: usize, step: usize) -> Transfer {
        self.send((rank + self.ranks - 1) % self.ranks, step)
    }

    /// All transfers of `step`, one per rank.
    pub fn transfers(&self, step: usize) -> impl Iterator<Item = Transfer> + '_ {
        (0..self.ranks).map(move |rank| self.send(rank, step))
    }

    /// Elements `rank` sends over the whole all-reduce.
    pub fn elements_sent(&self, rank: usize) -> usize {
        (0..self.steps())
            .map(|step| self.chunk(self.send(rank, step).chunk).len())
            .sum()
    }
}

/// The ratio of bytes each rank moves to the buffer's size in a ring: `2(n-1)/n`.
pub fn ring_bus_factor(ranks: usize) -> f64 {
    if ranks == 0 {
        0.0
    } else {
        2.0 * (ranks as f64 - 1.0) / ranks as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the schedule over one vector per rank, every step reading what the senders
    /// held before the step, as real concurrent sends do.
    fn simulate(schedule: &RingSchedule, mut data: Vec<Vec<f32>>) -> Vec<Vec<f32>> {
        for step in 0..schedule.steps() {
            let before = data.clone();
            for t in schedule.transfers(step) {
                let range = schedule.chunk(t.chunk);
                let incoming = &before[t.from][range.clone()];
                let own = &mut data[t.to][range];
                match t.combine {
                    Combine::Reduce => own.iter_mut().zip(incoming).for_each(|(o, i)| *o += i),
                    Combine::Copy => own.copy_from_slice(incoming),
                }
            }
        }
        data
    }

    fn rank_data(ranks: usize, len: usize) -> Vec<Vec<f32>> {
        // Small integers, so sums are exact whatever the order.
        (0..ranks)
            .map(|r| (0..len).map(|i| ((r * 31 + i * 7) % 13) as f32).collect())
            .collect()
    }

    const LENGTHS: &[usize] = &[0, 1, 2, 3, 5, 7, 8, 9, 16, 17, 31, 64, 100, 1001];

    #[test]
    fn every_rank_ends_with_the_elementwise_sum() {
        for ranks in 1..=8 {
            for &len in LENGTHS {
                let schedule = RingSchedule::new(ranks, len).unwrap();
                let data = rank_data(ranks, len);
                let want: Vec<f32> = (0..len).map(|i| data.iter().map(|d| d[i]).sum()).collect();
                let got = simulate(&schedule, data);
                for (rank, g) in got.iter().enumerate() {
                    assert_eq!(g, &want, "ranks {ranks}, len {len}, rank {rank}");
                }
            }
        }
    }

    #[test]
    fn chunks_tile_the_buffer_and_differ_by_at_most_one() {
        for ranks in 1..=8 {
            for &len in LENGTHS {
                let s = RingSchedule::new(ranks, len).unwrap();
                let mut next = 0;
                for c in 0..ranks {
                    let r = s.chunk(c);
                    assert_eq!(r.start, next, "ranks {ranks}, len {len}, chunk {c}");
                    assert!(r.len() == len / ranks || r.len() == len / ranks + 1);
                    next = r.end;
                }
                assert_eq!(next, len);
            }
        }
    }

    #[test]
    fn each_step_every_rank_sends_once_and_receives_once_from_its_predecessor() {
        for ranks in 1..=8 {
            let s = RingSchedule::new(ranks, 100).unwrap();
            assert_eq!(s.steps(), 2 * (ranks - 1));
            for step in 0..s.steps() {
                let mut received = vec![0; ranks];
                for t in s.transfers(step) {
                    assert_eq!(t.to, (t.from + 1) % ranks);
                    assert_eq!(s.receive(t.to, step), t);
                    received[t.to] += 1;
                    let want = if step < ranks - 1 {
                        Combine::Reduce
                    } else {
                        Combine::Copy
                    };
                    assert_eq!(t.combine, want);
                }
                assert!(
                    received.iter().all(|&c| c == 1),
                    "step {step}: {received:?}"
                );
            }
        }
    }

    #[test]
    fn each_rank_sends_the_ring_bus_factor_of_the_buffer() {
        for ranks in 1..=8 {
            for &len in LENGTHS {
                let s = RingSchedule::new(ranks, len).unwrap();
                let ideal = ring_bus_factor(ranks) * len as f64;
                let total: usize = (0..ranks).map(|r| s.elements_sent(r)).sum();
                assert_eq!(total, 2 * (ranks - 1) * len, "ranks {ranks}, len {len}");
                for rank in 0..ranks {
                    let sent = s.elements_sent(rank) as f64;
                    if len % ranks == 0 {
                        assert_eq!(sent, ideal, "ranks {ranks}, len {len}, rank {rank}");
                    } else {
                        // Uneven chunks move each rank's share by less than two elements.
                        assert!((sent - ideal).abs() < 2.0, "{sent} vs {ideal}");
                    }
                }
            }
        }
    }

    #[test]
    fn zero_ranks_has_no_schedule() {
        assert!(RingSchedule::new(0, 10).is_none());
        assert_eq!(ring_bus_factor(1), 0.0);
        assert_eq!(ring_bus_factor(6), 2.0 * 5.0 / 6.0);
    }
}
