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
}

var clockTick = 100 // USER_HZ on Linux

func sampleCPU() cpuSample {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	s := cpuSample{self: time.Duration(ru.Utime.Nano() + ru.Stime.Nano())}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		comm, err := os.ReadFile(filepath.Join(d, "comm"))
		if err != nil || !strings.HasPrefix(strings.TrimSpace(string(comm)), "postgres") {
			continue
		}
		stat, err := os.ReadFile(filepath.Join(d, "stat"))
		if err != nil {
			continue
		}
		// Fields after the ")" closing the command name: state is field 3,
		// utime field 14, stime field 15 (1-based, per proc(5)).
		rest := string(stat[strings.LastIndexByte(string(stat), ')')+2:])
		f := strings.Fields(rest)
		if len(f) < 13 {
			continue
		}
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		s.postgres += time.Duration(ut+st) * time.Second / time.Duration(clockTick)
	}
	return s
}

func (a cpuSample) sub(b cpuSample) cpuSample {
	return cpuSample{self: a.self - b.self, postgres: a.postgres - b.postgres}
}

// per1000 is CPU per 1,000 items.
func per1000(d time.Duration, n int) time.Duration {
	return d * 1000 / time.Duration(n)
}
