#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The durable metadata store never guesses: damage to its generation log or its `CURRENT`
//! pointer fails the open with a typed error naming the file (changing nothing), except a
//! genuinely torn last event, which is cut and reported. Never silently fewer segments. The
//! read-only open meets every damage of the matrix as the open does, changing nothing.

use std::fs;
use std::path::{Path, PathBuf};

use RemoteLogSegmentState::*;
use krabka_remote_metadata::{
    DurableOptions, DurableRemoteLogMetadataManager, MetadataError,
    ReadOnlyRemoteLogMetadataManager, RemoteLogMetadataManager,
};
use krabka_remote_storage::*;
use krabka_storage::segment::{dump_batches, read_segment_file, segment_file_name};
use krabka_storage::testkit;

fn tp() -> TopicIdPartition {
    TopicIdPartition::new(Uuid::from_u128(77), "integrity", 0)
}

fn seg(start: u64) -> RemoteLogSegmentMetadata {
    RemoteLogSegmentMetadata::builder(RemoteLogSegmentId::generate(tp()), start, start + 9)
        .segment_size_in_bytes(100)
        .build()
        .unwrap()
}

fn to(
    m: &RemoteLogSegmentMetadata,
    state: RemoteLogSegmentState,
) -> RemoteLogSegmentMetadataUpdate {
    RemoteLogSegmentMetadataUpdate::to_state(m.remote_log_segment_id().clone(), state, 1)
}

fn manual() -> DurableOptions {
    DurableOptions::default().compact_min_events(None)
}

fn open(dir: &Path) -> Result<DurableRemoteLogMetadataManager, RemoteStorageError> {
    DurableRemoteLogMetadataManager::open_with(dir, manual())
}

fn open_err(dir: &Path) -> RemoteStorageError {
    match open(dir) {
        Ok(m) => panic!(
            "open accepted damaged metadata and lists {:?}",
            m.list_remote_log_segments(&tp()).unwrap().len()
        ),
        Err(e) => e,
    }
}

fn gen_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("gen-"))
        .collect();
    names.sort();
    names
}

/// What a filled metadata directory recorded.
struct Filled {
    /// Every segment, after the last event.
    all: Vec<RemoteLogSegmentMetadata>,
    /// The segments before the last event (an add): what is left when it is torn.
    before_last: Vec<RemoteLogSegmentMetadata>,
    /// The current generation's directory.
    generation_dir: PathBuf,
}

impl Filled {
    fn log(&self) -> PathBuf {
        self.generation_dir.join(segment_file_name(1, "log"))
    }
}

/// Segments in every state, a compaction (so the current generation starts with a snapshot),
/// then more adds and updates; the last event is an add.
fn fill(dir: &Path) -> Filled {
    let rlmm = open(dir).unwrap();
    let mut n = 0;
    let mut add = |rlmm: &DurableRemoteLogMetadataManager, states: &[RemoteLogSegmentState]| {
        let m = seg(n * 10);
        n += 1;
        rlmm.add_remote_log_segment_metadata(&m).unwrap();
        for s in states {
            rlmm.update_remote_log_segment_metadata(&to(&m, *s))
                .unwrap();
        }
    };
    for round in 0..2 {
        add(&rlmm, &[]);
        add(&rlmm, &[CopySegmentFinished]);
        add(&rlmm, &[CopySegmentFinished, DeleteSegmentStarted]);
        add(
            &rlmm,
            &[
                CopySegmentFinished,
                DeleteSegmentStarted,
                DeleteSegmentFinished,
            ],
        );
        if round == 0 {
            rlmm.compact().unwrap();
        }
    }
    add(&rlmm, &[CopySegmentFinished]);
    let before_last = rlmm.list_remote_log_segments(&tp()).unwrap();
    add(&rlmm, &[]);
    let all = rlmm.list_remote_log_segments(&tp()).unwrap();
    assert_eq!(rlmm.generation(), 2);
    assert_eq!(all.len(), before_last.len() + 1);
    let generation_dir = rlmm.generation_dir();
    // The manager ends as a crash leaves it: not closed, so its log has no recovery point and
    // a torn last event is possible (see `a_closed_manager_refuses_a_truncated_last_event`).
    drop(rlmm);
    fs::remove_file(generation_dir.join(krabka_storage::RECOVERY_POINT_FILE_NAME)).unwrap();
    Filled {
        all,
        before_last,
        generation_dir,
    }
}

