//! Import circles between the modules (files) of one crate.
//!
//! The graph is "file A imports from module file B": every module reachable from a crate root
//! through `mod` declarations is parsed (a `#[cfg(test)]` or `#[test]` item left out), and each
//! path of its `use` items and of its code (macro bodies included, token by token) that starts
//! at `crate`, `super`, `self`, a module or an imported name is resolved to the file of the
//! module it names: `crate::a::b::Item` is an import from the file of `a::b`, whether `Item` is
//! defined there or re-exported by it. A name the file imported is followed to where it was
//! imported from.
//!
//! What is not an edge: a module's use of its own descendants (a `mod child;` declaration, a
//! `child::run()` call: the children are parts of the parent), and a re-export (`pub use`,
//! `pub(crate) use`, …) whose name the file does not use itself (a facade's public face). A
//! child that uses an item of its parent's file is an edge, like any other use.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use proc_macro2::{TokenStream, TokenTree};
use syn::punctuated::Punctuated;
use syn::visit::Visit;

/// One circle: the files of a strongly connected component of a crate's import graph (more
/// than one file), and every edge between them with the names that make it.
pub struct Circle {
    pub files: Vec<PathBuf>,
    /// `(importing file, imported module's file, names)`.
    pub ties: Vec<(PathBuf, PathBuf, Vec<String>)>,
}

/// The circles of the crate whose root file is `root`, and what could not be read or parsed.
/// `read` gives a file's text, or `None` where there is no such file.
pub fn find(read: &dyn Fn(&Path) -> Option<String>, root: &Path) -> (Vec<Circle>, Vec<String>) {
    let mut graph = Graph::default();
    graph.modules.push(Module::default());
    let dir = root.parent().map(Path::to_path_buf).unwrap_or_default();
    graph.load(read, root, 0, &dir);
    let edges = graph.edges();
    let circles = strongly_connected(graph.files.len(), &edges)
        .into_iter()
        .filter(|c| c.len() > 1)
        .map(|component| {
            let inside: BTreeSet<usize> = component.iter().copied().collect();
            let ties = edges
                .iter()
                .filter(|((from, to), _)| inside.contains(from) && inside.contains(to))
                .map(|((from, to), names)| {
                    let file = |i: usize| graph.files[i].clone();
                    (file(*from), file(*to), names.iter().cloned().collect())
                })
                .collect();
            let mut files: Vec<PathBuf> =
                component.iter().map(|&i| graph.files[i].clone()).collect();
            files.sort();
            Circle { files, ties }
        })
        .collect();
    (circles, graph.problems)
}

#[derive(Default)]
struct Module {
    parent: Option<usize>,
    /// The files the module is written in (two where a `cfg` picks one of two files).
    files: BTreeSet<usize>,
    children: BTreeMap<String, usize>,
    /// Item name → the files that define it.
    defs: BTreeMap<String, BTreeSet<usize>>,
    /// Local name → the paths it is imported from, as written in this module.
    imports: BTreeMap<String, Vec<Vec<String>>>,
    globs: Vec<Vec<String>>,
}

/// A path written in `file`, within `module`.
struct Reference {
    file: usize,
    module: usize,
    path: Vec<String>,
    glob: bool,
    /// For a re-export, the name it exports: an edge only where the file uses that name too.
    reexported_as: Option<String>,
}

#[derive(Default)]
struct Graph {
    files: Vec<PathBuf>,
    /// The module each file was loaded for.
    file_module: Vec<usize>,
    modules: Vec<Module>,
    references: Vec<Reference>,
    /// The identifiers of each file outside its `use` items.
    idents: Vec<BTreeSet<String>>,
    problems: Vec<String>,
}

enum Target {
    Module(usize),
    /// The files the named item is imported from.
    Item(BTreeSet<usize>),
}

