// Package view holds Onceplan's HTML: templ components and the plain view
// models the handlers in package web fill. It knows nothing of HTTP or the
// database; every value it renders is escaped by templ, so text from a
// draft, a target list or a provider can never become markup here.
package view

import (
	"time"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/audit"
)

// Assets are the checksummed URLs of the embedded static files.
type Assets struct {
	CSS string
	JS  string
}

// User is the signed-in user as the pages need it.
type User struct {
	Email      string
	Name       string
	Roles      []string
	IsAdmin    bool
	CanPropose bool
	CanApprove bool
	CanOperate bool
}

// Page is what every page's layout needs.
type Page struct {
	Title  string
	Nav    string // "campaigns", "admin"
	User   *User  // nil when signed out
	CSRF   string
	Assets Assets
	// Flash is a one-line confirmation of the last action.
	Flash string
	// Error is a one-line refusal of the last action.
	Error string
}

// Counts are a plan's targets by the state of their effect at the current
// epoch (package audit's read model). Planned = the sum of the others.
type Counts = audit.Counts

// CountStates lists the states a progress bar shows, in its order.
var CountStates = []string{"done", "pending", "unknown", "failed", "stranded", "revoked", "outside", "suppressed", "not_started"}

// TargetStates are the states the per-target filter offers.
var TargetStates = []string{"not_started", "pending", "done", "unknown", "failed", "stranded", "revoked", "outside", "suppressed"}

// Campaign is a campaign's heading data.
type Campaign struct {
	ID                string
	Name              string
	State             string
	Provider          string
	Version           int
	RequiredApprovals int
	HasPlan           bool
	// ListUnsubscribe: each message carries a one-click unsubscribe link
	// (false: a transactional campaign).
	ListUnsubscribe bool
	// Starts says when it starts, in words, until it has started ("" once
	// it has, or when it never will).
	Starts string
	// ArchivedAt is when `onceplan archive` archived it (zero until then).
	ArchivedAt time.Time
	// Outcome is how it ended for its targets, once it ended
	// (approval.OutcomeOf, from the counts the page shows); nil before, or
	// on a page that does not read the counts.
	Outcome *Outcome
}

// Outcome is how a campaign that ended ended for its targets.
type Outcome = approval.Outcome

// CampaignRow is one line of the campaigns list.
type CampaignRow struct {
	Campaign
	Counts       Counts
	ExactlyOnce  int
	Approved     int
	LastActivity time.Time
}

// CampaignsPage lists campaigns.
type CampaignsPage struct {
	Page
	Rows []CampaignRow
}

// Payload is a draft's message as edited in the form.
type Payload struct {
	From    string
	Subject string
	Text    string
	HTML    string
	// Variables are the merge variables of the draft's list (its first
	// target's, as a list's rows share its columns); ListImported says
	// there is a list, so that none means none.
	Variables    []string
	ListImported bool
}

// NewCampaignPage is the form that creates a campaign.
type NewCampaignPage struct {
	Page
	Name              string
	Provider          string
	Providers         []string
	RequiredApprovals int
	Payload           Payload
	FieldErrors       map[string]string
	// Transactional: the box "no unsubscribe link" is ticked.
	Transactional bool
	// Start is when it starts once approved ("manual", "approval" or
	// "at"), ScheduledAt the time for "at" (UTC, as typed).
	Start       string
	ScheduledAt string
	// Copy is the campaign whose list the new one imports (a clone).
	Copy *CopySource
	// Encoding is the list's encoding as chosen, UploadName the name of
	// the file that was refused (to ask for it again).
	Encoding   string
	UploadName string
}

// CopySource is the campaign a new one is made from: the list of its
// current version is imported again.
type CopySource struct {
	ID          string
	Name        string
	Version     int
	TargetCount int
}

// Rejection is a CSV line an import refused.
type Rejection struct {
	Line   int
	Reason string
}

// Duplicate is a CSV line whose target an earlier line holds.
type Duplicate struct {
	Line        int
	DuplicateOf int
}

// ImportReport accounts for every line of an uploaded list.
type ImportReport struct {
	Rows        int
	Accepted    int
	Duplicate   int
	Rejected    int
	TargetCount int
	Rejections  []Rejection
	Duplicates  []Duplicate
	// Suppressed are the lines left out because their address is on the
	// suppression list (Rejection's Reason: why it is).
	SuppressedCount int
	Suppressed      []Rejection
	Truncated       bool
}

