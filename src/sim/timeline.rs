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

use std::collections::VecDeque;

use super::time::Cycles;

/// How many busy spans one object remembers. Beyond this, gaps before the
/// oldest remembered span are given up (see [`Timeline::push`]).
pub(crate) const SPANS_MAX: usize = 4096;

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

/// Whether the spans of a timeline may overlap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sharing {
    /// One use at a time: a cache line's transfers, a lock's holds.
    Exclusive,
    /// Uses may overlap: the holds of a semaphore's readers.
    Shared,
}

/// Spans in order of start.
#[derive(Clone, Debug)]
pub(crate) struct Timeline<T> {
    sharing: Sharing,
    /// Nothing may be placed before this: spans before it were forgotten.
    floor: Cycles,
    spans: VecDeque<Span<T>>,
}

impl<T> Default for Timeline<T> {
    fn default() -> Self {
        Timeline::new(Sharing::Exclusive)
    }
}

impl<T> Timeline<T> {
    pub(crate) fn new(sharing: Sharing) -> Timeline<T> {
        Timeline {
            sharing,
            floor: Cycles::ZERO,
            spans: VecDeque::new(),
        }
    }
}

impl<T: Copy + PartialEq> Timeline<T> {
    pub(crate) fn floor(&self) -> Cycles {
        self.floor
    }

    /// Whether nothing is placed at or after `t`, so a use could start there
    /// without a search (for an exclusive timeline, whose last span ends
    /// last).
    pub(crate) fn idle_from(&self, t: Cycles) -> bool {
        t >= self.floor && self.spans.back().is_none_or(|last| last.end <= t)
    }

    /// How many spans have begun by `s`.
    pub(crate) fn count_begun_by(&self, s: Cycles) -> usize {
        self.spans.partition_point(|span| span.start <= s)
    }

    /// The first `count` spans, latest last.
    pub(crate) fn first_spans(&self, count: usize) -> impl DoubleEndedIterator<Item = &Span<T>> {
        self.spans.range(..count)
    }

    /// Forgets the spans that end at or before `horizon`, oldest first,
    /// passing each to `fold`. No CPU asks about a time before the horizon.
    /// (Of overlapping spans, one that ends early may be kept until those
    /// starting before it go; it no longer blocks anything.)
    pub(crate) fn prune(&mut self, horizon: Cycles, mut fold: impl FnMut(&Span<T>)) {
        while let Some(oldest) = self.spans.front().filter(|span| span.end <= horizon) {
            fold(oldest);
            self.spans.pop_front();
        }
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
        if self.sharing == Sharing::Exclusive {
            let prev_end = at.checked_sub(1).map(|i| self.spans[i].end);
            assert!(
                prev_end.is_none_or(|end| end <= span.start),
                "span at {} overlaps the one before",
                span.start.0
            );
            assert!(
                next_start.is_none_or(|start| span.end <= start),
                "span at {} overlaps the one after",
                span.start.0
            );
        }
        if let Some(prev) = at.checked_sub(1).map(|i| &mut self.spans[i]) {
            let continues = prev.end == span.start && prev.data == span.data;
            if continues && next_start.is_none_or(|start| start >= span.end) {
                prev.end = span.end;
                return;
            }
        }
        self.spans.insert(at, span);
        if self.spans.len() > SPANS_MAX {
            let oldest = self.spans.pop_front().expect("more than SPANS_MAX spans");
            self.floor = self.floor.max(oldest.end);
            fold(&oldest);
        }
    }

