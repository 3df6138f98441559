//! A signal that attempts have ended, for those waiting on one they started (an operator's
//! `query` or `retry` answers once its attempt is over). A waiter reads the store again
//! when the signal moves, and also after a bounded wait: an attempt that ends on another
//! host moves this signal only as far as this host hears of it.

use tokio::sync::watch;

/// A counter that moves whenever an attempt ends or other hosts report work.
#[derive(Debug)]
pub struct Progress {
    tx: watch::Sender<u64>,
}

impl Default for Progress {
    fn default() -> Self {
        Self {
            tx: watch::channel(0).0,
        }
    }
}

impl Progress {
    /// Something ended: wake every waiter.
    pub fn advance(&self) {
        self.tx.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// A receiver that sees every later [`Progress::advance`].
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.tx.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_waiter_is_woken() {
        let progress = Progress::default();
        let mut a = progress.subscribe();
        let mut b = progress.subscribe();
        progress.advance();
        a.changed().await.unwrap();
        b.changed().await.unwrap();
        assert_eq!(*a.borrow(), 1);
    }
}