fn flip(path: &Path, at: usize) {
    testkit::xor_byte(path, at as u64, 0x1).unwrap();
}

fn truncate(path: &Path, len: u64) {
    testkit::set_len(path, len).unwrap();
}

/// Start of the log's last frame and its length.
fn last_frame(log: &Path) -> (u64, u64) {
    let frame = dump_batches(read_segment_file(log).unwrap())
        .last()
        .unwrap();
    (frame.position, frame.batch_len)
}

fn assert_names(err: &RemoteStorageError, path: &Path) {
    let shown = err.to_string();
    assert!(
        shown.contains(&path.display().to_string()),
        "the error does not name {}: {shown}",
        path.display()
    );
}

#[test]
fn flipped_byte_in_generation_log_fails_open_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let filled = fill(dir.path());
    let log = filled.log();
    let len = fs::metadata(&log).unwrap().len() as usize;
    flip(&log, len / 2);
    let err = open_err(dir.path());
    assert!(
        matches!(MetadataError::find(&err), Some(MetadataError::Log { path, position: Some(_), .. }) if *path == log),
        "{err:?}"
    );
    assert_names(&err, &log);
    // Nothing was cut: undoing the flip gives every segment back.
    assert_eq!(fs::metadata(&log).unwrap().len() as usize, len);
    flip(&log, len / 2);
    let rlmm = open(dir.path()).unwrap();
    assert_eq!(rlmm.list_remote_log_segments(&tp()).unwrap(), filled.all);
    assert!(rlmm.torn_event_cut().is_none());
}

#[test]
fn flipped_byte_in_the_last_event_is_not_taken_for_a_torn_write() {
    let dir = tempfile::tempdir().unwrap();
    let filled = fill(dir.path());
    let log = filled.log();
    let len = fs::metadata(&log).unwrap().len() as usize;
    flip(&log, len - 1);
    let err = open_err(dir.path());
    assert!(
        matches!(MetadataError::find(&err), Some(MetadataError::Log { path, .. }) if *path == log),
        "{err:?}"
    );
    assert_eq!(fs::metadata(&log).unwrap().len() as usize, len);
}

#[test]
fn a_torn_last_event_is_cut_saved_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let filled = fill(dir.path());
    let log = filled.log();
    let (position, frame_len) = last_frame(&log);
    truncate(&log, position + frame_len / 2);
    let rlmm = open(dir.path()).unwrap();
    assert_eq!(
        rlmm.list_remote_log_segments(&tp()).unwrap(),
        filled.before_last
    );
    let cut = rlmm.torn_event_cut().expect("the cut is reported");
    assert_eq!(cut.path, log);
    assert_eq!(cut.position, position);
    assert_eq!(cut.bytes, frame_len / 2);
    let saved = cut.saved_to.as_ref().expect("the cut bytes are saved");
    assert_eq!(fs::metadata(saved).unwrap().len(), frame_len / 2);
    drop(rlmm);
    // A second open finds an intact log.
    let rlmm = open(dir.path()).unwrap();
    assert!(rlmm.torn_event_cut().is_none());
    assert_eq!(
        rlmm.list_remote_log_segments(&tp()).unwrap(),
        filled.before_last
    );
}

#[test]
fn emptied_generation_log_fails_open_instead_of_forgetting_segments() {
    for delete in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let filled = fill(dir.path());
        let log = filled.log();
        if delete {
            fs::remove_file(&log).unwrap();
        } else {
            truncate(&log, 0);
        }
        let err = open_err(dir.path());
        assert!(
            matches!(MetadataError::find(&err), Some(MetadataError::Log { path, .. }) if *path == log),
            "delete {delete}: {err:?}"
        );
        assert_names(&err, &log);
        // Still refused on the next open: the empty log was not adopted.
        let again = open_err(dir.path());
        assert!(matches!(
            MetadataError::find(&again),
            Some(MetadataError::Log { .. })
        ));
    }
}

#[test]
fn missing_current_fails_open_and_keeps_generations() {
    let dir = tempfile::tempdir().unwrap();
    let filled = fill(dir.path());
    let gens = gen_names(dir.path());
    let current = dir.path().join("CURRENT");
    let text = fs::read_to_string(&current).unwrap();
    fs::remove_file(&current).unwrap();
    let err = open_err(dir.path());
    assert!(
        matches!(MetadataError::find(&err), Some(MetadataError::Pointer { path, .. }) if *path == current),
        "{err:?}"
    );
    assert_names(&err, &current);
    assert_names(&err, &filled.generation_dir);
    assert_eq!(gen_names(dir.path()), gens, "open deleted generations");
    // Restoring the pointer gives every segment back.
    fs::write(&current, text).unwrap();
    let rlmm = open(dir.path()).unwrap();
    assert_eq!(rlmm.list_remote_log_segments(&tp()).unwrap(), filled.all);
}

