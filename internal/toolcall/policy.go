package toolcall

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/internal/provider"
	"github.com/onceplan/onceplan/ledger"
)

// Recovery is what a tool declares about how an attempt whose lease ended
// without a settle can be recovered.
type Recovery string

// The recoveries.
const (
	// RecoveryNone: the outside system can neither deduplicate nor be
	// asked; an attempt in doubt is unknown, for a person.
	RecoveryNone Recovery = "none"
	// RecoveryDedupe: the outside system applies a key once, whatever
	// repeats it; an attempt in doubt is performed again with the same key.
	RecoveryDedupe Recovery = "dedupe"
	// RecoveryProbe: the probe URL answers whether the key's effect
	// exists (200 found, 404 not found).
	RecoveryProbe Recovery = "probe"
)

// ParseRecovery checks a recovery's name; "" is RecoveryNone.
func ParseRecovery(s string) (Recovery, error) {
	switch Recovery(s) {
	case "", RecoveryNone:
		return RecoveryNone, nil
	case RecoveryDedupe, RecoveryProbe:
		return Recovery(s), nil
	}
	return "", &onceplan.FieldError{Field: "recovery", Reason: fmt.Sprintf("must be \"dedupe\", \"probe\" or \"none\", not %q", s)}
}

// Limits of a registration (migration 0021's checks).
const (
	MaxToolLength        = 100
	MaxDescriptionLength = 500
	MaxProbeURLLength    = 2000
	MaxSettleWindow      = 24 * time.Hour
	// KeyPlaceholder is replaced in a probe URL by the call's key.
	KeyPlaceholder = "{key}"
)

// Policy is a tool's registration: how its attempts in doubt are
// recovered, and whether a person approves each call's args first.
type Policy struct {
	ID       int64
	Tool     string
	Recovery Recovery
	// ProbeURL is the probe's URL template (RecoveryProbe): GET it with
	// KeyPlaceholder replaced by the key.
	ProbeURL string
	// SettleWindow: a probe's "not found" is believed only this long
	// after the attempt's lease ended.
	SettleWindow time.Duration
	// DedupeWindow (RecoveryDedupe) is how long the outside system
	// honours a key as an idempotency key, from the first call with it
	// (Stripe's and Resend's 24 hours); 0: for ever. ProbeRetention
	// (RecoveryProbe) is how long the probe can still be asked about an
	// effect, from the first call; 0: for ever. Past either, recovery
	// leaves a call in doubt to a person: a call again could be a second
	// effect, and a "not found" proves nothing.
	DedupeWindow     time.Duration
	ProbeRetention   time.Duration
	ApprovalRequired bool
	// FirstUse: registered by the tool's first call, with no recovery and
	// no approval, not by an admin.
	FirstUse     bool
	Description  string
	RegisteredBy string
	CreatedAt    time.Time
}

// Summary says the policy in a few words, as the UI and `tool list` show it.
func (p Policy) Summary() string {
	var b strings.Builder
	switch p.Recovery {
	case RecoveryDedupe:
		b.WriteString("recovery: dedupe by key")
		if p.DedupeWindow > 0 {
			b.WriteString(" (window " + p.DedupeWindow.String() + ")")
		}
	case RecoveryProbe:
		b.WriteString("recovery: probe " + p.ProbeURL)
		var notes []string
		if p.SettleWindow > 0 {
			notes = append(notes, "settle window "+p.SettleWindow.String())
		}
		if p.ProbeRetention > 0 {
			notes = append(notes, "retention "+p.ProbeRetention.String())
		}
		if len(notes) > 0 {
			b.WriteString(" (" + strings.Join(notes, ", ") + ")")
		}
	default:
		b.WriteString("no recovery")
	}
	if p.ApprovalRequired {
		b.WriteString(", approval required")
	} else {
		b.WriteString(", no approval")
	}
	if p.FirstUse {
		b.WriteString(" (registered on first use)")
	}
	return b.String()
}

// capabilities are the policy's recovery as a campaign provider's, whose
// windows' rule (provider.Capabilities.CanResend, CanProbe) single
// effects share.
func (p Policy) capabilities() provider.Capabilities {
	return provider.Capabilities{Dedupe: p.Recovery == RecoveryDedupe, Probe: p.Recovery == RecoveryProbe,
		DedupeWindow: p.DedupeWindow, ProbeRetention: p.ProbeRetention}
}

// CanTakeOver reports whether a call first made at first may be taken
// over at now with lease: the tool deduplicates, and its outside system
// still honours the key when the new lease ends.
func (p Policy) CanTakeOver(first, now time.Time, lease time.Duration) bool {
	return p.capabilities().CanResend(first, now.Add(lease))
}

// CanProbe reports whether the probe of a call first made at first may
// still be asked at now: past the retention a "not found" proves nothing.
func (p Policy) CanProbe(first, now time.Time) bool {
	return p.capabilities().CanProbe(first, now)
}

