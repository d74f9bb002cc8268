package cove

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Team is the team of the client's API key (E2B's Team).
type Team struct {
	ID        string `json:"teamID"`
	Name      string `json:"name"`
	APIKey    string `json:"apiKey"`
	IsDefault bool   `json:"isDefault"`
}

// TeamMetric is one point of a team's series (E2B's TeamMetric): the sandboxes alive at
// TimestampUnix, and the starts per second since the point before.
type TeamMetric struct {
	Timestamp           string  `json:"timestamp"` // RFC 3339; E2B deprecates it for TimestampUnix
	TimestampUnix       int64   `json:"timestampUnix"`
	ConcurrentSandboxes int     `json:"concurrentSandboxes"`
	SandboxStartRate    float64 `json:"sandboxStartRate"`
}

// MaxTeamMetric is a series' largest value and when it was reached (E2B's MaxTeamMetric).
type MaxTeamMetric struct {
	Timestamp     string  `json:"timestamp"` // RFC 3339; E2B deprecates it for TimestampUnix
	TimestampUnix int64   `json:"timestampUnix"`
	Value         float64 `json:"value"`
}

// The metrics TeamMetricMax takes.
const (
	MetricConcurrentSandboxes = "concurrent_sandboxes"
	MetricSandboxStartRate    = "sandbox_start_rate"
)

// Teams lists the teams of the client's API key: one, its own.
func (c *Client) Teams(ctx context.Context) ([]Team, error) {
	var out []Team
	_, err := c.do(ctx, "list teams", "", http.MethodGet, "/teams", nil, &out)
	return out, err
}

// TeamMetrics returns the team's series over [start, end) (the last hour when both are zero).
func (c *Client) TeamMetrics(ctx context.Context, teamID string, start, end time.Time) ([]TeamMetric, error) {
	var out []TeamMetric
	_, err := c.do(ctx, "team metrics", "", http.MethodGet, "/teams/"+url.PathEscape(teamID)+"/metrics"+rangeQuery(url.Values{}, start, end), nil, &out)
	return out, err
}

// TeamMetricMax returns the largest value of metric (MetricConcurrentSandboxes or
// MetricSandboxStartRate) over [start, end).
func (c *Client) TeamMetricMax(ctx context.Context, teamID, metric string, start, end time.Time) (MaxTeamMetric, error) {
	var out MaxTeamMetric
	_, err := c.do(ctx, "team metric max", "", http.MethodGet,
		"/teams/"+url.PathEscape(teamID)+"/metrics/max"+rangeQuery(url.Values{"metric": {metric}}, start, end), nil, &out)
	if err != nil {
		return out, fmt.Errorf("%s: %w", metric, err)
	}
	return out, nil
}

// rangeQuery adds start and end (unix seconds, when set) to q and encodes it.
func rangeQuery(q url.Values, start, end time.Time) string {
	if !start.IsZero() {
		q.Set("start", strconv.FormatInt(start.Unix(), 10))
	}
	if !end.IsZero() {
		q.Set("end", strconv.FormatInt(end.Unix(), 10))
	}
	if len(q) == 0 {
		return ""
	}
	return "?" + q.Encode()
}
