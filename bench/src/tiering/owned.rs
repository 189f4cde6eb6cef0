//! What partition ownership costs an upload: the same `run_once` over a log opened with
//! `TieredLog::open_owned` (a writer epoch, checked before the round, before each copy and
//! before the local deletes) and over one opened with `TieredLog::open`, back to back, with the
//! ownership store's calls counted by a decorator ([`Counting`]). On S3 each store call is one
//! request (GetObject, PutObject with `If-None-Match: *`, a ListObjectsV2 page, DeleteObject).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use krabka_remote_s3::test_server::TestServer;
use krabka_remote_storage::head::ConditionalRead;
use krabka_remote_storage::ownership::OwnershipStore;
use krabka_remote_storage::recovery::{ListedObject, RemoteSegmentLister};
use krabka_remote_storage::{RemoteStorageError, RemoteStorageManager};
use krabka_tiering::{RemoteOwnership, RemoteRequests};

use super::measure::{Prepared, UploadRun};
use super::{Line, Sizes, Target, mbps, rate};
use crate::Result;

/// Calls of each ownership store method.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Calls {
    /// `list_partition` (S3: one ListObjectsV2 page each here, under 1,000 keys).
    pub list: u64,
    /// `list_partition_dirs`.
    pub list_dirs: u64,
    /// `read_object` (S3: GetObject; a missing record is a 404).
    pub read: u64,
    /// `delete_object` (S3: DeleteObject).
    pub delete: u64,
    /// `create_if_absent` (S3: PutObject with `If-None-Match: *`).
    pub create: u64,
    /// `put_object` (S3: PutObject).
    pub put: u64,
    /// `read_if_changed` (S3: GetObject with `If-None-Match: <etag>`; unchanged is a 304).
    pub read_if_changed: u64,
    /// Nanoseconds spent in all of them, summed.
    pub busy_ns: u64,
}

impl Calls {
    /// Calls of every method.
    pub(crate) fn total(&self) -> u64 {
        self.list
            + self.list_dirs
            + self.read
            + self.delete
            + self.create
            + self.put
            + self.read_if_changed
    }

    /// The calls made since `before` was taken.
    pub(crate) fn since(&self, before: &Self) -> Self {
        Self {
            list: self.list - before.list,
            list_dirs: self.list_dirs - before.list_dirs,
            read: self.read - before.read,
            delete: self.delete - before.delete,
            create: self.create - before.create,
            put: self.put - before.put,
            read_if_changed: self.read_if_changed - before.read_if_changed,
            busy_ns: self.busy_ns - before.busy_ns,
        }
    }

    /// `"3 reads, 2 create-only writes"`: the nonzero counts.
    pub(crate) fn describe(&self) -> String {
        let parts: Vec<String> = [
            (self.read, "read"),
            (self.create, "create-only write"),
            (self.put, "overwrite"),
            (self.read_if_changed, "conditional read"),
            (self.list, "listing"),
            (self.list_dirs, "directory listing"),
            (self.delete, "delete"),
        ]
        .into_iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| format!("{n} {what}{}", if n == 1 { "" } else { "s" }))
        .collect();
        if parts.is_empty() {
            "none".into()
        } else {
            parts.join(", ")
        }
    }
}

/// An [`OwnershipStore`] that forwards every call to `inner` and counts it by method.
pub struct Counting {
    inner: Arc<dyn OwnershipStore>,
    list: AtomicU64,
    list_dirs: AtomicU64,
    read: AtomicU64,
    delete: AtomicU64,
    create: AtomicU64,
    put: AtomicU64,
    read_if_changed: AtomicU64,
    busy_ns: AtomicU64,
}

impl Counting {
    pub fn new(inner: Arc<dyn OwnershipStore>) -> Self {
        Self {
            inner,
            list: AtomicU64::new(0),
            list_dirs: AtomicU64::new(0),
            read: AtomicU64::new(0),
            delete: AtomicU64::new(0),
            create: AtomicU64::new(0),
            put: AtomicU64::new(0),
            read_if_changed: AtomicU64::new(0),
            busy_ns: AtomicU64::new(0),
        }
    }

    /// Counts a call of the method counted by `c` and times `call`.
    fn count<T>(&self, c: &AtomicU64, call: impl FnOnce() -> T) -> T {
        c.fetch_add(1, Ordering::Relaxed);
        let start = Instant::now();
        let out = call();
        let ns = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.busy_ns.fetch_add(ns, Ordering::Relaxed);
        out
    }

    /// The calls so far.
    pub fn calls(&self) -> Calls {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Calls {
            list: get(&self.list),
            list_dirs: get(&self.list_dirs),
            read: get(&self.read),
            delete: get(&self.delete),
            create: get(&self.create),
            put: get(&self.put),
            read_if_changed: get(&self.read_if_changed),
            busy_ns: get(&self.busy_ns),
        }
    }
}

