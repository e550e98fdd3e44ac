package notify

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/onceplan/onceplan/internal/provider"
)

// Kinds of notifier.
const (
	// KindMailto sends an email through a configured provider.
	KindMailto = "mailto"
	// KindWebhook posts a Slack-compatible JSON body to a URL.
	KindWebhook = "webhook"
)

// Defaults of the notifiers' options.
const (
	// DefaultWebhookTimeout bounds one webhook call (timeout=).
	DefaultWebhookTimeout = 10 * time.Second
	// MailTimeout bounds one email: the wait for the provider's rate
	// limit and a slot (shared with its campaigns), then the send, which
	// the provider's own timeout= bounds too.
	MailTimeout = time.Minute
	// MinSecretLength is the shortest HMAC secret accepted.
	MinSecretLength = 16
)

// Notifier is one configured way to tell people (--notify NAME=URL). It
// is safe for concurrent use.
type Notifier struct {
	name   string
	kind   string
	shown  string  // the URL as String shows it
	events []Event // nil: every event

	// mailto
	provider provider.Provider
	from     string
	to       []string // fixed addresses
	users    bool     // also the users the event is for

	// webhook
	url     string
	secret  []byte
	timeout time.Duration
	client  *http.Client
}

// Name is the configured name.
func (n *Notifier) Name() string { return n.name }

// Kind is KindMailto or KindWebhook.
func (n *Notifier) Kind() string { return n.kind }

// String is NAME=URL as logs and the admin page show it: never a secret
// (the HMAC secret is not in the URL; a password and a webhook path's
// secret-looking part are masked).
func (n *Notifier) String() string { return n.name + "=" + n.shown }

// Carries reports whether the notifier is configured for e (events=).
func (n *Notifier) Carries(e Event) bool { return n.events == nil || slices.Contains(n.events, e) }

// Events lists the events the notifier carries.
func (n *Notifier) Events() []Event {
	if n.events == nil {
		return slices.Clone(Events)
	}
	return slices.Clone(n.events)
}

// Signed reports whether a webhook's requests carry an HMAC signature.
func (n *Notifier) Signed() bool { return len(n.secret) > 0 }

// Timeout bounds one delivery through the notifier.
func (n *Notifier) Timeout() time.Duration {
	if n.kind == KindMailto {
		return MailTimeout
	}
	return n.timeout
}

// Registry holds the configured notifiers by name.
type Registry struct {
	byName map[string]*Notifier
	names  []string
}

// NewRegistry returns a registry of notifiers, refusing two with one name.
func NewRegistry(ns ...*Notifier) (*Registry, error) {
	r := &Registry{byName: make(map[string]*Notifier, len(ns))}
	for _, n := range ns {
		if n == nil {
			return nil, errors.New("notifier registry: a notifier is nil")
		}
		if _, dup := r.byName[n.name]; dup {
			return nil, &parseError{msg: fmt.Sprintf("notifier %q is configured twice", n.name)}
		}
		r.byName[n.name] = n
		r.names = append(r.names, n.name)
	}
	slices.Sort(r.names)
	return r, nil
}

// Get returns the notifier called name.
func (r *Registry) Get(name string) (*Notifier, bool) {
	if r == nil {
		return nil, false
	}
	n, ok := r.byName[name]
	return n, ok
}

// Names returns the notifiers' names, sorted.
func (r *Registry) Names() []string {
	if r == nil {
		return nil
	}
	return slices.Clone(r.names)
}

// Len is how many notifiers there are (0 on a nil registry).
func (r *Registry) Len() int {
	if r == nil {
		return 0
	}
	return len(r.names)
}

// All returns the notifiers, by name.
func (r *Registry) All() []*Notifier {
	out := make([]*Notifier, 0, r.Len())
	for _, name := range r.Names() {
		out = append(out, r.byName[name])
	}
	return out
}

// MailsUsers reports whether the notifier emails the users an event is
// for (a mailto: notifier without users=false): what a user's
// preferences decide.
func (n *Notifier) MailsUsers() bool { return n.kind == KindMailto && n.users }