// Preview is one target's rendered message.
type Preview struct {
	Ordinal int
	From    string
	To      string
	Subject string
	Text    string
	// HTMLURL loads the HTML body into a sandboxed frame; empty when the
	// message has no HTML body.
	HTMLURL string
	Error   string
}

// DraftTarget is a target of a draft or plan list, with its variables.
type DraftTarget struct {
	Ordinal int
	Line    int
	Target  string
	Vars    string
}

// MissingVar is a target lacking merge variables the draft reads.
type MissingVar struct {
	Line    int
	Target  string
	Missing string
}

// DraftPage edits a draft.
type DraftPage struct {
	Page
	Campaign     Campaign
	Payload      Payload
	FieldErrors  map[string]string
	PlanHash     string
	TargetCount  int
	Import       *ImportReport
	Preview      *Preview
	Missing      []MissingVar
	MissingTotal int
	Targets      []DraftTarget
	CanEdit      bool
	// TestSend is the test-send form (nil when the user may not).
	TestSend *TestSendForm
}

// ApprovalPage shows what an approver approves.
type ApprovalPage struct {
	Page
	Campaign    Campaign
	PlanHash    string
	TargetCount int
	Payload     Payload
	Samples     []Preview
	Targets     []DraftTarget
	After       int
	Next        int // 0: no next page
	Approvals   int
	Required    int
	Approvers   []string
	ProposedBy  string
	CanApprove  bool
	// WhyNot says why the signed-in user may not approve (when they are an
	// approver).
	WhyNot string
	// Diffs are what changed: against the last approved version, and
	// against the previous submission when that is another version.
	Diffs []VersionDiff
	// LeftOut is how many rows the imports of this list left out because
	// their address was suppressed; SuppressedNow how many of the list's
	// targets are suppressed now (they will not be mailed).
	LeftOut       int
	SuppressedNow int
	// TestSend is the test-send form (nil when the user may not).
	TestSend *TestSendForm
	// Rejected says who rejected the version last submitted, when and
	// why, while it is back with its proposer ("" otherwise).
	Rejected string
	// EmptyWarnings are the submission's warnings about the list, shown
	// to the proposer at submit: the approver sees them too.
	EmptyWarnings
	// SampleNote says which targets the samples are, or why there are
	// fewer than asked.
	SampleNote string
}

// TargetRow is one target of a running plan.
type TargetRow struct {
	Ordinal  int
	Target   string
	Key      string
	Epoch    int
	State    string
	Attempts int
	Receipt  string
	Changed  time.Time
	// Suppressed says why a suppressed target was not sent (the entry's
	// reason, source and actor); "" for any other state.
	Suppressed string
}

// TargetFilter is the run page's per-target table query.
type TargetFilter struct {
	State string
	Q     string
	// After is the keyset cursor of the page shown.
	After string
}

// RunPage watches a started (or approved) plan.
type RunPage struct {
	Page
	Campaign    Campaign
	PlanHash    string
	PlanVersion int
	Counts      Counts
	Filter      TargetFilter
	Rows        []TargetRow
	Next        string
	// Note explains a partial page (a filter that scanned part of the list).
	Note       string
	CanStart   bool
	CanPause   bool
	CanResume  bool
	CanCancel  bool
	CanOperate bool
}

// Response is one raw provider answer.
type Response struct {
	Kind string
	At   time.Time
	Body string
	Size int
}

// Attempt is one ledger row of a target.
type Attempt struct {
	ID           int64
	Epoch        int
	Attempt      int
	State        string
	Owner        string
	JobID        int64
	Receipt      string
	Reason       string
	ResolvedBy   string
	Resolution   string
	RevokedBy    string
	RevokeReason string
	Created      time.Time
	Updated      time.Time
	Settled      time.Time
	Responses    []Response
}

// Bump is a recorded epoch bump.
type Bump struct {
	Epoch  int
	Actor  string
	Reason string
	At     time.Time
}

