//! The storage cases: their comparison groups, row names and child-process ids, in the order
//! they run and print, and the targets of krabka's cost columns.

use crate::cost::CostGoals;

/// One case: its comparison group, its row name, its id for the child process.
pub struct Case {
    /// The comparison group.
    pub group: &'static str,
    /// Row label.
    pub name: &'static str,
    /// Child-process id. A case listed in two groups runs once; both rows show its result.
    pub id: &'static str,
    /// Whether it is the group's krabka reference.
    pub krabka: bool,
    /// Whether it is the group's raw-file limit.
    pub raw: bool,
}

const fn case(group: &'static str, name: &'static str, id: &'static str) -> Case {
    Case {
        group,
        name,
        id,
        krabka: false,
        raw: false,
    }
}

const fn krabka(group: &'static str, name: &'static str, id: &'static str) -> Case {
    Case {
        krabka: true,
        ..case(group, name, id)
    }
}

const fn raw(group: &'static str, name: &'static str, id: &'static str) -> Case {
    Case {
        raw: true,
        ..case(group, name, id)
    }
}

const G_APPEND: &str = "append, no sync";
const G_BATCH: &str = "append batch of 100, no sync";
const G_SYNC1: &str = "append + fsync each, 1 thread";
const G_SYNC4: &str = "append + fsync each, 4 threads";
const G_BATCH_SYNC: &str = "append batch of 100 + fsync";
const G_SEQ_RAW: &str = "sequential read of all, whole batches";
const G_SEQ: &str = "sequential read of all, decoded";
const G_SEQ1: &str = "sequential read of all, decoded, log appended one record at a time";
const G_RANDOM: &str = "random point read, log appended in batches of 100";
const G_RANDOM1: &str = "random point read, log appended one record at a time";

/// Every storage case, in the order they run and print.
pub const CASES: &[Case] = &[
    krabka(G_APPEND, "krabka append", "krabka-append"),
    case(G_APPEND, "commitlog append_msg", "commitlog-append"),
    raw(G_APPEND, "raw write of the value", "raw-write"),
    case(
        G_APPEND,
        "raw write of the record's batch of one (encoded once)",
        "raw-write-frame",
    ),
    krabka(G_BATCH, "krabka append_batch", "krabka-batch"),
    case(
        G_BATCH,
        "krabka append_raw_batch (a producer's v2 batch, encoded once)",
        "krabka-raw-batch",
    ),
    case(G_BATCH, "krabka append_batch, lz4", "krabka-batch-lz4"),
    case(G_BATCH, "krabka append_batch, zstd", "krabka-batch-zstd"),
    case(G_BATCH, "commitlog append(MessageBuf)", "commitlog-batch"),
    raw(G_BATCH, "raw write of 100", "raw-batch"),
    case(
        G_BATCH,
        "raw write of 100 + one CRC-32C of them",
        "raw-batch-crc",
    ),
    case(
        G_BATCH,
        "raw write of the 100 records' v2 batch + its CRC-32C (encoded once)",
        "raw-batch-frame",
    ),
    case(
        G_BATCH,
        "raw write of the 100 records' v2 batch + its CRC-32C, the batch copied into a buffer per call",
        "raw-batch-frame-copy",
    ),
    krabka(G_SYNC1, "krabka append, EveryAppend", "krabka-sync1"),
    case(
        G_SYNC1,
        "krabka append, EveryAppend, preallocate: true",
        "krabka-sync1-prealloc",
    ),
    case(
        G_SYNC1,
        "krabka append, EveryAppend, preallocate: false",
        "krabka-sync1-grow",
    ),
    case(G_SYNC1, "okaywal entry commit", "okaywal-sync1"),
    case(
        G_SYNC1,
        "commitlog append + flush (no data fsync)",
        "commitlog-flush1",
    ),
    raw(G_SYNC1, "raw write + sync_data", "raw-sync1"),
    case(
        G_SYNC1,
        "raw pwrite into fallocated file + sync_data",
        "raw-sync1-prealloc",
    ),
    raw(
        G_SYNC1,
        "raw pwrite of the record's batch of one into fallocated file + sync_data",
        "raw-sync1-prealloc-frame",
    ),
    krabka(G_SYNC4, "krabka append, EveryAppend", "krabka-sync4"),
    case(
        G_SYNC4,
        "krabka append, EveryAppend, preallocate: true",
        "krabka-sync4-prealloc",
    ),
    case(
        G_SYNC4,
        "krabka append, EveryAppend, preallocate: false",
        "krabka-sync4-grow",
    ),
    case(G_SYNC4, "okaywal entry commit", "okaywal-sync4"),
    raw(
        G_SYNC4,
        "raw write + sync_data, file per thread",
        "raw-sync4",
    ),
    krabka(
        G_BATCH_SYNC,
        "krabka append_batch, EveryAppend",
        "krabka-batch-sync",
    ),
    case(
        G_BATCH_SYNC,
        "okaywal 100-chunk entry commit",
        "okaywal-batch-sync",
    ),
    raw(
        G_BATCH_SYNC,
        "raw write of 100 + sync_data",
        "raw-batch-sync",
    ),
    krabka(
        G_SEQ_RAW,
        "krabka read_batches(seq, 1 MiB), bytes counted",
        "krabka-batches-seq",
    ),
    raw(
        G_SEQ_RAW,
        "raw read, 1 MiB, of the same segment files",
        "raw-read-seq",
    ),
    case(
        G_SEQ_RAW,
        "raw read, 1 MiB + CRC-32C per batch, nothing decoded",
        "raw-read-seq-crc",
    ),
    case(
        G_SEQ_RAW,
        "raw read, 1 MiB + CRC-32C per batch + a Bytes view per record",
        "raw-read-seq-views",
    ),
    krabka(G_SEQ, "krabka read(seq, 1 MiB worth)", "krabka-read-seq"),
    case(
        G_SEQ,
        "krabka read_batches(seq, 1 MiB) + records()",
        "krabka-batches-records",
    ),
    case(G_SEQ, "commitlog read(off, 1 MiB)", "commitlog-read-seq"),
    case(G_SEQ, "okaywal recovery scan", "okaywal-read-seq"),
    raw(
        G_SEQ,
        "raw read, 1 MiB, of krabka's segment files",
        "raw-read-seq",
    ),
    krabka(
        G_SEQ1,
        "krabka read(seq, 1 MiB worth)",
        "krabka-read-seq-single",
    ),
    case(G_SEQ1, "commitlog read(off, 1 MiB)", "commitlog-read-seq"),
    raw(
        G_SEQ1,
        "raw read, 1 MiB + CRC-32C per batch + a Bytes view per record, of these files",
        "raw-read-seq-views-single",
    ),
    krabka(G_RANDOM, "krabka read(seq, 1)", "krabka-read-random"),
    case(
        G_RANDOM,
        "krabka read(seq, 1), index_interval_bytes 1",
        "krabka-read-random-dense",
    ),
    case(
        G_RANDOM,
        "commitlog read(off, 1 record)",
        "commitlog-read-random",
    ),
    case(G_RANDOM, "okaywal read_at", "okaywal-read-random"),
    raw(
        G_RANDOM,
        "raw pread of the record's whole batch, position known",
        "raw-read-random-batch",
    ),
    case(
        G_RANDOM,
        "raw pread of the bare value (a file of values)",
        "raw-read-random",
    ),
    krabka(
        G_RANDOM1,
        "krabka read(seq, 1)",
        "krabka-read-random-single",
    ),
    case(
        G_RANDOM1,
        "krabka read(seq, 1), index_interval_bytes 1",
        "krabka-read-random-single-dense",
    ),
    case(
        G_RANDOM1,
        "commitlog read(off, 1 record)",
        "commitlog-read-random",
    ),
    raw(
        G_RANDOM1,
        "raw pread of the record's batch, position known",
        "raw-read-random-single",
    ),
    case(
        G_RANDOM1,
        "raw pread from the .index entry to the end of the record's batch",
        "raw-read-random-single-span",
    ),
    case(
        G_RANDOM1,
        "the same + CRC-32C of the record's batch",
        "raw-read-random-single-span-crc",
    ),
];

