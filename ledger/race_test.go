package ledger_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/ledger"
)

const raceChildEnv = "ONCEPLAN_LEDGER_RACE_CHILD_URL"

// runRaceChild is the other OS process of TestClaimRace: it claims every key
// it reads from stdin and answers "won" or "lost" for each. It reports
// whether this process was such a child.
func runRaceChild() bool {
	url := os.Getenv(raceChildEnv)
	if url == "" {
		return false
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	defer pool.Close()
	store := ledger.NewStore(pool)
	owner := fmt.Sprintf("child-%d", os.Getpid())
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		c, err := store.Claim(ctx, ledger.ClaimParams{Key: ledger.Key(in.Text()), Owner: owner})
		switch {
		case err != nil:
			fmt.Println("error", strings.ReplaceAll(err.Error(), "\n", " "))
		case c.Outcome == ledger.ClaimWon:
			fmt.Println("won")
		default:
			fmt.Println("lost")
		}
	}
	return true
}

type raceChild struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

// TestClaimRace: 64 goroutines here and two other OS processes claim the
// same key at the same moment; exactly one wins, every round.
func TestClaimRace(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rounds := 200
	if testing.Short() {
		rounds = 20
	}

	var childURL string
	{
		cfg := b.pool.Config().ConnConfig
		childURL = cfg.ConnString()
	}
	children := make([]*raceChild, 2)
	for i := range children {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), raceChildEnv+"="+childURL)
		cmd.Stderr = os.Stderr
		in, err := cmd.StdinPipe()
		require.NoError(t, err)
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		children[i] = &raceChild{cmd: cmd, in: in, out: bufio.NewScanner(out)}
		t.Cleanup(func() {
			in.Close()
			cmd.Wait()
		})
	}

	cfg := b.pool.Config().Copy()
	cfg.MaxConns = 64
	cfg.MinConns = 64
	pool, err := pgxpool.NewWithConfig(b.ctx, cfg)
	require.NoError(t, err)
	defer pool.Close()
	store := ledger.NewStore(pool)

	for round := range rounds {
		key := newKey(t)
		var (
			start sync.WaitGroup
			done  sync.WaitGroup
			mu    sync.Mutex
			wins  int
			errs  []error
		)
		start.Add(1)
		for g := range 64 {
			done.Add(1)
			go func() {
				defer done.Done()
				start.Wait()
				c, err := store.Claim(b.ctx, ledger.ClaimParams{Key: key, Owner: fmt.Sprintf("g%d", g)})
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
				} else if c.Outcome == ledger.ClaimWon {
					wins++
				}
			}()
		}
		for _, c := range children {
			_, err := fmt.Fprintln(c.in, key)
			require.NoError(t, err)
		}
		start.Done()
		done.Wait()
		for i, c := range children {
			require.True(t, c.out.Scan(), "child %d stopped answering", i)
			switch ans := c.out.Text(); ans {
			case "won":
				wins++
			case "lost":
			default:
				t.Fatalf("child %d: %s", i, ans)
			}
		}
		require.Empty(t, errs, "round %d", round)
		require.Equal(t, 1, wins, "round %d: exactly one claim must win", round)

		var rows int
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM effect WHERE key = $1`, string(key)).Scan(&rows))
		require.Equal(t, 1, rows, "round %d", round)
	}
}
