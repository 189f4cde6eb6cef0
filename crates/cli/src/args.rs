//! The command line, as clap sees it.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::human;

mod parse;
mod tail;

pub use tail::{DurabilityArg, TailArgs};

use parse::{
    MAX_CONCURRENCY, MAX_RECORDS, parse_bench_value_size, parse_compression, parse_interval,
    parse_refresh_interval, parse_segment_bytes, parse_separator, parse_seq, parse_timeout,
    parse_topic,
};

/// krabka: a tiered log you can run, inspect and verify.
///
/// Records are appended to segments on local disk; closed segments are copied to a remote tier
/// (a filesystem directory or an S3 bucket) and, past the local retention, kept only there.
/// Reads cross both tiers transparently.
#[derive(Debug, Parser)]
#[command(
    name = "krabka",
    version,
    propagate_version = true,
    max_term_width = 100,
    after_help = EXIT_CODES
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Append records, tier them to a remote, keep little locally, read everything back across
    /// both tiers and verify every record; prints a summary.
    Demo(DemoArgs),
    /// Append records to a log: one per line of stdin, or generated ones.
    ///
    /// Lines are split at `\n` only: a `\r` before it stays part of the value. The lines before
    /// a bad one (invalid UTF-8, too large, a bad escape with --escaped) are appended, nothing
    /// from it on; the error names both line ranges and exits 1. With --all-or-nothing a bad
    /// line appends nothing.
    ///
    /// With --remote URL the directory is opened as its partition's writer in that remote (as
    /// `tier` opens it); --durability bucket then counts a record as written only once it is
    /// in a tail object in the remote, so that it outlives the local disk (`krabka recover`
    /// into a new directory, then any command that opens it as the writer, takes it back).
    /// No segment is copied: run `krabka tier` for that.
    #[command(after_help = EXIT_CODES)]
    Produce(ProduceArgs),
    /// Print records from a seq on (tab-separated: seq, timestamp, key, value).
    ///
    /// One line per record: seq TAB timestamp TAB key TAB value. Keys and values are escaped
    /// so that every line is unambiguous: `\\` is a backslash, `\t` a tab, `\n` a newline,
    /// `\r` a carriage return, `\xNN` any other control byte or a byte that is not UTF-8; a
    /// record without a key shows `-`, and a key that is the single character `-` shows `\-`.
    /// A value (or key) cut at --value-chars ends in `\…`. `krabka produce --escaped` reads
    /// these escapes back.
    ///
    /// The summary on stderr says how the read ended: at the end of the log, at --max (naming
    /// the next seq), or cut short (by --timeout without --follow, a signal or an error: it
    /// names the seq it stopped before and the command exits non-zero).
    ///
    /// `krabka read DIR` reads the local files; `krabka read DIR --remote URL` both tiers.
    /// `krabka read --remote URL --topic NAME [--partition N]` (no DIR; or with --replica)
    /// reads the remote tier alone, as a read replica: no local log, nothing written to the
    /// bucket. It serves the segments the writer's `krabka tier` finished copying (records
    /// still in the writer's local log are not there yet); with --follow it looks for new ones
    /// every --refresh-interval. On exit a line on stderr gives the replica's lag (seqs behind
    /// the writer's last seq, as the partition's head object says it, and seconds since the
    /// last refresh) when it is behind or the head is not current.
    #[command(after_help = EXIT_CODES)]
    Read(ReadArgs),
    /// Print every record batch of a segment file and every record in it, as kafka-dump-log
    /// --deep-iteration does: each batch's offsets, producer fields, position, size, codec and
    /// CRC status; each record's offset, timestamp, key and value sizes and header names (and
    /// its key and value with --values). Exits 1 naming the byte of the first bad batch.
    Dump(DumpArgs),
    /// Check every record batch and index entry of a log directory and that its segments
    /// follow each other without a gap; exits 1 naming the file and byte position of any
    /// problem.
    Verify(VerifyArgs),
    /// Move the damaged bytes of a log aside into DIR/quarantine/ (nothing is deleted), keep
    /// every intact batch after them, record the seqs the damage held as a hole, and say what
    /// moved where; or accept a hole as lost (--accept-hole) so tiering goes on past it.
    Repair(RepairArgs),
    /// Copy closed segments to a remote and apply retention: one round, or continuously.
    Tier(TierArgs),
    /// Rebuild a tiered log from its remote tier alone (after losing the local disk): read the
    /// segment manifests, record the whole segments in DIR/remote-metadata, start the empty
    /// local log after the remote end, and report every object ignored and why.
    Recover(RecoverArgs),
    /// Measure append and read throughput of the local log on this machine.
    Bench(BenchArgs),
}

