// Package unsubscribe owns the one-click unsubscribe links (RFC 8058) that
// every campaign message carries unless its campaign is transactional:
// the token in them, the secret it is signed with, and what following one
// does (a suppression of the address, package suppression).
//
// A token is base64url (no padding) of
//
//	version (1 byte, 1) | campaign id (16 bytes) | address | MAC (16 bytes)
//
// where MAC is HMAC-SHA256, truncated to 128 bits, keyed with the
// database's secret (table unsubscribe_secret), over "onceplan-unsubscribe-v1",
// a NUL, the campaign id and the normalised address. It names the address
// and the campaign in the clear (the link's owner knows both) and nothing
// else: it is not the effect key and does not contain it, and without the
// secret nobody can make one for another address or campaign. A token that
// does not check changes nothing; a token that checks unsubscribes its
// address whether or not it is known or already suppressed, and the answer
// is the same either way, so a link says nothing about which addresses
// exist.
//
// The secret is made on first use with crypto/rand by whichever process
// asks first (insert-once: INSERT ... ON CONFLICT DO NOTHING, then read)
// and never changes: every link already mailed stays valid.
package suppression

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/onceplan/onceplan/internal/onceplan"
)

// DefaultPublicURL is where a worker process's links point when it is not
// told (--public-url): serve's default address.
const DefaultPublicURL = "http://127.0.0.1:8080"

// PathPrefix is the route of the links, under the public URL.
const PathPrefix = "/u/"

// Errors of a token that does not check. Neither says anything about the
// address it names.
var (
	// ErrMalformedLinkLink: not a token at all (bad encoding, wrong length or
	// version).
	ErrMalformedLink = errors.New("this unsubscribe link is malformed: nothing was changed (copy the whole link from the message)")
	// ErrUnknownLinkLink: shaped like a token, but not one Onceplan made (altered,
	// or from another installation).
	ErrUnknownLink = errors.New("this unsubscribe link is not valid: nothing was changed")
)

const (
	tokenVersion = 1
	macLen       = 16
	uuidLen      = 16
	macDomain    = "onceplan-unsubscribe-v1\x00"
	secretLen    = 32
)

// MaxTokenLength bounds a token: an address of ledger.MaxEmailLength
// octets, encoded.
const MaxTokenLength = 512

// ParsePublicURL checks a --public-url value: an absolute http or https URL
// with a host, without query or fragment. It returns it without a trailing
// slash, ready to prefix PathPrefix.
func ParsePublicURL(s string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(s))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "" || u.User != nil {
		return "", fmt.Errorf("--public-url %q is not an absolute http:// or https:// URL (like https://onceplan.example.com): unsubscribe links in messages are built from it", s)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.ForceQuery {
		return "", fmt.Errorf("--public-url %q has a query or a fragment; give the base URL only (like https://onceplan.example.com)", s)
	}
	return strings.TrimRight(u.Scheme+"://"+u.Host+u.EscapedPath(), "/"), nil
}

