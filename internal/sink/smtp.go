package sink

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/mail"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
)

// SMTPMessage is one message the SMTP sink accepted.
type SMTPMessage struct {
	From      string   // envelope sender (MAIL FROM)
	Rcpts     []string // envelope recipients (RCPT TO)
	Data      []byte   // the message as received (RFC 5322)
	MessageID string   // the Message-ID header, with its angle brackets
	User      string   // the authenticated user, "" without AUTH
	Receipt   string   // the queue id the sink answered ("" when dropped)
	Dropped   bool     // accepted but the connection was dropped before the 250
	At        time.Time
}

// SMTP is an SMTP server on 127.0.0.1 without TLS that accepts any AUTH
// PLAIN credentials (or none) and records every message it accepts. A
// message is accepted when the sink decided to answer 250 after DATA, or
// when it was told to drop the connection instead of answering
// (DropAfterData): then it was delivered but the client never hears so.
type SMTP struct {
	srv    *smtp.Server
	ln     net.Listener
	served chan struct{}

	mu          sync.Mutex
	msgs        []SMTPMessage
	conns       int
	seq         int
	failN       int
	failCode    int
	failMsg     string
	delay       time.Duration
	dropN       int
	rejectRcpts map[string]int
	// DedupeByHeader: a message whose header dedupeHeader repeats a value
	// first seen less than dedupeWindow ago is answered 250 and not
	// delivered again.
	dedupeHeader string
	dedupeWindow time.Duration
	dedupeSeen   map[string]smtpSeen
	deduped      int
}

// NewSMTP starts an SMTP sink on 127.0.0.1 on a free port.
func NewSMTP() (*SMTP, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("smtp sink: %w", err)
	}
	s := &SMTP{ln: ln, served: make(chan struct{}), rejectRcpts: map[string]int{}}
	s.srv = smtp.NewServer(smtp.BackendFunc(s.newSession))
	s.srv.Domain = "sink.onceplan.test"
	s.srv.AllowInsecureAuth = true
	s.srv.ReadTimeout = time.Minute
	s.srv.WriteTimeout = time.Minute
	s.srv.ErrorLog = log.New(io.Discard, "", 0)
	go func() {
		defer close(s.served)
		_ = s.srv.Serve(ln)
	}()
	return s, nil
}

// Addr is the sink's host:port.
func (s *SMTP) Addr() string { return s.ln.Addr().String() }

// URL is the provider URL of the sink: smtp://127.0.0.1:PORT?tls=none.
func (s *SMTP) URL() string { return "smtp://" + s.Addr() + "?tls=none" }

// Close stops the server and closes every connection.
func (s *SMTP) Close() {
	_ = s.srv.Close()
	// go-smtp closes only the listeners Serve has registered: when Close
	// comes before the serving goroutine has started, Serve would then
	// accept forever. Closing the listener here makes it return either way.
	_ = s.ln.Close()
	<-s.served
}

// Messages returns the accepted messages, in order.
func (s *SMTP) Messages() []SMTPMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]SMTPMessage, len(s.msgs))
	copy(out, s.msgs)
	return out
}

// CountByMessageID counts accepted messages per Message-ID header.
func (s *SMTP) CountByMessageID() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for _, m := range s.msgs {
		out[m.MessageID]++
	}
	return out
}

// Connections is the number of connections (SMTP sessions) opened so far.
func (s *SMTP) Connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns
}

// FailNext makes the next n messages be answered code and msg at the end of
// DATA (e.g. 550, 421, 451) and not be accepted.
func (s *SMTP) FailNext(n, code int, msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failN, s.failCode, s.failMsg = n, code, msg
}

// DelayData makes the sink wait d after receiving a message before it
// answers (0: answer at once).
func (s *SMTP) DelayData(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.delay = d
}

// DropAfterData makes the sink accept and record the next n messages, then
// close the connection without answering: delivered, but the client cannot
// know.
func (s *SMTP) DropAfterData(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropN = n
}

// DedupeByHeader makes the sink deduplicate as a relay with an
// idempotency header does (Resend's Resend-Idempotency-Key, EmailEngine's
// X-EE-Idempotency-Key): a message whose header name repeats a value first
// delivered less than window ago is answered 250 and delivered nothing
// new (not in Messages; counted by Deduplicated). A dropped message
// (DropAfterData) was delivered, so its value counts as seen.
func (s *SMTP) DedupeByHeader(name string, window time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dedupeHeader, s.dedupeWindow = name, window
	if s.dedupeSeen == nil {
		s.dedupeSeen = map[string]smtpSeen{}
	}
}

// Deduplicated is the number of repeats DedupeByHeader answered 250
// without delivering.
func (s *SMTP) Deduplicated() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deduped
}

// CountByHeader counts accepted messages per value of header name.
func (s *SMTP) CountByHeader(name string) map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for _, m := range s.msgs {
		if parsed, err := mail.ReadMessage(bytes.NewReader(m.Data)); err == nil {
			out[parsed.Header.Get(name)]++
		}
	}
	return out
}

// smtpSeen is the first delivery of an idempotency header's value.
type smtpSeen struct {
	at      time.Time
	receipt string
}

