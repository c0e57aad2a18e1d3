//! What the compiler cannot say about the shape: the module graph of the two crates has no
//! cycles, every arrow between top-level modules points down the layer order of `LAYERS`, only
//! `src/k8s` talks to an API server, and the core crate's manifest names no client.
//!
//! That the core (crates/hap-core) calls no API server is the compiler's to say: it has no
//! client among its dependencies, and `make test` builds and tests it alone
//! (`cargo test -p hap-core`), where features of the operator's dependencies cannot leak in.
//!
//! The graph is built from the paths the code names (`use crate::…`, `super::…`, `crate::a::b`
//! in expressions, a child module named from its parent), with comments, string literals and
//! `#[cfg(test)]` items left out; a path through a `pub use` re-export counts as an arrow to the
//! module that defines the name. The two crates share one module namespace here: the operator
//! re-exports the core's modules under their names, and `hap_core::x` reads as `crate::x`.
//! `cargo test --test it -- layering:: --nocapture` prints the graph.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Top-level modules from the bottom layer up. A module may name modules of its own layer or
/// below, never above; `main` (the binary) sits on top of everything.
const LAYERS: &[&[&str]] = &[
    // The core crate (crates/hap-core). Plain data: CRD types, label keys, durations, the short sorted map they are kept in.
    &["duration", "small_map", "labels", "api"],
    // Validation diagnostics and label syntax; what a claim's recorded status says.
    &["diag", "claim_state"],
    // The pure core, bottom to top: the inventory and tenant policy, request sources, the
    // rules engine (which validates a whole HapConfig, sources included), selection, the
    // ledger of in-flight writes, desired statuses and release decisions, and what one claim
    // reconcile does.
    &["pools", "tenancy"],
    &["sources"],
    &["rules"],
    &["selection"],
    &["ledger"],
    &["status", "release"],
    &["decision"],
    // The operator crate. Process-wide helpers that know no API server: the lease clock, the log
    // format, metrics families.
    &[
        "leadership",
        "logs",
        "metrics",
        "metrics_keb",
        "connections",
    ],
    // The only edge to API servers.
    &["k8s"],
    // HTTP servers and the reconcilers, which read through k8s and decide in the core.
    &["http"],
    &["webhook"],
    &["secure_metrics"],
    &["controller"],
    // Commands, the CRD printer, the library root and the binary.
    &["cli", "crd"],
    &["crate"],
    &["main"],
];

/// Names that mean an API call or a client, wherever they appear outside `src/k8s`.
const CLIENT_NAMES: &[&str] = &[
    "Api",
    "Client",
    "watcher",
    "reflector",
    "ListParams",
    "PatchParams",
    "PostParams",
    "DeleteParams",
    "GetParams",
    "WatchParams",
    "Kubeconfig",
    "Discovery",
];

struct Module {
    path: String,
    file: PathBuf,
    tokens: Vec<Tok>,
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    Punct(char),
    PathSep,
}

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The source folders of the two crates, the core first.
const SOURCES: &[&str] = &["crates/hap-core/src", "src"];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("read src")
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// Files that only hold tests (declared `#[cfg(test)] mod …;` by their parent).
fn is_test_file(rel: &Path) -> bool {
    rel.components().any(|c| c.as_os_str() == "tests")
        || rel
            .file_stem()
            .and_then(|s| s.to_str())
            .is_some_and(|s| s == "tests" || s.ends_with("_tests"))
}

fn module_path(rel: &Path) -> String {
    let mut parts: Vec<String> = rel
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|l| l == "mod") {
        parts.pop();
    }
    match parts.as_slice() {
        [one] if one == "lib" => "crate".to_string(),
        _ => parts.join("::"),
    }
}

