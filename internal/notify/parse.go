package notify

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/mail"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/onceplan/onceplan/internal/provider"
	"github.com/onceplan/onceplan/ledger"
)

// ErrInvalidNotifier is wrapped by every error of Parse, ParseFlag and
// NewRegistry's refusal of a name given twice.
var ErrInvalidNotifier = errors.New("invalid notifier configuration")

type parseError struct{ msg string }

func (e *parseError) Error() string        { return e.msg }
func (e *parseError) Is(target error) bool { return target == ErrInvalidNotifier }

func errorf(name, format string, args ...any) error {
	return &parseError{msg: fmt.Sprintf("notifier %q: ", name) + fmt.Sprintf(format, args...)}
}

// ParseOptions is what parsing a notifier needs besides its URL.
type ParseOptions struct {
	// Providers are the configured providers a mailto: notifier may send
	// through (provider=NAME).
	Providers *provider.Registry
	// PublicURL is where people reach serve (--public-url): a mailto:
	// notifier's default From is onceplan@ its host.
	PublicURL string
	// Getenv reads hmac_secret_env= (default os.Getenv).
	Getenv func(string) string
	// ReadFile reads hmac_secret_file= (default os.ReadFile).
	ReadFile func(string) ([]byte, error)
}

const (
	// maxTimeout bounds a webhook's timeout=: a delivery job holds a
	// worker for as long.
	maxTimeout   = 5 * time.Minute
	maskedMarker = "xxxxx"
	knownSchemes = "mailto, https or http"
)

var (
	envRe    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	itemRe   = regexp.MustCompile(`^[A-Za-z0-9_-]+=`)
	kindOpts = map[string][]string{
		KindMailto:  {"provider", "from", "users", "events"},
		KindWebhook: {"events", "timeout", "hmac_secret_env", "hmac_secret_file"},
	}
)

// Parse builds the notifier called name from its URL:
//
//	mailto:[ADDRESS[,ADDRESS…]]?provider=NAME[&from=ADDRESS][&users=false][&events=LIST]
//	https://host/path[?events=LIST][&timeout=10s][&hmac_secret_env=VAR | &hmac_secret_file=PATH]
//	http://127.0.0.1:PORT/path[?…]   (plain http only to a loopback host: tests, a local relay)
//
// mailto: sends an email through the configured provider NAME (required;
// --provider) to the users each event is for (users=false: not them) and
// to the fixed addresses before the '?', from from= (default onceplan@
// the --public-url's host, or onceplan@localhost when that is an IP
// address).
//
// A webhook gets a POST of a Slack-compatible JSON body ("text" and
// structured fields); timeout= bounds one call (default 10s, at most 5m).
// With hmac_secret_env=VAR (the secret in environment variable VAR) or
// hmac_secret_file=PATH (the secret in a file; one trailing line break is
// dropped), of at least 16 characters, each request carries
// X-Onceplan-Timestamp and X-Onceplan-Signature (see Sign). The secret
// never appears on the command line, in a log or on a page.
//
// events=LIST (comma-separated: submitted, approved, rejected, attention,
// completed) limits the events a notifier carries; default all.
//
// The URL carries no query of its own: every query parameter is an
// option, and an unknown one is an error. Errors are one sentence naming
// the notifier and what is wrong, never containing a secret; they wrap
// ErrInvalidNotifier.
func Parse(name, rawURL string, o ParseOptions) (*Notifier, error) {
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	if o.ReadFile == nil {
		o.ReadFile = os.ReadFile
	}
	switch {
	case name == "":
		return nil, &parseError{msg: "notifier name is empty"}
	case !provider.ValidName(name):
		return nil, &parseError{msg: fmt.Sprintf("notifier name %q is not valid: use at most %d lower-case letters and digits, separated by single '-' or '_'", provider.Shown(name), provider.MaxNameLen)}
	case strings.TrimSpace(rawURL) == "":
		return nil, errorf(name, "URL is empty")
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error repeats the URL, password and all
		}
		if red := provider.Redacted(rawURL); red != rawURL {
			return nil, errorf(name, "URL %s is not valid", provider.Shown(red))
		}
		return nil, errorf(name, "URL %s is not valid: %v", provider.Shown(rawURL), err)
	}
	var kind string
	switch strings.ToLower(u.Scheme) {
	case "mailto":
		kind = KindMailto
	case "https", "http":
		kind = KindWebhook
	case "":
		return nil, errorf(name, "URL %s has no scheme (want %s)", provider.Shown(provider.Redacted(rawURL)), knownSchemes)
	default:
		return nil, errorf(name, "unknown scheme %q (want %s)", provider.Shown(u.Scheme), knownSchemes)
	}
	if strings.Contains(rawURL, "#") {
		return nil, errorf(name, "a notifier URL takes no #fragment")
	}
	q, err := options(name, kind, u.RawQuery)
	if err != nil {
		return nil, err
	}
	n := &Notifier{name: name, kind: kind}
	if v, ok := q["events"]; ok {
		if n.events, err = parseEvents(name, v); err != nil {
			return nil, err
		}
	}
	if kind == KindMailto {
		return parseMailto(n, u, q, o)
	}
	return parseWebhook(n, u, q, o)
}

