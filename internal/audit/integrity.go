package audit

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/onceplan/onceplan/internal/onceplan"
	"github.com/onceplan/onceplan/plan"
)

// Integrity is what the audit finds when it reads a plan's frozen rows
// itself instead of trusting what was stored beside them
// (docs/ARCHITECTURE.md, "The audit"). PostgreSQL refuses the server's role
// every change to a frozen plan; what that role could still forge when it
// wrote the rows — it is the server: it computes the list's digest and the
// plan's hash, and records who approved — shows here.
type Integrity struct {
	// Rows is how many target rows the plan's list holds.
	Rows int `json:"rows"`
	// PlanHash is the plan hash recomputed from the plan's payload and the
	// rows read; ApprovedHash is the one the approvers approved.
	PlanHash     string `json:"plan_hash"`
	ApprovedHash string `json:"approved_hash"`
	// WrongKeys counts rows whose key is not the key of their campaign,
	// tool and address (the digest covers keys, not addresses, so a row
	// whose address was swapped shows here). FirstWrongKey is the first
	// such row's ordinal.
	WrongKeys     int `json:"wrong_keys"`
	FirstWrongKey int `json:"first_wrong_key,omitempty"`
	// BadVars counts rows whose variables are not a JSON object of
	// strings (the import writes nothing else).
	BadVars int `json:"bad_vars"`
	// Approvals counts the distinct approvals of the approved hash by
	// people who did not propose or last edit the submitted draft;
	// RequiredApprovals is the campaign's quorum.
	Approvals         int `json:"approvals"`
	RequiredApprovals int `json:"required_approvals"`
}

// Intact reports whether the frozen rows are what was approved.
func (i Integrity) Intact() bool {
	return i.PlanHash == i.ApprovedHash && i.WrongKeys == 0 && i.BadVars == 0 && i.Approvals >= i.RequiredApprovals
}

// reasons says, one sentence each, what is wrong with the frozen rows.
func (i Integrity) reasons(approved int) []string {
	var out []string
	if i.PlanHash != i.ApprovedHash {
		why := "rows were added, removed or changed since it was approved, or were not the approved ones when it froze"
		if i.Rows != approved {
			why = fmt.Sprintf("its list holds %d target rows where %d were approved", i.Rows, approved)
		}
		out = append(out, fmt.Sprintf("The plan is not intact: its frozen rows hash to %.12s…, not to the approved %.12s… (%s); "+
			"the counts below are of the rows as they are: compare the target list with what was approved before acting on it.",
			i.PlanHash, i.ApprovedHash, why))
	}
	if i.WrongKeys > 0 {
		out = append(out, fmt.Sprintf("The plan is not intact: %s (first: target #%d); "+
			"such a row sends to one address and is counted as another.",
			plural(i.WrongKeys, "target row carries a key that is not its address's", "target rows carry a key that is not their address's"), i.FirstWrongKey))
	}
	if i.BadVars > 0 {
		out = append(out, fmt.Sprintf("The plan is not intact: %s merge variables no import writes.",
			plural(i.BadVars, "target row has", "target rows have")))
	}
	if i.Approvals < i.RequiredApprovals {
		out = append(out, fmt.Sprintf("The plan is not intact: it has %d of the %d approvals it needs from people who did not propose or edit it; "+
			"nobody approved what runs.", i.Approvals, i.RequiredApprovals))
	}
	return out
}

// frozenPlan is what the integrity check reads about a plan.
type frozenPlan struct {
	campaignID string
	tool       string
	listID     int64
	hashInput  plan.PlanHashInput
	hash       string
	required   int
	approvals  int
}

