//! A Rust program on the system allocator (no #[global_allocator]: Rust's default, libc's malloc,
//! which a preloaded allocator replaces). THREADS threads each build ROUNDS word-count maps of short
//! Strings in a BTreeMap and a Vec of boxed records, then free them; prints what they computed.
use std::collections::{BTreeMap, HashMap};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let threads: u64 = args.get(1).and_then(|v| v.parse().ok()).unwrap_or(4);
    let rounds: u64 = args.get(2).and_then(|v| v.parse().ok()).unwrap_or(200);
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            std::thread::spawn(move || {
                let mut seed: u64 = 0x9E3779B97F4A7C15 ^ (t + 1);
                let mut total: u64 = 0;
                let mut kept: Vec<Box<[u8]>> = Vec::new();
                for r in 0..rounds {
                    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
                    let mut index: HashMap<u64, Vec<u32>> = HashMap::new();
                    for i in 0..2000u32 {
                        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                        let word = format!("w{}", (seed >> 40) % 509);
                        *counts.entry(word).or_insert(0) += 1;
                        index.entry((seed >> 20) % 97).or_default().push(i);
                    }
                    let size = 64 + ((seed >> 33) % 65536) as usize;
                    kept.push(vec![(r % 251) as u8; size].into_boxed_slice());
                    if kept.len() > 32 {
                        kept.remove(0);
                    }
                    total += counts.len() as u64 + counts.values().max().copied().unwrap_or(0)
                        + index.values().map(|v| v.len() as u64 * v[0] as u64).sum::<u64>() % 1009
                        + kept.iter().map(|b| b[b.len() / 2] as u64).sum::<u64>();
                }
                total
            })
        })
        .collect();
    let sums: Vec<u64> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    println!("threads: {} rounds: {} sums: {:?} total: {}", threads, rounds, sums, sums.iter().sum::<u64>());
}
