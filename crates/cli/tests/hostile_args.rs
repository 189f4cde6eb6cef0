//! The command under a hostile operator: extreme and malformed arguments, bad input lines,
//! bytes that could fake the output's structure, and termination signals. Every case runs the
//! built `krabka` binary on real files and checks its exit code and what it says.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use krabka_protocol::Message;
use krabka_storage::{Log, Options};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_krabka"))
}

fn krabka(args: &[&str]) -> Output {
    bin()
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run krabka")
}

/// Runs `krabka args` with `input` on stdin.
fn krabka_with_input(args: &[&str], input: &[u8]) -> Output {
    let mut child = bin()
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run krabka");
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    // Written on its own thread: a command that stops reading early must not block the test.
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    out
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn both(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        text(&out.stdout),
        text(&out.stderr)
    )
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The one `error:` line of a failed command.
fn error_line(out: &Output) -> String {
    let stderr = text(&out.stderr);
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "{}", both(out));
    errors[0].to_owned()
}

/// Every record of the log at `dir`, read through the library.
fn records(dir: &Path) -> Vec<(u64, Message)> {
    let log = Log::open(dir, Options::default()).unwrap();
    let mut all = Vec::new();
    let mut next = log.first_seq();
    for _ in 0..100_000 {
        let batch = log.read(next, 1000).unwrap();
        let Some(last) = batch.last() else { break };
        next = last.seq + 1;
        all.extend(batch.into_iter().map(|r| (r.seq, r.message)));
    }
    log.close().unwrap();
    all
}

fn produce_generated(dir: &Path, n: u64) {
    let out = krabka(&["produce", s(dir), "--generate", &n.to_string()]);
    assert!(out.status.success(), "{}", both(&out));
}

const U64_MAX: &str = "18446744073709551615";
const PAST_U64: &str = "18446744073709551616";

