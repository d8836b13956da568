//! Each client address's share of the event streams: one address may hold at most its
//! share open, well below the streams the server takes in all, so that one client with
//! many idle streams cannot lock everyone else out of `GET /api/v1/events`.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

/// The streams each address holds.
#[derive(Debug)]
pub struct StreamShares {
    per_peer: usize,
    held: Mutex<HashMap<IpAddr, usize>>,
}

/// One stream of one address, given back when dropped.
#[derive(Debug)]
pub struct Share {
    shares: Arc<StreamShares>,
    peer: IpAddr,
}

impl StreamShares {
    /// At most `per_peer` streams for each address.
    pub fn new(per_peer: usize) -> Arc<StreamShares> {
        Arc::new(StreamShares {
            per_peer: per_peer.max(1),
            held: Mutex::new(HashMap::new()),
        })
    }

    /// A stream for `peer`, or `None` when it holds its share already.
    pub fn take(self: &Arc<Self>, peer: IpAddr) -> Option<Share> {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let count = held.entry(peer).or_insert(0);
        if *count >= self.per_peer {
            return None;
        }
        *count += 1;
        Some(Share {
            shares: self.clone(),
            peer,
        })
    }

    /// The most one address may hold.
    pub fn per_peer(&self) -> usize {
        self.per_peer
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        let mut held = self
            .shares
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = held.get_mut(&self.peer) {
            *count -= 1;
            if *count == 0 {
                held.remove(&self.peer);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_gets_its_share_and_gets_it_back() {
        let shares = StreamShares::new(2);
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let b: IpAddr = "127.0.0.2".parse().unwrap();
        let first = shares.take(a).unwrap();
        let _second = shares.take(a).unwrap();
        assert!(shares.take(a).is_none());
        assert!(shares.take(b).is_some());
        drop(first);
        assert!(shares.take(a).is_some());
    }
}
