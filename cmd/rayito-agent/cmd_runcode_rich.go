package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	_ "image/gif" // DecodeConfig of the formats Jupyter sends
	_ "image/jpeg"
	_ "image/png"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Rich outputs (a plot, an HTML table) cannot be shown in a terminal:
// run-code says what was there, "[image/png 640x480]", and with --save
// DIR writes each to a file and names it.

// richExt is the file extension of each representation --save writes;
// others are saved with their MIME type's subtype.
var richExt = map[string]string{
	"image/png": ".png", "image/jpeg": ".jpg", "image/gif": ".gif", "image/svg+xml": ".svg",
	"text/html": ".html", "text/markdown": ".md", "text/latex": ".tex",
	"application/json": ".json", "application/javascript": ".js",
}

// richNotes describes, and saves when asked, every representation of an
// output but its text: one "[...]" line each, in a stable order.
func (o *cellOutput) richNotes(data map[string]any) []string {
	var mimes []string
	for m := range data {
		if m != "text/plain" {
			mimes = append(mimes, m)
		}
	}
	slices.Sort(mimes)
	var notes []string
	for _, m := range mimes {
		raw := richBytes(m, data[m])
		note := m + " " + richSize(m, raw)
		if o.save != "" {
			if path, err := o.saveRich(m, raw); err != nil {
				note += ", not saved: " + err.Error()
			} else {
				note += " saved to " + path
			}
		}
		notes = append(notes, "["+note+"]")
	}
	return notes
}

// richBytes is a representation as a file holds it: images decoded from
// base64 (SVG is text), JSON encoded, text as it is.
func richBytes(mime string, v any) []byte {
	s, isString := v.(string)
	switch {
	case isString && strings.HasPrefix(mime, "image/") && mime != "image/svg+xml":
		if b, err := base64.StdEncoding.DecodeString(strings.ReplaceAll(s, "\n", "")); err == nil {
			return b
		}
		return []byte(s)
	case isString:
		return []byte(s)
	}
	b, _ := json.Marshal(v)
	return b
}

// richSize is "640x480" for an image whose header reads, else its size.
func richSize(mime string, raw []byte) string {
	if strings.HasPrefix(mime, "image/") {
		if cfg, _, err := image.DecodeConfig(bytes.NewReader(raw)); err == nil {
			return fmt.Sprintf("%dx%d", cfg.Width, cfg.Height)
		}
	}
	return size(int64(len(raw)))
}

// saveRich writes raw as the next output file of the directory.
func (o *cellOutput) saveRich(mime string, raw []byte) (string, error) {
	ext, ok := richExt[mime]
	if !ok {
		_, sub, _ := strings.Cut(mime, "/")
		ext = "." + strings.Map(func(r rune) rune {
			if r == '/' || r == os.PathSeparator || r == '+' {
				return '-'
			}
			return r
		}, sub)
	}
	if err := os.MkdirAll(o.save, 0o755); err != nil {
		return "", err
	}
	o.saved++
	path := filepath.Join(o.save, fmt.Sprintf("output-%d%s", o.saved, ext))
	return path, os.WriteFile(path, raw, 0o644)
}