/// Every duration, size and count argument of every subcommand at its extremes: a value out of
/// range or malformed is a usage error (exit 2) naming the argument or the range; a value in
/// range runs (exit 0, or 1 for a refusal after parsing). Never a panic (exit 101).
///
/// Each case is a command line split at spaces, with `{log}` (a tiered log of 50 records),
/// `{remote}`, `{segment}` (its first segment file), `{busy}` (a directory that is not empty),
/// `{new}` (a new directory for this case), `{max}` (2^64 - 1) and `{past}` (2^64).
const EXTREMES: &[(&str, i32, &str)] = &[
    // demo
    ("demo --records 0", 2, "--records"),
    ("demo --records 1000000000001", 2, "--records"),
    ("demo --records {max}", 2, "--records"),
    ("demo --records {past}", 2, "--records"),
    ("demo --records=-1", 2, "--records"),
    ("demo --records 1e3", 2, "--records"),
    // The largest count parses; a --dir that is not empty then stops it at once.
    ("demo --records 1000000000000 --dir {busy}", 1, "empty"),
    ("demo --segment-bytes 0", 2, "at least 1024"),
    ("demo --segment-bytes 1023", 2, "at least 1024"),
    ("demo --segment-bytes 4GiB", 2, "at most"),
    ("demo --segment-bytes 16EiB", 2, "too large"),
    ("demo --segment-bytes {max}", 2, "at most"),
    ("demo --segment-bytes {past}", 2, "too large"),
    ("demo --segment-bytes=-1", 2, "not a size"),
    ("demo --segment-bytes 1.5MiB", 2, "not a size unit"),
    ("demo --segment-bytes lots", 2, "not a size"),
    ("demo --seed=-1", 2, "--seed"),
    ("demo --seed {past}", 2, "--seed"),
    ("demo --cache-bytes 16EiB", 2, "too large"),
    ("demo --local-retention-bytes {past}", 2, "too large"),
    ("demo --compression zstd:0", 2, "--compression"),
    ("demo --compression zstd:23", 2, "--compression"),
    ("demo --compression zstd:99999999999999999999", 2, "1..=22"),
    ("demo --compression=", 2, "--compression"),
    (
        "demo --records 1 --seed {max} --dir {new} --cache-bytes {max} --local-retention-bytes {max}",
        0,
        "",
    ),
    (
        "demo --records 1 --dir {new} --cache-bytes 0 --local-retention-bytes 0 --segment-bytes 4294967295",
        0,
        "",
    ),
    // produce
    ("produce {new} --generate {max}", 2, "--generate"),
    ("produce {new} --generate 1000000000001", 2, "--generate"),
    ("produce {new} --generate=-1", 2, "--generate"),
    ("produce {new} --generate 0", 0, ""),
    ("produce {new} --segment-bytes 16EiB", 2, "too large"),
    ("produce {new} --key-separator=", 2, "must not be empty"),
    ("produce {new} --key-separator a\nb", 2, "newline"),
    (
        "produce {new} --generate 1 --key-separator :",
        2,
        "cannot be used",
    ),
    (
        "produce {new} --generate 1 --all-or-nothing",
        2,
        "cannot be used",
    ),
    // read
    ("read {log} --from 0", 2, "seqs start at 1"),
    ("read {log} --from=-1", 2, "--from"),
    ("read {log} --from {past}", 2, "--from"),
    ("read {log} --from {max}", 1, "out of range"),
    ("read {log} --from {max} --max {max}", 1, "out of range"),
    ("read {log} --max 0", 2, "--max"),
    ("read {log} --max=-1", 2, "--max"),
    ("read {log} --max {max}", 0, "read 50 records (seq 1..=50)"),
    ("read {log} --timeout {max}s", 2, "at most 365 days"),
    ("read {log} --timeout 366days", 2, "at most 365 days"),
    ("read {log} --timeout 365days", 0, "read 50 records"),
    ("read {log} --timeout=-1s", 2, "--timeout"),
    ("read {log} --timeout soon", 2, "--timeout"),
    ("read {log} --value-chars {max}", 0, "read 50 records"),
    ("read {log} --value-chars 0", 0, "read 50 records"),
    ("read {log} --value-chars {past}", 2, "--value-chars"),
    ("read {log} --value-chars=-1", 2, "--value-chars"),
    (
        "read {log} --remote {remote} --compression zstd:23",
        2,
        "1..=22",
    ),
    // read of the remote tier alone (a replica of the log's partition, topic `log`)
    (
        "read --remote {remote} --topic log --refresh-interval 0s",
        2,
        "from 1ms to 1 day",
    ),
    (
        "read --remote {remote} --topic log --refresh-interval 999us",
        2,
        "from 1ms to 1 day",
    ),
    (
        "read --remote {remote} --topic log --refresh-interval 25h",
        2,
        "from 1ms to 1 day",
    ),
    (
        "read --remote {remote} --topic log --refresh-interval {max}s",
        2,
        "--refresh-interval",
    ),
    (
        "read --remote {remote} --topic log --refresh-interval=-1s",
        2,
        "--refresh-interval",
    ),
    (
        "read --remote {remote} --topic log --refresh-interval 1ms",
        0,
        "no records from seq 1",
    ),
    (
        "read --remote {remote} --topic log --refresh-interval 24h --follow --timeout 1s",
        0,
        "--timeout ended the follow, the next seq is 1",
    ),
    (
        "read --remote {remote} --topic log --partition=-1",
        2,
        "--partition",
    ),
    (
        "read --remote {remote} --topic log --partition 2147483648",
        2,
        "--partition",
    ),
    (
        "read --remote {remote} --topic log --partition 2147483647",
        1,
        "no partition 2147483647 of topic `log`",
    ),
    (
        "read --remote {remote} --topic log --from {max}",
        1,
        "out of range",
    ),
    ("read {log} --replica --remote {remote}", 2, "--replica"),
    // dump
    ("dump {segment} --values {max}", 0, ""),
    ("dump {segment} --values {past}", 2, "--values"),
    ("dump {segment} --values=-1", 2, "--values"),
    // tier
    (
        "tier {log} --remote {remote} --interval 0s",
        2,
        "10ms to 1 day",
    ),
    (
        "tier {log} --remote {remote} --interval 9ms",
        2,
        "10ms to 1 day",
    ),
    (
        "tier {log} --remote {remote} --interval 25h",
        2,
        "10ms to 1 day",
    ),
    (
        "tier {log} --remote {remote} --interval {max}s",
        2,
        "--interval",
    ),
    (
        "tier {log} --remote {remote} --interval=-5s",
        2,
        "--interval",
    ),
    ("tier {log} --remote {remote} --interval 24h", 0, ""),
    (
        "tier {log} --remote {remote} --local-retention-bytes 16EiB",
        2,
        "too large",
    ),
    (
        "tier {log} --remote {remote} --local-retention-bytes {max} --cache-bytes {max}",
        0,
        "",
    ),
    ("tier {log} --remote {remote} --cache-bytes 0", 0, ""),
    // recover
    (
        "recover {new} --remote {remote} --concurrency 0",
        2,
        "1..=256",
    ),
    (
        "recover {new} --remote {remote} --concurrency 257",
        2,
        "1..=256",
    ),
    (
        "recover {new} --remote {remote} --concurrency {max}",
        2,
        "--concurrency",
    ),
    (
        "recover {new} --remote {remote} --concurrency=-1",
        2,
        "--concurrency",
    ),
    // The largest concurrency runs (into a directory named like the log: the topic's name).
    (
        "recover {new}/log --remote {remote} --concurrency 256",
        0,
        "recovered",
    ),
    // bench
    ("bench --records 0", 2, "--records"),
    ("bench --records 1000000000001", 2, "--records"),
    ("bench --records {max}", 2, "--records"),
    ("bench --records 1000000000000 --dir {busy}", 1, "empty"),
    ("bench --value-size 16EiB", 2, "too large"),
    ("bench --value-size {max}", 2, "at most"),
    ("bench --value-size 16MiB", 2, "at most"),
    ("bench --value-size=-1", 2, "not a size"),
    ("bench --batch 0", 2, "--batch"),
    ("bench --batch 100001", 2, "--batch"),
    ("bench --batch {max}", 2, "--batch"),
    ("bench --records 2 --value-size 16777134 --dir {new}", 0, ""),
    (
        "bench --records 2 --value-size 16777135 --dir {new}",
        2,
        "at most 16777134 bytes",
    ),
    (
        "bench --records 1 --batch 100000 --value-size 0 --dir {new}",
        0,
        "",
    ),
    ("bench --records 1 --batch 1 --dir {new}", 0, ""),
];

