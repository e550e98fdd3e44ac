package view

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// num formats n with thin thousands separators ("1,000,000").
func num(n int) string {
	s := strconv.Itoa(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func itoa(n int) string       { return strconv.Itoa(n) }
func i64(n int64) string      { return strconv.FormatInt(n, 10) }
func ordinalURL(n int) string { return strconv.Itoa(n) }

// when formats a time for a table cell; the zero time is a dash.
func when(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}

// When is when for the handlers' sentences: every time a page shows
// reads the same.
func When(t time.Time) string { return when(t) }

// whenISO is a machine-readable time for <time datetime>.
func whenISO(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// label turns a state name into words ("not_started" → "not started").
func label(s string) string { return strings.ReplaceAll(s, "_", " ") }

// percent is n of total as a CSS/SVG percentage.
func percent(n, total int) float64 {
	if total <= 0 {
		return 0
	}
	return float64(n) * 100 / float64(total)
}

func pct(f float64) string { return strconv.FormatFloat(f, 'f', 3, 64) + "%" }

// Segment is one state's part of a progress bar.
type Segment struct {
	State string
	Count int
	X     float64
	W     float64
}

// segments lays out a stacked progress bar of c.
func segments(c Counts) []Segment {
	var out []Segment
	x := 0.0
	for _, s := range CountStates {
		w := percent(c.Get(s), c.Planned)
		out = append(out, Segment{State: s, Count: c.Get(s), X: x, W: w})
		x += w
	}
	return out
}

// headline is the exactly-once headline: "done exactly once / approved".
func headline(exactlyOnce, approved int) string {
	return fmt.Sprintf("%s / %s", num(exactlyOnce), num(approved))
}

func shortHash(h string) string {
	if len(h) > 12 {
		return h[:12] + "…"
	}
	return h
}

// joinComma lists words: "a, b, c".
func joinComma(s []string) string { return strings.Join(s, ", ") }

func hasRole(rs []string, r string) bool {
	for _, x := range rs {
		if x == r {
			return true
		}
	}
	return false
}

// campaignPath is the page of a campaign that fits its state.
func campaignPath(c Campaign) string {
	return "/campaigns/" + c.ID
}

func quorum(have, need int) string {
	noun := "approvals"
	if need == 1 {
		noun = "approval"
	}
	return fmt.Sprintf("%d of %d %s", have, need, noun)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func selected(a, b string) bool { return a == b }

// runURL is the run page with a filter and a cursor.
func runURL(campaignID string, f TargetFilter, after string) string {
	q := url.Values{}
	if f.State != "" {
		q.Set("state", f.State)
	}
	if f.Q != "" {
		q.Set("q", f.Q)
	}
	if after != "" {
		q.Set("after", after)
	}
	u := "/campaigns/" + campaignID + "/run"
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}
