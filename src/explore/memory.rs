//! A small weak-memory machine: a few threads, each alone on its CPU, each
//! running a short straight-line program (forward jumps only) over a few
//! shared variables.
//!
//! Each CPU has a store buffer. A store goes into it; it reaches memory
//! later, when the schedule drains it. A load reads the newest store to its
//! variable in its own CPU's buffer, else memory. `smp_mb` drains the whole
//! buffer. Two memories:
//! - `x86` (TSO): the buffer drains in order (FIFO), and a locked
//!   read-modify-write (`atomic_inc`, `lock incl`) is a full barrier.
//! - `power` (POWER-like): stores to different variables may drain in any
//!   order (FIFO per variable), and an atomic read-modify-write is not a
//!   barrier: its store is buffered like any other, and no other CPU's
//!   atomic on the same variable completes until it drains (the
//!   reservation), so no increment is lost.
//!
//! Left out: loads run in program order when their thread steps, so
//! neither load-load nor load-store reordering (the LB pattern) happens;
//! a drained store is visible to every CPU at once (multi-copy atomic,
//! which POWER is not). Interrupts: a CPU with interrupts off does not take
//! an IPI; [`Op::IrqOn`] takes any pending one. The IPI wait of
//! `smp_call_function_many` returns once every target CPU has had
//! interrupts on at some moment after the IPI was sent.
//!
//! Beside memory the machine keeps ghost state, which no instruction
//! reads: which page tables were freed. A dereference of a freed one is the
//! property failing.

use super::search::{Choice, Step, System};

/// A shared variable: its index in [`Code::vars`].
pub type Var = usize;

/// Which memory model the machine follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Memory {
    X86,
    Power,
}

impl Memory {
    pub fn name(self) -> &'static str {
        match self {
            Memory::X86 => "x86",
            Memory::Power => "power",
        }
    }

    pub fn from_name(name: &str) -> Option<Memory> {
        match name {
            "x86" => Some(Memory::X86),
            "power" => Some(Memory::Power),
            _ => None,
        }
    }
}

/// Registers per thread.
pub const NR_REGS: usize = 4;

/// Which CPUs an IPI goes to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Targets {
    /// These threads' CPUs (`mm_cpumask`).
    All(Vec<usize>),
    /// Thread `t`'s CPU if register `r` is not zero (the per-CPU counters
    /// read before).
    NonZero(Vec<(usize, usize)>),
}

/// One instruction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// `local_irq_disable`.
    IrqOff,
    /// `local_irq_enable`: takes a pending IPI.
    IrqOn,
    Store {
        var: Var,
        value: u64,
    },
    Load {
        var: Var,
        reg: usize,
    },
    /// A load from the page table whose number register `reg` holds.
    Deref {
        reg: usize,
        dest: usize,
    },
    /// `atomic_add`: see [`Memory`] for what it orders.
    AtomicAdd {
        var: Var,
        delta: i64,
    },
    /// A plain read-modify-write (`this_cpu_add` on a counter only this
    /// CPU writes): never a barrier.
    LocalAdd {
        var: Var,
        delta: i64,
    },
    /// `smp_mb`.
    Mb,
    /// Jumps forward to `to` if register `reg` is 0.
    JumpIfZero {
        reg: usize,
        to: usize,
    },
    /// Sends the IPI of `smp_call_function_many(mask, do_nothing, NULL, 1)`.
    SendIpi(Targets),
    /// Waits until every target has taken it.
    WaitIpi,
    /// Frees page table `table` (ghost state).
    Free {
        table: u64,
    },
}

/// One instruction with what it stands for in the kernel.
#[derive(Clone, Debug)]
pub struct Instr {
    pub op: Op,
    pub what: &'static str,
}

/// A thread's program.
#[derive(Clone, Debug)]
pub struct Program {
    /// `unmapper` or `walker`.
    pub role: &'static str,
    pub code: Vec<Instr>,
}

/// The whole machine's code and setup.
#[derive(Clone, Debug)]
pub struct Code {
    pub memory: Memory,
    /// Names of the shared variables, and their initial values.
    pub vars: Vec<(String, u64)>,
    /// Page table `n` (from 1) is the variable `tables[n - 1]`.
    pub tables: Vec<Var>,
    pub threads: Vec<Program>,
}

/// A thread's state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Thread {
    pc: u8,
    regs: [u64; NR_REGS],
    irq_on: bool,
    /// Stores not yet in memory, oldest first.
    buffer: Vec<(u8, u64)>,
    /// An IPI sent to this CPU not yet taken.
    ipi_pending: bool,
}

/// The machine's state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    mem: Vec<u64>,
    threads: Vec<Thread>,
    /// Which threads' CPUs the IPI in flight went to.
    ipi_targets: Vec<bool>,
    /// Page tables freed, bit `n` for table `n`.
    freed: u32,
    /// Thread and table of a dereference of a freed table.
    violation: Option<(u8, u8)>,
}

