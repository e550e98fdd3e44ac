package provider_test

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/await"
	"github.com/onceplan/onceplan/internal/provider"
	"github.com/onceplan/onceplan/internal/sink"
)

func newSMTPSink(t *testing.T) *sink.SMTP {
	t.Helper()
	s, err := sink.NewSMTP()
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s
}

// newSMTP parses an SMTP provider; it is closed before the sink (cleanups
// run last-in first-out) so its QUIT reaches the server.
func newSMTP(t *testing.T, rawURL string) provider.Provider {
	t.Helper()
	p, err := provider.Parse("relay", rawURL)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	return p
}

func TestSMTPHappyPath(t *testing.T) {
	t.Parallel()
	s := newSMTPSink(t)
	p := newSMTP(t, s.URL())
	require.Equal(t, "smtp", p.Kind())
	require.Equal(t, provider.Capabilities{}, p.Capabilities())
	_, err := p.Probe(context.Background(), testKey("x"), 0)
	require.ErrorIs(t, err, provider.ErrNoProbe)

	r := testRequest("smtp-happy")
	raw, v := send(t, p, r)
	require.Equal(t, `smtp stage=data-close code=250 reply="2.0.0 OK: queued as S000001"`, string(raw))
	require.Equal(t, provider.Verdict{Outcome: provider.OutcomeDone, Receipt: "S000001"}, v)

	msgs := s.Messages()
	require.Len(t, msgs, 1)
	require.Equal(t, "news@onceplan.test", msgs[0].From)
	require.Equal(t, []string{"ada@example.test"}, msgs[0].Rcpts)
	require.Equal(t, provider.MessageID(r.Key, r.Epoch), msgs[0].MessageID)
	require.Contains(t, string(msgs[0].Data), "Subject: Your November invoice, Ada")
	require.Equal(t, map[string]int{provider.MessageID(r.Key, r.Epoch): 1}, s.CountByMessageID())
}

func TestSMTPReusesTheConnection(t *testing.T) {
	t.Parallel()
	s := newSMTPSink(t)
	p := newSMTP(t, s.URL()+"&concurrency=1")
	for i := range 5 {
		_, v := send(t, p, testRequest("smtp-reuse-"+strconv.Itoa(i)))
		require.Equal(t, provider.OutcomeDone, v.Outcome)
	}
	require.Len(t, s.Messages(), 5)
	require.Equal(t, 1, s.Connections(), "five sends over one connection")

	// After a rejection the connection is dropped and the next send dials.
	s.FailNext(1, 550, "5.7.1 no thanks")
	_, v := send(t, p, testRequest("smtp-reuse-rejected"))
	require.Equal(t, provider.OutcomeFailed, v.Outcome)
	_, v = send(t, p, testRequest("smtp-reuse-after"))
	require.Equal(t, provider.OutcomeDone, v.Outcome)
	require.Equal(t, 2, s.Connections())
}

func TestSMTPRejections(t *testing.T) {
	t.Parallel()
	tests := []struct {
		code      int
		msg       string
		outcome   provider.Outcome
		retryable bool
	}{
		{550, "5.7.1 message refused", provider.OutcomeFailed, false},
		{554, "5.6.0 bad content", provider.OutcomeFailed, false},
		{421, "4.7.0 too many messages, slow down", provider.OutcomeQuota, false},
		{451, "4.7.1 rate limited", provider.OutcomeQuota, false},
		{452, "4.3.1 insufficient storage", provider.OutcomeQuota, false},
		{450, "4.2.0 mailbox busy", provider.OutcomeFailed, true},
	}
	for _, tt := range tests {
		t.Run(strconv.Itoa(tt.code), func(t *testing.T) {
			t.Parallel()
			s := newSMTPSink(t)
			p := newSMTP(t, s.URL())
			s.FailNext(1, tt.code, tt.msg)
			raw, v := send(t, p, testRequest("smtp-reject-"+strconv.Itoa(tt.code)))
			require.Equal(t, "smtp stage=data-close code="+strconv.Itoa(tt.code)+" reply="+strconv.Quote(tt.msg), string(raw))
			require.Equal(t, tt.outcome, v.Outcome)
			require.Equal(t, tt.retryable, v.Retryable)
			require.Equal(t, "the server answered "+strconv.Itoa(tt.code)+" "+tt.msg+" at the end of DATA", v.Reason)
			if tt.outcome == provider.OutcomeQuota {
				require.Equal(t, provider.DefaultQuotaRetryAfter, v.RetryAfter)
			}
			require.Empty(t, s.Messages(), "a rejected message is not accepted")
		})
	}
}

