//! The engine: virtual CPUs with their own clocks, the loop that steps the
//! earliest one, cost accounting, and contention primitives in virtual time.
//!
//! Kernel code runs synchronously inside one step of one CPU and charges its
//! time through [`Ctx`]. Shared state that CPUs fight over (cache lines,
//! locks, IPIs) is modelled by primitives that turn contention into waiting
//! in virtual time. See `docs/engine.md` for the model and its limits.

mod cacheline;
mod clock_queue;
mod dram;
mod engine;
mod event;
mod ipi;
mod local_lock;
pub mod record;
mod rng;
mod rwsem;
mod spinlock;
mod stats;
mod symbol;
mod timeline;

#[cfg(test)]
mod smt_tests;
#[cfg(test)]
mod tests;

pub use crate::types::{CpuId, Cycles};
pub use cacheline::{CacheLine, CmpxchgRead, LineAccess, NO_WRITER, touch_line};
pub use dram::{CHUNK_BYTES, Traffic, dram_stream};
pub use engine::{Ctx, Engine, IrqEntry, RunState, Workload};
pub use event::Event;
pub use ipi::{IpiHandler, smp_call_function_many};
pub use local_lock::LocalLock;
pub use rng::Rng;
pub use rwsem::RwSemaphore;
pub use spinlock::SpinLock;
pub use stats::{DeviceStats, Stats};
pub use symbol::{Symbol, USER_PREFIX};