#[test]
fn every_numeric_argument_at_its_extremes_is_a_usage_error_or_runs() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    produce_generated(&log, 50);
    let remote = format!("fs://{}", dir.path().join("remote").display());
    let out = krabka(&["tier", s(&log), "--remote", &remote]);
    assert!(out.status.success(), "{}", both(&out));
    let busy = dir.path().join("busy");
    std::fs::create_dir_all(busy.join("x")).unwrap();
    let started = Instant::now();
    for (i, (line, code, says)) in EXTREMES.iter().enumerate() {
        let new = dir.path().join(format!("new-{i}"));
        let args: Vec<String> = line
            .split(' ')
            .map(|a| {
                a.replace("{log}", s(&log))
                    .replace("{remote}", &remote)
                    .replace("{segment}", s(&log.join("00000000000000000001.log")))
                    .replace("{busy}", s(&busy))
                    .replace("{new}", s(&new))
                    .replace("{max}", U64_MAX)
                    .replace("{past}", PAST_U64)
            })
            .collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = krabka(&args);
        let stderr = text(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {}", both(&out));
        assert_eq!(out.status.code(), Some(*code), "{args:?}: {}", both(&out));
        let said = format!("{stderr}{}", text(&out.stdout));
        assert!(
            said.contains(says),
            "{args:?}: `{says}` not said: {}",
            both(&out)
        );
        if *code == 2 {
            assert!(stderr.starts_with("error:"), "{args:?}: {stderr}");
        }
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "the table ran too long"
        );
    }
}

/// 3,000 lines, line 2,501 bad (in the middle of the third batch of 1,000).
fn input_with_bad_line_2501() -> Vec<u8> {
    let mut input = Vec::new();
    for i in 1..=3000 {
        if i == 2501 {
            input.extend_from_slice(b"bad \xff line\n");
        } else {
            input.extend_from_slice(format!("line {i}\n").as_bytes());
        }
    }
    input
}

