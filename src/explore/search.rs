//! The search over schedules, for any [`System`]: a schedule is the
//! sequence of choices made from the initial state (which thread steps, or
//! which buffered store drains) until no choice is left or the property
//! fails.
//!
//! Exhaustive search visits every reachable state once (states are
//! deduplicated), counts the schedules through each (a memoised sum over
//! the state graph, which has no cycles: every step runs an instruction or
//! drains a store), and finds a shortest failing schedule breadth first.
//! Random search draws whole schedules, each choice uniform among those
//! possible, from a seeded generator. Either way the result depends only on
//! the arguments: no host time, and hash maps are only looked up, never
//! iterated.

use std::collections::HashMap;
use std::hash::Hash;

use crate::sim::Rng;

/// One choice of a schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Choice {
    /// Thread `n` runs its next instruction.
    Run(usize),
    /// The oldest store to `var` in thread `thread`'s CPU's store buffer
    /// reaches memory; `oldest` if it is the oldest store in the buffer.
    Drain {
        thread: usize,
        var: usize,
        oldest: bool,
    },
}

/// What one step did, for printing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    /// Who: `T1 walker`, or `cpu1 buffer` for a drain.
    pub who: String,
    /// What: the operation with the values it read or wrote.
    pub what: String,
}

/// A model the search can explore: a static description (`self`) and a
/// state that every step changes.
pub trait System {
    type State: Clone + Eq + Hash;

    fn initial(&self) -> Self::State;

    /// The choices possible in `state`, in a fixed order; none once the
    /// property has failed.
    fn choices(&self, state: &Self::State) -> Vec<Choice>;

    /// Makes `choice` (one of [`System::choices`]) and says what it did.
    fn step(&self, state: &mut Self::State, choice: Choice) -> Step;

    /// How the property failed in `state`, if it did.
    fn violation(&self, state: &Self::State) -> Option<String>;

    /// Whether every thread ran to its end (a state with no choice left
    /// that is neither this nor a violation is a deadlock).
    fn finished(&self, state: &Self::State) -> bool;

    /// Each thread's program, one line each, for the report.
    fn programs(&self) -> Vec<String>;

    /// The replay token of a choice: `1` runs thread 1, `d1` drains its
    /// CPU's oldest store, `d1:count` its oldest store to `count`.
    fn token(&self, choice: Choice) -> String;
}

/// Schedules counted, split by how they end.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub schedules: u128,
    pub violating: u128,
    pub deadlocked: u128,
}

impl Counts {
    fn add(&mut self, other: Counts) {
        self.schedules = self.schedules.saturating_add(other.schedules);
        self.violating = self.violating.saturating_add(other.violating);
        self.deadlocked = self.deadlocked.saturating_add(other.deadlocked);
    }
}

/// What an exhaustive search found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exhaustive {
    /// Distinct states reached.
    pub states: usize,
    pub counts: Counts,
    /// A shortest schedule that fails the property.
    pub shortest: Option<Vec<Choice>>,
}

/// Every schedule from the initial state, if the states number at most
/// `max_states`; `None` if they are more.
pub fn exhaustive<S: System>(system: &S, max_states: usize) -> Option<Exhaustive> {
    let mut memo: HashMap<S::State, Counts> = HashMap::new();
    let initial = system.initial();
    let counts = count_from(system, &initial, &mut memo, max_states)?;
    let states = memo.len();
    drop(memo);
    let shortest = if counts.violating > 0 {
        shortest_violation(system, max_states)
    } else {
        None
    };
    Some(Exhaustive {
        states,
        counts,
        shortest,
    })
}

/// The schedules from `state` to an end, memoised per state: a depth-first
/// walk with its own stack (schedules run to thousands of steps).
fn count_from<S: System>(
    system: &S,
    state: &S::State,
    memo: &mut HashMap<S::State, Counts>,
    max_states: usize,
) -> Option<Counts> {
    struct Frame<T> {
        state: T,
        choices: Vec<Choice>,
        next: usize,
        counts: Counts,
    }
    let frame = |state: S::State| {
        let choices = system.choices(&state);
        let mut counts = Counts::default();
        if choices.is_empty() {
            counts.schedules = 1;
            if system.violation(&state).is_some() {
                counts.violating = 1;
            } else if !system.finished(&state) {
                counts.deadlocked = 1;
            }
        }
        Frame {
            state,
            choices,
            next: 0,
            counts,
        }
    };
    if let Some(&counts) = memo.get(state) {
        return Some(counts);
    }
    let mut stack = vec![frame(state.clone())];
    loop {
        let top = stack.last_mut().expect("the stack holds the start");
        if top.next < top.choices.len() {
            let mut next = top.state.clone();
            system.step(&mut next, top.choices[top.next]);
            top.next += 1;
            match memo.get(&next) {
                Some(&counts) => top.counts.add(counts),
                None => stack.push(frame(next)),
            }
            continue;
        }
        let done = stack.pop().expect("the top");
        if memo.len() >= max_states {
            return None;
        }
        memo.insert(done.state, done.counts);
        match stack.last_mut() {
            Some(parent) => parent.counts.add(done.counts),
            None => return Some(done.counts),
        }
    }
}

