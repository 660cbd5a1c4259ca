//! What a finished child process used, for the benches that time whole
//! `mmsim` runs (`experiments`, `scale`).

/// What a finished child used.
pub struct Usage {
    /// User and system time.
    pub cpu_seconds: f64,
    /// Peak resident set, KiB.
    pub peak_kib: u64,
}

/// Waits for the child `pid` and returns its wait status and what it used
/// (`wait4`, which reports one child's own usage; std's `wait` does not).
pub fn wait_with_usage(pid: u32) -> Result<(i32, Usage), String> {
    let mut status = 0;
    // SAFETY: `rusage` is plain data that wait4 fills in; an all-zero one
    // is a valid value to hand it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are to live locals of the right types.
    let got = unsafe { libc::wait4(pid as libc::pid_t, &mut status, 0, &mut usage) };
    if got != pid as libc::pid_t {
        return Err(format!("wait4: {}", std::io::Error::last_os_error()));
    }
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    let usage = Usage {
        cpu_seconds: seconds(usage.ru_utime) + seconds(usage.ru_stime),
        // Linux reports ru_maxrss in KiB.
        peak_kib: usage.ru_maxrss as u64,
    };
    Ok((status, usage))
}
