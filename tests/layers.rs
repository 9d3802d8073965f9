//! The floors of `src/` (issue 25), checked on every `make test`: every `crate::`, `super::` and
//! `$crate::` path in non-test code (`use` lines, grouped imports and paths inline alike) is read
//! and resolved to the module it names, and
//!
//! - no module imports one on a higher floor (the floors are listed in [`FLOORS`], ground first;
//!   a new top-level module must be placed on one);
//! - no controller imports another (`controllers::bucket` never names `controllers::tenant`);
//! - at every level of the module tree, sibling modules import each other without a cycle.
//!
//! It also holds every file of `src/` to at most [`MOST_LINES`] lines outside its tests.
//!
//! Test code (`#[cfg(test)]` modules, files and items) may use any floor: a fake of a low floor
//! builds what a test of a high floor needs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The floors, ground first: a module may use its own floor and those below.
const FLOORS: [&[&str]; 8] = [
    // Types, names, finalizers, Secret names.
    &["api"],
    &["config", "namespaces", "error", "metrics", "telemetry"],
    // Clients of StorageGRID, S3, IAM and RDS.
    &["backends"],
    // The Kube layer (the seam, informers, triggers), leader election, the HTTP server.
    &["cluster", "leader", "server"],
    &["providers"],
    // The shared reconcile flow.
    &["runtime"],
    &["controllers"],
    &["webhook", "release", "manager", "crdgen", "plugin"],
];

/// Module paths (`controllers::bucket::plan`, `` for the crate root) and their files, from the
/// files under `src` (the binaries, `main.rs` and `bin/`, are crates of their own and are left out).
fn modules(src: &Path) -> BTreeMap<String, PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("readable source tree") {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(src, &mut files);
    files.retain(|f| !f.starts_with(src.join("bin")));
    let mut modules = BTreeMap::new();
    for file in files {
        let relative = file.strip_prefix(src).expect("under src");
        let mut parts: Vec<String> = relative
            .with_extension("")
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        if parts == ["main"] {
            continue;
        }
        if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
            parts.pop();
        }
        modules.insert(parts.join("::"), file);
    }
    modules
}

/// `text` without comments, string and character literals (a path in a string or a doc comment
/// is not a dependency). Lifetimes (`'a`) are kept apart from character literals.
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if c == 'r'
            && (next == Some('"') || (next == Some('#') && !is_ident(out.chars().last())))
        {
            // Raw string r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= chars.len() {
                    break;
                }
                if chars[j] == '"' && (0..hashes).all(|h| chars.get(j + 1 + h) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' && next == Some('\\') {
            // An escaped character literal ('\n', '\'', '\u{..}').
            let end = (i + 3..chars.len())
                .find(|&j| chars[j] == '\'')
                .unwrap_or(chars.len());
            out.push_str("' '");
            i = end + 1;
        } else if c == '\'' && chars.get(i + 2) == Some(&'\'') {
            // A character literal ('x'); a lifetime ('a) has no closing quote.
            out.push_str("' '");
            i += 3;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn is_ident(c: Option<char>) -> bool {
    c.is_some_and(|c| c.is_alphanumeric() || c == '_')
}

/// `code` without the items marked `#[cfg(test)]` (a `use` up to its `;`, anything else up to
/// its `;` or through its braces).
fn without_test_items(code: &str) -> String {
    let mut out = code.to_string();
    while let Some(at) = out.find("#[cfg(test)]") {
        let rest = &out[at + "#[cfg(test)]".len()..];
        let item = rest.trim_start();
        let start = out.len() - item.len();
        let end = if item.starts_with("use ") || item.starts_with("pub use ") {
            start + item.find(';').map_or(item.len(), |i| i + 1)
        } else {
            match (item.find(';'), item.find('{')) {
                (Some(semi), Some(brace)) if semi < brace => start + semi + 1,
                (_, Some(brace)) => start + brace + matching_brace(&item[brace..]),
                (Some(semi), None) => start + semi + 1,
                (None, None) => out.len(),
            }
        };
        out.replace_range(at..end, " ");
    }
    out
}

/// The length of the balanced `{...}` that `text` starts with.
fn matching_brace(text: &str) -> usize {
    let mut depth = 0;
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
    }
    text.len()
}

