package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/onceplan/onceplan/internal/provider"
	"github.com/onceplan/onceplan/ledger"
	"github.com/onceplan/onceplan/plan"
)

// The headers of a webhook request.
const (
	// HeaderEvent names the event (submitted, approved, …).
	HeaderEvent = "X-Onceplan-Event"
	// HeaderNotification is the notification's id: the same on every try
	// of one notification, so a receiver can drop a repeat.
	HeaderNotification = "X-Onceplan-Notification"
	// HeaderTimestamp is when the request was signed, in Unix seconds
	// (signed webhooks only).
	HeaderTimestamp = "X-Onceplan-Timestamp"
	// HeaderSignature is Sign's value (signed webhooks only).
	HeaderSignature = "X-Onceplan-Signature"
)

// signatureVersion prefixes a signature, so that another scheme can come
// beside it.
const signatureVersion = "v1="

// Sign is the X-Onceplan-Signature of a webhook body sent at timestamp
// (Unix seconds) with secret: "v1=" and the lower-case hex of
// HMAC-SHA256(secret, timestamp + "." + body). A receiver computes the
// same over the raw body it received and compares in constant time
// (Verify), and refuses an old timestamp, so a captured request cannot be
// replayed later.
func Sign(secret []byte, timestamp int64, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(strconv.FormatInt(timestamp, 10)))
	m.Write([]byte("."))
	m.Write(body)
	return signatureVersion + hex.EncodeToString(m.Sum(nil))
}

// ErrBadSignature: a webhook request's signature does not check.
var ErrBadSignature = errors.New("the webhook's signature does not check")

// Verify checks a received webhook request: its timestamp header is
// within tolerance of now, and its signature header is Sign's over body.
func Verify(secret []byte, timestamp, signature string, body []byte, now time.Time, tolerance time.Duration) error {
	ts, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: %s is not a Unix time", ErrBadSignature, HeaderTimestamp)
	}
	if age := now.Sub(time.Unix(ts, 0)); age > tolerance || age < -tolerance {
		return fmt.Errorf("%w: signed %s ago, more than %s", ErrBadSignature, age.Round(time.Second), tolerance)
	}
	if !hmac.Equal([]byte(signature), []byte(Sign(secret, ts, body))) {
		return ErrBadSignature
	}
	return nil
}

// outcome is what one try came to.
type outcome int

const (
	delivered outcome = iota
	temporary         // worth another try
	permanent         // no retry can change it
)

// answer is one try's result as recorded.
type answer struct {
	outcome    outcome
	httpStatus int
	text       string // what the notifier answered
	err        string // what kept it from answering, or why it is refused
}

// answerKept bounds the notifier's answer and the error as recorded.
const answerKept = 2000

// clean makes s storable as text: valid UTF-8, no NUL, at most
// answerKept bytes.
func clean(s string) string {
	return clip(strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD"), answerKept)
}

// post sends a webhook notification's body.
func (n *Notifier) post(ctx context.Context, id int64, event Event, body []byte, now time.Time) answer {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.url, bytes.NewReader(body))
	if err != nil {
		return answer{outcome: permanent, err: "the request could not be made: " + err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "onceplan")
	req.Header.Set(HeaderEvent, string(event))
	req.Header.Set(HeaderNotification, strconv.FormatInt(id, 10))
	if n.Signed() {
		ts := now.Unix()
		req.Header.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
		req.Header.Set(HeaderSignature, Sign(n.secret, ts, body))
	}
	resp, err := n.client.Do(req)
	if err != nil {
		var ue interface{ Timeout() bool }
		if errors.As(err, &ue) && ue.Timeout() {
			return answer{outcome: temporary, err: fmt.Sprintf("no answer within %s", n.timeout)}
		}
		return answer{outcome: temporary, err: "not delivered: " + unwrapURL(err)}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, answerKept))
	a := answer{httpStatus: resp.StatusCode, text: string(b)}
	switch s := resp.StatusCode; {
	case s >= 200 && s < 300:
		a.outcome = delivered
	case s == http.StatusRequestTimeout || s == http.StatusTooManyRequests || s >= 500:
		a.outcome, a.err = temporary, fmt.Sprintf("answered %d %s", s, http.StatusText(s))
	case s >= 300 && s < 400:
		a.outcome, a.err = permanent, fmt.Sprintf("answered %d %s, a redirect (not followed: give the final URL)", s, http.StatusText(s))
	default:
		a.outcome, a.err = permanent, fmt.Sprintf("answered %d %s: the receiver refuses it", s, http.StatusText(s))
	}
	return a
}

// unwrapURL is a transport error without the *url.Error's repeat of the
// URL (whose path may hold the webhook's secret).
func unwrapURL(err error) string {
	var ue interface{ Unwrap() error }
	if errors.As(err, &ue) {
		if inner := ue.Unwrap(); inner != nil {
			return inner.Error()
		}
	}
	return err.Error()
}

