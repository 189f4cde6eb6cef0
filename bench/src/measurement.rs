//! One case's result ([`Measurement`]), as a child process reports it on one line, its
//! latency histogram, and the cost cells of its row.

use std::time::Duration;

use crate::cost::{CostGoals, Costs, Spent, with_goal};

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

pub(crate) fn bucket_of(ns: u64) -> usize {
    if ns < u64::from(SUB) {
        return ns as usize;
    }
    let msb = 63 - ns.leading_zeros();
    let shift = msb - SUB_BITS;
    let sub = (ns >> shift) as u32 & (SUB - 1);
    ((shift + 1) * SUB + sub) as usize
}

/// The largest value that falls in bucket `b` (quantiles report the bucket's upper edge).
pub(crate) fn bucket_high(b: usize) -> u64 {
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

/// This process's peak resident set size (VmHWM) in KiB; 0 where /proc is missing.
pub fn vm_hwm_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
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

/// Write calls a case may make beyond its per-op goal, for the log's own files.
const LOG_OWN_WRITES: u64 = 8;

/// The cost cells of a row: read and write calls per MiB, allocations and bytes allocated per
/// record, CRC bytes per byte read, each with its target.
pub fn cost_cells(m: &Measurement, g: &CostGoals) -> String {
    use crate::storage::goal::Goal::{AtLeast, AtMost};
    let per_op = |goal: Option<f64>| {
        goal.and_then(|per_op| m.per_mib(m.ops).map(|ops_per_mib| per_op * ops_per_mib))
    };
    let read_goal = g
        .read_calls_per_mib
        .or_else(|| per_op(g.read_calls_per_op))
        .map(AtMost);
    // Plus the few writes of the log's own files at open and close (its clean-shutdown
    // marker, recovery point, index files: 6 in a run of one segment), whatever the ops.
    let write_goal = per_op(g.write_calls_per_op)
        .map(|calls| calls + m.per_mib(LOG_OWN_WRITES).unwrap_or(0.0))
        .map(AtMost);
    format!(
        "{} | {} | {} | {} | {}",
        with_goal(m.read_calls_per_mib(), read_goal),
        with_goal(m.write_calls_per_mib(), write_goal),
        with_goal(m.allocs_per_record(), g.allocs_per_record.map(AtMost)),
        with_goal(
            m.alloc_bytes_per_record(),
            g.alloc_bytes_per_record.and_then(|(factor, plus)| {
                m.per_record(m.bytes).map(|v| AtMost(factor * v + plus))
            }),
        ),
        with_goal(m.crc_per_byte_read(), g.crc_per_byte_read.map(AtLeast)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cost_columns_show_each_figure_per_mib_or_record_with_its_target() {
        // 2 MiB of payload in 4 records, 2 ops (calls); 1 MiB read in 3 calls.
        let m = Measurement {
            bytes: 2 << 20,
            records: 4,
            secs: 1.0,
            p50_ns: 1,
            p99_ns: 1,
            peak_rss_kib: 0,
            disk_bytes: 0,
            ops: 2,
            costs: Costs {
                read_calls: 6,
                write_calls: 2,
                read_bytes: 1 << 20,
                allocs: 2,
                alloc_bytes: 400,
            },
            crc_bytes: Some(1 << 19),
        };
        let goals = CostGoals {
            read_calls_per_mib: Some(2.0),
            write_calls_per_op: Some(1.0),
            allocs_per_record: Some(1.0),
            alloc_bytes_per_record: None,
            crc_per_byte_read: Some(0.95),
            read_calls_per_op: None,
        };
        // Writes: one per op (1 per MiB) and the log's own 8 in 2 MiB (4 per MiB).
        assert_eq!(
            cost_cells(&m, &goals),
            "3.00 (≤ 2.00 ✗) | 1.00 (≤ 5.00 ✓) | 0.500 (≤ 1.00 ✓) | 100 | 0.500 (≥ 0.950 ✗)"
        );
        // One write too many per op in a long run is past the allowance.
        let long = Measurement {
            bytes: 1 << 30,
            ops: 1 << 20,
            costs: Costs {
                write_calls: 2 << 20,
                ..m.costs
            },
            ..m.clone()
        };
        assert!(
            cost_cells(&long, &goals).contains("2048 (≤ 1024 ✗)"),
            "{}",
            cost_cells(&long, &goals)
        );
        // Per op: 2 read calls per point read allowed, 2 ops per 2 MiB: at most 2 per MiB.
        // 512 KiB of payload per record: at most 0.5 × that + 8 bytes allocated.
        let point = CostGoals {
            read_calls_per_op: Some(2.0),
            alloc_bytes_per_record: Some((0.5, 8.0)),
            ..CostGoals::default()
        };
        assert_eq!(
            cost_cells(&m, &point),
            "3.00 (≤ 2.00 ✗) | 1.00 | 0.500 | 100 (≤ 262152 ✓) | 0.500"
        );
        let none = Measurement {
            records: 0,
            crc_bytes: None,
            ..m
        };
        assert_eq!(
            cost_cells(&none, &CostGoals::default()),
            "3.00 | 1.00 | - | - | -"
        );
    }
}
