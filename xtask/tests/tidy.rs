//! Repository hygiene as ordinary tests, so `cargo test --workspace` (and `cargo xtask ci`)
//! keeps the architecture from drifting: the direction of the dependencies between the crates,
//! the size of source files, the configuration reference, what every published crate ships, and
//! that no crate's modules import each other in a circle.
//!
//! Each failure says what to fix.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

#[path = "tidy/circles.rs"]
mod circles;

/// Most lines a source file under `crates/*/src`, `bench/src` or `xtask/src` may have.
const MAX_FILE_LINES: usize = 600;

/// The layers of the workspace, lowest first. A crate may depend only on crates of lower layers
/// (its dev-dependencies also on crates of its own layer), except where [`ALLOWED`] is stricter.
const LAYERS: &[(&str, usize)] = &[
    ("krabka-protocol", 0),
    ("krabka-storage", 1),
    // The SPI: a leaf, see ALLOWED.
    ("krabka-remote-storage", 2),
    ("krabka-remote-fs", 3),
    ("krabka-remote-s3", 3),
    ("krabka-remote-transform", 3),
    // The metadata managers and recovery: the local log and the SPI, no backend (see ALLOWED).
    ("krabka-remote-metadata", 3),
    ("krabka-tiering", 4),
    ("krabka-cli", 5),
    ("krabka-bench", 5),
    ("xtask", 5),
];

/// Crates whose normal (and build) dependencies among ours are limited to an explicit list.
const ALLOWED: &[(&str, &[&str])] = &[
    ("krabka-protocol", &[]),
    ("krabka-storage", &["krabka-protocol"]),
    // The SPI depends on no krabka crate: backends implement it without pulling in the log.
    ("krabka-remote-storage", &[]),
    ("krabka-remote-fs", &["krabka-remote-storage"]),
    ("krabka-remote-s3", &["krabka-remote-storage"]),
    ("krabka-remote-transform", &["krabka-remote-storage"]),
    // Metadata knows the log it appends events to and the SPI, never a backend nor tiering.
    (
        "krabka-remote-metadata",
        &["krabka-protocol", "krabka-storage", "krabka-remote-storage"],
    ),
    ("xtask", &[]),
];

/// The public configuration types whose every setting docs/configuration.md must name:
/// (crate directory, type). Their public fields are checked, or, for a type without public
/// fields, its `with_*` builder methods. Every other `pub struct …Config` found under
/// `crates/*/src` is checked as well.
const CONFIG_TYPES: &[(&str, &str)] = &[
    ("crates/storage", "Options"),
    ("crates/tiering", "TieringConfig"),
    ("crates/remote-s3", "S3Config"),
    ("crates/remote-transform", "TransformConfig"),
];

