package provider

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// ErrInvalidProvider is wrapped by every error of [Parse] and [ParseFlag].
var ErrInvalidProvider = errors.New("invalid provider configuration")

// Defaults of the options every kind takes.
const (
	DefaultTimeout         = 30 * time.Second
	DefaultHTTPSettle      = 2 * time.Minute
	defaultConcurrency     = 4
	defaultMaildirParallel = 16
	// defaultSMTPConcurrency: a relay takes many connections (listmonk's
	// default pool is 10), and with ten calls in flight rather than four the
	// ledger's group commits are bigger and cheaper per message, and a relay
	// took messages measurably faster (docs/BENCHMARKS.md). It is also how
	// many messages a crash can leave in doubt on a relay that can neither
	// deduplicate nor be asked: set concurrency= lower to trade speed for
	// fewer.
	defaultSMTPConcurrency = 10
	// DefaultResendRate is Resend's documented default rate limit: 2
	// requests per second per team, across all its API keys
	// (resend.com/docs/api-reference/rate-limit; an account whose limit
	// was raised says rate=).
	DefaultResendRate = 2.0
	// DefaultPostmarkRate is an assumption: Postmark publishes no number
	// for its API (it answers 429 when a server sends too fast), so this
	// stays well below what one server is seen to take; rate= overrides.
	DefaultPostmarkRate     = 10.0
	maxConcurrency          = 1024
	redactedPasswordMarker  = "xxxxx"
	knownSchemesDescription = "maildir, smtp, http, https, postmark or resend"
)

// MaxNameLen is the longest name ValidName accepts.
const MaxNameLen = 40

type parseError struct{ msg string }

func (e *parseError) Error() string        { return e.msg }
func (e *parseError) Is(target error) bool { return target == ErrInvalidProvider }

func errorf(name, format string, args ...any) error {
	return &parseError{msg: fmt.Sprintf("provider %q: ", name) + fmt.Sprintf(format, args...)}
}

// nameRe: a provider's name also names its queue ("provider_" + name), so
// it follows River's queue-name rule.
var nameRe = regexp.MustCompile(`^[a-z0-9]+(?:[_-][a-z0-9]+)*$`)

// ValidName reports whether name is a valid provider (or notifier) name:
// at most MaxNameLen lower-case letters and digits, separated by single
// '-' or '_'.
func ValidName(name string) bool {
	return len(name) <= MaxNameLen && nameRe.MatchString(name)
}

// options are the parsed query options of a provider URL.
type options struct {
	perSecond   float64 // 0: no rate limit
	rateScope   string  // RateScopeProcess or RateScopeAccount
	concurrency int
	timeout     time.Duration
	settle      time.Duration
	settleSet   bool
	tls         string // smtp
	dedupe      bool   // http
	probe       string // http: a URL; smtp: "postmark" or "mailjet"
	// postmark (and smtp with probe=…)
	endpoint          string // postmark: the API base URL (tests)
	messageStream     string // postmark: MessageStream
	probeEndpoint     string // smtp probe=…: the API base URL (tests)
	probeRetention    time.Duration
	probeRetentionSet bool
	// resend, and smtp with idempotency_header=…
	dedupeWindow      time.Duration
	dedupeWindowSet   bool
	idempotencyHeader string // smtp
	batch             int    // resend, postmark: at most this many effects per call; 0: one
}

// Options each kind accepts, in the order error messages list them.
var (
	commonOptions  = []string{"rate", "rate_scope", "concurrency", "timeout", "settle"}
	kindOptions    = map[string][]string{"maildir": nil, "smtp": {"tls", "probe", "probe_endpoint", "probe_retention", "idempotency_header", "dedupe_window"}, "http": {"dedupe", "probe", "dedupe_window", "probe_retention"}, "resend": {"endpoint", "dedupe_window", "batch"}, "postmark": {"endpoint", "message_stream", "probe_retention", "batch"}}
	schemeToKind   = map[string]string{"maildir": "maildir", "smtp": "smtp", "http": "http", "https": "http", "postmark": "postmark", "resend": "resend"}
	rateUnitPerSec = map[string]float64{"s": 1, "m": 1.0 / 60, "h": 1.0 / 3600}
	// maxBatch is the most effects one call of a kind carries (batch=).
	maxBatch = map[string]struct {
		most    int
		service string
	}{"resend": {MaxResendBatch, "Resend"}, "postmark": {MaxPostmarkBatch, "Postmark"}}
)

