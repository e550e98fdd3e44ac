// Package doccheck holds tests that keep the documents honest about the
// code: README.md's Layout table against the tree, docs/ARCHITECTURE.md's
// `file.go (Symbol)` references against the declarations, the test names
// in the docs against the *_test.go files, and every comment's citation of
// a document's section against that document's headings; and the code's
// own shape a newcomer relies on: each table read and written by its
// owner, and no hand-written Go file over 600 lines. It has no code of its
// own; `make test` runs it with the rest (go test ./...).
package doccheck
