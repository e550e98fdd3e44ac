package webhook_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/inbound"
)

// hostRecorder is a TLS server that every connection of its client reaches,
// whatever host the URL names: it records each request's host and path,
// serves certPEM for any .pem path and answers 200 to anything else. A
// URL the production checks refuse must never show up here.
type hostRecorder struct {
	srv    *httptest.Server
	mu     sync.Mutex
	hosts  []string
	client *http.Client
}

func newHostRecorder(t *testing.T, certPEM []byte) *hostRecorder {
	r := &hostRecorder{}
	r.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.hosts = append(r.hosts, req.Host+req.URL.Path)
		r.mu.Unlock()
		if strings.HasSuffix(req.URL.Path, ".pem") {
			w.Write(certPEM)
			return
		}
		w.Write([]byte("<ConfirmSubscriptionResponse/>"))
	}))
	t.Cleanup(r.srv.Close)
	pool := x509.NewCertPool()
	pool.AddCert(r.srv.Certificate())
	addr := r.srv.Listener.Addr().String()
	r.client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		// Every host resolves to the recorder; its certificate is
		// httptest's, which names example.com.
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
		TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "example.com"},
	}}
	return r
}

func (r *hostRecorder) requests() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.hosts...)
}

// TestSNSOnlySNSHostsFetched: with the production URL checks, a
// SigningCertURL or SubscribeURL on any host but sns.<region>.amazonaws.com
// (or .amazonaws.com.cn) is never fetched — an S3 bucket under
// amazonaws.com, a look-alike suffix, plain http — and the message
// changes nothing; the China regions' SNS host is fetched and taken.
func TestSNSOnlySNSHostsFetched(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{defaultSNSChecks: true})
	rec := newHostRecorder(t, b.certPEM)
	b.eps[inbound.SES].SNS().Client = rec.client

	for _, bad := range []string{
		"https://attacker.s3.amazonaws.com/SimpleNotificationService-x.pem",
		"https://sns.us-east-1.amazonaws.com.evil.com/SimpleNotificationService-x.pem",
		"https://sns.us-east-1.amazonaws.com.evil.com/",
		"https://s3.cn-north-1.amazonaws.com.cn/SimpleNotificationService-x.pem",
		"http://sns.us-east-1.amazonaws.com/SimpleNotificationService-x.pem",
		"https://sns.us-east-1.amazonaws.com:444/SimpleNotificationService-x.pem",
	} {
		body := b.snsMessage("2", "Notification", sesBounce("ann@example.com"), func(m *inbound.SNSMessage) { m.SigningCertURL = bad })
		r := b.post("ses", body, nil)
		require.Equal(t, http.StatusForbidden, r.Code, "%s: %s", bad, r.Body.String())
	}
	// The certificate from the real SNS host, the SubscribeURL elsewhere.
	good := "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-x.pem"
	for _, bad := range []string{
		"https://attacker.s3.amazonaws.com/?Action=ConfirmSubscription",
		"https://sns.us-east-1.amazonaws.com.evil.com/?Action=ConfirmSubscription",
		"https://attacker.amazonaws.com/",
		"http://sns.us-east-1.amazonaws.com/?Action=ConfirmSubscription",
	} {
		body := b.snsMessage("2", "SubscriptionConfirmation", "x", func(m *inbound.SNSMessage) {
			m.SigningCertURL, m.SubscribeURL = good, bad
		})
		r := b.post("ses", body, nil)
		require.Equal(t, http.StatusBadRequest, r.Code, "%s: %s", bad, r.Body.String())
	}
	for _, got := range rec.requests() {
		require.Equal(t, "sns.us-east-1.amazonaws.com/SimpleNotificationService-x.pem", got, "only the SNS certificate was fetched")
	}
	require.Equal(t, state{}, b.state())

	// The China regions: certificate and confirmation on sns.cn-north-1.amazonaws.com.cn.
	cn := "https://sns.cn-north-1.amazonaws.com.cn/SimpleNotificationService-cn.pem"
	r := b.post("ses", b.snsMessage("2", "Notification", sesBounce("ann@example.com"), func(m *inbound.SNSMessage) { m.SigningCertURL = cn }), nil)
	require.Equal(t, http.StatusOK, r.Code, r.Body.String())
	require.Equal(t, state{events: 1, suppressions: 1}, b.state())
	r = b.post("ses", b.snsMessage("2", "SubscriptionConfirmation", "x", func(m *inbound.SNSMessage) {
		m.SigningCertURL, m.SubscribeURL = cn, "https://sns.cn-north-1.amazonaws.com.cn/?Action=ConfirmSubscription&Token=t"
	}), nil)
	require.Equal(t, http.StatusOK, r.Code, r.Body.String())
	require.Contains(t, rec.requests(), "sns.cn-north-1.amazonaws.com.cn/SimpleNotificationService-cn.pem")
	require.Contains(t, rec.requests(), "sns.cn-north-1.amazonaws.com.cn/")
}
