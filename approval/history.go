package approval

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/plan"
)

// A campaign's trail read by a person: each entry's Summary says in one
// sentence what it records, from the detail the action wrote. The draft
// page shows the latest entries, the audit page every one — also for a
// campaign never approved, whose history is its drafts'.

// HistoryLines is how many of an import's refused lines its trail entry
// keeps (the import report shows them all once, on the page the upload
// leads to).
const HistoryLines = 20

// importDetail is an import entry's detail: the report's counts and its
// first refused lines.
type importDetail struct {
	Rows          int              `json:"rows"`
	Accepted      int              `json:"accepted"`
	Duplicate     int              `json:"duplicate"`
	Rejected      int              `json:"rejected"`
	Suppressed    int              `json:"suppressed"`
	Empty         int              `json:"empty"`
	TargetCount   int              `json:"target_count"`
	Append        bool             `json:"append"`
	RejectedLines []plan.Rejection `json:"rejected_lines,omitempty"`
}

func importDetailOf(r plan.ImportReport, appended bool) importDetail {
	d := importDetail{
		Rows: r.Rows, Accepted: r.Accepted, Duplicate: r.Duplicate, Rejected: r.RejectedCount,
		Suppressed: r.SuppressedCount, Empty: r.EmptyCount, TargetCount: r.TargetCount, Append: appended,
	}
	d.RejectedLines = r.Rejected[:min(len(r.Rejected), HistoryLines)]
	return d
}

// RejectedLines are the lines an import entry's list refused, with why
// (the first HistoryLines); nil for any other entry.
func (e Event) RejectedLines() []plan.Rejection {
	if e.Action != string(auth.ActionImport) {
		return nil
	}
	var d importDetail
	if json.Unmarshal(e.Detail, &d) != nil {
		return nil
	}
	return d.RejectedLines
}

// Summary says what the entry records, in one sentence, for a person;
// its reason (a rejection's, a cancellation's) is Event.Reason, beside it.
func (e Event) Summary() string {
	var d map[string]any
	_ = json.Unmarshal(e.Detail, &d)
	n := func(k string) int {
		f, _ := d[k].(float64)
		return int(f)
	}
	v := fmt.Sprintf("version %d", e.Version)
	switch auth.Action(e.Action) {
	case auth.ActionCreate:
		var cp copyDetail
		if json.Unmarshal(e.Detail, &cp) == nil && cp.Of != "" {
			return fmt.Sprintf("Created the campaign (%s) from campaign %q, importing the list of its version %d.", v, cp.Name, cp.Version)
		}
		return "Created the campaign (" + v + ")."
	case auth.ActionEdit:
		return "Saved the message of " + v + "."
	case auth.ActionImport:
		var im importDetail
		_ = json.Unmarshal(e.Detail, &im)
		what := "Imported a list into " + v
		if im.Append {
			what = "Appended a list to " + v
		}
		s := fmt.Sprintf("%s: %s, %d accepted, %d duplicate, %d rejected, %d left out as suppressed; the draft has %s.",
			what, lines(im.Rows), im.Accepted, im.Duplicate, im.Rejected, im.Suppressed, targets(im.TargetCount))
		if im.Empty > 0 {
			s += fmt.Sprintf(" %s with blank merge variables.", capital(targets(im.Empty)))
		}
		return s
	case auth.ActionSubmit:
		s := "Submitted " + v + " for approval"
		if n("empty") > 0 {
			s += fmt.Sprintf(", with %s whose merge variables are blank", targets(n("empty")))
		}
		return s + "."
	case auth.ActionApprove:
		return "Approved " + v + " (plan " + short(e.PlanHash) + ")."
	case auth.ActionReject:
		return "Rejected " + v + ": it is back with its proposer."
	case auth.ActionFreeze:
		return fmt.Sprintf("Froze %s: %s approved, quorum reached.", v, targets(n("target_count")))
	case auth.ActionStart:
		return "Started the run of " + v + "."
	case auth.ActionPause:
		return "Paused the run."
	case auth.ActionResume:
		return fmt.Sprintf("Resumed the run: %s queued.", jobs(n("jobs")))
	case auth.ActionCancel:
		if b, _ := d["discarded"].(bool); b {
			return "Discarded the draft: it was never approved, and it can no longer be submitted, approved or started."
		}
		return "Cancelled the campaign."
	case ActionComplete:
		return "The run completed: nothing is left to send."
	case ActionAlert:
		return "Recovery stopped and sent nothing: a person must decide (" + fmt.Sprint(d["subject"]) + ")."
	case auth.ActionTestSend:
		var ts TestSendResult
		_ = json.Unmarshal(e.Detail, &ts)
		var to []string
		for _, dl := range ts.Deliveries {
			to = append(to, dl.To+" ("+string(dl.Outcome)+")")
		}
		return fmt.Sprintf("Sent a test of target %d of %s to %s.", ts.Ordinal, v, strings.Join(to, ", "))
	case auth.ActionResolve:
		return fmt.Sprintf("Resolved an unknown target as %s.", strings.ReplaceAll(fmt.Sprint(d["outcome"]), "_", " "))
	case auth.ActionSupersede:
		return fmt.Sprintf("Superseded a target: its key moved to epoch %d, to be sent once more.", n("epoch"))
	case auth.ActionRevoke:
		return "Revoked a target's effect."
	}
	return capital(label(State(e.Action))) + "."
}

func lines(n int) string {
	if n == 1 {
		return "1 line"
	}
	return fmt.Sprintf("%d lines", n)
}

func targets(n int) string {
	if n == 1 {
		return "1 target"
	}
	return fmt.Sprintf("%d targets", n)
}

func jobs(n int) string {
	if n == 1 {
		return "1 job"
	}
	return fmt.Sprintf("%d jobs", n)
}

func short(hash string) string {
	if len(hash) > 12 {
		return hash[:12] + "…"
	}
	return hash
}

func capital(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
