//! `mmsim machines detect`: a profile of the host mmsim runs on.
//!
//! The shape comes from sysfs (`/sys/devices/system/cpu`, `/sys/devices/system/node`),
//! `/proc/cpuinfo`, `/proc/meminfo` and, when installed, `lscpu`; a few costs from
//! the microbenchmarks of [`super::microbench`]; every other cost is copied from the
//! closest built-in profile, its source saying so. The parsing is done on text, so
//! that tests run it on captured fixtures rather than on the live host.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::Costs;
use super::microbench as mb;
use crate::types::Arch;

/// One cache as sysfs describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cache {
    pub level: u32,
    /// `Data`, `Instruction` or `Unified`.
    pub kind: String,
    pub size_bytes: u64,
    /// How many CPUs share one instance.
    pub shared_by: u32,
}

/// What the host's files say about its shape.
#[derive(Clone, Debug, PartialEq)]
pub struct HostShape {
    pub model: String,
    pub sockets: u32,
    pub cores_per_socket: u32,
    pub threads_per_core: u32,
    pub numa_nodes: u32,
    pub memory_per_node_bytes: u64,
    pub frequency_mhz: u64,
    /// Where the frequency came from.
    pub frequency_from: String,
    /// CPU 0's caches, by level.
    pub caches: Vec<Cache>,
    /// How the detected shape was fitted to what a profile can say.
    pub notes: Vec<String>,
    /// Two online CPUs on one socket but different cores, for the
    /// line-transfer benchmark.
    pub same_socket_pair: Option<(u32, u32)>,
    /// /proc/meminfo's MemAvailable, which bounds the benchmarks' buffers.
    pub available_bytes: Option<u64>,
}

impl HostShape {
    pub fn nr_cpus(&self) -> u32 {
        self.sockets * self.cores_per_socket * self.threads_per_core
    }

    /// The largest unified (or data) cache: the last level.
    pub fn llc_bytes(&self) -> u64 {
        self.caches
            .iter()
            .filter(|c| c.kind != "Instruction")
            .map(|c| c.size_bytes)
            .max()
            .unwrap_or(32 << 20)
    }

    pub fn cache_bytes(&self, level: u32) -> Option<u64> {
        self.caches
            .iter()
            .find(|c| c.level == level && c.kind != "Instruction")
            .map(|c| c.size_bytes)
    }
}

/// A CPU list as sysfs writes it: `0-3,8,10-11`.
pub fn parse_cpu_list(text: &str) -> Result<Vec<u32>, String> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let bad = || format!("'{part}' is not a CPU range");
        match part.split_once('-') {
            Some((a, b)) => {
                let a: u32 = a.trim().parse().map_err(|_| bad())?;
                let b: u32 = b.trim().parse().map_err(|_| bad())?;
                if b < a || b - a > 1 << 16 {
                    return Err(bad());
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(part.trim().parse().map_err(|_| bad())?),
        }
    }
    Ok(cpus)
}

/// A cache size as sysfs (`48K`, `491520K`) or lscpu (`2 MiB`) writes it.
pub fn parse_cache_size(text: &str) -> Option<u64> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let n: u64 = t[..split].parse().ok()?;
    let unit = t[split..].trim();
    let shift = match unit {
        "" | "B" => 0,
        "K" | "KiB" | "kB" | "KB" => 10,
        "M" | "MiB" | "MB" => 20,
        "G" | "GiB" | "GB" => 30,
        _ => return None,
    };
    Some(n << shift)
}

/// `MemTotal` in bytes from /proc/meminfo or a node's meminfo
/// (`Node 0 MemTotal:       17655584 kB`).
pub fn parse_mem_total(text: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        if !key.trim_end().ends_with("MemTotal") {
            return None;
        }
        let kb: u64 = value.split_whitespace().next()?.parse().ok()?;
        Some(kb * 1024)
    })
}

/// `key: value` lines, as lscpu and /proc/cpuinfo print them; the first of each key.
pub fn parse_colon_lines(text: &str) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    for line in text.lines() {
        if let Some((key, value)) = line.split_once(':') {
            map.entry(key.trim().to_string())
                .or_insert_with(|| value.trim().to_string());
        }
    }
    map
}

