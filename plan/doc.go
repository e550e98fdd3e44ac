// Package plan owns what a campaign will do: its payload (from, subject and
// bodies as merge templates), its target lists, and the frozen plan an
// approval produces.
//
// Guarantees:
//   - a target list is read as a stream and written once (COPY); the import
//     report accounts for every input row (accepted + duplicate + rejected);
//   - every address is normalised by ledger.NormalizeEmail and keyed by
//     ledger.NewKey with the campaign as event, so a person is one target and
//     one key whatever the draft's text;
//   - the plan hash covers the payload and the ordered (key, variables) list:
//     what an approver was shown is what runs;
//   - frozen plans and their lists are write-once in PostgreSQL.
//
// Who may do what, and the campaign's state machine, live in package approval.
package plan
