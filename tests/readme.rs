//! The README quotes `mmsim reproduce`'s output in its experiment sections.
//! The quotes of the two experiments cheap enough to run here (under a
//! second of host CPU each on a release build) are checked against a live
//! run, so a change that moves their figures must update the README with
//! them. The other three take seconds to minutes; their quotes are checked
//! by hand against `mmsim reproduce` (the README's "Speed and memory" says
//! how long each takes).

use std::process::Command;

/// The first fenced block after the heading `### id` in README.md.
fn quoted_output(id: &str) -> Vec<String> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md is readable");
    let heading = format!("\n### {id}\n");
    let start = readme
        .find(&heading)
        .unwrap_or_else(|| panic!("README.md has no section '### {id}'"));
    let section = &readme[start + heading.len()..];
    let end = section.find("\n### ").unwrap_or(section.len());
    let mut lines = section[..end].lines();
    lines
        .by_ref()
        .find(|l| l.starts_with("```"))
        .unwrap_or_else(|| panic!("README.md's '### {id}' quotes no output"));
    lines
        .take_while(|l| !l.starts_with("```"))
        .map(str::to_string)
        .collect()
}

fn reproduce(id: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_mmsim"))
        .args(["reproduce", id])
        .output()
        .expect("the mmsim binary runs");
    assert!(out.status.success(), "mmsim reproduce {id} failed");
    String::from_utf8(out.stdout).expect("output is UTF-8")
}

/// Every line the README quotes for `id` is a line of what it prints now.
fn check(id: &str) {
    let quoted = quoted_output(id);
    assert!(
        quoted.len() >= 2,
        "README.md's '### {id}' quotes {} lines",
        quoted.len()
    );
    let printed = reproduce(id);
    let printed: Vec<&str> = printed.lines().collect();
    for line in &quoted {
        assert!(
            printed.contains(&line.as_str()),
            "README.md's '### {id}' quotes a line `mmsim reproduce {id}` no longer prints:\n{line}"
        );
    }
}

#[test]
fn pcp_high_order_quote_is_current() {
    check("pcp-high-order");
}

#[test]
fn per_thread_vmacache_quote_is_current() {
    check("per-thread-vmacache");
}
