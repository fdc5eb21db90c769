//! The cover letter's table (`[PATCH v6 0/4] block: enable RWF_DONTCACHE for block devices`):
//! per-second MB/s of the normal and the DONTCACHE run side by side, the averages, and the
//! DONTCACHE run's gain in percent; the ratio is printed beside it.

use std::fmt::Write as _;

/// MB as the cover letter counts them (fio/dd's 10^6 bytes).
const MB: f64 = 1e6;

/// One seed-shaped table: `title` (e.g. `===== READS (...) =====`) and the bytes each run moved
/// in each simulated second.
pub fn seed_table(title: &str, normal: &[u64], dontcache: &[u64]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{title}");
    let _ = writeln!(out, " sec   normal MB/s  dontcache MB/s");
    let _ = writeln!(out, "----  ------------  --------------");
    let rows = normal.len().max(dontcache.len());
    let cell = |v: &[u64], i: usize| {
        v.get(i)
            .map(|b| format!("{:.1}", *b as f64 / MB))
            .unwrap_or_else(|| "-".to_owned())
    };
    for i in 0..rows {
        let _ = writeln!(
            out,
            "{:>4}  {:>12}  {:>14}",
            i + 1,
            cell(normal, i),
            cell(dontcache, i)
        );
    }
    let _ = writeln!(out, "----  ------------  --------------");
    let (a, b) = (average_mb(normal), average_mb(dontcache));
    let _ = writeln!(
        out,
        " avg  {:>12.1}  {:>14.1}  ({})  ratio {}",
        a,
        b,
        gain(a, b),
        ratio_text(a, b)
    );
    out
}

/// The average MB/s over the seconds.
pub fn average_mb(per_second: &[u64]) -> f64 {
    if per_second.is_empty() {
        return 0.0;
    }
    per_second.iter().map(|b| *b as f64).sum::<f64>() / per_second.len() as f64 / MB
}

/// `dontcache / normal`, if `normal` moved anything.
pub fn ratio(normal: f64, dontcache: f64) -> Option<f64> {
    (normal > 0.0).then(|| dontcache / normal)
}

fn ratio_text(normal: f64, dontcache: f64) -> String {
    ratio(normal, dontcache)
        .map(|r| format!("{r:.2}x"))
        .unwrap_or_else(|| "-".to_owned())
}

/// `+56%` as the cover letter prints the gain.
fn gain(normal: f64, dontcache: f64) -> String {
    match ratio(normal, dontcache) {
        Some(r) => format!("{:+.0}%", (r - 1.0) * 100.0),
        None => "-".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cover_letters_shape() {
        let t = seed_table("== T ==", &[1_000_000_000, 2_000_000_000], &[3_000_000_000]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[1], " sec   normal MB/s  dontcache MB/s");
        assert_eq!(lines[3], "   1        1000.0          3000.0");
        assert_eq!(lines[4], "   2        2000.0               -");
        assert_eq!(
            lines[6],
            " avg        1500.0          3000.0  (+100%)  ratio 2.00x"
        );
        assert_eq!(ratio(0.0, 1.0), None);
        assert_eq!(average_mb(&[]), 0.0);
    }
}