/// Tokens of Rust source without comments, literals and lifetimes; enough to follow paths.
fn tokenize(src: &str) -> Vec<Tok> {
    let b: Vec<char> = src.chars().collect();
    let mut i = 0;
    let mut out = Vec::new();
    while i < b.len() {
        let c = b[i];
        if c == '/' && b.get(i + 1) == Some(&'/') {
            while i < b.len() && b[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && b.get(i + 1) == Some(&'*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == '"' {
            i = skip_string(&b, i + 1);
        } else if (c == 'r' || c == 'b')
            && !prev_is_ident(&b, i)
            && raw_string_start(&b, i).is_some()
        {
            i = skip_raw_string(&b, i);
        } else if c == 'b' && b.get(i + 1) == Some(&'"') && !prev_is_ident(&b, i) {
            i = skip_string(&b, i + 2);
        } else if c == '\'' {
            i = skip_char_or_lifetime(&b, i);
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < b.len() && (b[i].is_alphanumeric() || b[i] == '_') {
                i += 1;
            }
            out.push(Tok::Ident(b[start..i].iter().collect()));
        } else if c == ':' && b.get(i + 1) == Some(&':') {
            out.push(Tok::PathSep);
            i += 2;
        } else {
            if !c.is_whitespace() {
                out.push(Tok::Punct(c));
            }
            i += 1;
        }
    }
    out
}

fn prev_is_ident(b: &[char], i: usize) -> bool {
    i > 0 && (b[i - 1].is_alphanumeric() || b[i - 1] == '_')
}

/// The number of `#` of a raw string starting at `i` (`r"`, `r#"`, `br#"`).
fn raw_string_start(b: &[char], i: usize) -> Option<usize> {
    let mut j = i;
    if b[j] == 'b' {
        j += 1;
    }
    if b.get(j) != Some(&'r') {
        return None;
    }
    j += 1;
    let hashes = b[j..].iter().take_while(|c| **c == '#').count();
    (b.get(j + hashes) == Some(&'"')).then_some(hashes)
}

fn skip_raw_string(b: &[char], i: usize) -> usize {
    let hashes = raw_string_start(b, i).unwrap_or(0);
    let mut j = i + b[i..].iter().position(|c| *c == '"').unwrap_or(0) + 1;
    while j < b.len() {
        if b[j] == '"'
            && b[j + 1..]
                .iter()
                .take(hashes)
                .filter(|c| **c == '#')
                .count()
                == hashes
        {
            return j + 1 + hashes;
        }
        j += 1;
    }
    j
}

fn skip_string(b: &[char], mut i: usize) -> usize {
    while i < b.len() {
        match b[i] {
            '\\' => i += 2,
            '"' => return i + 1,
            _ => i += 1,
        }
    }
    i
}

fn skip_char_or_lifetime(b: &[char], i: usize) -> usize {
    // 'x', '\n', '\u{..}' are literals; 'a (no closing quote right after) is a lifetime.
    if b.get(i + 1) == Some(&'\\') {
        let close = b[i + 2..].iter().position(|c| *c == '\'').unwrap_or(0);
        return i + 3 + close;
    }
    if b.get(i + 2) == Some(&'\'') {
        return i + 3;
    }
    let mut j = i + 1;
    while j < b.len() && (b[j].is_alphanumeric() || b[j] == '_') {
        j += 1;
    }
    j
}

/// Drops every item under `#[cfg(test)]` (a test module, a test-only import or helper).
fn drop_test_items(toks: Vec<Tok>) -> Vec<Tok> {
    let mut out = Vec::with_capacity(toks.len());
    let mut i = 0;
    while i < toks.len() {
        if is_cfg_test(&toks[i..]) {
            i += 7;
            i = skip_item(&toks, i);
        } else {
            out.push(toks[i].clone());
            i += 1;
        }
    }
    out
}

fn is_cfg_test(t: &[Tok]) -> bool {
    let want = [
        Tok::Punct('#'),
        Tok::Punct('['),
        Tok::Ident("cfg".into()),
        Tok::Punct('('),
        Tok::Ident("test".into()),
        Tok::Punct(')'),
        Tok::Punct(']'),
    ];
    t.len() >= want.len() && t[..want.len()] == want
}

/// The index after the item starting at `i`: through its `;` or its matching `}`.
fn skip_item(t: &[Tok], mut i: usize) -> usize {
    while i < t.len() {
        match t[i] {
            Tok::Punct(';') => return i + 1,
            Tok::Punct('{') => return matching_brace(t, i) + 1,
            _ => i += 1,
        }
    }
    i
}

fn matching_brace(t: &[Tok], open: usize) -> usize {
    let mut depth = 0;
    for (k, tok) in t.iter().enumerate().skip(open) {
        match tok {
            Tok::Punct('{') => depth += 1,
            Tok::Punct('}') => {
                depth -= 1;
                if depth == 0 {
                    return k;
                }
            }
            _ => {}
        }
    }
    t.len()
}

fn load() -> Vec<Module> {
    SOURCES.iter().flat_map(|dir| load_crate(dir)).collect()
}

/// `file` is the path from the repository's root.
fn load_crate(dir: &str) -> Vec<Module> {
    let src = repo().join(dir);
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files
        .into_iter()
        .filter_map(|f| {
            let rel = f.strip_prefix(&src).expect("under src").to_path_buf();
            if is_test_file(&rel) {
                return None;
            }
            let text = std::fs::read_to_string(&f).expect("read source");
            Some(Module {
                path: module_path(&rel),
                file: Path::new(dir).join(rel),
                tokens: as_one_namespace(drop_test_items(tokenize(&text))),
            })
        })
        .collect()
}

/// `hap_core::x` as `crate::x`: the operator re-exports the core's modules under their names.
fn as_one_namespace(toks: Vec<Tok>) -> Vec<Tok> {
    toks.into_iter()
        .map(|t| match t {
            Tok::Ident(i) if i == "hap_core" => Tok::Ident("crate".into()),
            t => t,
        })
        .collect()
}

/// A `use` tree flattened to its paths; `self` in a group names the group's prefix.
fn use_paths(t: &[Tok], i: &mut usize, prefix: Vec<String>, out: &mut Vec<(Vec<String>, String)>) {
    let mut path = prefix;
    loop {
        match t.get(*i) {
            Some(Tok::Ident(s)) => {
                *i += 1;
                if s == "self" && !path.is_empty() {
                    // `a::{self, b}`: the group's own module.
                } else {
                    path.push(s.clone());
                }
            }
            Some(Tok::PathSep) => *i += 1,
            Some(Tok::Punct('{')) => {
                *i += 1;
                loop {
                    use_paths(t, i, path.clone(), out);
                    match t.get(*i) {
                        Some(Tok::Punct(',')) => *i += 1,
                        Some(Tok::Punct('}')) => {
                            *i += 1;
                            return;
                        }
                        _ => return,
                    }
                    if t.get(*i) == Some(&Tok::Punct('}')) {
                        *i += 1;
                        return;
                    }
                }
            }
            Some(Tok::Punct('*')) => {
                *i += 1;
            }
            _ => {
                let alias = match (t.get(*i), t.get(*i + 1)) {
                    (Some(Tok::Ident(a)), Some(Tok::Ident(n))) if a == "as" => {
                        *i += 2;
                        n.clone()
                    }
                    _ => path.last().cloned().unwrap_or_default(),
                };
                if !path.is_empty() {
                    out.push((path, alias));
                }
                return;
            }
        }
        if let Some(Tok::Ident(a)) = t.get(*i)
            && a == "as"
        {
            let alias = match t.get(*i + 1) {
                Some(Tok::Ident(n)) => n.clone(),
                _ => String::new(),
            };
            *i += 2;
            out.push((path, alias));
            return;
        }
    }
}

/// Every `use` of a module: (path, is `pub use`, local name).
fn uses(m: &Module) -> Vec<(Vec<String>, bool, String)> {
    let t = &m.tokens;
    let mut out = Vec::new();
    let mut i = 0;
    while i < t.len() {
        if t[i] == Tok::Ident("use".into()) {
            let public = i > 0 && is_pub_before(t, i);
            let mut j = i + 1;
            let mut paths = Vec::new();
            use_paths(t, &mut j, Vec::new(), &mut paths);
            out.extend(paths.into_iter().map(|(p, a)| (p, public, a)));
            i = j.max(i + 1);
        } else {
            i += 1;
        }
    }
    out
}

fn is_pub_before(t: &[Tok], i: usize) -> bool {
    // `pub use`, `pub(crate) use`, `pub(super) use`
    matches!(&t[i - 1], Tok::Ident(p) if p == "pub")
        || (i >= 4
            && t[i - 1] == Tok::Punct(')')
            && matches!(&t[i - 4], Tok::Ident(p) if p == "pub"))
}

/// Every path chain `a::b::c` in a module's code (outside `use`), first segment included.
fn chains(m: &Module) -> Vec<Vec<String>> {
    let t = &m.tokens;
    let mut out = Vec::new();
    let mut i = 0;
    while i < t.len() {
        if t[i] == Tok::Ident("use".into()) {
            while i < t.len() && t[i] != Tok::Punct(';') {
                i += 1;
            }
            continue;
        }
        if let Tok::Ident(first) = &t[i]
            && t.get(i + 1) == Some(&Tok::PathSep)
            && (i == 0 || t[i - 1] != Tok::PathSep)
        {
            let mut path = vec![first.clone()];
            let mut j = i + 1;
            while t.get(j) == Some(&Tok::PathSep) {
                match t.get(j + 1) {
                    Some(Tok::Ident(s)) => {
                        path.push(s.clone());
                        j += 2;
                    }
                    _ => break,
                }
            }
            out.push(path);
            i = j;
            continue;
        }
        i += 1;
    }
    out
}

struct Crate {
    modules: BTreeSet<String>,
    /// module → exported name → the path it re-exports.
    reexports: BTreeMap<String, BTreeMap<String, Vec<String>>>,
}

impl Crate {
    fn parent(m: &str) -> String {
        match m.rsplit_once("::") {
            Some((p, _)) => p.to_string(),
            None if m == "crate" => "crate".to_string(),
            None => "crate".to_string(),
        }
    }

    fn join(base: &str, seg: &str) -> String {
        if base == "crate" {
            seg.to_string()
        } else {
            format!("{base}::{seg}")
        }
    }

    /// The module a path starting in `from` names, following `pub use` to the defining module.
    fn resolve(&self, from: &str, path: &[String], depth: usize) -> Option<String> {
        let (mut base, rest) = match path.first().map(String::as_str) {
            Some("crate") => ("crate".to_string(), &path[1..]),
            Some("super") => {
                let mut b = from.to_string();
                let mut k = 0;
                while path.get(k).map(String::as_str) == Some("super") {
                    b = Self::parent(&b);
                    k += 1;
                }
                (b, &path[k..])
            }
            Some("self") => (from.to_string(), &path[1..]),
            Some(first) if self.modules.contains(&Self::join(from, first)) => {
                (from.to_string(), path)
            }
            _ => return None,
        };
        for (k, seg) in rest.iter().enumerate() {
            let next = Self::join(&base, seg);
            if self.modules.contains(&next) {
                base = next;
                continue;
            }
            if depth < 8
                && let Some(target) = self.reexports.get(&base).and_then(|r| r.get(seg))
            {
                let mut p = target.clone();
                p.extend(rest[k + 1..].iter().cloned());
                return self.resolve(&base, &p, depth + 1).or(Some(base));
            }
            break;
        }
        Some(base)
    }
}

/// module → the modules it names (itself, its ancestors and descendants left out).
fn graph(mods: &[Module]) -> BTreeMap<String, BTreeSet<String>> {
    let mut c = Crate {
        modules: mods.iter().map(|m| m.path.clone()).collect(),
        reexports: BTreeMap::new(),
    };
    c.modules.insert("crate".into());
    for m in mods {
        let r: BTreeMap<_, _> = uses(m)
            .into_iter()
            .filter(|(_, public, _)| *public)
            .map(|(p, _, alias)| (alias, p))
            .collect();
        c.reexports.insert(m.path.clone(), r);
    }
    let mut g = BTreeMap::new();
    for m in mods {
        let mut to = BTreeSet::new();
        let paths = uses(m).into_iter().map(|(p, _, _)| p).chain(chains(m));
        for p in paths {
            if let Some(t) = c.resolve(&m.path, &p, 0)
                && !related(&m.path, &t)
            {
                to.insert(t);
            }
        }
        g.insert(m.path.clone(), to);
    }
    g
}

fn related(a: &str, b: &str) -> bool {
    a == b
        || a == "crate"
        || b == "crate"
        || a.starts_with(&format!("{b}::"))
        || b.starts_with(&format!("{a}::"))
}

fn top(m: &str) -> String {
    m.split("::").next().unwrap_or(m).to_string()
}

fn layer_of(top: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&top))
}

