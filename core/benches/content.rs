//! Benchmarks of content routing: scanning plus matching 1 KiB JSON messages against 100,
//! 10,000 and 100,000 listener paths, the same pattern set in the `quamina` crate, listener
//! churn while another thread matches, and index memory per path.
//!
//! Paths: 1–16 fields (3 on average) over 20 keys picked with a Zipf spread; the first field is
//! an exact value, the others exact or present at even odds; values are drawn from 50,000 per
//! key. Messages: ~1 KiB objects built around a random path (so each matches at least one at
//! 100k paths), with other keys filled in and a nested `body`; messages matching more than 10
//! paths are dropped. Everything is generated from a fixed seed.
//!
//! Run (pinned to one core; churn needs a second): `taskset -c 1 cargo bench -p mesgd-core
//! --bench content`, and for churn `taskset -c 0,1 cargo bench -p mesgd-core --bench content
//! -- churn`. Memory and the workload's shape are printed before the timings.

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group};
use mesgd_core::content::{Matcher, Message, Path};

const KEYS: [&str; 20] = [
    "type", "region", "user", "room", "device", "kind", "status", "level", "source", "team", "app", "env",
    "lang", "plan", "tier", "zone", "os", "version", "channel", "topic",
];
const VALUES_PER_KEY: u64 = 50_000;
const SIZES: [usize; 3] = [100, 10_000, 100_000];
const MESSAGES: usize = 256;

/// xorshift64*: deterministic and dependency-free.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// A key index with probability ∝ 1 / (rank + 1).
    fn zipf_key(&mut self) -> usize {
        let total: f64 = (1..=KEYS.len()).map(|r| 1.0 / r as f64).sum();
        let mut x = (self.next() >> 11) as f64 / (1u64 << 53) as f64 * total;
        for r in 0..KEYS.len() {
            x -= 1.0 / (r + 1) as f64;
            if x <= 0.0 {
                return r;
            }
        }
        KEYS.len() - 1
    }
}

/// One field of a pattern: key index and value (`None`: present).
type Field = (usize, Option<u64>);

fn pattern(rng: &mut Rng) -> Vec<Field> {
    // 1 + a geometric count with p = 1/3: mean 3, capped at 16.
    let mut n = 1;
    while n < 16 && rng.below(3) != 0 {
        n += 1;
    }
    let mut fields: Vec<Field> = Vec::with_capacity(n);
    while fields.len() < n {
        let key = rng.zipf_key();
        if fields.iter().any(|f| f.0 == key) {
            continue;
        }
        let exact = fields.is_empty() || rng.below(2) == 0;
        fields.push((key, exact.then(|| rng.below(VALUES_PER_KEY))));
    }
    fields
}

fn path_text(fields: &[Field]) -> String {
    fields
        .iter()
        .map(|(k, v)| format!("/{}={}", KEYS[*k], v.map_or("*".to_owned(), |v| format!("v{v}"))))
        .collect()
}

fn quamina_text(fields: &[Field]) -> String {
    let parts: Vec<String> = fields
        .iter()
        .map(|(k, v)| match v {
            Some(v) => format!("\"{}\":[\"v{v}\"]", KEYS[*k]),
            None => format!("\"{}\":[{{\"exists\":true}}]", KEYS[*k]),
        })
        .collect();
    format!("{{{}}}", parts.join(","))
}

