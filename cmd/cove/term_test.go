package main

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func TestPumpInput(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	cases := []struct {
		name       string
		in         io.Reader
		sendErr    error
		done       bool
		wantSent   string
		wantClosed bool
		wantErr    error
	}{
		{name: "everything is sent, then the input is closed at EOF", in: strings.NewReader("one\ntwo\n"), wantSent: "one\ntwo\n", wantClosed: true},
		{name: "an empty input is just closed", in: strings.NewReader(""), wantClosed: true},
		{name: "input read byte by byte arrives whole", in: iotest.OneByteReader(strings.NewReader("abc")), wantSent: "abc", wantClosed: true},
		{name: "a failed send stops the pump with its error", in: strings.NewReader("x"), sendErr: boom, wantErr: boom},
		{name: "a read error stops the pump without closing", in: iotest.ErrReader(boom), wantErr: boom},
		{name: "nothing is sent once the command ended", in: strings.NewReader("late"), done: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var sent strings.Builder
			closed := false
			done := make(chan struct{})
			if tc.done {
				close(done)
			}
			err := pumpInput(tc.in,
				func(b []byte) error { sent.Write(b); return tc.sendErr },
				func() error { closed = true; return nil }, done)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("err %v, want %v", err, tc.wantErr)
			}
			if tc.sendErr == nil && sent.String() != tc.wantSent {
				t.Errorf("sent %q, want %q", sent.String(), tc.wantSent)
			}
			if closed != tc.wantClosed {
				t.Errorf("closed %v, want %v", closed, tc.wantClosed)
			}
		})
	}
}
