// SPDX-License-Identifier: MIT
//
// The Go side of tests/bench/vs_go.sh: the workloads of weft's fanout, spawn
// and chan_pingpong benches written as a Go programmer would, with goroutines,
// sync.WaitGroup and channels, measured the way the C benches measure them
// (best of several rounds or batches). One JSON line per result.
//
//	go_fanout_balanced, go_fanout_skewed  64 requests x 16 goroutines of
//	    synthetic work, joined per request; GOMAXPROCS=2. The speedup is over
//	    the same work done serially by this program; the checksum must equal
//	    the C bench's.
//	go_spawn, go_spawn_2threads  start 1000 goroutines that each store a
//	    result, wait for all; ns per goroutine; GOMAXPROCS=1 and 2.
//	go_chan_pingpong_local, go_chan_pingpong  a round trip through two
//	    channels of capacity 1; GOMAXPROCS=1 and 2.
//
// Flags: -quick (the C benches' --quick sizes).
package main

import (
	"flag"
	"fmt"
	"runtime"
	"sort"
	"sync"
	"time"
)

const (
	requests = 64
	branches = 16
)

func syntheticWork(seed, iters uint64) uint64 {
	x := seed ^ 0x9E3779B97F4A7C15
	for i := uint64(0); i < iters; i++ {
		x = x*6364136223846793005 + (1442695040888963407 ^ i)
		x ^= x >> 29
	}
	return x
}

func branchIters(skewed bool, req, branch uint64) uint64 {
	if !skewed {
		return 2000
	}
	if branch == req%branches {
		return 20000
	}
	return 500
}

// One iteration of fanout_fanin: each request forks 16 goroutines and joins
// them before the next request starts.
func fanoutParallel(skewed bool) uint64 {
	var sum uint64
	var results [branches]uint64
	var wg sync.WaitGroup
	for req := uint64(0); req < requests; req++ {
		wg.Add(branches)
		for b := uint64(0); b < branches; b++ {
			go func(req, b uint64) {
				results[b] = syntheticWork((req<<32)^b, branchIters(skewed, req, b))
				wg.Done()
			}(req, b)
		}
		wg.Wait()
		for b := 0; b < branches; b++ {
			sum += results[b]
		}
	}
	return sum
}

func fanoutSerial(skewed bool) uint64 {
	var sum uint64
	for req := uint64(0); req < requests; req++ {
		for b := uint64(0); b < branches; b++ {
			sum += syntheticWork((req<<32)^b, branchIters(skewed, req, b))
		}
	}
	return sum
}

// ns per iteration of f, best of 3 rounds of `iterations`, and f's result.
func bestOf3(iterations int, f func() uint64) (float64, uint64) {
	best := 0.0
	var sum uint64
	for round := 0; round < 3; round++ {
		t0 := time.Now()
		for i := 0; i < iterations; i++ {
			sum = f()
		}
		ns := float64(time.Since(t0).Nanoseconds()) / float64(iterations)
		if round == 0 || ns < best {
			best = ns
		}
	}
	return best, sum
}

func fanout(skewed bool, iterations int) {
	runtime.GOMAXPROCS(2)
	par, parSum := bestOf3(iterations, func() uint64 { return fanoutParallel(skewed) })
	ser, serSum := bestOf3(iterations, func() uint64 { return fanoutSerial(skewed) })
	shape := "balanced"
	if skewed {
		shape = "skewed"
	}
	fmt.Printf("{\"bench\":\"go_fanout_%s\",\"metric\":\"speedup\",\"value\":%.3f,"+
		"\"parallel_ns_per_iter\":%.0f,\"serial_ns_per_iter\":%.0f,\"checksum\":\"%016x\","+
		"\"serial_checksum\":\"%016x\",\"gomaxprocs\":2,\"go\":\"%s\"}\n",
		shape, ser/par, par, ser, parSum, serSum, runtime.Version())
}

// best and median of samples (ns)
func summarise(samples []float64) (float64, float64) {
	s := append([]float64(nil), samples...)
	sort.Float64s(s)
	return s[0], s[len(s)/2]
}

const spawnBatch = 1000

func spawn(procs, rounds int) {
	runtime.GOMAXPROCS(procs)
	var results [spawnBatch]uint64
	var wg sync.WaitGroup
	samples := make([]float64, 0, rounds)
	for r := -3; r < rounds; r++ {
		t0 := time.Now()
		wg.Add(spawnBatch)
		for i := 0; i < spawnBatch; i++ {
			go func(i int) {
				results[i] = uint64(i)
				wg.Done()
			}(i)
		}
		wg.Wait()
		if r >= 0 {
			samples = append(samples, float64(time.Since(t0).Nanoseconds())/spawnBatch)
		}
	}
	best, median := summarise(samples)
	name := "go_spawn"
	if procs > 1 {
		name = "go_spawn_2threads"
	}
	fmt.Printf("{\"bench\":\"%s\",\"metric\":\"ns_per_goroutine\",\"value\":%.3f,\"median\":%.1f,"+
		"\"gomaxprocs\":%d}\n", name, best, median, procs)
}

func chanPingpong(procs, warm, iters, batches int) {
	runtime.GOMAXPROCS(procs)
	ping := make(chan uint64, 1)
	pong := make(chan uint64, 1)
	total := warm + iters*batches
	go func() {
		for i := 0; i < total; i++ {
			pong <- <-ping + 1
		}
	}()
	var v uint64
	for i := 0; i < warm; i++ {
		ping <- v
		v = <-pong
	}
	samples := make([]float64, 0, batches)
	for b := 0; b < batches; b++ {
		t0 := time.Now()
		for i := 0; i < iters; i++ {
			ping <- v
			v = <-pong
		}
		samples = append(samples, float64(time.Since(t0).Nanoseconds())/float64(iters))
	}
	best, median := summarise(samples)
	name := "go_chan_pingpong_local"
	if procs > 1 {
		name = "go_chan_pingpong"
	}
	fmt.Printf("{\"bench\":\"%s\",\"metric\":\"rtt_ns\",\"value\":%.3f,\"median\":%.1f,"+
		"\"gomaxprocs\":%d,\"trips\":%d}\n", name, best, median, procs, v)
}

func main() {
	quick := flag.Bool("quick", false, "the C benches' --quick sizes")
	flag.Parse()
	iterations, rounds := 100, 300
	localIters, busyIters, batches := 1000000, 50000, 10
	if *quick {
		iterations, rounds = 20, 50
		localIters, busyIters, batches = 200000, 10000, 5
	}
	fanout(false, iterations)
	fanout(true, iterations)
	spawn(1, rounds)
	spawn(2, rounds)
	chanPingpong(1, 10000, localIters, batches)
	chanPingpong(2, 1000, busyIters, batches)
}
