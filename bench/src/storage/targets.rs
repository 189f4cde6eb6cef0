//! The storage targets: each a ratio of a case against its floor (a baseline measured in the
//! same run), and the table and chart of them across value sizes.

use std::collections::HashMap;
use std::fmt::Write as _;

use super::chart::{self, ChartGroup};
use super::goal::Goal;
use crate::report::Measurement;

/// What a target's ratio compares.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Metric {
    /// Payload MB/s of the case over the baseline's.
    Throughput,
    /// Median op latency of the case over the baseline's.
    P50,
    /// Bytes the case's log takes on disk over its payload bytes (no baseline row).
    DiskPerPayload,
}

/// One target row.
pub struct Target {
    /// What is compared with what.
    pub label: &'static str,
    /// The case measured.
    pub case: &'static str,
    /// The floor it is measured against (`None` for [`Metric::DiskPerPayload`]).
    pub baseline: Option<&'static str>,
    /// The ratio taken.
    pub metric: Metric,
    /// What the ratio must be.
    pub goal: Goal,
    /// The value sizes the goal applies to (the ratio is shown at the others too).
    pub sizes: &'static [usize],
}

const ALL: &[usize] = &[100, 1024, 16 << 10];
const SMALL: &[usize] = &[100, 1024];
const KIB: &[usize] = &[1024];

const fn target(
    label: &'static str,
    case: &'static str,
    baseline: &'static str,
    metric: Metric,
    goal: Goal,
    sizes: &'static [usize],
) -> Target {
    Target {
        label,
        case,
        baseline: Some(baseline),
        metric,
        goal,
        sizes,
    }
}

const fn disk(
    label: &'static str,
    case: &'static str,
    goal: Goal,
    sizes: &'static [usize],
) -> Target {
    Target {
        label,
        case,
        baseline: None,
        metric: Metric::DiskPerPayload,
        goal,
        sizes,
    }
}

use Goal::{AtLeast, AtMost, Info};
use Metric::{P50, Throughput};

