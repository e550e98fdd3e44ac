package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpuSample is CPU time used so far by this process and by every
// PostgreSQL process on the machine (the benchmark's cluster is the only
// one running under `make bench`), so a phase's CPU cost per effect can be
// read off regardless of how busy the shared machine is.
type cpuSample struct {
	self, postgres time.Duration
	// autovacuum is the part of postgres spent by autovacuum workers:
	// debt a run may inherit from the phase before it (dead River rows).
	autovacuum time.Duration
}

var clockTick = 100 // USER_HZ on Linux

func sampleCPU() cpuSample {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	s := cpuSample{self: time.Duration(ru.Utime.Nano() + ru.Stime.Nano())}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, dir := range dirs {
		comm, err := os.ReadFile(filepath.Join(dir, "comm"))
		if err != nil || !strings.HasPrefix(strings.TrimSpace(string(comm)), "postgres") {
			continue
		}
		stat, err := os.ReadFile(filepath.Join(dir, "stat"))
		if err != nil {
			continue
		}
		// Fields after the ")" closing the command name: state is field 3,
		// utime 14, stime 15, and the CPU of reaped children cutime 16,
		// cstime 17 (1-based, per proc(5)). The children's part is how
		// the postmaster accounts for processes that ended between two
		// samples (autovacuum workers, closed connections' backends).
		rest := string(stat[strings.LastIndexByte(string(stat), ')')+2:])
		f := strings.Fields(rest)
		if len(f) < 15 {
			continue
		}
		var ticks int64
		for _, i := range []int{11, 12, 13, 14} {
			n, _ := strconv.ParseInt(f[i], 10, 64)
			ticks += n
		}
		d := time.Duration(ticks) * time.Second / time.Duration(clockTick)
		s.postgres += d
		if cmd, _ := os.ReadFile(filepath.Join(dir, "cmdline")); strings.Contains(string(cmd), "autovacuum worker") {
			s.autovacuum += d
		}
	}
	return s
}

func (a cpuSample) sub(b cpuSample) cpuSample {
	return cpuSample{self: a.self - b.self, postgres: a.postgres - b.postgres, autovacuum: a.autovacuum - b.autovacuum}
}

// per1000 is CPU per 1,000 items.
func per1000(d time.Duration, n int) time.Duration {
	return d * 1000 / time.Duration(n)
}
