//! How durable an acknowledged operation is: the one choice the store's
//! writer makes differently per broker.

/// How durable an acknowledged operation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// Survives power loss: every commit's frame is synced before it is
    /// acknowledged (concurrent operations share one commit). The default.
    #[default]
    Fsync,
    /// Survives `kill -9` of the process, not of the machine: commits reach
    /// the OS page cache; the log is synced at a clean shutdown, and a power
    /// cut keeps a prefix of it.
    Os,
}
