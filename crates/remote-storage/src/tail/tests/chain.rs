//! The chain operations, against the in-memory store: writes, reads, listings, fences and a
//! writer racing its fencer.

use super::*;

#[test]
fn write_object_creates_once_and_tells_a_retry_from_a_taken_number() {
    let store = InMemoryRemoteStorage::new();
    let ours = one(CHAIN, 1, WRITER);
    assert!(matches!(
        write_object(&store, &ours).unwrap(),
        WriteOutcome::Created
    ));
    // The same bytes again: a retry after a lost answer.
    assert!(matches!(
        write_object(&store, &ours).unwrap(),
        WriteOutcome::AlreadyIdentical
    ));
    // Other bytes under the number: someone else's object, which is returned.
    let theirs = one(CHAIN, 1, FENCER);
    match write_object(&store, &theirs).unwrap() {
        WriteOutcome::Taken { found: Some(found) } => assert_eq!(found, ours),
        other => panic!("expected Taken, got {other:?}"),
    }
    // A damaged object under the number: taken too, with nothing to show.
    store
        .put_object(&layout::tail_object_key(CHAIN, 2), b"junk")
        .unwrap();
    assert!(matches!(
        write_object(&store, &one(CHAIN, 2, WRITER)).unwrap(),
        WriteOutcome::Taken { found: None }
    ));
    assert_eq!(read_object(&store, CHAIN, 1).unwrap(), Some(ours));
    assert_eq!(read_object(&store, CHAIN, 3).unwrap(), None);
    let err = read_object(&store, CHAIN, 2).unwrap_err();
    assert!(
        matches!(&err, RemoteStorageError::Corrupt { location, .. } if *location == layout::tail_object_key(CHAIN, 2)),
        "{err:?}"
    );
}

#[test]
fn an_object_under_another_number_or_chain_is_refused_by_read_object() {
    let store = InMemoryRemoteStorage::new();
    let key = layout::tail_object_key(CHAIN, 4);
    store
        .put_object(&key, &one(CHAIN, 3, WRITER).encode())
        .unwrap();
    let err = read_object(&store, CHAIN, 4).unwrap_err();
    assert!(
        matches!(&err, RemoteStorageError::Corrupt { location, reason }
            if *location == key && reason.contains("number 3 of chain")),
        "{err:?}"
    );
}

#[test]
fn an_oversized_object_is_refused_by_a_bounded_read() {
    let store = InMemoryRemoteStorage::new();
    let key = layout::tail_object_key(CHAIN, 1);
    store
        .put_object(&key, &vec![0u8; MAX_TAIL_OBJECT_LEN + 1])
        .unwrap();
    let err = read_object(&store, CHAIN, 1).unwrap_err();
    assert!(
        matches!(&err, RemoteStorageError::Corrupt { location, reason }
            if *location == key && reason.contains("over the")),
        "{err:?}"
    );
    // A writer meeting it there knows its number is taken; a fencer climbs past it.
    assert!(matches!(
        write_object(&store, &one(CHAIN, 1, WRITER)).unwrap(),
        WriteOutcome::Taken { found: None }
    ));
    let closed = close_chain(&store, CHAIN, FENCER, 0).unwrap();
    assert_eq!((closed.fence, closed.below.as_slice()), (2, &[1][..]));
}

#[test]
fn list_numbers_ignores_stray_names_and_other_chains() {
    let store = InMemoryRemoteStorage::new();
    let dir = layout::tail_chain_dir(CHAIN);
    for name in [
        "00000000000000000003".to_owned(),
        "00000000000000000001".to_owned(),
        format!("00000000000000000002.tmp-{}", Uuid::from_u128(5)),
        "00000000000000000000".to_owned(),
        "0000000000000000004".to_owned(),
        "junk".to_owned(),
        "_head".to_owned(),
    ] {
        store.put_object(&format!("{dir}/{name}"), b"x").unwrap();
    }
    let other = Uuid::from_u128(0xc4a2);
    store
        .put_object(&layout::tail_object_key(other, 2), b"x")
        .unwrap();
    // A directory whose name starts with this chain's: not under it.
    store
        .put_object(&format!("{dir}0/00000000000000000005"), b"x")
        .unwrap();
    assert_eq!(list_numbers(&store, CHAIN).unwrap(), [1, 3]);
    assert_eq!(list_numbers(&store, other).unwrap(), [2]);
    assert!(list_numbers(&store, Uuid::from_u128(9)).unwrap().is_empty());
}

