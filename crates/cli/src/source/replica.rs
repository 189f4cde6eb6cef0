//! `krabka read --replica`: a partition read from the remote tier alone, with no log directory,
//! through [`ReadReplica`]: it serves the segments the bucket's own records say are whole (the
//! partition's head object, else a full listing), and writes nothing to the bucket.
//!
//! The partition is found on the remote as `krabka recover` finds it ([`find_partition`]);
//! segments the transforming layer compressed or encrypted are opened with recovery's own
//! function ([`open_transformed_segment`]), so a segment encrypted with
//! a key that was not given is named and left out (its seqs are not served). The replica is a
//! [`Source`] of `krabka read`: the summary, `--max`, `--timeout`, signals and lost seqs are
//! `read`'s own.

use std::ops::RangeInclusive;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use krabka_storage::Record;
use krabka_tiering::TieringConfig;
use krabka_tiering::partition::{PartitionQuery, find_partition};
use krabka_tiering::replica::{
    HeadStatus, MAX_REFRESH_INTERVAL, ReadReplica, ReplicaConfig, ReplicaStats,
};

use super::Source;
use crate::args::ReadArgs;
use crate::error::{CliError, Result};
use crate::output::errln;
use crate::{human, remote};

mod refusals;

use refusals::{Refusals, Refused, merged, segment_map};

/// Passes of the replica's own read over holes (each steps over up to 1,024) in one call at
/// most: bounds the loop over a view made of many holes.
const MAX_PASSES_PER_CALL: usize = 16;

/// Segments that cannot be opened named one by one at most (the rest are counted).
const MAX_NAMED: usize = 5;

/// `krabka read --replica`: records from the remote tier alone.
pub struct ReplicaSource {
    replica: ReadReplica,
    /// How the messages name the partition: `partition 0 of topic `orders` on fs://r`.
    name: String,
    remote: String,
    next: u64,
    follow: bool,
    /// `--refresh-interval`: the source refreshes the view itself, at most once per interval
    /// (the replica's own interval is set to the longest, so a refresh never runs twice in a
    /// row and every failure is reported here).
    interval: Duration,
    last_attempt: Instant,
    /// The last refresh failure reported (reported again only when it changes).
    failing: Option<String>,
    refusals: Arc<Mutex<Refusals>>,
    /// Refused segments already named on stderr.
    noted: usize,
    /// Holes skipped, each noted on stderr when met.
    lost: Vec<RangeInclusive<u64>>,
    /// Of those, the ones the bucket's records show finished: their objects missing or
    /// damaged, as the final error names them.
    missing: Vec<String>,
    /// The head status last reported (a change is noted on stderr while following).
    head: HeadStatus,
}

impl ReplicaSource {
    /// Finds the partition `args` names on the remote and opens a replica of it (a full
    /// listing) to read from `--from`.
    ///
    /// # Errors
    /// No `--remote` or `--topic`, a remote that cannot be listed, no such partition or more
    /// than one (without `--topic-id`), bad key files, or a first listing that fails.
    pub fn open(args: &ReadArgs) -> Result<Self> {
        let spec = remote::spec(&args.remote)?.ok_or_else(|| {
            CliError::new(
                "a read without a log directory reads the remote tier alone: it needs --remote",
            )
            .hint("pass --remote fs://PATH or s3://BUCKET/PREFIX, or the log directory")
        })?;
        let target = &args.partition;
        let Some(topic) = target.topic.as_deref() else {
            return Err(CliError::new(
                "a read of the remote tier alone needs --topic NAME (and --partition N)",
            )
            .hint("the topic is named after the log directory it was tiered from"));
        };
        let remote = spec.describe();
        // Listed before the remote is connected: a missing fs:// directory is refused here,
        // not created by the connection.
        let tier = remote::tier(&spec, &args.remote)?;
        let lister = tier.store();
        let query = PartitionQuery {
            topic: Some(topic.to_owned()),
            partition: Some(target.partition),
            topic_id: target.topic_id,
        };
        let tp = find_partition(&*lister, &remote, &query).map_err(|e| match e {
            e @ krabka_tiering::Error::Ownership(
                krabka_tiering::OwnershipError::PartitionNotFound { .. },
            ) => CliError::new(e.to_string()).hint(
                "check --topic, --partition and --remote: a log is tiered under a topic \
                     named after its directory, and appears on the remote once `krabka tier` ran",
            ),
            e @ krabka_tiering::Error::Ownership(
                krabka_tiering::OwnershipError::PartitionAmbiguous { .. },
            ) => CliError::new(e.to_string()).hint("pass the one to read with --topic-id UUID"),
            e => CliError::new(remote::brief(&e.to_string()).to_owned())
                .hint("check that the remote is reachable"),
        })?;
        let name = format!(
            "partition {} of topic `{}` (topic id {}) on {remote}",
            tp.partition(),
            tp.topic(),
            tp.topic_id()
        );
        let transforming = tier.transforming();
        let refusals = Arc::new(Mutex::new(Refusals::default()));
        let map = segment_map(transforming.clone(), refusals.clone());
        let mut config = ReplicaConfig::default();
        config.refresh_interval = MAX_REFRESH_INTERVAL;
        let tiering = TieringConfig {
            retention_ms: None,
            ..TieringConfig::default()
        };
        let replica = ReadReplica::builder(transforming, lister, tp, tiering, config)
            .and_then(|b| b.map(map).open())
            .map_err(|e| replica_error(&format!("cannot open a replica of {name}"), e))?;
        let mut source = Self {
            replica,
            name,
            remote,
            next: args.from,
            follow: args.follow,
            interval: target.refresh_interval,
            last_attempt: Instant::now(),
            failing: None,
            refusals,
            noted: 0,
            lost: Vec::new(),
            missing: Vec::new(),
            head: HeadStatus::Current,
        };
        source.note_refused();
        if source.follow {
            source.note_head();
        } else {
            source.head = source.replica.stats().head;
        }
        Ok(source)
    }