// Parse builds the provider called name from its URL:
//
//	maildir:///absolute/path
//	smtp://[user:pass@]host[:port][?tls=none|starttls|tls]
//	http(s)://host/path[?dedupe=true][&probe=URL]
//	postmark://SERVER_TOKEN@[api.postmarkapp.com][?message_stream=ID][&probe_retention=D][&batch=N][&endpoint=URL]
//	resend://API_KEY@[api.resend.com][?dedupe_window=D][&batch=N][&endpoint=URL]
//
// Options every kind takes:
//   - rate=N/s (or N/m, N/h; N may have a fraction): at most N sends per
//     second, evenly spaced (burst 1), and at least one an hour
//     (MaxRateInterval); rate=none: no limit. Default: no
//     limit, but for resend (DefaultResendRate, Resend's documented
//     default) and postmark (DefaultPostmarkRate, an assumption).
//   - rate_scope=account|process: whose budget the rate is. account: the
//     service account's, shared through the database by every process
//     that sends through the provider (Registry.PaceThrough); process:
//     each process's own. Default account for resend and postmark, whose
//     limits are per account, process for the others.
//   - concurrency=N: at most N calls at once (1–1024). Default 4 for smtp
//     and http, 16 for maildir.
//   - timeout=DURATION: bound of one call (connect, send, answer). Default
//     30s. Maildir writes are local and ignore it.
//   - settle=DURATION: how long after a send a probe's "not found" may
//     still be an effect in flight; only for providers that can be probed
//     (maildir, default 0; http with probe=URL, default 2m).
//
// SMTP: tls=none (plain text; also for servers that offer no STARTTLS),
// tls=starttls (STARTTLS required) or tls=tls (TLS from the first byte).
// Without tls, port 465 means tls, port 587 starttls and any other port
// none. Without a port, tls=tls means 465, tls=starttls 587, otherwise 25.
// Credentials are sent only over TLS, or in clear to localhost.
//
// SMTP probe=postmark|mailjet: the relay is Postmark's or Mailjet's and can
// be asked through its API (smtp_probe.go), with the SMTP credentials;
// probe_retention=DURATION overrides the service's retention,
// probe_endpoint=URL its API's address (tests).
//
// Postmark: the server token is the whole userinfo and is redacted like a
// password; message_stream= names the MessageStream (sent and searched);
// probe_retention= overrides the 45 days; endpoint=URL replaces
// https://HOST (plain http only to 127.0.0.1 or localhost).
//
// SMTP idempotency_header=NAME: the relay deduplicates by header NAME,
// which carries the effect id in every message (smtp_dedupe.go); its window
// is dedupe_window=DURATION, or the documented one of a known header
// (Resend-Idempotency-Key 24h, X-EE-Idempotency-Key 24h); another header
// name needs dedupe_window=.
//
// Resend: the API key is the whole userinfo and is redacted like a
// password; dedupe_window= overrides Resend's 24 hours; endpoint=URL
// replaces https://HOST (plain http only to 127.0.0.1 or localhost).
//
// Resend and Postmark: batch=N sends up to N effects in one call of the
// service's batch endpoint ([Batcher]; 1–100 for Resend, 1–500 for
// Postmark, their documented limits). Default: one effect per call.
//
// HTTP: dedupe=true says the endpoint ignores a repeated Idempotency-Key;
// probe=URL says GET URL/{EffectID} tells whether an effect exists. The
// webhook URL itself carries no query: every query parameter is an option,
// and an unknown one is an error.
//
// Errors are one sentence naming the provider and the option, and never
// contain the password; they wrap [ErrInvalidProvider].
func Parse(name, rawURL string) (Provider, error) {
	if name == "" {
		return nil, &parseError{msg: "provider name is empty"}
	}
	if !ValidName(name) {
		return nil, &parseError{msg: fmt.Sprintf("provider name %q is not valid: use at most %d lower-case letters and digits, separated by single '-' or '_'", name, MaxNameLen)}
	}
	if strings.TrimSpace(rawURL) == "" {
		return nil, errorf(name, "URL is empty")
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error repeats the URL, password and all
		}
		if red := Redacted(rawURL); red != rawURL {
			// The detail may quote a piece of the password (a bad escape).
			return nil, errorf(name, "URL %s is not valid", Shown(red))
		}
		return nil, errorf(name, "URL %s is not valid: %v", Shown(rawURL), err)
	}
	scheme := strings.ToLower(u.Scheme)
	kind, ok := schemeToKind[scheme]
	if !ok {
		if scheme == "" {
			return nil, errorf(name, "URL %s has no scheme (want %s)", Shown(Redacted(rawURL)), knownSchemesDescription)
		}
		return nil, errorf(name, "unknown scheme %q (want %s)", u.Scheme, knownSchemesDescription)
	}
	opts, err := parseOptions(name, kind, u.RawQuery)
	if err != nil {
		return nil, err
	}
	switch kind {
	case "maildir":
		return newMaildirFromURL(name, u, opts)
	case "smtp":
		return newSMTPFromURL(name, u, opts)
	case "postmark":
		return newPostmarkFromURL(name, u, opts)
	case "resend":
		return newResendFromURL(name, u, opts)
	default:
		return newWebhookFromURL(name, u, opts)
	}
}

