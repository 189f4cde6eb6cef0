//! The `krabka` command against S3, as a user runs it: an S3 server in this process (with SigV4
//! checked), the real binary in a child process, settings from the standard AWS environment.
#![cfg(feature = "s3")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use krabka_remote_s3::test_server::TestServer;

/// Longest any one command may run before the test kills it and fails.
const DEADLINE: Duration = Duration::from_secs(180);

/// Every variable the AWS SDK or `S3Config::from_env_for` reads that could steer a run away from
/// the test server; removed from the child's environment before the test's own are set.
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

/// What a finished `krabka` run left behind.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    fn success(&self) -> bool {
        self.code == Some(0)
    }

    /// Both streams, for failure messages.
    fn both(&self) -> String {
        format!(
            "exit {:?}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// The AWS environment pointing at `server` (credentials, region, endpoint).
fn aws_env(server: &TestServer) -> Vec<(&'static str, String)> {
    vec![
        ("AWS_ACCESS_KEY_ID", server.access_key().to_owned()),
        ("AWS_SECRET_ACCESS_KEY", server.secret_key().to_owned()),
        ("AWS_REGION", "us-east-1".to_owned()),
        ("AWS_ENDPOINT_URL", server.endpoint()),
        ("AWS_EC2_METADATA_DISABLED", "true".to_owned()),
    ]
}

/// Runs `krabka args` with only `env` as its AWS environment (and stdin closed), killing it
/// and failing the test if it runs past [`DEADLINE`].
fn krabka(args: &[&str], env: &[(&str, String)]) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_krabka"));
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for var in AWS_VARS {
        cmd.env_remove(var);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("start krabka");
    // Drain both pipes in threads, so a chatty child never blocks on a full pipe.
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = r.read_to_end(&mut buf);
            String::from_utf8_lossy(&buf).into_owned()
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for krabka") {
            break status;
        }
        if started.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            let (stdout, stderr) = (out.join().unwrap(), err.join().unwrap());
            panic!(
                "krabka {args:?} still running after {DEADLINE:?}; killed\n--- stdout\n{stdout}--- stderr\n{stderr}"
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Run {
        code: status.code(),
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}

/// Files stored under `prefix/` of the server's bucket (s3s-fs keeps one file per object).
fn objects_under(server: &TestServer, prefix: &str) -> Vec<PathBuf> {
    fn walk(dir: &Path, found: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, found);
            } else {
                found.push(path);
            }
        }
    }
    let mut found = Vec::new();
    walk(
        &server.root().join(server.bucket()).join(prefix),
        &mut found,
    );
    found
}

/// The seqs of `read` output lines.
fn seqs(stdout: &str) -> Vec<u64> {
    stdout
        .lines()
        .map(|l| l.split('\t').next().unwrap().parse().unwrap())
        .collect()
}

