//! krabka's v2 record batches against kafka-python's (`kafka.record.default_records`), through
//! `scripts/kafka-python-interop.py`: kafka-python checks the batches krabka writes (CRC, batch
//! fields, every record), and krabka reads the batches kafka-python writes.
//!
//! The interpreter is `python3`, or `$KRABKA_PYTHON`. Without kafka-python the test prints a
//! note and passes, except under `CI=true`, where it fails: CI installs kafka-python and the
//! snappy, lz4 and zstd libraries, and every codec must then be written by kafka-python.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/python.rs"]
mod python;

use std::fmt::Write as _;
use std::path::PathBuf;

use python::{enc, has_kafka_python, hex, in_ci, parse_manifest, python, run, script};

use bytes::Bytes;
use krabka_protocol::batch::{
    BatchError, BatchSpec, BatchView, Compression, RecordSpec, encode_batch,
};

/// The `.records` file the script reads (its format is in the script's help).
fn manifest(spec: &BatchSpec, records: &[RecordSpec]) -> String {
    let mut out = format!(
        "batch base_offset={} compression={} transactional={} control={} producer_id={} \
         producer_epoch={} base_sequence={} log_append_time={}\n",
        spec.base_offset,
        spec.compression,
        u8::from(spec.transactional),
        u8::from(spec.control),
        spec.producer_id,
        spec.producer_epoch,
        spec.base_sequence,
        spec.log_append_time.map_or("-".into(), |t| t.to_string()),
    );
    for (r, offset) in records.iter().zip(spec.base_offset..) {
        let headers = if r.headers.is_empty() {
            ".".to_owned()
        } else {
            let pairs: Vec<String> = r
                .headers
                .iter()
                .map(|(k, v)| format!("{}={}", hex(k.as_bytes()), enc(v)))
                .collect();
            pairs.join(",")
        };
        let (key, value) = (enc(&r.key), enc(&r.value));
        writeln!(
            out,
            "record {offset} {} {key} {value} {headers}",
            r.timestamp
        )
        .unwrap();
    }
    out
}

fn sample_records() -> Vec<RecordSpec> {
    let mut out: Vec<RecordSpec> = (0..30)
        .map(|i: i64| {
            let value = format!("krabka value {i} ").repeat(1 + (i % 5) as usize);
            let mut r = RecordSpec::new(1_700_000_000_000 + (i * 13) % 29 - 14, value);
            if i % 3 != 0 {
                r = r.with_key(format!("key-{}", i % 4));
            }
            if i % 7 == 6 {
                r.value = None;
            }
            if i % 2 == 1 {
                r = r
                    .with_header("trace", Some(Bytes::from(format!("t{i}"))))
                    .with_header("trace", None)
                    .with_header("ünïcode ✓", Some(Bytes::new()));
            }
            r
        })
        .collect();
    out.push(RecordSpec::new(1_700_000_000_100, vec![7u8; 100_000]).with_key(Bytes::new()));
    out
}

/// The batches krabka writes for kafka-python: every codec of this build, and transactional,
/// control and log-append-time batches.
fn krabka_batches() -> Vec<(String, BatchSpec, Vec<RecordSpec>)> {
    let records = sample_records();
    let mut out = Vec::new();
    for codec in Compression::ALL.into_iter().filter(|c| c.is_enabled()) {
        let spec = BatchSpec {
            compression: codec,
            partition_leader_epoch: 5,
            ..BatchSpec::new(1_000)
        };
        out.push((format!("krabka-{codec}"), spec, records.clone()));
    }
    let txn = BatchSpec {
        producer_id: 31_337,
        producer_epoch: 2,
        base_sequence: 40,
        transactional: true,
        ..BatchSpec::new(2_000)
    };
    out.push(("krabka-txn".into(), txn.clone(), records.clone()));
    // A commit marker: key (version 0, type 1 = commit), value (version 0, coordinator epoch 9).
    let marker = RecordSpec::new(1_700_000_000_200, Bytes::from_static(&[0, 0, 0, 0, 0, 9]))
        .with_key(Bytes::from_static(&[0, 0, 0, 1]));
    let control = BatchSpec {
        base_offset: 2_031,
        control: true,
        base_sequence: -1,
        ..txn.clone()
    };
    out.push(("krabka-control".into(), control, vec![marker]));
    let append = BatchSpec {
        log_append_time: Some(1_800_000_000_000),
        ..BatchSpec::new(3_000)
    };
    out.push(("krabka-log-append-time".into(), append, records));
    out
}

