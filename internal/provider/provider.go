package provider

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/plan"
)

// Request is one effect to perform.
type Request struct {
	Key     string       // ledger key, "v1:<64 hex>"
	Epoch   int          // the key's epoch; part of the effect's identity
	Target  string       // normalised address or subject id
	Message plan.Message // the rendered message (From, To, Subject, Text, HTML)
}

// EffectID returns the identity one effect has in the outside world: the key,
// ":" and the epoch ("v1:ab…:0"). The epoch is part of it so that a
// deliberate second effect (a bumped epoch) is not deduplicated away by a
// provider that remembers the first.
func EffectID(key string, epoch int) string {
	return key + ":" + strconv.Itoa(epoch)
}

// effectHash is the hex SHA-256 of the effect id, the root of every name
// derived from an effect (Message-ID, maildir file name).
func effectHash(key string, epoch int) string {
	sum := sha256.Sum256([]byte(EffectID(key, epoch)))
	return hex.EncodeToString(sum[:])
}

// MessageID returns the deterministic RFC 5322 Message-ID of an effect:
// "<" + the first 32 hex digits of SHA-256(EffectID) + "@onceplan>". A
// repeat of the same effect carries the same Message-ID, so a mailbox or a
// log can tell a duplicate from a second message.
func MessageID(key string, epoch int) string {
	return "<" + messageIDValue(key, epoch) + ">"
}

func messageIDValue(key string, epoch int) string {
	return effectHash(key, epoch)[:32] + "@onceplan"
}

// Outcome is what a raw provider answer means for the ledger.
type Outcome string

// Outcomes of [Provider.Classify].
const (
	// OutcomeDone: accepted; Verdict.Receipt is set.
	OutcomeDone Outcome = "done"
	// OutcomeFailed: a definite rejection, nothing was created. The effect
	// may be tried again when Verdict.Retryable says the cause is temporary.
	OutcomeFailed Outcome = "failed"
	// OutcomeUnknown: the effect may or may not have landed (a timeout or a
	// reset after the request left, an HTTP 5xx).
	OutcomeUnknown Outcome = "unknown"
	// OutcomeStranded: the effect exists at the provider but can never
	// complete.
	OutcomeStranded Outcome = "stranded"
	// OutcomeQuota: rate limited (HTTP 429, SMTP 421/451/452); nothing was
	// created; Verdict.RetryAfter says how long the provider should rest
	// (0: the provider named no wait, see Verdict.RetryAfter).
	OutcomeQuota Outcome = "quota"
	// OutcomeRetryLater: the provider is still working on this effect (HTTP
	// 409); ask again after Verdict.RetryAfter. Nothing to settle yet.
	OutcomeRetryLater Outcome = "retry_later"
)

// Default waits when the provider does not name one.
const (
	DefaultQuotaRetryAfter = 60 * time.Second
	DefaultRetryLaterAfter = 5 * time.Second
)

// Verdict is the interpretation of one raw answer.
type Verdict struct {
	Outcome Outcome
	// Receipt is the provider's id for the effect (done, stranded).
	Receipt string
	// Reason is one sentence for failed, unknown, stranded and quota.
	Reason string
	// Retryable marks a failed verdict whose cause is temporary (SMTP 4xx
	// other than quota, a connection that failed before anything was sent,
	// HTTP 408): the executor may try again, with backoff, up to a bound.
	Retryable bool
	// NotSent marks a failed verdict whose request never reached the
	// provider: nothing of it left this process (a DNS failure, a refused
	// connection, a TLS failure before the request was written; for SMTP,
	// the connection failed before MAIL FROM). The ledger records it, so
	// that "never reached the provider" is said only of such a target
	// (docs/ARCHITECTURE.md, "Failures: final or not").
	NotSent bool
	// RetryAfter is how long to wait, for quota and retry_later. A quota
	// verdict with 0 says the provider named no wait (Postmark's 429
	// carries no Retry-After): the queue's pauser then chooses, backing
	// off from a short pause while quota answers keep coming (package
	// jobs) instead of resting a flat DefaultQuotaRetryAfter.
	RetryAfter time.Duration
	// Unmatched marks an unknown verdict on a batch call's answer that
	// cannot be matched to the call's effects (more or fewer results than
	// effects, one position twice): the service answered the call, so
	// sending the call again cannot tell what became of each effect — a
	// repeat under its key is answered alike, and without a key it would
	// be a second call. Recovery never sends such a call again; a person
	// reads the recorded answer.
	Unmatched bool
}

// Capabilities say how a provider lets recovery settle an attempt whose
// worker died during the call.
type Capabilities struct {
	// Dedupe: a repeat Send of the same EffectID is recognised by the
	// provider, which answers as if done and creates nothing new.
	Dedupe bool
	// Probe: Probe tells whether the effect exists.
	Probe bool
	// SettleWindow is how long after a send a probe's "not found" may still
	// be an effect in flight (0: not found is final at once).
	SettleWindow time.Duration
	// DedupeWindow is how long the provider honours the effect id as a
	// deduplication key, from the first call with it (Resend: 24 h); 0:
	// for ever. Past it a repeat would be a second effect, so recovery
	// never sends again once it has closed (CanResend).
	DedupeWindow time.Duration
	// ProbeRetention is how long the provider can still be asked about an
	// effect, from the first call (Postmark keeps outbound messages 45
	// days); 0: for ever. Past it "not found" proves nothing, so recovery
	// no longer probes (CanProbe).
	ProbeRetention time.Duration
}

// windowMargin is kept free at the end of a dedupe window or a probe's
// retention: a recovery that starts this close to the end might reach the
// provider after it, so it counts as closed.
const windowMargin = time.Minute

