#!/usr/bin/env python3
"""Kafka v2 record batches between krabka and kafka-python.

kafka-python (kafka.record.default_records) is an implementation of the format written by
others; crates/protocol/tests/kafka_python.rs drives this script both ways:

  kafka-python-interop.py write DIR [--require CODECS]
      writes, for each codec kafka-python can compress with here, a batch built by
      DefaultRecordBatchBuilder to DIR/python-CODEC.batch and what it holds to
      DIR/python-CODEC.records; with --require, a listed codec it cannot write is an error.
  kafka-python-interop.py check DIR
      reads every DIR/*.batch that has a DIR/*.records beside it (krabka wrote both) through
      MemoryRecords and DefaultRecordBatch, checks the CRC, and compares the batch fields and
      every record with the .records file.
  kafka-python-interop.py check-log DIR
      reads every segment file DIR/*.log that has a DIR/*.expect beside it (a krabka log wrote
      the segment; the .expect file lists its records as `record` lines) through MemoryRecords,
      batch after batch, checks every batch's magic and CRC, and compares every record.

The .records format, one item a line:
  batch base_offset=N compression=NAME transactional=0|1 control=0|1 producer_id=N
        producer_epoch=N base_sequence=N log_append_time=-|N          (one line, first)
  record OFFSET TIMESTAMP KEY VALUE HEADERS
where KEY and VALUE are '-' for null or 'x:' and the bytes in hex, and HEADERS is '.' for none
or comma-separated NAMEHEX=VALUE pairs.

Exits 0 when everything matched, 1 with a message naming the file and field otherwise.
"""

import argparse
import os
import sys

from kafka import codec as kafka_codec
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

CODECS = {
    "none": (DefaultRecordBatch.CODEC_NONE, lambda: True),
    "gzip": (DefaultRecordBatch.CODEC_GZIP, kafka_codec.has_gzip),
    "snappy": (DefaultRecordBatch.CODEC_SNAPPY, kafka_codec.has_snappy),
    "lz4": (DefaultRecordBatch.CODEC_LZ4, kafka_codec.has_lz4),
    "zstd": (DefaultRecordBatch.CODEC_ZSTD, kafka_codec.has_zstd),
}
NAMES = {code: name for name, (code, _) in CODECS.items()}


class Mismatch(Exception):
    pass


def enc(b):
    return "-" if b is None else "x:" + bytes(b).hex()


def dec(s):
    if s == "-":
        return None
    if not s.startswith("x:"):
        raise Mismatch("bad bytes field %r" % s)
    return bytes.fromhex(s[2:])


def enc_headers(headers):
    if not headers:
        return "."
    return ",".join(k.encode("utf-8").hex() + "=" + enc(v) for k, v in headers)


def dec_headers(s):
    if s == ".":
        return []
    out = []
    for pair in s.split(","):
        name, _, value = pair.partition("=")
        out.append((bytes.fromhex(name).decode("utf-8"), dec(value)))
    return out


def sample_records():
    """(timestamp, key, value, headers): null keys and values, empty ones, headers with null
    values and repeated names, timestamps out of order, and values that compress well (the
    builder stores a batch uncompressed when compressing does not make it smaller)."""
    out = []
    for i in range(40):
        key = None if i % 3 == 0 else ("key-%d" % (i % 7)).encode()
        value = None if i % 11 == 5 else (("value %d " % i) * (1 + i % 9)).encode()
        if i == 7:
            key, value = b"", b""
        headers = []
        if i % 2 == 0:
            headers = [("trace", b"t-%d" % i), ("null", None), ("trace", b"")]
        if i == 8:
            headers.append(("n\u00e4me-\u2713", b"\x00\xff"))
        out.append((1_700_000_000_000 + (i * 37) % 101 - 50, key, value, headers))
    return out


