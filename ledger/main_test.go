package ledger_test

import (
	"testing"

	"github.com/onceplan/onceplan/internal/pgtest"
)

func TestMain(m *testing.M) {
	if runRaceChild() {
		return
	}
	pgtest.Main(m)
}
