package ledger_test

import (
	"fmt"

	"github.com/onceplan/onceplan/ledger"
)

func ExampleNewKey() {
	target, err := ledger.NewEmailTarget("Ann Example <ANN@Example.COM>")
	if err != nil {
		panic(err)
	}
	in := ledger.KeyInput{
		Event:  "cmp_01HZX3K9", // the campaign id
		Tool:   "email.send",
		Target: target,
	}
	key, err := ledger.NewKey(in)
	if err != nil {
		panic(err)
	}
	canonical, err := ledger.CanonicalJSON(in)
	if err != nil {
		panic(err)
	}
	fmt.Println(string(canonical))
	fmt.Println(key)

	// An agent sending the same intent as JSON, spelled differently, gets the
	// same key. It has no way to send the subject or body along.
	fromAgent, err := ledger.KeyFromJSON([]byte(`{
		"target": {"value": " ann@example.com ", "kind": "email"},
		"tool": "email.send",
		"event": "cmp_01HZX3K9"
	}`))
	if err != nil {
		panic(err)
	}
	fmt.Println(fromAgent == key)

	_, err = ledger.KeyFromJSON([]byte(`{"event": "cmp_01HZX3K9", "tool": "email.send",
		"target": {"kind": "email", "value": "ann@example.com"}, "amount_minor": 19.99}`))
	fmt.Println(err)
	// Output:
	// {"amount_minor":0,"event":"cmp_01HZX3K9","scope":"","target":{"kind":"email","value":"ann@example.com"},"tool":"email.send"}
	// v1:637192a49c192ac9f279473cd4655b67827adb61d7e039fe304c09323632feb3
	// true
	// amount_minor "19.99" is not an integer; amounts are integer minor units (e.g. 1999 cents), without fraction or exponent
}

func ExampleNormalizeEmail() {
	for _, addr := range []string{
		"  Ann Example <ANN@Example.COM> ",
		"jörg@Bücher.example",
		"jörg@xn--bcher-kva.example",
		"ann@example.com (work)",
		"foo",
		"ann@[192.0.2.1]",
	} {
		normalized, err := ledger.NormalizeEmail(addr)
		if err != nil {
			fmt.Println("error:", err)
			continue
		}
		fmt.Println(normalized)
	}
	// Output:
	// ann@example.com
	// jörg@xn--bcher-kva.example
	// jörg@xn--bcher-kva.example
	// ann@example.com
	// error: address "foo" has no "@"
	// error: address "ann@[192.0.2.1]" has a domain literal "[192.0.2.1]"; a domain name is required
}

func ExampleParseKey() {
	_, err := ledger.ParseKey("v1:637192A49C192AC9F279473CD4655B67827ADB61D7E039FE304C09323632FEB3")
	fmt.Println(err)
	key, err := ledger.ParseKey("v1:637192a49c192ac9f279473cd4655b67827adb61d7e039fe304c09323632feb3")
	fmt.Println(key, err)
	// Output:
	// effect key "v1:637192A49C192AC9F279473CD4655B67827ADB61D7E039FE304C09323632FEB3" has upper-case hex digit 'A' at offset 9; keys are lower-case
	// v1:637192a49c192ac9f279473cd4655b67827adb61d7e039fe304c09323632feb3 <nil>
}
