package executor

// For the external tests: the claims' gate and the write sessions.
var (
	ClaimGate    = gate
	NewWritePool = newWritePool
)