/// The clock in MHz: cpufreq's maximum (kHz) if there is one, then lscpu's
/// `CPU max MHz`, then /proc/cpuinfo's `cpu MHz`, then lscpu's `CPU MHz`.
pub fn frequency_mhz(
    cpufreq_max_khz: Option<&str>,
    lscpu: &BTreeMap<String, String>,
    cpuinfo: &BTreeMap<String, String>,
) -> Option<(u64, String)> {
    let mhz = |s: &str| s.trim().parse::<f64>().ok().filter(|v| *v >= 1.0);
    if let Some(khz) = cpufreq_max_khz.and_then(mhz) {
        return Some((
            (khz / 1000.0).round() as u64,
            "cpufreq/cpuinfo_max_freq".into(),
        ));
    }
    let candidates = [
        (lscpu.get("CPU max MHz"), "lscpu 'CPU max MHz'"),
        (cpuinfo.get("cpu MHz"), "/proc/cpuinfo 'cpu MHz'"),
        (lscpu.get("CPU MHz"), "lscpu 'CPU MHz'"),
    ];
    candidates.into_iter().find_map(|(value, from)| {
        let v = mhz(value?)?;
        Some((v.round() as u64, from.to_string()))
    })
}

/// One online CPU's place: its package (socket) and core.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuPlace {
    pub cpu: u32,
    pub package: u32,
    pub core: u32,
}

/// Sockets, cores per socket, threads per core, NUMA nodes, bytes per node,
/// and a note for each approximation.
pub type Fitted = (u32, u32, u32, u32, u64, Vec<String>);

/// The shape a profile can hold, from the CPUs' places and the nodes'
/// memory: sockets, cores per socket and threads per core as averages over
/// what is online, and NUMA nodes that hold whole sockets (a profile cannot
/// say more; each approximation is noted).
pub fn fit_topology(places: &[CpuPlace], node_memory: &[u64]) -> Result<Fitted, String> {
    if places.is_empty() {
        return Err("no online CPU".into());
    }
    if node_memory.is_empty() {
        return Err("no NUMA node with memory".into());
    }
    let mut notes = Vec::new();
    let packages: BTreeSet<u32> = places.iter().map(|p| p.package).collect();
    let cores: BTreeSet<(u32, u32)> = places.iter().map(|p| (p.package, p.core)).collect();
    let sockets = packages.len() as u32;
    let cpus = places.len() as u32;
    let cores_per_socket = (cores.len() as u32 / sockets).max(1);
    let threads_per_core = (cpus / (cores_per_socket * sockets)).max(1);
    if sockets * cores_per_socket * threads_per_core != cpus {
        notes.push(format!(
            "{cpus} online CPUs do not fill {sockets} x {cores_per_socket} x {threads_per_core} evenly; the profile has {}",
            sockets * cores_per_socket * threads_per_core
        ));
    }
    let total: u64 = node_memory.iter().sum();
    let mut nodes = node_memory.len() as u32;
    if nodes > sockets || !sockets.is_multiple_of(nodes) {
        let fitted = if nodes > sockets && nodes.is_multiple_of(sockets) {
            sockets
        } else {
            1
        };
        notes.push(format!(
            "{nodes} NUMA nodes on {sockets} sockets: a profile's node holds whole sockets, so {fitted} node(s) of the same total memory"
        ));
        nodes = fitted;
    }
    // Whole MiB per node, as the loader takes sizes.
    let per_node = (total / u64::from(nodes)) >> 20 << 20;
    if per_node < 64 << 20 {
        return Err(format!(
            "{} MiB of memory per node, less than a profile's 64 MiB",
            per_node >> 20
        ));
    }
    Ok((
        sockets,
        cores_per_socket,
        threads_per_core,
        nodes,
        per_node,
        notes,
    ))
}

/// Reads a file below `root` (the host's `/`, or a fixture's directory).
fn read(root: &Path, path: &str) -> Result<String, String> {
    let full: PathBuf = root.join(path.trim_start_matches('/'));
    std::fs::read_to_string(&full).map_err(|e| format!("cannot read {}: {e}", full.display()))
}

fn read_u32(root: &Path, path: &str) -> Result<u32, String> {
    let text = read(root, path)?;
    text.trim()
        .parse::<i64>()
        .map(|v| v.max(0) as u32)
        .map_err(|_| {
            format!(
                "{}: '{}' is not a number",
                root.join(path.trim_start_matches('/')).display(),
                text.trim()
            )
        })
}

