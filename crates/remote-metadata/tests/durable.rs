#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `DurableRemoteLogMetadataManager`: state survives reopen and SIGKILL; corrupt or
//! inapplicable events are reported with their seq.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use RemoteLogSegmentState::*;
use krabka_protocol::Message;
use krabka_remote_metadata::{
    DurableOptions, DurableRemoteLogMetadataManager, MetadataError, RemoteLogMetadataManager,
};
use krabka_remote_storage::metadata::event::MetadataEvent;
use krabka_remote_storage::*;
use krabka_storage::{Log, Options};

fn tp() -> TopicIdPartition {
    TopicIdPartition::new(Uuid::from_u128(42), "meta", 0)
}

fn seg(start: u64) -> RemoteLogSegmentMetadata {
    RemoteLogSegmentMetadata::builder(RemoteLogSegmentId::generate(tp()), start, start + 9)
        .segment_size_in_bytes(100)
        .build()
        .unwrap()
}

fn to(id: &RemoteLogSegmentId, state: RemoteLogSegmentState) -> RemoteLogSegmentMetadataUpdate {
    RemoteLogSegmentMetadataUpdate::to_state(id.clone(), state, 1)
}

#[test]
fn reopen_rebuilds_every_state_and_drops_deleted_segments() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, c) = (seg(0), seg(10), seg(20));
    let expected = {
        let rlmm = DurableRemoteLogMetadataManager::open(dir.path()).unwrap();
        for m in [&a, &b, &c] {
            rlmm.add_remote_log_segment_metadata(m).unwrap();
        }
        let a_id = a.remote_log_segment_id();
        rlmm.update_remote_log_segment_metadata(&to(a_id, CopySegmentFinished))
            .unwrap();
        rlmm.update_remote_log_segment_metadata(&to(a_id, DeleteSegmentStarted))
            .unwrap();
        rlmm.update_remote_log_segment_metadata(&to(a_id, DeleteSegmentFinished))
            .unwrap();
        let update = RemoteLogSegmentMetadataUpdate::new(
            b.remote_log_segment_id().clone(),
            77,
            Some(CustomMetadata::new(b"v1".to_vec())),
            CopySegmentFinished,
            2,
        );
        rlmm.update_remote_log_segment_metadata(&update).unwrap();
        // A rejected event is not persisted.
        let rejected = rlmm.update_remote_log_segment_metadata(&to(
            c.remote_log_segment_id(),
            DeleteSegmentFinished,
        ));
        assert!(
            matches!(&rejected, Err(RemoteStorageError::InvalidStateTransition { segment, from: CopySegmentStarted, to: DeleteSegmentFinished })
                if segment == c.remote_log_segment_id()),
            "{rejected:?}"
        );
        rlmm.list_remote_log_segments(&tp()).unwrap()
    };
    let reopened = DurableRemoteLogMetadataManager::open(dir.path()).unwrap();
    assert_eq!(reopened.list_remote_log_segments(&tp()).unwrap(), expected);
    assert_eq!(expected.len(), 2);
    assert_eq!(
        reopened
            .segment_metadata(a.remote_log_segment_id())
            .unwrap(),
        None
    );
    let b_now = reopened
        .segment_metadata(b.remote_log_segment_id())
        .unwrap()
        .unwrap();
    assert_eq!(b_now.custom_metadata().unwrap().value().as_ref(), b"v1");
    assert_eq!(reopened.remote_log_size(&tp()).unwrap(), 100);
    assert_eq!(reopened.highest_remote_offset(&tp()).unwrap(), Some(19));
    // The dropped id stays dropped after a reopen.
    let readd = reopened.add_remote_log_segment_metadata(&a);
    assert!(
        matches!(&readd, Err(RemoteStorageError::InvalidArgument { message })
            if message.contains("already known")),
        "{readd:?}"
    );
}

fn open_err(dir: &std::path::Path) -> RemoteStorageError {
    match DurableRemoteLogMetadataManager::open(dir) {
        Ok(_) => panic!("open accepted a bad log"),
        Err(e) => e,
    }
}