// Closed says, in a sentence for the person who resolves it, why the
// recovery of a call first made at first cannot act at now (with a
// takeover's lease, for dedupe), or "" when it can.
func (p Policy) Closed(first, now time.Time, lease time.Duration) string {
	switch {
	case p.Recovery == RecoveryDedupe && !p.CanTakeOver(first, now, lease):
		return fmt.Sprintf("tool %s's outside system honours a key for %s from the first call (at %s), which has passed, so calling again could be a second effect",
			p.Tool, p.DedupeWindow, first.UTC().Format(time.RFC3339))
	case p.Recovery == RecoveryProbe && !p.CanProbe(first, now):
		return fmt.Sprintf("tool %s's outside system keeps its records for %s from the first call (at %s), which has passed, so its probe's \"not found\" proves nothing",
			p.Tool, p.ProbeRetention, first.UTC().Format(time.RFC3339))
	}
	return ""
}

// ProbeURLFor is the probe's URL for key.
func (p Policy) ProbeURLFor(key ledger.Key) string {
	return strings.ReplaceAll(p.ProbeURL, KeyPlaceholder, url.PathEscape(string(key)))
}

// RegisterParams registers a tool's policy (`onceplan tool add`).
type RegisterParams struct {
	Tool             string
	Recovery         Recovery
	ProbeURL         string
	SettleWindow     time.Duration
	DedupeWindow     time.Duration
	ProbeRetention   time.Duration
	ApprovalRequired bool
	Description      string
	RegisteredBy     string
}

// ValidateTool checks a tool's name: the ledger key's rule (a lower-case
// ASCII identifier) and the registry's length.
func ValidateTool(tool string) error {
	if tool == "" {
		return &onceplan.FieldError{Field: "tool", Reason: "is required"}
	}
	if _, err := ledger.NewKey(ledger.KeyInput{Event: "e", Tool: tool, Target: ledger.Target{Kind: ledger.TargetSubject, Value: "t"}}); err != nil || tool != strings.TrimSpace(tool) {
		return &onceplan.FieldError{Field: "tool", Reason: fmt.Sprintf("%q is not a tool name: use lower-case ASCII letters, digits, '.', '_' and '-', starting with a letter or digit", tool)}
	}
	if len(tool) > MaxToolLength {
		return &onceplan.FieldError{Field: "tool", Reason: fmt.Sprintf("is %d characters long; at most %d", len(tool), MaxToolLength)}
	}
	return nil
}

// Validate refuses a registration the database would, one sentence per
// field, before it reaches one.
func (p RegisterParams) Validate() error {
	if err := ValidateTool(p.Tool); err != nil {
		return err
	}
	if _, err := ParseRecovery(string(p.Recovery)); err != nil {
		return err
	}
	switch {
	case p.Recovery == RecoveryProbe && p.ProbeURL == "":
		return &onceplan.FieldError{Field: "probe_url", Reason: "is required with recovery probe: the URL to GET, with " + KeyPlaceholder + " where the key goes"}
	case p.Recovery != RecoveryProbe && p.ProbeURL != "":
		return &onceplan.FieldError{Field: "probe_url", Reason: "applies only with recovery probe"}
	case p.Recovery != RecoveryProbe && p.SettleWindow != 0:
		return &onceplan.FieldError{Field: "settle_window", Reason: "applies only with recovery probe"}
	case p.SettleWindow < 0 || p.SettleWindow > MaxSettleWindow:
		return &onceplan.FieldError{Field: "settle_window", Reason: fmt.Sprintf("must be between 0 and %s", MaxSettleWindow)}
	case p.Recovery != RecoveryDedupe && p.DedupeWindow != 0:
		return &onceplan.FieldError{Field: "dedupe_window", Reason: "applies only with recovery dedupe"}
	case p.DedupeWindow < 0 || (p.DedupeWindow > 0 && p.DedupeWindow < time.Second):
		return &onceplan.FieldError{Field: "dedupe_window", Reason: "must be at least 1s (leave it out when the outside system honours a key for ever)"}
	case p.Recovery != RecoveryProbe && p.ProbeRetention != 0:
		return &onceplan.FieldError{Field: "probe_retention", Reason: "applies only with recovery probe"}
	case p.ProbeRetention < 0 || (p.ProbeRetention > 0 && p.ProbeRetention < time.Second):
		return &onceplan.FieldError{Field: "probe_retention", Reason: "must be at least 1s (leave it out when the probe can be asked for ever)"}
	case utf8.RuneCountInString(p.Description) > MaxDescriptionLength:
		return &onceplan.FieldError{Field: "description", Reason: fmt.Sprintf("is longer than %d characters", MaxDescriptionLength)}
	case strings.TrimSpace(p.RegisteredBy) == "":
		return &onceplan.FieldError{Field: "registered_by", Reason: "is required: who registers the tool"}
	}
	if p.Recovery == RecoveryProbe {
		u, err := url.Parse(strings.ReplaceAll(p.ProbeURL, KeyPlaceholder, "k"))
		switch {
		case len(p.ProbeURL) > MaxProbeURLLength:
			return &onceplan.FieldError{Field: "probe_url", Reason: fmt.Sprintf("is longer than %d characters", MaxProbeURLLength)}
		case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
			return &onceplan.FieldError{Field: "probe_url", Reason: fmt.Sprintf("%q is not an http(s) URL", p.ProbeURL)}
		case !strings.Contains(p.ProbeURL, KeyPlaceholder):
			return &onceplan.FieldError{Field: "probe_url", Reason: fmt.Sprintf("%q has no %s: the probe must be asked about one key", p.ProbeURL, KeyPlaceholder)}
		}
	}
	return nil
}

