package provider_test

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"go.uber.org/goleak"

	"github.com/onceplan/onceplan/internal/provider"
	"github.com/onceplan/onceplan/plan"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testKey is a well-formed ledger key derived from seed.
func testKey(seed string) string {
	sum := sha256.Sum256([]byte(seed))
	return "v1:" + hex.EncodeToString(sum[:])
}

// testRequest is a request for seed's key at epoch 0, with both bodies.
func testRequest(seed string) provider.Request {
	return provider.Request{
		Key:    testKey(seed),
		Epoch:  0,
		Target: "ada@example.test",
		Message: plan.Message{
			From:    "Onceplan News <news@onceplan.test>",
			To:      "ada@example.test",
			Subject: "Your November invoice, Ada",
			Text:    "Hello Ada,\nyour invoice is attached.\n",
			HTML:    "<p>Hello <b>Ada</b>, your invoice is attached.</p>",
		},
	}
}
