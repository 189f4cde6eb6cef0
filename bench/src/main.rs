//! Side-by-side benchmarks of krabka against peer logs and the machine's limits.
//!
//! ```text
//! krabka-bench storage [--quick] [--bytes N] [--rounds N] [--chart [PATH]]  # vs commitlog, okaywal, plain files; targets, SVG chart
//! krabka-bench tiering [--quick] [--bytes N] [--server env] [--upload-only [--rounds N]]  # uploads, cold/cached remote reads, remote scans, ownership cost (--upload-only: the S3 upload rows, 1 round unless --rounds N, with CPU per MB)
//! krabka-bench transform [--quick] [--bytes N] # compressed/encrypted remote tier vs untransformed
//! krabka-bench scale [--quick] [--partitions N] # one tiering service over many partitions
//! krabka-bench scale reads [--quick] [--server env] [--partitions N] [--consumers N]  # many lagging consumers' cold reads through one service
//! krabka-bench replica [--quick] [--bytes N] [--server env] [--partitions N]  # read replicas: scan, visibility, idle refreshes
//! krabka-bench tail [--quick] [--bytes N] [--server env] [--window MS] [--partitions N]  # tail objects: bucket-durable acks, PUTs/s, cost
//! ```
//!
//! Each case runs in a child process (this binary re-executed with `child ...`) so the peak
//! RSS reported is that case's own. Scratch files go to `KRABKA_BENCH_DIR` (default: the
//! system temp dir). See `docs/benchmarks.md`.

mod cost;
mod measurement;
mod replica;
mod report;
mod scale;
mod storage;
mod tail;
mod tiering;
mod transform;

use std::path::PathBuf;
use std::process::Command;

use report::Measurement;

/// The error of every fallible path: anything that is a `std::error::Error`, or a message.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// `Result` with [`BoxError`].
pub type Result<T> = std::result::Result<T, BoxError>;

/// Value sizes of the storage workload.
const VALUE_SIZES: [usize; 3] = [100, 1024, 16 << 10];

struct Args {
    command: String,
    quick: bool,
    bytes: Option<u64>,
    rest: Vec<String>,
}

fn parse_args() -> Result<Args> {
    let mut args = std::env::args().skip(1);
    let command = args.next().unwrap_or_default();
    let (mut quick, mut bytes, mut rest) = (false, None, Vec::new());
    while let Some(a) = args.next() {
        match a.as_str() {
            "--quick" => quick = true,
            "--bytes" => {
                let v = args.next().ok_or("--bytes needs a value")?;
                bytes = Some(v.parse().map_err(|e| format!("--bytes {v}: {e}"))?);
            }
            _ => rest.push(a),
        }
    }
    Ok(Args {
        command,
        quick,
        bytes,
        rest,
    })
}

fn scratch_dir() -> Result<tempfile::TempDir> {
    let base = std::env::var_os("KRABKA_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    std::fs::create_dir_all(&base)?;
    Ok(tempfile::Builder::new()
        .prefix("krabka-bench-")
        .tempdir_in(base)?)
}

/// Re-executes this binary as `child <args>` and parses the measurement it prints.
fn run_child(args: &[String]) -> std::result::Result<Measurement, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = Command::new(exe)
        .arg("child")
        .args(args)
        .output()
        .map_err(|e| e.to_string())?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let last = stderr.lines().last().unwrap_or("no output").to_owned();
        return Err(format!("{}: {last}", out.status));
    }
    Measurement::parse(&stdout).ok_or_else(|| "child printed no RESULT line".to_owned())
}

fn child(rest: &[String]) -> Result<()> {
    let (kind, id) = match rest {
        [k, i, ..] => (k.as_str(), i.as_str()),
        _ => return Err("child needs a kind and a case".into()),
    };
    let dir = scratch_dir()?;
    let m = match kind {
        "storage" => {
            let w = storage::Workload::from_args(rest.get(2..).unwrap_or_default())?;
            storage::run_case(id, &w, dir.path())?
        }
        // Prints its own table: no measurement line.
        "scale" => return scale::child(id.parse()?, dir.path()),
        other => return Err(format!("unknown child kind {other}").into()),
    };
    println!("{}", m.to_line());
    Ok(())
}

fn main() -> std::process::ExitCode {
    let result = parse_args().and_then(|a| {
        match a.command.as_str() {
        "storage" => storage::run(a.quick, a.bytes, &a.rest),
        "tiering" => tiering::run(a.quick, a.bytes, &a.rest),
        "transform" => transform::run(a.quick, a.bytes),
        "scale" => scale::run(a.quick, &a.rest),
        "replica" => replica::run(a.quick, a.bytes, &a.rest),
        "tail" => tail::run(a.quick, a.bytes, &a.rest),
        "child" => child(&a.rest),
        _ => Err(
            "usage: krabka-bench storage|tiering|transform|scale|replica|tail [--quick] [--bytes N]"
                .into(),
        ),
    }
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
