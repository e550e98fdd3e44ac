package sink

import (
	"io"
	"net/http"
	"time"
)

// The failures on command the HTTP sinks share.

// cannedFailure is what FailNext told an HTTP sink: answer the next n
// requests status, headers and body, and apply nothing. The sink's mutex
// guards it.
type cannedFailure struct {
	n       int
	status  int
	headers map[string]string
	body    string
}

// set arms the next n failures (headers copied).
func (f *cannedFailure) set(n, status int, headers map[string]string, body string) {
	*f = cannedFailure{n: n, status: status, headers: make(map[string]string, len(headers)), body: body}
	for k, v := range headers {
		f.headers[k] = v
	}
}

// take uses up one failure: ok is false when none is left.
func (f *cannedFailure) take() (cannedFailure, bool) {
	if f.n <= 0 {
		return cannedFailure{}, false
	}
	f.n--
	return *f, true
}

// write answers the failure; contentType, when set, replaces a
// Content-Type among the headers.
func (f cannedFailure) write(rw http.ResponseWriter, contentType string) {
	for k, v := range f.headers {
		rw.Header().Set(k, v)
	}
	if contentType != "" {
		rw.Header().Set("Content-Type", contentType)
	}
	rw.WriteHeader(f.status)
	_, _ = io.WriteString(rw, f.body)
}

// afterApply is what an HTTP sink does after applying a request, on
// command (ApplyThenFail, ApplyThenDrop, ApplyThenHang): answer failN
// requests failStatus, drop the connection of dropN, or hang hangN for
// hangFor, in that order of precedence. The sink's mutex guards it.
type afterApply struct {
	failN, failStatus int
	dropN             int
	hangN             int
	hangFor           time.Duration
}

// applied is what one applied request gets: a failure status (0: none),
// a dropped connection, or a wait of hangFor before the answer.
type applied struct {
	failStatus int
	drop, hang bool
	hangFor    time.Duration
}

// next uses up what the next applied request gets.
func (a *afterApply) next() applied {
	var t applied
	if a.failN > 0 {
		a.failN--
		t.failStatus = a.failStatus
	}
	if t.failStatus == 0 && a.dropN > 0 {
		a.dropN--
		t.drop = true
	}
	if t.failStatus == 0 && !t.drop && a.hangN > 0 {
		a.hangN--
		t.hang, t.hangFor = true, a.hangFor
	}
	return t
}

// dropConnection closes the request's connection without an answer.
func dropConnection(rw http.ResponseWriter) {
	if hj, ok := rw.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			_ = conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler) // closes the connection unanswered
}