impl RemoteSegmentLister for Counting {
    fn list_partition(
        &self,
        partition_dir: &str,
        visit: &mut dyn FnMut(ListedObject) -> std::result::Result<(), RemoteStorageError>,
    ) -> std::result::Result<(), RemoteStorageError> {
        self.count(&self.list, || {
            self.inner.list_partition(partition_dir, visit)
        })
    }

    fn list_partition_dirs(
        &self,
        visit: &mut dyn FnMut(String) -> std::result::Result<(), RemoteStorageError>,
    ) -> std::result::Result<(), RemoteStorageError> {
        self.count(&self.list_dirs, || self.inner.list_partition_dirs(visit))
    }

    fn read_object(&self, key: &str) -> std::result::Result<Vec<u8>, RemoteStorageError> {
        self.count(&self.read, || self.inner.read_object(key))
    }

    fn delete_object(&self, key: &str) -> std::result::Result<(), RemoteStorageError> {
        self.count(&self.delete, || self.inner.delete_object(key))
    }
}

impl OwnershipStore for Counting {
    fn create_if_absent(
        &self,
        key: &str,
        bytes: &[u8],
    ) -> std::result::Result<bool, RemoteStorageError> {
        self.count(&self.create, || self.inner.create_if_absent(key, bytes))
    }

    fn put_object(&self, key: &str, bytes: &[u8]) -> std::result::Result<(), RemoteStorageError> {
        self.count(&self.put, || self.inner.put_object(key, bytes))
    }

    fn read_if_changed(
        &self,
        key: &str,
        known: Option<&str>,
        max_len: usize,
    ) -> std::result::Result<ConditionalRead, RemoteStorageError> {
        self.count(&self.read_if_changed, || {
            self.inner.read_if_changed(key, known, max_len)
        })
    }
}

/// One side (owned or not) of the comparison, summed over its uploads.
#[derive(Default)]
struct Side {
    bytes: u64,
    secs: f64,
    segments: u64,
    uploads: u64,
    spi: RemoteRequests,
    /// Ownership store calls of the uploads (owned side only).
    store: Calls,
    /// Requests the in-process S3 server received during the uploads.
    server: usize,
}

impl Side {
    fn add(&mut self, run: &UploadRun, store: Calls, server: usize) {
        self.bytes += run.bytes;
        self.secs += run.secs;
        self.segments += run.segments;
        self.uploads += 1;
        self.spi.copy += run.requests.copy;
        self.spi.fetch_log += run.requests.fetch_log;
        self.spi.fetch_index += run.requests.fetch_index;
        self.spi.delete += run.requests.delete;
        self.store.read += store.read;
        self.store.create += store.create;
        self.store.put += store.put;
        self.store.read_if_changed += store.read_if_changed;
        self.store.list += store.list;
        self.store.list_dirs += store.list_dirs;
        self.store.delete += store.delete;
        self.store.busy_ns += store.busy_ns;
        self.server += server;
    }

    fn per_copy(&self, n: u64) -> f64 {
        n as f64 / self.segments.max(1) as f64
    }
}

/// Where the ownership rows' logs tier to.
pub struct Backend<'a> {
    /// The rows' name for it (`remote-fs`, `S3 (s3s-fs)`, ...).
    pub name: &'a str,
    /// A short tag for directory names.
    pub tag: &'a str,
    pub rsm: Arc<dyn RemoteStorageManager>,
    pub store: Arc<dyn OwnershipStore>,
    /// The remote's location as a binding records it (`fs://...`, `s3://...`).
    pub location: String,
    /// The in-process S3 server, whose received requests are counted too.
    pub server: Option<&'a TestServer>,
}

/// Requests the in-process S3 server received so far (0 without one).
pub(crate) fn server_requests(server: Option<&TestServer>) -> usize {
    server.map_or(0, |s| s.requests_received().values().sum())
}

