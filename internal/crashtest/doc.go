// Package crashtest holds the crash suite: real `onceplan worker`
// processes killed with SIGKILL at each point of the effect protocol, with
// the outside world (a maildir, an SMTP server, a webhook receiver) as the
// only judge of how many effects happened.
package crashtest
