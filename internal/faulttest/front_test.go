package faulttest

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fault is what an httpFront does with one POST.
type fault int

const (
	pass         fault = iota // forward it and relay the answer
	refuse503                 // answer 503 without forwarding: nothing applied
	applyThen503              // forward it (applied), then answer 503
	applyThenRST              // forward it (applied), then reset the connection without an answer
)

// httpFront is an HTTP server in front of a webhook sink that injects a
// fault into chosen POSTs: the n-th POST (from 1) gets faultFor(n). GETs
// are forwarded as they are.
type httpFront struct {
	srv      *http.Server
	ln       net.Listener
	backend  string // the sink's base URL, http://host:port
	faultFor func(n int) fault

	mu     sync.Mutex
	posts  int
	faults map[fault]int
}

func newHTTPFront(t *testing.T, sinkURL string, faultFor func(n int) fault) *httpFront {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	base, _, _ := strings.Cut(sinkURL, "/hook")
	f := &httpFront{ln: ln, backend: base, faultFor: faultFor, faults: map[fault]int{}}
	f.srv = &http.Server{Handler: http.HandlerFunc(f.serve), ReadHeaderTimeout: 10 * time.Second}
	go f.srv.Serve(ln)
	t.Cleanup(func() { f.srv.Close() })
	return f
}

// URL is the provider URL of the front (the hook, deduplicating).
func (f *httpFront) URL() string { return "http://" + f.ln.Addr().String() + "/hook?dedupe=true" }

// Counts returns the POSTs received and the faults injected.
func (f *httpFront) Counts() (int, map[fault]int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[fault]int, len(f.faults))
	for k, v := range f.faults {
		out[k] = v
	}
	return f.posts, out
}

func (f *httpFront) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	what := pass
	if r.Method == http.MethodPost {
		f.mu.Lock()
		f.posts++
		what = f.faultFor(f.posts)
		f.faults[what]++
		f.mu.Unlock()
	}
	if what == refuse503 {
		http.Error(w, "the front refuses this call", http.StatusServiceUnavailable)
		return
	}
	req, _ := http.NewRequestWithContext(r.Context(), r.Method, f.backend+r.URL.RequestURI(), bytes.NewReader(body))
	req.Header = r.Header.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		http.Error(w, "the front could not reach the sink: "+err.Error(), http.StatusBadGateway)
		return
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	switch what {
	case applyThen503:
		http.Error(w, "the front applied the call, then failed", http.StatusServiceUnavailable)
	case applyThenRST:
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			http.Error(w, "the front cannot reset this connection: "+err.Error(), http.StatusInternalServerError)
			return
		}
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // close with RST, not FIN
		}
		conn.Close()
	default:
		for k, vs := range resp.Header {
			for _, v := range vs {
				w.Header().Add(k, v)
			}
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(answer)
	}
}

// tcpSwitch is a TCP proxy in front of a provider that can be taken down
// (its port closed: connections are refused) and brought back on the same
// port.
type tcpSwitch struct {
	addr    string
	backend string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func newTCPSwitch(t *testing.T, backend string) *tcpSwitch {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &tcpSwitch{addr: ln.Addr().String(), backend: backend, conns: map[net.Conn]struct{}{}}
	s.serve(ln)
	t.Cleanup(func() { s.down(); s.wg.Wait() })
	return s
}

func (s *tcpSwitch) serve(ln net.Listener) {
	s.ln = ln
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.wg.Add(1)
			go s.pipe(c)
		}
	}()
}

func (s *tcpSwitch) pipe(c net.Conn) {
	defer s.wg.Done()
	b, err := net.Dial("tcp", s.backend)
	if err != nil {
		c.Close()
		return
	}
	s.mu.Lock()
	s.conns[c], s.conns[b] = struct{}{}, struct{}{}
	s.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(b, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, b); done <- struct{}{} }()
	<-done
	c.Close()
	b.Close()
	<-done
	s.mu.Lock()
	delete(s.conns, c)
	delete(s.conns, b)
	s.mu.Unlock()
}

// down closes the port and every connection through it.
func (s *tcpSwitch) down() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln != nil {
		s.ln.Close()
		s.ln = nil
	}
	for c := range s.conns {
		c.Close()
	}
}

// up opens the port again.
func (s *tcpSwitch) up(t *testing.T) {
	t.Helper()
	// The port was ours a moment ago; another process could take it in
	// between, but on a test machine that does not happen in practice.
	ln, err := net.Listen("tcp", s.addr)
	for i := 0; i < 50 && errors.Is(err, syscall.EADDRINUSE); i++ {
		time.Sleep(100 * time.Millisecond)
		ln, err = net.Listen("tcp", s.addr)
	}
	require.NoError(t, err, "reopening %s", s.addr)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.serve(ln)
}
