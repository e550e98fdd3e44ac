package audit

// Finding is one target (or one piece of stray evidence) the
// reconciliation reports.
type Finding struct {
	Ordinal int    `json:"ordinal,omitempty"`
	Target  string `json:"target,omitempty"`
	Key     string `json:"key,omitempty"`
	// Epoch is the epoch of Key (meaningless when Key is empty).
	Epoch int `json:"epoch"`
	// ID is how the evidence named the effect when it is not a key: a
	// Message-ID, or the provider's own id.
	ID string `json:"id,omitempty"`
	// State is the ledger's state of the newest attempt at Key and Epoch
	// (not_started when none; empty for a stray).
	State string `json:"state,omitempty"`
	// Files and Lines count the maildir files and log lines naming it.
	Files int `json:"maildir_files"`
	Lines int `json:"log_lines"`
	// Probe is "found", "not found" or "error: …"; empty when not probed.
	Probe string `json:"probe,omitempty"`
	// ProbeMatches is how many messages with the effect id the probe
	// found at the provider (more than one: a duplicate); 0 when not
	// found or not probed.
	ProbeMatches int `json:"probe_matches,omitempty"`
	// Sources name the pieces of evidence (maildir files, log lines).
	Sources []string `json:"sources,omitempty"`
	// ResolvableAsDelivered marks an unknown effect the evidence shows
	// delivered: a person may resolve it as delivered
	// (POST /api/v1/effects/{key}/resolve).
	ResolvableAsDelivered bool   `json:"resolvable_as_delivered,omitempty"`
	Note                  string `json:"note,omitempty"`

	hash effectHash // for naming maildir files
}

// FindingList is a count and the first findings.
type FindingList struct {
	Count     int       `json:"count"`
	Items     []Finding `json:"items"`
	Truncated bool      `json:"truncated,omitempty"`
	max       int
}

func (l *FindingList) add(f Finding) {
	l.Count++
	if len(l.Items) < l.max {
		l.Items = append(l.Items, f)
	} else {
		l.Truncated = true
	}
}

// ProbeSummary says what probing found.
type ProbeSummary struct {
	Provider string `json:"provider"`
	Probed   int    `json:"probed"`
	Found    int    `json:"found"`
	NotFound int    `json:"not_found"`
	Errors   int    `json:"errors"`
	// Duplicated counts the probes that found the effect more than once.
	Duplicated int `json:"duplicated"`
}

// Report is a plan's reconciliation against outside evidence.
type Report struct {
	// Metric is the plan's metric with Duplicates, Unconfirmed, Unrecorded
	// and Evidence filled in from the evidence. It is left out of the
	// report's JSON: the external contract puts the metric's fields at the
	// top level, and callers print it beside the report.
	Metric   Metric           `json:"-"`
	Maildirs []MaildirSummary `json:"maildirs,omitempty"`
	Logs     []LogSummary     `json:"provider_logs,omitempty"`
	Probe    *ProbeSummary    `json:"probe,omitempty"`
	// DoneWithoutEvidence: done in the ledger, nothing in the evidence.
	DoneWithoutEvidence FindingList `json:"done_without_evidence"`
	// EvidenceNotDone: delivered according to the evidence, but pending,
	// unknown, failed or not started in the ledger.
	EvidenceNotDone FindingList `json:"evidence_not_done"`
	// Duplicates: more than one piece of evidence in one source for one
	// key and epoch of the plan's targets (a probe that found the effect
	// more than once at the provider included).
	Duplicates FindingList `json:"duplicates"`
	// Strays: evidence for effects that are not the plan's targets: keys
	// of this campaign outside the plan, and ids no attempt in the ledger
	// has.
	Strays FindingList `json:"strays"`
	// Recognised: evidence of Onceplan's own messages that are no target's
	// effect (ReconcileParams.OwnMessages): test sends and notifications,
	// of any campaign. They neither count for nor against the plan.
	Recognised FindingList `json:"recognised"`
	// OtherCampaigns counts pieces of evidence for other campaigns'
	// effects (a shared outbox or log); they are not this plan's business.
	OtherCampaigns int `json:"other_campaigns"`
}
