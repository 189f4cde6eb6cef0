//! `cargo xtask`: CI and release chores of the krabka workspace.
//!
//! - `cargo xtask ci` — fmt check, clippy (all targets, all features, warnings denied), the whole
//!   test suite, and rustdoc with warnings denied; stops at the first failing step and names it.
//! - `cargo xtask publish-check [--verify]` — crate metadata check, then `cargo package` of every
//!   published crate in dependency order.
//! - `cargo xtask bump-version X.Y.Z` — the workspace version and every inter-crate requirement.
//! - `cargo xtask publish [--dry-run]` — `cargo publish` of every published crate in dependency
//!   order.
//!
//! The dependency order is derived from `cargo metadata`, never hard-coded: a new crate takes its
//! place by what it depends on.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rest: Vec<&str> = args.iter().skip(1).map(String::as_str).collect();
    let result = match args.first().map(String::as_str) {
        Some("ci") => no_args("ci", &rest).and_then(|()| ci()),
        Some("publish-check") => match rest.as_slice() {
            [] => publish_check(false),
            ["--verify"] => publish_check(true),
            _ => return usage(&format!("unexpected arguments to publish-check: {rest:?}")),
        },
        Some("bump-version") => match rest.as_slice() {
            [version] => match Version::parse(version) {
                Ok(v) => bump_version(&v),
                Err(e) => return usage(&e),
            },
            _ => return usage("bump-version takes exactly one argument, the new version X.Y.Z"),
        },
        Some("publish") => match rest.as_slice() {
            [] => publish(false),
            ["--dry-run"] => publish(true),
            _ => return usage(&format!("unexpected arguments to publish: {rest:?}")),
        },
        Some("help") | Some("--help") | Some("-h") => {
            print_help();
            return ExitCode::SUCCESS;
        }
        None => {
            print_help();
            return ExitCode::from(2);
        }
        Some(other) => return usage(&format!("unknown xtask command `{other}`")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

fn usage(message: &str) -> ExitCode {
    eprintln!("error: {message}\n");
    print_help();
    ExitCode::from(2)
}

fn no_args(command: &str, rest: &[&str]) -> Result<(), String> {
    if rest.is_empty() {
        Ok(())
    } else {
        Err(format!("`{command}` takes no arguments, got {rest:?}"))
    }
}

fn print_help() {
    eprintln!(
        "\
usage: cargo xtask <command>

commands:
  ci                      fmt --check, clippy -D warnings, test --workspace --all-features,
                          doc -D warnings
  publish-check [--verify]
                          check every published crate's metadata (description, license,
                          repository, readme file, keywords, categories, docs.rs metadata), then
                          `cargo package` them all in dependency order in ONE cargo invocation.
                          Without --verify packaging uses --no-verify: verifying a crate builds it
                          from the packaged sources, resolving its krabka-* dependencies as
                          crates.io would, and those versions are not on crates.io before the
                          release. --verify packages them all in one invocation, where cargo
                          resolves each against the others packaged alongside it, so it works
                          before the release too, but builds every crate again (minutes).
  bump-version X.Y.Z      set [workspace.package] version and every inter-crate requirement in
                          [workspace.dependencies] (and any member manifest that pins one);
                          X.Y.Z must be a semantic version (pre-release/build suffixes allowed)
  publish [--dry-run]     `cargo publish` every published crate in dependency order; a crate whose
                          version is already on the registry is skipped so a half-done release can
                          be resumed. --dry-run packages and verifies all of them in one cargo
                          invocation without uploading. Needs CARGO_REGISTRY_TOKEN (not for
                          --dry-run)."
    );
}

/// The workspace root: the parent of xtask's manifest directory. `cargo run` sets
/// `CARGO_MANIFEST_DIR` at run time too; it is preferred over the path compiled in, which points
/// at whichever checkout last built this binary when a target directory is shared.
fn workspace_root() -> PathBuf {
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    manifest_dir
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(workspace_root());
    cmd
}

/// Runs one CI step; an error names the step that failed.
fn step(name: &str, args: &[&str], envs: &[(&str, &str)]) -> Result<(), String> {
    eprintln!("==> {name}: cargo {}", args.join(" "));
    let status = cargo()
        .args(args)
        .envs(envs.iter().copied())
        .status()
        .map_err(|e| format!("step `{name}` could not start cargo: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("step `{name}` failed ({status})"))
    }
}

fn ci() -> Result<(), String> {
    step("fmt", &["fmt", "--all", "--", "--check"], &[])?;
    step(
        "clippy",
        &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--all-features",
            "--",
            "-D",
            "warnings",
        ],
        &[],
    )?;
    step("test", &["test", "--workspace", "--all-features"], &[])?;
    step(
        "doc",
        &["doc", "--workspace", "--no-deps", "--all-features"],
        &[("RUSTDOCFLAGS", "-D warnings")],
    )?;
    eprintln!("==> ci: all steps passed");
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Workspace model (from `cargo metadata`)
// ---------------------------------------------------------------------------------------------

/// One workspace member as the release chores see it.
#[derive(Debug, Clone, PartialEq)]
struct Package {
    name: String,
    version: String,
    manifest_dir: PathBuf,
    /// `false` when the manifest says `publish = false` (or lists no registry).
    publish: bool,
    /// Names of other workspace members this one depends on (any kind: normal, build, dev).
    workspace_deps: BTreeSet<String>,
    description: Option<String>,
    license: Option<String>,
    repository: Option<String>,
    readme: Option<String>,
    keywords: Vec<String>,
    categories: Vec<String>,
    has_docs_rs_metadata: bool,
}

fn cargo_metadata() -> Result<serde_json::Value, String> {
    let out = cargo()
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .output()
        .map_err(|e| format!("could not start `cargo metadata`: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "`cargo metadata` failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("`cargo metadata` output: {e}"))
}

fn str_list(v: &serde_json::Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Parses `cargo metadata --no-deps` output into the workspace members.
fn parse_packages(meta: &serde_json::Value) -> Result<Vec<Package>, String> {
    let packages = meta["packages"]
        .as_array()
        .ok_or("`cargo metadata` output has no `packages` array")?;
    let names: BTreeSet<String> = packages
        .iter()
        .filter_map(|p| p["name"].as_str().map(str::to_owned))
        .collect();
    let opt = |v: &serde_json::Value| v.as_str().map(str::to_owned);
    let mut out = Vec::new();
    for p in packages {
        let name = opt(&p["name"]).ok_or("a package without a name")?;
        let manifest = opt(&p["manifest_path"]).ok_or(format!("{name}: no manifest_path"))?;
        let manifest_dir = Path::new(&manifest)
            .parent()
            .map(Path::to_path_buf)
            .ok_or(format!("{name}: manifest path {manifest} has no parent"))?;
        // `publish`: null = any registry; [] = publish = false; [..] = those registries.
        let publish = match &p["publish"] {
            serde_json::Value::Array(a) => !a.is_empty(),
            _ => true,
        };
        let workspace_deps = p["dependencies"]
            .as_array()
            .map(|deps| {
                deps.iter()
                    .filter(|d| d["path"].is_string())
                    .filter_map(|d| d["name"].as_str())
                    .filter(|n| names.contains(*n) && *n != name)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        out.push(Package {
            version: opt(&p["version"]).unwrap_or_default(),
            manifest_dir,
            publish,
            workspace_deps,
            description: opt(&p["description"]),
            license: opt(&p["license"]),
            repository: opt(&p["repository"]),
            readme: opt(&p["readme"]),
            keywords: str_list(&p["keywords"]),
            categories: str_list(&p["categories"]),
            has_docs_rs_metadata: p["metadata"]["docs"]["rs"].is_object(),
            name,
        });
    }
    Ok(out)
}

/// The published crates, each after every workspace crate it depends on (Kahn's algorithm;
/// ties broken by name so the order is stable). A published crate depending on an unpublished
/// one, or a cycle, is an error: neither can be uploaded.
fn publish_order(packages: &[Package]) -> Result<Vec<String>, String> {
    let published: BTreeMap<&str, &Package> = packages
        .iter()
        .filter(|p| p.publish)
        .map(|p| (p.name.as_str(), p))
        .collect();
    let mut remaining: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for p in published.values() {
        let mut deps = BTreeSet::new();
        for d in &p.workspace_deps {
            if !published.contains_key(d.as_str()) {
                return Err(format!(
                    "{} depends on {d}, which is `publish = false`: it cannot be published",
                    p.name
                ));
            }
            deps.insert(d.as_str());
        }
        remaining.insert(p.name.as_str(), deps);
    }
    let mut order = Vec::new();
    while !remaining.is_empty() {
        let ready: Vec<&str> = remaining
            .iter()
            .filter(|(_, deps)| deps.is_empty())
            .map(|(n, _)| *n)
            .collect();
        if ready.is_empty() {
            let stuck: Vec<&str> = remaining.keys().copied().collect();
            return Err(format!("dependency cycle among {}", stuck.join(", ")));
        }
        for n in ready {
            remaining.remove(n);
            for deps in remaining.values_mut() {
                deps.remove(n);
            }
            order.push(n.to_owned());
        }
    }
    Ok(order)
}

/// What a crate needs before crates.io and docs.rs take it well; one line per problem.
fn metadata_problems(p: &Package) -> Vec<String> {
    let mut problems = Vec::new();
    let mut missing = |what: &str| problems.push(format!("{}: missing {what}", p.name));
    if p.description.as_deref().is_none_or(|s| s.trim().is_empty()) {
        missing("`description`");
    }
    if p.license.is_none() {
        missing("`license`");
    }
    if p.repository.is_none() {
        missing("`repository`");
    }
    if p.keywords.is_empty() {
        missing("`keywords`");
    }
    if p.categories.is_empty() {
        missing("`categories`");
    }
    if !p.has_docs_rs_metadata {
        missing("[package.metadata.docs.rs]");
    }
    match &p.readme {
        None => missing("`readme`"),
        Some(readme) => {
            let path = p.manifest_dir.join(readme);
            if !path.is_file() {
                problems.push(format!(
                    "{}: readme {} does not exist",
                    p.name,
                    path.display()
                ));
            }
        }
    }
    // crates.io's own limits, so a release does not fail half-way on them.
    if p.keywords.len() > 5 {
        problems.push(format!("{}: more than 5 keywords", p.name));
    }
    for k in &p.keywords {
        let valid = k.len() <= 20
            && k.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
            && k.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '+');
        if !valid {
            problems.push(format!(
                "{}: keyword `{k}` is not valid on crates.io (ASCII alphanumeric, -, _, +; at most 20 chars)",
                p.name
            ));
        }
    }
    if p.categories.len() > 5 {
        problems.push(format!("{}: more than 5 categories", p.name));
    }
    problems
}

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

fn publish_check(verify: bool) -> Result<(), String> {
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

fn publish(dry_run: bool) -> Result<(), String> {
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

// ---------------------------------------------------------------------------------------------
// bump-version
// ---------------------------------------------------------------------------------------------

/// A semantic version `MAJOR.MINOR.PATCH[-PRE][+BUILD]` (semver.org 2.0.0).
#[derive(Debug, Clone, PartialEq)]
struct Version {
    text: String,
}

impl Version {
    fn parse(s: &str) -> Result<Version, String> {
        let bad = |why: &str| format!("`{s}` is not a semantic version X.Y.Z: {why}");
        let (rest, build) = match s.split_once('+') {
            Some((r, b)) => (r, Some(b)),
            None => (s, None),
        };
        let (core, pre) = match rest.split_once('-') {
            Some((c, p)) => (c, Some(p)),
            None => (rest, None),
        };
        let parts: Vec<&str> = core.split('.').collect();
        if parts.len() != 3 {
            return Err(bad("expected three dot-separated numbers"));
        }
        for part in &parts {
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad(&format!("`{part}` is not a number")));
            }
            if part.len() > 1 && part.starts_with('0') {
                return Err(bad(&format!("`{part}` has a leading zero")));
            }
            if part.parse::<u64>().is_err() {
                return Err(bad(&format!("`{part}` is too large")));
            }
        }
        let ident_ok =
            |id: &str| !id.is_empty() && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
        if let Some(pre) = pre {
            for id in pre.split('.') {
                if !ident_ok(id) {
                    return Err(bad(&format!("pre-release identifier `{id}` is invalid")));
                }
                if id.len() > 1 && id.starts_with('0') && id.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(bad(&format!(
                        "numeric pre-release identifier `{id}` has a leading zero"
                    )));
                }
            }
        }
        if let Some(build) = build
            && !build.split('.').all(ident_ok)
        {
            return Err(bad(&format!("build metadata `{build}` is invalid")));
        }
        Ok(Version { text: s.to_owned() })
    }
}

/// Replaces the `version` value of a table, keeping the comments and spacing around it.
fn set_version(table: &mut dyn toml_edit::TableLike, version: &str) {
    match table.get_mut("version").and_then(|i| i.as_value_mut()) {
        Some(value) => {
            let decor = value.decor().clone();
            *value = version.into();
            *value.decor_mut() = decor;
        }
        None => {
            table.insert("version", toml_edit::value(version));
        }
    }
}

/// Sets the version of every path dependency in one dependency table; returns how many changed.
fn bump_dep_table(table: &mut dyn toml_edit::TableLike, version: &str) -> usize {
    let mut changed = 0;
    for (_, item) in table.iter_mut() {
        let Some(dep) = item.as_table_like_mut() else {
            continue;
        };
        if dep.contains_key("path") && dep.contains_key("version") {
            set_version(dep, version);
            changed += 1;
        }
    }
    changed
}

/// Rewrites the root manifest text for a new version, keeping its comments and layout.
fn bump_root_manifest(text: &str, version: &Version) -> Result<(String, usize), String> {
    let mut doc: toml_edit::DocumentMut = text
        .parse()
        .map_err(|e| format!("root Cargo.toml does not parse: {e}"))?;
    let package = doc["workspace"]["package"]
        .as_table_like_mut()
        .ok_or("root Cargo.toml has no [workspace.package]")?;
    set_version(package, &version.text);
    let mut changed = 0;
    if let Some(deps) = doc["workspace"]["dependencies"].as_table_like_mut() {
        changed += bump_dep_table(deps, &version.text);
    }
    Ok((doc.to_string(), changed))
}

/// Rewrites a member manifest's pinned inter-crate requirements (those not using `workspace = true`).
fn bump_member_manifest(text: &str, version: &Version) -> Result<(String, usize), String> {
    let mut doc: toml_edit::DocumentMut = text.parse().map_err(|e| format!("{e}"))?;
    let mut changed = 0;
    for key in ["dependencies", "dev-dependencies", "build-dependencies"] {
        if let Some(t) = doc.get_mut(key).and_then(|i| i.as_table_like_mut()) {
            changed += bump_dep_table(t, &version.text);
        }
    }
    if let Some(targets) = doc.get_mut("target").and_then(|i| i.as_table_like_mut()) {
        for (_, target) in targets.iter_mut() {
            for key in ["dependencies", "dev-dependencies", "build-dependencies"] {
                if let Some(t) = target.get_mut(key).and_then(|i| i.as_table_like_mut()) {
                    changed += bump_dep_table(t, &version.text);
                }
            }
        }
    }
    Ok((doc.to_string(), changed))
}

fn bump_version(version: &Version) -> Result<(), String> {
    let root = workspace_root().join("Cargo.toml");
    let text = std::fs::read_to_string(&root)
        .map_err(|e| format!("cannot read {}: {e}", root.display()))?;
    let (new, mut changed) = bump_root_manifest(&text, version)?;
    std::fs::write(&root, new).map_err(|e| format!("cannot write {}: {e}", root.display()))?;
    let packages = parse_packages(&cargo_metadata()?)?;
    for p in &packages {
        let manifest = p.manifest_dir.join("Cargo.toml");
        let text = std::fs::read_to_string(&manifest)
            .map_err(|e| format!("cannot read {}: {e}", manifest.display()))?;
        let (new, n) = bump_member_manifest(&text, version)
            .map_err(|e| format!("{} does not parse: {e}", manifest.display()))?;
        if n > 0 {
            std::fs::write(&manifest, new)
                .map_err(|e| format!("cannot write {}: {e}", manifest.display()))?;
            changed += n;
        }
    }
    // Refresh Cargo.lock's entries for the workspace crates (no other dependency moves).
    step("lockfile", &["update", "--workspace"], &[])?;
    eprintln!(
        "==> version {} set; {changed} inter-crate requirement(s) updated",
        version.text
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pkg(name: &str, deps: &[&str], publish: bool) -> Package {
        Package {
            name: name.into(),
            version: "0.1.0".into(),
            manifest_dir: PathBuf::from("."),
            publish,
            workspace_deps: deps.iter().map(|d| d.to_string()).collect(),
            description: Some("d".into()),
            license: Some("MIT".into()),
            repository: Some("r".into()),
            readme: None,
            keywords: vec!["log".into()],
            categories: vec!["database-implementations".into()],
            has_docs_rs_metadata: true,
        }
    }

    #[test]
    fn publish_order_puts_every_crate_after_its_dependencies() {
        let packages = vec![
            pkg("tiering", &["storage", "remote"], true),
            pkg("cli", &["tiering", "storage"], true),
            pkg("remote", &[], true),
            pkg("storage", &["protocol"], true),
            pkg("protocol", &[], true),
            pkg("xtask", &[], false),
        ];
        let order = publish_order(&packages).unwrap();
        assert_eq!(order.len(), 5, "xtask is not published: {order:?}");
        let at = |n: &str| order.iter().position(|o| o == n).unwrap();
        for p in packages.iter().filter(|p| p.publish) {
            for d in &p.workspace_deps {
                assert!(at(d) < at(&p.name), "{d} must come before {}", p.name);
            }
        }
    }

    #[test]
    fn publish_order_rejects_cycles_and_unpublished_dependencies() {
        let cycle = vec![pkg("a", &["b"], true), pkg("b", &["a"], true)];
        assert!(publish_order(&cycle).unwrap_err().contains("cycle"));
        let private = vec![pkg("a", &["xtask"], true), pkg("xtask", &[], false)];
        assert!(
            publish_order(&private)
                .unwrap_err()
                .contains("publish = false")
        );
    }

    #[test]
    fn parse_packages_reads_cargo_metadata_shape() {
        let meta = serde_json::json!({"packages": [
            {"name": "a", "version": "0.1.0", "manifest_path": "/w/a/Cargo.toml", "publish": null,
             "dependencies": [{"name": "b", "path": "/w/b"}, {"name": "serde"}],
             "description": "x", "license": "MIT", "repository": "r", "readme": "README.md",
             "keywords": ["k"], "categories": ["c"], "metadata": {"docs": {"rs": {"all-features": true}}}},
            {"name": "b", "version": "0.1.0", "manifest_path": "/w/b/Cargo.toml", "publish": [],
             "dependencies": [], "metadata": null}
        ]});
        let packages = parse_packages(&meta).unwrap();
        assert_eq!(packages[0].workspace_deps.iter().collect::<Vec<_>>(), ["b"]);
        assert!(packages[0].publish && packages[0].has_docs_rs_metadata);
        assert!(!packages[1].publish && !packages[1].has_docs_rs_metadata);
        assert_eq!(packages[0].manifest_dir, PathBuf::from("/w/a"));
    }

    #[test]
    fn metadata_problems_name_each_missing_field() {
        let mut p = pkg("a", &[], true);
        p.description = None;
        p.categories.clear();
        p.has_docs_rs_metadata = false;
        p.keywords = vec!["not a keyword".into()];
        let problems = metadata_problems(&p).join("\n");
        for needle in [
            "description",
            "categories",
            "docs.rs",
            "readme",
            "not a keyword",
        ] {
            assert!(problems.contains(needle), "{needle} not in {problems}");
        }
    }

    #[test]
    fn version_parse_accepts_semver_and_rejects_the_rest() {
        for ok in [
            "0.1.0",
            "1.2.3",
            "10.0.0-rc.1",
            "1.0.0-alpha+build.5",
            "1.0.0+20250101",
        ] {
            assert!(Version::parse(ok).is_ok(), "{ok}");
        }
        for bad in [
            "1.2", "1.2.3.4", "v1.2.3", "01.2.3", "1.2.x", "1.2.3-", "1.2.3-01", "",
        ] {
            assert!(Version::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn bump_root_manifest_changes_versions_and_keeps_comments() {
        let text = r#"[workspace]
members = ["a"]

[workspace.package]
version = "0.1.0" # the version

[workspace.dependencies]
# Inter-crate requirements.
krabka-a = { path = "crates/a", version = "0.1.0" }
serde = "1"
"#;
        let v = Version::parse("0.2.0-rc.1").unwrap();
        let (new, changed) = bump_root_manifest(text, &v).unwrap();
        assert_eq!(changed, 1);
        assert!(
            new.contains(r#"version = "0.2.0-rc.1" # the version"#),
            "{new}"
        );
        assert!(new.contains(r#"krabka-a = { path = "crates/a", version = "0.2.0-rc.1" }"#));
        assert!(new.contains("# Inter-crate requirements."));
        assert!(new.contains(r#"serde = "1""#));
    }

    #[test]
    fn bump_member_manifest_touches_only_pinned_path_dependencies() {
        let text = r#"[dependencies]
a = { workspace = true }
b = { path = "../b", version = "0.1.0" }
c = "1"
[target.'cfg(unix)'.dev-dependencies]
d = { path = "../d", version = "0.1.0" }
"#;
        let (new, changed) = bump_member_manifest(text, &Version::parse("1.0.0").unwrap()).unwrap();
        assert_eq!(changed, 2);
        assert!(new.contains(r#"b = { path = "../b", version = "1.0.0" }"#));
        assert!(new.contains(r#"d = { path = "../d", version = "1.0.0" }"#));
        assert!(new.contains(r#"c = "1""#));
    }

    /// Repository hygiene as an ordinary test: every crate we publish carries the metadata
    /// crates.io and docs.rs need, and the publish order resolves.
    #[test]
    fn every_published_crate_has_release_metadata() {
        let packages = parse_packages(&cargo_metadata().unwrap()).unwrap();
        let order = publish_order(&packages).unwrap();
        assert!(order.iter().any(|n| n == "krabka-protocol"), "{order:?}");
        let problems: Vec<String> = packages
            .iter()
            .filter(|p| p.publish)
            .flat_map(metadata_problems)
            .collect();
        assert!(problems.is_empty(), "{problems:#?}");
    }
}