/// Whether these attributes make an item test-only.
fn test_only(attrs: &[syn::Attribute]) -> bool {
    fn requires_test(meta: &syn::Meta) -> bool {
        match meta {
            syn::Meta::Path(p) => p.is_ident("test"),
            syn::Meta::List(list) if list.path.is_ident("all") => list
                .parse_args_with(Punctuated::<syn::Meta, syn::Token![,]>::parse_terminated)
                .is_ok_and(|metas| metas.iter().any(requires_test)),
            _ => false,
        }
    }
    attrs.iter().any(|a| {
        a.path().is_ident("test")
            || (a.path().is_ident("cfg")
                && a.parse_args::<syn::Meta>().is_ok_and(|m| requires_test(&m)))
    })
}

fn name(ident: &impl ToString) -> String {
    let s = ident.to_string();
    s.strip_prefix("r#").map(str::to_owned).unwrap_or(s)
}

impl Graph {
    /// Parses `path` as (part of) `module`, whose `mod child;` files live in `dir`.
    fn load(
        &mut self,
        read: &dyn Fn(&Path) -> Option<String>,
        path: &Path,
        module: usize,
        dir: &Path,
    ) {
        let Some(text) = read(path) else {
            self.problems
                .push(format!("cannot read {}", path.display()));
            return;
        };
        let ast = match syn::parse_file(&text) {
            Ok(ast) => ast,
            Err(e) => {
                self.problems
                    .push(format!("{} does not parse: {e}", path.display()));
                return;
            }
        };
        let file = self.files.len();
        self.files.push(path.to_path_buf());
        self.file_module.push(module);
        self.idents.push(BTreeSet::new());
        self.items(read, file, module, dir, false, &ast.items);
    }

    fn child(&mut self, module: usize, name: &str) -> usize {
        if let Some(&child) = self.modules[module].children.get(name) {
            return child;
        }
        let child = self.modules.len();
        self.modules.push(Module {
            parent: Some(module),
            ..Module::default()
        });
        self.modules[module].children.insert(name.to_owned(), child);
        child
    }

    fn items(
        &mut self,
        read: &dyn Fn(&Path) -> Option<String>,
        file: usize,
        module: usize,
        dir: &Path,
        inline: bool,
        items: &[syn::Item],
    ) {
        self.modules[module].files.insert(file);
        for item in items {
            let defined = match item {
                syn::Item::Mod(m) if !test_only(&m.attrs) => {
                    let child_name = name(&m.ident);
                    let child = self.child(module, &child_name);
                    let child_dir = dir.join(&child_name);
                    match &m.content {
                        Some((_, inner)) => self.items(read, file, child, &child_dir, true, inner),
                        None => self.declared_file(read, file, child, dir, inline, m),
                    }
                    continue;
                }
                syn::Item::Use(u) if !test_only(&u.attrs) => {
                    let public = !matches!(u.vis, syn::Visibility::Inherited);
                    self.use_item(file, module, u, public);
                    continue;
                }
                syn::Item::Const(i) => Some(&i.ident),
                syn::Item::Enum(i) => Some(&i.ident),
                syn::Item::Fn(i) => Some(&i.sig.ident),
                syn::Item::Macro(i) => i.ident.as_ref(),
                syn::Item::Static(i) => Some(&i.ident),
                syn::Item::Struct(i) => Some(&i.ident),
                syn::Item::Trait(i) => Some(&i.ident),
                syn::Item::TraitAlias(i) => Some(&i.ident),
                syn::Item::Type(i) => Some(&i.ident),
                syn::Item::Union(i) => Some(&i.ident),
                _ => None,
            };
            let mut code = Code {
                graph: self,
                file,
                module,
            };
            if code.skip(item) {
                continue;
            }
            code.visit_item(item);
            if let Some(ident) = defined {
                let defs = &mut self.modules[module].defs;
                defs.entry(name(ident)).or_default().insert(file);
            }
        }
    }