/// Where the remote tier is.
#[derive(Debug, Clone, Args)]
pub struct RemoteArgs {
    /// The remote tier: `fs://PATH` (a directory) or `s3://BUCKET/PREFIX`. S3 credentials and
    /// region come from the standard AWS environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
    /// AWS_SESSION_TOKEN, AWS_REGION, AWS_ENDPOINT_URL, AWS_MAX_ATTEMPTS).
    #[arg(long, value_name = "URL")]
    pub remote: Option<String>,
    /// Endpoint of an S3-compatible store (e.g. http://127.0.0.1:9000); overrides
    /// AWS_ENDPOINT_URL. Only with an s3:// remote.
    #[arg(long, value_name = "URL")]
    pub endpoint: Option<String>,
    /// Compress the segments this command copies to the remote: `zstd` or `zstd:LEVEL`
    /// (1..=22; `zstd` is level 3), or `none` (the default). Segments written with any setting
    /// stay readable without it.
    #[arg(long, value_name = "SPEC", value_parser = parse_compression)]
    pub compression: Option<String>,
    /// A master key file: 32 raw bytes or 64 hex characters (a regular file of at most 128
    /// bytes). May be given several times: the first key given encrypts the segments this
    /// command copies (AES-256-GCM, a fresh data key per segment wrapped by it); every key
    /// given reads the segments encrypted with it (each segment records its key's id).
    #[arg(long, value_name = "PATH")]
    pub encryption_key_file: Vec<PathBuf>,
    /// A directory of master key files (every file whose name does not start with `.`, in
    /// name order), read after the --encryption-key-file keys; without --encryption-key-file
    /// its first key encrypts new segments. Keep rotated-out keys here to read old segments.
    #[arg(long, value_name = "DIR")]
    pub encryption_key_dir: Option<PathBuf>,
}

/// Tiering knobs shared by `demo` and `tier`.
#[derive(Debug, Clone, Args)]
pub struct RetentionArgs {
    /// Bytes of closed segments kept on local disk once they are safely remote (the rest is
    /// served from the remote tier). Accepts units: 4MiB, 1GiB.
    #[arg(long, value_name = "SIZE", value_parser = human::parse_bytes)]
    pub local_retention_bytes: Option<u64>,
    /// Bytes of remote-tier cache for reads. Accepts units.
    #[arg(long, value_name = "SIZE", value_parser = human::parse_bytes)]
    pub cache_bytes: Option<u64>,
    /// Whole-log retention by size: bytes of the whole log (remote segments plus local ones
    /// not yet remote) above which the oldest remote segments are deleted, from both tiers;
    /// the log then starts after them. At least 1 byte. Accepts units. Default: no limit.
    #[arg(long, value_name = "SIZE", value_parser = crate::tier::parse_retention_bytes)]
    pub retention_bytes: Option<u64>,
    /// Whole-log retention by age, e.g. 7d: remote segments whose newest record is older are
    /// deleted, from both tiers. From 1ms to 100 years. Default: no age limit.
    #[arg(long, value_name = "DURATION", value_parser = crate::tier::parse_retention_ms)]
    pub retention_ms: Option<u64>,
}