#[test]
fn produce_appends_every_line_before_a_bad_one_and_names_both_ranges() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let out = krabka_with_input(&["produce", s(&log)], &input_with_bad_line_2501());
    assert_eq!(out.status.code(), Some(1), "{}", both(&out));
    let error = error_line(&out);
    for says in [
        "appended 2,500 records (seq 1..=2500) from lines 1..=2500",
        "line 2501 is invalid: invalid UTF-8 (byte 5 of the line)",
        "nothing from line 2501 on was appended",
        "tail -n +2501",
    ] {
        assert!(error.contains(says), "`{says}` not in: {error}");
    }
    let got = records(&log);
    assert_eq!(got.len(), 2500);
    for (i, (seq, m)) in got.iter().enumerate() {
        assert_eq!(*seq, i as u64 + 1);
        assert_eq!(m.value, format!("line {}", i + 1).as_bytes());
    }
}

#[test]
fn produce_all_or_nothing_appends_nothing_for_a_bad_line_and_everything_otherwise() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let out = krabka_with_input(
        &["produce", s(&log), "--all-or-nothing"],
        &input_with_bad_line_2501(),
    );
    assert_eq!(out.status.code(), Some(1), "{}", both(&out));
    let error = error_line(&out);
    assert!(
        error.contains("line 2501 is invalid: invalid UTF-8")
            && error.contains("nothing was appended")
            && error.contains("--all-or-nothing"),
        "{error}"
    );
    assert!(records(&log).is_empty());
    // A valid input is appended whole.
    let input: Vec<u8> = (1..=2500)
        .flat_map(|i| format!("k{i}:v{i}\n").into_bytes())
        .collect();
    let out = krabka_with_input(
        &[
            "produce",
            s(&log),
            "--all-or-nothing",
            "--key-separator",
            ":",
        ],
        &input,
    );
    assert!(out.status.success(), "{}", both(&out));
    assert!(
        text(&out.stdout).contains("appended 2,500 records (seq 1..=2500)"),
        "{}",
        both(&out)
    );
    let got = records(&log);
    assert_eq!(got.len(), 2500);
    assert_eq!(got[2499].1.key.as_deref(), Some(&b"k2500"[..]));
    assert_eq!(got[2499].1.value, &b"v2500"[..]);
}

#[test]
fn a_carriage_return_before_the_newline_stays_in_the_value() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let out = krabka_with_input(&["produce", s(&log)], b"dos\r\nunix\n\r\nlast\r");
    assert!(out.status.success(), "{}", both(&out));
    let values: Vec<Vec<u8>> = records(&log)
        .into_iter()
        .map(|(_, m)| m.value.to_vec())
        .collect();
    assert_eq!(
        values,
        [&b"dos\r"[..], b"unix", b"\r", b"last\r"].map(<[u8]>::to_vec)
    );
    let out = krabka(&["read", s(&log)]);
    assert!(out.status.success(), "{}", both(&out));
    let shown: Vec<String> = text(&out.stdout)
        .lines()
        .map(|l| l.rsplit('\t').next().unwrap().to_owned())
        .collect();
    assert_eq!(shown, ["dos\\r", "unix", "\\r", "last\\r"]);
}

/// Keys and values whose bytes could fake the line structure of `read`'s output.
fn hostile_messages() -> Vec<Message> {
    vec![
        Message::new("no key"),
        Message::new("the key is a dash").with_key("-"),
        Message::new("the key is empty").with_key(""),
        Message::new("a\tfake\tcolumns").with_key("k\tey"),
        Message::new("two\nlines\r\n").with_key("nl\n"),
        Message::new(&b"literal \\t and \\ and \\x41"[..]).with_key("\\-"),
        Message::new(&b"\x00\x1b[2J\x7f\xc2\x85"[..]).with_key(&b"\xff\xfe"[..]),
        Message::new(&b"not utf-8: \xc3\x28 \xff"[..]).with_key("é…"),
        Message::new("").with_key("--"),
    ]
}