// DB is what the package's reads and single statements need: a pool, a
// connection or a transaction — the ledger's.
type DB = onceplan.DB

// ErrNotOwner: the database role may not register a tool's policy (only
// the schema's owner may, as `onceplan tool add` does).
var ErrNotOwner = errors.New("only the schema's owner registers tools")

// Register records a tool's policy, as the schema's owner: it is in force
// for every call begun after it commits (an attempt keeps the policy it
// was begun under). Policies are write-once; a new registration of a
// tool supersedes the last, and always wins over the first-use one.
func Register(ctx context.Context, db DB, p RegisterParams) (Policy, error) {
	if p.Recovery == "" {
		p.Recovery = RecoveryNone
	}
	if err := p.Validate(); err != nil {
		return Policy{}, err
	}
	var probe *string
	if p.ProbeURL != "" {
		probe = &p.ProbeURL
	}
	pol, err := scanPolicy(db.QueryRow(ctx, `
		INSERT INTO tool_policy (tool, recovery, probe_url, settle_window, dedupe_window, probe_retention, approval_required, first_use, description, registered_by)
		VALUES ($1, $2, $3, make_interval(secs => $4), make_interval(secs => nullif($5, 0)), make_interval(secs => nullif($6, 0)), $7, false, $8, $9)
		RETURNING `+policyCols,
		p.Tool, string(p.Recovery), probe, p.SettleWindow.Seconds(), p.DedupeWindow.Seconds(), p.ProbeRetention.Seconds(),
		p.ApprovalRequired, strings.TrimSpace(p.Description), p.RegisteredBy))
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == ledger.SQLStateInsufficientPrivilege {
		return Policy{}, fmt.Errorf("%w: %s", ErrNotOwner, pgErr.Message)
	}
	return pol, err
}

const policyCols = `id, tool, recovery, coalesce(probe_url, ''), extract(epoch FROM settle_window)::float8,
	coalesce(extract(epoch FROM dedupe_window), 0)::float8, coalesce(extract(epoch FROM probe_retention), 0)::float8,
	approval_required, first_use, description, registered_by, created_at`

func scanPolicy(row pgx.Row) (Policy, error) {
	var p Policy
	var rec string
	var settle, dedupe, retention float64
	err := row.Scan(&p.ID, &p.Tool, &rec, &p.ProbeURL, &settle, &dedupe, &retention, &p.ApprovalRequired, &p.FirstUse, &p.Description, &p.RegisteredBy, &p.CreatedAt)
	p.Recovery = Recovery(rec)
	p.SettleWindow = seconds(settle)
	p.DedupeWindow, p.ProbeRetention = seconds(dedupe), seconds(retention)
	return p, err
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// CurrentPolicy is the policy in force for tool, or ErrNotRegistered: the
// latest row an admin registered, else the first-use row, as the database's
// tool_policy_current (migration 0021) says, which the attempt trigger
// also asks.
func CurrentPolicy(ctx context.Context, db DB, tool string) (Policy, error) {
	p, err := scanPolicy(db.QueryRow(ctx, `SELECT `+policyCols+` FROM tool_policy WHERE id = tool_policy_current($1)`, tool))
	if errors.Is(err, pgx.ErrNoRows) {
		return Policy{}, fmt.Errorf("%w: tool %s has never been used or registered", ErrNotRegistered, tool)
	}
	return p, err
}

// ErrNotRegistered: no policy names the tool.
var ErrNotRegistered = fmt.Errorf("%w: tool not registered", onceplan.ErrNotFound)

// policyByID reads one policy.
func policyByID(ctx context.Context, db DB, id int64) (Policy, error) {
	return scanPolicy(db.QueryRow(ctx, `SELECT `+policyCols+` FROM tool_policy WHERE id = $1`, id))
}

// Policies lists the policy in force of every tool, by tool name.
func Policies(ctx context.Context, db DB) ([]Policy, error) {
	rows, err := db.Query(ctx, `SELECT `+policyCols+` FROM tool_policy
		WHERE id IN (SELECT tool_policy_current(t.tool) FROM (SELECT DISTINCT tool FROM tool_policy) t)
		ORDER BY tool`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Policy, error) { return scanPolicy(r) })
}

// registerFirstUse records a tool's first use: the first-use default (no
// recovery, no approval), the only policy row the application role may
// write. Two first uses at once agree (one row per tool).
func registerFirstUse(ctx context.Context, db DB, tool, by string) (Policy, error) {
	if _, err := db.Exec(ctx, `INSERT INTO tool_policy (tool, registered_by) VALUES ($1, $2)
		ON CONFLICT (tool) WHERE first_use DO NOTHING`, tool, by); err != nil {
		return Policy{}, err
	}
	return CurrentPolicy(ctx, db, tool)
}
