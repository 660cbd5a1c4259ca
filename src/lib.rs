//! mmsim: the Linux memory-management subsystem in user space, on simulated
//! hardware. See README.md for what it is and docs/design.md for how it is
//! built. Layers, from the bottom: `machine`, `sim`, `arch`, `mm`,
//! `trace`, `workload`, `report`, `experiments`, `cli`; a dependency only points down.

pub mod arch;
pub mod cli;
pub mod experiments;
pub mod features;
pub mod machine;
pub mod mm;
pub mod report;
pub mod sim;
pub mod trace;
pub mod util;
pub mod workload;

/// mmsim's Cargo version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The git commit mmsim was built from (`git rev-parse --short HEAD`), or
/// `unknown` when it was built outside a git checkout (`build.rs`).
pub const GIT_COMMIT: &str = env!("MMSIM_GIT_COMMIT");

/// The version as `--version` and every report's header give it:
/// `0.1.0 (commit 3ffddb2)`.
pub fn version() -> String {
    format!("{VERSION} (commit {GIT_COMMIT})")
}
