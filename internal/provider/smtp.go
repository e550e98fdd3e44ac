package provider

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/textproto"
	"net/url"
	"regexp"
	"strconv"
	"sync"
	"time"

	gomail "github.com/wneessen/go-mail"
	gosmtp "github.com/wneessen/go-mail/smtp"
)

// SMTP stages, in the order a send goes through them. They are written in
// the raw answer: up to and including "data" nothing of the message has
// left, from "data-write" on it may have.
const (
	stageBuild     = "build"      // building the message (nothing sent)
	stageDial      = "dial"       // connect, greeting, EHLO, STARTTLS, AUTH
	stageMail      = "mail"       // MAIL FROM
	stageRcpt      = "rcpt"       // RCPT TO
	stageData      = "data"       // the DATA command, before the server's 354
	stageDataWrite = "data-write" // writing the message after the 354
	stageDataClose = "data-close" // the terminating "." sent; the final reply
)

// smtpTag starts every SMTP raw answer.
const smtpTag = "smtp"

// smtpAnswer is what one SMTP send produced.
type smtpAnswer struct {
	stage string
	code  int    // the server's reply code; 0 when there was no reply
	reply string // the reply text after the code (multi-line joined by \n)
	err   string // a transport or local error, when there was no reply
}

// encode writes the raw answer, one line:
//
//	smtp stage=data-close code=250 reply="2.0.0 OK: queued as 7F3A"
//	smtp stage=rcpt code=550 reply="5.1.1 no such user"
//	smtp stage=dial error="dial tcp 127.0.0.1:2525: connect: connection refused"
//	smtp stage=data-close error="read tcp …: i/o timeout"
//
// Values with spaces, quotes or non-ASCII bytes are Go-quoted
// (strconv.Quote), others are bare tokens. Unknown keys are ignored by ClassifySMTP.
func (a smtpAnswer) encode() []byte {
	fs := []field{{"stage", a.stage}}
	if a.code != 0 {
		fs = append(fs, field{"code", strconv.Itoa(a.code)})
		fs = append(fs, field{"reply", a.reply})
	}
	if a.err != "" {
		fs = append(fs, field{"error", a.err})
	}
	return encodeLine(smtpTag, fs...)
}

// answerFromErr records err at stage: the server's reply when err is one,
// else the error text.
func answerFromErr(stage string, err error) smtpAnswer {
	var te *textproto.Error
	if errors.As(err, &te) && te.Code > 0 {
		return smtpAnswer{stage: stage, code: te.Code, reply: te.Msg}
	}
	return smtpAnswer{stage: stage, err: err.Error()}
}

type smtpProvider struct {
	*limiter
	name    string
	url     string // redacted
	host    string
	port    int
	tlsMode string
	user    string
	pass    string
	timeout time.Duration
	probe   *smtpProbe // nil without probe=…
	// idempotency_header=NAME: the header that carries the effect id,
	// and how long the relay deduplicates by it (smtp_dedupe.go).
	idemHeader   string
	dedupeWindow time.Duration

	mu     sync.Mutex
	closed bool
	// slots holds one go-mail Client per concurrency slot, each with at most
	// one open connection that is reused across sends.
	slots chan *smtpSlot
}

type smtpSlot struct {
	client *gomail.Client
	conn   *gosmtp.Client // nil: not connected
	raw    net.Conn       // the socket under conn, for deadlines
}

// connHolderKey carries a *net.Conn through go-mail's dial so the socket can
// be given deadlines and interrupted when ctx ends.
type connHolderKey struct{}

