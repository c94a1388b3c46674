package traffic

import "errors"

// ErrIdleTooShort rejects an idle policy below MinIdleSeconds.
var ErrIdleTooShort = errors.New("max_idle_seconds must be 0 (no policy) or at least 60")
