//! Sockets, cores, threads and NUMA nodes, and how Linux numbers the CPUs.

use crate::types::{CpuId, Cycles};

/// How far apart two CPUs are, which decides what a cache-line transfer costs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Distance {
    /// The same logical CPU.
    SameCpu,
    /// Two hardware threads of one core (they share L1 and L2).
    SameCore,
    /// Two cores of one socket (they share the last-level cache).
    SameSocket,
    /// Different sockets (the line crosses the interconnect).
    OtherSocket,
}

#[derive(Clone, Debug)]
pub struct Topology {
    pub sockets: u32,
    pub cores_per_socket: u32,
    pub threads_per_core: u32,
    pub numa_nodes: u32,
    pub memory_per_node_bytes: u64,
    pub frequency_mhz: u64,
}

impl Topology {
    pub fn nr_cpus(&self) -> u32 {
        self.sockets * self.cores_per_socket * self.threads_per_core
    }

    pub fn nr_cores(&self) -> u32 {
        self.sockets * self.cores_per_socket
    }

    /// Linux on x86 (and the powerpc guests we model) numbers the first
    /// thread of every core first, socket by socket, then the second threads
    /// in the same order: on 2 x 18 x 2, cpu0-17 are socket 0, cpu18-35
    /// socket 1, cpu36-53 their siblings on socket 0, cpu54-71 on socket 1.
    pub fn core_of(&self, cpu: CpuId) -> u32 {
        assert!(cpu.0 < self.nr_cpus(), "{cpu} out of range");
        cpu.0 % self.nr_cores()
    }

    pub fn socket_of(&self, cpu: CpuId) -> u32 {
        self.core_of(cpu) / self.cores_per_socket
    }

    /// NUMA nodes are spread evenly over sockets (or sockets over nodes).
    pub fn node_of(&self, cpu: CpuId) -> u32 {
        self.socket_of(cpu) * self.numa_nodes / self.sockets
    }

    pub fn cpus_of_node(&self, node: u32) -> Vec<CpuId> {
        (0..self.nr_cpus())
            .map(CpuId)
            .filter(|&c| self.node_of(c) == node)
            .collect()
    }

    pub fn distance(&self, a: CpuId, b: CpuId) -> Distance {
        if a == b {
            Distance::SameCpu
        } else if self.core_of(a) == self.core_of(b) {
            Distance::SameCore
        } else if self.socket_of(a) == self.socket_of(b) {
            Distance::SameSocket
        } else {
            Distance::OtherSocket
        }
    }

    pub fn cycles_to_ns(&self, cycles: Cycles) -> f64 {
        cycles.0 as f64 * 1000.0 / self.frequency_mhz as f64
    }

    pub fn ns_to_cycles(&self, ns: f64) -> Cycles {
        Cycles((ns * self.frequency_mhz as f64 / 1000.0).round() as u64)
    }

    pub fn cycles_to_us(&self, cycles: Cycles) -> f64 {
        self.cycles_to_ns(cycles) / 1000.0
    }

    pub fn cycles_to_secs(&self, cycles: Cycles) -> f64 {
        self.cycles_to_ns(cycles) / 1e9
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn haswell() -> Topology {
        Topology {
            sockets: 2,
            cores_per_socket: 18,
            threads_per_core: 2,
            numa_nodes: 2,
            memory_per_node_bytes: 64 << 30,
            frequency_mhz: 2300,
        }
    }

    #[test]
    fn linux_cpu_numbering() {
        let t = haswell();
        assert_eq!(t.nr_cpus(), 72);
        assert_eq!(t.socket_of(CpuId(17)), 0);
        assert_eq!(t.socket_of(CpuId(18)), 1);
        assert_eq!(t.socket_of(CpuId(36)), 0);
        assert_eq!(t.distance(CpuId(0), CpuId(36)), Distance::SameCore);
        assert_eq!(t.distance(CpuId(0), CpuId(1)), Distance::SameSocket);
        assert_eq!(t.distance(CpuId(0), CpuId(18)), Distance::OtherSocket);
        assert_eq!(t.cpus_of_node(1).len(), 36);
    }
}
