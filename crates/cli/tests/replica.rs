//! `krabka read --remote URL --topic NAME` with no log directory: a read replica serving the
//! partition from the remote tier alone, as a user runs it (the built binary, real files, real
//! processes). Every wait is bounded.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::io::{BufRead, Read};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn krabka(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_krabka"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run krabka")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn show(out: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        out.status.code(),
        text(&out.stdout),
        text(&out.stderr)
    )
}

/// Runs `krabka args`, failing the test unless it succeeds.
fn ok(args: &[&str]) -> Output {
    let out = krabka(args);
    assert!(out.status.success(), "krabka {args:?}: {}", show(&out));
    out
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The seq of a `read` output line.
fn seq_of(line: &str) -> u64 {
    line.split('\t').next().unwrap().parse().unwrap()
}

/// `count` generated records in a new log at `log`, in small segments.
fn produce(log: &Path, count: u64, seed: u64) {
    ok(&[
        "produce",
        s(log),
        "--generate",
        &count.to_string(),
        "--seed",
        &seed.to_string(),
        "--segment-bytes",
        "8KiB",
    ]);
}

/// One round of `krabka tier` keeping nothing local but the active segment, plus `extra` flags.
fn tier(log: &Path, remote: &str, extra: &[&str]) {
    let mut args = vec![
        "tier",
        s(log),
        "--remote",
        remote,
        "--local-retention-bytes",
        "0",
    ];
    args.extend_from_slice(extra);
    ok(&args);
}

/// The base seq of the log's active segment (the highest-named `.log` file): every seq below
/// it is in a closed segment, which `tier` copies.
fn active_base(log: &Path) -> u64 {
    std::fs::read_dir(log)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .filter_map(|p| p.file_stem()?.to_str()?.parse::<u64>().ok())
        .max()
        .unwrap()
}

/// Kills the child on every exit path of the test.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(args: &[&str]) -> Running {
    Running(
        Command::new(env!("CARGO_BIN_EXE_krabka"))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    )
}

