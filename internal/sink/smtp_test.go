package sink_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/textproto"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/await"
	"github.com/onceplan/onceplan/internal/sink"
)

func newSMTPSink(t *testing.T) *sink.SMTP {
	t.Helper()
	s, err := sink.NewSMTP()
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s
}

// smtpConn is a plain SMTP dialog, so the tests see the sink's replies as
// a client receives them.
type smtpConn struct{ *textproto.Conn }

func dialSMTP(addr string) (*smtpConn, error) {
	c, err := textproto.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	sc := &smtpConn{c}
	if _, _, err := c.ReadResponse(220); err != nil {
		c.Close()
		return nil, err
	}
	if _, _, err := sc.cmd("EHLO client.test"); err != nil {
		c.Close()
		return nil, err
	}
	return sc, nil
}

func mustDialSMTP(t *testing.T, s *sink.SMTP) *smtpConn {
	t.Helper()
	c, err := dialSMTP(s.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// cmd sends one command and reads the reply, whatever its code.
func (c *smtpConn) cmd(format string, args ...any) (int, string, error) {
	id, err := c.Cmd(format, args...)
	if err != nil {
		return 0, "", err
	}
	c.StartResponse(id)
	defer c.EndResponse(id)
	return c.ReadResponse(0)
}

// reply is one SMTP reply as "code text".
func reply(code int, msg string, err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	return fmt.Sprintf("%d %s", code, msg)
}

// send runs MAIL, RCPT and DATA and returns the reply to the end of DATA
// (or to the first command refused).
func (c *smtpConn) send(from string, rcpts []string, data string) string {
	if code, msg, err := c.cmd("MAIL FROM:<%s>", from); err != nil || code != 250 {
		return reply(code, msg, err)
	}
	for _, r := range rcpts {
		if code, msg, err := c.cmd("RCPT TO:<%s>", r); err != nil || code != 250 {
			return reply(code, msg, err)
		}
	}
	if code, msg, err := c.cmd("DATA"); err != nil || code != 354 {
		return reply(code, msg, err)
	}
	w := c.DotWriter()
	if _, err := io.WriteString(w, data); err != nil {
		return reply(0, "", err)
	}
	if err := w.Close(); err != nil {
		return reply(0, "", err)
	}
	return reply(c.ReadResponse(0))
}

func message(id string) string {
	h := "From: news@onceplan.test\r\nTo: ada@example.test\r\nSubject: Hello\r\n"
	if id != "" {
		h += "Message-ID: " + id + "\r\n"
	}
	return h + "\r\nHello Ada,\r\n.a line with a leading dot\r\n"
}

func TestSMTPSinkRecordsAcceptedMessages(t *testing.T) {
	t.Parallel()
	s := newSMTPSink(t)
	require.Equal(t, "smtp://"+s.Addr()+"?tls=none", s.URL())
	c := mustDialSMTP(t, s)

	require.Equal(t, "250 2.0.0 OK: queued as S000001",
		c.send("news@onceplan.test", []string{"ada@example.test", "bob@example.test"}, message("<m-1@onceplan>")))
	require.Equal(t, "250 2.0.0 OK: queued as S000002",
		c.send("other@onceplan.test", []string{"cy@example.test"}, message("<m-2@onceplan>")))

	msgs := s.Messages()
	require.Len(t, msgs, 2)
	require.Equal(t, "news@onceplan.test", msgs[0].From)
	require.Equal(t, []string{"ada@example.test", "bob@example.test"}, msgs[0].Rcpts)
	require.Equal(t, "<m-1@onceplan>", msgs[0].MessageID)
	require.Equal(t, "S000001", msgs[0].Receipt)
	require.Empty(t, msgs[0].User, "no AUTH")
	require.False(t, msgs[0].Dropped)
	require.False(t, msgs[0].At.IsZero())
	require.Contains(t, string(msgs[0].Data), "Subject: Hello")
	require.Contains(t, string(msgs[0].Data), "\n.a line with a leading dot", "dot-stuffing is undone")
	require.Equal(t, "other@onceplan.test", msgs[1].From)
	require.Equal(t, []string{"cy@example.test"}, msgs[1].Rcpts, "the envelope is reset between messages")
	require.Equal(t, 1, s.Connections())
}

func TestSMTPSinkCountsDuplicatesByMessageID(t *testing.T) {
	t.Parallel()
	s := newSMTPSink(t)
	c := mustDialSMTP(t, s)
	for _, id := range []string{"<m-1@onceplan>", "<m-1@onceplan>", "<m-2@onceplan>", ""} {
		require.True(t, strings.HasPrefix(c.send("news@onceplan.test", []string{"ada@example.test"}, message(id)), "250 "))
	}
	require.Equal(t, map[string]int{"<m-1@onceplan>": 2, "<m-2@onceplan>": 1, "": 1}, s.CountByMessageID())
}

func TestSMTPSinkFailNext(t *testing.T) {
	t.Parallel()
	tests := []struct {
		code int
		msg  string
		want string
	}{
		{550, "5.7.1 message refused", "550 5.7.1 message refused"},
		{421, "4.7.0 try again later", "421 4.7.0 try again later"},
		{451, "rate limited", "451 4.0.0 rate limited"},     // no enhanced code given: the generic one
		{554, "5.7 not a code", "554 5.0.0 5.7 not a code"}, // not an enhanced code: left in the text
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			t.Parallel()
			s := newSMTPSink(t)
			c := mustDialSMTP(t, s)
			s.FailNext(2, tt.code, tt.msg)
			for range 2 {
				require.Equal(t, tt.want, c.send("news@onceplan.test", []string{"ada@example.test"}, message("<m@onceplan>")))
			}
			require.Empty(t, s.Messages(), "a refused message is not accepted")
			require.Equal(t, "250 2.0.0 OK: queued as S000001", c.send("news@onceplan.test", []string{"ada@example.test"}, message("<m@onceplan>")))
			require.Len(t, s.Messages(), 1)
		})
	}
}

