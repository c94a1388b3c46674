package main

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/rayito/rayito-agent/client"
)

// runCp is `rayito-agent cp`: copy files and directories into the sandbox
// (cp LOCAL :REMOTE) or out of it (cp :REMOTE LOCAL); directories go
// whole, "-" is stdin or stdout. A transfer of more than a few MB shows a
// progress bar when stderr is a terminal.
func runCp(args []string, stdin io.Reader, stdout, stderr io.Writer, terminal bool) int {
	fc := newFileCommand("cp", stdout, stderr)
	if code, ok := fc.parse(args, 2); !ok {
		return code
	}
	if fc.fs.NArg() != 2 {
		fc.fs.Usage()
		return 2
	}
	src, dst := fc.fs.Arg(0), fc.fs.Arg(1)
	remoteSrc, remoteDst := strings.HasPrefix(src, ":"), strings.HasPrefix(dst, ":")
	if remoteSrc == remoteDst {
		fmt.Fprintln(stderr, "rayito-agent cp: exactly one of the two paths is in the sandbox: prefix it with ':'")
		return 2
	}
	c, fsys, err := fc.files()
	if err != nil {
		return fc.fail(err)
	}
	defer c.Close()
	cp := copier{fsys: fsys, ctx: context.Background(), stdin: stdin, stdout: stdout, stderr: stderr, terminal: terminal}
	if remoteDst {
		err = cp.upload(src, dst[1:])
	} else {
		err = cp.download(src[1:], dst)
	}
	if err != nil {
		return fc.fail(err)
	}
	return 0
}

type copier struct {
	fsys     *client.Files
	ctx      context.Context
	stdin    io.Reader
	stdout   io.Writer
	stderr   io.Writer
	terminal bool
}

// remoteTarget is where src goes when copied to dst in the sandbox: into
// dst when it is a directory (or ends with /), else dst itself.
func (cp *copier) remoteTarget(src, dst string) string {
	if strings.HasSuffix(dst, "/") {
		return path.Join(dst, filepath.Base(src))
	}
	if info, err := cp.fsys.Stat(cp.ctx, dst); err == nil && info.IsDir() {
		return path.Join(dst, filepath.Base(src))
	}
	return dst
}

func (cp *copier) upload(src, dst string) error {
	if src == "-" {
		return cp.uploadFile(cp.stdin, -1, 0, dst, "stdin")
	}
	st, err := os.Stat(src)
	if err != nil {
		return err
	}
	target := cp.remoteTarget(src, dst)
	if !st.IsDir() {
		return cp.uploadPath(src, st, target)
	}
	var total int64
	filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				total += info.Size()
			}
		}
		return nil
	})
	bar := newProgress(cp.stderr, cp.terminal, filepath.Base(src), total)
	defer bar.finish()
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		remote := path.Join(target, filepath.ToSlash(rel))
		switch {
		case d.IsDir():
			return cp.fsys.MkdirAll(cp.ctx, remote)
		case d.Type().IsRegular():
			info, err := d.Info()
			if err != nil {
				return err
			}
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			return cp.send(io.TeeReader(f, bar), remote, info.Mode())
		default:
			fmt.Fprintf(cp.stderr, "rayito-agent cp: skipping %s: not a regular file or directory\n", p)
			return nil
		}
	})
}

// uploadPath uploads one local file with a progress bar of its own.
func (cp *copier) uploadPath(src string, st fs.FileInfo, target string) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	return cp.uploadFile(f, st.Size(), st.Mode(), target, filepath.Base(src))
}

func (cp *copier) uploadFile(r io.Reader, size int64, mode fs.FileMode, target, label string) error {
	bar := newProgress(cp.stderr, cp.terminal, label, size)
	defer bar.finish()
	return cp.send(io.TeeReader(r, bar), target, mode)
}

// send uploads r to target, committing it whole or not at all.
func (cp *copier) send(r io.Reader, target string, mode fs.FileMode) error {
	w, err := cp.fsys.Create(cp.ctx, target, client.WriteOptions{Mode: mode.Perm(), Verify: true})
	if err != nil {
		return err
	}
	if _, err := w.ReadFrom(r); err != nil {
		w.Abort(cp.ctx)
		return err
	}
	return w.Close()
}

func (cp *copier) download(src, dst string) error {
	info, err := cp.fsys.Stat(cp.ctx, src)
	if err != nil {
		return err
	}
	// A file is opened at once; a symlink is followed, as cp does: it is
	// a directory if it cannot be opened as a file.
	var r *client.FileReader
	if info.Type != client.FileTypeDir {
		r, err = cp.fsys.Open(cp.ctx, src)
		switch {
		case err == nil:
			defer r.Close()
		case info.Type == client.FileTypeSymlink && client.HasCode(err, client.CodeBadRequest):
			info.Type = client.FileTypeDir
		default:
			return err
		}
	}
	target := dst
	if st, err := os.Stat(dst); err == nil && st.IsDir() && dst != "-" {
		target = filepath.Join(dst, path.Base(info.Path))
	}
	if r == nil {
		if dst == "-" {
			return errors.New("a directory cannot go to stdout")
		}
		return cp.downloadDir(info.Path, target)
	}
	bar := newProgress(cp.stderr, cp.terminal, path.Base(info.Path), r.Size())
	defer bar.finish()
	if dst == "-" {
		_, err = io.Copy(io.MultiWriter(cp.stdout, bar), r)
		return err
	}
	return writeLocal(target, info.Mode, func(w io.Writer) error {
		_, err := io.Copy(io.MultiWriter(w, bar), r)
		return err
	})
}

// writeLocal writes a local file as the agent writes remote ones: into a
// temporary file renamed over target once complete.
func writeLocal(target string, mode uint32, fill func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(target), "."+filepath.Base(target)+".part-*")
	if err != nil {
		return err
	}
	err = fill(f)
	if err == nil {
		err = f.Chmod(fs.FileMode(mode & 0o777))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), target)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// downloadDir fetches a directory as a tar archive and unpacks it into
// target. Entries that would land outside target are refused, and
// symlinks are made last, so no entry is written through one.
func (cp *copier) downloadDir(src, target string) error {
	rc, err := cp.fsys.DownloadTar(cp.ctx, src)
	if err != nil {
		return err
	}
	defer rc.Close()
	bar := newProgress(cp.stderr, cp.terminal, path.Base(src), -1)
	defer bar.finish()
	if err := os.MkdirAll(target, 0o755); err != nil {
		return err
	}
	type link struct{ name, target string }
	var links []link
	tr := tar.NewReader(io.TeeReader(rc, bar))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("reading the archive of %s: %w", src, err)
		}
		name := filepath.FromSlash(path.Clean(h.Name))
		if !filepath.IsLocal(name) {
			return fmt.Errorf("archive entry %q leaves the target directory", h.Name)
		}
		p := filepath.Join(target, name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, fs.FileMode(h.Mode&0o777)|0o700); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := writeLocal(p, uint32(h.Mode), func(w io.Writer) error { _, err := io.Copy(w, tr); return err }); err != nil {
				return err
			}
		case tar.TypeSymlink:
			links = append(links, link{p, h.Linkname})
		default:
			fmt.Fprintf(cp.stderr, "rayito-agent cp: skipping %s: not a file, directory or symlink\n", h.Name)
		}
	}
	for _, l := range links {
		os.Remove(l.name)
		if err := os.Symlink(l.target, l.name); err != nil {
			return err
		}
	}
	return nil
}
