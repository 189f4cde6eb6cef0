//! Measurements, their latency histogram, and the comparison table.

use std::fmt::Write as _;

use crate::cost::CostGoals;
use crate::measurement::cost_cells;

pub use crate::measurement::{Histogram, Measurement, fmt_ns};

/// One row of the table: a case within a comparison group.
#[derive(Clone, Debug)]
pub struct Row {
    /// Which comparison the row belongs to (e.g. "append, no sync").
    pub group: String,
    /// The system and case (e.g. "krabka append").
    pub name: String,
    /// Whether this row is the group's krabka reference.
    pub is_krabka: bool,
    /// Whether this row is the group's raw-file limit.
    pub is_raw: bool,
    /// The result, or why there is none.
    pub result: Result<Measurement, String>,
    /// The targets of its cost columns.
    pub goals: CostGoals,
}

/// `value / base` as "0.42x", or "-" when either is missing or zero.
pub fn ratio(value: f64, base: Option<f64>) -> String {
    match base {
        Some(b) if b > 0.0 && value > 0.0 => format!("{:.2}x", value / b),
        _ => "-".to_owned(),
    }
}

/// Renders rows as a Markdown table; ratios compare MB/s with the same group's krabka row and
/// raw-limit row.
pub fn table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| group | case | MB/s | records/s | p50 | p99 | peak RSS | vs krabka | vs raw \
         | read calls / MiB | write calls / MiB | allocs / record | alloc B / record \
         | CRC B / B read |\n\
         | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: \
         | ---: | ---: |\n",
    );
    let base = |group: &str, pick: fn(&Row) -> bool| {
        rows.iter()
            .filter(|r| r.group == group && pick(r))
            .find_map(|r| r.result.as_ref().ok().map(Measurement::mb_per_s))
    };
    for r in rows {
        match &r.result {
            Ok(m) => {
                let v = m.mb_per_s();
                let _ = writeln!(
                    out,
                    "| {} | {} | {:.1} | {:.0} | {} | {} | {:.1} MiB | {} | {} | {} |",
                    r.group,
                    r.name,
                    v,
                    m.records_per_s(),
                    fmt_ns(m.p50_ns),
                    fmt_ns(m.p99_ns),
                    m.peak_rss_kib as f64 / 1024.0,
                    ratio(v, base(&r.group, |r| r.is_krabka)),
                    ratio(v, base(&r.group, |r| r.is_raw)),
                    cost_cells(m, &r.goals),
                );
            }
            Err(e) => {
                let _ = writeln!(
                    out,
                    "| {} | {} | failed: {} | | | | | | | | | | | |",
                    r.group,
                    r.name,
                    e.replace('|', "/")
                );
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::Costs;
    use crate::measurement::{bucket_high, bucket_of};
    use std::time::Duration;

    #[test]
    fn histogram_quantiles_are_within_one_bucket() {
        let mut h = Histogram::default();
        for ns in 1..=10_000u64 {
            h.record(Duration::from_nanos(ns));
        }
        assert_eq!(h.count(), 10_000);
        for (q, exact) in [(0.5, 5_000.0), (0.99, 9_900.0)] {
            let got = h.quantile_ns(q) as f64;
            assert!(
                got >= exact && got <= exact * 1.07,
                "q{q}: {got} vs {exact}"
            );
        }
        assert_eq!(Histogram::default().quantile_ns(0.5), 0);
    }

    #[test]
    fn bucket_edges_are_monotonic_and_contain_their_values() {
        for ns in [0u64, 1, 15, 16, 17, 31, 32, 1000, 123_456_789, u64::MAX / 2] {
            let b = bucket_of(ns);
            assert!(bucket_high(b) >= ns, "{ns}");
            if b > 0 {
                assert!(bucket_high(b - 1) < ns, "{ns}");
            }
        }
    }

    #[test]
    fn result_line_round_trips() {
        let m = Measurement {
            bytes: 1 << 20,
            records: 1024,
            secs: 0.25,
            p50_ns: 800,
            p99_ns: 12_000,
            peak_rss_kib: 4096,
            disk_bytes: 1 << 21,
            ops: 1024,
            costs: Costs {
                read_calls: 3,
                write_calls: 1024,
                read_bytes: 3 << 20,
                allocs: 7,
                alloc_bytes: 900,
            },
            crc_bytes: Some(1 << 20),
        };
        let out = format!("noise\n{}\n", m.to_line());
        assert_eq!(Measurement::parse(&out), Some(m.clone()));
        assert_eq!(Measurement::parse("nothing"), None);
        assert_eq!(m.disk_per_payload(), Some(2.0));
        let old = "RESULT bytes=1 records=1 secs=1 p50=1 p99=1 rss=1";
        let parsed = Measurement::parse(old);
        assert_eq!(parsed.as_ref().map(|m| m.disk_bytes), Some(0));
        assert_eq!(parsed.as_ref().map(|m| m.costs), Some(Costs::default()));
        assert_eq!(parsed.and_then(|m| m.crc_bytes), None);
        let unknown_crc = Measurement {
            crc_bytes: None,
            ..m
        };
        assert_eq!(
            Measurement::parse(&unknown_crc.to_line()),
            Some(unknown_crc)
        );
    }

    #[test]
    fn table_ratios_compare_with_krabka_and_raw_of_the_same_group() {
        let m = |mb: u64| Measurement {
            bytes: mb * 1_000_000,
            records: 10,
            secs: 1.0,
            p50_ns: 1,
            p99_ns: 2,
            peak_rss_kib: 1024,
            disk_bytes: 0,
            ops: 10,
            costs: Costs::default(),
            crc_bytes: None,
        };
        let row = |name: &str, k, raw, mb| Row {
            group: "g".into(),
            name: name.into(),
            is_krabka: k,
            is_raw: raw,
            result: Ok(m(mb)),
            goals: CostGoals::default(),
        };
        let t = table(&[
            row("krabka", true, false, 100),
            row("peer", false, false, 50),
            row("raw", false, true, 200),
        ]);
        let peer = t.lines().find(|l| l.contains("| peer |")).unwrap_or("");
        assert!(peer.contains("| 0.50x | 0.25x |"), "{peer}");
        assert_eq!(ratio(1.0, None), "-");
        assert_eq!(fmt_ns(1_500), "1.5 µs");
    }
}
