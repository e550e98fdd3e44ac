package main

// Scenario "mailpit": N messages to a real SMTP server, Mailpit (installed
// by scripts/ensure-mailpit.sh, started with --max 0 so that it keeps every
// message), sent by go-mail directly over 10 connections (a stand-in for
// listmonk's pool of 10) and by `onceplan serve` with its default settings
// and a bare smtp://127.0.0.1:PORT provider, each side twice in the order
// direct, Onceplan, Onceplan, direct. Both sides are timed until Mailpit's
// API counts all N, and every message Mailpit holds is then read back:
// each recipient exactly once.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

const (
	// mailpitVersion is the release scripts/ensure-mailpit.sh installs.
	mailpitVersion = "v1.33.1"
	// mailpitConns is go-mail direct's connections: listmonk's default
	// SMTP pool is 10.
	mailpitConns = 10
	// mailpitProvider names the campaigns' provider: configured by no
	// other scenario's processes, so each serve runs its own campaign only.
	mailpitProvider = "mailpit"
	// mailpitPoll is how often Mailpit's count is read during a run (on
	// both sides, so that both share Mailpit with the same polling): often
	// enough for a run of seconds, rarely enough not to load Mailpit (a
	// count of 10,000 messages costs it CPU and its one SQLite
	// connection).
	mailpitPoll = 50 * time.Millisecond
)

// mailpit is a running Mailpit with its SMTP server and HTTP API on
// 127.0.0.1.
type mailpit struct {
	proc     *child
	smtpPort int
	smtpAddr string // 127.0.0.1:PORT
	api      string // http://127.0.0.1:PORT/api/v1
	http     *http.Client
}

// startMailpit installs Mailpit when needed and starts it in e's scratch
// directory on free local ports, with its database there, and waits until
// both its SMTP server and its API answer.
func startMailpit(ctx context.Context, e *procEnv) (*mailpit, error) {
	fmt.Printf("mailpit: scripts/ensure-mailpit.sh (a first run builds Mailpit %s with go install, about a minute)\n", mailpitVersion)
	var stderr strings.Builder
	cmd := exec.CommandContext(ctx, "bash", "scripts/ensure-mailpit.sh")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("scripts/ensure-mailpit.sh (run from the module root): %v\n%s", err, stderr.String())
	}
	binary := strings.TrimSpace(string(out))
	// A port picked here may be taken before Mailpit binds it: try again.
	for attempt := 1; ; attempt++ {
		m, err := tryMailpit(ctx, e, binary, attempt)
		if err == nil || attempt == 3 {
			return m, err
		}
	}
}

func tryMailpit(ctx context.Context, e *procEnv, binary string, attempt int) (*mailpit, error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	name := fmt.Sprintf("mailpit-%d", attempt)
	proc, err := e.startBinary(name, binary,
		"--max", "0", "--disable-version-check",
		"--smtp", fmt.Sprintf("127.0.0.1:%d", ports[0]),
		"--listen", fmt.Sprintf("127.0.0.1:%d", ports[1]),
		"--database", filepath.Join(e.dir, name+".db"))
	if err != nil {
		return nil, err
	}
	m := &mailpit{
		proc:     proc,
		smtpPort: ports[0],
		smtpAddr: fmt.Sprintf("127.0.0.1:%d", ports[0]),
		api:      fmt.Sprintf("http://127.0.0.1:%d/api/v1", ports[1]),
		http:     &http.Client{Timeout: time.Minute},
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if proc.exited() {
			return nil, fmt.Errorf("mailpit exited at its start:\n%s", proc.tail())
		}
		if time.Now().After(deadline) {
			proc.kill()
			return nil, fmt.Errorf("mailpit does not answer 30 s after its start:\n%s", proc.tail())
		}
		if _, err := m.total(ctx); err != nil {
			continue
		}
		if err := smtpGreets(m.smtpAddr); err != nil {
			continue
		}
		return m, nil
	}
}

// freePorts returns k distinct TCP ports free on 127.0.0.1 just now.
func freePorts(k int) ([]int, error) {
	var ports []int
	for range k {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close() // held until all k are picked, so that they differ
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// smtpGreets dials addr and reads a 220 greeting.
func smtpGreets(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "220") {
		return fmt.Errorf("greeting %q", line)
	}
	return nil
}

func (m *mailpit) close() { m.proc.stop() }

// cpu is the CPU time Mailpit has used so far.
func (m *mailpit) cpu() time.Duration { return procCPU(m.proc.cmd.Process.Pid) }

// mailpitMessage is what this scenario reads of a message summary in
// GET /api/v1/messages (Mailpit's storage.MessageSummary).
type mailpitMessage struct {
	ID        string // Mailpit's database id: one per stored message
	MessageID string
	To        []struct{ Address string }
}

// mailpitPage is the answer of GET /api/v1/messages (Mailpit's
// apiv1.MessagesSummary): the mailbox's total, and one page of it, newest
// first.
type mailpitPage struct {
	Total    int              `json:"total"`
	Messages []mailpitMessage `json:"messages"`
}

func (m *mailpit) do(ctx context.Context, method, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, method, m.api+path, nil)
	if err != nil {
		return err
	}
	resp, err := m.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("mailpit: %s %s: %s", method, path, resp.Status)
	}
	if v == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// total is the number of messages Mailpit holds.
