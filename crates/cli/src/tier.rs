//! `krabka tier`: copy closed segments to the remote and apply retention (local, and whole-log
//! with `--retention-bytes` / `--retention-ms`), once or every `--interval` with `--watch`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use krabka_remote_storage::RemoteStorageManager;
use krabka_storage::{Options, SyncPolicy};
use krabka_tiering::{Access, Instrumented, TieringReport, TieringStats, metrics};

use crate::args::TierArgs;
use crate::error::{CliError, Result};
use crate::output::{errln, outln};
use crate::remote;
use crate::tiered::{self, tiering_error};
use crate::{human, interrupt};

/// One line about a round.
pub fn describe_round(r: &TieringReport) -> String {
    let mut line = format!(
        "copied {} segment(s) ({}), deleted {} local segment(s)",
        r.segments_copied,
        human::bytes(r.bytes_copied),
        r.local_segments_deleted
    );
    if r.remote_segments_deleted > 0 {
        line.push_str(&format!(
            ", deleted {} remote segment(s) by retention",
            r.remote_segments_deleted
        ));
    }
    if r.stale_cleaned > 0 {
        line.push_str(&format!(", cleaned {} stale attempt(s)", r.stale_cleaned));
    }
    if !r.failures.is_empty() {
        line.push_str(&format!(
            ", {} failure(s), first: {}",
            r.failures.len(),
            r.failures
                .first()
                .map(|f| remote::brief(&f.to_string()).to_owned())
                .unwrap_or_default()
        ));
    }
    line
}

/// The longest `--retention-ms`: 100 years (of 365.25 days, the year `100years` parses to). A
/// longer one expires nothing a disk still holds; leave the flag out for no age limit.
const MAX_RETENTION: Duration = Duration::from_secs(100 * 31_557_600);

/// `--retention-bytes`: a size of at least 1 byte. 0 is refused: it would delete every segment
/// the remote tier holds at the next round, which no retention setting means.
pub(crate) fn parse_retention_bytes(s: &str) -> std::result::Result<u64, String> {
    match human::parse_bytes(s)? {
        0 => Err(format!(
            "a whole-log retention of {s} would delete every segment of the remote tier at the \
             next round: give at least 1 byte (e.g. 10GiB), or leave the flag out for no size \
             limit"
        )),
        n => Ok(n),
    }
}

/// `--retention-ms`: a duration (`7d`, `12h`, `90min`) from 1 ms to 100 years, as
/// milliseconds.
pub(crate) fn parse_retention_ms(s: &str) -> std::result::Result<u64, String> {
    let d = humantime::parse_duration(s)
        .map_err(|e| format!("`{s}` is not a duration ({e}): use e.g. 7d, 12h, 90min, 500ms"))?;
    if d < Duration::from_millis(1) || d > MAX_RETENTION {
        return Err(format!(
            "a whole-log retention age must be from 1ms to 100 years, got {s}"
        ));
    }
    // At most 100 years in milliseconds: far below u64::MAX.
    u64::try_from(d.as_millis()).map_err(|_| format!("`{s}` is too long"))
}

/// Whether `e` (or an error it wraps) says a later writer took the log's partition over.
fn is_fenced(e: &krabka_tiering::Error) -> bool {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = current {
        if matches!(
            err.downcast_ref::<krabka_tiering::Error>(),
            Some(krabka_tiering::Error::Ownership(
                krabka_tiering::OwnershipError::Fenced { .. }
            ))
        ) {
            return true;
        }
        current = err.source();
    }
    false
}

/// Serves the metrics facade's values for Prometheus at `http://addr/metrics` (see
/// [`metrics_http`](crate::metrics_http)), warns when that is reachable from the network, and
/// prints the address bound (for port 0, the port the OS chose).
fn serve_metrics(addr: SocketAddr) -> Result<()> {
    let bound = crate::metrics_http::serve(addr)?;
    if let Some(warning) = crate::metrics_http::exposure_warning(bound) {
        errln!("{warning}");
    }
    metrics::describe();
    outln!("serving metrics at http://{bound}/metrics")
}

/// What `--watch` printed last: a line is printed when copy lag, remote bytes or errors
/// change.
#[derive(Default)]
struct Watch {
    last: Option<(u64, u64, u64, u64, Option<u64>)>,
}

