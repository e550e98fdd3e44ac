package provider

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	gomail "github.com/wneessen/go-mail"
)

// SMTP through a relay that can be asked afterwards (smtp://…?probe=…):
//
//   - probe=postmark (Postmark's SMTP, smtp.postmarkapp.com, whose
//     username and password are both the server token): every message
//     carries X-PM-Metadata-onceplan_effect: EffectID, which Postmark
//     stores as metadata (and strips), and the probe is the messages API
//     search of postmark:// with the SMTP password as the server token.
//     Retention 45 days by default.
//   - probe=mailjet (in-v3.mailjet.com, whose username and password are
//     the API key and secret): every message carries X-MJ-CustomID:
//     EffectID, and the probe is GET /v3/REST/message?CustomID=EffectID
//     with basic auth key:secret. Mailjet documents no retention for
//     message data we could rely on: the default, 30 days, is kept short
//     on purpose (a probe past the real retention would read "not found"
//     and send again); set probe_retention= to your account's.
//
// probe_endpoint= replaces the API's base URL (tests); probe_retention=
// and settle= override the defaults.
const (
	// DefaultMailjetAPI is Mailjet's API base URL.
	DefaultMailjetAPI = "https://api.mailjet.com"
	// DefaultMailjetRetention: see above; an assumption kept short.
	DefaultMailjetRetention = 30 * 24 * time.Hour
	// DefaultMailjetSettle: Mailjet fills its message resource
	// asynchronously after the SMTP relay accepted a message.
	DefaultMailjetSettle = 10 * time.Minute
	// MailjetCustomIDHeader carries the effect id over Mailjet's SMTP.
	MailjetCustomIDHeader = "X-MJ-CustomID"
)

// smtpProbe is what an SMTP provider with probe=… asks, and the header it
// adds to every message so that the answer can be found.
type smtpProbe struct {
	kind      string // "postmark" or "mailjet"
	header    gomail.Header
	settle    time.Duration
	retention time.Duration
	postmark  *postmarkAPI
	mailjet   *mailjetAPI
	transport *http.Transport
}

// newSMTPProbe reads the probe options of an SMTP provider; nil when it has
// none. user and pass are the SMTP credentials, which are the API's too.
func newSMTPProbe(name, user, pass string, o options) (*smtpProbe, error) {
	if o.probe == "" {
		if o.probeEndpoint != "" || o.probeRetentionSet {
			return nil, errorf(name, "probe_endpoint and probe_retention apply only with probe=postmark or probe=mailjet")
		}
		return nil, nil
	}
	if pass == "" {
		return nil, errorf(name, "probe=%s needs the SMTP credentials (user:password@), which are the API's too", o.probe)
	}
	client, tr := newHTTPClient(o.concurrency, o.timeout)
	p := &smtpProbe{kind: o.probe, transport: tr}
	switch o.probe {
	case "postmark":
		endpoint := "https://" + DefaultPostmarkHost
		if o.probeEndpoint != "" {
			endpoint = o.probeEndpoint
		}
		p.header = PostmarkSMTPMetadataHeader
		p.settle, p.retention = DefaultPostmarkSettle, DefaultPostmarkRetention
		p.postmark = &postmarkAPI{name: name, endpoint: endpoint, token: pass, client: client}
	default: // "mailjet", as parseOptions checked
		endpoint := DefaultMailjetAPI
		if o.probeEndpoint != "" {
			endpoint = o.probeEndpoint
		}
		p.header = MailjetCustomIDHeader
		p.settle, p.retention = DefaultMailjetSettle, DefaultMailjetRetention
		p.mailjet = &mailjetAPI{name: name, endpoint: endpoint, auth: basicAuth(user, pass), client: client}
	}
	if o.settleSet {
		p.settle = o.settle
	}
	if o.probeRetentionSet {
		p.retention = o.probeRetention
	}
	return p, nil
}

// capabilities: a probe within the retention, or nothing (nil p).
func (p *smtpProbe) capabilities() Capabilities {
	if p == nil {
		return Capabilities{}
	}
	return Capabilities{Probe: true, SettleWindow: p.settle, ProbeRetention: p.retention}
}

