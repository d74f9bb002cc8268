package server

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestLockDataDir(t *testing.T) {
	tests := []struct {
		name     string
		releaseA bool
		wantErr  error
	}{
		{name: "a second lock on a held data dir is refused naming the holder", releaseA: false, wantErr: ErrDataDirInUse},
		{name: "a data dir is lockable again once its lock is released", releaseA: true, wantErr: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			a, err := LockDataDir(dir)
			if err != nil {
				t.Fatalf("first lock: %v", err)
			}
			t.Cleanup(func() { a.Release() })
			b, _ := os.ReadFile(filepath.Join(dir, LockFile))
			if got := strings.TrimSpace(string(b)); got != strconv.Itoa(os.Getpid()) {
				t.Errorf("lock file holds %q, want this pid %d", got, os.Getpid())
			}
			if tt.releaseA {
				if err := a.Release(); err != nil {
					t.Fatal(err)
				}
			}
			second, err := LockDataDir(dir)
			if second != nil {
				t.Cleanup(func() { second.Release() })
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("second lock: err = %v, want %v", err, tt.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())) {
				t.Errorf("error %q does not name the holding pid", err)
			}
		})
	}
}