// options reads a URL's query as options of kind, refusing an unknown or
// repeated one.
func options(name, kind, rawQuery string) (map[string]string, error) {
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return nil, errorf(name, "URL query is not valid: %v", err)
	}
	known := kindOpts[kind]
	out := make(map[string]string, len(q))
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !slices.Contains(known, k) {
			return nil, errorf(name, "unknown option %q for a %s notifier (known: %s)", provider.Shown(k), kind, strings.Join(known, ", "))
		}
		if len(q[k]) > 1 {
			return nil, errorf(name, "option %q is given %d times", k, len(q[k]))
		}
		out[k] = q[k][0]
	}
	return out, nil
}

func parseEvents(name, v string) ([]Event, error) {
	var out []Event
	for _, part := range strings.Split(v, ",") {
		e, err := ParseEvent(part)
		if err != nil {
			return nil, errorf(name, "events: %s", err)
		}
		if !slices.Contains(out, e) {
			out = append(out, e)
		}
	}
	// In Events' order, so String is one spelling whatever the order given.
	slices.SortFunc(out, func(a, b Event) int { return slices.Index(Events, a) - slices.Index(Events, b) })
	return out, nil
}

func parseMailto(n *Notifier, u *url.URL, q map[string]string, o ParseOptions) (*Notifier, error) {
	name := n.name
	if u.Host != "" || u.User != nil || strings.HasPrefix(u.Path, "/") {
		return nil, errorf(name, "write mailto:ADDRESS?provider=NAME, without // or a path")
	}
	addrs, err := url.PathUnescape(u.Opaque)
	if err != nil {
		return nil, errorf(name, "the addresses %q are not validly escaped", provider.Shown(u.Opaque))
	}
	for _, a := range strings.Split(addrs, ",") {
		if strings.TrimSpace(a) == "" {
			continue
		}
		norm, err := ledger.NormalizeEmail(a)
		if err != nil {
			return nil, errorf(name, "%q is not an email address", provider.Shown(strings.TrimSpace(a)))
		}
		if !slices.Contains(n.to, norm) {
			n.to = append(n.to, norm)
		}
	}
	n.users = true
	if v, ok := q["users"]; ok {
		if n.users, err = strconv.ParseBool(v); err != nil {
			return nil, errorf(name, "users %q is not true or false", provider.Shown(v))
		}
	}
	if !n.users && len(n.to) == 0 {
		return nil, errorf(name, "users=false and no address: it would mail nobody")
	}
	pname, ok := q["provider"]
	configured := strings.Join(o.Providers.Names(), ", ")
	if configured == "" {
		configured = "none is"
	}
	switch {
	case !ok || pname == "":
		return nil, errorf(name, "a mailto: notifier needs provider=NAME, a configured --provider to send through (configured: %s)", configured)
	default:
		if n.provider, ok = o.Providers.Get(pname); !ok {
			return nil, errorf(name, "provider %q is not configured (configured: %s): name one of the --provider NAME=URL", provider.Shown(pname), configured)
		}
	}
	if v, ok := q["from"]; ok {
		if _, err := mail.ParseAddress(v); err != nil || strings.ContainsAny(v, "\r\n") {
			return nil, errorf(name, "from %q is not an email address", provider.Shown(v))
		}
		n.from = strings.TrimSpace(v)
	} else {
		n.from = defaultFrom(o.PublicURL)
	}
	var opts []string
	opts = append(opts, "provider="+url.QueryEscape(pname))
	if _, ok := q["from"]; ok {
		opts = append(opts, "from="+url.QueryEscape(n.from))
	}
	if !n.users {
		opts = append(opts, "users=false")
	}
	opts = append(opts, eventsOption(n.events)...)
	n.shown = "mailto:" + strings.Join(n.to, ",") + "?" + strings.Join(opts, "&")
	return n, nil
}

// defaultFrom is onceplan@ the public URL's host, or onceplan@localhost
// when that host is an IP address or has no dot (no relay takes those).
func defaultFrom(publicURL string) string {
	host := "localhost"
	if u, err := url.Parse(publicURL); err == nil {
		if h := u.Hostname(); h != "" && net.ParseIP(h) == nil && strings.Contains(h, ".") {
			host = strings.ToLower(h)
		}
	}
	return "onceplan@" + host
}

func eventsOption(events []Event) []string {
	if events == nil {
		return nil
	}
	return []string{"events=" + joinEvents(events, ",")}
}