    /// Refreshes the view when `--refresh-interval` passed since the last attempt; a failure
    /// is noted on stderr (once while it lasts) and the previous view served.
    fn refresh_if_due(&mut self) {
        if self.last_attempt.elapsed() < self.interval {
            return;
        }
        self.last_attempt = Instant::now();
        match self.replica.refresh() {
            Ok(_) => {
                if self.failing.take().is_some() {
                    errln!("note: the replica of {} refreshes again", self.name);
                }
                self.note_head();
            }
            Err(e) => {
                let what = remote::brief(&e.to_string()).to_owned();
                if self.failing.as_deref() != Some(what.as_str()) {
                    errln!(
                        "note: cannot refresh the replica of {}: {what}; serving the segments \
                         known {} ago, trying again every {}",
                        self.name,
                        human::duration(self.replica.stats().since_refresh),
                        human::duration(self.interval)
                    );
                }
                self.failing = Some(what);
            }
        }
        self.note_refused();
    }

    /// Notes on stderr a change of what the replica knows of the partition head, when it is
    /// not current (stale, behind the bucket, damaged, missing), and when it is current again.
    fn note_head(&mut self) {
        let now = self.replica.stats().head;
        if now == self.head {
            return;
        }
        match &now {
            HeadStatus::Current => {
                errln!("note: the partition head of {} is current again", self.name);
            }
            other => errln!("note: {}", head_sentence(other)),
        }
        self.head = now;
    }

    /// Names on stderr each segment the map refused that was not named yet.
    fn note_refused(&mut self) {
        let Ok(refusals) = self.refusals.lock() else {
            return;
        };
        if refusals.segments.len() == self.noted {
            return;
        }
        for (key, r) in refusals
            .segments
            .iter()
            .skip(self.noted)
            .take(MAX_NAMED.saturating_sub(self.noted))
        {
            errln!(
                "note: segment {key} (seqs {}..={}) of {} cannot be opened: {}; its seqs are \
                 not served",
                r.start,
                r.end,
                self.remote,
                r.reason
            );
        }
        let more = refusals
            .segments
            .len()
            .saturating_sub(self.noted.max(MAX_NAMED));
        if more > 0 {
            errln!(
                "note: {more} more segment(s) of {} cannot be opened (counted in the error at \
                 the end)",
                self.remote
            );
        }
        self.noted = refusals.segments.len();
    }

    /// The error for a read from `seq` outside what the replica serves.
    fn out_of_range(&self, seq: u64, stats: &ReplicaStats) -> CliError {
        let (first, next) = (stats.first_seq, stats.last_seq.saturating_add(1));
        let holds = if next > first {
            format!("the remote tier holds {first}..={}", next - 1)
        } else {
            "the remote tier holds no records".to_owned()
        };
        let writer = match stats.writer_last_seq {
            Some(w) if w >= next => format!(
                "; the writer held seqs up to {w} when it last wrote the partition's head (seqs \
                 past {} are not copied yet)",
                next - 1
            ),
            _ => String::new(),
        };
        CliError::new(format!(
            "cannot read {} from seq {seq}: out of range: {holds}{writer}",
            self.name
        ))
        .hint(format!(
            "read from a seq in {}..={next} (seq {next} is the next the writer copies; with \
             --follow the read waits for it)",
            first.min(next)
        ))
    }

