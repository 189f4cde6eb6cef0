//! How a [`ReadReplica`] refreshes its view: the head object when it can, a full listing when
//! it must. Which copies may be served is decided exactly as a recovery decides it: complete
//! manifests only, and never a copy a later writer epoch took the partition over from.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use krabka_remote_storage::head::{self, HeadRead, PartitionHead, TailRef};
use krabka_remote_storage::layout::MANIFEST_SUFFIX;
use krabka_remote_storage::manifest::{self, ManifestState};
use krabka_remote_storage::ownership::{self, EpochRecord};
use krabka_remote_storage::recovery::{self, RemoteSegmentLister};
use krabka_remote_storage::{RemoteLogSegmentMetadata, RemoteStorageError, Uuid, layout};

use super::tail::TailCache;
use super::{HeadStatus, MissingSeqs, ReadReplica, View, judge, tail};
use crate::error::Error;

/// What refreshes remember between runs.
#[derive(Debug, Default)]
pub(crate) struct Known {
    /// The version of the head last read (`None`: read it whole next time).
    head_version: Option<String>,
    /// `(writer epoch, serial, incarnation)` of the newest head applied.
    applied: Option<(u64, u64, Uuid)>,
    /// The partition's epoch records, oldest first, and the highest epoch listed.
    epochs: Vec<EpochRecord>,
    max_epoch: u64,
    /// The served segments' metadata (mapped), by segment id: a head listing them again costs
    /// no manifest read.
    manifests: HashMap<Uuid, RemoteLogSegmentMetadata>,
    /// When a due refresh (a read's, or a group's) last ended.
    attempted_at: Option<Instant>,
    /// The tail chains the head last applied lists.
    tail_refs: Vec<TailRef>,
    /// The tail objects decoded so far.
    tail: TailCache,
}

/// What one [`ReadReplica::refresh`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RefreshOutcome {
    /// The head object was unchanged: one request, nothing else read.
    Unchanged,
    /// The head changed and was applied: `read` manifests of segments new to the replica were
    /// read.
    Applied {
        /// Manifests read.
        read: usize,
    },
    /// The partition was listed in full (the head is missing, damaged or stale, or it named a
    /// segment whose manifest is not a complete copy of it).
    FullListing,
}

/// Why the head could not be applied: a full listing decides.
struct NeedFull(HeadStatus);

impl ReadReplica {
    /// Refreshes the view now, whatever its age: one conditional read of the head object when
    /// nothing changed.
    ///
    /// # Errors
    /// [`ReadError::ReplicaRefresh`](crate::ReadError::ReplicaRefresh) when the bucket cannot be read; the previous view is kept.
    pub fn refresh(&self) -> Result<RefreshOutcome, Error> {
        let mut known = self.known.lock();
        self.refresh_locked(&mut known)
    }

    /// Refreshes when the view is [`ReplicaConfig::refresh_interval`](super::ReplicaConfig)
    /// old and no other refresh is running; a failure is logged and the view kept (its age
    /// shows in [`ReadReplica::stats`]).
    pub(crate) fn refresh_if_due(&self) {
        if let Some(Err(e)) = self.refresh_when_due() {
            tracing::warn!(partition = %self.tp, error = %e,
                "read replica refresh failed; serving the previous view");
        }
    }

    /// The refresh of [`refresh_if_due`](Self::refresh_if_due) (and of a
    /// [`ReplicaGroup`](super::ReplicaGroup)'s refresher): `None` when the view is not
    /// [`ReplicaConfig::refresh_interval`](super::ReplicaConfig) old, another refresh is
    /// running, or the last attempt is not an interval old (a failing bucket is asked again
    /// once an interval, not at every read or tick).
    pub(crate) fn refresh_when_due(&self) -> Option<Result<RefreshOutcome, Error>> {
        let interval = self.replica.refresh_interval;
        if self.view.read().refreshed_at.elapsed() < interval {
            return None;
        }
        let mut known = self.known.try_lock()?;
        if self.view.read().refreshed_at.elapsed() < interval
            || known.attempted_at.is_some_and(|t| t.elapsed() < interval)
        {
            return None;
        }
        // A read (or the refresher) never waits for a group's permit here: when every permit is
        // taken, the view is served as it is and the next due call tries again.
        let _permit = match &self.permits {
            Some(p) => Some(p.try_acquire()?),
            None => None,
        };
        let outcome = self.refresh_counted(&mut known);
        // From the attempt's end: a failing one may have taken its retries' time.
        known.attempted_at = Some(Instant::now());
        Some(outcome)
    }

