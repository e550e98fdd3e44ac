// Who a test send may go to: an enabled user's email or an address on the
// allow-list, never a suppressed one (testsend.go says what a test send
// guarantees).

package approval

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/internal/suppression"
	"github.com/onceplan/onceplan/ledger"
)

// ParseTestAllowList normalises allow-list addresses (blank entries are
// skipped); the error names the first that is not an address.
func ParseTestAllowList(list []string) ([]string, error) {
	var out []string
	for _, a := range list {
		if strings.TrimSpace(a) == "" {
			continue
		}
		n, err := ledger.NormalizeEmail(a)
		if err != nil {
			return nil, fmt.Errorf("test recipient %q is not an email address (%v)", strings.TrimSpace(a), err)
		}
		out = append(out, n)
	}
	return out, nil
}

// Reviewer is an address a test send may go to: an enabled user's email
// or on the allow-list. Suppressed, when not empty, says why the
// suppression list holds it now: no test send goes there until it is
// taken off.
type Reviewer struct {
	Address    string
	Suppressed string
}

// Reviewers lists who may receive a test send: the enabled users' emails
// and the allow-list, sorted, each with its suppression (the UI offers
// them).
func (s *TestSender) Reviewers(ctx context.Context) ([]Reviewer, error) {
	users, err := s.userEmails(ctx)
	if err != nil {
		return nil, err
	}
	addrs := make([]string, 0, len(users)+len(s.allow))
	for a := range users {
		addrs = append(addrs, a)
	}
	for a := range s.allow {
		if !users[a] {
			addrs = append(addrs, a)
		}
	}
	slices.Sort(addrs)
	held, err := suppression.LookupMany(ctx, s.cfg.DB, addrs)
	if err != nil {
		return nil, err
	}
	out := make([]Reviewer, len(addrs))
	for i, a := range addrs {
		out[i] = Reviewer{Address: a}
		if e, ok := held[a]; ok {
			out[i].Suppressed = e.Why()
		}
	}
	return out, nil
}

// userEmails is the set of the enabled users' emails, read once per
// request (auth owns the users).
func (s *TestSender) userEmails(ctx context.Context) (map[string]bool, error) {
	users, err := auth.ListUsers(ctx, s.cfg.DB)
	if err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(users))
	for _, u := range users {
		if !u.Disabled() {
			out[u.Email] = true
		}
	}
	return out, nil
}

// recipients normalises and checks p.To: each an enabled user's email or
// on the allow-list, and not suppressed; duplicates collapse. Errors name
// the entry (to[2]).
func (s *TestSender) recipients(ctx context.Context, to []string) ([]string, error) {
	switch {
	case len(to) == 0:
		return nil, &onceplan.FieldError{Field: "to", Reason: "is required: name at least one reviewer's address"}
	case len(to) > s.cfg.MaxRecipients:
		return nil, &onceplan.FieldError{Field: "to", Reason: fmt.Sprintf("names %d addresses; a test send goes to at most %d", len(to), s.cfg.MaxRecipients)}
	}
	var (
		out   []string
		users map[string]bool // read when the first address is not on the allow-list
	)
	for i, raw := range to {
		a, err := ledger.NormalizeEmail(raw)
		if err != nil {
			return nil, &onceplan.FieldError{Field: "to", Reason: fmt.Sprintf("to[%d]: %q is not an email address", i, raw)}
		}
		if !s.allow[a] {
			if users == nil {
				if users, err = s.userEmails(ctx); err != nil {
					return nil, err
				}
			}
			if !users[a] {
				return nil, &onceplan.FieldError{Field: "to", Reason: fmt.Sprintf("to[%d]: %s is not a user or an allowed test recipient", i, a)}
			}
		}
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	if err := notSuppressed(ctx, s.cfg.DB, to, out); err != nil {
		return nil, err
	}
	return out, nil
}

// notSuppressed refuses the recipients (normalised) while the suppression
// list holds one of them — the list's own rule (suppression.LookupMany) —
// naming the first, as the request wrote it (to, as given), and why, in
// one sentence.
func notSuppressed(ctx context.Context, db onceplan.DB, to, recipients []string) error {
	held, err := suppression.LookupMany(ctx, db, recipients)
	if err != nil || len(held) == 0 {
		return err
	}
	for _, a := range recipients {
		e, ok := held[a]
		if !ok {
			continue
		}
		entry := "to"
		for i, raw := range to {
			if n, err := ledger.NormalizeEmail(raw); err == nil && n == a {
				entry = fmt.Sprintf("to[%d]", i)
				break
			}
		}
		return &onceplan.FieldError{Field: "to", Reason: fmt.Sprintf(
			"%s: %s is on the suppression list (%s), and a test send never mails a suppressed address: nothing was sent", entry, a, e.Why())}
	}
	return nil
}

// recordMessages records one test message per recipient, under its key,
// and commits them before anything is sent: PostgreSQL refuses the row
// of an address suppressed now (migration 0039), so an address