/// The targets of a case's cost columns: krabka's rows only (the others show their figures).
///
/// - An append makes one write call (the batch, or its pieces, in one `pwritev`) and no read,
///   and allocates almost nothing per record (its buffers are reused): at most 0.1 allocations
///   (0.25 with an fsync, whose group commit may allocate) and 0.1 × the value + 16 bytes.
/// - A sequential read makes at most 2 read calls per MiB (one per 1 MiB call; a chunk cut at
///   a batch boundary may take a second) and no write, and every byte it reads is covered by a
///   CRC-32C and delivered: at least 0.95 CRC bytes per byte read (a batch's first 21 bytes lie
///   outside its CRC; a re-read lowers it).
/// - A decoded read allocates at most once per record and the value's bytes + 128 (the read
///   buffer the records' values are views of, and the `Record` itself); whole batches at most
///   0.1 allocations per record (a buffer per call) and the value's bytes + 64.
/// - A point read makes one read call (the index entry's span to the end of the record's
///   batch) and at most 2.5 allocations (the returned `Vec` and the read buffer, plus one-offs
///   such as opening the segment) and the value's bytes + 128.
pub fn goals(id: &str) -> CostGoals {
    let append = CostGoals {
        read_calls_per_op: Some(0.0),
        write_calls_per_op: Some(1.0),
        allocs_per_record: Some(0.1),
        alloc_bytes_per_record: Some((0.1, 16.0)),
        ..CostGoals::default()
    };
    let seq = CostGoals {
        read_calls_per_mib: Some(2.0),
        write_calls_per_op: Some(0.0),
        allocs_per_record: Some(1.0),
        alloc_bytes_per_record: Some((1.0, 128.0)),
        crc_per_byte_read: Some(0.95),
        ..CostGoals::default()
    };
    match id {
        "krabka-append" | "krabka-batch" | "krabka-raw-batch" => append,
        "krabka-sync1"
        | "krabka-sync4"
        | "krabka-sync1-prealloc"
        | "krabka-sync1-grow"
        | "krabka-sync4-prealloc"
        | "krabka-sync4-grow"
        | "krabka-batch-sync" => CostGoals {
            allocs_per_record: Some(0.25),
            ..append
        },
        "krabka-batches-seq" => CostGoals {
            allocs_per_record: Some(0.1),
            alloc_bytes_per_record: Some((1.0, 64.0)),
            ..seq
        },
        "krabka-read-seq" | "krabka-read-seq-single" | "krabka-batches-records" => seq,
        "krabka-read-random"
        | "krabka-read-random-dense"
        | "krabka-read-random-single"
        | "krabka-read-random-single-dense" => CostGoals {
            read_calls_per_op: Some(1.0),
            write_calls_per_op: Some(0.0),
            allocs_per_record: Some(2.5),
            alloc_bytes_per_record: Some((1.0, 128.0)),
            ..CostGoals::default()
        },
        _ => CostGoals::default(),
    }
}