// RejectRcpt makes RCPT TO addr be answered code (0 stops rejecting it).
func (s *SMTP) RejectRcpt(addr string, code int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if code == 0 {
		delete(s.rejectRcpts, strings.ToLower(addr))
		return
	}
	s.rejectRcpts[strings.ToLower(addr)] = code
}

func (s *SMTP) newSession(c *smtp.Conn) (smtp.Session, error) {
	s.mu.Lock()
	s.conns++
	s.mu.Unlock()
	return &smtpSession{sink: s, conn: c}, nil
}

type smtpSession struct {
	sink  *SMTP
	conn  *smtp.Conn
	user  string
	from  string
	rcpts []string
}

var _ smtp.AuthSession = (*smtpSession)(nil)

func (ss *smtpSession) AuthMechanisms() []string { return []string{sasl.Plain} }

func (ss *smtpSession) Auth(string) (sasl.Server, error) {
	return sasl.NewPlainServer(func(_, username, _ string) error {
		ss.user = username
		return nil
	}), nil
}

func (ss *smtpSession) Mail(from string, _ *smtp.MailOptions) error {
	ss.from = from
	return nil
}

func (ss *smtpSession) Rcpt(to string, _ *smtp.RcptOptions) error {
	ss.sink.mu.Lock()
	code := ss.sink.rejectRcpts[strings.ToLower(to)]
	ss.sink.mu.Unlock()
	if code != 0 {
		return smtpError(code, "recipient <"+to+"> rejected by the sink")
	}
	ss.rcpts = append(ss.rcpts, to)
	return nil
}

func (ss *smtpSession) Data(r io.Reader) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	s := ss.sink
	s.mu.Lock()
	if s.failN > 0 {
		s.failN--
		code, msg := s.failCode, s.failMsg
		s.mu.Unlock()
		return smtpError(code, msg)
	}
	delay := s.delay
	drop := s.dropN > 0
	if drop {
		s.dropN--
	}
	s.mu.Unlock()

	if delay > 0 {
		time.Sleep(delay)
	}
	m := SMTPMessage{
		From:    ss.from,
		Rcpts:   append([]string(nil), ss.rcpts...),
		Data:    data,
		User:    ss.user,
		Dropped: drop,
		At:      time.Now(),
	}
	var header mail.Header // nil when the message does not parse
	if parsed, err := mail.ReadMessage(bytes.NewReader(data)); err == nil {
		m.MessageID = parsed.Header.Get("Message-ID")
		header = parsed.Header
	}
	s.mu.Lock()
	dedupeKey := ""
	if s.dedupeHeader != "" {
		dedupeKey = header.Get(s.dedupeHeader)
	}
	if first, seen := s.dedupeSeen[dedupeKey]; dedupeKey != "" && seen && time.Since(first.at) < s.dedupeWindow {
		s.deduped++
		s.mu.Unlock()
		return &smtp.SMTPError{Code: 250, EnhancedCode: smtp.EnhancedCode{2, 0, 0}, Message: "OK: duplicate of " + first.receipt + ", not delivered again"}
	}
	s.seq++
	m.Receipt = fmt.Sprintf("S%06d", s.seq)
	if dedupeKey != "" {
		s.dedupeSeen[dedupeKey] = smtpSeen{at: time.Now(), receipt: m.Receipt}
	}
	if drop {
		m.Receipt = ""
	}
	s.msgs = append(s.msgs, m)
	s.mu.Unlock()

	if drop {
		_ = ss.conn.Conn().Close()
		return errors.New("connection dropped by the sink")
	}
	// go-smtp answers a Data error's code and text as they are: the way to
	// give the client a queue id in the 250.
	return &smtp.SMTPError{Code: 250, EnhancedCode: smtp.EnhancedCode{2, 0, 0}, Message: "OK: queued as " + m.Receipt}
}

func (ss *smtpSession) Reset() {
	ss.from, ss.rcpts = "", nil
}

func (ss *smtpSession) Logout() error { return nil }

// smtpError is the reply "code X.Y.Z text". When msg begins with an
// enhanced status code ("5.7.1 no thanks") that code is used; otherwise the
// generic X.0.0 of code's class. go-smtp writes the enhanced code itself, so
// leaving it in msg would send it twice ("550 5.0.0 5.7.1 no thanks").
func smtpError(code int, msg string) *smtp.SMTPError {
	enh := smtp.EnhancedCode{code / 100, 0, 0}
	if first, rest, ok := strings.Cut(msg, " "); ok {
		if parsed, ok := parseEnhancedCode(first); ok {
			enh, msg = parsed, rest
		}
	}
	return &smtp.SMTPError{Code: code, EnhancedCode: enh, Message: msg}
}

// parseEnhancedCode reads an RFC 3463 status code "class.subject.detail".
func parseEnhancedCode(s string) (smtp.EnhancedCode, bool) {
	parts := strings.Split(s, ".")
	if len(parts) != 3 || (parts[0] != "2" && parts[0] != "4" && parts[0] != "5") {
		return smtp.EnhancedCode{}, false
	}
	var ec smtp.EnhancedCode
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || n > 999 || len(p) > 3 {
			return smtp.EnhancedCode{}, false
		}
		ec[i] = n
	}
	return ec, true
}
