//! The receiving side of a UDP socket as Linux 5.13 keeps it: its two
//! queues and the receive-buffer accounting that decides which datagrams
//! are dropped (`net/ipv4/udp.c`).
//!
//! - `__udp_enqueue_schedule_skb` (softirq, on the CPU that ran the
//!   sender's loopback transmit) drops a datagram when `sk_rmem_alloc` is
//!   already over `sk_rcvbuf`; otherwise it charges the skb's truesize to
//!   `sk_rmem_alloc` and appends it to `sk_receive_queue`. One datagram may
//!   therefore take the count past `sk_rcvbuf`; the next is dropped.
//! - `recvmsg` (`__skb_recv_udp`) takes datagrams from a second queue, the
//!   `reader_queue`, that only the reader touches; when it is empty the
//!   whole `sk_receive_queue` is spliced onto it under both locks.
//! - Memory is given back lazily (`udp_rmem_release`, since 4.11): each
//!   dequeued datagram's truesize is added to `forward_deficit`, and only
//!   when the deficit reaches a quarter of `sk_rcvbuf`, or the reader queue
//!   is left empty, is it taken off `sk_rmem_alloc` (and the receive queue
//!   spliced onto the reader queue again). A reader that has fallen behind
//!   therefore leaves up to a quarter of the buffer charged for datagrams
//!   it has already consumed, and the sender's softirq drops earlier than
//!   the queue's length alone would say. (6.x made the quarter a cached
//!   `forward_threshold`; same value.)
//!
//! Left out: the second check of `__udp_enqueue_schedule_skb` (after the
//! atomic add, against `rcvbuf + truesize`), which only a second producer
//! racing the first can fail; `udp_rmem_schedule` and `sk_forward_alloc`
//! (protocol memory pressure against `udp_mem`, which a 384 GiB machine
//! never reaches with one socket); `skb_condense` past half the buffer
//! (it only shrinks paged skbs, and these are linear); the busylock;
//! `MSG_PEEK`.

use std::collections::VecDeque;

/// A receiving UDP socket holding datagrams of type `T`.
#[derive(Clone, Debug)]
pub struct UdpSock<T> {
    /// `sk->sk_rcvbuf` (net.core.rmem_default unless set).
    rcvbuf: u64,
    /// `sk->sk_rmem_alloc`: truesize charged and not yet released.
    rmem_alloc: u64,
    /// `udp_sk(sk)->forward_deficit`: truesize dequeued, not yet released.
    forward_deficit: u64,
    /// `sk->sk_receive_queue`: where the softirq appends.
    receive_queue: VecDeque<(T, u64)>,
    /// `udp_sk(sk)->reader_queue`: where `recvmsg` takes from.
    reader_queue: VecDeque<(T, u64)>,
    /// Datagrams dropped for a full buffer (`UDP_MIB_RCVBUFERRORS`).
    rcvbuf_errors: u64,
    /// The most datagrams ever queued at once (both queues): how far the
    /// reader fell behind.
    max_queued: usize,
}

impl<T> UdpSock<T> {
    pub fn new(rcvbuf: u64) -> UdpSock<T> {
        UdpSock {
            rcvbuf,
            rmem_alloc: 0,
            forward_deficit: 0,
            receive_queue: VecDeque::new(),
            reader_queue: VecDeque::new(),
            rcvbuf_errors: 0,
            max_queued: 0,
        }
    }

    /// `__udp_enqueue_schedule_skb`: queues `skb` charged `truesize`, or
    /// hands it back when the buffer is full, for the caller to free
    /// (`kfree_skb`, on the enqueuing CPU).
    pub fn enqueue(&mut self, skb: T, truesize: u64) -> Result<(), T> {
        if self.rmem_alloc > self.rcvbuf {
            self.rcvbuf_errors += 1;
            return Err(skb);
        }
        self.rmem_alloc += truesize;
        self.receive_queue.push_back((skb, truesize));
        self.max_queued = self.max_queued.max(self.len());
        Ok(())
    }

    /// `__skb_recv_udp` without `MSG_PEEK`: the oldest datagram, or None
    /// when both queues are empty (a blocking reader then sleeps).
    pub fn dequeue(&mut self) -> Option<T> {
        if self.reader_queue.is_empty() {
            if self.receive_queue.is_empty() {
                return None;
            }
            // Refill the reader queue with everything queued so far.
            self.splice_receive_queue();
        }
        let (skb, truesize) = self.reader_queue.pop_front()?;
        self.rmem_release(truesize);
        Some(skb)
    }

    /// `udp_rmem_release` with `partial` set, as the dequeue's destructor
    /// calls it.
    fn rmem_release(&mut self, truesize: u64) {
        self.forward_deficit += truesize;
        if self.forward_deficit < self.rcvbuf >> 2 && !self.reader_queue.is_empty() {
            return;
        }
        self.rmem_alloc -= std::mem::take(&mut self.forward_deficit);
        // While holding the receive queue's lock for the release, it moves
        // that queue onto the reader's too.
        self.splice_receive_queue();
    }

