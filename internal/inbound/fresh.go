package inbound

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/onceplan/onceplan/internal/onceplan"
)

// How old a signature may be when it arrives. A signature covers a time
// (the provider's clock when it signed), so a captured request stops
// working once that time is past its kind's window; within the window a
// replay changes nothing, because each kind's signature is bound to the
// content it came with (SNS, SendGrid and generic sign the content;
// Mailgun's token is taken once, bound to the content's digest, in
// inbound_token), and the same event again is recorded once.
//
// The window is each provider's retry horizon where a retry may carry
// the original signature and replaying it is harmless, and short where a
// captured signature is the danger:
//
//   - SNS (SES): 2 hours. SNS signs its Timestamp once, when the message
//     is published, and every retry of an HTTP/S delivery carries it
//     unchanged; AWS caps an HTTP/S delivery policy's retries at 3,600
//     seconds in all, so 2 hours takes every retry, with room for a
//     delayed first attempt and the clocks' difference. The signature
//     covers the whole message, so a replay is the same message.
//   - SendGrid: 25 hours. SendGrid retries an Event Webhook post for up to
//     24 hours after the event and does not say whether a retry is signed
//     anew; its ECDSA signature covers the body, so a replay is the same
//     events, recorded once.
//   - Mailgun: 15 minutes. Its signature covers only the timestamp and a
//     token: a webhook captured where we never saw its token (a request
//     bin, a staging server given the same account-wide signing key)
//     could be put on a forged event while fresh, so fresh is kept short.
//     Mailgun retries for 8 hours (5, 10, 15 minutes, 1, 2, 4 hours) and
//     does not say whether a retry is signed anew; a retry of an event
//     already recorded is still answered 2xx (Accept), but an event whose
//     every delivery failed for longer than 15 minutes may be refused.
//   - generic: 15 minutes. The sender signs each attempt anew
//     (docs/guide/mail-real-people.md, "Bounces and complaints"), as
//     Onceplan's own notifications do.
//
// A signed time further ahead than MaxAhead is refused too: a clock that
// far wrong would make a signature fresh for longer than its window.
const (
	SNSMaxAge      = 2 * time.Hour
	SendGridMaxAge = 25 * time.Hour
	MailgunMaxAge  = 15 * time.Minute
	GenericMaxAge  = 15 * time.Minute
	MaxAhead       = 5 * time.Minute
)

// TokenRetention is how long a taken Mailgun token is kept: longer than
// its signature can be fresh (MailgunMaxAge, MaxAhead), with a margin for
// the clocks of several server processes, so that a token's row is gone
// only once the signature it came with is refused as stale anyway.
const TokenRetention = time.Hour

// pruneBatch bounds the old tokens one write deletes: enough to keep up
// (each write adds one), few enough that no request pays for a backlog.
const pruneBatch = 100

// MaxAge is the freshness window of a kind's signatures (0: the kind
// signs no time, Postmark).
func MaxAge(k Kind) time.Duration {
	switch k {
	case SES:
		return SNSMaxAge
	case SendGrid:
		return SendGridMaxAge
	case Mailgun:
		return MailgunMaxAge
	case Generic:
		return GenericMaxAge
	}
	return 0
}

// Signed is what authentication established about a request, for Accept:
// when the provider signed it and, for Mailgun, the one-time token its
// signature rests on.
type Signed struct {
	Kind Kind
	// SignedAt is the time the signature covers (zero when the kind signs
	// no time: Postmark).
	SignedAt time.Time
	// Token is Mailgun's one-time token ("" for other kinds), and Digest
	// the hex SHA-256 of the content it came with (Mailgun's whole body,
	// re-encoded canonically).
	Token, Digest string
}

// Fresh returns nil when the signature may be taken at now, or an error
// wrapping onceplan.ErrForbidden saying how far outside its window it is.
func (sig Signed) Fresh(now time.Time) error {
	if sig.SignedAt.IsZero() {
		return nil
	}
	age := now.Sub(sig.SignedAt)
	if window := MaxAge(sig.Kind); age > window {
		return fmt.Errorf("%w: the signature was made %s ago, and this endpoint takes %s signatures for %s: a replay, or a server clock that is wrong",
			onceplan.ErrForbidden, age.Round(time.Second), sig.Kind, window)
	}
	if -age > MaxAhead {
		return fmt.Errorf("%w: the signature is dated %s ahead of this server's clock, more than the %s allowed: check both clocks",
			onceplan.ErrForbidden, (-age).Round(time.Second), MaxAhead)
	}
	return nil
}

