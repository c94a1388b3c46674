package traffic

import (
	"errors"
	"strconv"
)

// ErrIdleTooShort rejects an idle policy below MinIdleSeconds.
var ErrIdleTooShort = errors.New("max_idle_seconds must be 0 (no policy) or at least 60")

// ErrIdleTooLong rejects an idle policy above MaxIdleSeconds.
var ErrIdleTooLong = errors.New("max_idle_seconds must be at most " + strconv.Itoa(MaxIdleSeconds) + " (30 days)")