#[test]
fn current_naming_a_missing_generation_fails_open_and_keeps_generations() {
    let dir = tempfile::tempdir().unwrap();
    let filled = fill(dir.path());
    let gens = gen_names(dir.path());
    fs::write(dir.path().join("CURRENT"), "5 v2\n").unwrap();
    let err = open_err(dir.path());
    assert!(
        matches!(
            MetadataError::find(&err),
            Some(MetadataError::Pointer { .. })
        ),
        "{err:?}"
    );
    assert_names(&err, &dir.path().join("CURRENT"));
    assert_names(&err, &filled.generation_dir);
    assert_eq!(gen_names(dir.path()), gens);
}

#[test]
fn a_generation_it_cannot_account_for_fails_open_and_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let filled = fill(dir.path());
    for stray in [
        "gen-00000000000000000009",
        "gen-old",
        "gen-00000000000000000000",
    ] {
        let path = dir.path().join(stray);
        fs::create_dir(&path).unwrap();
        let err = open_err(dir.path());
        assert!(
            matches!(MetadataError::find(&err), Some(MetadataError::Generation { path: p, .. }) if *p == path),
            "{stray}: {err:?}"
        );
        assert!(path.is_dir(), "{stray} was removed");
        fs::remove_dir(&path).unwrap();
    }
    // A file named like a generation is not one either.
    let path = dir.path().join("gen-00000000000000000003");
    fs::write(&path, b"x").unwrap();
    let err = open_err(dir.path());
    assert!(
        matches!(
            MetadataError::find(&err),
            Some(MetadataError::Generation { .. })
        ),
        "{err:?}"
    );
    assert!(path.is_file());
    fs::remove_file(&path).unwrap();
    let rlmm = open(dir.path()).unwrap();
    assert_eq!(rlmm.list_remote_log_segments(&tp()).unwrap(), filled.all);
}

#[test]
fn a_newer_generation_that_was_once_current_is_not_taken_for_a_leftover() {
    // CURRENT reverted to the previous generation while it was still on disk: the newer one
    // holds adds after its snapshot, so it was current and must not be removed.
    let dir = tempfile::tempdir().unwrap();
    let filled = fill(dir.path());
    let old = dir.path().join("gen-00000000000000000001");
    fs::create_dir(&old).unwrap();
    {
        let log = krabka_storage::Log::open(&old, krabka_storage::Options::default()).unwrap();
        log.append(&krabka_protocol::Message::new("1").with_key("krabka-rlmm-generation"))
            .unwrap();
    }
    fs::write(dir.path().join("CURRENT"), "1 v2\n").unwrap();
    let err = open_err(dir.path());
    assert!(
        matches!(MetadataError::find(&err), Some(MetadataError::Generation { path, .. }) if *path == filled.generation_dir),
        "{err:?}"
    );
    assert!(filled.log().is_file());
}

#[test]
fn a_brand_new_directory_opens_empty_and_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("new");
    {
        let rlmm = open(&path).unwrap();
        assert_eq!(rlmm.generation(), 1);
        assert!(rlmm.list_remote_log_segments(&tp()).unwrap().is_empty());
    }
    let rlmm = open(&path).unwrap();
    assert_eq!(rlmm.events_in_generation(), 0);
    assert_eq!(fs::read_to_string(path.join("CURRENT")).unwrap(), "1 v2\n");
}

#[test]
fn an_interrupted_first_open_is_finished() {
    // A first open that crashed after creating generation 1 but before CURRENT.
    let dir = tempfile::tempdir().unwrap();
    drop(open(dir.path()).unwrap());
    fs::remove_file(dir.path().join("CURRENT")).unwrap();
    let rlmm = open(dir.path()).unwrap();
    assert_eq!(rlmm.generation(), 1);
    let m = seg(0);
    rlmm.add_remote_log_segment_metadata(&m).unwrap();
    drop(rlmm);
    assert_eq!(
        open(dir.path())
            .unwrap()
            .list_remote_log_segments(&tp())
            .unwrap(),
        vec![m]
    );
}

