//! Machine profiles: the topology of a named machine and every cost the
//! simulation charges, each with the source it comes from.
//!
//! Profiles live in `profiles/<name>.toml`. The ones shipped with mmsim are
//! built into the binary (so `mmsim` runs from anywhere); `--machine PATH.toml`
//! loads any other file. Loading validates everything and reports the first
//! problem as one line naming the file, the key and what is wrong.
//!
//! Experiments cannot override costs: a machine is a machine.

mod costs;
mod load;
mod topology;

pub use costs::{Cost, CostKind, Costs};
pub use load::{LoadError, builtin, builtin_names, load_file, parse};
pub use topology::{Distance, Topology};

use crate::types::Arch;

/// A simulated machine: its shape and its costs.
#[derive(Clone, Debug)]
pub struct Machine {
    pub name: String,
    pub description: String,
    /// The instruction set, which decides how TLBs are flushed (`crate::arch`).
    pub arch: Arch,
    pub topology: Topology,
    pub costs: Costs,
}

impl Machine {
    /// Loads a machine by built-in name, or from a path ending in `.toml`.
    pub fn by_name_or_path(name: &str) -> Result<Machine, LoadError> {
        if name.ends_with(".toml") {
            load_file(std::path::Path::new(name))
        } else {
            builtin(name)
        }
    }
}

#[cfg(test)]
mod tests;
