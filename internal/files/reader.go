package files

import (
	"io"
	"mime"
	"net/http"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// File is a regular file opened for reading as a user. Reads see the file
// as it is at each moment: a file replaced by a rename (as Writer does)
// keeps serving the content it had when it was opened; a file changed in
// place may yield a mix of old and new bytes; a file that shrinks ends
// early (ReadStream and the HTTP route report it as an error).
type File struct {
	*os.File
	Info Info // at open; a symlink at the path is followed
	// Sized is false for the files of virtual filesystems (/proc, /sys)
	// that report size 0 but have content: read those to their end.
	Sized bool
	held  *heldFile // gives the descriptor back to the budget at Close
}

// Close closes the file and gives its descriptor back to the budget of
// files transfers hold (held.go).
func (f *File) Close() error {
	err := f.File.Close()
	f.held.release()
	return err
}

// Open opens the regular file at path for reading as the user, for
// client (the address the request came from, surface.ClientOf: its
// descriptor counts against that client's share of the files transfers
// hold, held.go). A directory is ErrIsDir; a device, FIFO or socket is
// ErrNotRegular (and is not opened: opening some devices has effects).
func (m *Manager) Open(client, userName, path string) (*File, error) {
	u, p, err := m.resolve("read", userName, path)
	if err != nil {
		return nil, err
	}
	if err := m.holdSlot(client, p); err != nil {
		return nil, err
	}
	var f *File
	err = m.as(u, func() error {
		st, err := os.Stat(p)
		if err != nil {
			return newErr("read", p, nil, err)
		}
		if err := regular(p, st.IsDir(), st.Mode().IsRegular()); err != nil {
			return err
		}
		fd, err := m.openFor(u, "read", p, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOCTTY|unix.O_NONBLOCK)
		if err != nil {
			return asFileError("read", p, err)
		}
		// Whatever is at the path now is checked again on the descriptor:
		// it may have been replaced since the stat.
		var fst unix.Stat_t
		if err := unix.Fstat(fd, &fst); err != nil {
			unix.Close(fd)
			return newErr("read", p, nil, err)
		}
		typ := fst.Mode & unix.S_IFMT
		if err := regular(p, typ == unix.S_IFDIR, typ == unix.S_IFREG); err != nil {
			unix.Close(fd)
			return err
		}
		unix.SetNonblock(fd, false)
		osf := os.NewFile(uintptr(fd), p)
		fi, err := osf.Stat()
		if err != nil {
			osf.Close()
			return newErr("read", p, nil, err)
		}
		f = &File{File: osf, Info: m.infoOf(p, fi, InfoOptions{}), Sized: true, held: &heldFile{m: m, client: client}}
		if fi.Size() == 0 {
			var sfs unix.Statfs_t
			f.Sized = unix.Fstatfs(fd, &sfs) != nil || !virtualFS(sfs.Type)
		}
		return nil
	})
	if err != nil {
		m.releaseSlot(client)
		return nil, err
	}
	m.named(&f.Info)
	return f, nil
}

func regular(p string, dir, reg bool) error {
	switch {
	case dir:
		return newErr("read", p, ErrIsDir, nil)
	case !reg:
		return newErr("read", p, ErrNotRegular, nil)
	}
	return nil
}

// Serve answers an HTTP GET or HEAD with the file: its bytes with their
// length (Range and conditional requests as net/http serves them), typed
// by its name's extension, application/octet-stream when that says
// nothing. A virtual file has no size to promise: it is read to its end.
func (f *File) Serve(w http.ResponseWriter, r *http.Request) {
	ctype := mime.TypeByExtension(filepath.Ext(f.Info.Name))
	if ctype == "" {
		ctype = "application/octet-stream"
	}
	w.Header().Set("Content-Type", ctype)
	if f.Sized {
		// The bare *os.File, so that the copy can use sendfile(2).
		http.ServeContent(w, r, f.Info.Name, f.Info.ModTime, f.File)
		return
	}
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		io.Copy(w, f.File)
	}
}