def write(directory, require):
    wanted = set(filter(None, require.split(","))) if require else set()
    unknown = wanted - set(CODECS)
    if unknown:
        raise Mismatch("unknown codecs in --require: %s" % ", ".join(sorted(unknown)))
    records = sample_records()
    jobs = [(name, name, False) for name in CODECS] + [("gzip-txn", "gzip", True)]
    for label, name, transactional in jobs:
        code, available = CODECS[name]
        if not available():
            if name in wanted:
                raise Mismatch("kafka-python cannot write %s here (library missing)" % name)
            print("skip python-%s: no %s library" % (label, name))
            continue
        builder = DefaultRecordBatchBuilder(
            magic=2, compression_type=code, is_transactional=False, producer_id=-1,
            producer_epoch=-1, base_sequence=-1, batch_size=1 << 22)
        producer = (-1, -1, -1)
        if transactional:
            producer = (4242, 3, 100)
            builder.set_producer_state(4242, 3, 100, True)
        for offset, (ts, key, value, headers) in enumerate(records):
            if builder.append(offset, timestamp=ts, key=key, value=value, headers=headers) is None:
                raise Mismatch("builder refused record %d" % offset)
        data = bytes(builder.build())
        got = DefaultRecordBatch(data).compression_type
        if got != code:
            raise Mismatch("python-%s: built with codec %s, not %s" % (label, NAMES[got], name))
        base = os.path.join(directory, "python-" + label)
        with open(base + ".batch", "wb") as f:
            f.write(data)
        lines = ["batch base_offset=0 compression=%s transactional=%d control=0 producer_id=%d "
                 "producer_epoch=%d base_sequence=%d log_append_time=-"
                 % (name, transactional, producer[0], producer[1], producer[2])]
        for offset, (ts, key, value, headers) in enumerate(records):
            lines.append("record %d %d %s %s %s" % (offset, ts, enc(key), enc(value),
                                                     enc_headers(headers)))
        with open(base + ".records", "w") as f:
            f.write("\n".join(lines) + "\n")
        print("wrote python-%s (%d bytes)" % (label, len(data)))


def parse_manifest(path):
    with open(path) as f:
        lines = [line.split() for line in f if line.strip()]
    if not lines or lines[0][0] != "batch":
        raise Mismatch("%s: no batch line" % path)
    batch = dict(field.split("=", 1) for field in lines[0][1:])
    records = []
    for fields in lines[1:]:
        if fields[0] != "record" or len(fields) != 6:
            raise Mismatch("%s: bad record line %r" % (path, " ".join(fields)))
        records.append((int(fields[1]), int(fields[2]), dec(fields[3]), dec(fields[4]),
                        dec_headers(fields[5])))
    return batch, records


def expect(name, what, got, want):
    if got != want:
        raise Mismatch("%s: %s is %r, expected %r" % (name, what, got, want))


def check_one(directory, name):
    want_batch, want_records = parse_manifest(os.path.join(directory, name + ".records"))
    with open(os.path.join(directory, name + ".batch"), "rb") as f:
        data = f.read()
    memory = MemoryRecords(data)
    expect(name, "valid bytes", memory.valid_bytes(), len(data))
    batch = memory.next_batch()
    if batch is None or memory.has_next():
        raise Mismatch("%s: not exactly one batch" % name)
    if not isinstance(batch, DefaultRecordBatch):
        raise Mismatch("%s: not a v2 batch (%s)" % (name, type(batch).__name__))
    expect(name, "magic", batch.magic, 2)
    expect(name, "CRC valid", batch.validate_crc(), True)
    expect(name, "base offset", batch.base_offset, int(want_batch["base_offset"]))
    expect(name, "compression", NAMES.get(batch.compression_type), want_batch["compression"])
    expect(name, "transactional", batch.is_transactional, want_batch["transactional"] == "1")
    expect(name, "control", batch.is_control_batch, want_batch["control"] == "1")
    expect(name, "producer id", batch.producer_id, int(want_batch["producer_id"]))
    expect(name, "producer epoch", batch.producer_epoch, int(want_batch["producer_epoch"]))
    expect(name, "base sequence", batch.base_sequence, int(want_batch["base_sequence"]))
    log_append = want_batch["log_append_time"]
    expect(name, "timestamp type", batch.timestamp_type,
           DefaultRecordBatch.CREATE_TIME if log_append == "-" else
           DefaultRecordBatch.LOG_APPEND_TIME)
    expect(name, "record count", batch.records_count, len(want_records))
    expect(name, "last offset", batch.last_offset,
           int(want_batch["base_offset"]) + len(want_records) - 1)
    got = list(batch)
    expect(name, "records read", len(got), len(want_records))
    for record, (offset, ts, key, value, headers) in zip(got, want_records):
        where = "%s record %d" % (name, offset)
        expect(where, "offset", record.offset, offset)
        expect(where, "timestamp", record.timestamp, ts if log_append == "-" else int(log_append))
        expect(where, "key", None if record.key is None else bytes(record.key), key)
        expect(where, "value", None if record.value is None else bytes(record.value), value)
        expect(where, "headers", [(k, None if v is None else bytes(v))
                                  for k, v in record.headers], headers)
    print("ok %s (%s, %d records)" % (name, want_batch["compression"], len(got)))


