package files

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// Metadata is user-defined key and value pairs kept with a file, as
// extended attributes in the namespace E2B's envd uses
// ("user.e2b.KEY"), so a file carries the same metadata through either
// agent and through tools such as setfattr. It follows the file through
// renames; a Writer's new content comes with the metadata it was given
// and nothing of the replaced file's.
const metadataPrefix = "user.e2b."

// Bounds of metadata, within what the kernel takes for an extended
// attribute (a name of 255 bytes, a value of 64 KiB).
const (
	maxMetadataKey   = 255 - len(metadataPrefix)
	maxMetadataValue = 64 << 10
	// maxMetadataList bounds the attribute names read from one file.
	maxMetadataList = 64 << 10
)

var (
	errXattrUnsupported = errors.New("this filesystem does not keep extended attributes (user.*), where metadata is stored")
	errXattrNoRoom      = errors.New("no room for the metadata: a filesystem keeps only so much in extended attributes (ext4 about 4 KiB a file), or it is full")
)

// xattrErr classifies a failure to store metadata.
func xattrErr(op, path string, err error) error {
	switch {
	case errors.Is(err, unix.EOPNOTSUPP):
		return newErr(op, path, ErrUnsupported, errXattrUnsupported)
	case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.E2BIG), errors.Is(err, unix.ERANGE):
		return newErr(op, path, ErrInvalid, errXattrNoRoom)
	}
	return newErr(op, path, nil, err)
}

// checkMetadata refuses keys and values extended attributes cannot hold.
func checkMetadata(path string, md map[string]string) error {
	for k, v := range md {
		switch {
		case k == "":
			return newErr("write", path, ErrInvalid, errors.New("empty metadata key"))
		case len(k) > maxMetadataKey:
			return newErr("write", path, ErrInvalid, fmt.Errorf("metadata key longer than %d bytes", maxMetadataKey))
		case strings.IndexByte(k, 0) >= 0:
			return newErr("write", path, ErrInvalid, errors.New("metadata key contains a NUL byte"))
		case len(v) > maxMetadataValue:
			return newErr("write", path, ErrInvalid, fmt.Errorf("metadata value of %q longer than %d bytes", k, maxMetadataValue))
		}
	}
	return nil
}

// setMetadata stores md on the open file fd.
func setMetadata(fd int, path string, md map[string]string) error {
	for k, v := range md {
		if err := unix.Fsetxattr(fd, metadataPrefix+k, []byte(v), 0); err != nil {
			return xattrErr("write", path, err)
		}
	}
	return nil
}

// readMetadata returns the metadata of the entry at path (not following
// a symlink), nil when it has none or it cannot be read.
func readMetadata(path string) map[string]string {
	return metadataOf(func(b []byte) (int, error) { return unix.Llistxattr(path, b) },
		func(name string, b []byte) (int, error) { return unix.Lgetxattr(path, name, b) })
}

// readMetadataFD is readMetadata of an open file or directory.
func readMetadataFD(fd int) map[string]string {
	return metadataOf(func(b []byte) (int, error) { return unix.Flistxattr(fd, b) },
		func(name string, b []byte) (int, error) { return unix.Fgetxattr(fd, name, b) })
}

// metadataOf reads the metadata with list and get, the listxattr and
// getxattr of one entry.
func metadataOf(list func([]byte) (int, error), get func(string, []byte) (int, error)) map[string]string {
	var buf [1024]byte
	names := buf[:]
	n, err := list(names)
	if errors.Is(err, unix.ERANGE) {
		if n, err = list(nil); err == nil && n <= maxMetadataList {
			names = make([]byte, n)
			n, err = list(names)
		}
	}
	if err != nil || n <= 0 {
		return nil
	}
	var md map[string]string
	for _, name := range bytes.Split(names[:n], []byte{0}) {
		key, ok := strings.CutPrefix(string(name), metadataPrefix)
		if !ok || key == "" {
			continue
		}
		value, err := getxattr(get, string(name))
		if err != nil {
			continue // removed meanwhile
		}
		if md == nil {
			md = map[string]string{}
		}
		md[key] = value
	}
	return md
}

func getxattr(get func(string, []byte) (int, error), name string) (string, error) {
	var buf [256]byte
	n, err := get(name, buf[:])
	if err == nil {
		return string(buf[:n]), nil
	}
	if !errors.Is(err, unix.ERANGE) {
		return "", err
	}
	big := make([]byte, maxMetadataValue)
	n, err = get(name, big)
	if err != nil {
		return "", err
	}
	return string(big[:n]), nil
}
