//! `krabka dump` on segment files it did not write: batches encoded by kafka-protocol (an
//! implementation of Kafka's v2 record batches written by others), uncompressed and with every
//! codec, starting at offset 0 as a Kafka partition's first segment does; and on a segment a
//! krabka log wrote. Every record must be printed with its offset, key and value, in the
//! words of Kafka's `kafka-dump-log --deep-iteration --print-data-log`, and damage must be
//! named by its byte.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::process::{Command, Output, Stdio};

use bytes::{Bytes, BytesMut};
use kafka_protocol::indexmap::IndexMap;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

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
        "exit {:?}\n--- stdout\n{}--- stderr\n{}",
        out.status.code(),
        text(&out.stdout),
        text(&out.stderr)
    )
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The codecs of the batches, in file order, with Kafka's names.
const CODECS: [(Compression, &str); 5] = [
    (Compression::None, "none"),
    (Compression::Gzip, "gzip"),
    (Compression::Snappy, "snappy"),
    (Compression::Lz4, "lz4"),
    (Compression::Zstd, "zstd"),
];

/// Records per batch.
const PER_BATCH: i64 = 4;

/// One written batch: where it is, its bytes, its codec and what its records hold.
struct Written {
    position: usize,
    bytes: Bytes,
    codec: &'static str,
    idempotent: bool,
    records: Vec<Record>,
}

/// The records of batch `b` (offsets `4b..4b+4`): every other one without a key, some with
/// headers; batches 1 and 3 from an idempotent producer (id 4242, epoch 7, sequences from
/// 100), the others without (id, epoch and sequences -1, as a plain producer writes them).
fn batch_records(b: i64) -> Vec<Record> {
    let idempotent = b % 2 == 1;
    (0..PER_BATCH)
        .map(|k| {
            let offset = b * PER_BATCH + k;
            let mut headers = IndexMap::new();
            if k % 2 == 0 {
                headers.insert(
                    StrBytes::from_static_str("trace-id"),
                    Some(Bytes::from(format!("t-{offset}"))),
                );
                headers.insert(StrBytes::from_static_str("empty"), None);
            }
            Record {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: 3,
                producer_id: if idempotent { 4242 } else { -1 },
                producer_epoch: if idempotent { 7 } else { -1 },
                timestamp_type: TimestampType::Creation,
                offset,
                // kafka-protocol keeps records in one batch while offset - sequence is constant.
                sequence: if idempotent {
                    100 + k as i32
                } else {
                    k as i32 - 1
                },
                // Not in order within the batch: the batch's maxTimestamp is its largest.
                timestamp: 1_700_000_000_000 + offset * 10 + if k == 1 { 5 } else { 0 },
                key: (k % 2 == 1).then(|| Bytes::from(format!("key-{offset}"))),
                value: Some(Bytes::from(format!("value {offset} of batch {b}"))),
                headers,
            }
        })
        .collect()
}

/// Writes one batch per codec, at offsets 0.., to `path`.
fn write_kafka_segment(path: &Path) -> Vec<Written> {
    let mut file = Vec::new();
    let mut written = Vec::new();
    for (b, (codec, name)) in CODECS.into_iter().enumerate() {
        let records = batch_records(b as i64);
        let mut buf = BytesMut::new();
        let options = RecordEncodeOptions {
            version: 2,
            compression: codec,
        };
        RecordBatchEncoder::encode(&mut buf, &records, &options).unwrap();
        let bytes = buf.freeze();
        let length = i32::from_be_bytes(bytes[8..12].try_into().unwrap());
        assert_eq!(12 + length as usize, bytes.len(), "{name}: one batch");
        written.push(Written {
            position: file.len(),
            bytes: bytes.clone(),
            codec: name,
            idempotent: b % 2 == 1,
            records,
        });
        file.extend_from_slice(&bytes);
    }
    std::fs::write(path, &file).unwrap();
    written
}

/// The line `krabka dump` prints for batch `w`, valid or not.
fn batch_line(w: &Written, valid: bool) -> String {
    let base = w.records[0].offset;
    let last = w.records.last().unwrap().offset;
    let (seqs, producer) = if w.idempotent {
        (
            "baseSequence: 100 lastSequence: 103",
            "producerId: 4242 producerEpoch: 7",
        )
    } else {
        (
            "baseSequence: -1 lastSequence: -1",
            "producerId: -1 producerEpoch: -1",
        )
    };
    let max_ts = w.records.iter().map(|r| r.timestamp).max().unwrap();
    let crc = u32::from_be_bytes(w.bytes[17..21].try_into().unwrap());
    format!(
        "baseOffset: {base} lastOffset: {last} count: {PER_BATCH} {seqs} {producer} \
         partitionLeaderEpoch: 3 isTransactional: false isControl: false position: {} \
         CreateTime: {max_ts} size: {} magic: 2 compresscodec: {} crc: {crc} isvalid: {valid}",
        w.position,
        w.bytes.len(),
        w.codec
    )
}