/// The host's shape from the files below `root` and `lscpu`'s output (empty
/// when lscpu is not installed). An error names the first file missing or
/// unreadable.
pub fn read_shape(root: &Path, lscpu_text: &str) -> Result<HostShape, String> {
    const CPU: &str = "sys/devices/system/cpu";
    const NODE: &str = "sys/devices/system/node";
    let online = parse_cpu_list(&read(root, &format!("{CPU}/online"))?)
        .map_err(|e| format!("{}: {e}", root.join(CPU).join("online").display()))?;
    let mut places = Vec::new();
    for &cpu in &online {
        let dir = format!("{CPU}/cpu{cpu}/topology");
        places.push(CpuPlace {
            cpu,
            package: read_u32(root, &format!("{dir}/physical_package_id"))?,
            core: read_u32(root, &format!("{dir}/core_id"))?,
        });
    }
    let node_dir = root.join(NODE);
    let nodes = match std::fs::read_to_string(node_dir.join("has_memory"))
        .or_else(|_| std::fs::read_to_string(node_dir.join("online")))
    {
        Ok(text) => parse_cpu_list(&text)?,
        // A kernel without NUMA: one node, all of /proc/meminfo.
        Err(_) if !node_dir.exists() => Vec::new(),
        Err(e) => {
            return Err(format!(
                "cannot read {}/has_memory: {e}",
                node_dir.display()
            ));
        }
    };
    let mut node_memory = Vec::new();
    for node in &nodes {
        let path = format!("{NODE}/node{node}/meminfo");
        let text = read(root, &path)?;
        node_memory.push(
            parse_mem_total(&text)
                .ok_or_else(|| format!("{}: no MemTotal line", root.join(&path).display()))?,
        );
    }
    if node_memory.is_empty() {
        let text = read(root, "proc/meminfo")?;
        node_memory.push(
            parse_mem_total(&text).ok_or_else(|| {
                format!("{}: no MemTotal line", root.join("proc/meminfo").display())
            })?,
        );
    }
    let cpuinfo = parse_colon_lines(&read(root, "proc/cpuinfo")?);
    let lscpu = parse_colon_lines(lscpu_text);
    let first = online[0];
    let max_freq = read(root, &format!("{CPU}/cpu{first}/cpufreq/cpuinfo_max_freq")).ok();
    let (frequency_mhz, frequency_from) = frequency_mhz(max_freq.as_deref(), &lscpu, &cpuinfo)
        .ok_or_else(|| {
            format!(
                "no CPU frequency: no {CPU}/cpu{first}/cpufreq/cpuinfo_max_freq, no 'cpu MHz' in /proc/cpuinfo, no 'CPU MHz' from lscpu"
            )
        })?;
    let mut caches = Vec::new();
    for index in 0.. {
        let dir = format!("{CPU}/cpu{first}/cache/index{index}");
        if !root.join(&dir).exists() {
            break;
        }
        let size = read(root, &format!("{dir}/size"))?;
        caches.push(Cache {
            level: read_u32(root, &format!("{dir}/level"))?,
            kind: read(root, &format!("{dir}/type"))?.trim().to_string(),
            size_bytes: parse_cache_size(&size)
                .ok_or_else(|| format!("{dir}/size: '{}' is not a size", size.trim()))?,
            shared_by: read(root, &format!("{dir}/shared_cpu_list"))
                .ok()
                .and_then(|t| parse_cpu_list(&t).ok())
                .map_or(1, |c| c.len() as u32),
        });
    }
    let (sockets, cores_per_socket, threads_per_core, numa_nodes, memory_per_node_bytes, notes) =
        fit_topology(&places, &node_memory)?;
    let same_socket_pair = places.first().and_then(|a| {
        places
            .iter()
            .find(|b| b.package == a.package && b.core != a.core)
            .map(|b| (a.cpu, b.cpu))
    });
    let available_bytes = read(root, "proc/meminfo").ok().and_then(|text| {
        text.lines().find_map(|line| {
            let kb: u64 = line
                .strip_prefix("MemAvailable:")?
                .split_whitespace()
                .next()?
                .parse()
                .ok()?;
            Some(kb * 1024)
        })
    });
    let model = cpuinfo
        .get("model name")
        .or_else(|| cpuinfo.get("cpu"))
        .or_else(|| lscpu.get("Model name"))
        .cloned()
        .unwrap_or_else(|| "unknown CPU".to_string());
    Ok(HostShape {
        model,
        sockets,
        cores_per_socket,
        threads_per_core,
        numa_nodes,
        memory_per_node_bytes,
        frequency_mhz,
        frequency_from,
        caches,
        notes,
        same_socket_pair,
        available_bytes,
    })
}