/// `krabka demo`.
#[derive(Debug, Clone, Args)]
pub struct DemoArgs {
    /// Directory to run in; must be new or empty (the log goes to DIR/log, the default remote
    /// to DIR/remote). Default: a temporary directory removed at exit.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Records to append: 1 to 10^12.
    #[arg(long, default_value_t = 200_000, value_parser = clap::value_parser!(u64).range(1..=MAX_RECORDS))]
    pub records: u64,
    /// Segment size: the log rolls to a new segment at this size. Small, so that there are many
    /// segments to tier. Minimum 1 KiB, maximum 4 GiB - 1 (what the remote tier can address).
    #[arg(long, value_name = "SIZE", default_value = "1MiB", value_parser = parse_segment_bytes)]
    pub segment_bytes: u64,
    /// Seed of the deterministic record generator.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub remote: RemoteArgs,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub retention: RetentionArgs,
}

/// `krabka produce`.
#[derive(Debug, Clone, Args)]
pub struct ProduceArgs {
    /// Log directory (created when missing).
    pub dir: PathBuf,
    /// Append N generated records instead of reading stdin: 0 to 10^12.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(0..=MAX_RECORDS))]
    pub generate: Option<u64>,
    /// Seed of the generator (with --generate).
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Split each stdin line at the first SEP into key and value (like kafka-console-producer's
    /// parse.key); lines without it get no key. SEP is not empty and has no newline.
    #[arg(long, value_name = "SEP", value_parser = parse_separator, conflicts_with = "generate")]
    pub key_separator: Option<String>,
    /// Decode the escapes `krabka read` prints in each line's key and value (`\\`, `\t`,
    /// `\n`, `\r`, `\xNN`, `\-`), and take a key that is exactly `-` as no key. A line with
    /// any other backslash sequence is bad. `krabka read DIR | cut -f3- | krabka produce DIR2
    /// --escaped --key-separator "$(printf '\t')"` appends the same keys and values.
    #[arg(long, conflicts_with = "generate")]
    pub escaped: bool,
    /// Read and check the whole input before appending anything (it is kept meanwhile in a
    /// temporary file, under TMPDIR): a bad line appends nothing. Once every line is valid they
    /// are all appended; only a failed append or a signal can then stop it part way, and the
    /// error names the lines appended.
    #[arg(long, conflicts_with = "generate")]
    pub all_or_nothing: bool,
    /// Segment size for new segments. Minimum 1 KiB, maximum 4 GiB - 1 (what the remote tier
    /// can address).
    #[arg(long, value_name = "SIZE", default_value = "64MiB", value_parser = parse_segment_bytes)]
    pub segment_bytes: u64,
    /// `local`: a record is written once the local log has it. `bucket`: once it is in a tail
    /// object in the remote as well (each batch of up to 1000 records waits for one; an append
    /// not there within --ack-deadline stops the command, naming the seqs acknowledged and
    /// those only appended locally). `bucket` needs --remote and turns the tail on.
    #[arg(long, value_enum, value_name = "WHEN", default_value_t = DurabilityArg::Local,
          requires_if("bucket", "remote"))]
    pub durability: DurabilityArg,
    /// Print `acknowledged seq A..=B` (`appended seq A..=B` with --durability local, not yet
    /// synced) on stdout as each batch returns.
    #[arg(long)]
    pub progress_lines: bool,
    // With --remote, DIR is opened as the writer of its partition in that remote (as `tier`
    // opens it: the directory is bound to it), not as a plain local log.
    #[command(flatten)]
    #[allow(missing_docs)]
    pub remote: RemoteArgs,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub tail: TailArgs,
}

