package sink

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"net/mail"
	"net/url"
	"sync"
	"time"
)

// Mailjet credentials a Mailjet sink accepts when its opts name none.
const (
	MailjetAPIKey    = "sink-mailjet-key"
	MailjetAPISecret = "sink-mailjet-secret"
)

// MailjetOpts configure a Mailjet sink.
type MailjetOpts struct {
	// SMTP is Mailjet's SMTP relay (required): the messages it accepted
	// are Mailjet's messages, found by their X-MJ-CustomID header.
	SMTP *SMTP
	// APIKey and APISecret are the basic-auth pair the API accepts (and
	// the relay's credentials); "" means MailjetAPIKey / MailjetAPISecret.
	APIKey, APISecret string
	// Retention: messages older than this are no longer listed (0: for
	// ever).
	Retention time.Duration
	// NowFunc is the sink's clock (nil: time.Now).
	NowFunc func() time.Time
}

// Mailjet is an HTTP server on 127.0.0.1 with the part of Mailjet's REST
// API the probe uses: GET /v3/REST/message?CustomID=… with basic auth
// (401 otherwise), answering Mailjet's envelope {"Count", "Data",
// "Total"} over the messages its SMTP relay accepted.
type Mailjet struct {
	srv  *httptest.Server
	opts MailjetOpts

	mu       sync.Mutex
	lag      time.Duration
	searches int
}

// NewMailjet starts a Mailjet sink over opts.SMTP.
func NewMailjet(opts MailjetOpts) *Mailjet {
	if opts.APIKey == "" {
		opts.APIKey = MailjetAPIKey
	}
	if opts.APISecret == "" {
		opts.APISecret = MailjetAPISecret
	}
	if opts.NowFunc == nil {
		opts.NowFunc = time.Now
	}
	m := &Mailjet{opts: opts}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v3/REST/message", m.message)
	m.srv = httptest.NewServer(mux)
	return m
}

// Endpoint is the API's base URL.
func (m *Mailjet) Endpoint() string { return m.srv.URL }

// SMTPURL is the provider URL of the relay: its address with the API key
// and secret as credentials, probe=mailjet and probe_endpoint= this sink.
func (m *Mailjet) SMTPURL() string {
	return "smtp://" + url.PathEscape(m.opts.APIKey) + ":" + url.PathEscape(m.opts.APISecret) + "@" + m.opts.SMTP.Addr() +
		"?tls=none&probe=mailjet&probe_endpoint=" + url.QueryEscape(m.srv.URL)
}

// Close stops the server.
func (m *Mailjet) Close() { m.srv.Close() }

// Searches is the number of API requests received.
func (m *Mailjet) Searches() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.searches
}

// SearchLag hides a message from the API until d after it was accepted.
func (m *Mailjet) SearchLag(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lag = d
}

// Effects counts the relay's messages per X-MJ-CustomID.
func (m *Mailjet) Effects() map[string]int {
	out := map[string]int{}
	for _, sm := range m.opts.SMTP.Messages() {
		out[customID(sm)]++
	}
	return out
}

func customID(sm SMTPMessage) string {
	parsed, err := mail.ReadMessage(bytes.NewReader(sm.Data))
	if err != nil {
		return ""
	}
	return parsed.Header.Get("X-MJ-CustomID")
}

func (m *Mailjet) message(rw http.ResponseWriter, r *http.Request) {
	m.mu.Lock()
	m.searches++
	lag := m.lag
	m.mu.Unlock()
	key, secret, ok := r.BasicAuth()
	if !ok || key != m.opts.APIKey || secret != m.opts.APISecret {
		writeJSON(rw, http.StatusUnauthorized, map[string]any{"ErrorMessage": "API key authentication/authorization failure", "StatusCode": 401})
		return
	}
	want := r.URL.Query().Get("CustomID")
	now := m.opts.NowFunc()
	data := []map[string]any{}
	for i, sm := range m.opts.SMTP.Messages() {
		age := now.Sub(sm.At)
		if age < lag || (m.opts.Retention > 0 && age >= m.opts.Retention) {
			continue
		}
		if want != "" && customID(sm) != want {
			continue
		}
		data = append(data, map[string]any{
			"ArrivedAt": sm.At.UTC().Format(time.RFC3339), "AttachmentCount": 0, "AttemptCount": 0,
			"CampaignID": 0, "ContactAlt": "", "ContactID": 0, "Delay": 0, "DestinationID": 0,
			"FilterTime": 0, "ID": 288230376151711744 + i, "IsClickTracked": false, "IsHTMLPartIncluded": false,
			"IsOpenTracked": false, "IsTextPartIncluded": true, "IsUnsubTracked": false, "MessageSize": len(sm.Data),
			"SenderID": 0, "SpamassassinScore": 0, "SpamassRules": "", "StatePermanent": false,
			"Status": "sent", "Subject": "", "UUID": "",
		})
	}
	writeJSON(rw, http.StatusOK, map[string]any{"Count": len(data), "Data": data, "Total": len(data)})
}
