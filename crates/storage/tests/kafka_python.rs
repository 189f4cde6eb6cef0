//! Segment files a `Log` writes, read whole by kafka-python (`MemoryRecords`, an implementation
//! of the format written by others), batch after batch with every CRC checked; and batches
//! kafka-python's producer code builds, appended through `Log::append_raw_batch` and read back
//! exactly. Through `scripts/kafka-python-interop.py`; without kafka-python the test passes with
//! a note, except under `CI=true`, where CI has installed it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../protocol/tests/support/python.rs"]
mod python;

use std::fmt::Write as _;
use std::path::PathBuf;

use bytes::Bytes;
use krabka_protocol::Message;
use krabka_protocol::batch::Compression;
use krabka_storage::{Log, Options, SyncPolicy};
use python::{enc, has_kafka_python, hex, in_ci, parse_manifest, python, run, script};

fn skip() -> bool {
    if has_kafka_python() {
        return false;
    }
    assert!(
        !in_ci(),
        "kafka-python is missing under CI: {} -c 'import kafka' failed (.ci/run installs it)",
        python()
    );
    println!("note: skipping: {} cannot import kafka", python());
    true
}

fn msg(s: u64) -> Message {
    let mut m = Message::new(format!("value {s} {}", "z".repeat((s % 200) as usize)))
        .with_timestamp(1_700_000_000_000 + (s as i64 * 13) % 1_000);
    if !s.is_multiple_of(3) {
        m = m.with_key(format!("key-{}", s % 11));
    }
    if s.is_multiple_of(4) {
        m = m
            .with_header("trace", format!("t{s}"))
            .with_header("trace", "");
    }
    m
}

#[test]
fn kafka_python_reads_every_segment_file_krabka_writes() {
    if skip() {
        return;
    }
    let out = tempfile::tempdir().unwrap();
    let mut written = Vec::new();
    for codec in Compression::ALL {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(
            dir.path(),
            Options {
                compression: codec,
                sync: SyncPolicy::Never,
                max_bytes: 96 << 10,
                ..Options::default()
            },
        )
        .unwrap();
        for s in 1..=30 {
            log.append(&msg(s)).unwrap();
        }
        let batch: Vec<Message> = (31..=700).map(msg).collect();
        for chunk in batch.chunks(100) {
            log.append_batch(chunk).unwrap();
        }
        log.roll().unwrap();
        for seg in log.segments() {
            let name = format!("{codec}-{:020}", seg.base_seq);
            std::fs::copy(&seg.log_path, out.path().join(format!("{name}.log"))).unwrap();
            let mut expect = String::new();
            for r in log.read(seg.base_seq, usize::MAX).unwrap() {
                if r.seq > seg.last_seq {
                    break;
                }
                let m = &r.message;
                let headers = if m.headers.is_empty() {
                    ".".to_owned()
                } else {
                    let pairs: Vec<String> = m
                        .headers
                        .iter()
                        .map(|h| {
                            format!("{}={}", hex(h.key.as_bytes()), enc(&Some(h.value.clone())))
                        })
                        .collect();
                    pairs.join(",")
                };
                writeln!(
                    expect,
                    "record {} {} {} {} {headers}",
                    r.seq,
                    m.timestamp,
                    enc(&m.key),
                    enc(&Some(m.value.clone()))
                )
                .unwrap();
            }
            std::fs::write(out.path().join(format!("{name}.expect")), expect).unwrap();
            written.push(name);
        }
    }
    let script = script();
    let (ok, stdout, stderr) = run(&[
        script.to_str().unwrap(),
        "check-log",
        out.path().to_str().unwrap(),
    ]);
    assert!(ok, "kafka-python check-log failed:\n{stdout}\n{stderr}");
    for name in &written {
        assert!(
            stdout.contains(&format!("ok {name} (")),
            "{name} not checked:\n{stdout}"
        );
    }
}

#[test]
fn batches_kafka_python_builds_go_through_the_raw_append_and_read_back_exactly() {
    if skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let require = if in_ci() { "gzip,snappy,lz4,zstd" } else { "" };
    let script = script();
    let (ok, stdout, stderr) = run(&[
        script.to_str().unwrap(),
        "write",
        dir.path().to_str().unwrap(),
        "--require",
        require,
    ]);
    assert!(ok, "kafka-python write failed:\n{stdout}\n{stderr}");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "batch"))
        .collect();
    paths.sort();
    assert!(paths.len() >= 2, "{stdout}");
    let log_dir = tempfile::tempdir().unwrap();
    let log = Log::open(
        log_dir.path(),
        Options {
            sync: SyncPolicy::Never,
            ..Options::default()
        },
    )
    .unwrap();
    for path in paths {
        let batch = std::fs::read(&path).unwrap();
        let (_, want) =
            parse_manifest(&std::fs::read_to_string(path.with_extension("records")).unwrap());
        let seqs = log.append_raw_batch(&batch).unwrap();
        assert_eq!(seqs.end() - seqs.start() + 1, want.len() as u64, "{path:?}");
        let back = log.read_batches(*seqs.start(), batch.len()).unwrap();
        assert_eq!(back.len(), 1);
        // Byte for byte but the base offset and the leader epoch (kafka-python writes 0;
        // a local log stamps -1).
        let mut stored = batch.clone();
        stored[..8].copy_from_slice(&(*seqs.start() as i64).to_be_bytes());
        stored[12..16].copy_from_slice(&(-1i32).to_be_bytes());
        assert!(back.bytes() == &Bytes::from(stored), "{path:?} differs");
        let got: Vec<_> = back.records().collect::<Result<_, _>>().unwrap();
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(g.offset - *seqs.start() as i64, w.offset, "{path:?}");
            assert_eq!(
                (&g.key, &g.value, &g.headers),
                (&w.key, &w.value, &w.headers)
            );
        }
    }
}
