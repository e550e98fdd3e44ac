package pgtest

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// PlanNode is one node of a plan from EXPLAIN (FORMAT JSON), with what
// tests about plans look at; Loops is set by EXPLAIN ANALYZE (0: the node
// never ran).
type PlanNode struct {
	Type      string `json:"Node Type"`
	Relation  string `json:"Relation Name"`
	Alias     string `json:"Alias"`
	Index     string `json:"Index Name"`
	IndexCond string `json:"Index Cond"`
	Loops     int    `json:"Actual Loops"`
	// Parent is the node's place under its parent: Outer, Inner,
	// Member, InitPlan, SubPlan…
	Parent string `json:"Parent Relationship"`
	// OneTimeFilter is a condition evaluated once, before the node runs
	// at all (a pseudo-constant qual, an EXISTS over no outer row).
	OneTimeFilter string     `json:"One-Time Filter"`
	Plans         []PlanNode `json:"Plans"`
}

// ParsePlan returns the top node of one statement's EXPLAIN (FORMAT JSON)
// output.
func ParsePlan(t testing.TB, out []byte) PlanNode {
	t.Helper()
	var plans []struct{ Plan PlanNode }
	require.NoError(t, json.Unmarshal(out, &plans))
	require.Len(t, plans, 1)
	return plans[0].Plan
}

// Walk calls f on n and on every node below it.
func (n PlanNode) Walk(f func(PlanNode)) {
	f(n)
	for _, c := range n.Plans {
		c.Walk(f)
	}
}
