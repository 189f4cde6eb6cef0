//! [`FaultInjecting`]: a decorator RSM that fails, or stalls, chosen calls.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

use crate::error::RemoteStorageError;
use crate::manager::RemoteStorageManager;
use crate::model::{CustomMetadata, IndexType, LogSegmentData, RemoteLogSegmentMetadata};

/// A method of [`RemoteStorageManager`], for targeting faults and reading call counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Method {
    /// [`RemoteStorageManager::copy_log_segment_data`].
    CopyLogSegmentData,
    /// [`RemoteStorageManager::fetch_log_segment`].
    FetchLogSegment,
    /// [`RemoteStorageManager::fetch_index`].
    FetchIndex,
    /// [`RemoteStorageManager::delete_log_segment_data`].
    DeleteLogSegmentData,
}

impl Method {
    /// All four methods.
    pub const ALL: [Method; 4] = [
        Method::CopyLogSegmentData,
        Method::FetchLogSegment,
        Method::FetchIndex,
        Method::DeleteLogSegmentData,
    ];

    /// The method's position in [`Method::ALL`], for per-method counter arrays.
    pub(super) fn index(self) -> usize {
        match self {
            Method::CopyLogSegmentData => 0,
            Method::FetchLogSegment => 1,
            Method::FetchIndex => 2,
            Method::DeleteLogSegmentData => 3,
        }
    }

    /// The method's name, as it appears in injected errors.
    pub fn name(self) -> &'static str {
        match self {
            Method::CopyLogSegmentData => "copy_log_segment_data",
            Method::FetchLogSegment => "fetch_log_segment",
            Method::FetchIndex => "fetch_index",
            Method::DeleteLogSegmentData => "delete_log_segment_data",
        }
    }
}

/// What [`FaultInjecting`] does to the calls it targets. Start from [`Faults::none`],
/// [`Faults::fail_nth`] or [`Faults::fail_fraction`] and adjust with the setters.
#[derive(Clone, Debug, PartialEq)]
pub struct Faults {
    /// The methods the faults apply to. Default: all four.
    pub methods: Vec<Method>,
    /// Fail the Nth targeted call (1-based), counted from when these faults were installed;
    /// only that one call. Default: `None`.
    pub fail_nth: Option<u64>,
    /// Fraction of targeted calls that fail, in `[0, 1]`, drawn from a PRNG seeded with
    /// [`seed`](Self::seed) (the same seed and call order give the same failures). Default: 0.
    pub fail_fraction: f64,
    /// Seed of the failure PRNG. Default: 0.
    pub seed: u64,
    /// Whether injected errors are [`RemoteStorageError::Retriable`] (default `true`) or a
    /// non-retriable [`RemoteStorageError::Backend`].
    pub retriable: bool,
    /// Sleep this long before every targeted call. Default: `None`.
    pub stall: Option<Duration>,
    /// Fraction, in `[0, 1]`, of failing copies that first run the real copy and then report
    /// failure — leaving data behind, as a crash or a lost response would. Default: 0.5.
    pub partial_copy_fraction: f64,
}

impl Default for Faults {
    fn default() -> Self {
        Self::none()
    }
}

impl Faults {
    /// No faults: every call passes through (and is counted).
    pub fn none() -> Self {
        Self {
            methods: Method::ALL.to_vec(),
            fail_nth: None,
            fail_fraction: 0.0,
            seed: 0,
            retriable: true,
            stall: None,
            partial_copy_fraction: 0.5,
        }
    }

    /// Fail only the `n`th targeted call (1-based).
    pub fn fail_nth(n: u64) -> Self {
        Self {
            fail_nth: Some(n),
            ..Self::none()
        }
    }

    /// Fail a seeded `fraction` of targeted calls.
    pub fn fail_fraction(seed: u64, fraction: f64) -> Self {
        Self {
            fail_fraction: fraction,
            seed,
            ..Self::none()
        }
    }

    /// Stall every targeted call for `duration` (no failures).
    pub fn stall(duration: Duration) -> Self {
        Self {
            stall: Some(duration),
            ..Self::none()
        }
    }

