package app

import (
	"testing"

	"github.com/onceplan/onceplan/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