    /// `skb_queue_splice_tail_init` of the receive queue onto the reader
    /// queue. Onto an empty reader queue (a reader that keeps up: every
    /// datagram) the two swap, which spares the host a copy.
    fn splice_receive_queue(&mut self) {
        if self.reader_queue.is_empty() {
            std::mem::swap(&mut self.reader_queue, &mut self.receive_queue);
        } else if !self.receive_queue.is_empty() {
            self.reader_queue.append(&mut self.receive_queue);
        }
    }

    /// `sk_rmem_alloc`.
    pub fn rmem_alloc(&self) -> u64 {
        self.rmem_alloc
    }

    /// Datagrams dropped for a full receive buffer.
    pub fn rcvbuf_errors(&self) -> u64 {
        self.rcvbuf_errors
    }

    /// The most datagrams that were ever queued and not yet received.
    pub fn max_queued(&self) -> usize {
        self.max_queued
    }

    /// Datagrams queued and not yet received.
    pub fn len(&self) -> usize {
        self.receive_queue.len() + self.reader_queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_buffer_drops_until_a_quarter_of_it_is_released() {
        // rcvbuf 4096, each datagram charged 768: accepted while the count
        // before it is at most 4096 (0, 768, ..., 3840: six), the seventh
        // finds 4608 and is dropped.
        let mut sock = UdpSock::new(4096);
        for i in 0..6 {
            assert_eq!(sock.enqueue(i, 768), Ok(()));
        }
        assert_eq!(sock.rmem_alloc(), 4608);
        assert_eq!(sock.enqueue(6, 768), Err(6));
        assert_eq!(sock.rcvbuf_errors(), 1);
        // One received: 768 of deficit is under a quarter (1024) and five
        // wait on the reader queue, so nothing is released and the next
        // datagram is dropped too; released at once it would have fitted.
        assert_eq!(sock.dequeue(), Some(0));
        assert_eq!(sock.rmem_alloc(), 4608);
        assert_eq!(sock.enqueue(7, 768), Err(7));
        // The second brings the deficit to 1536: both are released.
        assert_eq!(sock.dequeue(), Some(1));
        assert_eq!(sock.rmem_alloc(), 3072);
        assert_eq!(sock.enqueue(8, 768), Ok(()));
        assert_eq!(sock.enqueue(9, 768), Ok(()));
        assert_eq!(sock.enqueue(10, 768), Err(10));
        assert_eq!(sock.rcvbuf_errors(), 3);
        // Order is kept across the two queues.
        let rest: Vec<_> = std::iter::from_fn(|| sock.dequeue()).collect();
        assert_eq!(rest, [2, 3, 4, 5, 8, 9]);
        // Six at most were ever waiting: 0..=5, then 2..=5 with 8 and 9.
        assert_eq!(sock.max_queued(), 6);
        assert!(sock.is_empty());
        assert_eq!(sock.rmem_alloc(), 0);
    }

    #[test]
    fn a_reader_that_empties_its_queue_releases_every_datagram() {
        // The reader keeps up: each dequeue leaves both queues empty, so
        // each datagram is released as it is received, however small.
        let mut sock = UdpSock::new(212992);
        for i in 0..1000 {
            assert_eq!(sock.enqueue(i, 768), Ok(()));
            assert_eq!(sock.rmem_alloc(), 768);
            assert_eq!(sock.dequeue(), Some(i));
            assert_eq!(sock.rmem_alloc(), 0);
        }
        assert_eq!(sock.dequeue(), None);
        assert_eq!(sock.rcvbuf_errors(), 0);
        assert_eq!(sock.max_queued(), 1);
    }

    #[test]
    fn a_datagram_queued_behind_the_reader_is_released_with_the_deficit() {
        // Two queued, the reader splices both, takes one (deficit 100 of a
        // 1000-byte buffer's 250, one left: deferred); a third arrives on
        // the receive queue. The second dequeue leaves the reader queue
        // empty, so it releases 200 and splices the third across.
        let mut sock = UdpSock::new(1000);
        sock.enqueue('a', 100).unwrap();
        sock.enqueue('b', 100).unwrap();
        assert_eq!(sock.dequeue(), Some('a'));
        assert_eq!(sock.rmem_alloc(), 200);
        sock.enqueue('c', 100).unwrap();
        assert_eq!(sock.rmem_alloc(), 300);
        assert_eq!(sock.dequeue(), Some('b'));
        assert_eq!(sock.rmem_alloc(), 100);
        assert_eq!(sock.len(), 1);
        assert_eq!(sock.dequeue(), Some('c'));
        assert_eq!(sock.rmem_alloc(), 0);
    }
}