    /// The refresh a read makes when a served segment's object is missing (retention deleted
    /// it since the view, most likely): at once while the head is readable (current, or behind
    /// the bucket or stale: one request when nothing changed, and a live writer's retention
    /// rewrites it before it deletes), else only when due, so a missing object under a missing
    /// or damaged head does not cost a full listing per read.
    pub(crate) fn refresh_after_missing(&self) -> Result<(), Error> {
        let readable = matches!(
            self.view.read().head,
            HeadStatus::Current | HeadStatus::Stale | HeadStatus::Behind { .. }
        );
        if readable {
            self.refresh().map(|_| ())
        } else {
            self.refresh_when_due().transpose().map(|_| ())
        }
    }

    fn refresh_locked(&self, known: &mut Known) -> Result<RefreshOutcome, Error> {
        // At most a group's `refresh_threads` refreshes run at once, whoever calls them.
        let _permit = self.permits.as_ref().map(|p| p.acquire());
        self.refresh_counted(known)
    }

    /// A refresh, counted, its gauges sampled after it (the caller holds any permit).
    fn refresh_counted(&self, known: &mut Known) -> Result<RefreshOutcome, Error> {
        self.stats.refreshes.fetch_add(1, Ordering::Relaxed);
        let outcome = self.refresh_inner(known);
        if outcome.is_err() {
            self.stats.refresh_failures.fetch_add(1, Ordering::Relaxed);
        }
        // Sampled whatever happened: a failing refresh shows as a growing staleness.
        crate::metrics::publish_replica(&self.tp, &self.stats());
        outcome
    }

    /// The head (or a full listing), then the tail chains the head lists.
    fn refresh_inner(&self, known: &mut Known) -> Result<RefreshOutcome, Error> {
        let outcome = self.refresh_head(known)?;
        self.follow_tail(known)?;
        Ok(outcome)
    }

    /// Reads the tail objects the head's chains hold that were not read yet, and serves their
    /// records above the finished segments. An object gone under the reader, or seqs no
    /// object holds, mean the head moved (the writer deletes only what a head lists finished):
    /// the head is read again once, then what is still not held is a named gap.
    fn follow_tail(&self, known: &mut Known) -> Result<(), Error> {
        for attempt in 0..2 {
            let refs = known.tail_refs.clone();
            let scan = known
                .tail
                .scan(self.store.as_ref(), &refs, &self.tp)
                .map_err(|(key, e)| self.refresh_error(&key, e))?;
            let finished_end = self.view.read().finished_end();
            let served = tail::build(&scan.found, finished_end);
            let unexplained = !scan.vanished.is_empty() || served.unexplained;
            if unexplained && attempt == 0 {
                tracing::debug!(partition = %self.tp, vanished = ?scan.vanished,
                    "the tail does not continue the finished segments; reading the head again");
                self.refresh_head(known)?;
                continue;
            }
            known.tail.trim(&known.tail_refs, finished_end);
            for g in served.gaps() {
                tracing::warn!(partition = %self.tp, from = g.from, to = g.to, reason = %g.reason,
                    "tail seqs cannot be served");
            }
            self.view.write().tail = Arc::new(served);
            break;
        }
        Ok(())
    }

    /// The head part of a refresh: the head object when it can, a full listing when it must.
    fn refresh_head(&self, known: &mut Known) -> Result<RefreshOutcome, Error> {
        let key = layout::head_key(&self.dir);
        let read = head::read_head(
            self.store.as_ref(),
            &self.dir,
            known.head_version.as_deref(),
        )
        .map_err(|e| self.refresh_error(&key, e))?;
        match read {
            HeadRead::Unchanged => {
                self.stats.idle_refreshes.fetch_add(1, Ordering::Relaxed);
                self.view.write().refreshed_at = Instant::now();
                Ok(RefreshOutcome::Unchanged)
            }
            HeadRead::Absent => {
                known.head_version = None;
                self.full_listing(known, None, HeadStatus::Missing)?;
                Ok(RefreshOutcome::FullListing)
            }
            HeadRead::Damaged { error, .. } => {
                tracing::warn!(partition = %self.tp, key, error = %error,
                    "the partition's head object is damaged; listing the partition in full");
                known.head_version = None;
                self.full_listing(known, None, HeadStatus::Damaged(error.to_string()))?;
                Ok(RefreshOutcome::FullListing)
            }
            HeadRead::Fresh { head, version } => match self.apply_head(known, &head)? {
                Ok(read) => {
                    known.head_version = Some(version);
                    Ok(RefreshOutcome::Applied { read })
                }
                Err(NeedFull(status)) => {
                    // The listing decides, and is newer than this head: once it succeeded, the
                    // head is read again only when it changes (the live writer's next head
                    // replaces a stale one), unless it is damaged.
                    known.head_version = None;
                    let newest = (status == HeadStatus::Current).then_some(&head);
                    self.full_listing(known, newest, status)?;
                    let damaged = matches!(self.view.read().head, HeadStatus::Damaged(_));
                    known.head_version = (!damaged).then_some(version);
                    Ok(RefreshOutcome::FullListing)
                }
            },
            _ => Err(self.refresh_error(
                &key,
                RemoteStorageError::invalid_argument("unknown answer reading the head object"),
            )),
        }
    }

