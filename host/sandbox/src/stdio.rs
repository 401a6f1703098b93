//! The guest's stdout and stderr: captured into a bounded buffer per event,
//! then turned into log records tagged with handler and event. Nothing is
//! inherited from the host process.

use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use bytes::Bytes;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

/// Bytes kept per stream per event; the rest is dropped (and counted), never
/// refused, so a chatty handler is not failed for printing.
pub(crate) const MAX_STDIO_BYTES_PER_EVENT: usize = 64 << 10;

#[derive(Default)]
struct Captured {
    bytes: Vec<u8>,
    dropped: usize,
}

/// One captured stream; clones share the buffer.
#[derive(Clone, Default)]
pub(crate) struct CapturedOutput {
    inner: Arc<Mutex<Captured>>,
}

impl CapturedOutput {
    fn append(&self, data: &[u8]) {
        let mut captured = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let room = MAX_STDIO_BYTES_PER_EVENT.saturating_sub(captured.bytes.len());
        let kept = data.len().min(room);
        captured.bytes.extend_from_slice(&data[..kept]);
        captured.dropped += data.len() - kept;
    }

    /// The captured text split into lines, and how many bytes were dropped.
    pub(crate) fn take_lines(&self) -> (Vec<String>, usize) {
        let mut captured = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let bytes = std::mem::take(&mut captured.bytes);
        let dropped = std::mem::take(&mut captured.dropped);
        let text = String::from_utf8_lossy(&bytes);
        let lines = text
            .lines()
            .filter(|line| !line.trim().is_empty())
            .map(str::to_owned)
            .collect();
        (lines, dropped)
    }
}

impl IsTerminal for CapturedOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for CapturedOutput {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for CapturedOutput {
    async fn ready(&mut self) {}
}

impl OutputStream for CapturedOutput {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.append(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        // Always writable: overflow is dropped in `append`, not refused.
        Ok(usize::MAX)
    }
}

impl tokio::io::AsyncWrite for CapturedOutput {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.append(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
