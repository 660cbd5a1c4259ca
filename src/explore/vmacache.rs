//! CVE-2018-17182 as a protocol: the per-thread VMA cache of 3.15
//! (615d6e8756c8) with the shortcut 3.16 added to `vmacache_flush_all`
//! (6b4ebc3a9078: return at once when `mm_users` is 1, since a
//! single-threaded process's own cache would be flushed at its next
//! lookup anyway, its seqnum being stale).
//!
//! The race is one of logic, not of memory order: every step is a whole
//! system call run under `mmap_sem`, and the schedule only chooses which
//! thread runs its next one. Thread A, alone in its process, caches VMA X,
//! unmaps it (the seqnum wraps to 0: the shortcut skips the flush, and A's
//! slot still points at the freed X with A's seqnum the one before the
//! wrap), then clones B. B maps and unmaps a page until the mm's seqnum is
//! back at A's. A's next lookup finds its seqnum current and takes the
//! freed X from its slot (Jann Horn's report, 2018).
//!
//! The model is written for this search, not taken from `mm::vmacache`,
//! which keeps the cache inside a whole kernel and has no shortcut (its
//! `vmacache_flush_all` is 3.15's); it takes the slot hash and the slot
//! count from there. The seqnum is `seqnum_bits` wide instead of 32, so
//! that a wrap is 2^bits invalidations rather than 2^32; nothing in the
//! logic depends on the width. It starts one invalidation before the wrap,
//! as `set_vmacache_seqnum` starts the kernel test of the same sequence
//! (`kernel::tests::seqnum_wrap_flushes_every_thread_of_the_mm`).
//! `vm_area_struct`s are never reused: the property fails at the first read
//! of a freed one, before any reuse could matter.

use super::search::{Choice, Step, System};
use crate::mm::vmacache::{VMACACHE_SIZE, vmacache_hash};

/// Which kernel's VMA cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    /// 3.15: `vmacache_flush_all` flushes every thread of the mm.
    V3_15,
    /// 3.16 to 4.18: it returns at once when `mm_users` is 1.
    V3_16,
    /// 4.19 (7a9cdebdcc17): a 64-bit seqnum and no `vmacache_flush_all`:
    /// it never wraps (in the model it is 32 bits wide, wider than any
    /// schedule's count of invalidations).
    V4_19,
}

/// Where X is mapped; B's page goes at `B_ADDR`.
const X_ADDR: u64 = 0x7f00_0001_0000;
const B_ADDR: u64 = 0x7f00_0002_0000;

/// A system call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Call {
    /// `find_vma(addr)`.
    FindVma(u64),
    /// `mmap(addr, 4096, MAP_FIXED)`: a new VMA.
    Mmap(u64),
    /// `munmap(addr, 4096)`.
    Munmap(u64),
    /// `clone(CLONE_VM)`: starts thread B.
    Clone,
}

/// The protocol's two threads' programs.
#[derive(Clone, Debug)]
pub struct Vmacache {
    kernel: Kernel,
    bits: u32,
    programs: [Vec<Call>; 2],
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Task {
    started: bool,
    pc: u16,
    /// `current->vmacache.seqnum`.
    seqnum: u32,
    /// `current->vmacache.vmas`: VMA numbers.
    slots: [Option<u16>; VMACACHE_SIZE],
}

/// The state: the mm, its VMAs, the two tasks.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// `mm->vmacache_seqnum`.
    seqnum: u32,
    mm_users: u8,
    /// VMAs made so far (the next one's number).
    nr_vmas: u16,
    /// The VMAs that matter: each mapped one, and each freed one a slot
    /// still points at (the others can never be read again); their number,
    /// address, whether mapped, whether freed.
    vmas: Vec<(u16, u64, bool, bool)>,
    tasks: [Task; 2],
    /// The task that read a freed VMA, and the VMA.
    violation: Option<(u8, u16)>,
}