/// Strongly connected groups of more than one node (Tarjan).
fn cycles(g: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct T<'a> {
        g: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        next: usize,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a str) {
        t.index.insert(v, t.next);
        t.low.insert(v, t.next);
        t.next += 1;
        t.stack.push(v);
        t.on.insert(v);
        let g = t.g;
        for w in g.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !t.index.contains_key(w) {
                visit(t, w);
                let lw = t.low[w];
                let lv = t.low[v];
                t.low.insert(v, lv.min(lw));
            } else if t.on.contains(w) {
                let iw = t.index[w];
                let lv = t.low[v];
                t.low.insert(v, lv.min(iw));
            }
        }
        if t.low[v] == t.index[v] {
            let mut group = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                group.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if group.len() > 1 {
                group.sort();
                t.out.push(group);
            }
        }
    }
    let mut t = T {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in g.keys() {
        if !t.index.contains_key(v.as_str()) {
            visit(&mut t, v);
        }
    }
    t.out
}

fn top_graph(g: &BTreeMap<String, BTreeSet<String>>) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (from, tos) in g {
        let entry = out.entry(top(from)).or_default();
        for to in tos {
            if top(to) != top(from) {
                entry.insert(top(to));
            }
        }
    }
    out
}

/// The file-level arrows behind one top-level arrow, for the failure message.
fn witnesses(g: &BTreeMap<String, BTreeSet<String>>, a: &str, b: &str) -> Vec<String> {
    g.iter()
        .flat_map(|(f, tos)| tos.iter().map(move |t| (f, t)))
        .filter(|(f, t)| top(f) == a && top(t) == b)
        .map(|(f, t)| format!("{f} -> {t}"))
        .collect()
}

