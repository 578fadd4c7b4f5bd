// SPDX-License-Identifier: MIT
//
// The tokio side of tests/bench/vs_others.py: the workloads of weft's fanout,
// spawn and chan_pingpong benches written as a tokio programmer would, with
// tokio::spawn, JoinHandles and tokio::sync::mpsc, measured the way the C
// benches measure them (best of several rounds or batches). One JSON line
// per result.
//
//   tokio_fanout_balanced, tokio_fanout_skewed  64 requests x 16 tasks of
//       synthetic work, joined in order; a 2-worker runtime. The speedup is
//       over the same work done serially here; the checksum must equal the
//       C bench's.
//   tokio_spawn, tokio_spawn_2threads  spawn 1000 tasks that each return a
//       value, await them all; a current-thread runtime and a 2-worker one.
//   tokio_chan_pingpong_local, tokio_chan_pingpong  a round trip through two
//       mpsc channels of capacity 1; a current-thread runtime and a 2-worker
//       one.
//
// Argument: --quick (the C benches' --quick sizes).
use std::time::Instant;
use tokio::runtime::{Builder, Runtime};
use tokio::sync::mpsc;

const REQUESTS: u64 = 64;
const BRANCHES: u64 = 16;

fn synthetic_work(seed: u64, iters: u64) -> u64 {
    let mut x = seed ^ 0x9E3779B97F4A7C15;
    for i in 0..iters {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407 ^ i);
        x ^= x >> 29;
    }
    x
}

fn branch_iters(skewed: bool, req: u64, branch: u64) -> u64 {
    if !skewed {
        2000
    } else if branch == req % BRANCHES {
        20000
    } else {
        500
    }
}

async fn fanout_parallel(skewed: bool) -> u64 {
    let mut sum = 0u64;
    for req in 0..REQUESTS {
        let handles: Vec<_> = (0..BRANCHES)
            .map(|b| tokio::spawn(async move { synthetic_work((req << 32) ^ b, branch_iters(skewed, req, b)) }))
            .collect();
        for h in handles {
            sum = sum.wrapping_add(h.await.unwrap());
        }
    }
    sum
}

fn fanout_serial(skewed: bool) -> u64 {
    let mut sum = 0u64;
    for req in 0..REQUESTS {
        for b in 0..BRANCHES {
            sum = sum.wrapping_add(synthetic_work((req << 32) ^ b, branch_iters(skewed, req, b)));
        }
    }
    sum
}

// ns per iteration of f, best of 3 rounds of `iterations`, and f's result.
fn best_of_3(iterations: u32, mut f: impl FnMut() -> u64) -> (f64, u64) {
    let mut best = f64::MAX;
    let mut sum = 0;
    for _ in 0..3 {
        let t0 = Instant::now();
        for _ in 0..iterations {
            sum = f();
        }
        best = best.min(t0.elapsed().as_nanos() as f64 / iterations as f64);
    }
    (best, sum)
}

// Runs `body` as a task of rt: on a worker thread, as weft's dispatcher runs
// in a coroutine on a shard (block_on's own future would run on the calling
// thread, outside the runtime's workers, and wake through it).
fn run_in<T: Send + 'static>(rt: &Runtime, body: impl std::future::Future<Output = T> + Send + 'static) -> T {
    rt.block_on(async { tokio::spawn(body).await.unwrap() })
}

fn runtime(workers: usize) -> Runtime {
    if workers == 1 {
        Builder::new_current_thread().build().unwrap()
    } else {
        Builder::new_multi_thread().worker_threads(workers).build().unwrap()
    }
}

fn fanout(skewed: bool, iterations: u32) {
    let rt = runtime(2);
    let (par, par_sum) = best_of_3(iterations, || run_in(&rt, fanout_parallel(skewed)));
    let (ser, ser_sum) = best_of_3(iterations, || fanout_serial(skewed));
    println!(
        "{{\"bench\":\"tokio_fanout_{}\",\"metric\":\"speedup\",\"value\":{:.3},\"parallel_ns_per_iter\":{:.0},\
         \"serial_ns_per_iter\":{:.0},\"checksum\":\"{:016x}\",\"serial_checksum\":\"{:016x}\",\"workers\":2}}",
        if skewed { "skewed" } else { "balanced" },
        ser / par,
        par,
        ser,
        par_sum,
        ser_sum
    );
}

fn best_and_median(mut samples: Vec<f64>) -> (f64, f64) {
    samples.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (samples[0], samples[samples.len() / 2])
}

const SPAWN_BATCH: usize = 1000;

fn spawn(workers: usize, rounds: i32) {
    let rt = runtime(workers);
    let samples = run_in(&rt, async move {
        let mut samples = Vec::new();
        for r in -3..rounds {
            let t0 = Instant::now();
            let handles: Vec<_> = (0..SPAWN_BATCH).map(|i| tokio::spawn(async move { i as u64 })).collect();
            for h in handles {
                h.await.unwrap();
            }
            if r >= 0 {
                samples.push(t0.elapsed().as_nanos() as f64 / SPAWN_BATCH as f64);
            }
        }
        samples
    });
    let (best, median) = best_and_median(samples);
    let name = if workers == 1 { "tokio_spawn" } else { "tokio_spawn_2threads" };
    println!(
        "{{\"bench\":\"{}\",\"metric\":\"ns_per_task\",\"value\":{:.3},\"median\":{:.1},\"workers\":{}}}",
        name, best, median, workers
    );
}

fn chan_pingpong(workers: usize, warm: u64, iters: u64, batches: usize) {
    let rt = runtime(workers);
    let samples = run_in(&rt, async move {
        let (ping_tx, mut ping_rx) = mpsc::channel::<u64>(1);
        let (pong_tx, mut pong_rx) = mpsc::channel::<u64>(1);
        let total = warm + iters * batches as u64;
        let echo = tokio::spawn(async move {
            for _ in 0..total {
                let v = ping_rx.recv().await.unwrap();
                pong_tx.send(v + 1).await.unwrap();
            }
        });
        let mut v = 0u64;
        for _ in 0..warm {
            ping_tx.send(v).await.unwrap();
            v = pong_rx.recv().await.unwrap();
        }
        let mut samples = Vec::new();
        for _ in 0..batches {
            let t0 = Instant::now();
            for _ in 0..iters {
                ping_tx.send(v).await.unwrap();
                v = pong_rx.recv().await.unwrap();
            }
            samples.push(t0.elapsed().as_nanos() as f64 / iters as f64);
        }
        echo.await.unwrap();
        assert_eq!(v, total);
        samples
    });
    let (best, median) = best_and_median(samples);
    let name = if workers == 1 { "tokio_chan_pingpong_local" } else { "tokio_chan_pingpong" };
    println!(
        "{{\"bench\":\"{}\",\"metric\":\"rtt_ns\",\"value\":{:.3},\"median\":{:.1},\"workers\":{}}}",
        name, best, median, workers
    );
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let (iterations, rounds) = if quick { (20, 50) } else { (100, 300) };
    let (local_iters, busy_iters, batches) = if quick { (200_000, 10_000, 5) } else { (1_000_000, 50_000, 10) };
    fanout(false, iterations);
    fanout(true, iterations);
    spawn(1, rounds);
    spawn(2, rounds);
    chan_pingpong(1, 10_000, local_iters, batches);
    chan_pingpong(2, 1_000, busy_iters, batches);
}
