//! A reviewer's task-completion modules (block/bio.c's `init_bio()` part of the series, written
//! against bio-core's kernel API: [`bio_core::block::complete_in_task::module`]) as the command
//! line and scenario files name them: `--module NAME`, a scenario's `module NAME` line, and the
//! knobs a module takes.
//!
//! A module is registered with the process ([`register_module`], which
//! [`crate::cli::main_with`] calls); the `biosim` binary itself registers none.

use bio_core::block::complete_in_task::Variant;

pub use bio_core::block::complete_in_task::register_module;

/// The registered modules as variants, in registration order (the gallery's columns after the
/// posted versions).
pub fn registered() -> Vec<Variant> {
    Variant::all()
        .into_iter()
        .filter(Variant::is_module)
        .collect()
}

/// How an error says which modules there are: their names, or that none is registered and how a
/// reviewer registers one.
pub fn registered_text() -> String {
    let names: Vec<&str> = registered().iter().map(|v| v.name).collect();
    if names.is_empty() {
        "no module is registered: a binary registers its modules by calling `bio_sim::cli::main_with(&[&MODULE])` (see docs/own-patch.md)".to_owned()
    } else {
        format!("registered modules: {}", names.join(", "))
    }
}

/// Looks a registered module up by name (`--module NAME`, a scenario's `module NAME`). A posted
/// version's name is refused with the `--variant`/`variant` spelling that takes it; an unknown
/// name with the registered modules.
pub fn parse_module(name: &str) -> Result<Variant, String> {
    match Variant::by_name(name) {
        Some(v) if v.is_module() => Ok(v),
        Some(v) => Err(format!(
            "`{}` is a posted version, not a module (name it as a variant; {})",
            v.name,
            registered_text()
        )),
        None => Err(format!("unknown module `{name}` ({})", registered_text())),
    }
}

/// `variant` with the knob `NAME=VALUE` set, through [`Variant::set_knob`] (the one knob parser's
/// errors), which refuses a module every knob but the submitters' (`gate_reads`,
/// `fs_flag`). The name is kept.
pub fn with_knob(mut variant: Variant, kv: &str) -> Result<Variant, String> {
    let (k, v) = kv
        .split_once('=')
        .ok_or_else(|| format!("knob `{kv}`: expected NAME=VALUE"))?;
    variant.set_knob(k, v)?;
    Ok(variant)
}

/// The name of a variant changed by knobs: `custom` for a posted version (as a scenario's `knob`
/// lines name it), the module's own for a module (its code is still the module's).
pub fn customised(variant: Variant) -> Variant {
    match variant.module {
        Some(m) => Variant {
            name: m.0.name(),
            ..variant
        },
        None => Variant {
            name: "custom",
            ..variant
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_module_every_name_is_refused_saying_how_to_register_one() {
        let e = parse_module("mine").unwrap_err();
        assert!(e.starts_with("unknown module `mine`"), "{e}");
        assert!(e.contains("bio_sim::cli::main_with"), "{e}");
        let e = parse_module("v7").unwrap_err();
        assert!(e.contains("`v7` is a posted version, not a module"), "{e}");
    }

    #[test]
    fn a_knob_goes_through_the_one_parser_and_keeps_the_name() {
        let v = with_knob(Variant::V7, "requeue_on_online=false").unwrap();
        assert_eq!(v.name, "v7");
        assert!(!v.requeue_on_online);
        assert_eq!(customised(v).name, "custom");
        assert!(with_knob(Variant::V7, "requeue_on_online")
            .unwrap_err()
            .contains("expected NAME=VALUE"));
        assert!(with_knob(Variant::V7, "bogus=1")
            .unwrap_err()
            .contains("unknown knob"));
    }
}
