package files

import (
	"archive/tar"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// WriteTar writes the directory at path to w as a tar archive (PAX
// format), read as the user: entries are named relative to the directory
// ("a.txt", "sub/", "sub/b.txt"), with modes, times, owners and symlinks
// (never followed). Sockets are left out. An entry the user cannot read,
// or a file that shrinks while it is archived, ends the archive with an
// error before its end-of-archive marker: the caller must make the
// transfer fail (the HTTP route aborts the response), since a tar reader
// may take an archive cut between entries for a complete one.
func (m *Manager) WriteTar(userName, path string, w io.Writer) error {
	u, p, err := m.resolve("read", userName, path)
	if err != nil {
		return err
	}
	return m.as(u, func() error {
		st, err := os.Stat(p)
		if err != nil {
			return newErr("read", p, nil, err)
		}
		if !st.IsDir() {
			return newErr("read", p, ErrNotDir, nil)
		}
		tw := tar.NewWriter(w)
		err = filepath.WalkDir(p, func(q string, d fs.DirEntry, err error) error {
			if err != nil {
				return newErr("read", q, nil, err)
			}
			if q == p {
				return nil
			}
			return m.tarEntry(tw, p, q, d)
		})
		if err != nil {
			return err
		}
		return tw.Close()
	})
}

func (m *Manager) tarEntry(tw *tar.Writer, root, q string, d fs.DirEntry) error {
	fi, err := d.Info()
	if err != nil {
		return newErr("read", q, nil, err)
	}
	if fi.Mode()&fs.ModeSocket != 0 {
		return nil
	}
	var link string
	if fi.Mode()&fs.ModeSymlink != 0 {
		if link, err = os.Readlink(q); err != nil {
			return newErr("read", q, nil, err)
		}
	}
	hdr, err := tar.FileInfoHeader(fi, link)
	if err != nil {
		return newErr("read", q, nil, err)
	}
	rel, _ := filepath.Rel(root, q)
	hdr.Name = filepath.ToSlash(rel)
	if fi.IsDir() {
		hdr.Name += "/"
	}
	hdr.Format = tar.FormatPAX
	if sys := statT(fi); sys != nil {
		hdr.Uname, hdr.Gname = m.users.OwnerName(sys.Uid), m.users.GroupName(sys.Gid)
	}
	var f *os.File
	if fi.Mode().IsRegular() {
		// Opened before the header goes out, so an unreadable file
		// fails the archive before a header without content.
		if f, err = os.Open(q); err != nil {
			return newErr("read", q, nil, err)
		}
		defer f.Close()
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if f == nil {
		return nil
	}
	_, err = io.CopyN(tw, f, hdr.Size)
	if err == io.EOF {
		return newErr("read", q, ErrChanged, nil)
	}
	return err
}