#[test]
fn a_corrupt_event_fails_open_naming_its_seq() {
    let dir = tempfile::tempdir().unwrap();
    let log_dir = {
        let rlmm = DurableRemoteLogMetadataManager::open(dir.path()).unwrap();
        rlmm.add_remote_log_segment_metadata(&seg(0)).unwrap();
        rlmm.generation_dir()
    };
    {
        let log = Log::open(&log_dir, Options::default()).unwrap();
        let mut bytes = MetadataEvent::Add(seg(10)).encode();
        bytes[20] ^= 0xFF;
        // Seq 1 is the generation record, seq 2 the add.
        assert_eq!(log.append(&Message::new(bytes)).unwrap(), 3);
    }
    let err = open_err(dir.path());
    let msg = err.to_string();
    assert!(
        matches!(MetadataError::find(&err), Some(MetadataError::Log { path, seq: Some(3), .. })
            if path.starts_with(&log_dir) && path.extension().is_some_and(|e| e == "log")),
        "{err:?}"
    );
    assert!(msg.contains("seq 3") && msg.contains("checksum"), "{msg}");
}

#[test]
fn an_event_that_does_not_apply_on_replay_is_reported_not_dropped() {
    let dir = tempfile::tempdir().unwrap();
    {
        let log = Log::open(dir.path(), Options::default()).unwrap();
        let m = seg(0);
        log.append(&Message::new(MetadataEvent::Add(m.clone()).encode()))
            .unwrap();
        // Started -> DeleteFinished skips DeleteStarted.
        let bad = MetadataEvent::Update(to(m.remote_log_segment_id(), DeleteSegmentFinished));
        log.append(&Message::new(bad.encode())).unwrap();
    }
    let err = open_err(dir.path());
    let msg = err.to_string();
    assert!(
        msg.contains("seq 2") && msg.contains("does not apply"),
        "{msg}"
    );
}

// ---------------------------------------------------------------------------------------------
// SIGKILL: a child process writes events as fast as fsync allows and prints an ack after each
// returned Ok; the parent kills it mid-stream, reopens, and checks every acked event.

const CHILD_DIR: &str = "KRABKA_RLMM_KILL_CHILD_DIR";
const CHILD_ROUND: &str = "KRABKA_RLMM_KILL_CHILD_ROUND";

/// Not a test of its own: the body `sigkill_mid_writes_keeps_every_acknowledged_event`
/// re-executes in a child process; without the environment variable it returns at once.
#[test]
fn kill_child_writer() {
    let Some(dir) = std::env::var_os(CHILD_DIR) else {
        return;
    };
    let round: u64 = std::env::var(CHILD_ROUND).unwrap().parse().unwrap();
    let rlmm = DurableRemoteLogMetadataManager::open(dir).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut out = std::io::stdout().lock();
    for i in 0..5_000u64 {
        if Instant::now() > deadline {
            break;
        }
        let m = seg((round * 10_000 + i) * 10);
        let id = m.remote_log_segment_id().id();
        rlmm.add_remote_log_segment_metadata(&m).unwrap();
        writeln!(out, "ack add {id}").unwrap();
        out.flush().unwrap();
        if i % 2 == 0 {
            rlmm.update_remote_log_segment_metadata(&to(
                m.remote_log_segment_id(),
                CopySegmentFinished,
            ))
            .unwrap();
            writeln!(out, "ack fin {id}").unwrap();
            out.flush().unwrap();
        }
    }
}

