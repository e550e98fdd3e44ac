package sink

import (
	"bytes"
	"encoding/base64"
	"io"
	"mime"
	"mime/quotedprintable"
	"net/http"
	"net/http/httptest"
	"net/mail"
	"strings"
	"sync"
	"time"
)

// ReceivedRequest is one request a Receiver got.
type ReceivedRequest struct {
	Header http.Header
	Body   []byte
	// Status is what the receiver answered (0: it hung until the client
	// went away).
	Status int
	At     time.Time
}

// Receiver is an HTTP server on 127.0.0.1 that takes any POST, as a
// notification webhook (Slack's incoming webhook, a team's own endpoint)
// does: it records the headers and body and answers 200 "ok", or fails on
// command (an error status, or hanging before it answers).
type Receiver struct {
	srv *httptest.Server

	mu       sync.Mutex
	requests []ReceivedRequest
	after    afterApply // dropN unused: a receiver does not drop
}

// NewReceiver starts a receiver.
func NewReceiver() *Receiver {
	r := &Receiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	return r
}

// URL is where to post: http://127.0.0.1:PORT/hook.
func (r *Receiver) URL() string { return r.srv.URL + "/hook" }

// Close stops the server (waiting for requests in progress).
func (r *Receiver) Close() {
	r.srv.CloseClientConnections()
	r.srv.Close()
}

// FailNext answers the next n requests with status (e.g. 500), recorded.
func (r *Receiver) FailNext(n, status int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.after.failN, r.after.failStatus = n, status
}

// HangNext makes the next n requests wait d (or until the client goes
// away) before answering 200.
func (r *Receiver) HangNext(n int, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.after.hangN, r.after.hangFor = n, d
}

// Requests returns the requests received, in order.
func (r *Receiver) Requests() []ReceivedRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]ReceivedRequest, len(r.requests))
	copy(out, r.requests)
	return out
}

// Accepted returns the requests answered 2xx, in order.
func (r *Receiver) Accepted() []ReceivedRequest {
	var out []ReceivedRequest
	for _, q := range r.Requests() {
		if q.Status >= 200 && q.Status < 300 {
			out = append(out, q)
		}
	}
	return out
}

func (r *Receiver) serve(rw http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(req.Body, 8<<20))
	r.mu.Lock()
	rec := ReceivedRequest{Header: req.Header.Clone(), Body: body, At: time.Now(), Status: http.StatusOK}
	then := r.after.next()
	if then.failStatus != 0 {
		rec.Status = then.failStatus
	}
	i := len(r.requests)
	r.requests = append(r.requests, rec)
	r.mu.Unlock()

	if then.hang && then.hangFor > 0 {
		t := time.NewTimer(then.hangFor)
		defer t.Stop()
		select {
		case <-t.C:
		case <-req.Context().Done():
			r.mu.Lock()
			r.requests[i].Status = 0
			r.mu.Unlock()
			return
		}
	}
	rw.WriteHeader(rec.Status)
	if rec.Status == http.StatusOK {
		io.WriteString(rw, "ok")
	} else {
		io.WriteString(rw, "the receiver was told to fail")
	}
}

// Content is an accepted message's decoded subject and text (a
// single-part message, quoted-printable or base64, with LF line ends).
func (m SMTPMessage) Content() (subject, text string, err error) {
	msg, err := mail.ReadMessage(bytes.NewReader(m.Data))
	if err != nil {
		return "", "", err
	}
	subject, err = new(mime.WordDecoder).DecodeHeader(msg.Header.Get("Subject"))
	if err != nil {
		return "", "", err
	}
	var r io.Reader = msg.Body
	switch strings.ToLower(msg.Header.Get("Content-Transfer-Encoding")) {
	case "quoted-printable":
		r = quotedprintable.NewReader(r)
	case "base64":
		r = base64.NewDecoder(base64.StdEncoding, r)
	}
	b, err := io.ReadAll(r)
	return subject, strings.ReplaceAll(string(b), "\r\n", "\n"), err
}