impl Watch {
    /// `tail`: the last seq in the bucket's tail (with a tail).
    fn show(&mut self, s: &TieringStats, tail: Option<u64>) -> Result<()> {
        let now = (
            s.copy_lag_segments,
            s.copy_lag_bytes,
            s.remote_bytes,
            s.copy_failures,
            tail,
        );
        if self.last == Some(now) {
            return Ok(());
        }
        self.last = Some(now);
        outln!(
            "copy lag {} segment(s) ({}), remote {}, copy errors {}{}",
            s.copy_lag_segments,
            human::bytes(s.copy_lag_bytes),
            human::bytes(s.remote_bytes),
            s.copy_failures,
            tail.map_or_else(String::new, |t| format!(", in the bucket up to seq {t}"))
        )
    }
}

/// Names the holes of the log the user accepted as lost (`krabka repair --accept-hole`), which
/// tiering copies past.
fn accepted_holes(log: &krabka_tiering::TieredLog) -> Result<()> {
    let local = log.log();
    let accepted = local.accepted_holes();
    for (hole, _) in local.quarantined() {
        if let Some(a) = accepted
            .iter()
            .find(|a| a.covers(*hole.start(), *hole.end()))
        {
            outln!(
                "  accepted hole seq {}..={} (accepted {}): no tier holds these seqs; tiering \
                 goes on past them",
                hole.start(),
                hole.end(),
                crate::inspect::timestamp(a.accepted_at_ms)
            )?;
        }
    }
    Ok(())
}

/// What to do about a round's first failure: for a hole a repair left (its marker is the
/// failure's file), restore its seqs or accept their loss.
fn round_hint(dir: &std::path::Path, first: &krabka_tiering::Error) -> String {
    if let krabka_tiering::Error::DamagedSegment {
        path,
        first_seq,
        last_seq,
        ..
    } = first
        && path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(krabka_storage::segment::parse_hole_file_name)
            .is_some()
    {
        return format!(
            "restore seqs {first_seq}..={last_seq} from a copy if you have one, or accept their \
             loss with `krabka repair {} --accept-hole {first_seq}..={last_seq}`; then run \
             `krabka tier` again",
            dir.display()
        );
    }
    "fix the cause and run `krabka tier` again; failed copies are retried".to_owned()
}