// ---------------------------------------------------------------------------------------------
// The corruption matrix: every file of the metadata directory × every damage.

#[derive(Clone, Copy, Debug)]
enum Damage {
    FlipStart,
    FlipMiddle,
    FlipEnd,
    TruncateMidFrame,
    TruncateToZero,
    Delete,
    ReplaceWithDirectory,
    StrayFile,
}

const DAMAGES: [Damage; 8] = [
    Damage::FlipStart,
    Damage::FlipMiddle,
    Damage::FlipEnd,
    Damage::TruncateMidFrame,
    Damage::TruncateToZero,
    Damage::Delete,
    Damage::ReplaceWithDirectory,
    Damage::StrayFile,
];

#[derive(Clone, Copy, Debug)]
enum Target {
    Current,
    GenerationLog,
    OffsetIndex,
    TimeIndex,
    GenerationDir,
}

const TARGETS: [Target; 5] = [
    Target::Current,
    Target::GenerationLog,
    Target::OffsetIndex,
    Target::TimeIndex,
    Target::GenerationDir,
];

/// What open must do after a damage.
enum Expect {
    /// Fail with a typed error whose message names this path.
    ErrorNaming(PathBuf),
    /// Fail naming this path, or open with every recorded segment.
    ErrorNamingOrAll(PathBuf),
    /// Open with every segment but the last event's, reporting the cut of this file.
    TornLastEvent(PathBuf),
}

fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let dest = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &dest);
        } else {
            fs::copy(entry.path(), dest).unwrap();
        }
    }
}

/// Applies `damage` to `target` in `dir`; `None` when it does not apply (the file is absent).
fn damage(dir: &Path, filled: &Filled, target: Target, damage: Damage) -> Option<Expect> {
    let gen_dir = dir.join(filled.generation_dir.file_name().unwrap());
    let path = match target {
        Target::Current => dir.join("CURRENT"),
        Target::GenerationLog => gen_dir.join(segment_file_name(1, "log")),
        Target::OffsetIndex => gen_dir.join(segment_file_name(1, "index")),
        Target::TimeIndex => gen_dir.join(segment_file_name(1, "timeindex")),
        Target::GenerationDir => gen_dir.clone(),
    };
    let is_file = path.is_file();
    let len = fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    use Damage::*;
    match damage {
        FlipStart | FlipMiddle | FlipEnd | TruncateMidFrame | TruncateToZero
            if !is_file || len == 0 =>
        {
            return None;
        }
        FlipStart => flip(&path, 0),
        FlipMiddle => flip(&path, len as usize / 2),
        FlipEnd => flip(&path, len as usize - 1),
        TruncateMidFrame if matches!(target, Target::GenerationLog) => {
            let (position, frame_len) = last_frame(&path);
            truncate(&path, position + frame_len / 2);
            return Some(Expect::TornLastEvent(path));
        }
        TruncateMidFrame => truncate(&path, len / 2),
        TruncateToZero => truncate(&path, 0),
        Delete if is_file => fs::remove_file(&path).unwrap(),
        Delete if path.is_dir() => fs::remove_dir_all(&path).unwrap(),
        Delete => return None,
        ReplaceWithDirectory if path.is_dir() => {
            // The generation directory becomes a file.
            fs::remove_dir_all(&path).unwrap();
            fs::write(&path, b"not a directory").unwrap();
        }
        ReplaceWithDirectory => {
            if is_file {
                fs::remove_file(&path).unwrap();
            }
            fs::create_dir(&path).unwrap();
            fs::write(path.join("x"), b"x").unwrap();
        }
        StrayFile => {
            let (stray, contents): (PathBuf, &[u8]) = match target {
                // The manager's own temporary pointer name: an unfinished switch.
                Target::Current => (dir.join("CURRENT.tmp"), b"9 v2\n"),
                // A segment file that does not follow the log's last seq.
                Target::GenerationLog => (gen_dir.join(segment_file_name(500, "log")), b"junk"),
                Target::OffsetIndex | Target::TimeIndex => (path.clone(), b"junk"),
                // Not named like anything of the manager's.
                Target::GenerationDir => (dir.join("notes.txt"), b"notes"),
            };
            fs::write(&stray, contents).unwrap();
            return Some(Expect::ErrorNamingOrAll(stray));
        }
    }
    Some(match (target, damage) {
        // Indexes of the active segment are rebuilt by a scan: open may ignore their damage.
        (Target::OffsetIndex | Target::TimeIndex, _) => Expect::ErrorNamingOrAll(path),
        _ => Expect::ErrorNaming(path),
    })
}

