package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// stream is what `go test -json` writes for a package with a passing and
// a failing test.
const stream = `{"Action":"start","Package":"p"}
{"Action":"run","Package":"p","Test":"TestOK"}
{"Action":"output","Package":"p","Test":"TestOK","Output":"=== RUN   TestOK\n"}
{"Action":"output","Package":"p","Test":"TestOK","Output":"    ok_test.go:9: chatter\n"}
{"Action":"pass","Package":"p","Test":"TestOK","Elapsed":1.5}
{"Action":"run","Package":"p","Test":"TestBad"}
{"Action":"output","Package":"p","Test":"TestBad","Output":"    bad_test.go:3: the receiver got 2\n"}
{"Action":"output","Package":"p","Test":"TestBad","Output":"--- FAIL: TestBad (0.20s)\n"}
{"Action":"fail","Package":"p","Test":"TestBad","Elapsed":0.2}
{"Action":"output","Package":"p","Output":"FAIL\n"}
{"Action":"output","Package":"p","Output":"FAIL\tp\t1.712s\n"}
{"Action":"fail","Package":"p","Elapsed":1.712}
{"Action":"output","Package":"q","Output":"ok  \tq\t0.3s\n"}
{"Action":"pass","Package":"q","Elapsed":0.3}
`

// TestFollowPrintsWhatPlainGoTestPrints: a passing test's chatter is
// dropped, a failing test's output and every package's line are kept,
// and each package's time is collected.
func TestFollowPrintsWhatPlainGoTestPrints(t *testing.T) {
	var out strings.Builder
	pkgs, tests, failed := follow(strings.NewReader(stream), &out, false)
	require.True(t, failed)
	require.Equal(t, "    bad_test.go:3: the receiver got 2\n--- FAIL: TestBad (0.20s)\nFAIL\nFAIL\tp\t1.712s\nok  \tq\t0.3s\n", out.String())
	require.Equal(t, map[string]float64{"p": 1.712, "q": 0.3}, pkgs)
	require.Equal(t, map[string]float64{"p TestOK": 1.5, "p TestBad": 0.2}, tests)

	out.Reset()
	follow(strings.NewReader(stream), &out, true)
	require.Contains(t, out.String(), "chatter", "-v prints everything")
}

// TestEstimateFromTheLastRun: the estimate is the last passing run's
// total when one is recorded, the suite's fixed estimate otherwise.
func TestEstimateFromTheLastRun(t *testing.T) {
	path := filepath.Join(t.TempDir(), "times.json")
	require.Contains(t, estimate(path, "test"), "about 10 minutes")
	require.NoError(t, save(path, record{Suite: "test", Finished: time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC), Seconds: 612}))
	require.Equal(t, "make test: the last passing run here took 10m12s (2026-12-02 09:00 UTC, "+path+"); a busy machine takes longer.", estimate(path, "test"))
	_, err := os.Stat(path + ".tmp")
	require.True(t, os.IsNotExist(err), "no temporary file left")
}

func TestVerbose(t *testing.T) {
	require.True(t, verbose([]string{"-count=1", "-v", "./..."}))
	require.False(t, verbose([]string{"-count=1", "./..."}))
	require.False(t, verbose([]string{"./x", "--", "-v"}))
}