    /// Loads the file of `mod child;` (declared in `file`, where children live in `dir`).
    fn declared_file(
        &mut self,
        read: &dyn Fn(&Path) -> Option<String>,
        file: usize,
        child: usize,
        dir: &Path,
        inline: bool,
        m: &syn::ItemMod,
    ) {
        let child_name = name(&m.ident);
        let explicit = m.attrs.iter().find_map(|a| match &a.meta {
            syn::Meta::NameValue(nv) if nv.path.is_ident("path") => match &nv.value {
                syn::Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Str(s),
                    ..
                }) => Some(s.value()),
                _ => None,
            },
            _ => None,
        });
        if let Some(relative) = explicit {
            // Outside inline modules a `#[path]` is relative to the declaring file's directory.
            let base = if inline {
                dir.to_path_buf()
            } else {
                self.files[file]
                    .parent()
                    .map(Path::to_path_buf)
                    .unwrap_or_default()
            };
            let path = base.join(relative);
            let child_dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
            self.load(read, &path, child, &child_dir);
            return;
        }
        let flat = dir.join(format!("{child_name}.rs"));
        let nested = dir.join(&child_name).join("mod.rs");
        let path = if read(&flat).is_some() { flat } else { nested };
        self.load(read, &path, child, &dir.join(&child_name));
    }

    /// Records the imports of a `use` item of `module` and the references they make.
    fn use_item(&mut self, file: usize, module: usize, u: &syn::ItemUse, public: bool) {
        let mut leaves = Vec::new();
        flatten(&u.tree, &mut Vec::new(), &mut leaves);
        for (path, local) in leaves {
            let glob = local.is_none();
            match &local {
                Some(local) if local != "_" => {
                    let imports = &mut self.modules[module].imports;
                    imports.entry(local.clone()).or_default().push(path.clone());
                }
                Some(_) => {}
                None => self.modules[module].globs.push(path.clone()),
            }
            let reexported_as = public.then(|| local.unwrap_or_else(|| "*".to_owned()));
            self.references.push(Reference {
                file,
                module,
                path,
                glob,
                reexported_as,
            });
        }
    }

    /// What `name` means in `module`. Written in `module` itself (`outside` false), a name it
    /// imports is followed to the module it is imported from; named from outside
    /// (`module::name`), it is taken from `module`'s file as the path says, re-exported or not,
    /// unless it is a module.
    fn name_in(&self, module: usize, name: &str, outside: bool, depth: usize) -> Option<Target> {
        if depth > 32 {
            return None;
        }
        let m = &self.modules[module];
        if let Some(&child) = m.children.get(name) {
            return Some(Target::Module(child));
        }
        if let Some(files) = m.defs.get(name) {
            return Some(Target::Item(files.clone()));
        }
        for path in m.imports.get(name).into_iter().flatten() {
            match self.resolve(module, path, depth + 1) {
                Some((Target::Module(target), _)) => return Some(Target::Module(target)),
                Some((item, _)) if !outside => return Some(item),
                _ => {}
            }
        }
        if outside {
            return None;
        }
        m.globs
            .iter()
            .find_map(|glob| match self.resolve(module, glob, depth + 1) {
                Some((Target::Module(g), _)) if g != module => {
                    self.name_in(g, name, true, depth + 1)
                }
                _ => None,
            })
    }

    /// What `path`, written in `module`, names, and the item's name; `None` for a path outside
    /// the crate (another crate, a local, a generic, `Self`).
    fn resolve(&self, module: usize, path: &[String], depth: usize) -> Option<(Target, String)> {
        let (first, rest) = path.split_first()?;
        let mut current = match first.as_str() {
            "crate" => 0,
            "self" => module,
            "super" => self.modules[module].parent?,
            "Self" => return None,
            other => match self.name_in(module, other, false, depth)? {
                Target::Module(m) => m,
                item => return Some((item, other.to_owned())),
            },
        };
        for segment in rest {
            current = match segment.as_str() {
                "super" => self.modules[current].parent?,
                "self" => current,
                other => match self.name_in(current, other, true, depth) {
                    Some(Target::Module(m)) => m,
                    Some(item) => return Some((item, other.to_owned())),
                    // Re-exported by that module, or made there by a macro: its files.
                    None => {
                        let files = self.modules[current].files.clone();
                        return Some((Target::Item(files), other.to_owned()));
                    }
                },
            };
        }
        Some((Target::Module(current), String::new()))
    }

    /// Whether `module` is `ancestor` or lies below it.
    fn descends(&self, module: usize, ancestor: usize) -> bool {
        let mut current = Some(module);
        while let Some(m) = current {
            if m == ancestor {
                return true;
            }
            current = self.modules[m].parent;
        }
        false
    }

    /// The import graph: `(from, to)` → names.
    fn edges(&self) -> BTreeMap<(usize, usize), BTreeSet<String>> {
        let mut edges: BTreeMap<(usize, usize), BTreeSet<String>> = BTreeMap::new();
        for r in &self.references {
            if let Some(exported) = &r.reexported_as
                && !self.idents[r.file].contains(exported)
            {
                continue;
            }
            let (files, name) = match self.resolve(r.module, &r.path, 0) {
                Some((Target::Item(files), name)) => (files, name),
                Some((Target::Module(m), _)) if r.glob => {
                    (self.modules[m].files.clone(), "*".to_owned())
                }
                _ => continue,
            };
            let label = if r.glob {
                format!("{}::*", r.path.join("::"))
            } else {
                name
            };
            for to in files {
                if to != r.file && !self.descends(self.file_module[to], self.file_module[r.file]) {
                    edges.entry((r.file, to)).or_default().insert(label.clone());
                }
            }
        }
        edges
    }
}

