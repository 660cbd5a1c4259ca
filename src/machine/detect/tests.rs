//! Parsing captured host text into a profile's shape, the TOML written
//! round-tripping through the loader, and the one-line errors.

use super::*;

/// `lscpu` on the development VM (2026-11-25), trimmed.
const LSCPU_VM: &str = "\
Architecture:                            x86_64
CPU(s):                                  2
On-line CPU(s) list:                     0,1
Model name:                              Intel(R) Xeon(R) Processor
Thread(s) per core:                      1
Core(s) per socket:                      2
Socket(s):                               1
L2 cache:                                4 MiB (2 instances)
L3 cache:                                480 MiB (1 instance)
NUMA node(s):                            1
";

const CPUINFO_VM: &str = "\
processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Processor
cpu MHz\t\t: 2600.000
cache size\t: 491520 KB

processor\t: 1
model name\t: Intel(R) Xeon(R) Processor
cpu MHz\t\t: 2600.000
";

/// A file tree under a fresh temporary directory.
struct Tree(PathBuf);

impl Tree {
    fn new(name: &str) -> Tree {
        let dir = std::env::temp_dir().join(format!("mmsim-detect-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Tree(dir)
    }

    fn file(&self, path: &str, text: &str) -> &Tree {
        let full = self.0.join(path);
        std::fs::create_dir_all(full.parent().unwrap()).unwrap();
        std::fs::write(full, text).unwrap();
        self
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The development VM's sysfs and /proc, as captured: 2 CPUs, one socket,
/// one node of 17,655,584 kB, no cpufreq.
fn vm_tree(name: &str) -> Tree {
    let t = Tree::new(name);
    let cpu = "sys/devices/system/cpu";
    t.file(&format!("{cpu}/online"), "0-1\n");
    for c in 0..2 {
        t.file(&format!("{cpu}/cpu{c}/topology/physical_package_id"), "0\n")
            .file(&format!("{cpu}/cpu{c}/topology/core_id"), &format!("{c}\n"));
    }
    for (i, (level, kind, size, shared)) in [
        (1, "Data", "48K", "0"),
        (1, "Instruction", "64K", "0"),
        (2, "Unified", "2048K", "0"),
        (3, "Unified", "491520K", "0-1"),
    ]
    .into_iter()
    .enumerate()
    {
        let d = format!("{cpu}/cpu0/cache/index{i}");
        t.file(&format!("{d}/level"), &format!("{level}\n"))
            .file(&format!("{d}/type"), &format!("{kind}\n"))
            .file(&format!("{d}/size"), &format!("{size}\n"))
            .file(&format!("{d}/shared_cpu_list"), &format!("{shared}\n"));
    }
    t.file("sys/devices/system/node/has_memory", "0\n")
        .file(
            "sys/devices/system/node/node0/meminfo",
            "Node 0 MemTotal:       17655584 kB\nNode 0 MemFree:        10106288 kB\n",
        )
        .file("proc/cpuinfo", CPUINFO_VM)
        .file(
            "proc/meminfo",
            "MemTotal:       24683656 kB\nMemFree:        10106288 kB\nMemAvailable:   23451052 kB\n",
        );
    t
}

/// A 2-socket, 2 x 4 cores x 2 threads machine with cpufreq and 2 nodes,
/// numbered as Linux numbers x86 CPUs (first threads, then siblings).
fn two_socket_tree(name: &str) -> Tree {
    let t = Tree::new(name);
    let cpu = "sys/devices/system/cpu";
    t.file(&format!("{cpu}/online"), "0-15\n");
    for c in 0..16u32 {
        let core = c % 8;
        t.file(
            &format!("{cpu}/cpu{c}/topology/physical_package_id"),
            &format!("{}\n", core / 4),
        )
        .file(
            &format!("{cpu}/cpu{c}/topology/core_id"),
            &format!("{}\n", core % 4),
        );
    }
    t.file(&format!("{cpu}/cpu0/cpufreq/cpuinfo_max_freq"), "2300000\n")
        .file("sys/devices/system/node/has_memory", "0-1\n")
        .file(
            "sys/devices/system/node/node0/meminfo",
            "Node 0 MemTotal:       67108864 kB\n",
        )
        .file(
            "sys/devices/system/node/node1/meminfo",
            "Node 1 MemTotal:       67108864 kB\n",
        )
        .file(
            "proc/cpuinfo",
            "model name\t: Intel(R) Xeon(R) CPU E5-2699 v3 @ 2.30GHz\ncpu MHz\t\t: 1200.000\n",
        );
    t
}

#[test]
fn small_parsers() {
    assert_eq!(
        parse_cpu_list("0-3,8,10-11\n").unwrap(),
        vec![0, 1, 2, 3, 8, 10, 11]
    );
    assert_eq!(parse_cpu_list("0").unwrap(), vec![0]);
    assert!(parse_cpu_list("0-x").is_err());
    assert_eq!(parse_cache_size("48K"), Some(48 << 10));
    assert_eq!(parse_cache_size("491520K\n"), Some(480 << 20));
    assert_eq!(parse_cache_size("2 MiB"), Some(2 << 20));
    assert_eq!(parse_cache_size("lots"), None);
    assert_eq!(
        parse_mem_total("Node 0 MemTotal:       17655584 kB\n"),
        Some(17_655_584 * 1024)
    );
    assert_eq!(parse_mem_total("MemFree: 1 kB\n"), None);
    let lscpu = parse_colon_lines(LSCPU_VM);
    assert_eq!(lscpu["Socket(s)"], "1");
    assert_eq!(lscpu["Model name"], "Intel(R) Xeon(R) Processor");
}

#[test]
fn frequency_sources_in_order() {
    let lscpu = parse_colon_lines("CPU max MHz: 3500.0000\nCPU MHz: 1200.000\n");
    let cpuinfo = parse_colon_lines(CPUINFO_VM);
    let none = BTreeMap::new();
    assert_eq!(
        frequency_mhz(Some("2300000\n"), &lscpu, &cpuinfo)
            .unwrap()
            .0,
        2300
    );
    assert_eq!(frequency_mhz(None, &lscpu, &cpuinfo).unwrap().0, 3500);
    assert_eq!(frequency_mhz(None, &none, &cpuinfo).unwrap().0, 2600);
    assert!(frequency_mhz(None, &none, &none).is_none());
}

#[test]
fn the_vm_fixture_reads_as_one_socket_of_two_cores() {
    let t = vm_tree("vm");
    let s = read_shape(&t.0, LSCPU_VM).unwrap();
    assert_eq!(
        (
            s.sockets,
            s.cores_per_socket,
            s.threads_per_core,
            s.numa_nodes
        ),
        (1, 2, 1, 1)
    );
    assert_eq!(s.memory_per_node_bytes, (17_655_584 * 1024) >> 20 << 20);
    assert_eq!(s.frequency_mhz, 2600);
    assert_eq!(s.frequency_from, "/proc/cpuinfo 'cpu MHz'");
    assert_eq!(s.model, "Intel(R) Xeon(R) Processor");
    assert_eq!(s.caches.len(), 4);
    assert_eq!(s.cache_bytes(2), Some(2 << 20));
    assert_eq!(s.llc_bytes(), 480 << 20);
    assert_eq!(s.caches[3].shared_by, 2);
    assert!(s.notes.is_empty());
    assert_eq!(s.same_socket_pair, Some((0, 1)));
    assert_eq!(s.available_bytes, Some(23_451_052 * 1024));
}

#[test]
fn two_sockets_two_nodes_and_cpufreq() {
    let t = two_socket_tree("2s");
    let s = read_shape(&t.0, "").unwrap();
    assert_eq!(
        (
            s.sockets,
            s.cores_per_socket,
            s.threads_per_core,
            s.numa_nodes
        ),
        (2, 4, 2, 2)
    );
    assert_eq!(s.memory_per_node_bytes, 64 << 30);
    assert_eq!(s.frequency_mhz, 2300);
    assert!(s.caches.is_empty());
    // cpu1 is core 1 of socket 0; cpu8, cpu0's sibling, shares its core.
    assert_eq!(s.same_socket_pair, Some((0, 1)));
}

#[test]
fn nodes_that_split_a_socket_are_merged() {
    let places: Vec<CpuPlace> = (0..8)
        .map(|c| CpuPlace {
            cpu: c,
            package: 0,
            core: c,
        })
        .collect();
    let (sockets, _, _, nodes, per_node, notes) =
        fit_topology(&places, &[8 << 30, 8 << 30]).unwrap();
    assert_eq!((sockets, nodes, per_node), (1, 1, 16 << 30));
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        fit_topology(&places, &[32 << 20])
            .unwrap_err()
            .contains("64 MiB")
    );
}

#[test]
fn a_missing_file_is_one_line_naming_it() {
    let t = Tree::new("empty");
    let e = read_shape(&t.0, "").unwrap_err();
    assert!(e.contains("sys/devices/system/cpu/online"), "{e}");
    assert_eq!(e.lines().count(), 1);

    let t = vm_tree("nocore");
    std::fs::remove_file(t.0.join("sys/devices/system/cpu/cpu1/topology/core_id")).unwrap();
    let e = read_shape(&t.0, "").unwrap_err();
    assert!(e.contains("cpu1/topology/core_id"), "{e}");
    assert_eq!(e.lines().count(), 1);

    let t = vm_tree("nofreq");
    t.file("proc/cpuinfo", "model name\t: x\n");
    let e = read_shape(&t.0, "").unwrap_err();
    assert!(e.starts_with("no CPU frequency"), "{e}");
    assert_eq!(e.lines().count(), 1);
}

fn fake_measured() -> Measured {
    Measured {
        write_gbs: 9.5,
        node_write_gbs: 14.0,
        node_write_threads: 2,
        clear_page_gbs: 12.0,
        dram_ns: 110.0,
        random_store_ns: 12.0,
        dram_buffer_mib: 960,
        l2_ns: 5.5,
        l2_buffer_kib: 1024,
        line_transfer_ns: Some(60.0),
        line_transfer_cpus: (0, 1),
        page_fault_ns: 1500.0,
        unmap_ns: 300.0,
        read_fault_ns: 700.0,
        fault_pages: 16384,
    }
}

#[test]
fn the_profile_written_loads_back() {
    let t = vm_tree("roundtrip");
    let shape = read_shape(&t.0, LSCPU_VM).unwrap();
    let text = profile_toml(&shape, &fake_measured(), Arch::X86_64, "2026-11-25").unwrap();
    let m = crate::machine::parse("detected.toml", &text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(m.topology.nr_cpus(), 2);
    assert_eq!(m.topology.frequency_mhz, 2600);
    let ghz = 2.6;
    assert!((m.costs.user_stream_bandwidth.value() * ghz - 19.0).abs() < 0.01);
    assert!((m.costs.user_access.value() / ghz - 110.0).abs() < 0.5);
    assert!((m.costs.user_access_overlapped.value() / ghz - 12.0).abs() < 0.5);
    assert!(
        m.costs
            .user_access_overlapped
            .source
            .starts_with("measured on this host by mmsim machines detect: ")
    );
    assert!(
        m.costs
            .user_access
            .source
            .starts_with("measured on this host by mmsim machines detect: ")
    );
    assert!(
        m.costs
            .line_transfer_same_socket
            .source
            .starts_with("measured on this host")
    );
    assert!(
        m.costs
            .anon_fault_path
            .source
            .starts_with("measured on this host")
    );
    // 2600 MHz is nearest x86-2s-server's 2500.
    assert!(
        m.costs
            .syscall_entry_exit
            .source
            .starts_with("taken from x86-2s-server: Arora")
    );
    for &(key, _, _) in Costs::parameters_for(Arch::X86_64) {
        let s = &m.costs.get(key).unwrap().source;
        assert!(
            s.starts_with("measured on this host by mmsim machines detect: ")
                || s.starts_with("taken from x86-2s-server: "),
            "{key}: {s}"
        );
    }
}

#[test]
fn closest_builtin_is_same_arch_nearest_clock() {
    assert_eq!(
        closest_builtin(Arch::X86_64, 2600).unwrap(),
        "x86-2s-server"
    );
    assert_eq!(
        closest_builtin(Arch::X86_64, 2200).unwrap(),
        "haswell-ep-2s"
    );
    assert_eq!(closest_builtin(Arch::Powerpc64, 2600).unwrap(), "power9-2s");
}

#[test]
fn today_is_a_date() {
    let d = today();
    assert_eq!(d.len(), 10);
    assert!(d.starts_with("20"), "{d}");
}