    /// Builds the first view (a full listing), remembering the head's version so the next
    /// refresh is conditional.
    pub(crate) fn refresh_full(&self) -> Result<(), Error> {
        let mut known = self.known.lock();
        // A group's replicas opened at once list within its permits too.
        let _permit = self.permits.as_ref().map(|p| p.acquire());
        self.stats.refreshes.fetch_add(1, Ordering::Relaxed);
        let key = layout::head_key(&self.dir);
        let read = head::read_head(self.store.as_ref(), &self.dir, None)
            .map_err(|e| self.refresh_error(&key, e))?;
        let (head, version, status) = match read {
            HeadRead::Fresh { head, version } => (Some(head), Some(version), HeadStatus::Current),
            HeadRead::Damaged { error, .. } => (None, None, HeadStatus::Damaged(error.to_string())),
            _ => (None, None, HeadStatus::Missing),
        };
        self.full_listing(&mut known, head.as_ref(), status)?;
        // A head the listing found damaged (an epoch no record holds) is read whole again.
        if !matches!(self.view.read().head, HeadStatus::Damaged(_)) {
            known.head_version = version;
        }
        self.follow_tail(&mut known)
    }

    /// Applies a head that changed: `Ok(Err(_))` when only a full listing can decide.
    fn apply_head(
        &self,
        known: &mut Known,
        head: &PartitionHead,
    ) -> Result<Result<usize, NeedFull>, Error> {
        if head.partition.topic_id() != self.tp.topic_id()
            || head.partition.partition() != self.tp.partition()
        {
            return Ok(Err(NeedFull(HeadStatus::Damaged(format!(
                "it names partition {}",
                head.partition
            )))));
        }
        if let Some((epoch, serial, incarnation)) = known.applied
            && ((head.writer_epoch, head.serial) < (epoch, serial)
                || (head.writer_epoch == epoch && head.incarnation != incarnation))
        {
            return Ok(Err(NeedFull(HeadStatus::Stale)));
        }
        self.learn_epochs(known, head.writer_epoch)?;
        if let Some(why) = not_a_writers_head(head, known) {
            return Ok(Err(NeedFull(HeadStatus::Damaged(why))));
        }
        let mut served = Vec::with_capacity(head.segments.len());
        let mut read = 0;
        for s in &head.segments {
            let meta = match known.manifests.get(&s.id) {
                Some(m) => m.clone(),
                None => {
                    read += 1;
                    match self.read_manifest(s.start_seq, s.id)? {
                        Some(m)
                            if m.start_offset() == s.start_seq
                                && m.end_offset() == s.end_seq
                                && m.writer_epoch() == s.writer_epoch =>
                        {
                            m
                        }
                        _ => return Ok(Err(NeedFull(HeadStatus::Current))),
                    }
                }
            };
            served.push(meta);
        }
        // The head lists only whole segments here; seqs its writer's epoch record says were in
        // the bucket past them are still named.
        let point = head.retention_point;
        let served = servable(known, served, point);
        let missing = judge::epochs_only(&self.dir, &known.epochs, &served, point);
        self.install(known, served, missing, Some(head), HeadStatus::Current)?;
        known.applied = Some((head.writer_epoch, head.serial, head.incarnation));
        Ok(Ok(read))
    }