// addHeader puts the effect id in the header the relay files it under.
func (p *smtpProbe) addHeader(m *gomail.Msg, r Request) {
	if p == nil {
		return
	}
	m.SetGenHeader(p.header, EffectID(r.Key, r.Epoch))
}

func (p *smtpProbe) probe(ctx context.Context, key string, epoch int) (ProbeResult, error) {
	switch {
	case p == nil:
		return ProbeResult{}, ErrNoProbe
	case p.postmark != nil:
		return p.postmark.probe(ctx, key, epoch)
	default:
		return p.mailjet.probe(ctx, key, epoch)
	}
}

func (p *smtpProbe) close() {
	if p != nil {
		p.transport.CloseIdleConnections()
	}
}

// mailjetAPI is Mailjet's REST API for one API key.
type mailjetAPI struct {
	name     string
	endpoint string
	auth     string // "Basic " + base64(key:secret), made once
	client   *http.Client
}

// mailjetMessages is the answer of GET /v3/REST/message: Mailjet's
// envelope {Count, Data, Total}, where Count is how many Data lists (one
// page: 10 by default) and Total how many match the filter.
type mailjetMessages struct {
	Count *int `json:"Count"`
	Data  []struct {
		ID     json.Number `json:"ID"`
		Status string      `json:"Status"`
	} `json:"Data"`
	Total int `json:"Total"`
}

// probe asks GET /v3/REST/message?CustomID=ID: 200 with Count > 0 → found,
// receipt "mailjet:" + the first message's ID, and as many messages as
// Total (or Count, or Data, whichever says more): two or more are a
// duplicate; Count 0 → not found; anything else → an error.
func (api *mailjetAPI) probe(ctx context.Context, key string, epoch int) (ProbeResult, error) {
	q := url.Values{}
	q.Set("CustomID", EffectID(key, epoch))
	raw, err := getOnce(ctx, api.client, api.name, api.endpoint+"/v3/REST/message?"+q.Encode(),
		http.Header{"Authorization": {api.auth}})
	if err != nil {
		return ProbeResult{}, err
	}
	matches, receipt, err := decodeMailjetMessages(raw)
	if err != nil {
		return ProbeResult{Raw: raw}, fmt.Errorf("probe of provider %q: %w", api.name, err)
	}
	return ProbeResult{Found: matches > 0, Matches: matches, Raw: raw, Receipt: receipt}, nil
}

// decodeMailjetMessages reads a framed answer of the message list for one
// CustomID: how many messages Mailjet holds with it, and a receipt.
func decodeMailjetMessages(raw []byte) (matches int, receipt string, err error) {
	f, ok := parseFramed(raw)
	if !ok {
		return 0, "", errors.New("unrecognised answer")
	}
	if f.code != http.StatusOK {
		//lint:ignore ST1005 Mailjet is a proper noun (the provider's name)
		return 0, "", fmt.Errorf("Mailjet answered HTTP %s%s", oneLine(f.status), bodySnippet(f.body))
	}
	var m mailjetMessages
	if err := json.Unmarshal(f.body, &m); err != nil || m.Count == nil {
		//lint:ignore ST1005 Mailjet is a proper noun (the provider's name)
		return 0, "", fmt.Errorf("Mailjet's answer is not {Count, Data, Total}%s", bodySnippet(f.body))
	}
	// Count is one page's, Total the filter's: take whichever says more,
	// so that a second message with the CustomID counts.
	matches = max(*m.Count, m.Total, len(m.Data))
	if matches <= 0 {
		return 0, "", nil
	}
	if len(m.Data) > 0 {
		if id := m.Data[0].ID.String(); id != "" {
			return matches, "mailjet:" + oneLine(id), nil
		}
	}
	return matches, "mailjet:" + strconv.Itoa(matches) + " message(s)", nil
}

// basicAuth is the Authorization value of HTTP basic auth user:pass, as
// (*http.Request).SetBasicAuth writes it.
func basicAuth(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}
