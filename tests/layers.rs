//! Layers point down only (docs/design.md, "Layers and modules"): no module
//! of the library refers to a module of a layer above its own. Tests may
//! drive a lower layer through a higher one, so test code is not held to
//! this: files named `tests.rs`, folders named `tests`, and everything from
//! a `#[cfg(test)]` line to the end of a file (where test modules live).

use std::fs;
use std::path::{Path, PathBuf};

/// The top-level modules of `src/`, from the bottom layer up.
const LAYERS: &[&str] = &[
    "version",
    "util",
    "types",
    "features",
    "machine",
    "sim",
    "arch",
    "mm",
    "drivers",
    "kernel",
    "trace",
    "workload",
    "report",
    "experiments",
    "explore",
    "soak",
    "cli",
];

fn rank(module: &str) -> Option<usize> {
    LAYERS.iter().position(|&m| m == module)
}

/// Every `.rs` file under `dir`, in a fixed order.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "tests") {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs")
            && path.file_name().is_some_and(|n| n != "tests.rs")
        {
            out.push(path);
        }
    }
}

/// The modules `crate::NAME` names in the code of `text` before its tests,
/// outside comments.
fn modules_named(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    for line in text.lines() {
        if line.trim_start() == "#[cfg(test)]" {
            break;
        }
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            rest = &rest[at + "crate::".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            names.push(name);
        }
    }
    names
}

#[test]
fn no_module_refers_to_a_layer_above_its_own() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut wrong = Vec::new();
    let mut checked = 0;
    for file in &files {
        let relative = file.strip_prefix(&src).expect("under src");
        let top = relative
            .components()
            .next()
            .and_then(|c| c.as_os_str().to_str())
            .map(|name| name.trim_end_matches(".rs"))
            .expect("a file name");
        let Some(own) = rank(top) else {
            // lib.rs and main.rs sit above every layer.
            assert!(
                top == "lib" || top == "main",
                "{}: module '{top}' is in no layer of LAYERS",
                relative.display()
            );
            continue;
        };
        let text = fs::read_to_string(file).expect("a source file");
        for name in modules_named(&text) {
            checked += 1;
            match rank(&name) {
                Some(other) if other > own => wrong.push(format!(
                    "{}: {top} refers to crate::{name}, a layer above it",
                    relative.display()
                )),
                Some(_) => {}
                None => wrong.push(format!(
                    "{}: crate::{name} is in no layer of LAYERS",
                    relative.display()
                )),
            }
        }
    }
    assert!(
        checked > 100,
        "only {checked} references found: is src/ there?"
    );
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_check_finds_an_upward_reference_and_skips_tests_and_comments() {
    let text = "use crate::sim::Ctx;\n// crate::cli in a comment\nfn f() { crate::report::x(); }\n#[cfg(test)]\nmod tests { use crate::cli; }\n";
    assert_eq!(modules_named(text), ["sim", "report"]);
}