/// A ~1 KiB message that satisfies `fields`, with more keys and a nested body.
fn message(rng: &mut Rng, fields: &[Field]) -> String {
    let mut values: Vec<(usize, u64)> =
        fields.iter().map(|(k, v)| (*k, v.unwrap_or_else(|| rng.below(VALUES_PER_KEY)))).collect();
    let extra = 8 + rng.below(6) as usize;
    while values.len() < extra.max(fields.len()) {
        let key = rng.zipf_key();
        if !values.iter().any(|v| v.0 == key) {
            values.push((key, rng.below(VALUES_PER_KEY)));
        }
    }
    let mut text = String::from("{");
    for (i, (k, v)) in values.iter().enumerate() {
        text.push_str(&format!("{}\"{}\":\"v{v}\"", if i > 0 { "," } else { "" }, KEYS[*k]));
    }
    text.push_str(&format!(
        ",\"ts\":{},\"seq\":{},\"body\":{{\"id\":\"{:016x}\",\"score\":{}.{},\"tags\":[\"alpha\",\"beta\",\"gamma\"],\"ok\":true,\"ref\":null,\"text\":\"",
        1_700_000_000_000u64 + rng.below(1_000_000_000),
        rng.below(1_000_000),
        rng.next(),
        rng.below(100),
        rng.below(1000),
    ));
    let lorem = "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt \
                 ut labore et dolore magna aliqua. Ut enim ad minim veniam, quis nostrud exercitation ullamco. ";
    while text.len() < 1024 - 40 {
        let take = (1024 - 40 - text.len()).min(lorem.len());
        text.push_str(&lorem[..take]);
    }
    text.push_str("\",\"geo\":{\"lat\":48.8566,\"lon\":2.3522}}}");
    text
}

struct Workload {
    patterns: Vec<Vec<Field>>,
    paths: Vec<Path>,
    /// Built around the 100,000-path set and shared by every size (so at 100 paths they
    /// match nothing, at 100,000 about 1.6 paths each).
    messages: Vec<String>,
    /// Built around this size's own paths: 1–10 matches each at every size, so comparing
    /// sizes compares the same work per message.
    own: Vec<String>,
}

fn workload(n: usize, seed: u64) -> Workload {
    let mut rng = Rng(seed);
    let patterns: Vec<Vec<Field>> = (0..n).map(|_| pattern(&mut rng)).collect();
    let paths: Vec<Path> = patterns.iter().map(|f| Path::parse(&path_text(f)).unwrap()).collect();
    Workload { patterns, paths, messages: Vec::new(), own: Vec::new() }
}

/// Messages built around `source`'s paths, keeping those with 1–10 matches (counted by
/// `hits`).
fn messages(source: &Workload, hits: impl Fn(&Message<'_>) -> usize) -> Vec<String> {
    let mut rng = Rng(7);
    let mut out = Vec::new();
    while out.len() < MESSAGES {
        let source = &source.patterns[rng.below(source.patterns.len() as u64) as usize];
        let text = message(&mut rng, source);
        let scanned = Message::scan(text.as_bytes()).unwrap();
        let hits = hits(&scanned);
        if (1..=10).contains(&hits) {
            out.push(text);
        }
    }
    out
}

fn matcher_of(w: &Workload) -> Matcher<u64> {
    let m = Matcher::new();
    for (id, p) in w.paths.iter().enumerate() {
        m.insert(id as u64, p.clone()).unwrap();
    }
    m
}

fn rss_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    statm.split_whitespace().nth(1).and_then(|p| p.parse::<usize>().ok()).unwrap_or(0) * 4096
}

fn workloads() -> Vec<Workload> {
    let mut all: Vec<Workload> = SIZES.iter().map(|&n| workload(n, 0x5eed ^ n as u64)).collect();
    let largest = all.last().unwrap();
    let msgs = messages(largest, |m| largest.paths.iter().filter(|p| p.matches(m)).count());
    let largest_len = largest.paths.len();
    for w in &mut all {
        w.messages = msgs.clone();
        w.own = if w.paths.len() == largest_len {
            msgs.clone()
        } else {
            messages(w, |m| w.paths.iter().filter(|p| p.matches(m)).count())
        };
    }
    all
}

