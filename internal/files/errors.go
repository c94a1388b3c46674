package files

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/rayito/rayito-agent/internal/wire"
)

// Sentinel errors callers branch on with errors.Is. Every error of the
// package is an *Error that wraps one of them (and the system error behind
// it, so errors.Is(err, fs.ErrNotExist) works as well).
var (
	ErrNotFound   = errors.New("no such file or directory")
	ErrExists     = errors.New("already exists")
	ErrPermission = errors.New("permission denied")
	ErrIsDir      = errors.New("is a directory")
	ErrNotDir     = errors.New("not a directory")
	ErrNotEmpty   = errors.New("directory not empty")
	ErrNotRegular = errors.New("not a regular file")
	ErrInvalid    = errors.New("invalid argument")
	// ErrNoSpace wraps ENOSPC, so that what answers over HTTP (surface.Status)
	// tells a full disk (507) from other limits without knowing this package.
	ErrNoSpace     = fmt.Errorf("%w", syscall.ENOSPC)
	ErrUnsupported = errors.New("not supported here")
	ErrUnknownUser = errors.New("no such user or group")
	ErrTooMany     = errors.New("too many entries")
	ErrChanged     = errors.New("file changed while read")
	ErrAbandoned   = errors.New("transfer abandoned")
	ErrClosed      = errors.New("agent shutting down")
	// Upload input errors (Upload.WriteInputFrom, CloseInput).
	ErrNotOwner    = errors.New("input from a connection that does not own the upload")
	ErrInputClosed = errors.New("the upload's input is closed")
	// ErrInputEOF: an end of input below what the upload received.
	ErrInputEOF = errors.New("end of input before input already received")
	ErrWindow   = errors.New("input beyond the upload window")
	ErrIO       = errors.New("input/output error")
	// ErrBusy: a bound of the agent's stayed reached (the threads for
	// operations as other users, the files transfers hold open) or the
	// file system did not answer; the detail says which. Try again
	// shortly.
	ErrBusy = errors.New("the agent is busy; try again shortly")
)

// Error is a failed operation on a path.
type Error struct {
	Op   string // stat, list, mkdir, move, remove, chmod, chown, open, write, commit
	Path string
	Kind error // one of the sentinel errors
	Err  error // the underlying error, if any
}

func (e *Error) Error() string {
	s := e.Op + ": " + e.Kind.Error()
	if e.Path != "" {
		s = e.Op + " " + e.Path + ": " + e.Kind.Error()
	}
	if e.Err != nil && e.Err.Error() != e.Kind.Error() {
		s += " (" + e.Err.Error() + ")"
	}
	return s
}

// Unwrap returns the sentinel kind and the underlying error.
func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

// codes are the protocol code of each kind, first match first.
var codes = []struct {
	kind error
	code wire.Code
}{
	{ErrNotFound, wire.CodeNotFound},
	{ErrPermission, wire.CodePermissionDenied},
	{ErrExists, wire.CodeConflict},
	{ErrNotEmpty, wire.CodeConflict},
	{ErrNotOwner, wire.CodeConflict},
	{ErrInputClosed, wire.CodeConflict},
	{ErrInputEOF, wire.CodeConflict},
	{ErrChanged, wire.CodeConflict},
	{ErrNoSpace, wire.CodeLimit},
	{ErrTooMany, wire.CodeLimit},
	{ErrWindow, wire.CodeLimit},
	{ErrBusy, wire.CodeLimit},
	{ErrIsDir, wire.CodeBadRequest},
	{ErrNotDir, wire.CodeBadRequest},
	{ErrNotRegular, wire.CodeBadRequest},
	{ErrInvalid, wire.CodeBadRequest},
	{ErrUnknownUser, wire.CodeBadRequest},
	{ErrUnsupported, wire.CodeBadRequest},
	{ErrAbandoned, wire.CodeUnavailable},
	{ErrClosed, wire.CodeUnavailable},
}

// WireCode is the error's protocol code (wire.Coded): every surface
// reads it through wire.AsError.
func (e *Error) WireCode() wire.Code { return Code(e) }

// Code is the protocol code of err: its kind's, wire.CodeInternal for
// anything else. A transfer's end names it too.
func Code(err error) wire.Code {
	for _, k := range codes {
		if errors.Is(err, k.kind) {
			return k.code
		}
	}
	return wire.CodeInternal
}

// newErr builds an *Error, classifying err when kind is nil. The system
// error kept is the bare errno when there is one: the path is already in
// the message.
func newErr(op, path string, kind, err error) *Error {
	var inner *Error
	if kind == nil && errors.As(err, &inner) {
		return inner // it names the path that failed more precisely
	}
	if kind == nil {
		kind = classify(err)
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		err = errno
	}
	return &Error{Op: op, Path: path, Kind: kind, Err: err}
}

// classify maps a system error to a sentinel.
func classify(err error) error {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return ErrIO
	}
	switch errno {
	case syscall.ENOENT:
		return ErrNotFound
	case syscall.EEXIST:
		return ErrExists
	case syscall.EACCES, syscall.EPERM, syscall.EROFS:
		return ErrPermission
	case syscall.EISDIR:
		return ErrIsDir
	case syscall.ENOTDIR:
		return ErrNotDir
	case syscall.ENOTEMPTY:
		return ErrNotEmpty
	case syscall.ENOSPC, syscall.EDQUOT, syscall.EFBIG:
		return ErrNoSpace
	case syscall.EINVAL, syscall.ENAMETOOLONG, syscall.ELOOP:
		return ErrInvalid
	case syscall.EXDEV, syscall.EOPNOTSUPP:
		return ErrUnsupported
	}
	return ErrIO
}

// Details behind the sentinels, for the messages.
var (
	errEmptyPath    = errors.New("empty path")
	errNULPath      = errors.New("path contains a NUL byte")
	errDepth        = fmt.Errorf("depth is at most %d", MaxDepth)
	errTooMany      = fmt.Errorf("more than %d entries: list a subdirectory, or less deep", MaxEntries)
	errRemoveRoot   = errors.New("refusing to remove /")
	errMode         = errors.New("mode is at most 0o7777")
	errNoOwner      = errors.New("give an owner, a group or both")
	errUnchangedID  = errors.New("id 4294967295 is no user or group (chown reads it as \"leave unchanged\")")
	errSpecialFile  = errors.New("devices, FIFOs and sockets cannot be copied across filesystems")
	errVirtual      = errors.New("a virtual filesystem (such as /proc or /sys): its files cannot be replaced; write to them with a command")
	errWriterClosed = errors.New("the write was already committed or aborted")
	errReplaced     = errors.New("replaced while it was being read by something that is not a regular file (a FIFO, a device, a socket)")
	errTwice        = errors.New("two files of the upload go to this path")
	errBatch        = fmt.Errorf("more than %d files in one upload", MaxBatch)
	errReadRange    = errors.New("offset and length must not be negative; buffer at most 256 MiB")
	errNoClient     = errors.New("no client attached within the grace period")
	errDetached     = errors.New("the client detached")
	errWindow       = fmt.Errorf("more than %d bytes received and not yet written: the upload is aborted", UploadWindow)
)

func errOffset(size int64) error {
	return fmt.Errorf("offset beyond the end of the file (%d bytes)", size)
}

func errShrank(want, got int64) error {
	return fmt.Errorf("the file shrank while read: %d of %d bytes sent", got, want)
}
