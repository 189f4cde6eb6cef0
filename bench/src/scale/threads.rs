//! The process's threads while the cold-read scale case runs: sampled by name from
//! `/proc/self/task`, split into the service's, the bench's own and the in-process S3 server's.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::Result;

/// Thread names of the service: its runtime's workers and blocking pool, and its read engine's
/// read-ahead threads (`comm` holds at most 15 bytes).
pub(super) fn is_service_thread(comm: &str) -> bool {
    comm.starts_with("krabka-tiering") || comm.starts_with("krabka-read-ahe")
}

/// The bench's own threads: main, the sampler, and the bare SDK's runtime (tokio's default
/// name), none of them the service's or its backend's.
pub(super) fn is_bench_thread(comm: &str) -> bool {
    comm == "krabka-bench" || comm.starts_with("bench-sampler") || comm.starts_with("tokio-rt-")
}

/// The in-process S3 server's threads (`--server in-process`): the server's, not the
/// client's, so not counted (a broker talks to a server in another process).
pub(super) fn is_server_thread(comm: &str) -> bool {
    comm.starts_with("krabka-test-s3")
}

/// The process's threads now, by name, but the in-process S3 server's.
pub(super) fn threads_by_name() -> BTreeMap<String, usize> {
    let mut by = BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return by;
    };
    for t in tasks.flatten() {
        let name = std::fs::read_to_string(t.path().join("comm"))
            .map(|s| s.trim().to_owned())
            .unwrap_or_default();
        if !is_server_thread(&name) {
            *by.entry(name).or_insert(0) += 1;
        }
    }
    by
}

/// High-water marks of the process's threads.
#[derive(Default)]
pub(super) struct ThreadPeak {
    pub(super) total: usize,
    pub(super) service: usize,
    /// The threads of the service and its backend (all but the bench's own).
    pub(super) counted: usize,
    /// The threads by name when the total peaked.
    pub(super) at_total: BTreeMap<String, usize>,
    pub(super) samples: u64,
}

/// Samples `/proc/self/task` every 5 ms on a thread of its own until stopped.
pub(super) struct Sampler {
    stop: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<ThreadPeak>,
}

impl Sampler {
    pub(super) fn start() -> Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::Builder::new()
            .name("bench-sampler".into())
            .spawn(move || {
                let mut peak = ThreadPeak::default();
                loop {
                    let by = threads_by_name();
                    let total: usize = by.values().sum();
                    let service = by
                        .iter()
                        .filter(|(n, _)| is_service_thread(n))
                        .map(|(_, c)| c)
                        .sum();
                    peak.service = peak.service.max(service);
                    let counted = by
                        .iter()
                        .filter(|(n, _)| !is_bench_thread(n))
                        .map(|(_, c)| c)
                        .sum();
                    peak.counted = peak.counted.max(counted);
                    if total > peak.total {
                        peak.total = total;
                        peak.at_total = by;
                    }
                    peak.samples += 1;
                    if flag.load(Ordering::Relaxed) {
                        return peak;
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
            })?;
        Ok(Self { stop, handle })
    }

    pub(super) fn finish(self) -> Result<ThreadPeak> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle
            .join()
            .map_err(|_| "the thread sampler panicked".into())
    }
}
