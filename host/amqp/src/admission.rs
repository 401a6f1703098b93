//! Which connections the endpoint takes, and which it lets go to make room
//! (issue 40).
//!
//! Connections are held in two kinds. One that has put a valid token on
//! `$cbs` holds a slot until it ends; the endpoint stops accepting while
//! every slot is held by such connections (a new one waits in the
//! listener's backlog, costing the host nothing). One that has not yet put
//! a valid token is *pending*: it has at most [`Admission::pending`] peers,
//! it must put its token within the token timeout of being accepted, and
//! when room is needed (too many pending, or every slot taken) the oldest
//! pending connection is closed first. An SDK puts its token within
//! milliseconds of connecting, so the connections that go are the silent
//! ones: a thousand of them cannot keep a real client out.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};

use crate::log_limit::{Cause, LogLimit};

/// The endpoint's connections.
pub(crate) struct Admission {
    slots: Arc<Semaphore>,
    /// Connections without a valid token yet, oldest first, each with the
    /// way to close it.
    waiting: Mutex<VecDeque<(u64, oneshot::Sender<Evicted>)>>,
    /// The most connections without a token at once.
    pending: usize,
    next_id: AtomicU64,
}

/// Why a pending connection is closed to make room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Evicted {
    /// Too many connections have no token.
    TooManyPending,
    /// Every slot is taken.
    NoSlot,
}

impl std::fmt::Display for Evicted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Evicted::TooManyPending => {
                "closed to make room: too many connections have put no valid token"
            }
            Evicted::NoSlot => {
                "closed to make room: every connection slot is taken and this connection has put \
                 no valid token"
            }
        })
    }
}

/// A connection the endpoint took: its slot, and its place among the
/// pending until it puts a valid token.
pub(crate) struct Admitted {
    slot: Option<OwnedSemaphorePermit>,
    pending: Option<Pending>,
}

/// A place among the pending connections.
pub(crate) struct Pending {
    id: u64,
    admission: Arc<Admission>,
    /// Resolves when the connection is closed to make room.
    pub(crate) evicted: oneshot::Receiver<Evicted>,
}

impl Admitted {
    /// The connection's place among the pending, while it is one.
    pub(crate) fn pending(&mut self) -> Option<&mut Pending> {
        self.pending.as_mut()
    }

    /// The connection put a valid token: it keeps its slot and is no
    /// longer pending.
    pub(crate) fn authenticated(&mut self) {
        self.pending = None;
    }

    /// Gives up the connection's slot (it is closing) before it is done.
    pub(crate) fn release(&mut self) {
        self.slot = None;
        self.pending = None;
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.admission
            .waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|(id, _)| *id != self.id);
    }
}

impl Admission {
    /// Room for `connections`, of which at most `pending` without a token.
    pub(crate) fn new(connections: usize, pending: usize) -> Arc<Admission> {
        Arc::new(Admission {
            slots: Arc::new(Semaphore::new(connections.max(1))),
            waiting: Mutex::default(),
            pending: pending.max(1),
            next_id: AtomicU64::new(0),
        })
    }

    fn waiting(&self) -> std::sync::MutexGuard<'_, VecDeque<(u64, oneshot::Sender<Evicted>)>> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Closes the oldest pending connection; `false` if there is none.
    fn evict_oldest(&self, why: Evicted) -> bool {
        let oldest = self.waiting().pop_front();
        match oldest {
            Some((_, close)) => {
                let _ = close.send(why);
                true
            }
            None => false,
        }
    }