fn print_graph(g: &BTreeMap<String, BTreeSet<String>>) {
    println!("module graph (top level):");
    for (from, tos) in top_graph(g) {
        let tos: Vec<_> = tos.into_iter().collect();
        println!("  {from} -> {}", tos.join(", "));
    }
}

#[test]
fn every_top_level_module_has_a_layer() {
    let mods = load();
    let missing: BTreeSet<_> = mods
        .iter()
        .map(|m| top(&m.path))
        .filter(|t| layer_of(t).is_none())
        .collect();
    assert!(
        missing.is_empty(),
        "top-level modules without a place in LAYERS: {missing:?}"
    );
}

#[test]
fn no_import_cycles_between_modules() {
    let g = graph(&load());
    print_graph(&g);
    let file = cycles(&g);
    let tops = cycles(&top_graph(&g));
    println!(
        "file-level cycles: {}, top-level cycles: {}",
        file.len(),
        tops.len()
    );
    let mut msg = String::new();
    for c in &file {
        msg += &format!("  cycle between files: {}\n", c.join(" <-> "));
    }
    for c in &tops {
        msg += &format!("  cycle between top-level modules: {}\n", c.join(" <-> "));
        for a in c {
            for b in c {
                for w in witnesses(&g, a, b) {
                    msg += &format!("      {w}\n");
                }
            }
        }
    }
    assert!(msg.is_empty(), "import cycles:\n{msg}");
}