    /// Learns the epoch records when a head names an epoch above those known, or when the
    /// epoch after the head's exists (one small read): a later writer may have fenced the one
    /// that wrote the head.
    fn learn_epochs(&self, known: &mut Known, head_epoch: u64) -> Result<(), Error> {
        if head_epoch <= known.max_epoch && !known.epochs.is_empty() {
            let next = layout::epoch_key(&self.dir, head_epoch.saturating_add(1));
            match ownership::read_record(self.store.as_ref(), &next) {
                Ok(None) => return Ok(()),
                Ok(Some(_)) => {}
                // There but unusable (over the record limit, say): the listing below counts it
                // as an unreadable epoch, as recovery does.
                Err(RemoteStorageError::Corrupt { .. }) => {}
                Err(e) => return Err(self.refresh_error(&next, e)),
            }
        }
        let lister: &dyn RemoteSegmentLister = self.store.as_ref();
        let (epochs, unreadable) = ownership::list_epochs(lister, &self.dir, false)
            .map_err(|e| self.refresh_error(&self.dir, e))?;
        known.max_epoch = epochs
            .iter()
            .map(|e| e.epoch)
            .chain(unreadable)
            .max()
            .unwrap_or(0);
        known.epochs = epochs;
        Ok(())
    }

    /// A segment's manifest, when it decodes and says the copy is complete, mapped for
    /// readers. `None` for anything else (absent, in progress, deleting, damaged, refused by
    /// the map): a full listing decides then.
    fn read_manifest(
        &self,
        start: u64,
        id: Uuid,
    ) -> Result<Option<RemoteLogSegmentMetadata>, Error> {
        let key = layout::segment_object_key(&self.dir, start, id, MANIFEST_SUFFIX);
        let max = usize::try_from(manifest::MAX_MANIFEST_LEN).unwrap_or(usize::MAX);
        let bytes = match self.store.read_object_bounded(&key, max) {
            Ok(bytes) => bytes,
            // Gone, or too large to be a manifest: the listing decides.
            Err(RemoteStorageError::Corrupt { .. }) => return Ok(None),
            Err(RemoteStorageError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                return Ok(None);
            }
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => return Err(self.refresh_error(&key, e)),
        };
        let Ok(meta) = manifest::decode(&bytes, &key) else {
            return Ok(None);
        };
        if ManifestState::of(&meta) != ManifestState::Complete
            || meta.remote_log_segment_id().id() != id
            || meta.topic_id_partition() != &self.tp
        {
            return Ok(None);
        }
        match &self.map {
            None => Ok(Some(meta)),
            Some(map) => match map(&meta) {
                Ok(mapped) => Ok(Some(mapped)),
                Err(e) if e.is_retriable() => Err(self.refresh_error(&key, e)),
                Err(_) => Ok(None),
            },
        }
    }

    /// The partition listed in full (the recovery scan, and the map), then installed. `head`:
    /// the newest head, whose retention point and writer position the view takes.
    fn full_listing(
        &self,
        known: &mut Known,
        head: Option<&PartitionHead>,
        status: HeadStatus,
    ) -> Result<(), Error> {
        self.stats.full_listings.fetch_add(1, Ordering::Relaxed);
        let lister: &dyn RemoteSegmentLister = self.store.as_ref();
        let concurrency = self.replica.scan_concurrency;
        let mut scan = recovery::scan(lister, &self.tp, concurrency)
            .map_err(|e| self.refresh_error(&self.dir, e))?;
        // The store counted the first listing page and every read; the pages after the first.
        self.store.take(scan.objects_listed / 1000);
        if let Some(map) = &self.map {
            let map = map.clone();
            scan = scan
                .map_chosen(concurrency, &move |m: &RemoteLogSegmentMetadata| map(m))
                .map_err(|e| self.refresh_error(&self.dir, e))?;
        }
        known.max_epoch = scan.max_epoch;
        known.epochs = scan.epochs.clone();
        let (head, status) = match head.map(|h| (h, not_a_writers_head(h, known))) {
            Some((_, Some(why))) => (None, HeadStatus::Damaged(why)),
            Some((h, None)) => (Some(h), status),
            None => (None, status),
        };
        let retention_point = self.retention_of(head);
        let chosen = servable(known, std::mem::take(&mut scan.chosen), retention_point);
        let (served, missing, status) = match head {
            Some(h) => {
                // What the writer recorded finished is what its head lists: a complete copy it
                // has not recorded (it may still discard it) is served only when the head is
                // behind it, and every segment the head lists is served or named missing.
                let judged =
                    judge::against_head(&self.dir, h, chosen, &scan.ignored, &scan.epochs, status);
                (judged.served, judged.missing, judged.status)
            }
            None => {
                let missing = judge::of_listing(&self.dir, &scan, &chosen, retention_point);
                (chosen, missing, status)
            }
        };
        // Retention may delete segments this head lists between its read and the listing (it
        // rewrites the head, then deletes): the head read again says how far it went, and what
        // lies wholly below its retention point now is deleted, not lost.
        let mut missing = missing;
        if let Some(h) = head
            && !missing.is_empty()
            && let Ok(HeadRead::Fresh { head: newer, .. }) =
                head::read_head(self.store.as_ref(), &self.dir, None)
            && newer.partition == h.partition
            && (newer.writer_epoch, newer.serial) >= (h.writer_epoch, h.serial)
            && not_a_writers_head(&newer, known).is_none()
        {
            missing.retain(|m| m.to >= newer.retention_point);
        }
        if let HeadStatus::Behind { .. } = &status {
            tracing::warn!(partition = %self.tp, head = ?status,
                "the partition head is older than the segments in the bucket; serving what it lists");
        }
        for m in &missing {
            tracing::warn!(partition = %self.tp, from = m.from, to = m.to, reason = %m.reason,
                "seqs shown finished cannot be served");
        }
        self.install(known, served, missing, head, status)?;
        if let Some(h) = head {
            known.applied = Some((h.writer_epoch, h.serial, h.incarnation));
        }
        Ok(())
    }