func newSMTPFromURL(name string, u *url.URL, o options) (Provider, error) {
	if u.Opaque != "" || u.Hostname() == "" {
		return nil, errorf(name, "smtp URL has no host (want smtp://[user:pass@]host:port)")
	}
	if u.Path != "" && u.Path != "/" {
		return nil, errorf(name, "smtp URL must not have a path (got %q)", u.Path)
	}
	if o.settleSet && o.probe == "" {
		return nil, errorf(name, "settle applies only to a provider that can be probed (maildir, http with probe=URL, smtp with probe=postmark|mailjet)")
	}
	p := &smtpProvider{
		limiter: newLimiter(o.perSecond, o.concurrency, o.rateScope),
		name:    name,
		url:     u.Redacted(),
		host:    u.Hostname(),
		tlsMode: o.tls,
		timeout: o.timeout,
		slots:   make(chan *smtpSlot, o.concurrency),
	}
	if err := p.configureDedupe(o); err != nil {
		return nil, err
	}
	if ps := u.Port(); ps != "" {
		n, err := strconv.Atoi(ps)
		if err != nil || n < 1 || n > 65535 {
			return nil, errorf(name, "smtp port %q is not a number from 1 to 65535", ps)
		}
		p.port = n
	}
	switch {
	case p.port == 0 && p.tlsMode == "tls":
		p.port = 465
	case p.port == 0 && p.tlsMode == "starttls":
		p.port = 587
	case p.port == 0:
		p.port = 25
	}
	if p.tlsMode == "" {
		switch p.port {
		case 465:
			p.tlsMode = "tls"
		case 587:
			p.tlsMode = "starttls"
		default:
			p.tlsMode = "none"
		}
	}
	if u.User != nil {
		p.user = u.User.Username()
		p.pass, _ = u.User.Password()
	}
	var err error
	if p.probe, err = newSMTPProbe(name, p.user, p.pass, o); err != nil {
		return nil, err
	}
	for range o.concurrency {
		c, err := p.newClient()
		if err != nil {
			return nil, errorf(name, "cannot configure the SMTP client: %v", err)
		}
		p.slots <- &smtpSlot{client: c}
	}
	return p, nil
}

func (p *smtpProvider) newClient() (*gomail.Client, error) {
	tlsConfig := &tls.Config{ServerName: p.host, MinVersion: tls.VersionTLS12}
	opts := []gomail.Option{
		gomail.WithPort(p.port),
		gomail.WithTimeout(p.timeout),
		gomail.WithTLSConfig(tlsConfig),
		gomail.WithDialContextFunc(func(ctx context.Context, network, addr string) (net.Conn, error) {
			var d net.Dialer
			var c net.Conn
			var err error
			if p.tlsMode == "tls" {
				c, err = (&tls.Dialer{NetDialer: &d, Config: tlsConfig}).DialContext(ctx, network, addr)
			} else {
				c, err = d.DialContext(ctx, network, addr)
			}
			if h, ok := ctx.Value(connHolderKey{}).(*net.Conn); ok && err == nil {
				*h = c
			}
			return c, err
		}),
	}
	switch p.tlsMode {
	case "starttls":
		opts = append(opts, gomail.WithTLSPolicy(gomail.TLSMandatory))
	default: // "none", or "tls" done by the dialer above
		opts = append(opts, gomail.WithTLSPolicy(gomail.NoTLS))
	}
	if p.user != "" {
		// PLAIN and LOGIN refuse to send the password unless the connection
		// is TLS or the server is localhost (go-mail's rule).
		opts = append(opts,
			gomail.WithOpportunisticSMTPAuth(gomail.SMTPAuthSCRAMSHA256, gomail.SMTPAuthSCRAMSHA1,
				gomail.SMTPAuthCramMD5, gomail.SMTPAuthPlain, gomail.SMTPAuthLogin),
			gomail.WithUsername(p.user), gomail.WithPassword(p.pass))
	}
	return gomail.NewClient(p.host, opts...)
}

func (p *smtpProvider) Name() string   { return p.name }
func (p *smtpProvider) Kind() string   { return "smtp" }
func (p *smtpProvider) String() string { return p.name + "=" + p.url }

// Capabilities: none. An SMTP relay keeps no record it will answer
// questions about, and a repeat is a second message; so an attempt whose
// worker died during the call, or whose answer was lost, is unknown until a
// human says whether it arrived.
//
// With probe=postmark|mailjet the relay's API can be asked, within its
// retention (smtp_probe.go). With idempotency_header=NAME the relay
// deduplicates a repeat by that header, within its window (smtp_dedupe.go).
func (p *smtpProvider) Capabilities() Capabilities { return p.withDedupe(p.probe.capabilities()) }

// Probe asks the relay's API (probe=…); without it, SMTP cannot be asked.
func (p *smtpProvider) Probe(ctx context.Context, key string, epoch int) (ProbeResult, error) {
	return p.probe.probe(ctx, key, epoch)
}

