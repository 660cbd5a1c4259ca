//! The busy spans of one shared object (a cache line, a lock) in virtual time.
//!
//! CPUs are stepped one at a time, so a CPU whose step ran first may already
//! have used an object at a virtual time later than the clock of the CPU being
//! stepped now. A single "busy until" mark would make the later-stepped CPU
//! wait for that future use even though, as of its own clock, the object was
//! free. A timeline instead remembers when the object was busy, so each CPU
//! sees the object as of its own clock and can use a gap before a later use.
//!
//! Memory is bounded: spans that end at or before the engine's horizon (the
//! clock at which the current step began; no CPU acts earlier than that) are
//! dropped, and past [`SPANS_MAX`] the oldest span is folded into a floor
//! before which nothing may be placed any more (a conservative loss of gaps).

use super::time::Cycles;

/// How many busy spans one object remembers. Beyond this, gaps before the
/// oldest remembered span are given up (see [`Timeline::push`]).
pub(crate) const SPANS_MAX: usize = 64;

/// One use of an object, busy over `[start, end)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Span<T> {
    pub(crate) start: Cycles,
    pub(crate) end: Cycles,
    pub(crate) data: T,
}

impl<T> Span<T> {
    /// Whether `[s, s + len)` meets this span; for `len` zero, whether the
    /// span contains the instant `s`.
    pub(crate) fn meets(&self, s: Cycles, len: Cycles) -> bool {
        let probe_end = s + Cycles(len.0.max(1));
        self.start < probe_end && s < self.end
    }
}

/// Spans in order of start (they may overlap: readers of a semaphore do).
#[derive(Clone, Debug)]
pub(crate) struct Timeline<T> {
    /// Nothing may be placed before this: spans before it were forgotten.
    floor: Cycles,
    spans: Vec<Span<T>>,
}

impl<T> Default for Timeline<T> {
    fn default() -> Self {
        Timeline {
            floor: Cycles::ZERO,
            spans: Vec::new(),
        }
    }
}

impl<T: Copy + PartialEq> Timeline<T> {
    pub(crate) fn floor(&self) -> Cycles {
        self.floor
    }

    pub(crate) fn spans(&self) -> &[Span<T>] {
        &self.spans
    }

    /// Forgets the spans that end at or before `horizon`, passing each to
    /// `fold` in order of start. No CPU asks about a time before the horizon.
    pub(crate) fn prune(&mut self, horizon: Cycles, mut fold: impl FnMut(&Span<T>)) {
        if self.spans.first().is_none_or(|s| s.start >= horizon) {
            return;
        }
        self.spans.retain(|span| {
            let done = span.end <= horizon;
            if done {
                fold(span);
            }
            !done
        });
    }

    /// Records a span, keeping start order; a span that continues the one
    /// before it with the same data extends it. Past [`SPANS_MAX`] spans the
    /// oldest is passed to `fold` and the floor rises to its end.
    pub(crate) fn push(&mut self, span: Span<T>, mut fold: impl FnMut(&Span<T>)) {
        assert!(
            span.start < span.end,
            "empty span {}..{}",
            span.start.0,
            span.end.0
        );
        assert!(
            span.start >= self.floor,
            "span at {} placed before the floor {}",
            span.start.0,
            self.floor.0
        );
        let at = self.spans.partition_point(|s| s.start <= span.start);
        let next_start = self.spans.get(at).map(|next| next.start);
        if let Some(prev) = at.checked_sub(1).map(|i| &mut self.spans[i]) {
            let continues = prev.end == span.start && prev.data == span.data;
            if continues && next_start.is_none_or(|start| start >= span.end) {
                prev.end = span.end;
                return;
            }
        }
        self.spans.insert(at, span);
        if self.spans.len() > SPANS_MAX {
            let oldest = self.spans.remove(0);
            self.floor = self.floor.max(oldest.end);
            fold(&oldest);
        }
    }

    /// The latest end among the spans accepted by `filter` that `[s, s + len)`
    /// meets, if any.
    pub(crate) fn blocked_until(
        &self,
        s: Cycles,
        len: Cycles,
        filter: impl Fn(&Span<T>) -> bool,
    ) -> Option<Cycles> {
        self.latest_end_where(|span| span.meets(s, len) && filter(span))
    }