func (m *mailpit) total(ctx context.Context) (int, error) {
	var p mailpitPage
	err := m.do(ctx, http.MethodGet, "/messages?limit=1", &p)
	return p.Total, err
}

// deleteAll empties the mailbox (DELETE /api/v1/messages without ids).
func (m *mailpit) deleteAll(ctx context.Context) error {
	if err := m.do(ctx, http.MethodDelete, "/messages", nil); err != nil {
		return err
	}
	if n, err := m.total(ctx); err != nil || n != 0 {
		return fmt.Errorf("mailpit holds %d messages after deleting all (%v)", n, err)
	}
	return nil
}

// messages reads every message Mailpit holds, 1,000 a page. Pages are
// offsets into a list ordered by arrival time, so the messages are keyed
// by Mailpit's id (a message that a page boundary showed twice counts
// once) and the result must hold the mailbox's total: the mailbox does
// not change while it is read.
func (m *mailpit) messages(ctx context.Context) ([]mailpitMessage, error) {
	const limit = 1000
	seen := map[string]bool{}
	var out []mailpitMessage
	total := -1
	for start := 0; total < 0 || start < total; start += limit {
		var p mailpitPage
		if err := m.do(ctx, http.MethodGet, fmt.Sprintf("/messages?start=%d&limit=%d", start, limit), &p); err != nil {
			return nil, err
		}
		if total >= 0 && p.Total != total {
			return nil, fmt.Errorf("mailpit's total changed from %d to %d while its messages were read", total, p.Total)
		}
		total = p.Total
		if len(p.Messages) == 0 {
			break
		}
		for _, msg := range p.Messages {
			if !seen[msg.ID] {
				seen[msg.ID] = true
				out = append(out, msg)
			}
		}
	}
	if len(out) != total {
		return nil, fmt.Errorf("read %d distinct messages from mailpit, which counts %d", len(out), total)
	}
	return out, nil
}

// waitTotal polls Mailpit until it holds want messages, a child exits or
// the timeout passes.
func (m *mailpit) waitTotal(ctx context.Context, want int, timeout time.Duration, children ...*child) error {
	deadline := time.Now().Add(timeout)
	for {
		got, err := m.total(ctx)
		if err != nil {
			return err
		}
		if got >= want {
			return nil
		}
		for _, c := range append([]*child{m.proc}, children...) {
			if c.exited() {
				return fmt.Errorf("a process exited with %d of %d messages at mailpit:\n%s", got, want, c.tail())
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d messages at mailpit after %s", got, want, timeout)
		}
		time.Sleep(mailpitPoll)
	}
}

// mailpitTally is what Mailpit holds after a run, checked against its n
// recipients.
type mailpitTally struct {
	total          int // messages stored
	missing, extra int // recipients with no message, with more than one
	dupIDs         int // Message-IDs stored more than once
}

func (t mailpitTally) exact(n int) bool {
	return t.total == n && t.missing == 0 && t.extra == 0 && t.dupIDs == 0
}

// tally reads every stored message and counts them per recipient (To) and
// per Message-ID.
func (m *mailpit) tally(ctx context.Context, n int) (mailpitTally, error) {
	msgs, err := m.messages(ctx)
	if err != nil {
		return mailpitTally{}, err
	}
	perTo, perID := make(map[string]int, n), make(map[string]int, n)
	for _, msg := range msgs {
		for _, to := range msg.To {
			perTo[strings.ToLower(to.Address)]++
		}
		perID[msg.MessageID]++
	}
	t := mailpitTally{total: len(msgs)}
	t.missing, t.extra = recipientTally(perTo, n)
	for _, c := range perID {
		if c > 1 {
			t.dupIDs++
		}
	}
	return t, nil
}

// established counts the TCP connections open to a local port (the server
// ends of them, in /proc/net/tcp, state 01).
func established(port int) int {
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return -1
	}
	suffix := fmt.Sprintf(":%04X", port)
	n := 0
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 3 && strings.HasSuffix(f[1], suffix) && f[3] == "01" {
			n++
		}
	}
	return n
}

