//! CPU time and resident memory of a process, read from `/proc`.
//!
//! The figures the benchmark trusts most come from here: the broker's CPU seconds per delivery
//! (utime + stime of every thread, `/proc/PID/stat`) and its resident set (`VmRSS` in
//! `/proc/PID/status`). The generator reads its own CPU the same way, so a run can tell when the
//! generator, not the broker, was the bottleneck.

use std::sync::OnceLock;

/// A process to sample: this one, or another by id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Proc {
    /// The generator itself.
    Own,
    /// Another process (the broker under test).
    Pid(u32),
}

impl Proc {
    fn dir(self) -> String {
        match self {
            Proc::Own => "/proc/self".to_owned(),
            Proc::Pid(pid) => format!("/proc/{pid}"),
        }
    }

    /// User plus system CPU seconds the process has used, all threads included; `None` if it
    /// cannot be read (the process is gone, or this is not Linux).
    pub(crate) fn cpu_seconds(self) -> Option<f64> {
        let text = std::fs::read_to_string(format!("{}/stat", self.dir())).ok()?;
        let ticks = stat_cpu_ticks(&text)?;
        Some(ticks as f64 / clock_ticks_per_second())
    }

    /// Resident memory in KiB; `None` if it cannot be read.
    pub(crate) fn rss_kib(self) -> Option<u64> {
        let text = std::fs::read_to_string(format!("{}/status", self.dir())).ok()?;
        status_rss_kib(&text)
    }
}

fn clock_ticks_per_second() -> f64 {
    static TICKS: OnceLock<f64> = OnceLock::new();
    *TICKS.get_or_init(|| rustix::param::clock_ticks_per_second() as f64)
}

/// utime + stime (fields 14 and 15) from the text of `/proc/PID/stat`. The command name (field
/// 2) may contain spaces and parentheses, so the fields are counted from the last `)`.
fn stat_cpu_ticks(text: &str) -> Option<u64> {
    let rest = text.get(text.rfind(')')? + 1..)?;
    let mut fields = rest.split_ascii_whitespace();
    // after the name: state(3) ppid(4) pgrp(5) session(6) tty(7) tpgid(8) flags(9) minflt(10)
    // cminflt(11) majflt(12) cmajflt(13) utime(14) stime(15)
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// `VmRSS` in KiB from the text of `/proc/PID/status`.
fn status_rss_kib(text: &str) -> Option<u64> {
    let line = text.lines().find_map(|l| l.strip_prefix("VmRSS:"))?;
    line.trim().strip_suffix("kB")?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_after_an_awkward_name() {
        let text = "4242 (we ird) (name)) S 1 4242 4242 0 -1 4194560 1234 0 0 0 377 61 0 0 20 0 9 0 \
                    5000 123456789 2500 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0";
        assert_eq!(stat_cpu_ticks(text), Some(377 + 61));
    }

    #[test]
    fn stat_refuses_truncated_or_garbled_text() {
        for text in [
            "",
            "4242 (x) S 1 2 3",
            "4242 x S 1 4242 4242 0 -1 0 0 0 0 0 1 2",
            "4242 (x) S 1 2 3 4 5 6 7 8 9 10 x 2",
        ] {
            assert_eq!(stat_cpu_ticks(text), None, "{text:?}");
        }
    }

    #[test]
    fn status_rss() {
        let text = "Name:\tmosquitto\nVmPeak:\t   20000 kB\nVmRSS:\t    7424 kB\nRssAnon:\t 1000 kB\n";
        assert_eq!(status_rss_kib(text), Some(7424));
        assert_eq!(status_rss_kib("Name:\tx\n"), None);
        assert_eq!(status_rss_kib("VmRSS:\t12 MB\n"), None);
    }

    #[test]
    fn own_process_is_readable_and_cpu_grows_with_work() {
        let rss = Proc::Own.rss_kib().expect("own VmRSS");
        assert!(rss > 100, "{rss} KiB");
        let before = Proc::Own.cpu_seconds().expect("own CPU");
        // Spin until the kernel has charged at least one more tick (bounded at 5 s of work).
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while Proc::Own.cpu_seconds().unwrap() <= before && start.elapsed().as_secs() < 5 {
            for i in 0..100_000u64 {
                x = x.wrapping_mul(31).wrapping_add(i);
            }
            std::hint::black_box(x);
        }
        assert!(Proc::Own.cpu_seconds().unwrap() > before);
        assert_eq!(Proc::Pid(u32::MAX).cpu_seconds(), None);
    }
}