// Send sends the message in one SMTP transaction over the slot's
// connection (dialled when there is none). A connection that has been
// idle may have been closed by the server: when a reused connection fails
// at MAIL FROM without a reply (nothing of the message has left), Send
// dials once more and starts again. After any failure the connection is
// dropped; after a success it is kept for the next send.
func (p *smtpProvider) Send(ctx context.Context, r Request) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	msg, err := newMsg(r, time.Now())
	if err != nil {
		return smtpAnswer{stage: stageBuild, err: err.Error()}.encode(), nil
	}
	p.probe.addHeader(msg, r)
	p.markIdempotency(msg, r)
	from, err := msg.GetSender(false)
	if err != nil {
		return smtpAnswer{stage: stageBuild, err: err.Error()}.encode(), nil
	}
	rcpts, err := msg.GetRecipients()
	if err != nil {
		return smtpAnswer{stage: stageBuild, err: err.Error()}.encode(), nil
	}

	var slot *smtpSlot
	select {
	case slot = <-p.slots:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { p.slots <- slot }()

	reused := slot.conn != nil
	a := p.transaction(ctx, slot, msg, from, rcpts)
	if reused && a.stage == stageMail && a.code == 0 && ctx.Err() == nil {
		a = p.transaction(ctx, slot, msg, from, rcpts)
	}
	return a.encode(), nil
}

// transaction runs one MAIL/RCPT/DATA exchange, dialling first when the
// slot has no connection.
func (p *smtpProvider) transaction(ctx context.Context, slot *smtpSlot, msg *gomail.Msg, from string, rcpts []string) (a smtpAnswer) {
	if slot.conn == nil {
		var raw net.Conn
		c, err := slot.client.DialToSMTPClientWithContext(context.WithValue(ctx, connHolderKey{}, &raw))
		if err != nil {
			if raw != nil {
				_ = raw.Close()
			}
			a := answerFromErr(stageDial, err)
			if ctx.Err() != nil && a.code == 0 {
				a.err = ctx.Err().Error() + ": " + a.err
			}
			return a
		}
		slot.conn, slot.raw = c, raw
	}
	conn, raw := slot.conn, slot.raw
	ok := false
	defer func() {
		if !ok {
			_ = raw.Close()
			slot.conn, slot.raw = nil, nil
		}
	}()

	_ = raw.SetDeadline(time.Now().Add(p.timeout))
	interrupted := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		_ = raw.SetDeadline(time.Unix(1, 0))
		close(interrupted)
	})
	defer func() {
		if !stop() {
			// The interruption ran or is running: this connection's
			// deadline is no longer ours to trust.
			<-interrupted
			ok = false
		}
	}()
	fail := func(stage string, err error) smtpAnswer {
		a := answerFromErr(stage, err)
		if ctx.Err() != nil && a.code == 0 {
			a.err = ctx.Err().Error() + ": " + a.err
		}
		return a
	}

	if err := conn.Mail(from); err != nil {
		return fail(stageMail, err)
	}
	for _, rcpt := range rcpts {
		if err := conn.Rcpt(rcpt); err != nil {
			return fail(stageRcpt, err)
		}
	}
	w, err := conn.Data()
	if err != nil {
		return fail(stageData, err)
	}
	if _, err := msg.WriteTo(w); err != nil {
		return fail(stageDataWrite, err)
	}
	if err := w.Close(); err != nil {
		return fail(stageDataClose, err)
	}
	reply := ""
	if dc, isDC := w.(*gosmtp.DataCloser); isDC {
		reply = dc.ServerResponse()
	}
	ok = true
	return smtpAnswer{stage: stageDataClose, code: 250, reply: reply}
}

// Close ends the open connections politely (QUIT).
func (p *smtpProvider) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	p.probe.close()
	for range cap(p.slots) {
		slot := <-p.slots
		if slot.conn != nil {
			_ = slot.raw.SetDeadline(time.Now().Add(time.Second))
			_ = slot.conn.Quit()
			_ = slot.raw.Close()
			slot.conn, slot.raw = nil, nil
		}
		defer func() { p.slots <- slot }()
	}
	return nil
}