/// The leaves of a use tree: `(path, Some(local name))`, or `(path, None)` for a glob.
fn flatten(
    tree: &syn::UseTree,
    prefix: &mut Vec<String>,
    out: &mut Vec<(Vec<String>, Option<String>)>,
) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(name(&p.ident));
            flatten(&p.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) if n.ident == "self" => {
            if let Some(last) = prefix.last() {
                out.push((prefix.clone(), Some(last.clone())));
            }
        }
        syn::UseTree::Name(n) => {
            let mut path = prefix.clone();
            path.push(name(&n.ident));
            out.push((path, Some(name(&n.ident))));
        }
        syn::UseTree::Rename(r) => {
            let mut path = prefix.clone();
            if r.ident != "self" {
                path.push(name(&r.ident));
            }
            out.push((path, Some(name(&r.rename))));
        }
        syn::UseTree::Glob(_) => out.push((prefix.clone(), None)),
        syn::UseTree::Group(g) => {
            for tree in &g.items {
                flatten(tree, prefix, out);
            }
        }
    }
}

/// Collects the references and identifiers of code (not `use` or `mod` items of the module).
struct Code<'a> {
    graph: &'a mut Graph,
    file: usize,
    module: usize,
}

impl Code<'_> {
    fn skip(&self, item: &syn::Item) -> bool {
        let attrs = match item {
            syn::Item::Const(i) => &i.attrs,
            syn::Item::Enum(i) => &i.attrs,
            syn::Item::Fn(i) => &i.attrs,
            syn::Item::Impl(i) => &i.attrs,
            syn::Item::Macro(i) => &i.attrs,
            syn::Item::Static(i) => &i.attrs,
            syn::Item::Struct(i) => &i.attrs,
            syn::Item::Trait(i) => &i.attrs,
            syn::Item::Type(i) => &i.attrs,
            syn::Item::Union(i) => &i.attrs,
            syn::Item::Mod(i) => &i.attrs,
            syn::Item::Use(i) => &i.attrs,
            _ => return false,
        };
        test_only(attrs)
    }

    fn reference(&mut self, path: Vec<String>) {
        self.graph.references.push(Reference {
            file: self.file,
            module: self.module,
            path,
            glob: false,
            reexported_as: None,
        });
    }

    /// Paths in a macro's tokens, which syn leaves unparsed.
    fn tokens(&mut self, tokens: TokenStream) {
        let trees: Vec<TokenTree> = tokens.into_iter().collect();
        let colon =
            |i: usize| matches!(trees.get(i), Some(TokenTree::Punct(p)) if p.as_char() == ':');
        let mut i = 0;
        while i < trees.len() {
            match &trees[i] {
                TokenTree::Group(g) => self.tokens(g.stream()),
                TokenTree::Ident(first) => {
                    let absolute = i >= 2 && colon(i - 1) && colon(i - 2);
                    let mut path = vec![name(first)];
                    while colon(i + 1) && colon(i + 2) {
                        let Some(TokenTree::Ident(next)) = trees.get(i + 3) else {
                            break;
                        };
                        path.push(name(next));
                        i += 3;
                    }
                    self.graph.idents[self.file].extend(path.iter().cloned());
                    if path.len() > 1 && !absolute {
                        self.reference(path);
                    }
                }
                TokenTree::Punct(_) | TokenTree::Literal(_) => {}
            }
            i += 1;
        }
    }
}

