//! Running out of file descriptors: a child process (this test binary again, under
//! `ulimit -n 64`) opens partitions into a service until the limit; the error is typed and
//! names the limit, and afterwards every log opens strictly with every record.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod service_util;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use krabka_remote_storage::RemoteStorageManager;
use krabka_storage::{Log, Options, RecoveryMode};
use krabka_tiering::{Error, ServiceConfig, TieredLog, TieringConfig, TieringService};
use service_util::{World, tp, value, wait_until};

const CHILD_ENV: &str = "KRABKA_TEST_FD_CHILD";
const LIMIT: u64 = 64;
const RECORDS: u64 = 40;

#[test]
fn running_out_of_file_descriptors_is_a_typed_error_naming_the_limit_and_damages_nothing() {
    if let Some(dir) = std::env::var_os(CHILD_ENV) {
        child(Path::new(&dir));
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -n {LIMIT} && exec \"$0\" --exact \
             running_out_of_file_descriptors_is_a_typed_error_naming_the_limit_and_damages_nothing \
             --nocapture --test-threads=1"
        ))
        .arg(exe)
        .env(CHILD_ENV, dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child failed:\n{stdout}\n{stderr}");
    let line = stdout
        .lines()
        .find(|l| l.contains("CHILD-OK"))
        .unwrap_or_else(|| panic!("no verdict:\n{stdout}\n{stderr}"));
    let opened: usize = line
        .split("opened=")
        .nth(1)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(opened >= 3, "{line}");
    // Every partition's local log opens strictly, with every record it acknowledged.
    for i in 0..opened as i32 {
        let opts = Options {
            recovery: RecoveryMode::Strict,
            ..service_util::options(300)
        };
        let log = Log::open(dir.path().join(format!("p{i}")), opts).unwrap();
        assert_eq!(log.last_seq(), RECORDS, "partition {i}");
        let records = log.read(1, RECORDS as usize).unwrap();
        for r in &records {
            assert_eq!(r.message.value.as_ref(), value(i, r.seq).as_bytes());
        }
        assert_eq!(records.len() as u64, RECORDS);
    }
}

/// Opens partitions until the descriptors run out, then checks the service still tiers the
/// ones it has, and prints `CHILD-OK opened=N`.
fn child(dir: &Path) {
    let world = World {
        dir: tempfile::tempdir_in(dir).unwrap(),
        fs: Arc::new(krabka_remote_fs::FsRemoteStorage::new(dir.join("remote")).unwrap()),
        rlmm: Arc::new(krabka_tiering::metadata::InMemoryRemoteLogMetadataManager::new()),
    };
    let svc = TieringService::new(ServiceConfig {
        round_interval: Duration::from_millis(20),
        ..ServiceConfig::default()
    })
    .unwrap();
    let rsm: Arc<dyn RemoteStorageManager> = Arc::new(svc.instrument(world.fs.clone()));
    let config = TieringConfig {
        local_retention_bytes: None,
        ..service_util::config()
    };
    let mut logs = Vec::new();
    let mut failure = None;
    for i in 0..200 {
        let opened = TieredLog::open(
            dir.join(format!("p{i}")),
            service_util::options(300),
            rsm.clone(),
            world.rlmm.clone(),
            tp(i),
            config.clone(),
        )
        .and_then(|log| {
            let msgs: Vec<_> = (1..=RECORDS)
                .map(|s| krabka_protocol::Message::new(value(i, s)))
                .collect();
            log.append_batch(&msgs)?;
            Ok(log)
        });
        match opened {
            Ok(log) => {
                let log = Arc::new(log);
                svc.add(log.clone()).unwrap();
                logs.push(log);
            }
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    let failure = failure.expect("64 descriptors never ran out");
    let text = failure.to_string();
    assert!(
        matches!(
            failure,
            Error::TooManyOpenFiles {
                limit: Some(LIMIT),
                ..
            }
        ),
        "{failure:?}"
    );
    assert!(
        text.contains(&LIMIT.to_string()) && text.contains("ulimit"),
        "{text}"
    );
    // The partition that failed to open is dropped; half of the others are removed to free
    // descriptors for the copies, and the rest tier completely.
    let opened = logs.len();
    let keep = opened / 2;
    for i in keep..opened {
        drop(svc.remove(&tp(i as i32)).unwrap());
    }
    logs.truncate(keep);
    let done = wait_until(Duration::from_secs(30), || {
        logs.iter().all(|l| l.stats().copy_lag_segments == 0)
    });
    assert!(done, "the remaining partitions were not tiered");
    let report = svc.shutdown(Duration::from_secs(5));
    assert!(report.clean, "{report:?}");
    for log in logs {
        Arc::try_unwrap(log).unwrap().close().unwrap();
    }
    // A copy that failed for want of descriptors in a removed partition may have left an
    // attempt its own cleanup could not remove then; the partition's next round does.
    for i in keep..opened {
        let i = i as i32;
        let log = TieredLog::open(
            dir.join(format!("p{i}")),
            service_util::options(300),
            rsm.clone(),
            world.rlmm.clone(),
            tp(i),
            config.clone(),
        )
        .unwrap();
        log.run_once().unwrap();
        log.close().unwrap();
    }
    let (stray, unfinished) = world.orphans(opened as i32);
    assert!(
        stray.is_empty() && unfinished == 0,
        "{stray:?} {unfinished}"
    );
    println!("CHILD-OK opened={opened}");
}