// PublicURLFromListen is the default public URL of a server listening on
// addr: http://addr, with a loopback host when addr names none.
func PublicURLFromListen(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "http://" + addr
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// Subscription is what a token names.
type Subscription struct {
	CampaignID string
	Address    string
}

// Links makes and checks the links of one installation: its public URL and
// the database that keeps the secret. Safe for concurrent use.
type Links struct {
	base string
	db   onceplan.DB

	mu  sync.Mutex
	key []byte
}

// NewLinks returns the links under publicURL (ParsePublicURL's output; ""
// for DefaultPublicURL), signed with db's secret, which is read (or made)
// on first use.
func NewLinks(db onceplan.DB, publicURL string) *Links {
	if publicURL == "" {
		publicURL = DefaultPublicURL
	}
	return &Links{base: strings.TrimRight(publicURL, "/"), db: db}
}

// SampleURL is a link for previews: shaped like a real one, valid for
// nothing.
func (l *Links) SampleURL() string { return l.base + PathPrefix + "sample" }

// URL is the unsubscribe link of address in a message of campaign
// campaignID. The address must be normalised (a target's is).
func (l *Links) URL(ctx context.Context, campaignID, address string) (string, error) {
	t, err := l.Token(ctx, campaignID, address)
	if err != nil {
		return "", err
	}
	return l.base + PathPrefix + t, nil
}

// Token is the token of address in campaign campaignID's messages.
func (l *Links) Token(ctx context.Context, campaignID, address string) (string, error) {
	id, err := parseUUID(campaignID)
	if err != nil {
		return "", err
	}
	if address == "" {
		return "", errors.New("unsubscribe link: no address")
	}
	key, err := l.secret(ctx)
	if err != nil {
		return "", err
	}
	b := make([]byte, 0, 1+uuidLen+len(address)+macLen)
	b = append(b, tokenVersion)
	b = append(b, id...)
	b = append(b, address...)
	b = append(b, mac(key, id, address)...)
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// Check returns what token names, or ErrMalformedLink or ErrUnknownLink.
func (l *Links) Check(ctx context.Context, token string) (Subscription, error) {
	if len(token) > MaxTokenLength {
		return Subscription{}, ErrMalformedLink
	}
	b, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil || len(b) < 1+uuidLen+1+macLen || b[0] != tokenVersion {
		return Subscription{}, ErrMalformedLink
	}
	id := b[1 : 1+uuidLen]
	address := string(b[1+uuidLen : len(b)-macLen])
	key, err := l.secret(ctx)
	if err != nil {
		return Subscription{}, err
	}
	if !hmac.Equal(b[len(b)-macLen:], mac(key, id, address)) {
		return Subscription{}, ErrUnknownLink
	}
	return Subscription{CampaignID: formatUUID(id), Address: address}, nil
}

// Unsubscribe follows a link: the address token names is suppressed
// (reason unsubscribed, source the campaign's link). A second time changes
// nothing and is no error. A token that does not check changes nothing
// (ErrMalformedLink, ErrUnknownLink).
func (l *Links) Unsubscribe(ctx context.Context, token string) (Subscription, error) {
	sub, err := l.Check(ctx, token)
	if err != nil {
		return sub, err
	}
	_, _, err = Add(ctx, l.db, AddParams{
		Address: sub.Address, Reason: Unsubscribed, Source: FromUnsubscribe, CampaignID: sub.CampaignID,
	})
	return sub, err
}

func mac(key, campaignID []byte, address string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(macDomain))
	h.Write(campaignID)
	h.Write([]byte(address))
	return h.Sum(nil)[:macLen]
}

// secret reads the installation's secret, making it first if there is
// none. Two processes that make one at once both end with the one that
// was inserted first.
func (l *Links) secret(ctx context.Context) ([]byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.key != nil {
		return l.key, nil
	}
	var key []byte
	err := l.db.QueryRow(ctx, `SELECT secret FROM unsubscribe_secret WHERE id = 1`).Scan(&key)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("reading the unsubscribe secret: %w", err)
	}
	if err != nil {
		fresh := make([]byte, secretLen)
		if _, rerr := rand.Read(fresh); rerr != nil {
			return nil, rerr
		}
		if _, err := l.db.Exec(ctx, `INSERT INTO unsubscribe_secret (id, secret) VALUES (1, $1) ON CONFLICT (id) DO NOTHING`, fresh); err != nil {
			return nil, fmt.Errorf("making the unsubscribe secret: %w", err)
		}
		if err := l.db.QueryRow(ctx, `SELECT secret FROM unsubscribe_secret WHERE id = 1`).Scan(&key); err != nil {
			return nil, fmt.Errorf("reading the unsubscribe secret: %w", err)
		}
	}
	if len(key) != secretLen {
		return nil, fmt.Errorf("the unsubscribe secret is %d bytes, not %d", len(key), secretLen)
	}
	l.key = key
	return key, nil
}

func parseUUID(s string) ([]byte, error) {
	h := strings.ReplaceAll(s, "-", "")
	b, err := hex.DecodeString(h)
	if err != nil || len(b) != uuidLen || len(s) != 36 {
		return nil, fmt.Errorf("unsubscribe link: %q is not a campaign id", s)
	}
	return b, nil
}

func formatUUID(b []byte) string {
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}