impl<'ast> Visit<'ast> for Code<'_> {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        if self.skip(item) {
            return;
        }
        match item {
            // A `use` inside a function: an import of the module, never a re-export.
            syn::Item::Use(u) => self.graph.use_item(self.file, self.module, u, false),
            syn::Item::Mod(_) => {}
            _ => syn::visit::visit_item(self, item),
        }
    }

    fn visit_impl_item(&mut self, item: &'ast syn::ImplItem) {
        let attrs = match item {
            syn::ImplItem::Const(i) => &i.attrs,
            syn::ImplItem::Fn(i) => &i.attrs,
            syn::ImplItem::Type(i) => &i.attrs,
            syn::ImplItem::Macro(i) => &i.attrs,
            _ => return syn::visit::visit_impl_item(self, item),
        };
        if !test_only(attrs) {
            syn::visit::visit_impl_item(self, item);
        }
    }

    fn visit_attribute(&mut self, _: &'ast syn::Attribute) {
        // Docs and cfgs import nothing.
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.leading_colon.is_none() && path.segments.len() > 1 {
            let segments = path.segments.iter().map(|s| name(&s.ident)).collect();
            self.reference(segments);
        }
        syn::visit::visit_path(self, path);
    }

    fn visit_ident(&mut self, ident: &'ast proc_macro2::Ident) {
        self.graph.idents[self.file].insert(name(ident));
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.tokens(mac.tokens.clone());
        syn::visit::visit_macro(self, mac);
    }
}

/// Tarjan's strongly connected components of the graph on `0..nodes`.
fn strongly_connected(
    nodes: usize,
    edges: &BTreeMap<(usize, usize), BTreeSet<String>>,
) -> Vec<Vec<usize>> {
    struct State<'a> {
        next: Vec<Vec<usize>>,
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        counter: usize,
        out: &'a mut Vec<Vec<usize>>,
    }
    fn connect(s: &mut State<'_>, v: usize) {
        s.index[v] = Some(s.counter);
        s.low[v] = s.counter;
        s.counter += 1;
        s.stack.push(v);
        s.on_stack[v] = true;
        for w in s.next[v].clone() {
            match s.index[w] {
                None => {
                    connect(s, w);
                    s.low[v] = s.low[v].min(s.low[w]);
                }
                Some(i) if s.on_stack[w] => s.low[v] = s.low[v].min(i),
                Some(_) => {}
            }
        }
        if Some(s.low[v]) == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack[w] = false;
                component.push(w);
                if w == v {
                    break;
                }
            }
            s.out.push(component);
        }
    }
    let mut next = vec![Vec::new(); nodes];
    for &(from, to) in edges.keys() {
        next[from].push(to);
    }
    let mut out = Vec::new();
    let mut state = State {
        next,
        index: vec![None; nodes],
        low: vec![0; nodes],
        on_stack: vec![false; nodes],
        stack: Vec::new(),
        counter: 0,
        out: &mut out,
    };
    for v in 0..nodes {
        if state.index[v].is_none() {
            connect(&mut state, v);
        }
    }
    out
}
