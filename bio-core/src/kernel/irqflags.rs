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
    /// `local_irq_save(flags)`: disables IRQs on this CPU and returns the previous state.
    pub fn local_irq_save(&self) -> IrqFlags {
        let flags = IrqFlags {
            was_disabled: self.irqs_off.get(),
        };
        self.irqs_off.set(true);
        flags
    }

    /// `local_irq_restore(flags)`.
    pub fn local_irq_restore(&self, flags: IrqFlags) {
        self.irqs_off.set(flags.was_disabled);
    }

    /// `local_irq_disable()`.
    pub fn local_irq_disable(&self) {
        self.irqs_off.set(true);
    }

    /// `local_irq_enable()`. Enabling IRQs inside a hardirq handler is reported, as lockdep's
    /// "local_irq_enable() in hardirq" would.
    pub fn local_irq_enable(&self) {
        if self.in_hardirq() {
            self.warn("include/linux/irqflags.h: local_irq_enable() inside a hardirq handler");
        }
        self.irqs_off.set(false);
    }

    /// Runs `f` between `local_irq_save()` and `local_irq_restore()`.
    pub fn with_irqs_disabled<R>(&self, f: impl FnOnce(&Self) -> R) -> R {
        let flags = self.local_irq_save();
        let r = f(self);
        self.local_irq_restore(flags);
        r
    }
}
