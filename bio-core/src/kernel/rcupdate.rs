//! `include/linux/rcupdate.h`: `rcu_read_lock()`, `rcu_read_unlock()` and `rcu_preempt_depth()`.
//!
//! With `CONFIG_PREEMPT_RCU` a reader nests `current->rcu_read_lock_nesting` and stays
//! preemptible; without it `rcu_read_lock()` is `preempt_disable()` and `rcu_preempt_depth()` is
//! constant 0, which is why `bio_in_atomic()` tests it only under `CONFIG_PREEMPTION`.

use super::Cpu;

impl Cpu {
    /// `rcu_read_lock()`.
    pub fn rcu_read_lock(&self) {
        if self.config().preempt_rcu {
            self.rcu_nesting.set(self.rcu_nesting.get() + 1);
        } else {
            self.rcu_sched_depth.set(self.rcu_sched_depth.get() + 1);
            self.preempt_disable();
        }
    }

    /// `rcu_read_unlock()`. An unbalanced unlock is reported.
    pub fn rcu_read_unlock(&self) {
        if self.config().preempt_rcu {
            if self.rcu_nesting.get() == 0 {
                self.warn(
                    "kernel/rcu/tree_plugin.h: __rcu_read_unlock: rcu_read_lock_nesting underflow",
                );
                return;
            }
            self.rcu_nesting.set(self.rcu_nesting.get() - 1);
        } else {
            if self.rcu_sched_depth.get() == 0 {
                self.warn("include/linux/rcupdate.h: rcu_read_unlock() without rcu_read_lock()");
                return;
            }
            self.rcu_sched_depth.set(self.rcu_sched_depth.get() - 1);
            self.preempt_enable();
        }
    }

    /// `rcu_preempt_depth()`: the reader nesting under `CONFIG_PREEMPT_RCU`, `0` otherwise.
    pub fn rcu_preempt_depth(&self) -> u32 {
        if self.config().preempt_rcu {
            self.rcu_nesting.get()
        } else {
            0
        }
    }

    /// Runs `f` inside an RCU read-side critical section.
    pub fn with_rcu_read_lock<R>(&self, f: impl FnOnce(&Self) -> R) -> R {
        self.rcu_read_lock();
        let r = f(self);
        self.rcu_read_unlock();
        r
    }
}