/// Every target and diagnostic row, in print order.
pub const TARGETS: &[Target] = &[
    target(
        "append_batch of 100, no sync / raw write of the 100 values",
        "krabka-batch",
        "raw-batch",
        Throughput,
        AtLeast(0.9),
        ALL,
    ),
    target(
        "floor: raw write of 100 + one CRC-32C of them / raw write of 100",
        "raw-batch-crc",
        "raw-batch",
        Throughput,
        Info,
        ALL,
    ),
    target(
        "floor: raw write of the 100 records' v2 batch + its CRC-32C / raw write of 100",
        "raw-batch-frame",
        "raw-batch",
        Throughput,
        Info,
        ALL,
    ),
    target(
        "append_batch of 100 / its format floor (raw write of the records' v2 batch + its CRC-32C)",
        "krabka-batch",
        "raw-batch-frame",
        Throughput,
        Info,
        ALL,
    ),
    target(
        "floor: the v2 batch copied into a buffer per call + its CRC-32C + raw write / the format floor",
        "raw-batch-frame-copy",
        "raw-batch-frame",
        Throughput,
        Info,
        ALL,
    ),
    target(
        "append_batch of 100 / the format floor with one copy of the batch per call",
        "krabka-batch",
        "raw-batch-frame-copy",
        Throughput,
        Info,
        ALL,
    ),
    target(
        "append_raw_batch of a producer's batch of 100 / raw write of the 100 values",
        "krabka-raw-batch",
        "raw-batch",
        Throughput,
        Info,
        ALL,
    ),
    target(
        "append of one record, no sync / raw write of its value",
        "krabka-append",
        "raw-write",
        Throughput,
        AtLeast(0.9),
        ALL,
    ),
    target(
        "floor: raw write of the record's batch of one / raw write of its value",
        "raw-write-frame",
        "raw-write",
        Throughput,
        Info,
        ALL,
    ),
    target(
        "append + fdatasync, 1 thread, preallocated segment / raw pwrite + fdatasync into a fallocated file",
        "krabka-sync1-prealloc",
        "raw-sync1-prealloc",
        Throughput,
        AtLeast(0.9),
        ALL,
    ),
    target(
        "floor: raw pwrite + fdatasync of the record's batch of one / of its value (fallocated files)",
        "raw-sync1-prealloc-frame",
        "raw-sync1-prealloc",
        Throughput,
        Info,
        ALL,
    ),
    target(
        "append + fdatasync, 1 thread, preallocated segment / its format floor (the batch of one)",
        "krabka-sync1-prealloc",
        "raw-sync1-prealloc-frame",
        Throughput,
        Info,
        ALL,
    ),
    target(
        "append + fdatasync, 4 threads, preallocated segment / okaywal 4 threads, entry commit each",
        "krabka-sync4-prealloc",
        "okaywal-sync4",
        Throughput,
        AtLeast(1.1),
        ALL,
    ),
    target(
        "sequential read_batches (1 MiB) / raw 1 MiB reads of the same segment files",
        "krabka-batches-seq",
        "raw-read-seq",
        Throughput,
        AtLeast(0.8),
        ALL,
    ),
    target(
        "floor: raw 1 MiB reads + CRC-32C per batch / raw 1 MiB reads",
        "raw-read-seq-crc",
        "raw-read-seq",
        Throughput,
        Info,
        ALL,
    ),
    target(
        "sequential Log::read (decoded) / commitlog read",
        "krabka-read-seq",
        "commitlog-read-seq",
        Throughput,
        AtLeast(1.5),
        SMALL,
    ),
    target(
        "floor: raw 1 MiB reads + CRC-32C per batch + a Bytes view per record / commitlog read",
        "raw-read-seq-views",
        "commitlog-read-seq",
        Throughput,
        Info,
        SMALL,
    ),
    target(
        "sequential Log::read (decoded), batches of 100 / its floor (raw 1 MiB reads + CRC-32C per batch + a Bytes view per record)",
        "krabka-read-seq",
        "raw-read-seq-views",
        Throughput,
        AtLeast(0.9),
        ALL,
    ),
    target(
        "sequential Log::read (decoded), batches of 100 / commitlog read, at 1 KiB",
        "krabka-read-seq",
        "commitlog-read-seq",
        Throughput,
        AtLeast(1.0),
        KIB,
    ),
    target(
        "sequential Log::read (decoded), single appends / its floor (the same of those files)",
        "krabka-read-seq-single",
        "raw-read-seq-views-single",
        Throughput,
        AtLeast(0.9),
        ALL,
    ),
    target(
        "sequential Log::read (decoded), single appends / commitlog read",
        "krabka-read-seq-single",
        "commitlog-read-seq",
        Throughput,
        Info,
        ALL,
    ),
    target(
        "sequential read_batches + records() / commitlog read",
        "krabka-batches-records",
        "commitlog-read-seq",
        Throughput,
        Info,
        ALL,
    ),
    target(
        "random point read, log of single appends / bare pread of the record's batch",
        "krabka-read-random-single",
        "raw-read-random-single",
        Throughput,
        AtLeast(0.8),
        ALL,
    ),
    target(
        "floor: pread from the .index entry to the record's batch end / bare pread of the batch",
        "raw-read-random-single-span",
        "raw-read-random-single",
        Throughput,
        Info,
        ALL,
    ),
    target(
        "random point read, log of single appends / its floor (pread from the .index entry)",
        "krabka-read-random-single",
        "raw-read-random-single-span",
        Throughput,
        AtLeast(0.9),
        ALL,
    ),
    target(
        "floor: the same pread + CRC-32C of the record's batch / pread from the .index entry",
        "raw-read-random-single-span-crc",
        "raw-read-random-single-span",
        Throughput,
        Info,
        ALL,
    ),
    target(
        "random point read, log of single appends / its floor with the batch's CRC-32C",
        "krabka-read-random-single",
        "raw-read-random-single-span-crc",
        Throughput,
        Info,
        ALL,
    ),
    target(
        "random point read, log of single appends / commitlog",
        "krabka-read-random-single",
        "commitlog-read-random",
        Throughput,
        AtLeast(1.0),
        KIB,
    ),
    target(
        "floor: pread from the .index entry / commitlog point read",
        "raw-read-random-single-span",
        "commitlog-read-random",
        Throughput,
        Info,
        ALL,
    ),
    target(
        "the same, index_interval_bytes 1 / bare pread of the record's batch",
        "krabka-read-random-single-dense",
        "raw-read-random-single",
        Throughput,
        Info,
        ALL,
    ),
    target(
        "random point read, log of single appends, index_interval_bytes 1 / commitlog (which indexes every record)",
        "krabka-read-random-single-dense",
        "commitlog-read-random",
        Throughput,
        Info,
        ALL,
    ),
    target(
        "the same, p50 latency / commitlog's (below 1.0: faster)",
        "krabka-read-random-single-dense",
        "commitlog-read-random",
        P50,
        Info,
        ALL,
    ),
    target(
        "random point read p50, log in batches of 100 / bare pread of the whole batch",
        "krabka-read-random",
        "raw-read-random-batch",
        P50,
        AtMost(2.0),
        ALL,
    ),
    target(
        "random point read, log in batches of 100 / commitlog",
        "krabka-read-random",
        "commitlog-read-random",
        Throughput,
        Info,
        ALL,
    ),
    disk(
        "bytes on disk / value bytes, batches of 100",
        "krabka-batch",
        AtMost(1.10),
        &[100],
    ),
    disk(
        "bytes on disk / value bytes, batches of 100, lz4 (incompressible values)",
        "krabka-batch-lz4",
        Info,
        ALL,
    ),
    disk(
        "bytes on disk / value bytes, batches of 100, zstd (incompressible values)",
        "krabka-batch-zstd",
        Info,
        ALL,
    ),
];

/// The results of one value size, by case id: one per round.
pub type Results = HashMap<&'static str, Vec<Result<Measurement, String>>>;