/// Runs `krabka tier`.
///
/// # Errors
/// When the log or remote cannot be opened, or a round fails (without `--watch`).
pub fn run(args: &TierArgs) -> Result<()> {
    let spec = remote::spec(&args.remote)?
        .ok_or_else(|| CliError::new("tier needs --remote fs://PATH or s3://BUCKET/PREFIX"))?;
    if !args.dir.is_dir() {
        return Err(
            CliError::new(format!("no log directory at {}", args.dir.display()))
                .hint("pass the directory of a krabka log (see `krabka produce`)"),
        );
    }
    let options = Options {
        sync: SyncPolicy::EveryAppend,
        ..Options::default()
    };
    let mut config = tiered::config(&args.retention);
    if args.tail.given() {
        config.tail = Some(args.tail.config());
    }
    let wrap: Option<remote::Wrap> = match args.metrics_addr {
        None => None,
        Some(addr) => {
            serve_metrics(addr)?;
            // Every remote call measured the same way, whatever the backend.
            Some(Box::new(|rsm: Arc<dyn RemoteStorageManager>| {
                Arc::new(Instrumented::new(rsm)) as Arc<dyn RemoteStorageManager>
            }))
        }
    };
    let tiered = tiered::open(
        &args.dir,
        spec,
        &args.remote,
        options,
        config,
        Access::Owner,
        wrap,
    )?;
    warn_about_new_key(&tiered, &args.remote)?;
    if args.watch {
        interrupt::install();
    }
    outln!(
        "tiering {} to {} (topic {})",
        args.dir.display(),
        tiered.remote.describe(),
        tiered.part.topic().topic()
    )?;
    accepted_holes(tiered.part.log())?;
    let mut watch = Watch::default();
    loop {
        let started = Instant::now();
        let mut report = tiered
            .part
            .log()
            .run_once()
            .map_err(|e| tiering_error("tiering round failed on", &args.dir, e))?;
        metrics::record_round(tiered.part.topic(), &report);
        metrics::publish_partition(tiered.part.log());
        if args.watch {
            watch.show(
                &tiered.part.log().stats(),
                tiered.part.log().tail_acked_seq(),
            )?;
        }
        let busy =
            report.segments_copied + report.local_segments_deleted + report.remote_segments_deleted
                > 0;
        if busy || !report.failures.is_empty() || !args.watch {
            outln!(
                "{} in {}",
                describe_round(&report),
                human::duration(started.elapsed())
            )?;
        }
        // A fenced log copies and deletes nothing more: a watch stops at once, failing, rather
        // than wait for the next round (or a signal) to end it as if all were well.
        if let Some(i) = report.failures.iter().position(is_fenced) {
            let fenced = report.failures.swap_remove(i);
            return Err(tiering_error("tiering round failed on", &args.dir, fenced));
        }
        if !args.watch {
            if let Some(first) = report.failures.first() {
                return Err(CliError::new(format!(
                    "{} failure(s) tiering {}; first: {}",
                    report.failures.len(),
                    args.dir.display(),
                    remote::brief(&first.to_string())
                ))
                .hint(round_hint(&args.dir, first)));
            }
            break;
        }
        let until = Instant::now() + args.interval;
        while Instant::now() < until && !interrupt::requested() {
            std::thread::sleep(Duration::from_millis(100).min(args.interval));
        }
        if interrupt::requested() {
            errln!("{} after a whole round; stopping", interrupt::stopped());
            // A takeover since the last round's check would otherwise end the watch with
            // success: one more epoch check (two small reads) before claiming it.
            match tiered.part.log().check_owner() {
                Err(e) if is_fenced(&e) => {
                    return Err(tiering_error("stopping the watch of", &args.dir, e));
                }
                Err(e) => errln!(
                    "warning: cannot confirm that {} still writes its partition: {}",
                    args.dir.display(),
                    remote::brief(&e.to_string())
                ),
                Ok(()) => {}
            }
            break;
        }
    }
    // Exit 0 says every record is in the bucket: the tail's too.
    drain_tail(&tiered, &args.dir)?;
    for line in tiered::describe_placement(&tiered.placement()?) {
        outln!("  {line}")?;
    }
    let stats = tiered.part.log().stats();
    outln!(
        "  local {}, remote {}, {} remote request(s)",
        human::bytes(stats.local_bytes),
        human::bytes(stats.remote_bytes),
        stats.requests.total()
    )?;
    let closed = tiered
        .part
        .into_log()
        .close()
        .map_err(|e| tiering_error("cannot close", &args.dir, e));
    // The tail writer's thread ends with its last handle.
    drop(tiered.tail);
    closed
}

