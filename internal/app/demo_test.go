package app

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/provider"
)

// The demo of `make run` lasts about a minute: long enough to watch the
// counts move and to try the kill -9 the README invites, short enough to
// wait for. Its size is DemoTargets; its pace is the rate of the provider
// the Makefile's run target gives serve.
func TestDemoLastsAboutAMinute(t *testing.T) {
	t.Parallel()
	makefile, err := os.ReadFile(filepath.Join("..", "..", "Makefile"))
	require.NoError(t, err)
	run := regexp.MustCompile(`(?m)^run:.*\n\t(.*)$`).FindSubmatch(makefile)
	require.NotNil(t, run, "the Makefile has a run target")
	recipe := string(run[1])
	require.Contains(t, recipe, " serve ")
	require.Contains(t, recipe, " --demo ")

	// The recipe names its provider through RUN_PROVIDER, which is empty
	// when ONCEPLAN_PROVIDERS names others.
	require.Contains(t, recipe, "$(RUN_PROVIDER)", "the run target passes its demo provider")
	def := regexp.MustCompile(`(?m)^RUN_PROVIDER = (.*)$`).FindSubmatch(makefile)
	require.NotNil(t, def, "the Makefile defines RUN_PROVIDER")
	flag := regexp.MustCompile(`--provider "([^"]+)"`).FindStringSubmatch(string(def[1]))
	require.NotNil(t, flag, "the run target names its provider: %s", def[1])
	value := strings.ReplaceAll(flag[1], "$(abspath $(DATA_DIR))", t.TempDir())
	p, err := provider.ParseFlag(value)
	require.NoError(t, err, "the run target's provider is valid")
	t.Cleanup(func() { p.Close() })

	rate := regexp.MustCompile(`[?&]rate=([0-9.]+)/s(&|$)`).FindStringSubmatch(value)
	require.NotNil(t, rate, "the demo's provider is slowed with rate=N/s: %s", value)
	perSecond, err := strconv.ParseFloat(rate[1], 64)
	require.NoError(t, err)
	// The limit spaces sends evenly (burst 1), so the last of n leaves
	// (n-1)/rate after the first.
	lasts := time.Duration(float64(DemoTargets-1) / perSecond * float64(time.Second))
	require.GreaterOrEqual(t, lasts, 45*time.Second, "%d messages at %s/s", DemoTargets, rate[1])
	require.LessOrEqual(t, lasts, 2*time.Minute, "%d messages at %s/s", DemoTargets, rate[1])
}