    /// What to say after the read ended with `result`: the replica's lag (when it is behind or
    /// its head is not current), then the result, failed when segments that could not be
    /// opened held seqs from `from` on.
    ///
    /// # Errors
    /// `result`'s error, or the segments that could not be opened.
    pub fn conclude(&self, result: Result<()>, from: u64) -> Result<()> {
        if let Err(e) = &result
            && crate::output::is_broken_pipe(e)
        {
            return result;
        }
        if let Some(line) = lag_line(&self.replica.stats()) {
            errln!("{line}");
        }
        let result = match result {
            // Lost seqs the bucket's records show finished: the hint names their objects
            // (not the writer's `recover`/`repair`, which this read did not run).
            Err(e) if e.exit_code() == 1 && !self.missing.is_empty() && !self.lost.is_empty() => {
                Err(e.hint(format!(
                    "the bucket's own records show those seqs finished ({}): restore the objects \
                     named from a copy, or let the writer copy those segments again",
                    self.missing.join("; ")
                )))
            }
            other => other,
        };
        result?;
        if let HeadStatus::Behind {
            listed_to,
            bucket_to,
            unlisted,
            ..
        } = self.replica.stats().head
            && unlisted > 0
        {
            let listed = listed_to.map_or_else(
                || "lists no segment".to_owned(),
                |t| format!("lists seqs up to {t}"),
            );
            return Err(CliError::new(format!(
                "the read of {} may be incomplete: its partition head {listed}, but the bucket \
                 holds {unlisted} complete segment(s) after them, up to seq {bucket_to}, that \
                 the head does not list: those seqs were not read",
                self.name
            ))
            .hint(
                "an old head object was put back, or its writer has not rewritten it since a copy: \
                 read again once the writer's next round rewrote it",
            ));
        }
        let refusals = match self.refusals.lock() {
            Ok(r) => r,
            Err(_) => return Ok(()),
        };
        let refused: Vec<(&String, &Refused)> = refusals
            .segments
            .iter()
            .filter(|(_, r)| r.end >= from)
            .collect();
        if refused.is_empty() {
            return Ok(());
        }
        let seqs: Vec<String> = merged(refused.iter().map(|(_, r)| (r.start, r.end)))
            .into_iter()
            .map(|(a, b)| format!("{a}..={b}"))
            .collect();
        let mut keys = refused
            .iter()
            .take(MAX_NAMED)
            .map(|(k, _)| k.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        if refused.len() > MAX_NAMED {
            keys.push_str(&format!(" and {} more", refused.len() - MAX_NAMED));
        }
        let ids: std::collections::BTreeSet<String> = refusals
            .missing_keys
            .iter()
            .map(ToString::to_string)
            .collect();
        let hint = if ids.is_empty() {
            "the objects named are damaged or were tampered with: restore them from a copy (every \
             other record read was printed)"
                .to_owned()
        } else {
            format!(
                "pass the master key of key id {} too (--encryption-key-file PATH, any number of \
                 times, or --encryption-key-dir DIR): reading needs every key the segments were \
                 encrypted with",
                ids.into_iter().collect::<Vec<_>>().join(", ")
            )
        };
        Err(CliError::new(format!(
            "{} segment(s) of {} cannot be opened ({}): their seqs {} were not read; every \
             other record read was printed",
            refused.len(),
            self.remote,
            keys,
            seqs.join(", ")
        ))
        .hint(hint))
    }
}

impl Source for ReplicaSource {
    fn next_records(&mut self, max: usize) -> Result<Vec<Record>> {
        self.refresh_if_due();
        let stats = self.replica.stats();
        let next_served = stats.last_seq.saturating_add(1);
        if self.next == next_served {
            return Ok(Vec::new());
        }
        if self.next > next_served {
            // Following a seq the writer holds but has not copied yet: wait for its copy.
            let written = stats
                .writer_last_seq
                .is_some_and(|w| w >= self.next.saturating_sub(1));
            if self.follow && written {
                return Ok(Vec::new());
            }
            return Err(self.out_of_range(self.next, &stats));
        }
        if self.next < stats.first_seq {
            return Err(self.out_of_range(self.next, &stats));
        }
        // Holes (a segment missing or refused between two served ones) are stepped over by the
        // replica, each named on stderr and in the final error; bounded.
        let before = self.lost.len();
        for _ in 0..MAX_PASSES_PER_CALL {
            let read = match self.replica.read_over_holes(self.next, max) {
                Ok(read) => read,
                Err(krabka_tiering::Error::Read(krabka_tiering::ReadError::OutOfRange {
                    seq,
                    ..
                })) => return Err(self.out_of_range(seq, &self.replica.stats())),
                Err(e) => {
                    return Err(replica_error(
                        &format!("cannot read {} from seq {}", self.name, self.next),
                        e,
                    ));
                }
            };
            for lost in &read.lost {
                let (from, to) = (*lost.seqs.start(), *lost.seqs.end());
                match &lost.reason {
                    Some(why) => {
                        crate::output::note(format_args!(
                            "seqs {from}..={to} are lost: {why}; reading on from seq {}",
                            to.saturating_add(1)
                        ));
                        self.missing.push(format!("seqs {from}..={to}: {why}"));
                    }
                    None => crate::output::note(format_args!(
                        "seqs {from}..={to} are lost: the remote tier holds no segment of \
                         them that can be opened; reading on from seq {}",
                        to.saturating_add(1)
                    )),
                }
                self.lost.push(lost.seqs.clone());
            }
            self.next = read.next;
            if !read.records.is_empty() || read.lost.is_empty() {
                return Ok(read.records);
            }
        }
        Err(CliError::new(format!(
            "cannot read {}: {} holes met in one read, up to seq {}, and no record yet",
            self.name,
            self.lost.len() - before,
            self.next
        )))
    }