#[test]
fn every_arrow_points_down_the_layers() {
    let g = graph(&load());
    let mut up = Vec::new();
    for (from, tos) in top_graph(&g) {
        for to in tos {
            let (Some(lf), Some(lt)) = (layer_of(&from), layer_of(&to)) else {
                continue;
            };
            if lt > lf {
                up.push(format!(
                    "{from} -> {to}: {}",
                    witnesses(&g, &from, &to).join(", ")
                ));
            }
        }
    }
    println!("upward arrows: {}", up.len());
    assert!(
        up.is_empty(),
        "arrows pointing up the layers (LAYERS in tests/it/layering.rs):\n  {}",
        up.join("\n  ")
    );
}

/// The path a `use` or a chain names, with `kube::api::Api` style paths kept whole.
fn named_paths(m: &Module) -> Vec<String> {
    uses(m)
        .into_iter()
        .map(|(p, _, _)| p)
        .chain(chains(m))
        .map(|p| p.join("::"))
        .collect()
}

#[test]
fn only_k8s_talks_to_an_api_server() {
    let mut found = Vec::new();
    for m in load() {
        if top(&m.path) == "k8s" {
            continue;
        }
        let imported: BTreeSet<String> = uses(&m)
            .into_iter()
            .filter(|(p, _, _)| p.first().is_some_and(|f| f == "kube"))
            .map(|(_, _, alias)| alias)
            .collect();
        let mut hits = BTreeSet::new();
        for p in named_paths(&m) {
            let segs: Vec<&str> = p.split("::").collect();
            // `kube::Error::Api` is an error variant, not a client.
            let kube_client = segs.first() == Some(&"kube")
                && !segs.contains(&"Error")
                && segs.last().is_some_and(|s| CLIENT_NAMES.contains(s));
            let imported_client = segs
                .first()
                .is_some_and(|s| CLIENT_NAMES.contains(s) && imported.contains(*s));
            if kube_client || imported_client {
                hits.insert(p);
            }
        }
        for name in &imported {
            if CLIENT_NAMES.contains(&name.as_str()) {
                hits.insert(format!("kube::…::{name}"));
            }
        }
        if !hits.is_empty() {
            let hits: Vec<_> = hits.into_iter().collect();
            found.push(format!("{}: {}", m.file.display(), hits.join(", ")));
        }
    }
    println!("modules outside k8s naming a kube client: {}", found.len());
    assert!(
        found.is_empty(),
        "API clients or calls outside src/k8s (move them behind a src/k8s function):\n  {}",
        found.join("\n  ")
    );
}