def check(directory):
    names = sorted(f[:-len(".batch")] for f in os.listdir(directory)
                   if f.endswith(".batch")
                   and os.path.exists(os.path.join(directory, f[:-len(".batch")] + ".records")))
    if not names:
        raise Mismatch("no .batch files with .records in %s" % directory)
    for name in names:
        try:
            check_one(directory, name)
        except Mismatch:
            raise
        except Exception as e:  # kafka-python's own errors (CorruptRecordError, ...)
            raise Mismatch("%s: kafka-python refused it: %r" % (name, e))
    print("kafka-python read %d krabka batches" % len(names))


def check_log_one(directory, name):
    with open(os.path.join(directory, name + ".expect")) as f:
        want = []
        for line in f:
            fields = line.split()
            if not fields:
                continue
            if fields[0] != "record" or len(fields) != 6:
                raise Mismatch("%s.expect: bad record line %r" % (name, line))
            want.append((int(fields[1]), int(fields[2]), dec(fields[3]), dec(fields[4]),
                         dec_headers(fields[5])))
    with open(os.path.join(directory, name + ".log"), "rb") as f:
        data = f.read()
    memory = MemoryRecords(data)
    expect(name, "valid bytes", memory.valid_bytes(), len(data))
    got = []
    batches = 0
    while memory.has_next():
        batch = memory.next_batch()
        if not isinstance(batch, DefaultRecordBatch):
            raise Mismatch("%s: batch %d is not a v2 batch" % (name, batches))
        expect(name, "magic of batch %d" % batches, batch.magic, 2)
        expect(name, "CRC of batch %d" % batches, batch.validate_crc(), True)
        records = list(batch)
        expect(name, "last offset of batch %d" % batches, batch.last_offset,
               records[-1].offset if records else None)
        got.extend(records)
        batches += 1
    expect(name, "records read", len(got), len(want))
    for record, (offset, ts, key, value, headers) in zip(got, want):
        where = "%s record %d" % (name, offset)
        expect(where, "offset", record.offset, offset)
        expect(where, "timestamp", record.timestamp, ts)
        expect(where, "key", None if record.key is None else bytes(record.key), key)
        expect(where, "value", None if record.value is None else bytes(record.value), value)
        expect(where, "headers", [(k, None if v is None else bytes(v))
                                  for k, v in record.headers], headers)
    print("ok %s (%d batches, %d records)" % (name, batches, len(got)))


def check_log(directory):
    names = sorted(f[:-len(".log")] for f in os.listdir(directory)
                   if f.endswith(".log")
                   and os.path.exists(os.path.join(directory, f[:-len(".log")] + ".expect")))
    if not names:
        raise Mismatch("no .log files with .expect in %s" % directory)
    for name in names:
        try:
            check_log_one(directory, name)
        except Mismatch:
            raise
        except Exception as e:
            raise Mismatch("%s: kafka-python refused it: %r" % (name, e))
    print("kafka-python read %d krabka segment files" % len(names))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write", help="write kafka-python batches")
    w.add_argument("dir")
    w.add_argument("--require", default="", help="comma-separated codecs that must be written")
    c = sub.add_parser("check", help="check krabka batches")
    c.add_argument("dir")
    g = sub.add_parser("check-log", help="check krabka segment files")
    g.add_argument("dir")
    args = parser.parse_args()
    try:
        if args.command == "write":
            write(args.dir, args.require)
        elif args.command == "check-log":
            check_log(args.dir)
        else:
            check(args.dir)
    except Mismatch as e:
        print("kafka-python interop: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
