//! The busy spans of one shared object (a cache line, a lock) in virtual time.
//!
//! More, and why: docs/engine.md, "Notes: timeline.rs".

use self::slide_queue::SlideQueue;
use crate::types::Cycles;

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
    /// span contains the instant `s`. (The tests' reference for searches.)
    #[cfg(test)]
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

/// Spans in order of start. In declaration order (`repr(C)`): the fields
/// every use reads come first.
#[derive(Clone, Debug)]
#[repr(C)]
pub(crate) struct Timeline<T> {
    /// Nothing may be placed before this: spans before it were forgotten.
    floor: Cycles,
    spans: SlideQueue<Span<T>>,
    sharing: Sharing,
    /// Exclusive timelines only: the end of every span that the next span
    /// does not begin at, that is, where each gap between spans begins, in
    /// order. (No entry for the last span: the time after it is not a gap
    /// between two.) Spans come and go mostly at the ends, so a sorted
    /// slice is cheaper than a tree here.
    gaps: SlideQueue<Cycles>,
    /// The index of the span recorded last, while it is remembered. A CPU's
    /// next use of the object in the same step comes after its last one, so
    /// [`Timeline::count_begun_by`] looks from there first.
    finger: Option<usize>,
    /// Where in the gap index the last edit was, for
    /// [`Timeline::gap_index`] to look from, as `finger` is for spans.
    gap_finger: usize,
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
            spans: SlideQueue::new(),
            gaps: SlideQueue::new(),
            finger: None,
            gap_finger: 0,
        }
    }
}

impl<T: Copy + PartialEq> Timeline<T> {
    /// The remembered spans, in order of start.
    pub(crate) fn spans(&self) -> &[Span<T>] {
        self.spans.as_slice()
    }

    /// The gap index (see [`Timeline::gaps`]'s field).
    fn gaps(&self) -> &[Cycles] {
        self.gaps.as_slice()
    }

    pub(crate) fn floor(&self) -> Cycles {
        self.floor
    }

    /// Raises the floor to `t` if it is lower: a span kept aside by the
    /// caller in place of this timeline was forgotten past [`SPANS_MAX`],
    /// as [`Timeline::push`] would have forgotten it.
    pub(crate) fn raise_floor(&mut self, t: Cycles) {
        self.floor = self.floor.max(t);
    }

    /// Whether nothing is placed at or after `t`, so a use could start there
    /// without a search (for an exclusive timeline, whose last span ends
    /// last).
    pub(crate) fn idle_from(&self, t: Cycles) -> bool {
        t >= self.floor && self.spans().last().is_none_or(|last| last.end <= t)
    }

    /// For an exclusive timeline: when the spans run back to back with no
    /// gap between any two and `t` lies among them (not before the first),
    /// the end of the last and how many spans have begun by it: where
    /// [`Timeline::earliest_fit`] would place a use of any length at `t`,
    /// found without a search.
    pub(crate) fn fit_after_run(&self, t: Cycles) -> Option<(Cycles, usize)> {
        let spans = self.spans();
        let (first, last) = (spans.first()?, spans.last()?);
        (self.sharing == Sharing::Exclusive
            && self.gaps().is_empty()
            && first.start <= t
            && t < last.end)
            .then_some((last.end, spans.len()))
    }

    /// The earliest-starting span remembered, if any.
    pub(crate) fn first(&self) -> Option<&Span<T>> {
        self.spans().first()
    }

    /// The latest-starting span remembered, if any.
    pub(crate) fn last(&self) -> Option<&Span<T>> {
        self.spans().last()
    }

    /// How many spans are remembered.
    pub(crate) fn len(&self) -> usize {
        self.spans().len()
    }

    /// How many spans have begun by `s`.
    ///
    /// Most asks are about a time inside or after the last span. Of the
    /// others, most come a little after the span recorded last (the same
    /// CPU again, later in its step) or a little after the oldest span (a
    /// CPU at the start of its step, when what ended before it is
    /// forgotten): the count is galloped to from there, in a few probes
    /// where a binary search's chain of dependent loads would take many.
    pub(crate) fn count_begun_by(&self, s: Cycles) -> usize {
        let spans = self.spans();
        if spans.last().is_none_or(|last| last.start <= s) {
            return spans.len();
        }
        gallop_past(self.finger, spans.len(), |k| spans[k].start <= s)
    }

    /// The first `count` spans, latest last (callers walk back a span or two
    /// from `count`).
    pub(crate) fn first_spans(&self, count: usize) -> impl DoubleEndedIterator<Item = &Span<T>> {
        self.spans()[..count].iter()
    }