#[test]
fn metadata_corruption_matrix_never_loses_segments_silently() {
    let template = tempfile::tempdir().unwrap();
    let filled = fill(template.path());
    let mut cases = 0;
    let mut failures = Vec::new();
    for target in TARGETS {
        for d in DAMAGES {
            let case = tempfile::tempdir().unwrap();
            let dir = case.path().join("metadata");
            copy_tree(template.path(), &dir);
            let Some(expect) = damage(&dir, &filled, target, d) else {
                continue;
            };
            cases += 1;
            let gens = gen_names(&dir);
            let what = format!("{target:?} × {d:?}");
            let bytes = tree(&dir);
            let read_only = DurableRemoteLogMetadataManager::open_read_only(&dir);
            if tree(&dir) != bytes {
                failures.push(format!("{what}: the read-only open changed the directory"));
            }
            let outcome = open(&dir);
            if let Some(problem) = read_only_disagrees(&read_only, &outcome) {
                failures.push(format!("{what}: read-only open: {problem}"));
            }
            match &outcome {
                Ok(m) => println!(
                    "{what}: opened, {} segments, cut {:?}",
                    m.list_remote_log_segments(&tp()).unwrap().len(),
                    m.torn_event_cut().map(|c| c.position)
                ),
                Err(e) => println!("{what}: {e}"),
            }
            let problem = match (&expect, outcome) {
                (Expect::ErrorNaming(p) | Expect::ErrorNamingOrAll(p), Err(e)) => {
                    let typed = MetadataError::find(&e).is_some()
                        || matches!(e, RemoteStorageError::Io { .. });
                    if !typed {
                        Some(format!("untyped error {e:?}"))
                    } else if !e.to_string().contains(&p.display().to_string()) {
                        Some(format!("error does not name {}: {e}", p.display()))
                    } else if gen_names(&dir) != gens {
                        Some(format!("generations changed by a failed open: {e}"))
                    } else {
                        None
                    }
                }
                (Expect::ErrorNaming(_), Ok(m)) => Some(format!(
                    "opened with {} segments (recorded {})",
                    m.list_remote_log_segments(&tp()).unwrap().len(),
                    filled.all.len()
                )),
                (Expect::ErrorNamingOrAll(_), Ok(m)) => {
                    let got = m.list_remote_log_segments(&tp()).unwrap();
                    (got != filled.all || m.torn_event_cut().is_some()).then(|| {
                        format!(
                            "opened with {} segments, recorded {}",
                            got.len(),
                            filled.all.len()
                        )
                    })
                }
                (Expect::TornLastEvent(p), Ok(m)) => {
                    let got = m.list_remote_log_segments(&tp()).unwrap();
                    if got != filled.before_last {
                        Some(format!("opened with {} segments", got.len()))
                    } else if m.torn_event_cut().map(|c| &c.path) != Some(p) {
                        Some(format!("cut not reported: {:?}", m.torn_event_cut()))
                    } else {
                        None
                    }
                }
                (Expect::TornLastEvent(_), Err(e)) => Some(format!("torn last event refused: {e}")),
            };
            if let Some(problem) = problem {
                failures.push(format!("{what}: {problem}"));
            }
        }
    }
    println!("metadata corruption matrix: {cases} cases");
    assert!(cases >= 20, "only {cases} cases");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every file and directory under `dir`, recursively: a file's bytes, `None` for a directory.
fn tree(dir: &Path) -> std::collections::BTreeMap<PathBuf, Option<Vec<u8>>> {
    let mut out = std::collections::BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for entry in fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                out.insert(path.clone(), None);
                pending.push(path);
            } else {
                out.insert(path.clone(), Some(fs::read(&path).unwrap()));
            }
        }
    }
    out
}