impl Target {
    /// The target's ratio in one round's measurements, or `None` when a row it needs failed.
    fn ratio_of(&self, m: &Measurement, base: Option<&Measurement>) -> Option<f64> {
        let (num, den) = match (self.metric, base) {
            (Metric::DiskPerPayload, _) => return m.disk_per_payload(),
            (Metric::Throughput, Some(b)) => (m.mb_per_s(), b.mb_per_s()),
            (Metric::P50, Some(b)) => (m.p50_ns as f64, b.p50_ns as f64),
            (_, None) => return None,
        };
        (num > 0.0 && den > 0.0).then(|| num / den)
    }

    /// The target's ratio in each round (the case against its floor of the same round), or
    /// `None` when a row it needs failed in any round.
    pub fn ratios(&self, results: &Results) -> Option<Vec<f64>> {
        let cases = results.get(self.case)?;
        let bases = self.baseline.map(|b| results.get(b));
        cases
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let m = m.as_ref().ok()?;
                let base = match bases {
                    Some(b) => Some(b?.get(i)?.as_ref().ok()?),
                    None => None,
                };
                self.ratio_of(m, base)
            })
            .collect::<Option<Vec<f64>>>()
            .filter(|r| !r.is_empty())
    }

    /// The median of [`ratios`](Self::ratios).
    pub fn ratio(&self, results: &Results) -> Option<f64> {
        self.ratios(results).map(|r| median(&r))
    }
}

/// The median of `values` (not empty): the middle one, or the mean of the middle two.
fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    match (
        v.len() % 2,
        v.get(mid),
        mid.checked_sub(1).and_then(|i| v.get(i)),
    ) {
        (1, Some(m), _) => *m,
        (_, Some(hi), Some(lo)) => (hi + lo) / 2.0,
        _ => f64::NAN,
    }
}

/// `"0.93x"`, or with more than one round `"0.93x [0.88–0.97]"`, with `digits` decimals.
fn fmt_ratios(r: &[f64], digits: usize) -> String {
    let m = median(r);
    if r.len() < 2 {
        return format!("{m:.digits$}x");
    }
    let lo = r.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = r.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{m:.digits$}x [{lo:.digits$}–{hi:.digits$}]")
}

impl Metric {
    /// Decimals a ratio of this metric is shown with: bytes on disk moves by the thousandth.
    pub fn digits(self) -> usize {
        match self {
            Metric::DiskPerPayload => 3,
            Metric::Throughput | Metric::P50 => 2,
        }
    }
}

fn size_label(value: usize) -> String {
    if value >= 1024 && value.is_multiple_of(1024) {
        format!("{} KiB", value / 1024)
    } else {
        format!("{value} B")
    }
}

/// The targets as a Markdown table: one column per value size, a ratio in each (the median over
/// the rounds, with their range; in parentheses where the goal does not apply to that size),
/// and whether the median meets the goal.
pub fn table(runs: &[(usize, Results)]) -> String {
    let mut out = String::from("| target | goal |");
    for (v, _) in runs {
        let _ = write!(out, " {} |", size_label(*v));
    }
    out.push_str(" met? |\n| --- | --- |");
    for _ in runs {
        out.push_str(" ---: |");
    }
    out.push_str(" --- |\n");
    for t in TARGETS {
        let _ = write!(out, "| {} | {} |", t.label, t.goal.describe());
        let mut missed = Vec::new();
        let mut checked = 0;
        for (v, results) in runs {
            let applies = t.sizes.contains(v);
            match t.ratios(results) {
                Some(r) if applies => {
                    let _ = write!(out, " {} |", fmt_ratios(&r, t.metric.digits()));
                    checked += 1;
                    if t.goal.met(median(&r)) == Some(false) {
                        missed.push(size_label(*v));
                    }
                }
                Some(r) => {
                    let _ = write!(out, " ({}) |", fmt_ratios(&r, t.metric.digits()));
                }
                None => {
                    out.push_str(" failed |");
                    if applies && t.goal != Goal::Info {
                        missed.push(format!("{} failed", size_label(*v)));
                    }
                }
            }
        }
        let verdict = match t.goal {
            Goal::Info => "-".to_owned(),
            _ if checked == 0 && missed.is_empty() => "-".to_owned(),
            _ if missed.is_empty() => "yes".to_owned(),
            _ => format!("no: {}", missed.join(", ")),
        };
        let _ = writeln!(out, " {verdict} |");
    }
    out
}

/// The targets with a goal as an SVG bar chart: one group per target, one bar per value size
/// the goal applies to, the goal as a dashed line.
pub fn chart(title: &str, runs: &[(usize, Results)]) -> String {
    let groups: Vec<ChartGroup> = TARGETS
        .iter()
        .filter(|t| t.goal != Goal::Info)
        .map(|t| ChartGroup {
            label: t.label.to_owned(),
            digits: t.metric.digits(),
            goal: t.goal,
            bars: runs
                .iter()
                .filter(|(v, _)| t.sizes.contains(v))
                .map(|(v, results)| (size_label(*v), t.ratio(results)))
                .collect(),
        })
        .collect();
    chart::svg(title, &groups)
}

#[cfg(test)]
mod tests;