/// Whether the item whose keyword is at `i` (`fn`, or a field's name) is visible outside
/// `k8s`: plain `pub` or `pub(crate)`, not `pub(super)` or `pub(in crate::k8s)`.
fn visible_outside_k8s(t: &[Tok], mut i: usize) -> bool {
    while i > 0
        && matches!(&t[i - 1], Tok::Ident(q) if q == "async" || q == "const" || q == "unsafe")
    {
        i -= 1;
    }
    if i == 0 {
        return false;
    }
    if matches!(&t[i - 1], Tok::Ident(p) if p == "pub") {
        return true;
    }
    // `pub ( crate )`
    i >= 4
        && t[i - 1] == Tok::Punct(')')
        && t[i - 2] == Tok::Ident("crate".into())
        && t[i - 3] == Tok::Punct('(')
        && t[i - 4] == Tok::Ident("pub".into())
}

/// The tokens of a function's return type: after its parameter list, up to its body or `where`.
fn return_type(t: &[Tok], fn_at: usize) -> &[Tok] {
    let Some(open) = (fn_at..t.len()).find(|&k| t[k] == Tok::Punct('(')) else {
        return &[];
    };
    let mut depth = 0;
    let mut close = open;
    for (k, tok) in t.iter().enumerate().skip(open) {
        match tok {
            Tok::Punct('(') => depth += 1,
            Tok::Punct(')') => {
                depth -= 1;
                if depth == 0 {
                    close = k;
                    break;
                }
            }
            _ => {}
        }
    }
    let end = (close..t.len())
        .find(|&k| {
            matches!(&t[k], Tok::Punct('{') | Tok::Punct(';')) || t[k] == Tok::Ident("where".into())
        })
        .unwrap_or(t.len());
    &t[close + 1..end]
}

