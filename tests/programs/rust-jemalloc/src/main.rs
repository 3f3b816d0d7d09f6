//! A Rust service on tikv-jemallocator (jemalloc built in under `_rjem_` names): 8 threads each keep a
//! window of 4 KiB - 1.5 MiB buffers, then free it and the process rests. Its own VmRSS at rest is
//! printed (`rss_idle_kb: N`): jemalloc returns freed pages only after its decay (10 s), on a later
//! call into it, so a resting program keeps them unless _RJEM_MALLOC_CONF=dirty_decay_ms:0 purges at once.
use tikv_jemallocator::Jemalloc;
use std::time::Duration;

#[global_allocator]
static GLOBAL: Jemalloc = Jemalloc;

fn vm_rss_kb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let threads: usize = args.get(1).and_then(|v| v.parse().ok()).unwrap_or(8);
    let rounds: usize = args.get(2).and_then(|v| v.parse().ok()).unwrap_or(4000);
    let window: usize = args.get(3).and_then(|v| v.parse().ok()).unwrap_or(48);
    let rest_ms: u64 = args.get(4).and_then(|v| v.parse().ok()).unwrap_or(300);
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            std::thread::spawn(move || {
                let mut seed: u64 = 0x9E3779B97F4A7C15 ^ (t as u64 + 1);
                let mut kept: Vec<Vec<u8>> = Vec::with_capacity(window);
                let mut touched: u64 = 0;
                for i in 0..rounds {
                    seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    let size = 4096 + (seed >> 33) as usize % (1536 * 1024 - 4096);
                    let mut buf = vec![0u8; size];
                    for j in (0..size).step_by(4096) {
                        buf[j] = i as u8;
                    }
                    touched += buf[size / 2] as u64;
                    if kept.len() < window {
                        kept.push(buf);
                    } else {
                        kept[i % window] = buf;
                    }
                }
                drop(kept);
                touched
            })
        })
        .collect();
    let sum: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    std::thread::sleep(Duration::from_millis(rest_ms));
    println!("checksum: {}", sum);
    println!("rss_idle_kb: {}", vm_rss_kb());
}
