//! `biosim variants`: the posted versions of the batcher and their knobs.

/// The listing `biosim variants` prints.
pub fn variants() -> String {
    use bio_core::block::complete_in_task::Variant;
    let mut out = String::new();
    for v in Variant::ALL {
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