// readIntegrity recomputes a plan's hash and checks its rows' keys from the
// rows themselves, in db's snapshot.
func readIntegrity(ctx context.Context, db onceplan.DB, planID int64) (Integrity, error) {
	var fp frozenPlan
	in := &fp.hashInput
	err := db.QueryRow(ctx, frozenPlanSQL, planID).Scan(&fp.campaignID, &in.Provider, &fp.tool,
		&in.Payload.From, &in.Payload.Subject, &in.Payload.Text, &in.Payload.HTML,
		&fp.listID, &in.TargetCount, &fp.hash, &fp.required, &in.Transactional, &fp.approvals)
	if err != nil {
		return Integrity{}, err
	}
	in.Tool = fp.tool
	rows, err := db.Query(ctx, listRowsSQL, fp.listID)
	if err != nil {
		return Integrity{}, err
	}
	defer rows.Close()

	// The digest is one sequential hash; the keys are checked beside it,
	// a batch at a time, on the other cores.
	chk := newKeyChecker(fp.campaignID, fp.tool)
	defer chk.stop()
	digest := plan.NewListDigest()
	var (
		integ = Integrity{ApprovedHash: fp.hash, RequiredApprovals: fp.required, Approvals: fp.approvals}
		vars  []byte
		batch = chk.batch()
	)
	for rows.Next() {
		raw := rows.RawValues()
		if len(raw) != 4 || len(raw[0]) != 4 {
			return Integrity{}, fmt.Errorf("reading plan %d's targets: unexpected row shape", planID)
		}
		ordinal := int(int32(binary.BigEndian.Uint32(raw[0])))
		vars, err = plan.AppendCanonicalVars(vars[:0], raw[3])
		if err != nil {
			integ.BadVars++
			vars = append(vars[:0], raw[3]...)
		}
		digest.AddBytes(raw[2], vars)
		batch.add(ordinal, raw[1], raw[2])
		if batch.full() {
			chk.send(batch)
			batch = chk.batch()
		}
	}
	if err := rows.Err(); err != nil {
		return Integrity{}, fmt.Errorf("reading plan %d's targets: %w", planID, err)
	}
	chk.send(batch)
	integ.WrongKeys, integ.FirstWrongKey = chk.wait()
	integ.Rows = digest.Count()
	in.TargetCount = digest.Count()
	in.ListDigest = digest.Sum()
	integ.PlanHash = plan.PlanHash(*in)
	return integ, nil
}

// keyChecker checks that each row's key is its address's, on a few
// goroutines.
type keyChecker struct {
	campaign, tool string
	work           chan *keyBatch
	wg             sync.WaitGroup
	mu             sync.Mutex
	wrong          int
	first          int
	pool           sync.Pool
	stopped        bool
}

// keyBatch is a run of rows: their ordinals, and their addresses and keys
// packed into one buffer (the row's bytes are reused by the next row).
type keyBatch struct {
	ordinals []int
	ends     []int // end of each address, then of each key, in buf
	buf      []byte
}

const keyBatchRows = 2048

func (b *keyBatch) add(ordinal int, address, key []byte) {
	b.ordinals = append(b.ordinals, ordinal)
	b.buf = append(b.buf, address...)
	b.ends = append(b.ends, len(b.buf))
	b.buf = append(b.buf, key...)
	b.ends = append(b.ends, len(b.buf))
}

func (b *keyBatch) full() bool { return len(b.ordinals) == keyBatchRows }

func newKeyChecker(campaign, tool string) *keyChecker {
	c := &keyChecker{campaign: campaign, tool: tool, work: make(chan *keyBatch, 4)}
	c.pool.New = func() any {
		return &keyBatch{ordinals: make([]int, 0, keyBatchRows), ends: make([]int, 0, 2*keyBatchRows)}
	}
	for range max(1, runtime.GOMAXPROCS(0)) {
		c.wg.Add(1)
		go c.run()
	}
	return c
}

func (c *keyChecker) batch() *keyBatch { return c.pool.Get().(*keyBatch) }

func (c *keyChecker) send(b *keyBatch) {
	if len(b.ordinals) > 0 {
		c.work <- b
	}
}

func (c *keyChecker) run() {
	defer c.wg.Done()
	for b := range c.work {
		start := 0
		for i, ordinal := range b.ordinals {
			address := string(b.buf[start:b.ends[2*i]])
			key := b.buf[b.ends[2*i]:b.ends[2*i+1]]
			start = b.ends[2*i+1]
			if !plan.IsTargetKey(c.campaign, c.tool, address, key) {
				c.mu.Lock()
				c.wrong++
				if c.first == 0 || ordinal < c.first {
					c.first = ordinal
				}
				c.mu.Unlock()
			}
		}
		b.ordinals, b.ends, b.buf = b.ordinals[:0], b.ends[:0], b.buf[:0]
		c.pool.Put(b)
	}
}

// wait ends the check and returns how many keys were wrong and the first.
func (c *keyChecker) wait() (int, int) {
	c.stop()
	return c.wrong, c.first
}

func (c *keyChecker) stop() {
	if !c.stopped {
		c.stopped = true
		close(c.work)
		c.wg.Wait()
	}
}

// One snapshot for everything the metric reads: under REPEATABLE READ
// when the audit has a transaction of its own.
var auditTx = pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}
