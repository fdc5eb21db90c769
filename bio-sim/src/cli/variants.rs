//! `biosim variants`: the posted versions of the batcher and their knobs, then the registered
//! modules with their summaries and knobs.

/// The listing `biosim variants` prints.
pub fn variants() -> String {
    use bio_core::block::complete_in_task::Variant;
    let mut out = String::new();
    for v in Variant::all() {
        if let Some(m) = v.module {
            out.push_str(&format!("{} (module): {}\n", v.name, m.0.summary()));
            for (k, val) in v.knobs() {
                out.push_str(&format!("    {k:<22} {val}\n"));
            }
            if let Some((_, why)) = v.provenance() {
                out.push_str(&format!("    * {why}\n"));
            }
            continue;
        }
        out.push_str(&format!(
            "{}{}\n",
            v.name,
            if v == Variant::DEFAULT {
                " (default)"
            } else {
                ""
            }
        ));
        let provenance = v.provenance();
        for (k, val) in v.knobs() {
            let mark = match provenance {
                Some((knobs, _)) if knobs.contains(&k) => " *",
                _ => "",
            };
            out.push_str(&format!("    {k:<22} {val}{mark}\n"));
        }
        if let Some((_, why)) = provenance {
            out.push_str(&format!("    * {why}\n"));
        }
    }
    out
}
