//! The targets table: rounds paired with their floors, and the rows every run prints.

use super::*;

fn m(mb: u64, p50: u64, disk: u64) -> Measurement {
    Measurement {
        bytes: mb * 1_000_000,
        records: 1,
        secs: 1.0,
        p50_ns: p50,
        p99_ns: p50,
        peak_rss_kib: 0,
        disk_bytes: disk,
        ops: 1,
        costs: crate::cost::Costs::default(),
        crc_bytes: None,
    }
}

#[test]
fn ratios_follow_their_metric_and_goals_their_direction() {
    let mut r = Results::new();
    r.insert("krabka-batch", vec![Ok(m(90, 10, 99_000_000))]);
    r.insert("raw-batch", vec![Ok(m(100, 5, 0))]);
    r.insert("krabka-read-random", vec![Ok(m(1, 30, 0))]);
    r.insert("raw-read-random-batch", vec![Ok(m(1, 10, 0))]);
    let find = |case: &str, metric: Metric| {
        TARGETS
            .iter()
            .find(|t| t.case == case && t.metric == metric)
            .and_then(|t| t.ratio(&r))
            .unwrap_or(f64::NAN)
    };
    assert!((find("krabka-batch", Throughput) - 0.9).abs() < 1e-9);
    assert!((find("krabka-batch", Metric::DiskPerPayload) - 1.1).abs() < 1e-9);
    assert!((find("krabka-read-random", P50) - 3.0).abs() < 1e-9);
    assert_eq!(AtLeast(0.9).met(0.89), Some(false));
    assert_eq!(AtMost(2.0).met(3.0), Some(false));
    assert_eq!(Info.met(1.0), None);
    let t = table(&[(100, r)]);
    let line = |start: &str| t.lines().find(|l| l.starts_with(start)).unwrap_or("");
    assert!(
        line("| append_batch of 100").ends_with("| 0.90x | yes |"),
        "{t}"
    );
    assert!(
        line("| random point read p50").ends_with("| 3.00x | no: 100 B |"),
        "{t}"
    );
    assert!(
        line("| append of one record").ends_with("| failed | no: 100 B failed |"),
        "{t}"
    );
}

#[test]
fn rounds_pair_a_case_with_its_floor_of_the_same_round() {
    let mut r = Results::new();
    r.insert(
        "krabka-append",
        vec![Ok(m(80, 1, 0)), Ok(m(100, 1, 0)), Ok(m(95, 1, 0))],
    );
    r.insert(
        "raw-write",
        vec![Ok(m(100, 1, 0)), Ok(m(100, 1, 0)), Ok(m(190, 1, 0))],
    );
    let t = TARGETS
        .iter()
        .find(|t| t.case == "krabka-append" && t.baseline == Some("raw-write"))
        .map(|t| (t.ratios(&r), t.ratio(&r)));
    let Some((Some(ratios), Some(median))) = t else {
        panic!("no ratios: {t:?}");
    };
    assert_eq!(ratios.len(), 3);
    assert!((median - 0.8).abs() < 1e-9, "{ratios:?}");
    assert_eq!(fmt_ratios(&ratios, 2), "0.80x [0.50–1.00]");
    assert_eq!(fmt_ratios(&[1.0, 2.0], 3), "1.500x [1.000–2.000]");
    // A round that failed fails the target.
    r.insert("raw-write", vec![Ok(m(100, 1, 0)), Err("x".into())]);
    assert!(
        TARGETS
            .iter()
            .all(|t| t.case != "krabka-append" || t.ratio(&r).is_none())
    );
}