/// With a tail: writes the log's records not yet in the bucket (above its finished segments)
/// in tail objects now, waiting at most the tail's `ack_deadline`, and says which seqs the tail
/// holds. Without a tail: nothing.
///
/// # Errors
/// When the records are not all in the bucket by the deadline (naming the last failure, or a
/// takeover), or the metadata cannot be listed.
pub(crate) fn drain_tail(tiered: &tiered::Tiered, dir: &std::path::Path) -> Result<()> {
    let Some(writer) = &tiered.tail else {
        return Ok(());
    };
    let log = tiered.part.log();
    let last = log.last_seq();
    let deadline = Instant::now() + writer.config().ack_deadline;
    let mut failure: Option<krabka_tiering::Error> = None;
    // Bounded by the deadline; each pass writes one object (or fails, or finds nothing new).
    loop {
        let acked = log.tail_acked_seq().unwrap_or(0);
        if acked >= last {
            break;
        }
        if Instant::now() >= deadline {
            return Err(tail_not_written(tiered, dir, acked, last, failure));
        }
        match writer.flush() {
            Ok(true) => {}
            Ok(false) => {
                // Nothing new to write for now (the writer's own thread may hold the window):
                // look again shortly rather than spin.
                if log.tail_acked_seq().unwrap_or(0) == acked {
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
            Err(e) => {
                failure = Some(e);
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
    let finished = tiered
        .placement()?
        .remote
        .iter()
        .map(|(_, end)| *end)
        .max()
        .unwrap_or(0);
    let stats = writer.stats();
    if last == 0 {
        outln!("tail: the log holds no records")
    } else if finished >= last {
        outln!("tail: nothing to write: finished segments hold every seq up to {last}")
    } else {
        outln!(
            "tail: seqs {}..={last} in the bucket ({} tail object(s) written, {}); every seq up \
             to {last} is in the bucket",
            finished + 1,
            stats.objects_written,
            human::bytes(stats.bytes_written)
        )
    }
}

/// The error of a tail that did not reach the bucket by its deadline: a takeover when the
/// epoch check finds one, else the writer's last failure.
fn tail_not_written(
    tiered: &tiered::Tiered,
    dir: &std::path::Path,
    acked: u64,
    last: u64,
    failure: Option<krabka_tiering::Error>,
) -> CliError {
    if let Err(e) = tiered.part.log().check_owner()
        && is_fenced(&e)
    {
        return tiering_error("writing the tail of", dir, e);
    }
    let deadline = tiered
        .tail
        .as_ref()
        .map(|w| w.config().ack_deadline)
        .unwrap_or_default();
    let why = failure.map_or_else(
        || "the tail writer wrote nothing for them".to_owned(),
        |e| remote::brief(&e.to_string()).to_owned(),
    );
    CliError::new(format!(
        "seqs {}..={last} of {} are not in the bucket ({}) after {} ({why}): the bucket holds \
         the log up to seq {acked} only",
        acked + 1,
        dir.display(),
        tiered.remote.describe(),
        human::duration(deadline)
    ))
    .hint(
        "check that the remote is reachable and writable (or give a longer --ack-deadline), \
         then run `krabka tier` again; the records are in the local log",
    )
}

/// On `tier` with encryption: a warning line on stderr when the key that encrypts new segments
/// is one no segment of the remote was encrypted with yet, naming the key ids the remote holds
/// (and those among them that were not given, whose segments this command cannot read).
/// Nothing when the remote holds no encrypted segment, or when no key is given.
///
/// # Errors
/// When the keys cannot be read, or the metadata cannot be listed.
fn warn_about_new_key(tiered: &tiered::Tiered, args: &crate::args::RemoteArgs) -> Result<()> {
    let config = remote::transform_config(args)?;
    let Some(keys) = config.keys().cloned() else {
        return Ok(());
    };
    let current = keys
        .current_key()
        .map_err(|e| CliError::new(e.to_string()).hint(remote::KEY_FILE_HINT))?
        .id();
    let segments = tiered
        .part
        .metadata()
        .list_remote_log_segments(tiered.part.topic())
        .map_err(|e| CliError::new(format!("cannot list remote segments: {e}")))?;
    // Segments copied before records carried their key id need their header read: at most
    // this many.
    const MAX_HEADER_READS: usize = 100;
    let mut reads = 0;
    let mut unchecked = 0;
    let mut held = std::collections::BTreeMap::<krabka_remote_transform::KeyId, u64>::new();
    for m in &segments {
        let m = &krabka_tiering::recovery::backend_metadata(m);
        if !krabka_remote_transform::Transforming::is_encrypted(m).unwrap_or(false) {
            continue;
        }
        let id = match krabka_remote_transform::Transforming::recorded_key_id(m) {
            Ok(Some(id)) => Some(id),
            _ if reads < MAX_HEADER_READS => {
                reads += 1;
                let t = tiered.tier.transforming();
                t.key_id(m).ok().flatten()
            }
            _ => {
                unchecked += 1;
                None
            }
        };
        if let Some(id) = id {
            *held.entry(id).or_default() += 1;
        }
    }
    if held.is_empty() || held.contains_key(&current) {
        return Ok(());
    }
    let not_given: Vec<String> = held
        .keys()
        .filter(|id| !matches!(keys.key(**id), Ok(Some(_))))
        .map(ToString::to_string)
        .collect();
    errln!(
        "warning: new segments are encrypted with key id {current}, which no segment of {} was \
         encrypted with yet; it holds segments encrypted with key id {}{}{}: keep every key \
         (--encryption-key-file, any number of times, or --encryption-key-dir) to read them",
        tiered.remote.describe(),
        held.iter()
            .map(|(id, n)| format!("{id} ({n} segment{})", if *n == 1 { "" } else { "s" }))
            .collect::<Vec<_>>()
            .join(", key id "),
        if not_given.is_empty() {
            String::new()
        } else {
            format!(
                " (key id {} not given here: this command cannot read those)",
                not_given.join(", ")
            )
        },
        if unchecked > 0 {
            format!(" (and {unchecked} older segments whose key id was not read)")
        } else {
            String::new()
        }
    );
    Ok(())
}
