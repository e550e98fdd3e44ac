// Package typescript holds the Go tests that drive the TypeScript client
// (@onceplan/client, in this directory) with Node: its unit suite on the
// clients' shared table of scripted answers, its suite against a real
// `onceplan serve`, the kill matrix of a Node agent process SIGKILLed at
// each point of the protocol, and a LangGraph graph with a PostgreSQL
// checkpointer killed before its next checkpoint and resumed. The only
// judge of how many effects happened is the outside system's synced file.
package typescript