    /// Forgets the spans that end at or before `horizon`, oldest first,
    /// passing each to `fold`. No CPU asks about a time before the horizon.
    /// (Of overlapping spans, one that ends early may be kept until those
    /// starting before it go; it no longer blocks anything.)
    pub(crate) fn prune(&mut self, horizon: Cycles, fold: impl FnMut(&Span<T>)) {
        let spans = self.spans();
        let gone = spans.iter().take_while(|span| span.end <= horizon).count();
        if gone == 0 {
            return;
        }
        spans[..gone].iter().for_each(fold);
        if gone == spans.len() {
            // The common case of a line one CPU uses: its one transfer is
            // over by the next step. No gap index to search.
            self.spans.clear();
            self.gaps.clear();
            self.finger = None;
        } else {
            self.forget_oldest(gone);
        }
    }

    /// Records `aside`, a span its owner held back since its last use (a
    /// lock's last hold: most are never looked at by another CPU), with how
    /// many spans had begun by its start if known, then forgets what ended
    /// by `horizon` as [`Timeline::prune`] does. Onto an empty timeline, a
    /// span that ends by the horizon would be forgotten at once: it is
    /// dropped instead, which leaves the timeline as recording it would.
    ///
    /// Inlined for its usual case, a lock only one CPU takes: nothing else
    /// remembered and the span aside over by the horizon, so it is dropped
    /// and there is nothing to prune, in a few comparisons.
    #[inline]
    pub(crate) fn settle(
        &mut self,
        aside: Option<Span<T>>,
        begun: Option<usize>,
        horizon: Cycles,
        mut fold: impl FnMut(&Span<T>),
    ) {
        if self.len() == 0 && aside.is_none_or(|span| span.end <= horizon) {
            if let Some(span) = aside {
                fold(&span);
            }
            return;
        }
        self.settle_and_prune(aside, begun, horizon, fold);
    }

    /// [`Timeline::settle`] past its usual case.
    #[inline(never)]
    fn settle_and_prune(
        &mut self,
        aside: Option<Span<T>>,
        begun: Option<usize>,
        horizon: Cycles,
        mut fold: impl FnMut(&Span<T>),
    ) {
        if let Some(span) = aside {
            if self.spans().is_empty() && span.end <= horizon {
                fold(&span);
            } else {
                match begun {
                    Some(begun) => self.push_at(begun, span, &mut fold),
                    None => self.push(span, &mut fold),
                }
            }
        }
        self.prune(horizon, fold);
    }

    /// Removes the oldest `count` spans, and the gaps after them from the
    /// index: as no span begins earlier, those are the first gaps, the ones
    /// that begin before the first span kept (the gaps after the spans kept
    /// begin after its start). Checked by the tests' `check_gaps`.
    fn forget_oldest(&mut self, count: usize) {
        if self.sharing == Sharing::Exclusive {
            let gaps_gone = match self.spans().get(count) {
                // One span forgotten (a full timeline making room for each
                // new one): only the gap after it, the first, can begin
                // before the next span does.
                Some(kept) if count == 1 => {
                    usize::from(self.gaps().first().is_some_and(|&gap| gap < kept.start))
                }
                // A few forgotten (a cache line's local atomics pushed in a
                // batch onto a full timeline): at most `count` gaps go, so
                // a look at the first `count` is cheaper than a search.
                Some(kept) if count <= FEW_FORGOTTEN => {
                    let gaps = self.gaps();
                    (gaps[..count.min(gaps.len())].iter())
                        .take_while(|&&gap| gap < kept.start)
                        .count()
                }
                Some(kept) => self.gap_index(kept.start),
                None => self.gaps().len(),
            };
            debug_assert!(gaps_gone <= count, "{gaps_gone} gaps after {count} spans");
            self.gaps.drop_front(gaps_gone);
            self.gap_finger = self.gap_finger.saturating_sub(gaps_gone);
        }
        self.spans.drop_front(count);
        self.finger = self.finger.and_then(|finger| finger.checked_sub(count));
    }

    /// Replaces the gap `old` (if any) by the gaps `new` (in order) in the
    /// gap index: the edit a new span makes between its neighbours, where no
    /// other gap lies.
    fn edit_gaps(&mut self, old: Option<Cycles>, new: [Option<Cycles>; 2]) {
        let first = old.or(new[0]).or(new[1]);
        let Some(first) = first else {
            return;
        };
        let mut at = self.gap_index(first);
        self.gap_finger = at;
        if let Some(old) = old {
            assert_eq!(
                self.gaps().get(at),
                Some(&old),
                "gap after {} missing from the index",
                old.0
            );
        }
        let mut new = new.into_iter().flatten();
        match (old, new.next()) {
            (Some(_), Some(gap)) => self.gaps.as_mut_slice()[at] = gap,
            (Some(_), None) => {
                self.gaps.remove(at);
                return;
            }
            (None, Some(gap)) => self.gaps.insert(at, gap),
            (None, None) => return,
        }
        for gap in new {
            at += 1;
            debug_assert!(
                self.gaps().get(at) != Some(&gap),
                "gap after {} twice",
                gap.0
            );
            self.gaps.insert(at, gap);
        }
    }