    /// For an exclusive timeline: the earliest `s` at or after `t` (and the
    /// floor) such that `[s, s + len_at(s, n))` meets no span, where
    /// `len_at(s, n)` is how long a use beginning at `s` would be (zero: not
    /// inside a span) and `n` how many spans have begun by `s` (so the caller
    /// need not search for them). Walks forward once through the spans.
    pub(crate) fn earliest_fit(
        &self,
        t: Cycles,
        mut len_at: impl FnMut(Cycles, usize) -> Cycles,
    ) -> Cycles {
        assert_eq!(
            self.sharing,
            Sharing::Exclusive,
            "earliest_fit on overlapping spans"
        );
        let mut s = t.max(self.floor);
        let mut i = self.spans.partition_point(|span| span.start <= s);
        if let Some(before) = i.checked_sub(1).map(|j| &self.spans[j]) {
            s = s.max(before.end);
        }
        loop {
            // Skip spans that begin where the last one ended.
            while let Some(next) = self.spans.get(i).filter(|next| next.start <= s) {
                s = s.max(next.end);
                i += 1;
            }
            match self.spans.get(i) {
                Some(next) if next.start < s + len_at(s, i) => {
                    s = next.end;
                    i += 1;
                }
                _ => return s,
            }
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

    /// Both searches, which must agree on an exclusive timeline.
    fn fit<T: Copy + PartialEq>(t: &Timeline<T>, at: u64, len: u64) -> u64 {
        let len = Cycles(len);
        let walked = t.earliest_fit(Cycles(at), |_, _| len);
        let searched = earliest(Cycles(at).max(t.floor()), SPANS_MAX, |s| {
            t.blocked_until(s, len, |_| true)
        });
        assert_eq!(walked, searched, "at {at} for {}", len.0);
        walked.0
    }

    fn spans<T: Copy + PartialEq>(t: &Timeline<T>) -> Vec<Span<T>> {
        t.spans.iter().copied().collect()
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
        assert_eq!(spans(&t).len(), 3);
        assert_eq!(fit(&t, 150, 0), 400);
        assert_eq!(fit(&t, 50, 60), 400);
    }

    #[test]
    fn a_span_continuing_the_previous_one_extends_it() {
        let t = timeline(&[(100, 200), (200, 300), (300, 400)]);
        assert_eq!(spans(&t), vec![span(100, 400)]);
        let mut t = timeline(&[(100, 200), (250, 300)]);
        t.push(span(200, 250), |_| {});
        assert_eq!(spans(&t), vec![span(100, 250), span(250, 300)]);
    }

    #[test]
    fn prune_forgets_finished_spans_from_the_oldest() {
        let mut t = timeline(&[(100, 200), (200, 300), (300, 400), (400, 500)]);
        t.push(span(600, 700), |_| {});
        let mut folded = Vec::new();
        t.prune(Cycles(650), |s| folded.push((s.start.0, s.end.0)));
        assert_eq!(folded, vec![(100, 500)]);
        assert_eq!(spans(&t), vec![span(600, 700)]);
        assert_eq!(t.floor(), Cycles::ZERO);
        // Of overlapping spans, one ending early waits for the older one.
        let mut t = Timeline::new(Sharing::Shared);
        for (start, end) in [(100, 200), (150, 500), (300, 400)] {
            t.push(span(start, end), |_| {});
        }
        let mut folded = Vec::new();
        t.prune(Cycles(450), |s| folded.push((s.start.0, s.end.0)));
        assert_eq!(folded, vec![(100, 200)]);
        assert_eq!(spans(&t), vec![span(150, 500), span(300, 400)]);
    }

    #[test]
    #[should_panic(expected = "overlaps")]
    fn exclusive_spans_must_not_overlap() {
        timeline(&[(100, 200), (150, 250)]);
    }

    #[test]
    fn overflow_folds_the_oldest_and_raises_the_floor() {
        let mut t = Timeline::default();
        let mut folded = 0;
        for i in 0..(SPANS_MAX as u64 + 3) {
            t.push(span(i * 10, i * 10 + 5), |_| folded += 1);
        }
        assert_eq!(spans(&t).len(), SPANS_MAX);
        assert_eq!(folded, 3);
        assert_eq!(t.floor(), Cycles(25));
        // The gap at 5..10 is forgotten; the one at 25..30 is still usable.
        assert_eq!(fit(&t, 0, 5), 25);
    }
}