fn report(all: &[Workload]) {
    let w = all.last().unwrap();
    let fields: usize = w.patterns.iter().map(Vec::len).sum();
    let exact: usize = w.patterns.iter().flatten().filter(|f| f.1.is_some()).count();
    let bytes: usize = w.messages.iter().map(String::len).sum();
    println!(
        "workload: {} paths, {:.2} fields per path ({:.0}% exact), messages {:.0} bytes on average",
        w.paths.len(),
        fields as f64 / w.paths.len() as f64,
        100.0 * exact as f64 / fields as f64,
        bytes as f64 / w.messages.len() as f64
    );
    for w in all {
        let m = matcher_of(w);
        let count = |texts: &[String]| {
            let mut hits = 0;
            for t in texts {
                m.matches(t.as_bytes(), |_| hits += 1).unwrap();
            }
            hits as f64 / texts.len() as f64
        };
        println!(
            "  {} paths: {:.2} matches per message (own messages: {:.2})",
            w.paths.len(),
            count(&w.messages),
            count(&w.own)
        );
    }
    // Memory: the matcher's own estimate, and the resident-set growth of building it (paths
    // are parsed before the first reading, so it counts the index alone).
    let paths = w.paths.clone();
    let before = rss_bytes();
    let m = Matcher::new();
    for (id, p) in paths.into_iter().enumerate() {
        m.insert(id as u64, p).unwrap();
    }
    let after = rss_bytes();
    println!(
        "memory at {} paths: memory_bytes {:.0} B/path; RSS growth {:.0} B/path",
        w.paths.len(),
        m.memory_bytes() as f64 / w.paths.len() as f64,
        after.saturating_sub(before) as f64 / w.paths.len() as f64
    );
    let before = rss_bytes();
    let mut q = quamina::Quamina::<u64>::new();
    for (id, f) in w.patterns.iter().enumerate() {
        q.add_pattern(id as u64, &quamina_text(f)).unwrap();
    }
    let after = rss_bytes();
    println!(
        "quamina at {} paths: matcher_stats {:.0} B/path; RSS growth {:.0} B/path",
        w.paths.len(),
        q.matcher_stats().bytes as f64 / w.paths.len() as f64,
        after.saturating_sub(before) as f64 / w.paths.len() as f64
    );
}

fn bench_match(c: &mut Criterion) {
    let all = workloads();
    report(&all);
    let mut group = c.benchmark_group("content");
    group.throughput(Throughput::Elements(1));
    for w in &all {
        let n = w.paths.len();
        let m = matcher_of(w);
        let mut i = 0;
        group.bench_function(BenchmarkId::new("scan_and_match", n), |b| {
            b.iter(|| {
                i = (i + 1) % w.messages.len();
                let mut hits = 0u32;
                m.matches(black_box(w.messages[i].as_bytes()), |_| hits += 1).unwrap();
                hits
            })
        });
        group.bench_function(BenchmarkId::new("scan_and_match_own", n), |b| {
            b.iter(|| {
                i = (i + 1) % w.own.len();
                let mut hits = 0u32;
                m.matches(black_box(w.own[i].as_bytes()), |_| hits += 1).unwrap();
                hits
            })
        });
        let scanned: Vec<Message<'_>> =
            w.messages.iter().map(|t| Message::scan(t.as_bytes()).unwrap()).collect();
        group.bench_function(BenchmarkId::new("match_scanned", n), |b| {
            b.iter(|| {
                i = (i + 1) % scanned.len();
                let mut hits = 0u32;
                m.for_each_match(black_box(&scanned[i]), |_| hits += 1);
                hits
            })
        });
        let mut q = quamina::Quamina::<u64>::new();
        for (id, f) in w.patterns.iter().enumerate() {
            q.add_pattern(id as u64, &quamina_text(f)).unwrap();
        }
        // Same answers, or the comparison means nothing.
        for t in &w.messages {
            let mut ours = Vec::new();
            m.matches(t.as_bytes(), |id| ours.push(id)).unwrap();
            let mut theirs = q.matches_for_event(t.as_bytes()).unwrap();
            ours.sort_unstable();
            theirs.sort_unstable();
            assert_eq!(ours, theirs, "quamina disagrees on {t}");
        }
        group.bench_function(BenchmarkId::new("quamina", n), |b| {
            b.iter(|| {
                i = (i + 1) % w.messages.len();
                q.matches_for_event(black_box(w.messages[i].as_bytes())).unwrap().len()
            })
        });
    }
    let w = all.last().unwrap();
    let mut i = 0;
    group.bench_function("scan_only", |b| {
        b.iter(|| {
            i = (i + 1) % w.messages.len();
            Message::scan(black_box(w.messages[i].as_bytes())).unwrap().len()
        })
    });
    group.finish();
}

