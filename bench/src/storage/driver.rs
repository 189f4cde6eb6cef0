//! The `storage` command: every case at every value size (in rounds, when asked for more than
//! one), a table per size, then the targets and their chart.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Instant;

use super::targets::{self, Results};
use super::{CASES, describe, workload};
use crate::report::{self, Measurement, Row};
use crate::{Result, VALUE_SIZES, run_child};

/// Where `--chart` without a path writes the chart.
pub const DEFAULT_CHART: &str = "docs/storage-bench.svg";

/// The `storage` command's own arguments.
#[derive(Debug, PartialEq)]
struct StorageArgs {
    /// `--chart [PATH]`: where to write the chart.
    chart: Option<PathBuf>,
    /// `--rounds N`: how often every case runs (default 1).
    rounds: usize,
}

fn parse(rest: &[String]) -> Result<StorageArgs> {
    let mut out = StorageArgs {
        chart: None,
        rounds: 1,
    };
    let mut args = rest.iter().peekable();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--chart" => {
                let path = args.next_if(|p| !p.starts_with("--"));
                out.chart = Some(PathBuf::from(path.map_or(DEFAULT_CHART, String::as_str)));
            }
            "--rounds" => {
                let n = args.next().ok_or("--rounds needs a value")?;
                out.rounds = n.parse().map_err(|e| format!("--rounds {n}: {e}"))?;
                if out.rounds == 0 {
                    return Err("--rounds must be at least 1".into());
                }
            }
            other => return Err(format!("storage: unknown argument {other}").into()),
        }
    }
    Ok(out)
}

/// The measurement a table row shows for a case run in several rounds: a failure if any round
/// failed, else the round with the median MB/s.
fn representative(
    runs: &[std::result::Result<Measurement, String>],
) -> std::result::Result<Measurement, String> {
    let mut ok = Vec::with_capacity(runs.len());
    for r in runs {
        ok.push(r.clone()?);
    }
    ok.sort_by(|a, b| a.mb_per_s().total_cmp(&b.mb_per_s()));
    ok.get(ok.len() / 2)
        .cloned()
        .ok_or_else(|| "not run".to_owned())
}

/// `krabka-bench storage [--quick] [--bytes N] [--rounds N] [--chart [PATH]]`.
///
/// Each round runs every case once, in [`CASES`] order (a case listed in two groups runs once
/// per round), so a case and its floor run minutes apart at most, under the same load. The
/// tables show each case's median round; the targets table each ratio's median over the
/// rounds (each round's case against the same round's floor) and their range.
pub fn run(quick: bool, bytes: Option<u64>, rest: &[String]) -> Result<()> {
    let args = parse(rest)?;
    let bytes = bytes.unwrap_or(if quick { 4 << 20 } else { 128 << 20 });
    let started = Instant::now();
    println!(
        "# krabka-bench storage{}{}",
        if quick { " --quick" } else { "" },
        if args.rounds > 1 {
            format!(" --rounds {} (each row: the median round)", args.rounds)
        } else {
            String::new()
        }
    );
    let mut runs = Vec::new();
    for value in VALUE_SIZES {
        let w = workload(value, bytes, quick);
        println!("\n## {}\n", describe(&w));
        let mut results: Results = HashMap::new();
        for round in 0..args.rounds {
            for c in CASES {
                let done = results.get(c.id).map_or(0, Vec::len);
                if done > round {
                    continue;
                }
                let mut child = vec!["storage".to_owned(), c.id.to_owned()];
                child.extend(w.to_args());
                let r = run_child(&child);
                if let Err(e) = &r {
                    eprintln!("{} ({value} B, round {}) failed: {e}", c.id, round + 1);
                }
                results.entry(c.id).or_default().push(r);
            }
        }
        let rows: Vec<Row> = CASES
            .iter()
            .map(|c| Row {
                group: c.group.to_owned(),
                name: c.name.to_owned(),
                is_krabka: c.krabka,
                is_raw: c.raw,
                result: representative(results.get(c.id).map_or(&[], Vec::as_slice)),
                goals: super::cases::goals(c.id),
            })
            .collect();
        print!("{}", report::table(&rows));
        runs.push((value, results));
    }
    println!("\n## targets: ratios against floors measured in the same run\n");
    if args.rounds > 1 {
        println!(
            "Each ratio: the median of {} rounds, [lowest–highest] after it.\n",
            args.rounds
        );
    }
    print!("{}", targets::table(&runs));
    if let Some(path) = &args.chart {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)?;
        }
        let title = format!(
            "krabka-bench storage{}: targets against their floors, same run",
            if quick { " --quick" } else { "" }
        );
        std::fs::write(path, targets::chart(&title, &runs))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        println!("\nchart: {}", path.display());
    }
    println!("\n(total {:.1} s)", started.elapsed().as_secs_f64());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Result<StorageArgs> {
        parse(&a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>())
    }

    #[test]
    fn chart_takes_an_optional_path_and_rounds_a_count() {
        let a = args(&["--chart"]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(a.chart, Some(PathBuf::from(DEFAULT_CHART)));
        assert_eq!(a.rounds, 1);
        let a = args(&["--chart", "--rounds", "3"]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            a,
            StorageArgs {
                chart: Some(PathBuf::from(DEFAULT_CHART)),
                rounds: 3
            }
        );
        let a = args(&["--chart", "/tmp/c.svg"]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(a.chart, Some(PathBuf::from("/tmp/c.svg")));
        assert!(args(&["--rounds", "0"]).is_err());
        assert!(args(&["--bogus"]).is_err());
    }

    #[test]
    fn a_case_shows_its_median_round_or_its_failure() {
        let m = |mb: u64| Measurement {
            bytes: mb * 1_000_000,
            records: 1,
            secs: 1.0,
            p50_ns: mb,
            p99_ns: mb,
            peak_rss_kib: 0,
            disk_bytes: 0,
            ops: 1,
            costs: crate::cost::Costs::default(),
            crc_bytes: None,
        };
        let got = representative(&[Ok(m(3)), Ok(m(1)), Ok(m(2))]);
        assert_eq!(got.map(|m| m.p50_ns), Ok(2));
        let got = representative(&[Ok(m(3)), Err("boom".into())]);
        assert_eq!(got.map(|m| m.p50_ns), Err("boom".into()));
    }
}