/// The count after `label` in the demo summary, e.g. `remote_segments("… 5 remote (…")`.
fn remote_segment_count(summary: &str) -> u64 {
    let line = summary
        .lines()
        .find(|l| l.trim_start().starts_with("segments "))
        .unwrap_or_else(|| panic!("no segments line in {summary}"));
    let before = line
        .split(" remote (")
        .next()
        .unwrap_or_else(|| panic!("no remote count in {line}"));
    before
        .rsplit(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap_or_else(|_| panic!("no remote count in {line}"))
}

#[test]
fn demo_tiers_to_s3_and_verifies_every_record() {
    let server = TestServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let run_dir = dir.path().join("run");
    let remote = format!("s3://{}/demo", server.bucket());
    // --endpoint wins over AWS_ENDPOINT_URL, which points at a port nothing listens on.
    let mut env = aws_env(&server);
    for (k, v) in &mut env {
        if *k == "AWS_ENDPOINT_URL" {
            *v = "http://127.0.0.1:1".to_owned();
        }
    }
    let out = krabka(
        &[
            "demo",
            "--records",
            "20000",
            "--remote",
            &remote,
            "--endpoint",
            &server.endpoint(),
            "--dir",
            run_dir.to_str().unwrap(),
        ],
        &env,
    );
    assert!(out.success(), "{}", out.both());
    assert!(
        out.stdout
            .contains("verified        all 20,000 records match"),
        "{}",
        out.both()
    );
    assert!(out.stdout.contains(&remote), "{}", out.both());
    assert!(out.stdout.contains("remote only"), "{}", out.both());
    let remote_segments = remote_segment_count(&out.stdout);
    assert!(remote_segments > 0, "{}", out.both());

    // The segments and their indexes are objects under the prefix, and nowhere else.
    let objects = objects_under(&server, "demo");
    let logs = objects
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .count() as u64;
    assert_eq!(logs, remote_segments, "{objects:?}");
    assert!(objects.len() as u64 > logs, "indexes too: {objects:?}");

    // A new process reads every record back from seq 1, through the remote tier.
    let log = run_dir.join("log");
    let read = krabka(
        &[
            "read",
            log.to_str().unwrap(),
            "--from",
            "1",
            "--remote",
            &remote,
            "--endpoint",
            &server.endpoint(),
        ],
        &env,
    );
    assert!(read.success(), "{}", read.both());
    assert_eq!(seqs(&read.stdout), (1..=20_000).collect::<Vec<_>>());
}

#[test]
fn produce_tier_and_read_back_remote_only_records_from_s3() {
    let server = TestServer::start().unwrap();
    let env = aws_env(&server);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let log_s = log.to_str().unwrap();
    let remote = format!("s3://{}/tiered/logs", server.bucket());
    let produce = |dir: &str| {
        let out = krabka(
            &[
                "produce",
                dir,
                "--generate",
                "3000",
                "--segment-bytes",
                "64KiB",
            ],
            &env,
        );
        assert!(out.success(), "{}", out.both());
    };
    produce(log_s);

    // The endpoint comes from AWS_ENDPOINT_URL alone.
    let tier = krabka(
        &[
            "tier",
            log_s,
            "--remote",
            &remote,
            "--local-retention-bytes",
            "128KiB",
        ],
        &env,
    );
    assert!(tier.success(), "{}", tier.both());
    assert!(tier.stdout.contains("remote only"), "{}", tier.both());
    assert!(
        !objects_under(&server, "tiered/logs").is_empty(),
        "nothing stored under the prefix"
    );

    // The local files no longer hold seq 1 ...
    let local = krabka(&["read", log_s, "--from", "1", "--max", "1"], &env);
    assert_eq!(local.code, Some(1), "{}", local.both());

    // ... yet a read through S3 returns every record, identical to an untiered copy of the log
    // (the generator is deterministic).
    let all = krabka(&["read", log_s, "--from", "1", "--remote", &remote], &env);
    assert!(all.success(), "{}", all.both());
    assert_eq!(seqs(&all.stdout), (1..=3000).collect::<Vec<_>>());
    let copy = dir.path().join("copy");
    produce(copy.to_str().unwrap());
    let expected = krabka(&["read", copy.to_str().unwrap(), "--from", "1"], &env);
    assert!(expected.success(), "{}", expected.both());
    assert!(all.stdout == expected.stdout, "records differ");

    // A second tier round finds nothing left to do.
    let again = krabka(&["tier", log_s, "--remote", &remote], &env);
    assert!(again.success(), "{}", again.both());
    assert!(
        again.stdout.contains("copied 0 segment(s)"),
        "{}",
        again.both()
    );
}

/// Asserts `out` is a failure reported as one `error:` line containing every one of `needles`,
/// without a panic.
fn assert_one_error_line(out: &Run, needles: &[&str]) {
    assert_eq!(out.code, Some(1), "{}", out.both());
    assert!(!out.stderr.contains("panicked"), "{}", out.both());
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one error line: {}", out.both());
    assert!(lines[0].starts_with("error: "), "{}", out.both());
    assert!(lines[0].len() < 400, "short: {}", lines[0]);
    assert!(
        !lines[0].contains("ServiceError"),
        "no SDK dump: {}",
        lines[0]
    );
    for needle in needles {
        assert!(
            lines[0].contains(needle),
            "`{needle}` missing in: {}",
            lines[0]
        );
    }
}

#[test]
fn a_wrong_secret_key_is_one_clear_access_denied_line() {
    let server = TestServer::start().unwrap();
    let mut env = aws_env(&server);
    for (k, v) in &mut env {
        if *k == "AWS_SECRET_ACCESS_KEY" {
            *v = "not-the-secret".to_owned();
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let remote = format!("s3://{}/denied", server.bucket());
    let endpoint = server.endpoint();

    let demo = krabka(
        &[
            "demo",
            "--records",
            "100",
            "--remote",
            &remote,
            "--dir",
            dir.path().join("run").to_str().unwrap(),
        ],
        &env,
    );
    assert_one_error_line(&demo, &[server.bucket(), &endpoint, "access denied"]);
    // Nothing was written to the directory: with the right key the same command succeeds.
    let run = dir.path().join("run");
    let left: Vec<_> = std::fs::read_dir(&run)
        .map(|d| d.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "left behind: {left:?}");
    assert!(objects_under(&server, "denied").is_empty());
    let retry = krabka(
        &[
            "demo",
            "--records",
            "100",
            "--remote",
            &remote,
            "--dir",
            run.to_str().unwrap(),
        ],
        &aws_env(&server),
    );
    assert!(retry.success(), "{}", retry.both());
    assert!(
        retry
            .stdout
            .contains("verified        all 100 records match"),
        "{}",
        retry.both()
    );

    let log = dir.path().join("log");
    let produce = krabka(
        &["produce", log.to_str().unwrap(), "--generate", "100"],
        &env,
    );
    assert!(produce.success(), "{}", produce.both());
    for args in [
        &["tier", log.to_str().unwrap(), "--remote", &remote][..],
        &["read", log.to_str().unwrap(), "--remote", &remote],
    ] {
        let out = krabka(args, &env);
        assert_one_error_line(&out, &[server.bucket(), &endpoint, "access denied"]);
    }
}

#[test]
fn a_missing_bucket_is_one_clear_line() {
    let server = TestServer::start().unwrap();
    let env = aws_env(&server);
    let dir = tempfile::tempdir().unwrap();
    let remote = "s3://no-such-bucket/demo";
    let demo = krabka(
        &[
            "demo",
            "--records",
            "100",
            "--remote",
            remote,
            "--dir",
            dir.path().join("run").to_str().unwrap(),
        ],
        &env,
    );
    assert_one_error_line(
        &demo,
        &["no-such-bucket", &server.endpoint(), "does not exist"],
    );

    let log = dir.path().join("log");
    let produce = krabka(
        &["produce", log.to_str().unwrap(), "--generate", "100"],
        &env,
    );
    assert!(produce.success(), "{}", produce.both());
    let tier = krabka(&["tier", log.to_str().unwrap(), "--remote", remote], &env);
    assert_one_error_line(
        &tier,
        &["no-such-bucket", &server.endpoint(), "does not exist"],
    );
}

#[test]
fn an_endpoint_that_does_not_answer_is_one_clear_line() {
    // A port nothing listens on.
    let endpoint = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let env = vec![
        ("AWS_ACCESS_KEY_ID", "key".to_owned()),
        ("AWS_SECRET_ACCESS_KEY", "secret".to_owned()),
        ("AWS_REGION", "us-east-1".to_owned()),
        ("AWS_ENDPOINT_URL", endpoint.clone()),
        ("AWS_EC2_METADATA_DISABLED", "true".to_owned()),
    ];
    let produce = krabka(
        &["produce", log.to_str().unwrap(), "--generate", "100"],
        &env,
    );
    assert!(produce.success(), "{}", produce.both());
    let tier = krabka(
        &["tier", log.to_str().unwrap(), "--remote", "s3://bucket/p"],
        &env,
    );
    assert_one_error_line(&tier, &["cannot reach", &endpoint, "s3://bucket/p"]);
}

#[test]
fn demo_with_compression_and_encryption_on_s3_reads_back_only_with_the_key() {
    let server = TestServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let run_dir = dir.path().join("run");
    let key = dir.path().join("master.key");
    std::fs::write(&key, [42u8; 32]).unwrap();
    let key_s = key.to_str().unwrap();
    let remote = format!("s3://{}/enc", server.bucket());
    let env = aws_env(&server);
    let out = krabka(
        &[
            "demo",
            "--records",
            "5000",
            "--segment-bytes",
            "64KiB",
            "--remote",
            &remote,
            "--compression",
            "zstd:3",
            "--encryption-key-file",
            key_s,
            "--dir",
            run_dir.to_str().unwrap(),
        ],
        &env,
    );
    assert!(out.success(), "{}", out.both());
    assert!(
        out.stdout
            .contains("verified        all 5,000 records match"),
        "{}",
        out.both()
    );
    let log = run_dir.join("log");
    let read = |extra: &[&str]| {
        let mut args = vec![
            "read",
            log.to_str().unwrap(),
            "--from",
            "1",
            "--remote",
            &remote,
        ];
        args.extend_from_slice(extra);
        krabka(&args, &env)
    };
    let with_key = read(&["--encryption-key-file", key_s]);
    assert!(with_key.success(), "{}", with_key.both());
    assert_eq!(seqs(&with_key.stdout), (1..=5_000).collect::<Vec<_>>());
    // Without the key: a clear error, and not one record of the encrypted range.
    let without = read(&[]);
    assert_eq!(without.code, Some(1), "{}", without.both());
    assert!(without.stdout.is_empty(), "{}", without.both());
    assert!(without.stderr.contains("segment"), "{}", without.both());
}