    /// Targets only `methods`.
    #[must_use]
    pub fn on(mut self, methods: &[Method]) -> Self {
        self.methods = methods.to_vec();
        self
    }

    /// Sets whether injected errors are retriable.
    #[must_use]
    pub fn retriable(mut self, retriable: bool) -> Self {
        self.retriable = retriable;
        self
    }

    /// Sets the stall before every targeted call.
    #[must_use]
    pub fn with_stall(mut self, duration: Duration) -> Self {
        self.stall = Some(duration);
        self
    }

    /// Sets the fraction of failing copies that leave data behind.
    #[must_use]
    pub fn partial_copies(mut self, fraction: f64) -> Self {
        self.partial_copy_fraction = fraction;
        self
    }
}

/// Calls seen and faults injected, per [`Method`] (indexed as [`Method::ALL`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultStats {
    /// Calls made, failed or not, enabled or not.
    pub calls: [u64; 4],
    /// Calls that got an injected error.
    pub injected: [u64; 4],
}

impl FaultStats {
    /// Calls of `method`.
    pub fn calls(&self, method: Method) -> u64 {
        self.calls[method.index()]
    }

    /// Injected failures of `method`.
    pub fn injected(&self, method: Method) -> u64 {
        self.injected[method.index()]
    }
}

#[derive(Debug)]
struct Plan {
    faults: Faults,
    rng: fastrand::Rng,
    targeted: u64,
}

enum Decision {
    Pass,
    /// Fail; `after_inner` runs the real call first (a copy that leaves data behind).
    Fail {
        after_inner: bool,
    },
}

/// A [`RemoteStorageManager`] that wraps another and injects failures and stalls, for testing
/// the layers above (tiering must retry, give up, and clean partial copies).
///
/// ```
/// use krabka_remote_storage::testkit::{FaultInjecting, Faults, Method};
/// # fn demo<R: krabka_remote_storage::RemoteStorageManager>(inner: R) {
/// let rsm = FaultInjecting::new(inner, Faults::fail_fraction(42, 0.3).on(&[Method::CopyLogSegmentData]));
/// // ... run rounds with faults, then:
/// rsm.set_enabled(false); // faults stop; clean rounds follow
/// assert!(rsm.calls(Method::CopyLogSegmentData) >= rsm.injected(Method::CopyLogSegmentData));
/// # }
/// ```
#[derive(Debug)]
pub struct FaultInjecting<R> {
    inner: R,
    enabled: AtomicBool,
    plan: Mutex<Plan>,
    calls: [AtomicU64; 4],
    injected: [AtomicU64; 4],
}

impl<R: RemoteStorageManager> FaultInjecting<R> {
    /// Wraps `inner` with `faults`, enabled.
    pub fn new(inner: R, faults: Faults) -> Self {
        Self {
            inner,
            enabled: AtomicBool::new(true),
            plan: Mutex::new(Plan {
                rng: fastrand::Rng::with_seed(faults.seed),
                faults,
                targeted: 0,
            }),
            calls: Default::default(),
            injected: Default::default(),
        }
    }

    /// Replaces the faults; the Nth-call count and the PRNG restart from the new settings.
    pub fn set_faults(&self, faults: Faults) {
        let mut plan = self.plan.lock();
        plan.rng = fastrand::Rng::with_seed(faults.seed);
        plan.faults = faults;
        plan.targeted = 0;
    }

    /// Turns fault injection (failures and stalls) on or off; calls are counted either way.
    pub fn set_enabled(&self, enabled: bool) {
        self.enabled.store(enabled, Ordering::SeqCst);
    }

    /// Whether faults are being injected.
    pub fn is_enabled(&self) -> bool {
        self.enabled.load(Ordering::SeqCst)
    }

    /// Calls of `method` so far.
    pub fn calls(&self, method: Method) -> u64 {
        self.calls[method.index()].load(Ordering::SeqCst)
    }

    /// Injected failures of `method` so far.
    pub fn injected(&self, method: Method) -> u64 {
        self.injected[method.index()].load(Ordering::SeqCst)
    }

