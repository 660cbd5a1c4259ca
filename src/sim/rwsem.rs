//! A reader/writer semaphore (`mmap_lock`, say) in virtual time.
//!
//! Readers share the lock but all modify its count word, so they bounce its
//! cache line between them; a writer waits for every reader and the previous
//! writer to release. Like the spinlock, waiters are served in step order.
//! A sleeping waiter in Linux gives its CPU away; here a waiting CPU's clock
//! simply jumps to the release (charged to `symbol`'s slow path is left to
//! the caller: `down_*` returns the wait).

use super::cacheline::CacheLine;
use super::engine::Ctx;
use super::symbol::Symbol;
use super::time::Cycles;

#[derive(Clone, Debug, Default)]
pub struct RwSemaphore {
    count: CacheLine,
    readers: u32,
    writer: bool,
    /// When the last writer released.
    writer_released_at: Cycles,
    /// The latest release time of any reader since the last writer.
    readers_released_at: Cycles,
}

impl RwSemaphore {
    pub fn new() -> RwSemaphore {
        RwSemaphore::default()
    }

    /// `down_read`: returns the cycles the current CPU waited.
    pub fn down_read(&mut self, ctx: &mut Ctx, symbol: Symbol) -> Cycles {
        assert!(!self.writer, "down_read while a writer holds the semaphore");
        let start = ctx.now();
        ctx.idle_until(self.writer_released_at);
        self.count.rmw(ctx, symbol);
        self.readers += 1;
        ctx.now() - start
    }

    pub fn up_read(&mut self, ctx: &mut Ctx, symbol: Symbol) {
        assert!(self.readers > 0, "up_read without a reader");
        self.count.rmw(ctx, symbol);
        self.readers -= 1;
        self.readers_released_at = self.readers_released_at.max(ctx.now());
    }

    /// `down_write`: returns the cycles the current CPU waited.
    pub fn down_write(&mut self, ctx: &mut Ctx, symbol: Symbol) -> Cycles {
        assert!(
            !self.writer && self.readers == 0,
            "down_write while the semaphore is held"
        );
        let start = ctx.now();
        ctx.idle_until(self.writer_released_at.max(self.readers_released_at));
        self.count.rmw(ctx, symbol);
        self.writer = true;
        ctx.now() - start
    }

    pub fn up_write(&mut self, ctx: &mut Ctx, symbol: Symbol) {
        assert!(self.writer, "up_write without a writer");
        self.count.rmw(ctx, symbol);
        self.writer = false;
        self.writer_released_at = ctx.now();
    }
}