    /// The next connection on `listener`, with a slot and a place among the
    /// pending, once there is room for it.
    pub(crate) async fn accept(
        self: &Arc<Self>,
        listener: &TcpListener,
    ) -> (TcpStream, std::net::SocketAddr, Admitted) {
        // Every slot held by a connection with a token: nothing to let go,
        // so the next connection waits (in the backlog) for one to end.
        let mut held = None;
        if self.slots.available_permits() == 0 && self.waiting().is_empty() {
            held = Arc::clone(&self.slots).acquire_owned().await.ok();
        }
        let (stream, peer) = accept_one(listener).await;
        let slot = match held {
            Some(slot) => slot,
            None => match Arc::clone(&self.slots).try_acquire_owned() {
                Ok(slot) => slot,
                Err(_) => {
                    // Room is made by closing the oldest pending one; its
                    // slot comes back as its task ends.
                    if self.evict_oldest(Evicted::NoSlot) {
                        LogLimit::global().info(Cause::NoToken, || {
                            "every AMQP connection slot is taken: the oldest connection without \
                             a token was closed to make room"
                                .to_owned()
                        });
                    }
                    // The semaphore is never closed.
                    match Arc::clone(&self.slots).acquire_owned().await {
                        Ok(slot) => slot,
                        Err(_) => return std::future::pending().await,
                    }
                }
            },
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (close, evicted) = oneshot::channel();
        let crowded = {
            let mut waiting = self.waiting();
            waiting.push_back((id, close));
            waiting.len() > self.pending
        };
        if crowded && self.evict_oldest(Evicted::TooManyPending) {
            LogLimit::global().info(Cause::NoToken, || {
                format!(
                    "more than {} AMQP connections without a valid token: the oldest was closed \
                     to make room",
                    self.pending
                )
            });
        }
        let admitted = Admitted {
            slot: Some(slot),
            pending: Some(Pending {
                id,
                admission: Arc::clone(self),
                evicted,
            }),
        };
        (stream, peer, admitted)
    }
}

/// The next connection `listener` accepts, with `TCP_NODELAY` set.
async fn accept_one(listener: &TcpListener) -> (TcpStream, std::net::SocketAddr) {
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                // Answers are small frames written back to back (a
                // disposition, then a response): Nagle would hold the second
                // for the client's delayed ACK, 40 ms a request.
                if let Err(error) = stream.set_nodelay(true) {
                    tracing::debug!(%error, %peer, "TCP_NODELAY could not be set");
                }
                return (stream, peer);
            }
            Err(error) => {
                LogLimit::global().warn(Cause::AcceptFailed, || {
                    format!("accepting an AMQP connection failed: {error}")
                });
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    #[tokio::test]
    async fn the_oldest_pending_connection_makes_room_and_one_with_a_token_keeps_its_slot() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let admission = Admission::new(2, 8);
        let _clients: Vec<_> = futures_connect(address, 3).await;
        let (_a, _, mut first) = admission.accept(&listener).await;
        let (_b, _, mut second) = admission.accept(&listener).await;
        first.authenticated();
        // Both slots are taken: the third is taken once the pending second
        // has been closed and let its slot go.
        let third = {
            let admission = Arc::clone(&admission);
            tokio::spawn(async move { admission.accept(&listener).await.2 })
        };
        let evicted = second.pending().unwrap();
        assert_eq!((&mut evicted.evicted).await, Ok(Evicted::NoSlot));
        assert!(first.pending().is_none());
        second.release();
        let mut third = third.await.unwrap();
        assert!(
            third.pending().is_some(),
            "the newcomer is pending until its token"
        );
    }

    #[tokio::test]
    async fn beyond_the_pending_limit_the_oldest_is_closed() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let admission = Admission::new(10, 2);
        let _clients = futures_connect(address, 3).await;
        let mut admitted = Vec::new();
        for _ in 0..3 {
            admitted.push(admission.accept(&listener).await.2);
        }
        let oldest = admitted[0].pending().unwrap();
        assert_eq!((&mut oldest.evicted).await, Ok(Evicted::TooManyPending));
        assert!(admitted[1].pending().unwrap().evicted.try_recv().is_err());
        assert_eq!(admission.waiting().len(), 2);
        drop(admitted);
        assert!(
            admission.waiting().is_empty(),
            "an ended connection is not pending"
        );
    }

    async fn futures_connect(address: std::net::SocketAddr, n: usize) -> Vec<TcpStream> {
        let mut streams = Vec::new();
        for _ in 0..n {
            streams.push(TcpStream::connect(address).await.unwrap());
        }
        streams
    }
}
