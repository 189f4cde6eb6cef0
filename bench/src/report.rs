//! Measurements, their latency histogram, and the comparison table.

use std::fmt::Write as _;
use std::time::Duration;

use crate::cost::{CostGoals, Costs, Spent, cost_cells};

/// Sub-buckets per power of two: quantiles are exact to within 1/16 (about 6 %).
const SUB: u32 = 16;
const SUB_BITS: u32 = SUB.trailing_zeros();

/// A fixed-size log-linear latency histogram (8 KiB, allocation-free while recording), so
/// recording millions of ops adds nothing to the peak RSS being measured.
#[derive(Clone, Debug)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self {
            counts: vec![0; (64 * SUB) as usize],
            total: 0,
        }
    }
}

fn bucket_of(ns: u64) -> usize {
    if ns < u64::from(SUB) {
        return ns as usize;
    }
    let msb = 63 - ns.leading_zeros();
    let shift = msb - SUB_BITS;
    let sub = (ns >> shift) as u32 & (SUB - 1);
    ((shift + 1) * SUB + sub) as usize
}

/// The largest value that falls in bucket `b` (quantiles report the bucket's upper edge).
fn bucket_high(b: usize) -> u64 {
    let b = b as u64;
    let sub_n = u64::from(SUB);
    if b < sub_n {
        return b;
    }
    let shift = b / sub_n - 1;
    let sub = b % sub_n;
    ((sub_n + sub + 1) << shift) - 1
}

impl Histogram {
    /// Records one op's latency.
    pub fn record(&mut self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        if let Some(c) = self.counts.get_mut(bucket_of(ns)) {
            *c += 1;
        }
        self.total += 1;
    }

    /// Adds another histogram's counts (per-thread histograms merged after a run).
    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.total += other.total;
    }

    /// Ops recorded.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// The latency at quantile `q` (0..=1), in nanoseconds; 0 when empty.
    pub fn quantile_ns(&self, q: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (b, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return bucket_high(b);
            }
        }
        bucket_high(self.counts.len() - 1)
    }

    /// The median and the 99th percentile, formatted `"<p50> / <p99>"` with [`fmt_ns`].
    pub fn fmt_p50_p99(&self) -> String {
        format!(
            "{} / {}",
            fmt_ns(self.quantile_ns(0.5)),
            fmt_ns(self.quantile_ns(0.99))
        )
    }
}

/// One case's result, as a child process reports it on one line.
#[derive(Clone, Debug, PartialEq)]
pub struct Measurement {
    /// Payload bytes moved (the values' bytes, the same for every system).
    pub bytes: u64,
    /// Records moved.
    pub records: u64,
    /// Wall time of the timed part.
    pub secs: f64,
    /// Median op latency, ns.
    pub p50_ns: u64,
    /// 99th percentile op latency, ns.
    pub p99_ns: u64,
    /// Peak resident set (VmHWM) of the process that ran the case, KiB.
    pub peak_rss_kib: u64,
    /// Bytes the case's log takes on disk when it measures that (0 otherwise).
    pub disk_bytes: u64,
    /// Ops timed (appends, batches, read calls).
    pub ops: u64,
    /// System calls and allocations of the timed part.
    pub costs: Costs,
    /// Bytes the timed part checked CRC-32Cs over, when the case knows them.
    pub crc_bytes: Option<u64>,
}

impl Measurement {
    /// Builds a measurement from a run's totals, what its timed part spent and its histogram.
    pub fn new(bytes: u64, records: u64, spent: Spent, hist: &Histogram) -> Self {
        Self {
            bytes,
            records,
            secs: spent.elapsed.as_secs_f64(),
            p50_ns: hist.quantile_ns(0.50),
            p99_ns: hist.quantile_ns(0.99),
            peak_rss_kib: vm_hwm_kib(),
            disk_bytes: 0,
            ops: hist.count(),
            costs: spent.costs,
            crc_bytes: None,
        }
    }

    /// The same measurement with `crc` bytes checked.
    pub fn with_crc_bytes(mut self, crc: u64) -> Self {
        self.crc_bytes = Some(crc);
        self
    }

    /// `count` per MiB (2^20 bytes) of payload; `None` without payload.
    pub(crate) fn per_mib(&self, count: u64) -> Option<f64> {
        (self.bytes > 0).then(|| count as f64 * f64::from(1u32 << 20) / self.bytes as f64)
    }

    /// `count` per record; `None` without records.
    pub(crate) fn per_record(&self, count: u64) -> Option<f64> {
        (self.records > 0).then(|| count as f64 / self.records as f64)
    }