// ParseFlag parses "NAME=URL", the form of the --provider flag and of the
// items of ONCEPLAN_PROVIDERS.
func ParseFlag(s string) (Provider, error) {
	name, rawURL, ok := strings.Cut(strings.TrimSpace(s), "=")
	if !ok {
		return nil, &parseError{msg: fmt.Sprintf("provider %q is not NAME=URL", Redacted(s))}
	}
	return Parse(strings.TrimSpace(name), strings.TrimSpace(rawURL))
}

// Redacted returns rawURL with the password of its userinfo replaced by
// "xxxxx", for logs and the UI. A URL that does not parse is redacted by
// hand: everything between "://" and the last '@' of the authority loses
// its password.
func Redacted(rawURL string) string {
	if r, ok := redactTokenUserinfo(rawURL); ok {
		return r // the whole userinfo is the token (postmark://TOKEN@…)
	}
	if u, err := url.Parse(rawURL); err == nil {
		u.RawQuery = redactQuery(u.RawQuery)
		return u.Redacted()
	}
	// By hand: the query's URL-valued options (probe=…) may carry a
	// password as well as the authority.
	if q := strings.IndexByte(rawURL, '?'); q >= 0 {
		query, fragment, hasFragment := strings.Cut(rawURL[q+1:], "#")
		rawURL = rawURL[:q+1] + redactQuery(query)
		if hasFragment {
			rawURL += "#" + fragment
		}
	}
	// The authority starts after "scheme://", or after a leading "//" (a
	// URL without a scheme, such as a probe= value).
	start := strings.Index(rawURL, "://") + 3
	if start < 3 {
		if !strings.HasPrefix(rawURL, "//") {
			return rawURL
		}
		start = 2
	}
	rest := rawURL[start:]
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	at := strings.LastIndex(rest[:end], "@")
	if at < 0 {
		return rawURL
	}
	user, _, hasPass := strings.Cut(rest[:at], ":")
	if !hasPass {
		return rawURL
	}
	return rawURL[:start] + user + ":" + redactedPasswordMarker + rest[at:]
}

// Shown is s as an error message quotes it: control characters (a URL
// that failed to parse may hold a line break) are escaped, so the message
// stays one line.
func Shown(s string) string {
	if strings.IndexFunc(s, unicode.IsControl) < 0 {
		return s
	}
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}

// redactQuery redacts the passwords of URLs given as option values
// (probe=https://user:pass@…), leaving the other pairs as they are.
func redactQuery(rawQuery string) string {
	if !strings.Contains(rawQuery, "@") && !strings.Contains(strings.ToLower(rawQuery), "%40") {
		return rawQuery // no userinfo, plain or escaped
	}
	pairs := strings.Split(rawQuery, "&")
	for i, pair := range pairs {
		k, v, ok := strings.Cut(pair, "=")
		if !ok {
			continue
		}
		uv, err := url.QueryUnescape(v)
		if err != nil {
			if strings.Contains(v, "@") || strings.Contains(strings.ToLower(v), "%40") {
				pairs[i] = k + "=" + redactedPasswordMarker
			}
			continue
		}
		if r := Redacted(uv); r != uv {
			pairs[i] = k + "=" + url.QueryEscape(r)
		} else if _, err := url.Parse(uv); err != nil && strings.Contains(uv, "@") {
			// Not a URL, yet it may hold a userinfo: hide it whole.
			pairs[i] = k + "=" + redactedPasswordMarker
		}
	}
	return strings.Join(pairs, "&")
}

