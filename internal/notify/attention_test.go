package notify

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestAttentionDecision walks the batching rule: a growth is observed,
// gathers for the wait, and goes out once the window since the last
// message has passed; a fall is a new baseline, so a later growth is
// measured from it.
func TestAttentionDecision(t *testing.T) {
	t.Parallel()
	s := &Service{cfg: Config{Window: 10 * time.Second, Wait: time.Second}}
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	row := func(kind string, u, st, f int, d time.Duration) attention {
		return attention{kind: kind, unknown: u, stranded: st, failed: f, at: at(d)}
	}
	for _, tc := range []struct {
		name string
		rows []attention
		now  [3]int
		t    time.Duration
		want string
	}{
		{"nothing ever", nil, [3]int{}, 0, ""},
		{"a first growth is observed", nil, [3]int{5, 0, 0}, 0, "observed"},
		{"it gathers", []attention{row("observed", 5, 0, 0, 0)}, [3]int{50, 0, 0}, 500 * time.Millisecond, ""},
		{"then goes out, with the count then", []attention{row("observed", 5, 0, 0, 0)}, [3]int{50, 0, 0}, time.Second, "notified"},
		{"nothing new since the message", []attention{row("observed", 5, 0, 0, 0), row("notified", 50, 0, 0, time.Second)}, [3]int{50, 0, 0}, time.Hour, ""},
		{"a growth within the window is observed", []attention{row("notified", 50, 0, 0, 0)}, [3]int{50, 1, 0}, 2 * time.Second, "observed"},
		{"and waits for the window", []attention{row("notified", 50, 0, 0, 0), row("observed", 50, 1, 0, 2*time.Second)}, [3]int{50, 3, 0}, 9 * time.Second, ""},
		{"then goes out", []attention{row("notified", 50, 0, 0, 0), row("observed", 50, 1, 0, 2*time.Second)}, [3]int{50, 3, 0}, 10 * time.Second, "notified"},
		{"a fall is the new baseline", []attention{row("notified", 50, 0, 0, 0)}, [3]int{40, 0, 0}, time.Second, "baseline"},
		{"a growth from the baseline counts", []attention{row("notified", 50, 0, 0, 0), row("baseline", 40, 0, 0, time.Second)}, [3]int{45, 0, 0}, time.Minute, "observed"},
		{"a growth seen and gone resets", []attention{row("notified", 50, 0, 0, 0), row("observed", 60, 0, 0, time.Second)}, [3]int{50, 0, 0}, 2 * time.Second, "baseline"},
		{"a growth in one state, a fall in another", []attention{row("notified", 5, 0, 3, 0)}, [3]int{2, 0, 4}, time.Minute, "observed"},
	} {
		require.Equal(t, tc.want, s.decide(tc.rows, tc.now, at(tc.t)), tc.name)
	}
}
