// Package doccheck holds tests that keep the documents honest about the
// code: docs/LAYOUT.md's table against the packages, docs/ARCHITECTURE.md's
// `file.go (Symbol)` references against the declarations, the test names
// in the docs against the *_test.go files, and every comment's citation of
// a document's section against that document's headings. It has no code
// of its own; `make test` runs it with the rest (go test ./...).
package doccheck