func parseOptions(name, kind, rawQuery string) (options, error) {
	o := options{concurrency: defaultConcurrency, timeout: DefaultTimeout, rateScope: RateScopeProcess}
	switch kind {
	case "maildir":
		o.concurrency = defaultMaildirParallel
	case "smtp":
		o.concurrency = defaultSMTPConcurrency
	case "resend":
		o.perSecond, o.rateScope = DefaultResendRate, RateScopeAccount
	case "postmark":
		o.perSecond, o.rateScope = DefaultPostmarkRate, RateScopeAccount
	}
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return o, errorf(name, "URL query is not valid: %v", err)
	}
	known := append(slices.Clone(commonOptions), kindOptions[kind]...)
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !slices.Contains(known, k) {
			if k == "batch" {
				return o, errorf(name, "batch applies only to resend and postmark (a %s provider sends one effect per call)", kind)
			}
			return o, errorf(name, "unknown option %q for a %s provider (known: %s)", k, kind, strings.Join(known, ", "))
		}
		if len(q[k]) > 1 {
			return o, errorf(name, "option %q is given %d times", k, len(q[k]))
		}
	}
	for _, k := range keys {
		v := q[k][0]
		switch k {
		case "rate":
			if v == "none" {
				o.perSecond = 0
				continue
			}
			if o.perSecond, err = parseRate(v); err != nil {
				return o, errorf(name, "rate %q is not N/s, N/m, N/h or none", v)
			}
			if o.perSecond < 1/MaxRateInterval.Seconds() {
				return o, errorf(name, "rate %q is slower than 1/h, the slowest rate (one call an hour)", v)
			}
		case "rate_scope":
			if v != RateScopeAccount && v != RateScopeProcess {
				return o, errorf(name, "rate_scope %q is not account or process", v)
			}
			o.rateScope = v
		case "concurrency":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > maxConcurrency {
				return o, errorf(name, "concurrency %q is not a whole number from 1 to %d", v, maxConcurrency)
			}
			o.concurrency = n
		case "timeout":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return o, errorf(name, "timeout %q is not a positive duration like 30s", v)
			}
			o.timeout = d
		case "settle":
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				return o, errorf(name, "settle %q is not a duration like 2m", v)
			}
			o.settle, o.settleSet = d, true
		case "tls":
			if v != "none" && v != "starttls" && v != "tls" {
				return o, errorf(name, "tls %q is not none, starttls or tls", v)
			}
			o.tls = v
		case "dedupe":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return o, errorf(name, "dedupe %q is not true or false", v)
			}
			o.dedupe = b
		case "probe":
			if kind == "smtp" {
				if v != "postmark" && v != "mailjet" {
					return o, errorf(name, "probe %q is not postmark or mailjet", v)
				}
				o.probe = v
				continue
			}
			p, err := url.Parse(v)
			if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" || p.RawQuery != "" || p.Fragment != "" {
				return o, errorf(name, "probe %q is not an http(s) URL without query", Redacted(v))
			}
			o.probe = v
		case "endpoint":
			if o.endpoint, err = apiEndpoint(name, k, v); err != nil {
				return o, err
			}
		case "probe_endpoint":
			if o.probeEndpoint, err = apiEndpoint(name, k, v); err != nil {
				return o, err
			}
		case "message_stream":
			if v == "" || strings.ContainsAny(v, " \t\r\n") {
				return o, errorf(name, "message_stream %q is not a Postmark message stream id", v)
			}
			o.messageStream = v
		case "dedupe_window":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return o, errorf(name, "dedupe_window %q is not a positive duration like 24h", v)
			}
			o.dedupeWindow, o.dedupeWindowSet = d, true
		case "idempotency_header":
			if !validHeaderName(v) {
				return o, errorf(name, "idempotency_header %q is not a message header name", v)
			}
			o.idempotencyHeader = v
		case "batch":
			mb := maxBatch[kind]
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > mb.most {
				return o, errorf(name, "batch %q is not a whole number from 1 to %d (the most %s takes in one call)", v, mb.most, mb.service)
			}
			o.batch = n
		case "probe_retention":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return o, errorf(name, "probe_retention %q is not a positive duration like 1080h (45 days)", v)
			}
			o.probeRetention, o.probeRetentionSet = d, true
		}
	}
	return o, nil
}

// parseRate reads "N/s", "N/m" or "N/h" as sends per second.
func parseRate(v string) (float64, error) {
	num, unit, ok := strings.Cut(v, "/")
	per, known := rateUnitPerSec[unit]
	if !ok || !known || num == "" {
		return 0, errors.New("bad rate")
	}
	for _, c := range num { // refuse "1e3", "Inf", "NaN", "+5", hex
		if (c < '0' || c > '9') && c != '.' {
			return 0, errors.New("bad rate")
		}
	}
	n, err := strconv.ParseFloat(num, 64)
	if err != nil || n <= 0 || n > 1e6 {
		return 0, errors.New("bad rate")
	}
	return n * per, nil
}