impl State {
    /// Thread `t`'s registers.
    pub fn regs(&self, t: usize) -> [u64; NR_REGS] {
        self.threads[t].regs
    }
}

impl Code {
    fn var_name(&self, var: Var) -> &str {
        &self.vars[var].0
    }

    fn thread_name(&self, t: usize) -> String {
        format!("T{t} {}", self.threads[t].role)
    }

    fn done(&self, state: &State, t: usize) -> bool {
        usize::from(state.threads[t].pc) >= self.threads[t].code.len()
    }

    /// Whether thread `t`'s next instruction can run now.
    fn can_run(&self, state: &State, t: usize) -> bool {
        let thread = &state.threads[t];
        match &self.threads[t].code[usize::from(thread.pc)].op {
            Op::WaitIpi => !state
                .ipi_targets
                .iter()
                .zip(&state.threads)
                .any(|(&target, th)| target && th.ipi_pending),
            Op::AtomicAdd { var, .. } if self.memory == Memory::Power => {
                // The reservation: another CPU's atomic to `var` not yet
                // in memory.
                !state.threads.iter().enumerate().any(|(u, other)| {
                    u != t && other.buffer.iter().any(|&(v, _)| usize::from(v) == *var)
                })
            }
            _ => true,
        }
    }

    /// The value a load of `var` by thread `t` sees, and whether it came
    /// from the thread's own buffer.
    fn read(&self, state: &State, t: usize, var: Var) -> (u64, bool) {
        match state.threads[t]
            .buffer
            .iter()
            .rev()
            .find(|&&(v, _)| usize::from(v) == var)
        {
            Some(&(_, value)) => (value, true),
            None => (state.mem[var], false),
        }
    }

    /// Drains thread `t`'s whole buffer, in order; says what reached
    /// memory.
    fn drain_all(&self, state: &mut State, t: usize) -> String {
        let buffer = std::mem::take(&mut state.threads[t].buffer);
        if buffer.is_empty() {
            return "buffer empty".to_string();
        }
        let parts: Vec<String> = buffer
            .iter()
            .map(|&(v, value)| {
                state.mem[usize::from(v)] = value;
                format!("{} = {value}", self.var_name(usize::from(v)))
            })
            .collect();
        format!("drains {}", parts.join(", "))
    }

    fn run(&self, state: &mut State, t: usize) -> String {
        let pc = usize::from(state.threads[t].pc);
        let instr = &self.threads[t].code[pc];
        state.threads[t].pc += 1;
        let what = match &instr.op {
            Op::IrqOff => {
                state.threads[t].irq_on = false;
                "interrupts off".to_string()
            }
            Op::IrqOn => {
                let thread = &mut state.threads[t];
                thread.irq_on = true;
                if thread.ipi_pending {
                    thread.ipi_pending = false;
                    "interrupts on; takes the IPI (do_nothing)".to_string()
                } else {
                    "interrupts on".to_string()
                }
            }
            Op::Store { var, value } => {
                state.threads[t].buffer.push((*var as u8, *value));
                format!("{} = {value} (buffered)", self.var_name(*var))
            }
            Op::Load { var, reg } => {
                let (value, own) = self.read(state, t, *var);
                state.threads[t].regs[*reg] = value;
                format!("load {} -> {value}{}", self.var_name(*var), from(own))
            }
            Op::Deref { reg, dest } => {
                let table = state.threads[t].regs[*reg];
                let var = self.tables[table as usize - 1];
                let (value, own) = self.read(state, t, var);
                state.threads[t].regs[*dest] = value;
                if state.freed & (1 << table) != 0 {
                    state.violation = Some((t as u8, table as u8));
                    format!(
                        "load {} -> USE AFTER FREE: page table {table} was freed",
                        self.var_name(var)
                    )
                } else {
                    format!("load {} -> {value}{}", self.var_name(var), from(own))
                }
            }
            Op::AtomicAdd { var, delta } if self.memory == Memory::X86 => {
                let drained = self.drain_all(state, t);
                let value = state.mem[*var].wrapping_add_signed(*delta);
                state.mem[*var] = value;
                format!(
                    "lock add {} -> {value} in memory (a full barrier: {drained})",
                    self.var_name(*var)
                )
            }
            Op::AtomicAdd { var, delta } | Op::LocalAdd { var, delta } => {
                let (old, own) = self.read(state, t, *var);
                let value = old.wrapping_add_signed(*delta);
                state.threads[t].buffer.push((*var as u8, value));
                format!(
                    "{} {old}{} -> {value} (buffered)",
                    self.var_name(*var),
                    from(own)
                )
            }
            Op::Mb => self.drain_all(state, t),
            Op::JumpIfZero { reg, to } => {
                let value = state.threads[t].regs[*reg];
                if value == 0 {
                    state.threads[t].pc = *to as u8;
                    "read 0: skip".to_string()
                } else {
                    format!("read {value}: go on")
                }
            }
            Op::SendIpi(targets) => {
                let chosen: Vec<usize> = match targets {
                    Targets::All(threads) => threads.clone(),
                    Targets::NonZero(pairs) => pairs
                        .iter()
                        .filter(|&&(_, reg)| state.threads[t].regs[reg] != 0)
                        .map(|&(thread, _)| thread)
                        .collect(),
                };
                let mut parts = Vec::new();
                state.ipi_targets = vec![false; state.threads.len()];
                for u in chosen {
                    state.ipi_targets[u] = true;
                    let target = &mut state.threads[u];
                    // A CPU with interrupts on takes it at once.
                    target.ipi_pending = !target.irq_on;
                    parts.push(format!(
                        "cpu{u} ({})",
                        if target.irq_on {
                            "interrupts on: taken"
                        } else {
                            "interrupts off: pending"
                        }
                    ));
                }
                if parts.is_empty() {
                    "IPI to no CPU".to_string()
                } else {
                    format!("IPI to {}", parts.join(", "))
                }
            }
            Op::WaitIpi => "every target took the IPI".to_string(),
            Op::Free { table } => {
                state.freed |= 1 << table;
                format!("page table {table} freed")
            }
        };
        format!("{}: {what}", instr.what)
    }
}