/// The modules declared `#[cfg(test)] mod name;` (and everything below them).
fn test_only(modules: &BTreeMap<String, PathBuf>) -> BTreeSet<String> {
    let mut declared_for_tests = BTreeSet::new();
    for (module, file) in modules {
        let code = code_only(&std::fs::read_to_string(file).expect("readable source"));
        let mut rest = code.as_str();
        while let Some(at) = rest.find("#[cfg(test)]") {
            rest = &rest[at + "#[cfg(test)]".len()..];
            let item = rest.trim_start();
            let item = item.strip_prefix("pub(crate) ").unwrap_or(item);
            let item = item.strip_prefix("pub ").unwrap_or(item);
            if let Some(declared) = item.strip_prefix("mod ") {
                let name: String = declared
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if declared[name.len()..].trim_start().starts_with(';') {
                    declared_for_tests.insert(join(module, &name));
                }
            }
        }
    }
    modules
        .keys()
        .filter(|m| {
            declared_for_tests
                .iter()
                .any(|t| *m == t || m.starts_with(&format!("{t}::")))
        })
        .cloned()
        .collect()
}

fn join(parent: &str, child: &str) -> String {
    if parent.is_empty() {
        child.to_string()
    } else {
        format!("{parent}::{child}")
    }
}

/// Every path `code` (of `module`) names, each as its segments from the crate root:
/// `crate::a::b`, `super::b` and `super::super::b` (relative to `module`), with groups expanded
/// (`crate::{a::b, c}` names `a::b` and `c`).
fn paths(code: &str, module: &str) -> Vec<Vec<String>> {
    let here: Vec<String> = if module.is_empty() {
        Vec::new()
    } else {
        module.split("::").map(str::to_string).collect()
    };
    let mut out = Vec::new();
    for keyword in ["crate::", "super::"] {
        let mut from = 0;
        while let Some(found) = code[from..].find(keyword) {
            let at = from + found;
            from = at + keyword.len();
            let before = code[..at].chars().last();
            if is_ident(before) || (before == Some(':') && keyword == "super::") {
                // `foo_crate::`, or a `super::` inside a path already read (`super::super::`).
                continue;
            }
            // In `a/b.rs` (module a::b) and `a/b/mod.rs` alike, `super` is `a`.
            let mut base: Vec<String> = if keyword == "crate::" {
                Vec::new()
            } else {
                here[..here.len().saturating_sub(1)].to_vec()
            };
            let mut i = at + keyword.len();
            // More `super::` in a row.
            while code[i..].starts_with("super::") {
                base.pop();
                i += "super::".len();
            }
            use_tree(&code[i..], &base, &mut out);
        }
    }
    out
}

/// Reads a use tree (`a::b`, `a::{b, c::d}`, `{a, b}`, `a as b`, `*`) at the start of `text`,
/// pushing each full path.
fn use_tree(text: &str, prefix: &[String], out: &mut Vec<Vec<String>>) {
    let mut path = prefix.to_vec();
    let mut rest = text;
    loop {
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() {
            break;
        }
        rest = &rest[name.len()..];
        if name != "self" {
            path.push(name);
        }
        if let Some(after) = rest.strip_prefix("::") {
            rest = after.trim_start();
            if rest.starts_with('{') {
                let group = &rest[1..matching_brace(rest) - 1];
                for item in split_top_level(group) {
                    use_tree(item.trim(), &path, out);
                }
                return;
            }
        } else {
            break;
        }
    }
    if !path.is_empty() {
        out.push(path);
    }
}

/// `text` split at its commas outside braces.
fn split_top_level(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

/// The deepest module a path names.
fn resolve(path: &[String], modules: &BTreeMap<String, PathBuf>) -> Option<String> {
    (1..=path.len())
        .rev()
        .map(|n| path[..n].join("::"))
        .find(|m| modules.contains_key(m))
}

/// Which module imports which (non-test code only).
fn imports(src: &Path) -> (BTreeMap<String, BTreeSet<String>>, BTreeSet<String>) {
    let modules = modules(src);
    let tests = test_only(&modules);
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, file) in &modules {
        if tests.contains(module) {
            continue;
        }
        let text = std::fs::read_to_string(file).expect("readable source");
        let code = without_test_items(&code_only(&text).replace("$crate::", "crate::"));
        for path in paths(&code, module) {
            if let Some(target) = resolve(&path, &modules)
                && target != *module
                && !tests.contains(&target)
            {
                edges.entry(module.clone()).or_default().insert(target);
            }
        }
    }
    let names = modules
        .keys()
        .filter(|m| !tests.contains(*m))
        .cloned()
        .collect();
    (edges, names)
}

fn top(module: &str) -> &str {
    module.split("::").next().unwrap_or_default()
}

fn floor(top: &str) -> Option<usize> {
    FLOORS.iter().position(|floor| floor.contains(&top))
}

/// The controller a module belongs to (`bucket` for `controllers::bucket::plan`).
fn controller(module: &str) -> Option<&str> {
    let mut parts = module.split("::");
    (parts.next() == Some("controllers"))
        .then(|| parts.next())
        .flatten()
}

