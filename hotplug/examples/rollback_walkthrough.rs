//! Walks an offline of CPU1 with a failure injected at an `AP_ONLINE_DYN`
//! state, then a clean offline, and prints the machine's trace.
//!
//! Run with `cargo run -p hotplug --example rollback_walkthrough`; the output
//! is quoted in docs/cpu-hotplug.md.

use std::sync::Arc;

use hotplug::*;

fn ok() -> Option<Callback<()>> {
    Some(Arc::new(|_: &(), _: &Invocation| Ok(())))
}

fn main() -> Result<(), HotplugError> {
    let mut hp: Cpuhp<()> = Cpuhp::new(2, 2)?;

    // A dead callback on a fixed PREPARE state and one on a dynamic PREPARE slot,
    // as block/bio.c and the seed's batcher register theirs.
    hp.cpuhp_setup_state_nocalls(CPUHP_BIO_DEAD, "block/bio:dead", None, ok())?;
    let bp_dyn =
        hp.cpuhp_setup_state_nocalls(CPUHP_BP_PREPARE_DYN, "demo/batch:dead", None, ok())?;
    // A DYING callback, the workqueue online state, and three dynamic ONLINE states.
    hp.cpuhp_setup_state_nocalls(CPUHP_AP_SCHED_STARTING, "sched:starting", ok(), ok())?;
    hp.cpuhp_setup_state_nocalls(CPUHP_AP_WORKQUEUE_ONLINE, "workqueue:online", ok(), ok())?;
    let a = hp.cpuhp_setup_state_nocalls(CPUHP_AP_ONLINE_DYN, "demo/a:online", ok(), ok())?;
    let b = hp.cpuhp_setup_state_nocalls(CPUHP_AP_ONLINE_DYN, "demo/b:online", ok(), ok())?;
    let c = hp.cpuhp_setup_state_nocalls(CPUHP_AP_ONLINE_DYN, "demo/c:online", ok(), ok())?;
    println!("registered: demo/batch:dead = {bp_dyn}, demo/a = {a}, demo/b = {b}, demo/c = {c}");
    println!();
    println!("$ cat /sys/devices/system/cpu/hotplug/states   (excerpt)");
    let shown = [
        CPUHP_BIO_DEAD,
        bp_dyn,
        CPUHP_BRINGUP_CPU,
        CPUHP_AP_SCHED_STARTING,
        CPUHP_TEARDOWN_CPU,
        CPUHP_AP_WORKQUEUE_ONLINE,
        a,
        b,
        c,
        CPUHP_AP_ACTIVE,
        CPUHP_ONLINE,
    ];
    for line in hp.states_listing().lines() {
        let n: i32 = line
            .split(':')
            .next()
            .unwrap_or("")
            .trim()
            .parse()
            .unwrap_or(-1);
        if shown.contains(&StateId(n)) {
            println!("{line}");
        }
    }

    let cpu1 = CpuId(1);
    println!();
    println!("$ echo {} > /sys/devices/system/cpu/cpu1/hotplug/fail", b.0);
    hp.set_fail(cpu1, b.0)?;
    println!("$ echo 0 > /sys/devices/system/cpu/cpu1/hotplug/target");
    hp.take_log();
    let res = hp.set_target(cpu1, 0, &());
    for rec in hp.log() {
        println!("{rec}");
    }
    match &res {
        Ok(()) => println!("=> ok"),
        Err(e) => println!("=> {e}"),
    }
    println!(
        "CPU1: state {}, online {}, fail {}",
        hp.state(cpu1)?,
        hp.cpu_online(cpu1),
        hp.fail(cpu1)?
    );

    println!();
    println!("$ echo 0 > /sys/devices/system/cpu/cpu1/hotplug/target   (fail was one-shot)");
    hp.take_log();
    let res = hp.set_target(cpu1, 0, &());
    for rec in hp.log() {
        println!("{rec}");
    }
    match &res {
        Ok(()) => println!("=> ok"),
        Err(e) => println!("=> {e}"),
    }
    println!(
        "CPU1: state {}, online {}, dying {}",
        hp.state(cpu1)?,
        hp.cpu_online(cpu1),
        hp.cpu_dying(cpu1)
    );
    Ok(())
}
