// A test send sends a campaign's message, rendered for one of its
// targets, to reviewers before anyone approves or starts it: a proof.
//
// What it guarantees:
//   - it never mails a target: the message goes only to the addresses
//     asked for, and each must be an enabled user's email or on the
//     configured allow-list;
//   - it never mails a suppressed address (consent overrides a review as
//     it overrides a plan): each message is recorded in
//     test_send_message, and committed, before anything is sent, and
//     PostgreSQL refuses the row of an address the suppression list holds
//     (onceplan_suppressed, migration 0039), whoever writes it; the
//     request is refused first with a sentence naming the address and
//     why (suppression.LookupMany);
//   - it never touches the campaign's ledger: each message carries a key
//     of its own (event "test:<campaign>:<random>"), which no target's key
//     can equal, and nothing is written to table effect — the campaign's
//     counts and its audit are the same after a test send as before;
//   - it is bounded: at most MaxRecipients addresses per request, and
//     Rate test sends per user (a refused request changes nothing and does
//     not count against the rate);
//   - it never carries a working unsubscribe link (the target's would
//     unsubscribe the target): a campaign with links gets the sample one;
//   - it is recorded: one campaign_event "test_send" per request, with who
//     sent it, to whom, which ordinal and each provider answer; each
//     delivery it names is one of the messages recorded before the send.

package approval

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"golang.org/x/time/rate"

	"github.com/onceplan/onceplan/internal/auth"
	"github.com/onceplan/onceplan/internal/keyedrate"
	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/internal/provider"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/plan"
)

// Defaults of TestSendConfig.
const (
	// TestSendMaxRecipients is how many addresses one test send may name.
	TestSendMaxRecipients = 10
	// TestSendRate and BurstDefault: five test sends a minute per user.
	TestSendRate  = rate.Limit(5.0 / 60)
	TestSendBurst = 5
	// TestSendTimeout bounds one request's provider calls.
	TestSendTimeout = 30 * time.Second
	// TestSubjectPrefix goes before a test message's subject.
	TestSubjectPrefix = "[Test] "
	// rawKept bounds how much of a provider's raw answer the trail keeps.
	rawKept = 2000
)

// ErrRateLimited: the user made too many test sends lately.
var ErrTestSendRateLimited = onceplan.New(onceplan.CodeRateLimited, "too many test sends")

// TestSendConfig is what a TestSender needs.
type TestSendConfig struct {
	DB        onceplan.DB
	Providers *provider.Registry
	// AllowList are addresses that may receive test sends besides the
	// users' own (serve --test-recipients).
	AllowList []string
	// MaxRecipients, Rate and Burst: see the defaults.
	MaxRecipients int
	Rate          rate.Limit
	Burst         int
	SendTimeout   time.Duration
}

// TestSender sends test messages. It is safe for concurrent use; its rate
// limits are per process.
type TestSender struct {
	cfg   TestSendConfig
	allow map[string]bool
	users *keyedrate.Limiter[int64]
}

// NewTestSender returns a sender, refusing an allow-list entry that is not an
// address (the error names it).
func NewTestSender(cfg TestSendConfig) (*TestSender, error) {
	if cfg.DB == nil {
		return nil, errors.New("testsend: a database is required")
	}
	if cfg.MaxRecipients <= 0 {
		cfg.MaxRecipients = TestSendMaxRecipients
	}
	if cfg.Rate <= 0 {
		cfg.Rate = TestSendRate
	}
	if cfg.Burst <= 0 {
		cfg.Burst = TestSendBurst
	}
	if cfg.SendTimeout <= 0 {
		cfg.SendTimeout = TestSendTimeout
	}
	s := &TestSender{cfg: cfg, allow: map[string]bool{}, users: keyedrate.New[int64](cfg.Rate, cfg.Burst, 0)}
	allow, err := ParseTestAllowList(cfg.AllowList)
	if err != nil {
		return nil, err
	}
	for _, a := range allow {
		s.allow[a] = true
	}
	return s, nil
}

// MaxRecipients is how many addresses one request may name.
func (s *TestSender) MaxRecipients() int { return s.cfg.MaxRecipients }

// TestSendParams is one test send.
type TestSendParams struct {
	CampaignID string
	// To are the reviewers' addresses.
	To []string
	// Ordinal is the target whose message is rendered (0: the first).
	Ordinal int
}

// TestDelivery is one reviewer's message and the provider's answer.
type TestDelivery struct {
	To      string           `json:"to"`
	Key     string           `json:"key"`
	Outcome provider.Outcome `json:"outcome"`
	Receipt string           `json:"receipt,omitempty"`
	Reason  string           `json:"reason,omitempty"`
}

