// Package agenttest holds end-to-end tests of the ways people and agents
// drive a running Onceplan from outside: the `onceplan campaign …` command
// line and the `onceplan mcp` server, each as the built binary against a
// real `onceplan serve`, with a maildir as the outside world.
package agenttest