impl Vmacache {
    /// The protocol with a seqnum `bits` wide (1 to 16).
    pub fn new(kernel: Kernel, bits: u32) -> Vmacache {
        let wrap = 1u32 << bits;
        let a = vec![
            Call::FindVma(X_ADDR),
            Call::Munmap(X_ADDR),
            Call::Clone,
            Call::FindVma(X_ADDR),
        ];
        // From 0 back to A's seqnum, one before the wrap.
        let mut b = Vec::new();
        for _ in 0..wrap - 1 {
            b.push(Call::Mmap(B_ADDR));
            b.push(Call::Munmap(B_ADDR));
        }
        Vmacache {
            kernel,
            bits,
            programs: [a, b],
        }
    }

    fn mask(&self) -> u32 {
        if self.kernel == Kernel::V4_19 {
            u32::MAX
        } else {
            (1u32 << self.bits) - 1
        }
    }

    fn name(t: usize) -> &'static str {
        ["A", "B"][t]
    }

    /// The VMA in the tree containing `addr`.
    fn tree_lookup(state: &State, addr: u64) -> Option<u16> {
        state
            .vmas
            .iter()
            .find(|&&(_, at, mapped, _)| mapped && at == addr)
            .map(|&(n, ..)| n)
    }

    /// The entry of VMA `n`.
    fn vma(state: &mut State, n: u16) -> &mut (u16, u64, bool, bool) {
        state
            .vmas
            .iter_mut()
            .find(|v| v.0 == n)
            .expect("a VMA a slot or the tree holds")
    }

    /// Forgets the freed VMAs no slot points at.
    fn forget_unreachable(state: &mut State) {
        let tasks = &state.tasks;
        state
            .vmas
            .retain(|&(n, _, _, freed)| !freed || tasks.iter().any(|t| t.slots.contains(&Some(n))));
    }

    /// `find_vma` by task `t`: `vmacache_find`, then the tree and
    /// `vmacache_update`. Says what happened; sets the violation on a read
    /// of a freed VMA.
    fn find_vma(&self, state: &mut State, t: usize, addr: u64) -> (Option<u16>, String) {
        let mm_seqnum = state.seqnum;
        let task = &mut state.tasks[t];
        if task.seqnum != mm_seqnum {
            let old = task.seqnum;
            task.seqnum = mm_seqnum;
            task.slots = [None; VMACACHE_SIZE];
            let found = Self::tree_lookup(state, addr);
            if let Some(n) = found {
                state.tasks[t].slots[vmacache_hash(addr)] = Some(n);
            }
            return (
                found,
                format!(
                    "seqnum {old} is stale (mm's {mm_seqnum}): flush, take it; tree: {}",
                    vma_name(found)
                ),
            );
        }
        let slots = task.slots;
        for (slot, cached) in slots.iter().enumerate() {
            let Some(n) = *cached else { continue };
            let (_, at, _, freed) = *Self::vma(state, n);
            if freed {
                state.violation = Some((t as u8, n));
                return (
                    Some(n),
                    format!(
                        "seqnum {mm_seqnum} current; slot {slot} holds VMA#{n}, freed: USE AFTER FREE"
                    ),
                );
            }
            if at == addr {
                return (
                    Some(n),
                    format!("seqnum {mm_seqnum} current; hit VMA#{n} in slot {slot}"),
                );
            }
        }
        let found = Self::tree_lookup(state, addr);
        if let Some(n) = found {
            state.tasks[t].slots[vmacache_hash(addr)] = Some(n);
        }
        (
            found,
            format!(
                "seqnum {mm_seqnum} current; miss; tree: {}",
                vma_name(found)
            ),
        )
    }

    /// `vmacache_invalidate`, and `vmacache_flush_all` on a wrap.
    fn invalidate(&self, state: &mut State) -> String {
        state.seqnum = state.seqnum.wrapping_add(1) & self.mask();
        let mut said = format!("mm seqnum -> {}", state.seqnum);
        if state.seqnum == 0 && self.kernel != Kernel::V4_19 {
            if self.kernel == Kernel::V3_16 && state.mm_users == 1 {
                said += "; wrapped: vmacache_flush_all returns at once (mm_users is 1)";
            } else {
                for task in state.tasks.iter_mut().filter(|t| t.started) {
                    task.slots = [None; VMACACHE_SIZE];
                }
                said += "; wrapped: vmacache_flush_all flushes every thread";
            }
        }
        said
    }

    fn call(&self, state: &mut State, t: usize, call: Call) -> String {
        match call {
            Call::FindVma(addr) => {
                let (_, said) = self.find_vma(state, t, addr);
                format!("find_vma({addr:#x}): {said}")
            }
            Call::Mmap(addr) => {
                let n = state.nr_vmas;
                state.nr_vmas += 1;
                state.vmas.push((n, addr, true, false));
                format!("mmap({addr:#x}): VMA#{n} (no invalidation)")
            }
            Call::Munmap(addr) => {
                let (found, looked) = self.find_vma(state, t, addr);
                let Some(n) = found.filter(|_| state.violation.is_none()) else {
                    return format!("munmap({addr:#x}): find_vma: {looked}");
                };
                Self::vma(state, n).2 = false;
                let invalidated = self.invalidate(state);
                Self::vma(state, n).3 = true;
                format!(
                    "munmap({addr:#x}): find_vma: {looked}; unlink VMA#{n}, {invalidated}; VMA#{n} freed"
                )
            }
            Call::Clone => {
                let seqnum = state.tasks[t].seqnum;
                state.mm_users += 1;
                state.tasks[1] = Task {
                    started: true,
                    pc: 0,
                    seqnum,
                    slots: [None; VMACACHE_SIZE],
                };
                format!(
                    "clone(CLONE_VM): B starts with seqnum {seqnum}, its slots flushed; mm_users {}",
                    state.mm_users
                )
            }
        }
    }
}

