package approval

import "errors"

// ErrConflict: the campaign is not in a state that allows this, or the
// plan hash shown is no longer the current one.
var ErrConflict = errors.New("conflict")
