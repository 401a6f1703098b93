//! The one thread that advances the engine's epoch, which is what turns a
//! store's deadline (in ticks) into a trap for a handler that overruns it.

use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use wasmtime::Engine;

/// Ticks the epoch every `tick` until dropped.
pub(crate) struct EpochTicker {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl EpochTicker {
    pub(crate) fn start(engine: Engine, tick: Duration) -> std::io::Result<Self> {
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("nimbus-epoch".to_owned())
            .spawn(move || {
                // Sleeping on the channel lets drop stop us without waiting a tick.
                while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(tick) {
                    engine.increment_epoch();
                }
            })?;
        Ok(Self {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