#[test]
fn close_chain_fences_above_the_highest_object_and_finds_an_earlier_fence() {
    let store = InMemoryRemoteStorage::new();
    // An empty chain is fenced at 1: its writer can create nothing.
    let empty = Uuid::from_u128(0xe);
    let closed = close_chain(&store, empty, FENCER, 7).unwrap();
    assert_eq!(
        (closed.fence, closed.fenced_by, closed.wrote_fence),
        (1, FENCER, true)
    );
    assert!(closed.below.is_empty());
    assert!(matches!(
        write_object(&store, &one(empty, 1, WRITER)).unwrap(),
        WriteOutcome::Taken { found: Some(f) } if f.kind() == TailKind::Fence
    ));

    for n in 1..=3 {
        write_object(&store, &one(CHAIN, n, WRITER)).unwrap();
    }
    let closed = close_chain(&store, CHAIN, FENCER, 7).unwrap();
    assert_eq!(closed.chain, CHAIN);
    assert_eq!((closed.fence, closed.wrote_fence), (4, true));
    assert_eq!(closed.below, [1, 2, 3]);
    // A second fencer (or the first one again) finds the fence and writes nothing.
    let later = Uuid::from_u128(0x3333);
    for fencer in [later, FENCER] {
        let again = close_chain(&store, CHAIN, fencer, 8).unwrap();
        assert_eq!(
            (again.fence, again.fenced_by, again.wrote_fence),
            (4, FENCER, false)
        );
        assert_eq!(again.below, [1, 2, 3]);
    }
    assert_eq!(list_numbers(&store, CHAIN).unwrap(), [1, 2, 3, 4]);
    assert!(matches!(
        write_object(&store, &one(CHAIN, 4, WRITER)).unwrap(),
        WriteOutcome::Taken { .. }
    ));
}

/// A store that, on the first create of each number in `appear`, lets the chain's writer
/// create that number first: objects appearing between a fencer's listing and its creates.
struct Racing {
    inner: InMemoryRemoteStorage,
    appear: Vec<u64>,
    done: parking_lot::Mutex<Vec<u64>>,
}

impl RemoteSegmentLister for Racing {
    fn list_partition(
        &self,
        dir: &str,
        visit: &mut dyn FnMut(ListedObject) -> Result<(), RemoteStorageError>,
    ) -> Result<(), RemoteStorageError> {
        self.inner.list_partition(dir, visit)
    }
    fn list_partition_dirs(
        &self,
        visit: &mut dyn FnMut(String) -> Result<(), RemoteStorageError>,
    ) -> Result<(), RemoteStorageError> {
        self.inner.list_partition_dirs(visit)
    }
    fn read_object(&self, key: &str) -> Result<Vec<u8>, RemoteStorageError> {
        self.inner.read_object(key)
    }
    fn delete_object(&self, key: &str) -> Result<(), RemoteStorageError> {
        self.inner.delete_object(key)
    }
}

impl OwnershipStore for Racing {
    fn create_if_absent(&self, key: &str, bytes: &[u8]) -> Result<bool, RemoteStorageError> {
        let n: u64 = key.rsplit('/').next().unwrap().parse().unwrap();
        if self.appear.contains(&n) && !self.done.lock().contains(&n) {
            self.done.lock().push(n);
            let created = write_object(&self.inner, &one(CHAIN, n, WRITER))?;
            assert!(matches!(created, WriteOutcome::Created), "{created:?}");
        }
        self.inner.create_if_absent(key, bytes)
    }
    fn put_object(&self, key: &str, bytes: &[u8]) -> Result<(), RemoteStorageError> {
        self.inner.put_object(key, bytes)
    }
    fn read_if_changed(
        &self,
        key: &str,
        known: Option<&str>,
        max_len: usize,
    ) -> Result<ConditionalRead, RemoteStorageError> {
        self.inner.read_if_changed(key, known, max_len)
    }
}

#[test]
fn close_chain_adopts_objects_created_after_its_listing() {
    let store = Racing {
        inner: InMemoryRemoteStorage::new(),
        appear: vec![3, 4, 5],
        done: parking_lot::Mutex::new(Vec::new()),
    };
    for n in 1..=2 {
        write_object(&store.inner, &one(CHAIN, n, WRITER)).unwrap();
    }
    let closed = close_chain(&store, CHAIN, FENCER, 0).unwrap();
    assert_eq!((closed.fence, closed.wrote_fence), (6, true));
    assert_eq!(closed.below, [1, 2, 3, 4, 5]);
    for n in 1..=5 {
        let object = read_object(&store.inner, CHAIN, n).unwrap().unwrap();
        assert_eq!(object.incarnation(), WRITER);
    }
}