/// The line `krabka dump --values` prints for record `k` of batch `w`.
fn record_line(w: &Written, k: usize) -> String {
    let r = &w.records[k];
    let sequence = if w.idempotent { 100 + k as i64 } else { -1 };
    let keys: Vec<&str> = r.headers.keys().map(|k| k.as_str()).collect();
    let key_size = r.key.as_ref().map_or(-1, |k| k.len() as i64);
    let value = r.value.as_ref().unwrap();
    let mut line = format!(
        "| offset: {} CreateTime: {} keySize: {key_size} valueSize: {} sequence: {sequence} \
         headerKeys: [{}]",
        r.offset,
        r.timestamp,
        value.len(),
        keys.join(",")
    );
    if let Some(key) = &r.key {
        line.push_str(&format!(" key: {}", std::str::from_utf8(key).unwrap()));
    }
    line.push_str(&format!(
        " payload: {}",
        std::str::from_utf8(value).unwrap()
    ));
    line
}

#[test]
fn a_segment_kafka_wrote_dumps_every_record_of_every_codec() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("00000000000000000000.log");
    let written = write_kafka_segment(&path);
    let out = krabka(&["dump", s(&path), "--values", "1000"]);
    assert!(out.status.success(), "{}", show(&out));
    let got = text(&out.stdout);
    let lines: Vec<&str> = got.lines().collect();
    assert!(
        lines[0].starts_with(&format!("Dumping {} (", s(&path))),
        "{}",
        show(&out)
    );
    let mut want = vec!["Log starting offset: 0".to_owned()];
    for w in &written {
        want.push(batch_line(w, true));
        want.extend((0..w.records.len()).map(|k| record_line(w, k)));
    }
    assert_eq!(lines[1..lines.len() - 1], want, "{}", show(&out));
    assert!(
        lines[lines.len() - 1].starts_with("20 records in 5 batch(es), 0 bad batch(es), "),
        "{}",
        show(&out)
    );

    // Without --values: the same lines without keys and payloads.
    let out = krabka(&["dump", s(&path)]);
    assert!(out.status.success(), "{}", show(&out));
    let plain = text(&out.stdout);
    let records: Vec<&str> = plain.lines().filter(|l| l.starts_with("| ")).collect();
    assert_eq!(records.len(), 20, "{plain}");
    for (i, line) in records.iter().enumerate() {
        assert!(
            line.starts_with(&format!("| offset: {i} CreateTime: ")),
            "{line}"
        );
        assert!(
            !line.contains("payload:") && !line.contains(" key:"),
            "{line}"
        );
    }
}

#[test]
fn a_flipped_byte_in_a_compressed_batch_exits_1_naming_the_batch_byte() {
    for victim in 1..CODECS.len() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000000.log");
        let written = write_kafka_segment(&path);
        let w = &written[victim];
        let mut bytes = std::fs::read(&path).unwrap();
        // A byte of the compressed records (the header is 61 bytes).
        let at = w.position + 61 + (w.bytes.len() - 61) / 2;
        bytes[at] ^= 0x10;
        std::fs::write(&path, &bytes).unwrap();
        let out = krabka(&["dump", s(&path), "--values"]);
        assert_eq!(out.status.code(), Some(1), "{}: {}", w.codec, show(&out));
        let stderr = text(&out.stderr);
        let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
        assert_eq!(errors.len(), 1, "{}", show(&out));
        assert!(
            errors[0].contains(&format!(
                "in {}; the first at byte {}: CRC mismatch",
                s(&path),
                w.position
            )),
            "{}: {}",
            w.codec,
            show(&out)
        );
        let stdout = text(&out.stdout);
        let bad = stdout
            .lines()
            .find(|l| l.contains(&format!("position: {} ", w.position)))
            .unwrap();
        assert!(
            bad.starts_with(&batch_line(w, false)) && bad.contains("problem: CRC mismatch"),
            "{bad}"
        );
        // Every other batch is printed with every record (the one after it with the problem
        // that its first seq does not follow the last intact batch).
        for (i, other) in written.iter().enumerate().filter(|(i, _)| *i != victim) {
            let line = stdout
                .lines()
                .find(|l| l.contains(&format!("position: {} ", other.position)))
                .unwrap();
            assert!(line.starts_with(&batch_line(other, true)), "{line}");
            assert_eq!(line.contains("problem: "), i == victim + 1, "{line}");
            for k in 0..other.records.len() {
                assert!(stdout.contains(&record_line(other, k)), "{stdout}");
            }
        }
        // None of the damaged batch's records is shown.
        let first = w.records[0].offset;
        assert!(!stdout.contains(&format!("| offset: {first} ")), "{stdout}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

/// Rewrites the batch `w` of the segment file at `path` with `change`, then makes its CRC right
/// again, so only reading its records can find what changed.
fn rewrite(path: &Path, w: &Written, change: impl FnOnce(&mut [u8])) {
    let mut bytes = std::fs::read(path).unwrap();
    let batch = &mut bytes[w.position..w.position + w.bytes.len()];
    change(batch);
    let crc = crc32c::crc32c(&batch[21..]);
    batch[17..21].copy_from_slice(&crc.to_be_bytes());
    std::fs::write(path, &bytes).unwrap();
}

/// Runs `krabka dump --values` on `path`, which must fail on batch `w` with `reason`, after
/// printing its first `shown` records, and count every other batch as good.
fn assert_records_end_with_a_problem(
    path: &Path,
    written: &[Written],
    w: &Written,
    shown: usize,
    reason: &str,
) {
    let out = krabka(&["dump", s(path), "--values"]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.contains(&format!("position: {} ", w.position)))
        .unwrap();
    assert!(
        lines[at].ends_with("isvalid: true") && !lines[at].contains("problem"),
        "{stdout}"
    );
    for k in 0..shown {
        assert_eq!(lines[at + 1 + k], record_line(w, k), "{stdout}");
    }
    let problem = lines[at + 1 + shown];
    assert!(
        problem.starts_with(&format!(
            "| problem: batch at position {}: {reason}",
            w.position
        )),
        "{stdout}"
    );
    // Every other batch is intact and counted, the next one right after the problem line.
    let next = written.iter().find(|o| o.position > w.position).unwrap();
    assert_eq!(lines[at + 2 + shown], batch_line(next, true), "{stdout}");
    let good = written.len() - 1;
    assert!(
        stdout.contains(&format!(
            "{} records in {good} batch(es), 1 bad batch(es)",
            good as i64 * PER_BATCH
        )),
        "{stdout}"
    );
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "1 bad batch(es) in {}; the first at byte {}: {reason}",
            s(path),
            w.position
        )),
        "{stderr}"
    );
}