/// `krabka read`.
#[derive(Debug, Clone, Args)]
#[command(group(clap::ArgGroup::new("source").args(["dir", "topic"]).required(true)))]
pub struct ReadArgs {
    /// Log directory. Leave it out and pass --remote and --topic to read the remote tier alone,
    /// as a read replica (--replica).
    #[arg(conflicts_with = "replica")]
    pub dir: Option<PathBuf>,
    /// First seq to print (the log's first record has seq 1; seq 0 does not exist).
    #[arg(long, value_name = "SEQ", default_value_t = 1, value_parser = parse_seq)]
    pub from: u64,
    /// Stop after N records (at least 1); the summary then names the next seq.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub max: Option<u64>,
    /// Keep waiting for new records (until --max, --timeout, or Ctrl-C, SIGTERM or SIGHUP,
    /// which exit 130, 143 or 129 naming the seq the read stopped before).
    #[arg(long)]
    pub follow: bool,
    /// Stop after this long in total, by the wall clock, whatever the writer does (with
    /// --follow: also while records keep coming), e.g. 30s, 5m; at most 365 days. Without
    /// --follow, a read the timeout cuts short says where it stopped and exits 1.
    #[arg(long, value_name = "DURATION", value_parser = parse_timeout)]
    pub timeout: Option<Duration>,
    /// Print at most this many characters of each value (keys: of each key, or 200 when that
    /// is more); a cut one ends in `\…`. A byte that is not UTF-8 counts as one character.
    #[arg(long, value_name = "CHARS", default_value_t = 200)]
    pub value_chars: usize,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub remote: RemoteArgs,
    /// Read the partition from the remote tier alone, with no log directory (a read replica):
    /// what the writer's tier copied, decided by the bucket's own records. Implied when DIR is
    /// left out (then --remote and --topic name the partition); not with DIR.
    #[arg(long, requires = "remote", requires = "topic")]
    pub replica: bool,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub partition: ReplicaArgs,
}

/// Which partition `read --replica` reads, and how it follows the bucket.
#[derive(Debug, Clone, Args)]
pub struct ReplicaArgs {
    /// The topic to read (replica mode): the name of the log directory it was tiered from.
    #[arg(
        long,
        value_name = "NAME",
        requires = "remote",
        value_parser = parse_topic
    )]
    pub topic: Option<String>,
    /// The partition of --topic (replica mode): 0 to 2^31 - 1.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 0,
        conflicts_with = "dir",
        value_parser = clap::value_parser!(i32).range(0..)
    )]
    pub partition: i32,
    /// The topic id (replica mode), when the remote holds several partitions of --topic under
    /// different ids. Default: the only one the remote holds.
    #[arg(long, value_name = "UUID", conflicts_with = "dir")]
    pub topic_id: Option<krabka_remote_storage::Uuid>,
    /// How often the replica looks at the bucket for new segments (replica mode): one small
    /// conditional read of the partition's head when nothing changed. Bounds how stale the
    /// records served are, beyond the writer's own copy lag. From 1ms to 1 day.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "1s",
        conflicts_with = "dir",
        value_parser = parse_refresh_interval
    )]
    pub refresh_interval: Duration,
}

/// `krabka dump`.
#[derive(Debug, Clone, Args)]
pub struct DumpArgs {
    /// A segment's `.log` file.
    pub file: PathBuf,
    /// Also print each record's key and value (as Kafka's --print-data-log does), cut at CHARS
    /// characters.
    #[arg(long, value_name = "CHARS", num_args = 0..=1, default_missing_value = "200")]
    pub values: Option<usize>,
}

/// `krabka verify`.
#[derive(Debug, Clone, Args)]
pub struct VerifyArgs {
    /// Log directory.
    pub dir: PathBuf,
    /// Print only problems and the summary.
    #[arg(long, short)]
    pub quiet: bool,
}

/// `krabka repair`.
#[derive(Debug, Clone, Args)]
pub struct RepairArgs {
    /// Log directory.
    pub dir: PathBuf,
    /// Only say what would be moved aside and kept; change nothing.
    #[arg(long, conflicts_with = "accept_hole")]
    pub dry_run: bool,
    /// Accept the hole holding SEQS (`N` or `N..=M`) as lost, recorded with the time in
    /// DIR/accepted-holes: `krabka tier` then copies past it and retention passes it. Reads of
    /// its seqs still fail naming it. Repeatable; repairs nothing.
    #[arg(long, value_name = "SEQS", value_parser = crate::repair::parse_seqs)]
    pub accept_hole: Vec<std::ops::RangeInclusive<u64>>,
}