/// Breadth first from the initial state to the first state that fails.
fn shortest_violation<S: System>(system: &S, max_states: usize) -> Option<Vec<Choice>> {
    // Each visited state: its parent's index and the choice from it.
    let mut seen: HashMap<S::State, usize> = HashMap::new();
    let mut nodes: Vec<(usize, Option<Choice>)> = vec![(0, None)];
    let mut queue = std::collections::VecDeque::new();
    let initial = system.initial();
    seen.insert(initial.clone(), 0);
    queue.push_back((initial, 0));
    while let Some((state, index)) = queue.pop_front() {
        if system.violation(&state).is_some() {
            let mut path = Vec::new();
            let mut at = index;
            while let (parent, Some(choice)) = nodes[at] {
                path.push(choice);
                at = parent;
            }
            path.reverse();
            return Some(path);
        }
        for choice in system.choices(&state) {
            let mut next = state.clone();
            system.step(&mut next, choice);
            if seen.contains_key(&next) || seen.len() >= max_states {
                continue;
            }
            nodes.push((index, Some(choice)));
            seen.insert(next.clone(), nodes.len() - 1);
            queue.push_back((next, nodes.len() - 1));
        }
    }
    None
}

/// What a random search found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Random {
    pub counts: Counts,
    /// The first failing schedule drawn, and its number (from 1).
    pub first: Option<(u64, Vec<Choice>)>,
}

/// `schedules` schedules, each drawn choice by choice from `seed`.
pub fn random<S: System>(system: &S, seed: u64, schedules: u64) -> Random {
    let mut rng = Rng::new(seed);
    let mut counts = Counts::default();
    let mut first = None;
    for number in 1..=schedules {
        let mut state = system.initial();
        let mut path = Vec::new();
        loop {
            let choices = system.choices(&state);
            if choices.is_empty() {
                break;
            }
            let choice = choices[rng.below(choices.len() as u64) as usize];
            system.step(&mut state, choice);
            path.push(choice);
        }
        counts.schedules += 1;
        if system.violation(&state).is_some() {
            counts.violating += 1;
            if first.is_none() {
                first = Some((number, path));
            }
        } else if !system.finished(&state) {
            counts.deadlocked += 1;
        }
    }
    Random { counts, first }
}

/// A schedule run step by step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trace {
    pub steps: Vec<(Choice, Step)>,
    pub violation: Option<String>,
    /// No choice was left at the end (the schedule is complete).
    pub complete: bool,
    pub deadlocked: bool,
}

/// Runs `tokens` (as [`System::token`] writes them) from the initial state.
/// A token that names no possible choice is an error saying which step and
/// what was possible there.
pub fn replay<S: System>(system: &S, tokens: &[String]) -> Result<Trace, String> {
    let mut state = system.initial();
    let mut steps = Vec::new();
    for (i, token) in tokens.iter().enumerate() {
        let choices = system.choices(&state);
        if choices.is_empty() {
            return Err(format!(
                "the schedule ends after step {i}, but it goes on with '{}'",
                crate::util::escape(token)
            ));
        }
        let Some(&choice) = choices.iter().find(|&&c| system.token(c) == *token) else {
            let possible: Vec<String> = choices.iter().map(|&c| system.token(c)).collect();
            return Err(format!(
                "step {}: '{}' is not possible there (possible: {})",
                i + 1,
                crate::util::escape(token),
                possible.join(", ")
            ));
        };
        let step = system.step(&mut state, choice);
        steps.push((choice, step));
    }
    let violation = system.violation(&state);
    let complete = system.choices(&state).is_empty();
    let deadlocked = complete && violation.is_none() && !system.finished(&state);
    Ok(Trace {
        steps,
        violation,
        complete,
        deadlocked,
    })
}

/// Runs a schedule known to be possible (one the search produced).
pub fn trace<S: System>(system: &S, schedule: &[Choice]) -> Trace {
    let tokens: Vec<String> = schedule.iter().map(|&c| system.token(c)).collect();
    replay(system, &tokens).expect("a schedule the search produced replays")
}