// Accept records an authenticated request's events (Record's rules) in
// one transaction, if its signature may be taken at now:
//
//   - fresh: a Mailgun token is taken, bound to its content's digest —
//     refused (onceplan.ErrForbidden) when it was taken already with other
//     content, a signature put on another event — and the events are
//     recorded, each once however often it comes;
//   - stale, or dated too far ahead: refused (onceplan.ErrForbidden), unless it is
//     provably a delivery already taken — its token is taken with the same
//     content, or every event it carries is stored with the same raw
//     bytes —, a provider's late retry: then nothing changes and its
//     events count as duplicates.
func Accept(ctx context.Context, db Beginner, sig Signed, events []Event, now time.Time) (Result, error) {
	var res Result
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		res = Result{}
		if stale := sig.Fresh(now); stale != nil {
			taken, err := alreadyTaken(ctx, tx, sig, events)
			if err != nil {
				return err
			}
			if !taken {
				return stale
			}
			res.Duplicate = len(events)
			return nil
		}
		if sig.Token != "" {
			if err := takeToken(ctx, tx, sig, now); err != nil {
				return err
			}
		}
		return recordAll(ctx, tx, events, &res)
	})
	return res, err
}

// takeToken binds sig's token to its digest, or finds it bound to the same
// (a re-delivery), and deletes a few tokens past their retention.
func takeToken(ctx context.Context, tx pgx.Tx, sig Signed, now time.Time) error {
	tag, err := tx.Exec(ctx, `
		INSERT INTO inbound_token (kind, token, digest, signed_at) VALUES ($1, $2, $3, $4)
		ON CONFLICT (kind, token) DO NOTHING`, sig.Kind, sig.Token, sig.Digest, sig.SignedAt)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		var digest string
		err := tx.QueryRow(ctx, `SELECT digest FROM inbound_token WHERE kind = $1 AND token = $2`, sig.Kind, sig.Token).Scan(&digest)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if digest != sig.Digest {
			return fmt.Errorf("%w: this signature's token was already used with other content: a signature is good for the event it came with only", onceplan.ErrForbidden)
		}
	}
	_, err = tx.Exec(ctx, `
		DELETE FROM inbound_token WHERE (kind, token) IN (
			SELECT kind, token FROM inbound_token WHERE signed_at < $1 ORDER BY signed_at LIMIT $2)`,
		now.Add(-TokenRetention), pruneBatch)
	return err
}

// alreadyTaken reports whether a request is one whose content was
// already taken: its token bound to the same digest, or else each of its
// events stored with the same raw bytes (a request with no event of ours
// proves nothing that way).
func alreadyTaken(ctx context.Context, tx pgx.Tx, sig Signed, events []Event) (bool, error) {
	if sig.Token != "" {
		var digest string
		err := tx.QueryRow(ctx, `SELECT digest FROM inbound_token WHERE kind = $1 AND token = $2`, sig.Kind, sig.Token).Scan(&digest)
		if err == nil && digest == sig.Digest {
			return true, nil
		}
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return false, err
		}
	}
	if len(events) == 0 {
		return false, nil
	}
	ids := make([]string, len(events))
	for i, e := range events {
		ids[i] = e.ProviderEventID
	}
	rows, err := tx.Query(ctx, `SELECT provider_event_id, raw FROM inbound_event WHERE kind = $1 AND provider_event_id = ANY ($2::text[])`,
		sig.Kind, ids)
	if err != nil {
		return false, err
	}
	stored := map[string][]byte{}
	var (
		id  string
		raw []byte
	)
	if _, err := pgx.ForEachRow(rows, []any{&id, &raw}, func() error {
		stored[id] = bytes.Clone(raw)
		return nil
	}); err != nil {
		return false, err
	}
	for _, e := range events {
		if got, ok := stored[e.ProviderEventID]; !ok || !bytes.Equal(got, e.Raw) {
			return false, nil
		}
	}
	return true, nil
}

// canonicalDigest is the hex SHA-256 of a JSON text re-encoded with its
// object keys sorted and no space (numbers as written): the same content
// gives the same digest however a provider spaces or orders it.
func canonicalDigest(body []byte) (string, error) {
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return "", err
	}
	if _, err := d.Token(); !errors.Is(err, io.EOF) {
		return "", errors.New("data after the JSON value")
	}
	canon, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(canon)
	return hex.EncodeToString(sum[:]), nil
}
