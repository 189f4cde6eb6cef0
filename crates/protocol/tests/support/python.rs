//! Running `scripts/kafka-python-interop.py` from a test, and the text forms of its files: shared
//! by the interop tests of the protocol and storage crates.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use krabka_protocol::batch::RecordRef;

pub fn python() -> String {
    std::env::var("KRABKA_PYTHON").unwrap_or_else(|_| "python3".to_owned())
}

pub fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/kafka-python-interop.py")
}

pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// Runs `python args...` for at most two minutes; returns (success, stdout, stderr).
pub fn run(args: &[&str]) -> (bool, String, String) {
    let mut child = Command::new(python())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", python()));
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{} {args:?} ran over two minutes", python());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

pub fn has_kafka_python() -> bool {
    Command::new(python())
        .args(["-c", "import kafka.record.default_records"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

pub fn hex(b: &[u8]) -> String {
    b.iter().fold(String::new(), |mut s, x| {
        let _ = write!(s, "{x:02x}");
        s
    })
}

pub fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

pub fn enc(b: &Option<Bytes>) -> String {
    b.as_ref().map_or("-".into(), |b| format!("x:{}", hex(b)))
}

pub fn dec(s: &str) -> Option<Bytes> {
    (s != "-").then(|| Bytes::from(unhex(s.strip_prefix("x:").unwrap())))
}

/// Reads a `.records` file back: the codec name and the records.
pub fn parse_manifest(text: &str) -> (String, Vec<RecordRef>) {
    let mut lines = text.lines();
    let batch = lines.next().unwrap();
    let codec = batch
        .split_whitespace()
        .find_map(|f| f.strip_prefix("compression="))
        .unwrap()
        .to_owned();
    let records = lines
        .map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            assert_eq!((f[0], f.len()), ("record", 6), "{line}");
            let headers = if f[5] == "." {
                Vec::new()
            } else {
                f[5].split(',')
                    .map(|pair| {
                        let (name, value) = pair.split_once('=').unwrap();
                        (String::from_utf8(unhex(name)).unwrap(), dec(value))
                    })
                    .collect()
            };
            RecordRef {
                offset: f[1].parse().unwrap(),
                timestamp: f[2].parse().unwrap(),
                key: dec(f[3]),
                value: dec(f[4]),
                headers,
            }
        })
        .collect();
    (codec, records)
}