fn root() -> PathBuf {
    let xtask = Path::new(env!("CARGO_MANIFEST_DIR"));
    xtask.parent().map(Path::to_path_buf).unwrap_or_default()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

fn manifest(dir: &Path) -> toml_edit::DocumentMut {
    let path = dir.join("Cargo.toml");
    read(&path)
        .parse()
        .unwrap_or_else(|e| panic!("{} does not parse: {e}", path.display()))
}

/// A workspace member: its directory and manifest.
struct Member {
    dir: PathBuf,
    name: String,
    manifest: toml_edit::DocumentMut,
}

impl Member {
    fn published(&self) -> bool {
        self.manifest["package"]
            .get("publish")
            .and_then(toml_edit::Item::as_bool)
            .unwrap_or(true)
    }

    /// The packages this member depends on, as `(package, kind)` with kind `normal`, `build`
    /// or `dev` (target-specific tables included; a renamed dependency by its package name).
    fn dependencies(&self) -> Vec<(String, &'static str)> {
        let kinds = [
            ("dependencies", "normal"),
            ("build-dependencies", "build"),
            ("dev-dependencies", "dev"),
        ];
        let mut tables: Vec<(&dyn toml_edit::TableLike, &'static str)> = Vec::new();
        for (key, kind) in kinds {
            if let Some(t) = self.manifest.get(key).and_then(|i| i.as_table_like()) {
                tables.push((t, kind));
            }
        }
        if let Some(targets) = self.manifest.get("target").and_then(|i| i.as_table_like()) {
            for (_, target) in targets.iter() {
                for (key, kind) in kinds {
                    if let Some(t) = target.get(key).and_then(|i| i.as_table_like()) {
                        tables.push((t, kind));
                    }
                }
            }
        }
        let mut out = Vec::new();
        for (table, kind) in tables {
            for (key, item) in table.iter() {
                let package = item
                    .as_table_like()
                    .and_then(|t| t.get("package"))
                    .and_then(|p| p.as_str())
                    .unwrap_or(key);
                out.push((package.to_owned(), kind));
            }
        }
        out
    }
}

fn members() -> Vec<Member> {
    let root = root();
    let workspace = manifest(&root);
    let list = workspace["workspace"]["members"]
        .as_array()
        .unwrap_or_else(|| panic!("the root Cargo.toml has no [workspace] members list"));
    list.iter()
        .filter_map(|m| m.as_str())
        .map(|m| {
            let dir = root.join(m);
            let manifest = manifest(&dir);
            let name = manifest["package"]["name"]
                .as_str()
                .unwrap_or_else(|| panic!("{m}/Cargo.toml has no package name"))
                .to_owned();
            Member {
                dir,
                name,
                manifest,
            }
        })
        .collect()
}

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn relative(path: &Path) -> String {
    let root = root();
    path.strip_prefix(&root)
        .unwrap_or(path)
        .display()
        .to_string()
}

#[test]
fn crates_depend_only_on_lower_layers() {
    let layers: BTreeMap<&str, usize> = LAYERS.iter().copied().collect();
    let allowed: BTreeMap<&str, &[&str]> = ALLOWED.iter().copied().collect();
    let members = members();
    let ours: BTreeSet<&str> = members.iter().map(|m| m.name.as_str()).collect();
    let mut problems = Vec::new();
    for m in &members {
        let Some(&layer) = layers.get(m.name.as_str()) else {
            problems.push(format!(
                "{} is in no layer: add it to LAYERS in xtask/tests/tidy.rs (and to \
                 docs/ARCHITECTURE.md) at the level of what it depends on",
                m.name
            ));
            continue;
        };
        for (dep, kind) in m.dependencies() {
            if dep == m.name || !ours.contains(dep.as_str()) {
                continue;
            }
            let dep_layer = layers.get(dep.as_str()).copied().unwrap_or(usize::MAX);
            let higher = if kind == "dev" {
                dep_layer > layer
            } else {
                dep_layer >= layer
            };
            let outside_list = kind != "dev"
                && allowed
                    .get(m.name.as_str())
                    .is_some_and(|list| !list.contains(&dep.as_str()));
            if higher || outside_list {
                let rule = match allowed.get(m.name.as_str()) {
                    Some([]) => "must depend on no krabka crate".to_owned(),
                    Some(list) if kind != "dev" => {
                        format!("may depend only on {}", list.join(", "))
                    }
                    _ => {
                        "may depend only on crates of lower layers (LAYERS in xtask/tests/tidy.rs)"
                            .to_owned()
                    }
                };
                problems.push(format!(
                    "{} has a {kind} dependency on {dep}, but it {rule}: move the code that needs \
                     {dep} up into a higher crate, or what it uses down into a lower one",
                    m.name
                ));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "dependency direction (protocol → storage → remote-storage SPI → remote-fs / remote-s3 / \
         remote-transform / remote-metadata → tiering → cli, bench):\n  {}",
        problems.join("\n  ")
    );
}

/// The floors `docs/ARCHITECTURE.md` draws (` floor N   crate crate ...` lines of its code map):
/// floor number to crate names.
fn documented_floors(architecture: &str) -> BTreeMap<usize, BTreeSet<String>> {
    let mut floors = BTreeMap::new();
    for line in architecture.lines() {
        let mut words = line.split_whitespace();
        if words.next() != Some("floor") {
            continue;
        }
        let Some(n) = words.next().and_then(|n| n.parse::<usize>().ok()) else {
            continue;
        };
        let names = words
            .take_while(|w| !w.starts_with('('))
            .map(str::to_owned)
            .collect::<BTreeSet<_>>();
        floors.insert(n, names);
    }
    floors
}

#[test]
fn the_architecture_floor_table_is_the_layers_tidy_checks() {
    let mut layers: BTreeMap<usize, BTreeSet<String>> = BTreeMap::new();
    for (name, layer) in LAYERS {
        layers.entry(*layer).or_default().insert((*name).to_owned());
    }
    let documented = documented_floors(&read(&root().join("docs/ARCHITECTURE.md")));
    assert_eq!(
        documented, layers,
        "docs/ARCHITECTURE.md's floor table (` floor N   crate ...` lines) must list exactly the \
         crates of LAYERS in xtask/tests/tidy.rs, each on its layer"
    );
    // The parser itself: a table that differs is told apart.
    let sample = " floor 1   a  b\n floor 0   c   (the leaf)\nfloor x y\n";
    let parsed = documented_floors(sample);
    assert_eq!(parsed.len(), 2);
    assert_eq!(parsed.get(&0).map(BTreeSet::len), Some(1));
    assert_ne!(parsed, layers);
}

#[test]
fn no_source_file_is_over_600_lines() {
    let root = root();
    let mut files = Vec::new();
    for m in members() {
        rust_files(&m.dir.join("src"), &mut files);
    }
    files.sort();
    let offenders: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let lines = read(f).lines().count();
            (lines > MAX_FILE_LINES).then(|| format!("{} ({lines} lines)", relative(f)))
        })
        .collect();
    assert!(
        !files.is_empty(),
        "no source files found under {}",
        root.display()
    );
    assert!(
        offenders.is_empty(),
        "source files over {MAX_FILE_LINES} lines; split each by concept into modules \
         (a `foo.rs` becomes `foo/mod.rs` plus `foo/<concept>.rs`):\n  {}",
        offenders.join("\n  ")
    );
}

/// The body of `pub struct NAME { … }` in one of `files`, and the file it is in.
fn struct_body(files: &[PathBuf], name: &str) -> Option<(PathBuf, String)> {
    let open = format!("pub struct {name} {{");
    files.iter().find_map(|f| {
        let text = read(f);
        let at = text.find(&open)?;
        let body = &text[at + open.len()..];
        let end = body.find("\n}")?;
        Some((f.clone(), body[..end].to_owned()))
    })
}

/// Names of the public fields in a struct body (`    pub name: Type,`).
fn public_fields(body: &str) -> Vec<String> {
    body.lines()
        .filter_map(|l| l.strip_prefix("    pub "))
        .filter_map(|l| l.split_once(':').map(|(n, _)| n.trim().to_owned()))
        .filter(|n| n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .collect()
}

/// Names of the `pub fn with_*` methods of `impl NAME` blocks in `files`.
fn builder_methods(files: &[PathBuf], name: &str) -> Vec<String> {
    let open = format!("impl {name} {{");
    let mut out = Vec::new();
    for f in files {
        let text = read(f);
        let mut rest = text.as_str();
        while let Some(at) = rest.find(&open) {
            let body = &rest[at + open.len()..];
            let end = body.find("\n}").unwrap_or(body.len());
            for l in body[..end].lines() {
                if let Some(m) = l.trim_start().strip_prefix("pub fn with_")
                    && let Some((n, _)) = m.split_once(['(', '<'])
                {
                    out.push(format!("with_{n}"));
                }
            }
            rest = &body[end..];
        }
    }
    out
}

#[test]
fn every_public_config_setting_is_documented() {
    let root = root();
    let doc_path = root.join("docs/configuration.md");
    let doc = read(&doc_path);
    let mut types: Vec<(String, String)> = CONFIG_TYPES
        .iter()
        .map(|(c, t)| ((*c).to_owned(), (*t).to_owned()))
        .collect();
    // Any other public `…Config` struct of a library crate.
    for m in members() {
        let mut files = Vec::new();
        rust_files(&m.dir.join("src"), &mut files);
        for f in files {
            for l in read(&f).lines() {
                if let Some(rest) = l.strip_prefix("pub struct ")
                    && let Some(name) = rest.split([' ', '<', '(', ';']).next()
                    && name.ends_with("Config")
                {
                    let dir = relative(&m.dir);
                    if !types.iter().any(|(c, t)| *c == dir && t == name) {
                        types.push((dir, name.to_owned()));
                    }
                }
            }
        }
    }
    let mut problems = Vec::new();
    for (krate, ty) in &types {
        let mut files = Vec::new();
        rust_files(&root.join(krate).join("src"), &mut files);
        files.sort();
        let Some((file, body)) = struct_body(&files, ty) else {
            problems.push(format!(
                "`pub struct {ty}` not found under {krate}/src: update CONFIG_TYPES in \
                 xtask/tests/tidy.rs"
            ));
            continue;
        };
        let fields = public_fields(&body);
        let (settings, how) = if fields.is_empty() {
            (builder_methods(&files, ty), "builder method")
        } else {
            (fields, "field")
        };
        if settings.is_empty() {
            problems.push(format!(
                "`{ty}` ({}) has neither public fields nor `with_*` methods: teach \
                 xtask/tests/tidy.rs how it is configured",
                relative(&file)
            ));
        }
        for s in settings {
            let named = doc.contains(&format!("`{s}`")) || doc.contains(&format!("`{s}("));
            if !named {
                problems.push(format!(
                    "{how} `{s}` of `{ty}` ({}) is not in docs/configuration.md: add a row \
                     with its default and minimum",
                    relative(&file)
                ));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "undocumented configuration:\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn every_published_crate_ships_readme_licenses_and_docs_rs_metadata() {
    let root = root();
    let mut problems = Vec::new();
    for file in ["LICENSE-MIT", "LICENSE-APACHE"] {
        if !root.join(file).is_file() {
            problems.push(format!(
                "the workspace root has no {file}: add the standard text (copyright \"The \
                 krabka developers\")"
            ));
        }
    }
    for m in members().iter().filter(|m| m.published()) {
        let dir = relative(&m.dir);
        for file in ["README.md", "LICENSE-MIT", "LICENSE-APACHE"] {
            if !m.dir.join(file).is_file() {
                problems.push(format!(
                    "{} ({dir}) has no {file}: add it{}",
                    m.name,
                    if file == "README.md" {
                        " (what the crate is for, and its platform)"
                    } else {
                        ", a copy of the one at the workspace root (cargo packages files of \
                         the crate directory only)"
                    }
                ));
            }
        }
        let readme = m.dir.join("README.md");
        if readme.is_file() && !read(&readme).contains("Unix") {
            problems.push(format!(
                "{dir}/README.md does not state the platform: say that the crate supports \
                 Unix only"
            ));
        }
        let docs_rs = m.manifest["package"]
            .get("metadata")
            .and_then(|meta| meta.get("docs"))
            .and_then(|docs| docs.get("rs"))
            .is_some_and(|rs| rs.is_table_like());
        if !docs_rs {
            problems.push(format!(
                "{dir}/Cargo.toml has no [package.metadata.docs.rs]: add one (e.g. \
                 `all-features = true`) so docs.rs documents every feature"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "published crates:\n  {}",
        problems.join("\n  ")
    );
}

/// The crate roots of a member: `src/lib.rs`, `src/main.rs` and `src/bin/*.rs`, where present.
fn crate_roots(dir: &Path) -> Vec<PathBuf> {
    let src = dir.join("src");
    let mut roots: Vec<PathBuf> = ["lib.rs", "main.rs"]
        .iter()
        .map(|f| src.join(f))
        .filter(|p| p.is_file())
        .collect();
    let mut bins = Vec::new();
    if let Ok(entries) = std::fs::read_dir(src.join("bin")) {
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "rs") {
                bins.push(path);
            } else if path.join("main.rs").is_file() {
                bins.push(path.join("main.rs"));
            }
        }
    }
    bins.sort();
    roots.extend(bins);
    roots
}

/// One circle as the report prints it: the files, then each import between them and its names.
fn describe(dir: &Path, circle: &circles::Circle) -> String {
    let short = |p: &Path| p.strip_prefix(dir).unwrap_or(p).display().to_string();
    let mut out = format!(
        "{}: {} files: {}",
        relative(dir),
        circle.files.len(),
        circle
            .files
            .iter()
            .map(|f| short(f))
            .collect::<Vec<_>>()
            .join(", ")
    );
    for (from, to, names) in &circle.ties {
        out.push_str(&format!(
            "\n      {} uses {} of {}",
            short(from),
            names.join(", "),
            short(to)
        ));
    }
    out
}

#[test]
fn no_crate_has_an_import_circle_between_its_modules() {
    let read = |p: &Path| std::fs::read_to_string(p).ok();
    let mut circles = Vec::new();
    let mut problems = Vec::new();
    let mut roots_seen = 0;
    for m in members() {
        for root in crate_roots(&m.dir) {
            roots_seen += 1;
            let (found, trouble) = circles::find(&read, &root);
            problems.extend(trouble);
            circles.extend(found.iter().map(|c| describe(&m.dir, c)));
        }
    }
    assert!(
        roots_seen > 0,
        "no crate roots found under {}",
        root().display()
    );
    assert!(
        problems.is_empty(),
        "the import-circle check could not read every module:\n  {}",
        problems.join("\n  ")
    );
    assert!(
        circles.is_empty(),
        "modules that import each other in a circle; cut each one by moving what both sides \
         need into a module below them (or the user's side up), so that imports go one way:\n  {}",
        circles.join("\n  ")
    );
}

#[test]
fn the_import_circle_check_finds_a_two_file_circle_and_passes_one_way_imports() {
    let files: BTreeMap<PathBuf, &str> = [
        (
            "lib.rs",
            "mod a;\nmod b;\nmod c;\nmod d;\nmod f;\npub use a::A;\npub use b::B;\n",
        ),
        // a and b: a circle, one side through a path in code, the other through a macro.
        ("a.rs", "use crate::b::B;\npub struct A(pub B);\nfn f() -> crate::f::F { crate::f::F }\n"),
        // A facade's re-export that it does not use itself is no import of a.
        ("f.rs", "pub struct F;\npub use crate::a::A;\n"),
        ("b.rs", "pub struct B;\nfn f() { let _ = format!(\"{}\", crate::a::A(B).0 as u8); }\n"),
        // c uses d one way; d's test module and the re-exports of lib.rs make no edge.
        ("c.rs", "use crate::d::D;\npub fn c() -> D { D }\n"),
        (
            "d.rs",
            "mod e;\npub struct D;\npub fn d() -> e::E { e::E(D) }\n#[cfg(test)]\nmod tests {\n    use crate::c::c;\n}\n",
        ),
        // A child that uses its parent's item is an edge; its parent's use of it is not.
        ("d/e.rs", "pub struct E(pub super::D);\n"),
    ]
    .into_iter()
    .map(|(p, t)| (Path::new("/mem").join(p), t))
    .collect();
    let read = |p: &Path| files.get(p).map(|t| (*t).to_owned());
    let (found, problems) = circles::find(&read, Path::new("/mem/lib.rs"));
    assert!(problems.is_empty(), "{problems:?}");
    let described: Vec<String> = found
        .iter()
        .map(|c| describe(Path::new("/mem"), c))
        .collect();
    assert_eq!(found.len(), 1, "{described:#?}");
    assert_eq!(
        found[0].files,
        vec![Path::new("/mem/a.rs"), Path::new("/mem/b.rs")],
        "{described:#?}"
    );
    assert!(
        described[0].contains("a.rs uses B of b.rs")
            && described[0].contains("b.rs uses A of a.rs"),
        "{described:#?}"
    );
}