/// Insert + remove pairs at 100,000 paths while another thread scans and matches flat out.
fn bench_churn(c: &mut Criterion) {
    let mut all = workloads();
    let w = all.pop().unwrap();
    let m = Arc::new(matcher_of(&w));
    let stop = Arc::new(AtomicBool::new(false));
    let matched = Arc::new(AtomicU64::new(0));
    let reader = {
        let (m, stop, matched, messages) = (m.clone(), stop.clone(), matched.clone(), w.messages.clone());
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(300);
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                i = (i + 1) % messages.len();
                let mut hits = 0u32;
                m.matches(messages[i].as_bytes(), |_| hits += 1).unwrap();
                black_box(hits);
                matched.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    // The reader's rate with no change going on, for comparison.
    let (t0, c0) = (Instant::now(), matched.load(Ordering::Relaxed));
    std::thread::sleep(Duration::from_secs(1));
    let quiet = (matched.load(Ordering::Relaxed) - c0) as f64 / t0.elapsed().as_secs_f64();
    let mut rng = Rng(99);
    let extra: Vec<Path> = (0..4096).map(|_| Path::parse(&path_text(&pattern(&mut rng))).unwrap()).collect();
    let mut group = c.benchmark_group("content/churn");
    // Two changes per iteration.
    group.throughput(Throughput::Elements(2));
    let mut k = 0usize;
    let (start, before) = (Instant::now(), matched.load(Ordering::Relaxed));
    group.bench_function(BenchmarkId::new("insert_remove", w.paths.len()), |b| {
        b.iter(|| {
            k = (k + 1) % extra.len();
            let id = 1_000_000 + k as u64;
            m.insert(id, extra[k].clone()).unwrap();
            m.remove(id)
        })
    });
    group.finish();
    let rate = (matched.load(Ordering::Relaxed) - before) as f64 / start.elapsed().as_secs_f64();
    println!("reader: {quiet:.0} messages/s alone, {rate:.0} messages/s during churn");
    concurrent_writers(&m, &matched, &extra);
    stop.store(true, Ordering::Relaxed);
    reader.join().unwrap();
}

/// Many tasks registering and dropping listeners at once, as the I/O layer does: `WRITERS`
/// threads, each inserting and removing its own ids for two seconds while the reader goes on.
/// Printed, not a criterion measurement (criterion times one thread).
fn concurrent_writers(m: &Arc<Matcher<u64>>, matched: &Arc<AtomicU64>, extra: &[Path]) {
    const WRITERS: u64 = 8;
    let (publications, reads) = (m.publications(), matched.load(Ordering::Relaxed));
    let start = Instant::now();
    let threads: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (m, extra) = (m.clone(), extra.to_vec());
            std::thread::spawn(move || {
                let mut changes = 0u64;
                let mut k = w as usize;
                while start.elapsed() < Duration::from_secs(2) {
                    k = (k + WRITERS as usize) % extra.len();
                    let id = 2_000_000 + k as u64;
                    m.insert(id, extra[k].clone()).unwrap();
                    m.remove(id);
                    changes += 2;
                }
                changes
            })
        })
        .collect();
    let changes: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{WRITERS} concurrent writers: {:.0} changes/s, {:.1} changes per publication; reader {:.0} messages/s meanwhile",
        changes as f64 / secs,
        changes as f64 / (m.publications() - publications).max(1) as f64,
        (matched.load(Ordering::Relaxed) - reads) as f64 / secs
    );
}

