package console

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"

	"github.com/cove-dev/cove/internal/builder/template"
	"github.com/cove-dev/cove/internal/control/orchestrator"
	"github.com/cove-dev/cove/internal/store"
)

// Templates lists the server's templates; *template.Store implements it.
type Templates interface {
	List() ([]*template.Template, error)
	Get(name string) (*template.Template, error)
}

// buildLogTail is how much of a template's build log its page shows: the end, where a
// failure is.
const buildLogTail = 64 << 10

// templateRow is a template with the viewer's live sandboxes of it and its newest builds
// the viewer may see.
type templateRow struct {
	*template.Template
	Live   int
	Builds []buildRow
	Pool   *orchestrator.PoolStatus // nil: no warm pool
}

// templatesPage lists the ready templates the viewer's team may start (its own, public ones
// and those made on the host; the admin: all) with how many
// live sandboxes of each the viewer's team has and their newest builds, then the newest
// builds of the viewer's team (the admin's: all) of any template, failed ones included.
// The admin also sees each template's steps and its last host build's log.
func (c *Console) templatesPage(w http.ResponseWriter, r *http.Request) {
	s := sessionOf(r)
	if c.cfg.Templates == nil {
		c.fail(w, r, http.StatusNotFound, errors.New("templates: this server has no template store"))
		return
	}
	ts, err := c.cfg.Templates.List()
	if err != nil {
		c.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	builds, err := c.visibleBuilds(s)
	if err != nil {
		c.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	pools := map[string]orchestrator.PoolStatus{}
	if c.cfg.Pools != nil {
		for _, p := range c.cfg.Pools(s.TeamID) {
			pools[p.Template] = p
		}
	}
	rows := make([]templateRow, 0, len(ts))
	for _, t := range ts {
		if !s.admin() && !t.VisibleTo(s.TeamID) {
			continue
		}
		page, err := c.cfg.Records.ListSandboxes(r.Context(), store.SandboxFilter{TeamID: s.TeamID, Template: t.Name, Limit: 1})
		if err != nil {
			c.fail(w, r, http.StatusInternalServerError, fmt.Errorf("sandboxes of template %s: %w", t.Name, err))
			return
		}
		row := templateRow{Template: t, Live: page.Total}
		if p, ok := pools[t.Name]; ok && (p.Target > 0 || p.Ready > 0) {
			row.Pool = &p
		}
		for _, b := range builds {
			if b.Template == t.Name && len(row.Builds) < templateBuilds {
				row.Builds = append(row.Builds, b)
			}
		}
		rows = append(rows, row)
	}
	c.render(w, r, "templates.html", map[string]any{"Title": "Templates", "Templates": rows, "Admin": s.admin(),
		"Builds": builds[:min(len(builds), pageBuilds)]})
}

// buildLog shows the end of a template's last build log, to the admin: build steps and
// their output can hold what one team would not show another.
func (c *Console) buildLog(w http.ResponseWriter, r *http.Request) {
	if !sessionOf(r).admin() {
		c.fail(w, r, http.StatusForbidden, errors.New("build logs: sign in with the admin token to read template build logs"))
		return
	}
	if c.cfg.Templates == nil {
		c.fail(w, r, http.StatusNotFound, errors.New("templates: this server has no template store"))
		return
	}
	name := r.PathValue("name")
	t, err := c.cfg.Templates.Get(name)
	if errors.Is(err, template.ErrNotFound) {
		c.fail(w, r, http.StatusNotFound, err)
		return
	}
	if err != nil {
		c.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	if t.BuildID != "" {
		// Built through the API: its log is the build's, in the store, on the build's page.
		http.Redirect(w, r, Prefix+"builds/"+url.PathEscape(t.BuildID), http.StatusSeeOther)
		return
	}
	text, cut, err := tailFile(t.BuildLog, buildLogTail)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		c.fail(w, r, http.StatusInternalServerError, fmt.Errorf("build log of %s: %w", name, err))
		return
	}
	c.render(w, r, "buildlog.html", map[string]any{"Title": "Build log of " + name, "T": t, "Log": text, "Cut": cut, "Missing": err != nil})
}

// tailFile returns the last n bytes of the file name, and whether it cut the start.
func tailFile(name string, n int64) (string, bool, error) {
	f, err := os.Open(name)
	if err != nil {
		return "", false, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", false, err
	}
	off := max(0, st.Size()-n)
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return "", false, err
	}
	b, err := io.ReadAll(io.LimitReader(f, n))
	return string(b), off > 0, err
}