// relayRun is one run of one side of the scenario.
type relayRun struct {
	rate    float64       // messages per second, until Mailpit held all N
	first   time.Duration // Onceplan: until Mailpit held one (the process's start-up)
	settled time.Duration // Onceplan: until every effect was settled done
	// CPU of the run: the sender's Go (the bench's go-mail clients, or
	// onceplan serve from its start), PostgreSQL's, Mailpit's.
	sender, postgres, mailpit time.Duration
	conns                     int // Onceplan: connections open at Mailpit when it held all N
	tally                     mailpitTally
}

// directMailpit is one go-mail direct run (goMailDirect) against m.
func directMailpit(ctx context.Context, pool *pgxpool.Pool, m *mailpit, n int) (relayRun, error) {
	if err := m.deleteAll(ctx); err != nil {
		return relayRun{}, err
	}
	// Mailpit is polled from before the start, as in the Onceplan runs
	// (Mailpit stores a message before it answers, so by the time the
	// last send returns it holds them all). Its CPU is read around the
	// whole call, which quiesces the database first: Mailpit is idle then
	// but for the polling.
	pollCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	held := make(chan error, 1)
	go func() { held <- m.waitTotal(pollCtx, n, 30*time.Minute) }()
	mp0 := m.cpu()
	rate, cpu, err := goMailDirect(ctx, pool, directOpts{
		Addr: m.smtpAddr, N: n, Conns: mailpitConns,
		DeliveredFunc: func(context.Context) error { return <-held },
	})
	if err != nil {
		return relayRun{}, err
	}
	r := relayRun{rate: rate, sender: cpu.self, postgres: cpu.postgres, mailpit: m.cpu() - mp0}
	if r.tally, err = m.tally(ctx, n); err != nil {
		return relayRun{}, err
	}
	return r, nil
}