/// A fixed number of scans or matches for an instruction count (`valgrind --tool=callgrind
/// --collect-atstart=no --toggle-collect='*profile_loop*'`) or a CPU-time figure:
/// `CONTENT_PROFILE=scan`, `match:N` or `scan_and_match:N` with N paths (100, 10000 or
/// 100000), `CONTENT_PROFILE_ROUNDS` rounds over the 256 messages (8 by default). The workload is the
/// benchmark's; only the check that messages have 1–10 matches uses the matcher rather than a
/// linear scan (they agree: the differential tests and the quamina check above).
fn profile(mode: &str) {
    let (what, n) = mode.split_once(':').unwrap_or((mode, "100000"));
    let n: usize = n.parse().expect("a path count");
    let largest = workload(100_000, 0x5eed ^ 100_000);
    let big = matcher_of(&largest);
    let msgs = messages(&largest, |msg| {
        let mut hits = 0;
        big.for_each_match(msg, |_| hits += 1);
        hits
    });
    drop(big);
    let w = Workload { messages: msgs, ..workload(n, 0x5eed ^ n as u64) };
    let m = matcher_of(&w);
    let scanned: Vec<Message<'_>> = w.messages.iter().map(|t| Message::scan(t.as_bytes()).unwrap()).collect();
    // Warm the caches and the index the way a steady stream would, then count.
    warm_up(what, &m, &w.messages, &scanned);
    let rounds = std::env::var("CONTENT_PROFILE_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(8);
    let (cpu, wall) = (thread_cpu_ns(), Instant::now());
    let (count, hits) = profile_loop(what, &m, &w.messages, &scanned, rounds);
    let (cpu, wall) = (thread_cpu_ns() - cpu, wall.elapsed());
    println!(
        "{what} at {n} paths: {count} messages, {hits} matches; {:.0} ns of this thread's CPU time per message ({:.0} ns wall)",
        cpu as f64 / count as f64,
        wall.as_nanos() as f64 / count as f64
    );
}

/// The time this thread has run on a CPU, in nanoseconds (Linux's schedstat): unlike the wall
/// clock, it leaves out the time other processes had the core, so figures from a loaded,
/// shared machine can be compared.
fn thread_cpu_ns() -> u64 {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    stat.split_whitespace().next().and_then(|t| t.parse().ok()).unwrap_or(0)
}

#[inline(never)]
fn warm_up(what: &str, m: &Matcher<u64>, texts: &[String], scanned: &[Message<'_>]) {
    black_box(run_loop(what, m, texts, scanned, 1));
}

#[inline(never)]
fn profile_loop(
    what: &str,
    m: &Matcher<u64>,
    texts: &[String],
    scanned: &[Message<'_>],
    rounds: usize,
) -> (usize, usize) {
    run_loop(what, m, texts, scanned, rounds)
}

#[inline(always)]
fn run_loop(
    what: &str,
    m: &Matcher<u64>,
    texts: &[String],
    scanned: &[Message<'_>],
    rounds: usize,
) -> (usize, usize) {
    let mut hits = 0;
    for _ in 0..rounds {
        for (text, msg) in texts.iter().zip(scanned) {
            match what {
                "scan" => hits += Message::scan(black_box(text.as_bytes())).unwrap().len(),
                "match" => m.for_each_match(black_box(msg), |_| hits += 1),
                _ => m.matches(black_box(text.as_bytes()), |_| hits += 1).unwrap(),
            }
        }
    }
    (rounds * texts.len(), hits)
}

criterion_group!(benches, bench_match, bench_churn);

fn main() {
    if let Ok(mode) = std::env::var("CONTENT_PROFILE") {
        profile(&mode);
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