/// Every line the child writes to stdout, as it comes.
fn lines_of(child: &mut Child) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Sends `signal` (`-TERM`, ...) to `child`.
fn signal(child: &Child, signal: &str) {
    let status = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// Waits for `child` up to `limit`; `None` when it runs longer (the guard kills it).
fn wait_at_most(child: &mut Child, limit: Duration) -> Option<i32> {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// Receives lines into `got` until one of seq `seq` arrived, at most `limit`; whether it did.
fn wait_for_seq(
    lines: &mpsc::Receiver<String>,
    got: &mut Vec<String>,
    seq: u64,
    limit: Duration,
) -> bool {
    if got.last().is_some_and(|l| seq_of(l) >= seq) {
        return true;
    }
    let deadline = Instant::now() + limit;
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        let Ok(line) = lines.recv_timeout(left) else {
            return false;
        };
        let at = seq_of(&line);
        got.push(line);
        if at >= seq {
            return true;
        }
    }
    false
}

/// The `id` line of a log directory's topic file.
fn topic_id(log: &Path) -> String {
    let file = std::fs::read_to_string(log.join("topic")).unwrap();
    file.lines()
        .find_map(|l| l.strip_prefix("id "))
        .unwrap()
        .to_owned()
}

#[test]
fn a_replica_prints_exactly_the_records_the_remote_holds() {
    let work = tempfile::tempdir().unwrap();
    let log = work.path().join("orders");
    let remote = format!("fs://{}", work.path().join("remote").display());
    produce(&log, 3000, 42);
    tier(&log, &remote, &[]);
    let copied = active_base(&log) - 1;
    assert!(copied > 1000 && copied < 3000, "{copied}");

    let replica = ok(&[
        "read",
        "--remote",
        &remote,
        "--topic",
        "orders",
        "--partition",
        "0",
    ]);
    let printed = text(&replica.stdout);
    let seqs: Vec<u64> = printed.lines().map(seq_of).collect();
    assert_eq!(seqs, (1..=copied).collect::<Vec<_>>(), "{}", show(&replica));
    // The same lines as the writer's tiered log prints for the same range.
    let both = ok(&[
        "read",
        s(&log),
        "--remote",
        &remote,
        "--max",
        &copied.to_string(),
    ]);
    assert_eq!(printed, text(&both.stdout));
    let stderr = text(&replica.stderr);
    assert!(
        stderr.contains(&format!("read {copied} records (seq 1..={copied})"))
            || stderr.contains(&format!("(seq 1..={copied})")),
        "{stderr}"
    );
    // The active segment is not copied: the replica says how far behind the writer it is.
    assert!(
        stderr.contains(&format!(
            "replica lag: {} seqs behind the writer",
            3000 - copied
        )) && stderr.contains(&format!("served up to seq {copied}"))
            && stderr.contains("the writer's last seq 3000")
            && stderr.contains("head current"),
        "{stderr}"
    );
    // `--replica` says the same explicitly.
    let explicit = ok(&[
        "read",
        "--replica",
        "--remote",
        &remote,
        "--topic",
        "orders",
    ]);
    assert_eq!(text(&explicit.stdout), printed);

    // --from and --max.
    let part = ok(&[
        "read", "--remote", &remote, "--topic", "orders", "--from", "100", "--max", "5",
    ]);
    let expected: Vec<&str> = printed.lines().skip(99).take(5).collect();
    assert_eq!(text(&part.stdout).lines().collect::<Vec<_>>(), expected);
    assert!(
        text(&part.stderr).contains(
            "read 5 records (seq 100..=104), the --max of 5; the log may hold more from seq 105"
        ),
        "{}",
        show(&part)
    );
    let tail = ok(&[
        "read",
        "--remote",
        &remote,
        "--topic",
        "orders",
        "--from",
        &(copied - 2).to_string(),
    ]);
    assert_eq!(
        text(&tail.stdout).lines().collect::<Vec<_>>(),
        printed
            .lines()
            .skip(copied as usize - 3)
            .collect::<Vec<_>>()
    );
    // A seq past what was copied (even one the writer holds) is out of range, naming both.
    let past = krabka(&[
        "read", "--remote", &remote, "--topic", "orders", "--from", "2999",
    ]);
    assert_eq!(past.status.code(), Some(1), "{}", show(&past));
    let error = text(&past.stderr);
    assert!(
        error.contains(&format!(
            "from seq 2999: out of range: the remote tier holds 1..={copied}"
        )) && error.contains("the writer held seqs up to 3000"),
        "{error}"
    );
}

#[test]
fn a_following_replica_prints_each_record_once_the_writer_copies_it() {
    let work = tempfile::tempdir().unwrap();
    let log = work.path().join("clicks");
    let remote = format!("fs://{}", work.path().join("remote").display());
    produce(&log, 500, 1);
    tier(&log, &remote, &[]);
    let mut follower = spawn(&[
        "read",
        "--remote",
        &remote,
        "--topic",
        "clicks",
        "--follow",
        "--refresh-interval",
        "100ms",
        "--timeout",
        "300s",
    ]);
    let lines = lines_of(&mut follower.0);
    let mut got = Vec::new();
    let mut copied = active_base(&log) - 1;
    assert!(
        wait_for_seq(&lines, &mut got, copied, Duration::from_secs(30)),
        "the replica did not print seq {copied}: {got:?}"
    );
    for round in 0..3u64 {
        // The writer: appends (the log's one process at a time), then `tier --watch` copies.
        produce(&log, 300, 100 + round);
        let closed = active_base(&log) - 1;
        assert!(closed > copied, "round {round}: no segment closed");
        let mut watch = spawn(&[
            "tier",
            s(&log),
            "--remote",
            &remote,
            "--local-retention-bytes",
            "0",
            "--watch",
            "--interval",
            "100ms",
        ]);
        let started = Instant::now();
        assert!(
            wait_for_seq(&lines, &mut got, closed, Duration::from_secs(30)),
            "round {round}: seq {closed} not printed within 30 s: last {:?}",
            got.last()
        );
        assert!(started.elapsed() < Duration::from_secs(30));
        signal(&watch.0, "-TERM");
        assert_eq!(
            wait_at_most(&mut watch.0, Duration::from_secs(30)),
            Some(0),
            "tier --watch did not stop on SIGTERM"
        );
        copied = closed;
    }
    // Nothing past the copied range is printed.
    std::thread::sleep(Duration::from_millis(300));
    while let Ok(line) = lines.try_recv() {
        got.push(line);
    }
    signal(&follower.0, "-TERM");
    let code = wait_at_most(&mut follower.0, Duration::from_secs(30));
    let mut stderr = String::new();
    follower
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert_eq!(code, Some(143), "{stderr}");
    let next = copied + 1;
    assert!(
        stderr.contains(&format!("read {} records (seq 1..={copied})", got.len()))
            || stderr.contains(&format!("(seq 1..={copied})")),
        "{stderr}"
    );
    let error = stderr
        .lines()
        .find(|l| l.starts_with("error:"))
        .unwrap_or_default();
    assert!(
        error.contains("stopped by SIGTERM") && error.contains(&format!("before seq {next}")),
        "{stderr}"
    );
    assert!(
        stderr.contains("replica lag:") && stderr.contains(&format!("served up to seq {copied}")),
        "{stderr}"
    );
    // Every line printed is the acknowledged record, each seq once and in order.
    let seqs: Vec<u64> = got.iter().map(|l| seq_of(l)).collect();
    assert_eq!(seqs, (1..=copied).collect::<Vec<_>>());
    let acknowledged = text(&ok(&["read", s(&log), "--remote", &remote]).stdout);
    let by_seq: BTreeMap<u64, &str> = acknowledged.lines().map(|l| (seq_of(l), l)).collect();
    for line in &got {
        assert_eq!(Some(&line.as_str()), by_seq.get(&seq_of(line)));
    }
}

#[test]
fn replica_usage_errors_and_ambiguous_topics_are_named() {
    let work = tempfile::tempdir().unwrap();
    let remote_dir = work.path().join("remote");
    let remote = format!("fs://{}", remote_dir.display());
    let a = work.path().join("a").join("orders");
    produce(&a, 600, 1);
    tier(&a, &remote, &[]);

    // DIR with --replica, or replica flags with DIR: usage errors.
    for args in [
        &["read", s(&a), "--replica", "--remote", &remote][..],
        &["read", s(&a), "--remote", &remote, "--topic", "orders"],
        &["read", s(&a), "--refresh-interval", "2s"],
        &["read", "--topic", "orders"],
        &["read", "--remote", &remote],
        &["read", "--remote", &remote, "--topic", "a/b"],
    ] {
        let out = krabka(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", show(&out));
        assert!(text(&out.stderr).starts_with("error:"), "{}", show(&out));
    }
    let out = krabka(&["read", s(&a), "--replica", "--remote", &remote]);
    assert!(text(&out.stderr).contains("'--replica'"), "{}", show(&out));

    // An unknown topic, and a partition the topic does not have.
    for (topic, partition) in [("nope", "0"), ("orders", "3")] {
        let out = krabka(&[
            "read",
            "--remote",
            &remote,
            "--topic",
            topic,
            "--partition",
            partition,
        ]);
        assert_eq!(out.status.code(), Some(1), "{}", show(&out));
        let stderr = text(&out.stderr);
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(
            stderr.contains(&format!(
                "error: no partition {partition} of topic `{topic}` on {remote}"
            )),
            "{stderr}"
        );
    }
    // A missing remote directory is named, not created.
    let missing = format!("fs://{}", work.path().join("nowhere").display());
    let out = krabka(&["read", "--remote", &missing, "--topic", "orders"]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(
        text(&out.stderr).contains("does not exist"),
        "{}",
        show(&out)
    );
    assert!(!work.path().join("nowhere").exists());

    // A second log of the same name tiered to the same remote: a second topic id.
    let b = work.path().join("b").join("orders");
    produce(&b, 900, 2);
    tier(&b, &remote, &[]);
    let (id_a, id_b) = (topic_id(&a), topic_id(&b));
    assert_ne!(id_a, id_b);
    let out = krabka(&["read", "--remote", &remote, "--topic", "orders"]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("2 partitions 0 of topic `orders`")
            && stderr.contains(&id_a)
            && stderr.contains(&id_b)
            && stderr.contains("--topic-id"),
        "{stderr}"
    );
    // --topic-id picks one; each reads its own log's records.
    for (log, id) in [(&a, &id_a), (&b, &id_b)] {
        let out = ok(&[
            "read",
            "--remote",
            &remote,
            "--topic",
            "orders",
            "--topic-id",
            id,
        ]);
        let n = text(&out.stdout).lines().count();
        assert!(n > 0, "{}", show(&out));
        let both = ok(&["read", s(log), "--remote", &remote, "--max", &n.to_string()]);
        assert_eq!(text(&out.stdout), text(&both.stdout));
    }
    let other = "00000000-0000-4000-8000-000000000001";
    let out = krabka(&[
        "read",
        "--remote",
        &remote,
        "--topic",
        "orders",
        "--topic-id",
        other,
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&format!("with topic id {other}")) && stderr.contains(&id_a),
        "{stderr}"
    );
}

#[test]
fn a_replica_reads_compressed_and_encrypted_segments_and_names_those_it_cannot_open() {
    let work = tempfile::tempdir().unwrap();
    let remote_dir = work.path().join("remote");
    let remote = format!("fs://{}", remote_dir.display());
    let key = work.path().join("master.key");
    std::fs::write(&key, "ab".repeat(32)).unwrap();

    let packed = work.path().join("packed");
    produce(&packed, 2000, 3);
    tier(&packed, &remote, &["--compression", "zstd"]);
    let sealed = work.path().join("sealed");
    produce(&sealed, 2000, 4);
    tier(
        &sealed,
        &remote,
        &["--compression", "zstd:5", "--encryption-key-file", s(&key)],
    );

    for (log, topic, keys) in [
        (&packed, "packed", &[][..]),
        (&sealed, "sealed", &["--encryption-key-file", s(&key)][..]),
    ] {
        let mut args = vec!["read", "--remote", &remote, "--topic", topic];
        args.extend_from_slice(keys);
        let out = ok(&args);
        let printed = text(&out.stdout);
        let copied = active_base(log) - 1;
        assert_eq!(
            printed.lines().map(seq_of).collect::<Vec<_>>(),
            (1..=copied).collect::<Vec<_>>(),
            "{topic}: {}",
            show(&out)
        );
        let mut both = vec!["read", s(log), "--remote", &remote];
        let max = copied.to_string();
        both.extend_from_slice(&["--max", &max]);
        both.extend_from_slice(keys);
        assert_eq!(printed, text(&ok(&both).stdout), "{topic}");
    }

    // Without the key: every segment is named as one it cannot open, nothing is printed, and
    // the command fails saying which key is missing.
    let out = krabka(&["read", "--remote", &remote, "--topic", "sealed"]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(out.stdout.is_empty(), "{}", show(&out));
    let stderr = text(&out.stderr);
    let part = std::fs::read_dir(&remote_dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|n| n.starts_with("sealed-0-"))
        .unwrap();
    let first_key = std::fs::read_dir(remote_dir.join(&part))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".log"))
        .min()
        .unwrap();
    assert!(
        stderr.contains(&format!("note: segment {part}/{first_key} (seqs 1..="))
            && stderr.contains("cannot be opened: encrypted with key id"),
        "{stderr}"
    );
    let error = stderr
        .lines()
        .find(|l| l.starts_with("error:"))
        .unwrap_or_default();
    let copied = active_base(&sealed) - 1;
    assert!(
        error.contains(&format!(
            "segment(s) of {remote} cannot be opened ({part}/{first_key}"
        )) && error.contains(&format!("their seqs 1..={copied} were not read"))
            && error.contains("--encryption-key-file"),
        "{stderr}"
    );
}

/// The same over S3: the in-process server, the binary reading the bucket alone.
#[cfg(feature = "s3")]
mod s3 {
    use super::*;
    use krabka_remote_s3::test_server::TestServer;

    /// Variables that could steer a run away from the test server.
    const AWS_VARS: &[&str] = &[
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_ENDPOINT_URL",
        "AWS_ENDPOINT_URL_S3",
        "AWS_MAX_ATTEMPTS",
        "AWS_PROFILE",
        "AWS_CONFIG_FILE",
        "AWS_SHARED_CREDENTIALS_FILE",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_ROLE_ARN",
    ];

    /// Runs `krabka args` against `server`, killed past 180 s.
    fn krabka_s3(server: &TestServer, args: &[&str]) -> Output {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_krabka"));
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for var in AWS_VARS {
            cmd.env_remove(var);
        }
        cmd.env("AWS_ACCESS_KEY_ID", server.access_key())
            .env("AWS_SECRET_ACCESS_KEY", server.secret_key())
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ENDPOINT_URL", server.endpoint())
            .env("AWS_EC2_METADATA_DISABLED", "true");
        let mut child = Running(cmd.spawn().unwrap());
        let drain = |mut r: Box<dyn Read + Send>| {
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let _ = r.read_to_end(&mut buf);
                buf
            })
        };
        let out = drain(Box::new(child.0.stdout.take().unwrap()));
        let err = drain(Box::new(child.0.stderr.take().unwrap()));
        let started = Instant::now();
        let status = loop {
            if let Some(status) = child.0.try_wait().unwrap() {
                break status;
            }
            assert!(
                started.elapsed() < Duration::from_secs(180),
                "krabka {args:?} ran past 180 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        Output {
            status,
            stdout: out.join().unwrap(),
            stderr: err.join().unwrap(),
        }
    }

    #[test]
    fn a_replica_reads_an_s3_bucket_alone() {
        let server = TestServer::start().unwrap();
        let work = tempfile::tempdir().unwrap();
        let log = work.path().join("events");
        let remote = format!("s3://{}/replicas", server.bucket());
        produce(&log, 2000, 5);
        let out = krabka_s3(
            &server,
            &[
                "tier",
                s(&log),
                "--remote",
                &remote,
                "--local-retention-bytes",
                "0",
            ],
        );
        assert!(out.status.success(), "{}", show(&out));
        let copied = active_base(&log) - 1;
        let replica = krabka_s3(&server, &["read", "--remote", &remote, "--topic", "events"]);
        assert!(replica.status.success(), "{}", show(&replica));
        let printed = text(&replica.stdout);
        assert_eq!(
            printed.lines().map(seq_of).collect::<Vec<_>>(),
            (1..=copied).collect::<Vec<_>>()
        );
        let both = krabka_s3(
            &server,
            &[
                "read",
                s(&log),
                "--remote",
                &remote,
                "--max",
                &copied.to_string(),
            ],
        );
        assert!(both.status.success(), "{}", show(&both));
        assert_eq!(printed, text(&both.stdout));
        let unknown = krabka_s3(&server, &["read", "--remote", &remote, "--topic", "nope"]);
        assert_eq!(unknown.status.code(), Some(1), "{}", show(&unknown));
        assert!(
            text(&unknown.stderr).contains(&format!("no partition 0 of topic `nope` on {remote}")),
            "{}",
            show(&unknown)
        );
    }
}

/// The partition directory under an fs remote (the only one there is).
fn partition_dir(remote_dir: &Path) -> std::path::PathBuf {
    std::fs::read_dir(remote_dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.is_dir())
        .unwrap()
}

/// Copies the directory tree `from` to `to` (files only, one level of directories).
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(e.file_name());
        if e.path().is_dir() {
            copy_tree(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}

#[test]
fn a_replica_fails_naming_each_lost_object_of_the_newest_or_a_middle_segment() {
    let work = tempfile::tempdir().unwrap();
    let log = work.path().join("orders");
    let pristine = work.path().join("pristine");
    produce(&log, 3000, 42);
    tier(&log, &format!("fs://{}", pristine.display()), &[]);
    let copied = active_base(&log) - 1;
    let dir = partition_dir(&pristine);
    let mut logs: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.ends_with(".log"))
        .collect();
    logs.sort();
    assert!(logs.len() > 10, "{logs:?}");
    let stem_of = |n: &str| n.trim_end_matches(".log").to_owned();
    let victims = [
        ("newest", stem_of(&logs[logs.len() - 1])),
        ("middle", stem_of(&logs[logs.len() / 2])),
    ];
    let damages: [(&str, &str); 6] = [
        ("delete", ".log"),
        ("truncate", ".log"),
        ("delete", ".manifest"),
        ("delete", ".index"),
        ("delete", ".timeindex"),
        ("delete", ".leader-epoch-checkpoint"),
    ];
    for (which, stem) in &victims {
        // The segment's seqs: from its start (in its name) to the next segment's start - 1.
        let from: u64 = stem[..20].parse().unwrap();
        let to = logs
            .iter()
            .map(|n| n[..20].parse::<u64>().unwrap())
            .find(|s| *s > from)
            .map_or(copied, |next| next - 1);
        for (how, suffix) in damages {
            let what = format!("{which} segment {from}..={to}: {how} {suffix}");
            let remote_dir = work.path().join(format!("r-{which}-{how}{suffix}"));
            copy_tree(&pristine, &remote_dir);
            let object = partition_dir(&remote_dir).join(format!("{stem}{suffix}"));
            if how == "delete" {
                std::fs::remove_file(&object).unwrap();
            } else {
                let len = std::fs::metadata(&object).unwrap().len();
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(&object)
                    .unwrap()
                    .set_len(len / 3)
                    .unwrap();
            }
            let remote = format!("fs://{}", remote_dir.display());
            let out = krabka(&["read", "--remote", &remote, "--topic", "orders"]);
            assert_eq!(out.status.code(), Some(1), "{what}: {}", show(&out));
            // Every record printed is proved: each seq once, in order, none of the lost ones.
            let seqs: Vec<u64> = text(&out.stdout).lines().map(seq_of).collect();
            let expected: Vec<u64> = (1..=copied).filter(|s| *s < from || *s > to).collect();
            assert_eq!(seqs, expected, "{what}");
            let stderr = text(&out.stderr);
            let name = format!("{stem}{suffix}");
            assert!(
                stderr.contains(&format!(
                    "seqs {from}..={to} are lost: the partition head lists"
                )) && stderr.contains(&name),
                "{what}: {stderr}"
            );
            let error = stderr
                .lines()
                .find(|l| l.starts_with("error:"))
                .unwrap_or_default();
            assert!(
                error.contains(&format!("seqs {from}..={to} are lost")) && error.contains(&name),
                "{what}: {stderr}"
            );
            assert!(!stderr.contains("not copied yet"), "{what}: {stderr}");
        }
    }
}

#[test]
fn a_rolled_back_head_is_reported_by_a_fresh_and_a_following_replica() {
    let work = tempfile::tempdir().unwrap();
    let log = work.path().join("orders");
    let remote_dir = work.path().join("remote");
    let remote = format!("fs://{}", remote_dir.display());
    produce(&log, 800, 7);
    tier(&log, &remote, &[]);
    let early_end = active_base(&log) - 1;
    let head = partition_dir(&remote_dir).join("_head");
    let early = std::fs::read(&head).unwrap();
    produce(&log, 2000, 8);
    tier(&log, &remote, &[]);
    let copied = active_base(&log) - 1;
    assert!(copied > early_end + 100);

    // A replica following the newer head, when the old one is put back.
    let mut follower = spawn(&[
        "read",
        "--remote",
        &remote,
        "--topic",
        "orders",
        "--follow",
        "--refresh-interval",
        "100ms",
        "--timeout",
        "300s",
    ]);
    let lines = lines_of(&mut follower.0);
    let mut got = Vec::new();
    assert!(
        wait_for_seq(&lines, &mut got, copied, Duration::from_secs(30)),
        "the follower did not print seq {copied}"
    );
    std::fs::write(&head, &early).unwrap();

    // A fresh replica under the old head: the head is behind the bucket, and the read fails.
    let fresh = krabka(&["read", "--remote", &remote, "--topic", "orders"]);
    assert_eq!(fresh.status.code(), Some(1), "{}", show(&fresh));
    let seqs: Vec<u64> = text(&fresh.stdout).lines().map(seq_of).collect();
    assert_eq!(seqs, (1..=early_end).collect::<Vec<_>>());
    let stderr = text(&fresh.stderr);
    assert!(
        stderr.contains("the head object is behind the bucket")
            && stderr.contains(&format!("up to seq {copied}"))
            && !stderr.contains("head current"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "its partition head lists seqs up to {early_end}, but the bucket holds"
        )),
        "{stderr}"
    );

    // The follower notes the stale head (a few refreshes), then is stopped.
    std::thread::sleep(Duration::from_millis(1500));
    signal(&follower.0, "-TERM");
    let code = wait_at_most(&mut follower.0, Duration::from_secs(30));
    let mut stderr = String::new();
    follower
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert_eq!(code, Some(143), "{stderr}");
    assert!(
        stderr.contains("note: the head object is stale") && !stderr.contains("head current"),
        "{stderr}"
    );
    while let Ok(line) = lines.try_recv() {
        got.push(line);
    }
    let seqs: Vec<u64> = got.iter().map(|l| seq_of(l)).collect();
    assert_eq!(seqs, (1..=copied).collect::<Vec<_>>());
}