#[test]
fn a_record_that_does_not_read_ends_its_batch_with_a_problem_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("00000000000000000000.log");
    // The uncompressed batch: the name of the third record's first header is not UTF-8.
    let written = write_kafka_segment(&path);
    let w = &written[0];
    let name_at = w
        .bytes
        .windows(8)
        .enumerate()
        .filter(|(_, b)| b == b"trace-id")
        .nth(1)
        .unwrap()
        .0;
    rewrite(&path, w, |b| b[name_at] = 0xff);
    assert_records_end_with_a_problem(&path, &written, w, 2, "header name at byte");

    // The gzip batch: its maxTimestamp is not its largest record timestamp, found once every
    // record is read.
    let written = write_kafka_segment(&path);
    let w = &written[1];
    rewrite(&path, w, |b| b[35..43].copy_from_slice(&1i64.to_be_bytes()));
    assert_records_end_with_a_problem(&path, &written, w, 4, "maxTimestamp 1 but");
}

#[test]
fn a_segment_krabka_wrote_dumps_every_record() {
    use krabka_protocol::Message;
    use krabka_storage::{Log, Options};

    let dir = tempfile::tempdir().unwrap();
    let log_dir = dir.path().join("log");
    let log = Log::open(&log_dir, Options::default()).unwrap();
    assert!(log.options().compression == krabka_protocol::batch::Compression::None);
    let one = |i: u64| {
        let m = Message::new(format!("single {i}")).with_timestamp(1_000 + i as i64);
        if i.is_multiple_of(2) {
            m.with_key(format!("k{i}"))
        } else {
            m
        }
    };
    for i in 1..=3 {
        assert_eq!(log.append(&one(i)).unwrap(), i);
    }
    let batch: Vec<Message> = (4..=10)
        .map(|i| one(i).with_header("h", format!("{i}")))
        .collect();
    assert_eq!(log.append_batch(&batch).unwrap(), 4..=10);
    log.close().unwrap();
    let seg = log_dir.join("00000000000000000001.log");

    let out = krabka(&["dump", s(&seg), "--values"]);
    assert!(out.status.success(), "{}", show(&out));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("Log starting offset: 1\n"), "{stdout}");
    let batches: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("baseOffset: "))
        .collect();
    // Three appends of one, then one batch of seven.
    let bounds: Vec<(u64, u64, u64)> = vec![(1, 1, 1), (2, 2, 1), (3, 3, 1), (4, 10, 7)];
    assert_eq!(batches.len(), bounds.len(), "{stdout}");
    for (line, (first, last, count)) in batches.iter().zip(bounds) {
        assert!(
            line.starts_with(&format!(
                "baseOffset: {first} lastOffset: {last} count: {count} baseSequence: -1 \
                 lastSequence: -1 producerId: -1 producerEpoch: -1 partitionLeaderEpoch: -1 \
                 isTransactional: false isControl: false position: "
            )) && line.contains(" magic: 2 compresscodec: none ")
                && line.ends_with(" isvalid: true"),
            "{line}"
        );
    }
    let records: Vec<&str> = stdout.lines().filter(|l| l.starts_with("| ")).collect();
    assert_eq!(records.len(), 10, "{stdout}");
    for (i, line) in (1u64..).zip(&records) {
        let m = one(i);
        let (key_size, key) = match &m.key {
            Some(k) => (
                k.len() as i64,
                format!(" key: {}", std::str::from_utf8(k).unwrap()),
            ),
            None => (-1, String::new()),
        };
        let headers = if i >= 4 { "h" } else { "" };
        assert_eq!(
            *line,
            format!(
                "| offset: {i} CreateTime: {} keySize: {key_size} valueSize: {} sequence: -1 \
                 headerKeys: [{headers}]{key} payload: single {i}",
                1_000 + i,
                m.value.len()
            )
        );
    }
    assert!(
        stdout.contains("10 records in 4 batch(es), 0 bad batch(es)"),
        "{stdout}"
    );
}