func TestSMTPRecipientRejected(t *testing.T) {
	t.Parallel()
	s := newSMTPSink(t)
	p := newSMTP(t, s.URL())
	s.RejectRcpt("ada@example.test", 550)
	raw, v := send(t, p, testRequest("smtp-rcpt"))
	require.Equal(t, `smtp stage=rcpt code=550 reply="5.0.0 recipient <ada@example.test> rejected by the sink"`, string(raw))
	require.Equal(t, provider.OutcomeFailed, v.Outcome)
	require.False(t, v.Retryable)
	require.Empty(t, s.Messages())
}

func TestSMTPDropAfterDataIsUnknown(t *testing.T) {
	t.Parallel()
	s := newSMTPSink(t)
	p := newSMTP(t, s.URL())
	s.DropAfterData(1)
	r := testRequest("smtp-drop")
	raw, v := send(t, p, r)
	require.True(t, strings.HasPrefix(string(raw), "smtp stage=data-close error="), string(raw))
	require.Equal(t, provider.OutcomeUnknown, v.Outcome)
	require.Contains(t, v.Reason, "the server may have accepted the message")

	// It was delivered: the client just never heard so.
	msgs := s.Messages()
	require.Len(t, msgs, 1)
	require.True(t, msgs[0].Dropped)
	require.Equal(t, provider.MessageID(r.Key, r.Epoch), msgs[0].MessageID)

	// The provider recovers: the next send dials a fresh connection.
	_, v = send(t, p, testRequest("smtp-drop-next"))
	require.Equal(t, provider.OutcomeDone, v.Outcome)
}

func TestSMTPTimeoutAfterDataIsUnknown(t *testing.T) {
	t.Parallel()
	s := newSMTPSink(t)
	p := newSMTP(t, s.URL()+"&timeout=200ms")
	s.DelayData(600 * time.Millisecond)
	raw, v := send(t, p, testRequest("smtp-slow"))
	require.Contains(t, string(raw), "stage=data-close error=")
	require.Equal(t, provider.OutcomeUnknown, v.Outcome)
	await.Until(t, time.Minute, "the sink accepting the message the client gave up on", func() bool { return len(s.Messages()) == 1 })
}

func TestSMTPConnectionRefusedIsRetryable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())

	p := newSMTP(t, "smtp://"+addr+"?tls=none")
	raw, v := send(t, p, testRequest("smtp-refused"))
	require.True(t, strings.HasPrefix(string(raw), "smtp stage=dial error="), string(raw))
	require.Contains(t, string(raw), "connection refused")
	require.Equal(t, provider.OutcomeFailed, v.Outcome)
	require.True(t, v.Retryable)
}

func TestSMTPStartTLSRequiredButNotOffered(t *testing.T) {
	t.Parallel()
	s := newSMTPSink(t)
	p := newSMTP(t, "smtp://"+s.Addr()+"?tls=starttls")
	raw, v := send(t, p, testRequest("smtp-starttls"))
	require.Contains(t, string(raw), "stage=dial")
	require.Contains(t, string(raw), "does not support STARTTLS")
	require.Equal(t, provider.OutcomeFailed, v.Outcome)
	require.Empty(t, s.Messages())
}

func TestSMTPAuth(t *testing.T) {
	t.Parallel()
	s := newSMTPSink(t)
	p := newSMTP(t, "smtp://mailer:pa55word@"+s.Addr()+"?tls=none")
	require.NotContains(t, p.String(), "pa55word")
	_, v := send(t, p, testRequest("smtp-auth"))
	require.Equal(t, provider.OutcomeDone, v.Outcome)
	require.Equal(t, "mailer", s.Messages()[0].User)
}

