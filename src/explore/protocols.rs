//! Seed 002's protocol as programs for the weak-memory machine
//! ([`super::memory`]): one unmapper (thread 0, on CPU 0) clears a PMD and
//! frees the page table it pointed to; walkers (threads 1.., one per CPU)
//! walk it locklessly with interrupts off, as `__find_linux_pte` and
//! GUP-fast do.
//!
//! Three protocols:
//! - `ipi-always` (5.13): `serialize_against_pte_lookup` always sends its
//!   IPI round to `mm_cpumask` and waits.
//! - `counted-walk` (Leonardo Bras's series): walkers raise and drop a
//!   per-mm `lockless_pgtbl_walk_count` around the walk, with `smp_mb`
//!   after the increment and before the decrement from v3 on (none in v1
//!   and v2); `serialize_against_pte_lookup` reads the count after its
//!   `smp_mb` and skips the IPI round when it is 0.
//! - `percpu-counted-walk` (the series' later form): each walker raises
//!   its own CPU's counter; the IPI goes only to CPUs whose counter is not
//!   0.
//!
//! The clear of a huge PMD in munmap frees the huge page rather than a
//! page table; the race is the same, and the model calls what the PMD
//! pointed to a page table, as collapse's does.

use super::memory::{Code, Instr, Memory, Op, Program, Targets, Var};

/// Which of the protocols.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Walk {
    IpiAlways,
    Counted,
    PerCpuCounted,
}

const PMD: Var = 0;
const PTE: Var = 1;
const COUNT: Var = 2;

/// The per-CPU counter of walker `w` (from 1).
fn pcpu(w: usize) -> Var {
    2 + w
}

fn i(op: Op, what: &'static str) -> Instr {
    Instr { op, what }
}

/// The machine for `walk` with `walkers` walkers; `barriers` says whether
/// the walkers' `smp_mb` around their count is there (the unmapper's is
/// there always: `serialize_against_pte_lookup` began with it before the
/// series).
pub fn build(walk: Walk, memory: Memory, walkers: usize, barriers: bool) -> Code {
    let mut vars = vec![
        ("pmd".to_string(), 1),
        ("pte".to_string(), 7),
        ("count".to_string(), 0),
    ];
    if walk == Walk::PerCpuCounted {
        vars.truncate(2);
        vars.push(("unused".to_string(), 0));
        for w in 1..=walkers {
            vars.push((format!("count@cpu{w}"), 0));
        }
    }
    let mut threads = vec![unmapper(walk, walkers)];
    for w in 1..=walkers {
        threads.push(walker(walk, w, barriers));
    }
    Code {
        memory,
        vars,
        tables: vec![PTE],
        threads,
    }
}

fn unmapper(walk: Walk, walkers: usize) -> Program {
    let all: Vec<usize> = (1..=walkers).collect();
    let mut code = vec![
        i(Op::Store { var: PMD, value: 0 }, "pmdp_huge_get_and_clear"),
        i(Op::Mb, "serialize_against_pte_lookup: smp_mb"),
    ];
    match walk {
        Walk::IpiAlways => {}
        Walk::Counted => {
            code.push(i(
                Op::Load { var: COUNT, reg: 0 },
                "running_lockless_pgtbl_walk",
            ));
            // Past the IPI round (this, send, wait) to the free.
            let free_at = code.len() + 3;
            code.push(i(
                Op::JumpIfZero {
                    reg: 0,
                    to: free_at,
                },
                "count is 0?",
            ));
        }
        Walk::PerCpuCounted => {
            for w in 1..=walkers {
                code.push(i(
                    Op::Load {
                        var: pcpu(w),
                        reg: w,
                    },
                    "read a CPU's walk counter",
                ));
            }
        }
    }
    let targets = match walk {
        Walk::PerCpuCounted => Targets::NonZero(all.iter().map(|&w| (w, w)).collect()),
        _ => Targets::All(all),
    };
    code.push(i(
        Op::SendIpi(targets),
        "smp_call_function_many(do_nothing)",
    ));
    code.push(i(Op::WaitIpi, "smp_call_function_many: wait"));
    code.push(i(Op::Free { table: 1 }, "pte_free"));
    Program {
        role: "unmapper",
        code,
    }
}

fn walker(walk: Walk, w: usize, barriers: bool) -> Program {
    let mut code = vec![i(Op::IrqOff, "local_irq_disable")];
    let counter = match walk {
        Walk::IpiAlways => None,
        Walk::Counted => Some(COUNT),
        Walk::PerCpuCounted => Some(pcpu(w)),
    };
    let add = |var, delta| match walk {
        Walk::PerCpuCounted => Op::LocalAdd { var, delta },
        _ => Op::AtomicAdd { var, delta },
    };
    if let Some(var) = counter {
        code.push(i(add(var, 1), "start_lockless_pgtbl_walk"));
        if barriers {
            code.push(i(Op::Mb, "start_lockless_pgtbl_walk: smp_mb"));
        }
    }
    code.push(i(Op::Load { var: PMD, reg: 0 }, "READ_ONCE(*pmdp)"));
    let skip_to = code.len() + 2;
    code.push(i(
        Op::JumpIfZero {
            reg: 0,
            to: skip_to,
        },
        "pmd_none?",
    ));
    code.push(i(Op::Deref { reg: 0, dest: 1 }, "pte_offset"));
    if let Some(var) = counter {
        if barriers {
            code.push(i(Op::Mb, "end_lockless_pgtbl_walk: smp_mb"));
        }
        code.push(i(add(var, -1), "end_lockless_pgtbl_walk"));
    }
    code.push(i(Op::IrqOn, "local_irq_enable"));
    Program {
        role: "walker",
        code,
    }
}
