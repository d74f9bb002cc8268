package build

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/builder/template"
)

func TestABuildPastItsTimeLimitFailsSayingSo(t *testing.T) {
	b := &Builds{sandbox: Sandbox{BuildTimeout: 10 * time.Millisecond}}
	ctx, stop := b.timeLimited(context.Background())
	defer stop()
	<-ctx.Done()
	stepErr := &StepError{Index: 2, Step: template.Step{Kind: template.StepRun, Args: []string{"sleep 600"}}, Err: context.Cause(ctx)}
	for _, tt := range []struct {
		name string
		err  error
		step int
	}{
		{"a step the cancel killed keeps its index and names the build's limit", &StepError{Index: 2, Step: template.Step{Kind: template.StepRun}, Err: errors.New("signal: killed")}, 2},
		{"an error outside a step names the build's limit", context.DeadlineExceeded, -1},
		{"an error that already names it is kept", stepErr, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := timeLimitReason(ctx, tt.err)
			var tl *BuildTimeLimitError
			if !errors.As(err, &tl) || tl.Limit != 10*time.Millisecond || !strings.Contains(err.Error(), "build time limit of 10ms (--build-timeout)") {
				t.Fatalf("%v; want the build time limit", err)
			}
			var se *StepError
			if got := -1; errors.As(err, &se) {
				got = se.Index
				if got != tt.step {
					t.Errorf("step %d, want %d", got, tt.step)
				}
			} else if tt.step != -1 {
				t.Errorf("%v lost its step", err)
			}
		})
	}
	t.Run("a build that ended for another reason, or without a limit, keeps its error", func(t *testing.T) {
		other := errors.New("exit status 1")
		if err := timeLimitReason(context.Background(), other); err != other {
			t.Errorf("%v", err)
		}
		unbounded, stop := (&Builds{}).timeLimited(context.Background())
		defer stop()
		if _, ok := unbounded.Deadline(); ok {
			t.Error("a build without a time limit got a deadline")
		}
	})
}