#[test]
fn sigkill_mid_writes_keeps_every_acknowledged_event() {
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut acked_adds = BTreeSet::new();
    let mut acked_fins = BTreeSet::new();
    for round in 0..3u64 {
        let mut child = Command::new(&exe)
            .args([
                "kill_child_writer",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_DIR, dir.path())
            .env(CHILD_ROUND, round.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let kill_after = 15 + round * 20;
        let started = Instant::now();
        let mut seen = 0;
        let mut record = |line: &str| {
            // The harness may print its "test ... " prefix on the first ack's line.
            let Some(at) = line.find("ack ") else {
                return false;
            };
            let mut parts = line[at..].split_whitespace();
            match (parts.next(), parts.next(), parts.next()) {
                (Some("ack"), Some("add"), Some(id)) => {
                    acked_adds.insert(id.parse::<Uuid>().unwrap());
                    true
                }
                (Some("ack"), Some("fin"), Some(id)) => {
                    acked_fins.insert(id.parse::<Uuid>().unwrap());
                    true
                }
                _ => false,
            }
        };
        let mut other = Vec::new();
        for line in lines.by_ref() {
            let line = line.unwrap();
            if record(&line) {
                seen += 1;
            } else if other.len() < 20 {
                other.push(line);
            }
            if seen >= kill_after {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "child too slow"
            );
        }
        assert_eq!(
            seen, kill_after,
            "child exited before the kill (round {round}); it printed {other:?}"
        );
        child.kill().unwrap(); // SIGKILL
        // Acks already in the pipe were acknowledged before the kill: they count too.
        for line in lines {
            record(&line.unwrap());
        }
        let status = child.wait().unwrap();
        assert!(!status.success(), "child was not killed");

        let rlmm = DurableRemoteLogMetadataManager::open(dir.path()).unwrap();
        let live: BTreeMap<Uuid, RemoteLogSegmentMetadata> = rlmm
            .list_remote_log_segments(&tp())
            .unwrap()
            .into_iter()
            .map(|m| (m.remote_log_segment_id().id(), m))
            .collect();
        for id in &acked_adds {
            assert!(
                live.contains_key(id),
                "acknowledged add {id} lost (round {round})"
            );
        }
        for id in &acked_fins {
            assert_eq!(
                live[id].state(),
                CopySegmentFinished,
                "acknowledged fin {id} lost"
            );
        }
        // At most the one event in flight at each kill so far is there without an ack.
        let in_flight = usize::try_from(round).unwrap() + 1;
        let unacked: Vec<_> = live
            .iter()
            .filter(|(id, _)| !acked_adds.contains(id))
            .map(|(_, m)| (m.start_offset(), m.state()))
            .collect();
        assert!(
            unacked.len() <= in_flight,
            "round {round}: unacknowledged adds present: {unacked:?}"
        );
        let extra_fins = live
            .values()
            .filter(|m| m.state() == CopySegmentFinished)
            .count()
            - acked_fins.len();
        assert!(extra_fins <= in_flight);
    }
}

#[test]
fn not_ready_is_distinct_from_nothing_there_and_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let a = seg(0);
    {
        let rlmm = DurableRemoteLogMetadataManager::open(dir.path()).unwrap();
        rlmm.add_remote_log_segment_metadata(&a).unwrap();
        let err = rlmm.segment_for_offset_ready(&tp(), 5).unwrap_err();
        assert!(
            matches!(err, RemoteStorageError::MetadataNotReady { .. }),
            "{err:?}"
        );
        assert_eq!(rlmm.segment_for_offset_ready(&tp(), 10).unwrap(), None);
        assert_eq!(rlmm.remote_log_segment_metadata(&tp(), 5).unwrap(), None);
    }
    let rlmm = DurableRemoteLogMetadataManager::open(dir.path()).unwrap();
    assert!(matches!(
        rlmm.segment_for_offset_ready(&tp(), 9),
        Err(RemoteStorageError::MetadataNotReady { .. })
    ));
    let done = rlmm
        .update_remote_log_segment_metadata(&to(a.remote_log_segment_id(), CopySegmentFinished))
        .unwrap();
    assert_eq!(rlmm.segment_for_offset_ready(&tp(), 9).unwrap(), Some(done));
}

/// Many segments through their whole lifecycle: the log, the replay and the dropped ids stay
/// bounded by the live segments instead of growing with every event ever made.
#[test]
fn the_log_is_compacted_when_dead_events_dominate() {
    let dir = tempfile::tempdir().unwrap();
    let opts = DurableOptions::default().compact_min_events(Some(32));
    let keep = {
        let rlmm = DurableRemoteLogMetadataManager::open_with(dir.path(), opts.clone()).unwrap();
        let mut keep = Vec::new();
        for i in 0..300u64 {
            let m = seg(i * 10);
            rlmm.add_remote_log_segment_metadata(&m).unwrap();
            let id = m.remote_log_segment_id();
            rlmm.update_remote_log_segment_metadata(&to(id, CopySegmentFinished))
                .unwrap();
            if i % 50 == 0 {
                keep.push(id.clone());
                continue;
            }
            rlmm.update_remote_log_segment_metadata(&to(id, DeleteSegmentStarted))
                .unwrap();
            rlmm.update_remote_log_segment_metadata(&to(id, DeleteSegmentFinished))
                .unwrap();
            let live = rlmm.list_remote_log_segments(&tp()).unwrap().len() as u64;
            assert!(
                rlmm.events_in_generation() <= 2 * live + 32,
                "{} events for {live} live segments",
                rlmm.events_in_generation()
            );
            assert!(rlmm.dropped_ids_remembered() <= 32);
        }
        assert!(rlmm.generation() > 10, "generation {}", rlmm.generation());
        keep
    };
    let entries: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("gen-"))
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    let rlmm = DurableRemoteLogMetadataManager::open_with(dir.path(), opts).unwrap();
    let ids: Vec<_> = rlmm
        .list_remote_log_segments(&tp())
        .unwrap()
        .iter()
        .map(|m| m.remote_log_segment_id().clone())
        .collect();
    assert_eq!(ids, keep);
    assert!(rlmm.events_in_generation() <= 2 * keep.len() as u64 + 32);
}
