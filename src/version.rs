//! Which mmsim produced a result: its Cargo version and git commit.

/// mmsim's Cargo version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The git commit mmsim was built from (`git rev-parse --short HEAD`), or
/// `unknown` when it was built outside a git checkout (`build.rs`).
pub const GIT_COMMIT: &str = env!("MMSIM_GIT_COMMIT");

/// The version as `--version` and every report's header give it:
/// `0.1.0 (commit 3ffddb2)`.
pub fn full() -> String {
    format!("{VERSION} (commit {GIT_COMMIT})")
}