#[test]
fn read_prints_every_key_and_value_unambiguously_and_produce_escaped_reads_it_back() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    {
        let l = Log::open(&log, Options::default()).unwrap();
        l.append_batch(&hostile_messages()).unwrap();
        l.close().unwrap();
    }
    let out = krabka(&["read", s(&log), "--value-chars", "100000"]);
    assert!(out.status.success(), "{}", both(&out));
    let stdout = text(&out.stdout);
    let fields: Vec<(String, String)> = stdout
        .lines()
        .map(|l| {
            let cols: Vec<&str> = l.split('\t').collect();
            assert_eq!(cols.len(), 4, "one line, four columns: {l:?}");
            (cols[2].to_owned(), cols[3].to_owned())
        })
        .collect();
    let expected = [
        ("-", "no key"),
        ("\\-", "the key is a dash"),
        ("", "the key is empty"),
        ("k\\tey", "a\\tfake\\tcolumns"),
        ("nl\\n", "two\\nlines\\r\\n"),
        ("\\\\-", "literal \\\\t and \\\\ and \\\\x41"),
        ("\\xff\\xfe", "\\x00\\x1b[2J\\x7f\\xc2\\x85"),
        ("é…", "not utf-8: \\xc3( \\xff"),
        ("--", ""),
    ];
    let expected: Vec<(String, String)> = expected
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    assert_eq!(fields, expected);
    // read | cut -f3- | produce --escaped: the same keys and values.
    let keys_and_values: String = stdout
        .lines()
        .map(|l| format!("{}\n", l.splitn(3, '\t').nth(2).unwrap()))
        .collect();
    let copy = dir.path().join("copy");
    let out = krabka_with_input(
        &["produce", s(&copy), "--escaped", "--key-separator", "\t"],
        keys_and_values.as_bytes(),
    );
    assert!(out.status.success(), "{}", both(&out));
    let original: Vec<_> = records(&log)
        .into_iter()
        .map(|(_, m)| (m.key, m.value))
        .collect();
    let copied: Vec<_> = records(&copy)
        .into_iter()
        .map(|(_, m)| (m.key, m.value))
        .collect();
    assert_eq!(copied, original);
}

#[test]
fn a_cut_value_is_marked_and_produce_escaped_refuses_it_and_bad_escapes() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let out = krabka_with_input(&["produce", s(&log)], b"0123456789\n");
    assert!(out.status.success(), "{}", both(&out));
    let out = krabka(&["read", s(&log), "--value-chars", "4"]);
    let line = text(&out.stdout);
    assert!(line.ends_with("\t-\t0123\\…\n"), "{line:?}");
    let copy = dir.path().join("copy");
    for (input, says) in [
        (
            &b"ok\n0123\\\xe2\x80\xa6\n"[..],
            "line 2 is invalid: in the value: `\\…` at byte 5 marks a field",
        ),
        (
            b"ok\nbad \\q escape\n",
            "line 2 is invalid: in the value: `\\q` at byte 5 is not an escape",
        ),
        (
            b"ok\ntrailing \\\n",
            "line 2 is invalid: in the value: a lone `\\`",
        ),
        (
            b"ok\n\\x4g\n",
            "line 2 is invalid: in the value: `\\x4g` at byte 1",
        ),
    ] {
        let out = krabka_with_input(
            &["produce", s(&copy), "--escaped", "--all-or-nothing"],
            input,
        );
        assert_eq!(out.status.code(), Some(1), "{}", both(&out));
        let error = error_line(&out);
        assert!(error.contains(says), "`{says}` not in {error}");
    }
    assert!(!copy.exists() || records(&copy).is_empty());
    let out = krabka_with_input(
        &["produce", s(&copy), "--escaped", "--key-separator", "\\"],
        b"x\n",
    );
    assert_eq!(out.status.code(), Some(1), "{}", both(&out));
    assert!(
        error_line(&out).contains("holds a backslash"),
        "{}",
        both(&out)
    );
}

#[test]
fn read_says_where_max_stopped_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    produce_generated(&log, 20);
    let out = krabka(&["read", s(&log), "--from", "3", "--max", "5"]);
    assert!(out.status.success(), "{}", both(&out));
    assert_eq!(text(&out.stdout).lines().count(), 5);
    assert!(
        text(&out.stderr).contains(
            "read 5 records (seq 3..=7), the --max of 5; the log may hold more from seq 8"
        ),
        "{}",
        both(&out)
    );
}

