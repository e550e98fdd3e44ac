package main

// Scenario "smtp": N messages through the real runner and executor to a
// local SMTP sink over 20 connections (the provider's concurrency), against
// go-mail sending the same messages straight to a second sink from 20
// concurrent clients, each keeping its connection, in the same run.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	gomail "github.com/wneessen/go-mail"

	"github.com/onceplan/onceplan/approval"
	"github.com/onceplan/onceplan/internal/provider"
	"github.com/onceplan/onceplan/internal/sink"
	"github.com/onceplan/onceplan/jobs"
)

const smtpConns = 20

// smtpWorkers is the executor's workers per queue in the smtp scenario:
// more than the provider's 20 calls at once, so that while 20 effects
// hold the provider, others read their targets, and claims and answers
// batch across them.
const smtpWorkers = 100

// directOpts are goMailDirect's arguments.
type directOpts struct {
	Addr  string // the SMTP server, host:port
	N     int    // messages, one to each bench recipient
	Conns int    // clients, each dialled once and reused
	// DeliveredFunc, when set, returns once the server holds all N
	// messages, and the run is timed until then; nil: until the last
	// message is accepted.
	DeliveredFunc func(context.Context) error
}

// goMailDirect sends o.N messages like the campaign's (same From, To,
// Subject, text body, Date, and a Message-ID, X-Onceplan-Effect and
// one-click List-Unsubscribe headers of the same lengths as the
// provider's) to o.Addr with o.Conns clients, each dialled once and
// reused, and returns messages per second and the CPU the run took. Each
// message is built in the sending loop, as the provider builds one per
// Send.
func goMailDirect(ctx context.Context, pool *pgxpool.Pool, o directOpts) (float64, cpuSample, error) {
	host, portStr, err := net.SplitHostPort(o.Addr)
	if err != nil {
		return 0, cpuSample{}, err
	}
	port, _ := strconv.Atoi(portStr)
	next := make(chan int, o.N)
	for i := 1; i <= o.N; i++ {
		next <- i
	}
	close(next)
	errs := make(chan error, o.Conns)
	if err := quiesce(ctx, pool); err != nil {
		return 0, cpuSample{}, err
	}
	var wg sync.WaitGroup
	start, cpu0 := time.Now(), sampleCPU()
	for range o.Conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := gomail.NewClient(host, gomail.WithPort(port), gomail.WithTLSPolicy(gomail.NoTLS), gomail.WithTimeout(time.Minute))
			if err != nil {
				errs <- err
				return
			}
			if err := c.DialWithContext(ctx); err != nil {
				errs <- err
				return
			}
			defer c.Close()
			for i := range next {
				m := gomail.NewMsg(gomail.WithNoDefaultUserAgent())
				if err := m.From("bench@example.com"); err != nil {
					errs <- err
					return
				}
				if err := m.To(fmt.Sprintf("person%07d@example.com", i)); err != nil {
					errs <- err
					return
				}
				m.Subject(fmt.Sprintf("Hello Name%d", i))
				m.SetMessageIDWithValue(fmt.Sprintf("direct%026d@onceplan", i))
				m.SetDateWithValue(time.Now())
				m.SetUserAgent("onceplan")
				m.SetGenHeader("X-Onceplan-Effect", fmt.Sprintf("v1:direct%058d:0", i))
				m.SetListUnsubscribe(fmt.Sprintf("http://127.0.0.1:8080/u/direct%072d", i))
				m.SetListUnsubscribePost()
				m.SetBodyString(gomail.TypeTextPlain, fmt.Sprintf("Hi Name%d from City%d", i, i%100))
				if err := c.Send(m); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return 0, cpuSample{}, err
	}
	if o.DeliveredFunc != nil {
		if err := o.DeliveredFunc(ctx); err != nil {
			return 0, cpuSample{}, err
		}
	}
	elapsed, cpu := time.Since(start), sampleCPU().sub(cpu0)
	return float64(o.N) / elapsed.Seconds(), cpu, nil
}

