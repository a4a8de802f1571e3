package procstat

import (
	"bytes"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// Status reads /proc/ID/status of process or thread id (proc(5): one
// "Key:\tvalue" a line), with an open, reads and a close: os.ReadFile
// adds an fstat and four fcntl calls (its attempt to poll the file),
// and the core reads a new client's status on its first store.
func Status(id int) ([]byte, error) {
	path := "/proc/" + strconv.Itoa(id) + "/status"
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	b := make([]byte, 0, 2048) // a status file is about 1.5 KB
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := unix.Read(fd, b[len(b):cap(b)])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			return b, nil
		}
		b = b[:len(b)+n]
	}
}

// StatusLine is what the line "key:" of a status says, its blanks
// trimmed ("" when there is none).
func StatusLine(status []byte, key string) string {
	var line []byte
	if bytes.HasPrefix(status, []byte(key+":")) {
		line = status[len(key)+1:]
	} else if i := bytes.Index(status, []byte("\n"+key+":")); i >= 0 {
		line = status[i+len(key)+2:]
	} else {
		return ""
	}
	if j := bytes.IndexByte(line, '\n'); j >= 0 {
		line = line[:j]
	}
	return string(bytes.TrimSpace(line))
}

// StatusState is a status's state letter (R, S, D, Z, X, ...); 0 where
// it has none.
func StatusState(status []byte) byte {
	if s := StatusLine(status, "State"); s != "" {
		return s[0]
	}
	return 0
}

// KillPending says whether a status has SIGKILL among the signals
// pending for its thread (SigPnd) or for its whole process (ShdPnd).
// The kernel sets it for every fatal signal, and a task asleep in the
// kernel where it cannot take the signal (waiting for a FUSE answer, a
// directory's lock) keeps it pending, its state not yet Z.
func KillPending(status []byte) bool {
	const sigkill = 1 << (unix.SIGKILL - 1)
	for _, key := range []string{"SigPnd", "ShdPnd"} {
		if set, err := strconv.ParseUint(StatusLine(status, key), 16, 64); err == nil && set&sigkill != 0 {
			return true
		}
	}
	return false
}
