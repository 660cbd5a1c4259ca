//! Every file of `fuzz/corpus/NAME/` through fuzz target NAME's body
//! (`mmsim::cli::fuzz`), on whatever toolchain runs `cargo test`: the
//! seeds, and every input a fuzzer found and kept (a crash found once is a
//! regression test from then on). The fuzzers themselves run in
//! `scripts/suites/fuzz.sh`.

use std::fs;
use std::path::Path;

#[test]
fn every_corpus_file_passes_its_target() {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
    let mut ran = 0;
    for target in mmsim::cli::fuzz::TARGETS {
        let dir = corpus.join(target.name);
        let mut files: Vec<_> = fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|entry| entry.expect("a directory entry").path())
            .collect();
        files.sort();
        assert!(!files.is_empty(), "{}: no seed", dir.display());
        for file in files {
            let data = fs::read(&file).expect("a corpus file");
            eprintln!("{}", file.display());
            (target.run)(&data);
            ran += 1;
        }
    }
    assert!(ran >= mmsim::cli::fuzz::TARGETS.len());
}

/// Every target has its libFuzzer file and its `[[bin]]`, and nothing else
/// is there.
#[test]
fn every_target_is_a_cargo_fuzz_target() {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let manifest = fs::read_to_string(fuzz.join("Cargo.toml")).expect("fuzz/Cargo.toml");
    let mut files: Vec<String> = fs::read_dir(fuzz.join("fuzz_targets"))
        .expect("fuzz/fuzz_targets")
        .map(|e| {
            e.expect("an entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    files.sort();
    let mut names: Vec<String> = mmsim::cli::fuzz::TARGETS
        .iter()
        .map(|t| format!("{}.rs", t.name))
        .collect();
    names.sort();
    assert_eq!(files, names);
    for target in mmsim::cli::fuzz::TARGETS {
        let name = target.name;
        assert!(
            manifest.contains(&format!(
                "name = \"{name}\"\npath = \"fuzz_targets/{name}.rs\""
            )),
            "fuzz/Cargo.toml: no [[bin]] {name}"
        );
        let body = fs::read_to_string(fuzz.join(format!("fuzz_targets/{name}.rs"))).unwrap();
        assert!(
            body.contains(&format!("target(\"{name}\")")),
            "{name}.rs runs another target"
        );
    }
}