    /// How many gaps begin before `end`. Spans come and go mostly at the
    /// ends of the timeline, so the ends of the index are tried first; then
    /// the count is galloped to from the last edit if it lies before `end`
    /// (a CPU placing one use after another in a step), or else from the
    /// start, as [`Timeline::count_begun_by`] does.
    fn gap_index(&self, end: Cycles) -> usize {
        let gaps = self.gaps();
        if gaps.first().is_none_or(|&first| first >= end) {
            0
        } else if gaps.last().is_some_and(|&last| last < end) {
            gaps.len()
        } else {
            gallop_past(Some(self.gap_finger), gaps.len(), |k| gaps[k] < end)
        }
    }

    /// Records a span, keeping start order; a span that continues the one
    /// before it with the same data extends it. Past [`SPANS_MAX`] spans the
    /// oldest is passed to `fold` and the floor rises to its end.
    pub(crate) fn push(&mut self, span: Span<T>, fold: impl FnMut(&Span<T>)) {
        let begun = self.count_begun_by(span.start);
        self.push_at(begun, span, fold);
    }

    /// [`Timeline::push`] for a caller that knows how many spans have begun
    /// by `span.start` (from [`Timeline::earliest_fit`]).
    pub(crate) fn push_at(&mut self, begun: usize, span: Span<T>, fold: impl FnMut(&Span<T>)) {
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
        let at = begun;
        debug_assert_eq!(at, self.count_begun_by(span.start), "push_at's count");
        if at == self.spans().len() {
            return self.push_back(span, fold);
        }
        let next_start = self.spans().get(at).map(|next| next.start);
        let prev = at.checked_sub(1).map(|i| self.spans()[i]);
        let prev_end = prev.map(|prev| prev.end);
        let continues = prev.is_some_and(|prev| prev.end == span.start && prev.data == span.data)
            && next_start.is_none_or(|start| start >= span.end);
        if self.sharing == Sharing::Exclusive {
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
            // Between the span before and the one after, the gap after the
            // former (if any) gives way to the gaps around the new span.
            let gap_after = |end: Cycles, next: Option<Cycles>| next.is_some_and(|n| end < n);
            let old = prev_end.filter(|&end| gap_after(end, next_start));
            let before = prev_end.filter(|&end| !continues && gap_after(end, Some(span.start)));
            let after = Some(span.end).filter(|&end| gap_after(end, next_start));
            self.edit_gaps(old, [before, after]);
        }
        if continues {
            self.spans.as_mut_slice()[at - 1].end = span.end;
            self.finger = Some(at - 1);
            return;
        }
        self.spans.insert(at, span);
        self.finger = Some(at);
        self.forget_beyond_max(fold);
    }

    /// Past [`SPANS_MAX`] spans, passes the oldest to `fold` and raises the
    /// floor to its end.
    fn forget_beyond_max(&mut self, mut fold: impl FnMut(&Span<T>)) {
        if self.spans().len() > SPANS_MAX {
            let oldest = self.spans()[0];
            self.forget_oldest(1);
            self.floor = self.floor.max(oldest.end);
            fold(&oldest);
        }
    }

    /// [`Timeline::push_at`] for a span that begins no earlier than any
    /// remembered one (most do: a busy line's requests queue at its end).
    /// Only the gap before it, if any, joins the index, at its end.
    fn push_back(&mut self, span: Span<T>, fold: impl FnMut(&Span<T>)) {
        if self.push_back_unbounded(span) {
            self.forget_beyond_max(fold);
        }
    }