/// The ownership rows of one backend: `s.ownership_pairs` pairs of an owned and an unowned
/// upload of the same workload (at most 4 segments each), in the order unowned, owned, owned,
/// unowned, ... so that neither side always runs first on a disk or server in a given state;
/// and the first owned open's store calls.
pub fn rows(s: &Sizes, root: &Path, b: &Backend<'_>, lines: &mut Vec<Line>) -> Result<()> {
    let small = Sizes {
        segment: s.segment,
        total: s.total.min(4 * s.segment),
        point_reads: s.point_reads,
        ownership_pairs: s.ownership_pairs,
    };
    let counting = Arc::new(Counting::new(Arc::clone(&b.store)));
    let ownership = RemoteOwnership::new(counting.clone(), b.location.clone());
    let (mut owned, mut plain) = (Side::default(), Side::default());
    let mut open = None;
    // Owned MB/s over unowned MB/s of each pair.
    let mut pair_ratios = Vec::new();
    for pair in 0..s.ownership_pairs {
        let mut rates = [0.0; 2];
        for is_owned in [pair % 2 == 1, pair % 2 == 0] {
            let kind = if is_owned { "owned" } else { "unowned" };
            let dir = root.join(format!("ownership-{}-{kind}-{pair}", b.tag));
            let before = counting.calls();
            let p = Prepared::with_owner(
                dir,
                Arc::clone(&b.rsm),
                &small,
                is_owned.then_some(&ownership),
            )?;
            let opened = counting.calls().since(&before);
            if is_owned && open.is_none() {
                open = Some(opened);
            }
            let (before, at_server) = (counting.calls(), server_requests(b.server));
            let (_, run) = p.upload_run()?;
            let store = counting.calls().since(&before);
            let server = server_requests(b.server) - at_server;
            rates[usize::from(is_owned)] = mbps(run.bytes, run.secs);
            if is_owned { &mut owned } else { &mut plain }.add(&run, store, server);
        }
        if rates[0] > 0.0 {
            pair_ratios.push(rates[1] / rates[0]);
        }
    }
    push_lines(b, (&owned, &plain), open.unwrap_or_default(), lines);
    let (lo, hi) = pair_ratios
        .iter()
        .fold((f64::MAX, 0.0f64), |(lo, hi), &r| (lo.min(r), hi.max(r)));
    let (o, u) = (mbps(owned.bytes, owned.secs), mbps(plain.bytes, plain.secs));
    lines.push(Line::cmp(
        format!(
            "ownership: upload to {}, owned (open_owned) against unowned (open), MB/s over {} uploads each of {} segments, alternating (unowned first in every other pair); baseline: unowned",
            b.name,
            owned.uploads,
            owned.segments / owned.uploads.max(1)
        ),
        (format!("{o:.1} (per pair {lo:.2}x to {hi:.2}x)"), o),
        rate(u),
        Target::None,
    ));
    Ok(())
}

fn push_lines(b: &Backend<'_>, (owned, plain): (&Side, &Side), open: Calls, lines: &mut Vec<Line>) {
    let name = b.name;
    let per_upload = owned.segments / owned.uploads.max(1);
    let store = owned.store;
    let total = store.total();
    // What the checks before the copies do not explain: the per-round checks.
    let per_round = total.saturating_sub(2 * owned.segments) as f64 / owned.uploads.max(1) as f64;
    lines.push(Line::info(
        format!(
            "ownership: store requests per copied segment of an owned upload to {name} (run_once of {per_upload} segments, {} uploads); baseline: the same upload unowned",
            owned.uploads
        ),
        format!(
            "{:.2} ({total} in all: {}; 2 per copy + {per_round:.0} per round)",
            owned.per_copy(total),
            store.describe()
        ),
        "0".into(),
    ));
    lines.push(Line::info(
        format!(
            "ownership: store requests of an owned first open on {name} (probe, identity record, epoch claim and check); baseline: an unowned open"
        ),
        format!("{} ({})", open.total(), open.describe()),
        "0".into(),
    ));
    let uploads = owned.uploads.max(1) as f64;
    let (busy_ms, wall_ms) = (
        store.busy_ns as f64 / 1e6 / uploads,
        owned.secs * 1e3 / uploads,
    );
    lines.push(Line::cmp(
        format!(
            "ownership: time in the store calls of an owned upload to {name}, ms, summed as if one after another (an upper bound: the checks before the copies run on the copy threads, side by side); baseline: the owned upload's wall time, ms"
        ),
        (format!("{busy_ms:.2}"), busy_ms),
        (format!("{wall_ms:.1}"), wall_ms),
        Target::None,
    ));
    let spi = |side: &Side| {
        let r = side.spi;
        format!(
            "{:.2} (copy {:.2}, fetch {:.2}, fetch_index {:.2}, delete {:.2})",
            side.per_copy(r.total()),
            side.per_copy(r.copy),
            side.per_copy(r.fetch_log),
            side.per_copy(r.fetch_index),
            side.per_copy(r.delete)
        )
    };
    lines.push(Line::info(
        format!(
            "ownership: RemoteStorageManager calls per copied segment (TieredLog::stats().requests, the calls Instrumented reports), owned upload to {name}; baseline: unowned"
        ),
        spi(owned),
        spi(plain),
    ));
    if b.server.is_some() {
        lines.push(Line::cmp(
            format!(
                "ownership: requests the S3 server received per copied segment, owned upload to {name}; baseline: unowned"
            ),
            (
                format!("{:.2}", owned.per_copy(owned.server as u64)),
                owned.per_copy(owned.server as u64),
            ),
            (
                format!("{:.2}", plain.per_copy(plain.server as u64)),
                plain.per_copy(plain.server as u64),
            ),
            Target::None,
        ));
    }
}