fn from(own_buffer: bool) -> &'static str {
    if own_buffer {
        " (from its own store buffer)"
    } else {
        ""
    }
}

impl System for Code {
    type State = State;

    fn initial(&self) -> State {
        State {
            mem: self.vars.iter().map(|&(_, v)| v).collect(),
            threads: self
                .threads
                .iter()
                .map(|_| Thread {
                    pc: 0,
                    regs: [0; NR_REGS],
                    irq_on: true,
                    buffer: Vec::new(),
                    ipi_pending: false,
                })
                .collect(),
            ipi_targets: vec![false; self.threads.len()],
            freed: 0,
            violation: None,
        }
    }

    fn choices(&self, state: &State) -> Vec<Choice> {
        if state.violation.is_some() {
            return Vec::new();
        }
        let mut choices = Vec::new();
        for t in 0..self.threads.len() {
            if !self.done(state, t) && self.can_run(state, t) {
                choices.push(Choice::Run(t));
            }
        }
        for (t, thread) in state.threads.iter().enumerate() {
            match self.memory {
                Memory::X86 => {
                    if let Some(&(var, _)) = thread.buffer.first() {
                        choices.push(Choice::Drain {
                            thread: t,
                            var: usize::from(var),
                            oldest: true,
                        });
                    }
                }
                Memory::Power => {
                    let mut vars: Vec<u8> = Vec::new();
                    for &(var, _) in &thread.buffer {
                        if !vars.contains(&var) {
                            vars.push(var);
                        }
                    }
                    for (i, var) in vars.into_iter().enumerate() {
                        choices.push(Choice::Drain {
                            thread: t,
                            var: usize::from(var),
                            oldest: i == 0,
                        });
                    }
                }
            }
        }
        choices
    }

    fn step(&self, state: &mut State, choice: Choice) -> Step {
        match choice {
            Choice::Run(t) => Step {
                who: format!("{} (cpu{t})", self.thread_name(t)),
                what: self.run(state, t),
            },
            Choice::Drain { thread, var, .. } => {
                let buffer = &mut state.threads[thread].buffer;
                let at = buffer
                    .iter()
                    .position(|&(v, _)| usize::from(v) == var)
                    .expect("a drain of a buffered variable");
                let (_, value) = buffer.remove(at);
                state.mem[var] = value;
                Step {
                    who: format!("cpu{thread} store buffer"),
                    what: format!("{} = {value} reaches memory", self.var_name(var)),
                }
            }
        }
    }

    fn violation(&self, state: &State) -> Option<String> {
        state.violation.map(|(t, table)| {
            format!(
                "{} dereferenced page table {table} after it was freed",
                self.thread_name(usize::from(t))
            )
        })
    }

    fn finished(&self, state: &State) -> bool {
        (0..self.threads.len()).all(|t| self.done(state, t))
    }

    fn programs(&self) -> Vec<String> {
        self.threads
            .iter()
            .enumerate()
            .map(|(t, program)| {
                let steps: Vec<&str> = program.code.iter().map(|i| i.what).collect();
                format!("{}: {}", self.thread_name(t), steps.join("; "))
            })
            .collect()
    }

    fn token(&self, choice: Choice) -> String {
        match choice {
            Choice::Run(t) => t.to_string(),
            Choice::Drain {
                thread,
                oldest: true,
                ..
            } => format!("d{thread}"),
            Choice::Drain { thread, var, .. } => format!("d{thread}:{}", self.var_name(var)),
        }
    }
}
