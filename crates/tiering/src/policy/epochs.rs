//! The leader epoch history and the epochs each copied segment carries.

/// Adds `(epoch, start_seq)` to a leader epoch history (pairs oldest first).
///
/// Setting the latest epoch again is a no-op; a higher epoch starting where the latest one
/// starts replaces it (it covered no records).
///
/// # Errors
/// A message when the epoch is negative or lower than the latest one, or `start_seq` is
/// before the latest epoch's start.
pub fn push_leader_epoch(
    history: &mut Vec<(i32, u64)>,
    epoch: i32,
    start_seq: u64,
) -> Result<(), String> {
    if epoch < 0 {
        return Err(format!("leader epoch {epoch} is negative"));
    }
    let Some(&(latest, latest_start)) = history.last() else {
        history.push((epoch, start_seq));
        return Ok(());
    };
    if epoch == latest {
        return Ok(());
    }
    if epoch < latest {
        return Err(format!(
            "leader epoch {epoch} is lower than the current epoch {latest}"
        ));
    }
    if start_seq < latest_start {
        return Err(format!(
            "leader epoch {epoch} would start at seq {start_seq}, before epoch {latest} \
             (which starts at {latest_start})"
        ));
    }
    if start_seq == latest_start {
        history.pop();
    }
    history.push((epoch, start_seq));
    Ok(())
}

/// The leader epochs of a segment holding seqs `base..=last`, from a history of
/// `(epoch, start seq)` pairs (oldest first): the epoch in force at `base` (mapped to `base`)
/// and every later epoch starting within the segment (mapped to its start). A history with no
/// entry at or below `base` maps its first epoch to `base`; an empty history gives epoch 0.
pub fn segment_leader_epochs(
    history: &[(i32, u64)],
    base: u64,
    last: u64,
) -> std::collections::BTreeMap<i32, u64> {
    let at_base = history
        .iter()
        .rev()
        .find(|(_, start)| *start <= base)
        .or(history.first())
        .map_or(0, |&(epoch, _)| epoch);
    let mut out = std::collections::BTreeMap::from([(at_base, base)]);
    for &(epoch, start) in history {
        if start > base && start <= last {
            out.insert(epoch, start);
        }
    }
    out
}
#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn leader_epoch_history_only_moves_forward() {
        let mut h = vec![(0, 0)];
        push_leader_epoch(&mut h, 0, 50).unwrap();
        assert_eq!(h, [(0, 0)], "the current epoch again is a no-op");
        push_leader_epoch(&mut h, 3, 30).unwrap();
        push_leader_epoch(&mut h, 5, 80).unwrap();
        assert_eq!(
            push_leader_epoch(&mut h, 4, 90),
            Err("leader epoch 4 is lower than the current epoch 5".to_owned())
        );
        assert_eq!(
            push_leader_epoch(&mut h, 6, 79),
            Err(
                "leader epoch 6 would start at seq 79, before epoch 5 (which starts at 80)"
                    .to_owned()
            )
        );
        assert_eq!(
            push_leader_epoch(&mut h, -1, 100),
            Err("leader epoch -1 is negative".to_owned())
        );
        push_leader_epoch(&mut h, 6, 80).unwrap();
        assert_eq!(h, [(0, 0), (3, 30), (6, 80)]);
    }

    #[test]
    fn a_segment_gets_every_epoch_overlapping_it() {
        let h = [(0, 0), (3, 30), (6, 80)];
        let e = |b, l| {
            segment_leader_epochs(&h, b, l)
                .into_iter()
                .collect::<Vec<_>>()
        };
        assert_eq!(e(1, 20), [(0, 1)]);
        assert_eq!(e(21, 40), [(0, 21), (3, 30)]);
        assert_eq!(e(30, 40), [(3, 30)]);
        assert_eq!(e(25, 100), [(0, 25), (3, 30), (6, 80)]);
        assert_eq!(e(81, 90), [(6, 81)]);
        assert_eq!(
            segment_leader_epochs(&[(2, 50)], 1, 10)
                .into_iter()
                .collect::<Vec<_>>(),
            [(2, 1)]
        );
        assert_eq!(
            segment_leader_epochs(&[], 5, 9)
                .into_iter()
                .collect::<Vec<_>>(),
            [(0, 5)]
        );
    }
}