/// How the read-only open's outcome differs from the owner's open after it (which fails with
/// the same typed error about the same file, or lists the same segments and cut the torn event
/// the read-only open found), if it does.
fn read_only_disagrees(
    read_only: &Result<ReadOnlyRemoteLogMetadataManager, RemoteStorageError>,
    owner: &Result<DurableRemoteLogMetadataManager, RemoteStorageError>,
) -> Option<String> {
    let typed = |e: &RemoteStorageError| {
        MetadataError::find(e).map(|m| {
            let variant = format!("{m:?}");
            let variant = variant.split([' ', '{']).next().unwrap_or("").to_owned();
            (variant, m.path().to_path_buf())
        })
    };
    match (read_only, owner) {
        (Ok(ro), Ok(m)) => {
            let (a, b) = (
                ro.list_remote_log_segments(&tp()).unwrap(),
                m.list_remote_log_segments(&tp()).unwrap(),
            );
            let found = ro.torn_event().map(|t| (t.path.clone(), t.position));
            let cut = m.torn_event_cut().map(|c| (c.path.clone(), c.position));
            if a != b {
                Some(format!("lists {} segments, the open {}", a.len(), b.len()))
            } else if found != cut {
                Some(format!("found torn event {found:?}, the open cut {cut:?}"))
            } else {
                None
            }
        }
        (Err(a), Err(b)) => {
            (typed(a) != typed(b)).then(|| format!("failed with {a}, the open with {b}"))
        }
        (Ok(_), Err(b)) => Some(format!("succeeded, the open failed with {b}")),
        (Err(a), Ok(_)) => Some(format!("failed with {a}, the open succeeded")),
    }
}

/// Opens a manager on `dir`, adds three finished segments, and returns them with the current
/// generation's `.log` (the manager is gone when this returns: closed or dropped).
fn add_then(
    dir: &Path,
    end: impl FnOnce(DurableRemoteLogMetadataManager),
) -> (Vec<RemoteLogSegmentMetadata>, PathBuf) {
    let rlmm = open(dir).unwrap();
    for start in [0, 10, 20] {
        let m = seg(start);
        rlmm.add_remote_log_segment_metadata(&m).unwrap();
        rlmm.update_remote_log_segment_metadata(&to(&m, CopySegmentFinished))
            .unwrap();
    }
    let all = rlmm.list_remote_log_segments(&tp()).unwrap();
    let log = rlmm.generation_dir().join(segment_file_name(1, "log"));
    end(rlmm);
    (all, log)
}

/// A closed (or dropped) manager's log records its end: losing its last, synced and
/// acknowledged event afterwards is damage that fails the open naming the file, not a torn
/// write to cut. Undoing the damage gives every segment back.
#[test]
fn a_closed_manager_refuses_a_truncated_last_event() {
    type End = fn(DurableRemoteLogMetadataManager);
    let ends: [(&str, End); 2] = [("close", |m| m.close().unwrap()), ("drop", |m| drop(m))];
    for (how, end) in ends {
        let dir = tempfile::tempdir().unwrap();
        let (all, log) = add_then(dir.path(), end);
        let bytes = fs::read(&log).unwrap();
        let len = bytes.len() as u64;
        truncate(&log, len - 10);
        let err = open_err(dir.path());
        assert!(
            matches!(MetadataError::find(&err), Some(MetadataError::Log { path, .. }) if *path == log),
            "{how}: {err:?}"
        );
        assert_names(&err, &log);
        // Nothing was cut or moved aside.
        assert_eq!(fs::metadata(&log).unwrap().len(), len - 10, "{how}");
        fs::write(&log, &bytes).unwrap();
        let rlmm = open(dir.path()).unwrap();
        assert!(rlmm.torn_event_cut().is_none(), "{how}");
        assert_eq!(rlmm.list_remote_log_segments(&tp()).unwrap(), all, "{how}");
    }
}

/// Compaction closes the generation it supersedes and the manager's close covers the new one:
/// a truncated last event of the compacted generation is refused too.
#[test]
fn a_closed_manager_refuses_a_truncated_event_after_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let (_, old_log) = add_then(dir.path(), |m| {
        m.compact().unwrap();
        m.close().unwrap();
    });
    assert!(!old_log.exists(), "the superseded generation is removed");
    let rlmm = open(dir.path()).unwrap();
    let all = rlmm.list_remote_log_segments(&tp()).unwrap();
    assert_eq!(all.len(), 3);
    let log = rlmm.generation_dir().join(segment_file_name(1, "log"));
    rlmm.close().unwrap();
    let len = fs::metadata(&log).unwrap().len();
    truncate(&log, len - 10);
    let err = open_err(dir.path());
    assert!(
        matches!(MetadataError::find(&err), Some(MetadataError::Log { path, .. }) if *path == log),
        "{err:?}"
    );
}
