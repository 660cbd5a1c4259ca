//! A list of a few items, the first two kept in place: what an rmap walk
//! finds for one page (one VMA, one PTE, almost always). A `Vec` there was
//! a heap allocation and a free per walk, two or three walks per page
//! paged out (about 5% of a 10 GiB page-out's host time). Host-side only:
//! it holds what the `Vec` held, in the same order.

/// Up to two items in place, the rest on the heap (only allocated past two).
#[derive(Clone, Debug)]
pub(crate) struct Few<T> {
    inline: [Option<T>; 2],
    more: Vec<T>,
}

impl<T> Default for Few<T> {
    fn default() -> Self {
        Few {
            inline: [None, None],
            more: Vec::new(),
        }
    }
}

impl<T> Few<T> {
    #[inline]
    pub(crate) fn new() -> Few<T> {
        Few::default()
    }

    #[inline]
    pub(crate) fn push(&mut self, item: T) {
        match &mut self.inline {
            [first @ None, _] => *first = Some(item),
            [_, second @ None] => *second = Some(item),
            _ => self.more.push(item),
        }
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.inline[0].is_none()
    }

    /// The one item, if there is exactly one.
    #[inline]
    pub(crate) fn only(&self) -> Option<&T> {
        match &self.inline {
            [Some(item), None] => Some(item),
            _ => None,
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.inline.iter().flatten().count() + self.more.len()
    }
}

impl<T> IntoIterator for Few<T> {
    type Item = T;
    type IntoIter = IntoIter<T>;

    #[inline]
    fn into_iter(self) -> IntoIter<T> {
        IntoIter {
            inline: self.inline,
            next: 0,
            more: self.more.into_iter(),
        }
    }
}

/// [`Few`]'s items by value, in order. Written out rather than chained
/// adapters (`flatten` and `chain`): the walk iterates one of these per
/// VMA per page, and the adapters' bookkeeping cost more than the items.
pub(crate) struct IntoIter<T> {
    inline: [Option<T>; 2],
    /// The next place in `inline` to take.
    next: usize,
    more: std::vec::IntoIter<T>,
}

impl<T> Iterator for IntoIter<T> {
    type Item = T;

    #[inline]
    fn next(&mut self) -> Option<T> {
        if let Some(slot) = self.inline.get_mut(self.next) {
            self.next += 1;
            // Places fill in order: an empty one ends the items (and
            // `more` is empty unless both are full).
            return slot.take();
        }
        self.more.next()
    }
}

impl<T> FromIterator<T> for Few<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Few<T> {
        let mut few = Few::new();
        for item in iter {
            few.push(item);
        }
        few
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_every_item_in_order_in_place_and_beyond() {
        for n in 0..6u32 {
            let few: Few<u32> = (0..n).collect();
            assert_eq!(few.len(), n as usize);
            assert_eq!(few.is_empty(), n == 0);
            assert_eq!(few.only(), (n == 1).then_some(&0));
            assert_eq!(few.more.capacity() > 0, n > 2, "{n} items");
            assert_eq!(
                few.into_iter().collect::<Vec<_>>(),
                (0..n).collect::<Vec<_>>()
            );
        }
    }
}
