package main

import (
	"bytes"
	"testing"
)

// TestReadSized: a source read whole is one buffer of its size (cap at
// most the hint and a page), not io.ReadAll's doublings; a source that
// grew since its stat is still read whole.
func TestReadSized(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789"), 100_000)
	for _, hint := range []int64{int64(len(data)), 1000, 0} {
		got, err := readSized(bytes.NewReader(data), hint)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("hint %d: %d bytes, %v", hint, len(got), err)
		}
		if hint == int64(len(data)) && int64(cap(got)) > hint+4096 {
			t.Errorf("hint %d: a buffer of %d bytes", hint, cap(got))
		}
	}
}
