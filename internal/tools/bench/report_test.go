package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestWriteDocKeepsTargetsNotRun: running one scenario again rewrites its
// row of the summary and keeps the others, with the date of the run that
// measured them; the hand-written text around the markers is untouched.
func TestWriteDocKeepsTargetsNotRun(t *testing.T) {
	path := filepath.Join(t.TempDir(), "BENCHMARKS.md")
	before := "# Benchmarks\n\nHand-written.\n\n" + docBegin + "\n\nLast full run: 2026-12-01 06:02 UTC, 40m0s.\n\n" +
		"| machine | |\n|---|---|\n| memory | 24 GiB |\n\n" +
		"| target | figure (baseline measured in the same run) | goal | met |\n|---|---|---|---|\n" +
		"| 1. executor throughput | old exec figure | ≥ 0.6× bare River | no |\n" +
		"| 4. per-target page | old pages figure | p95 ≤ 50 ms | no |\n\n" + docEnd + "\n\nMore hand-written text.\n"
	require.NoError(t, os.WriteFile(path, []byte(before), 0o644))

	results = nil
	record("4. per-target page", "new pages figure", "p95 ≤ 50 ms", true)
	started := time.Date(2026, 12, 1, 7, 30, 0, 0, time.UTC)
	require.NoError(t, writeDoc(path, started, 40*time.Minute, [][2]string{{"memory", "24.0 GiB"}}))

	b, err := os.ReadFile(path)
	require.NoError(t, err)
	got := string(b)
	require.True(t, strings.HasPrefix(got, "# Benchmarks\n\nHand-written.\n\n"+docBegin), got)
	require.True(t, strings.HasSuffix(got, docEnd+"\n\nMore hand-written text.\n"), got)
	require.Contains(t, got, "| 1. executor throughput | old exec figure | ≥ 0.6× bare River | no | 2026-12-01 06:02 UTC |")
	require.Contains(t, got, "| 4. per-target page | new pages figure | p95 ≤ 50 ms | yes | 2026-12-01 07:30 UTC |")
	require.NotContains(t, got, "old pages figure")
	require.Less(t, strings.Index(got, "1. executor"), strings.Index(got, "4. per-target"), "rows stay in the targets' order")

	// Written twice, the document does not grow.
	require.NoError(t, writeDoc(path, started, 40*time.Minute, [][2]string{{"memory", "24.0 GiB"}}))
	again, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, got, string(again))
}