impl std::fmt::Display for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Call::FindVma(addr) => write!(f, "find_vma({addr:#x})"),
            Call::Mmap(addr) => write!(f, "mmap({addr:#x})"),
            Call::Munmap(addr) => write!(f, "munmap({addr:#x})"),
            Call::Clone => write!(f, "clone(CLONE_VM)"),
        }
    }
}

fn vma_name(n: Option<u16>) -> String {
    n.map_or("none".to_string(), |n| format!("VMA#{n}"))
}

impl System for Vmacache {
    type State = State;

    fn initial(&self) -> State {
        let task = |started| Task {
            started,
            pc: 0,
            seqnum: 0,
            slots: [None; VMACACHE_SIZE],
        };
        State {
            // One invalidation before the wrap of a `bits`-wide seqnum.
            seqnum: (1u32 << self.bits) - 1,
            mm_users: 1,
            nr_vmas: 1,
            vmas: vec![(0, X_ADDR, true, false)],
            tasks: [task(true), task(false)],
            violation: None,
        }
    }

    fn choices(&self, state: &State) -> Vec<Choice> {
        if state.violation.is_some() {
            return Vec::new();
        }
        (0..2)
            .filter(|&t| {
                let task = &state.tasks[t];
                task.started && usize::from(task.pc) < self.programs[t].len()
            })
            .map(Choice::Run)
            .collect()
    }

    fn step(&self, state: &mut State, choice: Choice) -> Step {
        let Choice::Run(t) = choice else {
            unreachable!("no store buffers here")
        };
        let call = self.programs[t][usize::from(state.tasks[t].pc)];
        state.tasks[t].pc += 1;
        let what = self.call(state, t, call);
        Self::forget_unreachable(state);
        Step {
            who: Self::name(t).to_string(),
            what,
        }
    }

    fn violation(&self, state: &State) -> Option<String> {
        state.violation.map(|(t, n)| {
            format!(
                "task {} read VMA#{n} from its cache after VMA#{n} was freed",
                Self::name(usize::from(t))
            )
        })
    }

    fn finished(&self, state: &State) -> bool {
        (0..2).all(|t| usize::from(state.tasks[t].pc) >= self.programs[t].len())
    }

    fn programs(&self) -> Vec<String> {
        let a: Vec<String> = self.programs[0].iter().map(|c| c.to_string()).collect();
        vec![
            format!("A: {}", a.join("; ")),
            format!(
                "B: {} times: {}; {}",
                self.programs[1].len() / 2,
                Call::Mmap(B_ADDR),
                Call::Munmap(B_ADDR)
            ),
        ]
    }

    fn token(&self, choice: Choice) -> String {
        match choice {
            Choice::Run(t) => Self::name(t).to_lowercase(),
            Choice::Drain { .. } => unreachable!("no store buffers here"),
        }
    }
}