func TestSMTPSinkRejectRcpt(t *testing.T) {
	t.Parallel()
	s := newSMTPSink(t)
	c := mustDialSMTP(t, s)
	s.RejectRcpt("Ada@Example.TEST", 452)
	require.Equal(t, "452 4.0.0 recipient <ada@example.test> rejected by the sink",
		c.send("news@onceplan.test", []string{"ada@example.test"}, message("")), "addresses compare without case")
	_, _, err := c.cmd("RSET")
	require.NoError(t, err)
	s.RejectRcpt("ada@example.test", 0)
	require.Equal(t, "250 2.0.0 OK: queued as S000001", c.send("news@onceplan.test", []string{"ada@example.test"}, message("")))
	require.Equal(t, []string{"ada@example.test"}, s.Messages()[0].Rcpts)
}

func TestSMTPSinkDropAfterData(t *testing.T) {
	t.Parallel()
	s := newSMTPSink(t)
	s.DropAfterData(2)
	for range 2 {
		c := mustDialSMTP(t, s)
		got := c.send("news@onceplan.test", []string{"ada@example.test"}, message("<m-1@onceplan>"))
		require.True(t, strings.HasPrefix(got, "error: "), "no reply, the connection is gone: %s", got)
	}
	c := mustDialSMTP(t, s)
	require.Equal(t, "250 2.0.0 OK: queued as S000003", c.send("news@onceplan.test", []string{"ada@example.test"}, message("<m-1@onceplan>")))

	msgs := s.Messages()
	require.Len(t, msgs, 3, "dropped messages were delivered")
	for _, m := range msgs[:2] {
		require.True(t, m.Dropped)
		require.Empty(t, m.Receipt, "the client never got a queue id")
	}
	require.False(t, msgs[2].Dropped)
	require.Equal(t, map[string]int{"<m-1@onceplan>": 3}, s.CountByMessageID())
	require.Equal(t, 3, s.Connections())
}

func TestSMTPSinkDelayData(t *testing.T) {
	t.Parallel()
	s := newSMTPSink(t)
	c := mustDialSMTP(t, s)
	s.DelayData(100 * time.Millisecond)
	start := time.Now()
	require.Equal(t, "250 2.0.0 OK: queued as S000001", c.send("news@onceplan.test", []string{"ada@example.test"}, message("")))
	require.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond)
	s.DelayData(0)
	require.Equal(t, "250 2.0.0 OK: queued as S000002", c.send("news@onceplan.test", []string{"ada@example.test"}, message("")))
}

func TestSMTPSinkCountsExactlyUnderConcurrency(t *testing.T) {
	t.Parallel()
	s := newSMTPSink(t)
	const n = 20
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			c, err := dialSMTP(s.Addr())
			if err != nil {
				errs[i] = err
				return
			}
			defer c.Close()
			if got := c.send("news@onceplan.test", []string{"ada@example.test"}, message(fmt.Sprintf("<m-%d@onceplan>", i))); !strings.HasPrefix(got, "250 ") {
				errs[i] = errors.New(got)
			}
		})
	}
	await.Group(t, &wg, time.Minute, "the concurrent SMTP sessions to end")
	require.NoError(t, errors.Join(errs...))
	require.Len(t, s.CountByMessageID(), n)
	receipts := map[string]bool{}
	for _, m := range s.Messages() {
		receipts[m.Receipt] = true
	}
	require.Len(t, receipts, n, "every message has its own queue id")
	require.Equal(t, n, s.Connections())
}

func TestSMTPSinkClose(t *testing.T) {
	t.Parallel()
	// Closing at once, before the server goroutine has run, returns.
	for range 20 {
		s, err := sink.NewSMTP()
		require.NoError(t, err)
		done := make(chan struct{})
		go func() { s.Close(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("Close did not return")
		}
	}

	// Close ends open sessions and refuses new ones, and keeps the record.
	s, err := sink.NewSMTP()
	require.NoError(t, err)
	c, err := dialSMTP(s.Addr())
	require.NoError(t, err)
	defer c.Close()
	require.True(t, strings.HasPrefix(c.send("news@onceplan.test", []string{"ada@example.test"}, message("")), "250 "))
	s.Close()
	_, _, err = c.cmd("NOOP")
	require.Error(t, err, "the session was closed")
	_, err = net.DialTimeout("tcp", s.Addr(), time.Second)
	require.Error(t, err)
	require.Len(t, s.Messages(), 1)
}