/// A zstd batch whose one record decompresses to more than krabka reads of a batch (64 MiB):
/// reported as a problem of that batch, in bounded memory (a 256 MiB address space), and the
/// walk goes on to the batch after it.
#[test]
fn a_batch_that_decompresses_past_the_limit_is_a_problem_in_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("00000000000000000000.log");
    let mut big = batch_records(0);
    big.truncate(1);
    big[0].value = Some(Bytes::from(vec![0u8; 65 << 20]));
    let mut buf = BytesMut::new();
    let zstd = RecordEncodeOptions {
        version: 2,
        compression: Compression::Zstd,
    };
    RecordBatchEncoder::encode(&mut buf, &big, &zstd).unwrap();
    let first = buf.len();
    let mut next = batch_records(0);
    for (k, r) in next.iter_mut().enumerate() {
        r.offset = 1 + k as i64;
    }
    RecordBatchEncoder::encode(&mut buf, &next, &zstd).unwrap();
    std::fs::write(&path, &buf).unwrap();
    drop((big, buf));

    let out = support::dump_in_256_mib(&path);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains(
            "| problem: batch at position 0: records decompress to more than the \
             67108864-byte limit (after 0 record(s) of the batch)"
        ),
        "{}",
        show(&out)
    );
    assert!(
        stdout.contains("baseOffset: 1 lastOffset: 4 count: 4 ")
            && stdout.contains(&format!("position: {first} "))
            && stdout.contains("4 records in 1 batch(es), 1 bad batch(es)"),
        "{}",
        show(&out)
    );
    assert!(!text(&out.stderr).contains("panicked"), "{}", show(&out));
}

/// A batch longer than the dump holds in memory (a log configured for messages over 16 MiB) is
/// CRC-checked in steps and shown without its records; the batches after it are checked as
/// usual, their seqs following its own.
#[test]
fn a_batch_over_the_dump_limit_is_crc_checked_and_shown_without_its_records() {
    use krabka_protocol::Message;
    use krabka_storage::segment::{DUMP_DECODE_LIMIT, encode_batch_of_one};

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("00000000000000000001.log");
    let mut bytes = Vec::new();
    let value = vec![b'v'; usize::try_from(DUMP_DECODE_LIMIT).unwrap()];
    encode_batch_of_one(1, &Message::new(value), &mut bytes).unwrap();
    let second = bytes.len();
    encode_batch_of_one(2, &Message::new("after"), &mut bytes).unwrap();
    std::fs::write(&path, &bytes).unwrap();

    let out = krabka(&["dump", s(&path), "--values"]);
    assert!(out.status.success(), "{}", show(&out));
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines[2].starts_with("baseOffset: 1 lastOffset: 1 count: 1 ")
            && lines[2].contains(&format!(" size: {second} "))
            && lines[2].contains(" isvalid: true (records not shown: the batch is over the "),
        "{stdout}"
    );
    assert!(
        lines[3].starts_with("baseOffset: 2 lastOffset: 2 ") && lines[3].ends_with("isvalid: true"),
        "{stdout}"
    );
    assert!(lines[4].ends_with("payload: after"), "{stdout}");
    assert!(
        stdout.contains("1 records in 2 batch(es), 0 bad batch(es)"),
        "{stdout}"
    );

    // A flipped byte in its records is found by the stepwise CRC.
    let mut damaged = bytes.clone();
    damaged[second / 2] ^= 1;
    std::fs::write(&path, &damaged).unwrap();
    let out = krabka(&["dump", s(&path)]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(
        text(&out.stderr).contains("the first at byte 0: CRC mismatch"),
        "{}",
        show(&out)
    );
}