#[test]
fn kafka_python_reads_krabka_and_krabka_reads_kafka_python() {
    if !has_kafka_python() {
        assert!(
            !in_ci(),
            "kafka-python is missing under CI: {} -c 'import kafka' failed (.ci/run installs it)",
            python()
        );
        println!(
            "note: skipping the kafka-python interop test: {} cannot import kafka \
             (pip install kafka-python python-snappy lz4 zstandard)",
            python()
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let krabka_dir = dir.path().join("krabka");
    let python_dir = dir.path().join("python");
    std::fs::create_dir_all(&krabka_dir).unwrap();
    std::fs::create_dir_all(&python_dir).unwrap();

    // krabka writes, kafka-python checks.
    let batches = krabka_batches();
    for (name, spec, records) in &batches {
        let bytes = encode_batch(spec, records).unwrap();
        std::fs::write(krabka_dir.join(format!("{name}.batch")), &bytes).unwrap();
        std::fs::write(
            krabka_dir.join(format!("{name}.records")),
            manifest(spec, records),
        )
        .unwrap();
    }
    let script = script();
    let script = script.to_str().unwrap();
    let (ok, stdout, stderr) = run(&[script, "check", krabka_dir.to_str().unwrap()]);
    assert!(ok, "kafka-python check failed:\n{stdout}\n{stderr}");
    for (name, spec, _) in &batches {
        let line = format!("ok {name} ({}", spec.compression);
        assert!(stdout.contains(&line), "{name} not checked:\n{stdout}");
    }

    // kafka-python writes, krabka reads.
    let require = if in_ci() { "gzip,snappy,lz4,zstd" } else { "" };
    let (ok, stdout, stderr) = run(&[
        script,
        "write",
        python_dir.to_str().unwrap(),
        "--require",
        require,
    ]);
    assert!(ok, "kafka-python write failed:\n{stdout}\n{stderr}");
    let mut read = Vec::new();
    let mut names: Vec<PathBuf> = std::fs::read_dir(&python_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "batch"))
        .collect();
    names.sort();
    assert!(!names.is_empty(), "kafka-python wrote nothing:\n{stdout}");
    for path in names {
        let bytes = Bytes::from(std::fs::read(&path).unwrap());
        let (codec, want) =
            parse_manifest(&std::fs::read_to_string(path.with_extension("records")).unwrap());
        let view = BatchView::parse(&bytes).unwrap_or_else(|e| panic!("{path:?}: {e}"));
        assert_eq!(view.size(), bytes.len());
        assert_eq!(view.header().compression.name(), codec, "{path:?}");
        if codec == "snappy" {
            // kafka-python writes the xerial framing, as Kafka's Java client does.
            assert!(view.payload().starts_with(b"\x82SNAPPY\x00"));
        }
        let got = match view.records(16 << 20) {
            Err(BatchError::CodecDisabled { codec }) => {
                println!("note: this build lacks {codec}; {path:?} not read");
                continue;
            }
            iter => iter
                .unwrap()
                .collect::<Result<Vec<_>, _>>()
                .unwrap_or_else(|e| panic!("{path:?}: {e}")),
        };
        assert_eq!(got, want, "{path:?}");
        read.push(codec);
    }
    println!("krabka read kafka-python batches: {read:?}");
    if in_ci() {
        for codec in ["none", "gzip", "snappy", "lz4", "zstd"] {
            assert!(read.iter().any(|c| c == codec), "{codec} batch not read");
        }
    }
}
