//! Deterministic costs of a timed part, next to its speed: read and write system calls
//! (`syscr`/`syscw` of `/proc/self/io`), bytes read (`rchar`), and heap allocations and bytes
//! allocated, counted by the binary's global allocator (`stats_alloc`). Unlike a time they do
//! not move with the machine's load, so a change in them is a change in the code.

use std::fs::File;
use std::io::Read;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};

/// The global allocator of the bench binary: the system allocator, counting (two atomic adds
/// per allocation, the same for every system measured).
#[global_allocator]
static GLOBAL: &StatsAlloc<std::alloc::System> = &INSTRUMENTED_SYSTEM;

/// What the process did in a timed part.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Costs {
    /// Read-family system calls (`read`, `pread64`, `readv`, ...: `syscr`).
    pub read_calls: u64,
    /// Write-family system calls (`syscw`).
    pub write_calls: u64,
    /// Bytes those read calls returned (`rchar`).
    pub read_bytes: u64,
    /// Heap allocations (a `realloc` counts as one).
    pub allocs: u64,
    /// Bytes allocated (a growing `realloc` counts its growth).
    pub alloc_bytes: u64,
}

impl Costs {
    fn minus(self, o: Costs) -> Costs {
        Costs {
            read_calls: self.read_calls.saturating_sub(o.read_calls),
            write_calls: self.write_calls.saturating_sub(o.write_calls),
            read_bytes: self.read_bytes.saturating_sub(o.read_bytes),
            allocs: self.allocs.saturating_sub(o.allocs),
            alloc_bytes: self.alloc_bytes.saturating_sub(o.alloc_bytes),
        }
    }
}

/// `syscr`, `syscw` and `rchar` of this process; zeros where `/proc/self/io` is missing. One
/// `read` into a stack buffer (the file is about 100 bytes), no allocation.
fn proc_io() -> (u64, u64, u64) {
    let mut buf = [0u8; 512];
    let n = File::open("/proc/self/io")
        .and_then(|mut f| f.read(&mut buf))
        .unwrap_or(0);
    let text = std::str::from_utf8(buf.get(..n).unwrap_or_default()).unwrap_or_default();
    let field = |k: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(k)?.strip_prefix(':'))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    (field("syscr"), field("syscw"), field("rchar"))
}

fn heap() -> (u64, u64) {
    let s = GLOBAL.stats();
    (
        (s.allocations + s.reallocations) as u64,
        s.bytes_allocated as u64,
    )
}

/// What one reading of `/proc/self/io` adds to the counts after it: the least two readings back
/// to back differ by over a few tries (another thread's calls between one pair would otherwise
/// be taken for the meter's own, and subtracted from every part).
fn overhead() -> Costs {
    static OVERHEAD: OnceLock<Costs> = OnceLock::new();
    *OVERHEAD.get_or_init(|| {
        let mut least: Option<Costs> = None;
        for _ in 0..8 {
            let (r0, w0, b0) = proc_io();
            let (r1, w1, b1) = proc_io();
            let this = Costs {
                read_calls: r1.saturating_sub(r0),
                write_calls: w1.saturating_sub(w0),
                read_bytes: b1.saturating_sub(b0),
                allocs: 0,
                alloc_bytes: 0,
            };
            least = Some(match least {
                None => this,
                Some(l) => Costs {
                    read_calls: l.read_calls.min(this.read_calls),
                    write_calls: l.write_calls.min(this.write_calls),
                    read_bytes: l.read_bytes.min(this.read_bytes),
                    allocs: 0,
                    alloc_bytes: 0,
                },
            });
        }
        least.unwrap_or_default()
    })
}

/// The start of a timed part: the time and the counters.
pub struct Meter {
    at: Instant,
    start: Costs,
}

/// What a timed part took: its wall time and its costs.
#[derive(Clone, Copy, Debug)]
pub struct Spent {
    /// Wall time.
    pub elapsed: Duration,
    /// The counters' growth, less the meter's own.
    pub costs: Costs,
}