    /// All counters at once.
    pub fn stats(&self) -> FaultStats {
        let mut s = FaultStats::default();
        for m in Method::ALL {
            s.calls[m.index()] = self.calls(m);
            s.injected[m.index()] = self.injected(m);
        }
        s
    }

    /// The wrapped store (to inspect it, bypassing the faults).
    pub fn inner(&self) -> &R {
        &self.inner
    }

    /// Unwraps.
    pub fn into_inner(self) -> R {
        self.inner
    }

    fn decide(&self, method: Method) -> Decision {
        self.calls[method.index()].fetch_add(1, Ordering::SeqCst);
        if !self.is_enabled() {
            return Decision::Pass;
        }
        let (stall, decision) = {
            let mut plan = self.plan.lock();
            if !plan.faults.methods.contains(&method) {
                return Decision::Pass;
            }
            plan.targeted += 1;
            let nth = plan.faults.fail_nth == Some(plan.targeted);
            let fraction = plan.faults.fail_fraction;
            let drawn = fraction > 0.0 && plan.rng.f64() < fraction;
            let decision = if nth || drawn {
                let partial = plan.faults.partial_copy_fraction;
                let after_inner = method == Method::CopyLogSegmentData
                    && partial > 0.0
                    && plan.rng.f64() < partial;
                Decision::Fail { after_inner }
            } else {
                Decision::Pass
            };
            (plan.faults.stall, decision)
        };
        if let Some(d) = stall {
            std::thread::sleep(d);
        }
        if matches!(decision, Decision::Fail { .. }) {
            self.injected[method.index()].fetch_add(1, Ordering::SeqCst);
        }
        decision
    }

    fn error(&self, method: Method, metadata: &RemoteLogSegmentMetadata) -> RemoteStorageError {
        let location = metadata.remote_log_segment_id().to_string();
        let message = "injected fault".to_owned();
        if self.plan.lock().faults.retriable {
            RemoteStorageError::Retriable {
                operation: method.name().to_owned(),
                location,
                message,
                source: None,
            }
        } else {
            RemoteStorageError::Backend {
                operation: method.name().to_owned(),
                location,
                message,
                source: None,
            }
        }
    }

    fn run<T>(
        &self,
        method: Method,
        metadata: &RemoteLogSegmentMetadata,
        call: impl FnOnce() -> Result<T, RemoteStorageError>,
    ) -> Result<T, RemoteStorageError> {
        match self.decide(method) {
            Decision::Pass => call(),
            Decision::Fail { after_inner } => {
                if after_inner {
                    // The outcome of the real call is hidden, as when a response is lost.
                    let _ = call();
                }
                Err(self.error(method, metadata))
            }
        }
    }
}

impl<R: RemoteStorageManager> RemoteStorageManager for FaultInjecting<R> {
    fn copy_log_segment_data(
        &self,
        metadata: &RemoteLogSegmentMetadata,
        data: &LogSegmentData,
    ) -> Result<Option<CustomMetadata>, RemoteStorageError> {
        self.run(Method::CopyLogSegmentData, metadata, || {
            self.inner.copy_log_segment_data(metadata, data)
        })
    }

    fn fetch_log_segment(
        &self,
        metadata: &RemoteLogSegmentMetadata,
        start_position: u32,
        end_position: Option<u32>,
    ) -> Result<Vec<u8>, RemoteStorageError> {
        self.run(Method::FetchLogSegment, metadata, || {
            self.inner
                .fetch_log_segment(metadata, start_position, end_position)
        })
    }

    fn fetch_index(
        &self,
        metadata: &RemoteLogSegmentMetadata,
        index_type: IndexType,
    ) -> Result<Vec<u8>, RemoteStorageError> {
        self.run(Method::FetchIndex, metadata, || {
            self.inner.fetch_index(metadata, index_type)
        })
    }

    fn delete_log_segment_data(
        &self,
        metadata: &RemoteLogSegmentMetadata,
    ) -> Result<(), RemoteStorageError> {
        self.run(Method::DeleteLogSegmentData, metadata, || {
            self.inner.delete_log_segment_data(metadata)
        })
    }
}
