//! mmsim: the Linux memory-management subsystem in user space, on simulated
//! hardware. See README.md for what it is and docs/design.md for how it is
//! built. Layers, from the bottom: `util`, `types`, `features`, `machine`,
//! `sim`, `arch`, `mm`, `kernel`, `trace`, `workload`, `report`,
//! `experiments`, `explore`, `cli`; a dependency only points down (`tests/layers.rs`
//! checks it).

pub mod arch;
pub mod cli;
pub mod drivers;
pub mod experiments;
pub mod explore;
pub mod features;
pub mod kernel;
pub mod machine;
pub mod mm;
pub mod report;
pub mod sim;
pub mod soak;
pub mod trace;
pub mod types;
pub mod util;
pub mod version;
pub mod workload;

pub use version::{GIT_COMMIT, VERSION};
