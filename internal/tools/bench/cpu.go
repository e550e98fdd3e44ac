package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// cpuSample is CPU time used so far by this process and by the benchmark's
// PostgreSQL cluster, so a phase's CPU cost per effect can be read off
// regardless of how busy the shared machine is.
type cpuSample struct {
	self, postgres time.Duration
	// autovacuum is the part of postgres spent by autovacuum workers
	// that are still running when the sample is taken (a worker that ends
	// between two samples is counted in postgres through the postmaster's
	// reaped children, not here, so a difference can even be negative).
	autovacuum time.Duration
}

var clockTick = 100 // USER_HZ on Linux

// postmasterPID is the benchmark cluster's postmaster (findPostmaster):
// only it and its children are counted, so that another PostgreSQL on the
// machine starting or ending mid-phase does not skew the figures. Zero
// counts every process named postgres.
var postmasterPID int

// findPostmaster sets postmasterPID to the parent of a backend of pool's,
// when that backend runs on this machine.
func findPostmaster(ctx context.Context, pool *pgxpool.Pool) {
	var backend int
	if err := pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&backend); err != nil {
		return
	}
	if f := statFields(backend); len(f) > 1 {
		postmasterPID, _ = strconv.Atoi(f[1])
	}
}

// statFields returns /proc/PID/stat's fields after the command name: the
// state is [0], the parent's pid [1], utime [11], stime [12], cutime [13]
// and cstime [14] (proc(5) numbers them 3, 4, 14, 15, 16, 17).
func statFields(pid int) []string {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	return strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
}

func sampleCPU() cpuSample {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	s := cpuSample{self: time.Duration(ru.Utime.Nano() + ru.Stime.Nano())}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, dir := range dirs {
		pid, err := strconv.Atoi(filepath.Base(dir))
		if err != nil {
			continue
		}
		comm, err := os.ReadFile(filepath.Join(dir, "comm"))
		if err != nil || !strings.HasPrefix(strings.TrimSpace(string(comm)), "postgres") {
			continue
		}
		f := statFields(pid)
		if len(f) < 15 {
			continue
		}
		fields := []int{11, 12}
		switch {
		case postmasterPID == 0:
			fields = []int{11, 12, 13, 14}
		case pid == postmasterPID:
			// The CPU of reaped children (cutime, cstime): how the
			// postmaster accounts for processes that ended between two
			// samples (autovacuum workers, closed connections' backends).
			fields = []int{11, 12, 13, 14}
		case f[1] != strconv.Itoa(postmasterPID):
			continue // another cluster's
		}
		d := statCPU(f, fields...)
		s.postgres += d
		if cmd, _ := os.ReadFile(filepath.Join(dir, "cmdline")); strings.Contains(string(cmd), "autovacuum worker") {
			s.autovacuum += d
		}
	}
	return s
}

// statCPU adds up the clock-tick fields of statFields' f (utime 11,
// stime 12, cutime 13, cstime 14) as a duration.
func statCPU(f []string, fields ...int) time.Duration {
	var ticks int64
	for _, i := range fields {
		n, _ := strconv.ParseInt(f[i], 10, 64)
		ticks += n
	}
	return time.Duration(ticks) * time.Second / time.Duration(clockTick)
}

// procCPU is the CPU time (user and system) process pid has used so far:
// for a child of this process (onceplan serve, Mailpit), which
// RUSAGE_SELF does not count. Zero when unreadable.
func procCPU(pid int) time.Duration {
	f := statFields(pid)
	if len(f) < 13 {
		return 0
	}
	return statCPU(f, 11, 12)
}

func (a cpuSample) sub(b cpuSample) cpuSample {
	return cpuSample{self: a.self - b.self, postgres: a.postgres - b.postgres, autovacuum: a.autovacuum - b.autovacuum}
}

// per1000 is CPU per 1,000 items.
func per1000(d time.Duration, n int) time.Duration {
	return d * 1000 / time.Duration(n)
}

// quiesce lets the database settle before a measured run: it vacuums and
// analyses what the phases before left behind (a million frozen targets,
// a million River jobs, the dead rows of the last run) and waits, up to
// two minutes, until no autovacuum worker is busy. Otherwise autovacuum
// may choose the middle of the next run to do that work, taking CPU from
// one side of a comparison only.
func quiesce(ctx context.Context, pool *pgxpool.Pool) error {
	if _, err := pool.Exec(ctx, `VACUUM (ANALYZE)`); err != nil {
		return fmt.Errorf("vacuum before a measured run: %w", err)
	}
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) {
		var busy int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'autovacuum worker'`).Scan(&busy); err != nil {
			return err
		}
		if busy == 0 {
			return nil
		}
	}
	return nil
}