func parseWebhook(n *Notifier, u *url.URL, q map[string]string, o ParseOptions) (*Notifier, error) {
	name := n.name
	scheme := strings.ToLower(u.Scheme)
	switch {
	case u.Opaque != "" || u.Host == "":
		return nil, errorf(name, "URL %s has no host (want %s://host/path)", provider.Shown(provider.Redacted(u.String())), scheme)
	case scheme == "http" && !provider.IsLoopbackHost(u.Hostname()):
		return nil, errorf(name, "plain http:// is only for a loopback host (127.0.0.1, ::1, localhost): use https://")
	}
	n.timeout = DefaultWebhookTimeout
	var opts []string
	opts = append(opts, eventsOption(n.events)...)
	if v, ok := q["timeout"]; ok {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 || d > maxTimeout {
			return nil, errorf(name, "timeout %q is not a duration from 1ms to %s, like 10s", provider.Shown(v), maxTimeout)
		}
		n.timeout = d
		opts = append(opts, "timeout="+d.String())
	}
	env, hasEnv := q["hmac_secret_env"]
	file, hasFile := q["hmac_secret_file"]
	switch {
	case hasEnv && hasFile:
		return nil, errorf(name, "give hmac_secret_env or hmac_secret_file, not both")
	case hasEnv:
		if !envRe.MatchString(env) {
			return nil, errorf(name, "hmac_secret_env %q is not an environment variable name", provider.Shown(env))
		}
		secret := o.Getenv(env)
		if secret == "" {
			return nil, errorf(name, "hmac_secret_env names %s, which is not set or empty", env)
		}
		if err := checkSecret(name, "the secret in "+env, secret); err != nil {
			return nil, err
		}
		n.secret = []byte(secret)
		opts = append(opts, "hmac_secret_env="+env)
	case hasFile:
		if file == "" || strings.ContainsAny(file, "\x00\r\n") {
			return nil, errorf(name, "hmac_secret_file %q is not a file path", provider.Shown(file))
		}
		b, err := o.ReadFile(file)
		if err != nil {
			return nil, errorf(name, "hmac_secret_file %q cannot be read (%s)", provider.Shown(file), readErr(err))
		}
		secret := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
		if err := checkSecret(name, "the secret in "+provider.Shown(file), secret); err != nil {
			return nil, err
		}
		n.secret = []byte(secret)
		opts = append(opts, "hmac_secret_file="+url.QueryEscape(file))
	}
	// The URL is called without the options: they are ours.
	call := *u
	call.RawQuery, call.ForceQuery = "", false
	n.url = call.String()
	n.client = &http.Client{
		Timeout: n.timeout,
		// A redirect is an answer to record, not a place to post to.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	n.shown = maskedURL(&call)
	if len(opts) > 0 {
		n.shown += "?" + strings.Join(opts, "&")
	}
	return n, nil
}

func checkSecret(name, what, secret string) error {
	if len(secret) < MinSecretLength {
		return errorf(name, "%s is shorter than %d characters", what, MinSecretLength)
	}
	return nil
}

// readErr words a file error without repeating the path.
func readErr(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return "unreadable"
}

// maskedURL is a webhook URL as String shows it: a password and every
// path segment after the first are masked, since services put the
// webhook's secret in its path (Slack's /services/T…/B…/SECRET).
func maskedURL(u *url.URL) string {
	var b strings.Builder
	b.WriteString(strings.ToLower(u.Scheme) + "://")
	if u.User != nil {
		b.WriteString(url.PathEscape(u.User.Username()))
		if _, ok := u.User.Password(); ok {
			b.WriteString(":" + maskedMarker)
		}
		b.WriteString("@")
	}
	b.WriteString(u.Host)
	p := u.EscapedPath()
	if segs := strings.Split(strings.TrimPrefix(p, "/"), "/"); len(segs) > 1 {
		p = "/" + segs[0] + "/" + maskedMarker
	}
	b.WriteString(p)
	return b.String()
}

// ParseFlag parses "NAME=URL", the form of the --notify flag and of the
// items of ONCEPLAN_NOTIFY.
func ParseFlag(item string, o ParseOptions) (*Notifier, error) {
	name, rawURL, ok := strings.Cut(strings.TrimSpace(item), "=")
	if !ok {
		return nil, &parseError{msg: fmt.Sprintf("--notify %q is not NAME=URL (like ops=mailto:?provider=outbox)", provider.Shown(provider.Redacted(item)))}
	}
	return Parse(strings.TrimSpace(name), strings.TrimSpace(rawURL), o)
}

// SplitList splits ONCEPLAN_NOTIFY into its NAME=URL items: at the commas
// that begin a new NAME=, so that a comma inside a URL (two addresses of
// a mailto:, a list of events) stays in its item.
func SplitList(s string) []string {
	var out []string
	for _, piece := range strings.Split(s, ",") {
		p := strings.TrimSpace(piece)
		switch {
		case p == "":
		case len(out) > 0 && !itemRe.MatchString(p):
			out[len(out)-1] += "," + piece
		default:
			out = append(out, p)
		}
	}
	for i := range out {
		out[i] = strings.TrimSpace(out[i])
	}
	return out
}

// ParseList builds the registry of notifier flags (each NAME=URL),
// stopping at the first error.
func ParseList(items []string, o ParseOptions) (*Registry, error) {
	var ns []*Notifier
	for _, item := range items {
		n, err := ParseFlag(item, o)
		if err != nil {
			return nil, err
		}
		ns = append(ns, n)
	}
	return NewRegistry(ns...)
}