/// `krabka tier`.
#[derive(Debug, Clone, Args)]
pub struct TierArgs {
    /// Log directory.
    pub dir: PathBuf,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub remote: RemoteArgs,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub retention: RetentionArgs,
    /// Keep tiering every --interval until Ctrl-C, SIGTERM or SIGHUP (it ends the round, says
    /// which signal stopped it, and exits 0; 1 when the log was fenced).
    #[arg(long)]
    pub watch: bool,
    /// Time between rounds with --watch, e.g. 5s; from 10ms to 1 day.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_interval)]
    pub interval: Duration,
    /// Serve the tiering metrics for Prometheus at http://ADDR/metrics while tiering, e.g.
    /// 127.0.0.1:9464 (plain HTTP: bind to a trusted interface; a non-loopback address is
    /// warned about; port 0 takes a free port, printed). At most 64 connections (an eighth of
    /// the descriptor limit when lower), 5 s to send a request.
    #[arg(long, value_name = "ADDR")]
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// The tail: with it, `tier` also writes the active segment's records to the remote (every
    /// --tail-interval with --watch) and, before it exits 0, has every record of the log in the
    /// remote (finished segments and tail objects).
    #[command(flatten)]
    #[allow(missing_docs)]
    pub tail: TailArgs,
}

/// `krabka recover`.
#[derive(Debug, Clone, Args)]
pub struct RecoverArgs {
    /// Log directory to rebuild (created when missing). Unless --topic or --topic-id is given,
    /// its name gives the topic, as for `tier` and `read`.
    pub dir: PathBuf,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub remote: RemoteArgs,
    /// The topic to recover, when it is not DIR's name (e.g. the directory was renamed, or
    /// a replica's partition is rebuilt into a new directory).
    #[arg(long, value_name = "NAME", value_parser = parse_topic)]
    pub topic: Option<String>,
    /// The partition of the topic: 0 to 2^31 - 1 (default 0, or what DIR/topic records).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(i32).range(0..))]
    pub partition: Option<i32>,
    /// The topic id the log was tiered under: needed when the remote holds several partitions
    /// of the topic; given alone, it finds the partition whatever DIR is called.
    #[arg(long, value_name = "UUID")]
    pub topic_id: Option<krabka_remote_storage::Uuid>,
    /// Delete the objects of abandoned copies (begun over 7 hours ago and never finished), of
    /// deletes in progress and of superseded older copies. A copy in progress and segment
    /// objects without a manifest are never deleted. Without it nothing is ever deleted.
    #[arg(long)]
    pub clean_orphans: bool,
    /// Manifests read at once (a thread each): 1 to 256.
    #[arg(
        long,
        value_name = "N",
        default_value_t = krabka_tiering::recovery::DEFAULT_RECOVERY_CONCURRENCY,
        value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=MAX_CONCURRENCY)
    )]
    pub concurrency: usize,
}

/// How `bench` syncs appends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BenchSync {
    /// Never fsync (the OS writes back); measures the write path.
    Never,
    /// Fsync every 1000 appends.
    Batch,
    /// Fsync every append (group commit); measures the disk.
    Every,
}

/// `krabka bench`.
#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// Directory to run in (must be new or empty). Default: a temporary directory.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Records to append: 1 to 10^12.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..=MAX_RECORDS))]
    pub records: u64,
    /// Value size of each record. Accepts units. At most the largest record the log accepts
    /// (16 MiB) less the key and framing.
    #[arg(long, value_name = "SIZE", default_value = "512", value_parser = parse_bench_value_size)]
    pub value_size: u64,
    /// Records per append call.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub batch: u64,
    /// When to fsync.
    #[arg(long, value_enum, default_value_t = BenchSync::Never)]
    pub sync: BenchSync,
}