/// What the microbenchmarks measured.
#[derive(Clone, Debug, PartialEq)]
pub struct Measured {
    /// One core's sequential writes, GB/s of bytes written.
    pub write_gbs: f64,
    /// All CPUs of the first node (up to 4) writing at once, GB/s written.
    pub node_write_gbs: f64,
    pub node_write_threads: usize,
    pub clear_page_gbs: f64,
    pub dram_ns: f64,
    /// One of many independent random 8-byte stores over the same buffer.
    pub random_store_ns: f64,
    pub dram_buffer_mib: usize,
    pub l2_ns: f64,
    pub l2_buffer_kib: usize,
    /// Between the two CPUs named, when there are two and the run finished.
    pub line_transfer_ns: Option<f64>,
    pub line_transfer_cpus: (u32, u32),
    /// A write fault, the touching loop only.
    pub page_fault_ns: f64,
    /// munmap after the write faults, per page.
    pub unmap_ns: f64,
    /// A read fault mapping the zero page, the touching loop only.
    pub read_fault_ns: f64,
    pub fault_pages: usize,
}

/// Runs the microbenchmarks: a few seconds, with at most a buffer of the
/// last-level cache's size times two (256 MiB to 1 GiB).
pub fn measure(shape: &HostShape) -> Result<Measured, String> {
    let llc = shape.llc_bytes() as usize;
    // Twice the LLC, 256 MiB to 1 GiB, and at most a quarter of what is free.
    let quarter = shape
        .available_bytes
        .map_or(usize::MAX, |b| (b / 4) as usize);
    let big = (2 * llc).clamp(256 << 20, 1 << 30).min(quarter) / 4096 * 4096;
    if big < 16 << 20 {
        return Err(format!(
            "{} MiB of memory available, too little to measure",
            shape.available_bytes.unwrap_or(0) >> 20
        ));
    }
    let mut buffer = mb::Mapping::new(big, false)?;
    let write_gbs = mb::sequential_write_gbs(&mut buffer, 5);
    let threads = (shape.nr_cpus() / shape.numa_nodes).clamp(1, 4) as usize;
    let node_write_gbs = mb::parallel_write_gbs(&mut buffer, threads, 3);
    let clear_page_gbs = mb::clear_page_gbs(&mut buffer, 2);
    drop(buffer);
    // The model charges a miss its DRAM latency and no page walk (it has no
    // TLB), so the chase runs on THPs where the host gives them: on 4 KiB
    // pages each load would also time a TLB miss's walk, which a VM's nested
    // paging makes several times the latency itself.
    let mut chased = mb::Mapping::new(big, true)?;
    let dram_ns = mb::pointer_chase_ns(&mut chased, 1 << 20, 1 << 21);
    let random_store_ns = mb::random_store_ns(&mut chased, 1 << 22);
    drop(chased);
    let l2 = shape.cache_bytes(2).unwrap_or(1 << 20) as usize;
    let l2_buffer = (l2 / 2).max(64 << 10) / 4096 * 4096;
    let mut small = mb::Mapping::new(l2_buffer, false)?;
    let l2_ns = mb::pointer_chase_ns(&mut small, l2_buffer / 64, 1 << 22);
    drop(small);
    let line_transfer_cpus = shape.same_socket_pair.unwrap_or((0, 1));
    let line_transfer_ns = shape.same_socket_pair.and_then(|(a, b)| {
        mb::line_transfer_ns(a as usize, b as usize, 20_000, 10, Duration::from_secs(2))
    });
    let fault_pages = 16_384;
    let (page_fault_ns, unmap_ns) = mb::faults_ns(fault_pages, 10, false)?;
    let (read_fault_ns, _) = mb::faults_ns(fault_pages, 10, true)?;
    Ok(Measured {
        write_gbs,
        node_write_gbs,
        node_write_threads: threads,
        clear_page_gbs,
        dram_ns,
        random_store_ns,
        dram_buffer_mib: big >> 20,
        l2_ns,
        l2_buffer_kib: l2_buffer >> 10,
        line_transfer_ns,
        line_transfer_cpus,
        page_fault_ns,
        unmap_ns,
        read_fault_ns,
        fault_pages,
    })
}

