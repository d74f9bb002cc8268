package store

import (
	"context"
	"time"
)

// TemplateBuild is one template build asked for over the API, as the store keeps it: the
// columns a listing or retention selects on, and the whole record as the template package
// shapes it (Record, JSON), which the store keeps without reading.
type TemplateBuild struct {
	ID       string
	Template string
	TeamID   string
	// Status is the build's status (waiting, building, ready, error); Unfinished says which
	// ones retention must keep.
	Status     string
	CreatedAt  time.Time
	FinishedAt *time.Time
	Record     []byte
}

// Unfinished reports whether the build may still write its record and log: retention keeps it.
func (b *TemplateBuild) Unfinished() bool { return b.Status == "waiting" || b.Status == "building" }

// BuildLogLine is one line of a template build's log; Seq numbers a build's lines from 0 in
// the order they were written.
type BuildLogLine struct {
	Seq     int64
	Time    time.Time
	Level   string
	Step    string
	Message string
}

// TemplateBuilds keeps template builds' records and their logs: a build's log lines live
// here and nowhere else, and go with its record.
type TemplateBuilds interface {
	// PutTemplateBuild inserts the build b, or replaces the record with its id.
	PutTemplateBuild(ctx context.Context, b *TemplateBuild) error
	// GetTemplateBuild returns the build id; ErrNotFound when there is none.
	GetTemplateBuild(ctx context.Context, id string) (*TemplateBuild, error)
	// ListTemplateBuilds returns the builds of template ("" for every template), oldest first.
	ListTemplateBuilds(ctx context.Context, template string) ([]*TemplateBuild, error)
	// DeleteTemplateBuild deletes the build id and its log; ErrNotFound when there is none.
	DeleteTemplateBuild(ctx context.Context, id string) error
	// AppendBuildLog stores lines of build id's log, all or none; a Seq the build has
	// already is ErrConflict.
	AppendBuildLog(ctx context.Context, id string, lines []BuildLogLine) error
	// BuildLog returns up to limit lines of build id's log from its line offset on, by Seq
	// (limit <= 0: all of them).
	BuildLog(ctx context.Context, id string, offset, limit int) ([]BuildLogLine, error)
	// BuildLogLen counts build id's log lines.
	BuildLogLen(ctx context.Context, id string) (int, error)
}