    /// Records spans that each begin no earlier than any remembered one,
    /// in order (a cache line's atomics kept aside), then forgets the
    /// oldest past [`SPANS_MAX`] at once. The timeline ends as pushing
    /// each in turn would leave it, with the same spans passed to `fold`
    /// in the same order: the pushes are all at the back, so each push's
    /// forgetting takes the oldest of the spans there before the batch, the
    /// floor is the latest end among them, and the gaps that go are those
    /// that begin before the first span kept.
    pub(crate) fn push_back_all(
        &mut self,
        spans: impl IntoIterator<Item = Span<T>>,
        fold: impl FnMut(&Span<T>),
    ) {
        // What `push_back_unbounded` does per span, with the last span kept
        // at hand rather than looked up, and the finger set once.
        let mut last = self.spans().last().copied();
        let mut pushed = false;
        for span in spans {
            assert!(
                span.start < span.end && span.start >= self.floor,
                "span {}..{} empty or before the floor {}",
                span.start.0,
                span.end.0,
                self.floor.0
            );
            debug_assert_eq!(
                self.count_begun_by(span.start),
                self.len(),
                "not at the back"
            );
            match last {
                Some(prev) if prev.end == span.start && prev.data == span.data => {
                    let extended = Span {
                        end: span.end,
                        ..prev
                    };
                    *self.spans.as_mut_slice().last_mut().expect("a last span") = extended;
                    last = Some(extended);
                    pushed = true;
                    continue;
                }
                Some(prev) => self.note_gap(prev.end, span.start),
                _ => {}
            }
            self.spans.push_back(span);
            last = Some(span);
            pushed = true;
        }
        if pushed {
            self.finger = Some(self.spans().len() - 1);
        }
        let excess = self.len().saturating_sub(SPANS_MAX);
        if excess > 0 {
            self.forget_front(excess, fold);
        }
    }

    /// Forgets the oldest `count` spans as the timeline does past
    /// [`SPANS_MAX`]: each passed to `fold`, oldest first, and the floor
    /// raised to the latest of their ends.
    pub(crate) fn forget_front(&mut self, count: usize, mut fold: impl FnMut(&Span<T>)) {
        let mut floor = self.floor;
        for old in &self.spans()[..count] {
            floor = floor.max(old.end);
            fold(old);
        }
        self.floor = floor;
        self.forget_oldest(count);
    }

    /// Before a span starting at `start` goes in after one ending at
    /// `prev_end`: an exclusive timeline's spans may not overlap, and the
    /// idle time between them is a gap.
    #[inline]
    fn note_gap(&mut self, prev_end: Cycles, start: Cycles) {
        if self.sharing == Sharing::Exclusive {
            assert!(
                prev_end <= start,
                "span at {} overlaps the one before",
                start.0
            );
            if prev_end < start {
                self.gaps.push_back(prev_end);
            }
        }
    }

    /// [`Timeline::push_back`] without the forgetting: whether the span was
    /// added (false: it extended the last one).
    fn push_back_unbounded(&mut self, span: Span<T>) -> bool {
        if let Some(prev) = self.spans.as_mut_slice().last_mut() {
            if prev.end == span.start && prev.data == span.data {
                prev.end = span.end;
                self.finger = Some(self.spans().len() - 1);
                return false;
            }
            let prev_end = prev.end;
            self.note_gap(prev_end, span.start);
        }
        self.spans.push_back(span);
        self.finger = Some(self.spans().len() - 1);
        true
    }

    /// For an exclusive timeline: the earliest `s` at or after `t` (and the
    /// floor) such that `[s, s + len_at(s, n))` meets no span, where
    /// `len_at(s, n)` is how long a use beginning at `s` would be (zero: not
    /// inside a span) and `n` how many spans have begun by `s` (so the caller
    /// need not search for them). Returns `s` and how many spans have begun
    /// by it. Walks forward once through the gaps between spans.
    pub(crate) fn earliest_fit(
        &self,
        t: Cycles,
        len_at: impl FnMut(Cycles, usize) -> Cycles,
    ) -> (Cycles, usize) {
        self.earliest_fit_from(t, self.count_begun_by(t), len_at)
    }

    /// [`Timeline::earliest_fit`] for a use of fixed length `len`, with no
    /// search when nothing is placed from `t` on (the uncontended case).
    /// Inlined, so that that case costs the caller a few comparisons.
    #[inline]
    pub(crate) fn earliest_fit_len(&self, t: Cycles, len: Cycles) -> (Cycles, usize) {
        if self.idle_from(t) {
            (t, self.len())
        } else {
            self.search_fit_len(t, len)
        }
    }

    /// [`Timeline::earliest_fit_len`] past its uncontended case.
    #[inline(never)]
    fn search_fit_len(&self, t: Cycles, len: Cycles) -> (Cycles, usize) {
        self.earliest_fit(t, |_, _| len)
    }

