//! A plugin's stdout or stderr: kept up to a capacity, the excess dropped and counted. A
//! guest that writes too much never traps for it — the write may come after its request
//! left, and a trap there would turn an effect into an unknown outcome for nothing.

use bytes::Bytes;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError};

/// A bounded in-memory pipe whose writes always succeed.
#[derive(Clone)]
pub(super) struct CappedPipe {
    kept: Arc<Mutex<Vec<u8>>>,
    dropped: Arc<AtomicUsize>,
    capacity: usize,
}

impl CappedPipe {
    pub(super) fn new(capacity: usize) -> Self {
        Self {
            kept: Arc::default(),
            dropped: Arc::default(),
            capacity,
        }
    }

    /// What was kept.
    pub(super) fn contents(&self) -> Vec<u8> {
        self.kept.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Bytes written past the capacity.
    pub(super) fn dropped(&self) -> usize {
        self.dropped.load(Ordering::Relaxed)
    }

    fn take(&self, bytes: &[u8]) {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        let room = self.capacity.saturating_sub(kept.len());
        let n = bytes.len().min(room);
        kept.extend_from_slice(&bytes[..n]);
        self.dropped.fetch_add(bytes.len() - n, Ordering::Relaxed);
    }
}

impl OutputStream for CappedPipe {
    fn write(&mut self, bytes: Bytes) -> Result<(), StreamError> {
        self.take(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> Result<(), StreamError> {
        Ok(())
    }

    fn check_write(&mut self) -> Result<usize, StreamError> {
        // Always writable: what does not fit is dropped, never refused.
        Ok(self.capacity.max(4096))
    }
}

impl Pollable for CappedPipe {
    fn ready<'a, 'b>(&'a mut self) -> Pin<Box<dyn Future<Output = ()> + Send + 'b>>
    where
        'a: 'b,
    {
        Box::pin(async {})
    }
}

impl AsyncWrite for CappedPipe {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.take(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl IsTerminal for CappedPipe {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for CappedPipe {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_past_the_capacity_are_dropped_not_refused() {
        let mut pipe = CappedPipe::new(8);
        assert!(OutputStream::write(&mut pipe, Bytes::from_static(b"hello ")).is_ok());
        assert!(OutputStream::write(&mut pipe, Bytes::from_static(b"world")).is_ok());
        assert_eq!(pipe.contents(), b"hello wo");
        assert_eq!(pipe.dropped(), 3);
        assert!(pipe.check_write().is_ok());
    }
}
