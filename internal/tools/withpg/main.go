// Command withpg runs a command against a throwaway PostgreSQL cluster:
//
//	go run ./internal/tools/withpg [flags] -- CMD ARGS...
//
// It creates a temporary directory, starts a private cluster there with durability
// turned off (fsync, synchronous_commit, full_page_writes: the data is disposable),
// runs CMD with TEST_DATABASE_URL (database "onceplan") and TEST_PG_BINDIR set, and
// always stops the cluster and removes the directory afterwards, also when CMD fails
// or withpg gets SIGINT/SIGTERM (which it forwards to CMD). It exits with CMD's code.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/onceplan/onceplan/internal/pgcluster"
)

func main() {
	os.Exit(run())
}

func run() int {
	fs := flag.NewFlagSet("withpg", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: withpg [flags] -- CMD ARGS...\n\nRuns CMD with TEST_DATABASE_URL pointing at a temporary PostgreSQL cluster.")
		fs.PrintDefaults()
	}
	binDir := fs.String("bindir", "", "directory of the PostgreSQL server binaries (default: discover, see ONCEPLAN_PG_BINDIR)")
	verbose := fs.Bool("v", false, "log the cluster's start and stop")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return 2
	}
	args := fs.Args()
	if len(args) == 0 {
		fs.Usage()
		return 2
	}

	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	// Signals are ours from the start, so the cleanup below always runs: before CMD
	// runs they cancel the start, afterwards they go to CMD.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		mu          sync.Mutex
		child       *os.Process
		interrupted os.Signal
	)
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case <-done:
				return
			case s := <-sigs:
				mu.Lock()
				if child != nil {
					_ = child.Signal(s)
				} else if interrupted == nil {
					interrupted = s
					cancel()
				}
				mu.Unlock()
			}
		}
	}()

	tmp, err := os.MkdirTemp("", "onceplan-withpg-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "withpg: %v\n", err)
		return 1
	}
	defer os.RemoveAll(tmp)
	if os.Geteuid() == 0 {
		// PostgreSQL runs as the postgres account, which must be able to enter.
		if err := os.Chmod(tmp, 0o755); err != nil {
			fmt.Fprintf(os.Stderr, "withpg: %v\n", err)
			return 1
		}
	}

	settings := map[string]string{
		"fsync":              "off",
		"synchronous_commit": "off",
		"full_page_writes":   "off",
		"max_connections":    "400",
	}
	// WITHPG_SETTINGS adds settings for investigations, e.g.
	// "shared_preload_libraries=pg_stat_statements;track_io_timing=on".
	for _, kv := range strings.Split(os.Getenv("WITHPG_SETTINGS"), ";") {
		if k, v, ok := strings.Cut(strings.TrimSpace(kv), "="); ok {
			settings[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	cluster, err := pgcluster.Open(ctx, pgcluster.Options{
		Dir:      filepath.Join(tmp, "pg"),
		BinDir:   *binDir,
		Logger:   logger,
		Settings: settings,
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "withpg: %v\n", err)
		return exitCodeFor(interrupted, 1)
	}
	defer func() {
		stopCtx, stop := context.WithTimeout(context.Background(), 2*time.Minute)
		defer stop()
		if err := cluster.Close(stopCtx); err != nil {
			fmt.Fprintf(os.Stderr, "withpg: %v\n", err)
		}
	}()
	url := cluster.URL("onceplan")
	fmt.Fprintf(os.Stderr, "withpg: test PostgreSQL cluster in %s (TEST_DATABASE_URL=%s)\n", cluster.Dir(), url)

	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), "TEST_DATABASE_URL="+url, "TEST_PG_BINDIR="+cluster.BinDir())
	mu.Lock()
	if interrupted != nil {
		mu.Unlock()
		return exitCodeFor(interrupted, 1)
	}
	err = cmd.Start()
	if err == nil {
		child = cmd.Process
	}
	mu.Unlock()
	if err != nil {
		fmt.Fprintf(os.Stderr, "withpg: %v\n", err)
		return 127
	}
	err = cmd.Wait()
	mu.Lock()
	child = nil
	mu.Unlock()

	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return exit.ExitCode()
	default:
		fmt.Fprintf(os.Stderr, "withpg: %v\n", err)
		return 1
	}
}

// exitCodeFor is the shell convention for death by signal s, or def without one.
func exitCodeFor(s os.Signal, def int) int {
	if sig, ok := s.(syscall.Signal); ok {
		return 128 + int(sig)
	}
	return def
}