    /// [`Timeline::earliest_fit`] for a caller that knows how many spans
    /// have begun by `t` (`begun`).
    pub(crate) fn earliest_fit_from(
        &self,
        t: Cycles,
        begun: usize,
        mut len_at: impl FnMut(Cycles, usize) -> Cycles,
    ) -> (Cycles, usize) {
        assert_eq!(
            self.sharing,
            Sharing::Exclusive,
            "earliest_fit on overlapping spans"
        );
        debug_assert_eq!(begun, self.count_begun_by(t), "earliest_fit_from's count");
        let mut s = t.max(self.floor);
        let mut i = if s == t {
            begun
        } else {
            self.count_begun_by(s)
        };
        let (spans, gaps) = (self.spans(), self.gaps());
        if let Some(before) = i.checked_sub(1).map(|j| &spans[j]) {
            s = s.max(before.end);
        }
        // How many gaps begin before `s`; `s` only grows, so this does too,
        // and each search goes on from where the last one stopped.
        let mut g = 0;
        loop {
            // Here no span is under way at `s`. If the next one begins right
            // at `s`, so does a run of back-to-back spans: jump to its end,
            // the first gap at or after `s` (or the end of the last span).
            // Short runs (a busy line's usual) are stepped over span by
            // span; the gap index only pays for itself over longer ones.
            let mut stepped = 0;
            while stepped < RUN_STEPS
                && let Some(next) = spans.get(i)
                && next.start <= s
            {
                s = next.end;
                i += 1;
                stepped += 1;
            }
            if spans.get(i).is_some_and(|next| next.start <= s) {
                g = gallop(g, gaps.len(), |k| gaps[k] < s);
                match gaps.get(g) {
                    Some(&gap) => {
                        s = gap;
                        // The spans before `i` began by the old `s`, before
                        // the gap (no gap begins where a span does).
                        i = gallop(i, spans.len(), |k| spans[k].start < gap);
                    }
                    None => {
                        s = spans.last().expect("a span begins at s").end;
                        i = spans.len();
                    }
                }
            }
            match spans.get(i) {
                Some(next) if next.start < s + len_at(s, i) => {
                    s = next.end;
                    i += 1;
                }
                _ => return (s, i),
            }
        }
    }

    /// The latest end among the spans accepted by `filter` that `[s, s + len)`
    /// meets, if any.
    #[cfg(test)]
    pub(crate) fn blocked_until(
        &self,
        s: Cycles,
        len: Cycles,
        filter: impl Fn(&Span<T>) -> bool,
    ) -> Option<Cycles> {
        self.latest_end_where(|span| span.meets(s, len) && filter(span))
    }

    /// The latest end among the spans accepted by `filter`, if any.
    #[cfg(test)]
    pub(crate) fn latest_end_where(&self, filter: impl Fn(&Span<T>) -> bool) -> Option<Cycles> {
        self.spans()
            .iter()
            .filter(|span| filter(span))
            .map(|span| span.end)
            .max()
    }
}

/// Up to how many spans forgotten at once [`Timeline::forget_oldest`] counts
/// the gaps that go with them one by one rather than by a search.
const FEW_FORGOTTEN: usize = 16;

/// How many back-to-back spans [`Timeline::earliest_fit_from`] steps over
/// one by one before it looks up the end of their run in the gap index.
const RUN_STEPS: usize = 8;