func TestSMTPContextDoneBeforeSend(t *testing.T) {
	t.Parallel()
	s := newSMTPSink(t)
	p := newSMTP(t, s.URL())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	raw, err := p.Send(ctx, testRequest("smtp-cancelled"))
	require.ErrorIs(t, err, context.Canceled)
	require.Nil(t, raw)
	require.Zero(t, s.Connections())
}

func TestClassifySMTP(t *testing.T) {
	t.Parallel()
	tests := []struct {
		raw  string
		want provider.Verdict
	}{
		{`smtp stage=data-close code=250 reply="2.0.0 Ok: queued as 4Bc9xZ1"`, provider.Verdict{Outcome: provider.OutcomeDone, Receipt: "4Bc9xZ1"}},
		{`smtp stage=data-close code=250 reply="2.0.0 OK 1699999999 a1-20020a.123 - gsmtp"`, provider.Verdict{Outcome: provider.OutcomeDone, Receipt: "250 2.0.0 OK 1699999999 a1-20020a.123 - gsmtp"}},
		{`smtp stage=data-close code=250 reply=ok`, provider.Verdict{Outcome: provider.OutcomeDone, Receipt: "250 ok"}},
		{`smtp stage=mail code=421 reply="4.7.0 try later"`, provider.Verdict{Outcome: provider.OutcomeQuota, RetryAfter: time.Minute, Reason: "the server answered 421 4.7.0 try later at MAIL FROM"}},
		{`smtp stage=dial code=535 reply="5.7.8 bad credentials"`, provider.Verdict{Outcome: provider.OutcomeFailed, Reason: "the server answered 535 5.7.8 bad credentials while connecting"}},
		{`smtp stage=data code=554 reply="5.5.1 no valid recipients"`, provider.Verdict{Outcome: provider.OutcomeFailed, Reason: "the server answered 554 5.5.1 no valid recipients at DATA"}},
		{`smtp stage=rcpt code=450 reply="4.2.1 try again"`, provider.Verdict{Outcome: provider.OutcomeFailed, Retryable: true, Reason: "the server answered 450 4.2.1 try again at RCPT TO"}},
		{`smtp stage=dial error="dial tcp: lookup relay.invalid: no such host"`, provider.Verdict{Outcome: provider.OutcomeFailed, Retryable: true, NotSent: true,
			Reason: "the connection failed while connecting, before the message was sent: dial tcp: lookup relay.invalid: no such host"}},
		{`smtp stage=mail error="write: broken pipe"`, provider.Verdict{Outcome: provider.OutcomeFailed, Retryable: true, Reason: "the connection failed at MAIL FROM, before the message was sent: write: broken pipe"}},
		{`smtp stage=data error=EOF`, provider.Verdict{Outcome: provider.OutcomeFailed, Retryable: true, Reason: "the connection failed at DATA, before the message was sent: EOF"}},
		{`smtp stage=data-write error="i/o timeout"`, provider.Verdict{Outcome: provider.OutcomeUnknown, Reason: "the connection failed while the message was being written; the server may have accepted the message: i/o timeout"}},
		{`smtp stage=data-close error="read: connection reset by peer"`, provider.Verdict{Outcome: provider.OutcomeUnknown, Reason: "the connection failed at the end of DATA; the server may have accepted the message: read: connection reset by peer"}},
		{`smtp stage=build error="no from"`, provider.Verdict{Outcome: provider.OutcomeFailed, Reason: "the message could not be built: no from"}},
		{`smtp stage=rcpt code=250 reply=odd`, provider.Verdict{Outcome: provider.OutcomeFailed, Retryable: true, Reason: "the connection failed at RCPT TO, before the message was sent: "}},
		{`smtp stage=teleport error=x`, provider.Verdict{Outcome: provider.OutcomeUnknown, Reason: `unrecognised SMTP answer: smtp stage=teleport error=x`}},
		{`smtp stage="data-close" code=250 reply="unterminated`, provider.Verdict{Outcome: provider.OutcomeUnknown, Reason: `unrecognised SMTP answer: smtp stage="data-close" code=250 reply="unterminated`}},
		{`HTTP/1.1 200 OK`, provider.Verdict{Outcome: provider.OutcomeUnknown, Reason: `unrecognised SMTP answer: HTTP/1.1 200 OK`}},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, provider.ClassifySMTP([]byte(tt.raw)), tt.raw)
	}
}