#[test]
fn a_replica_fails_naming_a_newest_manifest_replaced_by_the_previous_one() {
    let work = tempfile::tempdir().unwrap();
    let log = work.path().join("orders");
    let remote_dir = work.path().join("remote");
    let remote = format!("fs://{}", remote_dir.display());
    produce(&log, 3000, 42);
    tier(&log, &remote, &[]);
    let copied = active_base(&log) - 1;
    let dir = partition_dir(&remote_dir);
    let mut manifests: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.ends_with(".manifest"))
        .collect();
    manifests.sort();
    let n = manifests.len();
    assert!(n > 10, "{manifests:?}");
    std::fs::copy(dir.join(&manifests[n - 2]), dir.join(&manifests[n - 1])).unwrap();
    let from: u64 = manifests[n - 1][..20].parse().unwrap();
    let out = krabka(&["read", "--remote", &remote, "--topic", "orders"]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let seqs: Vec<u64> = text(&out.stdout).lines().map(seq_of).collect();
    assert_eq!(seqs, (1..from).collect::<Vec<u64>>());
    let stderr = text(&out.stderr);
    let error = stderr
        .lines()
        .find(|l| l.starts_with("error:"))
        .unwrap_or_default();
    assert!(
        error.contains(&format!("seqs {from}..={copied} are lost"))
            && error.contains(&manifests[n - 1])
            && error.contains("manifest does not match its key"),
        "{stderr}"
    );
}
