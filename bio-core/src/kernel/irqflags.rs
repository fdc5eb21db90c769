//! `include/linux/irqflags.h`: the per-CPU IRQ flag (`local_irq_save()`/`local_irq_restore()`,
//! `local_irq_disable()`/`local_irq_enable()`).

use super::Cpu;

/// The saved IRQ state `local_irq_save()` returns (`unsigned long flags`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "local_irq_restore() needs the flags local_irq_save() returned"]
pub struct IrqFlags {
    was_disabled: bool,
}

impl IrqFlags {
    /// `raw_irqs_disabled_flags(flags)`.
    pub fn disabled(self) -> bool {
        self.was_disabled
    }
}

impl Cpu {
    /// Changes the IRQ flag. Turning IRQs off takes the CPU's IRQ lock and turning them on
    /// releases it, so every flow of this CPU that disables IRQs (a task's `local_irq_save()`, a
    /// hardirq handler) excludes the others, as one real CPU does.
    pub(crate) fn set_irqs_off(&self, off: bool) {
        if self.irqs_off.get() == off {
            return;
        }
        if off {
            self.kernel().irq_lock_acquire(self.id());
            self.irqs_off.set(true);
        } else {
            self.irqs_off.set(false);
            self.kernel().irq_lock_release(self.id());
        }
    }

    /// `local_irq_save(flags)`: disables IRQs on this CPU and returns the previous state.
    pub fn local_irq_save(&self) -> IrqFlags {
        let flags = IrqFlags {
            was_disabled: self.irqs_off.get(),
        };
        self.set_irqs_off(true);
        flags
    }

    /// `local_irq_restore(flags)`. Restoring "enabled" opens an IRQ window.
    pub fn local_irq_restore(&self, flags: IrqFlags) {
        self.set_irqs_off(flags.was_disabled);
        if !flags.was_disabled {
            self.irq_window();
        }
    }

    /// `local_irq_disable()`.
    pub fn local_irq_disable(&self) {
        self.set_irqs_off(true);
    }

    /// `local_irq_enable()`. Enabling IRQs inside a hardirq handler is reported, as lockdep's
    /// "local_irq_enable() in hardirq" would.
    pub fn local_irq_enable(&self) {
        if self.in_hardirq() {
            self.warn("include/linux/irqflags.h: local_irq_enable() inside a hardirq handler");
            return;
        }
        self.set_irqs_off(false);
        self.irq_window();
    }

    /// Runs `f` between `local_irq_save()` and `local_irq_restore()`.
    pub fn with_irqs_disabled<R>(&self, f: impl FnOnce(&Self) -> R) -> R {
        let flags = self.local_irq_save();
        let r = f(self);
        self.local_irq_restore(flags);
        r
    }
}
