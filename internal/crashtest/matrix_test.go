package crashtest

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/sink"
	"github.com/onceplan/onceplan/ledger"
)

// world is the outside world of one test: the provider URL a worker sends
// to, and a count of effects per target as that world saw them.
type world struct {
	kind     string
	provider string // NAME=URL for --provider
	// effects counts what the outside world received, per target address.
	effects func() map[string]int
	// loseAnswer, for the email services' batch worlds, makes the service
	// accept its next call and lose the answer (the connection drops).
	loseAnswer func()
	// resend is the Resend stand-in of the "resend-batch" world.
	resend *sink.Resend
}

func newWorld(t *testing.T, kind string) *world {
	t.Helper()
	const opts = "concurrency=1"
	switch kind {
	case "maildir":
		dir := t.TempDir()
		return &world{kind: kind, provider: "p=maildir://" + dir + "?" + opts,
			effects: func() map[string]int { return maildirCount(t, dir) }}
	case "webhook-dedupe", "webhook-probe":
		wh := sink.NewWebhook(sink.WebhookOpts{Dedupe: kind == "webhook-dedupe", Probe: kind == "webhook-probe"})
		t.Cleanup(wh.Close)
		u := sink.WithOption(wh.URL(), opts)
		if kind == "webhook-probe" {
			u = sink.WithOption(u, "settle=1s")
		}
		return &world{kind: kind, provider: "p=" + u, effects: func() map[string]int {
			out := map[string]int{}
			for _, e := range wh.Effects() {
				out[e.Target]++
			}
			return out
		}}
	case "smtp":
		s := smtpSink(t)
		return &world{kind: kind, provider: "p=" + sink.WithOption(s.URL(), opts), effects: smtpCount(s)}
	case "resend":
		// Resend's API: deduplicates by Idempotency-Key for 24 h.
		rs := sink.NewResend(sink.ResendOpts{})
		t.Cleanup(rs.Close)
		return &world{kind: kind, provider: "p=" + sink.WithOption(rs.URL(), opts), effects: rs.CountByRecipient}
	case "smtp-idempotency":
		// An SMTP relay that deduplicates by a header (Resend's relay).
		s := smtpSink(t)
		s.DedupeByHeader("Resend-Idempotency-Key", 24*time.Hour)
		return &world{kind: kind, provider: "p=" + sink.WithOption(s.URL(), opts+"&idempotency_header=Resend-Idempotency-Key"), effects: smtpCount(s)}
	case "postmark":
		// Postmark's API: the effect id in Metadata, found by its search.
		pm := sink.NewPostmark(sink.PostmarkOpts{})
		t.Cleanup(pm.Close)
		return &world{kind: kind, provider: "p=" + sink.WithOption(pm.URL(), opts+"&settle=1s"), effects: pm.CountByRecipient}
	case "resend-batch", "postmark-batch":
		return batchWorld(t, kind, 2)
	case "smtp-probe-postmark":
		// Postmark's SMTP relay, asked through Postmark's API.
		s := smtpSink(t)
		pm := sink.NewPostmark(sink.PostmarkOpts{SMTP: s})
		t.Cleanup(pm.Close)
		return &world{kind: kind, provider: "p=" + sink.WithOption(pm.SMTPURL(), opts+"&settle=1s"), effects: smtpCount(s)}
	}
	t.Fatalf("unknown world %q", kind)
	return nil
}

func smtpSink(t *testing.T) *sink.SMTP {
	t.Helper()
	s, err := sink.NewSMTP()
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s
}

// smtpCount counts what an SMTP relay delivered, per recipient (a repeat
// it deduplicated is not delivered).
func smtpCount(s *sink.SMTP) func() map[string]int {
	return func() map[string]int {
		out := map[string]int{}
		for _, m := range s.Messages() {
			for _, rcpt := range m.Rcpts {
				out[rcpt]++
			}
		}
		return out
	}
}

// maildirCount counts delivered messages per recipient by reading every
// file in new/ and cur/ (the outside world of the maildir provider).
func maildirCount(t *testing.T, dir string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, sub := range []string{"new", "cur"} {
		entries, err := os.ReadDir(filepath.Join(dir, sub))
		if os.IsNotExist(err) {
			continue
		}
		require.NoError(t, err)
		for _, e := range entries {
			b, err := os.ReadFile(filepath.Join(dir, sub, e.Name()))
			require.NoError(t, err)
			for _, line := range strings.Split(string(b), "\n") {
				if rest, ok := strings.CutPrefix(line, "To: "); ok {
					out[strings.Trim(strings.TrimSpace(rest), "<>")]++
					break
				}
			}
		}
	}
	return out
}

func requireNoDuplicates(t *testing.T, w *world, stage string) {
	t.Helper()
	for target, n := range w.effects() {
		require.LessOrEqual(t, n, 1, "%s: %s got %d effects", stage, target, n)
	}
}

func requireExactlyOnce(t *testing.T, w *world, targets map[string]ledger.Key) {
	t.Helper()
	got := w.effects()
	for target := range targets {
		require.Equal(t, 1, got[target], "%s must have exactly one effect", target)
	}
	require.Len(t, got, len(targets), "no effect outside the plan")
}

const matrixTargets = 6

