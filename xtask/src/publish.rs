//! `cargo xtask publish-check` and `cargo xtask publish`: every published crate, in dependency
//! order.

use crate::workspace::{Package, cargo_metadata, metadata_problems, parse_packages, publish_order};
use crate::{cargo, step};

fn load_workspace() -> Result<(Vec<Package>, Vec<String>), String> {
    let packages = parse_packages(&cargo_metadata()?)?;
    let order = publish_order(&packages)?;
    Ok((packages, order))
}

fn check_metadata(packages: &[Package]) -> Result<(), String> {
    let problems: Vec<String> = packages
        .iter()
        .filter(|p| p.publish)
        .flat_map(metadata_problems)
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        for p in &problems {
            eprintln!("  {p}");
        }
        Err(format!(
            "{} metadata problem(s) in published crates",
            problems.len()
        ))
    }
}

fn package_args(order: &[String]) -> Vec<&str> {
    order.iter().flat_map(|n| ["-p", n.as_str()]).collect()
}

pub(crate) fn publish_check(verify: bool) -> Result<(), String> {
    let (packages, order) = load_workspace()?;
    eprintln!("==> publish order: {}", order.join(" → "));
    eprintln!("==> metadata");
    check_metadata(&packages)?;
    let mut args = vec!["package", "--allow-dirty"];
    if !verify {
        args.push("--no-verify");
    }
    args.extend(package_args(&order));
    step("package", &args, &[])?;
    eprintln!(
        "==> publish-check: {} crates package cleanly{}",
        order.len(),
        if verify {
            " and build from their packages"
        } else {
            ""
        }
    );
    Ok(())
}

pub(crate) fn publish(dry_run: bool) -> Result<(), String> {
    let (packages, order) = load_workspace()?;
    check_metadata(&packages)?;
    eprintln!("==> publish order: {}", order.join(" → "));
    if dry_run {
        // One invocation: cargo verifies each crate against the others packaged alongside it,
        // which a crate-by-crate dry run cannot do before its dependencies are on crates.io.
        let mut args = vec!["publish", "--dry-run", "--allow-dirty"];
        args.extend(package_args(&order));
        return step("publish --dry-run", &args, &[]);
    }
    for name in &order {
        eprintln!("==> publish {name}");
        let out = cargo()
            .args(["publish", "-p", name])
            .output()
            .map_err(|e| format!("could not start `cargo publish -p {name}`: {e}"))?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        eprint!("{stderr}");
        if out.status.success() {
            continue;
        }
        if stderr.contains("already exists") || stderr.contains("already uploaded") {
            let version = packages
                .iter()
                .find(|p| &p.name == name)
                .map(|p| p.version.as_str())
                .unwrap_or("?");
            eprintln!("    {name} {version} is already on the registry; skipped");
            continue;
        }
        return Err(format!(
            "`cargo publish -p {name}` failed ({}); fix it and run `cargo xtask publish` again, \
             crates already uploaded are skipped",
            out.status
        ));
    }
    eprintln!("==> published {} crates", order.len());
    Ok(())
}