    /// The latest end among the spans accepted by `filter`, if any.
    pub(crate) fn latest_end_where(&self, filter: impl Fn(&Span<T>) -> bool) -> Option<Cycles> {
        self.spans
            .iter()
            .filter(|span| filter(span))
            .map(|span| span.end)
            .max()
    }
}

/// The earliest time at or after `t` for which `blocked_until` returns None.
/// `blocked_until(s)` must return a time later than `s`; every return must
/// pass the end of at least one span, so `spans_max` spans bound the search.
pub(crate) fn earliest(
    t: Cycles,
    spans_max: usize,
    blocked_until: impl Fn(Cycles) -> Option<Cycles>,
) -> Cycles {
    let mut s = t;
    for _ in 0..=spans_max {
        match blocked_until(s) {
            None => return s,
            Some(end) => {
                assert!(end > s, "a span blocking {} ends at {}", s.0, end.0);
                s = end;
            }
        }
    }
    panic!("no free time found after {} in {} spans", t.0, spans_max);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(start: u64, end: u64) -> Span<()> {
        Span {
            start: Cycles(start),
            end: Cycles(end),
            data: (),
        }
    }

    fn timeline(spans: &[(u64, u64)]) -> Timeline<()> {
        let mut t = Timeline::default();
        for &(start, end) in spans {
            t.push(span(start, end), |_| {});
        }
        t
    }

    fn fit<T: Copy + PartialEq>(t: &Timeline<T>, at: u64, len: u64) -> u64 {
        let len = Cycles(len);
        let s = earliest(Cycles(at).max(t.floor()), t.spans().len(), |s| {
            t.blocked_until(s, len, |_| true)
        });
        s.0
    }

    #[test]
    fn fits_in_a_gap_before_a_later_span() {
        let t = timeline(&[(100, 200), (300, 400)]);
        assert_eq!(fit(&t, 0, 100), 0);
        assert_eq!(fit(&t, 150, 50), 200);
        assert_eq!(fit(&t, 150, 100), 200);
        assert_eq!(fit(&t, 150, 101), 400);
        assert_eq!(fit(&t, 250, 0), 250);
        assert_eq!(fit(&t, 300, 0), 400);
    }

    #[test]
    fn contiguous_spans_are_skipped_together() {
        let mut t = Timeline::default();
        for (i, &(start, end)) in [(100, 200), (200, 300), (300, 400)].iter().enumerate() {
            t.push(
                Span {
                    start: Cycles(start),
                    end: Cycles(end),
                    data: i,
                },
                |_| {},
            );
        }
        assert_eq!(t.spans().len(), 3);
        assert_eq!(fit(&t, 150, 0), 400);
        assert_eq!(fit(&t, 50, 60), 400);
    }

    #[test]
    fn a_span_continuing_the_previous_one_extends_it() {
        let t = timeline(&[(100, 200), (200, 300), (300, 400)]);
        assert_eq!(t.spans(), &[span(100, 400)]);
        let mut t = timeline(&[(100, 200), (250, 300)]);
        t.push(span(200, 250), |_| {});
        assert_eq!(t.spans().len(), 2);
        assert_eq!(t.spans()[0], span(100, 250));
    }

    #[test]
    fn prune_forgets_only_finished_spans_in_start_order() {
        let mut t = timeline(&[(100, 200), (150, 500), (300, 400)]);
        let mut folded = Vec::new();
        t.prune(Cycles(400), |s| folded.push((s.start.0, s.end.0)));
        assert_eq!(folded, vec![(100, 200), (300, 400)]);
        assert_eq!(t.spans().len(), 1);
        assert_eq!(t.floor(), Cycles::ZERO);
    }

    #[test]
    fn overflow_folds_the_oldest_and_raises_the_floor() {
        let mut t = Timeline::default();
        let mut folded = 0;
        for i in 0..(SPANS_MAX as u64 + 3) {
            t.push(span(i * 10, i * 10 + 5), |_| folded += 1);
        }
        assert_eq!(t.spans().len(), SPANS_MAX);
        assert_eq!(folded, 3);
        assert_eq!(t.floor(), Cycles(25));
        // The gap at 5..10 is forgotten; the one at 25..30 is still usable.
        assert_eq!(fit(&t, 0, 5), 25);
    }
}