// onceplanMailpit is one run of `onceplan serve` with its default settings
// and one provider, smtp://MAILPIT, executing a campaign of n targets
// started beforehand; timed from the process's start.
func onceplanMailpit(ctx context.Context, pool *pgxpool.Pool, e *procEnv, m *mailpit, n, run int) (relayRun, error) {
	if err := m.deleteAll(ctx); err != nil {
		return relayRun{}, err
	}
	_, planID, err := startCampaign(ctx, pool, nil, fmt.Sprintf("mailpit bench %d", run), mailpitProvider, n)
	if err != nil {
		return relayRun{}, err
	}
	if err := quiesce(ctx, pool); err != nil {
		return relayRun{}, err
	}
	name := fmt.Sprintf("mailpit-serve-%d", run)
	start, cpu0, mp0 := time.Now(), sampleCPU(), m.cpu()
	srv, err := e.start(name, "serve", "--database-url", e.dbURL, "--data-dir", filepath.Join(e.dir, "data-"+name),
		"--listen", "127.0.0.1:0", "--provider", mailpitProvider+"=smtp://"+m.smtpAddr)
	if err != nil {
		return relayRun{}, err
	}
	defer srv.stop()
	if err := m.waitTotal(ctx, 1, 5*time.Minute, srv); err != nil {
		return relayRun{}, err
	}
	first := time.Since(start)
	if err := m.waitTotal(ctx, n, 30*time.Minute, srv); err != nil {
		return relayRun{}, err
	}
	elapsed := time.Since(start)
	r := relayRun{
		rate: float64(n) / elapsed.Seconds(), first: first, sender: procCPU(srv.cmd.Process.Pid),
		postgres: sampleCPU().sub(cpu0).postgres, mailpit: m.cpu() - mp0, conns: established(m.smtpPort),
	}
	for {
		d, err := doneCount(ctx, pool, planID)
		if err != nil {
			return relayRun{}, err
		}
		if d >= n {
			break
		}
		if srv.exited() {
			return relayRun{}, fmt.Errorf("serve exited with %d of %d effects done:\n%s", d, n, srv.tail())
		}
		if time.Since(start) > 30*time.Minute {
			return relayRun{}, fmt.Errorf("%d of %d effects done after 30 minutes", d, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	r.settled = time.Since(start)
	srv.stop()
	if r.tally, err = m.tally(ctx, n); err != nil {
		return relayRun{}, err
	}
	return r, nil
}

// median of the runs' f.
func median[T int | float64 | time.Duration](runs []relayRun, f func(relayRun) T) T {
	v := make([]T, len(runs))
	for i, r := range runs {
		v[i] = f(r)
	}
	slices.Sort(v)
	if k := len(v); k%2 == 0 {
		return (v[k/2-1] + v[k/2]) / 2
	}
	return v[len(v)/2]
}

func benchMailpit(ctx context.Context, pool *pgxpool.Pool, e *procEnv, n int) error {
	m, err := startMailpit(ctx, e)
	if err != nil {
		return err
	}
	defer m.close()
	var direct, ours []relayRun
	for i, side := range []string{"direct", "onceplan", "onceplan", "direct"} {
		var (
			r   relayRun
			err error
		)
		if side == "direct" {
			if r, err = directMailpit(ctx, pool, m, n); err != nil {
				return fmt.Errorf("go-mail direct to mailpit: %w", err)
			}
			if !r.tally.exact(n) {
				return fmt.Errorf("go-mail direct to mailpit: mailpit holds %+v, want each of %d recipients once", r.tally, n)
			}
			direct = append(direct, r)
		} else {
			if r, err = onceplanMailpit(ctx, pool, e, m, n, i+1); err != nil {
				return fmt.Errorf("onceplan serve to mailpit: %w", err)
			}
			ours = append(ours, r)
		}
	}
	rate := func(r relayRun) float64 { return r.rate }
	sender := func(r relayRun) time.Duration { return r.sender }
	postgres := func(r relayRun) time.Duration { return r.postgres }
	mpCPU := func(r relayRun) time.Duration { return r.mailpit }
	base, mine := median(direct, rate), median(ours, rate)
	ratio := mine / base
	var missing, extra, dupIDs, stored []string
	exact := true
	for _, r := range ours {
		missing = append(missing, strconv.Itoa(r.tally.missing))
		extra = append(extra, strconv.Itoa(r.tally.extra))
		dupIDs = append(dupIDs, strconv.Itoa(r.tally.dupIDs))
		stored = append(stored, thousands(r.tally.total))
		exact = exact && r.tally.exact(n)
	}
	ms := func(d time.Duration) string { return per1000(d, n).Round(time.Millisecond).String() }
	rates := func(runs []relayRun) string {
		var s []string
		for _, r := range runs {
			s = append(s, fmt.Sprintf("%.0f", r.rate))
		}
		return strings.Join(s, ", ")
	}
	fmt.Printf("mailpit: %d messages to Mailpit %s on 127.0.0.1 (SMTP :%d, --max 0), runs in the order direct, Onceplan, Onceplan, direct; medians of 2, each timed until Mailpit's API counts all %d\n",
		n, mailpitVersion, m.smtpPort, n)
	fmt.Printf("  go-mail direct, %d connections:             %.0f msgs/s (runs: %s)\n", mailpitConns, base, rates(direct))
	fmt.Printf("  onceplan serve, default settings:            %.0f msgs/s (runs: %s), from the process's start; first message after %s, all effects settled done after %s; connections open at Mailpit: %d\n",
		mine, rates(ours), median(ours, func(r relayRun) time.Duration { return r.first }).Round(10*time.Millisecond),
		median(ours, func(r relayRun) time.Duration { return r.settled }).Round(10*time.Millisecond), median(ours, func(r relayRun) int { return r.conns }))
	fmt.Printf("  ratio (Onceplan / go-mail direct):           %.2fx (target >= 0.9x)\n", ratio)
	fmt.Printf("  CPU per 1,000 messages, go-mail direct:      %s Go (bench process: clients, polling) + %s PostgreSQL; Mailpit %s\n", ms(median(direct, sender)), ms(median(direct, postgres)), ms(median(direct, mpCPU)))
	fmt.Printf("  CPU per 1,000 messages, Onceplan:            %s Go (serve) + %s PostgreSQL; Mailpit %s\n", ms(median(ours, sender)), ms(median(ours, postgres)), ms(median(ours, mpCPU)))
	fmt.Printf("  at Mailpit after each Onceplan run: messages %s; recipients with none %s, with more than one %s; Message-IDs more than once %s\n",
		strings.Join(stored, ", "), strings.Join(missing, ", "), strings.Join(extra, ", "), strings.Join(dupIDs, ", "))
	record("10. relay (Mailpit)", fmt.Sprintf("%s messages to Mailpit %s (--max 0), 2 runs each side alternating, medians: go-mail direct, %d connections, %.0f msgs/s (CPU per 1,000 %s Go, Mailpit %s); `onceplan serve` with its default settings (provider smtp://127.0.0.1:PORT, %d connections) %.0f msgs/s: **%.2f×** (%s Go + %s PostgreSQL, Mailpit %s); at Mailpit, recipients with no message / more than one: %s / %s",
		thousands(n), mailpitVersion, mailpitConns, base, ms(median(direct, sender)), ms(median(direct, mpCPU)),
		median(ours, func(r relayRun) int { return r.conns }), mine, ratio, ms(median(ours, sender)), ms(median(ours, postgres)), ms(median(ours, mpCPU)),
		strings.Join(missing, ", "), strings.Join(extra, ", ")),
		"≥ 0.9× go-mail direct, 0 duplicates", ratio >= 0.9 && exact)
	return nil
}
