// Package doccheck holds tests that keep the documents honest about the
// code: docs/LAYOUT.md against the packages, every `file.go (Symbol)`
// reference against the declarations, the test names in the documents
// against the *_test.go files, every citation of a document's section
// (in a comment, a message or a document) against that document's
// headings, every relative link against the files and their headings, and
// the README short, linking every page of the guide (docs/guide/); and the
// code's own shape a newcomer relies on: each table read and written by
// its owner, and no hand-written Go file over 600 lines. It has no code of
// its own; `make test` runs it with the rest (go test ./...).
package doccheck