    /// Read system calls per MiB of payload.
    pub fn read_calls_per_mib(&self) -> Option<f64> {
        self.per_mib(self.costs.read_calls)
    }

    /// Write system calls per MiB of payload.
    pub fn write_calls_per_mib(&self) -> Option<f64> {
        self.per_mib(self.costs.write_calls)
    }

    /// Heap allocations per record.
    pub fn allocs_per_record(&self) -> Option<f64> {
        self.per_record(self.costs.allocs)
    }

    /// Bytes allocated per record.
    pub fn alloc_bytes_per_record(&self) -> Option<f64> {
        self.per_record(self.costs.alloc_bytes)
    }

    /// CRC-checked bytes per byte the read calls returned; `None` when the case read nothing
    /// or does not know its CRC bytes.
    pub fn crc_per_byte_read(&self) -> Option<f64> {
        let crc = self.crc_bytes?;
        (self.costs.read_bytes > 0).then(|| crc as f64 / self.costs.read_bytes as f64)
    }

    /// The same measurement with `disk` bytes on disk.
    pub fn with_disk_bytes(mut self, disk: u64) -> Self {
        self.disk_bytes = disk;
        self
    }

    /// Bytes on disk per payload byte; `None` when the case did not measure its disk use.
    pub fn disk_per_payload(&self) -> Option<f64> {
        (self.disk_bytes > 0 && self.bytes > 0).then(|| self.disk_bytes as f64 / self.bytes as f64)
    }

    /// Payload megabytes (10^6) per second.
    pub fn mb_per_s(&self) -> f64 {
        if self.secs > 0.0 {
            self.bytes as f64 / 1e6 / self.secs
        } else {
            0.0
        }
    }

    /// Records per second.
    pub fn records_per_s(&self) -> f64 {
        if self.secs > 0.0 {
            self.records as f64 / self.secs
        } else {
            0.0
        }
    }

    /// The one-line wire form a child prints (`RESULT k=v ...`).
    pub fn to_line(&self) -> String {
        format!(
            "RESULT bytes={} records={} secs={} p50={} p99={} rss={} disk={} ops={} syscr={} \
             syscw={} rchar={} allocs={} abytes={} crc={}",
            self.bytes,
            self.records,
            self.secs,
            self.p50_ns,
            self.p99_ns,
            self.peak_rss_kib,
            self.disk_bytes,
            self.ops,
            self.costs.read_calls,
            self.costs.write_calls,
            self.costs.read_bytes,
            self.costs.allocs,
            self.costs.alloc_bytes,
            self.crc_bytes
                .map_or_else(|| "-".to_owned(), |c| c.to_string()),
        )
    }

    /// Parses [`to_line`](Self::to_line) from a child's output (the last `RESULT` line).
    pub fn parse(output: &str) -> Option<Self> {
        let line = output.lines().rev().find(|l| l.starts_with("RESULT "))?;
        let field = |k: &str| {
            line.split_whitespace()
                .find_map(|kv| kv.strip_prefix(k)?.strip_prefix('='))
        };
        // Fields a line of an older binary lacks read as 0 (or unknown).
        let count = |k: &str| field(k).map_or(Some(0), |d| d.parse().ok());
        Some(Self {
            bytes: field("bytes")?.parse().ok()?,
            records: field("records")?.parse().ok()?,
            secs: field("secs")?.parse().ok()?,
            p50_ns: field("p50")?.parse().ok()?,
            p99_ns: field("p99")?.parse().ok()?,
            peak_rss_kib: field("rss")?.parse().ok()?,
            disk_bytes: count("disk")?,
            ops: count("ops")?,
            costs: Costs {
                read_calls: count("syscr")?,
                write_calls: count("syscw")?,
                read_bytes: count("rchar")?,
                allocs: count("allocs")?,
                alloc_bytes: count("abytes")?,
            },
            crc_bytes: field("crc").and_then(|c| c.parse().ok()),
        })
    }
}

/// This process's peak resident set size (VmHWM) in KiB; 0 where /proc is missing.
pub fn vm_hwm_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

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

/// A latency in the unit that keeps it short.
pub fn fmt_ns(ns: u64) -> String {
    if ns >= 10_000_000 {
        format!("{:.0} ms", ns as f64 / 1e6)
    } else if ns >= 10_000 {
        format!("{:.0} µs", ns as f64 / 1e3)
    } else if ns >= 1_000 {
        format!("{:.1} µs", ns as f64 / 1e3)
    } else {
        format!("{ns} ns")
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