/// The first index from `from` on at which `pred` fails, for a `pred` that
/// holds below some index and fails from it on (up to `len`), known to hold
/// below `from`. Gallops from `from`, so an answer close by costs a few
/// probes, and one far away no more than a binary search would.
fn gallop(from: usize, len: usize, pred: impl Fn(usize) -> bool) -> usize {
    if from >= len || !pred(from) {
        return from;
    }
    // `pred` holds at `lo`; find where it fails past it.
    let mut lo = from;
    let mut step = 1;
    let mut hi = loop {
        let probe = lo + step;
        if probe >= len {
            break len;
        }
        if !pred(probe) {
            break probe;
        }
        lo = probe;
        step *= 2;
    };
    lo += 1;
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if pred(mid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// [`gallop`] from just past `hint` when `pred` holds there (an index kept
/// from the last edit, which may lie beyond `len` or after the answer), else
/// from the start.
fn gallop_past(hint: Option<usize>, len: usize, pred: impl Fn(usize) -> bool) -> usize {
    let from = match hint {
        Some(hint) if hint < len && pred(hint) => hint + 1,
        _ => 0,
    };
    gallop(from, len, pred)
}

/// [`SlideQueue`] in a module of its own: its fields are private to it, so
/// the invariant its `unsafe` relies on is kept by its methods alone.
mod slide_queue {
    /// A queue kept as one contiguous slice, so that it is searched and walked
    /// as a plain slice: the live items are `items[head..]`. Items leave at the
    /// front by moving `head` on; the dead prefix this leaves is drained once
    /// it is as long as the live part (and not tiny), so the vector holds at
    /// most twice what is live plus [`SlideQueue::DEAD_MIN`], and each item is
    /// moved by a drain at most once, amortised. An insertion or a removal
    /// moves the shorter side, into or out of the dead prefix at the front.
    #[derive(Clone, Debug)]
    pub(super) struct SlideQueue<V> {
        items: Vec<V>,
        head: usize,
    }

    impl<V> SlideQueue<V> {
        pub(super) fn new() -> SlideQueue<V> {
            SlideQueue {
                items: Vec::new(),
                head: 0,
            }
        }
    }

    impl<V: Copy> SlideQueue<V> {
        /// The shortest dead prefix that is drained.
        const DEAD_MIN: usize = 32;

        pub(super) fn clear(&mut self) {
            self.items.clear();
            self.head = 0;
        }

        /// The live items. Taken without a bounds check: this is the engine's
        /// most frequent call (every look at a timeline goes through it), and
        /// checked it costs 2.7% more instructions on the 30G usemem run, 1.8%
        /// on its "after" side (docs/engine.md, "Host speed"; a check without
        /// a panic, `get(..).unwrap_or_default()`, saves only a quarter of
        /// that).
        pub(super) fn as_slice(&self) -> &[V] {
            self.check();
            // SAFETY: `head <= items.len()` holds after every method of this
            // type: `drop_front` asserts that it drops no more than is live,
            // `remove` moves `head` on only past an item it overwrites, and
            // every shrink of `items` (`clear`, `drain_dead`) resets `head`.
            unsafe { self.items.get_unchecked(self.head..) }
        }

        pub(super) fn as_mut_slice(&mut self) -> &mut [V] {
            &mut self.items[self.head..]
        }

        /// The invariant that makes the live part a valid range.
        fn check(&self) {
            debug_assert!(
                self.head <= self.items.len(),
                "head {} past {} items",
                self.head,
                self.items.len()
            );
        }

        pub(super) fn push_back(&mut self, value: V) {
            self.items.push(value);
        }

        /// Removes the first `count` live items.
        pub(super) fn drop_front(&mut self, count: usize) {
            let live = self.items.len() - self.head;
            assert!(count <= live, "drop {count} of {live}");
            self.head += count;
            self.drain_dead();
        }

        /// Drains the dead prefix once it is as long as the live part and at
        /// least [`SlideQueue::DEAD_MIN`] long (so that a short queue, whose
        /// items come and go one or two at a time, is not moved at every pop).
        fn drain_dead(&mut self) {
            let live = self.items.len() - self.head;
            if live == 0 {
                self.clear();
            } else if self.head >= live.max(Self::DEAD_MIN) {
                self.items.copy_within(self.head.., 0);
                self.items.truncate(live);
                self.head = 0;
            }
        }

        /// Inserts `value` so that it becomes the live item at `at`.
        pub(super) fn insert(&mut self, at: usize, value: V) {
            let live = self.items.len() - self.head;
            assert!(at <= live, "insert at {at} of {live}");
            if self.head > 0 && at < live / 2 {
                // Move the `at` items before it one place into the dead prefix.
                let head = self.head;
                self.items.copy_within(head..head + at, head - 1);
                self.head -= 1;
                self.items[head - 1 + at] = value;
            } else {
                self.items.insert(self.head + at, value);
            }
        }

        /// Removes the live item at `at`.
        pub(super) fn remove(&mut self, at: usize) {
            let live = self.items.len() - self.head;
            assert!(at < live, "remove at {at} of {live}");
            if at < live / 2 {
                // Move the `at` items before it one place toward the back.
                let head = self.head;
                self.items.copy_within(head..head + at, head + 1);
                self.head += 1;
            } else {
                self.items.remove(self.head + at);
            }
            self.drain_dead();
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn slide_queue_agrees_with_a_deque_and_stays_bounded() {
            use std::collections::VecDeque;
            let mut rng = crate::sim::rng::Rng::new(11);
            let mut queue = SlideQueue::new();
            let mut model = VecDeque::new();
            for step in 0..20_000u64 {
                let live = model.len() as u64;
                match rng.below(8) {
                    // Mostly pushes and drops at the ends, as a timeline does.
                    0..=2 => {
                        queue.push_back(step);
                        model.push_back(step);
                    }
                    3 | 4 if live > 0 => {
                        let count = 1 + rng.below(live.min(3)) as usize;
                        queue.drop_front(count);
                        model.drain(..count);
                    }
                    5 | 6 => {
                        let at = rng.below(live + 1) as usize;
                        queue.insert(at, step);
                        model.insert(at, step);
                    }
                    7 if live > 0 => {
                        let at = rng.below(live) as usize;
                        queue.remove(at);
                        model.remove(at);
                    }
                    _ => {
                        queue.clear();
                        model.clear();
                    }
                }
                assert!(queue.as_slice().iter().eq(model.iter()), "step {step}");
                // Memory: the dead prefix never outgrows the live part by more
                // than the few left before a drain.
                assert!(
                    queue.head <= model.len().max(SlideQueue::<u64>::DEAD_MIN),
                    "step {step}: {} dead, {} live",
                    queue.head,
                    model.len()
                );
            }
        }
    }
}

/// The earliest time at or after `t` for which `blocked_until` returns None.
/// `blocked_until(s)` must return a time later than `s`; every return must
/// pass the end of at least one span, so `spans_max` spans bound the search.
#[cfg(test)]
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
        let (walked, begun) = t.earliest_fit(Cycles(at), |_, _| len);
        assert_eq!(begun, t.count_begun_by(walked), "begun at {}", walked.0);
        let searched = earliest(Cycles(at).max(t.floor()), SPANS_MAX, |s| {
            t.blocked_until(s, len, |_| true)
        });
        assert_eq!(walked, searched, "at {at} for {}", len.0);
        if let Some(after_run) = t.fit_after_run(Cycles(at)) {
            assert_eq!(after_run, (walked, begun), "after the run, at {at}");
        }
        walked.0
    }

    fn spans<T: Copy + PartialEq>(t: &Timeline<T>) -> Vec<Span<T>> {
        t.spans().to_vec()
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
        assert_eq!(t.fit_after_run(Cycles(150)), Some((Cycles(400), 3)));
        assert_eq!(t.fit_after_run(Cycles(50)), None, "before the run");
        assert_eq!(t.fit_after_run(Cycles(400)), None, "after the run");
        assert_eq!(fit(&t, 150, 0), 400);
        assert_eq!(fit(&t, 50, 60), 400);
    }

    #[test]
    fn runs_longer_than_the_steps_are_jumped_through_the_gap_index() {
        // Runs of 3 * RUN_STEPS back-to-back spans (alternating data, so
        // that they do not merge), with gaps of 5, 20 and 40 after them.
        let mut t = Timeline::default();
        let mut at = 100;
        for gap in [5, 20, 40] {
            for i in 0..3 * RUN_STEPS as u64 {
                t.push(
                    Span {
                        start: Cycles(at),
                        end: Cycles(at + 10),
                        data: i % 2,
                    },
                    |_| {},
                );
                at += 10;
            }
            at += gap;
        }
        let run = 30 * RUN_STEPS as u64;
        assert_eq!(fit(&t, 105, 5), 100 + run, "the first gap");
        assert_eq!(fit(&t, 105, 6), 100 + 2 * run + 5, "the second gap");
        assert_eq!(fit(&t, 100, 21), 100 + 3 * run + 25, "the third gap");
        assert_eq!(fit(&t, 100, 41), 100 + 3 * run + 25, "after the last span");
        for at in (95..100 + 3 * run + 70).step_by(7) {
            for len in [0, 1, 5, 6, 20, 21, 40, 41] {
                fit(&t, at, len);
            }
        }
    }

    #[test]
    fn counts_look_from_the_span_recorded_last_and_follow_a_prune() {
        let mut t = timeline(&[(100, 200), (300, 400), (500, 600), (700, 800)]);
        t.push(span(220, 250), |_| {});
        assert_eq!(t.finger, Some(1));
        // After the finger, before it, and between the oldest spans.
        assert_eq!(t.count_begun_by(Cycles(260)), 2);
        assert_eq!(t.count_begun_by(Cycles(550)), 4);
        assert_eq!(t.count_begun_by(Cycles(150)), 1);
        assert_eq!(t.count_begun_by(Cycles(50)), 0);
        t.prune(Cycles(260), |_| {});
        assert_eq!(t.finger, None, "the span recorded last is forgotten");
        assert_eq!(t.count_begun_by(Cycles(350)), 1);
        t.push(span(420, 450), |_| {});
        t.prune(Cycles(410), |_| {});
        assert_eq!(t.finger, Some(0), "the finger moves with the prune");
        assert_eq!(t.count_begun_by(Cycles(460)), 1);
        assert_eq!(t.count_begun_by(Cycles(650)), 2);
        check_gaps(&t);
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
    fn settle_records_the_span_aside_then_prunes() {
        // Onto an empty timeline, a span over by the horizon is forgotten
        // at once, as recording and pruning it would.
        let mut t = Timeline::default();
        let mut folded = Vec::new();
        t.settle(Some(span(100, 200)), None, Cycles(200), |s| {
            folded.push((s.start.0, s.end.0))
        });
        assert_eq!(spans(&t), vec![]);
        assert_eq!(folded, vec![(100, 200)]);
        // One still under way at the horizon is recorded.
        t.settle(Some(span(300, 400)), Some(0), Cycles(350), |_| {});
        assert_eq!(spans(&t), vec![span(300, 400)]);
        // Beside a remembered span, it is recorded, and both go when the
        // horizon passes them.
        let mut folded = Vec::new();
        t.settle(Some(span(500, 600)), None, Cycles(350), |_| {});
        assert_eq!(spans(&t), vec![span(300, 400), span(500, 600)]);
        t.settle(None, None, Cycles(600), |s| {
            folded.push((s.start.0, s.end.0))
        });
        assert_eq!(folded, vec![(300, 400), (500, 600)]);
        assert_eq!(spans(&t), vec![]);
    }

    /// The gap index lists exactly the ends of spans followed by a gap.
    fn check_gaps<T: Copy + PartialEq>(t: &Timeline<T>) {
        let spans = spans(t);
        let expected: Vec<Cycles> = spans
            .windows(2)
            .filter(|pair| pair[0].end < pair[1].start)
            .map(|pair| pair[0].end)
            .collect();
        assert_eq!(t.gaps(), expected);
    }

    #[test]
    fn random_placements_agree_with_the_exhaustive_search() {
        let mut rng = crate::sim::rng::Rng::new(7);
        let mut t = Timeline::default();
        let mut horizon = 0;
        let mut after_runs = 0;
        for step in 0..5_000u64 {
            let at = horizon + rng.below(400);
            let len = 1 + rng.below(if step % 3 == 0 { 3 } else { 60 });
            let begun = spans(&t).iter().filter(|s| s.start.0 <= at).count();
            after_runs += usize::from(t.fit_after_run(Cycles(at)).is_some());
            assert_eq!(t.count_begun_by(Cycles(at)), begun, "begun by {at}");
            // Queries of every length, including the zero-length probe.
            for probe in [0, 1, len, 2 * len] {
                fit(&t, at, probe);
            }
            let start = fit(&t, at, len);
            // Alternate the data so that neighbours do not always merge.
            t.push(
                Span {
                    start: Cycles(start),
                    end: Cycles(start + len),
                    data: step % 2,
                },
                |_| {},
            );
            check_gaps(&t);
            // The horizon moves on about as fast as spans are added, so
            // the timeline stays tens of spans long, as a busy line's does.
            horizon += rng.below(60);
            t.prune(Cycles(horizon), |_| {});
            check_gaps(&t);
        }
        assert!(after_runs > 20, "only {after_runs} searches inside a run");
    }

    #[test]
    fn gallop_agrees_with_a_binary_search() {
        let values: Vec<u64> = (0..200).map(|i| i * 3).collect();
        for cut in 0..=600 {
            let expected = values.partition_point(|&v| v < cut);
            for from in 0..=expected {
                assert_eq!(
                    gallop(from, values.len(), |k| values[k] < cut),
                    expected,
                    "cut {cut} from {from}"
                );
            }
            // A hint anywhere, before or after the answer or past the end.
            for hint in (0..=values.len() + 1).map(Some).chain([None]) {
                assert_eq!(
                    gallop_past(hint, values.len(), |k| values[k] < cut),
                    expected,
                    "cut {cut} past {hint:?}"
                );
            }
        }
    }

    #[test]
    #[should_panic(expected = "overlaps")]
    fn exclusive_spans_must_not_overlap() {
        timeline(&[(100, 200), (150, 250)]);
    }

    #[test]
    fn a_batch_at_the_back_ends_as_pushing_each_in_turn() {
        // Full timelines with gaps here and there, then batches of up to
        // four spans (some continuing the last, which extends it): the
        // spans, gaps, floor, finger and what is folded must match.
        let mut rng = crate::sim::Rng::new(5);
        let (mut one, mut batched) = (Timeline::default(), Timeline::default());
        let (mut folded_one, mut folded_batched) = (Vec::new(), Vec::new());
        let mut at = 0;
        for round in 0..3 * SPANS_MAX as u64 {
            let batch: Vec<Span<u64>> = (0..1 + rng.below(4))
                .map(|_| {
                    at += rng.below(3) * 7;
                    let len = 1 + rng.below(9);
                    let span = Span {
                        start: Cycles(at),
                        end: Cycles(at + len),
                        data: rng.below(2),
                    };
                    at += len;
                    span
                })
                .collect();
            for &span in &batch {
                one.push(span, |s| folded_one.push(*s));
            }
            batched.push_back_all(batch, |s| folded_batched.push(*s));
            assert_eq!(spans(&one), spans(&batched), "round {round}");
            assert_eq!(one.gaps(), batched.gaps(), "round {round}");
            assert_eq!((one.floor(), one.finger), (batched.floor(), batched.finger));
            assert_eq!(folded_one, folded_batched, "round {round}");
        }
        assert_eq!(batched.len(), SPANS_MAX);
        assert!(
            folded_batched.len() > SPANS_MAX,
            "{} folded",
            folded_batched.len()
        );
        check_gaps(&batched);
        assert_eq!(fit(&batched, 0, 3), fit(&one, 0, 3));
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