    /// The retention point a view built with `head` has: the head's, else the view's.
    fn retention_of(&self, head: Option<&PartitionHead>) -> u64 {
        head.map_or_else(|| self.view.read().retention_point, |h| h.retention_point)
    }

    /// Serves `segments` from now on (copies a later epoch took over from and segments below
    /// the retention point left out), with `missing` the seqs shown finished that none holds.
    fn install(
        &self,
        known: &mut Known,
        segments: Vec<RemoteLogSegmentMetadata>,
        mut missing: Vec<MissingSeqs>,
        head: Option<&PartitionHead>,
        status: HeadStatus,
    ) -> Result<(), Error> {
        let retention_point = self.retention_of(head);
        let (writer_last_seq, written_ms) = match head {
            Some(h) => (Some(h.writer_last_seq), Some(h.written_ms)),
            None => {
                let view = self.view.read();
                (view.writer_last_seq, view.head_written_ms)
            }
        };
        let served = servable(known, segments, retention_point);
        if let Some(h) = head {
            known.tail_refs = h.tail.clone();
        }
        missing.retain(|m| m.to >= retention_point);
        missing.sort_by_key(|m| m.from);
        self.metadata
            .replace(&served)
            .map_err(|e| self.refresh_error(&self.dir, e))?;
        known.manifests = served
            .iter()
            .map(|m| (m.remote_log_segment_id().id(), m.clone()))
            .collect();
        let gone: Vec<Uuid> = {
            let view = self.view.read();
            view.segments
                .iter()
                .map(|m| m.remote_log_segment_id().id())
                .filter(|id| !known.manifests.contains_key(id))
                .collect()
        };
        // The tail is kept until the refresh reads it again (the reads serve finished
        // segments first).
        let tail = self.view.read().tail.clone();
        *self.view.write() = View {
            tail,
            segments: Arc::new(served),
            retention_point,
            writer_last_seq,
            head_written_ms: written_ms,
            head: status,
            refreshed_at: Instant::now(),
            missing: Arc::new(missing),
        };
        for id in gone {
            self.cache.lru().remove_segment(id);
        }
        crate::metrics::publish_replica(&self.tp, &self.stats());
        Ok(())
    }

    fn refresh_error(&self, key: &str, source: RemoteStorageError) -> Error {
        Error::Read(crate::error::ReadError::ReplicaRefresh {
            partition: Box::new(self.tp.clone()),
            key: key.to_owned(),
            source: Box::new(source),
        })
    }
}

/// `segments` by start seq, without copies a later epoch took over from and segments below
/// `retention_point`.
fn servable(
    known: &Known,
    segments: Vec<RemoteLogSegmentMetadata>,
    retention_point: u64,
) -> Vec<RemoteLogSegmentMetadata> {
    let mut served: Vec<RemoteLogSegmentMetadata> = segments
        .into_iter()
        .filter(|m| {
            m.end_offset() >= retention_point
                && ownership::superseded_by(m, &known.epochs).is_none()
        })
        .collect();
    served.sort_by_key(RemoteLogSegmentMetadata::start_offset);
    served
}

/// Why `head` is not one the writer holding its epoch wrote, given the epoch records known: it
/// names an epoch no record holds, or one whose record names another incarnation.
fn not_a_writers_head(head: &PartitionHead, known: &Known) -> Option<String> {
    let foreign = known
        .epochs
        .iter()
        .any(|e| e.epoch == head.writer_epoch && e.incarnation != head.incarnation);
    (head.writer_epoch > known.max_epoch || foreign).then(|| {
        format!(
            "it names writer epoch {} (incarnation {}), which no epoch record of the partition \
             holds",
            head.writer_epoch, head.incarnation
        )
    })
}