/// The child of `parent` that `module` is or lies under.
fn child_of<'a>(parent: &str, module: &'a str) -> Option<&'a str> {
    let rest = if parent.is_empty() {
        module
    } else {
        module.strip_prefix(parent)?.strip_prefix("::")?
    };
    let child = rest.split("::").next()?;
    (!child.is_empty()).then(|| &module[..module.len() - rest.len() + child.len()])
}

/// Every rule broken, one line each.
fn violations(src: &Path) -> Vec<String> {
    let (edges, modules) = imports(src);
    let mut found = Vec::new();
    for (from, targets) in &edges {
        for to in targets {
            let (a, b) = (top(from), top(to));
            if a != b && !a.is_empty() && !b.is_empty() {
                match (floor(a), floor(b)) {
                    (Some(fa), Some(fb)) if fb > fa => found.push(format!(
                        "{from} imports {to}: floor {fb} ({b}) is above floor {fa} ({a})"
                    )),
                    (None, _) => found.push(format!("module {a} is on no floor: add it to FLOORS")),
                    (_, None) => found.push(format!("module {b} is on no floor: add it to FLOORS")),
                    _ => {}
                }
            }
            if let (Some(x), Some(y)) = (controller(from), controller(to))
                && x != y
            {
                found.push(format!(
                    "{from} imports {to}: controller {x} reaches into controller {y}"
                ));
            }
        }
    }
    // Sibling cycles, at every level of the tree.
    let mut parents: BTreeSet<String> = BTreeSet::new();
    for module in &modules {
        let parts: Vec<&str> = module.split("::").collect();
        for n in 0..parts.len() {
            parents.insert(parts[..n].join("::"));
        }
    }
    for parent in &parents {
        let mut graph: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for (from, targets) in &edges {
            let Some(a) = child_of(parent, from) else {
                continue;
            };
            for to in targets {
                if let Some(b) = child_of(parent, to)
                    && a != b
                {
                    graph.entry(a).or_default().insert(b);
                }
            }
        }
        for cycle in cycles(&graph) {
            found.push(format!(
                "modules that import each other in a cycle: {}",
                cycle.join(", ")
            ));
        }
    }
    found.sort();
    found.dedup();
    found
}