    fn lost(&self) -> &[RangeInclusive<u64>] {
        &self.lost
    }
}

/// A replica's error as one line: `action: what`, and what to do.
fn replica_error(action: &str, e: krabka_tiering::Error) -> CliError {
    let what = remote::brief(&e.to_string()).to_owned();
    let hint = match &e {
        krabka_tiering::Error::Read(krabka_tiering::ReadError::CorruptRemote { .. }) => {
            "the remote copy is damaged: restore it from a copy (reads of the other seqs work)"
                .to_owned()
        }
        krabka_tiering::Error::Read(krabka_tiering::ReadError::RemoteNotAMessage { .. }) => {
            "not damage: the record has no Message form (a tombstone, a null header value, a \
             control or transactional batch stored as a raw batch)"
                .to_owned()
        }
        _ => remote::transform_hint(&e).unwrap_or_else(|| {
            crate::error::os_error_hint(&what).map_or_else(
                || {
                    "check that the remote is reachable (a read changes nothing: retry it)"
                        .to_owned()
                },
                str::to_owned,
            )
        }),
    };
    CliError::new(format!("{action}: {what}")).hint(hint)
}

/// What the replica knows of the partition head, as a clause.
fn head_sentence(head: &HeadStatus) -> String {
    match head {
        HeadStatus::Current => "head current".to_owned(),
        HeadStatus::Missing => "no head object: the writer has not written one, so every \
                                refresh lists the partition in full"
            .to_owned(),
        HeadStatus::Damaged(why) => {
            format!("the head object is damaged ({why}): every refresh lists the partition in full")
        }
        HeadStatus::Stale => "the head object is stale (older than one this replica already \
                              applied: a fenced writer wrote it late, or an old head was put \
                              back); the view came from a full listing"
            .to_owned(),
        HeadStatus::Behind {
            listed_to,
            bucket_to,
            unlisted,
            deleted,
        } => {
            let listed = listed_to.map_or_else(
                || "lists no segment".to_owned(),
                |t| format!("lists seqs up to {t}"),
            );
            let mut what = Vec::new();
            if *unlisted > 0 {
                what.push(format!(
                    "the bucket holds {unlisted} complete segment(s) after them, up to seq \
                     {bucket_to}"
                ));
            }
            if *deleted > 0 {
                what.push(format!("{deleted} segment(s) it lists were deleted since"));
            }
            format!(
                "the head object is behind the bucket (it {listed}; {}: an old head put back, or \
                 one its writer has not rewritten yet); only what it lists is served",
                what.join(", and ")
            )
        }
        other => format!("head {other:?}"),
    }
}

/// The line on stderr that says how far behind the writer the replica is, when it is (or when
/// its head object is not current, so the writer's position may be unknown).
fn lag_line(s: &ReplicaStats) -> Option<String> {
    if s.head == HeadStatus::Current && s.lag_seqs == 0 {
        return None;
    }
    let writer = match (s.writer_last_seq, s.head_age) {
        (Some(w), Some(age)) => format!(
            "the writer's last seq {w}, per its head written {} ago",
            human::duration(age)
        ),
        (Some(w), None) => format!("the writer's last seq {w}, per its head"),
        (None, _) => "the writer's last seq unknown".to_owned(),
    };
    let head = head_sentence(&s.head);
    let served = if s.last_seq >= s.first_seq {
        format!("served up to seq {}", s.last_seq)
    } else {
        "no seq served".to_owned()
    };
    Some(format!(
        "replica lag: {} seq{} behind the writer, {} since the last refresh ({served}; \
         {writer}; {head})",
        human::count(s.lag_seqs),
        if s.lag_seqs == 1 { "" } else { "s" },
        human::duration(s.since_refresh),
    ))
}