// TestCrashMatrix kills a worker with SIGKILL at each point of the effect
// protocol, for each kind of provider, several times, restarts one, and
// counts effects at the outside world.
func TestCrashMatrix(t *testing.T) {
	t.Parallel()
	runs := 5
	if testing.Short() {
		runs = 1
	}
	for _, kind := range append([]string{"maildir", "webhook-dedupe", "webhook-probe", "smtp"}, emailServiceKinds...) {
		for _, point := range []string{"before-claim", "after-claim", "after-send", "after-raw"} {
			n := runs
			if slices.Contains(emailServiceKinds, kind) {
				n = min(runs, 2) // the same protocol as webhook-dedupe and webhook-probe, through the services' own APIs
			}
			for run := range n {
				t.Run(fmt.Sprintf("%s/%s/%d", kind, point, run), func(t *testing.T) {
					t.Parallel()
					crashAndRecover(t, kind, point)
				})
			}
		}
	}
}

// emailServiceKinds are the email services' worlds: each
// deduplicates or can be asked, within its window, so every crash settles
// without a person.
var emailServiceKinds = []string{"resend", "smtp-idempotency", "postmark", "smtp-probe-postmark"}

// TestCrashRecoveredAfterTheWindowIsUnknown: a worker killed after the
// provider accepted, and recovery only after the provider's window has
// closed (a dedupe window, a probe's retention, made short here): the
// attempt is unknown for a person, and nothing is sent again — counted at
// the service, requests included.
func TestCrashRecoveredAfterTheWindowIsUnknown(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ kind, option string }{
		{"resend", "dedupe_window=2s"},
		{"smtp-idempotency", "dedupe_window=2s"},
		{"postmark", "probe_retention=2s"},
	} {
		t.Run(c.kind, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			w := newWorld(t, c.kind)
			prov := sink.WithOption(w.provider, c.option)
			id := e.campaign(t, "p", matrixTargets)
			crashing := e.startWorker(t, []string{prov}, "ONCEPLAN_CRASH_AT=after-send:3")
			crashing.waitExit(t, 60*time.Second)
			before := w.effects()
			time.Sleep(3 * time.Second) // the window closes
			survivor := e.startWorker(t, []string{prov})
			waitFor(t, 60*time.Second, "the campaign to complete", func() bool {
				return e.campaignState(t, id) == approval.StateCompleted
			}, survivor)
			require.Equal(t, map[string]int{"done": matrixTargets - 1, "unknown": 1}, e.states(t, id))
			requireNoDuplicates(t, w, "after recovery")
			got := w.effects()
			for target, n := range before {
				require.Equal(t, n, got[target], "%s: nothing more after the window closed", target)
			}
			require.Len(t, got, matrixTargets, "the unknown one was sent once, before the crash")
			require.Contains(t, survivor.Logs(), "has closed: sending again could be a second message")
		})
	}
}

// crashThenRecover runs a worker on campaign id that SIGKILLs itself at
// point of its nth effect (or batch call), checks that nothing reached
// w twice meanwhile, and starts a survivor, which it returns once the
// campaign has completed.
func crashThenRecover(t *testing.T, e *env, w *world, id, point string, nth int) *worker {
	t.Helper()
	crashing := e.startWorker(t, []string{w.provider}, fmt.Sprintf("ONCEPLAN_CRASH_AT=%s:%d", point, nth))
	crashing.waitExit(t, 60*time.Second)
	require.Contains(t, crashing.Logs(), "crash point "+point+" reached")
	requireNoDuplicates(t, w, "right after the crash")

	survivor := e.startWorker(t, []string{w.provider})
	waitFor(t, 60*time.Second, "the campaign to complete", func() bool {
		return e.campaignState(t, id) == approval.StateCompleted
	}, survivor)
	return survivor
}

func crashAndRecover(t *testing.T, kind, point string) {
	e := newEnv(t)
	w := newWorld(t, kind)
	id := e.campaign(t, "p", matrixTargets)
	targets := e.targets(t, id)

	survivor := crashThenRecover(t, e, w, id, point, 3)
	requireNoDuplicates(t, w, "after recovery")

	states := e.states(t, id)
	if kind != "smtp" {
		// Dedupe and probe providers settle every doubt themselves.
		require.Equal(t, map[string]int{"done": matrixTargets}, states)
		requireExactlyOnce(t, w, targets)
		return
	}

	// SMTP can neither deduplicate nor be asked: exactly the attempts in
	// flight at the crash are unknown; the rest are done.
	wantUnknown := map[string]int{"before-claim": 0, "after-claim": 1, "after-send": 1, "after-raw": 0}[point]
	require.Equal(t, wantUnknown, states["unknown"], "%v", states)
	require.Equal(t, matrixTargets-wantUnknown, states["done"], "%v", states)

	// A person checks the relay's log for each unknown and resolves it.
	got := w.effects()
	for target, key := range targets {
		cur, err := ledger.NewStore(e.pool).Current(e.ctx, key)
		require.NoError(t, err)
		if cur.State != ledger.StateUnknown {
			continue
		}
		outcome := ledger.NotDelivered
		if got[target] == 1 {
			outcome = ledger.Delivered
		}
		_, err = e.svc.ResolveEffect(e.ctx, e.operator, id, string(key), outcome, "checked the relay log")
		require.NoError(t, err)
	}
	_, err := e.svc.Resume(e.ctx, e.operator, id)
	require.NoError(t, err)
	waitFor(t, 60*time.Second, "the campaign to complete after the resolutions", func() bool {
		return e.campaignState(t, id) == approval.StateCompleted && e.states(t, id)["done"] == matrixTargets
	}, survivor)
	requireExactlyOnce(t, w, targets)
}
