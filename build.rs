//! Records the git commit mmsim is built from, for `mmsim --version` and
//! the header of every report (`MMSIM_GIT_COMMIT`): `git rev-parse --short
//! HEAD` when git and the repository are there, else `unknown`. Nothing
//! here can fail the build: a tarball without `.git`, or a machine without
//! git, builds as before.

use std::path::Path;
use std::process::Command;

fn main() {
    let commit = git(&["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=MMSIM_GIT_COMMIT={commit}");
    println!("cargo:rerun-if-changed=build.rs");
    // Build again when HEAD moves: HEAD itself (a checkout), the branch it
    // names (a commit) and packed-refs. Only files that exist are named, as
    // cargo reruns the script every build for one that does not.
    let mut watched = vec!["HEAD".to_string(), "packed-refs".to_string()];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(branch);
    }
    for name in watched {
        if let Some(path) = git(&["rev-parse", "--git-path", &name])
            && Path::new(&path).exists()
        {
            println!("cargo:rerun-if-changed={path}");
        }
    }
}

/// The trimmed output of a git command run in the crate's directory, if
/// there is a repository and the command succeeds.
fn git(args: &[&str]) -> Option<String> {
    let dir = std::env::var("CARGO_MANIFEST_DIR").ok()?;
    if !Path::new(&dir).join(".git").exists() {
        return None;
    }
    let output = Command::new("git")
        .args(args)
        .current_dir(&dir)
        .output()
        .ok()?;
    let text = String::from_utf8(output.stdout).ok()?.trim().to_string();
    (output.status.success() && !text.is_empty()).then_some(text)
}
