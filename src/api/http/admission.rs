//! Who gets a connection: a global cap and a cap per client address, so one client
//! cannot take every slot; and refusals counted and logged once per interval, not
//! once per refusal.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tracing::warn;

/// How often refusals are summed up in the log.
pub const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Which cap refused a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    AllConnections,
    PeerConnections,
    EventStreams,
}

impl Refusal {
    fn index(self) -> usize {
        match self {
            Refusal::AllConnections => 0,
            Refusal::PeerConnections => 1,
            Refusal::EventStreams => 2,
        }
    }
}

/// A connection's slots, global and per peer, given back on drop.
pub struct Admitted {
    _global: OwnedSemaphorePermit,
    peer: IpAddr,
    peers: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = peers.get_mut(&self.peer) {
            *count -= 1;
            if *count == 0 {
                peers.remove(&self.peer);
            }
        }
    }
}

pub struct Admission {
    global: Arc<Semaphore>,
    per_peer: usize,
    peers: Arc<Mutex<HashMap<IpAddr, usize>>>,
    log: RefusalLog,
}

impl Admission {
    pub fn new(max_connections: usize, max_per_peer: usize) -> Admission {
        Admission {
            global: Arc::new(Semaphore::new(max_connections.max(1))),
            per_peer: max_per_peer.max(1),
            peers: Arc::default(),
            log: RefusalLog::default(),
        }
    }

    /// A slot for a connection from `peer`, or why there is none.
    pub fn admit(&self, peer: IpAddr) -> Result<Admitted, Refusal> {
        let mut peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        let count = peers.entry(peer).or_insert(0);
        if *count >= self.per_peer {
            drop(peers);
            self.log.refused(Refusal::PeerConnections);
            return Err(Refusal::PeerConnections);
        }
        let Ok(global) = self.global.clone().try_acquire_owned() else {
            if *count == 0 {
                peers.remove(&peer);
            }
            drop(peers);
            self.log.refused(Refusal::AllConnections);
            return Err(Refusal::AllConnections);
        };
        *count += 1;
        Ok(Admitted {
            _global: global,
            peer,
            peers: self.peers.clone(),
        })
    }

    pub fn log(&self) -> &RefusalLog {
        &self.log
    }
}

/// Counts refusals and writes one line per interval that had any.
pub struct RefusalLog {
    counts: [AtomicU64; 3],
    last_line: Mutex<Option<Instant>>,
}

impl Default for RefusalLog {
    fn default() -> Self {
        RefusalLog {
            counts: Default::default(),
            last_line: Mutex::new(None),
        }
    }
}

impl RefusalLog {
    pub fn refused(&self, why: Refusal) {
        self.counts[why.index()].fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        let mut last = self.last_line.lock().unwrap_or_else(|e| e.into_inner());
        if last.is_some_and(|t| now.duration_since(t) < REFUSAL_LOG_INTERVAL) {
            return;
        }
        *last = Some(now);
        drop(last);
        let [connections, from_peer, streams] =
            std::array::from_fn(|i| self.counts[i].swap(0, Ordering::Relaxed));
        warn!(
            connections,
            from_peer,
            streams,
            interval_s = REFUSAL_LOG_INTERVAL.as_secs(),
            "HTTP clients refused: over the connection cap, over the cap per address, \
             over the event-stream cap (at most one such line per interval)"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_peer_cannot_take_every_slot() {
        let admission = Admission::new(4, 2);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let first = admission.admit(a).unwrap();
        let _second = admission.admit(a).unwrap();
        assert_eq!(admission.admit(a).err(), Some(Refusal::PeerConnections));
        let _b1 = admission.admit(b).unwrap();
        let _b2 = admission.admit(b).unwrap();
        assert_eq!(
            admission.admit("10.0.0.3".parse().unwrap()).err(),
            Some(Refusal::AllConnections)
        );
        drop(first);
        assert!(admission.admit(a).is_ok());
    }
}