// Classify interprets an SMTP raw answer; see [ClassifySMTP].
func (p *smtpProvider) Classify(raw []byte) Verdict { return ClassifySMTP(raw) }

var queuedAsRe = regexp.MustCompile(`(?i)\bqueued as ([^\s\x00-\x1f\x7f;,()<>\[\]]+)`)

// ClassifySMTP interprets a raw answer of an SMTP Send:
//   - a 2xx reply to the end of DATA → done; the receipt is the id after
//     "queued as" when the reply has one, else the whole reply ("250 …");
//   - 421, 451, 452 at any stage → quota (SMTP names no time: 60s);
//   - any other 4xx → failed, retryable; any 5xx → failed for good;
//   - no reply, an error while connecting, at MAIL, RCPT or the DATA
//     command → failed, retryable: the message had not left;
//   - no reply while writing the message or waiting for the final reply →
//     unknown: the server may have accepted it;
//   - a message that could not be built → failed for good;
//   - anything unrecognised → unknown.
func ClassifySMTP(raw []byte) Verdict {
	f, ok := parseLine(raw, smtpTag)
	if !ok {
		return Verdict{Outcome: OutcomeUnknown, Reason: "unrecognised SMTP answer: " + oneLine(string(raw))}
	}
	stage := f["stage"]
	code := 0
	if c, err := strconv.Atoi(f["code"]); err == nil && c >= 100 && c <= 599 {
		code = c
	}
	reply := f["reply"]
	where := stageWords(stage)
	if code != 0 {
		said := oneLine(fmt.Sprintf("the server answered %d %s %s", code, oneLine(reply), where))
		switch {
		case code/100 == 2 && stage == stageDataClose:
			return Verdict{Outcome: OutcomeDone, Receipt: smtpReceipt(code, reply)}
		case code == 421 || code == 451 || code == 452:
			return Verdict{Outcome: OutcomeQuota, RetryAfter: DefaultQuotaRetryAfter, Reason: said}
		case code/100 == 4:
			return Verdict{Outcome: OutcomeFailed, Retryable: true, Reason: said}
		case code/100 == 5:
			return Verdict{Outcome: OutcomeFailed, Reason: said}
		}
		// A reply a client would not stop at (2xx before the end, 1xx,
		// 3xx): treat as no reply at that stage.
	}
	errText := oneLine(f["error"])
	switch stage {
	case stageBuild:
		return Verdict{Outcome: OutcomeFailed, Reason: "the message could not be built: " + errText}
	case stageDial:
		// No reply at all before MAIL FROM: the message never reached the
		// relay (it could not be found, refused the connection, or the
		// TLS handshake or the greeting failed).
		return Verdict{Outcome: OutcomeFailed, Retryable: true, NotSent: true,
			Reason: "the connection failed " + where + ", before the message was sent: " + errText}
	case stageMail, stageRcpt, stageData:
		return Verdict{Outcome: OutcomeFailed, Retryable: true,
			Reason: "the connection failed " + where + ", before the message was sent: " + errText}
	case stageDataWrite, stageDataClose:
		return Verdict{Outcome: OutcomeUnknown,
			Reason: "the connection failed " + where + "; the server may have accepted the message: " + errText}
	}
	return Verdict{Outcome: OutcomeUnknown, Reason: "unrecognised SMTP answer: " + oneLine(string(raw))}
}

func stageWords(stage string) string {
	switch stage {
	case stageDial:
		return "while connecting"
	case stageMail:
		return "at MAIL FROM"
	case stageRcpt:
		return "at RCPT TO"
	case stageData:
		return "at DATA"
	case stageDataWrite:
		return "while the message was being written"
	case stageDataClose:
		return "at the end of DATA"
	}
	return "at stage " + strconv.Quote(stage)
}

func smtpReceipt(code int, reply string) string {
	// The id is the server's text: keep it to what a receipt may hold (it
	// is stored and shown), falling back to the whole reply.
	if m := queuedAsRe.FindStringSubmatch(reply); m != nil {
		if id := oneLine(m[1]); id != "" {
			return id
		}
	}
	return oneLine(strconv.Itoa(code) + " " + reply)
}