/// The built-in profile whose costs fill in what is not measured: one of
/// the host's architecture with the nearest clock.
pub fn closest_builtin(arch: Arch, frequency_mhz: u64) -> Result<&'static str, String> {
    super::builtin_names()
        .into_iter()
        .filter_map(|name| {
            let m = super::builtin(name).ok()?;
            (m.arch == arch).then(|| (m.topology.frequency_mhz.abs_diff(frequency_mhz), name))
        })
        .min()
        .map(|(_, name)| name)
        .ok_or_else(|| format!("no built-in profile of architecture {}", arch.name()))
}

/// The host's architecture, as profiles name it.
pub fn host_arch() -> Result<Arch, String> {
    match std::env::consts::ARCH {
        "x86_64" => Ok(Arch::X86_64),
        "powerpc64" => Ok(Arch::Powerpc64),
        other => Err(format!(
            "this host is {other}; profiles exist for x86_64 and powerpc64 only"
        )),
    }
}

fn quoted(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

fn round3(v: f64) -> f64 {
    if v == 0.0 {
        return 0.0;
    }
    let digits = 3 - v.abs().log10().ceil() as i32;
    let scale = 10f64.powi(digits);
    (v * scale).round() / scale
}

/// A measured cost's entry.
fn measured_entry(value: f64, unit: &str, what: &str) -> String {
    format!(
        "{{ value = {}, unit = {}, source = {} }}",
        round3(value),
        quoted(unit),
        quoted(&format!(
            "measured on this host by mmsim machines detect: {what}"
        ))
    )
}

/// The profile's TOML: `date` is when it was measured (`YYYY-MM-DD`).
pub fn profile_toml(
    shape: &HostShape,
    measured: &Measured,
    arch: Arch,
    date: &str,
) -> Result<String, String> {
    let base_name = closest_builtin(arch, shape.frequency_mhz)?;
    let base_text = super::load::builtin_text(base_name).expect("a built-in name");
    let base: toml::Table = base_text.parse().map_err(|e| format!("{base_name}: {e}"))?;
    let base_costs = base
        .get("costs")
        .and_then(|c| c.as_table())
        .ok_or("built-in profile without costs")?;
    let mhz = shape.frequency_mhz as f64;
    let caches: Vec<String> = shape
        .caches
        .iter()
        .map(|c| {
            format!(
                "L{} {} {} KiB (shared by {} CPU{})",
                c.level,
                c.kind.to_lowercase(),
                c.size_bytes >> 10,
                c.shared_by,
                if c.shared_by == 1 { "" } else { "s" }
            )
        })
        .collect();
    let mut measured_costs: BTreeMap<&str, String> = BTreeMap::new();
    measured_costs.insert(
        "user_stream_bandwidth",
        measured_entry(
            2.0 * measured.write_gbs,
            "GB/s",
            &format!(
                "one thread writing p[i] = i over {} MiB already faulted in, best of 5 passes: {:.2} GB/s written, x 2 for DRAM traffic (each line read for ownership, then written back)",
                measured.dram_buffer_mib,
                measured.write_gbs
            ),
        ),
    );
    measured_costs.insert(
        "node_memory_bandwidth",
        measured_entry(
            2.0 * measured.node_write_gbs.max(measured.write_gbs),
            "GB/s",
            &format!(
                "{} thread(s) writing p[i] = i over {} MiB at once, best of 3: {:.2} GB/s written, x 2 for DRAM traffic (a lower bound: more CPUs than measured may draw more)",
                measured.node_write_threads,
                measured.dram_buffer_mib,
                measured.node_write_gbs
            ),
        ),
    );
    let clear = format!(
        "zeroing 4 KiB pages one at a time (memset) over {} MiB faulted in, best of 2 passes",
        measured.dram_buffer_mib
    );
    measured_costs.insert(
        "clear_page_bandwidth",
        measured_entry(measured.clear_page_gbs, "GB/s", &clear),
    );
    measured_costs.insert(
        "clear_huge_page_bandwidth",
        measured_entry(
            measured.clear_page_gbs,
            "GB/s",
            &format!("{clear} (clear_huge_page clears a THP 4 KiB subpage by subpage)"),
        ),
    );
    measured_costs.insert(
        "user_access",
        measured_entry(
            measured.dram_ns.max(1000.0 / mhz),
            "ns",
            &format!(
                "DRAM latency, a pointer chase through 1 Mi cache lines in random order over {} MiB (MADV_HUGEPAGE: no page walk timed where THP is available), best of 3 runs of 2 Mi loads",
                measured.dram_buffer_mib
            ),
        ),
    );
    measured_costs.insert(
        "user_access_overlapped",
        measured_entry(
            measured.random_store_ns.max(1000.0 / mhz),
            "ns",
            &format!(
                "4 Mi independent 8-byte stores to random words over {} MiB (MADV_HUGEPAGE), the addresses from a generator: the misses overlap, as usemem -R's do; best of 3",
                measured.dram_buffer_mib
            ),
        ),
    );
    measured_costs.insert(
        "user_cache_hit",
        measured_entry(
            (measured.l2_ns * mhz / 1000.0).max(1.0),
            "cycles",
            &format!(
                "L2 hit latency, a pointer chase in random order over {} KiB (half the L2), {:.2} ns per load at {} MHz",
                measured.l2_buffer_kib, measured.l2_ns, shape.frequency_mhz
            ),
        ),
    );
    if let Some(ns) = measured.line_transfer_ns {
        measured_costs.insert(
            "line_transfer_same_socket",
            measured_entry(
                ns.max(1000.0 / mhz),
                "ns",
                &format!(
                    "a modified line handed between CPUs {} and {} (other cores of one socket; two pinned threads ping-ponging an atomic counter, best of 10 batches of 20,000 round trips, per one-way transfer)",
                    measured.line_transfer_cpus.0, measured.line_transfer_cpus.1
                ),
            ),
        );
    }
    // The per-fault residual: the measured fault less what the model
    // charges a fault from the other costs (copied ones and the clear).
    let copied_ns = |key: &str| -> f64 {
        let Some(e) = base_costs.get(key).and_then(|e| e.as_table()) else {
            return 0.0;
        };
        let v = e
            .get("value")
            .and_then(|v| v.as_float().or(v.as_integer().map(|i| i as f64)))
            .unwrap_or(0.0);
        match e.get("unit").and_then(|u| u.as_str()) {
            Some("ns") => v,
            _ => v * 1000.0 / mhz,
        }
    };
    let floor_ns = 100.0 * 1000.0 / mhz;
    let below = |residual: f64, floor_cycles: f64| {
        if residual < floor_cycles * 1000.0 / mhz {
            format!("; the residual was below {floor_cycles} cycles, {floor_cycles} cycles taken")
        } else {
            String::new()
        }
    };
    // A read fault on the zero page: entry and exit, the lookup, the walk
    // and the zero page's PTE under the locks; what is not a copied cost is
    // entry and exit.
    let read_others_ns = 4.0 * copied_ns("pgtable_level")
        + copied_ns("find_vma_node")
        + 3.0 * copied_ns("atomic_rmw_local");
    let entry_ns = measured.read_fault_ns - read_others_ns;
    let entry_ns = if entry_ns < 2.0 * floor_ns {
        2.0 * floor_ns
    } else {
        entry_ns
    };
    measured_costs.insert(
        "page_fault_entry_exit",
        measured_entry(
            entry_ns,
            "ns",
            &format!(
                "read faults mapping the zero page, mmap PROT_READ + read one word a page + munmap of {} pages (no THP), best of 10, the reading loop timed: {:.0} ns per fault, less the copied 4 page-table levels, a find_vma node and 3 locked RMWs (mmap_lock, PTE lock; {:.0} ns){}",
                measured.fault_pages,
                measured.read_fault_ns,
                read_others_ns,
                below(measured.read_fault_ns - read_others_ns, 200.0)
            ),
        ),
    );
    let others_ns = entry_ns
        + copied_ns("alloc_pages_entry")
        + copied_ns("pcp_list_op")
        + copied_ns("find_vma_node")
        + 4.0 * copied_ns("pgtable_level")
        + 3.0 * copied_ns("atomic_rmw_local");
    let clear_ns = 4096.0 / measured.clear_page_gbs;
    let residual_ns = measured.page_fault_ns - others_ns - clear_ns;
    measured_costs.insert(
        "anon_fault_path",
        measured_entry(
            residual_ns.max(floor_ns),
            "ns",
            &format!(
                "write faults, mmap + write one byte a page + munmap of {} pages (no THP), best of 10, the writing loop timed (munmap {:.0} ns a page, not part of it): {:.0} ns per fault, less the page clear ({:.0} ns at the measured clear_page_bandwidth), the measured page_fault_entry_exit and the copied allocation, per-CPU list op, find_vma node, 4 page-table levels and 3 locked RMWs ({:.0} ns with entry and exit){}",
                measured.fault_pages,
                measured.unmap_ns,
                measured.page_fault_ns,
                clear_ns,
                others_ns,
                below(residual_ns, 100.0)
            ),
        ),
    );

    let mut out = String::new();
    let _ = writeln!(
        out,
        "# A profile of the host mmsim ran on, written by `mmsim machines detect` on {date}."
    );
    let _ = writeln!(
        out,
        "# Shape from sysfs, /proc and lscpu; measured costs from its microbenchmarks (host time);"
    );
    let _ = writeln!(
        out,
        "# every other cost copied from the built-in profile {base_name} (same architecture, nearest clock)."
    );
    let _ = writeln!(out, "# Caches of CPU 0: {}.", caches.join(", "));
    for note in &shape.notes {
        let _ = writeln!(out, "# Fitted: {note}.");
    }
    let _ = writeln!(out, "name = \"detected-host\"");
    let description = format!(
        "this host as detected on {date}: {} ({} x {} cores x {} threads, {} CPUs, {} NUMA node(s), {} MHz; {})",
        shape.model,
        shape.sockets,
        shape.cores_per_socket,
        shape.threads_per_core,
        shape.nr_cpus(),
        shape.numa_nodes,
        shape.frequency_mhz,
        caches.join(", ")
    );
    let _ = writeln!(out, "description = {}", quoted(&description));
    let _ = writeln!(out, "arch = {}", quoted(arch.name()));
    let _ = writeln!(out, "\n[topology]");
    let _ = writeln!(out, "sockets = {}", shape.sockets);
    let _ = writeln!(out, "cores_per_socket = {}", shape.cores_per_socket);
    let _ = writeln!(out, "threads_per_core = {}", shape.threads_per_core);
    let _ = writeln!(out, "numa_nodes = {}", shape.numa_nodes);
    let _ = writeln!(
        out,
        "memory_per_node = \"{}M\"",
        shape.memory_per_node_bytes >> 20
    );
    let _ = writeln!(out, "frequency_mhz = {}", shape.frequency_mhz);
    let mut source = format!(
        "detected on this host by mmsim machines detect: CPUs from /sys/devices/system/cpu (online, topology), memory from /sys/devices/system/node (or /proc/meminfo), frequency from {}",
        shape.frequency_from
    );
    for note in &shape.notes {
        source.push_str("; ");
        source.push_str(note);
    }
    let _ = writeln!(out, "source = {}", quoted(&source));
    let _ = writeln!(out, "\n[costs]");
    for &(key, _, _) in Costs::parameters_for(arch) {
        if let Some(entry) = measured_costs.get(key) {
            let _ = writeln!(out, "{key} = {entry}");
            continue;
        }
        let e = base_costs
            .get(key)
            .and_then(|e| e.as_table())
            .ok_or_else(|| format!("{base_name}: no cost {key}"))?;
        let field = |f: &str| e.get(f).ok_or_else(|| format!("{base_name}: {key}.{f}"));
        let original = field("source")?.as_str().unwrap_or_default();
        // The base profile's range goes with its value.
        let range = e
            .get("range")
            .and_then(|r| r.as_str())
            .map_or(String::new(), |r| format!(", range = {}", quoted(r)));
        let _ = writeln!(
            out,
            "{key} = {{ value = {}, unit = {}, source = {}{range} }}",
            field("value")?,
            field("unit")?,
            quoted(&format!("taken from {base_name}: {original}"))
        );
    }
    Ok(out)
}

/// Today's date in UTC, `YYYY-MM-DD`, from the host clock.
pub fn today() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let days = (secs / 86_400) as i64;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// `lscpu`'s output, or nothing if it is not installed or fails.
pub fn run_lscpu() -> String {
    std::process::Command::new("lscpu")
        .env("LC_ALL", "C")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// The whole of `detect`: the host's shape, the measurements, the profile.
pub fn detect_profile() -> Result<String, String> {
    let arch = host_arch()?;
    let shape = read_shape(Path::new("/"), &run_lscpu())?;
    let measured = measure(&shape)?;
    profile_toml(&shape, &measured, arch, &today())
}

#[cfg(test)]
mod tests;
