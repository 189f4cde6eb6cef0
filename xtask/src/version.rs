//! `cargo xtask bump-version X.Y.Z`: the workspace version and every inter-crate requirement.

use crate::workspace::{cargo_metadata, parse_packages};
use crate::{step, workspace_root};

/// A semantic version `MAJOR.MINOR.PATCH[-PRE][+BUILD]` (semver.org 2.0.0).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Version {
    text: String,
}

impl Version {
    pub(crate) fn parse(s: &str) -> Result<Version, String> {
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

pub(crate) fn bump_version(version: &Version) -> Result<(), String> {
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
        let three = "expected three dot-separated numbers";
        for (bad, why) in [
            ("1.2", three),
            ("1.2.3.4", three),
            ("v1.2.3", "`v1` is not a number"),
            ("01.2.3", "`01` has a leading zero"),
            ("1.2.x", "`x` is not a number"),
            ("1.2.3-", "pre-release identifier `` is invalid"),
            (
                "1.2.3-01",
                "numeric pre-release identifier `01` has a leading zero",
            ),
            ("", three),
        ] {
            assert_eq!(
                Version::parse(bad),
                Err(format!("`{bad}` is not a semantic version X.Y.Z: {why}")),
                "{bad}"
            );
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
}