// onceplanSMTP runs a started campaign of n targets through the real
// runner and executor with the SMTP provider pointed at addr, and returns
// effects per second (until every message reached the sink and every
// effect is settled done).
func onceplanSMTP(ctx context.Context, pool *pgxpool.Pool, s *sink.SMTP, n int) (float64, cpuSample, error) {
	prov, err := provider.ParseFlag(fmt.Sprintf("mail=smtp://%s?tls=none&concurrency=%d", s.Addr(), smtpConns))
	if err != nil {
		return 0, cpuSample{}, err
	}
	reg, err := provider.NewRegistry(prov)
	if err != nil {
		return 0, cpuSample{}, err
	}
	defer reg.Close()
	r, err := jobs.NewRunner(jobs.Config{
		Pool: pool, Providers: reg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		WorkersPerQueue: smtpWorkers, FetchCooldown: benchFetchCooldown,
		MaintenanceInterval: time.Hour,
	})
	if err != nil {
		return 0, cpuSample{}, err
	}
	svc := approval.NewService(pool, r.Enqueuer())
	_, planID, err := startCampaign(ctx, pool, svc, "smtp bench", "mail", n)
	if err != nil {
		return 0, cpuSample{}, err
	}
	if err := quiesce(ctx, pool); err != nil {
		return 0, cpuSample{}, err
	}
	start, cpu0 := time.Now(), sampleCPU()
	if err := r.Start(ctx, svc); err != nil {
		return 0, cpuSample{}, err
	}
	for len(s.Messages()) < n {
		time.Sleep(10 * time.Millisecond)
	}
	for {
		d, err := doneCount(ctx, pool, planID)
		if err != nil {
			return 0, cpuSample{}, err
		}
		if d >= n {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	elapsed, cpu := time.Since(start), sampleCPU().sub(cpu0)
	stopCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := r.Stop(stopCtx); err != nil {
		return 0, cpuSample{}, err
	}
	return float64(n) / elapsed.Seconds(), cpu, nil
}

func benchSMTP(ctx context.Context, pool *pgxpool.Pool, n int) error {
	direct, err := sink.NewSMTP()
	if err != nil {
		return err
	}
	defer direct.Close()
	viaOnceplan, err := sink.NewSMTP()
	if err != nil {
		return err
	}
	defer viaOnceplan.Close()

	base, baseCPU, err := goMailDirect(ctx, pool, directOpts{Addr: direct.Addr(), N: n, Conns: smtpConns})
	if err != nil {
		return fmt.Errorf("go-mail direct: %w", err)
	}
	if got := len(direct.Messages()); got != n {
		return fmt.Errorf("go-mail direct: the sink holds %d messages, want %d", got, n)
	}
	ours, cpu, err := onceplanSMTP(ctx, pool, viaOnceplan, n)
	if err != nil {
		return fmt.Errorf("onceplan smtp: %w", err)
	}
	dups := 0
	for _, c := range viaOnceplan.CountByMessageID() {
		if c > 1 {
			dups++
		}
	}
	fmt.Printf("smtp: %d messages, %d connections each side, executor workers %d, FetchCooldown %s\n", n, smtpConns, smtpWorkers, benchFetchCooldown)
	fmt.Printf("  go-mail direct, %d clients:                  %.0f msgs/s (%d connections at the sink)\n", smtpConns, base, direct.Connections())
	fmt.Printf("  Onceplan executor, smtp provider:            %.0f msgs/s (%d connections at the sink)\n", ours, viaOnceplan.Connections())
	fmt.Printf("  ratio (Onceplan / go-mail direct):           %.2fx (target >= 0.8x)\n", ours/base)
	fmt.Printf("  CPU per 1,000 messages (bench process: clients, executor and sinks; PostgreSQL): go-mail direct %s + %s, Onceplan %s + %s\n",
		per1000(baseCPU.self, n).Round(time.Millisecond), per1000(baseCPU.postgres, n).Round(time.Millisecond),
		per1000(cpu.self, n).Round(time.Millisecond), per1000(cpu.postgres, n).Round(time.Millisecond))
	fmt.Printf("  Message-IDs received more than once:         %d\n", dups)
	record("6. SMTP", fmt.Sprintf("%s messages, 20 connections each side: go-mail direct %.0f msgs/s (CPU per 1,000 %s, sink included); through Onceplan %.0f msgs/s: **%.2f×** (%s Go + %s PostgreSQL); Message-IDs received twice: %d",
		thousands(n), base, per1000(baseCPU.self+baseCPU.postgres, n).Round(time.Millisecond), ours, ours/base,
		per1000(cpu.self, n).Round(time.Millisecond), per1000(cpu.postgres, n).Round(time.Millisecond), dups), "≥ 0.8× go-mail direct", ours/base >= 0.8 && dups == 0)
	return nil
}