// CanResend reports whether recovery may send an effect again with its
// effect id, first sent at first, at time now: the provider deduplicates,
// and its window, measured from the first call, is still open.
func (c Capabilities) CanResend(first, now time.Time) bool {
	return c.Dedupe && open(c.DedupeWindow, first, now)
}

// CanProbe reports whether recovery may ask the provider about an effect
// first sent at first, at time now: it can be asked, and the effect is
// still within its retention.
func (c Capabilities) CanProbe(first, now time.Time) bool {
	return c.Probe && open(c.ProbeRetention, first, now)
}

// open reports whether a window of length w (0: for ever) from first is
// open at now, with windowMargin kept free at its end (or a tenth of a
// window shorter than ten margins, so a short window in a test behaves
// alike).
func open(w time.Duration, first, now time.Time) bool {
	if w <= 0 {
		return true
	}
	margin := min(windowMargin, w/10)
	return now.Before(first.Add(w - margin))
}

// ProbeResult is the answer of [Provider.Probe].
type ProbeResult struct {
	Found bool
	// Matches is how many messages the provider holds under the effect
	// id, for a probe that can count them (Postmark's search, Mailjet's
	// message list, a maildir's copies). More than one is a duplicate at
	// the provider: evidence the audit reports, even though the effect
	// does exist. 0 when not found, or when found by a probe that cannot
	// count; read it through [ProbeResult.Count].
	Matches int
	Raw     []byte // the provider's answer as received
	Receipt string // the provider's id for the effect (the newest), when found
}

// Count is how many times the provider holds the effect: Matches, and at
// least one when found.
func (r ProbeResult) Count() int {
	if !r.Found {
		return 0
	}
	return max(r.Matches, 1)
}

// ErrNoProbe is returned by Probe on a provider that cannot be asked.
var ErrNoProbe = errors.New("provider cannot be probed")

// Provider is one configured outside system that performs effects.
type Provider interface {
	// Name is the configured name, e.g. "outbox".
	Name() string
	// Kind is "maildir", "smtp", "http" or "postmark" (or another kind
	// added beside them, e.g. "resend").
	Kind() string
	// String is NAME=URL with any password redacted.
	String() string
	Capabilities() Capabilities
	// Acquire waits for the rate limit and a concurrency slot; release frees
	// the slot (calling it more than once is harmless). It returns ctx's
	// error if ctx ends first.
	Acquire(ctx context.Context) (release func(), err error)
	// Renew keeps the slot of an Acquire (before its release) for one more
	// call when the rate limit allows one now, without waiting; false:
	// release it and Acquire again.
	Renew() bool
	// Send performs the effect and returns the raw answer exactly as
	// received, with a transport error encoded in it, including whether the
	// request had started to leave. It interprets nothing beyond what is
	// needed to capture the answer and never panics. Its error is only for
	// "could not even try" (ctx already done): then nothing was sent.
	Send(ctx context.Context, r Request) (raw []byte, err error)
	// Classify interprets a raw answer of Send. It is pure and
	// deterministic, and never panics on any input.
	Classify(raw []byte) Verdict
	// Probe asks whether the effect exists (only when Capabilities().Probe;
	// otherwise it returns ErrNoProbe).
	Probe(ctx context.Context, key string, epoch int) (ProbeResult, error)
	// Close frees connections. The provider is not used afterwards.
	Close() error
}

// Registry holds the configured providers by name.
type Registry struct {
	byName map[string]Provider
	names  []string
}

// NewRegistry returns a registry of providers, refusing two with one name.
func NewRegistry(providers ...Provider) (*Registry, error) {
	r := &Registry{byName: make(map[string]Provider, len(providers))}
	for _, p := range providers {
		if p == nil {
			return nil, errors.New("provider registry: a provider is nil")
		}
		if _, dup := r.byName[p.Name()]; dup {
			return nil, fmt.Errorf("provider %q is configured twice", p.Name())
		}
		r.byName[p.Name()] = p
		r.names = append(r.names, p.Name())
	}
	slices.Sort(r.names)
	return r, nil
}

// Get returns the provider called name.
func (r *Registry) Get(name string) (Provider, bool) {
	if r == nil {
		return nil, false
	}
	p, ok := r.byName[name]
	return p, ok
}

// Names returns the providers' names, sorted.
func (r *Registry) Names() []string {
	if r == nil {
		return nil
	}
	return slices.Clone(r.names)
}

// Close closes every provider and returns their errors joined.
func (r *Registry) Close() error {
	if r == nil {
		return nil
	}
	var errs []error
	for _, n := range r.names {
		if err := r.byName[n].Close(); err != nil {
			errs = append(errs, fmt.Errorf("closing provider %q: %w", n, err))
		}
	}
	return errors.Join(errs...)
}

// paced is a provider whose rate limit can be paced through the
// database (every kind's, through its limiter).
type paced interface {
	paceThrough(db onceplan.DB, name string)
}

// PaceThrough makes every provider whose rate is its service account's
// (rate_scope=account: resend's and postmark's by default) take its turns
// from one schedule in db, shared by every process that sends through a
// provider of that name (docs/ARCHITECTURE.md, "Rate limits shared across
// processes"); the others keep their own. Call it before the first send.
func (r *Registry) PaceThrough(db onceplan.DB) {
	if r == nil {
		return
	}
	for _, n := range r.names {
		if p, ok := r.byName[n].(paced); ok {
			p.paceThrough(db, n)
		}
	}
}

// RateOf is p's configured rate limit in calls per second (0: none) and
// whose budget it is (RateScopeProcess or RateScopeAccount).
func RateOf(p Provider) (perSecond float64, scope string) {
	if r, ok := p.(interface {
		PerSecond() float64
		RateScope() string
	}); ok {
		return r.PerSecond(), r.RateScope()
	}
	return 0, RateScopeProcess
}