// TestSendResult is what a test send did.
type TestSendResult struct {
	CampaignID string         `json:"campaign_id"`
	Version    int            `json:"version"`
	Ordinal    int            `json:"ordinal"`
	Target     string         `json:"target"`
	Subject    string         `json:"subject"`
	Provider   string         `json:"provider"`
	Deliveries []TestDelivery `json:"deliveries"`
}

// suppressed since recipients checked it is still not mailed. asked is
// the request's To as written, for the refusal's words.
func (s *TestSender) recordMessages(ctx context.Context, a auth.Actor, c Campaign, asked, to, keys []string) error {
	_, err := s.cfg.DB.Exec(ctx, `
		INSERT INTO test_send_message (key, campaign_id, address, actor_id)
		SELECT m.key, $1, m.address, $2 FROM unnest($3::text[], $4::text[]) AS m(key, address)`,
		c.ID, a.UserID, keys, to)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "OP008" {
		// Suppressed since recipients checked: say which, and why.
		if err := notSuppressed(ctx, s.cfg.DB, asked, to); err != nil {
			return err
		}
		return fmt.Errorf("%w: %s; nothing was sent", onceplan.ErrConflict, pgErr.Message)
	}
	return err
}

// allowNow takes one test send from the user's allowance.
func (s *TestSender) allowNow(userID int64) error {
	if d := s.users.Take(userID); d > 0 {
		wait := d.Truncate(time.Second) + time.Second
		return &TestSendRateLimitError{RetryAfter: wait, msg: fmt.Sprintf("%s: at most %d test sends in a row, then one every %s; try again in %s",
			ErrTestSendRateLimited, s.cfg.Burst, every(s.cfg.Rate), wait)}
	}
	return nil
}

// TestSendRateLimitError is ErrTestSendRateLimited with how long to wait.
type TestSendRateLimitError struct {
	RetryAfter time.Duration
	msg        string
}

func (e *TestSendRateLimitError) Error() string { return e.msg }

// Is makes errors.Is(err, ErrTestSendRateLimited) true.
func (e *TestSendRateLimitError) Is(target error) bool { return target == ErrTestSendRateLimited }

// ErrorCode makes a refused test send a [onceplan.CodeRateLimited].
func (e *TestSendRateLimitError) ErrorCode() onceplan.Code { return onceplan.CodeRateLimited }

func every(l rate.Limit) time.Duration {
	return (time.Duration(float64(time.Second) / float64(l))).Round(time.Second)
}

// Send renders the message of one target of the campaign's current
// version and sends it through the campaign's provider to each reviewer,
// "[Test] " before its subject. Refusals (the role, the campaign's state,
// a recipient, the rate) come before anything is sent or recorded.
func (s *TestSender) Send(ctx context.Context, a auth.Actor, p TestSendParams) (TestSendResult, error) {
	if err := auth.Authorize(a, auth.ActionTestSend); err != nil {
		return TestSendResult{}, err
	}
	to, err := s.recipients(ctx, p.To)
	if err != nil {
		return TestSendResult{}, err
	}
	c, err := GetCampaign(ctx, s.cfg.DB, p.CampaignID)
	if err != nil {
		return TestSendResult{}, err
	}
	if err := Allowed(a, c, auth.ActionTestSend); err != nil {
		return TestSendResult{}, err
	}
	d, err := GetDraft(ctx, s.cfg.DB, c.ID, c.Version)
	if err != nil {
		return TestSendResult{}, err
	}
	ordinal := p.Ordinal
	switch {
	case d.TargetCount == 0:
		return TestSendResult{}, fmt.Errorf("%w: the draft has no targets yet; import its list first", onceplan.ErrConflict)
	case ordinal == 0:
		ordinal = 1
	case ordinal < 1 || ordinal > d.TargetCount:
		return TestSendResult{}, &onceplan.FieldError{Field: "ordinal", Reason: fmt.Sprintf("must be a target of the draft, from 1 to %d, not %d", d.TargetCount, ordinal)}
	}
	prov, ok := s.cfg.Providers.Get(c.Provider)
	if !ok {
		return TestSendResult{}, fmt.Errorf("%w: the campaign's provider %q is not configured on this server", onceplan.ErrConflict, c.Provider)
	}
	// The message as the target would get it, but with the sample
	// unsubscribe link: a working one would unsubscribe the target, not
	// the reviewer who clicks it.
	link := ""
	if c.ListUnsubscribe {
		link = plan.SampleUnsubscribeURL
	}
	msg, err := plan.PreviewWithLink(ctx, s.cfg.DB, d.Content(), "", ordinal, link)
	if err != nil {
		return TestSendResult{}, err
	}
	target := msg.To
	keys := make([]string, len(to))
	for i, addr := range to {
		key, err := testKey(c, addr)
		if err != nil {
			return TestSendResult{}, err
		}
		keys[i] = key.String()
	}
	if err := s.allowNow(a.UserID); err != nil {
		return TestSendResult{}, err
	}
	if err := s.recordMessages(ctx, a, c, p.To, to, keys); err != nil {
		return TestSendResult{}, err
	}

	res := TestSendResult{CampaignID: c.ID, Version: c.Version, Ordinal: ordinal, Target: target,
		Subject: TestSubjectPrefix + msg.Subject, Provider: prov.Name()}
	raws := make([]string, 0, len(to))
	sendCtx, cancel := context.WithTimeout(ctx, s.cfg.SendTimeout)
	defer cancel()
	for i, addr := range to {
		dl, raw := s.deliver(sendCtx, prov, addr, keys[i], msg)
		res.Deliveries = append(res.Deliveries, dl)
		raws = append(raws, raw)
	}

	// The trail: who (the event's actor), to whom, which ordinal, and
	// each answer. Written after the sends, which cannot be undone: a
	// failure to record is reported, the messages are out.
	detail := struct {
		TestSendResult
		Raw []string `json:"raw"`
	}{res, raws}
	err = pgx.BeginFunc(context.WithoutCancel(ctx), s.cfg.DB, func(tx pgx.Tx) error {
		b, err := json.Marshal(detail)
		if err != nil {
			return err
		}
		_, err = appendEvent(ctx, tx, Event{CampaignID: c.ID, Action: string(auth.ActionTestSend),
			ActorID: a.UserID, ViaAgent: a.Agent, Version: c.Version, PlanHash: d.Hash(c),
			Reason: fmt.Sprintf("test send of target %d to %s", ordinal, strings.Join(to, ", ")), Detail: b})
		return err
	})
	if err != nil {
		return res, fmt.Errorf("the test messages were sent, but recording them in the campaign's trail failed: %w", err)
	}
	return res, nil
}

