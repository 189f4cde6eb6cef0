//! The workspace as the release chores see it, read from `cargo metadata`: its members, the
//! order they publish in, and what each published crate needs before crates.io and docs.rs
//! take it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::cargo;

/// One workspace member as the release chores see it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Package {
    pub(crate) name: String,
    pub(crate) version: String,
    pub(crate) manifest_dir: PathBuf,
    /// `false` when the manifest says `publish = false` (or lists no registry).
    pub(crate) publish: bool,
    /// Names of other workspace members this one depends on (any kind: normal, build, dev).
    pub(crate) workspace_deps: BTreeSet<String>,
    pub(crate) description: Option<String>,
    pub(crate) license: Option<String>,
    pub(crate) repository: Option<String>,
    pub(crate) readme: Option<String>,
    pub(crate) keywords: Vec<String>,
    pub(crate) categories: Vec<String>,
    pub(crate) has_docs_rs_metadata: bool,
}

pub(crate) fn cargo_metadata() -> Result<serde_json::Value, String> {
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
pub(crate) fn parse_packages(meta: &serde_json::Value) -> Result<Vec<Package>, String> {
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
pub(crate) fn publish_order(packages: &[Package]) -> Result<Vec<String>, String> {
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
pub(crate) fn metadata_problems(p: &Package) -> Vec<String> {
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
    // Packaged with the crate: `cargo package` takes files from the crate's own directory.
    for file in ["LICENSE-MIT", "LICENSE-APACHE"] {
        if !p.manifest_dir.join(file).is_file() {
            problems.push(format!(
                "{}: {file} missing in {} (copy the workspace root's)",
                p.name,
                p.manifest_dir.display()
            ));
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
