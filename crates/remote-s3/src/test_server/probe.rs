//! What the test server counts of the requests it serves: requests by operation, how bodies
//! were vouched for, and the delay and observation of ListMultipartUploads.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use super::TestServer;

/// Requests by operation, and the delay and observation of ListMultipartUploads.
#[derive(Debug, Default)]
pub(super) struct Probe {
    pub(super) requests: Mutex<BTreeMap<&'static str, usize>>,
    pub(super) payloads: Mutex<Payloads>,
    pub(super) list_delay_ms: AtomicU64,
    pub(super) parts_when_listed: AtomicUsize,
}

/// How the bodies of the PutObject and UploadPart requests a [`TestServer`] received were
/// vouched for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Payloads {
    /// Requests carrying a body (PutObject, UploadPart).
    pub total: usize,
    /// Of those, the ones with a `Content-MD5` header.
    pub content_md5: usize,
    /// Of those, the ones whose body the signature does not cover
    /// (`x-amz-content-sha256: UNSIGNED-PAYLOAD`).
    pub unsigned: usize,
}

impl Probe {
    /// Records a request carrying a body: whether it had a `Content-MD5` header and whether
    /// its signature left the body out (`UNSIGNED-PAYLOAD`).
    pub(super) fn payload(&self, content_md5: bool, unsigned: bool) {
        let mut p = self.payloads.lock().unwrap_or_else(PoisonError::into_inner);
        p.total += 1;
        p.content_md5 += usize::from(content_md5);
        p.unsigned += usize::from(unsigned);
    }

    /// Counts one request of `operation`.
    pub(super) fn count(&self, operation: &'static str) {
        let mut requests = self.requests.lock().unwrap_or_else(PoisonError::into_inner);
        *requests.entry(operation).or_default() += 1;
    }
}

/// What the server counted.
impl TestServer {
    /// How the bodies of the PutObject and UploadPart requests it has received since it was
    /// first started were vouched for (Content-MD5, payload signature).
    pub fn payloads_received(&self) -> Payloads {
        *self
            .probe
            .payloads
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// How many requests of each operation (`"PutObject"`, `"ListMultipartUploads"`, ...) it
    /// has received since it was first started.
    pub fn requests_received(&self) -> BTreeMap<String, usize> {
        let requests = self
            .probe
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        requests
            .iter()
            .map(|(k, v)| ((*k).to_owned(), *v))
            .collect()
    }

    /// Makes each ListMultipartUploads wait `delay` before it reads the open uploads.
    pub fn set_list_uploads_delay(&self, delay: Duration) {
        let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.probe.list_delay_ms.store(ms, Ordering::SeqCst);
    }

    /// How many parts it had received (as [`parts_received`](Self::parts_received)) when the
    /// last ListMultipartUploads read the open uploads, after its delay.
    pub fn parts_when_last_listed(&self) -> usize {
        self.probe.parts_when_listed.load(Ordering::SeqCst)
    }
}
