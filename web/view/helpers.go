package view

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
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

// mergeRef is how a template names merge variable v: {{.v}}, or, for a
// column whose name is not an identifier ("First Name"), {{index . "v"}}.
func mergeRef(v string) string {
	ident := v != ""
	for i, r := range v {
		if !(r == '_' || unicode.IsLetter(r) || i > 0 && unicode.IsDigit(r)) {
			ident = false
			break
		}
	}
	if ident {
		return "{{." + v + "}}"
	}
	return "{{index . " + strconv.Quote(v) + "}}"
}

// Count words n of a noun: "1 row", "2 rows", "1,000 rows".
func Count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return num(n) + " " + many
}

// agree is the word of a phrase that agrees with n: one when n is 1.
func agree(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// countsBrief words a list's counts that are not zero, in the legend's
// order: "6 done · 1 not started".
func countsBrief(c Counts) string {
	var parts []string
	for _, s := range CountStates {
		if n := c.Get(s); n > 0 {
			parts = append(parts, num(n)+" "+label(s))
		}
	}
	if len(parts) == 0 {
		return "no targets"
	}
	return strings.Join(parts, " · ")
}

// The verdict a campaign list row gives from its counts (the audit's read
// model): the audit cannot hold while a target is missing (not started,
// or held outside the plan) or in doubt (pending, unknown), nor while a
// failed target is anything but refused by the provider for good (given
// up, never reached the provider, to be sent again); otherwise it holds
// by the counts, which the audit page rechecks against the frozen plan.
func verdictHolds(c Counts) string {
	if c.NotStarted+c.Outside+c.Pending+c.Unknown+c.Failed-c.Refused > 0 {
		return "no"
	}
	return "yes"
}

func verdictText(c Counts, state string) string {
	if verdictHolds(c) == "no" {
		var why []string
		if n := c.NotStarted + c.Outside; n > 0 {
			why = append(why, num(n)+" not sent")
		}
		if n := c.Pending + c.Unknown; n > 0 {
			why = append(why, num(n)+" in doubt")
		}
		if c.Unreached > 0 {
			why = append(why, num(c.Unreached)+" never reached the provider")
		}
		if c.GivenUp > 0 {
			why = append(why, num(c.GivenUp)+" given up after their tries")
		}
		if n := c.FailedToRetry(); n > 0 {
			why = append(why, num(n)+" failed, to be sent again")
		}
		yet := ""
		if state == "approved" || state == "running" || state == "paused" {
			yet = " yet"
		}
		return "audit: does not hold" + yet + " (" + strings.Join(why, ", ") + ")"
	}
	if c.Refused > 0 {
		return "audit: holds, with " + Count(c.Refused, "target", "targets") + " refused by the provider for good"
	}
	return "audit: holds"
}

func verdictClass(c Counts) string {
	switch {
	case verdictHolds(c) == "no":
		return "state-unknown"
	case c.Refused > 0:
		return "state-failed"
	}
	return "state-done"
}

// endingLabel is the badge of a campaign that ended without every target
// getting its effect: "completed, not all sent", "cancelled".
func endingLabel(state string) string {
	if state == "completed" {
		return "completed, not all sent"
	}
	return label(state)
}

// The template hint's examples (campaigns.templ's payloadFields).
const (
	fallbackExample  = `{{or .first_name "friend"}}`
	conditionExample = `{{if .city}}in {{.city}}{{end}}`
)

// hasError reports whether a form's errors name field.
func hasError(errs map[string]string, field string) bool {
	_, ok := errs[field]
	return ok
}

// listSep follows item i of n in a sentence: a comma, or the full stop.
func listSep(i, n int) string {
	if i == n-1 {
		return "."
	}
	return ","
}