/// The strongly connected groups of more than one node (Tarjan's algorithm), each sorted.
fn cycles<'a>(graph: &BTreeMap<&'a str, BTreeSet<&'a str>>) -> Vec<Vec<&'a str>> {
    struct Walk<'g, 'a> {
        graph: &'g BTreeMap<&'a str, BTreeSet<&'a str>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        groups: Vec<Vec<&'a str>>,
    }
    impl<'a> Walk<'_, 'a> {
        fn visit(&mut self, v: &'a str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            for &w in self.graph.get(v).into_iter().flatten() {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.stack.contains(&w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut group = Vec::new();
                while let Some(w) = self.stack.pop() {
                    group.push(w);
                    if w == v {
                        break;
                    }
                }
                if group.len() > 1 {
                    group.sort();
                    self.groups.push(group);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        groups: Vec::new(),
    };
    for &v in graph.keys() {
        if !walk.index.contains_key(v) {
            walk.visit(v);
        }
    }
    walk.groups
}

#[test]
fn src_keeps_its_floors_its_controllers_apart_and_no_cycle() {
    // Read when the test runs: a binary cargo reuses from another checkout of the same shared
    // target dir would otherwise read that checkout.
    let src = Path::new(&std::env::var("CARGO_MANIFEST_DIR").expect("run by cargo")).join("src");
    let (edges, _) = imports(&src);
    assert!(
        edges.len() > 50,
        "the check reads too little of src/ to mean anything: {} importing modules",
        edges.len()
    );
    let found = violations(&src);
    assert!(
        found.is_empty(),
        "src/ breaks its layers (see tests/layers.rs):\n{}",
        found.join("\n")
    );
}

/// The most lines a file of `src/` may hold outside its tests (issue 25: "no file in `src/` over
/// ~600 lines apart from tests"). A file that grows past it is split by concern, as
/// `controllers/bucket/backend/grid.rs` was when it reached 715.
const MOST_LINES: usize = 600;

/// Lines of `text` outside its `#[cfg(test)]` items (a literal inside a test item that spans
/// lines counts as one line of the test, so a file is never counted short).
fn lines_outside_tests(text: &str) -> usize {
    let code = code_only(text);
    let in_tests = code.lines().count() - without_test_items(&code).lines().count();
    text.lines().count() - in_tests
}

#[test]
fn no_file_of_src_outside_tests_is_longer_than_the_limit() {
    let src = Path::new(&std::env::var("CARGO_MANIFEST_DIR").expect("run by cargo")).join("src");
    let modules = modules(&src);
    let tests = test_only(&modules);
    let mut long: Vec<String> = modules
        .iter()
        .filter(|(module, _)| !tests.contains(*module))
        .filter_map(|(_, file)| {
            let text = std::fs::read_to_string(file).expect("readable source");
            let lines = lines_outside_tests(&text);
            (lines > MOST_LINES).then(|| format!("{} ({lines} lines)", file.display()))
        })
        .collect();
    long.sort();
    assert!(
        long.is_empty(),
        "files of src/ longer than {MOST_LINES} lines outside their tests; split them by concern:\n{}",
        long.join("\n")
    );
}

#[test]
fn a_test_item_does_not_count_toward_a_files_length() {
    let plain = "fn f() {}\n\nfn g() {}\n";
    assert_eq!(lines_outside_tests(plain), 3);
    // The line the test item stood on still counts, its other lines do not.
    let with_tests = "fn f() {}\n#[cfg(test)]\nmod tests {\n    #[test]\n    fn t() {}\n}\n";
    assert_eq!(lines_outside_tests(with_tests), 2);
    // A literal that spans lines in a test counts as one line of it: the file counts long,
    // never short.
    let literal = "fn f() {}\n#[cfg(test)]\nmod tests {\n    const S: &str = \"a\nb\";\n}\n";
    assert_eq!(lines_outside_tests(literal), 3);
}

/// A throwaway source tree: each `(path, text)` written under a fresh directory.
struct Tree(PathBuf);

impl Tree {
    fn new(files: &[(&str, &str)]) -> Tree {
        let dir = std::env::temp_dir().join(format!(
            "keeper-layers-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        for (path, text) in files {
            let file = dir.join(path);
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(file, text).unwrap();
        }
        Tree(dir)
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn an_upward_import_a_controller_reaching_into_another_and_a_cycle_are_each_refused() {
    let tree = Tree::new(&[
        (
            "lib.rs",
            "pub mod api;\npub mod metrics;\npub mod runtime;\npub mod controllers;\n",
        ),
        ("api.rs", "pub struct Bucket;\n"),
        // Upward, in a grouped import and inline.
        (
            "metrics.rs",
            "use crate::{api::Bucket, runtime::Flow};\nfn f() { crate::runtime::go(); }\n",
        ),
        (
            "runtime/mod.rs",
            "pub mod a;\npub mod b;\npub struct Flow;\npub fn go() {}\n",
        ),
        // A cycle between siblings.
        ("runtime/a.rs", "use super::b::B;\npub struct A;\n"),
        ("runtime/b.rs", "use super::a::A;\npub struct B;\n"),
        ("controllers/mod.rs", "pub mod bucket;\npub mod tenant;\n"),
        (
            "controllers/bucket.rs",
            "use crate::controllers::tenant::NAME;\nuse crate::api::Bucket;\n",
        ),
        (
            "controllers/tenant.rs",
            "pub const NAME: &str = \"crate::controllers::bucket\"; // crate::metrics in a comment\n#[cfg(test)]\nmod tests { use crate::controllers::bucket; }\n",
        ),
    ]);
    let found = violations(&tree.0);
    assert_eq!(
        found,
        [
            "modules that import each other in a cycle: runtime::a, runtime::b",
            "controllers::bucket imports controllers::tenant: controller bucket reaches into controller tenant",
            "metrics imports runtime: floor 5 (runtime) is above floor 1 (metrics)",
        ]
        .map(String::from)
        .into_iter()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect::<Vec<_>>(),
        "{found:#?}"
    );
}

#[test]
fn test_code_and_text_are_not_imports() {
    let tree = Tree::new(&[
        (
            "lib.rs",
            "pub mod api;\npub mod runtime;\n#[cfg(test)]\nmod testing;\n",
        ),
        (
            "api.rs",
            "/// See [`crate::runtime`].\npub const RULE: &str = r#\"crate::runtime\"#;\n#[cfg(test)]\nuse crate::runtime::Flow;\n#[cfg(test)]\nfn only_in_tests() { crate::runtime::go(); }\nfn f<'a>(x: &'a str) -> char { 'c' }\n",
        ),
        ("runtime.rs", "pub struct Flow;\npub fn go() {}\n"),
        ("testing.rs", "use crate::runtime::Flow;\n"),
    ]);
    assert_eq!(violations(&tree.0), Vec::<String>::new());
}