#[test]
fn close_chain_gives_up_with_a_retriable_error_after_its_bounded_tries() {
    let store = Racing {
        inner: InMemoryRemoteStorage::new(),
        appear: (1..=u64::from(MAX_CLOSE_TRIES)).collect(),
        done: parking_lot::Mutex::new(Vec::new()),
    };
    let err = close_chain(&store, CHAIN, FENCER, 0).unwrap_err();
    assert!(
        matches!(&err, RemoteStorageError::Retriable { location, .. }
            if *location == layout::tail_chain_dir(CHAIN)),
        "{err:?}"
    );
    assert!(err.is_retriable());
}

#[test]
fn after_close_chain_returns_a_racing_writer_creates_nothing_and_all_it_created_is_below_the_fence()
{
    for round in 0..20u128 {
        let store = Arc::new(InMemoryRemoteStorage::new());
        let chain = Uuid::from_u128(0x7000 + round);
        let closed_flag = Arc::new(AtomicBool::new(false));
        let created_count = Arc::new(AtomicU64::new(0));
        let writer = {
            let (store, closed_flag, created_count) =
                (store.clone(), closed_flag.clone(), created_count.clone());
            std::thread::spawn(move || {
                let mut created = Vec::new();
                for n in 1..=100_000u64 {
                    let closed_before = closed_flag.load(Ordering::SeqCst);
                    match write_object(&*store, &one(chain, n, WRITER)).unwrap() {
                        WriteOutcome::Created => {
                            assert!(!closed_before, "object {n} created after the close");
                            created.push(n);
                            created_count.store(n, Ordering::SeqCst);
                        }
                        WriteOutcome::Taken { found } => return (created, n, found),
                        other => panic!("{other:?}"),
                    }
                    // A writer waits for its interval between objects.
                    std::thread::sleep(Duration::from_micros(50));
                }
                panic!("the writer was never fenced");
            })
        };
        let at_least = 1 + u64::try_from(round % 5).unwrap();
        for _ in 0..10_000 {
            if created_count.load(Ordering::SeqCst) >= at_least {
                break;
            }
            std::thread::sleep(Duration::from_micros(100));
        }
        let closed = close_chain(&*store, chain, FENCER, 0).unwrap();
        closed_flag.store(true, Ordering::SeqCst);
        let (created, taken_at, found) = writer.join().unwrap();
        assert!(closed.wrote_fence);
        assert_eq!(taken_at, closed.fence, "round {round}");
        assert!(
            matches!(found, Some(f) if f.kind() == TailKind::Fence && f.incarnation() == FENCER)
        );
        let below: Vec<u64> = (1..closed.fence).collect();
        assert_eq!(created, below, "round {round}");
        assert_eq!(closed.below, below, "round {round}");
    }
}

#[test]
fn partition_listings_and_recovery_never_reach_into_a_chain_dir() {
    let store = InMemoryRemoteStorage::new();
    let tp = TopicIdPartition::new(Uuid::from_u128(0xabc), "orders", 0);
    let dir = layout::partition_dir(&tp).unwrap();
    for n in 1..=2 {
        write_object(&store, &one(CHAIN, n, WRITER)).unwrap();
    }
    store
        .put_object(
            &format!("{}/junk.tmp-1", layout::tail_chain_dir(CHAIN)),
            b"x",
        )
        .unwrap();
    store
        .put_object(
            &format!(
                "{dir}/00000000000000000000-{}.log.tmp-1",
                Uuid::from_u128(1)
            ),
            b"x",
        )
        .unwrap();
    store.put_object(&format!("{dir}/stray"), b"x").unwrap();
    // The chain dir is listed among the root's directories but is no partition's.
    let mut dirs = Vec::new();
    store
        .list_partition_dirs(&mut |d| {
            dirs.push(d);
            Ok(())
        })
        .unwrap();
    assert!(dirs.contains(&layout::tail_chain_dir(CHAIN)), "{dirs:?}");
    let parsed: Vec<_> = dirs
        .iter()
        .filter_map(|d| layout::parse_partition_dir(d))
        .collect();
    assert_eq!(parsed, std::slice::from_ref(&tp));
    assert_eq!(
        recovery::find_partitions(&store, "orders", 0).unwrap(),
        std::slice::from_ref(&tp)
    );
    // A scan of the partition names nothing of the chain, not even as an orphan.
    let scan = recovery::scan(&store, &tp, 1).unwrap();
    let named: Vec<&String> = scan
        .orphans
        .iter()
        .chain(scan.ignored.iter().map(|i| &i.key))
        .collect();
    assert!(!named.is_empty());
    assert!(
        named.iter().all(|k| k.starts_with(&format!("{dir}/"))),
        "{named:?}"
    );
    assert_eq!(list_numbers(&store, CHAIN).unwrap(), [1, 2]);
}