// deliver sends msg to addr under its key (recorded by recordMessages).
func (s *TestSender) deliver(ctx context.Context, prov provider.Provider, addr, key string, msg plan.Message) (TestDelivery, string) {
	dl := TestDelivery{To: addr, Key: key}
	m := msg
	m.To = addr
	m.Subject = TestSubjectPrefix + msg.Subject
	v, raw := provider.SendOne(ctx, prov, provider.Request{Key: key, Target: addr, Message: m})
	dl.Outcome, dl.Receipt, dl.Reason = v.Outcome, v.Receipt, v.Reason
	if raw == nil {
		return dl, ""
	}
	if len(raw) > rawKept {
		raw = raw[:rawKept]
	}
	// jsonb holds neither invalid UTF-8 nor NUL.
	return dl, strings.ReplaceAll(strings.ToValidUTF8(string(raw), "\uFFFD"), "\x00", "\uFFFD")
}

// testKey is a v1 key for one test message: its event is
// "test:<campaign>:<random>", which is no campaign's id, so the key is no
// target's (a target's event is its campaign's id).
func testKey(c Campaign, addr string) (ledger.Key, error) {
	var b [16]byte
	rand.Read(b[:]) // never fails (crypto/rand since Go 1.24)
	target, err := ledger.NewEmailTarget(addr)
	if err != nil {
		return "", err
	}
	tool := c.Tool
	if tool == "" {
		tool = "email.send"
	}
	return ledger.NewKey(ledger.KeyInput{Event: "test:" + c.ID + ":" + hex.EncodeToString(b[:]), Tool: tool, Target: target})
}

// TestMessage is one reviewer's message of a recorded test send: what the
// audit needs to recognise it in a provider's evidence (its key, and the
// provider's receipt when it answered one), and what it says of it.
type TestMessage struct {
	CampaignID   string
	CampaignName string
	Version      int
	Ordinal      int
	To           string
	Key          string
	Receipt      string
	At           time.Time
}

// TestMessages lists every message the trail records a test send made,
// of every campaign, oldest first: a test message is no target's effect,
// and a maildir or a provider log holds it beside the campaign's own.
func TestMessages(ctx context.Context, db onceplan.DB) ([]TestMessage, error) {
	rows, err := db.Query(ctx, `
		SELECT e.campaign_id::text, c.name, coalesce(e.version, 0), coalesce((e.detail->>'ordinal')::int, 0),
		       coalesce(d->>'to', ''), d->>'key', coalesce(d->>'receipt', ''), e.created_at
		FROM campaign_event e
		JOIN campaign c ON c.id = e.campaign_id
		CROSS JOIN LATERAL jsonb_array_elements(CASE WHEN jsonb_typeof(e.detail->'deliveries') = 'array'
		                                             THEN e.detail->'deliveries' ELSE '[]'::jsonb END) d
		WHERE e.action = 'test_send' AND coalesce(d->>'key', '') <> ''
		ORDER BY e.id`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (TestMessage, error) {
		var m TestMessage
		err := r.Scan(&m.CampaignID, &m.CampaignName, &m.Version, &m.Ordinal, &m.To, &m.Key, &m.Receipt, &m.At)
		return m, err
	})
}