// mail sends an email notification to one address through the notifier's
// provider. The key (so the Message-ID, and a deduplicating provider's
// idempotency key) is the notification's own, the same on every try.
func (n *Notifier) mail(ctx context.Context, id int64, to, subject, text string) answer {
	target, key, err := MailKey(id, to)
	if err != nil {
		return answer{outcome: permanent, err: err.Error()}
	}
	v, raw := provider.SendOne(ctx, n.provider, provider.Request{Key: key.String(), Target: target.Value,
		Message: plan.Message{From: n.from, To: target.Value, Subject: subject, Text: text}})
	a := answer{text: string(raw)}
	switch {
	case v.Outcome == provider.OutcomeDone:
		a.outcome = delivered
	case v.Outcome == provider.OutcomeStranded, v.Outcome == provider.OutcomeFailed && !v.Retryable:
		a.outcome, a.err = permanent, fmt.Sprintf("provider %s: %s: %s", n.provider.Name(), v.Outcome, v.Reason)
	default:
		// A temporary failure, a quota, or an answer lost on the way: an
		// email repeated is better than a person never told.
		a.outcome, a.err = temporary, fmt.Sprintf("provider %s: %s: %s", n.provider.Name(), v.Outcome, v.Reason)
	}
	return a
}

// MailKey is the key an email notification is sent under (its Message-ID
// derives from it): the notification's own, the same on every try.
// "notify:<id>" is no campaign's id, so the key is no target's (a
// target's event is its campaign's id).
func MailKey(id int64, to string) (ledger.Target, ledger.Key, error) {
	target, err := ledger.NewEmailTarget(to)
	if err != nil {
		return target, "", err
	}
	key, err := ledger.NewKey(ledger.KeyInput{Event: "notify:" + strconv.FormatInt(id, 10), Tool: "email.send", Target: target})
	return target, key, err
}

// Result is what one delivery try came to.
type Result int

// Results of Deliver.
const (
	// Delivered: the notifier accepted it (or an earlier try did).
	Delivered Result = iota
	// Retry: it failed this time; try again later.
	Retry
	// GaveUp: it failed for good (an answer no retry changes, or the
	// last try); the attempt says so.
	GaveUp
)

// Deliver tries once to deliver notification id, as the attempt-th try
// (final: the last one allowed), and records the try with the notifier's
// answer. A notification delivered before (a job run twice) is not sent
// again. The error says why it was not delivered.
func (s *Service) Deliver(ctx context.Context, id int64, attempt int, final bool) (Result, error) {
	var (
		event                                    Event
		notifier, kind, recipient, subject, body string
		alreadyDelivered                         bool
	)
	err := s.cfg.DB.QueryRow(ctx, `
		SELECT event, notifier, kind, recipient, subject, body,
		       EXISTS (SELECT 1 FROM notification_attempt a WHERE a.notification_id = n.id AND a.status = 'delivered')
		FROM notification n WHERE id = $1`, id).Scan(&event, &notifier, &kind, &recipient, &subject, &body, &alreadyDelivered)
	if errors.Is(err, pgx.ErrNoRows) {
		return GaveUp, fmt.Errorf("notification %d does not exist", id)
	}
	if err != nil {
		return Retry, err
	}
	if alreadyDelivered {
		return Delivered, nil
	}
	start := time.Now()
	var a answer
	n, ok := s.cfg.Notifiers.Get(notifier)
	switch {
	case !ok:
		a = answer{outcome: temporary, err: fmt.Sprintf("notifier %q is not configured on this process (%s): give every serve and worker the same --notify", notifier, s.cfg.Owner)}
	case n.kind != kind:
		a = answer{outcome: temporary, err: fmt.Sprintf("notifier %q is a %s notifier on this process (%s), but this notification was written for a %s one", notifier, n.kind, s.cfg.Owner, kind)}
	default:
		callCtx, cancel := context.WithTimeout(ctx, n.Timeout())
		if kind == KindWebhook {
			a = n.post(callCtx, id, event, []byte(body), time.Now())
		} else {
			a = n.mail(callCtx, id, recipient, subject, body)
		}
		cancel()
	}
	status, res := StateDelivered, Delivered
	switch {
	case a.outcome == delivered:
	case a.outcome == permanent || final:
		status, res = StateFailed, GaveUp
	default:
		status, res = StateRetrying, Retry
	}
	var httpStatus *int
	if a.httpStatus != 0 {
		httpStatus = &a.httpStatus
	}
	// Recorded even when ctx ended during the call: what the notifier
	// did is kept.
	_, err = s.cfg.DB.Exec(context.WithoutCancel(ctx), `
		INSERT INTO notification_attempt (notification_id, attempt, status, http_status, answer, error, owner, duration_ms)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
		ON CONFLICT (notification_id) WHERE status = 'delivered' DO NOTHING`,
		id, attempt, status, httpStatus, clean(a.text), clean(a.err), s.cfg.Owner, time.Since(start).Milliseconds())
	if err != nil {
		return Retry, fmt.Errorf("recording the try of notification %d: %w", id, err)
	}
	if res == Delivered {
		return res, nil
	}
	return res, fmt.Errorf("notification %d through %s: %s", id, notifier, a.err)
}