// TargetPage shows one target and every attempt at it.
type TargetPage struct {
	Page
	Campaign Campaign
	Row      TargetRow
	Vars     string
	Attempts []Attempt
	Bumps    []Bump
	Events   []ProviderEvent // bounces and complaints reported (package inbound)
	// AddressSuppressed is the suppression in force for the target's
	// address (nil: none).
	AddressSuppressed *SuppressionRow
	CanResolve        bool
	CanSupersede      bool
	CanRevoke         bool
	CanOperate        bool
}

// Metric is the exactly-once metric of a campaign's plan (package
// audit's, for the page and the JSON export).
type Metric struct {
	Approved    int  `json:"approved"`
	ExactlyOnce int  `json:"exactly_once"`
	Missing     int  `json:"missing"`
	InDoubt     int  `json:"in_doubt"`
	Failed      int  `json:"failed"`
	Stranded    int  `json:"stranded"`
	Revoked     int  `json:"revoked"`
	Duplicates  int  `json:"duplicates"`
	Outside     int  `json:"outside"`
	Suppressed  int  `json:"suppressed"`
	PlanIntact  bool `json:"plan_intact"`
	Holds       bool `json:"holds"`
	// Rows, PlanHash and ApprovedHash are what the audit read: the frozen
	// rows and the hash they give, against the approved one.
	Rows         int    `json:"rows"`
	PlanHash     string `json:"plan_hash"`
	ApprovedHash string `json:"approved_hash"`
	// Reasons says why it does not hold, a sentence each.
	Reasons []string `json:"reasons"`
}

// Event is one entry of the audit trail: the campaign's history.
type Event struct {
	At       time.Time
	Version  int
	Action   string
	Actor    string
	Reason   string
	PlanHash string
	Detail   string
	// Summary says what happened in a sentence; Lines are the lines an
	// import refused (the first of them), with why.
	Summary string
	Lines   []Rejection
}

// AuditPage shows the metric and the audit trail; a campaign never
// approved (Campaign.HasPlan false) has no metric, only its history.
type AuditPage struct {
	Page
	Campaign Campaign
	Metric   Metric
	// Source says where the metric comes from.
	Source string
	Events []Event
}

// UserRow is a user on the admin page.
type UserRow struct {
	ID       int64
	Email    string
	Name     string
	Roles    []string
	Disabled bool
}

// TokenRow is an API token on the admin page.
type TokenRow struct {
	ID       int64
	User     string
	Name     string
	Agent    bool
	Prefix   string
	Created  time.Time
	LastUsed time.Time
	Revoked  bool
}

// ProviderRow is a configured provider and its queue.
type ProviderRow struct {
	Name   string
	Kind   string
	URL    string
	Dedupe bool
	Probe  bool
	// Rate, Batch and Window say in words what is in force: the rate
	// limit and whose budget it is, how many messages go in one call, and
	// how long the provider honours a repeat's key or can be asked about
	// a message (part of its exactly-once guarantee).
	Rate        string
	Batch       string
	Window      string
	Queue       string
	Paused      bool
	PausedUntil time.Time
	Available   int
	Running     int
	Retryable   int
}

// PolicyRow is a registered bump policy on the admin page (read-only:
// policies are registered with `onceplan policy add` as the owner role).
type PolicyRow struct {
	Name         string
	Description  string
	RegisteredBy string
	Registered   time.Time
}

// AdminPage manages users, tokens and shows providers and bump policies.
type AdminPage struct {
	Page
	Users     []UserRow
	Tokens    []TokenRow
	Providers []ProviderRow
	Policies  []PolicyRow
	Roles     []string
	// NewToken is a token just created: shown once, here.
	NewToken     string
	NewTokenName string
	// NewPassword is a generated password for a user just created.
	NewPassword string
	NewUser     string
	RiverUI     bool
	// Events is the administration audit trail, newest first.
	Events []AdminEvent
	// Notifications: the notifiers and the deliveries that did not
	// succeed.
	Notifications NotificationsSection
}

// AdminEvent is one administrative action.
type AdminEvent struct {
	At      time.Time
	Actor   string
	Action  string
	Subject string
	Detail  string
}

// LoginPage is the sign-in form.
type LoginPage struct {
	Page
	Email string
	Next  string
}

// ErrorPage explains a refused or failed request.
type ErrorPage struct {
	Page
	Status    int
	Heading   string
	Message   string
	RequestID string
	Back      string
}
