// Package pythontest runs the Python client's suite (clients/python) from
// `go test`: its unit tests, and its kill matrix against a real `onceplan
// serve` on a test database, with outside systems this package owns.
package pythontest
