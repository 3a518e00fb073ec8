package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
)

// bodySpool is a request body read whole before the request goes upstream,
// as nginx does with proxy-request-buffering on (ingress-nginx's default):
// the upstream sees nothing of a request until its body has arrived, the
// body goes with a Content-Length even when the client chunked it, and it
// may be sent again to the next peer. Its first part is held in memory
// (the request's pooled buffer), the rest in an unlinked temporary file,
// as nginx keeps a body larger than client-body-buffer-size in its
// client_body_temp_path.
type bodySpool struct {
	mem  []byte
	file *os.File
	// size is the body's length: len(mem) plus what the file holds.
	size int64
	// off is where Read is.
	off int64
}

// errSpoolFile is a body that could not be written to its temporary file
// (a full or read-only disk): nginx answers 500.
var errSpoolFile = errors.New("client body temporary file")

// fill reads r to its end: up to memMax bytes into mem (reusing its
// storage), the rest into a new temporary file in dir. A read error is
// returned as it came (the caller tells the client's fault from a limit);
// a temporary file that cannot be made or written wraps errSpoolFile.
func (s *bodySpool) fill(r io.Reader, mem []byte, memMax int, dir *spoolDir) error {
	s.mem, s.size = mem[:0], 0
	for len(s.mem) < memMax {
		if len(s.mem) == cap(s.mem) {
			s.mem = slices.Grow(s.mem, min(max(cap(s.mem), 8<<10), memMax-len(s.mem)))
		}
		n, err := r.Read(s.mem[len(s.mem):min(cap(s.mem), memMax)])
		s.mem = s.mem[:len(s.mem)+n]
		s.size = int64(len(s.mem))
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
	// Memory is full: one more byte says whether a file is needed.
	var probe [1]byte
	n, err := io.ReadFull(r, probe[:])
	if n == 0 {
		if errors.Is(err, io.EOF) {
			return nil
		}
		return err
	}
	f, err := dir.create()
	if err != nil {
		return err
	}
	s.file = f
	if _, err := f.Write(probe[:]); err != nil {
		return fmt.Errorf("%w: %w", errSpoolFile, err)
	}
	s.size++
	m, err := io.Copy(onlyWriter{f}, r)
	s.size += m
	var werr *fileWriteError
	if errors.As(err, &werr) {
		return fmt.Errorf("%w: %w", errSpoolFile, werr.err)
	}
	return err
}

// writeFileTo writes the part of the body in the file to w, from its
// start: each attempt on a peer sends it again, after the memory part.
func (s *bodySpool) writeFileTo(w *bufio.Writer) error {
	if s.file == nil {
		return nil
	}
	if _, err := s.file.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("%w: %w", errSpoolFile, err)
	}
	want := s.size - int64(len(s.mem))
	n, err := io.Copy(w, onlyReader{s.file})
	if err == nil && n != want {
		err = fmt.Errorf("%w: read %d of %d bytes back", errSpoolFile, n, want)
	}
	return err
}

// rewind makes Read start again at the body's first byte.
func (s *bodySpool) rewind() {
	s.off = 0
}

// Read reads the body, memory part then file, from where the last rewind
// left it: the body stream of a request fasthttp writes. bodySpool has no
// Close, so fasthttp leaves the file open after writing it.
func (s *bodySpool) Read(b []byte) (int, error) {
	if s.off < int64(len(s.mem)) {
		n := copy(b, s.mem[s.off:])
		s.off += int64(n)
		return n, nil
	}
	if s.file == nil || s.off >= s.size {
		return 0, io.EOF
	}
	n, err := s.file.ReadAt(b[:min(int64(len(b)), s.size-s.off)], s.off-int64(len(s.mem)))
	s.off += int64(n)
	if errors.Is(err, io.EOF) && s.off < s.size {
		err = io.ErrUnexpectedEOF
	} else if errors.Is(err, io.EOF) {
		err = nil
	}
	return n, err
}

// release closes the temporary file (already unlinked, so this frees its
// blocks) and hands back the memory part for reuse.
func (s *bodySpool) release() []byte {
	if s.file != nil {
		_ = s.file.Close()
	}
	mem := s.mem
	*s = bodySpool{}
	return mem[:0]
}

// spoolDir is where bodies go that do not fit in memory: a directory made
// 0700 on first use; each file in it is unlinked as soon as it is open.
type spoolDir struct {
	path string
	once sync.Once
	err  error
}

func (d *spoolDir) create() (*os.File, error) {
	d.once.Do(func() {
		if err := os.MkdirAll(d.path, 0o700); err != nil {
			d.err = fmt.Errorf("%w: %w", errSpoolFile, err)
		}
	})
	if d.err != nil {
		return nil, d.err
	}
	f, err := os.CreateTemp(d.path, "body-")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errSpoolFile, err)
	}
	if err := os.Remove(f.Name()); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("%w: %w", errSpoolFile, err)
	}
	return f, nil
}

// defaultSpoolDir is Config.BodyTempDir's zero value.
func defaultSpoolDir() string {
	return filepath.Join(os.TempDir(), "switchyard-client-body")
}

// onlyWriter hides the file's ReadFrom, so io.Copy reads the client's
// body through its own buffer and a failed write is told from a failed
// read.
type onlyWriter struct{ f *os.File }

type fileWriteError struct{ err error }

func (e *fileWriteError) Error() string { return e.err.Error() }

func (w onlyWriter) Write(b []byte) (int, error) {
	n, err := w.f.Write(b)
	if err != nil {
		return n, &fileWriteError{err}
	}
	return n, nil
}

// onlyReader hides the file's WriteTo from bufio.Writer.ReadFrom.
type onlyReader struct{ f *os.File }

func (r onlyReader) Read(b []byte) (int, error) { return r.f.Read(b) }