/// The exit codes, as `--help` lists them.
const EXIT_CODES: &str = "Exit codes: 0 done (also when stdout is closed early, as by `| head`); \
    1 a failure, or a result that is not complete (one line on stderr says what, where, and the \
    seq or line it stopped at); 2 a usage error (a bad argument); 130, 143, 129 stopped by \
    Ctrl-C (SIGINT), SIGTERM or SIGHUP before the command finished (128 + the signal's number; \
    what was printed or appended before is whole). `tier --watch` ends its round on these \
    signals and exits 0 (1 when the log was fenced).";

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;
    use clap::error::ErrorKind;

    /// Parses `args`, expecting clap to refuse them with `kind` and a message containing `says`.
    fn refused(args: &[&str], kind: ErrorKind, says: &str) {
        let e = Cli::try_parse_from(args).map(|_| ()).unwrap_err();
        assert_eq!(e.kind(), kind, "{args:?}: {e}");
        assert!(e.to_string().contains(says), "{args:?}: {e}");
    }

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn demo_defaults_and_sizes_parse() {
        let cli = Cli::try_parse_from([
            "krabka",
            "demo",
            "--records",
            "20000",
            "--segment-bytes",
            "256KiB",
        ])
        .unwrap();
        let Command::Demo(d) = cli.command else {
            panic!("not demo")
        };
        assert_eq!(
            (d.records, d.segment_bytes, d.seed),
            (20_000, 256 << 10, 42)
        );
        refused(
            &["krabka", "demo", "--records", "0"],
            ErrorKind::ValueValidation,
            "0 is not in 1..=1000000000000",
        );
        refused(
            &["krabka", "demo", "--segment-bytes", "10"],
            ErrorKind::ValueValidation,
            "a segment must be at least 1024 bytes, got 10",
        );
        for (too_big, n) in [
            ("4GiB", 4_294_967_296u64),
            ("5GiB", 5_368_709_120),
            ("4294967296", 4_294_967_296),
        ] {
            refused(
                &["krabka", "produce", "d", "--segment-bytes", too_big],
                ErrorKind::ValueValidation,
                &format!(
                    "a segment must be at most 4294967295 bytes (4 GiB - 1, what the remote tier can address), got {n}"
                ),
            );
        }
        assert!(
            Cli::try_parse_from(["krabka", "produce", "d", "--segment-bytes", "4294967295"])
                .is_ok()
        );
        let cli =
            Cli::try_parse_from(["krabka", "read", "d", "--follow", "--timeout", "2s"]).unwrap();
        // Durations that would overflow an `Instant`, or spin a core between rounds.
        let tier = |interval: &'static str| {
            [
                "krabka",
                "tier",
                "d",
                "--remote",
                "fs://r",
                "--interval",
                interval,
            ]
        };
        let read = ["krabka", "read", "d", "--timeout", "18446744073709551615s"];
        for bad in [
            &read[..],
            &tier("18446744073709551615s")[..],
            &tier("0s"),
            &tier("9ms"),
            &tier("25h"),
        ] {
            let e = Cli::try_parse_from(bad).unwrap_err();
            assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation, "{bad:?}");
        }
        let Command::Read(r) = cli.command else {
            panic!("not read")
        };
        assert_eq!((r.from, r.timeout), (1, Some(Duration::from_secs(2))));
        let cli = Cli::try_parse_from(["krabka", "repair", "d", "--dry-run"]).unwrap();
        let Command::Repair(r) = cli.command else {
            panic!("not repair")
        };
        assert!(r.dry_run);
        refused(
            &["krabka", "repair"],
            ErrorKind::MissingRequiredArgument,
            "<DIR>",
        );
        let cli = Cli::try_parse_from([
            "krabka",
            "repair",
            "d",
            "--accept-hole",
            "9",
            "--accept-hole",
            "20..=31",
        ])
        .unwrap();
        let Command::Repair(r) = cli.command else {
            panic!("not repair")
        };
        assert_eq!(r.accept_hole, vec![9..=9, 20..=31]);
        for bad in ["0", "9..=8", "x", "9..10"] {
            refused(
                &["krabka", "repair", "d", "--accept-hole", bad],
                ErrorKind::ValueValidation,
                &format!("`{bad}` is not SEQ or FIRST..=LAST"),
            );
        }
    }
}
