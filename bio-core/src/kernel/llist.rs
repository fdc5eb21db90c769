//! `include/linux/llist.h` and `lib/llist.c`: the lock-less singly linked list, for bios.
//!
//! `llist_add()` pushes with a compare-and-swap and reports whether the list was empty (the
//! producer's "schedule the worker" test); `llist_del_all()` takes every node with one exchange,
//! newest first; `llist_reverse_order()` turns that into submission order. Any context may add
//! concurrently with one taker, which is why v5 needed no IRQ disabling at all.
//!
//! The kernel embeds the `llist_node` in the object; biosim allocates it beside the bio, which
//! keeps `struct bio` free of raw pointers.
//!
//! ```
//! use bio_core::kernel::llist::{llist_add, llist_del_all, llist_reverse_order, LlistHead};
//! use bio_core::{Kernel, KernelConfig};
//! use bio_core::block::ReqOp;
//!
//! let k = Kernel::new(KernelConfig::default(), 1).unwrap();
//! let head = LlistHead::new();
//! let (a, b) = (k.bio_alloc(ReqOp::Write, 0), k.bio_alloc(ReqOp::Write, 8));
//! let first = a.id();
//! assert!(llist_add(a, &head)); // was empty: kick the worker
//! assert!(!llist_add(b, &head));
//! let mut list = llist_reverse_order(llist_del_all(&head));
//! assert_eq!(list.pop().map(|b| b.id()), Some(first)); // oldest first after the reverse
//! ```

use crate::block::{Bio, BioList};
use crate::sync::atomic::{AtomicPtr, Ordering};
use std::fmt;
use std::ptr;

/// `struct llist_node`, holding the bio it links.
struct LlistNode {
    bio: Box<Bio>,
    next: *mut LlistNode,
}

/// `struct llist_head` of bios.
pub struct LlistHead {
    first: AtomicPtr<LlistNode>,
}

// SAFETY: nodes are owned by the list until one taker swaps the whole chain out; bios are Send.
unsafe impl Send for LlistHead {}
// SAFETY: as above; every access to a node is after the swap or before the publishing CAS.
unsafe impl Sync for LlistHead {}

impl fmt::Debug for LlistHead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LlistHead").finish_non_exhaustive()
    }
}

impl Default for LlistHead {
    fn default() -> Self {
        Self::new()
    }
}

/// The chain `llist_del_all()` took: newest first until [`llist_reverse_order`].
#[derive(Debug, Default)]
pub struct LlistNodes {
    #[allow(clippy::vec_box)] // bios travel boxed everywhere; unboxing here would copy them
    bios: Vec<Box<Bio>>,
    reversed: bool,
}

impl LlistNodes {
    /// The next bio of the chain (`llist_for_each_entry_safe()`), in the chain's order.
    pub fn pop(&mut self) -> Option<Box<Bio>> {
        if self.reversed {
            self.bios.pop()
        } else if self.bios.is_empty() {
            None
        } else {
            Some(self.bios.remove(0))
        }
    }

    /// How many bios the chain holds.
    pub fn len(&self) -> usize {
        self.bios.len()
    }

    /// Whether the chain is empty (`!first`).
    pub fn is_empty(&self) -> bool {
        self.bios.is_empty()
    }

    /// The chain as a `bio_list`, in the chain's order.
    pub fn into_bio_list(mut self) -> BioList {
        let mut list = BioList::new();
        while let Some(bio) = self.pop() {
            list.add(bio);
        }
        list
    }
}

impl LlistHead {
    /// `LLIST_HEAD_INIT`: an empty list.
    pub fn new() -> Self {
        Self {
            first: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// `llist_empty()`.
    pub fn empty(&self) -> bool {
        self.first.load(Ordering::Acquire).is_null()
    }

    /// Counts the nodes without taking them: a read between steps for tests and the oracle. The
    /// caller excludes concurrent takers.
    pub fn len_unlocked(&self) -> usize {
        let mut n = 0;
        let mut node = self.first.load(Ordering::Acquire);
        while !node.is_null() {
            n += 1;
            // SAFETY: nodes stay alive until taken; the caller excludes concurrent takers.
            node = unsafe { (*node).next };
        }
        n
    }
}

/// `llist_empty(head)`: whether the list has no node (a racy read, as the kernel's: a producer may
/// add right after).
pub fn llist_empty(head: &LlistHead) -> bool {
    head.empty()
}

/// `llist_add(new, head)`: pushes `bio`; returns whether the list was empty before.
pub fn llist_add(bio: Box<Bio>, head: &LlistHead) -> bool {
    let node = Box::into_raw(Box::new(LlistNode {
        bio,
        next: ptr::null_mut(),
    }));
    let mut first = head.first.load(Ordering::Relaxed);
    loop {
        // SAFETY: `node` is ours until the CAS publishes it.
        unsafe { (*node).next = first };
        match head
            .first
            .compare_exchange_weak(first, node, Ordering::Release, Ordering::Relaxed)
        {
            Ok(_) => return first.is_null(),
            Err(now) => first = now,
        }
        crate::sync::spin_loop();
    }
}

/// `llist_del_all(head)`: takes every node, newest first.
pub fn llist_del_all(head: &LlistHead) -> LlistNodes {
    let mut node = head.first.swap(ptr::null_mut(), Ordering::Acquire);
    let mut bios = Vec::new();
    while !node.is_null() {
        // SAFETY: the swap made us the only owner of the chain.
        let boxed = unsafe { Box::from_raw(node) };
        node = boxed.next;
        bios.push(boxed.bio);
    }
    LlistNodes {
        bios,
        reversed: false,
    }
}

/// `llist_reverse_order(first)`: the chain oldest first.
pub fn llist_reverse_order(mut nodes: LlistNodes) -> LlistNodes {
    // Stored newest first; popping from the back yields the oldest first.
    nodes.reversed = !nodes.reversed;
    nodes
}

impl Drop for LlistHead {
    fn drop(&mut self) {
        drop(llist_del_all(self));
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::block::ReqOp;
    use crate::{Kernel, KernelConfig};

    #[test]
    fn add_reports_empty_and_the_reverse_gives_submission_order() {
        let k = Kernel::new(KernelConfig::default(), 1).unwrap();
        let head = LlistHead::new();
        assert!(head.empty());
        let bios: Vec<Box<Bio>> = (0..3).map(|i| k.bio_alloc(ReqOp::Write, i * 8)).collect();
        let ids: Vec<u64> = bios.iter().map(|b| b.id()).collect();
        let firsts: Vec<bool> = bios.into_iter().map(|b| llist_add(b, &head)).collect();
        assert_eq!(firsts, [true, false, false]);
        assert_eq!(head.len_unlocked(), 3);
        let mut newest = llist_del_all(&head);
        assert!(head.empty());
        assert_eq!(newest.len(), 3);
        assert_eq!(newest.pop().unwrap().id(), ids[2]);
        let mut oldest = llist_reverse_order(llist_del_all(&head));
        assert!(oldest.pop().is_none());
        let ids: Vec<u64> = (0..3)
            .map(|i| {
                let b = k.bio_alloc(ReqOp::Write, i * 8);
                let id = b.id();
                llist_add(b, &head);
                id
            })
            .collect();
        oldest = llist_reverse_order(llist_del_all(&head));
        let order: Vec<u64> = std::iter::from_fn(|| oldest.pop().map(|b| b.id())).collect();
        assert_eq!(order, ids);
    }
}