/// `k8s` hands the other modules a `k8s::Cluster`, never the kube client inside: no function or
/// field visible outside `k8s` returns or holds a `Client`. With the layering rule above, no
/// module outside `k8s` can make an API call, and every write goes through `k8s::Writer`.
#[test]
fn k8s_hands_out_no_kube_client() {
    let mut found = Vec::new();
    for m in load() {
        if top(&m.path) != "k8s" {
            continue;
        }
        let t = &m.tokens;
        let client = |toks: &[Tok]| toks.contains(&Tok::Ident("Client".into()));
        for i in 0..t.len() {
            let leak = match &t[i] {
                Tok::Ident(f) if f == "fn" => {
                    visible_outside_k8s(t, i) && client(return_type(t, i))
                }
                // A field `pub name: …Client…,`
                Tok::Ident(_) if t.get(i + 1) == Some(&Tok::Punct(':')) => {
                    let end = (i..t.len())
                        .find(|&k| {
                            matches!(
                                t[k],
                                Tok::Punct(',')
                                    | Tok::Punct('}')
                                    | Tok::Punct(';')
                                    | Tok::Punct('=')
                            )
                        })
                        .unwrap_or(t.len());
                    visible_outside_k8s(t, i) && client(&t[i..end])
                }
                _ => false,
            };
            if leak {
                let name = match t.get(i + 1) {
                    Some(Tok::Ident(n)) if t[i] == Tok::Ident("fn".into()) => n.clone(),
                    _ => format!("{:?}", t[i]),
                };
                found.push(format!("{}: {name}", m.file.display()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "k8s hands a kube client out (return a k8s::Cluster, keep the client `pub(in crate::k8s)`):\n  {}",
        found.join("\n  ")
    );
}

/// Crates that would let the core reach an API server, or run one.
const CLIENT_CRATES: &[&str] = &[
    "kube-client",
    "kube-runtime",
    "tokio",
    "hyper",
    "hyper-util",
    "axum",
    "tower",
    "reqwest",
];

/// The core's manifest: no client crate, and `kube` only as the facade without its default
/// features (kube-core's types and the derive macros). `scripts/core-deps.sh` (in `make lint`)
/// checks the resolved tree as well.
#[test]
fn the_core_crate_names_no_client_in_its_manifest() {
    let manifest = std::fs::read_to_string(repo().join("crates/hap-core/Cargo.toml"))
        .expect("read crates/hap-core/Cargo.toml");
    let mut section = String::new();
    let mut found = Vec::new();
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line.to_string();
            continue;
        }
        let Some((name, spec)) = line.split_once('=') else {
            continue;
        };
        let name = name.trim();
        if !section.ends_with("dependencies]") || line.starts_with('#') {
            continue;
        }
        if CLIENT_CRATES.contains(&name) {
            found.push(format!("{section} {name}"));
        }
        if name == "kube"
            && (!spec.contains("default-features = false")
                || !spec.contains(r#"features = ["derive"]"#))
        {
            found.push(format!(
                "{section} kube: only `default-features = false, features = [\"derive\"]`"
            ));
        }
    }
    assert!(
        found.is_empty(),
        "the core crate would depend on a client: {found:?}"
    );
}

#[test]
fn the_parser_sees_paths_through_groups_aliases_and_reexports() {
    let m = Module {
        path: "a::b".into(),
        file: PathBuf::from("a/b.rs"),
        tokens: drop_test_items(tokenize(
            "use crate::{x::{self, y::Z as W}, q}; // crate::hidden\n\
             fn f() { let s = \"crate::nope\"; super::c::go(); }\n\
             #[cfg(test)] mod tests { use crate::testonly; }",
        )),
    };
    let used: Vec<_> = uses(&m)
        .into_iter()
        .map(|(p, _, a)| (p.join("::"), a))
        .collect();
    assert_eq!(
        used,
        vec![
            ("crate::x".to_string(), "x".to_string()),
            ("crate::x::y::Z".to_string(), "W".to_string()),
            ("crate::q".to_string(), "q".to_string()),
        ]
    );
    let ch: Vec<_> = chains(&m).into_iter().map(|p| p.join("::")).collect();
    assert_eq!(ch, vec!["super::c::go".to_string()]);
    let g = cycles(&BTreeMap::from([
        ("a".to_string(), BTreeSet::from(["b".to_string()])),
        ("b".to_string(), BTreeSet::from(["a".to_string()])),
        ("c".to_string(), BTreeSet::from(["a".to_string()])),
    ]));
    assert_eq!(g, vec![vec!["a".to_string(), "b".to_string()]]);
}

/// Field-manager parameters are built in one place (`k8s::params`), so every write names its
/// manager the same way.
#[test]
fn field_manager_params_are_built_in_one_place() {
    let mut found = Vec::new();
    for m in load() {
        if m.path == "k8s::params" {
            continue;
        }
        let t = &m.tokens;
        // `PatchParams {` as a struct literal (not `-> PatchParams {`) or `PatchParams::apply`.
        let n = (1..t.len().saturating_sub(2))
            .filter(|&i| {
                matches!(&t[i], Tok::Ident(n) if n == "PatchParams" || n == "PostParams")
                    && t[i - 1] != Tok::Punct('>')
                    && (t[i + 1] == Tok::Punct('{')
                        || (t[i + 1] == Tok::PathSep && t[i + 2] == Tok::Ident("apply".into())))
            })
            .count();
        if n > 0 {
            found.push(format!("{}: {n}", m.file.display()));
        }
    }
    assert!(
        found.is_empty(),
        "PatchParams/PostParams built outside src/k8s/params.rs:\n  {}",
        found.join("\n  ")
    );
}