impl Meter {
    /// Starts: reads the system-call counters first and the heap counters last, so neither
    /// reading is counted in the part.
    pub fn start() -> Meter {
        let _ = overhead();
        let (read_calls, write_calls, read_bytes) = proc_io();
        let (allocs, alloc_bytes) = heap();
        Meter {
            start: Costs {
                read_calls,
                write_calls,
                read_bytes,
                allocs,
                alloc_bytes,
            },
            at: Instant::now(),
        }
    }

    /// Stops: the time first, then the heap and the system-call counters.
    pub fn stop(&self) -> Spent {
        let elapsed = self.at.elapsed();
        let (allocs, alloc_bytes) = heap();
        let (read_calls, write_calls, read_bytes) = proc_io();
        let now = Costs {
            read_calls,
            write_calls,
            read_bytes,
            allocs,
            alloc_bytes,
        };
        Spent {
            elapsed,
            costs: now.minus(self.start).minus(overhead()),
        }
    }
}

/// The targets of a row's cost columns, each printed beside its figure (`None`: no target).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CostGoals {
    /// Read system calls per MiB of payload: at most.
    pub read_calls_per_mib: Option<f64>,
    /// Read system calls per op (a point read): at most; shown per MiB.
    pub read_calls_per_op: Option<f64>,
    /// Write system calls per op (append or batch call): at most; shown per MiB.
    pub write_calls_per_op: Option<f64>,
    /// Heap allocations per record: at most.
    pub allocs_per_record: Option<f64>,
    /// Bytes allocated per record: at most `factor` × the payload per record + `plus`.
    pub alloc_bytes_per_record: Option<(f64, f64)>,
    /// CRC-checked bytes per byte read: at least.
    pub crc_per_byte_read: Option<f64>,
}

/// A cost figure in as few characters as keep it readable.
fn fmt_cost(v: f64) -> String {
    if v == 0.0 {
        "0".to_owned()
    } else if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.2}")
    } else if v >= 0.001 {
        format!("{v:.3}")
    } else {
        format!("{v:.1e}")
    }
}

/// `figure`, with its target beside it when it has one: `"1.02 (≤ 2 ✓)"`; `"-"` without a
/// figure.
pub(crate) fn with_goal(figure: Option<f64>, goal: Option<crate::storage::goal::Goal>) -> String {
    use crate::storage::goal::Goal;
    let Some(v) = figure else {
        return "-".to_owned();
    };
    match goal {
        Some(g @ (Goal::AtMost(t) | Goal::AtLeast(t))) => {
            let sign = if matches!(g, Goal::AtMost(_)) {
                "≤"
            } else {
                "≥"
            };
            let mark = if g.met(v) == Some(true) { "✓" } else { "✗" };
            format!("{} ({sign} {} {mark})", fmt_cost(v), fmt_cost(t))
        }
        _ => fmt_cost(v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_meter_counts_the_calls_and_allocations_of_its_part() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("f");
        std::fs::write(&path, [7u8; 4096]).unwrap_or_else(|e| panic!("{e}"));
        let mut f = File::open(&path).unwrap_or_else(|e| panic!("{e}"));
        let mut w = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("{e}"));
        let mut buf = [0u8; 1024];
        let m = Meter::start();
        for _ in 0..3 {
            f.read_exact(&mut buf).unwrap_or_else(|e| panic!("{e}"));
        }
        w.write_all(b"x").unwrap_or_else(|e| panic!("{e}"));
        let kept: Vec<Vec<u8>> = (0..5).map(|i| vec![0u8; 100 + i]).collect();
        let c = m.stop().costs;
        assert_eq!(kept.len(), 5);
        // The counters are the process's: tests running beside this one may add to them.
        if proc_io() != (0, 0, 0) {
            assert!(c.read_calls >= 3 && c.write_calls >= 1, "{c:?}");
            assert!(c.read_bytes >= 3072, "{c:?}");
        }
        assert!(c.allocs >= 6, "{c:?}");
        assert!(c.alloc_bytes >= 5 * 100, "{c:?}");
    }
}
