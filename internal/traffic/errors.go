package traffic

import (
	"errors"
	"strconv"
)

var (
	// ErrIdleTooShort rejects an idle policy below MinIdleSeconds.
	ErrIdleTooShort = errors.New("max_idle_seconds must be 0 (no policy) or at least 60")
	// ErrIdleTooLong rejects an idle policy above MaxIdleSeconds.
	ErrIdleTooLong = errors.New("max_idle_seconds must be at most " + strconv.Itoa(MaxIdleSeconds) + " (30 days)")
	// ErrMaxHold rejects a maximum hold time out of its range.
	ErrMaxHold = errors.New("the maximum hold time must be from 1 second to 10 years")
	// ErrHoldTTL rejects a lease outside MinHoldTTL to MaxHoldTTL.
	ErrHoldTTL = errors.New("a hold's ttl must be from 1 second to 1 hour")
	// ErrNoHold: no hold has that id (any more).
	ErrNoHold = errors.New("no such hold")
	// ErrTooManyHolds: MaxHolds holds exist.
	ErrTooManyHolds = errors.New("too many holds")
	// ErrNotALease: a stream hold ends with its stream, not by renewal.
	ErrNotALease = errors.New("not a lease")
	// ErrHoldPastMax: the hold counted for the maximum hold time already.
	ErrHoldPastMax = errors.New("hold is past the maximum hold time")
)