/// Waits for `child` up to `limit`; kills it and returns `None` when it runs longer.
fn wait_at_most(child: &mut Child, limit: Duration) -> Option<i32> {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

/// Starts `krabka args`, waits for its first line on stdout (it is running, its handler
/// installed), sends `signal`, and returns its exit code and stderr.
fn signal_after_first_line(args: &[&str], signal: &str) -> (Option<i32>, String) {
    let mut child = bin()
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    assert!(!first.is_empty(), "{args:?} printed nothing");
    // The rest of stdout is drained so that the command never blocks on a full pipe.
    let drain = std::thread::spawn(move || {
        let mut rest = Vec::new();
        let _ = stdout.read_to_end(&mut rest);
    });
    let kill = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let code = wait_at_most(&mut child, Duration::from_secs(30));
    drain.join().unwrap();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    (code, stderr)
}

#[test]
fn each_signal_that_stops_read_follow_is_named_with_its_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    produce_generated(&log, 10);
    for (signal, code, says) in [
        ("-TERM", 143, "stopped by SIGTERM"),
        ("-INT", 130, "interrupted (Ctrl-C)"),
        ("-HUP", 129, "stopped by SIGHUP"),
    ] {
        let (exit, stderr) =
            signal_after_first_line(&["read", s(&log), "--follow", "--timeout", "60s"], signal);
        assert_eq!(exit, Some(code), "{signal}: {stderr}");
        assert!(stderr.contains("read 10 records (seq 1..=10)"), "{stderr}");
        let error = stderr
            .lines()
            .find(|l| l.starts_with("error:"))
            .unwrap_or_default();
        assert!(error.contains(says), "{signal}: {stderr}");
        assert!(error.contains("before seq 11"), "{signal}: {stderr}");
        if signal != "-INT" {
            assert!(!stderr.contains("Ctrl-C"), "{signal}: {stderr}");
        }
    }
}

#[test]
fn sigterm_stops_tier_watch_after_a_whole_round_and_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    produce_generated(&log, 100);
    let remote = format!("fs://{}", dir.path().join("remote").display());
    let (exit, stderr) = signal_after_first_line(
        &[
            "tier",
            s(&log),
            "--remote",
            &remote,
            "--watch",
            "--interval",
            "50ms",
        ],
        "-TERM",
    );
    assert_eq!(exit, Some(0), "{stderr}");
    assert!(stderr.contains("stopped by SIGTERM"), "{stderr}");
    assert!(!stderr.contains("Ctrl-C"), "{stderr}");
}

/// A stream without newlines (here 2 GB of zeros after one good line) ends `produce` as soon
/// as the line is longer than any record could come from, in bounded memory (a 1 GiB address
/// space limit), with the good line appended and named.
#[test]
fn a_line_without_end_is_refused_in_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let script = format!(
        "ulimit -v 1048576; {{ printf 'good\\n'; head -c 2000000000 /dev/zero; }} | exec {} produce {}",
        env!("CARGO_BIN_EXE_krabka"),
        log.display()
    );
    let out = Command::new("sh").args(["-c", &script]).output().unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{}", both(&out));
    assert!(err.contains("a line is longer than"), "{}", both(&out));
    assert!(err.contains("seq 1..=1"), "{}", both(&out));
    assert_eq!(records(&log).len(), 1);
}

/// The largest line `produce` takes is the largest the log takes: its record, as a batch of its
/// own (61-byte header, the record's fields), fits the 16 MiB message limit. One byte more is
/// an invalid line, named as such before anything is appended, never a failed append.
#[test]
fn the_largest_line_is_the_largest_record_batch_the_log_accepts() {
    // No key, no headers: the record's fields around a 16 MiB value take 13 bytes (its length
    // and the value's length are 4-byte varints), the batch header 61.
    let largest = (16 << 20) - 61 - 13;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let mut line = vec![b'v'; largest];
    line.push(b'\n');
    let out = krabka_with_input(&["produce", s(&log)], &line);
    assert!(out.status.success(), "{}", both(&out));
    let got = records(&log);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].1.value.len(), largest);

    let mut input = b"first\n".to_vec();
    input.extend(std::iter::repeat_n(b'v', largest + 1));
    input.push(b'\n');
    let out = krabka_with_input(&["produce", s(&log)], &input);
    assert_eq!(out.status.code(), Some(1), "{}", both(&out));
    let line = error_line(&out);
    assert!(
        line.contains("line 2 is invalid")
            && line.contains("as a batch of its own")
            && line.contains("seq 2..=2"),
        "{line}"
    );
    assert_eq!(records(&log).len(), 2);
}
